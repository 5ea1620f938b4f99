"""``tvm-pool bench [args...]``: tvm_pool's benchmarks; every argument after ``bench`` goes to
tvm_pool.bench untouched (``main`` splits them off before argparse sees them)."""

from __future__ import annotations

from .common import CliError, one_line

NAME = "bench"


def add_parser(subparsers):
    return subparsers.add_parser(NAME, help="run tvm_pool's benchmarks (arguments go to tvm_pool.bench)", add_help=False)


def run(args) -> int:
    try:
        from ..bench import main as bench_main  # pylint: disable=import-outside-toplevel
    except ImportError as err:
        raise CliError(f"the benchmark suite is unavailable (tvm_pool.bench.main: {one_line(err)})") from err
    result = bench_main(list(getattr(args, "bench_args", [])))
    return int(result or 0)
