"""Channel-last pooling (NWC / NHWC / NDHWC) through tvm_pool.compile, against torch.

- TVM's own Relax pools with a channel-last ``layout`` (what ``ConvertLayout`` and TVM's TFLite
  frontend emit) are legalized to tvm_pool's computes: random windows of every attribute, ranks
  1-3, with a producer before and a consumer after, compared with torch on the same data.
- Every other compute takes the layout as a parameter (``compute.layout``): its channel-last
  result is the channel-first one, transposed (the channel-first computes are checked against
  their oracles elsewhere).
- An ``out_layout`` other than ``layout`` is a transpose after the pool, never TVM's refusal.
- torchvision models through torch.export and ``ConvertLayout`` to NHWC: every pooling PrimFunc
  is tvm_pool's channel-last compute, scheduled.

The schedules of these PrimFuncs (scheduled equals unscheduled in fused graphs, on x86, aarch64
and CUDA) are tested in test_channel_last_schedules.py and test_channel_last_cuda.py.
"""

from __future__ import annotations

import numpy as np
import pytest
pytest.importorskip("torch")  # PyTorch is this file's oracle: skip the file without it
import torch  # noqa: E402
import torch.nn.functional as F
import tvm
from tvm import relax

import tvm_pool
from tvm_pool import compute
from tvm_pool.compute.common import LAYOUT_ATTR
from helpers import tolerance, x86_only

pytestmark = x86_only

LAST = {1: "NWC", 2: "NHWC", 3: "NDHWC"}
FIRST = {1: "NCW", 2: "NCHW", 3: "NCDHW"}


def to_last(x: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(np.moveaxis(x, 1, -1))


def to_first(x: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(np.moveaxis(x, -1, 1))


def random_window(rng, rank: int):
    """Random PyTorch-valid window attributes over a random channel-first shape."""
    kernel = [int(rng.integers(1, 5)) for _ in range(rank)]
    stride = [int(rng.integers(1, 4)) for _ in range(rank)]
    dilation = [int(rng.integers(1, 3)) for _ in range(rank)]
    pad = [int(rng.integers(0, k // 2 + 1)) for k in kernel]
    sizes = {1: (5, 40), 2: (4, 18), 3: (3, 9)}[rank]
    spatial = [int(rng.integers(max(sizes[0], (k - 1) * d + 1), sizes[1])) for k, d in zip(kernel, dilation)]
    shape = [int(rng.integers(1, 3)), int(rng.integers(1, 20))] + spatial
    return dict(shape=shape, kernel=kernel, stride=stride, dilation=dilation, pad=pad,
                ceil_mode=bool(rng.integers(0, 2)), count_include_pad=bool(rng.integers(0, 2)))


def torch_pool(kind: str, x: np.ndarray, case: dict) -> np.ndarray:
    rank = len(case["kernel"])
    t = torch.from_numpy(x)
    if kind == "max":
        fn = getattr(F, f"max_pool{rank}d")
        out = fn(t, case["kernel"], case["stride"], case["pad"], case["dilation"], ceil_mode=case["ceil_mode"])
    else:
        fn = getattr(F, f"avg_pool{rank}d")
        out = fn(t, case["kernel"], case["stride"], case["pad"], ceil_mode=case["ceil_mode"],
                 count_include_pad=case["count_include_pad"])
    return out.numpy()


def relax_pool(kind: str, y: relax.Expr, case: dict, layout: str, out_layout=None):
    rank = len(case["kernel"])
    args = (y, case["kernel"], case["stride"], case["pad"] + case["pad"])
    if kind == "max":
        return getattr(relax.op.nn, f"max_pool{rank}d")(
            *args, case["dilation"], case["ceil_mode"], layout=layout, out_layout=out_layout)
    return getattr(relax.op.nn, f"avg_pool{rank}d")(
        *args, [1] * rank, case["ceil_mode"], case["count_include_pad"], layout=layout, out_layout=out_layout)


def build_module(pools):
    """One Relax function: per pool, an input in channel-last layout, relu before, the pool,
    + 1 after. ``pools``: (kind, case) pairs."""
    bb = relax.BlockBuilder()
    params = [relax.Var(f"x{i}", relax.TensorType(to_last_shape(case["shape"]), "float32"))
              for i, (_, case) in enumerate(pools)]
    with bb.function("main", params):
        with bb.dataflow():
            outs = []
            for x, (kind, case) in zip(params, pools):
                y = bb.emit(relax.op.nn.relu(x))
                z = bb.emit(relax_pool(kind, y, case, LAST[len(case["kernel"])]))
                outs.append(bb.emit(relax.op.add(z, relax.const(1.0, "float32"))))
            result = bb.emit_output(relax.Tuple(outs))
        bb.emit_func_output(result)
    return bb.get()


def to_last_shape(shape):
    return [shape[0]] + list(shape[2:]) + [shape[1]]


def pooling_primfuncs(mod: tvm.IRModule, target) -> dict:
    """The pooling PrimFuncs of ``mod`` after tvm_pool's legalization, fusion and schedules."""
    target = tvm_pool.targets.resolve_target(target)
    with target:
        seq = tvm.transform.Sequential(tvm_pool.lowering.fusion_passes(target) + tvm_pool.lowering.schedule_passes(target))
        lowered = seq(mod)
    return {gv.name_hint: f for gv, f in lowered.functions_items()
            if isinstance(f, tvm.tirx.PrimFunc) and '"tvm_pool.kind"' in f.script()}


def run(mod, inputs, target="llvm", schedule=True):
    vm = relax.VirtualMachine(tvm_pool.compile(mod, target, schedule=schedule), tvm.cpu())
    result = vm["main"](*[tvm.runtime.tensor(x) for x in inputs])
    if isinstance(result, tvm.runtime.Tensor):
        return [result.numpy()]
    return [r.numpy() for r in result]


@pytest.mark.parametrize("rank", [1, 2, 3])
def test_random_relax_pools_match_torch(rank):
    """Random max and average pools of TVM's Relax ops in channel-last layout: tvm_pool's
    legalization and schedules against torch on the channel-first data."""
    rng = np.random.default_rng(100 + rank)
    pools = [(kind, random_window(rng, rank)) for kind in ("max", "avg") for _ in range(3)]
    mod = build_module(pools)
    xs = [rng.standard_normal(case["shape"]).astype("float32") for _, case in pools]
    got = run(mod, [to_last(x) for x in xs])
    rtol, atol = tolerance("float32", "onnxruntime")
    for (kind, case), x, out in zip(pools, xs, got):
        want = torch_pool(kind, np.maximum(x, 0), case) + 1
        np.testing.assert_allclose(to_first(out), want, rtol=rtol, atol=atol, err_msg=f"{kind} {case}")
    funcs = pooling_primfuncs(mod, "llvm")
    assert funcs and all(f.attrs is not None and "tirx.is_scheduled" in f.attrs for f in funcs.values()), sorted(funcs)
    assert all(f'"{LAYOUT_ATTR}": "channel_last"' in f.script() for f in funcs.values())


def edge_specials(rng, x: np.ndarray) -> np.ndarray:
    """``x`` with NaN, +inf and -inf scattered over it, most on the first and last positions of
    each spatial axis (where a padded window's taps are clamped), and one border all -inf."""
    x = x.copy()
    flat = x.reshape(-1)
    for value in (np.nan, np.inf, -np.inf):
        flat[rng.choice(flat.size, max(1, flat.size // 200), replace=False)] = value
    for axis in range(2, x.ndim):
        for end in (0, -1):
            edge = np.moveaxis(x, axis, 0)[end]
            picks = rng.random(edge.shape)
            edge[picks < 0.1] = np.nan
            edge[(picks >= 0.1) & (picks < 0.2)] = np.inf
            edge[(picks >= 0.2) & (picks < 0.3)] = -np.inf
    np.moveaxis(x, -1, 0)[0] = -np.inf
    return x


@pytest.mark.parametrize("rank", [1, 2, 3])
def test_padded_max_edges_match_torch(rank):
    """Channel-last max pools with padding and ceil-mode overhang, their taps clamped to the
    data (``windows.clamped_access``: dilation 1) or bounds-checked (dilation 2), on data whose
    borders hold NaN, +inf and -inf: bit-exact against torch (NaN propagates)."""
    rng = np.random.default_rng(300 + rank)
    cases = []
    for dilation in (1, 1, 1, 2):
        case = random_window(rng, rank)
        case["dilation"] = [dilation] * rank
        case["pad"] = [int(rng.integers(0, k // 2 + 1)) for k in case["kernel"]]
        case["shape"] = case["shape"][:2] + [max(n, (k - 1) * dilation + 1) for n, k in zip(case["shape"][2:], case["kernel"])]
        cases.append(case)
    cases.append(dict(shape=[2, 16] + [7] * rank, kernel=[3] * rank, stride=[2] * rank, dilation=[1] * rank,
                      pad=[1] * rank, ceil_mode=True, count_include_pad=False))
    bb = relax.BlockBuilder()
    params = [relax.Var(f"x{i}", relax.TensorType(to_last_shape(c["shape"]), "float32")) for i, c in enumerate(cases)]
    with bb.function("main", params):
        with bb.dataflow():
            outs = [bb.emit(relax_pool("max", x, c, LAST[rank])) for x, c in zip(params, cases)]
            result = bb.emit_output(relax.Tuple(outs))
        bb.emit_func_output(result)
    xs = [edge_specials(rng, rng.standard_normal(c["shape"]).astype("float32")) for c in cases]
    got = run(bb.get(), [to_last(x) for x in xs])
    for case, x, out in zip(cases, xs, got):
        np.testing.assert_array_equal(to_first(out), torch_pool("max", x, case), err_msg=str(case))


@pytest.mark.parametrize("dtype", ["int8", "uint8", "float16"])
def test_padded_max_other_dtypes_match_torch(dtype):
    """The clamped taps for integer dtypes (no NaN test) and float16 (which keeps its padded
    int16 keys): 3x3 s2 p1 and ceil-mode windows against torch on the same values in float32."""
    rng = np.random.default_rng(5)
    cases = [dict(shape=[2, 24, 15, 13], kernel=[3, 3], stride=[2, 2], dilation=[1, 1], pad=[1, 1], ceil_mode=c)
             for c in (False, True)]
    bb = relax.BlockBuilder()
    params = [relax.Var(f"x{i}", relax.TensorType(to_last_shape(c["shape"]), dtype)) for i, c in enumerate(cases)]
    with bb.function("main", params):
        with bb.dataflow():
            outs = [bb.emit(relax_pool("max", x, c, "NHWC")) for x, c in zip(params, cases)]
            result = bb.emit_output(relax.Tuple(outs))
        bb.emit_func_output(result)
    info = np.iinfo(dtype) if dtype != "float16" else None
    xs = [(rng.integers(info.min, info.max + 1, c["shape"]) if info else rng.standard_normal(c["shape"])).astype(dtype)
          for c in cases]
    got = run(bb.get(), [to_last(x) for x in xs])
    for case, x, out in zip(cases, xs, got):
        want = torch_pool("max", x.astype("float32"), case).astype(dtype)
        np.testing.assert_array_equal(to_first(out), want, err_msg=str(case))


def test_padded_max_reads_clamped_taps():
    """A padded channel-last 3x3 s2 max legalized for x86 reads the data directly at clamped
    indices: no padded copy and no bounds check left in its scheduled PrimFunc; a dilated one
    keeps the checks, and so does one built outside ``forms.clamped_taps``."""
    from tvm_pool.compute import windows  # noqa: PLC0415

    def func(dilation):
        case = dict(shape=[1, 64, 28, 28], kernel=[3, 3], stride=[2, 2], dilation=[dilation] * 2, pad=[1, 1],
                    ceil_mode=False)
        bb = relax.BlockBuilder()
        x = relax.Var("x", relax.TensorType(to_last_shape(case["shape"]), "float32"))
        with bb.function("main", [x]):
            with bb.dataflow():
                out = bb.emit_output(relax_pool("max", x, case, "NHWC"))
            bb.emit_func_output(out)
        (f,) = pooling_primfuncs(bb.get(), "llvm").values()
        return f.script()

    plain, dilated = func(1), func(2)
    assert "if_then_else" not in plain and "T.min(" in plain, plain
    assert "if_then_else" in dilated
    # the x86 rule's choice, entered by legalization for its targets; a compute built outside
    # forms.clamped_taps (the TFLite road's, other targets') keeps the padded taps
    from tvm_pool import schedules  # noqa: PLC0415
    from tvm_pool.compute import forms  # noqa: PLC0415

    assert schedules.clamped_taps(tvm_pool.targets.resolve_target("llvm"))
    assert not schedules.clamped_taps(tvm_pool.targets.resolve_target("arm"))
    assert not schedules.clamped_taps(tvm_pool.targets.resolve_target("cuda"))
    x = tvm.te.placeholder((1, 28, 28, 64), "float32", name="x")
    te_max = lambda: tvm.te.create_prim_func([x, compute.max_pool(x, [3, 3], [2, 2], None, [1, 1, 1, 1], layout="NHWC")])
    assert "if_then_else" in te_max().script()
    with forms.clamped_taps():
        assert "if_then_else" not in te_max().script()
    w = lambda **kw: tvm_pool.spec.AxisWindow(**{**dict(in_size=8, kernel=3, stride=2, dilation=1, pad_begin=1,
                                                        pad_end=1, out_size=4), **kw})
    assert windows.clamps_exactly([w(), w(pad_begin=0, pad_end=0, out_size=3)])
    assert not windows.clamps_exactly([w(dilation=2, out_size=3)])
    assert not windows.clamps_exactly([w(kernel=2, pad_begin=2, pad_end=2, out_size=6)])  # a window of padding only


def test_adaptive_avg_and_out_layout():
    """adaptive_avg_pool2d in NHWC (bins that do not divide), and pools whose out_layout differs
    from their layout: a transpose after the pool, in both directions."""
    rng = np.random.default_rng(7)
    x = rng.standard_normal((2, 13, 11, 5)).astype("float32")  # NHWC
    bb = relax.BlockBuilder()
    v = relax.Var("x", relax.TensorType(list(x.shape), "float32"))
    with bb.function("main", [v]):
        with bb.dataflow():
            a = bb.emit(relax.op.nn.adaptive_avg_pool2d(v, (4, 3), layout="NHWC"))
            b = bb.emit(relax.op.nn.max_pool2d(v, (3, 3), (2, 2), (1, 1, 1, 1), layout="NHWC", out_layout="NCHW"))
            c = bb.emit(relax.op.permute_dims(v, [0, 3, 1, 2]))
            d = bb.emit(relax.op.nn.avg_pool2d(c, (2, 2), (2, 2), layout="NCHW", out_layout="NHWC"))
            out = bb.emit_output(relax.Tuple([a, b, d]))
        bb.emit_func_output(out)
    got_a, got_b, got_d = run(bb.get(), [x])
    t = torch.from_numpy(to_first(x))
    rtol, atol = tolerance("float32", "onnxruntime")
    np.testing.assert_allclose(to_first(got_a), F.adaptive_avg_pool2d(t, (4, 3)).numpy(), rtol=rtol, atol=atol)
    np.testing.assert_array_equal(got_b, F.max_pool2d(t, 3, 2, 1).numpy())
    np.testing.assert_allclose(to_first(got_d), F.avg_pool2d(t, 2, 2).numpy(), rtol=rtol, atol=atol)


# Computes without a Relax op of TVM's: channel-last equals channel-first, transposed.
COMPUTES = [
    ("max_indices_tensor", lambda d, layout: compute.max_pool(
        d, [3, 3], [2, 2], None, [1, 1, 1, 1], return_indices=True, layout=layout)),
    ("max_indices_plane_nan_last", lambda d, layout: compute.max_pool(
        d, [2, 3], [1, 2], [2, 1], [1, 0, 1, 0], ceil_mode=True, return_indices=True, index_scope="plane",
        nan_index="last", layout=layout)),
    ("lp2", lambda d, layout: compute.lp_pool(d, [3, 2], [2, 1], None, [1, 0, 1, 0], p=2.0, layout=layout)),
    ("lp3", lambda d, layout: compute.lp_pool(d, [2, 2], [2, 2], p=3.0, layout=layout)),
    ("global_max", lambda d, layout: compute.global_pool(d, "max", layout=layout)),
    ("global_avg", lambda d, layout: compute.global_pool(d, "avg", layout=layout)),
    ("adaptive_max", lambda d, layout: compute.adaptive_max_pool(d, [4, 5], layout=layout)),
    ("trt_blend", lambda d, layout: compute.tensorrt_pool(
        d, "MAX_AVERAGE_BLEND", [3, 3], [2, 2], [1, 1], [1, 1], "EXPLICIT_ROUND_UP", blend_factor=0.25,
        layout=layout)),
]


def emit_compute(fn, shape, dtype, layout):
    bb = relax.BlockBuilder()
    v = relax.Var("x", relax.TensorType(list(shape), dtype))
    with bb.function("main", [v]):
        with bb.dataflow():
            out = bb.emit_output(bb.emit_te(fn, v, layout=layout, primfunc_name_hint="pool"))
        bb.emit_func_output(out)
    return bb.get()


@pytest.mark.parametrize("dtype", ["float32", "int8"])
def test_computes_channel_last_equal_channel_first(dtype):
    """Every compute without a TVM Relax op, NHWC against NCHW on the same data (NaNs and ties
    in the float data, so the index rules are exercised)."""
    rng = np.random.default_rng(11)
    x = rng.integers(-4, 5, (2, 6, 13, 12)).astype(dtype)  # small integers: many ties
    if dtype == "float32":
        x[0, 1, 3, 4] = np.nan
        x[1, 2, 5, 5:7] = np.nan
    for name, fn in COMPUTES:
        if dtype == "int8" and name.startswith(("lp", "trt_blend")):
            continue  # float-only formulas
        first = run(emit_compute(lambda d, layout: fn(d, layout), x.shape, dtype, "NCHW"), [x])
        last = run(emit_compute(lambda d, layout: fn(d, layout), to_last_shape(x.shape), dtype, "NHWC"), [to_last(x)])
        for a, b in zip(first, last):
            b = to_first(b) if b.ndim == 4 else b
            if dtype == "float32" and name.startswith(("lp", "global_avg", "trt")):
                np.testing.assert_allclose(b, a, rtol=1e-5, atol=1e-6, err_msg=name)
            else:
                np.testing.assert_array_equal(b, a, err_msg=name)


def test_int8_average_rounds_half_away_from_zero():
    """int8 NHWC average with int_rounding="half_away_from_zero": sums of +-1.5 and +-2.5 per
    window round away from zero (TFLite's quantized AVERAGE_POOL_2D)."""
    x = np.array([1, 2, -1, -2, 2, 3, -2, -3], "int8").reshape(1, 1, 8, 1)  # NHWC, windows of 2
    fn = lambda d, layout: compute.avg_pool(d, [1, 2], [1, 2], int_rounding="half_away_from_zero", layout=layout)
    (got,) = run(emit_compute(fn, x.shape, "int8", "NHWC"), [x])
    np.testing.assert_array_equal(got.reshape(-1), [2, -2, 3, -3])
    trunc = lambda d, layout: compute.avg_pool(d, [1, 2], [1, 2], layout=layout)
    (got,) = run(emit_compute(trunc, x.shape, "int8", "NHWC"), [x])
    np.testing.assert_array_equal(got.reshape(-1), [1, -1, 2, -2])


def test_layout_errors():
    x = tvm.te.placeholder((1, 4, 4, 3), "float32")
    with pytest.raises(ValueError, match="layout must be one of"):
        compute.max_pool(x, [2, 2], layout="NCHW4c")
    with pytest.raises(ValueError, match="int_rounding must be one of"):
        compute.avg_pool(x, [2, 2], int_rounding="up")


# ---------------------------------------------------------------------------------------------
# ConvertLayout: pools follow their producers into NHWC
# ---------------------------------------------------------------------------------------------

MODELS = ("resnet18", "googlenet", "inception_v3", "densenet121", "squeezenet1_0", "alexnet", "vgg11")
FRONTENDS = ("tvm_pool", "tvm")
# Default suite: SqueezeNet through tvm_pool's frontend (about 15 s alone on 2 cores; max pools
# with ceil_mode after Concats, a global average); the other 13 model-frontend pairs: -m slow.
CONVERT_DEFAULT = (("squeezenet1_0", "tvm_pool"),)
CONVERT_SLOW = [(m, f) for m in MODELS for f in FRONTENDS if (m, f) not in CONVERT_DEFAULT]


def convert_layout_road(name: str, frontend: str):
    from helpers.torchvision_models import build  # noqa: PLC0415  (imports torchvision)

    model, x = build(name)
    with torch.no_grad():
        want = model(x).numpy()
        exported = torch.export.export(model, (x,))
    if frontend == "tvm_pool":
        mod = tvm_pool.from_exported_program(exported)
    else:
        from tvm.relax.frontend.torch import from_exported_program  # noqa: PLC0415

        mod = from_exported_program(exported)
    mod = relax.transform.ConvertLayout({"relax.nn.conv2d": ["NHWC", "OHWI"]})(mod)
    funcs = pooling_primfuncs(mod, "llvm")
    label = f"{name} via {frontend}'s from_exported_program + ConvertLayout(NHWC)"
    assert funcs, f"{label}: no tvm_pool pooling PrimFunc"
    unscheduled = sorted(n for n, f in funcs.items() if f.attrs is None or "tirx.is_scheduled" not in f.attrs)
    assert not unscheduled, f"{label}: unscheduled {unscheduled}"
    channel_first = sorted(n for n, f in funcs.items() if f'"{LAYOUT_ATTR}": "channel_last"' not in f.script())
    assert not channel_first, f"{label}: pools left channel-first {channel_first}"
    (got,) = run(mod, [x.numpy()])
    scale = float(np.max(np.abs(want)))
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * max(scale, 1.0), err_msg=label)


@pytest.mark.parametrize("name,frontend", CONVERT_DEFAULT)
def test_convert_layout_models(name, frontend):
    convert_layout_road(name, frontend)


@pytest.mark.slow
@pytest.mark.parametrize("name,frontend", CONVERT_SLOW)
def test_convert_layout_models_all(name, frontend):
    convert_layout_road(name, frontend)
