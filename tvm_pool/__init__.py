"""tvm_pool: exact, fast pooling for Apache TVM."""

from . import relax_ops, spec
from .errors import InvalidModelError, TvmPoolError, UnsupportedError
from .lowering import compile  # noqa: A004  (same name as tvm.compile on purpose)
from .onnx import from_onnx
from .tuning import tune

__all__ = ["InvalidModelError", "TvmPoolError", "UnsupportedError", "compile", "from_onnx", "relax_ops", "spec", "tune"]
