"""One graph for every road (``tvm_pool.canonicalize``). Inference batch norms folded into their
convolutions: every road
gives the TorchScript ONNX export's kernels, so the shipped logs cover torch.export models; a
batch norm the fold would not compute exactly (training statistics, no gamma or beta, another
axis or layout, weights that are inputs) stays Relax's."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

pytest.importorskip("torch")  # PyTorch builds the models and is the oracle
import torch  # noqa: E402
import tvm  # noqa: E402
import tvm_ffi  # noqa: E402
from tvm import relax  # noqa: E402

import tvm_pool  # noqa: E402
from tvm_pool import lowering  # noqa: E402
from tvm_pool.canonicalize import constants_last, fold_batch_norm  # noqa: E402
from tvm_pool.tuning.lookup import is_pooling  # noqa: E402
from helpers import compile_vm  # noqa: E402


class ConvBnNet(torch.nn.Module):
    """Conv -> BN -> ReLU -> 3x3 s2 max -> (1x1 conv with bias -> BN) + a branch, grouped conv -> BN,
    global average, a linear classifier (torch.export: addmm)."""

    def __init__(self):
        super().__init__()
        self.conv1 = torch.nn.Conv2d(3, 8, 3, padding=1, bias=False)
        self.bn1 = torch.nn.BatchNorm2d(8)
        self.pool = torch.nn.MaxPool2d(3, 2, 1)
        self.conv2 = torch.nn.Conv2d(8, 8, 1)
        self.bn2 = torch.nn.BatchNorm2d(8, eps=1e-3)
        self.dw = torch.nn.Conv2d(8, 8, 3, padding=1, groups=8, bias=False)
        self.bn3 = torch.nn.BatchNorm2d(8)
        self.fc = torch.nn.Linear(8, 5)

    def forward(self, x):
        y = self.pool(torch.relu(self.bn1(self.conv1(x))))
        y = torch.relu(self.bn3(self.dw(self.bn2(self.conv2(y)) + y)))
        return self.fc(torch.flatten(torch.nn.functional.adaptive_avg_pool2d(y, 1), 1))


def _net(seed: int = 0):
    torch.manual_seed(seed)
    net = ConvBnNet()
    with torch.no_grad():
        for bn in (net.bn1, net.bn2, net.bn3):
            bn.running_mean.uniform_(-1, 1)
            bn.running_var.uniform_(0.2, 2)
            bn.weight.uniform_(0.5, 1.5)
            bn.bias.uniform_(-0.5, 0.5)
    return net.eval()


def _exported(net, x):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return tvm_pool.from_exported_program(torch.export.export(net, (x,)))


def _kernels(mod) -> set:
    """Structural hashes of the fused PrimFuncs tuning sees that compute (FLOPs), pooling left out
    (torch.export's adaptive average does not fuse the flatten after it, which stays a copy)."""
    from tvm.s_tir.analysis import estimate_tir_flops

    fused = lowering.fuse(mod, "host")
    return {tvm_ffi.structural_hash(f.without_attr("global_symbol")) for _, f in fused.functions_items()
            if isinstance(f, tvm.tirx.PrimFunc) and not is_pooling(f) and float(estimate_tir_flops(tvm.IRModule({"main": f}))) > 0}


def test_torch_export_matches_torch_with_every_batch_norm_folded():
    net, x = _net(), torch.randn(2, 3, 20, 20)
    mod = _exported(net, x)
    assert mod.script().count("R.nn.batch_norm") == 3
    folded = fold_batch_norm()(mod)
    assert "R.nn.batch_norm" not in folded.script()
    got = compile_vm(mod)["main"](tvm.runtime.tensor(x.numpy()))
    got = got if hasattr(got, "numpy") else got[0]
    np.testing.assert_allclose(got.numpy(), net(x).detach().numpy(), rtol=1e-5, atol=1e-5)


def test_folded_batch_norms_convert_to_channel_last():
    """The fold's epsilon is a tensor: Relax's ConvertLayout (the NHWC convolutions of
    lowering.CONV_LAYOUTS) crashed the process on the PrimValue it was."""
    net, x = _net(), torch.randn(2, 3, 20, 20)
    ex = tvm_pool.compile(_exported(net, x), "llvm", conv_layout="NHWC")
    got = relax.VirtualMachine(ex, tvm.cpu())["main"](tvm.runtime.tensor(x.numpy()))
    got = got if hasattr(got, "numpy") else got[0]
    np.testing.assert_allclose(got.numpy(), net(x).detach().numpy(), rtol=1e-5, atol=1e-5)


def _constants(mod) -> list:
    found = []
    relax.analysis.post_order_visit(mod["main"], lambda e: found.append(e.value.numpy())
                                    if isinstance(e, tvm.ir.expr.GenericConst) else None)
    return sorted(found, key=lambda a: (a.shape, a.tobytes()))


@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
def test_constants_folded_in_numpy_are_fold_constants_bits(layout):
    """canonicalize.fold_constants (the folded batch norms' weights, the NHWC transposes, in NumPy)
    gives the constants Relax's FoldConstant computes with a kernel each, bit for bit."""
    from tvm_pool.canonicalize import constants_last, fold_batch_norm, fold_constants
    from tvm_pool.lowering import CONV_LAYOUTS

    net, x = _net(2), torch.randn(1, 3, 20, 20)
    first = [fold_batch_norm(), constants_last()]
    if CONV_LAYOUTS[layout]:
        first.append(relax.transform.ConvertLayout({"relax.nn.conv2d": CONV_LAYOUTS[layout]}))
    then = [relax.transform.LegalizeOps(), relax.transform.FoldConstant()]
    with tvm.target.Target("llvm"):
        by_kernels = tvm.transform.Sequential(first + then)(_exported(net, x))
        by_numpy = tvm.transform.Sequential(first + [fold_constants()] + then)(_exported(net, x))
        folded = tvm.transform.Sequential(first + [fold_constants()])(_exported(net, x))
    bound = {b.var: b.value for block in folded["main"].body.blocks for b in block.bindings}
    constant = lambda e: isinstance(bound.get(e, e), tvm.ir.expr.GenericConst)  # noqa: E731
    left = [str(v.op.name) for v in bound.values()
            if isinstance(v, relax.Call) and str(v.op.name) in ("relax.permute_dims", "relax.multiply", "relax.reshape")
            and constant(v.args[0])]
    assert not left, left  # every weight and bias is computed before LegalizeOps
    want, got = _constants(by_kernels), _constants(by_numpy)
    assert len(got) == len(want) >= 6
    for g, w in zip(got, want):
        assert g.dtype == w.dtype and g.shape == w.shape and g.tobytes() == w.tobytes()


def test_torch_export_gives_the_torchscript_onnx_exports_kernels():
    """The fold is the TorchScript exporter's, and the classifier's add takes its bias second: the
    fused kernels of both roads (convolutions, the linear layer) are the same PrimFuncs, so a
    record tuned on one serves the other."""
    from tvm_pool.bench.models import onnx_model

    net, x = _net(1), torch.randn(1, 3, 20, 20)
    exported, onnx_road = _kernels(_exported(net, x)), _kernels(tvm_pool.from_onnx(onnx_model(net, x)))
    assert exported == onnx_road and len(exported) >= 4


def _bn_module(*, training=False, center=True, scale=True, axis=1, layout="NCHW", weight_const=True):
    """conv2d -> batch_norm, hand-built; every batch-norm parameter a constant."""
    rng = np.random.default_rng(0)
    shape = (1, 4, 6, 6) if layout == "NCHW" else (1, 6, 6, 4)
    const = lambda *s: relax.const(rng.uniform(0.5, 1.5, s).astype("float32"))  # noqa: E731
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType(shape, "float32"))
    w = relax.Var("w", relax.TensorType((4, 4, 3, 3), "float32"))
    params = [x] if weight_const else [x, w]
    with bb.function("main", params):
        with bb.dataflow():
            weight = const(4, 4, 3, 3) if weight_const else w
            conv = bb.emit(relax.op.nn.conv2d(x, weight, padding=1, data_layout=layout, out_layout=layout))
            bn = bb.emit(relax.op.nn.batch_norm(conv, const(4), const(4), const(4), const(4), axis=axis if layout == "NCHW" else 3,
                                                center=center, scale=scale, training=training))
            out = bb.emit_output(relax.TupleGetItem(bn, 0))
        bb.emit_func_output(out)
    return bb.get()


@pytest.mark.parametrize("kwargs", [
    {"training": True}, {"center": False}, {"scale": False}, {"layout": "NHWC"}, {"weight_const": False},
], ids=["training", "no_center", "no_scale", "nhwc", "weight_input"])
def test_batch_norms_the_fold_would_not_compute_exactly_stay(kwargs):
    mod = _bn_module(**kwargs)
    assert fold_batch_norm()(mod).script().count("R.nn.batch_norm") == 1


def test_hand_built_fold_matches_the_batch_norm():
    mod = _bn_module()
    assert "R.nn.batch_norm" not in fold_batch_norm()(mod).script()
    x = np.random.default_rng(1).standard_normal((1, 4, 6, 6)).astype("float32")
    want = relax.VirtualMachine(tvm.compile(mod, target="llvm"), tvm.cpu())["main"](tvm.runtime.tensor(x)).numpy()
    got = compile_vm(mod)["main"](tvm.runtime.tensor(x)).numpy()
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_constants_last_swaps_only_a_constant_first_operand():
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((2, 3), "float32"))
    c = relax.const(np.arange(3, dtype="float32"))
    with bb.function("main", [x]):
        with bb.dataflow():
            first = bb.emit(relax.op.add(c, x))  # swapped
            second = bb.emit(relax.op.add(first, c))  # already last
            both = bb.emit(relax.op.add(c, c))  # nothing to move
            out = bb.emit_output(relax.op.add(second, both))
        bb.emit_func_output(out)
    mod = bb.get()
    adds = [line.split("R.add(")[1] for line in constants_last()(mod)["main"].script(show_meta=False).splitlines()
            if "R.add(" in line]
    assert [a.startswith("x,") for a in adds] == [True, False, False, False], adds
    assert adds[2].startswith("metadata") and adds[2].count("metadata") == 2, adds
    a = np.random.default_rng(2).standard_normal((2, 3)).astype("float32")
    got = compile_vm(mod)["main"](tvm.runtime.tensor(a)).numpy()
    np.testing.assert_array_equal(got, (np.arange(3, dtype="float32") + a) + np.arange(3, dtype="float32") * 3)
