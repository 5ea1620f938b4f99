"""The tvm-pool command on TFLite models (.tflite): compile, run and inspect them as ONNX
models (one compile, in this process), checked bit for bit against LiteRT; one-line errors;
and the one-line error when the tflite package is not installed."""

from __future__ import annotations

import contextlib
import io
import subprocess
import sys
import types

import numpy as np
import pytest

from tvm_pool import cli
from tvm_pool.tflite import models
from tvm_pool.tflite.models import PoolCase, pool_model
from tflite_oracle import KERNELS, run_litert

TFLITE_MISSING = "needs the tflite package: pip install 'tvm_pool[tflite]'"


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """The exact int8 CNN as a .tflite, inputs as .npz, and LiteRT's outputs by name."""
    root = tmp_path_factory.mktemp("tflite")
    content = models.int8_cnn(seed=3, exact=True)
    (root / "cnn.tflite").write_bytes(content)
    x = np.random.default_rng(0).integers(-128, 128, (2, 17, 15, 3)).astype(np.int8)
    np.savez(root / "inputs.npz", image=x)
    return types.SimpleNamespace(
        root=root, tflite=root / "cnn.tflite", inputs=root / "inputs.npz", x=x,
        want={kernel: run_litert(content, [x], kernel) for kernel in KERNELS},
    )


@pytest.fixture(scope="module")
def compiled(saved):
    so = saved.root / "cnn.so"
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        assert cli.main(["compile", str(saved.tflite), "-o", str(so)]) == 0
    return types.SimpleNamespace(so=so, stdout=out.getvalue(), stderr=err.getvalue())


def test_compile_names_inputs_and_outputs_as_the_model(saved, compiled):
    assert compiled.stdout.strip() == (
        f"wrote {compiled.so}: inputs image[2, 17, 15, 3] -> outputs avg_relu6[2, 5, 4, 12], max_strided[2, 3, 3, 8]"
    )
    # (TVM's native warnings, e.g. BlockBuilders an earlier test's failed import left for the
    # garbage collector, are replayed on stderr too: only the progress lines count here)
    steps = [line for line in compiled.stderr.splitlines() if line.startswith("tvm-pool: [")]
    assert [s.split("]")[0] for s in steps] == [f"tvm-pool: [{i}/4" for i in (1, 2, 3, 4)], compiled.stderr
    assert "importing " in steps[1] and "(TFLite, 5 operators)" in steps[1]


def test_run_matches_litert_bit_for_bit(saved, compiled, tmp_path, capsys):
    out = tmp_path / "out.npz"
    assert cli.main(["-q", "run", str(compiled.so), "--inputs", str(saved.inputs), "-o", str(out)]) == 0
    assert "avg_relu6: int8[2, 5, 4, 12]" in capsys.readouterr().out
    with np.load(out) as got:
        assert sorted(got.files) == ["avg_relu6", "max_strided"]
        for kernel, want in saved.want.items():
            for name in got.files:
                np.testing.assert_array_equal(got[name], want[name], err_msg=f"{kernel} {name}")


def test_run_a_tflite_on_random_inputs(saved, tmp_path, capsys):
    """`run model.tflite` compiles it for this CPU and runs it on seeded random inputs of the
    declared shapes, or of --input-shapes (the batch)."""
    out = tmp_path / "random.npz"
    assert cli.main(["-q", "run", str(saved.tflite), "--input-shapes", "image=1,17,15,3", "-o", str(out)]) == 0
    assert "inputs: random (seed 0): image[1, 17, 15, 3]" in capsys.readouterr().out
    with np.load(out) as got:
        assert got["avg_relu6"].shape == (1, 5, 4, 12) and got["max_strided"].dtype == np.int8


def test_inspect_lists_the_pooling_operators(saved, capsys):
    assert cli.main(["inspect", str(saved.tflite)]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"{saved.tflite}: TFLite model, 5 operators, inputs image int8[2, 17, 15, 3]")
    assert out.count("\n[") == 3
    assert "[2] node 'avg_relu6': AVERAGE_POOL_2D" in out
    assert "filter [3, 3], stride [2, 2], SAME (pads top 1, left 0, bottom 1, right 1), activation RELU6 (clamp [" in out
    assert "filter [2, 2], stride [3, 3], VALID (pads top 0, left 0, bottom 0, right 0), activation NONE\n" in out
    assert "converter: tvm_pool (TFLite, NHWC)" in out and "schedule:  " in out


def test_errors_are_one_line(saved, tmp_path, capfd):
    garbage = tmp_path / "garbage.tflite"
    garbage.write_text("not a flatbuffer\n")
    tanh = tmp_path / "tanh.tflite"
    tanh.write_bytes(pool_model(PoolCase("MAX_POOL_2D", (1, 4, 4, 2), (2, 2), (2, 2), "VALID", "TANH")))
    cases = [
        (["compile", str(tmp_path / "nope.tflite")], "no such file"),
        (["inspect", str(garbage)], "not a TFLite model (no TFL3 flatbuffer identifier)"),
        (["run", str(garbage)], "not a TFLite model"),
        (["compile", str(saved.tflite), "--input-shapes", "x=1,17,15,3"], "unknown input 'x'"),
        (["compile", str(saved.tflite), "--input-shapes", "image=17,15,3"], "gives 3 dimensions, the model declares 4"),
        (["compile", str(tanh)], "node 'y0' (MAX_POOL_2D): fused_activation_function TANH is not supported"),
        (["inspect", str(tanh)], "1 pooling operator(s) of"),
    ]
    for argv, expected in cases:
        assert cli.main(argv[:1] + ["-q"] + argv[1:]) == 2, argv
        out, err = capfd.readouterr()
        assert err.count("\n") == 1 and err.startswith("tvm-pool: error: "), (argv, err)
        assert expected in err, (argv, err)
        assert "Traceback" not in err, err
    assert cli.main(["inspect", str(tanh)]) == 2
    assert "error:     node 'y0' (MAX_POOL_2D): fused_activation_function TANH" in capfd.readouterr().out


def test_without_tflite_a_tflite_file_is_a_one_line_error(saved):
    """In a process where `import tflite` fails: tvm_pool imports, and every command given a
    .tflite says in one line what to install (exit status 2, no traceback)."""
    script = (
        "import sys\n"
        "sys.modules['tflite'] = None  # what `import tflite` meets without the package\n"
        "import tvm_pool\n"
        "from tvm_pool.cli import main\n"
        "try:\n"
        "    tvm_pool.from_tflite(b'')\n"
        "except ImportError as err:\n"
        "    print(err)\n"
        "for command in ('compile', 'inspect', 'tune', 'run'):\n"
        "    print(command, main([command, sys.argv[1]]))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", script, str(saved.tflite)], capture_output=True, text=True, timeout=300, check=False
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [f"tvm_pool.from_tflite {TFLITE_MISSING}", "compile 2", "inspect 2", "tune 2", "run 2"]
    assert result.stderr.splitlines() == [f"tvm-pool: error: reading {saved.tflite} {TFLITE_MISSING}"] * 4


@pytest.mark.slow  # ~18 s; the ONNX road's tune-then-compile runs in the default suite (test_tuning.py)
def test_tune_then_compile_with_the_log_matches_litert(saved, tmp_path, capsys):
    """`tune model.tflite` (--trials 0: the pooling tasks searched exhaustively, nothing else
    measured) writes a log that `compile --tuning-log` applies; the tuned module still matches
    LiteRT bit for bit."""
    log = tmp_path / "log"
    assert cli.main(["-q", "tune", str(saved.tflite), "--trials", "0", "--log-dir", str(log)]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"wrote {log}: ") and "(3 pooling)" in out, out
    wrote, latency = out.strip().splitlines()[-2:]
    assert wrote.endswith(f"apply with: tvm-pool compile {saved.tflite} --tuning-log {log}")
    assert latency.startswith("latency (") and latency.endswith("onnxruntime: not compared (the model is not ONNX)")
    assert (log / "database_tuning_record.json").read_text().strip()
    so = tmp_path / "tuned.so"
    assert cli.main(["-q", "compile", str(saved.tflite), "-o", str(so), "--tuning-log", str(log)]) == 0
    capsys.readouterr()
    npz = tmp_path / "out.npz"
    assert cli.main(["-q", "run", str(so), "--inputs", str(saved.inputs), "-o", str(npz)]) == 0
    with np.load(npz) as got:
        for kernel, want in saved.want.items():
            for name in ("avg_relu6", "max_strided"):
                np.testing.assert_array_equal(got[name], want[name], err_msg=f"{kernel} {name}")
