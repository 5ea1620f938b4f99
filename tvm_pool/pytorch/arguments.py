"""A pooling node's ATen arguments by name, validated, with errors that name the node.

An ``fx.Node`` of ``torch.export`` carries its arguments positionally (some as keywords);
its ``OpOverload``'s schema names them and gives the defaults. :class:`NodeArguments` binds
the two, so a converter reads ``args.ints("padding", 2, minimum=0)`` whatever the call site
wrote, and an invalid value fails with ``node 'max_pool2d' (aten.max_pool2d_with_indices),
argument 'padding': ...`` instead of a crash inside TVM.
"""

from __future__ import annotations

import numbers
from typing import Sequence

from tvm import relax, tirx

from ..errors import InvalidModelError, OpContext, UnsupportedError

# Values above this are refused: TVM builds window arithmetic with int32 constants.
MAX_INT_ARGUMENT = 2**31 - 1


def op_name(node) -> str:
    """``max_pool2d_with_indices.default`` for ``aten.max_pool2d_with_indices.default``."""
    return node.target.__name__


class NodeArguments:
    """The bound arguments of one ATen call; ``env`` maps fx nodes to Relax expressions."""

    def __init__(self, node, env):
        self.node = node
        self.env = env
        schema = node.target._schema  # pylint: disable=protected-access
        self.ctx = OpContext(f"aten.{schema.name.split('::')[-1]}", node=node.name)
        self.values = {}
        for i, argument in enumerate(schema.arguments):
            if i < len(node.args):
                self.values[argument.name] = node.args[i]
            elif argument.name in node.kwargs:
                self.values[argument.name] = node.kwargs[argument.name]
            elif argument.has_default_value():
                self.values[argument.name] = argument.default_value
            else:
                raise self.error(argument.name, "is required")

    def error(self, name: str | None, message: str) -> InvalidModelError:
        return InvalidModelError(self.ctx, f"argument '{name}' {message}" if name else message)

    def unsupported(self, message: str) -> UnsupportedError:
        return UnsupportedError(self.ctx, message)

    def tensor(self, name: str, ranks: Sequence[int] | None = None) -> relax.Expr:
        """A tensor argument as a Relax expression of known rank (one of ``ranks``)."""
        expr = self.env[self.values[name]]
        ty = expr.ty
        if not isinstance(ty, relax.TensorType) or ty.ndim < 0:
            raise self.unsupported(f"argument '{name}' must be a tensor of known rank")
        if ranks is not None and ty.ndim not in ranks:
            allowed = " or ".join(str(r) for r in ranks)
            raise self.error(name, f"has rank {ty.ndim}; allowed: {allowed}")
        return expr

    def ints(self, name: str, length: int, *, minimum: int, empty=None) -> list[int]:
        """An ``int[length]`` argument: one value stands for all; ``[]`` is ``empty``."""
        value = self.values[name]
        if isinstance(value, numbers.Integral) and not isinstance(value, bool):
            value = [value]
        value = [self._static_int(name, v) for v in value]
        if not value and empty is not None:
            return list(empty)
        if len(value) == 1:
            value = value * length
        if len(value) != length:
            raise self.error(name, f"has {len(value)} values; allowed: 1 or {length}")
        if any(v < minimum for v in value):
            raise self.error(name, f"values must be >= {minimum}, got {value}")
        if any(v > MAX_INT_ARGUMENT for v in value):
            raise self.error(name, f"values must be <= {MAX_INT_ARGUMENT} (2^31 - 1), got {value}")
        return value

    def flag(self, name: str) -> bool:
        value = self.values[name]
        if not isinstance(value, bool):
            raise self.error(name, f"must be a bool, got {value!r}")
        return value

    def optional_int(self, name: str):
        value = self.values.get(name)
        return None if value is None else self._static_int(name, value)

    def _static_int(self, name: str, value) -> int:
        if isinstance(value, numbers.Integral) and not isinstance(value, bool):
            return int(value)
        if hasattr(value, "op"):  # an fx.Node: a SymInt computed in the graph
            resolved = self.env.get(value)
            if isinstance(resolved, (int, tirx.IntImm)):
                return int(resolved)
            raise self.unsupported(f"argument '{name}' must be known when the model is imported (got {value})")
        raise self.error(name, f"must be ints, got {value!r}")

    def result_used(self, index: int) -> bool:
        """Whether output ``index`` of a tuple-returning op is read by any user."""
        import operator  # pylint: disable=import-outside-toplevel

        for user in self.node.users:
            if user.op != "call_function" or user.target is not operator.getitem or user.args[1] == index:
                return True
        return False
