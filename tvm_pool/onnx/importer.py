"""``tvm_pool.from_onnx``: TVM's Relax ONNX importer with tvm_pool's pooling converters.

TVM's importer has no hook for replacing converters, and patching its module-level table would
change every other user of ``tvm.relax.frontend.onnx``. Instead a subclass of its
``ONNXGraphImporter`` routes the pooling family (and nodes of the custom domain ``tvm_pool``) to
tvm_pool's versioned converters and hands every other node to TVM's own converter, unchanged.
"""

from __future__ import annotations

import contextlib
import warnings

import onnx
import tvm
from tvm import relax
from tvm.relax.frontend.onnx import onnx_frontend as tvm_onnx

from ..block_builders import closed_on_error
from ..errors import InvalidModelError, OpContext, TvmPoolError, UnsupportedError
# Importing the converter modules registers them (ONNX domain, then the custom domain tvm_pool).
from . import average_pool, custom_ops, global_pool, lp_pool, max_pool, max_unpool  # noqa: F401
from .base import CUSTOM_DOMAIN, converter_for
from .fold import fold_constant_shapes

# Custom-domain nodes are renamed "<domain>::<op_type>" for the duration of the import, because
# the base importer passes only the op_type (not the domain) to ``_convert_operator``.
_DOMAIN_SEP = "::"
_ONNX_DOMAINS = ("", "ai.onnx")
# What TVM's converters raise on a graph they cannot take: tvm-ffi's error classes derive from
# RuntimeError (InternalError, TVMError) or the matching builtins; the converters also assert.
_TVM_CONVERTER_ERRORS = (RuntimeError, ValueError, TypeError, AttributeError, KeyError, IndexError, AssertionError)


class PoolingGraphImporter(tvm_onnx.ONNXGraphImporter):
    """ONNXGraphImporter whose pooling converters are tvm_pool's."""

    def __init__(self, *args, domain_opsets: dict[str, int] | None = None, **kwargs):
        super().__init__(*args, **kwargs)
        self._domain_opsets = domain_opsets or {}

    def _lookup(self, op_name: str):
        domain, _, op_type = op_name.rpartition(_DOMAIN_SEP)
        return converter_for(domain, op_type), domain, op_type

    def _check_for_unsupported_ops(self, graph):
        tvm_map = tvm_onnx._get_convert_map()  # pylint: disable=protected-access
        unsupported = sorted(
            {
                node.op_type
                for node in graph.node
                if self._lookup(node.op_type)[0] is None
                and node.op_type not in tvm_map
                and node.op_type not in ("If", "Constant")
            }
        )
        if unsupported:
            raise UnsupportedError(
                OpContext("model"), f"operators not supported by TVM's ONNX frontend: {', '.join(unsupported)}"
            )

    def _convert_operator(self, op_name, inputs, attrs, opset):
        converter, domain, op_type = self._lookup(op_name)
        if converter is None:
            try:
                return super()._convert_operator(op_name, inputs, attrs, opset)
            except TvmPoolError:
                raise
            except _TVM_CONVERTER_ERRORS as err:  # TVM's converter failed: say where, in one line
                node = attrs.get("tvm_custom", {}).get("name", "")
                hint = ""
                if any(_unknown_shape(inp) for inp in inputs):
                    hint = (" (an input's shape is only known at run time: it comes from a computation"
                            " tvm_pool could not fold)")
                raise UnsupportedError(
                    OpContext(op_type, node), f"TVM's ONNX converter cannot convert it{hint}: {_one_line(err)}"
                ) from None
        if domain:
            opset = self._domain_opsets.get(domain)
            if opset is None:
                raise InvalidModelError(
                    OpContext(op_type, attrs.get("tvm_custom", {}).get("name", ""), domain=domain),
                    f"the model does not import opset domain '{domain}' (add it to opset_import)",
                )
        convert = converter.get_converter(opset)
        sym = convert(self.bb, inputs, attrs, [self._nodes, self._params])
        if isinstance(sym, tvm.relax.Expr):
            sym = self.bb.normalize(sym)
        return sym


def _unknown_shape(expr) -> bool:
    """Whether ``expr`` is a tensor whose shape (not only its rank) is unknown at compile time."""
    ty = getattr(expr, "ty", None) if isinstance(expr, relax.Expr) else None
    return isinstance(ty, relax.TensorType) and ty.shape is None


def _one_line(err: Exception) -> str:
    """``err`` as one line: its type and the first line of its message (at most 300 characters)."""
    lines = [line.strip() for line in str(err).splitlines() if line.strip()]
    text = f"{type(err).__name__}: {lines[0]}" if lines else type(err).__name__
    return text if len(text) <= 300 else text[:297] + "..."


@contextlib.contextmanager
def _qualified_nodes(graph: onnx.GraphProto):
    """Name every node (for error messages) and qualify custom-domain op types, then restore."""
    saved = []
    for index, node in enumerate(graph.node):
        saved.append((node, node.op_type, node.name))
        if not node.name:
            node.name = f"{node.op_type}_{index}"
        if node.domain not in _ONNX_DOMAINS and converter_for(node.domain, node.op_type) is not None:
            node.op_type = f"{node.domain}{_DOMAIN_SEP}{node.op_type}"
    try:
        yield graph
    finally:
        for node, op_type, name in saved:
            node.op_type, node.name = op_type, name


def _opsets(model: onnx.ModelProto) -> dict[str, int]:
    opsets = {}
    for entry in model.opset_import:
        domain = "" if entry.domain in _ONNX_DOMAINS else entry.domain
        opsets[domain] = int(entry.version)
    return opsets


def newest_opsets() -> dict[str, int]:
    """The newest version of each domain tvm_pool knows: the default ONNX domain up to what the
    installed onnx package defines (its checker and shape inference know nothing newer), the
    custom domain ``tvm_pool`` up to its one version."""
    return {"": onnx.defs.onnx_opset_version(), CUSTOM_DOMAIN: 1}


def check_opset_versions(opsets: dict[str, int]):
    """Refuse a model that imports a newer version of a domain than tvm_pool knows (a version
    from the future may change any operator; converting it by older rules would be a guess)."""
    for domain, newest in newest_opsets().items():
        version = opsets.get(domain)
        if version is not None and version > newest:
            name = f"domain '{domain}'" if domain else "the default ONNX domain (ai.onnx)"
            raise InvalidModelError(
                OpContext("model"),
                f"imports opset {version} of {name}; the newest tvm_pool knows is {newest}",
            )


def from_onnx(
    model: onnx.ModelProto,
    shape_dict: dict[str, list] | None = None,
    dtype_dict: str | dict[str, str] | None = "float32",
    opset: int | None = None,
    keep_params_in_input: bool = False,
    sanitize_input_names: bool = True,
) -> tvm.IRModule:
    """Convert an ONNX model to a Relax IRModule, exactly as
    ``tvm.relax.frontend.onnx.from_onnx`` does (same arguments, same result type), except that
    pooling operators (MaxPool, AveragePool, LpPool, the global pools, MaxUnpool, and the custom
    domain ``tvm_pool``) go through tvm_pool's converters for the model's opset, and shape
    computations whose values the model's static shapes fix are folded to constants first
    (:mod:`tvm_pool.onnx.fold`; ``model`` itself is not changed)."""
    if not isinstance(model, onnx.ModelProto):
        raise TypeError(f"from_onnx expects an onnx.ModelProto, got {type(model).__name__}")
    if model.ir_version < 3:
        raise ValueError(f"Model IR version {model.ir_version} not supported. Must be at least after 1.1.0.")
    try:
        onnx.checker.check_model(model)
    except (onnx.checker.ValidationError, ValueError) as exception:
        # Like TVM's importer: the checker is strict about things that convert fine, so its
        # verdict is a warning. ValueError: a model over protobuf's 2 GiB, or a text field
        # that is not UTF-8 (UnicodeDecodeError).
        warnings.warn(str(exception))

    opsets = _opsets(model)
    check_opset_versions(opsets)
    model_opset = opsets.get("", 1)
    if opset is None:
        opset = model_opset
    elif opset < model_opset:
        warnings.warn(f"You are overwriting the model's opset {model_opset} by a lower one ({opset}).")
    # Shape computations that the model's static shapes fix become constants (fold.py): TVM
    # cannot build a tensor whose shape it only learns at run time from such a computation.
    model = fold_constant_shapes(model, shape_dict)

    importer = PoolingGraphImporter(
        shape_dict,
        dtype_dict,
        keep_params_in_input=keep_params_in_input,
        sanitize=sanitize_input_names,
        domain_opsets=opsets,
    )
    # A converter that raises inside TVM's `with bb.function()` leaves the builder's block open:
    # closed before the error goes on (block_builders.py).
    with _qualified_nodes(model.graph) as graph, closed_on_error(lambda: importer.bb):
        return importer.from_onnx(graph, opset)
