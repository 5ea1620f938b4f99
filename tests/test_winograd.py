"""Winograd F(4x4, 3x3) for x86's channel-last 3x3 convolutions (tvm_pool/winograd.py,
schedules/winograd.py): exact against PyTorch's convolution inside fused graphs (bias,
activation, residual add, two uses), scheduled equal to unscheduled, the rewrite declining what
it does not cover, and "auto" taking exactly the convolutions whose product has a record."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch
import tvm
from tvm import relax
from tvm.s_tir import meta_schedule as ms

import tvm_pool
from tvm_pool import lowering, winograd
from tvm_pool.schedules import winograd as winograd_rule


def _graph(shape, weight, bias, *, pad=1, stride=1, groups=1, residual=False, two_uses=False):
    """x -> relu -> conv (+bias) -> relu [-> + x (residual)] [-> concat with a second use]."""
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType(shape, "float32"))
    with bb.function("main", [x]):
        with bb.dataflow():
            h = bb.emit(relax.op.nn.relu(x))  # a producer
            y = bb.emit(relax.op.nn.conv2d(h, relax.const(weight), strides=stride, padding=pad, groups=groups))
            y = bb.emit(relax.op.add(y, relax.const(bias.reshape(1, -1, 1, 1))))
            y = bb.emit(relax.op.nn.relu(y))
            if residual:
                y = bb.emit(relax.op.add(y, x))
            if two_uses:
                y = bb.emit(relax.op.concat([y, relax.op.multiply(y, relax.const(np.float32(2.0)))], axis=1))
            out = bb.emit_output(y)
        bb.emit_func_output(out)
    return bb.get()


def _reference(x, weight, bias, *, pad=1, residual=False, two_uses=False):
    y = torch.relu(torch.nn.functional.conv2d(torch.relu(torch.from_numpy(x)), torch.from_numpy(weight),
                                              torch.from_numpy(bias), padding=pad))
    if residual:
        y = y + torch.from_numpy(x)
    if two_uses:
        y = torch.cat([y, y * 2], dim=1)
    return y.numpy()


def _run(mod, x, target, **kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ex = tvm_pool.compile(mod, target, conv_layout="NHWC", shipped_logs=False, **kwargs)
    return relax.VirtualMachine(ex, tvm.cpu())["main"](tvm.runtime.tensor(x)).numpy()


def _kernels(mod, target, mode):
    fused = lowering.fuse(mod, target, "NHWC", mode)
    return [gv.name_hint for gv, f in fused.functions_items() if isinstance(f, tvm.tirx.PrimFunc)]


@pytest.mark.parametrize("case", range(4))
def test_matches_torch_in_fused_graphs(case, rng, host):
    """Random sizes (planes not a multiple of the 4x4 tile too), pads 0 and 1, batch 1 and 2,
    a producer, bias and relu fused after, a residual add, two uses of the result."""
    batch = [1, 2, 1, 1][case]
    size = int(rng.integers(28, 41))
    channels, filters = (int(c) for c in rng.choice([32, 40, 64], 2))
    pad = [1, 1, 0, 1][case]
    residual = case == 1 and channels == filters
    two_uses = case == 3
    shape = (batch, channels, size, size)
    weight = (rng.standard_normal((filters, channels, 3, 3)) / np.sqrt(9 * channels)).astype("float32")
    bias = rng.standard_normal(filters).astype("float32")
    x = rng.standard_normal(shape).astype("float32")
    mod = _graph(shape, weight, bias, pad=pad, residual=residual, two_uses=two_uses)
    assert "winograd_input" in _kernels(mod, host, "always")
    want = _reference(x, weight, bias, pad=pad, residual=residual, two_uses=two_uses)
    scale = np.abs(want).max()
    scheduled = _run(mod, x, host, winograd="always")
    unscheduled = _run(mod, x, host, winograd="always", schedule=False)
    direct = _run(mod, x, host, winograd="never")
    assert np.abs(scheduled - want).max() <= 1e-4 * scale
    assert np.abs(unscheduled - want).max() <= 1e-4 * scale
    assert np.abs(direct - want).max() <= 1e-5 * scale


@pytest.mark.parametrize("what", ["stride", "groups", "few_channels", "small_plane", "nchw"])
def test_declines_what_it_does_not_cover(what, rng, host):
    channels = 8 if what == "few_channels" else 32
    size = 12 if what == "small_plane" else 28
    groups = 2 if what == "groups" else 1
    weight = rng.standard_normal((32, channels // groups, 3, 3)).astype("float32")
    mod = _graph((1, channels, size, size), weight, np.zeros(32, "float32"),
                 stride=2 if what == "stride" else 1, groups=groups)
    layout = "NCHW" if what == "nchw" else "NHWC"
    fused = lowering.fuse(mod, host, layout, "always")
    names = [gv.name_hint for gv, f in fused.functions_items() if isinstance(f, tvm.tirx.PrimFunc)]
    assert not any("winograd" in n for n in names), names


def test_auto_takes_the_convolutions_whose_product_has_a_record(rng, host):
    weight = (rng.standard_normal((32, 32, 3, 3)) / 17).astype("float32")
    mod = _graph((1, 32, 28, 28), weight, np.zeros(32, "float32"))
    assert "winograd_input" not in _kernels(mod, host, "auto")  # no database: the direct convolution
    database = ms.database.MemoryDatabase()
    with database:
        assert "winograd_input" not in _kernels(mod, host, "auto")  # a database without the product
    v_shape, u_shape = (36, 49, 32), (36, 32, 32)  # 7x7 tiles of 4x4 over the 28x28 output
    workload = lowering._product_workload(str(host), v_shape, u_shape)  # pylint: disable=protected-access
    entry = database.commit_workload(workload)
    database.commit_tuning_record(ms.database.TuningRecord(tvm.s_tir.Schedule(workload).trace, entry, [1e-3]))
    with database:
        assert "winograd_input" in _kernels(mod, host, "auto")


def test_rule_declines_other_functions(host):
    func = tvm.te.create_prim_func([x := tvm.te.placeholder((4, 4), name="x"),
                                    tvm.te.compute((4, 4), lambda i, j: x[i, j] + 1, name="y")])
    assert winograd_rule.Transforms().apply(func, host, False) is None
    assert not winograd_rule.takes(func)


def test_weight_transform_is_the_convolution(rng):
    """A tile's ``A^T [U * (B^T d B)] A`` equals the 3x3 correlation of the 6x6 tile."""
    a_mat, b_mat, _ = winograd.matrices()
    weight = rng.standard_normal((3, 3, 1, 1))
    tile = rng.standard_normal((6, 6))
    u = winograd.transform_weight(weight.astype("float32")).reshape(6, 6).astype(np.float64)
    got = a_mat.T @ (u * (b_mat.T @ tile @ b_mat)) @ a_mat
    want = np.array([[np.sum(tile[i:i + 3, j:j + 3] * weight[:, :, 0, 0]) for j in range(4)] for i in range(4)])
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_bad_mode():
    with pytest.raises(ValueError, match="winograd mode must be one of auto, always, never"):
        winograd.rewrite("sometimes")


def test_coverage_counts_the_transforms_as_tvm_pools(rng, host, monkeypatch):
    """The transforms are hand-scheduled: the coverage line names them with the pooling
    kernels, not as untuned kernels, and the product is the one kernel left to tune."""
    from tvm_pool.tuning import lookup  # pylint: disable=import-outside-toplevel

    weight = (rng.standard_normal((32, 32, 3, 3)) / 17).astype("float32")
    mod = _graph((1, 32, 28, 28), weight, np.zeros(32, "float32"))
    database = ms.database.MemoryDatabase()
    workload = lowering._product_workload(str(host), (36, 49, 32), (36, 32, 32))  # pylint: disable=protected-access
    database.commit_tuning_record(ms.database.TuningRecord(
        tvm.s_tir.Schedule(workload).trace, database.commit_workload(workload), [1e-3]))
    # no log directory (the current database is what "auto" reads), so no layout choice either
    monkeypatch.setattr(lowering, "choose_conv_layout", lambda *args, **kwargs: "NHWC")
    with database:
        cov = lookup.coverage(mod, host, shipped=False)
    assert cov.transforms == 2 and cov.pooling == 0
    assert "2 Winograd transform(s) take tvm_pool's schedules" in cov.line("m.onnx")
