"""Clips as Relax's maximum and minimum (``tvm_pool.canonicalize.lift_clips``): on both roads a
ReLU6, a hard swish and a hardtanh become ops Relax's ConvertLayout carries, so with channel-last
convolutions each fuses into its convolution instead of sitting between two transposes; the
lifted module computes the same bits (infinities and values past both bounds included; NaN too on
the ONNX road, whose order the torch.export road's clips now take); other kernels and clips
stay."""

from __future__ import annotations

import io
import warnings

import numpy as np
import pytest

pytest.importorskip("torch")  # PyTorch builds the models and is the oracle
import onnx  # noqa: E402
import torch  # noqa: E402
import tvm  # noqa: E402
import tvm_ffi  # noqa: E402
from tvm import relax, te, topi  # noqa: E402

import tvm_pool  # noqa: E402
from tvm_pool import lowering  # noqa: E402
from tvm_pool.canonicalize import lift_clips  # noqa: E402


class ClipNet(torch.nn.Module):
    """conv -> ReLU6 -> conv -> hard swish (or ReLU6) -> conv -> hardtanh(-0.5, 2), MobileNet's
    clips."""

    def __init__(self, hardswish: bool = True):
        super().__init__()
        self.convs = torch.nn.ModuleList(torch.nn.Conv2d(c, 8, 3, padding=1) for c in (3, 8, 8))
        self.middle = torch.nn.functional.hardswish if hardswish else torch.nn.functional.relu6

    def forward(self, x):
        x = torch.nn.functional.relu6(self.convs[0](x))
        x = self.middle(self.convs[1](x))
        return torch.nn.functional.hardtanh(self.convs[2](x), -0.5, 2.0)


def _module(road, net, x):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if road == "torch.export":
            return tvm_pool.from_exported_program(torch.export.export(net, (x,)))
        buffer = io.BytesIO()
        torch.onnx.export(net, (x,), buffer, dynamo=False, opset_version=17, input_names=["x"])
        model = onnx.load_from_string(buffer.getvalue())
        model.ir_version = 10
        return tvm_pool.from_onnx(model)


def _extreme(rng, shape, nan: bool):
    """Values past both bounds, and NaN and infinities (or, without ``nan``, large finite values:
    an infinity meets a weight of the other sign in the convolution and makes a NaN)."""
    x = rng.standard_normal(shape).astype("float32") * 8
    flat = x.reshape(-1)
    flat[rng.choice(flat.size, 12, replace=False)] = ([np.nan, np.inf, -np.inf] if nan else [1e30, -1e30, 60.0]) * 4
    return x


def _run(ex, x):
    out = relax.VirtualMachine(ex, tvm.cpu())["main"](tvm.runtime.tensor(x))
    return (out if hasattr(out, "numpy") else out[0]).numpy()  # torch.export's output is a tuple


def _stock(mod, x):
    return _run(tvm.compile(mod, target="llvm"), x)


@pytest.mark.parametrize("road", ["onnx", "torch.export"])
def test_lifted_clips_fuse_into_channel_last_convolutions_and_keep_every_bit(road, rng, host):
    torch.manual_seed(0)
    net = ClipNet().eval()
    x = torch.from_numpy(rng.standard_normal((1, 3, 10, 12)).astype("float32"))
    mod = _module(road, net, x)
    fused = lowering.fuse(mod, host, "NHWC")
    names = [gv.name_hint for gv, f in fused.functions_items() if isinstance(f, tvm.tirx.PrimFunc)]
    clipping = [n for n in names if "maximum" in n or "minimum" in n]
    assert len(clipping) == 3 and all("conv2d" in n for n in clipping), names
    assert sum("transpose" in n for n in names) <= 2, names  # the model's input and output only

    # relax.clip was max(min(x, hi), lo): a NaN now gives lo instead of hi (docs/conformance.md)
    extreme = _extreme(rng, (1, 3, 10, 12), nan=road == "onnx")
    np.testing.assert_array_equal(_stock(lift_clips()(mod), extreme), _stock(mod, extreme))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ex = tvm_pool.compile(mod, host, conv_layout="NHWC", shipped_logs=False)
    np.testing.assert_allclose(_run(ex, x.numpy()), net(x).detach().numpy(), rtol=1e-5, atol=1e-5)


def _call_te(func, *shapes, dtype="float32"):
    bb = relax.BlockBuilder()
    params = [relax.Var(f"p{i}", relax.TensorType(s, dtype)) for i, s in enumerate(shapes)]
    with bb.function("main", params):
        with bb.dataflow():
            out = bb.emit_output(func(bb, *params))
        bb.emit_func_output(out)
    return bb.get()


@pytest.mark.parametrize("case", ["other_kernel", "broadcasts_first_input", "arguments_swapped", "integer_clip"])
def test_other_kernels_and_clips_stay(case):
    if case == "other_kernel":
        mod = _call_te(lambda bb, a, b: bb.emit_te(topi.add, a, b), (2, 3), ())
    elif case == "broadcasts_first_input":
        mod = _call_te(lambda bb, a, b: bb.emit_te(topi.maximum, a, b), (1, 3), (4, 3))
    elif case == "arguments_swapped":
        mod = _call_te(lambda bb, a, b: bb.emit_te(lambda p, q: te.compute(p.shape, lambda i: tvm.te.max(q[()], p[i]),
                                                                           name="T_maximum"), a, b), (5,), ())
    else:
        mod = _call_te(lambda bb, a: bb.emit(relax.op.clip(a, 0, 6)), (2, 3), dtype="int32")
    assert tvm_ffi.structural_equal(lift_clips()(mod), mod)


def test_both_roads_give_the_same_channel_last_kernels(rng, host):
    """The ONNX converter's NaN-safe bounds fold to constants and both clips take its order, so
    a tuning record of one road's clipped convolutions serves the other's. (A hard swish does
    not: torch.export computes x * clamp(x + 3, 0, 6) / 6 with two one-sided clamps, the ONNX
    converter x * (clip(x + 3, 0, 6) / 6), which rounds differently.)"""
    torch.manual_seed(1)
    net = ClipNet(hardswish=False).eval()
    x = torch.from_numpy(rng.standard_normal((1, 3, 10, 12)).astype("float32"))
    kernels = []
    for road in ("onnx", "torch.export"):
        fused = lowering.fuse(_module(road, net, x), host, "NHWC")
        kernels.append({tvm_ffi.structural_hash(f.without_attr("global_symbol")) for gv, f in fused.functions_items()
                        if isinstance(f, tvm.tirx.PrimFunc) and "conv2d" in gv.name_hint})
    assert len(kernels[0]) == 3 and kernels[0] == kernels[1]
