"""``tvm-pool demo``: compile the built-in CNN (tvm_pool.demo_model) and check it against onnxruntime."""

from __future__ import annotations

import os
import sys
import time
import traceback

from ..block_builders import closed_on_error
from ..demo_model import demo_model
from .common import (
    EXIT_ERROR,
    MODEL_ERRORS,
    CliError,
    Progress,
    check_output,
    common_options,
    native_output_captured,
    one_line,
    resolve_target,
    target_label,
)
from .compile import compile_onnx
from .run import check_inputs, run_artifact, time_artifact

NAME = "demo"


def add_parser(subparsers):
    p = subparsers.add_parser(NAME, parents=[common_options()], help="compile a built-in CNN and check it against onnxruntime")
    p.add_argument("--target", default="host", help="a CPU target (default: host)")
    p.add_argument("--repeat", type=int, default=50, help="timed runs for the comparison (default 50)")
    p.add_argument("--save-model", metavar="PATH.onnx", help="also save the demo model (and PATH_inputs.npz)")
    return p


def ort_session(model):
    try:
        import onnxruntime as ort  # pylint: disable=import-outside-toplevel
    except ImportError:
        raise CliError("the demo checks against onnxruntime, which is not installed: pip install onnxruntime") from None
    options = ort.SessionOptions()
    options.log_severity_level = 3
    return ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])


def compare_outputs(names, got, want, atol=1e-4, rtol=1e-4) -> list[tuple[str, str, str, float, bool]]:
    import numpy as np  # pylint: disable=import-outside-toplevel

    rows = []
    for name, g, w in zip(names, got, want):
        if g.shape != w.shape:
            rows.append((name, f"{list(g.shape)} vs {list(w.shape)}", str(w.dtype), float("inf"), False))
            continue
        if g.dtype.kind in "iub":
            err = float(np.max(np.abs(g.astype(np.int64) - w.astype(np.int64)))) if g.size else 0.0
            ok = err == 0
        else:
            err = float(np.max(np.abs(g.astype(np.float64) - w.astype(np.float64)))) if g.size else 0.0
            ok = bool(np.allclose(g, w, atol=atol, rtol=rtol, equal_nan=True))
        rows.append((name, str(list(g.shape)), str(g.dtype), err, ok))
    return rows


def stock_tvm_import(model) -> str:
    """What TVM's own ONNX importer makes of ``model`` (one line)."""
    from tvm.relax.frontend.onnx import from_onnx  # pylint: disable=import-outside-toplevel

    message = "imports (outputs not checked)"
    with native_output_captured() as captured:
        captured.replay = False
        try:
            with closed_on_error():  # TVM's importer leaves its builder open when it fails
                from_onnx(onnx_copy(model))
        except MODEL_ERRORS as err:  # stock TVM 0.27 asserts "Missing outputs during conversion"
            message = f"import fails: {one_line(err)}"
            traceback.clear_frames(err.__traceback__)
            del err
    return message


def onnx_copy(model):
    import onnx  # pylint: disable=import-outside-toplevel

    return onnx.ModelProto.FromString(model.SerializeToString())


def saved_paths(save_model: str | None) -> tuple[str, str] | None:
    """``--save-model PATH``: (PATH, PATH's stem + ``_inputs.npz``), checked before any work;
    the inputs file is not named by the user, so an existing one is never replaced."""
    if not save_model:
        return None
    model_path = check_output(save_model, "--save-model")
    inputs_path = check_output(os.path.splitext(save_model)[0] + "_inputs.npz", "--save-model")
    if os.path.exists(inputs_path):
        raise CliError(
            f"--save-model {save_model} also writes {inputs_path}, which exists; remove it or choose another name"
        )
    return model_path, inputs_path


def run(args) -> int:
    import numpy as np  # pylint: disable=import-outside-toplevel
    import tvm  # pylint: disable=import-outside-toplevel

    if args.repeat < 1:
        raise CliError(f"--repeat must be at least 1, got {args.repeat}")
    saved = saved_paths(args.save_model)
    progress = Progress(4, quiet=args.quiet)
    progress.step("building the demo CNN (Conv/Relu, MaxPool+Indices, AveragePool ceil_mode, SAME_LOWER, GlobalAveragePool)")
    model, inputs = demo_model()
    if saved:
        import onnx  # pylint: disable=import-outside-toplevel

        onnx.save(model, saved[0])
        np.savez(saved[1], **inputs)
    session = ort_session(model)
    executable, signature, _ = compile_onnx(
        model, target=args.target, source="demo", progress=progress, verbose=args.verbose
    )
    progress.step("running tvm_pool and onnxruntime")
    vm = tvm.relax.VirtualMachine(executable, tvm.cpu())
    ordered = check_inputs(signature, inputs)
    got = run_artifact(vm, signature, ordered, tvm.cpu())
    names = [o["name"] for o in signature["outputs"]]
    want = session.run(names, inputs)
    rows = compare_outputs(names, got, want)
    tvm_times = time_artifact(vm, signature, ordered, tvm.cpu(), args.repeat)
    session.run(names, inputs)
    ort_times = []
    for _ in range(args.repeat):
        start = time.perf_counter()
        session.run(names, inputs)
        ort_times.append(time.perf_counter() - start)

    print(f"\ntvm_pool demo: {len(model.graph.node)}-node CNN, input x[1, 3, 32, 32], target {target_label(resolve_target(args.target))}")
    print(f"{'output':<15} {'shape':<16} {'dtype':<8} {'max abs error':>14}  check")
    for name, shape, dtype, err, ok in rows:
        print(f"{name:<15} {shape:<16} {dtype:<8} {err:>14.3g}  {'pass' if ok else 'FAIL'}")
    tvm_ms, ort_ms = np.median(tvm_times) * 1e3, np.median(ort_times) * 1e3
    print(f"time (median of {args.repeat}): tvm_pool {tvm_ms:.3f} ms, onnxruntime {ort_ms:.3f} ms")
    print(f"stock TVM 0.27 on the same model: {stock_tvm_import(model)}")
    failed = [r[0] for r in rows if not r[4]]
    if failed:
        print(f"tvm-pool: error: demo check failed: {', '.join(failed)} differ from onnxruntime", file=sys.stderr)
        return EXIT_ERROR
    print("all outputs match onnxruntime")
    if saved:
        print(f"wrote {saved[0]} and {saved[1]}")
    return 0
