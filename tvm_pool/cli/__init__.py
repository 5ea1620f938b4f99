"""``tvm-pool``: compile, run, inspect and demo ONNX models and torch.export programs with tvm_pool.

    tvm-pool demo                                   # built-in example, checked against onnxruntime
    tvm-pool compile model.onnx -o model.so [--target host|x86|arm|cuda|'<JSON>']
                     [--input-shapes NAME=D0,D1,...]... [--tuning-log DIR]... [--no-tuning-logs]
    tvm-pool run model.so --inputs in.npz [-o out.npz] [--repeat N]
    tvm-pool run model.pt2 [--inputs in.npz] [--input-shapes NAME=D0,D1,...]... [-o out.npz] [--repeat N]
    tvm-pool inspect model.onnx [--target ...] [--tuning-log DIR]... [--no-tuning-logs]
    tvm-pool tune model.onnx [--target ...] [--trials N] [--log-dir DIR]
                  [--rpc-tracker HOST:PORT --rpc-key KEY]
    tvm-pool bench [args...]                        # tvm_pool.bench

Wherever a command takes ``model.onnx`` it also takes ``model.pt2``, a program saved by
``torch.export.save`` (:mod:`tvm_pool.cli.exported`; PyTorch is the optional ``torch`` extra).

One module per command (``compile``, ``run``, ``inspect``, ``demo``, ``tune``, ``bench``), each with
``NAME``, ``add_parser(subparsers)`` and ``run(args) -> int``, registered in :data:`COMMANDS`;
what they share lives in :mod:`tvm_pool.cli.common`.

Long steps print one progress line each to stderr (``-q``: none, nor the compiler's own
warnings; warnings about the user's tuning logs are printed still). Every error is one line on
stderr and exit status 2 (``--verbose`` adds the traceback).
"""

from __future__ import annotations

import argparse
import os
import sys
import traceback
from typing import Sequence

from . import bench, compile, demo, inspect, run, tune  # noqa: A004  (command modules)
from .common import EXIT_ERROR, CliError, common_options, describe

# Every command, in the order --help lists them. A new command is a module with NAME,
# add_parser(subparsers) and run(args), added here.
COMMANDS = (compile, run, inspect, demo, tune, bench)

__all__ = ["COMMANDS", "EXIT_ERROR", "CliError", "build_parser", "main"]


class _Parser(argparse.ArgumentParser):
    """argparse with one-line usage errors (exit 2) like every other tvm-pool error."""

    def error(self, message):
        self.exit(EXIT_ERROR, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="tvm-pool",
        description="Exact, fast pooling for Apache TVM: compile, run and inspect ONNX models and torch.export programs (.pt2).",
        parents=[common_options()],
        epilog="Start with: tvm-pool demo",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    for command in COMMANDS:
        command.add_parser(sub).set_defaults(func=command.run)
    return parser


def _split_bench(argv: list[str]) -> tuple[list[str], list[str]] | None:
    """``[global flags] bench ARGS...`` -> (global flags, ARGS), so bench gets its args untouched."""
    for i, arg in enumerate(argv):
        if not arg.startswith("-"):
            return (argv[:i], argv[i + 1 :]) if arg == bench.NAME else None
    return None


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    verbose = any(a in ("-v", "--verbose") for a in argv)
    try:
        split = _split_bench(argv)
        if split is not None:
            return bench.run(argparse.Namespace(bench_args=split[1], verbose=verbose, quiet=False))
        parser = build_parser()
        try:
            args = parser.parse_args(argv)
        except SystemExit as stop:  # --help (0) and usage errors (2, one line)
            return int(stop.code or 0)
        if not getattr(args, "command", None):
            parser.print_help()
            return EXIT_ERROR
        args.verbose = getattr(args, "verbose", False)
        args.quiet = getattr(args, "quiet", False)
        return args.func(args)
    except BrokenPipeError:  # e.g. `tvm-pool inspect model.onnx | head`
        try:
            sys.stdout = open(os.devnull, "w", encoding="utf-8")  # pylint: disable=consider-using-with
        except OSError:
            pass
        return 0
    except KeyboardInterrupt:
        print("tvm-pool: interrupted", file=sys.stderr)
        return 130
    # The one broad handler: the commands turn the errors they expect into CliError, so what
    # reaches here is unexpected (a bug, or a failure nobody foresaw); it still ends as one line
    # and status 2, with the traceback under --verbose.
    except Exception as err:  # pylint: disable=broad-except
        if verbose:
            traceback.print_exc()
        print(f"tvm-pool: error: {describe(err)}", file=sys.stderr)
        return EXIT_ERROR
