"""Legalize TVM's own ``relax.nn.adaptive_avg_pool{1,2,3}d`` to tvm_pool's adaptive compute.

:mod:`tvm_pool.lowering` merges :func:`legalize_entries` into LegalizeOps'
``customize_legalize_map``. Channel-first layouts (NCW / NCHW / NCDHW, same output layout) use
:func:`tvm_pool.compute.adaptive_avg_pool` (OpenVINO / PyTorch bins, block kinds
``adaptive_avg_sum`` / ``adaptive_avg_finalize``), and so do channel-last ones (NWC / NHWC / NDHWC); another output
layout is a transpose after it. Any other layout keeps TVM's own FLegalize.
"""

from __future__ import annotations

from tvm import relax
from tvm.ir import Op

from . import compute
from .legalize_layouts import emit_in_layout, pool_layouts


def _adaptive_avg_legalizer(rank: int):
    def legalize(bb: relax.BlockBuilder, call: relax.Call) -> relax.Expr:
        attrs = call.attrs
        layouts = pool_layouts(call, rank)
        data = call.args[0]
        ty = data.ty
        if layouts is None or ty.shape is None:
            return Op.get(call.op.name).get_attr("FLegalize")(bb, call)
        layout = layouts[0]
        spatial = [ty.shape.values[layout.index(axis)] for axis in layout if axis not in "NC"]
        if attrs.output_size is None:
            sizes = spatial
        else:
            sizes = list(attrs.output_size)
            if len(sizes) == 1 and rank > 1:
                sizes = sizes * rank
        pooled = bb.call_te(
            compute.adaptive_avg_pool, data, sizes, layout=layout,
            primfunc_name_hint=f"tvm_pool_adaptive_avg_pool{rank}d",
        )
        return emit_in_layout(bb, pooled, *layouts)

    return legalize


def legalize_entries() -> dict:
    """op name -> legalize function, for LegalizeOps' customize_legalize_map."""
    return {f"relax.nn.adaptive_avg_pool{rank}d": _adaptive_avg_legalizer(rank) for rank in (1, 2, 3)}
