"""Programs saved by ``torch.export.save`` (``.pt2``) in the ``tvm-pool`` commands: loading,
their user inputs and outputs, importing with :func:`tvm_pool.from_exported_program`,
``--input-shapes`` (which fixes symbolic dimensions such as a ``torch.export.Dim`` batch), and
the ATen pooling nodes ``inspect`` lists with a one-node probe program for each.

PyTorch is optional: nothing here imports it until a ``.pt2`` file is read, and without it
reading one is a one-line error that says what to install.
"""

from __future__ import annotations

import contextlib
import logging
import operator
import re
import warnings
import zipfile
from dataclasses import dataclass

from .common import CliError, fmt_shape, import_model, one_line, require_input_file

SUFFIX = ".pt2"

# The ATen pooling operators inspect lists: max_pool*/avg_pool*/adaptive_*/max_unpool* (with
# their _with_indices and leading-underscore variants).
POOLING_OP = re.compile(r"_?(max_pool[123]d(_with_indices)?|avg_pool[123]d|adaptive_(avg|max)_pool[123]d|max_unpool[123]d)")

# What torch.export.load raises for a file it cannot read as a program (its deserializer, the
# zip reader under it, a JSON or schema mismatch).
# What torch.export raises on a program it cannot trace: torch._dynamo's UserError and
# Unsupported derive from RuntimeError; its checks raise the builtins below.
TORCH_EXPORT_ERRORS = (RuntimeError, ValueError, TypeError, AssertionError, AttributeError, KeyError, IndexError)
_LOAD_ERRORS = (RuntimeError, ValueError, LookupError, TypeError, AttributeError, OSError, EOFError, zipfile.BadZipFile)


def is_program_path(path: str) -> bool:
    """Whether ``path`` names a torch.export program (by its ``.pt2`` extension)."""
    return str(path).lower().endswith(SUFFIX)


def from_exported_program_function():
    """The importer every command uses (tvm_pool's drop-in for TVM's)."""
    import tvm_pool  # pylint: disable=import-outside-toplevel

    return tvm_pool.from_exported_program


def require_torch(path: str):
    """``torch``, or the one-line error saying that reading ``path`` needs it."""
    from ..pytorch import require_torch as require  # pylint: disable=import-outside-toplevel

    try:
        return require(f"reading {path}")
    except ImportError as err:
        raise CliError(str(err)) from None


@contextlib.contextmanager
def torch_quiet():
    """Hold back what PyTorch logs and warns while reading or exporting a program (the
    deserializer logs a traceback before it raises; pytree warns of deprecations): the error
    that follows is the one line the user sees. Yields the log records held back."""
    held: list[logging.LogRecord] = []

    class Hold(logging.Handler):
        def emit(self, record):
            held.append(record)

    # PyTorch's loggers print through their own handlers and do not propagate: swap those.
    names = ["torch"] + [n for n in list(logging.Logger.manager.loggerDict) if n.startswith("torch.")]
    loggers = [logger for logger in map(logging.getLogger, names) if logger.handlers]
    saved = [logger.handlers for logger in loggers]
    hold = Hold()
    for logger in loggers:
        logger.handlers = [hold]
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)
            warnings.filterwarnings("ignore", category=UserWarning, module=r"torch\..*")
            yield held
    finally:
        for logger, handlers in zip(loggers, saved):
            logger.handlers = handlers


def _cause(err: BaseException) -> str:
    text = one_line(err)
    return text.split(". This is an internal miniz error")[0]


def load_program(path: str):
    """``torch.export.load(path)`` with one-line errors."""
    require_input_file(path, "a torch.export program (.pt2)")
    torch = require_torch(path)
    with torch_quiet() as held:
        try:
            return torch.export.load(path)
        except _LOAD_ERRORS as err:
            # The deserializer logs the cause and raises "check the warnings above".
            causes = [r.exc_info[1] for r in held if r.exc_info and r.exc_info[1] is not None]
            cause = _cause(causes[-1] if causes else err)
            raise CliError(f"{path}: not a program saved by torch.export.save ({cause})") from None


# --------------------------------------------------------------------------------------------
# The program's user inputs and outputs.
# --------------------------------------------------------------------------------------------


@dataclass
class ProgramInput:
    """A user input: ``shape`` holds ints and, for symbolic dimensions, their names (``s77``);
    ``hints`` the sizes of the example the program was exported with (None where unknown)."""

    name: str
    shape: list
    dtype: str
    hints: list

    def describe(self, bindings=None) -> str:
        return f"{self.name} {self.dtype}{fmt_shape(bind_shape(self.shape, bindings))}"


def torch_dtype_name(dtype) -> str:
    return str(dtype).removeprefix("torch.")


def _dim(d):
    """(int or symbolic name, example size or None) of one dimension of a FakeTensor."""
    if isinstance(d, int):
        return d, d
    node = getattr(d, "node", None)
    expr = getattr(node, "expr", None)
    if expr is not None and getattr(expr, "is_Integer", False):
        return int(expr), int(expr)
    hint = getattr(node, "hint", None)
    return str(expr if expr is not None else d), (int(hint) if isinstance(hint, int) else None)


def _is_tensor(value) -> bool:
    return hasattr(value, "shape") and hasattr(value, "dtype") and not isinstance(value, (int, float, bool))


def program_inputs(program, path: str = "the program") -> list[ProgramInput]:
    """The user inputs (``graph_signature.user_inputs``), in the order ``main`` takes them."""
    placeholders = {n.name: n for n in program.graph.nodes if n.op == "placeholder"}
    inputs = []
    for name in program.graph_signature.user_inputs:
        node = placeholders.get(name) if isinstance(name, str) else None
        value = node.meta.get("val") if node is not None else None
        if not _is_tensor(value):
            what = type(value).__name__ if node is not None else f"the constant {name!r}"
            raise CliError(
                f"{path}: input '{name}' is {what}, not a tensor; tvm-pool takes programs whose inputs are all tensors"
            )
        dims = [_dim(d) for d in value.shape]
        inputs.append(ProgramInput(name, [d for d, _ in dims], torch_dtype_name(value.dtype), [h for _, h in dims]))
    return inputs


def output_names(program, count: int) -> list[str]:
    """Names for ``main``'s ``count`` outputs: the program's user output nodes
    (``graph_signature.user_outputs``) when there are as many, each once, else ``output_<i>``."""
    names = list(program.graph_signature.user_outputs)
    if len(names) == count and all(isinstance(n, str) and n for n in names) and len(set(names)) == count:
        return names
    return [f"output_{i}" for i in range(count)]


def count_ops(program) -> int:
    """The program's operator calls (not the getitems that unpack their tuples)."""
    return sum(1 for n in program.graph.nodes if n.op == "call_function" and n.target is not operator.getitem)


def symbol_ranges(program) -> dict:
    """symbol name -> (lowest, highest or None) from the program's range constraints."""

    def bound(v):
        if not getattr(v, "is_finite", True) or getattr(v, "is_infinite", False):  # int_oo, oo, -oo
            return None
        try:
            return int(v)
        except (TypeError, ValueError, OverflowError, AttributeError):
            return None

    return {str(s): (bound(r.lower), bound(r.upper)) for s, r in getattr(program, "range_constraints", {}).items()}


_SYMBOL = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def bind_shape(shape, bindings) -> list:
    return [bindings.get(d, d) if isinstance(d, str) and bindings else d for d in shape]


def check_input_shapes(inputs: list[ProgramInput], overrides: dict, ranges: dict) -> dict[str, int]:
    """``--input-shapes`` checked against the program's inputs; returns the symbolic
    dimensions they fix (symbol name -> size). One-line errors."""
    names = [i.name for i in inputs]
    unknown = sorted(set(overrides) - set(names))
    if unknown:
        raise CliError(f"--input-shapes names unknown input '{unknown[0]}'; the program's inputs are: {', '.join(names)}")
    bindings: dict[str, int] = {}
    for inp in inputs:
        if inp.name not in overrides:
            continue
        shape = overrides[inp.name]
        if len(shape) != len(inp.shape):
            raise CliError(
                f"--input-shapes {inp.name}: gives {len(shape)} dimensions, the program's input has "
                f"{len(inp.shape)} ({fmt_shape(inp.shape)})"
            )
        for want, got in zip(inp.shape, shape):
            if isinstance(want, int):
                if want != got:
                    raise CliError(
                        f"--input-shapes {inp.name}: {fmt_shape(shape)} conflicts with the program's shape "
                        f"{fmt_shape(inp.shape)}"
                    )
                continue
            if not _SYMBOL.fullmatch(want):
                raise CliError(
                    f"--input-shapes {inp.name}: dimension {want} of {fmt_shape(inp.shape)} is derived from other "
                    "dimensions; only a program's own symbolic dimensions can be fixed"
                )
            if bindings.get(want, got) != got:
                raise CliError(f"--input-shapes {inp.name}: gives {want}={got}, but another input gives {want}={bindings[want]}")
            low, high = ranges.get(want, (None, None))
            if (low is not None and got < low) or (high is not None and got > high):
                span = f"[{low if low is not None else 0}, {high if high is not None else 'inf'}]"
                raise CliError(
                    f"--input-shapes {inp.name}: {want}={got} is outside the range the program was exported for "
                    f"({want} in {span})"
                )
            bindings[want] = got
    return bindings


def require_static(inputs: list[ProgramInput], bindings: dict, why: str) -> None:
    """A one-line error naming the first input with symbolic dimensions left, and the
    ``--input-shapes`` that fixes them (the example's sizes)."""
    for inp in inputs:
        shape = bind_shape(inp.shape, bindings)
        symbolic = [d for d in shape if not isinstance(d, int)]
        if symbolic:
            example = ",".join(str(d) if isinstance(d, int) else str(h or 1) for d, h in zip(shape, inp.hints))
            raise CliError(
                f"input '{inp.name}' has symbolic dimension(s) {', '.join(symbolic)} (shape {fmt_shape(shape)}); "
                f"{why}: give them with --input-shapes {inp.name}={example}"
            )


def example_shapes(inputs: list[ProgramInput], bindings: dict) -> dict[str, list[int]]:
    """Static shapes for every input: ``bindings`` for symbolic dimensions, else the size of
    the example the program was exported with."""
    shapes = {}
    for inp in inputs:
        shape = []
        for d, hint in zip(inp.shape, inp.hints):
            if isinstance(d, int):
                shape.append(d)
            elif d in bindings:
                shape.append(bindings[d])
            elif hint is not None:
                shape.append(hint)
            else:
                raise CliError(
                    f"input '{inp.name}' has symbolic dimension {d} and the program keeps no example size for it; "
                    f"give its shape with --input-shapes {inp.name}=D0,D1,..."
                )
        shapes[inp.name] = shape
    return shapes


# --------------------------------------------------------------------------------------------
# Importing.
# --------------------------------------------------------------------------------------------


def import_program(program, verbose: bool = False, quiet: bool = False, **kwargs):
    """tvm_pool.from_exported_program, its noise captured, errors one line."""
    with torch_quiet():
        return import_model(from_exported_program_function(), program, verbose, quiet, **kwargs)


def specialize_program(program, inputs: list[ProgramInput], bindings: dict, path: str = "the program"):
    """``program`` re-exported with the symbolic dimensions ``bindings`` fixes (symbol name ->
    size) made static: every one of them must be fixed (one-line error naming what is left).
    Without bindings, ``program`` itself."""
    if not bindings:
        return program
    require_static(inputs, bindings, "--input-shapes must fix every symbolic dimension of a .pt2")
    import torch  # pylint: disable=import-outside-toplevel
    from torch.utils import _pytree as pytree  # pylint: disable=import-outside-toplevel

    shapes = example_shapes(inputs, bindings)
    flat = [torch.zeros(shapes[i.name], dtype=getattr(torch, i.dtype)) for i in inputs]
    with torch_quiet():
        try:
            args, kwargs = pytree.tree_unflatten(flat, program.call_spec.in_spec)
            return torch.export.export(program.module(), tuple(args), kwargs or None)
        except TORCH_EXPORT_ERRORS as err:  # whatever torch.export raises, in one line
            fixed = ", ".join(f"{i.name}{fmt_shape(shapes[i.name])}" for i in inputs)
            raise CliError(f"{path}: re-exporting the program with static shapes ({fixed}) fails: {_cause(err)}") from None


# --------------------------------------------------------------------------------------------
# The pooling nodes (inspect).
# --------------------------------------------------------------------------------------------


def op_key(node) -> tuple[str, str, str]:
    """(namespace, packet, overload) of an ATen call: ``("aten", "max_pool2d", "default")``."""
    parts = str(node.target).split(".")
    if len(parts) != 3:
        return ("", str(node.target), "")
    return parts[0], parts[1], parts[2]


def pooling_nodes(program) -> list:
    nodes = []
    for node in program.graph.nodes:
        if node.op != "call_function":
            continue
        namespace, packet, _ = op_key(node)
        if namespace == "aten" and POOLING_OP.fullmatch(packet):
            nodes.append(node)
    return nodes


def converter_of(node) -> str:
    """Who converts ``node``: tvm_pool's pooling converters, or TVM's own."""
    _, packet, overload = op_key(node)
    try:
        from ..pytorch.pools import CONVERTERS  # pylint: disable=import-outside-toplevel
    except ImportError:
        return "?"
    return "tvm_pool" if f"{packet}.{overload}" in CONVERTERS else "stock TVM converter"


def fmt_value(value) -> str:
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(fmt_value(v) for v in value) + "]"
    if hasattr(value, "name") and hasattr(value, "op"):  # an fx node
        return value.name
    return str(value)


def node_arguments(node) -> tuple[list[tuple[str, object]], list[tuple[str, object]]]:
    """(tensor arguments, other arguments) of an ATen call, each as (schema name, value),
    defaults filled in."""
    schema = getattr(node.target, "_schema", None)
    if schema is None:
        return [(f"arg{i}", a) for i, a in enumerate(node.args)], list(node.kwargs.items())
    tensors, others = [], []
    for i, arg in enumerate(schema.arguments):
        if i < len(node.args):
            value = node.args[i]
        elif arg.name in node.kwargs:
            value = node.kwargs[arg.name]
        elif arg.has_default_value():
            value = arg.default_value
        else:
            continue
        is_node = hasattr(value, "op") and hasattr(value, "meta")
        (tensors if is_node else others).append((arg.name, value))
    return tensors, others


def fmt_value_type(value, bindings=None) -> str:
    """``float32[s77, 8, 8, 8]`` for a FakeTensor (a tuple's fields joined by ", ")."""
    if isinstance(value, (list, tuple)):
        return ", ".join(fmt_value_type(v, bindings) for v in value)
    if not _is_tensor(value):
        return "?"
    return f"{torch_dtype_name(value.dtype)}{fmt_shape(bind_shape([_dim(d)[0] for d in value.shape], bindings))}"


class NoProbe(Exception):
    """The node cannot be probed on its own (why)."""


def probe_program(program, node, bindings: dict):
    """A program of ``node`` alone, exported from its recorded input types: the symbolic
    dimensions that ``bindings`` does not fix stay symbolic (``torch.export.Dim`` with the
    program's range), so its PrimFunc is the one ``compile`` builds. Raises :class:`NoProbe`."""
    import torch  # pylint: disable=import-outside-toplevel

    ranges = symbol_ranges(program)
    graph = torch.fx.Graph()
    placeholders, examples, dynamic, dims = {}, [], [], {}

    def example_size(expr, hint, name):
        low, high = ranges.get(name, (None, None))
        size = hint if hint is not None else (low if low is not None else 2)
        if size < 2 and (high is None or high >= 2):  # export specializes sizes 0 and 1
            size = 2
        return size, low, high

    def placeholder(source):
        if source in placeholders:
            return placeholders[source]
        value = source.meta.get("val")
        if not _is_tensor(value):
            raise NoProbe(f"its input '{source.name}' is not a tensor")
        shape, spec = [], {}
        for i, d in enumerate(value.shape):
            if isinstance(d, int):
                shape.append(d)
                continue
            expr = d.node.expr
            free = {str(s): s for s in expr.free_symbols}
            if set(free) <= set(bindings):
                shape.append(int(expr.subs({s: bindings[name] for name, s in free.items()})))
                continue
            hint = getattr(d.node, "hint", None)
            name = str(expr)
            size, low, high = example_size(expr, hint if isinstance(hint, int) else None, name)
            shape.append(size)
            if expr.is_Symbol:
                if name not in dims:
                    kwargs = {k: v for k, v in (("min", low), ("max", high)) if v is not None}
                    dims[name] = torch.export.Dim(name, **kwargs)
                spec[i] = dims[name]
            else:
                spec[i] = torch.export.Dim.DYNAMIC
        placeholders[source] = graph.placeholder(f"input_{len(placeholders)}")
        examples.append(torch.zeros(shape, dtype=value.dtype))
        dynamic.append(spec or None)
        return placeholders[source]

    def as_input(arg):
        if hasattr(arg, "op") and hasattr(arg, "meta"):
            return placeholder(arg)
        if isinstance(arg, (list, tuple)):
            return type(arg)(as_input(a) for a in arg)
        if isinstance(arg, dict):
            return {k: as_input(v) for k, v in arg.items()}
        if isinstance(arg, torch.SymInt):
            raise NoProbe("it has symbolic arguments")
        return arg

    call = graph.call_function(node.target, as_input(tuple(node.args)), as_input(dict(node.kwargs)))
    out = node.meta.get("val")
    if isinstance(out, (list, tuple)):
        graph.output(tuple(graph.call_function(operator.getitem, (call, i)) for i in range(len(out))))
    else:
        graph.output(call)
    module = torch.fx.GraphModule(torch.nn.Module(), graph)
    with torch_quiet():
        try:
            return torch.export.export(
                module, tuple(examples), dynamic_shapes=tuple(dynamic) if any(dynamic) else None
            )
        except TORCH_EXPORT_ERRORS as err:  # the probe is a diagnostic: say why, go on
            raise NoProbe(f"exporting it alone fails: {one_line(err)}") from None


__all__ = [
    "NoProbe",
    "ProgramInput",
    "check_input_shapes",
    "example_shapes",
    "import_program",
    "is_program_path",
    "load_program",
    "output_names",
    "pooling_nodes",
    "probe_program",
    "specialize_program",
    "program_inputs",
    "require_static",
]
