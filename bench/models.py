"""Whole-model benchmark (issue 38): ``tvm-pool bench --models``.

Each of torchvision's classic CNNs (:data:`MODELS`; ``--only`` also takes the other depths of
their families, :data:`OTHER_DEPTHS`), with seeded random weights at batch 1, float32, runs on
every peer at the benchmark's thread count, in one process:

- ``tvm_pool``: the model's ONNX export (TorchScript exporter) compiled as ``tvm-pool compile``
  does, with the shipped tuning logs of this CPU's family;
- ``tvm_pool_export``: the same module through ``torch.export`` (``tvm-pool compile model.pt2``);
- ``onnxruntime`` and ``openvino`` on the same ONNX file;
- ``torch``: PyTorch eager (``torch.no_grad``);
- ``tvm``: stock TVM 0.27, its ONNX importer and its default (untuned) CPU pipeline.

Every peer's output is checked against PyTorch eager's before anything is timed (relative error
``max|a - b| / max|b|`` at most :data:`RTOL`); a peer whose output differs is not timed, and
the report says so. Each row also carries tvm_pool's tuning coverage of the model (kernels
without a record and their share of the FLOPs: ``tuning.lookup.coverage``), so an untuned
model's time is read as what it is.

A model takes milliseconds to seconds (stock TVM's untuned code: seconds), so the peers take
turns :data:`ROUNDS` times, each turn a warm-up call and then calls for at least
:data:`TURN_SECONDS` (at least :data:`MIN_CALLS`); a peer's figure is the median of its calls.
"""

from __future__ import annotations

import contextlib
import io
import sys
import time
import warnings
from dataclasses import dataclass, field

import numpy as np

from tvm_pool.cli.tune_report import relative_error
from tvm_pool.errors import TvmPoolError

from . import timing
from .peers import TVM_ERRORS, openvino_config, ort_session, runtime_errors
from .summary import geomean, short_reason

# The classic CNNs (issue 38), as torchvision builder names with their input size.
MODELS = {
    "resnet18": 224, "resnet50": 224, "mobilenet_v2": 224, "mobilenet_v3_large": 224, "efficientnet_b0": 224,
    "squeezenet1_1": 224, "densenet121": 224, "googlenet": 224, "inception_v3": 299, "vgg16": 224,
    "shufflenet_v2_x1_0": 224,
}
# Other depths of the same families, whose layers have the classic ones' shapes (issue 38:
# within 1.5x of onnxruntime with no tuning of their own): timed when ``--only`` names them.
OTHER_DEPTHS = {name: 224 for name in ("resnet34", "resnet101", "resnet152", "vgg11", "vgg13", "vgg19",
                                       "densenet169", "densenet201")}
# Builder arguments that make a model's eval-mode graph the plain classifier (no auxiliary heads).
BUILD_KWARGS = {"googlenet": {"aux_logits": False, "init_weights": True},
                "inception_v3": {"aux_logits": False, "init_weights": True}}
PEERS = ("tvm_pool", "tvm_pool_export", "onnxruntime", "openvino", "torch", "tvm")
ROADS = ("tvm_pool", "tvm_pool_export")  # tvm_pool's peers: the ONNX road and the torch.export road
REFERENCE = "onnxruntime"  # the peer tvm_pool's latency is compared with
RTOL = 1e-4
ROUNDS = 3
TURN_SECONDS = 0.3
MIN_CALLS = 2
ONNX_OPSET = 17
ONNX_IR_VERSION = 10  # onnxruntime 1.31 refuses the IR version 14 that onnx 1.23 writes
SEED = 0


def build(name: str):
    """(torch module in eval mode, its batch-1 input): torchvision's builder with ``weights=None``
    and the weights seeded, so that every process builds the same model."""
    import torch  # pylint: disable=import-outside-toplevel

    from .torchvision_import import import_torchvision  # pylint: disable=import-outside-toplevel

    size = MODELS.get(name) or OTHER_DEPTHS.get(name)
    if size is None:
        raise ValueError(f"unknown model {name!r}; allowed: {', '.join([*MODELS, *OTHER_DEPTHS])}")
    torchvision = import_torchvision()
    torch.manual_seed(SEED)
    module = torchvision.models.get_model(name, weights=None, **BUILD_KWARGS.get(name, {})).eval()
    # aligned, so that the TVM peers take this memory as it is (timing.tvm_input), as the others do
    x = np.random.default_rng(SEED).standard_normal((1, 3, size, size)).astype("float32")
    x = torch.from_numpy(timing.aligned(x))
    return module, x


def onnx_model(module, x):
    """The module's ONNX export (TorchScript exporter, input ``x``, output ``y``), as a ModelProto."""
    import onnx  # pylint: disable=import-outside-toplevel
    import torch  # pylint: disable=import-outside-toplevel

    buffer = io.BytesIO()
    with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
        warnings.simplefilter("ignore")
        torch.onnx.export(module, (x,), buffer, dynamo=False, opset_version=ONNX_OPSET,
                          input_names=["x"], output_names=["y"])
    model = onnx.load_from_string(buffer.getvalue())
    model.ir_version = ONNX_IR_VERSION
    return model


def _tvm_runner(ex, x):
    import tvm  # pylint: disable=import-outside-toplevel
    from tvm import relax  # pylint: disable=import-outside-toplevel

    fn = relax.VirtualMachine(ex, tvm.cpu())["main"]
    arg = timing.tvm_input(x)

    def run():
        out = fn(arg)
        return out if hasattr(out, "numpy") else out[0]

    return run


@dataclass
class Subject:
    """One model as every peer takes it: the torch module and its input, its ONNX export, and
    tvm_pool's Relax module on each road (:data:`ROADS`), imported once (the exception that
    stopped an import in its place)."""

    module: object
    x: object
    onnx: object
    relax: dict = field(default_factory=dict)

    @classmethod
    def of(cls, module, x) -> "Subject":
        subject = cls(module, x, onnx_model(module, x))
        for road in ROADS:
            try:
                subject.relax[road] = relax_module(road, subject)
            except _errors(road) as err:
                subject.relax[road] = err
        return subject

    def relax_for(self, road: str):
        """The road's Relax module; raises what stopped its import."""
        mod = self.relax[road]
        if isinstance(mod, Exception):
            raise mod
        return mod


def start(peer: str, subject: Subject, threads: int):
    """(run, a call returning the output as a NumPy array, compile seconds or None) of ``peer``;
    raises the peer's runtime errors (:func:`_errors`) where it cannot run the model."""
    module, x, model = subject.module, subject.x, subject.onnx
    xn = x.numpy()  # the same memory, aligned (subject): every peer reads it
    if peer in (*ROADS, "tvm"):
        begin = time.perf_counter()
        ex = _tvm_build(peer, subject)
        compile_s = time.perf_counter() - begin
        run = _tvm_runner(ex, xn)
        return run, lambda: run().numpy(), compile_s
    if peer == "onnxruntime":
        sess = ort_session(model, threads)
        return (lambda: sess.run(None, {"x": xn})), (lambda: sess.run(None, {"x": xn})[0]), None
    if peer == "openvino":
        import openvino as ov  # pylint: disable=import-outside-toplevel

        core = ov.Core()
        compiled = core.compile_model(core.read_model(model.SerializeToString(), b""), "CPU", openvino_config(threads))
        req = compiled.create_infer_request()
        return (lambda: req.infer({0: xn})), (lambda: next(iter(req.infer({0: xn}).values()))), None
    import torch  # pylint: disable=import-outside-toplevel

    torch.set_num_threads(threads)

    def run_torch():
        with torch.no_grad():
            return module(x)

    return run_torch, lambda: run_torch().numpy(), None


def _tvm_build(peer: str, subject: Subject):
    """The executable of a TVM peer: stock TVM's ONNX road, or tvm_pool's (with the shipped logs)."""
    import tvm  # pylint: disable=import-outside-toplevel

    import tvm_pool  # pylint: disable=import-outside-toplevel
    from tvm_pool.targets import host_target  # pylint: disable=import-outside-toplevel

    if peer == "tvm":
        from tvm.relax.frontend.onnx import from_onnx  # pylint: disable=import-outside-toplevel

        return tvm.compile(from_onnx(subject.onnx), target=host_target())
    return tvm_pool.compile(subject.relax_for(peer), target="host")


def relax_module(road: str, subject: Subject):
    """tvm_pool's Relax module of the model on ``road`` (ONNX or torch.export)."""
    import tvm_pool  # pylint: disable=import-outside-toplevel

    if road == "tvm_pool_export":
        import torch  # pylint: disable=import-outside-toplevel

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return tvm_pool.from_exported_program(torch.export.export(subject.module, (subject.x,)))
    return tvm_pool.from_onnx(subject.onnx)


def _errors(peer: str) -> tuple:
    """What a peer's set-up or call raises when it cannot run a model."""
    if peer.startswith("tvm_pool"):
        return TVM_ERRORS + (TvmPoolError,)
    return runtime_errors(peer)


def coverage(subject: Subject) -> dict:
    """tvm_pool's tuning coverage of the model on both roads: ``{road: {"kernels", "untuned",
    "untuned_share", "elsewhere", "elsewhere_cpus"}}`` (:func:`tvm_pool.tuning.lookup.coverage`,
    shipped logs only; "elsewhere": kernels whose record was measured on another CPU model)."""
    from tvm_pool.targets import resolve_target  # pylint: disable=import-outside-toplevel
    from tvm_pool.tuning.lookup import coverage as lookup  # pylint: disable=import-outside-toplevel

    out = {}
    for road in ROADS:
        try:
            c = lookup(subject.relax_for(road), resolve_target("host"))
        except _errors(road) as err:
            out[road] = {"error": short_reason(err)}
            continue
        out[road] = {"kernels": c.kernels, "untuned": c.untuned, "untuned_share": c.untuned_share,
                     "elsewhere": c.elsewhere, "elsewhere_cpus": list(c.elsewhere_cpus)}
    return out


def take_turns(runners: dict, na: dict) -> dict:
    """Seconds of every timed call of every runner: ROUNDS rounds, each runner's turn a warm-up
    call and then calls for TURN_SECONDS (at least MIN_CALLS). A runner whose calls take longer
    than a turn (stock TVM's untuned VGG-16: 15 s) gets, after its first turn, one timed call a
    turn and no warm-up: at seconds a call, what the other peers left in the caches is noise. A
    runner that fails is dropped with the reason in ``na``."""
    samples = {name: [] for name in runners}
    for _ in range(ROUNDS):
        for name, run in list(runners.items()):
            timing.settle()
            slow = bool(samples[name]) and min(samples[name]) > TURN_SECONDS
            try:
                if not slow:
                    run()
                calls, begin = 0, time.perf_counter()
                while calls < (1 if slow else MIN_CALLS) or time.perf_counter() - begin < TURN_SECONDS:
                    t0 = time.perf_counter()
                    run()
                    samples[name].append(time.perf_counter() - t0)
                    calls += 1
            except _errors(name) as err:
                na[name] = f"failed: {short_reason(err)}"
                del runners[name], samples[name]
    return samples


def run_model(name: str, threads: int, peers=PEERS, builder=None) -> dict:
    """One model's row at ``threads`` threads: every peer whose output matches PyTorch eager's
    is timed (``ms``, medians), the others get their reason in ``na``. ``builder(name)``:
    (module, input), :func:`build` by default."""
    import torch  # pylint: disable=import-outside-toplevel

    torch.set_num_threads(threads)
    subject = Subject.of(*(builder or build)(name))
    with torch.no_grad():
        want = subject.module(subject.x).numpy()
    row = {"model": name, "input": list(subject.x.shape), "ms": {}, "na": {}, "error": {}, "compile_s": {},
           "coverage": coverage(subject)}
    runners = {}
    for peer in peers:
        try:
            run, output, compile_s = start(peer, subject, threads)
            err = relative_error(output(), want)
        except ImportError as e:
            row["na"][peer] = f"not installed ({short_reason(e)})"
            continue
        except _errors(peer) as e:
            row["na"][peer] = short_reason(e)
            continue
        row["error"][peer] = err
        if compile_s is not None:
            row["compile_s"][peer] = compile_s
        if err > RTOL:
            row["na"][peer] = f"wrong outputs (relative error {err:.2g} against PyTorch eager), not timed"
            continue
        runners[peer] = run
    samples = take_turns(runners, row["na"])
    row["ms"] = {peer: timing.median_ms(s) for peer, s in samples.items() if s}
    ref = row["ms"].get(REFERENCE)
    for peer in ROADS:
        if ref and peer in row["ms"]:
            row[f"{peer}_vs_{REFERENCE}"] = row["ms"][peer] / ref
    print(f"[{threads}t] {name}: " + ", ".join(f"{p} {t:.2f}ms" for p, t in row["ms"].items()), file=sys.stderr,
          flush=True)
    return row


def run_threads(threads: int, only=None) -> dict:
    """Every model (or those ``only`` names) at ``threads`` threads."""
    names = [n for n in [*MODELS, *OTHER_DEPTHS] if n in only] if only else list(MODELS)
    rows = [run_model(n, threads) for n in names]
    summary = {}
    for peer in ROADS:
        ratios = [r[f"{peer}_vs_{REFERENCE}"] for r in rows if f"{peer}_vs_{REFERENCE}" in r]
        summary[peer] = {"geomean_vs_reference": geomean(ratios), "worst": max(ratios, default=None),
                         "n": len(ratios)}
    return {"threads": threads, "rows": rows, "summary": summary, "reference": REFERENCE, "rtol": RTOL,
            "rounds": ROUNDS, "turn_seconds": TURN_SECONDS}


def unknown(only) -> list[str]:
    """The names in ``only`` that are neither :data:`MODELS` nor :data:`OTHER_DEPTHS`."""
    return sorted(set(only) - set(MODELS) - set(OTHER_DEPTHS)) if only else []

