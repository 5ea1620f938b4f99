"""x86-64 CPUs: the facts and the design space the shared CPU schedule (:mod:`.cpu`) takes.

AVX-512 / AVX2 / SSE register widths from the target's mcpu/mattr
(:func:`tvm_pool.targets.x86_vector_bits`); everything else is the measured defaults of
:class:`.cpu_config.CpuConfig`. The schedule itself (one dlight rule for every pooling PrimFunc,
fused or not) is :mod:`.cpu`, shared with aarch64.
"""

from __future__ import annotations

from tvm.target import Target

from ..targets import is_x86, x86_vector_bits
from . import cpu
from .cpu_config import HUGE, NO_VECTOR, CpuConfig, target_threads

__all__ = ["KNOBS", "Pool"]

# The design space tuning measures (``tvm_pool.tune``: every point, exhaustively): the
# hand-written schedule, then one knob moved at a time, each an override of CpuConfig.
KNOBS = (
    ("hand-written", {}),
    ("vector: TVM vectors off (LLVM's vectoriser only)", {"level": NO_VECTOR}),
    ("vector: 256-bit tiles", {"vector_bits": 256}),
    ("vector: 128-bit tiles", {"vector_bits": 128}),
    ("unroll: taps rolled", {"max_unrolled_taps": 0}),
    ("padding: copied per plane", {"plane_copy_bytes": HUGE}),
    ("padding: bounds checks inlined", {"plane_copy_bytes": -1}),
    ("threads: one", {"min_parallel_bytes": HUGE}),
    ("threads: all", {"min_parallel_bytes": 0}),
    ("threads: planes and rows in parallel", {"num_threads": 1 << 20}),
    ("threads: planes in parallel only", {"num_threads": 0}),
    ("last pass: LLVM's vectoriser", {"in_cache_bytes": -1}),
    ("last pass: gathered TVM vectors", {"in_cache_bytes": HUGE}),
    ("tile: pass rows in 128-lane chunks", {"max_vector_row": 128}),
    ("short rows: row loops (no plane copy)", {"plane_copy_short_rows": False}),
    ("sums: lanes added in order", {"halving_lane_sums": False}),
    ("passes: row by row", {"pass_row_tile": 1}),
)


# Per-plane copies up to 32 KB (the largest plane a copy is made for: CpuConfig.plane_copy_bytes)
# on the stack: a thread's stack holds them whatever the platform's default stack size.
STACK_BUFFER_BYTES = 32 * 1024

# The NaN max as plain maxima ORed (schedules/nan_max.py) over vectors of this many bits or more.
NAN_MAX_OR_BITS = 4 * 512


class Pool(cpu.Pool):
    """The shared CPU rule on x86 targets."""

    name = "x86"
    KNOBS = KNOBS
    # Channel-last maxima of every tap read clamped taps and test NaN in ordered pairs
    # (compute.forms.clamped_taps). Paired with the channel-first twin, 3x3 s2 p1 over
    # 1x112x112x64: 1.10-1.15x -> 0.99-1.06x; 1x3x3 s(1,2,2) over 1x16x56x56x64: 0.86-1.04x ->
    # 0.83-0.93x; from memory (batch 8, 1 thread) 1.33x -> 1.23x and 1.44x -> 1.31x.
    CLAMPED_TAPS = True

    def takes(self, target: Target) -> bool:
        return is_x86(target)

    def config(self, target: Target) -> CpuConfig:
        # halving_lane_sums: a global average's 64 partial sums (4 AVX-512 registers) were added
        # up as 64 dependent scalar adds per plane, longer than the plane's 49 vector loads (3136
        # taps). Halving, 1 thread / 2 threads, ms: 8x528x56x56 1.95 -> 1.81 / 1.13 -> 1.03,
        # 8x240x56x56 0.50 -> 0.42 / 0.24 -> 0.20, 8x64x112x112 0.52 -> 0.44 / 0.25 -> 0.24;
        # 7x7 planes unchanged.
        # nan_max_or_bits: the NaN max as two MAXPS ORed over vectors of 4 AVX-512 registers or
        # more. Same PrimFunc, interleaved A/B, 1 thread, ms, select -> OR over all vectors / over
        # these: 8x96x109x109 3x3 s2 ceil 3.11 -> 2.07 / 2.26 (its first pass's rows are 109
        # lanes), 8x64x111x111 1.76 -> 1.52 / 1.44, 8x192x71x71 1.72 -> 1.67 / 1.60; over
        # one-register rows the select is faster: 1x480x14x14 3x3 s1 0.029 -> 0.037 / 0.029.
        return CpuConfig("x86", vector_bits=x86_vector_bits(target), num_threads=target_threads(target),
                         plane_copy_short_rows=True, stack_buffer_bytes=STACK_BUFFER_BYTES, halving_lane_sums=True,
                         nan_max_or_bits=NAN_MAX_OR_BITS, pass_row_tile=2)
