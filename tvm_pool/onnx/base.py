"""Converter base class, registry and attribute validation for tvm_pool's ONNX converters.

A converter is a class with ``_impl_v<N>`` classmethods, like TVM's ``OnnxOpConverter``: the
importer calls the largest ``N`` not above the model's opset for the node's domain. Each
converter declares what its opsets allow (attributes, dtypes, outputs) so that an invalid node
fails here with a message that names it, never deep inside TVM.
"""

from __future__ import annotations

import numbers
from typing import Any, Iterable, Sequence

import tvm
from tvm import relax

from ..errors import InvalidModelError, OpContext, UnsupportedError

# (domain, op_type) -> converter class. Domain "" is the default ONNX domain (ai.onnx).
CONVERTERS: dict[tuple[str, str], type["PoolingConverter"]] = {}

CUSTOM_DOMAIN = "tvm_pool"

# Window attributes (kernel sizes, strides, dilations, pads) above this are refused: TVM builds
# window arithmetic from them with int32 constants, and such values only come from broken or
# hostile models (see docs/conformance.md).
MAX_INT_ATTRIBUTE = 2**31 - 1


def register(op_type: str, domain: str = ""):
    def decorate(cls):
        cls.op_type = op_type
        cls.domain = domain
        CONVERTERS[(domain, op_type)] = cls
        return cls

    return decorate


def converter_for(domain: str, op_type: str):
    return CONVERTERS.get(("" if domain in ("", "ai.onnx") else domain, op_type))


class PoolingConverter:
    """Base of tvm_pool's converters. Subclasses define ``_impl_v<N>`` classmethods."""

    op_type = ""
    domain = ""

    @classmethod
    def versions(cls) -> list[int]:
        return sorted(int(name[len("_impl_v") :]) for name in dir(cls) if name.startswith("_impl_v"))

    @classmethod
    def since_version(cls, opset: int) -> int:
        """The operator version a model at ``opset`` uses (the largest one not above it)."""
        candidates = [v for v in cls.versions() if v <= opset]
        if not candidates:
            raise InvalidModelError(
                OpContext(cls.op_type, opset=opset, domain=cls.domain),
                f"{cls.op_type} does not exist before opset {cls.versions()[0]}",
            )
        return candidates[-1]

    @classmethod
    def get_converter(cls, opset: int):
        return getattr(cls, f"_impl_v{cls.since_version(opset)}")

    @classmethod
    def context(cls, attr: dict, opset: int) -> OpContext:
        name = attr.get("tvm_custom", {}).get("name", "")
        return OpContext(cls.op_type, node=name, opset=opset, domain=cls.domain)


class NodeAttributes:
    """Typed, validated access to a node's attributes, with errors that name the node.

    ``allowed`` lists the attribute names the operator version defines; anything else is an
    error (the ONNX checker rejects it too), so a misspelled attribute is never silently ignored.
    """

    def __init__(self, ctx: OpContext, attr: dict, allowed: Iterable[str]):
        self.ctx = ctx
        self.attr = {k: v for k, v in attr.items() if k != "tvm_custom"}
        allowed = set(allowed)
        unknown = sorted(set(self.attr) - allowed)
        if unknown:
            raise InvalidModelError(
                ctx,
                f"attribute(s) {', '.join(unknown)} not defined for this opset; "
                f"allowed: {', '.join(sorted(allowed)) or 'none'}",
                attribute=unknown[0],
            )

    def error(self, name: str, message: str) -> InvalidModelError:
        return InvalidModelError(self.ctx, message, attribute=name)

    def has(self, name: str) -> bool:
        return name in self.attr

    def string(self, name: str, default: str, choices: Sequence[str]) -> str:
        value = self.attr.get(name, default)
        if isinstance(value, bytes):
            value = value.decode("utf-8")
        if value not in choices:
            raise self.error(name, f"got {value!r}; allowed values: {', '.join(choices)}")
        return value

    def int(self, name: str, default: int, choices: Sequence[int] | None = None) -> int:
        value = self.attr.get(name, default)
        if not _is_int(value):
            raise self.error(name, f"must be an int, got {_show(value)}")
        if choices is not None and value not in choices:
            raise self.error(name, f"got {value}; allowed values: {', '.join(map(str, choices))}")
        return value

    def float(self, name: str, default: float) -> float:
        value = self.attr.get(name, default)
        if not isinstance(value, (int, float)):
            raise self.error(name, f"must be a float, got {value!r}")
        return float(value)

    def ints(
        self, name: str, default: Sequence[int] | None, length: int, *, minimum: int, required=False
    ) -> list[int]:
        if name not in self.attr:
            if required or default is None:
                raise self.error(name, "is required")
            return list(default)
        value = self.attr[name]
        if _is_int(value):
            value = (value,)
        if isinstance(value, (bytes, str)) or not all(_is_int(v) for v in value):
            raise self.error(name, f"must be ints, got {_show(value)}")
        value = [int(v) for v in value]
        if len(value) != length:
            raise self.error(name, f"has {len(value)} values; this input needs {length}")
        bad = [v for v in value if v < minimum]
        if bad:
            raise self.error(name, f"values must be >= {minimum}, got {value}")
        if any(v > MAX_INT_ATTRIBUTE for v in value):
            raise self.error(name, f"values must be <= {MAX_INT_ATTRIBUTE} (2^31 - 1), got {value}")
        return value


def _is_int(value) -> bool:
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def _show(value) -> str:
    """An attribute value for a message: strings decoded, lists as lists."""
    if isinstance(value, bytes):
        value = value.decode("utf-8", "replace")
    if isinstance(value, (list, tuple)):
        value = list(value)
    return repr(value)


def tensor_type(ctx: OpContext, expr: relax.Expr, what: str = "input X") -> relax.TensorType:
    ty = expr.ty
    if not isinstance(ty, relax.TensorType) or ty.ndim < 0:
        raise UnsupportedError(ctx, f"{what} must be a tensor of known rank")
    return ty


def check_dtype(ctx: OpContext, dtype: str, allowed: Sequence[str], what: str = "input X"):
    if str(dtype) not in allowed:
        raise InvalidModelError(
            ctx, f"{what} has type {dtype}; this opset allows {', '.join(allowed)}", attribute=None
        )


def check_outputs(ctx: OpContext, attr: dict, max_outputs: int):
    n = attr.get("tvm_custom", {}).get("num_outputs", 1)
    if n > max_outputs:
        raise InvalidModelError(ctx, f"has {n} outputs; this opset defines at most {max_outputs}")
    return n


def static_int_values(ctx: OpContext, expr: Any, what: str) -> list[int] | None:
    """The values of a constant 1-D integer tensor input, or None when it is only known at run time."""
    if isinstance(expr, tvm.ir.expr.Constant):
        return [int(v) for v in expr.value.numpy().reshape(-1)]
    if expr is None:
        return None
    if not isinstance(expr.ty, relax.TensorType) or str(expr.ty.dtype) not in ("int32", "int64"):
        raise InvalidModelError(ctx, f"{what} must be an int32 or int64 tensor")
    return None
