"""Adaptive pooling: OpenVINO AdaptiveMaxPool-8 / AdaptiveAvgPool-8 (relax_ops, the ONNX custom
domain ``tvm_pool``) and TVM's relax.nn.adaptive_avg_pool{1,2,3}d legalized by tvm_pool.

Oracles: OpenVINO's CPU runtime (its CPU plugin supports only i32 indices: compiling an
index_element_type "i64" AdaptiveMaxPool fails with "CPU plugin does not support i64 for use with
oneDNN", so OpenVINO is compared with "i32" only) and
torch.nn.functional.adaptive_{max,avg}_pool{1,2,3}d (int64 indices, compared with "i64").
Values and indices are compared exactly for max pooling.
"""

from __future__ import annotations

import re

import numpy as np
import openvino as ov
import pytest
pytest.importorskip("torch")  # PyTorch is this file's oracle: skip the file without it
import torch  # noqa: E402
import tvm
from onnx import TensorProto, helper, numpy_helper
from tvm import relax

import tvm_pool
from tvm_pool import relax_ops
from tvm_pool.block_builders import closed_on_error
from tvm_pool.errors import InvalidModelError
from helpers import compile_vm

_CORE = ov.Core()


def _build(emit, x_shape, dtype="float32", size_len=None, size_dtype="int64"):
    """A module main(x[, size]) -> emit(bb, x[, size])."""
    bb = relax.BlockBuilder()
    xv = relax.Var("x", relax.TensorType(list(x_shape), dtype))
    params = [xv]
    if size_len is not None:
        params.append(relax.Var("size", relax.TensorType([size_len], size_dtype)))
    with closed_on_error(bb), bb.function("main", params):  # the error tests raise in there
        with bb.dataflow():
            out = bb.emit_output(emit(bb, *params))
        bb.emit_func_output(out)
    return bb.get()


def _torch_max(x, size):
    fn = getattr(torch.nn.functional, f"adaptive_max_pool{x.ndim - 2}d")
    v, i = fn(torch.from_numpy(x), list(size), return_indices=True)
    return v.numpy(), i.numpy()


def _torch_avg(x, size):
    fn = getattr(torch.nn.functional, f"adaptive_avg_pool{x.ndim - 2}d")
    return fn(torch.from_numpy(x), list(size)).numpy()


def _openvino(kind, x, size, index_element_type="i32"):
    data = ov.opset8.parameter(list(x.shape), ov.Type.f32 if x.dtype == np.float32 else ov.Type.f16)
    shape = ov.opset8.constant(np.array(size, np.int64))
    if kind == "max":
        node = ov.opset8.adaptive_max_pool(data, shape, index_element_type)
        model = ov.Model([node.output(0), node.output(1)], [data])
    else:
        node = ov.opset8.adaptive_avg_pool(data, shape)
        model = ov.Model([node.output(0)], [data])
    compiled = _CORE.compile_model(model, "CPU", {"INFERENCE_PRECISION_HINT": "f32"})
    result = compiled([x])
    return [result[o] for o in compiled.outputs]


def _random_cases(seed, count):
    """Shapes covering sizes that do not divide, output larger than input, and output 1."""
    rng = np.random.default_rng(seed)
    cases = []
    for k in range(count):
        rank = 1 + k % 3
        spatial = [int(rng.integers(1, 12 if rank < 3 else 7)) for _ in range(rank)]
        size = []
        for n in spatial:
            kind = rng.integers(0, 4)
            size.append(1 if kind == 0 else n + int(rng.integers(1, 4)) if kind == 1 else int(rng.integers(1, 10)))
        cases.append(([int(rng.integers(1, 3)), int(rng.integers(1, 4))] + spatial, size))
    cases.append(([1, 2, 7, 5], [3, 2]))  # the classic non-dividing case
    cases.append(([2, 1, 3, 4], [7, 9]))  # output larger than input on both axes
    cases.append(([1, 3, 5, 6, 4], [1, 1, 1]))  # output 1
    return cases


CASES = _random_cases(0, 9)


def _input(shape, seed, ties=False):
    rng = np.random.default_rng(seed)
    if ties:  # few distinct values: every bin has ties, the first occurrence must win
        return rng.integers(0, 3, size=shape).astype(np.float32)
    return rng.standard_normal(shape).astype(np.float32)


# ---------------------------------------------------------------------------------------------
# AdaptiveMaxPool
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("shape,size", CASES)
def test_adaptive_max_vs_torch_and_openvino(shape, size):
    for index_type in ("i64", "i32"):  # one compile per index type, run on both inputs
        vm = compile_vm(_build(lambda bb, xv: relax_ops.adaptive_max_pool(bb, xv, size, index_type), shape))
        for ties in (False, True):
            x = _input(shape, len(shape) * 31 + sum(size), ties)
            tv, ti = _torch_max(x, size)
            v, i = (t.numpy() for t in vm["main"](tvm.runtime.tensor(x)))
            assert i.dtype == {"i64": np.int64, "i32": np.int32}[index_type]
            np.testing.assert_array_equal(v, tv)
            np.testing.assert_array_equal(i, ti)
            if index_type == "i32":
                ov_v, ov_i = _openvino("max", x, size, "i32")
                np.testing.assert_array_equal(v, ov_v)
                np.testing.assert_array_equal(i, ov_i)


def test_adaptive_max_nan_propagates():
    x = _input([1, 1, 6, 6], 3)
    x[0, 0, 1, 4] = np.nan
    vm = compile_vm(_build(lambda bb, xv: relax_ops.adaptive_max_pool(bb, xv, [2, 2]), x.shape))
    v, i = (t.numpy() for t in vm["main"](tvm.runtime.tensor(x)))
    tv, ti = _torch_max(x, [2, 2])
    np.testing.assert_array_equal(v, tv)  # assert_array_equal treats NaN == NaN
    np.testing.assert_array_equal(i, ti)


@pytest.mark.parametrize("size_dtype", ["int64", "int32"])
def test_adaptive_max_runtime_output_size(size_dtype):
    """One compiled module serves several output sizes given at run time."""
    x = _input([2, 3, 9, 7], 5)
    mod = _build(lambda bb, xv, s: relax_ops.adaptive_max_pool(bb, xv, s, "i32"), x.shape, size_len=2, size_dtype=size_dtype)
    vm = compile_vm(mod)
    for size in ([4, 3], [12, 1], [9, 7]):
        v, i = (t.numpy() for t in vm["main"](tvm.runtime.tensor(x), tvm.runtime.tensor(np.array(size, size_dtype))))
        assert v.shape == (2, 3, *size)
        tv, ti = _torch_max(x, size)
        np.testing.assert_array_equal(v, tv)
        np.testing.assert_array_equal(i, ti)
        ov_v, ov_i = _openvino("max", x, size, "i32")
        np.testing.assert_array_equal(v, ov_v)
        np.testing.assert_array_equal(i, ov_i)


def test_adaptive_max_runtime_output_size_3d():
    x = _input([1, 2, 5, 4, 6], 6)
    vm = compile_vm(_build(lambda bb, xv, s: relax_ops.adaptive_max_pool(bb, xv, s), x.shape, size_len=3))
    for size in ([2, 3, 4], [7, 1, 5]):
        v, i = (t.numpy() for t in vm["main"](tvm.runtime.tensor(x), tvm.runtime.tensor(np.array(size, "int64"))))
        tv, ti = _torch_max(x, size)
        np.testing.assert_array_equal(v, tv)
        np.testing.assert_array_equal(i, ti)


# ---------------------------------------------------------------------------------------------
# AdaptiveAvgPool
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("shape,size", CASES)
def test_adaptive_avg_vs_torch_and_openvino(shape, size):
    x = _input(shape, 17 + sum(shape))
    vm = compile_vm(_build(lambda bb, xv: relax_ops.adaptive_avg_pool(bb, xv, size), shape))
    got = vm["main"](tvm.runtime.tensor(x)).numpy()
    np.testing.assert_allclose(got, _torch_avg(x, size), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(got, _openvino("avg", x, size)[0], rtol=1e-5, atol=1e-6)


def test_adaptive_avg_runtime_output_size_and_float16():
    x = _input([2, 3, 10, 7], 8)
    vm = compile_vm(_build(lambda bb, xv, s: relax_ops.adaptive_avg_pool(bb, xv, s), x.shape, size_len=2))
    for size in ([3, 4], [11, 2]):
        got = vm["main"](tvm.runtime.tensor(x), tvm.runtime.tensor(np.array(size, "int64"))).numpy()
        np.testing.assert_allclose(got, _torch_avg(x, size), rtol=1e-5, atol=1e-6)
    x16 = x.astype(np.float16)
    vm = compile_vm(_build(lambda bb, xv: relax_ops.adaptive_avg_pool(bb, xv, [3, 4]), x.shape, "float16"))
    got = vm["main"](tvm.runtime.tensor(x16)).numpy()
    assert got.dtype == np.float16
    want = _torch_avg(x16.astype(np.float32), [3, 4])
    np.testing.assert_allclose(got.astype(np.float32), want, rtol=1e-3, atol=1e-3)


@pytest.mark.parametrize(
    "rank,shape,size,layout",
    [
        (1, (2, 3, 11), (4,), "NCW"),
        (2, (2, 3, 7, 9), (3, 4), "NCHW"),
        (2, (2, 3, 5, 6), (8, 8), "NCHW"),
        (2, (2, 3, 7, 9), None, "NCHW"),
        (3, (1, 2, 5, 6, 7), (2, 3, 4), "NCDHW"),
        (2, (2, 7, 9, 3), (3, 4), "NHWC"),  # channel-last: the same compute, in NHWC
    ],
)
def test_relax_adaptive_avg_pool_legalized(rank, shape, size, layout):
    op = getattr(relax.op.nn, f"adaptive_avg_pool{rank}d")
    mod = _build(lambda bb, xv: bb.emit(op(xv, size, layout=layout)), shape)
    legalized = relax.transform.LegalizeOps(customize_legalize_map=tvm_pool.lowering.legalize_map())(mod)
    scripts = "".join(f.script() for _, f in legalized.functions.items() if isinstance(f, tvm.tirx.PrimFunc))
    assert '"adaptive_avg_sum"' in scripts
    assert ('"channel_last"' in scripts) == (layout == "NHWC")
    x = _input(shape, 4)
    got = compile_vm(mod)["main"](tvm.runtime.tensor(x)).numpy()
    t = torch.from_numpy(x)
    if layout == "NHWC":
        t = t.permute(0, 3, 1, 2)
    want = getattr(torch.nn.functional, f"adaptive_avg_pool{rank}d")(t, size or shape[2:]).numpy()
    if layout == "NHWC":
        want = want.transpose(0, 2, 3, 1)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


# ---------------------------------------------------------------------------------------------
# ONNX custom domain tvm_pool
# ---------------------------------------------------------------------------------------------


def _onnx_model(op_type, x_shape, size, outputs=("Y",), size_as_input=False, size_dtype=np.int64, **attrs):
    node = helper.make_node(op_type, ["X", "S"], list(outputs), domain="tvm_pool", name="pool", **attrs)
    inputs = [helper.make_tensor_value_info("X", TensorProto.FLOAT, x_shape)]
    inits = []
    elem = TensorProto.INT64 if size_dtype == np.int64 else TensorProto.INT32
    if size_as_input:
        inputs.append(helper.make_tensor_value_info("S", elem, [len(size)]))
    else:
        inits.append(numpy_helper.from_array(np.array(size, size_dtype), "S"))
    index_elem = TensorProto.INT32 if attrs.get("index_element_type") == "i32" else TensorProto.INT64
    outs = [helper.make_tensor_value_info(outputs[0], TensorProto.FLOAT, None)]
    if len(outputs) > 1:
        outs.append(helper.make_tensor_value_info(outputs[1], index_elem, None))
    graph = helper.make_graph([node], "g", inputs, outs, initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18), helper.make_opsetid("tvm_pool", 1)])
    model.ir_version = 10
    return model


@pytest.mark.filterwarnings("ignore::UserWarning")
@pytest.mark.parametrize("index_type", ["i32", "i64"])
def test_onnx_adaptive_max_initializer(index_type):
    x = _input([2, 3, 7, 10], 11)
    model = _onnx_model("AdaptiveMaxPool", list(x.shape), [3, 4], ("Y", "I"), size_dtype=np.int32,
                        index_element_type=index_type)
    v, i = (t.numpy() for t in compile_vm(tvm_pool.from_onnx(model))["main"](tvm.runtime.tensor(x)))
    tv, ti = _torch_max(x, [3, 4])
    np.testing.assert_array_equal(v, tv)
    np.testing.assert_array_equal(i, ti)
    assert i.dtype == (np.int32 if index_type == "i32" else np.int64)


@pytest.mark.filterwarnings("ignore::UserWarning")
def test_onnx_adaptive_runtime_size_and_single_output():
    x = _input([1, 2, 8, 5], 12)
    model = _onnx_model("AdaptiveMaxPool", list(x.shape), [2, 2], ("Y",), size_as_input=True)
    vm = compile_vm(tvm_pool.from_onnx(model))
    for size in ([2, 2], [9, 3]):
        v = vm["main"](tvm.runtime.tensor(x), tvm.runtime.tensor(np.array(size, np.int64))).numpy()
        np.testing.assert_array_equal(v, _torch_max(x, size)[0])
    model = _onnx_model("AdaptiveAvgPool", list(x.shape), [2, 2], size_as_input=True)
    vm = compile_vm(tvm_pool.from_onnx(model))
    for size in ([3, 2], [1, 6]):
        v = vm["main"](tvm.runtime.tensor(x), tvm.runtime.tensor(np.array(size, np.int64))).numpy()
        np.testing.assert_allclose(v, _torch_avg(x, size), rtol=1e-5, atol=1e-6)


@pytest.mark.filterwarnings("ignore::UserWarning")
@pytest.mark.parametrize(
    "op_type,size,kwargs,attribute,fragment",
    [
        ("AdaptiveMaxPool", [2, 2, 2], {}, None, "output_size has 3 values"),
        ("AdaptiveMaxPool", [2], {"size_as_input": True}, None, "output_size has 1 values"),
        ("AdaptiveAvgPool", [2, 2, 2], {"size_as_input": True}, None, "output_size has 3 values"),
        ("AdaptiveAvgPool", [2, 0], {}, None, ">= 1"),
        ("AdaptiveMaxPool", [2, 2], {"index_element_type": "u8"}, "index_element_type", "i32, i64"),
        ("AdaptiveAvgPool", [2, 2], {"index_element_type": "i32"}, "index_element_type", "allowed"),
    ],
)
def test_onnx_adaptive_errors(op_type, size, kwargs, attribute, fragment):
    with pytest.raises(InvalidModelError) as info:
        tvm_pool.from_onnx(_onnx_model(op_type, [1, 2, 6, 6], size, **kwargs))
    assert info.value.attribute == attribute
    message = str(info.value)
    assert "node 'pool'" in message and f"tvm_pool::{op_type}" in message and fragment in message, message


def test_relax_api_errors():
    with pytest.raises(ValueError, match="needs 2"):
        _build(lambda bb, xv: relax_ops.adaptive_max_pool(bb, xv, [2]), [1, 1, 4, 4])
    with pytest.raises(ValueError, match="index_element_type"):
        _build(lambda bb, xv: relax_ops.adaptive_max_pool(bb, xv, [2, 2], "int64"), [1, 1, 4, 4])
    with pytest.raises(ValueError, match="needs 2"):
        _build(lambda bb, xv, s: relax_ops.adaptive_avg_pool(bb, xv, s), [1, 1, 4, 4], size_len=3)


def test_block_kinds():
    def kinds(mod):
        found = set()
        for _, f in mod.functions.items():
            if isinstance(f, tvm.tirx.PrimFunc):
                found.update(re.findall(r'"tvm_pool\.kind": "(\w+)"', f.script()))
        return found

    shape = [1, 2, 7, 5]
    assert kinds(_build(lambda bb, xv: relax_ops.adaptive_max_pool(bb, xv, [3, 2], "i32"), shape)) == {
        "adaptive_max_index", "adaptive_max_index_finalize"}
    assert kinds(_build(lambda bb, xv: relax_ops.adaptive_max_pool(bb, xv, [3, 2], return_indices=False), shape)) == {
        "adaptive_max"}
    assert kinds(_build(lambda bb, xv, s: relax_ops.adaptive_avg_pool(bb, xv, s), shape, size_len=2)) == {
        "adaptive_avg_sum", "adaptive_avg_finalize"}
