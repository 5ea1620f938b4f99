"""Fusion differential suite for the PyTorch road: seeded random torch graphs around pooling ops
(tests/torch_fusion_graphs.py: producers, every torch pool, consumers with broadcast parameters,
reshapes and permutes, pools of pools, heads), through ``torch.export.export`` and
``tvm_pool.from_exported_program``, compiled and compared with torch eager on three targets:

- ``x86``: ``tvm_pool.compile`` for this machine (the x86 rule, shipped tuning logs and all), run
  here;
- ``aarch64``: the aarch64 rule (cortex-a72, as ``tvm_pool.compile(mod, "arm")``: its FMAX and
  whole-plane rewrites, NEON widths, -0.0 sums) scheduling a generic x86-64 build that lowers
  with aarch64's TIR pipeline (strided loads as contiguous loads and shuffles), run here (as
  tests/test_schedules_arm.py runs the rule; no qemu). The module is then compiled for aarch64
  (the real lowering, LLVM's aarch64 backend), and every pooling PrimFunc that build schedules
  must be, structurally, the one run here;
- ``cuda``: the CUDA rule in simulation (``schedules.cuda.Pool(simulate=True)``, sm_80: thread
  loops serial, every buffer access bounds-checked, every write proven inside its buffer), in a
  generic x86-64 build run here (tests/cuda_checks.py). With ``-m slow`` the rule (not simulated)
  must also take every pooling PrimFunc of the real sm_80 lowering.

Several graphs are exported as one module (:func:`torch_fusion_graphs.combine`), imported once
and compiled once per target; every graph's outputs are compared on their own. A batch that does
not compile is split in halves down to the graphs that do not; a graph whose outputs differ is
then diagnosed alone: its unscheduled build against torch, and every PrimFunc the target's rule
schedules against its unscheduled self (tests/primfunc_check.py). A failure names the seed, the
graph's steps, the output and the function. A rule that declines a function (``ScheduleDeclined``)
fails its graph: that warning stays an error inside the warnings this file silences (as
pyproject.toml's filterwarnings makes it elsewhere).

Tolerances: float32 one rounding apart (1e-5, as tests/test_torch_pools.py); float16 graphs,
which round after every op, 1e-2 (tests/test_fusion.py's; tvm_pool sums a float16 window in
float16 where torch sums in float32: one float16 ulp seen); indices exactly.

Cost, in CPU seconds for a module of 50 graphs on this 2-core machine (wall time is 3-4 times
that while other jobs run): generating, running in torch, exporting and importing ~3.5, x86 ~9.5,
aarch64 ~18 (~10 the host run, ~8 the aarch64 build), CUDA simulation ~12.5 (+4 for the real
sm_80 lowering with -m slow). 300 graphs on all three targets would be ~4.5 CPU minutes, so the
default suite checks 250 graphs (5 modules of 50) with each module on one target in turn: 100
graphs on x86 and on aarch64, 50 in CUDA's simulation (a sixth module, CUDA's second, took 73 s
of wall time in the suite on the 2-core Intel machine, which ran 15.5 minutes with it). ``-m slow`` checks 3000 more (seeds
100000-102999) on every target: ~48 CPU seconds a module, ~50 CPU minutes.

A segfault or an LLVM abort inside TVM kills the process: pytest-xdist then reports the batch's
test as a crashed worker, naming target and seeds; ``python tests/test_torch_fusion.py TARGET
FIRST LAST`` checks those seeds one graph per process and names the graph.
"""

from __future__ import annotations

import contextlib
import functools
import sys
import warnings
from unittest import mock

import numpy as np
import pytest
import torch
import tvm
from tvm import relax

import tvm_ffi

import tvm_pool
from tvm_pool import lowering
from tvm_pool.schedules import ScheduleDeclined, analysis, arm, strided_loads
from tvm_pool.targets import resolve_target
from torch_fusion_graphs import combine, random_graph
from helpers import x86_only
from primfunc_check import check_module, check_pairs, lower_unscheduled, scheduled_prim_funcs

GRAPHS_PER_MODEL = 50
DEFAULT_MODELS = 5  # 250 graphs
SLOW_MODELS = 60  # 3000 graphs
TARGETS = ("x86", "aarch64", "cuda")
TOLERANCE = {"float32": (1e-5, 1e-5), "float16": (1e-2, 1e-2)}


@contextlib.contextmanager
def quiet():
    """torch.export's and TVM's warnings silenced; a schedule rule's decline stays an error."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        warnings.simplefilter("error", ScheduleDeclined)
        yield


# ---------------------------------------------------------------------------------------------
# export, import, run
# ---------------------------------------------------------------------------------------------


def import_graphs(graphs) -> tvm.IRModule:
    module, inputs = combine(graphs)
    with quiet():
        ep = torch.export.export(module, tuple(inputs))
        return tvm_pool.from_exported_program(ep)


@functools.lru_cache(maxsize=GRAPHS_PER_MODEL * DEFAULT_MODELS)
def graph(seed: int):
    """``random_graph(seed)``, built once (the default seeds serve the coverage test too)."""
    return random_graph(seed)


@functools.lru_cache(maxsize=2)
def _batch(seeds: tuple):
    """The graphs of ``seeds``, their module (imported once for the three targets) and torch's
    outputs."""
    graphs = [graph(s) for s in seeds]
    return graphs, import_graphs(graphs), [g.expected() for g in graphs]


def _flat(out) -> list[np.ndarray]:
    if hasattr(out, "numpy"):
        return [out.numpy()]
    result = []
    for o in out:
        result += _flat(o)
    return result


class ArmOnHost(arm.Pool):
    """The aarch64 rule with the config of ``tvm_pool``'s "arm" target (cortex-a72: NEON widths,
    no fp16 arithmetic), asked by a build for this machine; ``apply`` runs its prepare (FMAX,
    whole-plane sums) and finish (-0.0 sums) rewrites."""

    def takes(self, target) -> bool:  # noqa: ARG002
        return True

    def config(self, target):  # noqa: ARG002
        return super().config(resolve_target("arm"))

    def is_target_available(self, target) -> bool:  # noqa: ARG002
        return True


@contextlib.contextmanager
def capturing(store: dict):
    """Within it, ``tvm_pool.compile`` puts every PrimFunc, as scheduled, into ``store``."""
    scheduling = lowering.schedule_passes  # (the one in force: cuda_checks.scheduling's inside it)

    @tvm.transform.module_pass(opt_level=0, name="tvm_pool.test.capture_scheduled")
    def capture(m, _ctx):
        store.update({gv.name_hint: f for gv, f in m.functions_items() if isinstance(f, tvm.tirx.PrimFunc)})
        return m

    with mock.patch.object(lowering, "schedule_passes", lambda t: list(scheduling(t)) + [capture]):
        yield


def build(mod: tvm.IRModule, target: str, host, schedule: bool = True, scheduled: dict | None = None):
    """``mod`` built to run on this machine as ``target`` checks it (module docstring); the
    scheduled PrimFuncs go into ``scheduled`` when given."""
    import cuda_checks as cc  # pylint: disable=import-outside-toplevel

    with quiet():
        if target == "x86" or not schedule:
            return tvm_pool.compile(mod, host, schedule=schedule)
        # the aarch64 and CUDA schedules run on a generic x86-64 build (LLVM's backend for this
        # CPU, znver4, is the x86 target's to test: it aborts on some x86 code, seed 102244)
        if target == "aarch64":
            with cc.scheduling(ArmOnHost()), capturing({} if scheduled is None else scheduled):
                return tvm_pool.compile(mod, {"kind": "llvm"}, shipped_logs=False,
                                        tir_pipeline=strided_loads.register_pipeline())
        with cc.simulating("sm_80"):
            return tvm_pool.compile(mod, {"kind": "llvm"}, shipped_logs=False)


def run(ex, inputs) -> list[np.ndarray]:
    vm = relax.VirtualMachine(ex, tvm.cpu())
    return _flat(vm["main"](*[tvm.runtime.tensor(t.detach().numpy()) for t in inputs]))


# ---------------------------------------------------------------------------------------------
# comparison and diagnosis
# ---------------------------------------------------------------------------------------------


def compare(graph, got: list, want: list) -> list[str]:
    """Problems with one graph's outputs (empty: all match torch)."""
    problems = []
    if len(got) != len(want):
        return [f"{len(got)} outputs, torch {len(want)}"]
    for (name, is_index), g, w in zip(graph.outputs, got, want):
        w = w.detach().contiguous().numpy()
        if g.shape != w.shape or g.dtype != w.dtype:
            problems.append(f"output {name}: {g.dtype}{list(g.shape)}, torch {w.dtype}{list(w.shape)}")
            continue
        if is_index or g.dtype.kind in "iub":
            bad = g != w
            if bad.any():
                first = tuple(int(i) for i in np.argwhere(bad)[0])
                problems.append(f"output {name} (indices): {int(bad.sum())} of {bad.size} differ, first at {first}: "
                                f"{g[first]}, torch {w[first]}")
            continue
        g64, w64 = g.astype(np.float64), w.astype(np.float64)
        rtol, atol = TOLERANCE[graph.dtype]
        ok = np.isclose(g64, w64, rtol=rtol, atol=atol, equal_nan=True)
        if not ok.all():
            first = tuple(int(i) for i in np.argwhere(~ok)[0])
            with np.errstate(invalid="ignore"):
                err = np.nanmax(np.where(ok, 0, np.abs(g64 - w64)))
            problems.append(f"output {name}: {int((~ok).sum())} of {ok.size} differ (max abs error {err:.3g}), "
                            f"first at {first}: {g[first]}, torch {w[first]}")
    return problems


def rule_report(mod: tvm.IRModule, target: str, host, seed: int):
    """Every PrimFunc the target's rule schedules against its unscheduled self, run here."""
    import cuda_checks as cc  # pylint: disable=import-outside-toplevel

    with quiet():
        if target == "x86":
            return check_module(mod, host, seed=seed)
        if target == "aarch64":
            arm_target = resolve_target("arm")
            return check_pairs(scheduled_prim_funcs(lower_unscheduled(mod, arm_target), arm_target), "llvm", seed,
                               tir_pipeline=strided_loads.register_pipeline())
        rule = cc.CheckedPool(simulate=True)
        cpu = tvm.target.Target({"kind": "llvm"})
        pairs = []
        for gvar, func in lower_unscheduled(mod, "llvm").functions_items():
            if isinstance(func, tvm.tirx.PrimFunc):
                sch = rule.apply(func, cpu, False)
                if sch is not None:
                    pairs.append((gvar.name_hint, func, sch.mod["main"]))
        with cc.bounds_checked():
            return check_pairs(pairs, "llvm", seed)


def diagnose(graph, target: str, host) -> str:
    """Where a failing graph goes wrong: unscheduled, and each scheduled PrimFunc alone."""
    lines = []
    try:
        mod = import_graphs([graph])
    except Exception as err:  # noqa: BLE001
        return f"the graph alone does not import: {type(err).__name__}: {str(err)[:300]}"
    try:
        bad = compare(graph, run(build(mod, target, host, schedule=False), graph.inputs), graph.expected())
        lines.append("schedule=False: " + ("also differs: " + "; ".join(bad) if bad else "matches torch"))
    except Exception as err:  # noqa: BLE001
        lines.append(f"schedule=False: fails: {type(err).__name__}: {str(err)[:200]}")
    try:
        report = rule_report(mod, target, host, graph.seed)
        lines += report.diagnosis()
    except Exception as err:  # noqa: BLE001
        lines.append(f"per-PrimFunc check failed: {type(err).__name__}: {str(err)[:300]}")
    return "\n    ".join(lines)


def _outputs_per_graph(graphs, flat: list) -> list[list]:
    out, at = [], 0
    for g in graphs:
        out.append(flat[at: at + len(g.outputs)])
        at += len(g.outputs)
    return out


def _bisect(graphs, attempt) -> list:
    """``attempt(part)`` (a list, one entry per graph of ``part``) over ``graphs``, which it
    failed on as a whole: halves tried in turn down to the failing graphs (a few compiles, not
    one per graph), each of which gets why it failed."""
    if len(graphs) == 1:
        try:
            return attempt(graphs)
        except Exception as err:  # noqa: BLE001
            return [f"{type(err).__name__}: {str(err)[:400]}"]
    half, out = len(graphs) // 2, []
    for part in (graphs[:half], graphs[half:]):
        try:
            out += attempt(part)
        except Exception:  # noqa: BLE001
            out += _bisect(part, attempt)
    return out


def _whole_or_failing(graphs, mod, step, what: str) -> None:
    """``step(graphs, mod)`` on the whole batch's module; where it fails, an AssertionError
    naming ``what`` and each graph it fails on alone (:func:`_bisect`)."""
    try:
        step(graphs, mod)
    except Exception as err:  # noqa: BLE001
        why = [f"graph {g.describe()}\n    {r}" for g, r in zip(graphs, _bisect(graphs, step)) if isinstance(r, str)]
        raise AssertionError(f"{what}:\n" + "\n".join(why or [f"(the batch only) {err}"])) from err


def check_graphs(seeds, target: str, host, real_cuda: bool = False) -> None:
    graphs, mod, want = _batch(tuple(seeds))
    scheduled: dict = {}

    def outputs(part, part_mod=None):
        ex = build(part_mod or import_graphs(part), target, host, scheduled=scheduled if part_mod else None)
        return _outputs_per_graph(part, run(ex, [t for g in part for t in g.inputs]))

    try:
        got = outputs(graphs, mod)
    except Exception:  # noqa: BLE001  (find the graphs that do not compile)
        got = _bisect(graphs, outputs)
    failures = []
    for g, mine, theirs in zip(graphs, got, want):
        problems = [f"tvm_pool failed: {mine}"] if isinstance(mine, str) else compare(g, mine, theirs)
        if problems:
            failures.append(f"graph {g.describe()}\n    " + "\n    ".join(problems)
                            + "\n    " + diagnose(g, target, host))
    assert not failures, f"{target}: {len(failures)} of {len(graphs)} graphs differ from torch:\n" + "\n".join(failures)
    if target == "aarch64":
        check_aarch64_build(graphs, mod, scheduled)
    if target == "cuda" and real_cuda:
        check_cuda_lowering(graphs, mod)


def check_aarch64_build(graphs, mod, emulated: dict) -> None:
    """The module compiled for aarch64 (the real lowering, its rule on every function, LLVM's
    aarch64 backend); every pooling PrimFunc it schedules is the one run here (``emulated``)."""
    built: dict = {}

    def aarch64_build(part, part_mod=None):
        with quiet(), capturing(built if part_mod else {}):
            tvm_pool.compile(part_mod or import_graphs(part), resolve_target("arm"))
        return [None] * len(part)

    _whole_or_failing(graphs, mod, aarch64_build, "aarch64 build fails")
    pooling = sorted(name for name, func in built.items() if _has_pool_block(func))
    assert pooling, sorted(built)
    differ = [name for name in pooling
              if name not in emulated or not tvm_ffi.structural_equal(built[name], emulated[name])]
    assert not differ, f"the aarch64 build schedules these PrimFuncs otherwise than the host run: {differ}"


def check_cuda_lowering(graphs, mod) -> None:
    """The CUDA rule (not simulated) schedules every pooling PrimFunc of the module's real CUDA
    lowering (sm_80) without declining one."""
    from tvm_pool.schedules import cuda  # pylint: disable=import-outside-toplevel

    sm80 = tvm.target.Target({"kind": "cuda", "arch": "sm_80"}, host={"kind": "llvm"})

    def schedules(part, part_mod=None):
        with quiet(), sm80:
            fused = lowering.fuse(part_mod or import_graphs(part), sm80)
            missing = [gv.name_hint for gv, f in fused.functions_items()
                       if isinstance(f, tvm.tirx.PrimFunc) and _has_pool_block(f)
                       and cuda.Pool().apply(f, sm80, False) is None]
        assert not missing, f"the CUDA rule takes none of {missing}"
        return [None] * len(part)

    _whole_or_failing(graphs, mod, schedules, "CUDA lowering")


def _has_pool_block(func) -> bool:
    found = []
    tvm_ffi.structural_walk(func, (tvm.s_tir.SBlock, lambda block: found.append(analysis.is_pool_block(block))))
    return any(found)


def _batches(first_seed: int, count: int):
    return [tuple(range(first_seed + i * GRAPHS_PER_MODEL, first_seed + (i + 1) * GRAPHS_PER_MODEL))
            for i in range(count)]


def _params(first_seed: int, count: int, every_target: bool):
    """Every batch on every target (the targets of a batch one after another: one import), or
    each batch on one target in turn."""
    batches = _batches(first_seed, count)
    pairs = ([(seeds, target) for seeds in batches for target in TARGETS] if every_target
             else [(seeds, TARGETS[i % len(TARGETS)]) for i, seeds in enumerate(batches)])
    return [pytest.param(seeds, target, id=f"{target}-seeds{seeds[0]}-{seeds[-1]}") for seeds, target in pairs]


@x86_only
@pytest.mark.parametrize("seeds,target", _params(0, DEFAULT_MODELS, every_target=False))
def test_torch_fusion(seeds, target, host):
    check_graphs(seeds, target, host)


# (target, seed) -> (the CPUs it happens on, what LLVM says): graphs whose x86 build aborts the
# process inside LLVM's backend for those CPUs (not a tvm_pool error: LLVM's instruction
# selection; repro and variants in the commit that added the entry). They are left out of their
# batch on those CPUs and pinned by test_known_llvm_aborts, which fails once LLVM builds them.
KNOWN_LLVM_ABORTS = {
    # relu -> max_pool3d((2,3,3), pad (0,1,1), ceil, indices) on [1,1,3,3,5]: LLVM's vectoriser
    # gathers the relu'd taps of the padded key copy; selecting a zero_extend_vector_inreg of
    # v8i32 to v4i64 then fails for znver4 (skylake-avx512 and haswell build and match torch)
    ("x86", 102244): (("znver4",), "LLVM ERROR: Cannot select"),
}


def _aborting_here(target: str) -> set:
    from tvm_pool.targets import host_cpu  # pylint: disable=import-outside-toplevel

    return {seed for (t, seed), (cpus, _) in KNOWN_LLVM_ABORTS.items() if t == target and host_cpu() in cpus}


@x86_only
@pytest.mark.slow
@pytest.mark.parametrize("seeds,target", _params(100_000, SLOW_MODELS, every_target=True))
def test_torch_fusion_large(seeds, target, host):
    check_graphs(tuple(s for s in seeds if s not in _aborting_here(target)), target, host, real_cuda=True)


@x86_only
@pytest.mark.slow
@pytest.mark.parametrize("target, seed", sorted(KNOWN_LLVM_ABORTS))
def test_known_llvm_aborts(target, seed):
    """Each known abort still aborts on its CPUs (in a process of its own), and builds and
    matches torch elsewhere: an entry LLVM no longer needs fails here, to be removed."""
    import subprocess  # pylint: disable=import-outside-toplevel
    from pathlib import Path  # pylint: disable=import-outside-toplevel

    code = ("import sys; sys.path.insert(0, {tests!r}); from tvm_pool.targets import host_target; "
            "import test_torch_fusion as t; t.check_graphs(({seed},), {target!r}, host_target())")
    proc = subprocess.run([sys.executable, "-c", code.format(tests=str(Path(__file__).parent), seed=seed, target=target)],
                          capture_output=True, text=True, check=False, timeout=600)
    cpus, message = KNOWN_LLVM_ABORTS[target, seed]
    if seed in _aborting_here(target):
        assert proc.returncode != 0 and message in proc.stderr, (
            f"seed {seed} on {target} no longer aborts on this CPU: remove it from KNOWN_LLVM_ABORTS\n{proc.stderr[-2000:]}")
    else:
        assert proc.returncode == 0, f"seed {seed} on {target} (aborts on {cpus} only):\n{proc.stderr[-2000:]}"


# ---------------------------------------------------------------------------------------------
# the generator and the comparison themselves
# ---------------------------------------------------------------------------------------------

FAMILIES = (
    # pools
    "F.max_pool1d(", "F.max_pool2d(", "F.max_pool3d(", "ceil_mode=True", "padding=(", "dilation=",
    "return_indices=True", "stride=None", "F.avg_pool1d(", "F.avg_pool2d(", "F.avg_pool3d(",
    "count_include_pad=True", "count_include_pad=False", "divisor_override=", "F.lp_pool1d(", "F.lp_pool2d(",
    "F.lp_pool3d(", "norm_type=1.0", "norm_type=2.0", "norm_type=3.0", "F.adaptive_avg_pool1d(",
    "F.adaptive_avg_pool2d(", "F.adaptive_avg_pool3d(", "F.adaptive_max_pool1d(", "F.adaptive_max_pool2d(",
    "F.adaptive_max_pool3d(", "None", "[global]", ".mean(dim=", "keepdim=False", "unbatched", "float16",
    # producers
    "=relu(in", "=BN(", "=sigmoid(", "=clamp[", "[add of a branch]", "[producer is an output]",
    # consumer parameters in every broadcast form, added and multiplied
    "[bias (1,)]", "[bias (C,)->(C,1,1)]", "[bias (1,C,1,1)]", "[bias full]", "* param", "+ param",
    # reshapes and permutes
    ".flatten(", ".view(", ".reshape(-1)", "[channel-last]", "[channel-last bias]", ".transpose(-1, -2)",
    ".contiguous()",
    # a pool feeding pools
    "[pool of pool", "[two pools of pool", "[matching]", "[two pools of pool]", "[several pools of one producer]",
    # heads, the output used twice, concat with a branch
    "[head]", "used twice]", "[concat, pool at",
)


def test_generator_covers_the_families():
    """The default seeds build every pool, producer and consumer family the suite promises."""
    graphs = [graph(s) for s in range(GRAPHS_PER_MODEL * DEFAULT_MODELS)]
    text = " ".join(g.describe() for g in graphs)
    missing = [piece for piece in FAMILIES if piece not in text]
    assert not missing, missing
    # a concat and an add of two pools of one pool's output (shapes agreeing)
    two = [g.describe() for g in graphs if "[two pools of pool]" in g.describe()]
    assert any("=cat(" in d for d in two) and any(" + " in d.split("[two pools of pool:")[1] for d in two)
    ranks = {len(g.inputs[0].shape) for g in graphs}
    assert ranks == {2, 3, 4, 5}, ranks  # 1-3 spatial dims, batched and unbatched
    assert any(is_index for g in graphs for _, is_index in g.outputs)


def test_generator_is_seeded():
    """A seed is one graph: the same steps, inputs and outputs on every call."""
    a, b = random_graph(17), random_graph(17)
    assert a.describe() == b.describe()
    for x, y in zip(a.expected() + a.inputs, b.expected() + b.inputs):
        assert torch.equal(x, y)
    assert random_graph(18).describe() != a.describe()


def test_suite_catches_a_wrong_output(monkeypatch, host):
    """The comparison is not vacuous: a perturbed value or index fails and names the output, and
    a batch with a wrong graph fails naming its seed and steps."""
    g = next(g for g in map(random_graph, range(100)) if any(i for _, i in g.outputs))
    want = g.expected()
    same = [w.detach().numpy().copy() for w in want]
    assert compare(g, same, want) == []
    for k, (name, is_index) in enumerate(g.outputs):
        wrong = [w.copy() for w in same]
        wrong[k].reshape(-1)[0] += 1
        problems = compare(g, wrong, want)
        assert problems and name in problems[0] and ("indices" in problems[0]) == is_index, problems
    # a batch whose second graph's first output is off: the failure is that graph's
    seeds = (g.seed, g.seed + 1)
    graphs = [random_graph(s) for s in seeds]
    flat = [w.detach().numpy().copy() for h in graphs for w in h.expected()]
    flat[len(graphs[0].outputs)].reshape(-1)[0] += 0.5
    here = sys.modules[__name__]
    monkeypatch.setattr(here, "_batch", lambda s: (graphs, None, [h.expected() for h in graphs]))
    monkeypatch.setattr(here, "build", lambda *a, **k: None)
    monkeypatch.setattr(here, "run", lambda ex, inputs: flat)
    monkeypatch.setattr(here, "diagnose", lambda graph, target, host: "(diagnosis)")
    with pytest.raises(AssertionError) as info:
        check_graphs(seeds, "x86", host)
    message = str(info.value)
    assert "1 of 2 graphs differ" in message and graphs[1].describe() in message, message
    assert graphs[0].describe() not in message and graphs[1].outputs[0][0] in message


@pytest.mark.declines
def test_a_declined_function_fails_its_graph(monkeypatch, host):
    """A rule that declines a function inside a compile (here: the x86 rule failing on every
    function) fails the graph, naming the rule, instead of leaving a silenced warning."""
    from tvm_pool.schedules import cpu  # pylint: disable=import-outside-toplevel

    def broken(*args, **kwargs):
        raise IndexError("a test")

    monkeypatch.setattr(cpu, "schedule_function", broken)
    g = next(g for g in map(random_graph, range(100)) if "F.max_pool2d(" in g.describe() and len(g.inputs) == 1)
    with pytest.raises(AssertionError) as info:
        check_graphs((g.seed,), "x86", host)
    message = str(info.value)
    assert f"seed={g.seed}" in message and "x86 schedule declined" in message, message
    assert "IndexError: a test" in message, message


def _main(argv) -> int:
    """``python tests/test_torch_fusion.py TARGET FIRST LAST``: check seeds FIRST..LAST on TARGET
    one graph per process, for a batch that crashed the process (a segfault inside TVM leaves no
    graph to name: pytest-xdist reports the batch's test as crashed)."""
    import subprocess  # pylint: disable=import-outside-toplevel

    target, first, last = argv[0], int(argv[1]), int(argv[2])
    code = ("import sys; sys.path.insert(0, {tests!r}); from tvm_pool.targets import host_target; "
            "import test_torch_fusion as t; t.check_graphs(({seed},), {target!r}, host_target(), real_cuda=True)")
    bad = []
    for seed in range(first, last + 1):
        proc = subprocess.run([sys.executable, "-c", code.format(tests=str(__import__("pathlib").Path(__file__).parent),
                                                                 seed=seed, target=target)],
                              capture_output=True, text=True, check=False)
        verdict = "ok" if proc.returncode == 0 else f"exit {proc.returncode}"
        print(f"seed {seed}: {verdict}", flush=True)
        if proc.returncode:
            bad.append(seed)
            print((proc.stdout + proc.stderr)[-3000:])
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
