"""The pooling layers of torchvision's classification models, as benchmark workloads (issue 37):
``tvm-pool bench --layers``.

**Tracing** (:func:`trace`): every classification model of ``torchvision.models`` runs once,
with ``weights=None``, on a batch-1 input (224x224; Inception v3 299x299) while
``torch.nn.functional``'s pooling functions (:data:`FUNCTIONS`) are recorded by a
``TorchFunctionMode`` (:func:`recorder`). The ``nn`` pooling modules call these same functions,
so the mode catches both the modules and the models' direct functional calls (Inception's ``F.max_pool2d``, DenseNet's final
``F.adaptive_avg_pool2d``). Models are built and run on PyTorch's meta device: shapes only, no
weights and no arithmetic, a second for the largest model (one whose builder needs real tensors,
RegNet's, is built on the CPU and moved to meta). Equal layers (function, input shape without
the batch, every argument) are merged, and each names the models it comes from. A model's global
average written as ``x.mean([2, 3])`` (MNASNet, ShuffleNet v2) is a reduction, not a pooling call,
and is not a layer here.

The traced list is kept in ``bench/layers.json`` (:data:`LAYERS_PATH`), so that a benchmark run
does not trace; ``tvm-pool bench --retrace`` or ``python -m tvm_pool.bench.layers`` writes it
again.

**Workloads** (:func:`to_workload`): each layer at batch 1 and 8 (:data:`BATCHES`) as the ONNX
operator the PyTorch exporter gives it: ``max_pool*`` -> MaxPool, ``avg_pool*`` -> AveragePool
(``count_include_pad``, ``ceil_mode``), an adaptive pool to 1 -> GlobalAveragePool /
GlobalMaxPool, an adaptive pool whose output divides its input -> AveragePool / MaxPool with
kernel = stride = input / output, ``lp_pool*`` of an even p -> LpPool; ``ceil_mode`` only where it
adds a window. What ONNX cannot say the same way (any other adaptive pool, ``divisor_override``,
max-pool indices, which PyTorch numbers per plane, an Lp pool of odd p or with ceil_mode) is a
torch-road workload (``Workload.road == "torch"``): the functional call itself through
``torch.export``, run by tvm_pool, stock TVM and PyTorch eager (onnxruntime and OpenVINO have no
model to run). ``python -m tvm_pool.bench.layers --check`` runs every ONNX workload of the list
with onnxruntime against its layer's PyTorch call.
PyTorch is timed on the layer's own call (``Workload.torch_op``), as the model makes it, not on
the ONNX operator's PyTorch twin.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import inspect
import json
import math
import os
import sys
import time
import warnings
import zlib

from .workloads import Workload

LAYERS_PATH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "layers.json")
BATCHES = (1, 8)
IMAGE_SIZE = 224
# Models whose input is not IMAGE_SIZE square.
IMAGE_SIZES = {"inception_v3": 299}
# How many layers --quick times (each at every batch of BATCHES): see quick_layers.
QUICK_LAYERS = 5

# torch.nn.functional's pooling functions, by rank: name -> its parameters after the input,
# with their defaults (the builtins among them have no signature to read).
_MAX = (("kernel_size", inspect.Parameter.empty), ("stride", None), ("padding", 0), ("dilation", 1),
        ("ceil_mode", False), ("return_indices", False))
_AVG = (("kernel_size", inspect.Parameter.empty), ("stride", None), ("padding", 0), ("ceil_mode", False),
        ("count_include_pad", True))
_ADAPTIVE_AVG = (("output_size", inspect.Parameter.empty),)
_ADAPTIVE_MAX = (("output_size", inspect.Parameter.empty), ("return_indices", False))
_LP = (("norm_type", inspect.Parameter.empty), ("kernel_size", inspect.Parameter.empty), ("stride", None),
       ("ceil_mode", False))
FUNCTIONS = {}
for _rank in (1, 2, 3):
    FUNCTIONS[f"max_pool{_rank}d"] = _MAX
    FUNCTIONS[f"max_pool{_rank}d_with_indices"] = _MAX
    FUNCTIONS[f"avg_pool{_rank}d"] = _AVG + ((("divisor_override", None),) if _rank > 1 else ())
    FUNCTIONS[f"adaptive_avg_pool{_rank}d"] = _ADAPTIVE_AVG
    FUNCTIONS[f"adaptive_max_pool{_rank}d"] = _ADAPTIVE_MAX
    FUNCTIONS[f"adaptive_max_pool{_rank}d_with_indices"] = _ADAPTIVE_MAX
    FUNCTIONS[f"lp_pool{_rank}d"] = _LP


class NotMapped(Exception):
    """A layer has no workload; the message says why (the report lists it)."""


# --------------------------------------------------------------------------------------------
# tracing
# --------------------------------------------------------------------------------------------


def _signature(params) -> inspect.Signature:
    kind = inspect.Parameter.POSITIONAL_OR_KEYWORD
    return inspect.Signature([inspect.Parameter("input", kind)] +
                             [inspect.Parameter(name, kind, default=default) for name, default in params])


def _rank(fn: str) -> int:
    return int(fn.split("pool")[1][0])


def _tuple(value, rank: int) -> list:
    """A kernel / stride / padding / output size argument as a list of ``rank`` ints."""
    if isinstance(value, (list, tuple)):
        values = list(value)
        return values * rank if len(values) == 1 else values
    return [value] * rank


def normalize(fn: str, args: tuple, kwargs: dict, in_shape, out_shape) -> dict:
    """One recorded call of ``torch.nn.functional.<fn>`` as a layer (without ``models``): the
    function (``*_with_indices`` as the function with ``return_indices``), the input and output
    shapes without the batch, and every argument, defaults filled in and window sizes as lists
    of one int per spatial axis (an adaptive output size's None as the input's size)."""
    bound = _signature(FUNCTIONS[fn]).bind(None, *args, **kwargs)
    bound.apply_defaults()
    params = dict(bound.arguments)
    del params["input"]
    if fn.endswith("_with_indices"):
        fn = fn[: -len("_with_indices")]
        params["return_indices"] = True
    rank = _rank(fn)
    spatial = list(in_shape[-rank:])
    for key in ("kernel_size", "stride", "padding", "dilation"):
        if key in params:
            value = params["kernel_size"] if key == "stride" and params[key] in (None, [], ()) else params[key]
            params[key] = [int(v) for v in _tuple(value, rank)]
    if "output_size" in params:
        params["output_size"] = [int(n if o is None else o) for o, n in zip(_tuple(params["output_size"], rank), spatial)]
    for key in ("ceil_mode", "count_include_pad", "return_indices"):
        if key in params:
            params[key] = bool(params[key])
    if "norm_type" in params:
        params["norm_type"] = float(params["norm_type"])
    return {"fn": fn, "shape": [int(n) for n in in_shape[1:]], "out_shape": [int(n) for n in out_shape[1:]],
            "params": params}


def recorder():
    """A ``torch.overrides.TorchFunctionMode``: within ``with``, every call of one of
    ``torch.nn.functional``'s pooling functions (:data:`FUNCTIONS`; the ``nn`` modules call them
    too) is recorded in its ``calls`` (see :func:`normalize`) and then run. A pooling function
    called inside another (``lp_pool2d`` calls ``avg_pool2d``) is not recorded again: the mode is
    off while its own ``__torch_function__`` runs."""
    from torch.overrides import TorchFunctionMode  # pylint: disable=import-outside-toplevel

    class Recorder(TorchFunctionMode):
        def __init__(self):
            super().__init__()
            self.calls: list[dict] = []

        def __torch_function__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            out = func(*args, **kwargs)
            name = getattr(func, "__name__", "")
            if name in FUNCTIONS:
                x, rest = (args[0], args[1:]) if args else (kwargs["input"], ())
                kwargs = {k: v for k, v in kwargs.items() if k != "input"}
                y = out[0] if isinstance(out, tuple) else out
                layer = normalize(name, rest, kwargs, tuple(x.shape), tuple(y.shape))
                layer["dtype"] = str(x.dtype).replace("torch.", "")
                self.calls.append(layer)
            return out

    return Recorder()


def classification_models() -> list[str]:
    """The names of every classification model of ``torchvision.models`` (the quantized,
    detection, segmentation, video and optical-flow models are in submodules of their own)."""
    from .torchvision_import import import_torchvision  # pylint: disable=import-outside-toplevel

    tv = import_torchvision()
    return sorted(tv.models.list_models(module=tv.models))


def image_size(name: str) -> int:
    return IMAGE_SIZES.get(name, IMAGE_SIZE)


def trace_model(name: str) -> list[dict]:
    """The pooling calls of model ``name`` (``weights=None``, eval mode) on a batch-1 input of
    its size, in call order: on the meta device where the model builds there, else built on the
    CPU and moved to meta (RegNet's builder computes its widths with tensors)."""
    import torch  # pylint: disable=import-outside-toplevel

    from .torchvision_import import import_torchvision  # pylint: disable=import-outside-toplevel

    tv = import_torchvision()
    size = image_size(name)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # init_weights / aux_logits notices of weights=None
        try:
            with torch.device("meta"):
                model = tv.models.get_model(name, weights=None)
        except (NotImplementedError, RuntimeError):
            torch.manual_seed(0)
            model = tv.models.get_model(name, weights=None).to("meta")
        model.eval()
        x = torch.empty(1, 3, size, size, device="meta")
        with recorder() as rec, torch.no_grad():
            model(x)
    return rec.calls


def layer_key(layer: dict) -> str:
    """What makes two layers the same: the function, its input shape (batch left out), dtype
    and every argument."""
    return json.dumps([layer["fn"], layer["shape"], layer.get("dtype", "float32"), layer["params"]], sort_keys=True)


def merge(traced: dict) -> list[dict]:
    """The unique layers of ``{model: [calls]}``, in first-seen order (models in the order
    given), each with ``models`` (the models it comes from, each once), ``uses`` (its calls in
    all of them) and its ``name``."""
    layers: dict = {}
    for model, calls in traced.items():
        for call in calls:
            layer = layers.setdefault(layer_key(call), {**call, "models": [], "uses": 0})
            layer["uses"] += 1
            if model not in layer["models"]:
                layer["models"].append(model)
    out = list(layers.values())
    names = [layer_name(layer) for layer in out]
    for layer, name in zip(out, names):
        # two layers that differ only where the name does not look (dtype, indices) get the key's hash
        layer["name"] = name if names.count(name) == 1 else f"{name}_{zlib.crc32(layer_key(layer).encode()):08x}"
    return out


def _dims(values) -> str:
    return str(values[0]) if len(set(values)) == 1 else "x".join(str(v) for v in values)


def layer_name(layer: dict) -> str:
    """A short unique name: the function, the input shape without batch, the window
    (``k3s2p1``, ``d2`` for a dilation, ``ceil``, ``excl`` for an average not counting its
    padding, ``div9`` for a divisor override) or the adaptive output size (``to7``)."""
    p = layer["params"]
    parts = [layer["fn"], "x".join(str(n) for n in layer["shape"])]
    if "output_size" in p:
        parts.append(f"to{_dims(p['output_size'])}")
    else:
        window = f"k{_dims(p['kernel_size'])}s{_dims(p['stride'])}"
        if "norm_type" in p:
            window = f"p{p['norm_type']:g}{window}"
        if any(p.get("padding", [0])):
            window += f"p{_dims(p['padding'])}"
        if any(d != 1 for d in p.get("dilation", [1])):
            window += f"d{_dims(p['dilation'])}"
        parts.append(window)
        if p.get("ceil_mode"):
            parts.append("ceil")
        if "count_include_pad" in p and not p["count_include_pad"] and any(p["padding"]):
            parts.append("excl")
        if p.get("divisor_override"):
            parts.append(f"div{p['divisor_override']}")
    if p.get("return_indices"):
        parts.append("indices")
    if layer.get("dtype", "float32") != "float32":
        parts.append(layer["dtype"])
    return "_".join(parts)


def trace(models=None, log=sys.stderr) -> dict:
    """Traces ``models`` (every classification model by default): ``{"layers": the unique
    layers (:func:`merge`), "models": {model: its pooling calls}, "no_pooling": the models
    without any, "image_size", "image_sizes", "torch", "torchvision"}``."""
    import torch  # pylint: disable=import-outside-toplevel

    traced = {}
    for name in models or classification_models():
        start = time.perf_counter()
        traced[name] = trace_model(name)
        print(f"traced {name}: {len(traced[name])} pooling call(s), {time.perf_counter() - start:.1f} s", file=log)
    return {"torch": torch.__version__, "torchvision": importlib.metadata.version("torchvision"), "image_size": IMAGE_SIZE,
            "image_sizes": IMAGE_SIZES, "models": {m: len(c) for m, c in traced.items()},
            "no_pooling": [m for m, c in traced.items() if not c], "layers": merge(traced)}


def write_layers(data: dict, path: str | None = None) -> None:
    with open(path or LAYERS_PATH, "w", encoding="utf-8") as fh:
        json.dump(data, fh, indent=1)
        fh.write("\n")


def load_layers(path: str | None = None) -> dict:
    """The traced layers (``path``, by default :data:`LAYERS_PATH`: written by :func:`trace`)."""
    path = path or LAYERS_PATH
    if not os.path.exists(path):
        raise FileNotFoundError(f"{path} is missing: run `tvm-pool bench --retrace` (python -m tvm_pool.bench.layers)")
    with open(path, encoding="utf-8") as fh:
        return json.load(fh)


# --------------------------------------------------------------------------------------------
# layers as workloads
# --------------------------------------------------------------------------------------------


def _pooled(n: int, k: int, s: int, p: int, d: int, ceil: bool) -> int:
    """PyTorch's output size along one axis (pooling_output_shape): with ceil_mode, a last
    window that would start in the right padding is dropped."""
    span = n + 2 * p - d * (k - 1) - 1
    out = (-(-span // s) if ceil else span // s) + 1
    if ceil and (out - 1) * s >= n + p:
        out -= 1
    return out


def _onnx_pooled(n: int, k: int, s: int, p: int, d: int, ceil: bool) -> int:
    """ONNX's output size along one axis (MaxPool / AveragePool, opset 22, explicit pads)."""
    span = n + 2 * p - d * (k - 1) - 1
    return (math.ceil(span / s) if ceil else span // s) + 1


def torch_op(layer: dict) -> dict:
    """The layer's own call: ``{"fn": its torch.nn.functional name, "args": [], "kwargs": its
    arguments}`` (``Workload.torch_op``, what the PyTorch peer times)."""
    return {"fn": layer["fn"], "args": [], "kwargs": dict(layer["params"])}


def to_workload(layer: dict, batch: int) -> Workload:
    """``layer`` at ``batch`` as a workload (see the module's docstring); NotMapped says why
    a layer has none."""
    fn, p = layer["fn"], layer["params"]
    rank = _rank(fn)
    spatial = layer["shape"][-rank:]
    common = dict(name=f"{layer['name']}_b{batch}", source=", ".join(layer["models"]),
                  shape=[batch, *layer["shape"]], dtype=layer.get("dtype", "float32"), torch_op=torch_op(layer))
    if common["dtype"] not in ("float32", "float16", "float64"):
        raise NotMapped(f"dtype {common['dtype']}")

    def torch_road(reason: str) -> Workload:
        attrs = {k: v for k, v in p.items() if k != "return_indices"}
        return Workload(op=fn, attrs=attrs, indices=bool(p.get("return_indices")), road="torch",
                        road_reason=reason, **common)

    if p.get("return_indices"):
        return torch_road("indices numbered per plane (ONNX numbers them over the tensor)")
    if fn.startswith("adaptive_"):
        kind = "AveragePool" if fn.startswith("adaptive_avg") else "MaxPool"
        out = p["output_size"]
        if all(o == 1 for o in out):
            return Workload(op=f"Global{kind}", attrs={}, **common)
        if all(n % o == 0 for n, o in zip(spatial, out)):
            k = [n // o for n, o in zip(spatial, out)]
            return Workload(op=kind, attrs=dict(kernel_shape=k, strides=k), **common)
        return torch_road("adaptive windows of unequal sizes (the output does not divide the input)")
    k, s = p["kernel_size"], p["stride"]
    pads = p.get("padding", [0] * rank)
    dil = p.get("dilation", [1] * rank)
    ceil = bool(p.get("ceil_mode"))
    torch_out = [_pooled(n, *a, ceil) for n, *a in zip(spatial, k, s, pads, dil)]
    attrs = dict(kernel_shape=k, strides=s)
    if any(pads):
        attrs["pads"] = pads + pads
    # ceil_mode only where it adds a window: where PyTorch drops a last window that would start
    # in the right padding, its output is the floor mode's, and ONNX's formula (which keeps it)
    # is not asked
    if ceil and torch_out != [_pooled(n, *a, False) for n, *a in zip(spatial, k, s, pads, dil)]:
        assert torch_out == [_onnx_pooled(n, *a, True) for n, *a in zip(spatial, k, s, pads, dil)]
        attrs["ceil_mode"] = 1
    if fn.startswith("max_pool"):
        if any(d != 1 for d in dil):
            attrs["dilations"] = dil
        return Workload(op="MaxPool", attrs=attrs, **common)
    if fn.startswith("avg_pool"):
        if p.get("divisor_override"):
            return torch_road("divisor_override (ONNX has none)")
        attrs["count_include_pad"] = int(bool(p["count_include_pad"]))
        return Workload(op="AveragePool", attrs=attrs, **common)
    if fn.startswith("lp_pool"):
        norm = p["norm_type"]
        if norm != int(norm) or int(norm) % 2:
            return torch_road("an odd or fractional p (PyTorch raises x, ONNX's LpPool |x|, to the power p)")
        if "ceil_mode" in attrs:
            return torch_road("ceil_mode of an Lp pool (PyTorch scales the overhang window's mean by the whole kernel)")
        return Workload(op="LpPool", attrs=dict(attrs, p=int(norm)), **common)
    raise NotMapped(f"no workload for {fn}")


def quick_layers(layers: list[dict], n: int = QUICK_LAYERS) -> list[dict]:
    """A handful of layers for --quick: the most shared layer (most models, then most uses) of
    each kind (a PyTorch function and the workload it becomes: max_pool2d -> MaxPool,
    adaptive_avg_pool2d -> GlobalAveragePool, adaptive_avg_pool2d -> AveragePool, ..., the torch
    road), then the next most shared, up to ``n``; in the list's order."""
    def kind(layer):
        try:
            w = to_workload(layer, 1)
        except NotMapped:
            return None
        return (layer["fn"], w.op, w.road)

    ranked = sorted(layers, key=lambda layer: (-len(layer["models"]), -layer["uses"], layer["name"]))
    firsts, seen = [], set()
    for layer in ranked:
        k = kind(layer)
        if k is not None and k not in seen:
            seen.add(k)
            firsts.append(layer)
    rest = [layer for layer in ranked if layer not in firsts and kind(layer) is not None]
    chosen = (firsts + rest)[:n]
    return [layer for layer in layers if layer in chosen]


def layer_workloads(layers: list[dict], quick: bool = False, only=None, batches=BATCHES):
    """``(workloads, skipped)``: every layer (a handful with ``quick``) at every batch, those
    ``only`` names (a case, ``<layer>_b<batch>``, or a layer, both batches) when given; and
    ``[(layer name, reason)]`` of the layers without a workload."""
    chosen = quick_layers(layers) if quick else layers
    workloads, skipped = [], []
    for layer in chosen:
        for batch in batches:
            try:
                w = to_workload(layer, batch)
            except NotMapped as err:
                if batch == batches[0]:
                    skipped.append((layer["name"], str(err)))
                continue
            if not only or w.name in only or layer["name"] in only:
                workloads.append(w)
    return workloads, skipped


def known_names(layers: list[dict]) -> set:
    """Every name ``--layers --only`` takes: each layer's and each case's."""
    return {layer["name"] for layer in layers} | {f"{layer['name']}_b{b}" for layer in layers for b in BATCHES}


# --------------------------------------------------------------------------------------------
# checking the mapping, and the module's entry point (re-tracing)
# --------------------------------------------------------------------------------------------


def check(layers: list[dict], batch: int = 1) -> list[str]:
    """Each layer's ONNX workload run by onnxruntime against the layer's own PyTorch call on the
    same input (batch ``batch``): the problems found, one line each (none when the mapping is
    right). Torch-road layers have no ONNX model and are left out."""
    import numpy as np  # pylint: disable=import-outside-toplevel
    import torch  # pylint: disable=import-outside-toplevel

    from .peers import ort_session, torch_call  # pylint: disable=import-outside-toplevel
    from .workloads import build_model, make_input  # pylint: disable=import-outside-toplevel

    problems = []
    for layer in layers:
        try:
            w = to_workload(layer, batch)
        except NotMapped:
            continue
        if w.road != "onnx":
            continue
        x = make_input(w)
        got = ort_session(build_model(w), 1).run(None, {"x": x})[0]
        want = torch_call(w, torch.from_numpy(x))().numpy()
        if got.shape != want.shape:
            problems.append(f"{w.name}: onnxruntime {got.shape}, PyTorch {want.shape}")
        elif not np.allclose(got, want, rtol=1e-5, atol=1e-6):
            problems.append(f"{w.name}: differs by {float(np.abs(got - want).max()):.3g}")
    return problems


def main(argv=None) -> int:
    """``python -m tvm_pool.bench.layers``: trace the models again and write bench/layers.json
    (``--models``: only those; ``--check``: run each layer's ONNX mapping against PyTorch)."""
    p = argparse.ArgumentParser(prog="python -m tvm_pool.bench.layers", description=__doc__.split("\n\n")[0])
    p.add_argument("--models", default=None, help="comma-separated model names (default: every classification model)")
    p.add_argument("--output", default=None, help=f"the layer list to write (default {LAYERS_PATH})")
    p.add_argument("--check", action="store_true",
                   help="do not trace: check every layer's ONNX workload against PyTorch (onnxruntime, batch 1)")
    args = p.parse_args(sys.argv[1:] if argv is None else argv)
    if args.check:
        problems = check(load_layers(args.output)["layers"])
        print("\n".join(problems) or "every ONNX workload matches its PyTorch layer")
        return 1 if problems else 0
    models = [m.strip() for m in args.models.split(",") if m.strip()] if args.models else None
    data = trace(models)
    write_layers(data, args.output)
    print(f"{len(data['layers'])} unique pooling layers from {len(data['models']) - len(data['no_pooling'])} of "
          f"{len(data['models'])} models -> {args.output or LAYERS_PATH}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
