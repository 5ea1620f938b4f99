"""``tvm_pool.from_exported_program`` against PyTorch eager, beyond the OpInfo samples.

1. Seeded random cases: max_pool (with and without indices), avg_pool, adaptive avg/max pools
   (with indices), max_unpool and lp_pool over 1-3 spatial dims, batched and unbatched, odd
   sizes, kernel/stride/padding/dilation, ceil_mode (last window dropped in the end padding, or
   just fitting), count_include_pad both ways, divisor_override, adaptive sizes that do not divide
   the input and ``None`` entries, max_unpool with an output larger than the default, lp_pool with
   p in {1, 2, 3, 1.5} (1, 2, 3 over negative inputs: p = 3 gives torch's NaNs), every dtype
   torch's CPU kernels take (probed, not assumed), inputs with NaN, +-inf and ties (indices
   exactly, the last NaN wins), hand-picked edges, model-sized geometries. Several cases go into
   one module: one export and one compile per batch; a batch that fails to import or compile is
   split to name the case. Every case prints as a torch call. What tvm_pool gets wrong today is
   pinned by the regression tests after the sweeps (bfloat16 adaptive argmax, lp_pool's NaN and
   bfloat16 power, unpool's loop sizes); the one open bug (unpool on CUDA) by a strict xfail.
2. A symbolic batch (``torch.export.Dim``): compiled once, run at two batch sizes.
3. Fused graphs exported from torch (conv/relu/mul before the pool, Add with a branch after,
   Concat, a pool used twice, pool then unpool, unbatched inputs): every scheduled pooling
   PrimFunc against its unscheduled self (tests/primfunc_check.py), every pooling PrimFunc
   scheduled by tvm_pool's rule; the same graphs under the aarch64 rule (run on this machine,
   as test_schedules_arm.py does) and the CUDA rule (built for sm_80, simulated on the CPU, as
   test_schedules_cuda.py does).
4. Invalid arguments (through hand-edited graphs where torch.export refuses them first) give a
   one-line tvm_pool error naming the node and the argument; max_unpool's out-of-bounds and
   negative indices raise inside the compiled module, naming the node.
5. Stock TVM's converter gets each of the five cases tvm_pool exists for wrong (or refuses it),
   and tvm_pool's matches torch (in the edge-case batch).

Default: about 90 s on two shared cores; ``-m slow``: 30 random batches (420 cases), every
(kind, rank, dtype) torch takes, and every fused graph under the aarch64 and CUDA rules.
"""

from __future__ import annotations

import dataclasses
import functools
import re
import warnings

import ml_dtypes
import numpy as np
import pytest
pytest.importorskip("torch")  # PyTorch is this file's oracle: skip the file without it
import torch  # noqa: E402
import torch.nn.functional as F
import tvm
import tvm_ffi
from tvm import relax
from tvm.s_tir import SBlock

import tvm_pool
from tvm_pool.block_builders import closed_on_error
from tvm_pool.schedules import analysis
from tvm_pool.targets import resolve_target
from helpers import x86_only
from primfunc_check import check_pairs, lower_unscheduled, scheduled_prim_funcs

# ---------------------------------------------------------------------------------------------
# torch <-> numpy <-> tvm
# ---------------------------------------------------------------------------------------------

FLOATS = ("float32", "float64", "float16", "bfloat16")
INTS = ("int8", "uint8", "int16", "int32", "int64")
TORCH_DTYPE = {name: getattr(torch, name) for name in FLOATS + INTS}

# (rtol, atol) of a value against torch eager: one rounding apart (a sum in another order, a
# division as a multiplication). Integer outputs (indices, integer pools) compare exactly.
TORCH_TOLERANCE = {"float64": (1e-12, 1e-12), "float32": (1e-5, 1e-5), "float16": (2e-3, 2e-3),
                   "bfloat16": (1.6e-2, 1.6e-2)}
# lp_pool is five elementwise ops after the average, each rounding in a half-precision type
LP_FACTOR = 4


def to_numpy(t: torch.Tensor) -> np.ndarray:
    t = t.detach().contiguous()
    if t.dtype == torch.bfloat16:
        return t.view(torch.int16).numpy().view(ml_dtypes.bfloat16)
    return t.numpy()


def to_tvm(t: torch.Tensor):
    return tvm.runtime.tensor(to_numpy(t))


def flat_outputs(out) -> list:
    if isinstance(out, torch.Tensor):
        return [out]
    result = []
    for o in out:
        result += flat_outputs(o)
    return result


def vm_outputs(out) -> list:
    if hasattr(out, "numpy"):
        return [out.numpy()]
    result = []
    for o in out:
        result += vm_outputs(o)
    return result


def compare(got: np.ndarray, want: torch.Tensor, lp=False) -> str:
    """Why ``got`` (tvm_pool's) differs from torch's ``want``; empty when it does not."""
    want_np = to_numpy(want)
    if got.shape != want_np.shape:
        return f"shape {got.shape}, torch {want_np.shape}"
    if np.dtype(got.dtype) != np.dtype(want_np.dtype):
        return f"dtype {got.dtype}, torch {want_np.dtype}"
    if got.dtype.kind in "iub":
        bad = got != want_np
        if bad.any():
            first = tuple(int(i) for i in np.argwhere(bad)[0])
            return f"{int(bad.sum())} of {bad.size} differ, first at {first}: {got[first]}, torch {want_np[first]}"
        return ""
    g, w = got.astype(np.float64), want_np.astype(np.float64)
    nan_g, nan_w = np.isnan(g), np.isnan(w)
    if (nan_g != nan_w).any():
        first = tuple(int(i) for i in np.argwhere(nan_g != nan_w)[0])
        count = int((nan_g != nan_w).sum())
        return f"NaN positions differ ({count}), first at {first}: {got[first]}, torch {want_np[first]}"
    rtol, atol = TORCH_TOLERANCE[str(got.dtype)]
    if lp and str(got.dtype) in ("float16", "bfloat16"):
        rtol, atol = rtol * LP_FACTOR, atol * LP_FACTOR
    ok = np.isclose(g, w, rtol=rtol, atol=atol, equal_nan=True)  # an infinity only equals itself
    if not ok.all():
        first = tuple(int(i) for i in np.argwhere(~ok)[0])
        with np.errstate(invalid="ignore"):
            err = np.nanmax(np.where(ok, 0, np.abs(g - w)))
        return (f"{int((~ok).sum())} of {ok.size} differ (max abs error {err:.3g}), first at {first}: "
                f"{got[first]}, torch {want_np[first]}")
    return ""


# ---------------------------------------------------------------------------------------------
# cases and batches
# ---------------------------------------------------------------------------------------------


@dataclasses.dataclass
class Case:
    text: str  # the torch call, readable (printed on failure)
    fn: object  # torch function of the inputs -> tensor or tuple
    inputs: list  # torch tensors
    lp: bool = False

    def describe(self) -> str:
        shapes = ", ".join(f"{list(t.shape)} {str(t.dtype).split('.')[-1]}" for t in self.inputs)
        return f"{self.text}  [inputs: {shapes}]"


class Batch(torch.nn.Module):
    """Every case's function over its own inputs, outputs concatenated."""

    def __init__(self, cases):
        super().__init__()
        self.fns = [c.fn for c in cases]
        self.counts = [len(c.inputs) for c in cases]

    def forward(self, *xs):
        outs, at = [], 0
        for fn, n in zip(self.fns, self.counts):
            outs += flat_outputs(fn(*xs[at : at + n]))
            at += n
        return tuple(outs)


def export(cases, dynamic_shapes=None):
    inputs = tuple(t for c in cases for t in c.inputs)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return torch.export.export(Batch(cases), inputs, dynamic_shapes=dynamic_shapes)


def import_cases(cases) -> tvm.IRModule:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return tvm_pool.from_exported_program(export(cases))


def compile_and_run(mod, inputs, target="llvm", schedule=True) -> list:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ex = tvm_pool.compile(mod, target=target, schedule=schedule)
    vm = relax.VirtualMachine(ex, tvm.cpu())
    return vm_outputs(vm["main"](*[to_tvm(t) for t in inputs]))


def _problems(cases, got) -> list[str]:
    problems, at = [], 0
    for case in cases:
        want = flat_outputs(case.fn(*case.inputs))
        mine = got[at : at + len(want)]
        at += len(want)
        for i, (g, w) in enumerate(zip(mine, want)):
            why = compare(g, w, lp=case.lp)
            if why:
                problems.append(f"{case.describe()}\n    output {i}: {why}")
    return problems


def run_cases(cases, label: str) -> None:
    """Export, import and compile ``cases`` as one module, run it, compare every output with
    torch eager; a batch that does not import or compile is tried case by case."""
    inputs = [t for c in cases for t in c.inputs]
    try:
        got = compile_and_run(import_cases(cases), inputs)
        problems = _problems(cases, got)
    except Exception:  # noqa: BLE001  (find the case that does not import or compile)
        problems = []
        for case in cases:
            try:
                problems += _problems([case], compile_and_run(import_cases([case]), case.inputs))
            except Exception as err:  # noqa: BLE001
                problems.append(f"{case.describe()}\n    failed: {type(err).__name__}: {str(err)[:400]}")
    assert not problems, f"{label}: {len(problems)} outputs differ from torch:\n" + "\n".join(problems)


# ---------------------------------------------------------------------------------------------
# the generator
# ---------------------------------------------------------------------------------------------

KINDS = ("max", "max_indices", "avg", "adaptive_avg", "adaptive_max", "adaptive_max_indices", "unpool",
         "pool_unpool", "lp")


def _probe_fn(kind, rank):
    if kind in ("max", "max_indices"):
        return lambda x: getattr(F, f"max_pool{rank}d")(x, 2, return_indices=kind == "max_indices")
    if kind == "avg":
        return lambda x: getattr(F, f"avg_pool{rank}d")(x, 2)
    if kind == "adaptive_avg":
        return lambda x: getattr(F, f"adaptive_avg_pool{rank}d")(x, 3)
    if kind.startswith("adaptive_max"):
        return lambda x: getattr(F, f"adaptive_max_pool{rank}d")(x, 3, return_indices=kind.endswith("indices"))
    if kind in ("unpool", "pool_unpool"):
        return lambda x: getattr(F, f"max_unpool{rank}d")(x, torch.zeros(x.shape, dtype=torch.int64), 2)
    return lambda x: getattr(F, f"lp_pool{rank}d")(x, 2.0, 2)


# (kind, dtype) pairs tvm_pool gets wrong today: left out of the sweeps, each pinned by a
# strict xfail below (test_known_bug_*), so a fix shows up as an XPASS.
KNOWN_BUGS: set = set()


def torch_dtypes(kind: str, rank: int) -> tuple:
    """The dtypes the sweeps use: what torch takes, less :data:`KNOWN_BUGS`."""
    return tuple(d for d in torch_takes(kind, rank) if (kind, d) not in KNOWN_BUGS)


@functools.cache
def torch_takes(kind: str, rank: int) -> tuple:
    """The dtypes torch's CPU kernel takes for ``kind`` over ``rank`` spatial dims (asked, not
    assumed: max_pool takes integers only with indices, avg_pool int64, avg_pool3d no halves).
    lp_pool is compared in floats only (its int64 form is a float power of an integer average)."""
    names = FLOATS if kind == "lp" else FLOATS + INTS
    ok = []
    for name in names:
        x = torch.ones((1, 2) + (6,) * rank).to(TORCH_DTYPE[name])
        try:
            _probe_fn(kind, rank)(x)
        except (RuntimeError, NotImplementedError):
            continue
        ok.append(name)
    return tuple(ok)


def _ints(rng, lo, hi, n):
    return [int(v) for v in rng.integers(lo, hi, size=n, endpoint=True)]


def _arg(values, rng=None):
    """An int when every axis agrees (half the time with ``rng``), else a tuple: both forms
    reach torch."""
    one = len(set(values)) == 1 and (rng is None or rng.random() < 0.5)
    return values[0] if one else tuple(values)


def _out_size(n, k, s, p, d, ceil):
    eff = d * (k - 1) + 1
    span = n + 2 * p - eff
    if span < 0:
        return 0
    out = -(-span // s) + 1 if ceil else span // s + 1
    if ceil and (out - 1) * s >= n + p:
        out -= 1
    return out


def random_input(rng, shape, dtype, kind, special=True) -> torch.Tensor:
    """Data for ``kind``: ties (few distinct values) and, for the max pools, NaN / +-inf; the
    lowest integer (the padding's value) in integer max pools; negative integers in int64
    averages (truncation toward zero); multiples of 1/4 for lp_pool (exact powers, exact signs)."""
    size = int(np.prod(shape))
    maxish = kind in ("max", "max_indices", "adaptive_max", "adaptive_max_indices", "pool_unpool")
    if dtype in INTS:
        info = np.iinfo(dtype)
        if maxish:
            pool = np.concatenate([rng.integers(info.min, info.max, size=6, endpoint=True), [info.min, info.max, 0]])
            x = rng.choice(pool[(pool >= info.min) & (pool <= info.max)], size=size)
        else:
            x = rng.integers(-60, 61, size=size)
        return torch.from_numpy(np.asarray(x).astype(dtype).reshape(shape))
    if kind == "lp":
        x = rng.integers(-8, 9, size=size) / 4.0
    elif maxish:
        x = rng.integers(-4, 5, size=size) / 2.0
        if special and rng.random() < 0.6:
            u = rng.random(size)
            x[u < 0.08] = np.nan
            x[(u >= 0.08) & (u < 0.13)] = -np.inf
            x[(u >= 0.13) & (u < 0.16)] = np.inf
    else:
        x = rng.standard_normal(size) * 2
    return torch.from_numpy(x.reshape(shape)).to(TORCH_DTYPE[dtype])


def _lead(rng, batched):
    return [int(rng.integers(1, 3)), int(rng.integers(1, 4))] if batched else [int(rng.integers(1, 4))]


SIZE_RANGE = {1: (3, 14), 2: (3, 10), 3: (2, 6)}


def _window(rng, kind, spatial):
    """Kernel, stride (None: the kernel), padding, dilation, ceil_mode giving outputs >= 1."""
    rank = len(spatial)
    for _ in range(200):
        k = _ints(rng, 1, 4, rank)
        s = _ints(rng, 1, 3, rank)
        d = _ints(rng, 1, 2, rank) if kind in ("max", "max_indices") and rng.random() < 0.3 else [1] * rank
        if kind == "lp":
            p = [0] * rank
        elif kind == "avg":
            p = [int(rng.integers(0, kk // 2 + 1)) for kk in k]
        else:
            p = [int(rng.integers(0, (dd * (kk - 1) + 1) // 2 + 1)) for kk, dd in zip(k, d)]
        ceil = bool(rng.random() < 0.5)
        default_stride = rng.random() < 0.2
        if default_stride:
            s = list(k)
        outs = [_out_size(n, *a, ceil) for n, a in zip(spatial, zip(k, s, p, d))]
        if min(outs) >= 1:
            return k, (None if default_stride else s), p, d, ceil
    raise AssertionError("no window fits")  # pragma: no cover


def random_case(rng, kind=None, dtype=None, rank=None, batched=None) -> Case:
    """A random case torch eager computes (a few geometries torch refuses are drawn again:
    avg_pool3d wants the input at least the kernel before padding)."""
    for _ in range(50):
        case = _random_case(rng, kind, dtype, rank, batched)
        try:
            flat_outputs(case.fn(*case.inputs))
        except RuntimeError:
            continue
        return case
    raise AssertionError("torch refuses every case drawn")  # pragma: no cover


def _random_case(rng, kind, dtype, rank, batched) -> Case:
    kind = kind or str(rng.choice(KINDS))
    rank = rank or int(rng.choice([1, 2, 2, 3]))
    dtypes = torch_dtypes(kind, rank)
    if dtype is None:
        dtype = "float32" if rng.random() < 0.45 or len(dtypes) == 1 else str(rng.choice(dtypes[1:]))
    assert dtype in dtypes, (kind, rank, dtype, dtypes)
    batched = bool(rng.random() < 0.7) if batched is None else batched
    lead = _lead(rng, batched)
    spatial = _ints(rng, *SIZE_RANGE[rank], rank)
    shape = lead + spatial
    name = f"{rank}d"
    if kind in ("max", "max_indices", "avg", "lp"):
        k, s, p, d, ceil = _window(rng, kind, spatial)
        stride = None if s is None else _arg(s, rng)
        if kind == "lp":
            # p = 1.5 over a negative input: x ** 1.5 is NaN before the average (test_lp_nan_is_kept);
            # lp_pool1d takes only an int kernel_size (it multiplies by it)
            norm = float(rng.choice([1.0, 2.0, 3.0, 1.5]))
            kernel = k[0] if rank == 1 else _arg(k, rng)
            kw = dict(norm_type=norm, kernel_size=kernel, stride=stride, ceil_mode=ceil)
            op = f"lp_pool{name}"
        elif kind == "avg":
            kw = dict(kernel_size=_arg(k, rng), stride=stride, padding=_arg(p, rng), ceil_mode=ceil,
                      count_include_pad=bool(rng.random() < 0.5))
            if rank > 1 and rng.random() < 0.35:  # avg_pool1d has no divisor_override
                kw["divisor_override"] = int(rng.integers(1, 12))
            op = f"avg_pool{name}"
        else:
            kw = dict(kernel_size=_arg(k, rng), stride=stride, padding=_arg(p, rng), dilation=_arg(d, rng),
                      ceil_mode=ceil, return_indices=kind == "max_indices")
            op = f"max_pool{name}"
        x = random_input(rng, shape, dtype, kind)
        fn = functools.partial(getattr(F, op), **kw)
        return Case(f"F.{op}(x, {_kwtext(kw)})", fn, [x], lp=kind == "lp")
    if kind.startswith("adaptive"):
        size = []
        for n in spatial:
            r = rng.random()
            size.append(None if r < 0.15 else int(rng.integers(1, n + 3)))
        if all(v is not None for v in size) and len(set(size)) == 1 and rng.random() < 0.5:
            size_arg = size[0]
        else:
            size_arg = tuple(size) if rank > 1 else (size[0] if size[0] is not None else spatial[0])
        if kind == "adaptive_avg":
            op, kw = f"adaptive_avg_pool{name}", dict(output_size=size_arg)
        else:
            op, kw = f"adaptive_max_pool{name}", dict(output_size=size_arg, return_indices=kind.endswith("indices"))
        x = random_input(rng, shape, dtype, kind)
        return Case(f"F.{op}(x, {_kwtext(kw)})", functools.partial(getattr(F, op), **kw), [x])
    if kind == "pool_unpool":
        return _pool_unpool_case(rng, lead, spatial, dtype, name)
    return _unpool_case(rng, lead, spatial, dtype, name)


def _kwtext(kw) -> str:
    return ", ".join(f"{k}={v!r}" for k, v in kw.items())


def _unpool_sizes(rng, spatial_in, k, s, p, at_least=None):
    """An output_size torch accepts (within (default - s, default + s)), mostly above the default."""
    sizes = []
    for i, (n, kk, ss, pp) in enumerate(zip(spatial_in, k, s, p)):
        default = (n - 1) * ss + kk - 2 * pp
        low = max(default - ss + 1, 1, at_least[i] if at_least else 1)
        high = default + ss - 1
        sizes.append(int(rng.integers(max(low, default), high + 1)) if high >= max(low, default) else max(low, default))
    return sizes


def _unpool_case(rng, lead, spatial, dtype, name) -> Case:
    """max_unpool over given indices: distinct positions of each output plane, in any order."""
    rank = len(spatial)
    for _ in range(100):
        k, s = _ints(rng, 1, 3, rank), _ints(rng, 1, 3, rank)
        p = [int(rng.integers(0, kk // 2 + 1)) for kk in k]
        size = _unpool_sizes(rng, spatial, k, s, p)
        plane_in, plane_out = int(np.prod(spatial)), int(np.prod(size))
        if min(size) >= 1 and plane_out >= plane_in:
            break
    else:  # pragma: no cover
        raise AssertionError("no unpool geometry")
    planes = int(np.prod(lead))
    idx = np.stack([rng.permutation(plane_out)[:plane_in] for _ in range(planes)]).reshape(lead + spatial)
    x = random_input(rng, lead + spatial, dtype, "unpool")
    op = f"max_unpool{name}"
    kw = dict(kernel_size=_arg(k, rng), stride=_arg(s, rng), padding=_arg(p, rng), output_size=size)
    return Case(f"F.{op}(x, indices, {_kwtext(kw)})", functools.partial(getattr(F, op), **kw),
                [x, torch.from_numpy(idx.astype(np.int64))])


def _pool_unpool_case(rng, lead, spatial, dtype, name) -> Case:
    """max_pool with indices, then max_unpool of it to an output_size at least the input's."""
    rank = len(spatial)
    for _ in range(200):
        k, s = _ints(rng, 1, 3, rank), _ints(rng, 1, 3, rank)
        p = [int(rng.integers(0, kk // 2 + 1)) for kk in k]
        pooled = [_out_size(n, kk, ss, pp, 1, False) for n, kk, ss, pp in zip(spatial, k, s, p)]
        if min(pooled) < 1:
            continue
        default = [(m - 1) * ss + kk - 2 * pp for m, kk, ss, pp in zip(pooled, k, s, p)]
        if all(dft - ss < n < dft + ss for n, dft, ss in zip(spatial, default, s)):
            size = [max(n, int(rng.integers(n, dft + ss))) for n, dft, ss in zip(spatial, default, s)]
            if int(np.prod(size)) >= int(np.prod(spatial)):
                break
    else:  # pragma: no cover
        raise AssertionError("no pool/unpool geometry")
    pool_kw = dict(kernel_size=_arg(k, rng), stride=_arg(s, rng), padding=_arg(p, rng), return_indices=True)
    unpool_kw = dict(kernel_size=_arg(k, rng), stride=_arg(s, rng), padding=_arg(p, rng), output_size=size)
    pool, unpool = getattr(F, f"max_pool{name}"), getattr(F, f"max_unpool{name}")

    def fn(x):
        v, i = pool(x, **pool_kw)
        return v, i, unpool(v, i, **unpool_kw)

    x = random_input(rng, lead + spatial, dtype, "pool_unpool")
    return Case(f"v, i = F.max_pool{name}(x, {_kwtext(pool_kw)}); F.max_unpool{name}(v, i, {_kwtext(unpool_kw)})",
                fn, [x])


def random_batch(seed: int, count: int) -> list[Case]:
    rng = np.random.default_rng(seed)
    cases = []
    for i in range(count):
        case = random_case(rng)
        case.text = f"[seed {seed} case {i}] {case.text}"
        cases.append(case)
    return cases


# ---------------------------------------------------------------------------------------------
# 1. random cases, edges, dtypes
# ---------------------------------------------------------------------------------------------

CASES_PER_BATCH = 14


@pytest.mark.parametrize("seed", [11])
def test_random_cases(seed):
    run_cases(random_batch(seed, CASES_PER_BATCH), f"seed {seed}")


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(1000, 1030))
def test_random_cases_large(seed):
    run_cases(random_batch(seed, CASES_PER_BATCH), f"seed {seed}")


X4 = torch.from_numpy((np.random.default_rng(9).integers(-8, 9, size=(1, 2, 6, 6)) / 4).astype("float32"))
ISSUE_CASES = {
    "max_pool_indices": (lambda x: F.max_pool2d(x, 2, 2, return_indices=True), X4),
    "divisor_override": (lambda x: F.avg_pool2d(x, 2, divisor_override=3), X4),
    "adaptive_max_pool": (lambda x: F.adaptive_max_pool2d(x, 3), X4),
    "indices_default_stride": (lambda x: F.max_pool2d(x, 3, padding=1, return_indices=True), X4),
    "adaptive_avg_pool1d_unbatched": (lambda x: F.adaptive_avg_pool1d(x, 3), X4[0, 0]),
}


def _edge_cases() -> list[Case]:
    """Hand-picked geometries and data."""
    nan, inf = float("nan"), float("inf")
    cases = []
    g = torch.Generator().manual_seed(0)

    def randn(*shape):
        return torch.randn(*shape, generator=g)

    def add(text, fn, *inputs, lp=False):
        cases.append(Case(text, fn, list(inputs), lp=lp))

    # ceil_mode: the last window would start in the end padding (dropped: 3 outputs, not 4) ...
    x5 = torch.arange(10.0).reshape(2, 5) * torch.tensor([1.0, -1.0]).reshape(2, 1)
    add("max_pool1d k2 s2 p1 ceil on 5 (window in the end padding dropped)",
        lambda x: F.max_pool1d(x, 2, 2, 1, ceil_mode=True, return_indices=True), x5)
    add("avg_pool1d k2 s2 p1 ceil on 5, count_include_pad",
        lambda x: F.avg_pool1d(x, 2, 2, 1, ceil_mode=True, count_include_pad=True), x5)
    # ... and where it just fits (starts on the last element: 4 outputs), the overhang not counted
    x6 = torch.arange(12.0).reshape(2, 6) - 5
    add("max_pool1d k2 s2 p1 ceil on 6 (last window just fits)",
        lambda x: F.max_pool1d(x, 2, 2, 1, ceil_mode=True, return_indices=True), x6)
    add("avg_pool1d k3 s2 p1 ceil on 6, count_include_pad (overhang past the padding not counted)",
        lambda x: F.avg_pool1d(x, 3, 2, 1, ceil_mode=True, count_include_pad=True), x6)
    add("avg_pool1d k3 s2 p1 ceil on 6, not count_include_pad",
        lambda x: F.avg_pool1d(x, 3, 2, 1, ceil_mode=True, count_include_pad=False), x6)
    x2 = randn(1, 2, 7, 8)
    add("avg_pool2d k3 s2 p1 ceil, count_include_pad, divisor_override=4",
        lambda x: F.avg_pool2d(x, 3, 2, 1, ceil_mode=True, count_include_pad=True, divisor_override=4), x2)
    add("avg_pool3d unbatched k2 s3 ceil (last window overhangs), divisor_override=7",
        lambda x: F.avg_pool3d(x, 2, 3, 0, ceil_mode=True, divisor_override=7), randn(2, 5, 4, 7))
    # int64 average: truncation toward zero, with and without divisor_override
    xi = torch.tensor([[[[-7, 2, 5], [1, -1, -9], [4, 4, 4]]]])
    add("avg_pool2d int64 k2 s1", lambda x: F.avg_pool2d(x, 2, 1), xi)
    add("avg_pool2d int64 k2 s1 p1 ceil, divisor_override=3",
        lambda x: F.avg_pool2d(x, 2, 1, 1, ceil_mode=True, divisor_override=3), xi)
    # NaN: the last NaN in scan order wins; -inf everywhere: the first real element; ties: the first
    xn = torch.tensor([[[[1.0, nan, 3.0, nan], [nan, 2.0, 3.0, 3.0], [-inf, -inf, 5.0, 5.0], [-inf, -inf, nan, 1.0]]]])
    add("max_pool2d k2 s1 p1 (NaNs, ties, -inf)", lambda x: F.max_pool2d(x, 2, 1, 1, return_indices=True), xn)
    add("max_pool2d k3 s2 p1 d1 ceil (NaNs, ties, -inf)",
        lambda x: F.max_pool2d(x, 3, 2, 1, ceil_mode=True, return_indices=True), xn)
    add("adaptive_max_pool2d (3, 2) (NaNs, ties, -inf)",
        lambda x: F.adaptive_max_pool2d(x, (3, 2), return_indices=True), xn)
    add("adaptive_max_pool2d (None, 3) (NaNs)", lambda x: F.adaptive_max_pool2d(x, (None, 3), return_indices=True), xn)
    # (xn's corner windows, padded with p=1, see only padding and -inf: the first real element's index)
    add("adaptive_max_pool2d of -inf", lambda x: F.adaptive_max_pool2d(x, 2, return_indices=True),
        torch.full((1, 3, 3), -inf))
    # integer extremes: the padding's value (the lowest) ties with real elements
    low = torch.full((1, 1, 3, 3), -128, dtype=torch.int8)
    add("max_pool2d int8 all -128, padded", lambda x: F.max_pool2d(x, 2, 2, 1, return_indices=True), low)
    big = torch.tensor([[[-(2**62), 2**62, -(2**63), 2**63 - 1, 5]]])
    add("max_pool1d int64 extremes", lambda x: F.max_pool1d(x, 2, 1, 1, return_indices=True), big)
    # adaptive sizes that do not divide, larger than the input, None entries, unbatched
    x3 = randn(2, 3, 5, 7, 4)
    add("adaptive_avg_pool3d (4, None, 3)", lambda x: F.adaptive_avg_pool3d(x, (4, None, 3)), x3)
    add("adaptive_avg_pool3d (7, 9, 5) (larger than the input)", lambda x: F.adaptive_avg_pool3d(x, (7, 9, 5)), x3)
    add("adaptive_max_pool3d unbatched (2, 3, None)",
        lambda x: F.adaptive_max_pool3d(x[0], (2, 3, None), return_indices=True), x3)
    add("adaptive_avg_pool1d unbatched 3 of 7", lambda x: F.adaptive_avg_pool1d(x, 3), randn(4, 7))
    add("adaptive_max_pool1d unbatched 4 of 9", lambda x: F.adaptive_max_pool1d(x, 4, return_indices=True),
        randn(2, 9))
    # lp_pool: p = 1, 2, 3 over negative inputs (p = 3: the cube root of a negative mean is
    # torch's NaN; p = 1: a negative result), p = 1.5 over negatives too (NaN: test_lp_nan_is_kept)
    xl = torch.tensor([[[-1.0, -2.0, 0.5, 3.0, -0.25, 1.0, 2.0]]])
    for p in (1.0, 2.0, 3.0):
        add(f"lp_pool1d p={p} k2 s2 ceil over negatives", lambda x, p=p: F.lp_pool1d(x, p, 2, 2, ceil_mode=True), xl,
            lp=True)
    add("lp_pool1d p=1.5 k3 s2 ceil", lambda x: F.lp_pool1d(x, 1.5, 3, 2, ceil_mode=True), xl.abs(), lp=True)
    add("lp_pool1d p=1.5 k3 s2 ceil over negatives", lambda x: F.lp_pool1d(x, 1.5, 3, 2, ceil_mode=True), xl, lp=True)
    add("lp_pool2d p=3 k2 s1 over negatives",
        lambda x: F.lp_pool2d(x, 3.0, 2, 1), torch.tensor([[[[-1.0, -1.0, 2.0], [-1.0, -1.0, 2.0]]]]), lp=True)
    add("lp_pool3d p=2 k(1,2,2) ceil", lambda x: F.lp_pool3d(x, 2.0, (1, 2, 2), ceil_mode=True),
        randn(1, 2, 2, 3, 5), lp=True)
    # max_unpool with output_size larger than the default, batched and unbatched, 1-3 dims
    xu = randn(2, 3, 9, 11)

    def pool_unpool2d(x):
        v, i = F.max_pool2d(x, 2, 2, return_indices=True)
        return v, i, F.max_unpool2d(v, i, 2, 2, output_size=x.shape[-2:])

    add("max_pool2d k2 s2 on 9x11, max_unpool2d to 9x11 (default 8x10)", pool_unpool2d, xu)

    def pool_unpool1d(x):
        v, i = F.max_pool1d(x, 3, 2, 1, return_indices=True)
        return F.max_unpool1d(v, i, 3, 2, 1, output_size=[x.shape[-1]])

    add("max_pool1d/max_unpool1d unbatched k3 s2 p1 on 10, output 10 (default 9)", pool_unpool1d, randn(3, 10))

    # default stride (the ATen call carries stride=[])
    add("avg_pool2d k3 padding=1 (default stride)", lambda x: F.avg_pool2d(x, 3, padding=1), x2)
    # the five cases stock TVM gets wrong (test_stock_tvm_gets_the_issue_cases_wrong)
    for name, (fn, x) in ISSUE_CASES.items():
        add(f"issue case {name}", fn, x)
    return cases


def test_edge_cases():
    run_cases(_edge_cases(), "edge cases")


def _model_sized_cases() -> list[Case]:
    """Geometries of real models, large enough for the schedules' vector, block-sum and doubling
    paths (the random cases are small)."""
    g = torch.Generator().manual_seed(5)

    def r(*shape, dtype=torch.float32):
        x = (torch.randint(-16, 17, shape, generator=g) / 8).to(dtype)
        return x

    stem = r(2, 16, 56, 56)
    stem.view(-1)[::97] = float("nan")
    return [
        Case("ResNet stem: F.max_pool2d(x, 3, 2, 1, return_indices=True) with NaNs",
             lambda x: F.max_pool2d(x, 3, 2, 1, return_indices=True), [stem]),
        Case("F.adaptive_avg_pool2d(x, (1, 1)) (classifier head)", lambda x: F.adaptive_avg_pool2d(x, (1, 1)),
             [r(2, 64, 7, 7)]),
        Case("F.avg_pool1d(x, 64, 32, ceil_mode=True) (a long window)",
             lambda x: F.avg_pool1d(x, 64, 32, ceil_mode=True), [r(2, 3, 1000)]),
        Case("F.max_pool1d(x, 33, 1, 16) (a long max, stride 1)", lambda x: F.max_pool1d(x, 33, 1, 16),
             [r(1, 3, 200)]),
        Case("F.avg_pool2d(x, 2, 2) float16", lambda x: F.avg_pool2d(x, 2, 2), [r(1, 32, 28, 28, dtype=torch.float16)]),
        Case("F.max_pool3d(x, (1, 3, 3), (1, 2, 2), (0, 1, 1)) (video)",
             lambda x: F.max_pool3d(x, (1, 3, 3), (1, 2, 2), (0, 1, 1)), [r(1, 4, 3, 27, 27)]),
    ]


def test_model_sized_cases():
    run_cases(_model_sized_cases(), "model-sized")


def _dtype_cases(kinds) -> list[Case]:
    rng = np.random.default_rng(7)
    cases = []
    for kind in kinds:
        for rank in (1, 2, 3):
            for dtype in torch_dtypes(kind, rank):
                if dtype == "float32":
                    continue  # most random cases are float32 already
                case = random_case(rng, kind=kind, dtype=dtype, rank=rank)
                case.text = f"[{kind} {rank}d {dtype}] {case.text}"
                cases.append(case)
    return cases


DTYPE_GROUPS = {
    "max": ("max", "max_indices"),
    "avg_lp": ("avg", "lp"),
    "adaptive": ("adaptive_avg", "adaptive_max", "adaptive_max_indices"),
    "unpool": ("unpool", "pool_unpool"),
}

# One case per dtype and kind family (float32 aside) in the default suite; every kind, rank and
# dtype torch takes with -m slow.
DTYPE_SAMPLE = [
    ("max_indices", 2, "float16"), ("adaptive_avg", 3, "float16"), ("lp", 1, "float16"), ("unpool", 1, "float16"),
    ("avg", 2, "bfloat16"), ("adaptive_max", 2, "bfloat16"), ("pool_unpool", 2, "bfloat16"),
    ("adaptive_max_indices", 3, "float64"), ("pool_unpool", 3, "float64"), ("max_indices", 3, "int8"),
    ("max", 2, "uint8"), ("max_indices", 2, "int32"), ("avg", 3, "int64"), ("max_indices", 1, "int64"),
]


def test_dtypes():
    """A case for each dtype and kind family torch's CPU kernels take."""
    rng = np.random.default_rng(8)
    cases = []
    for kind, rank, dtype in DTYPE_SAMPLE:
        case = random_case(rng, kind=kind, dtype=dtype, rank=rank)
        case.text = f"[{kind} {rank}d {dtype}] {case.text}"
        cases.append(case)
    run_cases(cases, "dtypes")


@pytest.mark.slow
@pytest.mark.parametrize("group", sorted(DTYPE_GROUPS))
def test_every_dtype_torch_takes(group):
    """Each kind, rank and dtype torch's CPU kernel takes (float32 aside): one random case."""
    cases = _dtype_cases(DTYPE_GROUPS[group])
    assert cases
    run_cases(cases, f"dtypes {group}")


def test_dtype_table_is_torchs():
    """The dtypes probed are what torch's CPU kernels take today (if torch widens one, the
    sweep follows; this pins what the sweep covers)."""
    assert set(INTS) <= set(torch_takes("max_indices", 2)) and not set(INTS) & set(torch_takes("max", 1))
    assert "int64" in torch_takes("avg", 2) and "int8" not in torch_takes("avg", 2)
    assert set(FLOATS) <= set(torch_takes("adaptive_max_indices", 3))
    assert "float16" not in torch_takes("avg", 3)
    assert {kind for kind, _ in KNOWN_BUGS} <= set(KINDS)


def _as_list(value, rank):
    return [value] * rank if isinstance(value, int) else list(value)


def _features(case) -> set[str]:
    """What a generated case exercises (for the coverage check of the generator)."""
    found = {str(t.dtype).split(".")[-1] for t in case.inputs}
    text = case.text
    op = re.search(r"F\.(\w+?)(\d)d\(", text)
    name, rank = op.group(1), int(op.group(2))
    found |= {name, f"{rank}d"}
    x = case.inputs[0]
    found.add("batched" if x.dim() == rank + 2 else "unbatched")
    if x.is_floating_point() and torch.isnan(x).any():
        found.add("nan")
    kw = getattr(case.fn, "keywords", None)
    if kw is None:  # pool then unpool
        return found | {"pool_unpool"}
    for key in ("count_include_pad", "return_indices"):
        if key in kw:
            found.add(f"{key}={kw[key]}")
    if kw.get("divisor_override"):
        found.add("divisor_override")
    if "norm_type" in kw:
        found.add(f"p={kw['norm_type']}")
    spatial = list(x.shape[-rank:])
    if "output_size" in kw and "adaptive" in name:
        size = _as_list(kw["output_size"], rank)
        found |= {"adaptive None"} if None in size else set()
        for n, o in zip(spatial, size):
            if o is not None and n % o:
                found.add("adaptive not dividing")
            if o is not None and o > n:
                found.add("adaptive larger")
        return found
    k = _as_list(kw["kernel_size"], rank)
    s = k if kw.get("stride") is None else _as_list(kw["stride"], rank)
    if kw.get("stride") is None:
        found.add("default stride")
    p = _as_list(kw.get("padding", 0), rank)
    d = _as_list(kw.get("dilation", 1), rank)
    if max(d) > 1:
        found.add("dilation")
    if "unpool" in name:
        size = kw["output_size"]
        found |= {"unpool above default"} if any(o > (n - 1) * ss + kk - 2 * pp for o, n, ss, kk, pp in zip(
            size, spatial, s, k, p)) else set()
        return found
    if kw.get("ceil_mode"):
        for n, kk, ss, pp, dd in zip(spatial, k, s, p, d):
            eff = dd * (kk - 1) + 1
            raw = -(-(n + 2 * pp - eff) // ss) + 1
            last = (raw - 1) * ss
            if last >= n + pp:
                found.add("ceil: window in the end padding dropped")
            elif last == n + pp - 1:
                found.add("ceil: last window starts on the last element")
            elif last + eff > n + 2 * pp:
                found.add("ceil: last window overhangs the padding")
    return found


def test_generator_covers_the_cases():
    """The random cases (the default seed and the slow ones) exercise what this file promises."""
    found = set()
    for seed in [11, *range(1000, 1030)]:
        for case in random_batch(seed, CASES_PER_BATCH):
            found |= _features(case)
    want = {"max_pool", "avg_pool", "lp_pool", "adaptive_avg_pool", "adaptive_max_pool", "max_unpool", "pool_unpool",
            "1d", "2d", "3d", "batched", "unbatched", "nan", *FLOATS, *INTS, "count_include_pad=True",
            "count_include_pad=False", "return_indices=True", "return_indices=False", "divisor_override", "p=1.0",
            "p=2.0", "p=3.0", "p=1.5", "adaptive None", "adaptive not dividing", "adaptive larger",
            "default stride", "dilation", "unpool above default", "ceil: window in the end padding dropped",
            "ceil: last window starts on the last element", "ceil: last window overhangs the padding"}
    assert want <= found, sorted(want - found)
    assert {"nan", "unbatched", "divisor_override", "return_indices=True"} <= set().union(
        *(_features(c) for c in random_batch(11, CASES_PER_BATCH)))


def test_comparison_is_not_vacuous():
    """An index off by one, a NaN lost, a value off by more than the tolerance are all reported."""
    want = torch.tensor([[1.0, float("nan"), 3.0]])
    assert compare(to_numpy(want), want) == ""
    assert "NaN positions" in compare(np.array([[1.0, 0.0, 3.0]], "float32"), want)
    assert "differ" in compare(np.array([[1.0, float("nan"), 3.001]], "float32"), want)
    assert compare(np.array([[1.0, float("nan"), 3.0 + 1e-7]], "float32"), want) == ""
    idx = torch.tensor([4, 7])
    assert "differ" in compare(np.array([4, 8], "int64"), idx)
    assert "dtype" in compare(np.array([4.0, 7.0], "float32"), idx)
    half = torch.tensor([1.0, 2.0]).bfloat16()
    assert compare(to_numpy(half), half) == "" and "differ" in compare(np.array([1.0, 2.1], "float32").astype(
        ml_dtypes.bfloat16), half)


def test_adaptive_max_indices_bfloat16_builds():
    x = torch.randn(1, 1, 4, 4, generator=torch.Generator().manual_seed(0)).bfloat16()
    run_cases([Case("F.adaptive_max_pool2d(x, 2, return_indices=True)",
                    lambda x: F.adaptive_max_pool2d(x, 2, return_indices=True), [x])], "bfloat16 adaptive max")


def test_lp_nan_is_kept():
    x = torch.tensor([[[-1.0, 4.0, 0.25, 1.0]]])
    run_cases([Case("F.lp_pool1d(x, 1.5, 2)", lambda x: F.lp_pool1d(x, 1.5, 2), [x], lp=True)], "lp_pool p=1.5")


def test_lp_bfloat16_builds():
    x = torch.rand(1, 2, 4, 4, generator=torch.Generator().manual_seed(0)).bfloat16()
    run_cases([Case("F.lp_pool2d(x, 2.0, 2)", lambda x: F.lp_pool2d(x, 2.0, 2), [x], lp=True)], "lp_pool bfloat16")


# ---------------------------------------------------------------------------------------------
# 2. symbolic batch
# ---------------------------------------------------------------------------------------------


class SymbolicBatch(torch.nn.Module):
    def forward(self, x, y):
        v, i = F.max_pool2d(x, 3, 2, 1, ceil_mode=True, return_indices=True)
        a = F.avg_pool2d(x, 3, 2, 1, ceil_mode=True, count_include_pad=False, divisor_override=5)
        b = F.adaptive_avg_pool2d(x, (4, 3))
        m, mi = F.adaptive_max_pool2d(x, (None, 4), return_indices=True)
        u = F.max_unpool2d(v, i, 3, 2, 1, output_size=x.shape[-2:])
        lp = F.lp_pool2d(y, 2.0, 2, 2)
        return v, i, a, b, m, mi, u, lp


def test_symbolic_batch():
    x, y = torch.zeros(2, 3, 9, 10), torch.zeros(2, 2, 6, 7)  # shapes only
    batch = torch.export.Dim("batch")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ep = torch.export.export(SymbolicBatch(), (x, y), dynamic_shapes=({0: batch}, {0: batch}))
        mod = tvm_pool.from_exported_program(ep)
        ex = tvm_pool.compile(mod, "llvm")
    assert not isinstance(mod["main"].params[0].ty.shape.values[0], tvm.tirx.IntImm), "batch not symbolic"
    vm = relax.VirtualMachine(ex, tvm.cpu())
    rng = np.random.default_rng(3)
    for n in (3, 5):
        data = torch.from_numpy((rng.integers(-6, 7, size=(n, 3, 9, 10)) / 2).astype("float32"))
        data[0, 0, 0, ::3] = float("nan")
        other = torch.from_numpy(rng.standard_normal((n, 2, 6, 7)).astype("float32"))
        got = vm_outputs(vm["main"](to_tvm(data), to_tvm(other)))
        want = SymbolicBatch()(data, other)
        assert len(got) == len(want)
        for k, (g, w) in enumerate(zip(got, want)):
            why = compare(g, w)
            assert not why, f"batch {n}, output {k}: {why}"


# ---------------------------------------------------------------------------------------------
# 3. scheduled equals unscheduled inside fused graphs
# ---------------------------------------------------------------------------------------------


def _fused_cases() -> list[Case]:
    g = torch.Generator().manual_seed(4)

    def r(*shape):
        return (torch.randint(-8, 9, shape, generator=g) / 4).float()

    cases = []

    def add(text, fn, *inputs):
        cases.append(Case(text, fn, list(inputs)))

    # conv -> relu -> max_pool with indices -> add with a branch
    add("conv2d -> relu -> max_pool2d(3, 2, 1, indices) -> add(branch)",
        lambda x, w, b: (lambda v, i: (v + b, i))(*F.max_pool2d(F.relu(F.conv2d(x, w, padding=1)), 3, 2, 1,
                                                               return_indices=True)),
        r(1, 3, 12, 13), r(4, 3, 3, 3), r(1, 4, 6, 7))
    # mul -> max_pool without indices, ceil_mode -> relu
    add("mul -> max_pool2d(2, 2, ceil) -> relu",
        lambda x: F.relu(F.max_pool2d(x * 1.5, 2, 2, ceil_mode=True)), r(2, 4, 9, 11))
    # mul -> avg_pool with divisor_override -> concat with a branch
    add("mul -> avg_pool2d(3, 2, 1, ceil, divisor_override=5) -> cat(branch)",
        lambda x, y: torch.cat([F.avg_pool2d(x * 0.5, 3, 2, 1, ceil_mode=True, divisor_override=5), y], dim=1),
        r(1, 4, 10, 9), r(1, 2, 6, 5))
    # a pool used twice: relu(p) and p + branch
    add("relu -> adaptive_avg_pool2d(3, 5) used twice (mul, add(branch))",
        lambda x, y: (lambda p: (p * 3, p + y))(F.adaptive_avg_pool2d(F.relu(x), (3, 5))),
        r(2, 3, 10, 11), r(2, 3, 3, 5))
    # adaptive max with indices after sigmoid, values into an add
    add("sigmoid -> adaptive_max_pool2d(4, 3, indices) -> add 1",
        lambda x: (lambda v, i: (v + 1, i))(*F.adaptive_max_pool2d(torch.sigmoid(x), (4, 3), return_indices=True)),
        r(1, 3, 9, 7))
    # unbatched: relu -> max_pool2d -> add; mul -> avg_pool1d on [C, L]
    add("unbatched relu -> max_pool2d(2, indices) -> add(branch)",
        lambda x, y: (lambda v, i: (v + y, i))(*F.max_pool2d(F.relu(x), 2, return_indices=True)),
        r(3, 8, 9), r(3, 4, 4))
    add("unbatched mul -> avg_pool1d(3, 2, 1, count_include_pad=False) -> relu",
        lambda x: F.relu(F.avg_pool1d(x * 2, 3, 2, 1, count_include_pad=False)), r(4, 15))
    add("unbatched relu -> adaptive_max_pool1d(4) -> add 1",
        lambda x: F.adaptive_max_pool1d(F.relu(x), 4) + 1, r(3, 10))
    # pool then unpool
    add("max_pool2d(2, 2, indices) -> max_unpool2d -> relu",
        lambda x: (lambda v, i: F.relu(F.max_unpool2d(v, i, 2, 2, output_size=x.shape[-2:])))(
            *F.max_pool2d(x, 2, 2, return_indices=True)), r(1, 3, 9, 8))
    # 3-D with indices, and lp_pool
    add("relu -> max_pool3d(2, 2, 1, indices) -> mul 2",
        lambda x: (lambda v, i: (v * 2, i))(*F.max_pool3d(F.relu(x), 2, 2, 1, return_indices=True)), r(1, 2, 5, 6, 7))
    add("lp_pool2d(2, 3, 2) -> add(branch)", lambda x, y: F.lp_pool2d(x, 2.0, 3, 2) + y, r(1, 3, 9, 9), r(1, 3, 4, 4))
    return cases


def _is_pooling(func) -> bool:
    """A PrimFunc holding one of tvm_pool's pooling blocks (fused or not)."""
    found = []
    tvm_ffi.structural_walk(func, (SBlock, lambda block: found.append(analysis.is_pool_block(block))))
    return any(found)


def _pooling_funcs(lowered) -> dict:
    """symbol -> PrimFunc of every PrimFunc a tvm_pool converter made (its blocks carry
    tvm_pool.kind), and of the max_unpool scatter (an extern, no pooling block)."""
    out = {}
    for gvar, func in lowered.functions_items():
        if isinstance(func, tvm.tirx.PrimFunc) and (_is_pooling(func) or "tvm_pool" in gvar.name_hint):
            out[gvar.name_hint] = func
    return out


# PrimFuncs no tvm_pool rule schedules, by design: max_unpool's scatter is an extern (a
# bounds check and a serial scatter loop per element, like ONNX MaxUnpool's).
UNSCHEDULED = ("unpool_scatter",)


def _check_rule(lowered, target, run_target, label, pairs_hook=None):
    pairs = scheduled_prim_funcs(lowered, target)
    if pairs_hook is not None:
        pairs = pairs_hook(pairs)
    pooling = _pooling_funcs(lowered)
    scheduled = {symbol for symbol, _, _ in pairs}
    missing = sorted(name for name in pooling if name not in scheduled and not any(u in name for u in UNSCHEDULED))
    assert not missing, f"{label}: pooling PrimFuncs the rule does not schedule: {missing}"
    report = check_pairs(pairs, run_target)
    assert report.checked and not report.mismatches and not report.unchecked, f"{label}:\n{report.summary()}"
    return pooling, report


@x86_only
def test_fused_graphs_scheduled_equal_unscheduled(host):
    cases = _fused_cases()
    mod = import_cases(cases)
    lowered = lower_unscheduled(mod, host)
    pooling, report = _check_rule(lowered, host, host, "x86")
    kinds = " ".join(pooling)
    for piece in ("max_pool", "avg_pool", "adaptive_avg_pool", "adaptive_max_pool", "unpool_scatter"):
        assert piece in kinds, (piece, sorted(pooling))
    # producers and consumers really are inside the pools' functions (FuseOps leaves a pool with
    # indices, a tuple, alone, and a pool used twice)
    fused = [name for name in report.checked if name.startswith("fused_")]
    expected = (("multiply", "max_pool", "relu"), ("multiply", "avg_pool", "concatenate"),
                ("multiply", "avg_pool", "relu"), ("power", "avg_pool", "sign", "add"), ("adaptive_max_pool", "add"))
    for pieces in expected:
        assert any(all(p in name for p in pieces) for name in fused), (pieces, report.checked)
    # and the whole graph, scheduled, equals torch
    inputs = [t for c in cases for t in c.inputs]
    problems = _problems(cases, compile_and_run(mod, inputs))
    assert not problems, "\n".join(problems)


# The graphs the aarch64 and CUDA checks take by default (aarch64: max_pool with indices after a
# conv/relu, into an add; both: avg_pool with divisor_override into a concat; CUDA: mul, max_pool,
# relu in one function); all of them with -m slow (the CUDA rule takes seconds over an argmax).
FEW = {"aarch64": (0, 2), "cuda": (1, 2)}


def _aarch64(cases):
    arm = resolve_target("arm")
    mod = import_cases(cases)
    _check_rule(lower_unscheduled(mod, arm), arm, "llvm", "aarch64")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ex = tvm_pool.compile(mod, arm)
    asm = ex.mod.imports[0].inspect_source("asm")
    assert "fmax\t" in asm or "fmaxnm\t" in asm, "no NEON max in the aarch64 build"


def test_fused_graphs_aarch64():
    """The aarch64 rule on fused graphs (its FMAX / whole-plane rewrites included), each
    scheduled PrimFunc built for this machine and checked against its unscheduled self (as
    test_schedules_arm.py runs them); the module builds for aarch64."""
    _aarch64([_fused_cases()[i] for i in FEW["aarch64"]])


@pytest.mark.slow
def test_fused_graphs_aarch64_all():
    _aarch64(_fused_cases())


def _cuda(cases):
    import cuda_checks as cc  # pylint: disable=import-outside-toplevel

    mod = import_cases(cases)
    sm80 = cc.gpu_target("sm_80")
    lowered = tvm_pool.lowering.fuse(mod, sm80)  # what compile schedules (no GPU fallback yet)
    taken = {symbol for symbol, _, _ in scheduled_prim_funcs(lowered, sm80)}
    missing = sorted(n for n in _pooling_funcs(lowered) if n not in taken and not any(u in n for u in UNSCHEDULED))
    assert not missing, f"the CUDA rule declines {missing}"
    cpu = lower_unscheduled(mod, "llvm")
    rule = cc.CheckedPool(simulate=True)
    pairs = []
    for gvar, func in cpu.functions_items():
        if isinstance(func, tvm.tirx.PrimFunc):
            sch = rule.apply(func, tvm.target.Target({"kind": "llvm"}), False)
            if sch is not None:
                pairs.append((gvar.name_hint, func, sch.mod["main"]))
    with cc.bounds_checked():
        report = check_pairs(pairs, "llvm")
    assert report.checked and not report.mismatches and not report.unchecked, report.summary()
    build = cc.cuda_build(mod, "sm_80")
    verdict = cc.verify_gpu(build)
    assert verdict and all(verdict.values()), verdict


def test_fused_graphs_cuda():
    """The CUDA rule on fused graphs: every pooling PrimFunc taken by it, simulated on the CPU
    (thread loops serial, every access bounds-checked) against its unscheduled self; the module
    builds for sm_80 and every kernel passes TVM's VerifyGPUCode."""
    _cuda([_fused_cases()[i] for i in FEW["cuda"]])


@pytest.mark.slow
def test_fused_graphs_cuda_all():
    _cuda(_fused_cases())


def _unpool_module():
    """max_unpool2d of given indices, [1, 3, 4, 4] -> [1, 3, 9, 8] (216 elements)."""
    x, i = torch.zeros(1, 3, 4, 4), torch.zeros(1, 3, 4, 4, dtype=torch.int64)
    return import_cases([Case("F.max_unpool2d(x, i, 2, output_size=[9, 8])",
                              lambda x, i: F.max_unpool2d(x, i, 2, output_size=[9, 8]), [x, i])])


def _loop_extents(func) -> list[int]:
    extents = []
    tvm_ffi.structural_walk(func, (tvm.tirx.For, lambda loop: extents.append(int(loop.extent))
                                   if isinstance(loop.extent, tvm.tirx.IntImm) else None))
    return extents


# The zero fill and the scatter loop over the exact sizes (a product of int32 dims cast to int64
# used to stay symbolic: 2^20 guarded iterations per call, ~2 ms for a [1, 3, 4, 4] unpool).
def test_unpool_loops_over_exact_sizes():
    lowered = lower_unscheduled(_unpool_module(), "llvm")
    (scatter,) = [f for g, f in lowered.functions_items() if "unpool_scatter" in g.name_hint]
    assert max(_loop_extents(scatter)) <= 216, sorted(set(_loop_extents(scatter)))


@pytest.mark.xfail(strict=True, reason=(
    "max_unpool on CUDA runs on the host: the scatter is an extern no rule schedules and TVM "
    "binds no thread, so it is lowered as a host (llvm) function that asserts its arguments are "
    "CUDA tensors (device_type == 2) and then loads and stores them from the CPU (device memory "
    "read on the host at run time); no device kernel holds it"))
def test_known_bug_unpool_scatter_on_cuda_runs_on_host():
    import cuda_checks as cc  # pylint: disable=import-outside-toplevel

    build = cc.cuda_build(_unpool_module(), "sm_80")
    host = [g.name_hint for g, f in build.lowered.functions_items()
            if "unpool_scatter" in g.name_hint and f.attrs is not None and f.attrs["target"].kind.name == "llvm"]
    assert any("unpool_scatter" in name for name in build.kernels()) and not host, (host, list(build.kernels()))


# ---------------------------------------------------------------------------------------------
# 4. errors
# ---------------------------------------------------------------------------------------------


class Fn(torch.nn.Module):
    def __init__(self, fn):
        super().__init__()
        self.fn = fn

    def forward(self, *xs):
        return self.fn(*xs)


def edited_program(fn, inputs, op: str, **changes):
    """``fn`` exported, then the arguments of its node calling ``op`` changed (torch.export
    checks the arguments itself, so an invalid call only exists in an edited graph)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ep = torch.export.export(Fn(fn), tuple(inputs))
    nodes = [n for n in ep.graph.nodes if n.op == "call_function" and getattr(n.target, "__name__", "").startswith(op)]
    assert len(nodes) == 1, [n.target for n in ep.graph.nodes]
    (node,) = nodes
    schema = node.target._schema.arguments  # pylint: disable=protected-access
    names = [a.name for a in schema]
    args = list(node.args)
    for name, value in changes.items():
        i = names.index(name)
        while len(args) < i:
            args.append(schema[len(args)].default_value)
        if i < len(args):
            args[i] = value
        else:
            args.append(value)
    node.args = tuple(args)
    return ep, node.name


def import_error(ep) -> str:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises((tvm_pool.InvalidModelError, tvm_pool.UnsupportedError)) as info:
            tvm_pool.from_exported_program(ep, run_ep_decomposition=False)
    return str(info.value)


X = torch.zeros(1, 2, 6, 6)
ERRORS = {
    "max_pad_over_half": (lambda x: F.max_pool2d(x, 3, 1, 1), "max_pool2d", dict(padding=[2, 2]),
                          ["'padding'", "at most half"]),
    "max_indices_pad_over_half": (lambda x: F.max_pool2d(x, 3, 1, 1, return_indices=True), "max_pool2d_with_indices",
                                  dict(padding=[1, 2]), ["'padding'", "at most half", "axis 1"]),
    "max_dilated_pad_over_half": (lambda x: F.max_pool2d(x, 2, 1, 1, dilation=2), "max_pool2d",
                                  dict(padding=[2, 2], dilation=[1, 1]), ["'padding'", "dilation 1"]),
    "avg_pad_over_half": (lambda x: F.avg_pool2d(x, 3, 1, 1), "avg_pool2d", dict(padding=[2, 1]),
                          ["'padding'", "at most half"]),
    "max1d_pad_over_half": (lambda x: F.max_pool1d(x[0], 3, 1, 1), "max_pool1d", dict(padding=[2]), ["'padding'"]),
    "max_output_below_1": (lambda x: F.max_pool2d(x, 3), "max_pool2d", dict(kernel_size=[7, 7]),
                           ["'kernel_size'", "output size 0 < 1"]),
    "avg3d_unbatched_output_below_1": (lambda x: F.avg_pool3d(x, 2), "avg_pool3d", dict(kernel_size=[1, 7, 2]),
                             ["'kernel_size'", "< 1"]),
    "divisor_override_0": (lambda x: F.avg_pool2d(x, 2), "avg_pool2d", dict(divisor_override=0),
                           ["'divisor_override'", "zero"]),
    "negative_padding": (lambda x: F.max_pool2d(x, 3, 1, 1), "max_pool2d", dict(padding=[-1, 1]),
                         ["'padding'", ">= 0"]),
    "zero_stride": (lambda x: F.avg_pool2d(x, 3, 1, 1), "avg_pool2d", dict(stride=[0, 1]), ["'stride'", ">= 1"]),
    "adaptive_size_0": (lambda x: F.adaptive_avg_pool2d(x, 3), "adaptive_avg_pool2d", dict(output_size=[0, 3]),
                        ["'output_size'", ">= 1"]),
    "kernel_of_3_for_2d": (lambda x: F.max_pool2d(x, 2), "max_pool2d", dict(kernel_size=[2, 2, 2]),
                           ["'kernel_size'", "has 3 values"]),
}


@pytest.mark.parametrize("name", sorted(ERRORS))
def test_invalid_arguments(name):
    fn, op, changes, expected = ERRORS[name]
    ep, node = edited_program(fn, [X], op, **changes)
    message = import_error(ep)
    assert "\n" not in message, message
    assert f"node '{node}'" in message and f"(aten.{op}" in message, message
    for piece in expected:
        assert piece in message, (piece, message)


def test_unpool_indices_of_another_shape():
    x, i = torch.zeros(1, 2, 3, 3), torch.zeros(1, 2, 3, 3, dtype=torch.int64)
    j = torch.zeros(1, 2, 3, 4, dtype=torch.int64)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ep = torch.export.export(Fn(lambda x, i, j: F.max_unpool2d(x, i, 2)), (x, i, j))
    placeholders = [n for n in ep.graph.nodes if n.op == "placeholder"]
    (node,) = [n for n in ep.graph.nodes if n.op == "call_function"]
    node.args = (node.args[0], placeholders[2], *node.args[2:])
    message = import_error(ep)
    assert "\n" not in message and f"node '{node.name}' (aten.max_unpool2d)" in message, message
    assert "'indices' has shape [1, 2, 3, 4]" in message and "[1, 2, 3, 3]" in message, message


@pytest.fixture(scope="module")
def unpool_vm():
    """max_unpool2d of given indices into 5x6 planes, compiled once."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ep = torch.export.export(Fn(lambda x, i: F.max_unpool2d(x, i, 2, 2, output_size=[5, 6])),
                                 (torch.zeros(2, 3, 2, 3), torch.zeros(2, 3, 2, 3, dtype=torch.int64)))
        node = next(n.name for n in ep.graph.nodes if n.op == "call_function" and "unpool" in n.name)
        vm = relax.VirtualMachine(tvm_pool.compile(tvm_pool.from_exported_program(ep), "llvm"), tvm.cpu())
    return vm, node


@pytest.mark.parametrize("bad", [30, 31, 10**12, -1, -(2**40)])
def test_unpool_indices_out_of_bounds_raise_at_run_time(unpool_vm, bad):
    vm, node = unpool_vm
    x = torch.arange(36.0).reshape(2, 3, 2, 3)
    idx = torch.stack([torch.randperm(30, generator=torch.Generator().manual_seed(s))[:6] for s in range(6)])
    idx = idx.reshape(2, 3, 2, 3)
    (got,) = vm_outputs(vm["main"](to_tvm(x), to_tvm(idx)))  # valid: matches torch
    np.testing.assert_array_equal(got, F.max_unpool2d(x, idx, 2, 2, output_size=[5, 6]).numpy())
    idx[1, 2, 1, 2] = bad
    with pytest.raises(Exception) as info:  # noqa: PT011  (TVM wraps the kernel's IndexError)
        vm["main"](to_tvm(x), to_tvm(idx))
    message = str(info.value)
    assert f"node '{node}' (aten.max_unpool2d)" in message and "'indices'" in message, message
    assert "out of bounds" in message and "[0, 30)" in message, message
    assert "IndexError" in type(info.value).__name__ or "IndexError" in message, message
    with pytest.raises(RuntimeError):  # torch refuses the same index
        F.max_unpool2d(x, idx, 2, 2, output_size=[5, 6])


# ---------------------------------------------------------------------------------------------
# 5. stock TVM's converter against tvm_pool's
# ---------------------------------------------------------------------------------------------

def _stock(name):
    """What stock TVM makes of an issue case: 'refused: ...' or its outputs."""
    from tvm.relax.frontend.torch import from_exported_program  # pylint: disable=import-outside-toplevel

    fn, x = ISSUE_CASES[name]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ep = torch.export.export(Fn(fn), (x,))
        try:
            with closed_on_error():  # stock TVM leaves its builder open when it refuses
                mod = from_exported_program(ep)
            ex = tvm.compile(mod, "llvm")
        except Exception as err:  # noqa: BLE001
            return f"refused: {type(err).__name__}: {str(err).strip().splitlines()[-1][:200]}"
    return vm_outputs(relax.VirtualMachine(ex, tvm.cpu())["main"](to_tvm(x)))


@pytest.mark.parametrize("name", sorted(ISSUE_CASES))
def test_stock_tvm_gets_the_issue_cases_wrong(name):
    """Stock TVM refuses or miscomputes each case; tvm_pool's result for the same case is
    compared with torch in test_edge_cases (one compile for all)."""
    assert f"issue case {name}" in [c.text for c in _edge_cases()]
    fn, x = ISSUE_CASES[name]
    stock = _stock(name)
    if isinstance(stock, str):
        return  # refused (an import error or a crash inside TVM): docs/why.md's claim holds
    want = flat_outputs(fn(x))
    wrong = len(stock) != len(want) or any(compare(g, w) for g, w in zip(stock, want))
    if not wrong:
        pytest.skip(f"stock TVM now gets '{name}' right: update docs/why.md and the README's table")
    assert wrong
