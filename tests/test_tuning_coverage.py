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


def test_the_line_names_records_tuned_on_another_cpu():
    """Records measured on another CPU model replay, but their times do not transfer: the line
    says so, and names the command that tunes them for this CPU (issue 38: ResNet-50 with records
    from an AMD znver4 took 2.65x onnxruntime's latency on an Intel Emerald Rapids)."""
    cov = Coverage(25, 0, 4e9, 0.0, 1, elsewhere=25, elsewhere_cpus=("znver4",), cpu="emeraldrapids")
    assert cov.line("r.onnx") == (
        "tuning: every kernel of r.onnx has a tuning record (25 kernel(s); its 1 pooling kernel(s) take tvm_pool's "
        "schedules); 25 of them were tuned on znver4, not on this CPU (emeraldrapids), and may run slower here; "
        f"tune them for it: tvm-pool tune r.onnx --minutes {cov.minutes(25)}")
    mixed = Coverage(10, 2, 1e9, 1e8, 0, elsewhere=3, elsewhere_cpus=("haswell", "znver4"), cpu="skylake")
    line = mixed.line("m.pt2")
    assert "2 of 10 kernel(s) of m.pt2 have no tuning record (10% of its FLOPs)" in line
    assert "3 of them were tuned on haswell, znver4, not on this CPU (skylake)" in line
    assert line.endswith(f"tune them: tvm-pool tune m.pt2 --minutes {mixed.minutes(5)}")
    assert mixed.minutes(5) >= mixed.minutes() >= 1


def test_records_of_this_cpu_and_of_another(tmp_path):
    """The demo's shipped records name the CPU they were measured on; the coverage of the demo
    counts them as tuned elsewhere exactly when that is not this CPU, and records of this CPU
    measured later (a copy of the shipped log, relabelled) take their place."""
    import shutil

    from tvm_pool.tuning import logs  # pylint: disable=import-outside-toplevel

    mod = tvm_pool.from_onnx(demo_model()[0])
    cov = coverage(mod, "host")
    here = logs.cpu_model("host")
    shipped_cpus = {logs.record_cpu(raw) for _, recs in logs.read_log(logs.shipped_log_dir("host")).records
                    for _, raw, _ in recs}
    assert cov.cpu == here and cov.untuned == 0
    # every kernel tuned elsewhere unless the shipped log holds records of this CPU (it holds the
    # Emerald Rapids' for ResNet-18 and -50, not for the demo)
    assert cov.elsewhere == cov.kernels or here in shipped_cpus
    assert set(cov.elsewhere_cpus) <= shipped_cpus - {here}
    mine = tmp_path / "mine"
    shutil.copytree(logs.shipped_log_dir("host"), mine)
    _relabel(mine, here)
    relabelled = coverage(mod, "host", [str(mine)], shipped=False)
    assert relabelled.untuned == 0 and relabelled.elsewhere == 0
    assert relabelled.line("d.onnx").startswith(
        f"tuning: every kernel of d.onnx has a tuning record ({relabelled.kernels} kernel(s)")
    assert "not on this CPU" not in relabelled.line("d.onnx") and "tvm-pool tune" not in relabelled.line("d.onnx")


def _relabel(log_dir, cpu, scale=1.0):
    """Rewrite the records of a (gzipped) log as measured on the CPU model ``cpu``, their times
    times ``scale``."""
    import gzip
    import json

    path = log_dir / "database_tuning_record.json.gz"
    lines = []
    for line in gzip.open(path, "rt").read().splitlines():
        index, (trace, secs, target, *rest) = json.loads(line)
        lines.append(json.dumps([index, [trace, [s * scale for s in secs], {**target, "mcpu": cpu}, *rest]]))
    with gzip.open(path, "wt") as f:
        f.write("\n".join(lines) + "\n")


def test_records_of_this_cpu_come_first(tmp_path):
    """A record measured on this CPU model is applied before a faster one measured on another:
    times taken on different CPUs do not compare."""
    import shutil

    from tvm_pool.tuning import logs  # pylint: disable=import-outside-toplevel

    here = logs.cpu_model("host")
    other = "icelake-server" if here != "icelake-server" else "skylake-avx512"
    slow_here, fast_elsewhere = tmp_path / "here", tmp_path / "elsewhere"
    for d in (slow_here, fast_elsewhere):
        shutil.copytree(logs.shipped_log_dir("host"), d)
    _relabel(slow_here, here, scale=10.0)
    _relabel(fast_elsewhere, other, scale=0.1)
    mod = tvm_pool.from_onnx(demo_model()[0])
    for order in ([fast_elsewhere, slow_here], [slow_here, fast_elsewhere]):
        # only the demo's workloads are parsed and replayed (the logs hold some 500 more)
        cov = coverage(mod, "host", [str(d) for d in order], shipped=False)
        assert cov.kernels and cov.untuned == 0 and cov.elsewhere == 0, cov
    assert coverage(mod, "host", [str(fast_elsewhere)], shipped=False).elsewhere_cpus == (other,)


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
    cov = coverage(tvm_pool.from_onnx(demo_model()[0]), "host", shipped=False)
    assert cov.kernels >= 3 and cov.untuned == cov.kernels, cov  # on x86 with the NHWC layout's transposes
    assert f"tvm-pool: tuning: {cov.kernels} of {cov.kernels} kernel(s) of {path} have no tuning record" in err, err


def test_cli_inspect_says_it(tmp_path, capsys):
    path = tmp_path / "untuned.onnx"
    onnx.save(_conv_pool_model(), path)
    assert cli.main(["inspect", str(path), "--target", "x86"]) == 0
    out = capsys.readouterr().out
    assert out.rstrip().splitlines()[-1].startswith("tuning: ") and "have no tuning record" in out
