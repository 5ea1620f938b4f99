"""The benchmark's workloads: pooling layers from real networks, each built as one ONNX model
(onnx.helper) that every peer runs, and the seeded input it runs on.

The CPU, CUDA and ARM benchmarks and the shipped-tuning check (``tune_shipped``) all time these
same workloads, so their figures compare layer for layer.

The channel-last workloads (:func:`channel_last_workloads`, ``--only nhwc``) are Relax pools in
NHWC/NDHWC (:func:`relax_module`), each with its channel-first twin (:func:`channel_first_twin`:
the same pool on the same data in NCHW/NCDHW) and a NumPy reference (:func:`reference`) that
every peer's result is checked against before it is timed (``channel_last.py``).
"""

from __future__ import annotations

import functools
import itertools
from dataclasses import dataclass, field, replace

import numpy as np

from .cuda_replay import numpy_dtype
from .timing import aligned


@dataclass
class Workload:
    """One pooling layer: the ONNX operator, its input shape and attributes, and what the
    benchmark should know about it (out of cache, fused with its neighbours)."""

    name: str
    source: str
    op: str  # MaxPool / AveragePool / GlobalAveragePool / GlobalMaxPool / LpPool
    shape: list
    attrs: dict = field(default_factory=dict)
    dtype: str = "float32"
    indices: bool = False
    large: bool = False  # out of cache: the copy limit matters
    fused: bool = False  # Relu before the pool and Add (a per-channel bias) after
    # "onnx": one ONNX model that every peer runs; "torch": a torch.nn.functional pool (``op``,
    # keyword ``attrs``) through torch.export, run by tvm_pool's and stock TVM's
    # from_exported_program and by PyTorch eager (the PyTorch road; ONNX peers do not apply).
    road: str = "onnx"
    # "nhwc" road: the layout the shape is in (NWC / NHWC / NDHWC).
    layout: str | None = None
    # A workload TFLite defines: its padding (SAME / VALID, ``pads`` holds what it comes to),
    # and for an integer one the (scale, zero_point) of its input and output; its integer
    # averages round half away from zero, as TFLite's kernels do.
    tflite_padding: str | None = None
    quant: tuple | None = None
    # The PyTorch call the PyTorch peer times instead of the ONNX operator's twin (peers.torch_spec):
    # {"fn": name in torch.nn.functional, "args": [...], "kwargs": {...}}; a traced model layer's
    # own call (bench/layers.py).
    torch_op: dict | None = None
    # Why a workload takes the torch road (a traced layer ONNX cannot express the same way).
    road_reason: str | None = None


QUICK = ("resnet_maxpool", "resnet_gap", "inception_maxpool", "densenet_avgpool", "maxpool_int8")


def workloads(quick: bool) -> list[Workload]:
    """Every workload, or with ``quick`` the few of QUICK: one each of max, average, global and
    int8 pooling, enough to see that every peer still runs without the full run's minutes."""
    w = [
        Workload("resnet_maxpool", "ResNet-50 stem", "MaxPool", [1, 64, 112, 112],
                 dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])),
        Workload("resnet_gap", "ResNet-50 head", "GlobalAveragePool", [1, 2048, 7, 7]),
        Workload("vgg_maxpool", "VGG-16 block1", "MaxPool", [1, 64, 224, 224],
                 dict(kernel_shape=[2, 2], strides=[2, 2]), large=True),
        Workload("inception_maxpool", "GoogLeNet 3x3 s1", "MaxPool", [1, 192, 28, 28],
                 dict(kernel_shape=[3, 3], strides=[1, 1], pads=[1, 1, 1, 1])),
        Workload("inception_ceil", "GoogLeNet 3x3 s2 ceil", "MaxPool", [1, 64, 112, 112],
                 dict(kernel_shape=[3, 3], strides=[2, 2], ceil_mode=1)),
        Workload("densenet_avgpool", "DenseNet transition", "AveragePool", [1, 128, 56, 56],
                 dict(kernel_shape=[2, 2], strides=[2, 2])),
        Workload("avgpool_pad", "3x3 s1 p1 avg (count_include_pad=0)", "AveragePool", [1, 64, 56, 56],
                 dict(kernel_shape=[3, 3], strides=[1, 1], pads=[1, 1, 1, 1])),
        Workload("video3d_maxpool", "C3D/I3D 3-D", "MaxPool", [1, 64, 16, 56, 56],
                 dict(kernel_shape=[1, 3, 3], strides=[1, 2, 2], pads=[0, 1, 1, 0, 1, 1])),
        Workload("audio1d_maxpool", "1-D audio CNN", "MaxPool", [1, 128, 16000],
                 dict(kernel_shape=[4], strides=[4])),
        Workload("resnet_maxpool_b32", "ResNet stem, batch 32", "MaxPool", [32, 64, 112, 112],
                 dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]), large=True),
        Workload("maxpool_indices", "MaxPool with Indices", "MaxPool", [1, 64, 112, 112],
                 dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]), indices=True),
        Workload("maxpool_int8", "quantized stem (int8)", "MaxPool", [1, 64, 112, 112],
                 dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]), dtype="int8"),
        Workload("maxpool_fp16", "fp16 stem", "MaxPool", [1, 64, 112, 112],
                 dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]), dtype="float16"),
        Workload("fused_relu_pool_add", "Relu -> 3x3 s2 MaxPool -> Add", "MaxPool", [1, 64, 112, 112],
                 dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]), fused=True),
        # non-overlapping windows (kernel = stride): each input read once, no pass to share
        Workload("avgpool3d_k2", "3-D avg 2x2x2 s2 (video, NCDHW)", "AveragePool", [1, 64, 16, 56, 56],
                 dict(kernel_shape=[2, 2, 2], strides=[2, 2, 2])),
        Workload("maxpool3d_k2", "3-D max 2x2x2 s2 (video, NCDHW)", "MaxPool", [1, 64, 16, 56, 56],
                 dict(kernel_shape=[2, 2, 2], strides=[2, 2, 2])),
        Workload("maxpool_k3s3", "2-D max 3x3 s3", "MaxPool", [1, 96, 54, 54],
                 dict(kernel_shape=[3, 3], strides=[3, 3])),
        # global pools at large batch (out of cache)
        Workload("gap_b32", "ResNet-50 head, batch 32", "GlobalAveragePool", [32, 2048, 7, 7], large=True),
        Workload("gmp_b32", "global max, batch 32", "GlobalMaxPool", [32, 2048, 7, 7], large=True),
        # long windows: more than 16 taps along an axis
        Workload("inception_v3_head", "Inception-v3 head 8x8 avg", "AveragePool", [1, 2048, 8, 8],
                 dict(kernel_shape=[8, 8], strides=[1, 1])),
        Workload("longwin_max1d", "1-D max k32 s1 p16 (time series)", "MaxPool", [1, 64, 4096],
                 dict(kernel_shape=[32], strides=[1], pads=[16, 16])),
        Workload("longwin_avg1d", "1-D avg k64 s32 (audio frames)", "AveragePool", [1, 128, 16000],
                 dict(kernel_shape=[64], strides=[32])),
        # held-out shapes (issue 23): measured once the schedules were written, not tuned to
        Workload("small_maxpool", "3x3 s2 p1 max, small plane (held out)", "MaxPool", [1, 32, 40, 40],
                 dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])),
        Workload("avgpool_s1_28", "3x3 s1 p1 avg at 28x28 (held out)", "AveragePool", [1, 64, 28, 28],
                 dict(kernel_shape=[3, 3], strides=[1, 1], pads=[1, 1, 1, 1])),
        Workload("resnet18_gap", "ResNet-18 head (held out)", "GlobalAveragePool", [1, 512, 7, 7]),
        Workload("maxpool_int8_56", "int8 3x3 s2 p1 max at 56x56 (held out)", "MaxPool", [1, 64, 56, 56],
                 dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]), dtype="int8"),
    ]
    if quick:
        w = [x for x in w if x.name in QUICK]
    return w


def torch_workloads(quick: bool) -> list[Workload]:
    """The PyTorch road's workloads: the pooling variants only tvm_pool converts exactly
    (indices numbered per plane, adaptive max pooling with indices)."""
    w = [
        Workload("torch_maxpool_indices", "ResNet stem, max_pool2d_with_indices", "max_pool2d", [1, 64, 112, 112],
                 dict(kernel_size=3, stride=2, padding=1), indices=True, road="torch"),
        Workload("torch_adaptive_maxpool", "adaptive_max_pool2d 14x14 -> 7x7, indices", "adaptive_max_pool2d",
                 [1, 512, 14, 14], dict(output_size=(7, 7)), indices=True, road="torch"),
        Workload("torch_adaptive_maxpool_odd", "adaptive_max_pool2d 13x13 -> 6x6, indices (SPP)",
                 "adaptive_max_pool2d", [1, 256, 13, 13], dict(output_size=(6, 6)), indices=True, road="torch"),
    ]
    return w[:2] if quick else w


# Names ``--only`` takes for every kernel-bound GPU workload (kernel_bound_workloads), and the
# prefix of their names.
KERNEL_BOUND_GROUPS = ("kernel_bound", "large")
KERNEL_BOUND_PREFIX = "kb_"
K3S2P1 = dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])


def kernel_bound_workloads(quick: bool = False) -> list[Workload]:
    """The GPU benchmark at the sizes models run (issue 39): each kind of the small table at a
    batch (32-128) or clip that moves at least 50 MB per call, so the kernel and not the
    launch decides the time. Max 2-D and 3-D; float32, float16, bfloat16 and int8; global max
    and average; ceil mode on odd planes; NHWC and NDHWC; Indices; a fused Relu, max, Add;
    Lp and adaptive (the torch road). Names start with :data:`KERNEL_BOUND_PREFIX`."""
    def kb(name, source, op, shape, attrs=None, **kw):
        return Workload(f"{KERNEL_BOUND_PREFIX}{name}", source, op, shape, dict(attrs or {}), large=True, **kw)

    def nhwc(name, source, op, shape, attrs=None, **kw):
        layout = {4: "NHWC", 5: "NDHWC"}[len(shape)]
        return kb(name, source, op, shape, attrs, road="nhwc", layout=layout, **kw)

    w = [
        kb("max3x3s2", "ResNet stem 3x3 s2 p1, batch 32", "MaxPool", [32, 64, 112, 112], K3S2P1),
        kb("max3x3s2_f16", "ResNet stem, float16, batch 64", "MaxPool", [64, 64, 112, 112], K3S2P1, dtype="float16"),
        kb("max3x3s2_bf16", "ResNet stem, bfloat16, batch 64", "MaxPool", [64, 64, 112, 112], K3S2P1,
           dtype="bfloat16"),
        kb("max3x3s2_i8", "quantized stem, int8, batch 128", "MaxPool", [128, 64, 112, 112], K3S2P1, dtype="int8"),
        kb("max2x2s2", "VGG block1 2x2 s2, batch 8", "MaxPool", [8, 64, 224, 224],
           dict(kernel_shape=[2, 2], strides=[2, 2])),
        kb("max2x2s2_bf16", "VGG block1, bfloat16, batch 16", "MaxPool", [16, 64, 224, 224],
           dict(kernel_shape=[2, 2], strides=[2, 2]), dtype="bfloat16"),
        kb("max3d_1x3x3", "C3D/I3D 1x3x3 s(1,2,2), 8 clips", "MaxPool", [8, 64, 16, 56, 56],
           dict(kernel_shape=[1, 3, 3], strides=[1, 2, 2], pads=[0, 1, 1, 0, 1, 1])),
        kb("max3d_2x2x2", "3-D 2x2x2 s2, 8 clips", "MaxPool", [8, 64, 16, 56, 56],
           dict(kernel_shape=[2, 2, 2], strides=[2, 2, 2])),
        kb("max_ceil_odd", "3x3 s2 ceil mode on 111x111 planes, batch 32", "MaxPool", [32, 64, 111, 111],
           dict(kernel_shape=[3, 3], strides=[2, 2], ceil_mode=1)),
        kb("gmp", "global max 7x7, batch 128", "GlobalMaxPool", [128, 2048, 7, 7]),
        kb("gap", "ResNet-50 head 7x7, batch 128", "GlobalAveragePool", [128, 2048, 7, 7]),
        kb("gap_56", "global average of 56x56 planes (squeeze-excitation), batch 32", "GlobalAveragePool",
           [32, 256, 56, 56]),
        kb("indices", "MaxPool with Indices 3x3 s2 p1, batch 32", "MaxPool", [32, 64, 112, 112], K3S2P1, indices=True),
        kb("fused", "Relu -> 3x3 s2 max -> Add, batch 32", "MaxPool", [32, 64, 112, 112], K3S2P1, fused=True),
        kb("avg3x3s1", "3x3 s1 p1 avg excluding pads, batch 64", "AveragePool", [64, 64, 56, 56],
           dict(kernel_shape=[3, 3], strides=[1, 1], pads=[1, 1, 1, 1])),
        kb("avg2x2s2", "DenseNet transition 2x2 s2 avg, batch 64", "AveragePool", [64, 128, 56, 56],
           dict(kernel_shape=[2, 2], strides=[2, 2])),
        kb("lp3x3s2", "LpPool p=2 3x3 s2, batch 32", "LpPool", [32, 64, 112, 112],
           dict(kernel_shape=[3, 3], strides=[2, 2], p=2)),
        kb("adaptive_max", "adaptive_max_pool2d 14x14 -> 6x6, batch 128", "adaptive_max_pool2d", [128, 512, 14, 14],
           dict(output_size=(6, 6)), road="torch"),
        kb("adaptive_avg", "adaptive_avg_pool2d 14x14 -> 6x6, batch 128", "adaptive_avg_pool2d", [128, 512, 14, 14],
           dict(output_size=(6, 6)), road="torch"),
        nhwc("nhwc_max3x3s2", "ResNet stem NHWC, batch 32", "MaxPool", [32, 112, 112, 64], K3S2P1),
        nhwc("ndhwc_max1x3x3", "C3D/I3D 1x3x3 NDHWC, 8 clips", "MaxPool", [8, 16, 56, 56, 64],
             dict(kernel_shape=[1, 3, 3], strides=[1, 2, 2], pads=[0, 1, 1, 0, 1, 1])),
        nhwc("nhwc_avg3x3s1", "3x3 s1 p1 avg excluding pads NHWC, batch 64", "AveragePool", [64, 56, 56, 64],
             dict(kernel_shape=[3, 3], strides=[1, 1], pads=[1, 1, 1, 1], count_include_pad=0)),
        nhwc("nhwc_gap", "ResNet-50 head NHWC, batch 128", "GlobalAveragePool", [128, 7, 7, 2048]),
    ]
    return [x for x in w if x.name in ("kb_max3x3s2", "kb_gap")] if quick else w


# Names ``--only`` takes for every channel-last workload.
CHANNEL_LAST_GROUPS = ("nhwc", "channel_last")
QUICK_CHANNEL_LAST = ("nhwc_resnet_maxpool", "nhwc_tflite_avgpool_int8")
# Channel-first layout names by spatial rank (the twins' layouts).
CHANNEL_FIRST_LAYOUTS = {1: "NCW", 2: "NCHW", 3: "NCDHW"}


def channel_last_workloads(quick: bool) -> list[Workload]:
    """The channel-last workloads (issue 20): Relax pools in NHWC/NDHWC that tvm_pool and stock
    TVM compile, LiteRT runs as a TFLite model and PyTorch on a channels_last tensor."""
    def nhwc(name, source, op, shape, attrs=None, **kw):
        layout = {3: "NWC", 4: "NHWC", 5: "NDHWC"}[len(shape)]
        return Workload(name, source, op, shape, attrs or {}, road="nhwc", layout=layout, **kw)

    w = [
        nhwc("nhwc_resnet_maxpool", "ResNet-50 stem, NHWC", "MaxPool", [1, 112, 112, 64],
             dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])),
        nhwc("nhwc_vgg_maxpool", "VGG-16 block1, NHWC", "MaxPool", [1, 224, 224, 64],
             dict(kernel_shape=[2, 2], strides=[2, 2]), large=True),
        nhwc("nhwc_inception_avgpool", "Inception 3x3 s1 p1 avg (count_include_pad=0), NHWC", "AveragePool",
             [1, 28, 28, 192], dict(kernel_shape=[3, 3], strides=[1, 1], pads=[1, 1, 1, 1], count_include_pad=0)),
        nhwc("nhwc_gap_b8", "ResNet-50 head, batch 8, NHWC", "GlobalAveragePool", [8, 7, 7, 2048]),
        nhwc("nhwc_video3d_maxpool", "C3D/I3D 3-D, NDHWC", "MaxPool", [1, 16, 56, 56, 64],
             dict(kernel_shape=[1, 3, 3], strides=[1, 2, 2], pads=[0, 1, 1, 0, 1, 1])),
        nhwc("nhwc_tflite_avgpool_int8", "TFLite int8 3x3 s2 SAME avg", "AveragePool", [1, 56, 56, 64],
             dict(kernel_shape=[3, 3], strides=[2, 2], pads=tflite_pads("SAME", [56, 56], [3, 3], [2, 2]),
                  count_include_pad=0),
             dtype="int8", tflite_padding="SAME", quant=(0.05, 3)),
    ]
    return [x for x in w if x.name in QUICK_CHANNEL_LAST] if quick else w


def tflite_pads(padding: str, spatial, kernel, strides) -> list:
    """TFLite's SAME/VALID padding as ONNX-style pads (begins, then ends)."""
    from tvm_pool.tflite.formulas import pool_geometry  # pylint: disable=import-outside-toplevel

    top, left, bottom, right = pool_geometry(padding, spatial, kernel, strides)[0]
    return [top, left, bottom, right]


def is_channel_last(w: Workload) -> bool:
    """Whether ``w``'s shape is channel-last (a nhwc-road workload; its twin is not)."""
    return w.layout is not None and w.layout.endswith("C")


def channel_first_twin(w: Workload) -> Workload:
    """The same pool on the same data in the channel-first layout (NCW / NCHW / NCDHW)."""
    shape = [w.shape[0], w.shape[-1], *w.shape[1:-1]]
    return replace(w, name=f"{w.name}_channel_first", shape=shape, layout=CHANNEL_FIRST_LAYOUTS[len(shape) - 2])


def to_channel_first(x: np.ndarray) -> np.ndarray:
    """A channel-last array as a contiguous channel-first one (the twin's input)."""
    return np.ascontiguousarray(np.moveaxis(x, -1, 1))


def to_channel_last(x: np.ndarray) -> np.ndarray:
    return np.moveaxis(x, 1, -1)


def int_rounding(w: Workload) -> str:
    """How an integer average divides: TFLite's kernels round half away from zero."""
    return "half_away_from_zero" if w.tflite_padding else "toward_zero"


def window(w: Workload):
    """(kernel, strides, pads) of a nhwc-road workload, a global pool as one window over the
    spatial axes."""
    spatial = _spatial(w)
    rank = len(spatial)
    if w.op.startswith("Global"):
        return list(spatial), [1] * rank, [0] * 2 * rank
    k = list(w.attrs["kernel_shape"])
    return k, list(w.attrs.get("strides", k)), list(w.attrs.get("pads", [0] * 2 * rank))


def _spatial(w: Workload) -> list:
    return list(w.shape[1:-1]) if is_channel_last(w) else list(w.shape[2:])


def relax_module(w: Workload):
    """The Relax module of a nhwc-road workload (or of its twin), in ``w.layout``: TVM's own
    ``relax.op.nn`` pools, which ``tvm_pool.compile`` legalizes to its computes. An integer
    average rounding half away from zero (TFLite's) has no Relax op: it is tvm_pool's compute
    (``compute.avg_pool(int_rounding=...)``) emitted as a TE function."""
    from tvm import relax  # pylint: disable=import-outside-toplevel

    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType(list(w.shape), w.dtype))
    with bb.function("main", [x]):
        with bb.dataflow():
            out = bb.emit_output(_relax_pool(bb, w, x))
        bb.emit_func_output(out)
    return bb.get()


def _relax_pool(bb, w: Workload, x):
    from tvm import relax  # pylint: disable=import-outside-toplevel

    rank = len(w.shape) - 2
    nn = relax.op.nn
    if w.op == "GlobalAveragePool":
        return getattr(nn, f"adaptive_avg_pool{rank}d")(x, 1, layout=w.layout)
    kernel, strides, pads = window(w)
    if w.op == "MaxPool":
        return getattr(nn, f"max_pool{rank}d")(x, kernel, strides, pads, layout=w.layout)
    include = bool(w.attrs.get("count_include_pad", 0))
    if np.issubdtype(np.dtype(w.dtype), np.integer) and int_rounding(w) != "toward_zero":
        from tvm_pool import compute  # pylint: disable=import-outside-toplevel

        return bb.emit_te(compute.avg_pool, x, kernel, strides, None, pads, count_include_pad=include,
                          layout=w.layout, int_rounding=int_rounding(w), primfunc_name_hint="bench_avg_pool")
    return getattr(nn, f"avg_pool{rank}d")(x, kernel, strides, pads, count_include_pad=include, layout=w.layout)


def reference(w: Workload, x: np.ndarray) -> np.ndarray:
    """NumPy's result of a nhwc-road workload on channel-last ``x`` (float64 sums, integer
    averages rounded as :func:`int_rounding` says), in ``x``'s dtype."""
    kernel, strides, pads = window(w)
    integer = np.issubdtype(x.dtype, np.integer)
    wide = x.astype(np.int64 if integer else np.float64)
    if w.op == "MaxPool":
        fill = np.iinfo(x.dtype).min if integer else -np.inf
        return functools.reduce(np.maximum, _taps(_pad(wide, pads, fill), kernel, strides)).astype(x.dtype)
    total = sum(_taps(_pad(wide, pads, 0), kernel, strides))
    if w.attrs.get("count_include_pad", 0):
        count = np.prod(kernel)
    else:
        ones = np.ones((1, *x.shape[1:-1], 1), np.int64)
        count = sum(_taps(_pad(ones, pads, 0), kernel, strides))
    if not integer:
        return (total / count).astype(x.dtype)
    if int_rounding(w) == "half_away_from_zero":
        return (np.sign(total) * ((np.abs(total) + count // 2) // count)).astype(x.dtype)
    return (np.sign(total) * (np.abs(total) // count)).astype(x.dtype)


def _pad(x, pads, fill):
    rank = len(pads) // 2
    return np.pad(x, [(0, 0), *zip(pads[:rank], pads[rank:]), (0, 0)], constant_values=fill)


def _taps(padded, kernel, strides):
    """Each window tap's view of the padded channel-last array: one array of outputs per tap."""
    rank = len(kernel)
    sizes = [padded.shape[1 + a] for a in range(rank)]
    outs = [(n - k) // s + 1 for n, k, s in zip(sizes, kernel, strides)]
    for offset in itertools.product(*(range(k) for k in kernel)):
        idx = tuple(slice(o, o + s * (n - 1) + 1, s) for o, s, n in zip(offset, strides, outs))
        yield padded[(slice(None), *idx, slice(None))]


def torch_function(w: Workload):
    """``x -> F.<op>(x, **attrs)`` of a torch-road workload (a max pool's with ``return_indices``)."""
    import torch.nn.functional as F  # pylint: disable=import-outside-toplevel

    fn = getattr(F, w.op)
    if "max_pool" not in w.op:  # the average and Lp pools return no indices
        return lambda x: fn(x, **w.attrs)
    return lambda x: fn(x, **w.attrs, return_indices=w.indices)


def _torch_program(w: Workload):
    import torch  # pylint: disable=import-outside-toplevel

    call = torch_function(w)

    class Pool(torch.nn.Module):
        def forward(self, x):
            return call(x)

    return torch.export.export(Pool(), (torch.from_numpy(make_input(w)),))


def _onnx_dtype(dtype):
    from onnx import TensorProto  # pylint: disable=import-outside-toplevel

    return {"float32": TensorProto.FLOAT, "float16": TensorProto.FLOAT16, "bfloat16": TensorProto.BFLOAT16,
            "int8": TensorProto.INT8, "uint8": TensorProto.UINT8, "float64": TensorProto.DOUBLE}[dtype]


def build_model(w: Workload):
    """The ONNX model of ``w`` (input "x", outputs "y" and, with indices, "i"), shapes inferred so
    that ``out_bytes`` can read the output sizes, at the IR version every peer accepts. A
    torch-road workload's model is its ``torch.export.ExportedProgram``."""
    if w.road == "torch":
        return _torch_program(w)
    import onnx  # pylint: disable=import-outside-toplevel
    from onnx import TensorProto, helper  # pylint: disable=import-outside-toplevel

    outs = ["y", "i"] if w.indices else ["y"]
    nodes, inits = [helper.make_node(w.op, ["x"], outs, **w.attrs)], []
    if w.fused:
        nodes = [
            helper.make_node("Relu", ["x"], ["x_relu"]),
            helper.make_node(w.op, ["x_relu"], ["pooled"], **w.attrs),
            helper.make_node("Add", ["pooled", "bias"], ["y"]),
        ]
        inits = [helper.make_tensor("bias", _onnx_dtype(w.dtype), [w.shape[1]] + [1] * (len(w.shape) - 2),
                                    fused_bias(w).ravel().tolist())]
    x = helper.make_tensor_value_info("x", _onnx_dtype(w.dtype), w.shape)
    ys = [helper.make_tensor_value_info("y", _onnx_dtype(w.dtype), None)]
    if w.indices:
        ys.append(helper.make_tensor_value_info("i", TensorProto.INT64, None))
    graph = helper.make_graph(nodes, w.name, [x], ys, initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 22)])
    model = onnx.shape_inference.infer_shapes(model)
    model.ir_version = 10  # onnxruntime 1.31 refuses IR 14
    return model


def fused_bias(w: Workload) -> np.ndarray:
    """The per-channel bias a fused workload adds after the pool (shape C x 1 x ... x 1)."""
    return np.linspace(-1.0, 1.0, w.shape[1]).astype(w.dtype).reshape([w.shape[1]] + [1] * (len(w.shape) - 2))


def make_input(w: Workload) -> np.ndarray:
    """The input of ``w``, seeded so that every peer and every run times the same data (integer
    types over their whole range, so max pooling does not see ties everywhere), 64-byte
    aligned so that the TVM peers read this array itself, as the others do (timing.tvm_input)."""
    rng = np.random.default_rng(0)
    if w.dtype in ("int8", "uint8"):
        info = np.iinfo(w.dtype)
        return aligned(rng.integers(info.min, info.max, size=w.shape, dtype=w.dtype))
    return aligned(rng.standard_normal(w.shape).astype(numpy_dtype(w.dtype)))


def out_bytes(model) -> int:
    """Bytes of all of ``model``'s outputs (the indices of MaxPool included): with the input's,
    what one call must move at least, the size of the copy limit."""
    from onnx import helper  # pylint: disable=import-outside-toplevel

    if hasattr(model, "graph_signature"):  # a torch.export program: its outputs' fake tensors
        outs = [n for n in model.graph.nodes if n.op == "output"][0].args[0]
        return sum(o.meta["val"].numel() * o.meta["val"].element_size() for o in outs)
    total = 0
    for o in model.graph.output:
        t = o.type.tensor_type
        n = int(np.prod([d.dim_value for d in t.shape.dim]))
        total += n * np.dtype(helper.tensor_dtype_to_np_dtype(t.elem_type)).itemsize
    return total

