"""What ``tvm-pool tune`` prints at its end: the whole model's latency without the log it wrote
(the shipped logs only: TVM's default code where they do not cover it), with it and, for an ONNX model where
onnxruntime is installed, onnxruntime's, at the same thread count, on the same random inputs;
the tuned model's outputs checked against the untuned one's first."""

from __future__ import annotations

import time

# Timed calls per model: at least MIN_RUNS, more while under RUN_SECONDS (a model of 2 s runs 3
# times, a model of 20 ms about 50 times).
MIN_RUNS = 3
RUN_SECONDS = 1.0
RTOL = 1e-4  # a tuned schedule sums in another order: the whole model's relative error


def _inputs(mod) -> list:
    """Seeded random inputs for ``mod``'s ``main`` (static shapes: tuning needs them), as
    ``tvm-pool run`` makes them (:func:`.run.random_inputs`)."""
    from .run import random_inputs  # pylint: disable=import-outside-toplevel

    params = mod["main"].params
    signature = {"inputs": [{"name": p.name, "dtype": str(p.ty.dtype)} for p in params]}
    arrays = random_inputs(signature, {p.name: [int(d) for d in p.ty.shape.values] for p in params})
    return [arrays[p.name] for p in params]


def _median_ms(call) -> float:
    import numpy as np  # pylint: disable=import-outside-toplevel

    call()  # warm-up
    times, start = [], time.perf_counter()
    while len(times) < MIN_RUNS or time.perf_counter() - start < RUN_SECONDS:
        t0 = time.perf_counter()
        call()
        times.append(time.perf_counter() - t0)
    return float(np.median(times)) * 1e3


def _tvm_latency(mod, target, arrays, logs: list | None):
    """(median ms, outputs) of ``mod`` compiled for ``target`` with the shipped logs and ``logs``."""
    import tvm  # pylint: disable=import-outside-toplevel
    from tvm import relax  # pylint: disable=import-outside-toplevel

    import tvm_pool  # pylint: disable=import-outside-toplevel

    vm = relax.VirtualMachine(tvm_pool.compile(mod, target, tuning_logs=logs), tvm.cpu())
    tensors = [tvm.runtime.tensor(a) for a in arrays]
    out = vm["main"](*tensors)
    outputs = [out.numpy()] if hasattr(out, "numpy") else [o.numpy() for o in out]
    return _median_ms(lambda: vm["main"](*tensors)), outputs


def _onnxruntime_ms(onnx_path: str | None, arrays, threads: int) -> tuple[float | None, str]:
    """onnxruntime's median ms on the ONNX model, or None and why not."""
    if onnx_path is None:
        return None, "onnxruntime: not compared (the model is not ONNX)"
    try:
        import onnxruntime as ort  # pylint: disable=import-outside-toplevel
    except ImportError:
        return None, "onnxruntime: not installed, not compared (pip install onnxruntime)"
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    session = ort.InferenceSession(onnx_path, options, providers=["CPUExecutionProvider"])
    feed = {i.name: a for i, a in zip(session.get_inputs(), arrays)}
    return _median_ms(lambda: session.run(None, feed)), ""


def relative_error(got, want) -> float:
    """``max|got - want| / max|want|`` (``want``'s largest magnitude taken as 1 when it is 0;
    inf when the shapes differ): how far a whole model's output is from the reference's."""
    import numpy as np  # pylint: disable=import-outside-toplevel

    got, want = np.asarray(got, dtype="float64"), np.asarray(want, dtype="float64")
    if got.shape != want.shape:
        return float("inf")
    return float(np.max(np.abs(got - want)) / (np.max(np.abs(want)) or 1.0))


def compare(mod, target, log_dir: str, onnx_path: str | None, threads: int) -> str:
    """The closing line of ``tune`` (see the module docstring); where the tuned outputs differ
    from the untuned ones beyond :data:`RTOL`, that is said first."""
    arrays = _inputs(mod)
    untuned_ms, want = _tvm_latency(mod, target, arrays, None)
    tuned_ms, got = _tvm_latency(mod, target, arrays, [log_dir])
    worst = max((relative_error(g, w) for g, w in zip(got, want) if g.dtype.kind == "f" and g.size), default=0.0)
    line = (f"latency ({threads} thread(s), median): without this log {untuned_ms:.3f} ms, with it {tuned_ms:.3f} ms "
            f"({untuned_ms / tuned_ms:.2f}x)")
    ort_ms, note = _onnxruntime_ms(onnx_path, arrays, threads)
    line += f", onnxruntime {ort_ms:.3f} ms (with the log: {tuned_ms / ort_ms:.2f}x its time)" if ort_ms else f"; {note}"
    if worst > RTOL:
        line = f"warning: the tuned model's outputs differ from the untuned one's (relative error {worst:.2g})\n" + line
    return line
