"""Run-time checks compiled into the module: sizes read from tensors at run time, and
MaxUnpool's scatter with its index bound check.

A size known only at run time (AdaptiveMaxPool's ``output_size``, MaxUnpool's
``output_shape``) passes through :func:`checked_sizes` before it becomes a shape: a tiny
kernel that asserts what the importer asserts for the same value stored in the model (same
message), and that the tensor it will size can be allocated (its element count and byte size
fit int64), then hands the values on. The allocation depends on its result, so no buffer is
sized from an unchecked value. A failed check raises ``ValueError`` with the message.

:func:`unpool_scatter` writes each value of X at the flat position its index gives, after one
compare per element: an index outside ``[0, size)`` raises ``IndexError`` instead of writing
outside the buffer.
"""

from __future__ import annotations

import functools
from typing import Callable, Sequence

import tvm
from tvm import te, tirx

INT64_MAX = 2**63 - 1
# Byte size per element the allocation check assumes: the widest output of the operators that
# use it (int64 indices, float64 values); a narrower output only makes the check stricter by
# a factor nobody can allocate anyway.
MAX_ITEM_BYTES = 8


def too_large_message(what: str) -> str:
    return f"{what} gives an output too large to allocate (its size in bytes overflows int64)"


def fits_allocation(dims: Sequence[int], item_bytes: int = MAX_ITEM_BYTES) -> bool:
    """Whether a tensor of static ``dims`` has an element count and byte size within int64."""
    total = item_bytes
    for d in dims:
        total *= int(d)
    return total <= INT64_MAX


def _assert(cond, kind: str, message: str):
    # TVM 0.27's Python AssertStmt passes (kind, condition) in the FFI's (condition, kind) order.
    return tirx.AssertStmt(cond, tvm.ir.expr.StringImm(kind), [tvm.ir.expr.StringImm(message)])


def _i64(x):
    if isinstance(x, (int, tirx.IntImm)):
        return tirx.IntImm("int64", int(x))  # a constant stays one (loop extents fold)
    return x if isinstance(x, tirx.Expr) and str(x.ty) == "int64" else tirx.Cast("int64", x)


def checked_sizes(
    sizes: te.Tensor,
    lead: Sequence,
    rules: Callable[[list], list],
    too_large: str,
    item_bytes: int = MAX_ITEM_BYTES,
    shape_of: te.Tensor | None = None,
) -> te.Tensor:
    """``sizes`` (a 1-D int64 tensor of static length) after run-time checks.

    ``rules(values)`` gives ``(condition, message)`` pairs over the loaded values (e.g. each
    value >= 1); then the product of ``lead`` (dims the output keeps, e.g. N and C) and the
    values, times ``item_bytes``, must fit int64 (``too_large`` is the message). The check
    divides instead of multiplying, so it cannot overflow itself. ``shape_of``: a tensor whose
    (symbolic) shape ``lead`` and the rules refer to; it is an input only to bind that shape."""
    count = int(sizes.shape[0])

    def body(ins, outs):
        src, dst = ins[0], outs[0]
        values = [tirx.BufferLoad(src, [tirx.const(i, "int64")]) for i in range(count)]
        stmts = [_assert(cond, "ValueError", message) for cond, message in rules(values)]
        limit = tirx.const(INT64_MAX // item_bytes, "int64")
        for factor in [_i64(d) for d in lead] + values:
            # factor >= 1 and the running product <= limit hold here (earlier rules/asserts)
            stmts.append(_assert(factor <= limit, "ValueError", too_large))
            limit = tirx.floordiv(limit, tirx.max(factor, 1))
        stmts += [tirx.BufferStore(dst, v, [tirx.const(i, "int64")]) for i, v in enumerate(values)]
        return tirx.SeqStmt(stmts)

    inputs = [sizes] if shape_of is None else [sizes, shape_of]
    return te.extern([count], inputs, body, name="checked_sizes", dtype="int64")


# Serial loops are written as two nested loops of at most this many iterations each: TVM's
# UnrollLoop overflows an int on longer innermost loops (see lowering.MAX_SERIAL_EXTENT).
_LOOP_CHUNK = 1 << 20


def _serial_loop(extent, body):
    """``for k in range(extent): body(k)`` (int64), nested in chunks when it may be long."""
    extent = tvm.sym.Analyzer().simplify(_i64(extent))
    zero = tirx.const(0, "int64")
    if isinstance(extent, tirx.IntImm) and int(extent) <= _LOOP_CHUNK:
        k = tirx.Var("k", "int64")
        return tirx.For(k, zero, extent, tirx.ForKind.SERIAL, body(k))
    outer, inner = tirx.Var("k_outer", "int64"), tirx.Var("k_inner", "int64")
    chunk = tirx.const(_LOOP_CHUNK, "int64")
    k = outer * chunk + inner
    guarded = tirx.IfThenElse(k < extent, body(k), None)
    inner_loop = tirx.For(inner, zero, chunk, tirx.ForKind.SERIAL, guarded)
    return tirx.For(outer, zero, tirx.floordiv(extent + chunk - 1, chunk), tirx.ForKind.SERIAL, inner_loop)


def _flat_view(buf, stmts: list):
    """A 1-D view of ``buf`` (same memory), declared by appending to ``stmts``."""
    view = tirx.decl_buffer((_size(buf.shape),), buf.dtype, name=f"{buf.name}_flat", data=buf.data, elem_offset=buf.elem_offset)
    stmts.append(tirx.DeclBuffer(view, data=buf.data))
    return view


def unpool_scatter(
    data: te.Tensor, indices: te.Tensor, shape, message: str, shape_message: str, plane_rank: int | None = None
) -> te.Tensor:
    """A tensor of ``shape`` of zeros with each ``data`` value written at the flat position its
    ``indices`` value gives (row-major over ``shape``); an index outside ``[0, size)`` fails
    with ``IndexError: message``, indices of another size than data with ``ValueError:
    shape_message``. Flat views inside the kernel, so no reshape (TVM's reshape rewriting
    breaks on tensors of 2^31 elements or more).

    ``plane_rank``: the indices number the positions of each plane of the last ``plane_rank``
    axes instead (PyTorch's max_unpool): the bound is the output plane's size, and a value
    lands in the output plane of the same leading index as its input plane."""
    plane_sizes = None
    if plane_rank is not None:
        plane_sizes = (_size(data.shape[len(data.shape) - plane_rank :]), _size(list(shape)[len(shape) - plane_rank :]))

    def body(ins, outs):
        stmts = []
        x, idx, out = (_flat_view(b, stmts) for b in (ins[0], ins[1], outs[0]))

        def scatter(k):
            at = tirx.BufferLoad(idx, [k])
            bound, base = out.shape[0], tirx.const(0, "int64")
            if plane_sizes is not None:
                bound, base = plane_sizes[1], tirx.floordiv(k, plane_sizes[0]) * plane_sizes[1]
            inside = tirx.all(at >= 0, at < bound)
            store = tirx.BufferStore(out, tirx.BufferLoad(x, [k]), [base + at])
            return tirx.SeqStmt([_assert(inside, "IndexError", message), store])

        stmts.append(_assert(x.shape[0] == idx.shape[0], "ValueError", shape_message))
        stmts.append(_serial_loop(out.shape[0], lambda j: tirx.BufferStore(out, tirx.const(0, out.dtype), [j])))
        stmts.append(_serial_loop(x.shape[0], scatter))
        return tirx.SeqStmt(stmts)

    return te.extern([list(shape)], [data, indices], body, name="unpool_scatter", dtype=str(data.dtype))


def _size(dims):
    return functools.reduce(lambda a, b: a * b, [_i64(d) for d in dims], tirx.const(1, "int64"))
