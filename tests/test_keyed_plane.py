"""A global max over a plane larger than a flat plane, as the integer max of order keys
(compute.forms.keyed_plane, compute.common.single_order): the float32 keys order as the values
do (NaN of either sign above +inf, -0.0 just below +0.0, -inf at 0) and map back bit for bit;
the pool is the plane's maximum, randomized against onnxruntime, the unscheduled module and a
float64 reference with NaN, infinities and signed zeros, on every road that reaches it, fused
with producers and consumers; and each CPU schedule reduces the keys in vector partial maxima
(TVM's rfactor, which the NaN-max select it does not know kept a scalar chain)."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
import tvm
from onnx import TensorProto, helper
from tvm import s_tir, te

from oracles import IR_VERSION, pool_model, run_onnxruntime, run_tvm_pool
from tvm_pool import compute, spec
from tvm_pool.compute import common, forms


def _keys_and_back(values):
    n = values.size
    x = te.placeholder((n,), "float32", name="x")
    key = te.compute(x.shape, lambda i: common.single_order(x[i]), name="key")
    back = te.compute(x.shape, lambda i: common.single_from_order(key[i]), name="back")
    lib = tvm.compile(te.create_prim_func([x, key, back]), target="llvm")
    args = [tvm.runtime.tensor(values), tvm.runtime.tensor(np.zeros(n, "uint32")), tvm.runtime.tensor(np.zeros(n, "float32"))]
    lib(*args)
    return args[1].numpy(), args[2].numpy()


def test_single_keys_order_as_the_values_and_map_back():
    rng = np.random.default_rng(0)
    special = np.array([0x00000000, 0x80000000, 0x7F800000, 0xFF800000, 0x7F800001, 0xFF800001, 0x7FC00000,
                        0xFFC00000, 0x7FFFFFFF, 0xFFFFFFFF, 0x00000001, 0x80000001, 0x7F7FFFFF, 0xFF7FFFFF], np.uint32)
    bits = np.concatenate([special, rng.integers(0, 1 << 32, size=1 << 16, dtype=np.uint64).astype(np.uint32)])
    values = bits.view(np.float32)
    keys, back = _keys_and_back(values)
    assert np.array_equal(back.view(np.uint32), bits)  # NaNs keep their bits
    nan = np.isnan(values)
    assert keys[~nan].max() < keys[nan].min()  # both signs of NaN above +inf
    numbers = values[~nan].astype(np.float64)
    numbers[(numbers == 0) & np.signbit(numbers)] = -1e-300  # -0.0 orders just below +0.0
    order = np.argsort(keys[~nan], kind="stable")
    assert np.all(np.diff(numbers[order]) >= 0)
    assert np.all(np.diff(keys[~nan][order].astype(np.int64))[np.diff(numbers[order]) > 0] > 0)
    assert keys[bits == 0xFF800000][0] == 0  # -inf is the uint32 max's identity


def test_keyed_plane_chosen_for_global_windows_past_the_flat_plane():
    assert forms.choose_form(spec.global_windows([112, 112]), "max") == forms.KEYED_PLANE
    assert forms.choose_form(spec.global_windows([300]), "max") == forms.KEYED_PLANE
    assert forms.choose_form(spec.global_windows([7, 7]), "max") == forms.FLAT_PLANE
    assert forms.choose_form(spec.global_windows([112, 112]), "max", channel_last=True) != forms.KEYED_PLANE
    assert forms.choose_form(spec.global_windows([112, 112]), "sum") != forms.KEYED_PLANE
    windows = spec.resolve_windows([30, 30], [30, 30], [1, 1], [1, 1], [1, 1, 1, 1], "NOTSET", False)
    assert forms.choose_form(windows, "max") != forms.KEYED_PLANE  # padded: not a global window


def _special(rng, shape, dtype, nan, all_minus_inf=True):
    """Values with ties, both zeros, both infinities and (with ``nan``) NaNs of both signs in
    some planes: a plane's max lands on each of them somewhere (on -inf only with
    ``all_minus_inf``: onnxruntime's max of such a plane is the least finite value)."""
    x = (rng.integers(-6, 7, size=shape) / 4).astype(np.float64)
    planes = x.reshape(shape[0] * shape[1], -1)
    for plane in planes:
        kind = rng.integers(0, 6)
        if kind == 0:
            plane[:] = np.where(plane > 0, -0.0, plane)  # max -0.0
        elif kind == 1:
            plane[:] = np.where(plane > 0, -0.0, plane)
            plane[rng.integers(0, plane.size)] = 0.0  # max +0.0, with -0.0 around
        elif kind == 2 and all_minus_inf:
            plane[:] = -np.inf
        elif kind == 3:
            plane[rng.integers(0, plane.size)] = np.inf
        elif kind == 4 and nan:
            plane[rng.integers(0, plane.size, size=2)] = [np.nan, -np.nan]
    return x.astype(dtype)


def _plane_max(x):
    """The IEEE maximum of each plane in float64: NaN if any, +0.0 over -0.0."""
    wide = x.astype(np.float64).reshape(x.shape[0], x.shape[1], -1)
    wide = np.where((wide == 0) & np.signbit(wide), -1e-300, wide)
    out = np.where(np.isnan(wide).any(-1), np.nan, wide.max(-1))
    out[out == -1e-300] = -0.0
    return out.reshape(list(x.shape[:2]) + [1] * (x.ndim - 2))


def _assert_plane_max(got, x):
    """``got`` is each plane's maximum; +0.0 over -0.0 where the max ran on keys (a float64 max
    keeps its select, which returns either zero)."""
    want = _plane_max(x)
    wide = got.astype(np.float64)
    nan = np.isnan(want)
    assert np.array_equal(np.isnan(wide), nan)
    assert np.array_equal(wide[~nan], want[~nan])
    if str(x.dtype) in common.ORDER_KEY_DTYPES:
        assert np.array_equal(np.signbit(wide[~nan]), np.signbit(want[~nan]))  # +0.0 over -0.0


@pytest.mark.parametrize("seed", range(10))
def test_global_max_matches_oracles(seed):
    rng = np.random.default_rng(300 + seed)
    rank = [1, 2, 2, 3][seed % 4]
    dtype = ["float32", "float32", "float16", "float32", "int8", "float64", "float32", "uint8", "float32", "float16"][seed]
    spatial = {1: lambda: [int(rng.integers(273, 2000))], 2: lambda: [int(rng.integers(17, 60)) for _ in range(2)],
               3: lambda: [int(rng.integers(17, 30)), int(rng.integers(3, 7)), int(rng.integers(3, 7))]}[rank]()
    shape = [int(rng.integers(1, 3)), int(rng.integers(1, 6))] + spatial
    assert forms.choose_form(spec.global_windows(spatial), "max") == forms.KEYED_PLANE
    # MaxPool with the whole plane as its window: GlobalMaxPool takes no integers, and
    # onnxruntime has no float64 GlobalMaxPool
    model = pool_model("MaxPool", shape, dtype=dtype, kernel_shape=spatial)
    if dtype.startswith("float"):
        x = _special(rng, shape, dtype, nan=False, all_minus_inf=False)
    else:
        info = np.iinfo(dtype)
        x = rng.integers(info.min, info.max, size=shape, endpoint=True, dtype=dtype)
    got = run_tvm_pool(model, {"X": x})[0]
    np.testing.assert_array_equal(got, run_onnxruntime(model, {"X": x})[0], err_msg=f"{shape} {dtype}")
    if dtype.startswith("float"):
        _assert_plane_max(got, x)
        x = _special(rng, shape, dtype, nan=True)  # onnxruntime's max skips NaN (docs/conformance.md)
        got = run_tvm_pool(model, {"X": x})[0]
        _assert_plane_max(got, x)
    else:
        np.testing.assert_array_equal(got, x.max(axis=tuple(range(2, x.ndim)), keepdims=True))
    np.testing.assert_array_equal(got, run_tvm_pool(model, {"X": x}, schedule=False)[0])


def _fused_model(shape):
    """Relu -> GlobalMaxPool -> (Add with a branch, Concat with it, and the pool itself: three
    uses), all in one PrimFunc once fused."""
    c = shape[1]
    pooled = shape[:2] + [1, 1]
    nodes = [
        helper.make_node("Relu", ["X"], ["r"]),
        helper.make_node("GlobalMaxPool", ["r"], ["p"]),
        helper.make_node("Add", ["p", "B"], ["sum"]),
        helper.make_node("Concat", ["p", "B"], ["cat"], axis=1),
    ]
    graph = helper.make_graph(
        nodes, "fused",
        [helper.make_tensor_value_info("X", TensorProto.FLOAT, shape), helper.make_tensor_value_info("B", TensorProto.FLOAT, pooled)],
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in
         (("p", pooled), ("sum", pooled), ("cat", [shape[0], 2 * c, 1, 1]))])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)], ir_version=IR_VERSION)


@pytest.mark.parametrize("shape", [[2, 3, 40, 37], [1, 8, 112, 112]])
def test_fused_global_max_scheduled_equals_unscheduled(shape):
    rng = np.random.default_rng(sum(shape))
    model = _fused_model(shape)
    onnx.checker.check_model(model)
    feeds = {"X": _special(rng, shape, "float32", nan=False, all_minus_inf=False), "B": rng.standard_normal(shape[:2] + [1, 1]).astype("float32")}
    got = run_tvm_pool(model, feeds)
    for g, w in zip(got, run_onnxruntime(model, feeds)):
        np.testing.assert_array_equal(g, w)
    feeds["X"] = _special(rng, shape, "float32", nan=True)
    for g, w in zip(run_tvm_pool(model, feeds), run_tvm_pool(model, feeds, schedule=False)):
        np.testing.assert_array_equal(g, w)


@pytest.mark.parametrize("target", ["llvm", "arm"])
def test_cpu_schedules_reduce_the_keys_in_vector_partial_maxima(target):
    from tvm_pool.schedules import cpu, rule_for  # pylint: disable=import-outside-toplevel
    from tvm_pool.targets import host_target, resolve_target  # pylint: disable=import-outside-toplevel

    tgt = host_target() if target == "llvm" else resolve_target(target)
    x = te.placeholder((2, 16, 56, 56), "float32", name="x")
    y = compute.global_pool(x, "max")
    sch = s_tir.Schedule(te.create_prim_func([x, y]))
    with tgt:
        cpu.schedule_function(sch, rule_for(tgt).config(tgt))
    script = sch.mod["main"].script()
    assert '"uint32"' in script and "max_pool_keys_rf" in script
    assert "T.vectorized" in script and "T.parallel" in script
    assert "T.Select" not in script  # no NaN-max select left: a plain max of keys


def test_torch_road_global_window_is_keyed():
    torch = pytest.importorskip("torch")
    import tvm_pool  # pylint: disable=import-outside-toplevel

    class Pool(torch.nn.Module):
        def forward(self, x):
            return torch.nn.functional.max_pool2d(x, kernel_size=x.shape[-2:])

    rng = np.random.default_rng(5)
    x = _special(rng, [2, 4, 30, 31], "float32", nan=True)
    program = torch.export.export(Pool(), (torch.from_numpy(x),))
    vm = tvm.relax.VirtualMachine(tvm_pool.compile(tvm_pool.from_exported_program(program), "llvm"), tvm.cpu())
    out = vm["main"](tvm.runtime.tensor(x))
    _assert_plane_max((out if isinstance(out, tvm.runtime.Tensor) else out[0]).numpy(), x)


@pytest.mark.parametrize("pooling_type", ["MAX", "MAX_AVERAGE_BLEND"])
def test_tensorrt_whole_plane_window_is_keyed(pooling_type):
    """TensorRT's pooling with the plane as its window takes the keyed plane (its kinds trt_max
    and trt_max_finalize), scheduled equal to unscheduled with a NaN plane."""
    from tvm_pool.compute import tensorrt  # pylint: disable=import-outside-toplevel
    from tvm_pool.schedules import cpu, rule_for  # pylint: disable=import-outside-toplevel
    from tvm_pool.targets import host_target  # pylint: disable=import-outside-toplevel

    x = te.placeholder((2, 3, 30, 31), "float32", name="x")
    y = tensorrt.tensorrt_pool(x, pooling_type, [30, 31], blend_factor=0.5)
    func = te.create_prim_func([x, y])
    assert "trt_max_finalize" in func.script()
    sch = s_tir.Schedule(func)
    target = host_target()
    with target:
        cpu.schedule_function(sch, rule_for(target).config(target))
    assert "trt_pool_max_keys_rf" in sch.mod["main"].script()
    data = _special(np.random.default_rng(9), [2, 3, 30, 31], "float32", nan=True)
    outs = []
    for f in (func, sch.mod["main"]):
        lib = tvm.compile(tvm.IRModule({"main": f.with_attr("global_symbol", "main")}), target="llvm")
        out = tvm.runtime.tensor(np.zeros((2, 3, 1, 1), "float32"))
        lib(tvm.runtime.tensor(data), out)
        outs.append(out.numpy())
    np.testing.assert_array_equal(outs[0], outs[1])
    if pooling_type == "MAX":
        _assert_plane_max(outs[1], data)
