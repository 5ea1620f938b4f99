"""Fusion differential suite: seeded random graphs around a pooling op, compiled by tvm_pool
for x86 (schedules on) and compared with onnxruntime.

TVM's FuseOps puts a pool's elementwise producers and consumers (BN, Relu, Add, Concat, ...)
into the pool's PrimFunc, and the x86 rule then schedules that fused function. The
single-operator suites never build such functions; this one does (tests/fusion_graphs.py
describes the graphs). Several independent graphs are compiled as one model (compile time
dominates); each graph's outputs are compared on their own, and a failing graph is then lowered
alone and every scheduled PrimFunc checked against its unscheduled self
(tests/primfunc_check.py), so the failure names the seed, the graph, the output and the function.

Tolerances are the differential suite's (float32 1e-5); float16 graphs are compared with the
float32 model of the same graph (same inputs and constants, all exact in float16) at 1e-2, since
the float16 graph rounds after each elementwise op. Indices are compared exactly.
Default: 300 graphs (25 compiles); ``-m slow``: 3000 more.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from tvm import relax

import tvm_pool
from fusion_graphs import feeds, random_graph, to_model
from helpers import tolerance, x86_only
from oracles import IR_VERSION, by_name, run_onnxruntime, run_tvm_pool
from primfunc_check import check_module, check_pairs

GRAPHS_PER_MODEL = 12
DEFAULT_MODELS = 25  # 300 graphs
SLOW_MODELS = 250  # 3000 graphs

pytestmark = x86_only


def run_ours(model, inputs, target, schedule=True) -> dict:
    """tvm_pool's outputs of ``model`` built for ``target``, by output name."""
    return by_name(model, run_tvm_pool(model, inputs, target=target, schedule=schedule))


def run_oracle(graphs) -> dict:
    model = to_model(graphs, dtype="float32")
    return by_name(model, run_onnxruntime(model, feeds(graphs, "float32")))


def compare(graph, ours: dict, want: dict) -> list[str]:
    """Problems with one graph's outputs (empty: all match)."""
    problems = []
    for name, is_index in graph.outputs:
        got, exp = np.asarray(ours[name]), np.asarray(want[name])
        if got.shape != exp.shape:
            problems.append(f"output {name}: shape {got.shape}, onnxruntime {exp.shape}")
            continue
        if is_index:
            bad = got != exp
            if bad.any():
                first = tuple(int(i) for i in np.argwhere(bad)[0])
                problems.append(f"output {name} (Indices): {int(bad.sum())} of {bad.size} differ, first at {first}: "
                                f"{got[first]} vs onnxruntime {exp[first]}")
            continue
        g, w = got.astype(np.float64), exp.astype(np.float64)
        rtol, atol = tolerance(graph.dtype, "onnxruntime")
        ok = np.isclose(g, w, rtol=rtol, atol=atol)
        if not ok.all():
            with np.errstate(invalid="ignore"):
                err = np.max(np.abs(g - w))
            first = tuple(int(i) for i in np.argwhere(~ok)[0])
            problems.append(f"output {name}: {int((~ok).sum())} of {ok.size} differ, max abs error {err:.3g}, "
                            f"first at {first}: {got[first]} vs onnxruntime {exp[first]}")
    return problems


def diagnose(graph, target) -> str:
    """Where a failing graph goes wrong: schedule=False, and the scheduled PrimFuncs alone."""
    lines = []
    model = to_model([graph])
    try:
        plain = run_ours(model, graph.feeds(), target, schedule=False)
        bad = compare(graph, plain, run_oracle([graph]))
        lines.append("schedule=False: " + ("also differs: " + "; ".join(bad) if bad else "matches onnxruntime"))
    except Exception as err:  # noqa: BLE001
        lines.append(f"schedule=False: fails: {type(err).__name__}: {str(err)[:200]}")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            report = check_module(tvm_pool.from_onnx(model), target, seed=graph.seed)
        lines += report.diagnosis()
    except Exception as err:  # noqa: BLE001
        lines.append(f"per-PrimFunc check failed: {type(err).__name__}: {str(err)[:200]}")
    return "\n    ".join(lines)


def check_graphs(seeds, target) -> None:
    graphs = [random_graph(s) for s in seeds]
    want = run_oracle(graphs)
    try:
        ours = run_ours(to_model(graphs), feeds(graphs), target)
    except Exception:  # noqa: BLE001  (find the graph that does not compile)
        ours = {}
        for g in graphs:
            try:
                ours.update(run_ours(to_model([g]), g.feeds(), target))
            except Exception as err:  # noqa: BLE001
                ours.update({name: f"{type(err).__name__}: {str(err)[:300]}" for name, _ in g.outputs})
    failures = []
    for g in graphs:
        errors = [ours[n] for n, _ in g.outputs if isinstance(ours.get(n), str)]
        problems = [f"tvm_pool failed: {errors[0]}"] if errors else compare(g, ours, want)
        if problems:
            failures.append(f"graph {g.describe()}\n    " + "\n    ".join(problems) + "\n    " + diagnose(g, target))
    assert not failures, f"{len(failures)} of {len(graphs)} graphs differ from onnxruntime:\n" + "\n".join(failures)


def _batches(first_seed: int, count: int):
    return [list(range(first_seed + i * GRAPHS_PER_MODEL, first_seed + (i + 1) * GRAPHS_PER_MODEL)) for i in range(count)]


@pytest.mark.parametrize("seeds", _batches(0, DEFAULT_MODELS), ids=lambda s: f"seeds{s[0]}-{s[-1]}")
def test_fusion_differential(seeds, host):
    check_graphs(seeds, host)


@pytest.mark.slow
@pytest.mark.parametrize("seeds", _batches(100_000, SLOW_MODELS), ids=lambda s: f"seeds{s[0]}-{s[-1]}")
def test_fusion_differential_large(seeds, host):
    check_graphs(seeds, host)


def test_generator_covers_the_families():
    """The default seeds build every pool, producer and consumer family the suite promises."""
    text = " ".join(random_graph(s).describe() for s in range(GRAPHS_PER_MODEL * DEFAULT_MODELS))
    for piece in ("MaxPool[", "MaxPool+Indices", "storage_order", "AveragePool[", "count_include_pad", "ceil_mode",
                  "dilations", "SAME_UPPER", "SAME_LOWER", "VALID", "LpPool[", "GlobalMaxPool", "GlobalAveragePool",
                  "GlobalLpPool", "Relu(", "BN(", "Sigmoid(", "Clip[", "Concat(axis=1", "of 3)", "Add(pool, br)",
                  "outputs Relu(pool) and", "pool2=", "pool1=", "producer is an output", "float16", "Mul(pool"):
        assert piece in text, piece
    ranks = {len(random_graph(s).inputs[0][1]) for s in range(60)}
    assert ranks == {3, 4, 5}


def test_suite_catches_a_wrong_output():
    """The comparison is not vacuous: a perturbed output fails and names the graph."""
    g = random_graph(3)
    want = run_oracle([g])
    ours = {k: v.copy() for k, v in want.items()}
    name = next(n for n, idx in g.outputs if not idx)
    ours[name].reshape(-1)[0] += 1.0
    problems = compare(g, ours, want)
    assert problems and name in problems[0]


def test_primfunc_check_names_a_wrong_function(host):
    """The per-PrimFunc checker is not vacuous: a "scheduled" function computing something else
    is reported under its symbol and buffer; an identical one is not."""
    from tvm import te  # pylint: disable=import-outside-toplevel

    a = te.placeholder((4, 8), "float32", name="a")
    plain = te.create_prim_func([a, te.compute((4, 8), lambda i, j: a[i, j] + 1, name="out")])
    wrong = te.create_prim_func([a, te.compute((4, 8), lambda i, j: a[i, j] * 2, name="out")])
    report = check_pairs([("fused_pool_concat", plain, wrong), ("same", plain, plain)], host)
    assert report.checked == ["fused_pool_concat", "same"]
    assert [(m.symbol, m.param) for m in report.mismatches] == [("fused_pool_concat", "out")]
    assert "fused_pool_concat" in report.summary()


def _block_sum_graphs():
    """Hand-built fused graphs around long windows of whole strides, which compute.pool sums in
    stride-long blocks (a reduction, then an elementwise sum of neighbouring blocks): producers
    before, a Concat with a branch, an Add with a branch and the pool used twice, a consumer."""
    import onnx  # pylint: disable=import-outside-toplevel
    from onnx import TensorProto, helper  # pylint: disable=import-outside-toplevel

    f = TensorProto.FLOAT
    avg = dict(kernel_shape=[64], strides=[32])
    padded = dict(kernel_shape=[57], strides=[19], pads=[7, 30], count_include_pad=1)
    nodes = [
        helper.make_node("Relu", ["X"], ["r"]),
        helper.make_node("AveragePool", ["r"], ["a"], **avg),
        helper.make_node("Concat", ["a", "Z"], ["concat"], axis=1),
        helper.make_node("AveragePool", ["X"], ["b"], **padded),
        helper.make_node("Add", ["b", "W"], ["added"]),
        helper.make_node("Sigmoid", ["X"], ["s"]),
        helper.make_node("LpPool", ["s"], ["l"], kernel_shape=[40], strides=[20], p=2),
        helper.make_node("Relu", ["l"], ["lp_relu"]),
    ]
    n = 1000
    out_a, out_b, out_l = (n - 64) // 32 + 1, (n + 37 - 57) // 19 + 1, (n - 40) // 20 + 1
    inputs = [helper.make_tensor_value_info("X", f, [2, 3, n]), helper.make_tensor_value_info("Z", f, [2, 2, out_a]),
              helper.make_tensor_value_info("W", f, [2, 3, out_b])]
    outputs = [helper.make_tensor_value_info(name, f, shape) for name, shape in (
        ("concat", [2, 5, out_a]), ("added", [2, 3, out_b]), ("b", [2, 3, out_b]), ("lp_relu", [2, 3, out_l]))]
    model = helper.make_model(helper.make_graph(nodes, "blocks", inputs, outputs),
                              opset_imports=[helper.make_opsetid("", 21)])
    model.ir_version = IR_VERSION
    onnx.checker.check_model(model)
    rng = np.random.default_rng(5)
    data = {i.name: (rng.integers(-16, 17, size=[d.dim_value for d in i.type.tensor_type.shape.dim]) / 8).astype("float32")
            for i in model.graph.input}
    return model, data


def test_block_sums_in_fused_graphs(host):
    model, data = _block_sum_graphs()
    want = by_name(model, run_onnxruntime(model, data))
    ours = run_ours(model, data, host)
    for name, exp in want.items():
        np.testing.assert_allclose(ours[name], exp, rtol=1e-5, atol=1e-5, err_msg=name)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        mod = tvm_pool.from_onnx(model)
    assert "_blocks" in relax.transform.LegalizeOps(
        customize_legalize_map=tvm_pool.lowering.legalize_map())(mod).script()  # the block form is what runs
    report = check_module(mod, host, seed=5)
    assert report.checked and not report.mismatches and not report.unchecked, report.summary()
