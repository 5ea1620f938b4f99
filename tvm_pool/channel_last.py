"""What Relax's ConvertLayout leaves channel-first in a channel-last graph, moved to the graph's
layout (:func:`channel_last_fixups`, run right after it in ``lowering._canonical_passes``).

ConvertLayout gives an op the convolutions' layout when the op states how (FRelaxInferLayout);
around any other it transposes back to the model's NCHW and forward again. Three patterns of
the classic CNNs hit that, each a full transpose of an activation, or two (the clips, a fourth,
are lifted before ConvertLayout: ``canonicalize.lift_clips``):

- tvm_pool's global pools as the ONNX converters emit them (``relax_ops.global_pool``, a
  call_tir of the channel-first compute): every squeeze-excitation block of EfficientNet and
  MobileNetV3. They become the same compute in the channel-last layout (``compute.layout``),
  its (N, C, 1, 1) result transposed back, which costs nothing. GlobalLpPool, whose ``p`` the
  call does not carry, stays.
- ShuffleNet's channel shuffle, ``reshape(N, G, C/G, H, W) -> permute(0, 2, 1, 3, 4) ->
  reshape(N, C, H, W)``: the same shuffle on the channel-last tensor is ``reshape(N, H, W, G,
  C/G) -> permute(0, 1, 2, 4, 3) -> reshape(N, H, W, C)``; element for element the same values.
- A strided slice or a split of a transposed tensor (the halves ShuffleNet splits the shuffled
  channels into), and a concatenation of transposed tensors (the halves joined again): the
  slice, split or concatenation of the tensors along the axes the transpose maps them to, then
  the transpose.

After each, a transpose that undoes the transpose before it (ConvertLayout's, back to channel-last)
is dropped. Every rewrite moves the same elements, so no value changes.
"""

from __future__ import annotations

import re

import tvm
from tvm import relax
from tvm.ir import Op
from tvm.relax.expr_functor import PyExprMutator, mutator

from . import compute
from .canonicalize import mutator_pass

# The global pools tvm_pool's ONNX converters emit; TVM may suffix the name with a number.
_GLOBAL_POOL = re.compile(r"tvm_pool_global_(avg|max)_pool\d*$")
_LAYOUT_NAMES = {3: "NWC", 4: "NHWC", 5: "NDHWC"}


def _to_channel_first(ndim: int) -> list[int]:
    """The axes of permute_dims reading a channel-last tensor channel-first."""
    return [0, ndim - 1, *range(1, ndim - 1)]


def _ints(values):
    return [int(v) for v in values]


def _static_shape(expr):
    ty = expr.ty
    if not isinstance(ty, relax.TensorType) or ty.shape is None:
        return None
    dims = getattr(ty.shape, "values", None)
    if dims is None or not all(isinstance(d, tvm.tirx.IntImm) for d in dims):
        return None
    return _ints(dims)


@mutator
class _ChannelLastFixups(PyExprMutator):
    def visit_call_(self, op):  # pylint: disable=arguments-renamed
        call = self.visit_expr_post_order(op)
        if not isinstance(call.op, tvm.ir.Op):
            return call
        rewrite = {"relax.permute_dims": self._undone, "relax.call_tir": self._global_pool,
                   "relax.reshape": self._shuffle, "relax.strided_slice": self._slice,
                   "relax.concat": self._concat, "relax.split": self._split}.get(call.op.name)
        return call if rewrite is None else rewrite(call)

    def _value(self, expr):
        """What the variable ``expr`` is bound to (``expr`` itself when it is not one)."""
        return self.lookup_binding(expr) if isinstance(expr, relax.Var) else expr

    def _bound(self, expr, op_name: str):
        """The call ``expr`` is bound to when it is a call of ``op_name``, else None (through an
        item of a tuple the rewrites built, a split's)."""
        value = self._value(expr)
        if isinstance(value, relax.TupleGetItem):
            items = self._value(value.tuple_value)
            value = self._value(items.fields[value.index]) if isinstance(items, relax.Tuple) else None
        if isinstance(value, relax.Call) and value.op.same_as(Op.get(op_name)):
            return value
        return None

    def _channel_last_source(self, expr):
        """The channel-last tensor ``expr`` reads channel-first (``permute_dims(x, [0, n-1, 1,
        ..])``), else None."""
        transpose = self._bound(expr, "relax.permute_dims")
        if transpose is None or transpose.attrs.axes is None:
            return None
        data = transpose.args[0]
        ndim = data.ty.ndim if isinstance(data.ty, relax.TensorType) else -1
        return data if ndim >= 3 and _ints(transpose.attrs.axes) == _to_channel_first(ndim) else None

    def _undone(self, call):
        """A transpose of a transpose that undoes it: its input's input."""
        inner = self._bound(call.args[0], "relax.permute_dims")
        if inner is None or inner.attrs.axes is None or call.attrs.axes is None:
            return call
        first, second = _ints(inner.attrs.axes), _ints(call.attrs.axes)
        return inner.args[0] if [first[a] for a in second] == list(range(len(first))) else call

    def _global_pool(self, call):
        if not isinstance(call.args[1], relax.Tuple) or len(call.args[1].fields) != 1:
            return call
        kind = _GLOBAL_POOL.match(call.args[0].name_hint)
        data = self._channel_last_source(call.args[1].fields[0]) if kind else None
        if data is None or data.ty.ndim not in _LAYOUT_NAMES:
            return call
        pooled = self.builder_.call_te(compute.global_pool, data, kind.group(1), layout=_LAYOUT_NAMES[data.ty.ndim],
                                       primfunc_name_hint=f"tvm_pool_global_{kind.group(1)}_pool")
        return relax.op.permute_dims(self.builder_.emit(pooled), _to_channel_first(data.ty.ndim))

    def _shuffle(self, call):
        """The channel shuffle's last reshape (see the module docstring)."""
        swap = self._bound(call.args[0], "relax.permute_dims")
        split = self._bound(swap.args[0], "relax.reshape") if swap is not None else None
        data = self._channel_last_source(split.args[0]) if split is not None else None
        if data is None or data.ty.ndim != 4 or swap.attrs.axes is None or _ints(swap.attrs.axes) != [0, 2, 1, 3, 4]:
            return call
        shape, groups, merged = _static_shape(split.args[0]), _static_shape(split), _static_shape(call)
        if shape is None or groups is None or merged != shape or len(groups) != 5:
            return call
        n, c, h, w = shape
        if groups[0] != n or groups[3:] != [h, w] or groups[1] * groups[2] != c:
            return call
        grouped = relax.op.reshape(data, [n, h, w, groups[1], groups[2]])
        swapped = self.builder_.emit(relax.op.permute_dims(self.builder_.emit(grouped), [0, 1, 2, 4, 3]))
        shuffled = relax.op.reshape(swapped, [n, h, w, c])
        return relax.op.permute_dims(self.builder_.emit(shuffled), _to_channel_first(4))

    def _slice(self, call):
        data = self._channel_last_source(call.args[0])
        if data is None:
            return call
        axes = _to_channel_first(data.ty.ndim)
        moved = relax.Tuple([tvm.tirx.IntImm("int64", axes[int(a)]) for a in call.args[1].fields])
        sliced = relax.op.strided_slice(data, moved, *call.args[2:], assume_inbound=bool(call.attrs.assume_inbound))
        return relax.op.permute_dims(self.builder_.emit(sliced), axes)

    def _concat(self, call):
        fields = call.args[0].fields if isinstance(call.args[0], relax.Tuple) else None
        sources = [self._channel_last_source(f) for f in fields or ()]
        if not sources or any(s is None for s in sources) or call.attrs.axis is None:
            return call
        ndim = sources[0].ty.ndim
        axes = _to_channel_first(ndim)
        axis = int(call.attrs.axis) % ndim
        joined = relax.op.concat(sources, axis=axes[axis])
        return relax.op.permute_dims(self.builder_.emit(joined), axes)

    def _split(self, call):
        data = self._channel_last_source(call.args[0])
        if data is None:
            return call
        axes = _to_channel_first(data.ty.ndim)
        axis = axes[int(call.attrs.axis) % len(axes)]
        parts = self.builder_.emit(relax.op.split(data, call.attrs.indices_or_sections, axis))
        return relax.Tuple([self.builder_.emit(relax.op.permute_dims(relax.TupleGetItem(parts, i), axes))
                            for i in range(len(parts.ty.fields))])


def channel_last_fixups() -> tvm.transform.Pass:
    """The module pass of the module docstring."""
    return mutator_pass("tvm_pool.channel_last_fixups", _ChannelLastFixups)
