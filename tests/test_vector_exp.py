"""float32 exp and sigmoid on CPUs as vectorisable arithmetic (tvm_pool/vector_exp.py): within 2
units in the last place of float64's exp over its whole finite range, exact at its edges
(infinity, 0, subnormals, NaN), no libm call left in the code, and the tuning records' lookup
unchanged."""

from __future__ import annotations

import warnings

import numpy as np
import tvm
from tvm import relax
from tvm.script import relax as R

import tvm_pool
from tvm_pool import vector_exp


def _unary(op, n):
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((n,), "float32"))
    with bb.function("main", [x]):
        with bb.dataflow():
            y = bb.emit_output(op(x))
        bb.emit_func_output(y)
    return bb.get()


def _run(mod, x, target="host"):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ex = tvm_pool.compile(mod, target)
    out = relax.VirtualMachine(ex, tvm.cpu())["main"](tvm.runtime.tensor(x))
    return out.numpy(), ex


def _ulps(got: np.ndarray, want64: np.ndarray) -> np.ndarray:
    """|got - want| in units of the last place of float32 at ``want`` (subnormal spacing below)."""
    want32 = want64.astype("float32")
    spacing = np.spacing(np.abs(want32)).astype("float64")
    return np.abs(got.astype("float64") - want64) / spacing


SPECIALS = np.array([0.0, -0.0, 1.0, -1.0, 88.72, 88.7228, 88.73, 89.0, 100.0, 1e30, np.inf, -87.33, -87.34,
                     -100.0, -103.27, -103.28, -103.97, -103.98, -104.5, -1e30, -np.inf, 1e-45, -1e-45, 1e-38,
                     np.float32(np.log(np.finfo("float32").max)), -np.float32(np.log(2.0) * 149)], dtype="float32")


def _inputs():
    rng = np.random.default_rng(0)
    dense = np.linspace(-105.0, 90.0, 1 << 20, dtype="float32")
    small = rng.standard_normal(1 << 16).astype("float32") * np.float32(1e-3)
    wide = rng.uniform(-105.0, 90.0, 1 << 18).astype("float32")
    nans = np.array([np.nan, -np.nan, np.float32(np.nan) * -1], dtype="float32")
    return np.concatenate([SPECIALS, dense, small, wide, nans])


def test_exp_is_within_two_ulps_and_exact_at_the_edges():
    x = _inputs()
    got, ex = _run(_unary(relax.op.exp, x.size), x)
    with np.errstate(over="ignore", under="ignore"):
        want = np.exp(x.astype("float64"))
    finite = np.isfinite(want.astype("float32")) & ~np.isnan(x)
    ulps = _ulps(got[finite], want[finite])
    assert ulps.max() <= 2.0, (x[finite][np.argmax(ulps)], ulps.max())
    over = ~np.isnan(x) & ~np.isfinite(want.astype("float32"))
    assert np.all(got[over] == np.inf)
    assert np.all(got[x == -np.inf] == 0.0) and np.all(got[x < -104.0] == 0.0)
    assert np.all(np.isnan(got[np.isnan(x)]))
    sub = finite & (want < np.finfo("float32").tiny) & (want > 0)
    assert sub.sum() > 100  # subnormal results are computed, not flushed
    # the code has no libm exp left
    source = "\n".join(m.inspect_source("ll") for m in ex.mod.imports if m.kind == "llvm")
    assert "@expf" not in source and "llvm.exp." not in source


def test_sigmoid_and_silu_match_float64():
    rng = np.random.default_rng(1)
    x = np.concatenate([SPECIALS, rng.standard_normal(1 << 16).astype("float32") * 8,
                        np.array([np.nan], dtype="float32")])
    sig, _ = _run(_unary(relax.op.sigmoid, x.size), x)
    silu, _ = _run(_unary(lambda v: relax.op.multiply(v, relax.op.sigmoid(v)), x.size), x)
    with np.errstate(over="ignore", under="ignore", invalid="ignore"):
        want = 1.0 / (1.0 + np.exp(-x.astype("float64")))
        want_silu = x.astype("float64") * want
    # 1 / (1 + exp(-x)), TVM's own formula: below x = -ln(FLT_MAX) exp(-x) is infinity and the
    # sigmoid 0 where float64 has a subnormal (libm's exp gives the same)
    ok = ~np.isnan(x) & (x > -88.7)
    assert _ulps(sig[ok], want[ok]).max() <= 3.0
    finite = ok & np.isfinite(x)
    assert _ulps(silu[finite], want_silu[finite]).max() <= 4.0
    deep = x <= -88.7
    assert np.all(sig[deep] <= np.finfo("float32").tiny) and np.all(sig[deep] >= 0.0)
    assert sig[x == np.inf][0] == 1.0 and sig[x == -np.inf][0] == 0.0 and np.isnan(sig[np.isnan(x)]).all()


def test_only_cpu_float32_exp_is_rewritten():
    @tvm.script.ir_module
    class Mixed:
        @R.function
        def main(x: R.Tensor((64,), "float32"), h: R.Tensor((64,), "float16"), d: R.Tensor((64,), "float64")):
            with R.dataflow():
                a = R.exp(x)
                b = R.exp(h)
                c = R.sigmoid(d)
                R.output(a, b, c)
            return (a, b, c)

    legal = relax.transform.LegalizeOps()(Mixed)
    rewritten = vector_exp.vector_exp_pass(legal)
    texts = {gv.name_hint: rewritten[gv].script() for gv, f in rewritten.functions_items() if isinstance(f, tvm.tirx.PrimFunc)}
    (f32,) = [t for t in texts.values() if "float32" in t and "exp" in t]
    assert "T.exp(" not in f32 and "T.floor(" in f32
    assert any("T.exp(" in t and "float16" in t for t in texts.values())
    assert any("T.sigmoid(" in t and "float64" in t for t in texts.values())
    assert vector_exp.applies(tvm.target.Target("llvm")) and not vector_exp.applies(tvm.target.Target("cuda"))


def test_aarch64_code_has_no_libm_exp_either():
    mod = _unary(relax.op.sigmoid, 256)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ex = tvm_pool.compile(mod, "arm")
    source = "\n".join(m.inspect_source("ll") for m in ex.mod.imports if m.kind == "llvm")
    assert "@expf" not in source and "llvm.exp." not in source and "fmul" in source


def test_tuning_tasks_keep_the_plain_exp():
    """The records' workloads are the PrimFuncs before the rewrite: a conv -> SiLU kernel's task
    still holds the sigmoid, so records tuned before this change still apply."""
    from tvm.s_tir import meta_schedule as ms  # pylint: disable=import-outside-toplevel

    from tvm_pool import lowering  # pylint: disable=import-outside-toplevel

    @tvm.script.ir_module
    class ConvSilu:
        @R.function
        def main(x: R.Tensor((1, 8, 16, 16), "float32"), w: R.Tensor((8, 8, 3, 3), "float32")):
            with R.dataflow():
                c = R.nn.conv2d(x, w, padding=(1, 1))
                y = R.multiply(c, R.sigmoid(c))
                R.output(y)
            return y

    target = tvm.target.Target({"kind": "llvm", "num-cores": 2})
    tasks = ms.relax_integration.extract_tasks(lowering.fuse(ConvSilu, target), target)
    assert any("T.sigmoid(" in t.dispatched[0].script() for t in tasks)
