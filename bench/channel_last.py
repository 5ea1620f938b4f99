"""The peers of the channel-last workloads (``workloads.channel_last_workloads``, ``--only nhwc``):
tvm_pool, stock TVM, LiteRT, onnxruntime and PyTorch, and tvm_pool's channel-first twin.

- tvm_pool: the workload's Relax module (``relax.op.nn`` pools in NHWC/NDHWC) through
  ``tvm_pool.compile``; a TFLite workload through ``tvm_pool.from_tflite`` of its TFLite model.
- tvm: ``tvm.compile`` of the same Relax module; a TFLite workload through TVM's own
  ``from_tflite``.
- litert: ``ai_edge_litert``'s Interpreter (XNNPACK, its default delegate) on a single-op TFLite
  model (``tvm_pool.tflite.models``); a padding TFLite has no SAME/VALID for is a PADV2 with
  -inf before a VALID max pool. TFLite has no 1-D or 3-D pooling builtin.
- onnxruntime: its NHWC pools, the com.microsoft contrib ops: NhwcMaxPool (int8/uint8) and
  QLinearAveragePool with ``channels_last`` (quantized). It has no float NHWC pooling.
- torch: ``torch.nn.functional`` on a channels_last (channels_last_3d) tensor.

Every peer's result is checked against the workload's NumPy reference (``workloads.reference``)
before it is timed; one that differs is not timed and the report says why.
"""

from __future__ import annotations

import importlib
import time

import numpy as np

from . import peers
from .peers import NotAvailable
from .summary import geomean, short_reason
from .workloads import (
    Workload, channel_first_twin, relax_module, to_channel_first, to_channel_last, window,
)

PEERS = ("tvm_pool", "tvm", "litert", "onnxruntime", "torch")
CHANNEL_FIRST = "channel_first"  # tvm_pool on the workload's channel-first twin, timed alongside

# The optional modules a peer imports (a peer missing one is "not installed"); a TFLite model
# (LiteRT's, and the TFLite workloads' for tvm_pool and stock TVM) needs the tflite package too.
OPTIONAL_MODULES = {"litert": ("ai_edge_litert.interpreter", "tflite"), "onnxruntime": ("onnxruntime",),
                    "torch": ("torch",)}
# LiteRT's Python interpreter raises ValueError for a model it cannot load or a tensor it
# cannot set, and RuntimeError when allocating or invoking fails.
LITERT_ERRORS = (RuntimeError, ValueError)
# Float averages are checked to float32 rounding (tvm_pool and the others add in other orders).
RTOL, ATOL = 1e-5, 1e-6

# Issue 20's targets: tvm_pool's channel-last time over its channel-first twin's (geometric mean,
# worst workload), and its speedup over LiteRT/XNNPACK (geometric mean, worst workload).
TARGETS = {"geomean_vs_channel_first": ("<=", 1.1), "max_vs_channel_first": ("<=", 1.3),
           "geomean_speedup_litert": (">=", 1.5), "min_speedup_litert": (">=", 1.0)}


def runtime_errors(peer: str) -> tuple[type[Exception], ...]:
    """What ``peer``'s runtime raises when it refuses or fails (``peers.runtime_errors`` plus
    LiteRT and the channel-first twin)."""
    if peer == "litert":
        return LITERT_ERRORS
    if peer == CHANNEL_FIRST:
        return peers.runtime_errors("tvm_pool")
    return peers.runtime_errors(peer)


def start(peer: str, w: Workload, x: np.ndarray, expected: np.ndarray, threads: int):
    """``(run, compile_s)`` of ``peer`` (or CHANNEL_FIRST) on channel-last workload ``w`` and
    input ``x``, after checking its result against ``expected``. Raises NotAvailable."""
    for module in OPTIONAL_MODULES.get(peer, ()) + (("tflite",) if w.tflite_padding else ()):
        try:
            importlib.import_module(module)
        except ImportError as err:
            raise NotAvailable(f"not installed ({short_reason(err)})") from err
    try:
        run, output, compile_s = STARTERS[peer](w, x, threads)
        got = output()
    except runtime_errors(peer) as err:
        raise NotAvailable(f"failed: {short_reason(err)}") from err
    check(got, expected, w)
    return run, compile_s


def check(got: np.ndarray, expected: np.ndarray, w: Workload) -> None:
    """NotAvailable unless ``got`` is the reference: max pools and integer averages exactly,
    float averages to float32 rounding."""
    got = np.asarray(got)
    if got.shape != expected.shape or got.dtype != expected.dtype:
        raise NotAvailable(f"wrong result {got.dtype}{list(got.shape)} (expected {expected.dtype}{list(expected.shape)}), "
                           "not timed")
    if w.op == "MaxPool" or np.issubdtype(got.dtype, np.integer):
        bad = got != expected
    else:
        bad = ~np.isclose(got, expected, rtol=RTOL, atol=ATOL)
    if bad.any():
        off = np.abs(got[bad].astype(np.float64) - expected[bad].astype(np.float64)).max()
        raise NotAvailable(f"wrong values ({np.count_nonzero(bad)} of {got.size} differ from the reference, "
                           f"by up to {off:.3g}), not timed")


def summary(rows: list[dict]) -> dict:
    """The channel-last rows and what the report says of them: the geometric means and worst
    cases of tvm_pool's channel-last / channel-first ratio (and of the same ratio on each
    turn's first call, not a target) and of its speedups over LiteRT and over the best peer,
    and whether each of TARGETS is met (None where nothing was measured)."""
    cf = [r["vs_channel_first"] for r in rows if "vs_channel_first" in r]
    first = [r["first_call_vs_channel_first"] for r in rows if "first_call_vs_channel_first" in r]
    lite = [r["speedup_litert"] for r in rows if "speedup_litert" in r]
    out = {"rows": rows,
           "geomean_vs_channel_first": geomean(cf), "max_vs_channel_first": max(cf, default=None),
           "geomean_first_call_vs_channel_first": geomean(first),
           "max_first_call_vs_channel_first": max(first, default=None),
           "geomean_speedup_litert": geomean(lite), "min_speedup_litert": min(lite, default=None),
           "geomean_speedup": geomean([r["speedup"] for r in rows if "speedup" in r])}
    out["targets_met"] = {k: _meets(out[k], *TARGETS[k]) for k in TARGETS}
    return out


def _meets(value, relation: str, bound: float):
    if value is None:
        return None
    return value <= bound if relation == "<=" else value >= bound


# --------------------------------------------------------------------------------------------
# tvm_pool, its channel-first twin, stock TVM
# --------------------------------------------------------------------------------------------


def _compiled(mod, build, x):
    """``(run, output, compile_s)`` of a Relax module built by ``build``."""
    start_s = time.perf_counter()
    ex = build(mod)
    compile_s = time.perf_counter() - start_s
    run = peers._tvm_runner(ex, x)  # pylint: disable=protected-access
    return run, lambda: run().numpy(), compile_s


def _tvm_pool_build(mod):
    import tvm_pool  # pylint: disable=import-outside-toplevel

    return tvm_pool.compile(mod, target="host")


def _stock_build(mod):
    import tvm  # pylint: disable=import-outside-toplevel

    from tvm_pool.targets import host_target  # pylint: disable=import-outside-toplevel

    return tvm.compile(mod, target=host_target())


def peer_tvm_pool(w, x, threads):  # pylint: disable=unused-argument
    """tvm_pool.compile of the Relax module; a TFLite workload through tvm_pool.from_tflite."""
    if w.tflite_padding is None:
        return _compiled(relax_module(w), _tvm_pool_build, x)
    import tvm_pool  # pylint: disable=import-outside-toplevel

    if not hasattr(tvm_pool, "from_tflite"):
        raise NotAvailable("tvm_pool.from_tflite is not in this checkout")
    from tvm_pool.tflite.models import load_model  # pylint: disable=import-outside-toplevel

    return _compiled(tvm_pool.from_tflite(load_model(tflite_model(w))), _tvm_pool_build, x)


def peer_channel_first(w, x, threads):  # pylint: disable=unused-argument
    """tvm_pool on the channel-first twin (the same data, transposed once before timing); its
    output is turned back to channel-last for the check, outside the timed call."""
    run, output, compile_s = _compiled(relax_module(channel_first_twin(w)), _tvm_pool_build, to_channel_first(x))
    return run, lambda: to_channel_last(output()), compile_s


def peer_tvm(w, x, threads):  # pylint: disable=unused-argument
    """Stock TVM 0.27: tvm.compile of the Relax module; a TFLite workload through its
    from_tflite."""
    if w.tflite_padding is None:
        return _compiled(relax_module(w), _stock_build, x)
    from tvm.relax.frontend.tflite import from_tflite  # pylint: disable=import-outside-toplevel

    from tvm_pool.tflite.models import load_model  # pylint: disable=import-outside-toplevel

    return _compiled(from_tflite(load_model(tflite_model(w))), _stock_build, x)


# --------------------------------------------------------------------------------------------
# LiteRT
# --------------------------------------------------------------------------------------------


def peer_litert(w, x, threads):
    """LiteRT's interpreter, ``threads`` threads, XNNPACK as it applies by default. The input is
    set once; a timed call is one ``invoke`` (as TVM's calls take a tensor already in place)."""
    from ai_edge_litert.interpreter import Interpreter  # pylint: disable=import-outside-toplevel

    interp = Interpreter(model_content=tflite_model(w), num_threads=threads)
    interp.allocate_tensors()
    interp.set_tensor(interp.get_input_details()[0]["index"], x)
    out = interp.get_output_details()[0]["index"]

    def output():
        interp.invoke()
        return interp.get_tensor(out)

    return interp.invoke, output, None


def tflite_model(w: Workload) -> bytes:
    """The single-op TFLite model of a 2-D channel-last workload (input ``x0``): its pool, a
    global average as a VALID average over the plane (XNNPACK ran it in half MEAN's time here),
    and pads TFLite's SAME/VALID cannot say as PADV2 (-inf) before a VALID max pool."""
    from tvm_pool.tflite import models  # pylint: disable=import-outside-toplevel

    if len(w.shape) != 4:
        raise NotAvailable(f"TFLite has no {len(w.shape) - 2}-D pooling builtin")
    kernel, strides, pads = window(w)
    padding, explicit = tflite_padding(w)
    quant = models.Quant(*w.quant) if w.quant else None
    op = "MAX_POOL_2D" if w.op == "MaxPool" else "AVERAGE_POOL_2D"
    m = models.ModelBuilder()
    source = m.input("x0", w.shape, w.dtype, quant)
    shape = tuple(w.shape)
    if explicit:
        source, shape = _padv2(m, source, w, pads)
    case = models.PoolCase(op, shape, tuple(kernel), tuple(strides), padding, dtype=w.dtype, in_quant=quant,
                           out_quant=quant)
    m.outputs.append(models.add_pool(m, case, source, "y0"))
    return m.finish()


def tflite_padding(w: Workload) -> tuple[str, bool]:
    """(TFLite padding, whether the pads need an explicit PADV2 first)."""
    if w.tflite_padding is not None:
        return w.tflite_padding, False
    kernel, strides, pads = window(w)
    if not any(pads):
        return "VALID", False
    from tvm_pool.tflite.formulas import pool_geometry  # pylint: disable=import-outside-toplevel

    same = pool_geometry("SAME", w.shape[1:3], kernel, strides)[0]
    if pads == same and not w.attrs.get("count_include_pad", 0):
        return "SAME", False  # TFLite's averages count the taps in the data only
    if w.op == "MaxPool":
        return "VALID", True
    raise NotAvailable(f"TFLite pads SAME or VALID only (pads {pads}, count_include_pad "
                       f"{w.attrs.get('count_include_pad', 0)})")


def _padv2(m, source: int, w: Workload, pads):
    """PADV2 of ``source`` by ``pads`` (top, left, bottom, right) with -inf (the max's identity)."""
    import tflite  # pylint: disable=import-outside-toplevel
    from tflite.BuiltinOperator import BuiltinOperator  # pylint: disable=import-outside-toplevel
    from tflite.BuiltinOptions import BuiltinOptions  # pylint: disable=import-outside-toplevel

    paddings = np.array([[0, 0], [pads[0], pads[2]], [pads[1], pads[3]], [0, 0]], np.int32)
    shape = tuple(int(n + p.sum()) for n, p in zip(w.shape, paddings))
    fill = np.array(-np.inf if w.dtype.startswith("float") else np.iinfo(w.dtype).min, w.dtype)
    inputs = [source, m.tensor("paddings", paddings.shape, "int32", data=paddings),
              m.tensor("pad_value", (), w.dtype, data=fill)]
    out = m.tensor("padded", shape, w.dtype)

    def options(b):
        tflite.PadV2OptionsStart(b)
        return tflite.PadV2OptionsEnd(b)

    m.operator(BuiltinOperator.PADV2, 1, inputs, [out], BuiltinOptions.PadV2Options, options)
    return out, shape


# --------------------------------------------------------------------------------------------
# onnxruntime
# --------------------------------------------------------------------------------------------


def peer_onnxruntime(w, x, threads):
    """onnxruntime's NHWC contrib ops, ``threads`` intra-op threads."""
    model = ort_model(w)
    try:
        sess = peers.ort_session(model, threads)
    except runtime_errors("onnxruntime") as err:
        if w.op == "MaxPool" and not np.issubdtype(np.dtype(w.dtype), np.integer):
            raise NotAvailable(f"no float NHWC max pool (com.microsoft.NhwcMaxPool takes int8/uint8; "
                               f"onnxruntime: {short_reason(err)})") from err
        raise
    feed = {"x": x}
    return (lambda: sess.run(None, feed)), (lambda: sess.run(None, feed)[0]), None


def ort_model(w: Workload):
    """The ONNX model of ``w`` on onnxruntime's NHWC contrib ops: com.microsoft.NhwcMaxPool
    for a max (onnxruntime refuses float), QLinearAveragePool with ``channels_last`` for a
    quantized average; NotAvailable for a float average, which has no NHWC kernel."""
    import onnx  # pylint: disable=import-outside-toplevel
    from onnx import helper  # pylint: disable=import-outside-toplevel

    from .workloads import _onnx_dtype  # pylint: disable=import-outside-toplevel

    kernel, strides, pads = window(w)
    integer = np.issubdtype(np.dtype(w.dtype), np.integer)
    inits, inputs = [], ["x"]
    if w.op == "MaxPool":
        node = helper.make_node("NhwcMaxPool", inputs, ["y"], domain="com.microsoft", kernel_shape=kernel,
                                strides=strides, pads=pads)
    elif integer and w.quant:
        scale, zero = w.quant
        inits = [helper.make_tensor("scale", onnx.TensorProto.FLOAT, [], [scale]),
                 helper.make_tensor("zero", _onnx_dtype(w.dtype), [], [zero])]
        node = helper.make_node("QLinearAveragePool", ["x", "scale", "zero", "scale", "zero"], ["y"],
                                domain="com.microsoft", kernel_shape=kernel, strides=strides, pads=pads,
                                count_include_pad=int(w.attrs.get("count_include_pad", 0)), channels_last=1)
    else:
        raise NotAvailable("no float NHWC average pool (com.microsoft.QLinearAveragePool takes int8/uint8)")
    graph = helper.make_graph([node], w.name, [helper.make_tensor_value_info("x", _onnx_dtype(w.dtype), w.shape)],
                              [helper.make_tensor_value_info("y", _onnx_dtype(w.dtype), None)], initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 22), helper.make_opsetid("com.microsoft", 1)])
    model.ir_version = 10
    return model


# --------------------------------------------------------------------------------------------
# PyTorch
# --------------------------------------------------------------------------------------------


def peer_torch(w, x, threads):
    """``torch.nn.functional``'s pool (``peers.torch_call``) on ``x`` as a channels_last tensor
    (a view of the same memory, no copy), ``threads`` threads."""
    import torch  # pylint: disable=import-outside-toplevel

    if np.issubdtype(x.dtype, np.integer):
        raise NotAvailable(f"{x.dtype} pooling not supported by torch CPU kernels")
    torch.set_num_threads(threads)
    rank = x.ndim - 2
    t = torch.from_numpy(x).permute(0, rank + 1, *range(1, rank + 1))  # NCHW view of NHWC memory
    call = peers.torch_call(channel_first_twin(w), t)
    return call, lambda: call().permute(0, *range(2, rank + 2), 1).numpy(), None


STARTERS = {"tvm_pool": peer_tvm_pool, "tvm": peer_tvm, "litert": peer_litert, "onnxruntime": peer_onnxruntime,
            "torch": peer_torch, CHANNEL_FIRST: peer_channel_first}
