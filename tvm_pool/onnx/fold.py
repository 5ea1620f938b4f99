"""Fold an ONNX model's shape computations to constants before TVM imports it.

Exporters often compute a size at run time from a tensor's shape: PyTorch's TorchScript exporter
turns ShuffleNet v2's ``x.chunk(2, dim=1)`` into ``Shape -> Gather -> Add -> Div -> Mul -> Slice``.
TVM's importer gives such a Slice an output of unknown shape, and the build then fails deep in
legalization ("emit_te now only supports Tensor that has ShapeExpr shape"), although every
shape in the model is static. This module computes those values where the shapes make them
known and hands TVM a model in which they are constants:

1. ONNX shape inference (with data propagation) runs on a light copy of the model (large
   initializers become typed inputs: their shapes matter, their values do not), with the input
   shapes of ``shape_dict`` where the caller gives them, as TVM's importer will use them.
2. A ``Shape`` (or ``Size``) node whose input shape is fully known gets its value; one whose
   input shape is only partly known (a symbolic batch) gets it where a ``Gather`` or ``Slice``
   with constant indices picks known dimensions only.
3. Every default-domain node fed only by constants, at least one of them computed in 1. or 2.,
   is evaluated with ``onnx.reference`` (the specification's own implementation; no network,
   no onnxruntime), as long as its outputs stay small (:data:`MAX_FOLDED_ELEMENTS`).
4. Each node so evaluated whose outputs are still used becomes a ``Constant`` node of the same
   name at the same place (not an initializer: ``keep_params_in_input`` would make those
   parameters); the others are dropped. 1 to 4 repeat while they fold something, since a
   folded Reshape shape can make the next shapes static.

Only values derived from shapes are folded: nodes fed by initializers and Constants alone are
left to TVM as they are, nondeterministic operators and nodes with subgraphs are never
evaluated, and a model with nothing to fold (or on which shape inference fails) is returned
unchanged, the same object. A model that is folded is a copy; the caller's model is untouched.
"""

from __future__ import annotations

import warnings

import numpy as np
import onnx
from onnx import helper, numpy_helper

# A folded output larger than this stays a node (its inputs may still become constants).
MAX_FOLDED_ELEMENTS = 1 << 16
# Initializers above this many elements are handed to shape inference as typed inputs only.
_LIGHT_INITIALIZER_ELEMENTS = 1024
_MAX_ROUNDS = 8
_ONNX_DOMAINS = ("", "ai.onnx")
_NONDETERMINISTIC = frozenset(
    {"RandomNormal", "RandomNormalLike", "RandomUniform", "RandomUniformLike", "Multinomial", "Bernoulli"}
)


def fold_constant_shapes(model: onnx.ModelProto, shape_dict: dict | None = None) -> onnx.ModelProto:
    """``model`` with the shape computations whose values its static shapes fix replaced by
    constants (see the module docstring); ``model`` itself when there is nothing to fold."""
    if not any(node.op_type in ("Shape", "Size") and node.domain in _ONNX_DOMAINS for node in model.graph.node):
        return model
    result = model
    for _ in range(_MAX_ROUNDS):
        values = _fold_once(result, shape_dict)
        if not values:
            break
        if result is model:
            result = onnx.ModelProto()
            result.CopyFrom(model)
        _replace(result.graph, values)
    return result


# ---------------------------------------------------------------------------------------------
# Known shapes
# ---------------------------------------------------------------------------------------------

def _numel(dims) -> int:
    return int(np.prod([int(d) for d in dims], dtype=np.int64)) if len(dims) else 1


def _override(value_info: onnx.ValueInfoProto, shape) -> None:
    """Give ``value_info`` the shape ``shape`` (ints are known dims, anything else unknown)."""
    tensor_shape = value_info.type.tensor_type.shape
    tensor_shape.Clear()
    for dim in shape:
        entry = tensor_shape.dim.add()
        if isinstance(dim, (int, np.integer)) and not isinstance(dim, bool) and dim >= 0:
            entry.dim_value = int(dim)


def _light_copy(model: onnx.ModelProto, shape_dict: dict | None) -> onnx.ModelProto:
    """The model for shape inference: no intermediate annotations (shapes come from the
    inputs), large initializers as typed inputs, the inputs of ``shape_dict`` reshaped."""
    graph = model.graph
    light = onnx.ModelProto()
    light.ir_version = model.ir_version
    light.opset_import.extend(model.opset_import)
    light.functions.extend(model.functions)
    out = light.graph
    out.name = graph.name
    out.node.extend(graph.node)
    initializers = {t.name for t in graph.initializer}
    for value_info in graph.input:
        if value_info.name in initializers:
            continue
        entry = out.input.add()
        entry.CopyFrom(value_info)
        if shape_dict and value_info.name in shape_dict:
            _override(entry, list(shape_dict[value_info.name]))
    for tensor in graph.initializer:
        if _numel(tensor.dims) <= _LIGHT_INITIALIZER_ELEMENTS:
            out.initializer.append(tensor)
        else:
            out.input.append(helper.make_tensor_value_info(tensor.name, tensor.data_type, list(tensor.dims)))
    for value_info in graph.output:  # names and element types only
        elem_type = value_info.type.tensor_type.elem_type if value_info.type.HasField("tensor_type") else 0
        out.output.append(helper.make_tensor_value_info(value_info.name, elem_type, None))
    return light


def _known_shapes(model: onnx.ModelProto, shape_dict: dict | None) -> dict[str, list]:
    """Tensor name -> its dims (an int where known, None where not), for every tensor whose
    rank shape inference knows; {} when shape inference fails on the model."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            inferred = onnx.shape_inference.infer_shapes(_light_copy(model, shape_dict), data_prop=True)
    except (onnx.shape_inference.InferenceError, onnx.checker.ValidationError, ValueError, TypeError, KeyError,
            RuntimeError):  # a model inference cannot read is one nothing is folded in
        return {}
    shapes = {}
    graph = inferred.graph
    for value_info in list(graph.input) + list(graph.value_info) + list(graph.output):
        tensor_type = value_info.type.tensor_type
        if value_info.type.HasField("tensor_type") and tensor_type.HasField("shape"):
            shapes[value_info.name] = [d.dim_value if d.HasField("dim_value") else None for d in tensor_type.shape.dim]
    return shapes


# ---------------------------------------------------------------------------------------------
# Evaluation
# ---------------------------------------------------------------------------------------------

def _attribute(node: onnx.NodeProto, name: str, default=None):
    for attr in node.attribute:
        if attr.name == name:
            return helper.get_attribute_value(attr)
    return default


def _shape_of(node: onnx.NodeProto, dims: list) -> list:
    """The part of ``dims`` that Shape (``start``/``end`` since opset 15) returns."""
    rank = len(dims)
    start = _attribute(node, "start", 0)
    end = _attribute(node, "end", rank)
    start = min(max(start + rank if start < 0 else start, 0), rank)
    end = min(max(end + rank if end < 0 else end, 0), rank)
    return dims[start:end]


def _pick(node: onnx.NodeProto, partial: list, constant) -> list | None:
    """What Gather (axis 0) or Slice with constant indices picks from a partly known shape
    ``partial`` (a list of ints and None), or None when the node is not one of those."""
    if node.op_type == "Gather" and _attribute(node, "axis", 0) == 0 and len(node.input) == 2:
        indices = constant(node.input[1])
        if indices is None or indices.ndim > 1:
            return None
        picked = np.empty(len(partial), dtype=object)
        picked[:] = partial
        return list(np.atleast_1d(picked[indices])) if indices.ndim else [picked[int(indices)]]
    if node.op_type == "Slice" and len(node.input) >= 3:
        args = [constant(name) if name else None for name in node.input[1:5]]
        if any(a is None for a, name in zip(args, node.input[1:5]) if name):
            return None
        starts, ends = args[0], args[1]
        axes = args[2] if len(args) > 2 and args[2] is not None else np.zeros_like(starts)
        steps = args[3] if len(args) > 3 and args[3] is not None else np.ones_like(starts)
        if starts.shape != (1,) or list(axes.reshape(-1)) not in ([0], [-1]) or int(steps.reshape(-1)[0]) <= 0:
            return None
        picked = np.empty(len(partial), dtype=object)
        picked[:] = partial
        return list(picked[slice(int(starts[0]), int(ends[0]), int(steps[0]))])
    return None


def _evaluate(node: onnx.NodeProto, inputs: list, opsets: dict) -> list | None:
    """The outputs of ``node`` on constant ``inputs`` by onnx.reference, or None if it fails."""
    from onnx.reference import ReferenceEvaluator  # pylint: disable=import-outside-toplevel

    try:
        with warnings.catch_warnings(), np.errstate(all="ignore"):
            warnings.simplefilter("ignore")
            evaluator = ReferenceEvaluator(node, opsets=opsets)
            feeds = {name: value for name, value in zip(node.input, inputs) if name}
            return [np.asarray(out) for out in evaluator.run(None, feeds)]
    except (ValueError, TypeError, KeyError, IndexError, AttributeError, RuntimeError, ArithmeticError,
            AssertionError):  # what the reference cannot evaluate (NotImplementedError included) stays a node
        return None


def _fold_once(model: onnx.ModelProto, shape_dict: dict | None) -> dict[str, np.ndarray]:
    """Tensor name -> value, for the outputs of every node that can be folded now."""
    graph = model.graph
    shapes = _known_shapes(model, shape_dict)
    if not shapes:
        return {}
    opsets = {("" if o.domain in _ONNX_DOMAINS else o.domain): o.version for o in model.opset_import}
    initializers = {t.name: t for t in graph.initializer}
    constants: dict[str, np.ndarray] = {}  # initializers and Constant nodes, read when used
    constant_nodes = {out: node for node in graph.node if node.op_type == "Constant" and node.domain in _ONNX_DOMAINS
                      for out in node.output}

    def constant(name):
        if name in values:
            return values[name]
        if name not in constants:
            if name in initializers:
                try:
                    constants[name] = numpy_helper.to_array(initializers[name])
                except (OSError, ValueError, TypeError):  # external data not at hand: not a constant here
                    constants[name] = None
            elif name in constant_nodes:
                result = _evaluate(constant_nodes[name], [], opsets)
                constants[name] = result[0] if result else None
            else:
                return None
        return constants[name]

    values: dict[str, np.ndarray] = {}  # the folded (shape-derived) values
    partial: dict[str, list] = {}  # Shape outputs known only in part
    for node in graph.node:
        if node.domain not in _ONNX_DOMAINS or not node.output:
            continue
        if node.op_type in ("Shape", "Size") and node.input[0] in shapes:
            dims = shapes[node.input[0]]
            dims = _shape_of(node, dims) if node.op_type == "Shape" else dims
            if all(d is not None for d in dims):
                values[node.output[0]] = np.array(dims if node.op_type == "Shape" else _numel(dims), dtype=np.int64)
            elif node.op_type == "Shape":
                partial[node.output[0]] = dims
            continue
        if node.input and node.input[0] in partial:
            try:
                picked = _pick(node, partial[node.input[0]], constant)
            except (IndexError, ValueError, TypeError):  # an index out of range: left to TVM
                picked = None
            if picked is not None and all(d is not None for d in picked):
                values[node.output[0]] = np.array(picked, dtype=np.int64).reshape(
                    np.shape(constant(node.input[1])) if node.op_type == "Gather" else (-1,))
            continue
        if (node.op_type in _NONDETERMINISTIC or node.op_type == "Constant"
                or any(attr.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS) for attr in node.attribute)
                or not any(name in values for name in node.input)):
            continue
        inputs = [constant(name) if name else None for name in node.input]
        if any(value is None for value, name in zip(inputs, node.input) if name):
            continue
        outputs = _evaluate(node, inputs, opsets)
        if outputs is None or any(out.size > MAX_FOLDED_ELEMENTS for out in outputs):
            continue
        for name, out in zip(node.output, outputs):
            if name:
                values[name] = out
    return values


# ---------------------------------------------------------------------------------------------
# Rewriting
# ---------------------------------------------------------------------------------------------

def _used_names(graph: onnx.GraphProto) -> set[str]:
    """Every tensor name a node of ``graph`` or of its subgraphs reads, and its outputs."""
    used = {o.name for o in graph.output}
    for node in graph.node:
        used.update(node.input)
        for attr in node.attribute:
            for sub in ([attr.g] if attr.type == onnx.AttributeProto.GRAPH else list(attr.graphs)):
                used |= _used_names(sub)
    return used


def _replace(graph: onnx.GraphProto, values: dict[str, np.ndarray]) -> None:
    """Replace each node all of whose outputs are in ``values`` by Constant nodes of the outputs
    still used (same node name, same place); drop it when none is, and drop the Constant and
    Shape nodes that only folded nodes read."""
    nodes = list(graph.node)
    folded = {index for index, node in enumerate(nodes)
              if node.output and all(not o or o in values for o in node.output)}
    probe = onnx.GraphProto()
    probe.output.extend(graph.output)
    probe.node.extend(node for index, node in enumerate(nodes) if index not in folded)
    used = _used_names(probe)
    rewritten = []
    for index, node in enumerate(nodes):
        if index not in folded:
            rewritten.append(onnx.NodeProto())
            rewritten[-1].CopyFrom(node)
            continue
        live = [o for o in node.output if o and o in used]
        for position, name in enumerate(live):
            node_name = node.name if len(live) == 1 else f"{node.name}:{position}"
            rewritten.append(helper.make_node("Constant", [], [name], name=node_name,
                                              value=numpy_helper.from_array(values[name], name)))
    # the Constants, and the Shapes known only in part, that fed folded nodes alone are dead now
    still_used = _used_names(helper.make_graph(rewritten, "probe", [], list(graph.output)))
    before = _used_names(graph)
    rewritten = [node for node in rewritten if not (
        node.op_type in ("Constant", "Shape") and node.domain in _ONNX_DOMAINS
        and all(o in before and o not in still_used for o in node.output))]
    del graph.node[:]
    graph.node.extend(rewritten)
    stale = [vi for vi in graph.value_info if vi.name in values]
    for value_info in stale:
        graph.value_info.remove(value_info)
