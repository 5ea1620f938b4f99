"""What a schedule rule does with a pooling PrimFunc it cannot handle: it declines it.

A rule falls back through its own levels when TVM refuses a step
(:data:`.analysis.SCHEDULE_ERRORS`, logged at debug level). When no level schedules the
function, or a step fails in a way the rule did not foresee (a bug: an ``IndexError`` on a
fused function of a shape it never met), the function keeps TVM's default code and the user's
compile goes on, with one warning line of category :class:`ScheduleDeclined` that names the
family, the function and the reason. The test suite turns that warning into an error
(``filterwarnings`` in pyproject.toml), so such bugs still surface there.

The function's name is the module's GlobalVar when the schedule pass gives it
(:func:`naming`); otherwise its ``global_symbol``, else its pooling blocks.
"""

from __future__ import annotations

import contextlib
import contextvars
import warnings

import tvm_ffi
from tvm.s_tir import SBlock

from ..errors import one_line
from . import analysis

_FUNCTION = contextvars.ContextVar("tvm_pool_scheduled_function", default=None)
_FAILURES = contextvars.ContextVar("tvm_pool_schedule_failures", default=None)


class ScheduleDeclined(UserWarning):
    """A schedule rule left a pooling PrimFunc to TVM's default code: ``family`` (the rule's),
    ``function`` (how the function is named) and ``reason``, each one line."""

    def __init__(self, family: str, function: str, reason: str):
        super().__init__(f"the {family} schedule declined {function}, which keeps TVM's default code: {reason}")
        self.family, self.function, self.reason = family, function, reason


@contextlib.contextmanager
def naming(name: str):
    """Rules applied inside the block name the function ``name`` when they decline it."""
    token = _FUNCTION.set(name)
    try:
        yield
    finally:
        _FUNCTION.reset(token)


def note(reason: str) -> None:
    """A step the rule tried and TVM refused (the last one is the reason given if every
    attempt fails)."""
    failures = _FAILURES.get()
    if failures is not None:
        failures.append(reason)


def guarded(family: str, func, attempt, warn_none: bool = True):
    """``attempt()`` (a schedule, or None where the rule has none); an unexpected error, or
    None where ``warn_none``, is a :class:`ScheduleDeclined` warning and None."""
    failures: list[str] = []
    token = _FAILURES.set(failures)
    try:
        sch = attempt()
    except Exception as err:  # pylint: disable=broad-except  # a rule's bug must not fail the user's compile
        _warn(family, func, f"{type(err).__name__}: {one_line(err)}")
        return None
    finally:
        _FAILURES.reset(token)
    if sch is None and warn_none:
        last = f" (the last: {failures[-1]})" if failures else ""
        _warn(family, func, f"TVM refused every schedule the rule tried{last}")
    return sch


def _warn(family: str, func, reason: str) -> None:
    warnings.warn(ScheduleDeclined(family, function_label(func), reason), stacklevel=3)


def function_label(func) -> str:
    """How a declined function is named: see the module docstring."""
    name = _FUNCTION.get()
    if name is None and func.attrs is not None:
        name = func.attrs.get("global_symbol")
    if name is not None:
        return f"'{name}'"
    blocks: list[str] = []
    tvm_ffi.structural_walk(func, (SBlock, lambda b: blocks.append(b.name_hint) if analysis.is_pool_block(b) else None))
    return f"the PrimFunc of {', '.join(blocks)}" if blocks else "a PrimFunc"
