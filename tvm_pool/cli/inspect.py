"""``tvm-pool inspect model.onnx``: which converter, output shape, padding, schedule rule and
tuning record each pooling node gets; for a torch.export program (``model.pt2``), each ATen
pooling node with its arguments, types, schedule rule and tuning record; for a TFLite model
(``model.tflite``), each pooling operator (:mod:`tvm_pool.cli.tflite_files`)."""

from __future__ import annotations

import sys

from ..errors import TvmPoolError
from . import exported, tflite_files
from .compile import onnx_module, program_specialized
from .probes import schedule_rule_for, tuning_record_for
from .common import (
    MODEL_ERRORS,
    TARGET_HELP,
    CliError,
    common_options,
    declared_shape,
    fmt_shape,
    from_onnx_function,
    import_onnx,
    inspect_each,
    load_onnx,
    one_line,
    onnx_dtype,
    parse_input_shapes,
    quiet_tvm_warnings,
    resolve_target,
    say_model_tuning,
    target_label,
)

NAME = "inspect"

POOLING_OPS = (
    "MaxPool",
    "AveragePool",
    "LpPool",
    "GlobalMaxPool",
    "GlobalAveragePool",
    "GlobalLpPool",
    "MaxRoiPool",
    "MaxUnpool",
)
GLOBAL_POOLS = ("GlobalMaxPool", "GlobalAveragePool", "GlobalLpPool")
WINDOW_POOLS = ("MaxPool", "AveragePool", "LpPool")


def add_parser(subparsers):
    p = subparsers.add_parser(NAME, parents=[common_options()], help="show how tvm_pool handles each pooling node")
    p.add_argument("model", help="the ONNX model (.onnx), torch.export program (.pt2, saved by torch.export.save) or TFLite model (.tflite)")
    p.add_argument("--target", default="host", help=TARGET_HELP)
    p.add_argument("--input-shapes", action="append", metavar="NAME=D0,D1,...", help="static input shapes")
    from .compile import add_tuning_options  # pylint: disable=import-outside-toplevel

    add_tuning_options(p)
    return p


def _node_opset(model, domain: str) -> int:
    domain = "" if domain in ("", "ai.onnx") else domain
    for entry in model.opset_import:
        if ("" if entry.domain in ("", "ai.onnx") else entry.domain) == domain:
            return int(entry.version)
    return 1


def node_attrs(node) -> dict:
    import onnx  # pylint: disable=import-outside-toplevel

    out = {}
    for a in node.attribute:
        value = onnx.helper.get_attribute_value(a)
        out[a.name] = value.decode() if isinstance(value, bytes) else value
    return out


def _value_shapes(model, overrides: dict) -> dict:
    """name -> (shape list with ints/strs, dtype) for every value shape inference can type."""
    import onnx  # pylint: disable=import-outside-toplevel

    model = onnx.ModelProto.FromString(model.SerializeToString())
    for vi in model.graph.input:
        if vi.name in overrides:
            dims = vi.type.tensor_type.shape.dim
            del dims[:]
            for d in overrides[vi.name]:
                dims.add().dim_value = d
    try:
        model = onnx.shape_inference.infer_shapes(model)
    # What onnx raises for a graph it cannot type (its non-strict mode rarely does).
    except (onnx.shape_inference.InferenceError, onnx.checker.ValidationError) as err:
        print(f"tvm-pool: warning: ONNX shape inference failed ({one_line(err)}); only the declared shapes are shown",
              file=sys.stderr)
    shapes = {}
    for vi in list(model.graph.input) + list(model.graph.value_info) + list(model.graph.output):
        if vi.type.HasField("tensor_type"):
            shapes[vi.name] = (declared_shape(vi), onnx_dtype(vi.type.tensor_type.elem_type))
    return shapes


def _windows(node, in_shape):
    """spec.resolve_windows / global_windows for a pooling node (None where not applicable)."""
    from tvm import tirx  # pylint: disable=import-outside-toplevel

    from .. import spec  # pylint: disable=import-outside-toplevel

    if in_shape is None or len(in_shape) < 3:
        return None
    spatial = [d if isinstance(d, int) else tirx.Var(str(d).replace("?", "unk"), "int64") for d in in_shape[2:]]
    if node.op_type in GLOBAL_POOLS:
        return spec.global_windows(spatial)
    if node.op_type not in WINDOW_POOLS:
        return None
    a = node_attrs(node)
    kernel = list(a.get("kernel_shape", []))
    if len(kernel) != len(spatial):
        return None
    rank = len(kernel)
    return spec.resolve_windows(
        spatial,
        kernel,
        list(a.get("strides", [1] * rank)),
        list(a.get("dilations", [1] * rank)),
        list(a.get("pads", [0] * (2 * rank))),
        a.get("auto_pad", "NOTSET"),
        bool(a.get("ceil_mode", 0)),
    )


def _single_node_model(model, node, shapes):
    """A one-node ONNX model of ``node`` with its inferred input types (for the schedule probe)."""
    import onnx  # pylint: disable=import-outside-toplevel
    from onnx import helper  # pylint: disable=import-outside-toplevel

    inits = {t.name: t for t in model.graph.initializer}
    inputs, initializers = [], []
    for name in node.input:
        if not name:
            continue
        if name in inits:
            initializers.append(inits[name])
            continue
        shape, dtype = shapes.get(name, (None, "float32"))
        if shape is None or not all(isinstance(d, int) for d in shape):
            return None
        inputs.append(helper.make_tensor_value_info(name, helper.np_dtype_to_tensor_dtype(__import__("numpy").dtype(dtype)), shape))
    outputs = [helper.make_tensor_value_info(o, onnx.TensorProto.UNDEFINED, None) for o in node.output if o]
    graph = helper.make_graph([node], "probe", inputs, outputs, initializer=initializers)
    probe = helper.make_model(graph, opset_imports=list(model.opset_import))
    probe.ir_version = model.ir_version
    return probe


def run(args) -> int:
    from ..onnx.base import converter_for  # pylint: disable=import-outside-toplevel

    if exported.is_program_path(args.model):
        return _inspect_program(args)
    if tflite_files.is_tflite_path(args.model):
        return tflite_files.inspect(args)
    model = load_onnx(args.model)
    overrides = parse_input_shapes(args.input_shapes)
    target = resolve_target(args.target)
    from_onnx_function()  # registers tvm_pool's converters
    quiet_tvm_warnings()
    shapes = _value_shapes(model, overrides)
    opset = _node_opset(model, "")
    print(f"{args.model}: IR version {model.ir_version}, opset {opset}, {len(model.graph.node)} nodes")
    print(f"target: {target_label(target)}")
    pooling = [
        n
        for n in model.graph.node
        if n.op_type in POOLING_OPS or converter_for(n.domain, n.op_type) is not None
    ]
    status = inspect_each(pooling, lambda index, node: _inspect_node(model, node, index, shapes, target, args),
                          "node", args.model)
    say_model_tuning(lambda: onnx_module(model, overrides, args.verbose, quiet=True), target, args)
    return status


def _inspect_node(model, node, index: int, shapes, target, args) -> int:
    """Print what happens to one pooling node; returns how many of its steps failed (an opset
    older than the operator, an import that fails)."""
    from ..onnx.base import converter_for  # pylint: disable=import-outside-toplevel

    failures = 0
    name = node.name or f"{node.op_type}_{list(model.graph.node).index(node)}"
    node_opset = _node_opset(model, node.domain)
    conv = converter_for(node.domain, node.op_type)
    domain = f"{node.domain}::" if node.domain not in ("", "ai.onnx") else ""
    print(f"\n[{index + 1}] node '{name}': {domain}{node.op_type}")
    if conv is not None:
        try:
            handled = f"{domain}{node.op_type} v{conv.since_version(node_opset)} (tvm_pool)"
        except TvmPoolError as err:  # an opset older than the operator
            handled = f"none: {one_line(err)}"
            failures += 1
    else:
        handled = f"{node.op_type} (stock TVM converter)"
    print(f"    converter: {handled}")
    in_shape, dtype = shapes.get(node.input[0], (None, "?")) if node.input else (None, "?")
    print(f"    input:     {node.input[0] if node.input else '?'} {dtype}{fmt_shape(in_shape)}")
    try:
        windows = _windows(node, in_shape)
    except MODEL_ERRORS as err:  # invalid window attributes (a zero stride, pads too short, ...)
        windows = None
        print(f"    geometry:  ? ({one_line(err)})")
    if windows is not None:
        out_shape = list(in_shape[:2]) + [w.out_size for w in windows]
        extra = ""
        if node.op_type == "MaxPool" and len([o for o in node.output if o]) > 1:
            extra = " (+ Indices int64, same shape)"
        print(f"    output:    {fmt_shape(out_shape)}{extra}")
        print(
            f"    padding:   begin {fmt_shape([w.pad_begin for w in windows])}, "
            f"end {fmt_shape([w.pad_end for w in windows])}"
            + ("" if node.op_type in GLOBAL_POOLS else f" (auto_pad {node_attrs(node).get('auto_pad', 'NOTSET')}, "
               f"ceil_mode {int(node_attrs(node).get('ceil_mode', 0))})")
        )
    probe = _single_node_model(model, node, shapes)
    try:
        probe_mod = None if probe is None else import_onnx(probe, args.verbose)
    except CliError as err:
        print(f"    error:     {err}")
        return failures + 1
    try:
        rule = schedule_rule_for(probe_mod, target)
    except MODEL_ERRORS as err:
        rule = f"? ({one_line(err)})"
    print(f"    schedule:  {rule}")
    record = tuning_record_for(probe_mod, target, args.tuning_logs, not args.no_tuning_logs)
    print(f"    tuning:    {record or 'none (no tuning record: the schedule above)'}")
    return failures


# --------------------------------------------------------------------------------------------
# torch.export programs (.pt2).
# --------------------------------------------------------------------------------------------


def _inspect_program(args) -> int:
    program = exported.load_program(args.model)
    import torch  # pylint: disable=import-outside-toplevel  (load_program has checked it is there)

    inputs = exported.program_inputs(program, args.model)
    bindings = exported.check_input_shapes(
        inputs, parse_input_shapes(args.input_shapes), exported.symbol_ranges(program)
    )
    target = resolve_target(args.target)
    quiet_tvm_warnings()
    print(
        f"{args.model}: torch.export program (torch {torch.__version__.split('+')[0]}), "
        f"{exported.count_ops(program)} ATen ops, inputs {', '.join(i.describe(bindings) for i in inputs)}"
    )
    print(f"target: {target_label(target)}")
    pooling = exported.pooling_nodes(program)
    status = inspect_each(pooling, lambda index, node: _inspect_aten_node(program, node, index, bindings, target, args),
                          "node", args.model)
    overrides = parse_input_shapes(args.input_shapes)
    say_model_tuning(lambda: exported.import_program(program_specialized(program, overrides, args.model), args.verbose,
                                                     quiet=True), target, args)
    return status


def _inspect_aten_node(program, node, index: int, bindings, target, args) -> int:
    """Print what happens to one ATen pooling node; returns 1 when its import fails, else 0."""
    namespace, packet, overload = exported.op_key(node)
    print(f"\n[{index + 1}] node '{node.name}': {namespace}.{packet}.{overload}")
    print(f"    converter: {exported.converter_of(node)}")
    tensors, others = exported.node_arguments(node)
    print(f"    arguments: {', '.join(f'{k}={exported.fmt_value(v)}' for k, v in others) or 'none'}")
    for role, source in tensors:
        label = "input:" if role in ("self", "input") else f"{role}:"
        print(f"    {label:<10} {source.name} {exported.fmt_value_type(source.meta.get('val'), bindings)}")
    print(f"    output:    {exported.fmt_value_type(node.meta.get('val'), bindings)}")
    try:
        probe = exported.probe_program(program, node, bindings)
    except exported.NoProbe as err:
        print(f"    schedule:  ? ({err})")
        return 0
    try:
        probe_mod = exported.import_program(probe, args.verbose, quiet=True)
    except CliError as err:
        print(f"    error:     {err}")
        return 1
    try:
        rule = schedule_rule_for(probe_mod, target)
    except MODEL_ERRORS as err:
        rule = f"? ({one_line(err)})"
    print(f"    schedule:  {rule}")
    record = tuning_record_for(probe_mod, target, args.tuning_logs, not args.no_tuning_logs)
    print(f"    tuning:    {record or 'none (no tuning record: the schedule above)'}")
    return 0
