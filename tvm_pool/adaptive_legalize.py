"""Legalize TVM's own ``relax.nn.adaptive_avg_pool{1,2,3}d`` to tvm_pool's adaptive compute.

:mod:`tvm_pool.lowering` merges :func:`legalize_entries` into LegalizeOps'
``customize_legalize_map``. Channel-first layouts (NCW / NCHW / NCDHW, same output layout) use
:func:`tvm_pool.compute.adaptive_avg_pool` (OpenVINO / PyTorch bins, block kinds
``adaptive_avg_sum`` / ``adaptive_avg_finalize``); any other layout keeps TVM's own FLegalize.
"""

from __future__ import annotations

from tvm import relax
from tvm.ir import Op

from . import compute

_CHANNEL_FIRST = {1: "NCW", 2: "NCHW", 3: "NCDHW"}


def _adaptive_avg_legalizer(rank: int):
    def legalize(bb: relax.BlockBuilder, call: relax.Call) -> relax.Expr:
        attrs = call.attrs
        layout = str(attrs.layout)
        out_layout = str(attrs.out_layout) if attrs.out_layout is not None else layout
        data = call.args[0]
        ty = data.ty
        if layout != _CHANNEL_FIRST[rank] or out_layout != layout or ty.shape is None:
            return Op.get(call.op.name).get_attr("FLegalize")(bb, call)
        spatial = list(ty.shape.values[2:])
        if attrs.output_size is None:
            sizes = spatial
        else:
            sizes = list(attrs.output_size)
            if len(sizes) == 1 and rank > 1:
                sizes = sizes * rank
        return bb.call_te(
            compute.adaptive_avg_pool, data, sizes, primfunc_name_hint=f"tvm_pool_adaptive_avg_pool{rank}d"
        )

    return legalize


def legalize_entries() -> dict:
    """op name -> legalize function, for LegalizeOps' customize_legalize_map."""
    return {f"relax.nn.adaptive_avg_pool{rank}d": _adaptive_avg_legalizer(rank) for rank in (1, 2, 3)}
