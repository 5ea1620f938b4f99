"""tvm_pool modules survive TVM's IR serialization (``tvm.ir.save_json`` / ``load_json``), and
compiled artifacts their trip through a file (``export_library`` / ``artifact.load``).

MetaSchedule serializes every tuning task this way; with apache-tvm-ffi 0.1.15.x (pip's
default for apache-tvm 0.27) ``save_json`` segfaults, hence the pin in pyproject.toml.
"""

from __future__ import annotations

import re
from importlib.metadata import version
from pathlib import Path

import numpy as np
import pytest
import tvm
from tvm import relax

import tvm_pool
from tvm_pool import artifact, cli, emulation, relax_ops

PYPROJECT = Path(__file__).resolve().parents[1] / "pyproject.toml"


def _pool_module():
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((1, 4, 9, 9), "float32"))
    with bb.function("main", [x]):
        with bb.dataflow():
            values, indices = relax_ops.max_pool(bb, x, [3, 3], strides=[2, 2], pads=[1, 1, 1, 1], return_indices=True)
            avg = relax_ops.avg_pool(bb, values, [2, 2], strides=[1, 1], ceil_mode=True)
            out = bb.emit_output(relax.Tuple([avg, indices]))
        bb.emit_func_output(out)
    return bb.get()


def _run(vm, x) -> list[np.ndarray]:
    return [r.numpy() for r in vm["main"](tvm.runtime.tensor(x))]


def test_installed_ffi_is_the_pinned_one():
    """The apache-tvm-ffi this process imports is the one pyproject.toml pins, and the emulated
    aarch64 device (tvm_pool.emulation) installs that one too."""
    import tvm_ffi  # pylint: disable=import-outside-toplevel

    pin = re.search(r'"(apache-tvm-ffi==[^"]+)"', PYPROJECT.read_text()).group(1)
    assert f"apache-tvm-ffi=={tvm_ffi.__version__}" == pin
    assert version("apache-tvm-ffi") == tvm_ffi.__version__
    assert pin in emulation.WHEELS


def test_relax_module_round_trips_through_save_json():
    mod = _pool_module()
    text = tvm.ir.save_json(mod)
    back = tvm.ir.load_json(text)
    tvm.ir.assert_structural_equal(back, mod)


def test_lowered_tir_round_trips_and_still_builds(host, rng):
    """The module tvm_pool's pipeline lowers (scheduled PrimFuncs included) comes back from JSON
    unchanged, and builds into a module that computes exactly what the original's build does."""
    mod = _pool_module()
    lowered = tvm_pool.lowering.pipeline(host)(mod)
    prim_funcs = [f for _, f in lowered.functions_items() if isinstance(f, tvm.tirx.PrimFunc)]
    assert prim_funcs
    for func in prim_funcs:
        tvm.ir.assert_structural_equal(tvm.ir.load_json(tvm.ir.save_json(func)), func, map_free_vars=True)
    back = tvm.ir.load_json(tvm.ir.save_json(lowered))
    tvm.ir.assert_structural_equal(back, lowered, map_free_vars=True)
    x = rng.standard_normal((1, 4, 9, 9)).astype("float32")
    # Already lowered: TVM's build runs no Relax pipeline over them, only the TIR one.
    want, got = (_run(relax.VirtualMachine(tvm.compile(m, host, relax_pipeline=None), tvm.cpu()), x) for m in (lowered, back))
    assert len(got) == len(want) == 2
    for a, b in zip(got, want):
        np.testing.assert_array_equal(a, b)


def test_relax_module_round_trip_compiles_to_the_same_results(host, rng):
    mod = _pool_module()
    back = tvm.ir.load_json(tvm.ir.save_json(mod))
    x = rng.standard_normal((1, 4, 9, 9)).astype("float32")
    want, got = (_run(relax.VirtualMachine(tvm_pool.compile(m, host), tvm.cpu()), x) for m in (mod, back))
    for a, b in zip(got, want):
        np.testing.assert_array_equal(a, b)


def test_artifact_round_trips_and_refuses_another_signature_format(tmp_path, host, rng, capsys):
    """An artifact written to a file and loaded again reads back the signature embedded in it and
    computes what the in-memory executable does; one whose signature has a format this
    tvm_pool does not know is refused, naming both formats, and `tvm-pool run` says so in one line."""
    mod = _pool_module()
    signature = artifact.make_signature(mod, input_names=["x"], output_names=["avg", "indices"], source="pool.onnx")
    x = rng.standard_normal((1, 4, 9, 9)).astype("float32")
    ex = tvm_pool.compile(artifact.embed_signature(mod, signature), host)
    ex.export_library(str(tmp_path / "pool.so"))
    vm, loaded = artifact.load(str(tmp_path / "pool.so"))
    assert loaded == signature
    for a, b in zip(_run(vm, x), _run(relax.VirtualMachine(ex, tvm.cpu()), x)):
        np.testing.assert_array_equal(a, b)

    newer = dict(signature, format="tvm_pool.signature/999")
    so = tmp_path / "newer.so"
    tvm_pool.compile(artifact.embed_signature(mod, newer), host).export_library(str(so))
    message = f"unknown signature format 'tvm_pool.signature/999' (expected {artifact.SIGNATURE_FORMAT})"
    with pytest.raises(artifact.SignatureError, match=re.escape(message)):
        artifact.load(str(so))
    np.savez(tmp_path / "in.npz", x=x)
    assert cli.main(["-q", "run", str(so), "--inputs", str(tmp_path / "in.npz")]) == 2
    assert capsys.readouterr().err == f"tvm-pool: error: {so}: {message}\n"
