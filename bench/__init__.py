"""tvm_pool's pooling benchmark (``python -m tvm_pool.bench`` / ``tvm-pool bench``)."""

from .runner import main

__all__ = ["main"]
