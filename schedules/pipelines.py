"""TIR lowering pipelines of the schedules' families: TVM's default pipeline followed by
tvm_pool's own lowering passes (:mod:`.strided_loads`, :mod:`.stack_buffers`), registered under
a name that ``tvm.compile(..., tir_pipeline=NAME)`` takes (``tvm_pool.schedules.tir_pipeline``
chooses it per target)."""

from __future__ import annotations

import tvm


def register_after_default(name: str, passes: list) -> str:
    """Register (once) TVM's default TIR pipeline followed by ``passes`` under ``name``, before
    the host and device finalization; returns ``name``."""
    from tvm.tirx import compilation_pipeline  # pylint: disable=import-outside-toplevel

    if name not in compilation_pipeline.PIPELINE_MAP:
        def factory():
            pipeline, finalize_host, finalize_device = compilation_pipeline.get_tir_pipeline("default")
            return tvm.transform.Sequential([pipeline, *passes]), finalize_host, finalize_device

        compilation_pipeline.register_tir_pipeline(name, factory)
    return name
