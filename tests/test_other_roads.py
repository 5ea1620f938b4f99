"""Relax modules that reach tvm_pool.compile without the ONNX frontend get tvm_pool's lowering."""

from __future__ import annotations

import numpy as np
import pytest
pytest.importorskip("torch")  # PyTorch is this file's oracle: skip the file without it
import torch  # noqa: E402
import tvm
from tvm import relax

from tvm_pool.lowering import legalize_map, pipeline
from tvm_pool.targets import resolve_target
from helpers import compile_vm


def _prim_funcs(mod: tvm.IRModule) -> list[tvm.tirx.PrimFunc]:
    return [func for _, func in mod.functions_items() if isinstance(func, tvm.tirx.PrimFunc)]


def _func_kinds(func: tvm.tirx.PrimFunc) -> set[str]:
    """The tvm_pool compute kinds whose blocks ``func`` holds."""
    text = func.script()
    return {kind for kind in ("max", "max_index", "avg_sum", "avg_finalize") if f'"tvm_pool.kind": "{kind}"' in text}


def _kinds(mod: tvm.IRModule) -> set[str]:
    return set().union(*(_func_kinds(func) for func in _prim_funcs(mod)))


def _lowered(mod):
    target = resolve_target("llvm")
    with target:
        return relax.transform.LegalizeOps(customize_legalize_map=legalize_map())(mod)


def _relu_pool_module(kind: str, shape) -> tvm.IRModule:
    """main(x) = relu(relax.nn.{kind}_pool{rank}d(x)): window 3, stride 2, padding 1, ceil_mode
    (count_include_pad for avg), as a frontend other than ONNX emits it."""
    rank = len(shape) - 2
    x = relax.Var("x", relax.TensorType(shape, "float32"))
    bb = relax.BlockBuilder()
    op = getattr(relax.op.nn, f"{kind}_pool{rank}d")
    kwargs = dict(pool_size=[3] * rank, strides=[2] * rank, padding=[1] * (2 * rank), ceil_mode=True)
    if kind == "avg":
        kwargs["count_include_pad"] = True
    with bb.function("main", [x]):
        with bb.dataflow():
            y = bb.emit(relax.op.nn.relu(bb.emit(op(x, **kwargs))))
            out = bb.emit_output(y)
        bb.emit_func_output(out)
    return bb.get()


def _torch_relu_pool(kind: str, data: np.ndarray) -> np.ndarray:
    """What :func:`_relu_pool_module` computes, by torch."""
    tfn = getattr(torch.nn.functional, f"{kind}_pool{data.ndim - 2}d")
    targs = dict(kernel_size=3, stride=2, padding=1, ceil_mode=True)
    if kind == "avg":
        targs["count_include_pad"] = True
    return torch.relu(tfn(torch.from_numpy(data), **targs)).numpy()


@pytest.mark.parametrize("rank", [1, 2, 3])
@pytest.mark.parametrize("kind", ["max", "avg"])
def test_hand_built_relax_pool_ops(rank, kind, rng):
    shape = [2, 3] + [7] * rank
    mod = _relu_pool_module(kind, shape)
    assert ({"max"} if kind == "max" else {"avg_sum", "avg_finalize"}) <= _kinds(_lowered(mod))

    data = rng.standard_normal(shape).astype("float32")
    got = compile_vm(mod)["main"](tvm.runtime.tensor(data)).numpy()
    np.testing.assert_allclose(got, _torch_relu_pool(kind, data), rtol=1e-6, atol=1e-6)


def test_pytorch_frontend_module():
    """TVM's PyTorch frontend emits relax.nn.max_pool2d / avg_pool2d; tvm_pool lowers them."""
    from tvm.relax.frontend.torch import from_exported_program

    class Net(torch.nn.Module):
        def forward(self, x):
            y = torch.nn.functional.max_pool2d(torch.relu(x), 3, 2, 1, ceil_mode=True)
            return torch.nn.functional.avg_pool2d(y, 2, 2, count_include_pad=False) + 1.0

    data = torch.randn(2, 4, 15, 15)
    exported = torch.export.export(Net().eval(), (data,))
    mod = from_exported_program(exported)
    assert {"max", "avg_sum"} <= _kinds(_lowered(mod))
    got = compile_vm(mod)["main"](tvm.runtime.tensor(data.numpy()))
    got = got[0].numpy() if not isinstance(got, tvm.runtime.Tensor) else got.numpy()
    np.testing.assert_allclose(got, Net()(data).numpy(), rtol=1e-5, atol=1e-6)


def test_channel_last_layout_gets_tvm_pool_compute(rng):
    """A channel-last Relax pool gets tvm_pool's compute in that layout (test_channel_last.py
    has the rest)."""
    x = relax.Var("x", relax.TensorType([1, 8, 8, 3], "float32"))
    bb = relax.BlockBuilder()
    with bb.function("main", [x]):
        y = bb.emit(relax.op.nn.max_pool2d(x, [2, 2], [2, 2], layout="NHWC"))
        bb.emit_func_output(y)
    mod = bb.get()
    assert _kinds(_lowered(mod))
    data = rng.standard_normal((1, 8, 8, 3)).astype("float32")
    got = compile_vm(mod)["main"](tvm.runtime.tensor(data)).numpy()
    want = data.reshape(1, 4, 2, 4, 2, 3).max(axis=(2, 4))
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("kind", ["max", "avg"])
def test_pipeline_is_a_pass(kind, host, rng):
    """Whoever calls TVM's own ``tvm.compile`` gets tvm_pool's lowering by passing the pipeline
    as its relax_pipeline: the pass leaves tvm_pool's pooling PrimFunc fused with its consumer
    and scheduled, and the build computes what torch does."""
    mod = _relu_pool_module(kind, [2, 3, 9, 9])
    lower = pipeline(host)
    assert isinstance(lower, tvm.transform.Pass)
    pooling = [func for func in _prim_funcs(lower(mod)) if _func_kinds(func)]
    assert pooling and all(func.attrs["tirx.is_scheduled"] for func in pooling)
    assert any("relu" in func.attrs["global_symbol"] for func in pooling)

    data = rng.standard_normal((2, 3, 9, 9)).astype("float32")
    ex = tvm.compile(mod, target=host, relax_pipeline=lower)
    got = relax.VirtualMachine(ex, tvm.cpu())["main"](tvm.runtime.tensor(data)).numpy()
    np.testing.assert_allclose(got, _torch_relu_pool(kind, data), rtol=1e-6, atol=1e-6)
