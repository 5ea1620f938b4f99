"""TVM's ``ExportedProgramImporter`` with tvm_pool's pooling converters.

TVM's importer builds its converter table in ``create_convert_map``; the subclass here
replaces the pooling entries (:data:`tvm_pool.pytorch.pools.CONVERTERS`), wraps the two
converters lp_pool's traced formula needs exact (:mod:`tvm_pool.pytorch.lp_pool`) and keeps every
other one. A ``custom_convert_map`` given by the caller still overrides both, as in TVM.

PyTorch's core-ATen decomposition (``run_ep_decomposition=True``, TVM's default) would turn
``max_pool2d`` into ``max_pool2d_with_indices`` (indices computed and dropped),
``max_unpool2d`` into an unchecked ``index_put``, and the 1-D pools into 2-D ones; the pooling
operators converted here are therefore taken out of the decomposition table, and reach their
converters whole.
"""

from __future__ import annotations

import functools

import torch
from tvm.relax.frontend.torch.exported_program_translator import ExportedProgramImporter

from ..block_builders import closed_on_error
from .lp_pool import WRAPPERS
from .pools import CONVERTERS


class PoolingExportedProgramImporter(ExportedProgramImporter):
    """ExportedProgramImporter whose pooling converters are tvm_pool's."""

    def create_convert_map(self):
        table = super().create_convert_map()
        for name, convert in CONVERTERS.items():
            table[name] = functools.partial(convert, self)
        for name, wrap in WRAPPERS.items():  # lp_pool's formula (lp_pool.py): TVM's converter inside
            table[name] = functools.partial(wrap, self, original=table[name])
        return table


def decomposition_table():
    """PyTorch's default decompositions, less the pooling operators converted whole."""
    table = torch.export.default_decompositions()
    for name in CONVERTERS:
        packet, _, overload = name.partition(".")
        op = getattr(getattr(torch.ops.aten, packet, None), overload, None)
        if op is not None and op in table:
            del table[op]
    return table


def _has_sparse_tensors(program) -> bool:
    """TVM skips the decomposition for programs holding sparse tensors; so do we."""
    tensors = [
        *(t for _, t in program.named_buffers()),
        *(t for _, t in program.named_parameters()),
        *program.constants.values(),
        *program.tensor_constants.values(),
    ]
    return any(isinstance(t, torch.Tensor) and t.layout != torch.strided for t in tensors)


def from_exported_program(
    exported_program,
    *,
    keep_params_as_input: bool = False,
    unwrap_unit_return_tuple: bool = False,
    no_bind_return_tuple: bool = False,
    custom_convert_map=None,
    run_ep_decomposition: bool = True,
):
    """See :func:`tvm_pool.from_exported_program`."""
    if not isinstance(exported_program, torch.export.ExportedProgram):
        raise TypeError(
            f"from_exported_program expects a torch.export.ExportedProgram, got {type(exported_program).__name__}"
        )
    if run_ep_decomposition and not _has_sparse_tensors(exported_program):
        exported_program = exported_program.run_decompositions(decomposition_table())
    importer = PoolingExportedProgramImporter()
    # TVM's importer creates its builder (block_builder) when it runs; a converter that raises
    # inside its `with block_builder.function()` leaves a block open: closed before the error
    # goes on (block_builders.py).
    with closed_on_error(lambda: getattr(importer, "block_builder", None)):
        return importer.from_exported_program(
            exported_program, keep_params_as_input, unwrap_unit_return_tuple, no_bind_return_tuple, custom_convert_map
        )
