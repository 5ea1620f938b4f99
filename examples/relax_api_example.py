"""tvm_pool's Relax API for OpenVINO adaptive pooling and TensorRT pooling (runnable).

    /work/venv/bin/python examples/relax_api_example.py

1. AdaptiveMaxPool-8 with a *runtime* output size: one compiled module, several output sizes.
2. AdaptiveAvgPool-8 with a static output size.
3. TensorRT IPoolingLayer (MAX_AVERAGE_BLEND, CAFFE_ROUND_UP padding) on int8.
"""

from __future__ import annotations

import numpy as np
import tvm
from tvm import relax

import tvm_pool
from tvm_pool import relax_ops


def build(params, emit):
    bb = relax.BlockBuilder()
    with bb.function("main", params):
        with bb.dataflow():
            out = bb.emit_output(emit(bb, *params))
        bb.emit_func_output(out)
    executable = tvm_pool.compile(bb.get(), target="llvm")
    return relax.VirtualMachine(executable, tvm.cpu())


def main():
    rng = np.random.default_rng(0)

    # 1. AdaptiveMaxPool with the output size as a runtime int64 tensor -> (values, i32 indices).
    x = relax.Var("x", relax.TensorType([1, 2, 9, 7], "float32"))
    size = relax.Var("size", relax.TensorType([2], "int64"))
    vm = build([x, size], lambda bb, x, size: relax_ops.adaptive_max_pool(bb, x, size, index_element_type="i32"))
    data = rng.standard_normal((1, 2, 9, 7)).astype("float32")
    for out_size in ([3, 3], [10, 2]):
        values, indices = vm["main"](tvm.runtime.tensor(data), tvm.runtime.tensor(np.array(out_size, "int64")))
        print("adaptive_max_pool", out_size, "->", values.numpy().shape, indices.numpy().dtype)

    # 2. AdaptiveAvgPool with a static output size (a list of ints).
    x = relax.Var("x", relax.TensorType([1, 2, 9, 7], "float32"))
    vm = build([x], lambda bb, x: relax_ops.adaptive_avg_pool(bb, x, [4, 3]))
    print("adaptive_avg_pool ->", vm["main"](tvm.runtime.tensor(data)).numpy().shape)

    # 3. TensorRT pooling: 3x3 window, stride 2, Caffe padding (pre_padding used on both sides).
    x = relax.Var("x", relax.TensorType([1, 2, 8, 8], "int8"))
    vm = build(
        [x],
        lambda bb, x: relax_ops.tensorrt_pool(
            bb, x, "MAX_AVERAGE_BLEND", [3, 3], stride=[2, 2], pre_padding=[1, 1],
            padding_mode="CAFFE_ROUND_UP", blend_factor=0.25, average_count_excludes_padding=True,
        ),
    )
    q = rng.integers(-128, 128, size=(1, 2, 8, 8)).astype("int8")
    print("tensorrt_pool ->", vm["main"](tvm.runtime.tensor(q)).numpy()[0, 0])


if __name__ == "__main__":
    main()
