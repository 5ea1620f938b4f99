"""``tvm-pool tune model.onnx`` (or a torch.export program, ``model.pt2``, or a TFLite model,
``model.tflite``): tune every task of a model for a target; writes a MetaSchedule
JSON database (``database_workload.json`` / ``database_tuning_record.json``) and ``target.json``
under ``--log-dir`` (default ``./tuning_logs/<family>``) that ``compile --tuning-log`` applies."""

from __future__ import annotations

import os
import sys

from . import exported, tflite_files
from ..targets import runs_here
from .common import (
    TARGET_HELP,
    CliError,
    common_options,
    graph_inputs,
    import_onnx,
    load_onnx,
    onnx_dtype,
    parse_input_shapes,
    quiet_tvm_warnings,
    resolve_input_shapes,
    resolve_target,
)

NAME = "tune"


def add_parser(subparsers):
    p = subparsers.add_parser(NAME, parents=[common_options()], help="tune a model for a target (MetaSchedule), writing a tuning log")
    p.add_argument("model", help="the ONNX model (.onnx), torch.export program (.pt2, saved by torch.export.save) or TFLite model (.tflite)")
    p.add_argument("--target", default="host", help=TARGET_HELP)
    p.add_argument("--trials", type=int, default=None, help="measurements for the non-pooling tasks (default 64, or as many as --minutes allows; pooling tasks are searched exhaustively on top)")
    p.add_argument(
        "--minutes", type=float, metavar="M",
        help="stop the search after M minutes (the records measured so far are in the log; a second run extends it)",
    )
    p.add_argument("--log-dir", help="where the log goes (default: ./tuning_logs/<target family>); an existing log there is extended")
    p.add_argument(
        "--input-shapes", action="append", metavar="NAME=D0,D1,...",
        help="static shape of an input with symbolic dimensions (repeatable)",
    )
    p.add_argument(
        "--no-compare", action="store_true",
        help="do not time the model untuned, tuned and in onnxruntime at the end (done where the target is this machine)",
    )
    p.add_argument("--rpc-tracker", metavar="HOST:PORT", help="measure on a device registered with TVM's RPC tracker")
    p.add_argument("--rpc-key", metavar="KEY", help="the device key on the tracker")
    p.add_argument(
        "--rpc-workers", type=int, metavar="N",
        help="candidates measured at once through the tracker (default: one per device registered under the key)",
    )
    return p


def run(args) -> int:
    import tvm_pool  # pylint: disable=import-outside-toplevel

    from .. import tuning  # pylint: disable=import-outside-toplevel

    program = exported.is_program_path(args.model)
    tflite = tflite_files.is_tflite_path(args.model)
    if tflite:
        model = tflite_files.load(args.model)
        overrides = tflite_files.check_input_shapes(model, parse_input_shapes(args.input_shapes))
    elif program:
        model = exported.load_program(args.model)
        inputs = exported.program_inputs(model, args.model)
        bindings = exported.check_input_shapes(
            inputs, parse_input_shapes(args.input_shapes), exported.symbol_ranges(model)
        )
        exported.require_static(inputs, bindings, "tuning needs static shapes")  # before anything slow
    else:
        model = load_onnx(args.model)
        overrides = parse_input_shapes(args.input_shapes)
        shapes = resolve_input_shapes(model, overrides)  # symbolic inputs fail before anything slow
    target = resolve_target(args.target)
    trials, budget_s = _budget(args)
    rpc = _rpc_options(args)
    log_dir = args.log_dir or os.path.join("tuning_logs", tuning.target_family(target))
    if os.path.exists(log_dir) and not os.path.isdir(log_dir):
        raise CliError(f"--log-dir {log_dir}: exists and is not a directory")
    parent = os.path.dirname(os.path.abspath(log_dir))
    if not os.path.isdir(parent):
        raise CliError(f"--log-dir {log_dir}: directory {parent} does not exist")
    quiet_tvm_warnings()
    if tflite:
        mod = tflite_files.import_tflite(model, args.verbose, args.quiet, overrides)
    elif program:
        model = exported.specialize_program(model, inputs, bindings, args.model)
        mod = exported.import_program(model, args.verbose, args.quiet)
    else:
        dtypes = {vi.name: onnx_dtype(vi.type.tensor_type.elem_type) for vi in graph_inputs(model)}
        mod = import_onnx(model, args.verbose, args.quiet, shape_dict=shapes, dtype_dict=dtypes)
    say = (lambda _line: None) if args.quiet else (lambda line: print(line, file=sys.stderr, flush=True))
    result = tvm_pool.tune(
        mod, target, trials=trials, log_dir=log_dir, rpc=rpc, source=os.path.basename(args.model), progress=say,
        time_budget_s=budget_s,
    )
    pools = sum(1 for t in result.tasks if t.kind == "pool")
    print(
        f"wrote {log_dir}: {len(result.tasks)} tasks ({pools} pooling), {result.trials} measurements in "
        f"{result.seconds:.0f} s; apply with: tvm-pool compile {args.model} --tuning-log {log_dir}"
        + "".join(f" --input-shapes {item}" for item in args.input_shapes or [])
    )
    if result.emulated:
        print(f"note: measured on {result.emulated}")
    if result.stopped == tuning.stop.INTERRUPTED:
        print("interrupted: every candidate measured before Ctrl-C is in the log; the comparison is skipped")
    elif not args.no_compare and rpc is None and runs_here(target):
        from ..tuning.logs import runtime_threads  # pylint: disable=import-outside-toplevel
        from .tune_report import compare  # pylint: disable=import-outside-toplevel

        say("timing the model untuned and tuned (--no-compare skips this)")
        print(compare(mod, target, log_dir, None if program or tflite else args.model, runtime_threads()))
    return 0


def _budget(args) -> tuple[int, float | None]:
    """(trials, seconds) of the search from --trials and --minutes: with --minutes alone, as many
    trials as that time measures (tuning.lookup.SECONDS_PER_TRIAL), so the time is the bound."""
    from ..tuning.lookup import SECONDS_PER_TRIAL  # pylint: disable=import-outside-toplevel

    if args.trials is not None and args.trials < 0:
        raise CliError(f"--trials must be >= 0, got {args.trials}")
    if args.minutes is None:
        return (64 if args.trials is None else args.trials), None
    if not args.minutes > 0:  # NaN too
        raise CliError(f"--minutes must be > 0, got {args.minutes:g}")
    seconds = args.minutes * 60
    return (max(64, int(2 * seconds / SECONDS_PER_TRIAL)) if args.trials is None else args.trials), seconds


def _rpc_options(args) -> dict | None:
    """The ``rpc`` of tvm_pool.tune from --rpc-tracker/--rpc-key/--rpc-workers (None: measure
    here); malformed ones fail here, before anything slow."""
    from .. import tuning  # pylint: disable=import-outside-toplevel
    from ..errors import TvmPoolError  # pylint: disable=import-outside-toplevel

    if not (args.rpc_tracker or args.rpc_key):
        if args.rpc_workers is not None:
            raise CliError("--rpc-workers needs --rpc-tracker HOST:PORT and --rpc-key KEY")
        return None
    if not (args.rpc_tracker and args.rpc_key):
        raise CliError("--rpc-tracker HOST:PORT and --rpc-key KEY go together")
    if args.rpc_workers is not None and args.rpc_workers < 1:
        raise CliError(f"--rpc-workers must be >= 1, got {args.rpc_workers}")
    rpc = {"tracker": args.rpc_tracker, "key": args.rpc_key}
    if args.rpc_workers is not None:
        rpc["workers"] = args.rpc_workers
    try:
        tuning.rpc_config(rpc)
    except TvmPoolError as err:
        raise CliError(str(err)) from None
    return rpc
