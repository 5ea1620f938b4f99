"""Per-PrimFunc "scheduled equals unscheduled" check.

A whole-model comparison says *that* a compiled model is wrong; this says *which function* is.
The Relax module is lowered with ``tvm_pool.lowering.pipeline(target, schedule=False)`` (every
pass up to, not including, the TIR build), then every PrimFunc that the target's tvm_pool rule
schedules (``rules_for(target)``, what ``dlight.ApplyDefaultSchedule`` would apply) is built
twice on its own, unscheduled and scheduled, fed the same random inputs and compared.

``check_module`` returns a list of :class:`Mismatch` (empty when every scheduled function agrees
with its unscheduled self); ``assert_scheduled_equals_unscheduled`` fails naming each function.
"""

from __future__ import annotations

import dataclasses
import warnings
from unittest import mock

import numpy as np
import tvm
from tvm import tirx

import tvm_pool
from tvm_pool import lowering
from tvm_pool.schedules import rules_for
from tvm_pool.schedules.analysis import TOPI_POOL_RULES
from tvm_pool.targets import resolve_target
from helpers import tolerance


@dataclasses.dataclass
class Mismatch:
    symbol: str  # the PrimFunc's global symbol
    param: str  # the buffer that differs ("" when a build or run failed)
    detail: str

    def __str__(self):
        where = f" buffer {self.param}" if self.param else ""
        return f"PrimFunc {self.symbol}{where}: {self.detail}"


@dataclasses.dataclass
class Report:
    checked: list  # global symbols of the scheduled PrimFuncs compared
    unchecked: list  # (symbol, why) scheduled PrimFuncs that could not be run alone
    mismatches: list  # Mismatch

    def summary(self) -> str:
        lines = [str(m) for m in self.mismatches]
        if self.unchecked:
            lines.append("not run alone: " + ", ".join(f"{s} ({why})" for s, why in self.unchecked))
        return "\n".join(lines)

    def diagnosis(self) -> list[str]:
        """What a failing graph's diagnosis says of its scheduled PrimFuncs checked alone."""
        lines = [f"scheduled PrimFuncs checked alone: {', '.join(self.checked) or 'none'}"]
        if self.mismatches or self.unchecked:
            return lines + [self.summary()]
        return lines + ["every scheduled PrimFunc equals its unscheduled self alone"]


def lower_unscheduled(mod: tvm.IRModule, target, conv_layout: str = "auto") -> tvm.IRModule:
    """``mod`` through tvm_pool's Relax pipeline without schedules (no TIR build), its 2-D
    convolutions in ``conv_layout`` ("auto": the layout ``tvm_pool.compile`` chooses for it, so
    the pooling PrimFuncs are those the scheduled build has, channel-last where its are)."""
    target = resolve_target(target)
    if conv_layout == "auto":
        conv_layout = tvm_pool.lowering.choose_conv_layout(mod, target)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return tvm_pool.lowering.pipeline(target, schedule=False, conv_layout=conv_layout)(mod)


def _symbol(gvar, func) -> str:
    sym = func.attrs.get("global_symbol") if func.attrs is not None else None
    return str(sym) if sym is not None else gvar.name_hint


def scheduled_prim_funcs(lowered: tvm.IRModule, target):
    """(symbol, unscheduled PrimFunc, scheduled PrimFunc) for every PrimFunc a rule schedules,
    the rules tried in order as ``ApplyDefaultSchedule`` does."""
    target = resolve_target(target)
    rules = rules_for(target)
    found = []
    for gvar, func in lowered.functions_items():
        if not isinstance(func, tirx.PrimFunc):
            continue
        if func.attrs is not None and "tirx.is_scheduled" in func.attrs:
            continue
        for rule in rules:
            with target:
                sch = rule.apply(func, target, False)
            if sch is None:
                continue
            scheduled = sch.mod["main"] if not isinstance(sch, list) else sch[0].mod["main"]
            found.append((_symbol(gvar, func), func, scheduled))
            break
    return found


def _static_shape(buf):
    dims = []
    for d in buf.shape:
        if not isinstance(d, tirx.IntImm):
            return None
        dims.append(int(d.value))
    return dims


def _buffers(func):
    """The buffer parameters (TVM 0.27's PrimFunc params are the buffers); None when a
    parameter is a scalar (a symbolic size passed in)."""
    bufs = []
    for p in func.params:
        try:
            _ = list(p.shape)
        except Exception:  # noqa: BLE001  (a scalar parameter has no shape)
            return None
        bufs.append(p)
    return bufs


def _np_dtype(dtype: str):
    if dtype == "bfloat16":
        import ml_dtypes  # pylint: disable=import-outside-toplevel

        return ml_dtypes.bfloat16
    if dtype == "bool":
        return np.bool_
    return np.dtype(dtype)


def make_args(func: tirx.PrimFunc, seed: int):
    """Random arrays for every buffer parameter (None when a shape is symbolic).

    Floats: N(0, 1) with repeated values (ties); ints: a permutation folded below the size of the
    smallest float buffer (valid, mostly distinct indices for gathers and unpooling scatters)."""
    rng = np.random.default_rng(seed)
    bufs = _buffers(func)
    if bufs is None:
        return None
    shapes = [_static_shape(b) for b in bufs]
    if any(s is None for s in shapes):
        return None
    float_sizes = [int(np.prod(s)) for b, s in zip(bufs, shapes) if str(b.dtype).startswith(("float", "bfloat"))]
    bound = max(1, min(float_sizes)) if float_sizes else 4
    arrays = []
    for buf, shape in zip(bufs, shapes):
        dtype = str(buf.dtype)
        size = int(np.prod(shape))
        if dtype.startswith(("float", "bfloat")):
            x = rng.standard_normal(size).astype(np.float32)
            if size > 4:
                x[::7] = x[1]  # ties
            arr = x.astype(_np_dtype(dtype))
        elif dtype == "bool":
            arr = rng.integers(0, 2, size=size).astype(np.bool_)
        else:
            limit = max(1, min(bound, int(np.iinfo(dtype).max)))
            arr = (rng.permutation(size) % limit).astype(dtype)
        arrays.append(arr.reshape(shape))
    return arrays


def run_alone(func: tirx.PrimFunc, target, arrays, tir_pipeline: str = "default"):
    """Build ``func`` as the only function of a module (with TVM's TIR pipeline ``tir_pipeline``)
    and run it on copies of ``arrays``."""
    func = func.with_attr("global_symbol", "main")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        lib = tvm.compile(tvm.IRModule({"main": func}), target=resolve_target(target), tir_pipeline=tir_pipeline)
    dev = tvm.cpu()
    tensors = [tvm.runtime.tensor(a.copy(), dev) for a in arrays]
    lib["main"](*tensors)
    return [t.numpy() for t in tensors]


def _differs(got, want) -> str:
    if got.shape != want.shape:
        return f"shape {got.shape} vs {want.shape}"
    if got.dtype.kind in "iub":
        bad = got != want
        if bad.any():
            first = tuple(int(i) for i in np.argwhere(bad)[0])
            return f"{int(bad.sum())} of {bad.size} differ, first at {first}: scheduled {got[first]} unscheduled {want[first]}"
        return ""
    g, w = got.astype(np.float64), want.astype(np.float64)
    rtol, atol = tolerance(got.dtype.name, "unscheduled")
    ok = np.isclose(g, w, rtol=rtol, atol=atol, equal_nan=True)
    if ok.all():
        return ""
    bad = ~ok
    first = tuple(int(i) for i in np.argwhere(bad)[0])
    with np.errstate(invalid="ignore"):
        err = np.nanmax(np.where(bad, np.abs(g - w), 0)) if np.isfinite(g[bad]).all() else float("nan")
    return (f"{int(bad.sum())} of {bad.size} differ (max abs error {err:.3g}), first at {first}: "
            f"scheduled {got[first]} unscheduled {want[first]}")


def check_lowered(lowered: tvm.IRModule, target, seed: int = 0) -> Report:
    return check_pairs(scheduled_prim_funcs(lowered, target), target, seed)


def check_pairs(pairs, target, seed: int = 0, tir_pipeline: str = "default") -> Report:
    """Compare each (symbol, unscheduled, scheduled) PrimFunc pair on the same random inputs, both
    built for ``target`` (this machine: a PrimFunc scheduled for another CPU, aarch64's, runs here
    too) with TVM's TIR pipeline ``tir_pipeline`` (aarch64's adds schedules.strided_loads)."""
    report = Report([], [], [])
    for symbol, plain, scheduled in pairs:
        arrays = make_args(plain, seed)
        if arrays is None:
            report.unchecked.append((symbol, "symbolic shape"))
            continue
        names = [str(b.name) for b in _buffers(plain)]
        want = run_alone(plain, target, arrays, tir_pipeline)
        try:
            got = run_alone(scheduled, target, arrays, tir_pipeline)
        except Exception as err:  # noqa: BLE001  (a scheduled function that does not build is a finding)
            report.mismatches.append(Mismatch(symbol, "", f"scheduled build/run failed: {type(err).__name__}: {str(err)[:300]}"))
            continue
        report.checked.append(symbol)
        for name, g, w in zip(names, got, want):
            detail = _differs(g, w)
            if detail:
                report.mismatches.append(Mismatch(symbol, name, detail))
    return report


def check_module(mod: tvm.IRModule, target, seed: int = 0) -> Report:
    """Lower ``mod`` (a Relax module) without schedules and check every function a rule schedules."""
    return check_lowered(lower_unscheduled(mod, target), target, seed)


def assert_scheduled_equals_unscheduled(mod: tvm.IRModule, target, label: str, seed: int = 0) -> Report:
    report = check_module(mod, target, seed)
    assert not report.mismatches, f"{label}: scheduled PrimFuncs differ from unscheduled:\n{report.summary()}"
    return report


def _is_pooling(func: tvm.tirx.PrimFunc) -> bool:
    text = func.script()
    return '"tvm_pool.kind"' in text or any(f'"{rule}"' in text for rule in TOPI_POOL_RULES)


def compile_scheduled(mod: tvm.IRModule, target) -> tuple[tvm.runtime.Executable, dict]:
    """``mod`` built by tvm_pool.compile for ``target``, and its pooling PrimFuncs (name ->
    function) as they left tvm_pool's schedule pass."""
    seen = {}

    @tvm.transform.module_pass(opt_level=0, name="tvm_pool.test.capture_pools")
    def capture(m, _ctx):
        for gvar, func in m.functions_items():
            if isinstance(func, tvm.tirx.PrimFunc) and _is_pooling(func):
                seen[gvar.name_hint] = func
        return m

    real = lowering.schedule_passes
    with mock.patch.object(lowering, "schedule_passes", lambda t: list(real(t)) + [capture]):
        executable = tvm_pool.compile(mod, target)
    return executable, seen


def assert_pools_exact(mod: tvm.IRModule, target, pools: dict, label: str, run_target=None,
                       pipeline: str = "default") -> None:
    """Each scheduled pooling PrimFunc of ``pools`` (as compile scheduled it for ``target``)
    equals its unscheduled self (``mod`` lowered for ``target`` without schedules), both built
    for ``run_target`` (default ``target``) with the TIR pipeline ``pipeline``."""
    if not pools:
        return
    lowered = {gv.name_hint: f for gv, f in lower_unscheduled(mod, target).functions_items()
               if isinstance(f, tvm.tirx.PrimFunc)}
    missing = sorted(set(pools) - set(lowered))
    assert not missing, f"{label}: pooling PrimFuncs missing from the unscheduled lowering: {missing}"
    report = check_pairs([(name, lowered[name], func) for name, func in sorted(pools.items())],
                         run_target or target, tir_pipeline=pipeline)
    assert not report.mismatches and not report.unchecked, \
        f"{label}: scheduled pooling PrimFuncs differ from unscheduled:\n{report.summary()}"
