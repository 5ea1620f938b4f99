"""Adaptive pooling computes (OpenVINO AdaptiveMaxPool-8 / AdaptiveAvgPool-8, PyTorch
adaptive_{max,avg}_pool{1,2,3}d), N-d channel-first.

Bin ``i`` of ``Out`` bins over an axis of ``In`` covers ``[floor(i*In/Out), ceil((i+1)*In/Out))``
(:func:`tvm_pool.spec.adaptive_bin`). The output size may be static ints or symbolic
``tirx.Var`` s (a runtime ``output_size`` tensor): the reduction then runs over a bound on every
bin width (:func:`tvm_pool.spec.adaptive_bin_bound`, ``ceil(In/Out) + 1``) with a predicate
``start + r < end``; for static sizes it runs over the exact widest bin, and the predicate is
dropped where every bin has that width (``In % Out == 0``).

Block kinds (``tvm_pool.kind``, see :func:`tvm_pool.compute.common.block_attrs`):

- ``adaptive_max``: max over each bin (no indices). NaN propagates.
- ``adaptive_max_index``: (max, index) over each bin; the index is the row-major position in the
  spatial dims of the (n, c) plane, ``[0, D*H*W)``; ties go to the first occurrence.
- ``adaptive_max_index_finalize``: int64 -> int32 index cast (``index_dtype="int32"`` only; the
  reduction always runs on int64 indices).
- ``adaptive_avg_sum``: the bin sum in the accumulation type (float32 for float16).
- ``adaptive_avg_finalize``: sum / bin size, cast to the input dtype.
"""

from __future__ import annotations

from typing import Sequence

from tvm import te, tirx

from .. import spec
from . import layout
from .common import (
    accumulate_dtype, all_of, argmax_reducer, block_attrs, int_round_div, is_float, max_identity, nan_max_reducer,
)
from .windows import row_major


class _AdaptiveAxis:
    """One spatial axis: ``In`` over ``Out`` bins and the reduction bound."""

    def __init__(self, in_size, out_size):
        self.in_size = spec.as_dim(in_size)
        self.out_size = spec.as_dim(out_size)
        if spec.is_static(self.in_size, self.out_size):
            if self.out_size < 1:
                raise ValueError(f"adaptive pooling output size must be >= 1, got {self.out_size}")
            self.bound = spec.adaptive_max_bin_size(self.in_size, self.out_size)
            self.uniform = self.in_size % self.out_size == 0
        else:
            self.bound = spec.adaptive_bin_bound(self.in_size, self.out_size)
            self.uniform = False

    def bin(self, o):
        return spec.adaptive_bin(o, self.in_size, self.out_size)


def _axes(data: te.Tensor, output_size: Sequence) -> list[_AdaptiveAxis]:
    rank = len(output_size)
    if rank < 1 or rank > len(data.shape) - 1:
        raise ValueError(f"output_size has {rank} values for an input of rank {len(data.shape)}")
    spatial = data.shape[len(data.shape) - rank :]
    for axis, (n, o) in enumerate(zip(spatial, output_size)):
        if isinstance(n, (int, tirx.IntImm)) and int(n) == 0 and not (isinstance(o, (int, tirx.IntImm)) and int(o) == 0):
            raise ValueError(f"adaptive pooling of an empty spatial axis {axis} (size 0) into {o} bins: every bin "
                             "would be empty; allowed: input spatial sizes of at least 1 (PyTorch refuses it too)")
    return [_AdaptiveAxis(n, o) for n, o in zip(spatial, output_size)]


def _out_shape(data, axes):
    lead = len(data.shape) - len(axes)
    return list(data.shape[:lead]) + [a.out_size for a in axes]


def _bin_access(data, axes, out_idx):
    """Reduction axes, input index, spatial positions and in-bin predicate of one output."""
    lead = len(data.shape) - len(axes)
    rvars = [te.reduce_axis((0, a.bound), f"r{i}") for i, a in enumerate(axes)]
    idx = list(out_idx[:lead])
    spatial, inside = [], []
    for a, o, r in zip(axes, out_idx[lead:], rvars):
        start, end = a.bin(o)
        pos = start + r
        spatial.append(pos)
        if not a.uniform:
            inside.append(pos < end)
    return rvars, idx + spatial, spatial, all_of(inside)


@layout.with_layout
def adaptive_max_pool(
    data: te.Tensor,
    output_size: Sequence,
    *,
    return_indices: bool = True,
    index_dtype: str = "int64",
    nan_index: str = "first",
):
    """Adaptive max pooling over the last ``len(output_size)`` axes.

    Returns the values, or ``(values, indices)`` with ``return_indices``; indices number the
    spatial positions of each (n, c) plane row-major (OpenVINO's and PyTorch's convention);
    among NaNs the first (``nan_index="first"``) or the last (``"last"``, PyTorch) wins.
    """
    if index_dtype not in ("int32", "int64"):
        raise ValueError(f"index_dtype must be int32 or int64, got {index_dtype!r}")
    axes = _axes(data, output_size)
    rank = len(axes)
    dtype = data.dtype
    out_shape = _out_shape(data, axes)

    if not return_indices:
        reducer = nan_max_reducer(dtype) if is_float(dtype) else te.max

        def value(*out_idx):
            rvars, idx, _, inside = _bin_access(data, axes, out_idx)
            x = data[tuple(idx)]
            if inside is not True:
                x = tirx.if_then_else(inside, x, max_identity(dtype))
            return reducer(x, axis=rvars)

        return layout.compute(data, out_shape, value, name="adaptive_max_pool", attrs=block_attrs("adaptive_max", rank))

    if dtype == "bfloat16":
        # As max_pool: TVM 0.27's bfloat16 legalization breaks on the (value, index) reducer;
        # reduce in float32 (exact both ways) and narrow the values back.
        wide = layout.compute(data, data.shape, lambda *i: data[i].astype("float32"), name="widen",
                          attrs=block_attrs("widen", rank))
        values, index = adaptive_max_pool(wide, output_size, index_dtype=index_dtype, nan_index=nan_index)
        narrow = layout.compute(values, values.shape, lambda *i: values[i].astype("bfloat16"), name="adaptive_max_pool_value",
                            attrs=block_attrs("adaptive_max_index_finalize", rank))
        return narrow, index
    reducer = argmax_reducer(dtype, "int64", nan_index)
    sizes = [a.in_size for a in axes]

    def value_and_index(*out_idx):
        rvars, idx, spatial, inside = _bin_access(data, axes, out_idx)
        x = data[tuple(idx)]
        flat = row_major(spatial, sizes)
        if inside is not True:
            x = tirx.if_then_else(inside, x, max_identity(dtype))
            # Bins are never empty, so a masked tap never ends up as the result; its index only
            # has to lose ties against real taps, which any index past the bin does.
            flat = tirx.if_then_else(inside, flat, tirx.const(2**62, "int64"))
        return reducer((x, flat), axis=rvars)

    values, index = layout.compute(data, 
        out_shape, value_and_index, name="adaptive_max_pool", attrs=block_attrs("adaptive_max_index", rank)
    )
    if index_dtype == "int64":
        return values, index
    index32 = layout.compute(data, 
        out_shape,
        lambda *i: index[i].astype("int32"),
        name="adaptive_max_pool_index",
        attrs=block_attrs("adaptive_max_index_finalize", rank),
    )
    return values, index32


@layout.with_layout
def adaptive_avg_pool(data: te.Tensor, output_size: Sequence):
    """Adaptive average pooling over the last ``len(output_size)`` axes (float16 sums in float32)."""
    axes = _axes(data, output_size)
    rank = len(axes)
    acc = accumulate_dtype(data.dtype)
    out_shape = _out_shape(data, axes)
    lead = len(data.shape) - rank

    def bin_sum(*out_idx):
        rvars, idx, _, inside = _bin_access(data, axes, out_idx)
        x = data[tuple(idx)].astype(acc)
        if inside is not True:
            x = tirx.if_then_else(inside, x, tirx.const(0, acc))
        return te.sum(x, axis=rvars)

    total = layout.compute(data, out_shape, bin_sum, name="adaptive_avg_pool_sum", attrs=block_attrs("adaptive_avg_sum", rank))

    def finalize(*out_idx):
        count = None
        for a, o in zip(axes, out_idx[lead:]):
            start, end = a.bin(o)
            n = end - start
            count = n if count is None else count * n
        if isinstance(count, int):
            count = tirx.const(count, acc)
        else:
            count = count.astype(acc)
        if not is_float(data.dtype):
            # integer inputs: round half away from zero (see docs/tensorrt_and_openvino.md)
            return int_round_div(total[out_idx], count, acc).astype(data.dtype)
        return (total[out_idx] / count).astype(data.dtype)

    return layout.compute(data, out_shape, finalize, name="adaptive_avg_pool", attrs=block_attrs("adaptive_avg_finalize", rank))

