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

from . import compute


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
    return bb.emit_te(
        compute.max_pool,
        data,
        list(kernel_shape),
        strides,
        dilations,
        pads,
        auto_pad,
        bool(ceil_mode),
        return_indices=return_indices,
        storage_order=storage_order,
        index_scope=index_scope,
        index_dtype=index_dtype,
        primfunc_name_hint="tvm_pool_max_pool",
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
    return bb.emit_te(
        compute.avg_pool,
        data,
        list(kernel_shape),
        strides,
        dilations,
        pads,
        auto_pad,
        bool(ceil_mode),
        count_include_pad=bool(count_include_pad),
        primfunc_name_hint="tvm_pool_avg_pool",
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
    return bb.emit_te(
        compute.lp_pool,
        data,
        list(kernel_shape),
        strides,
        dilations,
        pads,
        auto_pad,
        bool(ceil_mode),
        p=float(p),
        primfunc_name_hint="tvm_pool_lp_pool",
    )


def global_pool(bb: relax.BlockBuilder, data: relax.Expr, kind: str, p: float = 2.0) -> relax.Var:
    """kind: "max", "avg" or "lp" (GlobalMaxPool / GlobalAveragePool / GlobalLpPool)."""
    return bb.emit_te(
        compute.global_pool, data, kind, p=float(p), primfunc_name_hint=f"tvm_pool_global_{kind}_pool"
    )
