"""Deployment: a `tvm-pool compile` artifact runs with TVM's runtime only, from Python and C++,
in processes where tvm_pool cannot be imported; the arm artifact is an aarch64 shared object."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import onnx
import pytest

from tvm_pool import artifact
from tvm_pool.demo_model import demo_model
from helpers import EM_AARCH64, assert_matches, elf_machine, needs_cross_compiler, run_cli
from oracles import by_name, run_onnxruntime

pytest.importorskip("onnxruntime")

REPO = Path(__file__).resolve().parents[1]
EXAMPLES = REPO / "examples"

# Runs a script with TVM's runtime library only and tvm_pool made unimportable, then checks that
# nothing of the compiler or of tvm_pool was loaded.
RUNTIME_ONLY_RUNNER = textwrap.dedent(
    """
    import os, runpy, sys
    os.environ["TVM_USE_RUNTIME_LIB"] = "1"
    sys.modules["tvm_pool"] = None  # `import tvm_pool` raises ImportError from here on
    try:
        import tvm_pool  # noqa: F401
        raise SystemExit("tvm_pool is importable")
    except ImportError:
        pass
    script, *args = sys.argv[1:]
    sys.argv = [script, *args]
    try:
        runpy.run_path(script, run_name="__main__")
    except SystemExit as stop:
        if stop.code:
            raise
    import tvm.base
    assert tvm.base._RUNTIME_ONLY, "TVM loaded its compiler"
    assert "tvm_compiler" not in tvm.base._LOADED_LIBS, sorted(tvm.base._LOADED_LIBS)
    assert not any(m == "tvm_pool" or m.startswith("tvm_pool.") for m, v in sys.modules.items() if v is not None)
    print("RUNTIME-ONLY-OK")
    """
)


def compile_demo(root: Path, *target_args: str):
    """The demo CNN compiled by `tvm-pool compile` (in a subprocess), its inputs and ORT's outputs."""
    model, inputs = demo_model(seed=3)
    onnx.save(model, root / "cnn.onnx")
    np.savez(root / "inputs.npz", **inputs)
    so = root / ("cnn.so" if not target_args else "cnn_" + target_args[-1] + ".so")
    result = run_cli("-q", "compile", str(root / "cnn.onnx"), *target_args, "-o", str(so))
    assert result.returncode == 0, result.stderr
    return root, so, inputs, by_name(model, run_onnxruntime(model, inputs))


@pytest.fixture(scope="module")
def artifact_so(tmp_path_factory):
    return compile_demo(tmp_path_factory.mktemp("deploy"))


def test_signature_travels_inside_the_artifact(artifact_so):
    _, so, _, _ = artifact_so
    _vm, signature = artifact.load(str(so))
    assert signature["format"] == artifact.SIGNATURE_FORMAT
    assert signature["entry"] == "main"
    assert signature["inputs"] == [{"name": "x", "shape": [1, 3, 32, 32], "dtype": "float32"}]
    assert signature["outputs"] == [
        {"name": "logits", "shape": [1, 10], "dtype": "float32"},
        {"name": "pool1_indices", "shape": [1, 8, 16, 16], "dtype": "int64"},
        {"name": "pool2", "shape": [1, 16, 9, 9], "dtype": "float32"},
    ]
    assert signature["source"] == "cnn.onnx"


def test_python_runtime_only_without_tvm_pool(artifact_so):
    root, so, _, want = artifact_so
    out = root / "py_out.npz"
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    result = subprocess.run(
        [sys.executable, "-c", RUNTIME_ONLY_RUNNER, str(EXAMPLES / "deploy_python.py"), str(so),
         "--inputs", str(root / "inputs.npz"), "-o", str(out)],
        capture_output=True, text=True, timeout=120, cwd=root, env=env,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "RUNTIME-ONLY-OK" in result.stdout
    assert "TVM runtime only: True; tvm_pool loaded: False" in result.stdout
    with np.load(out) as got:
        assert_matches({k: got[k] for k in got.files}, want)


def _cpp_skip_reason() -> str | None:
    if shutil.which("g++") is None:
        return "g++ not installed"
    import tvm_ffi.libinfo

    include = Path(tvm_ffi.libinfo.find_include_path())
    for header in ("tvm/ffi/extra/module.h", "tvm/ffi/extra/json.h", "tvm/ffi/container/tensor.h", "dlpack/dlpack.h"):
        if not (include / header).exists() and not (Path(tvm_ffi.libinfo.find_dlpack_include_path()) / header).exists():
            return f"header {header} missing from the apache-tvm-ffi wheel ({include})"
    return None


@pytest.fixture(scope="module")
def cpp_binary(tmp_path_factory):
    reason = _cpp_skip_reason()
    if reason:
        pytest.skip(reason)
    binary = tmp_path_factory.mktemp("cpp") / "deploy"
    env = dict(os.environ, PYTHON=sys.executable)
    result = subprocess.run(
        ["sh", str(EXAMPLES / "deploy_cpp" / "build.sh"), str(binary)],
        capture_output=True, text=True, timeout=300, env=env,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    return binary


def run_cpp_example(command: list, so, root: Path, inputs: dict, want: dict, timeout: float = 120):
    """Run the C++ example (``command`` + [so, in_dir, out_dir]) on raw .bin files, check ORT's outputs."""
    in_dir, out_dir = root / "cpp_in", root / "cpp_out"
    in_dir.mkdir(exist_ok=True)
    out_dir.mkdir(exist_ok=True)
    for name, value in inputs.items():
        value.tofile(in_dir / f"{name}.bin")
    env = {k: v for k, v in os.environ.items() if k not in ("LD_LIBRARY_PATH", "PYTHONPATH")}
    result = subprocess.run(
        [*map(str, command), str(so), str(in_dir), str(out_dir)], capture_output=True, text=True, timeout=timeout, env=env
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "output pool1_indices: int64[1, 8, 16, 16]" in result.stdout
    got = {
        name: np.fromfile(out_dir / f"{name}.bin", dtype=ref.dtype).reshape(ref.shape) for name, ref in want.items()
    }
    assert_matches(got, want)


def test_cpp_example_builds_and_matches_onnxruntime(artifact_so, cpp_binary):
    root, so, inputs, want = artifact_so
    run_cpp_example([cpp_binary], so, root, inputs, want)


def test_cpp_binary_links_only_the_runtime(cpp_binary):
    if shutil.which("ldd") is None:
        pytest.skip("ldd not available")
    libs = subprocess.run(["ldd", str(cpp_binary)], capture_output=True, text=True, check=True).stdout
    assert "libtvm_runtime.so" in libs and "libtvm_compiler" not in libs


@needs_cross_compiler
def test_arm_artifact_is_aarch64_elf(artifact_so):
    root, _, _, _ = artifact_so
    so = root / "cnn_arm.so"
    result = run_cli("-q", "compile", str(root / "cnn.onnx"), "--target", "arm", "-o", str(so))
    assert result.returncode == 0, result.stderr
    assert elf_machine(so) == EM_AARCH64 and so.read_bytes()[4] == 2  # ELF64
    if shutil.which("file"):
        assert "aarch64" in subprocess.run(["file", str(so)], capture_output=True, text=True).stdout
