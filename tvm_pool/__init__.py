"""tvm_pool: exact, fast pooling for Apache TVM."""

from . import relax_ops, spec
from .errors import InvalidModelError, TvmPoolError, UnsupportedError
from .lowering import compile  # noqa: A004  (same name as tvm.compile on purpose)

__all__ = ["InvalidModelError", "TvmPoolError", "UnsupportedError", "compile", "relax_ops", "spec"]
