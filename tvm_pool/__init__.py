"""tvm_pool: exact, fast pooling for Apache TVM."""

from . import thread_pool

thread_pool.configure()  # before any TVM parallel call: see thread_pool

# pylint: disable=wrong-import-position
from . import relax_ops, spec  # noqa: E402
from .errors import InvalidModelError, TvmPoolError, UnsupportedError  # noqa: E402
from .lowering import compile  # noqa: A004,E402  (same name as tvm.compile on purpose)
from .onnx import from_onnx  # noqa: E402
from .pytorch import from_exported_program  # noqa: E402
from .tflite import from_tflite  # noqa: E402
from .tuning import tune  # noqa: E402

__all__ = ["InvalidModelError", "TvmPoolError", "UnsupportedError", "compile", "from_exported_program", "from_onnx", "from_tflite", "relax_ops", "spec", "tune"]
