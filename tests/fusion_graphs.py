"""Seeded random ONNX graphs around a pooling op, for the fusion differential suite.

Each graph is ``inputs -> producers -> pooling -> consumers`` with the shapes that make
TVM's FuseOps put producers, the pool and its consumers into one PrimFunc:

- producers (0-2, chained): Relu, a BN-like per-channel Mul+Add, Sigmoid, Clip; sometimes the
  producer is also a graph output;
- the pool: MaxPool (with and without Indices, storage_order), AveragePool (count_include_pad,
  ceil_mode, dilations), LpPool (p 1/2/3), GlobalMax/Average/LpPool; kernel, stride, pads,
  SAME_UPPER/SAME_LOWER/VALID, dilation, ceil_mode; 1-D, 2-D and 3-D;
- consumers: none, Relu, Mul, Add with a branch, Concat(axis=1) with 1-2 other branches (the
  Inception pool branch), the output used twice (two consumers, both graph outputs), pool of
  pool, several pools over one producer (concatenated when their shapes agree).

Graphs stay inside what onnxruntime and tvm_pool agree on (docs/conformance.md): explicit pads
below the kernel, no dilations under SAME, no ceil_mode with auto_pad, no NaN, negative SAME
pads (row 4) only where onnxruntime splits them as the ONNX text does, and no ceil-mode window
starting past the data (ONNX's shape inference keeps it, so a Concat with it does not load). Inputs and
constants are small multiples of 1/8 (exact in float16 too), so the producers are exact and
argmax ties are real ties, which both runtimes break the same way (first in scan order).

Every name in a graph starts with ``g<seed>_`` so several graphs combine into one model
(:func:`combine`): one compile serves many graphs.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

import spec_reference
from oracles import IR_VERSION

OPSET = 21  # MaxPool-12, AveragePool-19, LpPool-18, GlobalLpPool-2 (onnxruntime has no GlobalLpPool-22)
ONNX_TYPE = {"float32": TensorProto.FLOAT, "float16": TensorProto.FLOAT16}


@dataclasses.dataclass
class Graph:
    seed: int
    dtype: str
    nodes: list
    inits: dict  # name -> float64 array (cast to the graph dtype when building)
    inputs: list  # (name, shape)
    outputs: list  # (name, is_index)
    steps: list  # readable pieces of the description

    def describe(self) -> str:
        return f"seed={self.seed} {self.dtype}: " + " ; ".join(self.steps)

    def feeds(self, dtype=None):
        rng = np.random.default_rng(self.seed + 7_000_000)
        dtype = dtype or self.dtype
        return {name: (rng.integers(-16, 17, size=shape) / 8.0).astype(dtype) for name, shape in self.inputs}


class _Builder:
    def __init__(self, seed: int, dtype: str):
        self.seed, self.dtype = seed, dtype
        self.rng = np.random.default_rng(seed)
        self.graph = Graph(seed, dtype, [], {}, [], [], [])
        self.count = 0
        self.shapes = {}

    def name(self, what):
        self.count += 1
        return f"g{self.seed}_{what}{self.count}"

    def input(self, shape):
        name = self.name("in")
        self.graph.inputs.append((name, list(shape)))
        self.shapes[name] = list(shape)
        return name

    def output(self, name, is_index=False):
        if name not in [n for n, _ in self.graph.outputs]:
            self.graph.outputs.append((name, is_index))

    def const(self, values):
        name = self.name("c")
        self.graph.inits[name] = np.asarray(values, dtype=np.float64)
        return name

    def node(self, op, inputs, shape, n_out=1, out_shapes=None, **attrs):
        outs = [self.name(op.lower()) for _ in range(n_out)]
        self.graph.nodes.append(helper.make_node(op, inputs, outs, name=self.name(op + "_"), **attrs))
        for o, s in zip(outs, out_shapes or [shape] * n_out):
            self.shapes[o] = list(s)
        return outs if n_out > 1 else outs[0]

    def step(self, text):
        self.graph.steps.append(text)

    # ---- producers ---------------------------------------------------------------------------

    def producer(self, x, kind, label):
        shape = self.shapes[x]
        channels, rank = shape[1], len(shape) - 2
        if kind == "Relu":
            y = self.node("Relu", [x], shape)
            self.step(f"{label}=Relu({x.split('_')[-1]})")
        elif kind == "BN":
            scale = self.rng.integers(2, 7, size=channels) / 4.0 * self.rng.choice([-1, 1], size=channels)
            shift = self.rng.integers(-4, 5, size=channels) / 4.0
            cshape = [channels] + [1] * rank
            m = self.node("Mul", [x, self.const(scale.reshape(cshape))], shape)
            y = self.node("Add", [m, self.const(shift.reshape(cshape))], shape)
            self.step(f"{label}=BN({x.split('_')[-1]})")
        elif kind == "Sigmoid":
            y = self.node("Sigmoid", [x], shape)
            self.step(f"{label}=Sigmoid({x.split('_')[-1]})")
        else:
            lo, hi = sorted(self.rng.integers(-8, 9, size=2) / 8.0)
            hi = hi if hi > lo else lo + 0.5
            y = self.node("Clip", [x, self.const(lo), self.const(hi)], shape)
            self.step(f"{label}=Clip[{lo},{hi}]({x.split('_')[-1]})")
        return y

    def branch(self, shape, label):
        """Another branch of a given shape: a fresh input through BN or Relu (an Inception conv
        branch stand-in)."""
        x = self.input(shape)
        kind = str(self.rng.choice(["BN", "Relu", "BN"]))
        return self.producer(x, kind, label)

    # ---- pools -------------------------------------------------------------------------------

    def pool(self, x, label, allow_indices=True, op=None):
        shape = self.shapes[x]
        rank = len(shape) - 2
        spatial = shape[2:]
        op = op or str(self.rng.choice(
            ["MaxPool"] * 3 + ["MaxPoolIdx"] * 2 + ["AveragePool"] * 3 + ["LpPool"] * 2
            + ["GlobalMaxPool", "GlobalAveragePool", "GlobalLpPool"]))
        if op == "MaxPoolIdx" and not allow_indices:
            op = "MaxPool"
        if op.startswith("Global"):
            attrs = {"p": int(self.rng.choice([1, 2, 3]))} if op == "GlobalLpPool" else {}
            y = self.node(op, [x], shape[:2] + [1] * rank, **attrs)
            self.step(f"{label}={op}{attrs or ''}({x.split('_')[-1]})")
            return [y]
        for _ in range(100):
            attrs = self._window_attrs(op, spatial)
            out = self._out_spatial(shape, attrs)
            if (out is not None and min(out) >= 1 and out == _onnx_inferred(spatial, attrs)
                    and _onnxruntime_runs_negative_same(op, spatial, attrs)):
                break
        else:  # pragma: no cover (a 1x1 window always fits)
            attrs, out = {"kernel_shape": [1] * rank}, spatial
        onnx_op = "MaxPool" if op == "MaxPoolIdx" else op
        out_shape = shape[:2] + out
        n_out = 2 if op == "MaxPoolIdx" else 1
        ys = self.node(onnx_op, [x], out_shape, n_out=n_out, **attrs)
        ys = ys if n_out > 1 else [ys]
        short = ",".join(f"{k}={v}" for k, v in attrs.items())
        self.step(f"{label}={onnx_op}{'+Indices' if n_out > 1 else ''}[{short}]({x.split('_')[-1]}) -> {out_shape}")
        return ys

    def _window_attrs(self, op, spatial):
        rng, rank = self.rng, len(spatial)
        kernel = [int(rng.integers(1, min(n, 4) + 1)) for n in spatial]
        attrs = {"kernel_shape": kernel}
        if rng.random() < 0.75:
            attrs["strides"] = [int(rng.integers(1, 4)) for _ in range(rank)]
        auto_pad = str(rng.choice(["NOTSET"] * 4 + ["SAME_UPPER", "SAME_LOWER", "VALID"]))
        dil = [1] * rank
        if auto_pad in ("NOTSET", "VALID") and rng.random() < 0.3:
            dil = [int(rng.integers(1, 3)) for _ in range(rank)]
            dil = [d if (k - 1) * d + 1 <= n else 1 for k, d, n in zip(kernel, dil, spatial)]
        if any(d > 1 for d in dil):
            attrs["dilations"] = dil
        if auto_pad != "NOTSET":
            attrs["auto_pad"] = auto_pad
        else:
            if rng.random() < 0.6:
                attrs["pads"] = [int(rng.integers(0, k)) for k in kernel] * 1 + [int(rng.integers(0, k)) for k in kernel]
            if rng.random() < 0.35:
                attrs["ceil_mode"] = 1
        if op == "AveragePool" and rng.random() < 0.5:
            attrs["count_include_pad"] = 1
        if op == "MaxPoolIdx" and rng.random() < 0.3:
            attrs["storage_order"] = 1
        if op == "LpPool":
            attrs["p"] = int(rng.choice([1, 2, 3]))
        return attrs

    def _out_spatial(self, shape, attrs):
        rank = len(shape) - 2
        try:
            return list(spec_reference.out_spatial_shape(
                shape, attrs["kernel_shape"], attrs.get("strides", [1] * rank), attrs.get("dilations", [1] * rank),
                attrs.get("pads", [0] * 2 * rank), attrs.get("auto_pad", "NOTSET"), attrs.get("ceil_mode", 0)))
        except (ValueError, ZeroDivisionError):
            return None


CONSUMERS = ("none", "Relu", "Mul", "AddBranch", "Concat", "Twice", "PoolOfPool", "SeveralPools")


def random_graph(seed: int) -> Graph:
    rng = np.random.default_rng(seed)
    dtype = "float16" if rng.random() < 0.15 else "float32"
    b = _Builder(seed, dtype)
    rank = int(rng.choice([1, 2, 2, 2, 3]))
    size_range = {1: (3, 13), 2: (3, 10), 3: (2, 6)}[rank]
    shape = [int(rng.integers(1, 3)), int(rng.integers(1, 5))] + [int(rng.integers(*size_range)) for _ in range(rank)]
    x = b.input(shape)
    b.step(f"x{shape}")
    allow_sigmoid = True
    h = x
    for i in range(int(rng.choice([0, 1, 1, 2]))):
        kinds = ["Relu", "BN", "Sigmoid", "Clip"] if allow_sigmoid else ["Relu", "BN", "Clip"]
        h = b.producer(h, str(rng.choice(kinds)), f"p{i}")
    if h != x and rng.random() < 0.2:
        b.output(h)
        b.step("producer is an output")
    consumer = str(rng.choice(CONSUMERS))
    if dtype == "float16" and any("Sigmoid" in s for s in b.graph.steps):
        # float16 Sigmoid values round differently from the float32 oracle: no Indices on them
        allow_indices = False
    else:
        allow_indices = True

    if consumer == "SeveralPools":
        outs = [b.pool(h, f"pool{i}", allow_indices)[0] for i in range(int(rng.integers(2, 4)))]
        for o in outs:
            b.output(o)
        same = [o for o in outs if b.shapes[o][2:] == b.shapes[outs[0]][2:] and b.shapes[o][0] == b.shapes[outs[0]][0]]
        if len(same) > 1:
            cat = b.node("Concat", same, _concat_shape(b, same), axis=1)
            b.output(cat)
            b.step(f"Concat(axis=1, {len(same)} pools)")
        return b.graph

    ys = b.pool(h, "pool", allow_indices)
    y = ys[0]
    if len(ys) == 2:
        b.output(ys[1], is_index=True)
    out_shape = b.shapes[y]
    if consumer == "none":
        b.output(y)
    elif consumer == "Relu":
        b.output(b.node("Relu", [y], out_shape))
        b.step("Relu(pool)")
    elif consumer == "Mul":
        scale = rng.integers(-8, 9, size=out_shape[1]) / 4.0
        b.output(b.node("Mul", [y, b.const(scale.reshape([out_shape[1]] + [1] * (len(out_shape) - 2)))], out_shape))
        b.step("Mul(pool, per-channel)")
    elif consumer == "AddBranch":
        other = b.branch(out_shape, "br")
        b.output(b.node("Add", [y, other], out_shape))
        b.step("Add(pool, br)")
    elif consumer == "Concat":
        parts = [y]
        for i in range(int(rng.integers(1, 3))):
            parts.append(b.branch([out_shape[0], int(rng.integers(1, 4))] + out_shape[2:], f"br{i}"))
        order = list(rng.permutation(len(parts)))
        parts = [parts[i] for i in order]
        cat = b.node("Concat", parts, _concat_shape(b, parts), axis=1)
        if rng.random() < 0.4:
            cat = b.node("Relu", [cat], b.shapes[cat])
            b.step(f"Relu(Concat(axis=1, pool at {order.index(0)} of {len(parts)}))")
        else:
            b.step(f"Concat(axis=1, pool at {order.index(0)} of {len(parts)})")
        b.output(cat)
    elif consumer == "Twice":
        first = b.node("Relu", [y], out_shape)
        other = b.branch(out_shape, "br") if rng.random() < 0.5 else y
        second = b.node("Add", [y, other], out_shape)
        b.output(first)
        b.output(second)
        b.step("outputs Relu(pool) and Add(pool, " + ("br" if other != y else "pool") + ")")
    else:  # PoolOfPool
        z = b.pool(y, "pool2", allow_indices)
        if rng.random() < 0.5:
            b.output(y)
            b.step("first pool is an output")
        b.output(z[0])
        if len(z) == 2:
            b.output(z[1], is_index=True)
    return b.graph


def _onnx_inferred(spatial, attrs):
    """The output size ONNX's shape inference (onnx 1.23, which onnxruntime runs on load) gives.
    It keeps a ceil-mode window that starts past the data, which every runtime drops
    (docs/conformance.md row 5): a Concat with such a pool fails to load in onnxruntime
    ("Can't merge shape info"), so the generator leaves those geometries out."""
    rank = len(spatial)
    if not attrs.get("ceil_mode") or attrs.get("auto_pad", "NOTSET") != "NOTSET":
        return spec_reference.out_spatial_shape([1, 1] + list(spatial), attrs["kernel_shape"],
                                                attrs.get("strides", [1] * rank), attrs.get("dilations", [1] * rank),
                                                attrs.get("pads", [0] * 2 * rank), attrs.get("auto_pad", "NOTSET"), 0)
    pads = attrs.get("pads", [0] * 2 * rank)
    out = []
    for i, n in enumerate(spatial):
        k, s = attrs["kernel_shape"][i], attrs.get("strides", [1] * rank)[i]
        d = attrs.get("dilations", [1] * rank)[i]
        out.append(math.ceil((n + pads[i] + pads[i + rank] - ((k - 1) * d + 1)) / s) + 1)
    return out


def _concat_shape(b, parts):
    shapes = [b.shapes[p] for p in parts]
    return [shapes[0][0], sum(s[1] for s in shapes)] + shapes[0][2:]


def to_model(graphs, dtype=None) -> onnx.ModelProto:
    """One model holding every graph in ``graphs`` (independent subgraphs side by side).
    ``dtype``: build every graph in this float type instead of its own (the float32 oracle
    model of a float16 graph)."""
    nodes, inits, inputs, outputs = [], [], [], []
    for g in graphs:
        dt = dtype or g.dtype
        nodes += g.nodes
        for name, values in g.inits.items():
            inits.append(numpy_helper.from_array(values.astype(dt), name))
        inputs += [helper.make_tensor_value_info(n, ONNX_TYPE[dt], s) for n, s in g.inputs]
        outputs += [helper.make_tensor_value_info(n, TensorProto.INT64 if idx else ONNX_TYPE[dt], None)
                    for n, idx in g.outputs]
    graph = helper.make_graph(nodes, "fusion", inputs, outputs, initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])
    model.ir_version = IR_VERSION
    return model


def feeds(graphs, dtype=None) -> dict:
    out = {}
    for g in graphs:
        out.update(g.feeds(dtype))
    return out


def _onnxruntime_runs_negative_same(op, spatial, attrs) -> bool:
    """SAME padding whose total goes negative (kernel shorter than the stride) is kept where
    onnxruntime computes it as the ONNX text does (docs/conformance.md row 4): not MaxPool
    without Indices (refused), and only totals whose split onnxruntime rounds the same way
    (even for SAME_UPPER, odd for SAME_LOWER)."""
    mode = attrs.get("auto_pad", "NOTSET")
    if not mode.startswith("SAME"):
        return True
    rank = len(spatial)
    for n, k, s in zip(spatial, attrs["kernel_shape"], attrs.get("strides", [1] * rank)):
        total = (math.ceil(n / s) - 1) * s + k - n
        if total >= 0:
            continue
        if op == "MaxPool" or (total % 2 == 0) != (mode == "SAME_UPPER"):
            return False
    return True
