"""tvm_pool modules survive TVM's IR serialization (``tvm.ir.save_json`` / ``load_json``).

MetaSchedule serializes every tuning task this way; with apache-tvm-ffi 0.1.15.x (pip's
default for apache-tvm 0.27) ``save_json`` segfaults, hence the pin in pyproject.toml.
"""

from __future__ import annotations

import numpy as np
import tvm
from tvm import relax

import tvm_pool
from tvm_pool import relax_ops


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


def test_installed_ffi_is_the_pinned_one():
    import tvm_ffi  # pylint: disable=import-outside-toplevel

    assert tvm_ffi.__version__ == "0.1.14.post1"


def test_relax_module_round_trips_through_save_json():
    mod = _pool_module()
    text = tvm.ir.save_json(mod)
    back = tvm.ir.load_json(text)
    tvm.ir.assert_structural_equal(back, mod)


def test_lowered_tir_round_trips_and_still_builds():
    mod = _pool_module()
    lowered = tvm_pool.lowering.pipeline(tvm.target.Target({"kind": "llvm"}))(mod)
    prim_funcs = {gv.name_hint: f for gv, f in lowered.functions_items() if isinstance(f, tvm.tirx.PrimFunc)}
    assert prim_funcs
    for name, func in prim_funcs.items():
        back = tvm.ir.load_json(tvm.ir.save_json(func))
        tvm.ir.assert_structural_equal(back, func, map_free_vars=True), name
    # the round-tripped Relax module compiles and runs like the original
    back = tvm.ir.load_json(tvm.ir.save_json(mod))
    x = np.random.default_rng(0).standard_normal((1, 4, 9, 9)).astype("float32")
    outs = []
    for m in (mod, back):
        vm = relax.VirtualMachine(tvm_pool.compile(m, target="llvm"), tvm.cpu())
        res = vm["main"](tvm.runtime.tensor(x))
        outs.append([r.numpy() for r in res])
    for a, b in zip(*outs):
        np.testing.assert_array_equal(a, b)
