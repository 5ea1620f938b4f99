"""The runtimes the CPU benchmark times: tvm_pool, stock TVM 0.27, onnxruntime, PyTorch and
OpenVINO, each set up on one workload with the benchmark's thread count.

A peer that cannot run a workload (an importer refusing the graph, a kernel missing for the
dtype, the runtime not installed) must not stop a ten-minute run: ``start`` turns the errors its
runtime really raises (``runtime_errors``) into NotAvailable, whose message the report prints as
that peer's "n/a" reason. Any other exception is a bug in the benchmark and stops it.
"""

from __future__ import annotations

import importlib
import time

from tvm_pool.errors import TvmPoolError

from .summary import short_reason
from .timing import tvm_input
from .workloads import Workload, fused_bias

PEERS = ("tvm_pool", "tvm", "onnxruntime", "torch", "openvino")

# The optional runtimes, by the module a peer imports: when it is missing the peer is "not installed".
OPTIONAL_MODULES = {"onnxruntime": "onnxruntime", "torch": "torch", "openvino": "openvino"}

# What TVM raises: tvm-ffi turns TVM's C++ errors into these Python classes (tvm_ffi/error.py
# registers them; tvm.error's own classes, OpNotImplemented among them, derive from
# RuntimeError), and stock TVM's ONNX importer refuses graphs with plain asserts ("Missing
# outputs during conversion. Expected 2 but Got 1 in MaxPool").
TVM_ERRORS = (RuntimeError, ValueError, TypeError, AttributeError, KeyError, IndexError, AssertionError)
# PyTorch's kernels raise RuntimeError (NotImplementedError and torch.OutOfMemoryError derive
# from it) and check their arguments with ValueError / TypeError.
TORCH_ERRORS = (RuntimeError, ValueError, TypeError)


# How far a torch-road average may be from PyTorch eager's (relative): the same sum in another order.
AVERAGE_RTOL = 1e-5


class NotAvailable(Exception):
    """A peer cannot run a workload; the message is the reason the report prints."""


def runtime_errors(peer: str) -> tuple[type[Exception], ...]:
    """The exceptions ``peer``'s runtime raises when it refuses or fails a workload (``copy``:
    the copy limit, a PyTorch copy). Only call it for a peer whose runtime imports."""
    if peer == "tvm_pool":
        return TVM_ERRORS + (TvmPoolError,)
    if peer == "tvm":
        return TVM_ERRORS
    if peer in ("torch", "torch_graph", "copy"):  # torch_graph: PyTorch replayed from a CUDA graph
        return TORCH_ERRORS
    if peer == "onnxruntime":
        # onnxruntime's status errors (pybind classes that derive from Exception itself)
        from onnxruntime.capi import onnxruntime_pybind11_state as ort  # pylint: disable=import-outside-toplevel

        return (RuntimeError, ValueError, ort.Fail, ort.InvalidArgument, ort.InvalidGraph, ort.InvalidProtobuf,
                ort.NotImplemented, ort.RuntimeException, ort.EPFail, ort.EngineError)
    if peer == "openvino":
        # OpenVINO's C++ exceptions arrive as RuntimeError; its Python layer raises OVError.
        from openvino.exceptions import OVError  # pylint: disable=import-outside-toplevel

        return (RuntimeError, ValueError, TypeError, OVError)
    raise KeyError(f"unknown peer {peer!r}")


def start(peer: str, model, x, threads: int, w: Workload):
    """``(run, compile_s)`` of ``peer`` on one workload: ``run`` calls the model once on ``x``,
    ``compile_s`` is the compile time (tvm_pool's, the report's last column; None for the
    others). Raises NotAvailable saying why the peer cannot run it."""
    if w is not None and w.road == "torch":
        return _start_torch_road(peer, model, x, threads, w)
    module = OPTIONAL_MODULES.get(peer)
    if module is not None:
        try:
            importlib.import_module(module)
        except ImportError as err:
            raise NotAvailable(f"not installed ({short_reason(err)})") from err
    try:
        return STARTERS[peer](model, x, threads, w)
    except runtime_errors(peer) as err:
        raise NotAvailable(f"failed: {short_reason(err)}") from err


def _start_torch_road(peer: str, program, x, threads: int, w: Workload):
    """A torch-road workload (``program``: its torch.export program): tvm_pool's and stock TVM's
    ``from_exported_program``, and PyTorch eager. A TVM result that differs from eager's is
    not timed: the report says why instead (stock TVM returns zeros as max-pool indices). Max
    pools and indices must match exactly; averages (summed in another order) within float
    rounding (:data:`AVERAGE_RTOL`)."""
    if peer in ("onnxruntime", "openvino"):
        raise NotAvailable("a torch.export workload (no ONNX model)")
    import numpy as np  # pylint: disable=import-outside-toplevel
    import torch  # pylint: disable=import-outside-toplevel

    from .workloads import torch_function  # pylint: disable=import-outside-toplevel

    torch.set_num_threads(threads)
    t = torch.from_numpy(x)
    out = torch_function(w)(t)
    expected = [r.numpy() for r in (out if isinstance(out, tuple) else (out,))]
    if peer == "torch":
        return lambda: torch_function(w)(t), None
    import tvm  # pylint: disable=import-outside-toplevel

    try:
        if peer == "tvm_pool":
            import tvm_pool  # pylint: disable=import-outside-toplevel

            mod, build = tvm_pool.from_exported_program(program), lambda m: tvm_pool.compile(m, target="host")
        else:
            from tvm.relax.frontend.torch import from_exported_program  # pylint: disable=import-outside-toplevel

            from tvm_pool.targets import host_target  # pylint: disable=import-outside-toplevel

            mod, build = from_exported_program(program), lambda m: tvm.compile(m, target=host_target())
        start_s = time.perf_counter()
        ex = build(mod)
        compile_s = time.perf_counter() - start_s
    except runtime_errors(peer) + (AssertionError,) as err:
        raise NotAvailable(f"import: {short_reason(err)}") from err
    run = _tvm_runner(ex, x)
    got = [o.numpy() for o in run()]
    exact = "max_pool" in w.op
    for name, g, e in zip(("values", "indices"), got, expected):
        same = np.array_equal(g, e) if exact or name == "indices" else np.allclose(g, e, rtol=AVERAGE_RTOL, atol=0)
        if g.shape != e.shape or not same:
            raise NotAvailable(f"wrong {name} (differ from PyTorch eager), not timed")
    return run, compile_s


def _tvm_runner(ex, x):
    import tvm  # pylint: disable=import-outside-toplevel
    from tvm import relax  # pylint: disable=import-outside-toplevel

    vm = relax.VirtualMachine(ex, tvm.cpu())
    arg = tvm_input(x)  # x's own memory, as the other peers read it
    fn = vm["main"]
    return lambda: fn(arg)


def peer_tvm_pool(model, x, threads, w=None):  # pylint: disable=unused-argument
    """tvm_pool as ``compile`` builds it for this CPU (shipped tuning logs applied)."""
    import tvm_pool  # pylint: disable=import-outside-toplevel

    try:
        mod = tvm_pool.from_onnx(model)
    except (TvmPoolError,) + TVM_ERRORS as err:
        raise NotAvailable(f"import: {short_reason(err)}") from err
    start_s = time.perf_counter()
    ex = tvm_pool.compile(mod, target="host")
    compile_s = time.perf_counter() - start_s
    return _tvm_runner(ex, x), compile_s


def peer_tvm(model, x, threads, w=None):  # pylint: disable=unused-argument
    """Stock TVM 0.27: its ONNX importer and its default CPU pipeline."""
    import tvm  # pylint: disable=import-outside-toplevel
    from tvm.relax.frontend.onnx import from_onnx  # pylint: disable=import-outside-toplevel

    from tvm_pool.targets import host_target  # pylint: disable=import-outside-toplevel

    try:
        mod = from_onnx(model)
        start_s = time.perf_counter()
        ex = tvm.compile(mod, target=host_target())
        compile_s = time.perf_counter() - start_s
        return _tvm_runner(ex, x), compile_s
    except TVM_ERRORS as err:
        raise NotAvailable(short_reason(err)) from err


def ort_session(model, threads: int):
    """An onnxruntime CPU session of ``model`` with ``threads`` intra-op threads (one inter-op)."""
    import onnxruntime as ort  # pylint: disable=import-outside-toplevel

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads
    opts.inter_op_num_threads = 1
    return ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])


def peer_onnxruntime(model, x, threads, w=None):  # pylint: disable=unused-argument
    """onnxruntime's CPU provider, ``threads`` intra-op threads (the default build users get)."""
    try:
        sess = ort_session(model, threads)
    except runtime_errors("onnxruntime") as err:
        raise NotAvailable(short_reason(err)) from err
    feed = {"x": x}
    sess.run(None, feed)
    return lambda: sess.run(None, feed), None


def peer_torch(model, x, threads, w: Workload = None):  # pylint: disable=unused-argument
    """PyTorch's functional pools (eager, CPU), the same workload written as ``torch_call``."""
    import torch  # pylint: disable=import-outside-toplevel

    torch.set_num_threads(threads)
    call = torch_call(w, torch.from_numpy(x))
    try:
        call()
    except TORCH_ERRORS as err:
        raise NotAvailable(short_reason(err)) from err
    if w.dtype in ("int8", "uint8"):
        raise NotAvailable(f"{w.dtype} pooling not supported by torch CPU kernels")
    return call, None


def torch_spec(w: Workload) -> dict:
    """PyTorch's functional pool for workload ``w``: ``{"fn": name in torch.nn.functional,
    "args": positional arguments after the tensor, "kwargs": ..., "fused": Relu before and the
    bias after}``; NotAvailable where PyTorch has no equivalent (a global pool that is not 2-D,
    asymmetric pads). The GPU bundle (``cuda_bundle``) carries it to a machine without tvm_pool.
    A workload with its own PyTorch call (``w.torch_op``: a traced model layer's) is that call."""
    if w.torch_op is not None:
        return {"fn": w.torch_op["fn"], "args": list(w.torch_op.get("args", [])),
                "kwargs": dict(w.torch_op.get("kwargs", {})), "fused": w.fused}
    if w.road == "torch":  # the workload is a torch.nn.functional call already
        kw = dict(w.attrs, **({"return_indices": True} if w.indices else {}))
        return {"fn": w.op, "args": [], "kwargs": kw, "fused": w.fused}
    rank = len(w.shape) - 2
    a = w.attrs
    k = a.get("kernel_shape")
    if w.op == "LpPool":
        if any(a.get("pads", [])) or rank != 2:
            raise NotAvailable("torch's lp_pool has no padding" if rank == 2 else f"no torch lp_pool{rank}d")
        kw = dict(kernel_size=k, stride=a.get("strides", k), ceil_mode=bool(a.get("ceil_mode", 0)))
        return {"fn": "lp_pool2d", "args": [float(a.get("p", 2))], "kwargs": kw, "fused": w.fused}
    if w.op.startswith("Global"):
        fn = {"GlobalAveragePool": "adaptive_avg_pool2d", "GlobalMaxPool": "adaptive_max_pool2d"}.get(w.op)
        if fn is None or rank != 2:
            raise NotAvailable("no torch equivalent")
        return {"fn": fn, "args": [1], "kwargs": {}, "fused": w.fused}
    pads = a.get("pads", [0] * 2 * rank)
    if pads[:rank] != pads[rank:]:
        raise NotAvailable("asymmetric pads")
    kw = dict(kernel_size=k, stride=a.get("strides", k), padding=pads[:rank], ceil_mode=bool(a.get("ceil_mode", 0)))
    if w.op == "MaxPool":
        kw["return_indices"] = w.indices
        return {"fn": f"max_pool{rank}d", "args": [], "kwargs": kw, "fused": w.fused}
    kw["count_include_pad"] = bool(a.get("count_include_pad", 0))
    return {"fn": f"avg_pool{rank}d", "args": [], "kwargs": kw, "fused": w.fused}


def torch_call(w: Workload, t):
    """PyTorch's functional pool for workload ``w`` (:func:`torch_spec`) on tensor ``t`` (CPU
    or GPU)."""
    import torch  # pylint: disable=import-outside-toplevel
    import torch.nn.functional as F  # pylint: disable=import-outside-toplevel

    spec = torch_spec(w)
    fn, args, kw = getattr(F, spec["fn"]), spec["args"], spec["kwargs"]
    if spec["fused"]:
        bias = torch.from_numpy(fused_bias(w)).to(t.device)
        return lambda: fn(torch.relu(t), *args, **kw) + bias
    return lambda: fn(t, *args, **kw)


def openvino_config(threads: int) -> dict:
    """OpenVINO CPU plugin settings: ``threads`` inference threads, the latency hint, and float32
    arithmetic. On a CPU with AVX512-BF16 (this znver4) the plugin otherwise infers float32
    models in bfloat16: torchvision's ResNet-18 came out 3.4e-3 away from PyTorch's (relative),
    where every other peer is within 1e-5."""
    return {"INFERENCE_NUM_THREADS": threads, "PERFORMANCE_HINT": "LATENCY", "INFERENCE_PRECISION_HINT": "f32"}


def peer_openvino(model, x, threads, w=None):  # pylint: disable=unused-argument
    """OpenVINO's CPU plugin (:func:`openvino_config`)."""
    import openvino as ov  # pylint: disable=import-outside-toplevel

    core = ov.Core()
    try:
        ovm = core.read_model(model.SerializeToString(), b"")
        compiled = core.compile_model(ovm, "CPU", openvino_config(threads))
        req = compiled.create_infer_request()
        req.infer({0: x})
    except runtime_errors("openvino") as err:
        raise NotAvailable(short_reason(err)) from err
    return lambda: req.infer({0: x}), None


# Each peer's set-up, by name: (model, x, threads, workload) -> (run, compile_s).
STARTERS = {"tvm_pool": peer_tvm_pool, "tvm": peer_tvm, "onnxruntime": peer_onnxruntime,
            "torch": peer_torch, "openvino": peer_openvino}
