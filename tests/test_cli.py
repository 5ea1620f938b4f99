"""The tvm-pool command: compile / run / inspect / demo / bench, and its one-line errors."""

from __future__ import annotations

import os
import shutil
import sys
import types
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from tvm_pool import cli
from tvm_pool.demo_model import demo_model
from helpers import CROSS_CXX, EM_AARCH64, assert_matches, elf_machine, run_cli
from oracles import by_name, run_onnxruntime

pytest.importorskip("onnxruntime")


def save_model(path: Path, nodes, inputs, outputs, opset=19, initializers=()) -> Path:
    model = helper.make_model(
        helper.make_graph(nodes, "g", inputs, outputs, initializer=list(initializers)),
        opset_imports=[helper.make_opsetid("", opset)],
    )
    model.ir_version = 10
    onnx.save(model, path)
    return path


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    """The demo CNN saved as an ONNX file, its inputs as .npz, and onnxruntime's outputs."""
    root = tmp_path_factory.mktemp("cli")
    model, inputs = demo_model()
    onnx.save(model, root / "cnn.onnx")
    np.savez(root / "inputs.npz", **inputs)
    return types.SimpleNamespace(
        root=root, model=model, onnx=root / "cnn.onnx", inputs=root / "inputs.npz",
        want=by_name(model, run_onnxruntime(model, inputs)),
    )


@pytest.fixture(scope="module")
def compiled(demo):
    """`tvm-pool compile` of the demo CNN (a separate process)."""
    so = demo.root / "cnn.so"
    result = run_cli("compile", str(demo.onnx), "-o", str(so))
    assert result.returncode == 0, result.stderr
    assert so.exists()
    return so


# --------------------------------------------------------------------------------------------
# compile + run
# --------------------------------------------------------------------------------------------


def test_compile_reports_the_signature(demo, capsys):
    out = demo.root / "again.so"
    assert cli.main(["-q", "compile", str(demo.onnx), "-o", str(out)]) == 0
    assert capsys.readouterr().out.strip() == (
        f"wrote {out}: inputs x[1, 3, 32, 32] -> outputs logits[1, 10], pool1_indices[1, 8, 16, 16], "
        "pool2[1, 16, 9, 9]"
    )
    assert elf_machine(out) == {"x86_64": 62, "aarch64": EM_AARCH64}[os.uname().machine]


def test_compile_then_run_in_separate_processes_matches_onnxruntime(demo, compiled):
    out = demo.root / "out.npz"
    result = run_cli("run", str(compiled), "--inputs", str(demo.inputs), "-o", str(out), "--repeat", "5")
    assert result.returncode == 0, result.stderr
    assert "median" in result.stdout and "over 5 runs" in result.stdout
    for line in result.stderr.strip().splitlines():  # progress lines only
        assert line.startswith("tvm-pool: ["), line
    with np.load(out) as got:
        assert_matches({k: got[k] for k in got.files}, demo.want)


def test_compile_progress_is_one_line_per_step(demo):
    result = run_cli("compile", str(demo.onnx), "-o", str(demo.root / "p.so"))
    assert result.returncode == 0, result.stderr
    lines = [ln for ln in result.stderr.splitlines() if ln.strip()]
    steps = [ln for ln in lines if not ln.startswith("tvm-pool: tuning: ")]
    assert [s.split("]")[0] for s in steps] == ["tvm-pool: [1/4", "tvm-pool: [2/4", "tvm-pool: [3/4", "tvm-pool: [4/4"]
    # (the line goes on with the CPU model the records were measured on where it is not this one)
    assert lines[3].startswith(f"tvm-pool: tuning: every kernel of {demo.onnx} has a tuning record "
                               "(3 kernel(s); its 3 pooling kernel(s) take tvm_pool's schedules)")
    assert "wrote" in result.stdout


def test_symbolic_input_with_input_shapes(tmp_path, capsys):
    model_path = save_model(
        tmp_path / "sym.onnx",
        [helper.make_node("AveragePool", ["x"], ["y"], kernel_shape=[3, 3], strides=[2, 2], ceil_mode=1)],
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4, "H", 9])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
    )
    so = tmp_path / "sym.so"
    assert cli.main(["-q", "compile", str(model_path), "-o", str(so), "--input-shapes", "x=2,4,10,9"]) == 0
    x = np.random.default_rng(1).standard_normal((2, 4, 10, 9)).astype(np.float32)
    np.savez(tmp_path / "in.npz", x=x)
    assert cli.main(["-q", "run", str(so), "--inputs", str(tmp_path / "in.npz"), "-o", str(tmp_path / "o.npz")]) == 0
    with np.load(tmp_path / "o.npz") as got:
        model = onnx.load(model_path)
        assert_matches({"y": got["y"]}, by_name(model, run_onnxruntime(model, {"x": x})))
    assert "y: float32[2, 4, 5, 4]" in capsys.readouterr().out


def test_arm_target_without_cross_toolchain_says_how_to_install(demo, monkeypatch, capsys):
    real_which = shutil.which
    monkeypatch.setattr(shutil, "which", lambda name, *a, **k: None if name == CROSS_CXX else real_which(name))
    rc = cli.main(["compile", str(demo.onnx), "--target", "arm", "-o", str(demo.root / "x.so")])
    err = capsys.readouterr().err
    assert rc == 2
    assert err.count("\n") == 1 and "apt-get install g++-aarch64-linux-gnu" in err
    assert not (demo.root / "x.so").exists()


# --------------------------------------------------------------------------------------------
# inspect / demo / bench
# --------------------------------------------------------------------------------------------


def test_inspect_lists_pooling_nodes(demo, capsys):
    assert cli.main(["inspect", str(demo.onnx)]) == 0
    out = capsys.readouterr().out
    assert out.count("\n[") == 4  # pool1, pool2, pool3, gap
    assert "converter: MaxPool v12 (tvm_pool)" in out
    assert "converter: AveragePool v19 (tvm_pool)" in out
    assert "converter: GlobalAveragePool v1 (tvm_pool)" in out
    assert "output:    [1, 8, 16, 16] (+ Indices int64, same shape)" in out
    assert "output:    [1, 16, 9, 9]" in out  # AveragePool ceil_mode
    assert "padding:   begin [1, 1], end [0, 0] (auto_pad SAME_LOWER" in out
    assert out.count("schedule:  ") == 4 and out.count("tuning:    ") == 4


def test_inspect_names_the_schedule_rule_that_applies(demo, monkeypatch, capsys):
    from tvm.s_tir.dlight import ScheduleRule

    from tvm_pool import schedules

    class AcceptAll(ScheduleRule):
        def apply(self, func, target, tunable):
            import tvm

            return tvm.s_tir.Schedule(func)

    monkeypatch.setattr(schedules, "rules_for", lambda target: [AcceptAll()])
    assert cli.main(["inspect", str(demo.onnx), "--target", "x86"]) == 0
    out = capsys.readouterr().out
    assert out.count("AcceptAll") == 4 and out.count("schedule:  test_cli.AcceptAll") == 4
    assert "mtriple=x86_64-linux-gnu" in out


def test_inspect_shows_a_rule_that_fails(demo, monkeypatch, capsys):
    """A rule that fails on a node's function would fail compile too: inspect says why, rather
    than "none"."""
    from tvm.s_tir.dlight import ScheduleRule

    from tvm_pool import schedules

    class Broken(ScheduleRule):
        def apply(self, func, target, tunable):
            raise ValueError("cannot schedule this")

    monkeypatch.setattr(schedules, "rules_for", lambda target: [Broken()])
    assert cli.main(["inspect", str(demo.onnx)]) == 0
    assert capsys.readouterr().out.count("schedule:  ? (cannot schedule this)") == 4


def test_inspect_says_when_shape_inference_fails(demo, monkeypatch, capsys):
    """inspect goes on with the declared shapes, and says on stderr why it has no others."""
    def fail(*_args, **_kwargs):
        raise onnx.shape_inference.InferenceError("[ShapeInferenceError] made up")

    monkeypatch.setattr(onnx.shape_inference, "infer_shapes", fail)
    assert cli.main(["inspect", str(demo.onnx)]) == 0
    out, err = capsys.readouterr()
    assert "tvm-pool: warning: ONNX shape inference failed ([ShapeInferenceError] made up)" in err
    assert out.count("\n[") == 4 and "schedule:  ? (input shape unknown)" in out


def test_demo_passes_and_prints_a_table(capsys):
    assert cli.main(["-q", "demo", "--repeat", "3"]) == 0
    out = capsys.readouterr().out
    for name in ("logits", "pool1_indices", "pool2"):
        row = next(line for line in out.splitlines() if line.startswith(name))
        assert row.endswith("pass"), row
    assert "onnxruntime" in out and "all outputs match onnxruntime" in out


def test_demo_model_is_valid_onnx():
    model, inputs = demo_model()
    onnx.checker.check_model(model, full_check=True)
    ops = {n.op_type for n in model.graph.node}
    assert {"MaxPool", "AveragePool", "GlobalAveragePool", "Conv", "Relu"} <= ops
    assert any(n.op_type == "MaxPool" and len(n.output) == 2 for n in model.graph.node)
    assert set(inputs) == {"x"}


def test_bench_delegates_arguments(monkeypatch):
    seen = []
    monkeypatch.setitem(sys.modules, "tvm_pool.bench", types.SimpleNamespace(main=lambda argv: seen.append(argv) or 0))
    assert cli.main(["bench", "--quick", "-o", "x.json"]) == 0
    assert seen == [["--quick", "-o", "x.json"]]


# --------------------------------------------------------------------------------------------
# Tuning logs: warnings about the user's own files reach stderr, -q or not.
# --------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def truncated_log(tmp_path_factory):
    """A pooling model and its tuning log (tvm-pool tune) with the last record cut in half, as
    an interrupted write leaves it."""
    root = tmp_path_factory.mktemp("tuning")
    f = TensorProto.FLOAT
    model = save_model(
        root / "pool.onnx",
        [helper.make_node("MaxPool", ["x"], ["y"], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])],
        [helper.make_tensor_value_info("x", f, [1, 8, 20, 20])], [helper.make_tensor_value_info("y", f, None)],
    )
    log = root / "log"
    assert cli.main(["-q", "tune", str(model), "--trials", "0", "--log-dir", str(log)]) == 0
    records = log / "database_tuning_record.json"
    lines = records.read_text().splitlines()
    records.write_text("\n".join(lines[:-1] + [lines[-1][: len(lines[-1]) // 2]]))
    return types.SimpleNamespace(model=model, log=log, records=records)


@pytest.mark.parametrize("quiet", [False, True], ids=["progress", "quiet"])
def test_compile_warns_about_a_truncated_tuning_log(truncated_log, quiet, tmp_path, capfd):
    """The log's other records are used and the build succeeds, but stderr says which line of
    which file was skipped: with -q too, which silences progress, not news of the user's files."""
    so = tmp_path / "pool.so"
    argv = ["compile", str(truncated_log.model), "-o", str(so), "--tuning-log", str(truncated_log.log)]
    assert cli.main(["-q"] * quiet + argv) == 0
    out, err = capfd.readouterr()
    assert out.startswith(f"wrote {so}") and so.exists()
    lines = [ln for ln in err.splitlines() if ln.strip()]
    warned = [ln for ln in lines if ln.startswith(f"tvm-pool: warning: tuning log {truncated_log.log}:")]
    assert len(warned) == 1 and f"{truncated_log.records}:" in warned[0], err
    progress = [ln for ln in lines if ln.startswith("tvm-pool: [")]
    assert len(progress) == (0 if quiet else 4), err
    assert "Traceback" not in err


def test_inspect_warns_about_a_truncated_tuning_log(truncated_log, capfd):
    """inspect reads the user's log too: the skipped line is named once, after the nodes."""
    assert cli.main(["inspect", str(truncated_log.model), "--tuning-log", str(truncated_log.log)]) == 0
    out, err = capfd.readouterr()
    assert "tuning:" in out
    warned = [ln for ln in err.splitlines() if ln.startswith(f"tvm-pool: warning: tuning log {truncated_log.log}:")]
    assert len(warned) == 1 and f"{truncated_log.records}:" in warned[0], err


# --------------------------------------------------------------------------------------------
# Errors: one line on stderr, exit status 2, no traceback.
# --------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def bad_models(tmp_path_factory):
    root = tmp_path_factory.mktemp("bad")
    f = TensorProto.FLOAT
    out = [helper.make_tensor_value_info("y", f, None)]
    paths = types.SimpleNamespace(root=root)
    paths.symbolic = save_model(
        root / "symbolic.onnx", [helper.make_node("MaxPool", ["x"], ["y"], kernel_shape=[2, 2])],
        [helper.make_tensor_value_info("x", f, ["N", 3, 8, 8])], out,
    )
    paths.unsupported = save_model(
        root / "unsupported.onnx", [helper.make_node("FancyUnknownOp", ["x"], ["y"])],
        [helper.make_tensor_value_info("x", f, [1, 3, 8, 8])], out,
    )
    paths.invalid = save_model(
        root / "invalid.onnx",
        [helper.make_node("MaxPool", ["x"], ["y"], name="bad_pool", kernel_shape=[2, 2], storage_order=3)],
        [helper.make_tensor_value_info("x", f, [1, 3, 8, 8])], out,
    )
    paths.garbage = root / "garbage.onnx"
    paths.garbage.write_text("this is not a protobuf\n")
    return paths


def _error_cases(demo, compiled, bad):
    inputs = str(demo.inputs)
    wrong_name = bad.root / "wrong_name.npz"
    np.savez(wrong_name, image=np.zeros((1, 3, 32, 32), np.float32))
    wrong_dtype = bad.root / "wrong_dtype.npz"
    np.savez(wrong_dtype, x=np.zeros((1, 3, 32, 32), np.float64))
    wrong_shape = bad.root / "wrong_shape.npz"
    np.savez(wrong_shape, x=np.zeros((1, 3, 16, 16), np.float32))
    return {
        "missing file": (["compile", str(bad.root / "nope.onnx")], "no such file"),
        "not onnx": (["compile", str(bad.garbage)], "not an ONNX model"),
        "unknown target": (["compile", str(demo.onnx), "--target", "sparc"], "unknown target 'sparc'"),
        "bad json target": (["compile", str(demo.onnx), "--target", "{kind: llvm"], "not valid JSON"),
        "unknown target kind": (["compile", str(demo.onnx), "--target", '{"kind": "nope"}'], "invalid target"),
        "symbolic input": (["compile", str(bad.symbolic)], "--input-shapes x=1,3,8,8"),
        "input-shapes unknown name": (["compile", str(bad.symbolic), "--input-shapes", "z=1,3,8,8"], "unknown input 'z'"),
        "input-shapes not ints": (["compile", str(bad.symbolic), "--input-shapes", "x=1,3,a,8"], "must be integers"),
        "unsupported operator": (["compile", str(bad.unsupported)], "FancyUnknownOp"),
        "invalid model": (["compile", str(bad.invalid)], "node 'bad_pool' (MaxPool-12), attribute 'storage_order'"),
        "inspect invalid model": (["inspect", str(bad.invalid)], "invalid or unsupported"),
        "inspect missing file": (["inspect", str(bad.root / "nope.onnx")], "no such file"),
        "run missing module": (["run", str(bad.root / "nope.so"), "--inputs", inputs], "no such file"),
        "run missing inputs": (["run", str(compiled), "--inputs", str(bad.root / "nope.npz")], "no such file"),
        "run inputs not npz": (["run", str(compiled), "--inputs", str(bad.garbage)], "not an .npz"),
        "run not a module": (["run", str(bad.garbage), "--inputs", inputs], "cannot load"),
        "run wrong input name": (["run", str(compiled), "--inputs", str(wrong_name)], "'image', which is not an input"),
        "run wrong dtype": (["run", str(compiled), "--inputs", str(wrong_dtype)], "dtype float64; the model takes float32"),
        "run wrong shape": (["run", str(compiled), "--inputs", str(wrong_shape)], "shape [1, 3, 16, 16]"),
        "run bad repeat": (["run", str(compiled), "--inputs", inputs, "--repeat", "0"], "--repeat"),
        "unknown command": (["frobnicate"], "invalid choice"),
        "missing argument": (["run", str(compiled)], "--inputs"),
    }


ERROR_CASES = [
    "missing file", "not onnx", "unknown target", "bad json target", "unknown target kind", "symbolic input",
    "input-shapes unknown name", "input-shapes not ints", "unsupported operator", "invalid model",
    "inspect invalid model", "inspect missing file", "run missing module", "run missing inputs",
    "run inputs not npz", "run not a module", "run wrong input name", "run wrong dtype", "run wrong shape",
    "run bad repeat", "unknown command", "missing argument",
]


@pytest.mark.parametrize("case", ERROR_CASES)
def test_errors_are_one_line_exit_2(case, demo, compiled, bad_models, capfd):
    argv, expected = _error_cases(demo, compiled, bad_models)[case]
    argv = argv[:1] + ["-q"] + argv[1:] if argv[0] != "frobnicate" else argv
    assert cli.main(argv) == 2
    out, err = capfd.readouterr()
    error_lines = [ln for ln in err.splitlines() if ln.strip()]
    if argv[0] == "inspect":  # inspect prints its per-node report, then the one error line
        error_lines = error_lines[-1:]
        assert err.strip().count("\n") == 0, err
    assert len(error_lines) == 1, err
    assert "error:" in error_lines[0] and expected in error_lines[0], error_lines[0]
    assert "Traceback" not in err + out
    if argv[0] != "inspect":
        assert out == "", out


def test_errors_in_a_real_process(bad_models):
    result = run_cli("compile", str(bad_models.symbolic))
    assert result.returncode == 2
    assert result.stderr.strip().count("\n") == 0 and "--input-shapes" in result.stderr
    assert "Traceback" not in result.stderr
    result = run_cli("compile", str(bad_models.invalid))
    assert result.returncode == 2 and result.stdout == ""
    assert [ln for ln in result.stderr.splitlines() if "error" in ln.lower()] == [
        ln for ln in result.stderr.splitlines() if ln.startswith("tvm-pool: error:")
    ]
    assert "Traceback" not in result.stderr and "BlockBuilder" not in result.stderr


def test_verbose_adds_the_traceback(bad_models, capfd):
    assert cli.main(["compile", "--verbose", "-q", str(bad_models.invalid)]) == 2
    err = capfd.readouterr().err
    assert "Traceback" in err and "tvm-pool: error: node 'bad_pool'" in err


def test_bench_unavailable_is_one_line(monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "tvm_pool.bench", None)
    assert cli.main(["bench"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "benchmark suite is unavailable" in err


def test_run_rejects_a_module_without_signature(tmp_path, capsys):
    import tvm
    from tvm import relax

    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType([4], "float32"))
    with bb.function("main", [x]):
        bb.emit_func_output(x)
    so = tmp_path / "plain.so"
    tvm.compile(bb.get(), target="llvm").export_library(str(so))
    np.savez(tmp_path / "in.npz", x=np.zeros(4, np.float32))
    assert cli.main(["-q", "run", str(so), "--inputs", str(tmp_path / "in.npz")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "not compiled by tvm-pool compile" in err
