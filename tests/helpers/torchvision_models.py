"""torchvision's model builders, importable next to the CPU torch wheel.

torchvision from PyPI (0.28.0 for torch 2.13.0) ships its C++ operators in ``_C.so``, built
against the CUDA torch; next to the CPU wheel that library does not load (libc10_cuda.so is
missing), and ``import torchvision`` then fails in ``torchvision/_meta_registrations.py``, which
registers fake kernels for ``torchvision::nms`` and ``torchvision::qnms`` whatever happened:
``RuntimeError: operator torchvision::nms does not exist``.

The model builders need none of those operators (they are the detection and quantized ops:
NMS, RoI pooling, deformable convolution). So, only when the extension is missing, this module
*defines* their schemas, without kernels, with ``torch.library`` before importing torchvision:
the fake-kernel registrations then find their operators, ``torchvision.extension._has_ops()``
stays False (torchvision's Python fallbacks stay in use), and calling one of these operators
fails plainly ("no kernel") instead of computing anything. The schema strings are those of
torchvision's own C++ registrations (``torchvision/csrc/ops/*.cpp``, ``m.def(...)``); the one of
``qroi_align`` follows the call in ``torchvision/ops/roi_align.py`` of 0.28, which passes the
rois' quantization too.

:data:`MODELS` maps a short name to ``(builder, input shape)``: every model with random weights
(``weights=None``, nothing downloaded), auxiliary classifiers off, in eval mode, at a small input
that keeps compile time low.
"""

from __future__ import annotations

import importlib.util
import os
import sys

import torch

# torchvision's C++ operator schemas (csrc/ops/*.cpp), namespace torchvision.
TORCHVISION_SCHEMAS = (
    "nms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor",
    "qnms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor",
    "box_iou_rotated(Tensor boxes1, Tensor boxes2) -> Tensor",
    "roi_align(Tensor input, Tensor rois, float spatial_scale, SymInt pooled_height, SymInt pooled_width,"
    " int sampling_ratio, bool aligned) -> Tensor",
    "_roi_align_backward(Tensor grad, Tensor rois, float spatial_scale, SymInt pooled_height, SymInt pooled_width,"
    " SymInt batch_size, SymInt channels, SymInt height, SymInt width, int sampling_ratio, bool aligned) -> Tensor",
    "qroi_align(Tensor input, Tensor rois, float input_scale, int input_zero_point, float rois_scale,"
    " int rois_zero_point, float spatial_scale, SymInt pooled_height, SymInt pooled_width, int sampling_ratio,"
    " bool aligned) -> Tensor",
    "roi_pool(Tensor input, Tensor rois, float spatial_scale, int pooled_height, int pooled_width)"
    " -> (Tensor, Tensor)",
    "_roi_pool_backward(Tensor grad, Tensor rois, Tensor argmax, float spatial_scale, int pooled_height,"
    " int pooled_width, int batch_size, int channels, int height, int width) -> Tensor",
    "ps_roi_align(Tensor input, Tensor rois, float spatial_scale, int pooled_height, int pooled_width,"
    " int sampling_ratio) -> (Tensor, Tensor)",
    "_ps_roi_align_backward(Tensor grad, Tensor rois, Tensor channel_mapping, float spatial_scale,"
    " int pooled_height, int pooled_width, int sampling_ratio, int batch_size, int channels, int height,"
    " int width) -> Tensor",
    "ps_roi_pool(Tensor input, Tensor rois, float spatial_scale, int pooled_height, int pooled_width)"
    " -> (Tensor, Tensor)",
    "_ps_roi_pool_backward(Tensor grad, Tensor rois, Tensor channel_mapping, float spatial_scale,"
    " int pooled_height, int pooled_width, int batch_size, int channels, int height, int width) -> Tensor",
    "deform_conv2d(Tensor input, Tensor weight, Tensor offset, Tensor mask, Tensor bias, int stride_h,"
    " int stride_w, int pad_h, int pad_w, int dilation_h, int dilation_w, int groups, int offset_groups,"
    " bool use_mask) -> Tensor",
    "_deform_conv2d_backward(Tensor grad, Tensor input, Tensor weight, Tensor offset, Tensor mask, Tensor bias,"
    " int stride_h, int stride_w, int pad_h, int pad_w, int dilation_h, int dilation_w, int groups,"
    " int offset_groups, bool use_mask) -> (Tensor, Tensor, Tensor, Tensor, Tensor)",
)

_LIBRARY = None  # the torch.library.Library holding the schemas (kept alive: it owns them)


def _extension_loads() -> bool:
    """Whether torchvision's ``_C`` library loads here (it registers the operators itself)."""
    spec = importlib.util.find_spec("torchvision")
    if spec is None or not spec.submodule_search_locations:
        return False
    folder = spec.submodule_search_locations[0]
    candidates = [name for name in os.listdir(folder) if name.startswith("_C.") and name.endswith((".so", ".pyd"))]
    if not candidates:
        return False
    try:
        torch.ops.load_library(os.path.join(folder, candidates[0]))
    except (OSError, RuntimeError):
        return False
    return True


def define_schemas() -> bool:
    """Define the ``torchvision::`` schemas that are not registered yet; True when any was."""
    global _LIBRARY  # pylint: disable=global-statement
    missing = [schema for schema in TORCHVISION_SCHEMAS if not _schema_exists(schema)]
    if not missing:
        return False
    if _LIBRARY is None:
        _LIBRARY = torch.library.Library("torchvision", "FRAGMENT")  # pylint: disable=invalid-name
    for schema in missing:
        _LIBRARY.define(schema)
    return True


def _schema_exists(schema: str) -> bool:
    """Whether the operator of ``schema`` (its name before the parenthesis) is registered."""
    try:
        torch._C._get_schema(f"torchvision::{schema.split('(')[0]}", "")
    except RuntimeError:
        return False
    return True


def import_torchvision():
    """``torchvision``, imported; its operator schemas defined first when its extension is missing."""
    if "torchvision" not in sys.modules and not _extension_loads():
        define_schemas()
    import torchvision  # pylint: disable=import-outside-toplevel
    import torchvision.models.video  # noqa: F401  pylint: disable=import-outside-toplevel

    return torchvision


def _models():
    return import_torchvision().models


# name -> (builder of the model, input shape). Smallest practical inputs: 64x64 for the 2-D
# nets (Inception v3 needs >= 75x75), a 4-frame 32x32 clip for R3D-18. AlexNet and VGG-11 end
# in an AdaptiveAvgPool2d to 6x6 and 7x7, which the TorchScript ONNX exporter converts only
# when the feature map is a multiple of that: 224x224 is their smallest such input.
MODELS = {
    "resnet18": (lambda: _models().resnet18(weights=None), (1, 3, 64, 64)),
    "googlenet": (lambda: _models().googlenet(weights=None, aux_logits=False, init_weights=True), (1, 3, 64, 64)),
    "inception_v3": (
        lambda: _models().inception_v3(weights=None, aux_logits=False, init_weights=True), (1, 3, 75, 75)),
    "densenet121": (lambda: _models().densenet121(weights=None), (1, 3, 64, 64)),
    "squeezenet1_0": (lambda: _models().squeezenet1_0(weights=None), (1, 3, 64, 64)),
    "alexnet": (lambda: _models().alexnet(weights=None), (1, 3, 224, 224)),
    "vgg11": (lambda: _models().vgg11(weights=None), (1, 3, 224, 224)),
    "shufflenet_v2_x0_5": (lambda: _models().shufflenet_v2_x0_5(weights=None), (1, 3, 64, 64)),
    "mobilenet_v3_small": (lambda: _models().mobilenet_v3_small(weights=None), (1, 3, 64, 64)),
    "efficientnet_b0": (lambda: _models().efficientnet_b0(weights=None), (1, 3, 64, 64)),
    "mnasnet0_5": (lambda: _models().mnasnet0_5(weights=None), (1, 3, 64, 64)),
    "regnet_x_400mf": (lambda: _models().regnet_x_400mf(weights=None), (1, 3, 64, 64)),
    "r3d_18": (lambda: _models().video.r3d_18(weights=None), (1, 3, 4, 32, 32)),
}


def build(name: str, seed: int = 0) -> tuple[torch.nn.Module, torch.Tensor]:
    """``(model, input)``: the model ``name`` of :data:`MODELS` with seeded random weights, in eval
    mode, and a seeded random input of its shape."""
    builder, shape = MODELS[name]
    torch.manual_seed(seed)
    model = builder().eval()
    generator = torch.Generator().manual_seed(seed + 1)
    return model, torch.randn(*shape, generator=generator)
