"""Importers leave no Relax BlockBuilder open when they fail.

TVM's frontends build a module inside ``with bb.function(...)`` / ``with bb.dataflow()``. When a
converter raises in there, those scopes' ``__exit__`` pop the Python side (``BlockBuilder._stack``,
the builder's function stack) but leave the C++ builder with a block still open (a dataflow
scope that exits begins a binding block; a function scope that exits ends none). The builder is
kept alive by the traceback and, when it is garbage-collected later, TVM's C++ destructor
writes ``BlockBuilder destroyed with remaining blocks!`` to stderr, in whatever runs then.

:func:`closed_on_error` wraps an importer's entry point: if it raises, the builder's open blocks
are ended and its context popped before the error goes on. Every importer (ONNX, PyTorch, TFLite)
uses it::

    importer = SomeImporter(...)
    with closed_on_error(lambda: importer.bb):
        return importer.from_something(model)

and, without an argument, around a call whose builder is out of reach (TVM's own importers)::

    with closed_on_error():
        tvm.relax.frontend.onnx.from_onnx(model)
"""

from __future__ import annotations

import contextlib
from typing import Callable, Union

from tvm import relax
from tvm.error import InternalError

# More open blocks than any importer nests (a function, a dataflow block, If branches).
_MAX_BLOCKS = 1000

BuilderSource = Union[relax.BlockBuilder, Callable[[], "relax.BlockBuilder | None"], None]


def close_builder(bb: relax.BlockBuilder) -> int:
    """End every block ``bb`` still has open and take it off the builder context (the Python
    ``BlockBuilder._stack`` and its function stack), so that destroying it is silent. Returns the
    number of blocks ended. For a builder that an error left behind: it is not usable after.

    The C++ builder tells whether a block is open only by refusing to end one (an
    ``InternalError``, "no block is being built"), so blocks are ended until it refuses. Its
    variable scopes are left: they do not outlive the builder, and TVM's ``EndScope`` on an empty
    scope stack crashes the process instead of raising, so they cannot be ended safely without
    knowing how many there are."""
    while relax.BlockBuilder._stack and relax.BlockBuilder._stack[-1] is bb:  # pylint: disable=protected-access
        relax.BlockBuilder._stack.pop()  # pylint: disable=protected-access
    func_stack = getattr(bb, "_func_stack", None)
    if func_stack:
        func_stack.clear()
    ended = 0
    while ended < _MAX_BLOCKS:
        try:
            bb._end_block()  # pylint: disable=protected-access
        except InternalError:
            break
        ended += 1
    return ended


def abandoned_builders(tb) -> list:
    """The BlockBuilders that the frames of traceback ``tb`` hold (as locals, or as a local's
    ``bb`` / ``block_builder``: TVM's importers) and that are no longer in the builder context:
    after an error has left their ``with`` scopes, nothing will end their blocks."""
    active = relax.BlockBuilder._stack  # pylint: disable=protected-access
    found: list = []
    while tb is not None:
        for value in list(tb.tb_frame.f_locals.values()):
            for candidate in (value, _attribute(value, "bb"), _attribute(value, "block_builder")):
                if (isinstance(candidate, relax.BlockBuilder) and not any(candidate is b for b in found)
                        and not any(candidate is b for b in active)):
                    found.append(candidate)
        tb = tb.tb_next
    return found


def _attribute(value, name: str):
    try:
        return getattr(value, name, None)
    except Exception:  # pylint: disable=broad-except  (an object whose lookup fails holds no builder)
        return None


@contextlib.contextmanager
def closed_on_error(builder: BuilderSource = None):
    """Run the block; if it raises, close (:func:`close_builder`) the BlockBuilder that
    ``builder`` is, or returns when called (an importer may create its builder only once it
    runs; a None result: there is none yet), then let the error go on unchanged.

    Without ``builder`` (code that makes its builder out of reach, such as TVM's own
    ``from_onnx``): every builder in the failing frames that the error took out of the builder
    context (:func:`abandoned_builders`); a builder still in use by an enclosing ``with
    bb.function()`` is left alone."""
    try:
        yield
    except BaseException as err:
        if builder is None:
            builders = abandoned_builders(err.__traceback__)
        else:
            bb = builder if isinstance(builder, relax.BlockBuilder) else builder()
            builders = [] if bb is None else [bb]
        for bb in builders:
            close_builder(bb)
        raise
