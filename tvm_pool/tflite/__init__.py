"""``tvm_pool.from_tflite``: TVM's TFLite importer with exact pooling.

The ``tflite`` package (the flatbuffer schema) is optional (``pip install 'tvm_pool[tflite]'``):
importing tvm_pool never imports it; calling :func:`from_tflite` does.
"""

from __future__ import annotations

from ..errors import require_module

TFLITE_MISSING = "needs the tflite package: pip install 'tvm_pool[tflite]'"


def require_tflite(what: str = "tvm_pool.from_tflite"):
    """Import the ``tflite`` package, or fail with one line that says what to install."""
    return require_module("tflite", f"{what} {TFLITE_MISSING}")


def from_tflite(model, shape_dict=None, dtype_dict=None, op_converter=None):
    """Convert a TFLite model to a Relax IRModule, exactly as
    ``tvm.relax.frontend.tflite.from_tflite`` does (the same arguments; ``model`` may also be
    the flatbuffer's bytes), except that MAX_POOL_2D, AVERAGE_POOL_2D and L2_POOL_2D go
    through tvm_pool's computes in NHWC with LiteRT's semantics: int8/uint8/int16 averages
    round half away from zero, fused activations clamp with TFLite's quantized bounds, SAME
    padding as TFLite computes it; and MEAN over H and W (a global average pool) goes through
    tvm_pool's global average pool with the fixed-point requantization of LiteRT's builtin
    kernels (:mod:`tvm_pool.tflite.mean`; other MEANs stay TVM's). A conversion that fails
    leaves no Relax BlockBuilder open. ``op_converter`` defaults to
    :class:`tvm_pool.tflite.importer.PoolingOperatorConverter` (subclass it to change more).
    Unsupported or invalid operators raise a one-line :class:`tvm_pool.TvmPoolError` naming the
    operator (by its output tensor)."""
    tflite = require_tflite()
    from .importer import PoolingOperatorConverter  # pylint: disable=import-outside-toplevel
    from .importer import from_tflite as convert  # pylint: disable=import-outside-toplevel

    if isinstance(model, (bytes, bytearray, memoryview)):
        model = tflite.Model.GetRootAsModel(bytes(model), 0)
    return convert(model, shape_dict, dtype_dict, op_converter or PoolingOperatorConverter)


__all__ = ["from_tflite", "require_tflite"]
