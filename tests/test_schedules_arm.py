"""The aarch64 rule without a device: what it chooses and what LLVM makes of it (assembly).

Running the arm artifacts is tests/test_arm_emulated.py's job (qemu); these checks need only
TVM's LLVM, so they run everywhere and quickly.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import tvm
from tvm import relax

import tvm_pool
from tvm_pool import relax_ops
from tvm_pool.schedules import arm, rules_for, x86
from tvm_pool.targets import resolve_target

from oracles import pool_model

A72 = {"kind": "llvm", "mtriple": "aarch64-linux-gnu", "mcpu": "cortex-a72", "mattr": ["+neon"]}
A76 = {"kind": "llvm", "mtriple": "aarch64-linux-gnu", "mcpu": "cortex-a76"}


def test_target_facts():
    a72, a76 = tvm.target.Target(A72), tvm.target.Target(A76)
    assert arm.is_arm(a72) and arm.is_arm(resolve_target("arm"))
    assert not arm.is_arm(resolve_target("x86")) and not x86.is_x86(a72)
    assert [type(r) for r in rules_for(a72)] == [arm.Pool]
    assert arm.vector_bits(a72, "float32") == 128 and arm.vector_bits(a72, "int8") == 128
    assert not arm.has_fullfp16(a72) and arm.vector_bits(a72, "float16") == 64
    assert arm.has_fullfp16(a76) and arm.vector_bits(a76, "float16") == 128


def _primfuncs(mod):
    return [f for f in mod.functions.values() if isinstance(f, tvm.tirx.PrimFunc)]


def _imported(model):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return tvm_pool.from_onnx(model)


@pytest.mark.parametrize("attrs", [dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]),
                                   dict(kernel_shape=[2, 2], strides=[2, 2])])
def test_use_fmax_rewrites_the_nan_max(attrs):
    (func,) = _primfuncs(_imported(pool_model("MaxPool", [1, 4, 12, 12], **attrs)))
    assert "T.isnan" in func.script()
    text = arm.use_fmax(func).script()
    assert "T.isnan" not in text and '"llvm.maximum"' in text


def test_use_fmax_rewrites_a_reduction_combiner_and_leaves_the_rest():
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType([1, 3, 9, 7], "float32"))
    with bb.function("main", [x]):
        with bb.dataflow():
            out = bb.emit_output(relax_ops.adaptive_max_pool(bb, x, [4, 3], return_indices=False))
        bb.emit_func_output(out)
    funcs = _primfuncs(bb.get())
    rewritten = [arm.use_fmax(f).script() for f in funcs]
    assert any('"llvm.maximum"' in t for t in rewritten)
    (avg,) = _primfuncs(_imported(pool_model("AveragePool", [1, 4, 12, 12], kernel_shape=[3, 3])))
    assert arm.use_fmax(avg).same_as(avg)


def _asm(model, target):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ex = tvm_pool.compile(_imported(model), target)
    return ex.mod.imports[0].inspect_source("asm")


@pytest.mark.parametrize("dtype,fmax", [("float32", "fmax\tv"), ("int8", "smax\tv"), ("uint8", "umax\tv")])
def test_neon_max_instructions(dtype, fmax):
    asm = _asm(pool_model("MaxPool", [1, 8, 32, 32], dtype, kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]), A72)
    assert fmax in asm
    assert "fcmeq" not in asm or dtype != "float32"  # no isnan tests left: FMAX propagates NaN


def test_native_fp16_with_fullfp16():
    model = pool_model("MaxPool", [1, 8, 32, 32], "float16", kernel_shape=[2, 2], strides=[2, 2])
    assert "fmax\tv" in _asm(model, A76) and ".8h" in _asm(model, A76)


def test_x86_unchanged_by_the_arm_rewrite():
    (func,) = _primfuncs(_imported(pool_model("MaxPool", [1, 4, 12, 12], kernel_shape=[3, 3], strides=[2, 2])))
    sch = x86.Pool().apply(func, tvm.target.Target({"kind": "llvm", "mtriple": "x86_64-linux-gnu", "mcpu": "haswell"}), False)
    assert sch is not None and "T.isnan" in sch.mod["main"].script()
    assert np.isnan(np.float32("nan"))  # (the x86 NaN semantics are tested bit-exact in test_schedules_x86)
