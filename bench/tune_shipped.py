"""Produce the tuning logs shipped in tuning_logs/<family>/ (run on the machine they are for).

    python -m tvm_pool.bench.tune_shipped --target host --what demo squeezenet pools \
        --trials-demo 64 --trials-squeezenet 300 --budget-squeezenet 1800

Every record comes from tvm_pool.tune measuring on this machine: the demo model, onnx's
light_squeezenet.onnx (conv included), and pooling layers (the benchmark's workloads and the
pooling layers of ResNet, VGG, GoogLeNet/Inception, DenseNet and SqueezeNet; pooling tasks are
searched exhaustively, so these need no trial budget).
"""

from __future__ import annotations

import argparse
import os
import time

import onnx
from onnx import TensorProto, helper

import tvm_pool
from tvm_pool import tuning
from tvm_pool.targets import resolve_target

from .runner import build_model, workloads

# Pooling layers of common CNNs not already in the benchmark (NCHW, float32, batch 1).
CNN_POOLS = [
    # VGG-16 blocks 2-5: 2x2 s2
    ("vgg_pool2", "MaxPool", [1, 128, 112, 112], dict(kernel_shape=[2, 2], strides=[2, 2])),
    ("vgg_pool3", "MaxPool", [1, 256, 56, 56], dict(kernel_shape=[2, 2], strides=[2, 2])),
    ("vgg_pool4", "MaxPool", [1, 512, 28, 28], dict(kernel_shape=[2, 2], strides=[2, 2])),
    ("vgg_pool5", "MaxPool", [1, 512, 14, 14], dict(kernel_shape=[2, 2], strides=[2, 2])),
    # GoogLeNet: 3x3 s2 ceil between stages, 3x3 s1 p1 inside inception blocks, 7x7 avg head
    ("googlenet_pool2", "MaxPool", [1, 192, 56, 56], dict(kernel_shape=[3, 3], strides=[2, 2], ceil_mode=1)),
    ("googlenet_pool3", "MaxPool", [1, 480, 28, 28], dict(kernel_shape=[3, 3], strides=[2, 2], ceil_mode=1)),
    ("googlenet_pool4", "MaxPool", [1, 832, 14, 14], dict(kernel_shape=[3, 3], strides=[2, 2], ceil_mode=1)),
    ("googlenet_branch4b", "MaxPool", [1, 480, 14, 14], dict(kernel_shape=[3, 3], strides=[1, 1], pads=[1, 1, 1, 1])),
    ("googlenet_head", "AveragePool", [1, 1024, 7, 7], dict(kernel_shape=[7, 7], strides=[1, 1])),
    # DenseNet-121 transitions (2x2 avg s2) and head
    ("densenet_trans2", "AveragePool", [1, 256, 28, 28], dict(kernel_shape=[2, 2], strides=[2, 2])),
    ("densenet_trans3", "AveragePool", [1, 512, 14, 14], dict(kernel_shape=[2, 2], strides=[2, 2])),
    ("densenet_gap", "GlobalAveragePool", [1, 1024, 7, 7], {}),
    # SqueezeNet 1.0/1.1: 3x3 s2 (ceil) max pools, global average of the class maps
    ("squeezenet_pool1", "MaxPool", [1, 96, 111, 111], dict(kernel_shape=[3, 3], strides=[2, 2], ceil_mode=1)),
    ("squeezenet11_pool1", "MaxPool", [1, 64, 111, 111], dict(kernel_shape=[3, 3], strides=[2, 2], ceil_mode=1)),
    ("squeezenet11_pool3", "MaxPool", [1, 128, 55, 55], dict(kernel_shape=[3, 3], strides=[2, 2], ceil_mode=1)),
    ("squeezenet11_pool5", "MaxPool", [1, 256, 27, 27], dict(kernel_shape=[3, 3], strides=[2, 2], ceil_mode=1)),
    ("squeezenet_gap", "GlobalAveragePool", [1, 1000, 13, 13], {}),
]


def _pool_model(name, op, shape, attrs):
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    graph = helper.make_graph([helper.make_node(op, ["x"], ["y"], **attrs)], name, [x], [y])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 22)])
    model = onnx.shape_inference.infer_shapes(model)
    model.ir_version = 10
    return model


def pool_models():
    for w in workloads(quick=False):
        yield w.name, build_model(w)
    for name, op, shape, attrs in CNN_POOLS:
        yield name, _pool_model(name, op, shape, attrs)


def squeezenet_path() -> str:
    return os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", "light", "light_squeezenet.onnx")


def main(argv=None) -> int:
    try:  # pylint: disable=import-outside-toplevel
        from tvm_pool.demo_model import demo_model
    except ImportError:  # the CLI as a package
        from tvm_pool.cli.demo import demo_model

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--target", default="host")
    parser.add_argument("--log-dir", help="default: tuning_logs/<family> of the target")
    parser.add_argument("--what", nargs="+", default=["demo", "squeezenet", "pools"])
    parser.add_argument("--trials-demo", type=int, default=64)
    parser.add_argument("--trials-squeezenet", type=int, default=300)
    parser.add_argument("--budget-squeezenet", type=float, default=None, help="seconds")
    args = parser.parse_args(argv)
    target = resolve_target(args.target)
    log_dir = args.log_dir or os.path.join("tuning_logs", tuning.target_family(target))
    for what in args.what:
        start = time.time()
        if what == "demo":
            model, _ = demo_model()
            tvm_pool.tune(tvm_pool.from_onnx(model), target, trials=args.trials_demo, log_dir=log_dir, source="demo")
        elif what == "squeezenet":
            mod = tvm_pool.from_onnx(onnx.load(squeezenet_path()))
            tvm_pool.tune(mod, target, trials=args.trials_squeezenet, log_dir=log_dir, source="light_squeezenet.onnx",
                          time_budget_s=args.budget_squeezenet)
        elif what == "pools":
            for name, model in pool_models():
                try:
                    tvm_pool.tune(tvm_pool.from_onnx(model), target, trials=0, log_dir=log_dir, source=f"pool:{name}")
                except Exception as err:  # pylint: disable=broad-except
                    print(f"{name}: skipped ({type(err).__name__}: {str(err).splitlines()[0][:200]})", flush=True)
        print(f"== {what} for {tuning.target_family(target)}: {time.time() - start:.0f} s", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
