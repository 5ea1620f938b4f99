"""torchvision's models through the PyTorch roads into tvm_pool, on every target.

Every model of torchvision 0.28's classification, video, segmentation, detection and optical-flow
builders (tests/helpers/torchvision_models.py: :data:`MODELS`, random weights, the smallest input
each accepts; a detection model's ``.backbone``, which holds all its pools) goes through three
roads:

- the TorchScript ONNX exporter (``torch.onnx.export(..., dynamo=False)``, opset 17) and the
  dynamo ONNX exporter (``dynamo=True``, onnxscript, opset 18+), then ``tvm_pool.from_onnx``;
- ``torch.export`` then ``tvm_pool.from_exported_program``;

and each imported module to every target (the test id is ``model-road-target``):

- ``x86``: ``tvm_pool.compile`` for this machine, run, compared with torch (and with onnxruntime
  on the same ONNX model, on the ONNX roads);
- ``arm``: built for aarch64 (``--target arm``: cortex-a72, NEON), which needs TVM's LLVM only;
- ``arm-so``: that build exported as an aarch64 shared library (needs the cross g++);
- ``arm-qemu``: that library run on the emulated aarch64 device, compared with torch (needs the
  cross g++ and qemu-aarch64; tvm_pool/emulation.py);
- ``cuda``: built for CUDA (the ``cuda`` alias, sm_90; TVM writes the source without nvcc), the
  source compiled by ``nvcc -ptx`` (needs nvcc);
- ``cuda-sim``: the CUDA rule simulated on the CPU (``schedules.cuda.Pool(simulate=True)``, every
  buffer access bounds-checked, tests/cuda_checks.py), run, compared with torch.

On every target every pooling PrimFunc (a tvm_pool compute or TVM's own TOPI pool, fused or not)
carries ``tirx.is_scheduled`` right after tvm_pool's schedule pass (a pool that TVM legalized
instead, or that no rule took, fails; a rule that declines one warns ``ScheduleDeclined``, an
error in this suite), and on x86, arm and cuda-sim each scheduled pooling PrimFunc equals its
unscheduled self on random inputs (tests/primfunc_check.py's ``check_pairs``; the aarch64 ones are
built for this machine with aarch64's TIR pipeline, as test_schedules_arm.py's ``_run_host`` does).

Where an exporter or TVM's converter refuses a model, :data:`REFUSALS` says so in one line and
``test_refusals`` asserts that line: a refusal that goes away or changes fails there. Where TVM's
own build refuses an imported model for a target (a legalization, or one of TVM's dlight GPU
schedules on a PrimFunc that is no pool; plain ``tvm.compile`` fails the same way),
:data:`TARGET_REFUSALS` says so in one line, and that model-road-target test asserts it.

What the exporters emit for pooling (torch 2.13, torchvision 0.28; the dynamo exporter writes
opset 20): both write MaxPool (with ``ceil_mode`` where GoogLeNet and SqueezeNet ask for it,
``dilations`` always, the dynamo one ``storage_order`` and ``auto_pad`` NOTSET too) and
AveragePool (``count_include_pad`` from Inception v3 and DenseNet; no ``dilations``); an
AdaptiveAvgPool2d whose output divides its input becomes an AveragePool. AdaptiveAvgPool2d(1)
becomes GlobalAveragePool from the TorchScript exporter but ReduceMean over the spatial axes
from the dynamo one (no pooling operator left for tvm_pool), and VGG's AdaptiveAvgPool2d(7) on
a 1x1 map a GatherND + ReduceMean. The TorchScript exporter refuses an adaptive average pool
whose output does not divide its input, so AlexNet and VGG-11 run at 224x224 (their feature
maps are then 6x6 and 7x7). Both exporters drop ``avg_pool2d``'s ``divisor_override`` (none of
these models uses it): their AveragePool then divides by the window, unlike torch.

Default suite (DEFAULT): SqueezeNet through all three roads on x86 (MaxPool with ceil_mode after
Concats, a global average at the end) and through torch.export on arm, arm-so, arm-qemu, cuda and
cuda-sim too; ShuffleNet v2 through the TorchScript exporter (its channel split written as Shape
-> Gather -> Add -> Div -> Mul -> Slice, which tvm_pool.onnx.fold folds; TVM alone fails to build
it); and MC3-18 (video) through torch.export and Faster R-CNN MobileNet v3 FPN's backbone (detection)
through the TorchScript exporter, on x86. Every other model, road and target: ``-m slow``
(FCN-ResNet50 and RAFT-small left the default suite when it reached 15 minutes on 2 cores).

Times (a shared 2-core x86 machine, ``-n 0``, arm-so and arm-qemu included): the default run,
then 23 tests, 1 min 46 s (2 min 1 s beside another engineer's compiles); 21 since FCN and RAFT
moved to ``-m slow``. ``-m slow`` holds 1,825
model-road-target cases (109 models, 3 roads, 6 targets, less the refusals) and 21 refusals:
hours at 2 to 60 s a case, not run whole here. In parts: test_refusals 3 min 48 s (20 passed,
1 skipped for memory); SqueezeNet 1.0, MC3-18 and RAFT-small on every road and target 5 min 35 s
(38 passed); Faster R-CNN MobileNet v3 320 FPN's and FCOS's backbones, MobileNet v2, ResNet-34
and DeepLab v3 ResNet-50 on every road and target 12 min 7 s (90 passed); the TARGET_REFUSALS
cases, all passing; and the 32 smallest models (one or two of each builder family) on x86, arm,
cuda and cuda-sim through a script running these checks, about 1.5 hours.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import gc
import io
import time
import traceback
import warnings

import numpy as np
import onnx
import pytest
import torch
import torch.nn.functional as F
import tvm
from onnx import TensorProto, helper, numpy_helper
from torch.utils import _pytree
from tvm import relax

import tvm_pool
from tvm_pool.errors import one_line
from tvm_pool.onnx.fold import fold_constant_shapes
from tvm_pool.schedules import tir_pipeline
from tvm_pool.targets import DEFAULT_CUDA_ARCH, export_compiler, resolve_target

import cuda_checks as cc
from helpers import (EM_AARCH64, elf_machine, emulated_device, needs_cross_compiler, needs_nvcc, needs_qemu,
                     tolerance, x86_only)
from helpers.torchvision_models import FAMILY, MODELS, build, import_torchvision, input_shapes
from oracles import IR_VERSION, run_onnxruntime
from primfunc_check import assert_pools_exact, compile_scheduled

pytestmark = x86_only

EXPORTERS = ("torchscript", "dynamo")
ROADS = (*EXPORTERS, "export")
TARGETS = ("x86", "arm", "arm-so", "arm-qemu", "cuda", "cuda-sim")
TORCHSCRIPT_OPSET = 17
ARM = "arm"  # aarch64-linux-gnu, cortex-a72, NEON (tvm_pool.targets.resolve_target)
CUDA = "cuda"  # DEFAULT_CUDA_ARCH, this machine as host
TARGET_MARKS = {
    "arm-so": [needs_cross_compiler],
    "arm-qemu": [needs_cross_compiler, needs_qemu],
    "cuda": [needs_nvcc],
}

# (model, road) -> the one-line reason an exporter or TVM's converter gives for refusing it
# (``Refused.reason``: the step, the error's type and its first line; asserted as a prefix).
# None is tvm_pool's: TVM's own converters (tvm.relax.frontend.onnx.from_onnx, and
# tvm.relax.frontend.torch.from_exported_program, which tvm_pool's importer subclasses) fail the
# same way on the same models.
_SWIN_PAD = ("from_onnx: UnsupportedError: node '{}' (Pad): TVM's ONNX converter cannot convert it: "
             "ValueError: Dynamic pads are not supported yet.")
_VIT_RESHAPE = ("from_onnx: UnsupportedError: node '/encoder/layers/encoder_layer_0/self_attention/Reshape_2' "
                "(Reshape): TVM's ONNX converter cannot convert it: TypeError: Reshape requires the input new shape "
                "to be Shape. However, the given one is relax.TensorType")
_RAFT_CHANNELS = ("from_exported_program: ValueError: The channel size of the data should equal to the product of "
                  "input channel size of the weight and the number of groups. However, the data channel size is "
                  "T.int64({}) while the weight input channel size and number of groups are T.int64({}) and 1")
REFUSALS = {
    # The TorchScript exporter writes Swin's pad of the feature map to a multiple of the window
    # (F.pad with sizes computed from the shape) as a Pad whose pads come from Shape arithmetic;
    # TVM's ONNX Pad converter takes constant pads only.
    **{(name, "torchscript"): _SWIN_PAD.format("/features/features.1/features.1.0/attn/Pad")
       for name in ("swin_t", "swin_s", "swin_b", "swin_v2_t", "swin_v2_s", "swin_v2_b")},
    **{(name, "torchscript"): _SWIN_PAD.format("/patch_embed/Pad") for name in ("swin3d_t", "swin3d_s", "swin3d_b")},
    # The TorchScript exporter computes the attention's head reshape from the input's Shape:
    # TVM's Reshape converter takes a constant (or shape-typed) new shape only.
    **{(name, "torchscript"): _VIT_RESHAPE for name in ("vit_b_16", "vit_b_32", "vit_l_16", "vit_l_32")},
    # TVM's exported-program converter gives the motion encoder's first convolution (over the
    # 4 pyramid levels' (2r+1)^2 correlation samples: 4 * 49, 4 * 81) 4 * 2 * (2r+1) channels:
    # the correlation lookup's shapes go wrong before it (plain
    # tvm.relax.frontend.torch.from_exported_program: the same error).
    ("raft_small", "export"): _RAFT_CHANNELS.format(56, 196),
    ("raft_large", "export"): _RAFT_CHANNELS.format(72, 324),
    # The TorchScript exporter writes an ONNX Loop into MViT's graph; TVM's ONNX frontend has no
    # converter for Loop.
    **{(name, "torchscript"): "from_onnx: UnsupportedError: model: operators not supported by TVM's ONNX "
                              "frontend: Loop" for name in ("mvit_v1_b", "mvit_v2_s")},
    # ViT-H/14's and RegNetY-128GF's 632M and 645M float32 weights (2.5 GB) pass protobuf's 2 GiB
    # limit on a serialized model: the TorchScript exporter writes such a model only to a file
    # with external data, not in memory as here; the dynamo one returns it, and protobuf cannot
    # serialize it for onnxruntime.
    **{(name, "torchscript"): "torchscript ONNX exporter: RuntimeError: The serialized model is larger than "
                              "the 2GiB limit imposed by the protobuf library."
       for name in ("vit_h_14", "regnet_y_128gf")},
    **{(name, "dynamo"): "ONNX serialization: EncodeError: Failed to serialize proto"
       for name in ("vit_h_14", "regnet_y_128gf")},
}

# (model, road) -> the memory (GB) its export needs: test_refusals skips it, saying so, on a
# machine with less available. The TorchScript exporter's peak on MViT v2-S's 16x224x224 clip
# passed 20 GB here (one process, nothing else of the suite's); it is refused after the export.
EXPORT_MEMORY_GB = {("mvit_v2_s", "torchscript"): 24}

# (model, road, target) -> the one-line reason TVM's own build refuses it for that target
# (:func:`target_refusal`: the error's type, its first line and the innermost TVM function that
# raised it; asserted as a prefix): a legalization or a TVM schedule of a PrimFunc that is no
# pool, which plain ``tvm.compile`` (no tvm_pool) fails on the same way. The test of that id
# asserts the refusal.
_EMPTY_SCATTER = "InternalError: Check failed: pb->value != 0 (0 vs. 0) : Divide by zero"
_SWIN_CUDA = "ScheduleError: An error occurred in the schedule primitive 'bind'."
TARGET_REFUSALS = {
    # Swin3D's shifted-window mask at a 4-frame clip (window 8 in time, so no shift there) fills
    # empty slices; the dynamo exporter writes those fills as ScatterND on empty (14, 7, 0) data,
    # and TVM's legalization of relax.scatter_nd divides by the empty axis (LegalizeOps, any
    # target; a lone relax.op.scatter_nd on (14, 7, 0) data fails the same way).
    **{(name, "dynamo", target): _EMPTY_SCATTER for name in ("swin3d_t", "swin3d_s", "swin3d_b")
       for target in TARGETS},
    # dlight's GPU GeneralReduction rule fails to bind a layer norm fused with Swin's pad to the
    # window multiple (swin_t: a (1, 8, 8, 192) map to (1, 14, 14, 192)); Swin v2 normalizes
    # after the attention, with no pad to fuse, and builds.
    **{(name, road, "cuda"): _SWIN_CUDA for name in ("swin_t", "swin_s", "swin_b") for road in ("export", "dynamo")},
    # dlight's GPU GEMV rule asserts (`assert s_loops`, no message) on SSDlite's last depthwise
    # 3x3 stride-2 convolutions of a 1x1 map (conv2d46, conv2d50 after fusion).
    **{("ssdlite320_mobilenet_v3_large_backbone", road, "cuda"): "AssertionError [tvm/s_tir/dlight/"
       for road in ROADS},
}

# The default suite's share (the rest run under -m slow): (model, road, target).
DEFAULT = (
    ("squeezenet1_0", "dynamo", "x86"),
    ("squeezenet1_0", "torchscript", "x86"),
    ("squeezenet1_0", "export", "x86"),
    ("squeezenet1_0", "export", "arm"),
    ("squeezenet1_0", "export", "arm-so"),
    ("squeezenet1_0", "export", "arm-qemu"),
    ("squeezenet1_0", "export", "cuda"),
    ("squeezenet1_0", "export", "cuda-sim"),
    ("shufflenet_v2_x0_5", "torchscript", "x86"),
    # one small model of each other family, through one road on x86 (the cheapest with a pool);
    # segmentation (FCN-ResNet50: ResNet-50's 3x3 s2 max, 14.5 s) and optical flow (RAFT-small:
    # the correlation pyramid's 2x2 averages, 35 s) run under -m slow, their pools being shapes
    # the benchmark's models and the fusion suite already cover
    ("mc3_18", "export", "x86"),  # video: an adaptive 3-D average
    ("fasterrcnn_mobilenet_v3_large_fpn_backbone", "torchscript", "x86"),  # detection: FPN's 1x1 s2 max
)
SLOW = [(name, road, target) for name in MODELS for road in ROADS for target in TARGETS
        if (name, road) not in REFUSALS and (name, road, target) not in DEFAULT]

# A whole network against another runtime: every conv sums in another order, and the errors
# grow through the layers, so the comparison is to the output's scale (as in
# test_whole_models.py) with the onnxruntime float32 tolerance as its floor.
WHOLE_MODEL_RTOL = 1e-4


# ---------------------------------------------------------------------------------------------
# Roads
# ---------------------------------------------------------------------------------------------

class Refused(Exception):
    """An exporter or TVM's converter refused a model: ``reason`` is the step, the error's type
    and its first line."""

    def __init__(self, step: str, err: BaseException):
        self.reason = f"{step}: {type(err).__name__}: {one_line(err)}"
        super().__init__(self.reason)


@dataclasses.dataclass
class Case:
    """Model ``name`` through ``road``: its inputs, torch's outputs (flattened), the Relax module,
    the ONNX model (serialized; None for torch.export), whether the import holds a pool."""

    name: str
    road: str
    inputs: list
    want: list
    mod: tvm.IRModule
    onnx: bytes | None
    has_pools: bool

    @property
    def label(self) -> str:
        return f"{self.name} via {self.road}"


def torch_outputs(model: torch.nn.Module, args: tuple) -> list[np.ndarray]:
    with torch.no_grad():
        out = model(*args)
    return [t.numpy() for t in _pytree.tree_leaves(out)]


@functools.lru_cache(maxsize=1)  # a model's targets run one after the other: one export for all
def imported(name: str, road: str) -> Case:
    """Model ``name`` through ``road`` into Relax; :class:`Refused` where a step refuses it."""
    model, x = build(name)
    args = x if isinstance(x, tuple) else (x,)
    want = torch_outputs(model, args)
    serialized = None
    if road == "export":
        try:
            with torch.no_grad():
                exported = torch.export.export(model, args)
        except Exception as err:  # noqa: BLE001  (the exporter's refusal is the finding)
            raise Refused("torch.export", err) from err
        try:
            mod = tvm_pool.from_exported_program(exported)
        except Exception as err:  # noqa: BLE001
            raise Refused("from_exported_program", err) from err
        has_pools = _module_has_pool_op(mod)
    else:
        try:
            proto = export_onnx(model, args, road)
        except Exception as err:  # noqa: BLE001
            raise Refused(f"{road} ONNX exporter", err) from err
        try:
            serialized = proto.SerializeToString()  # what onnxruntime reads
        except Exception as err:  # noqa: BLE001  (protobuf's 2 GiB limit)
            raise Refused("ONNX serialization", err) from err
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                mod = tvm_pool.from_onnx(proto)
        except Exception as err:  # noqa: BLE001
            raise Refused("from_onnx", err) from err
        has_pools = _has_pool_node(proto)
    return Case(name, road, [a.numpy() for a in args], want, mod, serialized, has_pools)


def export_onnx(model: torch.nn.Module, x, exporter: str) -> onnx.ModelProto:
    """``model`` on ``x`` (a tensor or a tuple of them) through one of the two ONNX exporters,
    at an IR version onnxruntime reads."""
    args = x if isinstance(x, tuple) else (x,)
    with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
        warnings.simplefilter("ignore")
        if exporter == "torchscript":
            buffer = io.BytesIO()
            torch.onnx.export(model, args, buffer, dynamo=False, opset_version=TORCHSCRIPT_OPSET)
            proto = onnx.load_from_string(buffer.getvalue())
        else:
            proto = torch.onnx.export(model, args, dynamo=True, verbose=False).model_proto
    proto.ir_version = min(proto.ir_version, IR_VERSION)  # onnx 1.23 writes one onnxruntime refuses
    return proto


def run_vm(vm: relax.VirtualMachine, inputs) -> list[np.ndarray]:
    return cc._flat(vm["main"](*[tvm.runtime.tensor(x) for x in inputs]))  # pylint: disable=protected-access


def assert_close(got: np.ndarray, want: np.ndarray, label: str) -> None:
    """``got`` equals ``want`` to the onnxruntime float32 tolerance, relative to the output's
    scale (:data:`WHOLE_MODEL_RTOL`)."""
    assert (got.shape, got.dtype) == (want.shape, want.dtype), f"{label}: {got.shape} {got.dtype}, want {want.shape}"
    rtol, atol = tolerance(want.dtype, "onnxruntime")
    scale = float(np.max(np.abs(want))) if want.size else 0.0
    np.testing.assert_allclose(got, want, rtol=rtol, atol=max(atol, WHOLE_MODEL_RTOL * scale), err_msg=label)


def assert_outputs(got: list, want: list, label: str) -> None:
    assert len(got) == len(want), f"{label}: {len(got)} outputs, want {len(want)}"
    for index, (g, w) in enumerate(zip(got, want)):
        assert_close(g, np.asarray(w), f"{label}, output {index}")


def assert_pools_scheduled(pools: dict, label: str, expect_pools: bool) -> None:
    unscheduled = sorted(name for name, func in pools.items() if "tirx.is_scheduled" not in (func.attrs or {}))
    assert not unscheduled, f"{label}: pooling PrimFuncs left unscheduled: {unscheduled}"
    if expect_pools:
        assert pools, f"{label}: no pooling PrimFunc in the build (a pool was lowered by something else)"


def available_memory_gb() -> float:
    """The memory the kernel says is available (``MemAvailable``, Linux), in GB."""
    with open("/proc/meminfo", encoding="ascii") as meminfo:
        kib = next(int(line.split()[1]) for line in meminfo if line.startswith("MemAvailable:"))
    return kib / 2**20


def _has_pool_node(model: onnx.ModelProto) -> bool:
    return any(node.op_type.endswith("Pool") for node in model.graph.node)


def _module_has_pool_op(mod: tvm.IRModule) -> bool:
    return "pool" in mod["main"].script()


# ---------------------------------------------------------------------------------------------
# Targets
# ---------------------------------------------------------------------------------------------

def check_x86(case: Case, host) -> None:
    executable, pools = compile_scheduled(case.mod, host)
    got = run_vm(relax.VirtualMachine(executable, tvm.cpu()), case.inputs)
    assert_outputs(got, case.want, f"{case.label} on x86 vs torch")
    if case.onnx is not None:
        proto = onnx.load_from_string(case.onnx)
        inits = {t.name for t in proto.graph.initializer}
        names = [i.name for i in proto.graph.input if i.name not in inits]
        want_ort = run_onnxruntime(proto, dict(zip(names, case.inputs)))
        assert_outputs(got, want_ort, f"{case.label} on x86 vs onnxruntime")
    assert_pools_scheduled(pools, f"{case.label} on x86", expect_pools=case.has_pools)
    assert_pools_exact(case.mod, host, pools, f"{case.label} on x86")


_ARM_BUILDS: dict = {}  # (model, road) -> (aarch64 executable, its exported library or None); the last only


def arm_build(case: Case, host=None):
    """The aarch64 build of ``case`` (kept for arm-so and arm-qemu); with ``host`` checks its pools."""
    key = (case.name, case.road)
    if key in _ARM_BUILDS and host is None:
        return _ARM_BUILDS[key][0]
    _ARM_BUILDS.clear()
    executable, pools = compile_scheduled(case.mod, ARM)
    _ARM_BUILDS[key] = [executable, None]
    if host is not None:
        label = f"{case.label} on aarch64"
        assert_pools_scheduled(pools, label, expect_pools=case.has_pools)
        assert_pools_exact(case.mod, ARM, pools, label, run_target=host,
                           pipeline=tir_pipeline(resolve_target(ARM)))
    return executable


def arm_library(case: Case, folder) -> str:
    """``case``'s aarch64 build exported as a shared library (cross g++)."""
    executable = arm_build(case)
    entry = _ARM_BUILDS[(case.name, case.road)]
    if entry[1] is None:
        path = str(folder / f"{case.name}-{case.road}.so")
        executable.export_library(path, fcompile=export_compiler(resolve_target(ARM)))
        entry[1] = path
    return entry[1]


def check_arm_so(case: Case, folder) -> None:
    path = arm_library(case, folder)
    assert elf_machine(path) == EM_AARCH64, path


def check_arm_qemu(case: Case, folder, device) -> None:
    from tvm_pool import emulation  # pylint: disable=import-outside-toplevel

    path = arm_library(case, folder)
    job = {"name": f"{case.name}-{case.road}", "module": path, "inputs": case.inputs}
    (result,) = emulation.run_artifacts(device, [job], folder / f"run-{case.name}-{case.road}", timeout=3600)
    assert result.get("ok"), f"{case.label} on emulated aarch64: {result.get('error')}"
    assert_outputs(result["outputs"], case.want, f"{case.label} on emulated aarch64 vs torch")


def check_cuda(case: Case) -> None:
    executable, pools = compile_scheduled(case.mod, CUDA)
    assert_pools_scheduled(pools, f"{case.label} on CUDA", expect_pools=case.has_pools)
    module = cc._find_module(executable.mod, "cuda")  # pylint: disable=protected-access
    assert module is not None, f"{case.label}: no CUDA module in the build"
    kernels = cc.ptx_kernels(module.inspect_source(""), DEFAULT_CUDA_ARCH)  # nvcc -ptx
    assert kernels, f"{case.label}: nvcc wrote no kernel"


def check_cuda_sim(case: Case) -> None:
    with cc.simulating(DEFAULT_CUDA_ARCH):
        executable, pools = compile_scheduled(case.mod, cc.CPU)
    got = run_vm(relax.VirtualMachine(executable, tvm.cpu()), case.inputs)
    assert_outputs(got, case.want, f"{case.label} on simulated CUDA vs torch")
    label = f"{case.label} on simulated CUDA"
    assert_pools_scheduled(pools, label, expect_pools=case.has_pools)
    with cc.bounds_checked():
        assert_pools_exact(case.mod, cc.CPU, pools, label)


@pytest.fixture(scope="module")
def arm_folder(tmp_path_factory):
    return tmp_path_factory.mktemp("arm")


def check(name: str, road: str, target: str, request) -> None:
    refusal = TARGET_REFUSALS.get((name, road, target))
    if refusal is None:
        check_target(name, road, target, request)
        return
    capfd = request.getfixturevalue("capfd")
    with pytest.raises(Exception) as info:  # noqa: PT011  (TVM's error, whatever its type)
        check_target(name, road, target, request)
    reason = target_refusal(info.value)
    # A pass of TVM's that raises inside its own C++ BlockBuilder (LegalizeOps) leaves it open:
    # its destruction warns on fd 2, which capfd takes here (not an importer's leak, which the
    # conftest hook catches in every other test).
    del info
    gc.collect()
    capfd.readouterr()
    assert reason.startswith(refusal), f"{name} via {road} on {target}: the refusal changed: {reason}"


def target_refusal(err: BaseException) -> str:
    """``err``'s type, first line and the innermost Python function that raised it, in TVM's
    package (``tvm/...py:function``); an error raised elsewhere (tvm_pool, this test) is no
    refusal of TVM's and fails here."""
    frames = [f for f in traceback.extract_tb(err.__traceback__) if f.filename.endswith(".py")]
    where = frames[-1].filename.replace("\\", "/").rpartition("site-packages/")[2] if frames else "?"
    message = one_line(err)
    head = message if message.startswith(type(err).__name__) else f"{type(err).__name__}: {message}"
    reason = f"{head} [{where}:{frames[-1].name if frames else '?'}]"
    assert where.startswith("tvm/"), f"not a refusal of TVM's: {reason}"
    return reason


def check_target(name: str, road: str, target: str, request) -> None:
    case = imported(name, road)
    host = request.getfixturevalue("host")
    if target == "x86":
        check_x86(case, host)
    elif target == "arm":
        arm_build(case, host)
    elif target == "arm-so":
        check_arm_so(case, request.getfixturevalue("arm_folder"))
    elif target == "arm-qemu":
        check_arm_qemu(case, request.getfixturevalue("arm_folder"), request.getfixturevalue("arm_device"))
    elif target == "cuda":
        check_cuda(case)
    else:
        check_cuda_sim(case)


@pytest.fixture(scope="session")
def arm_device():
    return emulated_device()


def _params(triples):
    return [pytest.param(n, r, t, marks=TARGET_MARKS.get(t, []), id=f"{n}-{r}-{t}") for n, r, t in triples]


# ---------------------------------------------------------------------------------------------
# The models
# ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("name,road,target", _params(DEFAULT))
def test_models(name, road, target, request):
    check(name, road, target, request)


@pytest.mark.slow
@pytest.mark.parametrize("name,road,target", _params(SLOW))
def test_models_all(name, road, target, request):
    check(name, road, target, request)


@pytest.mark.slow
@pytest.mark.parametrize("name,road", sorted(REFUSALS), ids=[f"{n}-{r}" for n, r in sorted(REFUSALS)])
def test_refusals(name, road):
    """Each expected refusal still happens, with the same one-line reason."""
    needed, available = EXPORT_MEMORY_GB.get((name, road)), available_memory_gb()
    if needed and available < needed:
        pytest.skip(f"{name} via {road}: the export needs about {needed} GB of memory, {available:.0f} GB available")
    with pytest.raises(Refused) as info:
        imported(name, road)
    reason = info.value.reason
    # The error's traceback holds the model and its export (gigabytes for ViT-H/14) in a
    # reference cycle: freed now, not at some later collection of the same process.
    del info
    gc.collect()
    assert reason.startswith(REFUSALS[name, road]), reason
    assert "\n" not in reason


def test_refusal_table():
    """The tables name known models, roads and targets, each reason one line; a target refusal
    is of a road that imports."""
    for (name, road), reason in REFUSALS.items():
        assert name in MODELS and road in ROADS, (name, road)
        assert reason and "\n" not in reason, (name, road)
    assert set(EXPORT_MEMORY_GB) <= set(REFUSALS)
    for (name, road, target), reason in TARGET_REFUSALS.items():
        assert name in MODELS and road in ROADS and target in TARGETS and (name, road) not in REFUSALS
        assert reason and "\n" not in reason, (name, road, target)


class PoolVariants(torch.nn.Module):
    """The pooling arguments torchvision's models do not all use, each its own output: what
    the exporters write for them (attributes, opset 20 for dynamo) must convert and schedule."""

    def forward(self, x1, x2, x3):
        values, indices = F.max_pool2d(x2, 2, 2, return_indices=True)
        return (
            F.max_pool2d(x2, 3, 2, 1, dilation=2, ceil_mode=True),
            F.avg_pool2d(x2, 3, 2, 1, ceil_mode=True, count_include_pad=True),
            F.avg_pool2d(x2, 3, 2, 1, ceil_mode=True, count_include_pad=False),
            F.adaptive_avg_pool2d(x2, 4),  # 12 -> 4: an AveragePool 3/3
            F.adaptive_max_pool2d(x2, 3),  # 12 -> 3: a MaxPool 4/4
            F.lp_pool2d(x2, 2, 3, 2),
            values, indices,
            F.avg_pool1d(x1, 3, 2, 1, ceil_mode=True),
            F.max_pool3d(x3, 3, 2, 1, ceil_mode=True),
            F.avg_pool3d(x3, 3, 2, 1, count_include_pad=False),
        )


@pytest.mark.parametrize("exporter", EXPORTERS)
def test_exporters_pool_attributes(exporter, host):
    gen = torch.Generator().manual_seed(3)
    args = (torch.randn(1, 3, 12, generator=gen), torch.randn(1, 3, 12, 12, generator=gen),
            torch.randn(1, 2, 7, 7, 7, generator=gen))
    module = PoolVariants().eval()
    want_torch = [t.numpy() for t in module(*args)]
    proto = export_onnx(module, args, exporter)
    names = [i.name for i in proto.graph.input]
    feeds = dict(zip(names, [a.numpy() for a in args]))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        executable, pools = compile_scheduled(tvm_pool.from_onnx(proto), host)
    result = relax.VirtualMachine(executable, tvm.cpu())["main"](*[tvm.runtime.tensor(feeds[n]) for n in names])
    got = [r.numpy() for r in result]
    for index, (g, w, t) in enumerate(zip(got, run_onnxruntime(proto, feeds), want_torch)):
        if t.dtype.kind in "iu":  # the indices: exactly
            np.testing.assert_array_equal(g, w, err_msg=f"output {index} vs onnxruntime")
            np.testing.assert_array_equal(g, t, err_msg=f"output {index} vs torch")
        else:
            assert_close(g, w, f"{exporter} output {index} vs onnxruntime")
            assert_close(g, t, f"{exporter} output {index} vs torch")
    assert_pools_scheduled(pools, f"pool variants via {exporter}", expect_pools=True)


def test_torchvision_models_build():
    """Every builder gives a model in eval mode with random weights, and torchvision's operator
    schemas are there (its own or the helper's) without its C++ kernels being needed. Every
    torchvision model of the covered families (the quantized ones aside) has an entry: a
    detection model as its backbone."""
    tv = import_torchvision()
    assert hasattr(torch.ops.torchvision, "nms")
    models = tv.models
    listed = {name for family in (models, models.video, models.segmentation, models.optical_flow)
              for name in models.list_models(family)} - set(models.list_models(models.quantization))
    listed -= set(models.list_models(models.detection))
    covered = {name for name in MODELS if FAMILY[name] != "detection"}
    assert covered == listed, (sorted(listed - covered), sorted(covered - listed))
    assert {f"{name}_backbone" for name in models.list_models(models.detection)} == \
        {name for name in MODELS if FAMILY[name] == "detection"}
    for name in MODELS:
        assert all(len(shape) in (4, 5) for shape in input_shapes(name)), name
    model, x = build("squeezenet1_0")
    assert not model.training and tuple(x.shape) == MODELS["squeezenet1_0"][1]
    model, (a, b) = build("raft_small")
    assert tuple(a.shape) == tuple(b.shape) == (1, 3, 128, 128) and not torch.equal(a, b)


def test_shufflenet_torchscript_export_folds():
    """The TorchScript exporter writes ShuffleNet v2's channel split as Shape -> Gather -> Add ->
    Div -> Mul -> Slice: from_onnx folds the chain, so the Slices get constant bounds and the
    model imports with static shapes only."""
    proto = onnx.load_from_string(imported("shufflenet_v2_x0_5", "torchscript").onnx)
    assert any(node.op_type == "Shape" for node in proto.graph.node)
    folded = fold_constant_shapes(proto)
    assert folded is not proto
    assert not any(node.op_type in ("Shape", "Gather", "Div") for node in folded.graph.node)
    assert any(node.op_type == "Shape" for node in proto.graph.node)  # the caller's model is untouched
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        mod = tvm_pool.from_onnx(proto)
    assert "ndim=" not in mod["main"].script(), "a tensor of unknown shape is left"


# ---------------------------------------------------------------------------------------------
# tvm_pool.onnx.fold on hand-built graphs
# ---------------------------------------------------------------------------------------------

def _chunk_model(x_shape, opset=17) -> onnx.ModelProto:
    """Y = X[:, :C/2]: the TorchScript exporter's chunk, Shape -> Gather -> Add -> Div -> Mul ->
    Slice, then a Relu."""
    const = lambda name, value: helper.make_node(  # noqa: E731
        "Constant", [], [name], value=numpy_helper.from_array(np.array(value, dtype=np.int64), name))
    nodes = [
        helper.make_node("Shape", ["X"], ["shape"], name="shape"),
        const("one", [1]), const("zero", [0]), const("two", [2]),
        helper.make_node("Gather", ["shape", "one"], ["channels"], name="gather", axis=0),
        helper.make_node("Add", ["channels", "one"], ["plus"], name="add"),
        helper.make_node("Div", ["plus", "two"], ["half"], name="div"),
        helper.make_node("Mul", ["half", "one"], ["end"], name="mul"),
        helper.make_node("Slice", ["X", "zero", "end", "one"], ["sliced"], name="slice"),
        helper.make_node("Relu", ["sliced"], ["Y"], name="relu"),
    ]
    graph = helper.make_graph(nodes, "chunk", [helper.make_tensor_value_info("X", TensorProto.FLOAT, x_shape)],
                              [helper.make_tensor_value_info("Y", TensorProto.FLOAT, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = IR_VERSION
    return model


def test_fold_shape_chain():
    model = _chunk_model([2, 6, 3, 3])
    before = model.SerializeToString()
    folded = fold_constant_shapes(model)
    assert model.SerializeToString() == before  # the caller's model is untouched
    ops = [(node.op_type, node.output[0]) for node in folded.graph.node]
    # Shape -> Gather -> Add -> Div -> Mul is one Constant; the Constant only Add read is gone
    assert ops == [("Constant", "one"), ("Constant", "zero"), ("Constant", "end"), ("Slice", "sliced"), ("Relu", "Y")]
    end = next(n for n in folded.graph.node if n.output[0] == "end")
    assert end.name == "mul"  # the folded node's name stays (errors name it)
    assert numpy_helper.to_array(end.attribute[0].t).tolist() == [3]
    x = np.random.default_rng(0).standard_normal((2, 6, 3, 3)).astype(np.float32)
    np.testing.assert_array_equal(run_onnxruntime(folded, {"X": x})[0], run_onnxruntime(model, {"X": x})[0])


def test_fold_partial_shape_and_shape_dict():
    """A symbolic batch: the channel count is still known, so the chain folds; with
    ``shape_dict`` the whole shape is, as the importer will see it."""
    folded = fold_constant_shapes(_chunk_model(["N", 6, 3, 3]))
    assert [n.op_type for n in folded.graph.node] == ["Constant"] * 3 + ["Slice", "Relu"]
    unknown = _chunk_model(["N", "C", 3, 3])
    assert fold_constant_shapes(unknown) is unknown  # nothing known, nothing changed
    folded = fold_constant_shapes(unknown, {"X": [1, 8, 3, 3]})
    end = next(n for n in folded.graph.node if n.output[0] == "end")
    assert numpy_helper.to_array(end.attribute[0].t).tolist() == [4]


def test_fold_leaves_other_models_alone():
    """Nothing to fold, or nothing known to fold with: the same object comes back."""
    from oracles import pool_model

    model = pool_model("MaxPool", [1, 2, 5, 5], kernel_shape=[2, 2])
    assert fold_constant_shapes(model) is model
    opaque = _chunk_model([2, 6, 3, 3])  # the shape read is of an operator inference cannot see into
    opaque.graph.node.insert(0, helper.make_node("Opaque", ["X"], ["X2"], name="opaque", domain="test.opaque"))
    opaque.graph.node[1].input[0] = "X2"
    opaque.opset_import.append(helper.make_opsetid("test.opaque", 1))
    assert fold_constant_shapes(opaque) is opaque


def test_unconvertible_node_is_one_line_error():
    """A chain that cannot fold (the channel count is symbolic) into a Reshape that infers a
    dimension: TVM cannot convert the Reshape, and the error names it in one line."""
    model = _chunk_model(["N", "C", 3, 3])
    model.graph.node[-1].output[0] = "relu"
    model.graph.node.extend([
        helper.make_node("Constant", [], ["flat"], value=numpy_helper.from_array(np.array([0, -1], dtype=np.int64))),
        helper.make_node("Reshape", ["relu", "flat"], ["Y"], name="flatten"),
    ])
    with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
        warnings.simplefilter("ignore")
        with pytest.raises(tvm_pool.UnsupportedError) as info:
            tvm_pool.from_onnx(model)
    message = str(info.value)
    assert message.startswith("node 'flatten' (Reshape): ") and "\n" not in message, message
    assert "only known at run time" in message


@pytest.mark.slow
def test_fold_is_exact_on_onnx_backend_cases():
    """Every ONNX backend node case that reads a Shape or Size (261 in onnx 1.23: the expanded
    functions, LayerNormalization, attention, ...) computes the same outputs, bit for bit, by
    the reference implementation after folding as before."""
    from onnx.backend.test.case.node import collect_testcases
    from oracles import run_reference

    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        cases = [c for c in collect_testcases(None) if any(n.op_type in ("Shape", "Size") for n in c.model.graph.node)]
    assert len(cases) >= 200
    for case in cases:
        folded = fold_constant_shapes(case.model)
        names = [i.name for i in case.model.graph.input]
        for inputs, _ in case.data_sets:
            feeds = dict(zip(names, inputs))
            for before, after in zip(run_reference(case.model, feeds), run_reference(folded, feeds)):
                before, after = np.asarray(before), np.asarray(after)
                assert before.dtype == after.dtype and before.shape == after.shape, case.name
                np.testing.assert_array_equal(after, before, err_msg=case.name)


def test_folded_chunk_compiles(host):
    """The hand-built chunk through from_onnx and compile matches onnxruntime."""
    model = _chunk_model([2, 6, 3, 3])
    x = np.random.default_rng(1).standard_normal((2, 6, 3, 3)).astype(np.float32)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        mod = tvm_pool.from_onnx(model)
    vm = relax.VirtualMachine(tvm_pool.compile(mod, host), tvm.cpu())
    np.testing.assert_array_equal(run_vm(vm, [x])[0], run_onnxruntime(model, {"X": x})[0])
