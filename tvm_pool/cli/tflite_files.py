"""TFLite flatbuffers (``.tflite``) in the ``tvm-pool`` commands: loading, their inputs and
outputs, ``--input-shapes`` (TVM's ``shape_dict``), importing with :func:`tvm_pool.from_tflite`,
compiling with the signature embedded, and what ``inspect`` prints for each pooling operator
(with a one-operator probe model for its schedule).

The ``tflite`` package is optional: nothing here imports it until a ``.tflite`` file is read,
and without it reading one is a one-line error that says what to install.
"""

from __future__ import annotations

import os
import struct
from dataclasses import dataclass

from .common import (
    CliError,
    Progress,
    fmt_shape,
    import_model,
    inspect_each,
    say_model_tuning,
    one_line,
    parse_input_shapes,
    quiet_tvm_warnings,
    require_input_file,
    resolve_target,
    target_label,
    version,
)

SUFFIX = ".tflite"
POOLING_OPS = ("MAX_POOL_2D", "AVERAGE_POOL_2D", "L2_POOL_2D")
# What reading a damaged flatbuffer raises (offsets out of range, bad struct sizes).
_PARSE_ERRORS = (IndexError, ValueError, TypeError, AttributeError, UnicodeDecodeError, struct.error)


def is_tflite_path(path: str) -> bool:
    """Whether ``path`` names a TFLite model (by its ``.tflite`` extension)."""
    return str(path).lower().endswith(SUFFIX)


def require_tflite(path: str):
    from ..tflite import require_tflite as require  # pylint: disable=import-outside-toplevel

    try:
        return require(f"reading {path}")
    except ImportError as err:
        raise CliError(str(err)) from None


@dataclass
class TfliteModel:
    """A loaded flatbuffer: ``model`` (``tflite.Model``) and what the commands print of it."""

    path: str
    model: object
    inputs: list  # [(name, shape, dtype)]
    outputs: list  # [name]
    op_names: list  # builtin operator name per operator of subgraph 0


def load(path: str) -> TfliteModel:
    """The model at ``path``, checked enough that the importer's errors are about operators."""
    require_input_file(path, "a TFLite model (.tflite)")
    tflite = require_tflite(path)
    with open(path, "rb") as f:
        content = f.read()
    if len(content) < 8 or content[4:8] != b"TFL3":
        raise CliError(f"{path}: not a TFLite model (no TFL3 flatbuffer identifier)")
    try:
        model = tflite.Model.GetRootAsModel(content, 0)
        if model.SubgraphsLength() < 1:
            raise CliError(f"{path}: the TFLite model has no subgraph")
        graph = model.Subgraphs(0)
        inputs = [_tensor(graph, int(i)) for i in graph.InputsAsNumpy()]
        outputs = [_tensor(graph, int(i))[0] for i in graph.OutputsAsNumpy()]
        op_names = [_op_name(model, graph.Operators(k)) for k in range(graph.OperatorsLength())]
    except _PARSE_ERRORS as err:
        raise CliError(f"{path}: not a readable TFLite model ({one_line(err)})") from None
    return TfliteModel(path, model, inputs, outputs, op_names)


def _tensor(graph, index: int):
    """(name, shape, dtype) of tensor ``index``, named as TVM's importer names it."""
    from tflite.TensorType import TensorType  # pylint: disable=import-outside-toplevel

    tensor = graph.Tensors(index)
    name = tensor.Name().decode("utf-8") if tensor.Name() is not None else f"tvmgen_tensor_{index}"
    shape = [int(d) for d in tensor.ShapeAsNumpy()] if tensor.ShapeLength() else []
    types = {v: k.lower() for k, v in vars(TensorType).items() if not k.startswith("_")}
    return name, shape, types.get(tensor.Type(), f"type {tensor.Type()}")


def _op_name(model, op) -> str:
    from tflite.BuiltinOperator import BuiltinOperator  # pylint: disable=import-outside-toplevel

    code = model.OperatorCodes(op.OpcodeIndex())
    value = max(code.DeprecatedBuiltinCode(), code.BuiltinCode())
    names = {v: k for k, v in vars(BuiltinOperator).items() if not k.startswith("_")}
    return names.get(value, f"builtin code {value}")


def check_input_shapes(model: TfliteModel, overrides: dict) -> dict:
    """``--input-shapes`` as TVM's ``shape_dict``: known names, the declared rank."""
    declared = {name: shape for name, shape, _ in model.inputs}
    for name, shape in overrides.items():
        if name not in declared:
            raise CliError(f"--input-shapes names unknown input '{name}'; the model's inputs are: {', '.join(declared)}")
        if len(shape) != len(declared[name]):
            raise CliError(
                f"--input-shapes {name}: gives {len(shape)} dimensions, the model declares {len(declared[name])} "
                f"({fmt_shape(declared[name])})"
            )
    return {name: tuple(shape) for name, shape in overrides.items()}


def input_shapes(model: TfliteModel, overrides: dict) -> dict:
    """Every input's static shape: ``--input-shapes`` or the declared one."""
    return {name: list(overrides.get(name, shape)) for name, shape, _ in model.inputs}


def import_tflite(model: TfliteModel, verbose: bool = False, quiet: bool = False, shape_dict=None):
    """tvm_pool.from_tflite, its noise captured, errors one line."""
    import tvm_pool  # pylint: disable=import-outside-toplevel

    return import_model(tvm_pool.from_tflite, model.model, verbose, quiet, shape_dict=shape_dict or None)


def compile_tflite(
    model: TfliteModel, *, target="host", input_shapes=None, source: str = "", progress=None, verbose=False,
    tuning_logs=None, shipped_logs: bool = True,
):
    """Import + compile a TFLite model with its signature embedded; returns (executable, signature, target)."""
    from .. import artifact  # pylint: disable=import-outside-toplevel
    from .common import compile_module  # pylint: disable=import-outside-toplevel

    progress = progress or Progress(3, quiet=True)
    tgt = resolve_target(target)
    shape_dict = check_input_shapes(model, input_shapes or {})
    progress.step(f"importing {source or 'model'} (TFLite, {len(model.op_names)} operators)")
    mod = import_tflite(model, verbose, progress.quiet, shape_dict)
    signature = artifact.make_signature(
        mod,
        input_names=[name for name, _, _ in model.inputs],
        output_names=_unique(model.outputs),
        target=str(tgt),
        source=os.path.basename(source) if source else "",
        tvm_pool_version=version(),
    )
    return compile_module(mod, signature, tgt, progress, verbose, tuning_logs, shipped_logs, source)


def _unique(names: list) -> list:
    """Output names, each once (an output listed twice gets ``_1``, ...)."""
    seen: dict = {}
    result = []
    for name in names:
        count = seen.get(name, 0)
        seen[name] = count + 1
        result.append(name if count == 0 else f"{name}_{count}")
    return result


def compiled_vm(args, overrides: dict, progress):
    """A .tflite compiled for this CPU in memory: (VirtualMachine, signature, device, the
    shapes of random inputs)."""
    from tvm import relax  # pylint: disable=import-outside-toplevel

    from .. import artifact  # pylint: disable=import-outside-toplevel

    model = load(args.module)
    shape_dict = check_input_shapes(model, overrides)
    progress.step(f"loaded {args.module}")
    executable, signature, _ = compile_tflite(
        model, target="host", input_shapes=shape_dict, source=args.module, progress=progress, verbose=args.verbose
    )
    device = artifact.device_for(signature)
    return relax.VirtualMachine(executable, device), signature, device, input_shapes(model, shape_dict)


# --------------------------------------------------------------------------------------------
# inspect
# --------------------------------------------------------------------------------------------


def inspect(args) -> int:
    """``tvm-pool inspect model.tflite``: each pooling operator, its geometry, activation bounds,
    schedule rule and tuning record."""
    model = load(args.model)
    shape_dict = check_input_shapes(model, parse_input_shapes(args.input_shapes))
    shapes = input_shapes(model, shape_dict)
    target = resolve_target(args.target)
    quiet_tvm_warnings()
    described = ", ".join(f"{name} {dtype}{fmt_shape(shapes[name])}" for name, _, dtype in model.inputs)
    print(f"{args.model}: TFLite model, {len(model.op_names)} operators, inputs {described}")
    print(f"target: {target_label(target)}")
    graph = model.model.Subgraphs(0)
    pooling = [k for k, name in enumerate(model.op_names) if name in POOLING_OPS]
    status = inspect_each(pooling, lambda index, k: _inspect_operator(model, graph.Operators(k), index, target, args),
                          "operator", args.model)
    say_model_tuning(lambda: import_tflite(model, args.verbose, True, shape_dict), target, args)
    return status


def _inspect_operator(model: TfliteModel, op, index: int, target, args) -> int:
    """Print what happens to one pooling operator; returns 1 when its probe fails to import."""
    from .probes import schedule_rule_for, tuning_record_for  # pylint: disable=import-outside-toplevel

    graph = model.model.Subgraphs(0)
    name = _op_name(model.model, op)
    source, shape, dtype = _tensor(graph, int(op.Inputs(0)))
    out_name, out_shape, _ = _tensor(graph, int(op.Outputs(0)))
    print(f"\n[{index + 1}] node '{out_name}': {name}")
    print("    converter: tvm_pool (TFLite, NHWC)")
    print(f"    input:     {source} {dtype}{fmt_shape(shape)}{_quant_text(graph.Tensors(int(op.Inputs(0))))}")
    try:
        case = probe_case(op, name, shape, dtype, graph)
        print(f"    window:    {describe_window(case)}")
        print(f"    output:    {out_name} {dtype}{fmt_shape(out_shape)}")
        probe_mod = import_tflite(_probe(model, case), args.verbose, quiet=True)
    except CliError as err:
        print(f"    error:     {err}")
        return 1
    try:
        rule = schedule_rule_for(probe_mod, target)
    except (RuntimeError, ValueError, TypeError) as err:
        rule = f"? ({one_line(err)})"
    print(f"    schedule:  {rule}")
    record = tuning_record_for(probe_mod, target, args.tuning_logs, not args.no_tuning_logs)
    print(f"    tuning:    {record or 'none (no tuning record: the schedule above)'}")
    return 0


def _quant_text(tensor) -> str:
    q = tensor.Quantization()
    if q is None or q.ScaleLength() == 0:
        return ""
    if q.ScaleLength() > 1:
        return f" (quantized per axis {q.QuantizedDimension()})"
    zero = int(q.ZeroPoint(0)) if q.ZeroPointLength() else 0
    return f" (scale {q.Scale(0):.9g}, zero point {zero})"


def probe_case(op, name: str, shape, dtype: str, graph):
    """The operator as a :class:`tvm_pool.tflite.models.PoolCase` (for the probe model)."""
    from tflite.Pool2DOptions import Pool2DOptions  # pylint: disable=import-outside-toplevel

    from ..tflite import models  # pylint: disable=import-outside-toplevel

    table = op.BuiltinOptions()
    if table is None or len(shape) != 4:
        raise CliError(f"{name} needs Pool2DOptions and a 4-D NHWC input")
    if dtype not in models.TENSOR_TYPES:
        raise CliError(f"{name}: input type {dtype} is not supported")
    options = Pool2DOptions()
    options.Init(table.Bytes, table.Pos)
    padding = {v: k for k, v in models.PADDINGS.items()}.get(options.Padding(), str(options.Padding()))
    activation = {v: k for k, v in models.ACTIVATIONS.items()}.get(
        options.FusedActivationFunction(), str(options.FusedActivationFunction())
    )
    if padding not in models.PADDINGS or activation not in models.ACTIVATIONS:
        raise CliError(f"{name}: unknown padding {padding} or fused activation {activation}")
    quants = [_quant(graph.Tensors(int(i))) for i in (op.Inputs(0), op.Outputs(0))]
    return models.PoolCase(
        name, tuple(shape), (options.FilterHeight(), options.FilterWidth()), (options.StrideH(), options.StrideW()),
        padding, activation, dtype, *quants,
    )


def _quant(tensor):
    from ..tflite.models import Quant  # pylint: disable=import-outside-toplevel

    q = tensor.Quantization()
    if q is None or q.ScaleLength() == 0:
        return None
    scales = [float(q.Scale(i)) for i in range(q.ScaleLength())]
    zeros = [int(q.ZeroPoint(i)) for i in range(q.ZeroPointLength())] or [0] * len(scales)
    if len(scales) == 1:
        return Quant(scales[0], zeros[0])
    return Quant(scales, zeros, q.QuantizedDimension())


def describe_window(case) -> str:
    """Filter, stride, padding as TFLite computes it, and the activation's bounds."""
    from ..tflite import formulas  # pylint: disable=import-outside-toplevel

    text = f"filter {list(case.filter_hw)}, stride {list(case.stride_hw)}, {case.padding}"
    if case.padding in formulas.PADDINGS and min(case.filter_hw + case.stride_hw) >= 1:
        pads, _ = formulas.pool_geometry(case.padding, case.input_shape[1:3], case.filter_hw, case.stride_hw)
        text += f" (pads top {pads[0]}, left {pads[1]}, bottom {pads[2]}, right {pads[3]})"
    text += f", activation {case.activation}"
    quant = case.out_quant
    if quant is not None and case.activation in formulas.FUSED_ACTIVATIONS[1:] and not isinstance(quant.scale, list):
        try:
            low, high = formulas.quantized_activation_bounds(case.activation, quant.scale, quant.zero_point, case.dtype)
            text += f" (clamp [{low}, {high}])"
        except ValueError as err:
            text += f" ({err})"
    return text


def _probe(model: TfliteModel, case) -> TfliteModel:
    """A one-operator model of ``case`` (the schedule probe)."""
    from ..tflite import models  # pylint: disable=import-outside-toplevel

    content = models.pool_model(case)
    return TfliteModel(model.path, models.load_model(content), [], [], [case.op])
