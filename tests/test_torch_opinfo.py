"""PyTorch's own sample inputs for every pooling operator, through tvm_pool, against torch eager.

The samples are PyTorch's OpInfo ones (``op_db`` of ``torch.testing._internal``) for
max_pool, avg_pool, adaptive_max_pool, adaptive_avg_pool, max_unpool and fractional_max_pool in
1, 2 and 3-D; op_db has no lp_pool, so those come from PyTorch's ModuleInfo samples of
``nn.LPPool{1,2,3}d`` (``module_db``), called as ``F.lp_pool{1,2,3}d``. Every dtype each op
supports on CPU is taken (``supported_dtypes("cpu")``).

Each sample is wrapped in a module (tensor arguments as inputs, the rest baked in), and K
samples share one module (torch_samples.BatchModule): one torch.export, one
``tvm_pool.from_exported_program``, one ``tvm_pool.compile`` and one run cover them all, and a
failure is located down to one sample. Results are compared with torch eager: indices and
integer values exactly, float values within ``tolerance(dtype, "unscheduled")`` (the same
arithmetic, reductions in another order), NaN in the same places.

Not compared, and counted:

- max_unpool samples in which an index repeats within an (n, c) plane with different values:
  PyTorch leaves which value lands there unspecified (its kernels write in any order), so there
  is nothing to match. OpInfo makes its max_unpool samples from max_pool with overlapping
  windows, so most repeat an index, but always with one value (the same input element picked by
  two windows): those have one right result whatever the write order, and are compared (the
  report counts them as "repeated");
- fractional_max_pool samples without ``_random_samples``: the windows are drawn at random on
  each call, so two runs (torch's and tvm_pool's) pick different windows.

The same samples also go through both ONNX exporters (TorchScript at opset 17 and dynamo) and
``tvm_pool.from_onnx``. An exporter need not preserve torch's semantics; where tvm_pool's result
differs from torch eager, onnxruntime runs the same export: if it differs from torch too, the
exporter translated the op differently (noted, not failed); if it agrees with torch, tvm_pool is
wrong (failed).

Default suite (about a minute on 2 cores; compiling costs about 0.2 s a sample): through
torch.export, float32 for every op (FLOAT32_BUDGET samples each, at a prime stride through a big
op's list) and every other dtype for one op of each family, all in one batch; through the
ONNX exporters, float32, one sample per op (TorchScript) or per family (dynamo, whose exports
cost a second each). Known failures (KNOWN_FAILURES) are left out of these batches and run one
each as strict xfails. ``-m slow`` (test_all_samples): every sample of every op in every dtype
through each road; ``TVM_POOL_OPINFO_DTYPES=float32,bfloat16`` narrows the dtypes.

The counts (per road, op and dtype) print at the end of the module (visible with ``-s``), and
go to a JSON file when ``TVM_POOL_OPINFO_REPORT=path`` is set.
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
import json
import os
import re
import zlib
from collections import Counter, defaultdict
from typing import Callable

import pytest
pytest.importorskip("torch")  # PyTorch is this file's oracle: skip the file without it
import torch  # noqa: E402
import torch.nn.functional as F

import torch_samples as ts
from helpers import tolerance
from oracles import IR_VERSION

COMPARISON = "unscheduled"

# The OpInfo ops, by op_db name. Left out on purpose: the "grad" variants of max_unpool (the same
# forward call, other samples for autograd) and max_pool2d_with_indices_backward (a backward op).
OPINFO_OPS = [
    *(f"nn.functional.max_pool{n}d" for n in (1, 2, 3)),
    *(f"nn.functional.avg_pool{n}d" for n in (1, 2, 3)),
    *(f"nn.functional.adaptive_max_pool{n}d" for n in (1, 2, 3)),
    *(f"nn.functional.adaptive_avg_pool{n}d" for n in (1, 2, 3)),
    *(f"nn.functional.max_unpool{n}d" for n in (1, 2, 3)),
    *(f"nn.functional.fractional_max_pool{n}d" for n in (2, 3)),
]
EXCLUDED_OPINFO = {"max_pool2d_with_indices_backward"}
# lp_pool: op_db has none; nn.LPPool{n}d's ModuleInfo samples, called functionally.
LP_OPS = {f"nn.functional.lp_pool{n}d": (f"nn.LPPool{n}d", getattr(F, f"lp_pool{n}d")) for n in (1, 2, 3)}
ALL_OPS = OPINFO_OPS + list(LP_OPS)

# Default suite (see default_selection): a sample costs about 0.3 s to compile and run, so the
# default takes FLOAT32_BUDGET float32 samples of each op (every one of an op with fewer, else
# at a prime stride), OTHER_DTYPE_BUDGET of one op per family for each other dtype, and
# ONNX_BUDGET float32 samples per op through the ONNX exporters.
FLOAT32_BUDGET = 4
OTHER_DTYPE_BUDGET = 1
OTHER_DTYPE_DRAW = 24  # other dtypes: pick from the first so many samples
ONNX_BUDGET = 1


@dataclasses.dataclass(frozen=True)
class Known:
    """Samples tvm_pool is known to get wrong or refuse. The default suite leaves them out of
    its batches and runs one of each alone as a strict xfail (test_known_failure), so the suite
    documents the problem and notices its fix; ``-m slow`` runs every one of them alone and
    counts it as xfail (a known sample that matches fails the test: take it out of the list)."""

    name: str
    roads: tuple
    ops: tuple
    dtypes: tuple | None  # None: every dtype
    applies: Callable  # (Sample) -> bool
    reason: str


def _nan_in_result(sample) -> bool:
    return any(r.is_floating_point() and bool(r.isnan().any()) for r in sample.eager())


FRACTIONAL = ("nn.functional.fractional_max_pool2d", "nn.functional.fractional_max_pool3d")
KNOWN_FAILURES = [
    Known(
        "fractional_max_pool-bfloat16-refused",
        ("torch.export",), FRACTIONAL, ("bfloat16",), lambda s: True,
        "tvm_pool.from_exported_program refuses bfloat16 fractional_max_pool (UnsupportedError: TVM 0.27 "
        "cannot lower its window arithmetic in bfloat16; 'BF16 needs to be storaged lowered first'); "
        "float16, float32 and float64 are converted exactly. Repro: F.fractional_max_pool2d(x.bfloat16(), "
        "(1, 1), output_ratio=(0.5, 0.5), _random_samples=torch.rand(1, 1, 2).bfloat16()) through torch.export",
    ),
    Known(
        "lp_pool-nan",
        ("onnx-torchscript", "onnx-dynamo"), tuple(f"nn.functional.lp_pool{n}d" for n in (1, 2, 3)),
        None, _nan_in_result,
        "tvm_pool.from_onnx's Relu maps NaN to 0 (onnxruntime and torch.relu keep NaN), and both "
        "exporters write lp_pool as Pow, AveragePool, Sign, Abs, Relu, Mul, Pow: a window with a NaN "
        "(norm_type 1.5 over a negative input) gives 0 where torch and onnxruntime give NaN. Repro: "
        "torch.onnx.export of F.lp_pool1d(x, 1.5, 2), x = torch.tensor([[[-1., 2., 3., 4.]]]) -> "
        "tvm_pool [[[0., 5.584]]], onnxruntime and torch [[[nan, 5.584]]]; smaller: the export of "
        "torch.relu on [[nan, -1., 2.]] -> tvm_pool [[0., 0., 2.]], onnxruntime [[nan, 0., 2.]]",
    ),
]


def known_failure(road: str, sample) -> Known | None:
    for known in KNOWN_FAILURES:
        if (
            road in known.roads
            and sample.op in known.ops
            and (known.dtypes is None or dtype_name(sample.dtype) in known.dtypes)
            and known.applies(sample)
        ):
            return known
    return None


def dtype_name(dtype) -> str:
    return str(dtype).replace("torch.", "")


@functools.cache
def _opinfo(name: str):
    from torch.testing._internal.common_methods_invocations import op_db  # pylint: disable=import-outside-toplevel

    found = [op for op in op_db if op.name == name and op.variant_test_name == ""]
    assert len(found) == 1, f"op_db has {len(found)} plain entries named {name}"
    return found[0]


@functools.cache
def _moduleinfo(name: str):
    from torch.testing._internal.common_modules import module_db  # pylint: disable=import-outside-toplevel

    found = [m for m in module_db if m.name == name]
    assert len(found) == 1, f"module_db has {len(found)} entries named {name}"
    return found[0]


def op_dtypes(op: str) -> list[str]:
    """The dtypes ``op`` supports on CPU (float32 first)."""
    info = _moduleinfo(LP_OPS[op][0]) if op in LP_OPS else _opinfo(op)
    names = sorted({dtype_name(d) for d in info.supported_dtypes("cpu")})
    return sorted(names, key=lambda d: (d != "float32", d))


def _spatial_rank(op: str) -> int:
    return int(op[-2])


def _unpool_repeats(sample: ts.Sample) -> str | None:
    """Whether a max_unpool sample's indices repeat within an (n, c) plane: None (no), "equal"
    (every repeated index carries one value: whatever order the writes take, the result is the
    same) or "unspecified" (a repeated index carries different values: PyTorch leaves which one
    lands there unspecified, so there is nothing to match)."""
    values, indices = sample.tensors[0], sample.tensors[1]
    rank = _spatial_rank(sample.op)
    plane = 1
    for size in indices.shape[indices.dim() - rank :]:
        plane *= size
    if plane == 0 or indices.numel() == 0:
        return None
    indices, values = indices.reshape(-1, plane), values.reshape(-1, plane).float()
    order = indices.argsort(dim=1, stable=True)
    indices, values = indices.gather(1, order), values.gather(1, order)
    same_index = indices[:, 1:] == indices[:, :-1]
    if not bool(same_index.any()):
        return None
    a, b = values[:, 1:][same_index], values[:, :-1][same_index]
    equal = (a == b) | (a.isnan() & b.isnan())
    return "equal" if bool(equal.all()) else "unspecified"


def _raw_samples(op: str, torch_dtype):
    """(fn, args, kwargs) of each of PyTorch's samples of ``op``, as its generator makes them."""
    if op in LP_OPS:
        info_name, fn = LP_OPS[op]
        info = _moduleinfo(info_name)
        for mi in info.module_inputs_func(info, "cpu", torch_dtype, False, False):
            ctor, fwd = mi.constructor_input, mi.forward_input
            yield fn, (*fwd.args, *ctor.args), {**fwd.kwargs, **ctor.kwargs}
    else:
        info = _opinfo(op)
        for s in info.sample_inputs("cpu", torch_dtype, requires_grad=False):
            yield info.op, (s.input, *s.args), dict(s.kwargs)


@functools.cache
def op_samples(op: str, dtype: str, limit: int | None = None):
    """``(samples, skipped)`` for ``op`` at ``dtype``: the comparable samples, and the count of
    all samples drawn ("opinfo") and of the others by reason ("unspecified": max_unpool with a
    repeated index carrying different values; "random": fractional_max_pool without
    ``_random_samples``), and of the max_unpool samples compared although an index repeats with
    one value ("repeated"). ``limit``:
    draw only the first so many (the generators make every tensor, about 1 ms a sample).
    Seeded, so the same on every run."""
    torch_dtype = getattr(torch, dtype)
    torch.manual_seed(zlib.crc32(f"{op}:{dtype}".encode()))
    raw = list(itertools.islice(_raw_samples(op, torch_dtype), limit))
    samples, skipped = [], Counter({"opinfo": len(raw)})
    for index, (fn, args, kwargs) in enumerate(raw):
        sample = ts.Sample.make(op, index, torch_dtype, fn, args, kwargs)
        if "fractional_max_pool" in op and "_random_samples" not in kwargs:
            skipped["random"] += 1
        elif "max_unpool" in op and _unpool_repeats(sample) == "unspecified":
            skipped["unspecified"] += 1
        else:
            if "max_unpool" in op and _unpool_repeats(sample) == "equal":
                skipped["repeated"] += 1  # compared: counted only to show how many
            samples.append(sample)
    return samples, skipped


def _prime_at_least(n: int) -> int:
    def prime(k):
        return k > 1 and all(k % d for d in range(2, int(k**0.5) + 1))

    while not prime(n):
        n += 1
    return n


def subset(samples: list, budget: int, offset: int = 0) -> list:
    """Every sample when there are at most ``budget``; else ``budget`` of them at a prime stride
    (a prime, so that the stride does not keep landing on the same value of an argument that
    the sample generator cycles through)."""
    if len(samples) <= budget:
        return list(samples)
    stride = _prime_at_least(max(2, len(samples) // budget))
    return [samples[(offset + i * stride) % len(samples)] for i in range(budget)]


# ---------------------------------------------------------------------------------------------
# Counting and the report

REPORT: dict = defaultdict(lambda: defaultdict(lambda: defaultdict(Counter)))  # "suite/road" -> op -> dtype
NOTES: list[dict] = []  # an exporter's doing: refused, translated differently, wrote an invalid model
FAILURES: list[dict] = []  # tvm_pool's: wrong, refused, failing at run time (known ones flagged)

FIELDS = [
    "opinfo", "unspecified", "random", "repeated", "samples", "exported", "converted", "matched", "wrong", "refused", "run_error", "xfail",
    "exporter_refused", "exporter_differs", "invalid_export",
]
ALWAYS_SHOWN = ("opinfo", "samples", "exported", "converted", "matched", "wrong", "refused")
# kinds that are an exporter's doing, not tvm_pool's
EXPORTER_KINDS = ("export_failed", "exporter_refused", "exporter_differs", "invalid_export")


def _rtol_atol(dtype) -> tuple[float, float]:
    return tolerance(dtype_name(dtype), COMPARISON)


def compare_outputs(got: list, want: list) -> str | None:
    if len(got) != len(want):
        return f"{len(got)} outputs, torch has {len(want)}"
    for i, (g, w) in enumerate(zip(got, want)):
        problem = ts.compare(g, w, *_rtol_atol(w.dtype))
        if problem:
            return f"output {i}: {problem}"
    return None


def classify_export(outcome: ts.Outcome) -> tuple[str, str | None]:
    """("matched" | "wrong" | "refused" | "run_error" | "export_failed", detail)."""
    if outcome.stage == "export":
        return "export_failed", outcome.error
    if outcome.stage in ("convert", "compile"):
        return "refused", f"{outcome.stage}: {outcome.error}"
    if outcome.stage == "run":
        return "run_error", outcome.error
    problem = compare_outputs(outcome.outputs, outcome.sample.eager())
    return ("wrong", problem) if problem else ("matched", None)


def classify_onnx(outcome: ts.Outcome, dynamo: bool) -> tuple[str, str | None]:
    """("matched" | "wrong" | "refused" | "run_error" | "exporter_refused" | "exporter_differs"
    | "invalid_export", detail). A difference from torch counts against tvm_pool only where
    onnxruntime runs the same export (the sample exported alone) and agrees with torch."""
    sample = outcome.sample
    if outcome.stage == "export":
        return "exporter_refused", outcome.error
    want = sample.eager()
    if outcome.stage == "done":
        problem = compare_outputs(outcome.outputs, want)
        if problem is None:
            return "matched", None
    else:
        problem = f"{outcome.stage}: {outcome.error}"
    ort, why = ts.onnxruntime_outputs(sample, dynamo, IR_VERSION)
    if ort is None:
        if outcome.stage == "done":
            return "exporter_differs", f"tvm_pool differs from torch ({problem}); onnxruntime cannot run the export ({why})"
        return "invalid_export", f"tvm_pool: {problem}; onnxruntime cannot run the export either ({why})"
    ort_problem = compare_outputs(ort, want)
    if ort_problem is not None:
        if outcome.stage == "done":
            vs_ort = compare_outputs(outcome.outputs, ort)
            agree = "tvm_pool agrees with onnxruntime" if vs_ort is None else f"tvm_pool differs from onnxruntime too ({vs_ort})"
            return "exporter_differs", f"onnxruntime differs from torch too ({ort_problem}); {agree}"
        return "exporter_differs", f"tvm_pool: {problem}; onnxruntime runs it but differs from torch ({ort_problem})"
    kind = {"done": "wrong", "run": "run_error"}.get(outcome.stage, "refused")
    return kind, f"{problem} (onnxruntime agrees with torch)"


def record(suite: str, road: str, sample: ts.Sample, kind: str, detail: str | None, known: Known | None = None):
    """Count one sample's outcome; returns a failure line when it fails the test, else None."""
    row = REPORT[f"{suite}/{road}"][sample.op][dtype_name(sample.dtype)]
    row["samples"] += 1
    if kind not in ("export_failed", "exporter_refused"):
        row["exported"] += 1
    if kind in ("matched", "wrong", "run_error", "exporter_differs"):
        row["converted"] += 1
    if kind != "export_failed":
        row[kind] += 1
    entry = {"road": road, "op": sample.op, "dtype": dtype_name(sample.dtype), "index": sample.index,
             "sample": sample.describe(), "kind": kind, "detail": detail}
    if kind in EXPORTER_KINDS:
        NOTES.append(entry)
        return None
    if kind == "matched":
        if known is not None:
            return f"{road} {sample.key} {sample.describe()}: matches now; take it out of KNOWN_FAILURES ({known.name})"
        return None
    if known is not None:
        row["xfail"] += 1
        FAILURES.append({**entry, "known": known.name})
        return None
    FAILURES.append(entry)
    return f"{road} {sample.key} {sample.describe()}: {kind}: {detail}"


def record_drawn(suite: str, road: str, op: str, dtype: str, skipped: Counter):
    """Count the samples drawn from PyTorch ("opinfo") and those left out of comparison."""
    REPORT[f"{suite}/{road}"][op][dtype].update(skipped)


def _table(road_key: str, ops: dict) -> list[str]:
    used = [f for f in FIELDS if f in ALWAYS_SHOWN or any(row.get(f) for dts in ops.values() for row in dts.values())]
    width = {f: max(8, len(f) + 1) for f in used}
    lines = [f"== {road_key} ==", f"{'op':<36}{'dtype':<10}" + "".join(f"{f:>{width[f]}}" for f in used)]
    total = Counter()
    for op in sorted(ops):
        for dtype in sorted(ops[op], key=lambda d: (d != "float32", d)):
            row = ops[op][dtype]
            total.update(row)
            lines.append(f"{op.replace('nn.functional.', ''):<36}{dtype:<10}" + "".join(f"{row.get(f, 0):>{width[f]}}" for f in used))
    lines.append(f"{'total':<46}" + "".join(f"{total.get(f, 0):>{width[f]}}" for f in used))
    return lines


def _grouped(entries: list[dict]) -> list[str]:
    """Entries grouped by road, op, kind and reason (numbers blanked), with a count and an example."""
    groups: dict = {}
    for e in entries:
        reason = re.sub(r"-?\d+(\.\d+)?(e[-+]?\d+)?", "#", str(e["detail"]))[:160]
        key = (e["road"], e["op"], e["kind"], e.get("known"), reason)
        groups.setdefault(key, []).append(e)
    lines = []
    for (road, op, kind, known, _), members in sorted(groups.items(), key=lambda kv: kv[0][:4]):
        e = members[0]
        tag = f" [known: {known}]" if known else ""
        lines.append(f"  {road} {op.replace('nn.functional.', '')} {kind}{tag} x{len(members)}: "
                     f"e.g. [{e['dtype']}]#{e['index']} {e['sample']}: {e['detail']}")
    return lines


@pytest.fixture(scope="module", autouse=True)
def summary():
    """Print the counts after the module's tests (``-s`` shows them); write them as JSON to
    $TVM_POOL_OPINFO_REPORT when that is set."""
    yield
    if not REPORT:
        return
    lines = ["", "tvm_pool against PyTorch's OpInfo samples (suite/road; counts per op and dtype)"]
    for road_key in sorted(REPORT):
        lines += _table(road_key, REPORT[road_key]) + [""]
    if NOTES:
        lines += [f"exporters' doing, not counted against tvm_pool ({len(NOTES)} samples):", *_grouped(NOTES)]
    if FAILURES:
        lines += [f"tvm_pool failures ({len(FAILURES)} samples):", *_grouped(FAILURES)]
    print("\n".join(lines))
    path = os.environ.get("TVM_POOL_OPINFO_REPORT")
    if path:
        data = {
            "counts": {key: {op: {dt: dict(row) for dt, row in dts.items()} for op, dts in ops.items()} for key, ops in REPORT.items()},
            "notes": NOTES,
            "failures": FAILURES,
            "known_failures": {k.name: k.reason for k in KNOWN_FAILURES},
        }
        with open(path, "w", encoding="utf-8") as handle:
            json.dump(data, handle, indent=1, sort_keys=True)


# ---------------------------------------------------------------------------------------------
# Selections and roads


def _family(op: str) -> str:
    """``max_pool`` for ``nn.functional.max_pool2d``."""
    return op.split(".")[-1][:-2]


def _one_per_family(ops, key: str) -> list[str]:
    """One op of each family (max_pool, avg_pool, ...), the rank turning with ``key`` and from
    one family to the next."""
    families: dict = {}
    for op in ops:
        families.setdefault(_family(op), []).append(op)
    turn = zlib.crc32(key.encode())
    return [members[(turn + i) % len(members)] for i, members in enumerate(families.values())]


def default_selection(road: str) -> list[tuple[str, str, list, Counter]]:
    """(op, dtype, samples, skipped) of the default suite for ``road``.

    torch.export: float32 for every op (FLOAT32_BUDGET samples each), and for every other dtype
    one op of each family (OTHER_DTYPE_BUDGET samples, from the first OTHER_DTYPE_DRAW drawn).
    onnx-torchscript: float32, every op, ONNX_BUDGET samples each. onnx-dynamo (a second of
    fixed cost per export, and a refused sample is found by exporting halves): float32, one op
    of each family, ONNX_BUDGET samples each.

    Known failures are left out (test_known_failure runs one of each); the samples left out of
    comparison (max_unpool's repeated indices, fractional_max_pool's random ones) are counted
    with their op."""
    chosen = []
    dtypes: dict = defaultdict(list)  # dtype -> the ops supporting it
    for op in ALL_OPS:
        for dtype in op_dtypes(op):
            dtypes[dtype].append(op)
    for dtype, ops in dtypes.items():
        if road == "torch.export":
            budget = FLOAT32_BUDGET if dtype == "float32" else OTHER_DTYPE_BUDGET
            ops = ops if dtype == "float32" else _one_per_family(ops, dtype)
        elif dtype != "float32":
            continue
        else:
            budget = ONNX_BUDGET
            ops = ops if road == "onnx-torchscript" else _one_per_family(ops, road)
        for op in ops:
            samples, skipped = op_samples(op, dtype, None if dtype == "float32" else OTHER_DTYPE_DRAW)
            samples = [s for s in samples if known_failure(road, s) is None]
            chosen.append((op, dtype, subset(samples, budget, offset=zlib.crc32(dtype.encode()) % 7), skipped))
    return chosen


ROADS = {
    "torch.export": lambda samples: ts.run_export(samples),
    "onnx-torchscript": lambda samples: ts.run_onnx(samples, dynamo=False, ir_version=IR_VERSION),
    "onnx-dynamo": lambda samples: ts.run_onnx(samples, dynamo=True, ir_version=IR_VERSION),
}


def _classify(road: str, outcome: ts.Outcome):
    if road == "torch.export":
        return classify_export(outcome)
    return classify_onnx(outcome, dynamo=road == "onnx-dynamo")


def run_selection(suite: str, road: str, selection) -> list[str]:
    """Run the selection's samples through ``road`` in one batch (chunked), the known failures
    alone; count them all; return the lines of the samples that fail the test."""
    batch, known = [], []
    for op, dtype, samples, skipped in selection:
        record_drawn(suite, road, op, dtype, skipped)
        for sample in samples:
            (known if known_failure(road, sample) else batch).append(sample)
    # the known failures alone, one by one: most fail the build, and a batch of them would
    # only be halved down to single samples
    outcomes = (ROADS[road](batch) if batch else []) + [o for s in known for o in ROADS[road]([s])]
    failures = []
    for outcome in outcomes:
        kind, detail = _classify(road, outcome)
        line = record(suite, road, outcome.sample, kind, detail, known_failure(road, outcome.sample))
        if line:
            failures.append(line)
    return failures


@functools.cache
def _default_results(road: str) -> tuple:
    return tuple(run_selection("default", road, default_selection(road)))


# ---------------------------------------------------------------------------------------------
# Tests


def test_op_db_pooling_ops_are_covered():
    """Every pooling op in op_db is here or left out by name (a newer torch may add some)."""
    from torch.testing._internal.common_methods_invocations import op_db  # pylint: disable=import-outside-toplevel

    names = {op.name for op in op_db if "pool" in op.name}
    assert names - set(OPINFO_OPS) == EXCLUDED_OPINFO
    assert not any("lp_pool" in op.name for op in op_db), "op_db has lp_pool samples now: take them from there"


@pytest.mark.parametrize("road", list(ROADS))
def test_default_samples(road):
    """The default subset through ``road``: no sample wrong, refused or failing at run time
    where the export succeeded (for the ONNX roads: where onnxruntime agrees with torch on the
    same export; an exporter's own translation is noted in the summary, not failed)."""
    failures = _default_results(road)
    assert not failures, f"{len(failures)} samples:\n" + "\n".join(failures)


def _known_case(known: Known, road: str) -> ts.Sample:
    """The first sample of ``known`` (float32 first; the other dtypes' first draws before
    their whole lists, which take a second or so each to make)."""
    for limit in (OTHER_DTYPE_DRAW, None):
        for op in known.ops:
            for dtype in op_dtypes(op):
                if known.dtypes is not None and dtype not in known.dtypes:
                    continue
                samples, _ = op_samples(op, dtype, None if dtype == "float32" else limit)
                for sample in samples:
                    if known_failure(road, sample) is known:
                        return sample
    raise LookupError(f"no sample is a case of {known.name}")


@pytest.mark.parametrize(
    "known",
    [
        pytest.param(k, id=k.name, marks=pytest.mark.xfail(strict=True, raises=AssertionError, reason=k.reason))
        for k in KNOWN_FAILURES
    ],
)
def test_known_failure(known):
    """One sample of each known failure, alone through each road it fails on, expected to match
    torch: a strict xfail until tvm_pool is fixed (counted as xfail in the default report)."""
    problems = []
    for road in known.roads:
        sample = _known_case(known, road)
        (outcome,) = ROADS[road]([sample])
        kind, detail = _classify(road, outcome)
        record("default", road, sample, kind, detail, known)
        if kind != "matched":
            problems.append(f"{road} {sample.key} {sample.describe()}: {kind}: {detail}")
    assert not problems, "\n".join(problems)


@pytest.mark.slow
@pytest.mark.parametrize("road, op", [pytest.param(r, o, id=f"{r}-{o.split('.')[-1]}") for r in ROADS for o in ALL_OPS])
def test_all_samples(road, op):
    """Every sample of ``op``, every dtype it supports on CPU, through ``road`` (only the dtypes
    in $TVM_POOL_OPINFO_DTYPES, comma-separated, when that is set: max_pool2d alone has 1440
    samples in each of 9 dtypes, about an hour and a quarter on 2 cores)."""
    wanted = os.environ.get("TVM_POOL_OPINFO_DTYPES")
    dtypes = [d for d in op_dtypes(op) if not wanted or d in wanted.split(",")]
    if not dtypes:
        pytest.skip(f"none of {op}'s dtypes is in TVM_POOL_OPINFO_DTYPES={wanted}")
    selection = [(op, dtype, *op_samples(op, dtype)) for dtype in dtypes]
    failures = run_selection("full", road, selection)
    assert not failures, f"{len(failures)} samples:\n" + "\n".join(failures)
