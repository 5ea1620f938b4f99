"""Emit tvm_pool's pooling operators into a Relax module being built.

Each function takes a ``relax.BlockBuilder`` inside a function/dataflow scope and a Relax tensor
expression, and returns the emitted Relax variable (a tuple variable when there are two outputs).
Symbolic dims in the input shape flow through :mod:`tvm_pool.spec` unchanged.

Example::

    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType([1, 64, 56, 56], "float32"))
    with bb.function("main", [x]):
        with bb.dataflow():
            y = tvm_pool.relax_ops.max_pool(bb, x, [3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
            out = bb.emit_output(y)
        bb.emit_func_output(out)
    ex = tvm_pool.compile(bb.get(), target="llvm")
"""

from __future__ import annotations

from typing import Sequence

from tvm import relax

from . import compute, spec
from .compute import checks


def _window_pool(bb, fn, name, data, kernel_shape, strides, pads, dilations, auto_pad, ceil_mode, **extra):
    """Emit a sliding-window compute: the window arguments in the order the computes take."""
    return bb.emit_te(
        fn, data, list(kernel_shape), strides, dilations, pads, auto_pad, bool(ceil_mode), **extra,
        primfunc_name_hint=f"tvm_pool_{name}",
    )


# TVM's own Relax ops for a 2-D window (relax_pool2d).
_RELAX_POOL2D = {"max_pool": relax.op.nn.max_pool2d, "avg_pool": relax.op.nn.avg_pool2d}


def relax_pool2d(bb, name, data, kernel_shape, strides, pads, dilations, auto_pad, ceil_mode, **extra):
    """``name`` ("max_pool", "avg_pool"; ``extra``: the average's ``count_include_pad``) as
    TVM's ``relax.op.nn.{max,avg}_pool2d`` on channel-first data, when its window is 2-D with
    static spatial sizes and explicit pads and Relax infers the output size tvm_pool's spec
    gives; else None. tvm_pool's legalization (``lowering.legalize_map``) builds it with the
    same compute and arguments as :func:`max_pool` / :func:`avg_pool`, and a layout pass
    (``relax.transform.ConvertLayout``: ``lowering.CONV_LAYOUTS``) can carry it to NHWC, where
    a ``call_tir`` it does not know stays channel-first between two transposes."""
    sinfo = data.ty
    if name not in _RELAX_POOL2D or auto_pad != "NOTSET" or sinfo.ndim != 4 or sinfo.shape is None:
        return None
    spatial = [spec.as_dim(d) for d in sinfo.shape.values[2:]]
    if not spec.is_static(*spatial):
        return None
    windows = spec.resolve_windows(spatial, kernel_shape, strides, dilations, pads, auto_pad, ceil_mode)
    call = _RELAX_POOL2D[name](data, pool_size=list(kernel_shape), strides=list(strides), padding=list(pads),
                               dilation=list(dilations), ceil_mode=bool(ceil_mode), layout="NCHW", **extra)
    out = bb.normalize(call).ty.shape.values[2:]
    if [int(d) for d in out] != [w.out_size for w in windows]:
        return None
    return bb.emit(call)


def max_pool(
    bb: relax.BlockBuilder,
    data: relax.Expr,
    kernel_shape: Sequence[int],
    strides: Sequence[int] | None = None,
    pads: Sequence[int] | None = None,
    dilations: Sequence[int] | None = None,
    auto_pad: str = "NOTSET",
    ceil_mode: bool = False,
    *,
    return_indices: bool = False,
    storage_order: int = 0,
    index_scope: str = "tensor",
    index_dtype: str = "int64",
) -> relax.Var:
    """Max pooling; ``return_indices`` adds the argmax output (see compute.max_pool)."""
    return _window_pool(
        bb, compute.max_pool, "max_pool", data, kernel_shape, strides, pads, dilations, auto_pad, ceil_mode,
        return_indices=return_indices, storage_order=storage_order, index_scope=index_scope,
        index_dtype=index_dtype,
    )


def avg_pool(
    bb: relax.BlockBuilder,
    data: relax.Expr,
    kernel_shape: Sequence[int],
    strides: Sequence[int] | None = None,
    pads: Sequence[int] | None = None,
    dilations: Sequence[int] | None = None,
    auto_pad: str = "NOTSET",
    ceil_mode: bool = False,
    *,
    count_include_pad: bool = False,
) -> relax.Var:
    """Average pooling (see compute.avg_pool for the divisor)."""
    return _window_pool(
        bb, compute.avg_pool, "avg_pool", data, kernel_shape, strides, pads, dilations, auto_pad, ceil_mode,
        count_include_pad=bool(count_include_pad),
    )


def lp_pool(
    bb: relax.BlockBuilder,
    data: relax.Expr,
    kernel_shape: Sequence[int],
    strides: Sequence[int] | None = None,
    pads: Sequence[int] | None = None,
    dilations: Sequence[int] | None = None,
    auto_pad: str = "NOTSET",
    ceil_mode: bool = False,
    *,
    p: float = 2.0,
) -> relax.Var:
    """Lp pooling: (sum of |x|^p over the window)^(1/p)."""
    return _window_pool(
        bb, compute.lp_pool, "lp_pool", data, kernel_shape, strides, pads, dilations, auto_pad, ceil_mode,
        p=float(p),
    )


def global_pool(bb: relax.BlockBuilder, data: relax.Expr, kind: str, p: float = 2.0) -> relax.Var:
    """kind: "max", "avg" or "lp" (GlobalMaxPool / GlobalAveragePool / GlobalLpPool)."""
    return bb.emit_te(
        compute.global_pool, data, kind, p=float(p), primfunc_name_hint=f"tvm_pool_global_{kind}_pool"
    )


# --------------------------------------------------------------------------------------------
# Adaptive pooling (OpenVINO AdaptiveMaxPool-8 / AdaptiveAvgPool-8) and TensorRT IPoolingLayer.
# --------------------------------------------------------------------------------------------

_INDEX_ELEMENT_TYPES = {"i32": "int32", "i64": "int64"}


def adaptive_output_size(bb: relax.BlockBuilder, data: relax.Expr, output_size, error_prefix: str = "") -> list:
    """The spatial output size as ints, or as fresh symbolic dims bound from a runtime tensor.

    ``output_size``: a list of ints, a Relax constant, or a 1-D int32/int64 Relax tensor of
    statically known length (its values may be known only at run time: one compiled module then
    serves every output size). A runtime ``output_size`` is checked in the compiled module
    like a static one (values >= 1; the output allocatable); ``error_prefix`` starts the
    messages of those checks (the ONNX importer names the node there).
    """
    import tvm  # pylint: disable=import-outside-toplevel
    from tvm import tirx  # pylint: disable=import-outside-toplevel

    ndim = data.ty.ndim
    if isinstance(output_size, tvm.ir.expr.Constant):
        output_size = [int(v) for v in output_size.data.numpy().reshape(-1)]
    if not isinstance(output_size, relax.Expr):
        values = [int(v) for v in output_size]
        if len(values) != ndim - 2:
            raise ValueError(f"output_size has {len(values)} values; an input of rank {ndim} needs {ndim - 2}")
        if any(v < 1 for v in values):
            raise ValueError(f"{error_prefix}output_size values must be >= 1, got {values}")
        lead = [d for d in data.ty.shape.values[:2] if isinstance(d, tirx.IntImm)]
        if not checks.fits_allocation([int(d) for d in lead] + values):
            raise ValueError(f"{error_prefix}{checks.too_large_message('output_size')}: got {values}")
        return values
    ty = output_size.ty
    if not isinstance(ty, relax.TensorType) or str(ty.dtype) not in ("int32", "int64") or ty.ndim != 1:
        raise ValueError("output_size must be a 1-D int32 or int64 tensor")
    length = ty.shape.values[0] if ty.shape is not None else None
    if length is None or not isinstance(length, tirx.IntImm):
        raise ValueError("output_size must have a statically known length")
    if int(length) != ndim - 2:
        raise ValueError(f"output_size has {int(length)} values; an input of rank {ndim} needs {ndim - 2}")
    if str(ty.dtype) != "int64":
        output_size = bb.emit(relax.op.astype(output_size, "int64"))
    checked = bb.emit_te(
        lambda sizes, x: checks.checked_sizes(
            sizes,
            x.shape[: ndim - int(length)],
            lambda vals: [(tirx.all(*[v >= 1 for v in vals]), f"{error_prefix}output_size values must be >= 1")],
            f"{error_prefix}{checks.too_large_message('output_size')}",
            shape_of=x,
        ),
        output_size,
        data,
        primfunc_name_hint="tvm_pool_check_output_size",
    )
    shape = bb.emit(relax.op.tensor_to_shape(checked))
    dims = [tirx.Var(f"adaptive_out{i}", "int64") for i in range(int(length))]
    bb.match_cast(shape, relax.ShapeType(dims))
    return dims


def adaptive_max_pool(
    bb: relax.BlockBuilder,
    data: relax.Expr,
    output_size,
    index_element_type: str = "i64",
    *,
    return_indices: bool = True,
    error_prefix: str = "",
) -> relax.Var:
    """OpenVINO AdaptiveMaxPool-8 on an [N, C, *spatial] tensor (1-3 spatial dims).

    Returns a tuple variable (values, indices); indices number each (n, c) plane's spatial
    positions row-major, as ``index_element_type`` "i32" or "i64". ``output_size``: see
    :func:`adaptive_output_size`.
    """
    if index_element_type not in _INDEX_ELEMENT_TYPES:
        raise ValueError(f"index_element_type must be 'i32' or 'i64', got {index_element_type!r}")
    dims = adaptive_output_size(bb, data, output_size, error_prefix)
    return bb.emit_te(
        compute.adaptive_max_pool,
        data,
        dims,
        return_indices=return_indices,
        index_dtype=_INDEX_ELEMENT_TYPES[index_element_type],
        primfunc_name_hint="tvm_pool_adaptive_max_pool",
    )


def adaptive_avg_pool(bb: relax.BlockBuilder, data: relax.Expr, output_size, *, error_prefix: str = "") -> relax.Var:
    """OpenVINO AdaptiveAvgPool-8 / torch adaptive_avg_poolNd on [N, C, *spatial]."""
    dims = adaptive_output_size(bb, data, output_size, error_prefix)
    return bb.emit_te(compute.adaptive_avg_pool, data, dims, primfunc_name_hint="tvm_pool_adaptive_avg_pool")


def tensorrt_pool(
    bb: relax.BlockBuilder,
    data: relax.Expr,
    pooling_type: str,
    window_size: Sequence[int],
    stride: Sequence[int] | None = None,
    pre_padding: Sequence[int] | None = None,
    post_padding: Sequence[int] | None = None,
    padding_mode: str = "EXPLICIT_ROUND_DOWN",
    blend_factor: float = 0.0,
    average_count_excludes_padding: bool = True,
) -> relax.Var:
    """TensorRT IPoolingLayer: pooling_type "MAX" | "AVERAGE" | "MAX_AVERAGE_BLEND" over the last
    2 or 3 axes; padding_mode one of ``tvm_pool.spec.TRT_PADDING_MODES``."""
    return bb.emit_te(
        compute.tensorrt_pool,
        data,
        pooling_type,
        [int(k) for k in window_size],
        None if stride is None else [int(s) for s in stride],
        None if pre_padding is None else [int(p) for p in pre_padding],
        None if post_padding is None else [int(p) for p in post_padding],
        padding_mode,
        float(blend_factor),
        bool(average_count_excludes_padding),
        primfunc_name_hint="tvm_pool_tensorrt_pool",
    )
