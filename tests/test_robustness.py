"""Robustness (GitHub issue 11): hostile inputs end in one clear line and exit status 2, never
in a signal, a memory-unsafe run, a silent wrong result or a lost file.

CLI cases that could die of a signal run in a forked child (``run_forked``): a signal shows as
a negative exit code instead of killing pytest."""

from __future__ import annotations

import gc
import multiprocessing
import os
import re
import shutil
import sys
import time
import types
import warnings

import ml_dtypes
import numpy as np
import onnx
import pytest
import tvm
from onnx import TensorProto, helper, numpy_helper

import tvm_pool
from tvm_pool import artifact, cli, spec
from tvm_pool.cli import compile as cli_compile
from tvm_pool.compute.pool import _may_see_no_data
from helpers import compile_vm, pool_module

F, I64 = TensorProto.FLOAT, TensorProto.INT64


def make_model(nodes, inputs, outputs, opsets=(("", 19),), initializers=()) -> onnx.ModelProto:
    model = helper.make_model(
        helper.make_graph(nodes, "g", inputs, outputs, initializer=list(initializers)),
        opset_imports=[helper.make_opsetid(d, v) for d, v in opsets],
    )
    model.ir_version = 10
    return model


def tensor(name, elem, shape):
    return helper.make_tensor_value_info(name, elem, shape)


def import_error(model) -> str:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(tvm_pool.InvalidModelError) as info:
            tvm_pool.from_onnx(model)
    message = str(info.value)
    assert "\n" not in message
    return message


def _child(argv, err_path):
    gc.collect()  # native objects inherited from earlier in-process tests warn when freed
    os.dup2(os.open(err_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC), 2)
    os.dup2(os.open(os.devnull, os.O_WRONLY), 1)
    sys.stdout = open(1, "w", closefd=False)  # noqa: SIM115  (pytest's capture is not fd 1/2)
    sys.stderr = open(2, "w", closefd=False)  # noqa: SIM115
    rc = cli.main(argv)
    sys.stderr.flush()
    sys.stdout.flush()
    os._exit(rc)


def run_forked(argv, tmp_path) -> tuple[int, str]:
    """``tvm-pool ARGV`` in a forked child: (exit code, negative for a signal; stderr)."""
    gc.collect()
    err_path = tmp_path / f"stderr_{time.monotonic_ns()}.txt"
    child = multiprocessing.get_context("fork").Process(target=_child, args=(argv, str(err_path)))
    child.start()
    child.join(120)
    if child.is_alive():
        child.kill()
        pytest.fail(f"tvm-pool {argv} hung")
    return child.exitcode, err_path.read_text() if err_path.exists() else ""


def assert_one_line(rc_err, *expected):
    rc, err = rc_err
    assert rc == 2, (rc, err)  # not a signal (negative), not success
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("tvm-pool: error: "), err
    for text in expected:
        assert text in lines[0], lines[0]
    return lines[0]


def cli_error(capfd, argv, *expected) -> str:
    gc.collect()  # native objects left by earlier in-process imports warn on fd 2 when freed
    capfd.readouterr()
    rc = cli.main(argv)
    out, err = capfd.readouterr()
    return assert_one_line((rc, err), *expected)


# --------------------------------------------------------------------------------------------
# Shared files: a small compiled model, MaxUnpool and adaptive pooling with run-time sizes.
# --------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    root = tmp_path_factory.mktemp("robust")
    paths = types.SimpleNamespace(root=root)
    small = make_model(
        [helper.make_node("MaxPool", ["x"], ["y"], name="pool", kernel_shape=[2, 2])],
        [tensor("x", F, [1, 1, 4, 4])], [tensor("y", F, None)],
    )
    paths.onnx = root / "small.onnx"
    onnx.save(small, paths.onnx)
    paths.so = root / "small.so"
    assert cli.main(["-q", "compile", str(paths.onnx), "-o", str(paths.so)]) == 0
    paths.inputs = root / "in.npz"
    np.savez(paths.inputs, x=np.arange(16, dtype=np.float32).reshape(1, 1, 4, 4))

    unpool = make_model(
        [helper.make_node("MaxUnpool", ["x", "i", "s"], ["y"], name="unpool", kernel_shape=[2, 2], strides=[2, 2])],
        [tensor("x", F, [1, 1, 2, 2]), tensor("i", I64, [1, 1, 2, 2]), tensor("s", I64, [4])],
        [tensor("y", F, None)], opsets=(("", 11),),
    )
    paths.unpool_onnx = root / "unpool.onnx"
    onnx.save(unpool, paths.unpool_onnx)
    paths.unpool_so = root / "unpool.so"
    assert cli.main(["-q", "compile", str(paths.unpool_onnx), "-o", str(paths.unpool_so)]) == 0

    adaptive = make_model(
        [helper.make_node("AdaptiveAvgPool", ["x", "s"], ["y"], name="ap", domain="tvm_pool")],
        [tensor("x", F, [1, 2, 8, 8]), tensor("s", I64, [2])], [tensor("y", F, None)],
        opsets=(("", 19), ("tvm_pool", 1)),
    )
    onnx.save(adaptive, root / "adaptive.onnx")
    paths.adaptive_so = root / "adaptive.so"
    assert cli.main(["-q", "compile", str(root / "adaptive.onnx"), "-o", str(paths.adaptive_so)]) == 0
    return paths


def unpool_inputs(path, indices, shape):
    np.savez(
        path, x=np.arange(1, 5, dtype=np.float32).reshape(1, 1, 2, 2),
        i=np.array(indices, np.int64).reshape(1, 1, 2, 2), s=np.array(shape, np.int64),
    )
    return str(path)


# --------------------------------------------------------------------------------------------
# 1. Memory safety at run time: indices and sizes read at run time are checked in the module.
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("bad", [16, 17, 1 << 40, -1, -(1 << 62)])
def test_max_unpool_index_out_of_bounds_is_refused_at_run_time(files, tmp_path, bad):
    inputs = unpool_inputs(tmp_path / "in.npz", [0, 3, bad, 15], [1, 1, 4, 4])
    line = assert_one_line(
        run_forked(["-q", "run", str(files.unpool_so), "--inputs", inputs], tmp_path),
        "node 'unpool' (MaxUnpool-11): input I has an index out of bounds; valid range is [0, 16)",
    )
    assert "main failed" in line


def test_max_unpool_valid_indices_still_scatter(files, tmp_path):
    inputs = unpool_inputs(tmp_path / "in.npz", [0, 3, 8, 15], [1, 1, 5, 4])
    out = tmp_path / "out.npz"
    assert cli.main(["-q", "run", str(files.unpool_so), "--inputs", inputs, "-o", str(out)]) == 0
    want = np.zeros((1, 1, 5, 4), np.float32)
    want[0, 0, 0, 0], want[0, 0, 0, 3], want[0, 0, 2, 0], want[0, 0, 3, 3] = 1, 2, 3, 4
    with np.load(out) as got:
        np.testing.assert_array_equal(got["y"], want)


@pytest.mark.parametrize(
    "shape,expected",
    [
        ([1, 1, 3, 4], "input output_shape is smaller than the unpooled shape [1, 1, 4, 4]"),
        ([1, 1, 0, 4], "input output_shape is smaller than the unpooled shape"),
        ([1, 1, -4, 4], "input output_shape is smaller than the unpooled shape"),
        ([1, 1, 1 << 40, 1 << 40], "input output_shape gives an output too large to allocate"),
        ([1, 1, 1 << 62, 5], "input output_shape gives an output too large to allocate"),
        ([1 << 31, 1 << 31, 4, 4], "input output_shape gives an output too large to allocate"),
    ],
)
def test_max_unpool_runtime_output_shape_is_checked(files, tmp_path, shape, expected):
    inputs = unpool_inputs(tmp_path / "in.npz", [0, 3, 8, 15], shape)
    assert_one_line(run_forked(["-q", "run", str(files.unpool_so), "--inputs", inputs], tmp_path), expected)


def test_max_unpool_static_index_initializer_is_checked():
    model = make_model(
        [helper.make_node("MaxUnpool", ["x", "i"], ["y"], name="unpool", kernel_shape=[2, 2], strides=[2, 2])],
        [tensor("x", F, [1, 1, 2, 2])], [tensor("y", F, None)], opsets=(("", 11),),
        initializers=[numpy_helper.from_array(np.array([0, 3, 8, 16], np.int64).reshape(1, 1, 2, 2), "i")],
    )
    assert "input I has index 16 out of bounds; valid range is [0, 16)" in import_error(model)


@pytest.mark.parametrize("op", ["AdaptiveMaxPool", "AdaptiveAvgPool"])
def test_adaptive_runtime_output_size_is_checked(op):
    outs = ["y", "idx"] if op == "AdaptiveMaxPool" else ["y"]
    model = make_model(
        [helper.make_node(op, ["x", "s"], outs, name="ap", domain="tvm_pool")],
        [tensor("x", F, [1, 2, 8, 8]), tensor("s", I64, [2])], [tensor(o, F, None) for o in outs],
        opsets=(("", 19), ("tvm_pool", 1)),
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        vm = compile_vm(tvm_pool.from_onnx(model))
    x = tvm.runtime.tensor(np.random.default_rng(0).random((1, 2, 8, 8), np.float32))
    prefix = f"node 'ap' (tvm_pool::{op}-1): input output_size"
    cases = {
        (0, 3): "values must be >= 1",
        (-5, 2): "values must be >= 1",
        (1 << 40, 1 << 40): "gives an output too large to allocate",
        (1 << 62, 1): "gives an output too large to allocate",
        (1 << 31, 1 << 31): "gives an output too large to allocate",
    }
    for size, expected in cases.items():
        with pytest.raises(ValueError, match="^" + " ".join([prefix, expected]).replace("(", r"\(").replace(")", r"\)")):
            vm["main"](x, tvm.runtime.tensor(np.array(size, np.int64)))
    good = vm["main"](x, tvm.runtime.tensor(np.array([3, 5], np.int64)))
    assert (good if hasattr(good, "shape") else good[0]).shape == (1, 2, 3, 5)


@pytest.mark.parametrize(
    "size,expected",
    [
        ([0, 3], "input output_size values must be >= 1"),
        ([1 << 62, 1], "input output_size gives an output too large to allocate"),
        ([1 << 20, 1 << 20], "out of memory"),  # fits int64 (16 TB): the allocation itself fails
    ],
)
def test_adaptive_runtime_output_size_from_the_cli(files, tmp_path, size, expected):
    np.savez(tmp_path / "in.npz", x=np.zeros((1, 2, 8, 8), np.float32), s=np.array(size, np.int64))
    assert_one_line(
        run_forked(["-q", "run", str(files.adaptive_so), "--inputs", str(tmp_path / "in.npz")], tmp_path), expected
    )


def test_adaptive_static_output_size_too_large_is_refused():
    model = make_model(
        [helper.make_node("AdaptiveAvgPool", ["x", "s"], ["y"], name="ap", domain="tvm_pool")],
        [tensor("x", F, [1, 2, 8, 8])], [tensor("y", F, None)], opsets=(("", 19), ("tvm_pool", 1)),
        initializers=[numpy_helper.from_array(np.array([1 << 40, 1 << 40], np.int64), "s")],
    )
    assert "output_size gives an output too large to allocate" in import_error(model)


# --------------------------------------------------------------------------------------------
# 2. Large axes: correct code, compile cost independent of the axis length.
# --------------------------------------------------------------------------------------------


def test_may_see_no_data_closed_form_matches_enumeration():
    def enumerated(windows):
        return any(
            not any(0 <= w.tap(o, r) < w.in_size for r in range(w.kernel)) for w in windows for o in range(w.out_size)
        )

    checked = 0
    for size in range(1, 9):
        for k, s, d, pb, pe, ceil in np.ndindex(3, 3, 3, 3, 3, 2):
            windows = spec.resolve_windows([size], [k + 1], [s + 1], [d + 1], [pb, pe], "NOTSET", bool(ceil))
            if windows[0].out_size < 1:
                continue
            checked += 1
            got, want = _may_see_no_data(windows), enumerated(windows)
            assert got == want or (got and size < d + 1), (size, k + 1, s + 1, d + 1, pb, pe, ceil)
    assert checked > 1000
    start = time.perf_counter()
    assert not _may_see_no_data(spec.resolve_windows([10**8], [3], [1], [2], [1, 1], "NOTSET", False))
    assert time.perf_counter() - start < 0.1


def _max_pool_llvm(n: int) -> str:
    model = make_model(
        [helper.make_node("MaxPool", ["x"], ["y", "i"], name="p", kernel_shape=[2], pads=[1, 1])],
        [tensor("x", F, [1, 1, n])], [tensor("y", F, None), tensor("i", I64, None)], opsets=(("", 12),),
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ex = tvm_pool.compile(tvm_pool.from_onnx(model), "llvm")
    sources = [ex.mod] + list(ex.mod.imports)
    return "\n".join(m.inspect_source("ll") for m in sources if m.kind == "llvm")


@pytest.mark.parametrize("n", [2**28, 2**31 - 2, 2**31 - 1, 2**31, 2**32 - 1, 2**32 + 1])
def test_max_pool_with_indices_on_huge_axes_compiles_fast_and_reads_x(n):
    start = time.perf_counter()
    ll = _max_pool_llvm(n)  # compile only: these tensors are never allocated
    assert time.perf_counter() - start < 30  # was: unrolled in full, > 8 GB and minutes
    body = re.search(r"\ndefine [^\n]*@tvm_pool_max_pool_compute_\(.*?\n}\n", ll, re.S).group(0)
    # reads X (as floats, or as their bits: the argmax's keys)
    assert re.search(r"getelementptr [^\n]*ptr %x\b", body) and re.search(r"load[^\n]*(float|i32)", body)
    assert body.count("\n") < 2000  # not unrolled over the axis


@pytest.mark.parametrize("shape", [[1, 1, 2**15, 2**15], [1, 2, 2**15, 2**15], [2, 2, 2**15, 2**15]])
def test_max_unpool_of_2_to_the_31_elements_compiles(shape):
    # was: "Literal value 2147483648 exceeds range of int32" from TVM's reshape rewriting
    model = make_model(
        [helper.make_node("MaxUnpool", ["x", "i"], ["y"], name="unpool", kernel_shape=[2, 2], strides=[2, 2])],
        [tensor("x", F, shape), tensor("i", I64, shape)], [tensor("y", F, None)], opsets=(("", 11),),
    )
    start = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        tvm_pool.compile(tvm_pool.from_onnx(model), "llvm")  # compile only
    assert time.perf_counter() - start < 30


# --------------------------------------------------------------------------------------------
# 3. No lost files.
# --------------------------------------------------------------------------------------------


def test_compile_never_overwrites_its_model(files, tmp_path, capfd):
    cli_error(capfd, ["-q", "compile", str(files.onnx), "-o", str(files.onnx)], "is the input model")
    named_so = tmp_path / "model.so"
    shutil.copy(files.onnx, named_so)
    cli_error(capfd, ["-q", "compile", str(named_so)], "is the input model")
    assert onnx.load(named_so).graph.node[0].op_type == "MaxPool"


def test_compile_output_paths(files, tmp_path, capfd):
    cli_error(capfd, ["-q", "compile", str(files.onnx), "-o", str(tmp_path)], "is a directory")
    cli_error(capfd, ["-q", "compile", str(files.onnx), "-o", str(tmp_path / "no" / "m.so")], "does not exist")
    cli_error(capfd, ["-q", "compile", str(files.onnx), "-o", str(tmp_path / "m.bin")], "must end in .so")
    assert cli_compile.output_path(str(files.onnx), str(tmp_path / "noext")) == str(tmp_path / "noext.so")
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o500)
    if not os.access(locked, os.W_OK):  # root can write anyway
        cli_error(capfd, ["-q", "compile", str(files.onnx), "-o", str(locked / "m.so")], "is not writable")


def test_run_never_overwrites_its_inputs(files, tmp_path, capfd):
    inputs = tmp_path / "in.npz"
    shutil.copy(files.inputs, inputs)
    before = inputs.read_bytes()
    cli_error(capfd, ["-q", "run", str(files.so), "--inputs", str(inputs), "-o", str(inputs)], "is the --inputs archive")
    cli_error(capfd, ["-q", "run", str(files.so), "--inputs", str(inputs), "-o", str(tmp_path / "in")], "is the --inputs archive")
    assert inputs.read_bytes() == before
    # -o without .npz: numpy adds it, and the message says so
    assert cli.main(["-q", "run", str(files.so), "--inputs", str(inputs), "-o", str(tmp_path / "res")]) == 0
    assert f"wrote {tmp_path / 'res.npz'}" in capfd.readouterr().out
    assert (tmp_path / "res.npz").exists()


def test_demo_never_overwrites_a_file_it_was_not_given(tmp_path, capfd):
    (tmp_path / "x_inputs.npz").write_bytes(b"precious")
    cli_error(capfd, ["-q", "demo", "--save-model", str(tmp_path / "x.onnx")], "x_inputs.npz, which exists")
    assert (tmp_path / "x_inputs.npz").read_bytes() == b"precious"
    assert not (tmp_path / "x.onnx").exists()
    cli_error(capfd, ["-q", "demo", "--save-model", str(tmp_path)], "is a directory")
    cli_error(capfd, ["-q", "demo", "--repeat", "0"], "--repeat must be at least 1")


# --------------------------------------------------------------------------------------------
# 4. Invalid models: attribute types, opset versions, MaxUnpool shapes.
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "attrs,attribute",
    [
        ({"kernel_shape": [2.0, 2.0]}, "kernel_shape"),
        ({"kernel_shape": [2.7, 2.0]}, "kernel_shape"),
        ({"kernel_shape": "22"}, "kernel_shape"),
        ({"kernel_shape": [2, 2], "strides": [1.5, 1.0]}, "strides"),
        ({"kernel_shape": [2, 2], "pads": "0000"}, "pads"),
    ],
)
def test_window_attributes_must_be_ints(attrs, attribute):
    model = make_model(
        [helper.make_node("MaxPool", ["x"], ["y"], name="p", **attrs)], [tensor("x", F, [1, 1, 8, 8])], [tensor("y", F, None)]
    )
    message = import_error(model)
    assert f"attribute '{attribute}': must be ints" in message, message


@pytest.mark.parametrize("pads", [[1 << 31, 0], [1 << 40, 1 << 40], [1 << 62, 1 << 62]])
def test_absurd_window_attributes_are_refused(pads):
    model = make_model(
        [helper.make_node("MaxPool", ["x"], ["y"], name="p", kernel_shape=[2], pads=pads)],
        [tensor("x", F, [1, 1, 8])], [tensor("y", F, None)],
    )
    assert "attribute 'pads': values must be <= 2147483647" in import_error(model)


@pytest.mark.parametrize("opsets,expected", [
    ((("", 99),), "imports opset 99 of the default ONNX domain (ai.onnx); the newest tvm_pool knows is"),
    ((("", 19), ("tvm_pool", 2)), "imports opset 2 of domain 'tvm_pool'; the newest tvm_pool knows is 1"),
])
def test_newer_opsets_are_refused(opsets, expected):
    model = make_model(
        [helper.make_node("MaxPool", ["x"], ["y"], name="p", kernel_shape=[2])], [tensor("x", F, [1, 1, 8])],
        [tensor("y", F, None)], opsets=opsets,
    )
    assert expected in import_error(model)


@pytest.mark.parametrize(
    "x_shape,i_shape,pads,expected",
    [
        ([1, 1, 2, 2], [1, 1, 2, 2], [3, 3, 3, 3], "attribute 'pads': gives output size -2 < 1 on spatial axis 0"),
        ([1, 1, 2, 2], [1, 1, 2, 3], None, "input I has shape [1, 1, 2, 3]; it must have the shape of input X"),
        ([1, 1, 2, 2], [1, 1, 4], None, "it must have the shape of input X"),
        ([4, 2], [4, 2], None, "input X has rank 2; MaxUnpool needs N x C x D1 ... (rank >= 3)"),
    ],
)
def test_max_unpool_invalid_shapes(x_shape, i_shape, pads, expected):
    attrs = {"kernel_shape": [2] * max(len(x_shape) - 2, 1), "strides": [2] * max(len(x_shape) - 2, 1)}
    if pads:
        attrs["pads"] = pads
    model = make_model(
        [helper.make_node("MaxUnpool", ["x", "i"], ["y"], name="unpool", **attrs)],
        [tensor("x", F, x_shape), tensor("i", I64, i_shape)], [tensor("y", F, None)], opsets=(("", 11),),
    )
    assert expected in import_error(model)


def test_node_name_with_a_newline_stays_one_line(tmp_path, capfd):
    model = make_model(
        [helper.make_node("MaxPool", ["x"], ["y"], name="bad\nname", kernel_shape=[20])],
        [tensor("x", F, [1, 1, 8])], [tensor("y", F, None)],
    )
    onnx.save(model, tmp_path / "nl.onnx")
    cli_error(capfd, ["-q", "compile", str(tmp_path / "nl.onnx")], "node 'bad\\nname' (MaxPool-12)")


# --------------------------------------------------------------------------------------------
# 5. Every bad CLI input: one line, exit 2.
# --------------------------------------------------------------------------------------------


def test_bad_cli_inputs_are_one_line(files, tmp_path, capfd):
    cli_error(capfd, ["-q", "compile", str(files.onnx), "--input-shapes", "x=99999999999999999999"], "too large")
    cli_error(capfd, ["-q", "compile", str(files.onnx), "--target", '{"kind": "c"}'], "target kind 'c' is not supported")
    npy = tmp_path / "x.npy"
    np.save(npy, np.zeros((1, 1, 4, 4), np.float32))
    cli_error(capfd, ["-q", "run", str(files.so), "--inputs", str(npy)], "a single array (.npy), not an .npz archive")
    noext = tmp_path / "noext"
    shutil.copy(files.so, noext)
    cli_error(capfd, ["-q", "run", str(noext), "--inputs", str(files.inputs)], "needs the .so extension")


def test_foreign_and_truncated_shared_objects(files, tmp_path):
    data = bytearray(files.so.read_bytes())
    foreign = tmp_path / "arm.so"
    machine = 62 if os.uname().machine == "aarch64" else 183
    data[18:20] = machine.to_bytes(2, "little")
    foreign.write_bytes(bytes(data))
    built_for = "x86_64" if machine == 62 else "aarch64"
    assert_one_line(
        run_forked(["-q", "run", str(foreign), "--inputs", str(files.inputs)], tmp_path), f"built for {built_for}"
    )
    original = files.so.read_bytes()
    for cut in (len(original) // 2, len(original) - 100, 40):
        truncated = tmp_path / f"cut{cut}.so"
        truncated.write_bytes(original[:cut])
        assert_one_line(run_forked(["-q", "run", str(truncated), "--inputs", str(files.inputs)], tmp_path), "cannot load")
    with pytest.raises(artifact.ArtifactError, match="truncated"):
        artifact.check_shared_object(str(truncated.with_name(f"cut{len(original) // 2}.so")))


def test_bfloat16_inputs_from_npz(tmp_path, capfd):
    model = make_model(
        [helper.make_node("MaxPool", ["x"], ["y"], name="p", kernel_shape=[2])],
        [tensor("x", TensorProto.BFLOAT16, [1, 1, 6])], [tensor("y", TensorProto.BFLOAT16, None)], opsets=(("", 22),),
    )
    onnx.save(model, tmp_path / "bf16.onnx")
    assert cli.main(["-q", "compile", str(tmp_path / "bf16.onnx")]) == 0
    x = np.array([1, 5, 2, 7, 3, 0], np.float32).astype(ml_dtypes.bfloat16).reshape(1, 1, 6)
    np.savez(tmp_path / "in.npz", x=x)  # numpy stores bfloat16 as |V2
    assert cli.main(["-q", "run", str(tmp_path / "bf16.so"), "--inputs", str(tmp_path / "in.npz"), "-o", str(tmp_path / "o.npz")]) == 0
    with np.load(tmp_path / "o.npz") as got:
        y = got["y"].view(ml_dtypes.bfloat16).astype(np.float32)
    np.testing.assert_array_equal(y.reshape(-1), [5, 5, 7, 7, 3])
    capfd.readouterr()


def test_quiet_compile_prints_nothing(files, tmp_path, capfd):
    assert cli.main(["-q", "compile", str(files.onnx), "-o", str(tmp_path / "q.so")]) == 0
    out, err = capfd.readouterr()
    assert err == "" and out.startswith("wrote ")


def _reads_of_pool_blocks(func) -> list:
    from tvm import s_tir  # pylint: disable=import-outside-toplevel

    from tvm_pool.schedules import analysis  # pylint: disable=import-outside-toplevel

    sch = s_tir.Schedule(func)
    reads = []
    for rv in analysis.root_blocks(sch):
        block = sch.get(rv)
        if analysis.is_pool_block(block):
            reads.append([str(analysis.region_buffer(r).name) for r in block.reads])
    return reads


@pytest.mark.parametrize("n", [2**31 - 2**16, 2**31 - 3, 2**31 - 2, 2**31 - 1, 2**31, 2**32 - 1, 2**32, 2**32 + 1])
@pytest.mark.parametrize("geometry", [([3], [2], [1, 1]), ([3], [1], [1, 1]), ([2], [2], [0, 1]), ([5], [4], [2, 2])])
def test_huge_axis_windows_read_their_input(n, geometry):
    """Output sizes below 2^31 give TE int32 loop variables; TVM's simplifier rewrote the bound
    test ``pos - 1 < 2^31 - 1`` into ``pos < 2^31`` in int32, which wraps: MaxPool with Indices
    over an axis of 2^31 - 1 (kernel 3, stride 2, pad 1) never read X (every value -inf, every
    index the internal placeholder). Positions near 2^31 are now int64 (spec.AxisWindow)."""
    from tvm import te, tirx  # pylint: disable=import-outside-toplevel

    from tvm_pool import compute  # pylint: disable=import-outside-toplevel

    kernel, strides, pads = geometry
    for dim in (n, tirx.IntImm("int64", n)):  # a Python int (int32 loops when they fit) and Relax's int64
        x = te.placeholder((1, 1, dim), "float32", name="x")
        values, indices = compute.max_pool(x, kernel, strides=strides, pads=pads, return_indices=True)
        avg = compute.avg_pool(x, kernel, strides=strides, pads=pads, ceil_mode=True)
        func = te.create_prim_func([x, values, indices, avg])
        reads = _reads_of_pool_blocks(func)
        assert reads and all(r for r in reads), (n, geometry, reads)
        assert any("x" in r for r in reads), (n, geometry, reads)


@pytest.mark.parametrize("target", ["llvm", "arm", "cuda"])
@pytest.mark.parametrize("shape, pool, out_shape", [
    ((0, 3, 9), lambda x: tvm.relax.op.nn.avg_pool1d(x, 6, 3, 2, count_include_pad=True), (0, 3, 3)),
    ((0, 1, 4, 5, 4), lambda x: tvm.relax.op.nn.avg_pool3d(x, (2, 3, 1), (2, 1, 2), count_include_pad=True),
     (0, 1, 2, 3, 2)),
    ((2, 0, 8, 8), lambda x: tvm.relax.op.nn.avg_pool2d(x, 3, 1, 1), (2, 0, 8, 8)),
    ((0, 3, 8, 8), lambda x: tvm.relax.op.nn.adaptive_avg_pool2d(x, (1, 1)), (0, 3, 1, 1)),
    ((0, 3, 8, 8), lambda x: tvm.relax.op.nn.max_pool2d(x, 2, 2), (0, 3, 4, 4)),
])
def test_empty_tensors_compile_to_nothing(target, shape, pool, out_shape):
    """A pool whose output has no element (batch 0, channels 0; PyTorch's OpInfo samples have
    them) is a function with nothing to do: no rule declines it (the autouse check), no kernel is
    launched, and on the host the module runs and returns the empty output."""
    exe = tvm_pool.compile(pool_module(shape, pool), target)
    if target == "llvm":
        vm = tvm.relax.VirtualMachine(exe, tvm.cpu())
        out = vm["main"](tvm.runtime.tensor(np.zeros(shape, "float32")))
        assert tuple(out.shape) == out_shape


def test_adaptive_pool_of_an_empty_axis_is_a_one_line_error(capfd):
    """(The error is raised inside TVM's LegalizeOps, whose own C++ BlockBuilder then warns
    that it was destroyed open: capfd takes that line, which is not an importer's leak.)"""
    with pytest.raises(Exception, match=r"adaptive pooling of an empty spatial axis 0 \(size 0\) into 1 bins.*allowed"):
        tvm_pool.compile(pool_module((2, 3, 0, 8), lambda x: tvm.relax.op.nn.adaptive_avg_pool2d(x, (1, 1))), "llvm")
    gc.collect()
    capfd.readouterr()
