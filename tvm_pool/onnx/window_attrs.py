"""Parsing and validation of the window attributes MaxPool, AveragePool and LpPool share."""

from __future__ import annotations

from dataclasses import dataclass

from tvm import relax

from .. import spec
from ..errors import InvalidModelError
from .base import NodeAttributes, check_dtype, check_outputs, tensor_type

FLOATS = ("float16", "float32", "float64")
FLOATS_BF16 = FLOATS + ("bfloat16",)


@dataclass(frozen=True)
class OpsetRules:
    """What one operator version allows: attribute names, input dtypes, number of outputs."""

    attributes: tuple[str, ...]
    dtypes: tuple[str, ...]
    max_outputs: int = 1


@dataclass(frozen=True)
class WindowAttrs:
    kernel_shape: list[int]
    strides: list[int]
    pads: list[int]
    dilations: list[int]
    auto_pad: str
    ceil_mode: bool

    def as_kwargs(self) -> dict:
        return dict(
            kernel_shape=self.kernel_shape,
            strides=self.strides,
            pads=self.pads,
            dilations=self.dilations,
            auto_pad=self.auto_pad,
            ceil_mode=self.ceil_mode,
        )


def open_node(converter, bb, inputs, attr, version: int, rules: OpsetRules):
    """Validate a node against its version's rules; returns (attributes, data, ctx, num_outputs)."""
    ctx = converter.context(attr, version)
    attrs = NodeAttributes(ctx, attr, rules.attributes)
    data = inputs[0]
    ty = tensor_type(ctx, data)
    check_dtype(ctx, ty.dtype, rules.dtypes)
    num_outputs = check_outputs(ctx, attr, rules.max_outputs)
    return attrs, data, ctx, num_outputs


def parse_window_attrs(attrs: NodeAttributes, data: relax.Expr) -> WindowAttrs:
    """kernel_shape, strides, pads, dilations, auto_pad, ceil_mode, checked against the input."""
    ndim = data.ty.ndim
    if ndim < 3:
        raise InvalidModelError(attrs.ctx, f"input X has rank {ndim}; pooling needs N x C x D1 ... (rank >= 3)")
    rank = ndim - 2
    kernel_shape = attrs.ints("kernel_shape", None, rank, minimum=1, required=True)
    strides = attrs.ints("strides", [1] * rank, rank, minimum=1)
    dilations = attrs.ints("dilations", [1] * rank, rank, minimum=1)
    auto_pad = attrs.string("auto_pad", "NOTSET", spec.AUTO_PAD_MODES)
    if auto_pad != "NOTSET" and attrs.has("pads"):
        raise attrs.error("pads", f"cannot be used together with auto_pad={auto_pad}; use one or the other")
    pads = attrs.ints("pads", [0] * (2 * rank), 2 * rank, minimum=0)
    ceil_mode = bool(attrs.int("ceil_mode", 0, choices=(0, 1)))
    window = WindowAttrs(kernel_shape, strides, pads, dilations, auto_pad, ceil_mode)
    _check_windows_fit(attrs, data, window)
    return window


def _check_windows_fit(attrs: NodeAttributes, data: relax.Expr, w: WindowAttrs):
    """A kernel larger than the padded input leaves no output: say so instead of building it."""
    spatial = [spec.as_dim(d) for d in data.ty.shape.values[2:]]
    if not spec.is_static(*spatial):
        return
    windows = spec.resolve_windows(spatial, w.kernel_shape, w.strides, w.dilations, w.pads, w.auto_pad, w.ceil_mode)
    for axis, win in enumerate(windows):
        if win.out_size < 1:
            raise attrs.error(
                "kernel_shape",
                f"the dilated kernel ({spec.effective_kernel(win.kernel, win.dilation)}) does not fit "
                f"spatial axis {axis} of size {win.in_size} with padding ({win.pad_begin}, {win.pad_end})",
            )
