"""PyTorch sample inputs as modules, many to a module, through torch.export or an ONNX exporter
and tvm_pool.

A :class:`Sample` is one call of a PyTorch function: its tensor arguments (the module's inputs)
and its other arguments (baked into the module). :class:`BatchModule` calls K samples in one
``forward`` that takes all their tensors and returns all their results, flattened, so that one
export, one conversion and one ``tvm_pool.compile`` cover K samples (a compile costs about
0.2 s a sample plus a second or two for the module). :func:`run_export` (torch.export ->
``tvm_pool.from_exported_program``) and :func:`run_onnx` (``torch.onnx.export`` ->
``tvm_pool.from_onnx``) do that through :func:`run_stages`: when a stage fails on a batch, the
samples that fail it are found by halving and the rest go on as one batch, so that every
failure names one sample.

:func:`compare` sets one output against torch eager's: the same shape and dtype, integers
(indices) exactly, floats within a tolerance, NaN in the same places.

Used by test_torch_opinfo.py (PyTorch's OpInfo samples); other tests may import it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import re
import warnings
from typing import Callable

import numpy as np
import torch
from torch.utils import _pytree as pytree


class _Slot:
    """Where the i-th tensor argument of a sample goes."""

    def __init__(self, index: int):
        self.index = index

    def __repr__(self):
        return f"<tensor {self.index}>"


def _describe_value(value) -> str:
    if isinstance(value, torch.Tensor):
        dtype = str(value.dtype).replace("torch.", "")
        return f"Tensor{list(value.shape)}:{dtype}"
    if isinstance(value, torch.Size):
        return str(list(value))
    return repr(value)


@dataclasses.dataclass
class Sample:
    """``fn(*args, **kwargs)`` with the tensors in ``args``/``kwargs`` taken out as inputs."""

    op: str  # a name for reports: "nn.functional.max_pool2d"
    index: int  # the sample's position in its source's list (for this dtype)
    dtype: torch.dtype
    fn: Callable
    args: tuple  # tensors replaced by _Slot
    kwargs: dict
    tensors: list  # the tensor inputs, in slot order
    _eager: list | None = dataclasses.field(default=None, repr=False, compare=False)

    @classmethod
    def make(cls, op: str, index: int, dtype, fn: Callable, args, kwargs) -> "Sample":
        tensors = []

        def take(value):
            if isinstance(value, torch.Tensor):
                tensors.append(value.detach().clone().contiguous())
                return _Slot(len(tensors) - 1)
            return value

        args, kwargs = pytree.tree_map(take, (tuple(args), dict(kwargs)))
        return cls(op, index, dtype, fn, args, kwargs, tensors)

    def call(self, tensors):
        def put(value):
            return tensors[value.index] if isinstance(value, _Slot) else value

        args, kwargs = pytree.tree_map(put, (self.args, self.kwargs), is_leaf=lambda v: isinstance(v, _Slot))
        return self.fn(*args, **kwargs)

    def eager(self) -> list:
        """torch eager's results, flattened (a max_pool with indices gives two); computed once."""
        if self._eager is None:
            with torch.no_grad():
                out = self.call(self.tensors)
            self._eager = [r for r in pytree.tree_leaves(out) if isinstance(r, torch.Tensor)]
        return self._eager

    def describe(self) -> str:
        """``max_pool2d(Tensor[1, 2, 3, 6]:float32, kernel_size=3, ...)``: what a repro needs."""

        def show(value):
            if isinstance(value, _Slot):
                return _describe_value(self.tensors[value.index])
            if isinstance(value, (tuple, list)) and not isinstance(value, torch.Size):
                inner = ", ".join(show(v) for v in value)
                return f"({inner},)" if isinstance(value, tuple) and len(value) == 1 else (
                    f"({inner})" if isinstance(value, tuple) else f"[{inner}]"
                )
            return _describe_value(value)

        parts = [show(a) for a in self.args] + [f"{k}={show(v)}" for k, v in self.kwargs.items()]
        return f"{self.op.split('.')[-1]}({', '.join(parts)})"

    @property
    def key(self) -> str:
        dtype = str(self.dtype).replace("torch.", "")
        return f"{self.op}[{dtype}]#{self.index}"


class BatchModule(torch.nn.Module):
    """One module for K samples: ``forward`` takes every sample's tensors, in order, and returns
    every sample's results, flattened, in order."""

    def __init__(self, samples):
        super().__init__()
        self.samples = list(samples)
        self.counts = [len(s.tensors) for s in self.samples]

    def forward(self, *inputs):
        results = []
        start = 0
        for sample, count in zip(self.samples, self.counts):
            out = sample.call(list(inputs[start : start + count]))
            start += count
            results.extend(r for r in pytree.tree_leaves(out) if isinstance(r, torch.Tensor))
        return tuple(results)

    def inputs(self) -> tuple:
        return tuple(t for s in self.samples for t in s.tensors)

    def output_counts(self) -> list:
        return [len(s.eager()) for s in self.samples]


# ---------------------------------------------------------------------------------------------
# Comparison


def as_numpy(tensor: torch.Tensor) -> np.ndarray:
    """A torch tensor as numpy; bfloat16 and float16 widened to float32 (exact)."""
    tensor = tensor.detach().cpu()
    if tensor.dtype in (torch.bfloat16, torch.float16):
        tensor = tensor.float()
    return tensor.numpy()


def compare(got: torch.Tensor, want: torch.Tensor, rtol: float, atol: float) -> str | None:
    """None when ``got`` matches ``want``; else what differs, in one line."""
    if tuple(got.shape) != tuple(want.shape):
        return f"shape {list(got.shape)} != {list(want.shape)}"
    if got.dtype != want.dtype:
        return f"dtype {got.dtype} != {want.dtype}"
    g, w = as_numpy(got), as_numpy(want)
    if g.size == 0:
        return None
    if w.dtype.kind in "iub":
        bad = g != w
        if bad.any():
            i = tuple(int(v) for v in np.argwhere(bad)[0])
            return f"{int(bad.sum())}/{w.size} integer elements differ, first at {list(i)}: {g[i]} != {w[i]}"
        return None
    gnan, wnan = np.isnan(g), np.isnan(w)
    if not np.array_equal(gnan, wnan):
        i = tuple(int(v) for v in np.argwhere(gnan != wnan)[0])
        return f"NaN positions differ ({int((gnan != wnan).sum())} elements), first at {list(i)}: {g[i]} vs {w[i]}"
    with np.errstate(invalid="ignore", over="ignore"):
        close = np.isclose(g, w, rtol=rtol, atol=atol, equal_nan=True)
    if not close.all():
        i = tuple(int(v) for v in np.argwhere(~close)[0])
        worst = float(np.nanmax(np.abs(np.where(close, 0, g.astype(np.float64) - w.astype(np.float64)))))
        return (
            f"{int((~close).sum())}/{w.size} values differ beyond rtol={rtol} atol={atol}, "
            f"first at {list(i)}: {g[i]} != {w[i]} (max abs diff {worst:g})"
        )
    return None


# ---------------------------------------------------------------------------------------------
# torch.export -> tvm_pool


@dataclasses.dataclass
class Outcome:
    """What happened to one sample. ``stage``: "export" (torch.export refused it), "convert"
    (tvm_pool.from_exported_program/from_onnx refused it), "compile", "run" (the compiled module
    raised), or "done" (``outputs`` holds tvm_pool's results)."""

    sample: Sample
    stage: str
    outputs: list | None = None
    error: str | None = None


def _short_error(exception: BaseException) -> str:
    """One line saying why: the line of the message that names the problem."""
    lines = [l.strip() for l in str(exception).strip().splitlines() if l.strip()]
    head = lines[0] if lines else ""
    for pattern in (r"^<class '[\w.]+\.(\w+)'>: (.*)", r"^(\w+(?:Error|Exception)): (.*)"):
        found = [re.match(pattern, l) for l in lines]
        found = [m for m in found if m]
        if found:  # the dynamo exporter's summary, or a chained error's own line
            head = f"{found[0].group(1)}: {found[0].group(2)}"
            break
    else:
        for line in lines:  # TVM's errors end in a traceback; the first error line names it
            if "Error" in line or "error" in line or "not supported" in line:
                head = line
                break
    return f"{type(exception).__name__}: {head}"[:400]


def export_batch(samples) -> torch.export.ExportedProgram:
    module = BatchModule(samples).eval()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return torch.export.export(module, module.inputs())


def tvm_run(executable, inputs) -> list:
    """Run a compiled module's ``main`` on torch tensors; its outputs as torch tensors."""
    import tvm  # pylint: disable=import-outside-toplevel
    from tvm import relax  # pylint: disable=import-outside-toplevel

    vm = relax.VirtualMachine(executable, tvm.cpu())
    result = vm["main"](*[tvm.runtime.from_dlpack(t.contiguous()) for t in inputs])
    flat = []

    def walk(value):
        if isinstance(value, tvm.runtime.Tensor):
            flat.append(torch.from_dlpack(value).clone())
        else:
            for item in value:
                walk(item)

    walk(result)
    return flat


def _split_outputs(samples, outputs):
    counts = BatchModule(samples).output_counts()
    if sum(counts) != len(outputs):
        raise RuntimeError(f"the module returned {len(outputs)} outputs, the samples {sum(counts)}")
    parts, start = [], 0
    for count in counts:
        parts.append(outputs[start : start + count])
        start += count
    return parts


class StageError(Exception):
    """A stage of a pipeline failed on a batch."""

    def __init__(self, stage: str, exception: BaseException):
        super().__init__(stage)
        self.stage = stage
        self.message = _short_error(exception)


def _through(samples, stages):
    value = None
    for name, fn in stages:
        try:
            value = fn(samples, value)
        except Exception as exception:  # pylint: disable=broad-except
            raise StageError(name, exception) from exception
    return value


def _locate(samples, stages) -> list[Outcome]:
    """The samples that fail ``stages`` alone, found by halving (each Outcome names its stage)."""
    try:
        _through(samples, stages)
        return []
    except StageError as failure:
        if len(samples) == 1:
            return [Outcome(samples[0], failure.stage, error=failure.message)]
    half = len(samples) // 2
    return _locate(samples[:half], stages) + _locate(samples[half:], stages)


def run_stages(samples, stages) -> list[Outcome]:
    """Run ``samples`` through ``stages`` (``[(name, fn(samples, previous value))]``, the last
    returning per-sample outputs) as one batch. When a stage fails, the samples that fail it
    are found by halving, running only the stages up to that one, and the rest go on as one
    batch: a failure costs about log2(K) partial runs, and every failure names one sample."""
    names = [name for name, _ in stages]
    done, pending = [], [list(samples)]
    while pending:
        batch = pending.pop()
        if not batch:
            continue
        try:
            outputs = _through(batch, stages)
        except StageError as failure:
            if len(batch) == 1:
                done.append(Outcome(batch[0], failure.stage, error=failure.message))
                continue
            bad = _locate(batch, stages[: names.index(failure.stage) + 1])
            if bad:
                done.extend(bad)
                failed = {id(o.sample) for o in bad}
                pending.append([s for s in batch if id(s) not in failed])
            else:  # fails only in company: split the batch
                half = len(batch) // 2
                pending += [batch[:half], batch[half:]]
            continue
        done.extend(Outcome(s, "done", o) for s, o in zip(batch, outputs))
    order = {id(s): i for i, s in enumerate(samples)}
    return sorted(done, key=lambda o: order[id(o.sample)])


def chunks(samples, size: int) -> list:
    """``samples`` in batches of at most ``size`` (a compile's memory and a failure's cost grow
    with the batch)."""
    samples = list(samples)
    return [samples[i : i + size] for i in range(0, len(samples), size)]


def export_stages(target="llvm") -> list:
    """torch.export -> tvm_pool.from_exported_program -> tvm_pool.compile -> run."""
    import tvm_pool  # pylint: disable=import-outside-toplevel

    return [
        ("export", lambda samples, _: export_batch(samples)),
        ("convert", lambda samples, program: tvm_pool.from_exported_program(program)),
        ("compile", lambda samples, mod: tvm_pool.compile(mod, target)),
        ("run", lambda samples, ex: _split_outputs(samples, tvm_run(ex, BatchModule(samples).inputs()))),
    ]


def run_export(samples, target="llvm", batch_size: int = 256) -> list[Outcome]:
    """Every sample through torch.export and tvm_pool, batched; failures located."""
    stages = export_stages(target)
    return [o for chunk in chunks(samples, batch_size) for o in run_stages(chunk, stages)]


# ---------------------------------------------------------------------------------------------
# ONNX exporters -> tvm_pool.from_onnx (and onnxruntime, to tell an exporter's translation
# from a tvm_pool bug)


_REGISTRIES: dict = {}


@contextlib.contextmanager
def cached_onnx_registry():
    """The dynamo exporter builds its registry of ONNX functions from torchlib on every call
    (2-3 s, most of a small export); reuse the first one built. The registry is only read
    during an export (we pass no custom_translation_table)."""
    try:
        from torch.onnx._internal.exporter import _registration  # pylint: disable=import-outside-toplevel

        original = _registration.ONNXRegistry.__dict__["from_torchlib"]
        build = original.__func__
    except (ImportError, KeyError, AttributeError):  # another torch: build it every time
        yield
        return

    def cached(cls, *args, **kwargs):
        key = (cls, args, tuple(sorted(kwargs.items())))
        if key not in _REGISTRIES:
            _REGISTRIES[key] = build(cls, *args, **kwargs)
        return _REGISTRIES[key]

    _registration.ONNXRegistry.from_torchlib = classmethod(cached)
    try:
        yield
    finally:
        _registration.ONNXRegistry.from_torchlib = original


def onnx_export(samples, dynamo: bool, ir_version: int, opset: int | None = 17):
    """The batch as an ONNX ModelProto from ``torch.onnx.export`` (the TorchScript exporter at
    ``opset``, or the dynamo one at its default opset), inputs named ``in{i}`` and outputs
    ``out{j}``: an exporter may drop an input it does not need."""
    import onnx  # pylint: disable=import-outside-toplevel

    module = BatchModule(samples).eval()
    inputs = module.inputs()
    n_out = sum(module.output_counts())
    input_names = [f"in{i}" for i in range(len(inputs))]
    output_names = [f"out{j}" for j in range(n_out)]
    quiet = io.StringIO()
    with warnings.catch_warnings(), contextlib.redirect_stdout(quiet), contextlib.redirect_stderr(quiet):
        warnings.simplefilter("ignore")
        if dynamo:
            with cached_onnx_registry():
                program = torch.onnx.export(
                    module, inputs, dynamo=True, input_names=input_names, output_names=output_names, verbose=False
                )
            model = program.model_proto
        else:
            buffer = io.BytesIO()
            torch.onnx.export(
                module, inputs, buffer, dynamo=False, opset_version=opset,
                input_names=input_names, output_names=output_names,
            )
            model = onnx.load_from_string(buffer.getvalue())
    model.ir_version = ir_version
    return model


def _feeds(model, inputs) -> dict:
    names = {i.name for i in model.graph.input} - {t.name for t in model.graph.initializer}
    return {f"in{i}": t for i, t in enumerate(inputs) if f"in{i}" in names}


def _outputs_by_name(model, outputs, n_out) -> list:
    by_name = {o.name: r for o, r in zip(model.graph.output, outputs)}
    missing = [f"out{j}" for j in range(n_out) if f"out{j}" not in by_name]
    if missing:
        raise RuntimeError(f"the exported model lacks outputs {missing}")
    return [by_name[f"out{j}"] for j in range(n_out)]


def onnx_stages(dynamo: bool, ir_version: int, target="llvm") -> list:
    """torch.onnx.export -> tvm_pool.from_onnx -> tvm_pool.compile -> run."""
    import tvm_pool  # pylint: disable=import-outside-toplevel

    def convert(samples, model):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return model, tvm_pool.from_onnx(model)

    def run(samples, value):
        model, executable = value
        feeds = _feeds(model, BatchModule(samples).inputs())
        order = [i.name for i in model.graph.input if i.name in feeds]
        outputs = tvm_run(executable, [feeds[n] for n in order])
        n_out = sum(BatchModule(samples).output_counts())
        return _split_outputs(samples, _outputs_by_name(model, outputs, n_out))

    return [
        ("export", lambda samples, _: onnx_export(samples, dynamo, ir_version)),
        ("convert", convert),
        ("compile", lambda samples, value: (value[0], tvm_pool.compile(value[1], target))),
        ("run", run),
    ]


def run_onnx(samples, dynamo: bool, ir_version: int, target="llvm", batch_size: int = 128) -> list[Outcome]:
    """Every sample through an ONNX exporter and tvm_pool.from_onnx, batched; failures located."""
    stages = onnx_stages(dynamo, ir_version, target)
    return [o for chunk in chunks(samples, batch_size) for o in run_stages(chunk, stages)]


def onnxruntime_run(model, inputs) -> list:
    """onnxruntime's outputs for ``model`` fed ``inputs`` (the batch's tensors), as torch
    tensors in the graph's order."""
    import onnxruntime  # pylint: disable=import-outside-toplevel

    feeds = _feeds(model, inputs)
    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = 1
    options.log_severity_level = 3
    session = onnxruntime.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])

    def to_numpy(t):
        if t.dtype == torch.bfloat16:
            import ml_dtypes  # pylint: disable=import-outside-toplevel

            return t.view(torch.int16).numpy().view(ml_dtypes.bfloat16)
        return t.numpy()

    results = session.run(None, {k: to_numpy(v) for k, v in feeds.items()})
    out = []
    for r in results:
        r = np.asarray(r)
        if r.dtype.name == "bfloat16":
            out.append(torch.from_numpy(r.view(np.int16)).view(torch.bfloat16))
        else:
            out.append(torch.from_numpy(r))
    return out


def onnxruntime_outputs(sample, dynamo: bool, ir_version: int):
    """``(outputs, None)``: onnxruntime's outputs for ``sample`` exported alone; ``(None, why)``
    when the exporter or onnxruntime fails on it."""
    try:
        model = onnx_export([sample], dynamo, ir_version)
    except Exception as exception:  # pylint: disable=broad-except
        return None, f"export: {_short_error(exception)}"
    try:
        outputs = onnxruntime_run(model, sample.tensors)
        return _outputs_by_name(model, outputs, len(sample.eager())), None
    except Exception as exception:  # pylint: disable=broad-except
        return None, f"onnxruntime: {_short_error(exception)}"
