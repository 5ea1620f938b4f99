"""``tvm-pool compile model.onnx -o model.so``: an ONNX model, a program saved by
``torch.export.save`` (``model.pt2``) or a TFLite model (``model.tflite``), to a deployable
shared library."""

from __future__ import annotations

import os

from ..targets import export_compiler
from . import exported, tflite_files
from .common import (
    TARGET_HELP,
    CliError,
    Progress,
    check_output,
    compile_module,
    common_options,
    fmt_shape,
    graph_inputs,
    import_onnx,
    load_onnx,
    onnx_dtype,
    parse_input_shapes,
    resolve_input_shapes,
    resolve_target,
    version,
)

NAME = "compile"


def add_parser(subparsers):
    p = subparsers.add_parser(NAME, parents=[common_options()], help="compile an ONNX model, torch.export program or TFLite model to a deployable shared library")
    p.add_argument("model", help="the ONNX model (.onnx), torch.export program (.pt2, saved by torch.export.save) or TFLite model (.tflite)")
    p.add_argument("-o", "--output", help="the shared library to write (default: MODEL with .so)")
    p.add_argument("--target", default="host", help=TARGET_HELP)
    p.add_argument(
        "--input-shapes", action="append", metavar="NAME=D0,D1,...",
        help="static shape of an input with symbolic dimensions (repeatable; a .pt2 keeps them symbolic without it)",
    )
    add_tuning_options(p)
    return p


def add_tuning_options(p) -> None:
    """``--tuning-log DIR`` (repeatable) and ``--no-tuning-logs`` (compile and inspect)."""
    p.add_argument(
        "--tuning-log", action="append", metavar="DIR", dest="tuning_logs",
        help="apply the tuning log in DIR, written by tvm-pool tune (repeatable)",
    )
    p.add_argument(
        "--no-tuning-logs", action="store_true",
        help="do not apply the tuning logs shipped with tvm_pool for the target",
    )


# --------------------------------------------------------------------------------------------
# Compiling.
# --------------------------------------------------------------------------------------------


def compile_onnx(
    model, *, target="host", input_shapes=None, source: str = "", progress=None, verbose=False,
    tuning_logs=None, shipped_logs: bool = True,
):
    """Import + compile an ONNX model with its signature embedded; returns (executable, signature, target)."""
    from .. import artifact  # pylint: disable=import-outside-toplevel

    progress = progress or Progress(3, quiet=True)
    tgt = resolve_target(target)
    opset = next((int(o.version) for o in model.opset_import if o.domain in ("", "ai.onnx")), None)
    progress.step(f"importing {source or 'model'} (opset {opset}, {len(model.graph.node)} nodes)")
    mod = onnx_module(model, input_shapes, verbose, progress.quiet)
    signature = artifact.make_signature(
        mod,
        input_names=[vi.name for vi in graph_inputs(model)],
        output_names=[vo.name for vo in model.graph.output],
        target=str(tgt),
        source=os.path.basename(source) if source else "",
        tvm_pool_version=version(),
    )
    return compile_module(mod, signature, tgt, progress, verbose, tuning_logs, shipped_logs, source)


def onnx_module(model, input_shapes=None, verbose=False, quiet=False):
    """The ONNX ``model`` as the Relax module ``compile`` builds (``input_shapes`` fixing
    symbolic dimensions)."""
    shapes = resolve_input_shapes(model, input_shapes or {})
    dtypes = {vi.name: onnx_dtype(vi.type.tensor_type.elem_type) for vi in graph_inputs(model)}
    return import_onnx(model, verbose, quiet, shape_dict=shapes, dtype_dict=dtypes)


def compile_program(
    program, *, target="host", input_shapes=None, source: str = "", progress=None, verbose=False,
    tuning_logs=None, shipped_logs: bool = True,
):
    """Import + compile a torch.export program with its signature embedded; returns
    (executable, signature, target). Symbolic dimensions (a ``torch.export.Dim`` batch) stay
    symbolic unless ``input_shapes`` fixes them (all of them: the program is re-exported static)."""
    from .. import artifact  # pylint: disable=import-outside-toplevel

    progress = progress or Progress(3, quiet=True)
    tgt = resolve_target(target)
    inputs = exported.program_inputs(program, source or "the program")
    program = program_specialized(program, input_shapes, source)
    progress.step(f"importing {source or 'program'} (torch.export, {exported.count_ops(program)} ATen ops)")
    mod = exported.import_program(program, verbose, progress.quiet)
    signature = artifact.make_signature(
        mod,
        input_names=[i.name for i in inputs],
        output_names=exported.output_names(program, len(artifact.output_types(mod[artifact.ENTRY]))),
        target=str(tgt),
        source=os.path.basename(source) if source else "",
        tvm_pool_version=version(),
    )
    symbols = {d for t in signature["inputs"] for d in t["shape"] or [] if isinstance(d, str)}
    ranges = exported.symbol_ranges(program)
    if symbols & set(ranges):  # what `run` checks the sizes of symbolic dimensions against
        signature["dim_ranges"] = {name: list(ranges[name]) for name in sorted(symbols & set(ranges))}
    return compile_module(mod, signature, tgt, progress, verbose, tuning_logs, shipped_logs, source)


def program_specialized(program, input_shapes=None, source: str = ""):
    """The torch.export ``program`` with the symbolic dimensions ``input_shapes`` fixes made
    static (all of them, re-exported), else as it is."""
    inputs = exported.program_inputs(program, source or "the program")
    bindings = exported.check_input_shapes(inputs, input_shapes or {}, exported.symbol_ranges(program))
    return exported.specialize_program(program, inputs, bindings, source or "the program")


def output_path(model_path: str, output: str | None) -> str:
    """Where ``compile`` writes: ``-o`` (``.so`` added when it has no extension), else the
    model's name with ``.so``; refused when it is the model itself or cannot be written."""
    path = output or os.path.splitext(model_path)[0] + ".so"
    stem, ext = os.path.splitext(path)
    if not ext and not os.path.isdir(path):
        path += ".so"
    check_output(path, "-o" if output else "the output", {"the input model": model_path})
    if ext and ext != ".so":
        raise CliError(
            f"-o {path}: a compiled module must end in .so (TVM's runtime loads it by that extension), "
            f"e.g. -o {stem}.so"
        )
    return path


def load_model(path: str, input_shapes):
    """The model at ``path`` (an ONNX model, a torch.export program for ``.pt2``, a TFLite model
    for ``.tflite``) and its ``--input-shapes``, checked before anything slow (for ONNX,
    symbolic inputs fail here)."""
    if tflite_files.is_tflite_path(path):
        model = tflite_files.load(path)
        return model, tflite_files.check_input_shapes(model, parse_input_shapes(input_shapes))
    if exported.is_program_path(path):
        program = exported.load_program(path)
        overrides = parse_input_shapes(input_shapes)
        inputs = exported.program_inputs(program, path)
        bindings = exported.check_input_shapes(inputs, overrides, exported.symbol_ranges(program))
        if bindings:
            exported.require_static(inputs, bindings, "--input-shapes must fix every symbolic dimension of a .pt2")
        return program, overrides
    model = load_onnx(path)
    overrides = parse_input_shapes(input_shapes)
    resolve_input_shapes(model, overrides)
    return model, overrides


def run(args) -> int:
    model, overrides = load_model(args.model, args.input_shapes)
    target = resolve_target(args.target)  # unknown targets too
    for log_dir in args.tuning_logs or []:
        if not os.path.isdir(log_dir):
            raise CliError(f"--tuning-log {log_dir}: not a directory")
    fcompile = export_compiler(target)  # a missing cross toolchain too
    output = output_path(args.model, args.output)
    progress = Progress(4, quiet=args.quiet)
    progress.step(f"loaded {args.model}")
    build = compile_program if exported.is_program_path(args.model) else compile_onnx
    if tflite_files.is_tflite_path(args.model):
        build = tflite_files.compile_tflite
    executable, signature, _ = build(
        model, target=target, input_shapes=overrides, source=args.model, progress=progress, verbose=args.verbose,
        tuning_logs=args.tuning_logs, shipped_logs=not args.no_tuning_logs,
    )
    progress.step(f"exporting {output}" + (" (cross-compiling)" if fcompile else ""))
    if fcompile is None:
        executable.export_library(output)
    else:
        executable.export_library(output, fcompile=fcompile)
    ins = ", ".join(f"{t['name']}{fmt_shape(t['shape'])}" for t in signature["inputs"])
    outs = ", ".join(f"{t['name']}{fmt_shape(t['shape'])}" for t in signature["outputs"])
    print(f"wrote {output}: inputs {ins} -> outputs {outs}")
    return 0
