"""``tvm_pool.from_exported_program``: TVM's PyTorch ``torch.export`` importer with exact pooling.

PyTorch is optional (``pip install 'tvm_pool[torch]'``): importing tvm_pool never imports it;
calling :func:`from_exported_program` does.
"""

from __future__ import annotations

from ..errors import require_module

TORCH_MISSING = "needs PyTorch: pip install 'tvm_pool[torch]'"


def require_torch(what: str = "tvm_pool.from_exported_program"):
    """Import torch, or fail with one line that says what to install."""
    return require_module("torch", f"{what} {TORCH_MISSING}")


def from_exported_program(exported_program, **kwargs):
    """Convert a ``torch.export.ExportedProgram`` to a Relax IRModule, exactly as
    ``tvm.relax.frontend.torch.from_exported_program`` does (the same keyword arguments:
    ``keep_params_as_input``, ``unwrap_unit_return_tuple``, ``no_bind_return_tuple``,
    ``custom_convert_map``, ``run_ep_decomposition``), except that PyTorch's pooling operators
    (max_pool with and without indices, avg_pool, the adaptive pools, max_unpool) go through
    tvm_pool's computes with PyTorch's semantics. See :mod:`tvm_pool.pytorch.importer`."""
    require_torch()
    from .importer import from_exported_program as convert  # pylint: disable=import-outside-toplevel

    return convert(exported_program, **kwargs)


__all__ = ["from_exported_program", "require_torch"]
