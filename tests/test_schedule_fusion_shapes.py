"""The x86 rule on every fused shape FuseOps can hand it: each PrimFunc here is one TE graph
(pool + producers + consumers), so the fused shape is certain whatever FuseOps decides.

Scheduled must equal unscheduled bit for bit, and the structure must be the safe one: a block is
attached to a pool's loops only when it is pointwise over the pool's output (see
``schedules/analysis.py``); a Concat with other branches, a second pool or an Add of two pools
stays its own nest. (The random whole-graph suite is tests/test_fusion.py.)
"""

from __future__ import annotations

import numpy as np
import pytest
import tvm
import tvm_ffi
from tvm import s_tir, te, tirx, topi

from tvm_pool import compute
from tvm_pool.schedules import analysis, x86
from tvm_pool.targets import host_target
from helpers import pool_module, x86_only

pytestmark = x86_only

TARGET = host_target()  # runnable here whatever the CPU; AVX2/AVX-512 variants in test_schedules_x86.py


def _relu(t):
    return te.compute(t.shape, lambda *i: tirx.max(t(*i), tirx.const(0, t.dtype)), name="relu")


def _max3(t, stride=1):
    return compute.max_pool(t, [3, 3], strides=[stride, stride], pads=[1, 1, 1, 1])


def _avg3(t, stride=1):
    return compute.avg_pool(t, [3, 3], strides=[stride, stride], pads=[1, 1, 1, 1], count_include_pad=False)


def _affine(t, scale):
    """A BatchNorm in eval mode: a 1-D per-channel parameter, broadcast over the plane."""
    return te.compute(t.shape, lambda n, c, *rest: t(n, c, *rest) * scale[c] + scale[c], name="affine")


def _concat(*ts):
    return topi.concatenate(list(ts), axis=1)


def _add(a, b):
    return topi.add(a, b)


# name -> (input shapes, graph builder returning the outputs)
SHAPES = {
    # the Inception pool branch: relu -> pool -> Concat with other branches of the input
    "concat_with_branches": ([(1, 5, 8, 8)], lambda x: [_concat(_max3(_relu(x)), _relu(x), topi.sigmoid(x))]),
    "concat_pool_last": ([(1, 3, 8, 8), (1, 4, 8, 8)], lambda x, y: [_concat(_relu(y), _avg3(x))]),
    "concat_strided_pool": ([(1, 4, 9, 9), (1, 2, 5, 5)], lambda x, y: [_concat(y, _max3(x, 2))]),
    # pointwise consumers that read other inputs: these ARE attached
    "add_with_branch": ([(1, 4, 8, 8), (1, 4, 8, 8)], lambda x, y: [_relu(_add(_max3(x), y))]),
    "add_broadcast_branch": ([(1, 4, 8, 8), (1, 4, 1, 1)], lambda x, y: [topi.multiply(_avg3(x), y)]),
    # the pool's output used twice: a pointwise use and a Concat
    "two_uses": ([(1, 4, 8, 8)], lambda x: [_relu(_max3(x)), _concat(_max3(x), x)]),
    "two_uses_one_output": ([(1, 4, 8, 8)], lambda x: [(lambda p: _add(_relu(p), topi.sigmoid(p)))(_max3(x))]),
    # pool of pool, several pools, an Add of two pools
    "pool_of_pool": ([(1, 3, 12, 12)], lambda x: [_avg3(_max3(x, 2))]),
    # two one-pass chains, the second reading the first (random fusion seed 102578 did not build)
    "pool_of_pool_1d": (
        [(2, 1, 11)],
        lambda x: [compute.lp_pool(compute.max_pool(_relu(x), [4], auto_pad="VALID"), [3], dilations=[2], ceil_mode=True, p=1)],
    ),
    # a 1x1 pool after a pool: pointwise over it, but a unit of its own (TFLite seed 1009)
    "one_tap_after_pool": ([(1, 4, 8, 8)], lambda x: [_relu(compute.max_pool(compute.max_pool(x, [2, 2], strides=[2, 2]), [1, 1]))]),
    "add_of_two_pools": ([(1, 3, 8, 8)], lambda x: [_add(_max3(x), _avg3(x))]),
    "two_pools_concat": ([(1, 3, 8, 8)], lambda x: [_concat(_max3(x), _avg3(_relu(x)))]),
    # a producer that is also an output of the function
    "shared_producer_output": ([(1, 4, 8, 8)], lambda x: (lambda r: [r, _max3(r)])(_relu(x))),
    # indices with a consumer reading both outputs, and a non-separable (2x2 s2) pool in a Concat
    "indices_consumer": (
        [(1, 3, 8, 8)],
        lambda x: (lambda vi: [_add(vi[0], topi.cast(vi[1], "float32"))])(
            compute.max_pool(x, [3, 3], strides=[2, 2], pads=[1, 1, 1, 1], return_indices=True)
        ),
    ),
    "direct_pool_concat": ([(1, 4, 8, 8), (1, 2, 4, 4)], lambda x, y: [_concat(compute.max_pool(x, [2, 2], strides=[2, 2]), y)]),
    # reductions (a global average, adaptive bins, a non-overlapping padded average)
    "global_avg_relu": ([(2, 8, 7, 7)], lambda x: [_relu(compute.global_pool(x, "avg"))]),
    "adaptive_avg_add": ([(1, 4, 10, 9), (1, 4, 3, 4)], lambda x, y: [_add(compute.adaptive_avg_pool(x, [3, 4]), y)]),
    "avg_2x2_padded": ([(1, 4, 9, 9)], lambda x: [compute.avg_pool(x, [2, 2], strides=[2, 2], pads=[1, 1, 0, 0])]),
    # BatchNorm (1-D parameters) -> Relu on two branches, Concat, 3-D 2x2x2 s2 max: every
    # producer inlined into the first pass, whose reads then include the 1-D parameters
    # (torchvision's S3D did not compile: the rule indexed their region by the pass's axis)
    "bn_concat_max3d": (
        [(1, 4, 4, 6, 6), (4,), (1, 3, 4, 6, 6), (3,)],
        lambda x, s, y, t: [compute.max_pool(_concat(_relu(_affine(x, s)), _relu(_affine(y, t))), [2, 2, 2], strides=[2, 2, 2])],
    ),
    # windows that tile planes exactly over rows shorter than a register (schedules/cpu_short_rows.py):
    # a producer, an Add with a branch; a BatchNorm, the output used twice; a bias
    "short_rows_max_relu_add": (
        [(2, 3, 28, 28), (2, 3, 14, 14)],
        lambda x, y: [_add(compute.max_pool(_relu(x), [2, 2], strides=[2, 2]), y)],
    ),
    "short_rows_avg_bn_two_uses": (
        [(1, 5, 14, 14), (5,)],
        lambda x, s: (lambda p: [_relu(p), topi.multiply(p, p)])(compute.avg_pool(_affine(x, s), [2, 2], strides=[2, 2])),
    ),
    "short_rows_max3_bias": (
        [(1, 4, 27, 27), (1, 4, 1, 1)], lambda x, b: [_add(compute.max_pool(x, [3, 3], strides=[3, 3]), b)],
    ),
    # large enough for the parallel paths (planes in parallel, the Concat's own parallel loop)
    "concat_large": ([(2, 16, 48, 48)], lambda x: [_concat(_max3(_relu(x)), _relu(x))]),
}


def _prim_func(name, batch=None):
    """The graph ``name`` as one PrimFunc; with ``batch`` (a symbolic size), every input's batch
    dimension is that size (a dynamic batch of torch.export or ONNX); 1-D inputs are
    per-channel parameters, which have no batch."""
    shapes, build = SHAPES[name]
    placeholder_shapes = [_batched(s, batch) for s in shapes]
    inputs = [te.placeholder(s, "float32", name=f"in{i}") for i, s in enumerate(placeholder_shapes)]
    outputs = build(*inputs)
    return te.create_prim_func(inputs + list(outputs)).with_attr("global_symbol", "main"), shapes, outputs


def _batched(shape, batch):
    return shape if batch is None or len(shape) < 2 else (batch, *shape[1:])


def _run(func, shapes, outputs, seed=0, batch=None):
    rng = np.random.default_rng(seed)
    lib = tvm.compile(tvm.IRModule({"main": func}), target=TARGET)
    shapes = [_batched(s, batch) for s in shapes]
    args = [tvm.runtime.tensor(rng.standard_normal(s).astype("float32")) for s in shapes]
    out_shapes = [[batch if batch is not None and i == 0 else int(d) for i, d in enumerate(o.shape)] for o in outputs]
    outs = [tvm.runtime.tensor(np.full(s, 7.5, dtype=str(o.dtype))) for s, o in zip(out_shapes, outputs)]
    lib["main"](*args, *outs)
    return [o.numpy() for o in outs]


@pytest.mark.parametrize("name", sorted(SHAPES))
def test_scheduled_equals_unscheduled(name):
    func, shapes, outputs = _prim_func(name)
    with TARGET:
        sch = x86.Pool().apply(func, TARGET, False)
    assert sch is not None, "the rule declined a PrimFunc with a pool"
    want = _run(func, shapes, outputs)
    got = _run(sch.mod["main"].with_attr("global_symbol", "main"), shapes, outputs)
    for w, g in zip(want, got):
        np.testing.assert_array_equal(g, w)


def _kinds_of_loops(func):
    kinds = set()
    tvm_ffi.structural_walk(func, (tirx.For, lambda loop: kinds.add(int(loop.kind))))
    return kinds


@pytest.mark.parametrize("name", sorted(SHAPES))
def test_symbolic_batch_scheduled_equals_unscheduled(name):
    """A symbolic batch (torch.export's ``Dim``, an ONNX ``N``): the batch stays a serial loop
    around the parallel planes, and the function is scheduled (values-only passes were left
    unscheduled here before), equal to unscheduled at two batch sizes."""
    func, shapes, outputs = _prim_func(name, batch=tirx.Var("n", "int64"))
    with TARGET:
        sch = x86.Pool().apply(func, TARGET, False)
    assert sch is not None, "the rule declined a PrimFunc with a pool"
    scheduled = sch.mod["main"].with_attr("global_symbol", "main")
    assert int(tirx.ForKind.PARALLEL) in _kinds_of_loops(scheduled), "no parallel loop"
    for batch in (1, 3):
        want = _run(func, shapes, outputs, batch=batch)
        got = _run(scheduled, shapes, outputs, batch=batch)
        for w, g in zip(want, got):
            np.testing.assert_array_equal(g, w)


def _loop_depth_of(sch, block_name):
    return len(sch.get_loops(sch.get_sblock(block_name)))


def _block_names(func):
    sch = s_tir.Schedule(func)
    return [sch.get(rv).name_hint for rv in analysis.root_blocks(sch)]


@pytest.mark.parametrize("name", ["concat_with_branches", "concat_pool_last", "two_uses", "two_pools_concat", "concat_large"])
def test_concat_stays_a_root_nest(name):
    """A Concat writes more than the pool makes: attached to the pool's loops it would be
    computed only for the pool's channels (the bug of issue 9)."""
    func, _, _ = _prim_func(name)
    concat = [n for n in _block_names(func) if n.startswith("T_concat")]
    assert concat
    with TARGET:
        sch = x86.Pool().apply(func, TARGET, False)
    root_names = [sch.get(rv).name_hint for rv in analysis.root_blocks(sch)]
    for c in concat:
        assert c in root_names, f"{c} was attached to a pool's loops"


@pytest.mark.parametrize("name,consumer", [("add_with_branch", "T_add"), ("add_broadcast_branch", "T_multiply")])
def test_pointwise_consumer_with_other_inputs_is_attached(name, consumer):
    """An Add/Mul reading the pool and a function input at the same (or broadcast) position is
    pointwise: it runs per row inside the pool's parallel loop (the speed of fused epilogues)."""
    func, _, _ = _prim_func(name)
    with TARGET:
        sch = x86.Pool().apply(func, TARGET, False)
    root_names = [sch.get(rv).name_hint for rv in analysis.root_blocks(sch)]
    assert consumer not in root_names
    assert any(name.startswith(("max_pool", "avg_pool")) for name in root_names) or _loop_depth_of(sch, consumer) > 1


def test_concat_large_gets_its_own_parallel_loop():
    func, _, _ = _prim_func("concat_large")
    with TARGET:
        sch = x86.Pool().apply(func, TARGET, False)
    concat = next(n for n in _block_names(func) if n.startswith("T_concat"))
    loops = sch.get_loops(sch.get_sblock(concat))
    assert sch.get(loops[0]).kind == tirx.ForKind.PARALLEL


def test_pointwise_predicate():
    """analysis.is_pointwise_over on the blocks of one function: what may be attached."""
    x = te.placeholder((1, 4, 8, 8), "float32", name="x")
    y = te.placeholder((1, 4, 8, 8), "float32", name="y")
    pooled = _max3(x)
    shifted = te.compute(pooled.shape, lambda n, c, h, w: pooled[n, c, h, tirx.max(w - 1, 0)], name="shifted")
    added = topi.add(pooled, y)
    cat = _concat(pooled, y)
    func = te.create_prim_func([x, y, shifted, added, cat])
    sch = s_tir.Schedule(func)
    pool_rv = sch.get_sblock("max_pool")
    owned = analysis.written_buffers(sch, pool_rv)
    assert analysis.is_pointwise_over(sch, sch.get_sblock("T_add"), owned)
    assert not analysis.is_pointwise_over(sch, sch.get_sblock("shifted"), owned)
    assert not analysis.is_pointwise_over(sch, sch.get_sblock("T_concat"), owned)
    attached = [sch.get(rv).name_hint for rv in analysis.attachable_consumers(sch, pool_rv)]
    assert attached == ["T_add"]


@pytest.mark.parametrize("name", [n for n in SHAPES if n.startswith("short_rows_")])
def test_short_rows_take_the_plane_copy(name):
    """Exact tilings over rows shorter than a register: each plane is copied with the window's
    rows set apart (a buffer of one more axis) and the outputs are one flat loop."""
    func, _, _ = _prim_func(name)
    with TARGET:
        sch = x86.Pool().apply(func, TARGET, False)
    copies = [b for b in _blocks(sch.mod["main"]) if b.name_hint.endswith("_global")]
    assert copies and all(len(analysis.region_buffer(b.writes[0]).shape) == 5 for b in copies)


def _blocks(func):
    found = []
    tvm_ffi.structural_walk(func, (tirx.SBlock if hasattr(tirx, "SBlock") else s_tir.SBlock, found.append))
    return found


@pytest.mark.parametrize("shape, out", [((2, 8, 56, 56), (1, 1)), ((1, 4, 7, 7), (1, 1)), ((1, 4, 32, 32), (2, 2))])
def test_global_and_few_output_planes_keep_the_reduction_schedule(shape, out):
    """A pool whose windows tile the plane into fewer outputs than a register holds (a global
    average, 7x7 or 56x56 into 1x1) has no flat loop of outputs to vectorise: it keeps the
    reduction's vector accumulators. (The plane copy made EfficientNet's 8x240x56x56 global
    average one scalar chain of 3,136 adds: 3.2 ms, against 0.5 ms with the accumulators.)"""
    from tvm import relax  # pylint: disable=import-outside-toplevel

    from tvm_pool import lowering  # pylint: disable=import-outside-toplevel

    # Relax's legalization, as in a user's compile (int64 shapes)
    mod = pool_module(shape, lambda x: relax.op.nn.adaptive_avg_pool2d(x, out))
    mod = relax.transform.LegalizeOps(lowering.legalize_map())(mod)
    func = next(f for _, f in mod.functions_items() if isinstance(f, tirx.PrimFunc))
    with TARGET:
        sch = x86.Pool().apply(func, TARGET, False)
    blocks = _blocks(sch.mod["main"])
    assert not [b for b in blocks if b.name_hint.endswith("_global")]
    if out == (1, 1) and shape[-1] * shape[-2] >= 256:  # contiguous taps: vector partial sums
        assert [b for b in blocks if "_rf" in b.name_hint], "a long sum without partial sums"
