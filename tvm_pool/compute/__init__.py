"""TE compute definitions for every pooling operator tvm_pool supports."""

from .pool import avg_pool, global_pool, lp_pool, max_pool, max_pool_windows
from .windows import windows_for

__all__ = ["avg_pool", "global_pool", "lp_pool", "max_pool", "max_pool_windows", "windows_for"]

# Adaptive pooling (OpenVINO AdaptiveMaxPool-8 / AdaptiveAvgPool-8) and TensorRT IPoolingLayer.
from .adaptive import adaptive_avg_pool, adaptive_max_pool  # noqa: E402
from .fractional import fractional_max_pool  # noqa: E402
from .tensorrt import tensorrt_pool  # noqa: E402

__all__ += ["adaptive_avg_pool", "adaptive_max_pool", "fractional_max_pool", "tensorrt_pool"]
