"""torchvision's model builders, importable next to the CPU torch wheel.

torchvision from PyPI ships its C++ operators in a ``_C.so`` built against the CUDA torch, which
does not load next to the CPU wheel, and ``import torchvision`` then fails. :func:`import_torchvision`
is the installed package's (``tvm_pool.bench.torchvision_import``, ``bench/torchvision_import.py``,
whose docstring tells the workaround: torchvision's operator schemas defined without kernels,
only when its extension does not load); the tests import torchvision through it.

:data:`MODELS` maps a short name to ``(builder, input shape)`` (a tuple of shapes for RAFT's two
frames): every model of torchvision's classification, video, segmentation, detection and
optical-flow builders with random weights (``weights=None`` and ``weights_backbone=None``:
nothing downloaded), auxiliary classifiers off, in eval mode, at the smallest input it accepts
(see the comment above :data:`MODELS`); :data:`FAMILY` names each one's family. A detection model
is its ``.backbone`` (:class:`DetectionBackbone`, named ``<model>_backbone``), a segmentation
model its ``out`` tensor (:class:`Segmentation`), a RAFT model its flow after one update
(:class:`OpticalFlow`).
"""

from __future__ import annotations

import torch

from tvm_pool.bench.torchvision_import import import_torchvision

__all__ = ["DetectionBackbone", "FAMILY", "MODELS", "OpticalFlow", "Segmentation", "build", "import_torchvision",
           "input_shapes"]


def _models():
    return import_torchvision().models


def _classifier(name: str, **kwargs):
    return lambda: getattr(_models(), name)(weights=None, **kwargs)


def _video(name: str):
    return lambda: getattr(_models().video, name)(weights=None)


def _segmentation(name: str):
    # weights_backbone=None: the default would download ImageNet weights; aux_loss off (one head)
    return lambda: getattr(_models().segmentation, name)(weights=None, weights_backbone=None, aux_loss=False)


class DetectionBackbone(torch.nn.Module):
    """A detection model's ``.backbone``: the body (ResNet, MobileNet v3, VGG-16) with its FPN or
    SSD extra layers, which hold every pooling operator the model has (FPN's LastLevelMaxPool, a
    1x1 stride-2 max; SSD's VGG maxima, one with ceil_mode, one 3x3 stride-1). The whole model is
    out of reach: its transform and post-processing need torchvision's NMS kernel (not loaded
    beside the CPU torch), and torch.export refuses its data-dependent box filtering
    ("Could not guard on data-dependent expression"). The feature maps come back as a tuple, in
    the backbone's order."""

    def __init__(self, model: torch.nn.Module):
        super().__init__()
        self.backbone = model.backbone

    def forward(self, x):
        return tuple(self.backbone(x).values())


def _detection_backbone(name: str):
    return lambda: DetectionBackbone(
        getattr(_models().detection, name)(weights=None, weights_backbone=None))


class Segmentation(torch.nn.Module):
    """A segmentation model's ``out`` (its only output with ``aux_loss`` off), not the dict."""

    def __init__(self, model: torch.nn.Module):
        super().__init__()
        self.model = model

    def forward(self, x):
        return self.model(x)["out"]


def _segmenter(name: str):
    build_model = _segmentation(name)
    return lambda: Segmentation(build_model())


class OpticalFlow(torch.nn.Module):
    """A RAFT model run for :data:`FLOW_UPDATES` flow updates (its default is 12), returning the
    last flow (RAFT returns the list of every update's). Its pools are all in the correlation
    pyramid (``F.avg_pool2d(corr, 2, stride=2)`` per level), built once before the updates: the
    updates only add convolutions and a GRU to every compile (1 instead of 12: a RAFT-small
    through the TorchScript exporter on x86 takes 23 s instead of 52)."""

    def __init__(self, model: torch.nn.Module):
        super().__init__()
        self.model = model

    def forward(self, image1, image2):
        return self.model(image1, image2, num_flow_updates=FLOW_UPDATES)[-1]


FLOW_UPDATES = 1


def _optical_flow(name: str):
    return lambda: OpticalFlow(getattr(_models().optical_flow, name)(weights=None))


# name -> (builder of the model, input shape, or a tuple of shapes for a model of several
# inputs). Every model of torchvision 0.28's classification, video, segmentation, detection
# (backbones) and optical-flow builders; the quantized ones (torchvision.models.quantization)
# are out of scope (quantized kernels, not torch.export's float graphs).
#
# Inputs: the smallest each model accepts, and no less than the existing entries' 64x64 (2-D)
# and 4-frame 32x32 clip (3-D), under which pools degenerate into copies of 1x1 maps:
# - 75x75 for Inception v3 (its stem's valid convolutions and 3x3 maxima);
# - 224x224 for AlexNet and the VGGs: their AdaptiveAvgPool2d to 6x6 and 7x7 converts through
#   the TorchScript ONNX exporter only when the feature map is a multiple of that;
# - 224x224 for the ViTs (they assert it), MaxViT (its 7x7 partitions at every stage: 7 * 32)
#   and the MViTs (fixed 16x224x224 clips: positional embeddings of that size);
# - a 13-frame 224x224 clip for S3D: its final AvgPool3d has a fixed 2x7x7 window (/8 in time,
#   /32 in space; 12 frames leave one);
# - 268x268 for SSD300's VGG backbone (its last two extra convolutions are 3x3 unpadded: the
#   fifth map must be 3x3 at least; 264 leaves 2x2);
# - two 128x128 frames for RAFT (its correlation pyramid needs 1/8 feature maps of 16 at least),
#   one flow update (:class:`OpticalFlow`).
MODELS = {
    # existing entries, their inputs unchanged
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

_IMAGE = (1, 3, 64, 64)
_CLIP = (1, 3, 4, 32, 32)
CLASSIFICATION_64 = (
    "convnext_tiny", "convnext_small", "convnext_base", "convnext_large",
    "densenet161", "densenet169", "densenet201",
    "efficientnet_b1", "efficientnet_b2", "efficientnet_b3", "efficientnet_b4", "efficientnet_b5", "efficientnet_b6",
    "efficientnet_b7", "efficientnet_v2_s", "efficientnet_v2_m", "efficientnet_v2_l",
    "mnasnet0_75", "mnasnet1_0", "mnasnet1_3", "mobilenet_v2", "mobilenet_v3_large",
    "regnet_x_800mf", "regnet_x_1_6gf", "regnet_x_3_2gf", "regnet_x_8gf", "regnet_x_16gf", "regnet_x_32gf",
    "regnet_y_400mf", "regnet_y_800mf", "regnet_y_1_6gf", "regnet_y_3_2gf", "regnet_y_8gf", "regnet_y_16gf",
    "regnet_y_32gf", "regnet_y_128gf",
    "resnet34", "resnet50", "resnet101", "resnet152", "resnext50_32x4d", "resnext101_32x8d", "resnext101_64x4d",
    "wide_resnet50_2", "wide_resnet101_2",
    "shufflenet_v2_x1_0", "shufflenet_v2_x1_5", "shufflenet_v2_x2_0", "squeezenet1_1",
    "swin_t", "swin_s", "swin_b", "swin_v2_t", "swin_v2_s", "swin_v2_b",
)
CLASSIFICATION_224 = (
    "vgg11_bn", "vgg13", "vgg13_bn", "vgg16", "vgg16_bn", "vgg19", "vgg19_bn",
    "vit_b_16", "vit_b_32", "vit_l_16", "vit_l_32", "vit_h_14", "maxvit_t",
)
MODELS.update({name: (_classifier(name), _IMAGE) for name in CLASSIFICATION_64})
MODELS.update({name: (_classifier(name), (1, 3, 224, 224)) for name in CLASSIFICATION_224})
MODELS.update({name: (_video(name), _CLIP) for name in ("mc3_18", "r2plus1d_18", "swin3d_t", "swin3d_s", "swin3d_b")})
MODELS.update({
    "s3d": (_video("s3d"), (1, 3, 13, 224, 224)),
    "mvit_v1_b": (_video("mvit_v1_b"), (1, 3, 16, 224, 224)),
    "mvit_v2_s": (_video("mvit_v2_s"), (1, 3, 16, 224, 224)),
})
SEGMENTATION = ("fcn_resnet50", "fcn_resnet101", "deeplabv3_resnet50", "deeplabv3_resnet101",
                "deeplabv3_mobilenet_v3_large", "lraspp_mobilenet_v3_large")
MODELS.update({name: (_segmenter(name), _IMAGE) for name in SEGMENTATION})
DETECTION = ("fasterrcnn_resnet50_fpn", "fasterrcnn_resnet50_fpn_v2", "fasterrcnn_mobilenet_v3_large_fpn",
             "fasterrcnn_mobilenet_v3_large_320_fpn", "maskrcnn_resnet50_fpn", "maskrcnn_resnet50_fpn_v2",
             "keypointrcnn_resnet50_fpn", "retinanet_resnet50_fpn", "retinanet_resnet50_fpn_v2", "fcos_resnet50_fpn",
             "ssdlite320_mobilenet_v3_large", "ssd300_vgg16")
MODELS.update({f"{name}_backbone": (_detection_backbone(name), (1, 3, 268, 268) if name == "ssd300_vgg16" else _IMAGE)
               for name in DETECTION})
MODELS.update({name: (_optical_flow(name), ((1, 3, 128, 128), (1, 3, 128, 128)))
               for name in ("raft_small", "raft_large")})

# name -> family: classification, video, segmentation, detection (a backbone), optical_flow
FAMILY = {name: "classification" for name in MODELS}
FAMILY.update({name: "video" for name in MODELS if len(MODELS[name][1]) == 5})
FAMILY.update({name: "segmentation" for name in SEGMENTATION})
FAMILY.update({f"{name}_backbone": "detection" for name in DETECTION})
FAMILY.update({"raft_small": "optical_flow", "raft_large": "optical_flow"})


def input_shapes(name: str) -> tuple:
    """The input shapes of model ``name``: one shape per input."""
    shape = MODELS[name][1]
    return tuple(shape) if isinstance(shape[0], tuple) else (shape,)


def build(name: str, seed: int = 0) -> tuple[torch.nn.Module, torch.Tensor | tuple]:
    """``(model, input)``: the model ``name`` of :data:`MODELS` with seeded random weights, in eval
    mode, and a seeded random input of its shape (a tuple of them for a model of several inputs)."""
    builder = MODELS[name][0]
    torch.manual_seed(seed)
    model = builder().eval()
    generator = torch.Generator().manual_seed(seed + 1)
    inputs = tuple(torch.randn(*shape, generator=generator) for shape in input_shapes(name))
    return model, inputs if len(inputs) > 1 else inputs[0]
