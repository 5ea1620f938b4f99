"""The tvm-pool command on programs saved by torch.export.save (.pt2): compile, run, inspect and
tune them as ONNX models, with a symbolic batch (torch.export.Dim); and the one-line error when
PyTorch is not installed."""

from __future__ import annotations

import contextlib
import gc
import io
import subprocess
import sys
import types

import numpy as np
import pytest

from tvm_pool import cli

torch = pytest.importorskip("torch")

PT2_NEEDS_TORCH = "needs PyTorch: pip install 'tvm_pool[torch]'"


class ConvPools(torch.nn.Module):
    """Conv/Relu, max_pool2d with its indices, adaptive_avg_pool2d."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.conv = torch.nn.Conv2d(3, 8, 3, padding=1)

    def forward(self, x):
        y = torch.relu(self.conv(x))
        pooled, indices = torch.nn.functional.max_pool2d(y, 3, stride=2, padding=1, return_indices=True)
        return torch.nn.functional.adaptive_avg_pool2d(pooled, (3, 5)), indices


def eager(module, x: np.ndarray) -> list[np.ndarray]:
    with torch.no_grad():
        return [t.numpy() for t in module(torch.from_numpy(x))]


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """The program exported with a symbolic batch (example batch 2) and saved as a .pt2, inputs
    of batch 3 as .npz, and torch eager's outputs on them by the program's output names."""
    root = tmp_path_factory.mktemp("pt2")
    module = ConvPools().eval()
    batch = torch.export.Dim("batch", min=1, max=16)
    program = torch.export.export(module, (torch.randn(2, 3, 16, 16),), dynamic_shapes={"x": {0: batch}})
    torch.export.save(program, root / "convpools.pt2")
    x = np.random.default_rng(0).standard_normal((3, 3, 16, 16)).astype(np.float32)
    np.savez(root / "inputs.npz", x=x)
    names = list(program.graph_signature.user_outputs)
    return types.SimpleNamespace(
        root=root, module=module, pt2=root / "convpools.pt2", inputs=root / "inputs.npz",
        names=names, want=dict(zip(names, eager(module, x))),
    )


@pytest.fixture(scope="module")
def compiled(saved):
    """`tvm-pool compile model.pt2` (in this process, as tests/test_cli.py does most): the batch
    stays symbolic."""
    so = saved.root / "convpools.so"
    out, err = io.StringIO(), io.StringIO()
    gc.collect()  # earlier tests' garbage: TVM's warnings on collecting it are not the CLI's (conftest.py)
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        assert cli.main(["compile", str(saved.pt2), "-o", str(so)]) == 0
    return types.SimpleNamespace(so=so, stdout=out.getvalue(), stderr=err.getvalue())


def assert_exact(got: dict, want: dict) -> None:
    """Indices exactly, floats to float32 rounding (the convolution sums in another order)."""
    assert sorted(got) == sorted(want)
    for name, ref in want.items():
        assert got[name].shape == ref.shape and got[name].dtype == ref.dtype, name
        if ref.dtype.kind in "iu":
            np.testing.assert_array_equal(got[name], ref, err_msg=name)
        else:
            np.testing.assert_allclose(got[name], ref, rtol=1e-5, atol=1e-5, err_msg=name)


# --------------------------------------------------------------------------------------------
# compile + run
# --------------------------------------------------------------------------------------------


def test_compile_keeps_the_symbolic_batch(saved, compiled):
    """Inputs by the program's user input names, outputs by its output nodes' names, the batch
    a symbol (torch's name for the Dim, e.g. s77)."""
    assert compiled.stdout.strip().startswith(f"wrote {compiled.so}: inputs x[s")
    outputs = compiled.stdout.strip().split(" -> outputs ")[1].split("], ")
    assert [o.split("[")[0] for o in outputs] == saved.names == ["adaptive_avg_pool2d", "getitem_1"]
    assert outputs[0].startswith("adaptive_avg_pool2d[s") and outputs[0].endswith(", 8, 3, 5")
    assert outputs[1].startswith("getitem_1[s") and outputs[1].endswith(", 8, 8, 8]")
    lines = [line for line in compiled.stderr.splitlines() if line.strip()]
    steps = [line for line in lines if not line.startswith("tvm-pool: tuning: ")]
    assert [s.split("]")[0] for s in steps] == [f"tvm-pool: [{i}/4" for i in (1, 2, 3, 4)], compiled.stderr
    assert "(torch.export, " in steps[1]
    # and one line on the tuning records its kernels have (tests/test_tuning_coverage.py)
    assert len(lines) == len(steps) + 1, compiled.stderr


def test_run_with_inputs_matches_torch_eager(saved, compiled, tmp_path, capsys):
    """Batch 3, not the example's 2: the compiled module takes any batch in the Dim's range."""
    out = tmp_path / "out.npz"
    assert cli.main(["-q", "run", str(compiled.so), "--inputs", str(saved.inputs), "-o", str(out)]) == 0
    with np.load(out) as got:
        assert_exact({k: got[k] for k in got.files}, saved.want)
    assert "getitem_1: int64[3, 8, 8, 8]" in capsys.readouterr().out


def test_run_checks_the_batch_against_the_dims_range(saved, compiled, tmp_path, capsys):
    np.savez(tmp_path / "big.npz", x=np.zeros((17, 3, 16, 16), np.float32))
    assert cli.main(["-q", "run", str(compiled.so), "--inputs", str(tmp_path / "big.npz")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "has s" in err and "=17; the program was exported for s" in err and ", 16]" in err


def test_run_a_pt2_on_random_inputs(saved, tmp_path, capsys):
    """`run model.pt2` compiles it for this CPU and, without --inputs, runs on seeded random
    inputs of the example's shape (batch 2), or of --input-shapes."""
    out = tmp_path / "random.npz"
    assert cli.main(["-q", "run", str(saved.pt2), "--input-shapes", "x=4,3,16,16", "-o", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "inputs: random (seed 0): x[4, 3, 16, 16]" in printed
    x = np.random.default_rng(0).standard_normal((4, 3, 16, 16)).astype(np.float32)
    with np.load(out) as got:
        assert_exact({k: got[k] for k in got.files}, dict(zip(saved.names, eager(saved.module, x))))


# --------------------------------------------------------------------------------------------
# inspect / tune
# --------------------------------------------------------------------------------------------


def test_inspect_lists_the_aten_pooling_nodes(saved, capsys):
    assert cli.main(["inspect", str(saved.pt2)]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"{saved.pt2}: torch.export program") and "inputs x float32[s" in out
    assert out.count("\n[") == 2
    assert "node 'max_pool2d_with_indices': aten.max_pool2d_with_indices.default" in out
    assert "arguments: kernel_size=[3, 3], stride=[2, 2], padding=[1, 1], dilation=[1, 1], ceil_mode=False" in out
    assert "node 'adaptive_avg_pool2d': aten.adaptive_avg_pool2d.default" in out
    assert "arguments: output_size=[3, 5]" in out
    assert out.count("converter: tvm_pool") == 2
    assert out.count("schedule:  ") == 2 and "schedule:  ?" not in out and "schedule:  none" not in out
    assert out.count("tuning:    ") == 2


def test_inspect_with_input_shapes_shows_static_types(saved, capsys):
    assert cli.main(["inspect", str(saved.pt2), "--input-shapes", "x=5,3,16,16"]) == 0
    out = capsys.readouterr().out
    assert "inputs x float32[5, 3, 16, 16]" in out
    assert "output:    float32[5, 8, 8, 8], int64[5, 8, 8, 8]" in out and "output:    float32[5, 8, 3, 5]" in out


def test_tune_needs_static_shapes(saved, capsys):
    assert cli.main(["-q", "tune", str(saved.pt2), "--trials", "0", "--log-dir", str(saved.root / "never")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "tuning needs static shapes" in err and "--input-shapes x=2,3,16,16" in err
    assert not (saved.root / "never").exists()


@pytest.mark.slow  # ~14 s; the ONNX road's tune-then-compile runs in the default suite (test_tuning.py)
def test_tune_then_compile_with_the_log(saved, tmp_path, capsys):
    """--trials 0: the pooling tasks are searched exhaustively, nothing else is measured."""
    log = tmp_path / "log"
    argv = ["-q", "tune", str(saved.pt2), "--trials", "0", "--log-dir", str(log), "--input-shapes", "x=2,3,16,16"]
    assert cli.main(argv) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"wrote {log}: ") and "(2 pooling)" in out
    wrote, latency = out.strip().splitlines()[-2:]
    assert wrote.endswith(f"apply with: tvm-pool compile {saved.pt2} --tuning-log {log} --input-shapes x=2,3,16,16")
    assert latency.startswith("latency (") and latency.endswith("onnxruntime: not compared (the model is not ONNX)")
    assert (log / "database_tuning_record.json").read_text().strip()
    so = tmp_path / "tuned.so"
    argv = ["-q", "compile", str(saved.pt2), "-o", str(so), "--input-shapes", "x=2,3,16,16", "--tuning-log", str(log)]
    assert cli.main(argv) == 0
    assert capsys.readouterr().out.strip().startswith(f"wrote {so}: inputs x[2, 3, 16, 16] -> ")


# --------------------------------------------------------------------------------------------
# Errors: one line, exit status 2.
# --------------------------------------------------------------------------------------------


def test_errors_are_one_line(saved, tmp_path, capfd):
    garbage = tmp_path / "garbage.pt2"
    garbage.write_text("not a zip archive\n")
    weights = tmp_path / "weights.pt2"
    torch.save({"w": torch.zeros(2)}, weights)
    cases = [
        (["compile", str(tmp_path / "nope.pt2")], "no such file"),
        (["inspect", str(garbage)], "not a program saved by torch.export.save (PytorchStreamReader"),
        (["run", str(weights)], "not a program saved by torch.export.save"),
        (["compile", str(saved.pt2), "--input-shapes", "x=32,3,16,16"], "=32 is outside the range the program was"),
        (["compile", str(saved.pt2), "--input-shapes", "x=2,3,16,15"], "conflicts with the program's shape"),
        (["compile", str(saved.pt2), "--input-shapes", "y=2,3,16,16"], "unknown input 'y'"),
    ]
    for argv, expected in cases:
        assert cli.main(argv[:1] + ["-q"] + argv[1:]) == 2, argv
        out, err = capfd.readouterr()
        assert out == "" and err.count("\n") == 1 and err.startswith("tvm-pool: error: "), (argv, err)
        assert expected in err, (argv, err)
        assert "Traceback" not in err and "W1" not in err, err


def test_without_torch_a_pt2_is_a_one_line_error(saved):
    """In a process where `import torch` fails: tvm_pool imports, and every command given a
    .pt2 says in one line what to install (exit status 2, no traceback)."""
    script = (
        "import sys\n"
        "sys.modules['torch'] = None  # what `import torch` meets without PyTorch installed\n"
        "import tvm_pool\n"
        "from tvm_pool.cli import main\n"
        "try:\n"
        "    tvm_pool.from_exported_program(None)\n"
        "except ImportError as err:\n"
        "    print(err)\n"
        "for command in ('compile', 'inspect', 'tune', 'run'):\n"
        "    print(command, main([command, sys.argv[1]]))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", script, str(saved.pt2)], capture_output=True, text=True, timeout=300, check=False
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [
        f"tvm_pool.from_exported_program {PT2_NEEDS_TORCH}", "compile 2", "inspect 2", "tune 2", "run 2",
    ]
    assert result.stderr.splitlines() == [f"tvm-pool: error: reading {saved.pt2} {PT2_NEEDS_TORCH}"] * 4
