"""tvm_pool's ONNX frontend: TVM's Relax importer with tvm_pool's pooling converters."""

from .base import CONVERTERS, CUSTOM_DOMAIN, converter_for
from .importer import from_onnx

__all__ = ["CONVERTERS", "CUSTOM_DOMAIN", "converter_for", "from_onnx"]
