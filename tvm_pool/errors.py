"""Errors that tvm_pool raises for invalid models and invalid operator arguments.

Every error names where it happened (node, operator, opset) and what is allowed, so a user
sees one clear line instead of a crash deep inside TVM.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass


def require_module(name: str, message: str):
    """Import the optional module ``name`` (a frontend's package), or fail with ImportError
    ``message``: one line that says what to install."""
    try:
        return importlib.import_module(name)
    except ImportError as exception:
        raise ImportError(message) from exception


def one_line(err: BaseException) -> str:
    """A one-line rendering of any exception (TVM errors carry multi-line tracebacks)."""
    text = str(err).strip()
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    # TVM/FFI errors put "Traceback ..." and frames first; the message is the last line.
    if lines and lines[0].startswith("Traceback"):
        lines = lines[-1:]
    line = lines[0] if lines else type(err).__name__
    if len(lines) > 1:
        line += " ..."
    return line


class TvmPoolError(Exception):
    """Base class of every error tvm_pool raises on purpose."""


@dataclass(frozen=True)
class OpContext:
    """Where an operator sits: enough to name it in an error message."""

    op_type: str
    node: str = ""
    opset: int | None = None
    domain: str = ""

    def describe(self) -> str:
        op = f"{self.domain}::{self.op_type}" if self.domain else self.op_type
        where = f"{op}-{self.opset}" if self.opset is not None else op
        # A node name is the model's text: escape line breaks so a message stays one line.
        node = "".join(c if c.isprintable() else c.encode("unicode_escape").decode("ascii") for c in self.node)
        return f"node '{node}' ({where})" if node else where


class InvalidModelError(TvmPoolError):
    """The model or operator is outside what its specification allows."""

    def __init__(self, ctx: OpContext, message: str, attribute: str | None = None):
        self.ctx = ctx
        self.attribute = attribute
        attr = f", attribute '{attribute}'" if attribute else ""
        super().__init__(f"{ctx.describe()}{attr}: {message}")


class UnsupportedError(TvmPoolError):
    """Valid by the specification, but not something tvm_pool can compile (said plainly)."""

    def __init__(self, ctx: OpContext, message: str):
        self.ctx = ctx
        super().__init__(f"{ctx.describe()}: {message}")
