"""torchvision, importable next to the CPU torch wheel (the layers benchmark traces its
classification models: ``bench/layers.py``).

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

The installed package's one copy: the benchmark's layer tracer and the tests
(``tests/helpers/torchvision_models.py``) both import it from here.
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
