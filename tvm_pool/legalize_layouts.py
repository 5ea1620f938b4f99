"""The layouts of TVM's Relax pooling calls that tvm_pool's legalization takes
(:mod:`tvm_pool.lowering`, :mod:`tvm_pool.adaptive_legalize`): channel-first and channel-last
(``compute.layout``), with a transpose after the pool for another output layout."""

from __future__ import annotations

from tvm import relax

# The layouts tvm_pool's computes take, per spatial rank (compute.layout); any other (packed
# NCHW16c, ...) keeps TVM's own legalization.
LAYOUTS = {
    1: ("NCW", "NWC"),
    2: ("NCHW", "NHWC"),
    3: ("NCDHW", "NDHWC"),
}


def pool_layouts(call: relax.Call, rank: int):
    """(layout, out_layout) of a Relax pooling call when tvm_pool's computes take it, else None."""
    layout = str(call.attrs.layout)
    out_layout = str(call.attrs.out_layout) if call.attrs.out_layout is not None else layout
    if layout not in LAYOUTS[rank] or out_layout not in LAYOUTS[rank]:
        return None
    return layout, out_layout


def emit_in_layout(bb: relax.BlockBuilder, pooled: relax.Expr, layout: str, out_layout: str) -> relax.Expr:
    """``pooled`` (computed in ``layout``) in ``out_layout``: a transpose when they differ
    (NCHW in, NHWC out, ...), which the pool's PrimFunc computes as a fused consumer."""
    if out_layout == layout:
        return pooled
    return bb.emit(relax.op.permute_dims(pooled, [layout.index(axis) for axis in out_layout]))
