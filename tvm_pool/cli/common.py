"""What every ``tvm-pool`` command shares: one-line errors, progress lines, ONNX loading,
``--target`` and ``--input-shapes`` parsing, and the importers with their noise captured
(torch.export programs, ``.pt2``, are in :mod:`tvm_pool.cli.exported`)."""

from __future__ import annotations

import argparse
import contextlib
import gc
import io
import json
import os
import sys
import tempfile
import time
import traceback
import warnings
from typing import Sequence

from ..errors import TvmPoolError, one_line

EXIT_ERROR = 2

# Target kinds the CLI builds loadable shared libraries for.
COMPILED_KINDS = ("llvm", "cuda")

TARGET_HELP = "host (default: this CPU), x86, arm (aarch64-linux-gnu), cuda, or a JSON target"


class CliError(Exception):
    """An error the CLI reports as one line (exit status 2)."""


# What TVM and tvm_pool raise for a model they cannot import, legalize or schedule: tvm_pool's
# errors (they name the node); TVM's own (RuntimeError subclasses: OpNotImplemented,
# InternalError, ScheduleError); and the Python errors that TVM's converters and window
# arithmetic raise on input they do not expect: checks (ValueError, TypeError), missing
# attributes or inputs (KeyError, IndexError), a zero stride (ZeroDivisionError) and asserts
# (AssertionError: stock TVM's "Missing outputs during conversion"). Anything else is a bug and
# reaches main's handler, still as one line.
MODEL_ERRORS = (TvmPoolError, RuntimeError, ValueError, TypeError, LookupError, ArithmeticError, AssertionError)


def common_options() -> argparse.ArgumentParser:
    """The parent parser of every command: ``-v/--verbose`` and ``-q/--quiet``."""
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("-v", "--verbose", action="store_true", default=argparse.SUPPRESS, help="show tracebacks on errors")
    common.add_argument("-q", "--quiet", action="store_true", default=argparse.SUPPRESS, help="no progress lines on stderr")
    return common


class Progress:
    """One line per step on stderr: ``tvm-pool: [2/4] importing model.onnx``."""

    def __init__(self, total: int, quiet: bool = False):
        self.total, self.index, self.quiet = total, 0, quiet
        self.start = time.perf_counter()

    def step(self, message: str):
        self.index += 1
        if not self.quiet:
            elapsed = time.perf_counter() - self.start
            print(f"tvm-pool: [{self.index}/{self.total}] {message} (+{elapsed:.1f}s)", file=sys.stderr, flush=True)


def describe(err: BaseException) -> str:
    """The one line ``tvm-pool: error: ...`` says for ``err``."""
    if isinstance(err, (CliError, TvmPoolError)):
        return one_line(err)
    name = type(err).__name__
    if name == "OpNotImplemented":
        return f"unsupported operator: {one_line(err)}"
    return f"{name}: {one_line(err)} (run with --verbose for the traceback)"


def quiet_tvm_warnings():
    """Silence the importers' noise: TVM's ONNX importer and tvm_pool's drop-in re-issue every
    onnx.checker complaint as a UserWarning, about models that convert fine. Only the importers:
    other tvm_pool warnings (a skipped tuning log) are about the user's files and are shown."""
    warnings.filterwarnings("ignore", category=UserWarning, module=r"tvm\..*")
    warnings.filterwarnings("ignore", category=UserWarning, module=r"tvm_pool\.onnx\..*")


def inspect_each(items: list, inspect_one, noun: str, path: str) -> int:
    """``inspect``'s loop: ``inspect_one(index, item)`` for each pooling node or operator (it
    returns how many of its steps failed), the tuning-log warnings shown once after them; a
    model with failures is a CliError. Returns 0."""
    if not items:
        print(f"no pooling {noun}s")
        return 0
    failures = 0
    with user_warnings_shown():  # each once, after the items; -q does not hide them
        for index, item in enumerate(items):
            failures += inspect_one(index, item)
    if failures:
        raise CliError(f"{failures} pooling {noun}(s) of {path} are invalid or unsupported (see above)")
    return 0


@contextlib.contextmanager
def user_warnings_shown():
    """Show the warnings that are news about the user's own model and files as
    ``tvm-pool: warning: ...`` lines on stderr, each once, when the block ends: a tuning log
    truncated, corrupt, unreadable or tuned for another target, so skipped in part or whole
    (``tvm_pool.tuning.TuningLogWarning``), and a pooling function a schedule rule declined, so
    left to TVM's default code (``tvm_pool.schedules.ScheduleDeclined``).

    Neither ``-q`` (it silences progress, not news about the user's own files) nor a
    :func:`native_output_captured` inside the block (which a ``-q`` run never replays) hides
    them: they are held until the capture is undone. Other warnings go where they went before."""
    # Imported here: only the commands that compile or read tuning logs need these modules.
    from ..schedules import ScheduleDeclined  # pylint: disable=import-outside-toplevel
    from ..tuning import TuningLogWarning  # pylint: disable=import-outside-toplevel

    news = (TuningLogWarning, ScheduleDeclined)
    held: list[str] = []
    with warnings.catch_warnings():  # restores the filters and showwarning
        for category in news:
            warnings.simplefilter("always", category)
        show = warnings.showwarning

        def hold(message, category, filename, lineno, file=None, line=None):
            if issubclass(category, news):
                held.append(str(message))
            else:
                show(message, category, filename, lineno, file, line)

        warnings.showwarning = hold
        try:
            yield
        finally:
            for message in dict.fromkeys(held):
                print(f"tvm-pool: warning: {message}", file=sys.stderr, flush=True)


def version() -> str:
    from importlib.metadata import PackageNotFoundError  # pylint: disable=import-outside-toplevel
    from importlib.metadata import version as dist_version  # pylint: disable=import-outside-toplevel

    try:
        return dist_version("tvm_pool")
    except PackageNotFoundError:  # run from a source tree that was never installed
        return "unknown"


# --------------------------------------------------------------------------------------------
# ONNX models and their inputs.
# --------------------------------------------------------------------------------------------


def require_input_file(path: str, what: str) -> None:
    """One-line errors for an input path that is missing or a directory (``what`` it should be)."""
    if not os.path.exists(path):
        raise CliError(f"{path}: no such file")
    if os.path.isdir(path):
        raise CliError(f"{path}: is a directory, not {what}")


def load_onnx(path: str):
    require_input_file(path, "an ONNX model")
    import onnx  # pylint: disable=import-outside-toplevel
    from google.protobuf.message import DecodeError  # pylint: disable=import-outside-toplevel

    try:
        model = onnx.load(path)
    except (DecodeError, ValueError, RuntimeError, UnicodeDecodeError) as err:
        raise CliError(f"{path}: not an ONNX model ({one_line(err)})") from err
    if model.ir_version <= 0 or not model.HasField("graph") or not model.opset_import:
        raise CliError(f"{path}: not an ONNX model (no IR version, graph or opset_import)")
    return model


def onnx_dtype(elem_type: int) -> str:
    import onnx  # pylint: disable=import-outside-toplevel

    try:
        return onnx.helper.tensor_dtype_to_np_dtype(elem_type).name
    except (KeyError, TypeError, ValueError):
        return "float32"


def graph_inputs(model) -> list:
    initializers = {init.name for init in model.graph.initializer}
    return [vi for vi in model.graph.input if vi.name not in initializers]


def declared_shape(value_info) -> list | None:
    """The declared shape of an ONNX value: ints for fixed dims, names/'?' for symbolic ones."""
    ttype = value_info.type.tensor_type
    if not ttype.HasField("shape"):
        return None
    dims = []
    for d in ttype.shape.dim:
        if d.HasField("dim_value") and d.dim_value > 0:
            dims.append(int(d.dim_value))
        else:
            dims.append(d.dim_param or "?")
    return dims


def fmt_shape(shape) -> str:
    return "?" if shape is None else "[" + ", ".join(str(d) for d in shape) + "]"


def parse_input_shapes(items: Sequence[str] | None) -> dict[str, list[int]]:
    """``["x=1,3,224,224", ...]`` -> ``{"x": [1, 3, 224, 224]}``."""
    shapes: dict[str, list[int]] = {}
    for item in items or []:
        name, sep, dims = item.rpartition("=")
        if not sep or not name:
            raise CliError(f"--input-shapes {item!r}: expected NAME=D0,D1,... (e.g. input=1,3,224,224)")
        try:
            shape = [int(d) for d in dims.replace("x", ",").split(",") if d.strip()] if dims.strip() else []
        except ValueError:
            raise CliError(f"--input-shapes {item!r}: dimensions must be integers, e.g. {name}=1,3,224,224") from None
        if any(d <= 0 for d in shape):
            raise CliError(f"--input-shapes {item!r}: dimensions must be positive")
        from ..compute.checks import fits_allocation  # pylint: disable=import-outside-toplevel

        if not fits_allocation(shape):
            raise CliError(f"--input-shapes {item!r}: the tensor is too large (its size in bytes overflows int64)")
        shapes[name] = shape
    return shapes


def resolve_input_shapes(model, overrides: dict[str, list[int]]) -> dict[str, list[int]]:
    """Every graph input's static shape (declared, or from --input-shapes); one-line errors."""
    inputs = graph_inputs(model)
    names = [vi.name for vi in inputs]
    unknown = sorted(set(overrides) - set(names))
    if unknown:
        raise CliError(f"--input-shapes names unknown input '{unknown[0]}'; the model's inputs are: {', '.join(names)}")
    shapes = {}
    for vi in inputs:
        declared = declared_shape(vi)
        if vi.name in overrides:
            shape = overrides[vi.name]
            if declared is not None and len(declared) != len(shape):
                raise CliError(
                    f"--input-shapes {vi.name}: gives {len(shape)} dimensions, the model declares {len(declared)} "
                    f"({fmt_shape(declared)})"
                )
            for want, got in zip(declared or [], shape):
                if isinstance(want, int) and want != got:
                    raise CliError(
                        f"--input-shapes {vi.name}: {fmt_shape(shape)} conflicts with the declared shape "
                        f"{fmt_shape(declared)}"
                    )
            shapes[vi.name] = shape
            continue
        if declared is None:
            raise CliError(
                f"input '{vi.name}' has no declared shape; give it with --input-shapes {vi.name}=D0,D1,..."
            )
        symbolic = [d for d in declared if not isinstance(d, int)]
        if symbolic:
            example = ",".join(str(d) if isinstance(d, int) else "1" for d in declared)
            raise CliError(
                f"input '{vi.name}' has symbolic dimension(s) {', '.join(map(str, symbolic))} "
                f"(shape {fmt_shape(declared)}); give a static shape with --input-shapes {vi.name}={example}"
            )
        shapes[vi.name] = declared
    return shapes


# --------------------------------------------------------------------------------------------
# Files the commands write.
# --------------------------------------------------------------------------------------------


def same_file(a: str, b: str) -> bool:
    if os.path.abspath(a) == os.path.abspath(b):
        return True
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False


def check_output(path: str, flag: str, inputs: dict[str, str] | None = None) -> str:
    """Refuse (before any work) an output path that is a directory, lies in a missing or
    read-only directory, or is one of the command's inputs (``inputs``: role -> path)."""
    if os.path.isdir(path):
        raise CliError(f"{flag} {path}: is a directory; give a file name")
    directory = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(directory):
        raise CliError(f"{flag} {path}: directory {directory} does not exist")
    if not os.access(directory, os.W_OK):
        raise CliError(f"{flag} {path}: directory {directory} is not writable")
    for role, source in (inputs or {}).items():
        if same_file(path, source):
            raise CliError(f"{flag} {path} is {role}; writing it would destroy it (choose another name)")
    return path


# --------------------------------------------------------------------------------------------
# Targets.
# --------------------------------------------------------------------------------------------


def target_label(target) -> str:
    attrs = {k: v for k, v in json.loads(str(target)).items() if k in ("kind", "mcpu", "mtriple", "arch")}
    return " ".join(f"{k}={v}" for k, v in attrs.items())


def resolve_target(name):
    import tvm  # pylint: disable=import-outside-toplevel

    from ..targets import resolve_target as resolve  # pylint: disable=import-outside-toplevel

    if isinstance(name, str) and name.lstrip().startswith("{"):
        try:
            name = json.loads(name)
        except ValueError as err:
            raise CliError(f"--target {name!r} is not valid JSON ({err})") from None
        if not isinstance(name, dict):
            raise CliError(f"--target {name!r}: a JSON target must be an object such as {{\"kind\": \"llvm\"}}")
    try:
        target = resolve(name)
    except (ValueError, TypeError, tvm.error.InternalError) as err:  # what tvm.target.Target says of a bad dict
        raise CliError(f"invalid target {json.dumps(name) if isinstance(name, dict) else name!r}: {one_line(err)}") from None
    if target.kind.name not in COMPILED_KINDS:
        raise CliError(
            f"target kind '{target.kind.name}' is not supported by tvm-pool (it builds shared libraries for: "
            f"{', '.join(COMPILED_KINDS)})"
        )
    return target


# --------------------------------------------------------------------------------------------
# The importer, with what native code prints captured.
# --------------------------------------------------------------------------------------------


@contextlib.contextmanager
def native_output_captured(enabled: bool = True):
    """Capture what native code and TVM's importer print on fds 1 and 2 (e.g. "Error converting
    operator ..." and C++ warnings) so an error stays one line; replayed to stderr on success."""
    state = argparse.Namespace(replay=True)
    if not enabled:
        yield state
        return
    sys.stdout.flush()
    sys.stderr.flush()
    saved = [os.dup(1), os.dup(2)]
    python_text = io.StringIO()  # sys.stdout/err may not be fds 1/2 (e.g. under pytest)
    with tempfile.TemporaryFile(mode="w+b") as sink:
        os.dup2(sink.fileno(), 1)
        os.dup2(sink.fileno(), 2)
        ok = False
        try:
            with contextlib.redirect_stdout(python_text), contextlib.redirect_stderr(python_text):
                yield state
            ok = state.replay
        finally:
            gc.collect()  # native objects (BlockBuilders) warn when destroyed: do it while captured
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
            for fd in saved:
                os.close(fd)
            if ok:
                sink.seek(0)
                text = python_text.getvalue() + sink.read().decode("utf-8", "replace")
                if text.strip():
                    sys.stderr.write(text)


def from_onnx_function():
    import tvm_pool  # pylint: disable=import-outside-toplevel

    fn = getattr(tvm_pool, "from_onnx", None)
    if fn is None:
        from ..onnx.importer import from_onnx as fn  # pylint: disable=import-outside-toplevel
    return fn


def import_onnx(model, verbose: bool = False, quiet: bool = False, **kwargs):
    """tvm_pool.from_onnx with importer noise captured and errors reduced to one line (the
    captured output is shown after a success unless ``quiet``)."""
    return import_model(from_onnx_function(), model, verbose, quiet, **kwargs)


def import_model(convert, model, verbose: bool = False, quiet: bool = False, **kwargs):
    """``convert(model, **kwargs)`` (an importer: from_onnx, from_exported_program) with its
    noise captured and errors reduced to one line (the captured output is shown after a
    success unless ``quiet``)."""
    quiet_tvm_warnings()
    message = None
    with native_output_captured(enabled=not verbose) as captured:
        captured.replay = not quiet
        try:
            return convert(model, **kwargs)
        except MODEL_ERRORS as err:
            if verbose:
                raise
            captured.replay = False
            message = describe(err)
            traceback.clear_frames(err.__traceback__)
            del err
    raise CliError(message)


def compile_module(mod, signature, tgt, progress, verbose=False, tuning_logs=None, shipped_logs: bool = True,
                   source: str = ""):
    """Compile an imported Relax module with ``signature`` embedded; returns (executable, signature, target).
    When ``source`` is the model's file, also says how much of the model has no tuning record
    (:func:`tuning_coverage`); with -q only where some kernel has none."""
    import tvm_pool  # pylint: disable=import-outside-toplevel

    from .. import artifact  # pylint: disable=import-outside-toplevel

    mod = artifact.embed_signature(mod, signature)
    progress.step(f"compiling for {target_label(tgt)}")
    with user_warnings_shown(), native_output_captured(enabled=not verbose) as captured:
        captured.replay = not progress.quiet  # -q: no native warnings either (tuning-log warnings still)
        executable = tvm_pool.compile(mod, tgt, tuning_logs=tuning_logs, shipped_logs=shipped_logs)
        coverage = tuning_coverage(mod, tgt, tuning_logs, shipped_logs, source) if os.path.isfile(source) else None
    if coverage is not None and not (progress.quiet and coverage[1]):
        print(f"tvm-pool: {coverage[0]}", file=sys.stderr, flush=True)
    return executable, signature, tgt


def say_model_tuning(build_module, target, args) -> None:
    """``inspect``'s last line: what :func:`tuning_coverage` says of the whole model, which
    ``build_module()`` imports (a model whose whole import fails says why instead)."""
    try:
        mod = build_module()
    except CliError as err:
        print(f"tuning: ? (the whole model does not import: {err})")
        return
    from ..tuning import TuningLogWarning  # pylint: disable=import-outside-toplevel

    with warnings.catch_warnings():  # the per-node lines above showed them (each once)
        warnings.simplefilter("ignore", TuningLogWarning)
        print(tuning_coverage(mod, target, args.tuning_logs, not args.no_tuning_logs, args.model)[0])


def tuning_coverage(mod, tgt, tuning_logs, shipped_logs: bool, source: str) -> tuple[str, bool]:
    """The one line that says which of the model's kernels have no tuning record, what share of
    its work they are and the command that tunes them (:class:`tvm_pool.tuning.lookup.Coverage`),
    and whether every kernel has one measured on this CPU model; "tuning: ? (why)" (not covered)
    where the model's kernels cannot be extracted."""
    from ..tuning.lookup import coverage  # pylint: disable=import-outside-toplevel

    try:
        found = coverage(mod, tgt, tuning_logs, shipped=shipped_logs)
    except MODEL_ERRORS as err:
        return f"tuning: ? ({one_line(err)})", False
    return found.line(source), not (found.untuned or found.elsewhere)
