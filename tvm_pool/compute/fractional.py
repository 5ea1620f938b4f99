"""PyTorch's fractional max pooling (``fractional_max_pool2d/3d``, Graham 2014), channel-first.

Window ``o`` of ``Out`` along an axis of ``In`` with pool size ``k`` starts at
``int((o + u) * alpha) - int(u * alpha)`` with ``alpha = (In - k) / (Out - 1)``, computed in the
input's float type as ATen does, and the last window starts at ``In - k``. ``u`` is the plane's
random sample for that axis (``random_samples[n, c, :]``, uniform in [0, 1)): ATen reads sample 0
for the width and 1 for the height in 2-D, samples 0, 1, 2 for depth, height, width in 3-D.
Windows always lie inside the input. The result is the window max and, like max_pool's, its
index in the plane row-major; among NaNs the last in scan order wins (PyTorch's CPU kernel).
"""

from __future__ import annotations

from typing import Sequence

from tvm import te, tirx

from .common import argmax_reducer, block_attrs
from .windows import row_major


def _sample_axis(rank: int, axis: int) -> int:
    return (1 - axis) if rank == 2 else axis


def fractional_max_pool(data: te.Tensor, samples: te.Tensor, kernel: Sequence[int], output_size: Sequence[int]):
    """``(values, indices)`` over the last ``len(kernel)`` axes; ``samples`` is ``[N, C, rank]``
    (``[1, C, rank]`` for an unbatched ``[C, *spatial]`` input)."""
    rank = len(kernel)
    lead = len(data.shape) - rank
    if str(data.dtype) == "bfloat16":
        # As max_pool: TVM 0.27's bfloat16 legalization breaks on the (value, index) reducer.
        wide = te.compute(data.shape, lambda *i: data[i].astype("float32"), name="widen",
                          attrs=block_attrs("widen", rank))
        values, indices = fractional_max_pool(wide, samples, kernel, output_size)
        narrow = te.compute(values.shape, lambda *i: values[i].astype("bfloat16"), name="fractional_max_pool_value",
                            attrs=block_attrs("fractional_max_finalize", rank))
        return narrow, indices
    spatial = list(data.shape[lead:])
    dtype = str(samples.dtype)
    reducer = argmax_reducer(str(data.dtype), "int64", "last")

    def start(axis, plane, o):
        size, k, out = spatial[axis], int(kernel[axis]), int(output_size[axis])
        last = tirx.Cast("int64", size) - k
        if out == 1:
            return last
        # ATen's arithmetic in the input's type; half types as C++'s at::Half / at::BFloat16
        # do it: each operation in float32, rounded to the type.
        wide = "float32" if dtype in ("float16", "bfloat16") else dtype

        def rnd(e):
            return e.astype(dtype).astype(wide) if wide != dtype else e

        u = samples[tuple(plane) + (_sample_axis(rank, axis),)].astype(wide)
        alpha = rnd(rnd(tirx.Cast(wide, size - k)) / rnd(tirx.const(out - 1, wide)))
        first = tirx.Cast("int32", rnd(rnd(rnd(tirx.Cast(wide, o)) + u) * alpha)) - tirx.Cast("int32", rnd(u * alpha))
        return tirx.Select(o == out - 1, last, tirx.Cast("int64", first))

    def value_and_index(*out_idx):
        plane = list(out_idx[:lead]) if lead == 2 else [tirx.const(0, "int64"), out_idx[0]]
        rvars = [te.reduce_axis((0, int(k)), f"r{i}") for i, k in enumerate(kernel)]
        pos = [start(a, plane, out_idx[lead + a]) + r for a, r in enumerate(rvars)]
        flat = row_major(pos, spatial).astype("int64")
        return reducer((data[tuple(out_idx[:lead]) + tuple(pos)], flat), axis=rvars)

    shape = list(data.shape[:lead]) + [int(o) for o in output_size]
    return te.compute(shape, value_and_index, name="fractional_max_pool", attrs=block_attrs("fractional_max", rank))
