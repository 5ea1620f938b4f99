"""Seeded random torch graphs around pooling ops, for tests/test_torch_fusion.py.

Each graph is a ``torch.nn.Module`` ``inputs -> producers -> pool -> consumers`` shaped so that
TVM's FuseOps puts producers, the pool and its consumers into one PrimFunc after
``torch.export`` and ``tvm_pool.from_exported_program``:

- producers (0-2, chained): relu, a BN-like per-channel affine (``x * scale.view(C, 1, 1) +
  shift.view(C, 1, 1)``), sigmoid, clamp, the add of a branch (another input through relu or
  the affine); sometimes the producer is also an output;
- the pool: ``F.max_pool{1,2,3}d`` (kernel, stride or the default, padding, dilation, ceil_mode,
  return_indices), ``F.avg_pool{1,2,3}d`` (padding, ceil_mode, count_include_pad,
  divisor_override), ``F.lp_pool{1,2,3}d`` (p 1/2/3, ceil_mode), ``F.adaptive_avg_pool`` /
  ``F.adaptive_max_pool{1,2,3}d`` (sizes that do not divide, larger than the input, ``None``,
  indices), global pools as adaptive pools to 1 and as ``x.mean(spatial dims)``; batched and
  unbatched inputs;
- consumers: none, relu, a parameter added or multiplied after the pool in each broadcast form
  (``(1,)``, ``(C,)`` viewed as ``(C, 1, 1)``, ``(1, C, 1, 1)``, the full output shape),
  reshapes and permutes (flatten, view, permute to channel-last and a per-channel bias there,
  transpose, contiguous), the output used twice, a concat with 1-2 branches, pool of pool, two
  different pools of one pool's output (concatenated or added when their shapes agree), several
  pools of one producer, adaptive and global pools into flatten and ``nn.Linear``.

Graphs stay inside what torch eager and tvm_pool agree on (docs/conformance.md, PyTorch section):
no NaN (lp_pool's odd p only over non-negative data: torch's NaN of a negative power sum
would then meet TVM's relu, which drops it), every geometry first run by torch eager (what
torch refuses is drawn again). Inputs and parameters are small multiples of 1/8 (exact in
float16 too), so producers, sums and maxima are exact and argmax ties are real ties, which both
break the same way (the first in scan order). float16 graphs (one in ten) keep indices away
from sigmoid (torch rounds it from float32, TVM may not: a tie in one is not in the other) and
leave out ``nn.Linear`` (accumulation order in half precision).

A graph is built by running every op on its example inputs as it is drawn, so shapes come from
torch itself; several graphs combine into one module (:func:`combine`): one export and one
compile serve many graphs. Every graph prints as its seed and readable steps
(:meth:`TorchGraph.describe`).
"""

from __future__ import annotations

import dataclasses

import numpy as np
import torch
import torch.nn.functional as F

TORCH_DTYPE = {"float32": torch.float32, "float16": torch.float16}
SIZE_RANGE = {1: (3, 13), 2: (3, 10), 3: (2, 6)}

POOL_KINDS = (["max"] * 3 + ["max_indices"] * 2 + ["avg"] * 3 + ["lp"] * 2 + ["adaptive_avg"] * 2
              + ["adaptive_max", "adaptive_max_indices", "global_avg", "global_max", "global_mean"])
CONSUMERS = ("none", "relu", "bias", "reshape", "twice", "concat", "pool_of_pool", "two_pools_of_pool",
             "several_pools", "head")
BIAS_FORMS = ("(1,)", "(C,)->(C,1,1)", "(1,C,1,1)", "full")


class GraphModule(torch.nn.Module):
    """A straight-line program over named values: ``ops`` are ``(outputs, fn, arguments)`` with
    ``fn(module, *values)``; parameters are buffers of the module."""

    def __init__(self):
        super().__init__()
        self.input_names: list[str] = []
        self.ops: list = []
        self.output_names: list[str] = []

    def forward(self, *xs):
        env = dict(zip(self.input_names, xs))
        for outs, fn, args in self.ops:
            result = fn(self, *(env[a] for a in args))
            if len(outs) == 1:
                env[outs[0]] = result
            else:
                env.update(zip(outs, result))
        return tuple(env[n] for n in self.output_names)


@dataclasses.dataclass
class TorchGraph:
    seed: int
    dtype: str
    module: GraphModule
    inputs: list  # torch tensors
    outputs: list  # (name, is_index), in the module's output order
    steps: list  # readable pieces of the description

    def describe(self) -> str:
        shapes = ", ".join(f"{list(t.shape)}" for t in self.inputs)
        return f"seed={self.seed} {self.dtype} (inputs {shapes}): " + " ; ".join(self.steps)

    def expected(self) -> list[torch.Tensor]:
        with torch.no_grad():
            return list(self.module(*self.inputs))


def _arg(values, rng):
    """An int when every axis agrees (half the time), else a tuple: both forms reach torch."""
    return values[0] if len(set(values)) == 1 and rng.random() < 0.5 else tuple(values)


class _Builder:
    def __init__(self, seed: int, dtype: str, batched: bool):
        self.seed, self.dtype, self.batched = seed, dtype, batched
        self.rng = np.random.default_rng(seed)
        self.data_rng = np.random.default_rng(seed + 7_000_000)
        self.module = GraphModule()
        self.graph = TorchGraph(seed, dtype, self.module, [], [], [])
        self.values: dict[str, torch.Tensor] = {}
        self.nonneg: set[str] = set()  # values known to be >= 0
        self.count = 0
        self.ch = 1 if batched else 0  # the channel axis

    # ---- plumbing ---------------------------------------------------------------------------

    def name(self, what: str) -> str:
        self.count += 1
        return f"{what}{self.count}"

    def _tensor(self, values) -> torch.Tensor:
        return torch.from_numpy(np.asarray(values, dtype=np.float64)).to(TORCH_DTYPE[self.dtype])

    def input(self, shape) -> str:
        name = self.name("in")
        t = self._tensor(self.data_rng.integers(-16, 17, size=shape) / 8.0)
        self.module.input_names.append(name)
        self.graph.inputs.append(t)
        self.values[name] = t
        return name

    def param(self, values) -> str:
        name = self.name("param")
        self.module.register_buffer(name, self._tensor(values))
        return name

    def run(self, fn, args):
        """``fn`` on the example values (torch's verdict and shapes), not recorded."""
        with torch.no_grad():
            return fn(self.module, *(self.values[a] for a in args))

    def op(self, what: str, fn, args, n_out: int = 1, nonneg: bool = False):
        result = self.run(fn, args)
        outs = (self.name(what),) + tuple(self.name("indices") for _ in range(n_out - 1))
        self.module.ops.append((outs, fn, tuple(args)))
        results = [result] if n_out == 1 else list(result)
        for o, r in zip(outs, results):
            self.values[o] = r
        if nonneg:
            self.nonneg.add(outs[0])
        return outs[0] if n_out == 1 else outs

    def output(self, name: str, is_index: bool = False) -> None:
        if name not in self.module.output_names:
            self.module.output_names.append(name)
            self.graph.outputs.append((name, is_index))

    def step(self, text: str) -> None:
        self.graph.steps.append(text)

    def shape(self, name: str) -> list[int]:
        return list(self.values[name].shape)

    def channels(self, name: str) -> int:
        return self.shape(name)[self.ch]

    def per_channel_view(self, name: str) -> list[int]:
        """The view of a (C,) parameter that broadcasts over ``name``'s channel axis."""
        return [-1] + [1] * (len(self.shape(name)) - 1 - self.ch)

    def relu(self, x: str) -> str:
        y = self.op("relu", lambda m, a: F.relu(a), [x], nonneg=True)
        self.step(f"{y}=relu({x})")
        return y

    # ---- producers ---------------------------------------------------------------------------

    def producer(self, x: str, kind: str) -> str:
        rng = self.rng
        if kind == "relu":
            y = self.relu(x)
        elif kind == "BN":
            c = self.channels(x)
            scale = rng.integers(2, 7, size=c) / 4.0 * rng.choice([-1, 1], size=c)
            shift = rng.integers(-4, 5, size=c) / 4.0
            s, t, view = self.param(scale), self.param(shift), self.per_channel_view(x)
            y = self.op("bn", lambda m, a: a * getattr(m, s).view(view) + getattr(m, t).view(view), [x])
            self.step(f"{y}=BN({x})")
        elif kind == "sigmoid":
            y = self.op("sigmoid", lambda m, a: torch.sigmoid(a), [x], nonneg=True)
            self.step(f"{y}=sigmoid({x})")
        elif kind == "clamp":
            lo, hi = sorted(rng.integers(-8, 9, size=2) / 8.0)
            hi = hi if hi > lo else lo + 0.5
            y = self.op("clamp", lambda m, a: torch.clamp(a, lo, hi), [x], nonneg=lo >= 0)
            self.step(f"{y}=clamp[{lo},{hi}]({x})")
        else:  # add of a branch
            br = self.branch(self.shape(x))
            y = self.op("add", lambda m, a, b: a + b, [x, br])
            self.step(f"{y}={x} + {br} [add of a branch]")
        return y

    def branch(self, shape) -> str:
        """Another branch of a given shape: a fresh input through the affine or relu (a conv
        branch stand-in)."""
        x = self.input(shape)
        return self.producer(x, str(self.rng.choice(["BN", "relu", "BN"])))

    # ---- pools -------------------------------------------------------------------------------

    def pool(self, x: str, allow_indices: bool = True, kind: str | None = None, chained: bool = False) -> list[str]:
        """A pool of ``x`` (its value, and its indices when it returns them); ``chained``: one
        that another pool reads (a global mean keeps its spatial dims then)."""
        rng = self.rng
        kind = kind or str(rng.choice(POOL_KINDS))
        if kind.endswith("indices") and not allow_indices:
            kind = kind[: -len("_indices")]
        for attempt in range(60):
            if attempt == 30:
                kind = "max"  # (a kind torch refuses here, as avg_pool3d in float16: a max instead)
            drawn = self._draw_pool(x, kind, chained)
            fn, text, n_out = drawn
            try:
                self.run(fn, [x])
            except RuntimeError:
                continue
            outs = self.op(kind, fn, [x], n_out=n_out,
                           nonneg=x in self.nonneg and not kind.startswith("lp"))
            outs = [outs] if n_out == 1 else list(outs)
            self.step(f"{','.join(outs)}={text.replace('X', x, 1)} -> {self.shape(outs[0])}")
            return outs
        raise AssertionError(f"seed {self.seed}: no pool of {self.shape(x)} torch takes")  # pragma: no cover

    def _draw_pool(self, x: str, kind: str, chained: bool = False):
        rng, shape = self.rng, self.shape(x)
        spatial = shape[self.ch + 1:]
        rank = len(spatial)
        d = f"{rank}d"
        spatial_dims = tuple(range(self.ch + 1, len(shape)))
        if kind in ("global_avg", "global_max"):
            op = "adaptive_avg_pool" if kind == "global_avg" else "adaptive_max_pool"
            size = 1 if rng.random() < 0.5 else tuple([1] * rank)
            f = getattr(F, f"{op}{d}")
            return (lambda m, a: f(a, size)), f"F.{op}{d}(X, {size}) [global]", 1
        if kind == "global_mean":
            keep = bool(rng.random() < 0.6) or chained
            return ((lambda m, a: a.mean(dim=spatial_dims, keepdim=keep)),
                    f"X.mean(dim={spatial_dims}, keepdim={keep}) [global]", 1)
        if kind.startswith("adaptive"):
            size = [None if rng.random() < 0.15 else int(rng.integers(1, n + 3)) for n in spatial]
            if rank == 1:
                size_arg = size[0] if size[0] is not None else spatial[0]
            elif None not in size and len(set(size)) == 1 and rng.random() < 0.5:
                size_arg = size[0]
            else:
                size_arg = tuple(size)
            if kind == "adaptive_avg":
                f = F.__dict__[f"adaptive_avg_pool{d}"]
                return (lambda m, a: f(a, size_arg)), f"F.adaptive_avg_pool{d}(X, {size_arg!r})", 1
            ind = kind.endswith("indices")
            f = F.__dict__[f"adaptive_max_pool{d}"]
            return ((lambda m, a: f(a, size_arg, return_indices=ind)),
                    f"F.adaptive_max_pool{d}(X, {size_arg!r}{', return_indices=True' if ind else ''})", 2 if ind else 1)
        k = [int(rng.integers(1, min(n, 4) + 1)) for n in spatial]
        stride = None if rng.random() < 0.2 else [int(rng.integers(1, 4)) for _ in range(rank)]
        ceil = bool(rng.random() < 0.35)
        if kind == "lp":
            p = float(rng.choice([1.0, 2.0, 3.0]))
            if p == 3.0 and x not in self.nonneg:
                p = 2.0  # torch's NaN of a negative sum of cubes: left out (module docstring)
            kernel = k[0] if rank == 1 else _arg(k, rng)
            kw = dict(norm_type=p, kernel_size=kernel, stride=None if stride is None else _arg(stride, rng),
                      ceil_mode=ceil)
            f = getattr(F, f"lp_pool{d}")
            return (lambda m, a: f(a, **kw)), f"F.lp_pool{d}(X, {_kwtext(kw)})", 1
        dil = [1] * rank
        if kind.startswith("max") and rng.random() < 0.3:
            dil = [int(rng.integers(1, 3)) for _ in range(rank)]
        eff = [(kk - 1) * dd + 1 for kk, dd in zip(k, dil)]
        pad = [0] * rank
        if rng.random() < 0.6:
            pad = [int(rng.integers(0, e // 2 + 1)) for e in eff]
        kw = dict(kernel_size=_arg(k, rng), stride=None if stride is None else _arg(stride, rng),
                  padding=_arg(pad, rng), ceil_mode=ceil)
        if kind == "avg":
            kw["count_include_pad"] = bool(rng.random() < 0.5)
            if rank > 1 and rng.random() < 0.3:  # avg_pool1d has no divisor_override
                kw["divisor_override"] = int(rng.integers(1, 10))
            f = getattr(F, f"avg_pool{d}")
            return (lambda m, a: f(a, **kw)), f"F.avg_pool{d}(X, {_kwtext(kw)})", 1
        if any(v > 1 for v in dil):
            kw["dilation"] = _arg(dil, rng)
        ind = kind == "max_indices"
        if ind:
            kw["return_indices"] = True
        f = getattr(F, f"max_pool{d}")
        return (lambda m, a: f(a, **kw)), f"F.max_pool{d}(X, {_kwtext(kw)})", 2 if ind else 1

    # ---- consumers ---------------------------------------------------------------------------

    def bias(self, y: str, form: str | None = None) -> str:
        """A parameter added to or multiplied with ``y`` in one of :data:`BIAS_FORMS`."""
        rng, shape = self.rng, self.shape(y)
        form = form or str(rng.choice(BIAS_FORMS))
        if form == "(1,C,1,1)" and not self.batched:
            form = "(C,)->(C,1,1)"
        c = shape[self.ch] if len(shape) > self.ch else 1
        if form == "(1,)":
            pshape, view = [1], None
        elif form == "(C,)->(C,1,1)":
            pshape, view = [c], self.per_channel_view(y)
        elif form == "(1,C,1,1)":
            pshape, view = [1] * self.ch + [c] + [1] * (len(shape) - 1 - self.ch), None
        else:
            pshape, view = list(shape), None
            if self.batched and shape[0] > 1 and rng.random() < 0.5:
                pshape[0] = 1  # broadcast over the batch
        mul = bool(rng.random() < 0.4)
        values = (rng.integers(-8, 9, size=pshape) / 4.0) if mul else (rng.integers(-16, 17, size=pshape) / 8.0)
        b = self.param(values)
        if mul:
            fn = (lambda m, a: a * getattr(m, b).view(view)) if view else (lambda m, a: a * getattr(m, b))
        else:
            fn = (lambda m, a: a + getattr(m, b).view(view)) if view else (lambda m, a: a + getattr(m, b))
        out = self.op("bias", fn, [y])
        self.step(f"{out}={y} {'*' if mul else '+'} param{pshape} [bias {form}]")
        return out

    def reshape(self, y: str) -> str:
        """A reshape or permute of ``y`` (then, sometimes, an elementwise consumer of its new
        shape: a per-channel bias in channel-last order, a relu)."""
        rng, shape, ch = self.rng, self.shape(y), self.ch
        nd = len(shape)
        forms = ["flatten", "view", "reshape(-1)"]
        if nd > ch + 1:
            forms += ["channel_last", "channel_last", "transpose"]
        form = str(rng.choice(forms))
        contiguous = bool(rng.random() < 0.5)
        tail = ".contiguous()" if contiguous else ""
        if form == "flatten":
            out = self.op("flatten", lambda m, a: a.flatten(ch), [y])
            text = f"{y}.flatten({ch})"
        elif form == "view":
            lead = shape[: ch + 1]
            out = self.op("view", lambda m, a: a.view(*lead, -1), [y])
            text = f"{y}.view({', '.join(map(str, lead))}, -1)"
        elif form == "reshape(-1)":
            out = self.op("reshape", lambda m, a: a.reshape(-1), [y])
            text = f"{y}.reshape(-1)"
        elif form == "channel_last":
            dims = tuple(list(range(ch)) + list(range(ch + 1, nd)) + [ch])
            if contiguous:
                out = self.op("permute", lambda m, a: a.permute(*dims).contiguous(), [y])
            else:
                out = self.op("permute", lambda m, a: a.permute(*dims), [y])
            text = f"{y}.permute{dims}{tail} [channel-last]"
        else:
            if contiguous:
                out = self.op("transpose", lambda m, a: a.transpose(-1, -2).contiguous(), [y])
            else:
                out = self.op("transpose", lambda m, a: a.transpose(-1, -2), [y])
            text = f"{y}.transpose(-1, -2){tail}"
        self.step(f"{out}={text} -> {self.shape(out)}")
        r = rng.random()
        if form == "channel_last" and r < 0.5:
            c = self.shape(out)[-1]
            b = self.param(rng.integers(-16, 17, size=c) / 8.0)
            out2 = self.op("bias", lambda m, a: a + getattr(m, b), [out])
            self.step(f"{out2}={out} + param[{c}] [channel-last bias]")
            return out2
        if r < 0.75:
            return self.relu(out)
        return out

    def head(self, h: str) -> None:
        """An adaptive or global pool, flatten, linear (a classifier head)."""
        rng = self.rng
        kind = str(rng.choice(["adaptive_avg", "adaptive_max", "global_avg", "global_max", "global_mean"]))
        y = self.pool(h, kind=kind)[0]
        flat = self.op("flatten", lambda m, a, ch=self.ch: a.flatten(ch), [y])
        self.step(f"{flat}={y}.flatten({self.ch}) -> {self.shape(flat)}")
        features = self.shape(flat)[-1]
        if self.dtype == "float16":  # no Linear in half precision (module docstring): a bias instead
            self.output(self.bias(flat, "full"))
            return
        out_features = int(rng.integers(1, 6))
        w = self.param(rng.integers(-8, 9, size=(out_features, features)) / 8.0)
        if rng.random() < 0.7:
            b = self.param(rng.integers(-8, 9, size=out_features) / 8.0)
            out = self.op("linear", lambda m, a: F.linear(a, getattr(m, w), getattr(m, b)), [flat])
        else:
            out = self.op("linear", lambda m, a: F.linear(a, getattr(m, w)), [flat])
        self.step(f"{out}=linear({flat}, {features}->{out_features}) [head]")
        if rng.random() < 0.4:
            out = self.relu(out)
        self.output(out)

    def combine_pools(self, outs: list[str], what: str) -> None:
        """Concatenate (or add) the pools among ``outs`` whose shapes agree."""
        first = self.shape(outs[0])
        same = [o for o in outs if self.shape(o) == first]
        if len(same) < 2:
            return
        if self.rng.random() < 0.6:
            out = self.op("cat", lambda m, *a, ch=self.ch: torch.cat(a, dim=ch), same)
            self.step(f"{out}=cat([{', '.join(same)}], dim={self.ch}) [{what}]")
        else:
            out = self.op("add", lambda m, *a: sum(a[1:], a[0]), same)
            self.step(f"{out}={' + '.join(same)} [{what}]")
        self.output(out)

    def matching_pool(self, y: str, like: str) -> str:
        """An adaptive pool of ``y`` to ``like``'s spatial size (so the two can be combined)."""
        size = tuple(self.shape(like)[self.ch + 1:])
        if len(size) != len(self.shape(y)) - self.ch - 1:
            return self.pool(y)[0]
        kind = str(self.rng.choice(["avg", "max"]))
        f = getattr(F, f"adaptive_{kind}_pool{len(size)}d")
        arg = size if len(size) > 1 else size[0]
        out = self.op(f"adaptive_{kind}", lambda m, a: f(a, arg), [y])
        self.step(f"{out}=F.adaptive_{kind}_pool{len(size)}d({y}, {arg!r}) -> {self.shape(out)} [matching]")
        return out


def _kwtext(kw) -> str:
    return ", ".join(f"{k}={v!r}" for k, v in kw.items())


def random_graph(seed: int) -> TorchGraph:
    rng = np.random.default_rng(seed)
    dtype = "float16" if rng.random() < 0.1 else "float32"
    batched = bool(rng.random() < 0.85)
    b = _Builder(seed, dtype, batched)
    rank = int(rng.choice([1, 2, 2, 2, 3]))
    lead = [int(rng.integers(1, 3)), int(rng.integers(1, 5))] if batched else [int(rng.integers(1, 5))]
    shape = lead + [int(rng.integers(*SIZE_RANGE[rank])) for _ in range(rank)]
    x = b.input(shape)
    b.step(f"{x}{shape}{'' if batched else ' unbatched'}")
    h = x
    kinds = ["relu", "BN", "sigmoid", "clamp", "add_branch"]
    for i in range(int(rng.choice([0, 1, 1, 2]))):
        h = b.producer(h, str(rng.choice(kinds)))
    if h != x and rng.random() < 0.2:
        b.output(h)
        b.step(f"{h} is an output [producer is an output]")
    # float16 sigmoid: torch rounds it from float32, TVM may not (no indices over it)
    allow_indices = not (dtype == "float16" and any("sigmoid" in s for s in b.graph.steps))
    consumer = str(rng.choice(CONSUMERS))

    if consumer == "head":
        b.head(h)
        return b.graph
    if consumer == "several_pools":
        outs = [b.pool(h, allow_indices)[0] for _ in range(int(rng.integers(2, 4)))]
        if rng.random() < 0.5:
            outs.append(b.matching_pool(h, outs[0]))
        for o in outs:
            b.output(o)
        b.combine_pools(outs, "several pools of one producer")
        return b.graph

    ys = b.pool(h, allow_indices, chained=consumer in ("pool_of_pool", "two_pools_of_pool"))
    y = ys[0]
    if len(ys) == 2:
        b.output(ys[1], is_index=True)
    if consumer == "none":
        b.output(y)
    elif consumer == "relu":
        b.output(b.relu(y))
    elif consumer == "bias":
        out = b.bias(y)
        if rng.random() < 0.3:
            out = b.reshape(out)
        elif rng.random() < 0.3:
            out = b.relu(out)
        b.output(out)
    elif consumer == "reshape":
        b.output(b.reshape(y))
    elif consumer == "twice":
        first = b.relu(y)
        other = b.branch(b.shape(y)) if rng.random() < 0.5 else y
        second = b.op("add", lambda m, a, c: a + c, [y, other])
        b.step(f"{second}={y} + {other} [{y} used twice]")
        b.output(first)
        b.output(second)
    elif consumer == "concat":
        parts = [y]
        shape = b.shape(y)
        for _ in range(int(rng.integers(1, 3))):
            bshape = list(shape)
            bshape[b.ch] = int(rng.integers(1, 4))
            parts.append(b.branch(bshape))
        order = list(rng.permutation(len(parts)))
        parts = [parts[i] for i in order]
        cat = b.op("cat", lambda m, *a, ch=b.ch: torch.cat(a, dim=ch), parts)
        b.step(f"{cat}=cat([{', '.join(parts)}], dim={b.ch}) [concat, pool at {order.index(0)} of {len(parts)}]")
        if rng.random() < 0.4:
            cat = b.relu(cat)
        b.output(cat)
    elif consumer == "pool_of_pool":
        z = b.pool(y, allow_indices)
        b.step(f"[pool of pool: {z[0]} of {y}]")
        if rng.random() < 0.5:
            b.output(y)
            b.step(f"{y} is an output")
        b.output(z[0])
        if len(z) == 2:
            b.output(z[1], is_index=True)
    else:  # two different pools of one pool's output
        a = b.pool(y, allow_indices=False)[0]
        c = b.matching_pool(y, a) if rng.random() < 0.6 else b.pool(y, allow_indices=False)[0]
        b.step(f"[two pools of pool: {a} and {c} of {y}]")
        if rng.random() < 0.4:
            b.output(y)
            b.step(f"{y} is an output")
        b.output(a)
        b.output(c)
        b.combine_pools([a, c], "two pools of pool")
    return b.graph


class Combined(torch.nn.Module):
    """Every graph's module over its own inputs, outputs concatenated."""

    def __init__(self, graphs):
        super().__init__()
        self.graphs = torch.nn.ModuleList([g.module for g in graphs])
        self.counts = [len(g.inputs) for g in graphs]

    def forward(self, *xs):
        outs, at = [], 0
        for module, n in zip(self.graphs, self.counts):
            outs += list(module(*xs[at: at + n]))
            at += n
        return tuple(outs)


def combine(graphs) -> tuple[Combined, list]:
    """One module holding every graph in ``graphs`` (side by side), and its inputs."""
    return Combined(graphs), [t for g in graphs for t in g.inputs]
