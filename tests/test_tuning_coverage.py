"""``compile``, ``run`` and ``inspect`` say how much of a model has no tuning record: its
kernels without one run TVM's untuned default code (a whole CNN 10-50x slower than onnxruntime),
and the line names the command that tunes them (tvm_pool/tuning/lookup.py: Coverage)."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

import tvm_pool
from tvm_pool import cli
from tvm_pool.demo_model import demo_model
from tvm_pool.tuning.lookup import SECONDS_PER_TRIAL, TRIALS_PER_KERNEL, Coverage, coverage
from oracles import IR_VERSION


def _conv_pool_model():
    """Conv (a shape no shipped log holds) -> Relu -> MaxPool -> Conv."""
    rng = np.random.default_rng(0)
    w1 = numpy_helper.from_array(rng.standard_normal((12, 5, 3, 3)).astype("float32"), "w1")
    w2 = numpy_helper.from_array(rng.standard_normal((7, 12, 1, 1)).astype("float32"), "w2")
    nodes = [
        helper.make_node("Conv", ["x", "w1"], ["c1"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c1"], ["r1"]),
        helper.make_node("MaxPool", ["r1"], ["p1"], kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("Conv", ["p1", "w2"], ["y"]),
    ]
    graph = helper.make_graph(nodes, "untuned", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 5, 22, 22])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 7, 11, 11])], [w1, w2])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=IR_VERSION)


def test_an_untuned_model_says_what_to_tune():
    cov = coverage(tvm_pool.from_onnx(_conv_pool_model()), "x86")
    assert cov.pooling == 1 and cov.kernels >= 2 and cov.untuned == cov.kernels
    assert cov.untuned_share > 0.99  # the convolutions are the work
    line = cov.line("m.onnx")
    assert line.startswith(f"tuning: {cov.untuned} of {cov.kernels} kernel(s) of m.onnx have no tuning record (99% of its FLOPs)")
    assert line.endswith(f"tune them: tvm-pool tune m.onnx --minutes {cov.minutes()}") and "\n" not in line


def test_the_shipped_logs_cover_the_demo():
    mod = tvm_pool.from_onnx(demo_model()[0])
    assert coverage(mod, "host").untuned == 0
    without = coverage(mod, "host", shipped=False)
    assert without.untuned == without.kernels > 0


def test_the_line_in_numbers():
    cov = Coverage(kernels=24, untuned=6, flops=4e9, untuned_flops=1e9, pooling=2)
    minutes = round(6 * TRIALS_PER_KERNEL * SECONDS_PER_TRIAL / 60) or 1
    assert cov.minutes() == minutes
    assert cov.line("r.pt2") == (
        "tuning: 6 of 24 kernel(s) of r.pt2 have no tuning record (25% of its FLOPs) and run TVM's untuned default "
        f"code; its 2 pooling kernel(s) take tvm_pool's schedules; tune them: tvm-pool tune r.pt2 --minutes {minutes}")
    assert Coverage(3, 0, 1.0, 0.0, 0).line("m.onnx") == "tuning: every kernel of m.onnx has a tuning record (3 kernel(s))"


def test_cli_compile_says_it_with_quiet_too(tmp_path, capfd):
    path = tmp_path / "untuned.onnx"
    onnx.save(_conv_pool_model(), path)
    assert cli.main(["-q", "compile", str(path), "-o", str(tmp_path / "m.so")]) == 0
    err = capfd.readouterr().err.splitlines()
    tuning = [line for line in err if line.startswith("tvm-pool: tuning: ")]
    assert len(tuning) == 1 and f"tvm-pool tune {path} --minutes " in tuning[0], err


def test_cli_compile_with_no_shipped_logs(tmp_path, capfd):
    path = tmp_path / "demo.onnx"
    onnx.save(demo_model()[0], path)
    assert cli.main(["-q", "compile", str(path), "-o", str(tmp_path / "d.so"), "--no-tuning-logs"]) == 0
    err = capfd.readouterr().err
    assert f"tvm-pool: tuning: 3 of 3 kernel(s) of {path} have no tuning record" in err, err


def test_cli_inspect_says_it(tmp_path, capsys):
    path = tmp_path / "untuned.onnx"
    onnx.save(_conv_pool_model(), path)
    assert cli.main(["inspect", str(path), "--target", "x86"]) == 0
    out = capsys.readouterr().out
    assert out.rstrip().splitlines()[-1].startswith("tuning: ") and "have no tuning record" in out
