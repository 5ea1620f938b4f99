"""TE compute definitions for every pooling operator tvm_pool supports."""

from .pool import avg_pool, global_pool, lp_pool, max_pool, max_pool_windows, windows_for

__all__ = ["avg_pool", "global_pool", "lp_pool", "max_pool", "max_pool_windows", "windows_for"]
