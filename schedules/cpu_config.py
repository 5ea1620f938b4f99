"""What the CPU schedule knows about a target, as data: :class:`CpuConfig`, one frozen value per
target, made by the family's rule (``x86.Pool.config``, ``arm.Pool.config``) and passed to every
schedule step. A tuning knob is ``dataclasses.replace(config, ...)``; nothing module-global is
ever changed. Also the few steps every CPU schedule shares (lanes of a vector tile, tiles of one
register, the read stride along the output row)."""

from __future__ import annotations

from dataclasses import dataclass

import tvm

from . import analysis

# Levels of a schedule, best first; a level that fails falls back to the next.
FULL, NO_VECTOR, PARALLEL_ONLY = 2, 1, 0

# A threshold no input reaches (a knob that always takes one side of a test).
HUGE = 1 << 62


@dataclass(frozen=True)
class CpuConfig:  # pylint: disable=too-many-instance-attributes
    """Every target fact and threshold the CPU schedule reads. The defaults are the thresholds
    measured on x86 (``bench/``) and aarch64 (``bench/arm_instructions.py``); the family facts
    default to x86's and aarch64 sets its own (``schedules/arm.py``)."""

    family: str
    # Width of a vector register for a dtype's arithmetic; dtypes in ``widened_dtypes`` are
    # computed at twice their size (float16 without +fullfp16 on NEON), so half as many lanes.
    vector_bits: int = 128
    widened_dtypes: frozenset = frozenset()
    # Threads the module runs with (the target's num-cores; 1 when it has none).
    num_threads: int = 1
    # The schedule level tried first (a lower one when it fails).
    level: int = FULL

    # --- family facts ---
    # Are TVM-vectorised strided loads (Ramp with stride > 1) worth it? x86 has gathers (AVX2,
    # AVX-512) that beat LLVM's shuffles while the data is in L1; NEON has none (each lane
    # becomes a scalar load + insert), while LLVM's loop vectoriser uses LD2/LD3/LD4.
    strided_vectors: bool = True
    # Can a vector load skip lanes cheaply (AVX masked loads)? Without (NEON), the padding's
    # bounds checks inlined into a vector row become one scalar load per lane, so every padded
    # plane is copied once instead, whatever its size.
    masked_loads: bool = True
    # Longest pass row TVM vectorises as one vector, in registers (None: max_vector_row lanes).
    # A whole 113-lane row is 29 NEON registers of 32, spilled to the stack around each isnan
    # check; NEON rows are cut into chunks of a few registers, or left to LLVM's vectoriser
    # (which adds a scalar tail) when no chunk divides the row.
    vector_row_registers: int | None = None
    # Are the output rows left to LLVM's vectoriser cut into tiles of one vector register's
    # lanes, a window reduction's consumers (the average's division, ...) computed per tile?
    # LLVM then vectorises each tile whole: no row ends in a scalar tail of its interleaved
    # loop, and the sum stays in a register (NEON, DenseNet's 2x2 s2 average: 3.3 -> 2.7
    # instructions per output). x86 keeps the row loops its benchmark was measured with.
    register_tiles: bool = False
    # Are the consumers computed per row after separable passes (the average's division by its
    # window count, an Add, ...) TVM-vectorised like a pass row? On NEON LLVM leaves the padded
    # average's per-output count arithmetic (int64) scalar: TVM-vectorised, 3x3 s1 p1 average
    # over 64x56x56 went from 5.19 to 4.44 instructions per output. On x86 LLVM's own
    # vectorisation of that row is better: TVM's took 1.6x the time (0.107 vs 0.066 ms).
    vector_consumers: bool = False
    # Are strided vector loads lowered as one contiguous load + shuffle (.strided_loads), which
    # LLVM turns into de-interleaving loads (NEON LD2/LD3/LD4)? Then a strided pass row is
    # TVM-vectorised like a contiguous one, and the padding of a pass chain is inlined into
    # its first pass with its rows split at the padding's edges (no per-plane copy).
    deinterleaving_loads: bool = False
    # Are a long sum's vector partial sums added up as halving vector adds ([0, 2) + [2, 4), then
    # the two lanes) instead of lane by lane? On NEON LLVM extracts and adds each lane in order
    # (6 instructions for 4 lanes); halving took ResNet's 7x7 global average from 33.6 to 31.6
    # instructions per output. The order of the last adds changes (within the tolerances of the
    # partial sums themselves). x86 takes it too (schedules/x86.py).
    halving_lane_sums: bool = False
    # The NaN-propagating float max over vectors of at least this many bits is lowered as two
    # plain maxima ORed bitwise (schedules/nan_max.py) instead of the compute's NaN test per tap
    # and select (0: never). On x86 (MAXPS returns its second operand for a NaN) that needs no
    # mask register: AVX-512 has 7 for the select's tests, and a pass row of several registers
    # spills them. Measured there (see schedules/x86.py).
    nan_max_or_bits: int = 0

    # --- thresholds ---
    # Smaller inputs run on one thread: waking and joining the workers (about 1 us here) costs
    # more than the second thread saves. Measured with TVM's workers unpinned
    # (tvm_pool.thread_pool), 2 threads, znver4, one thread against two: 50 KB inputs 0.0017 vs
    # 0.0023 ms (7x7 global average), 0.0028 vs 0.0030 (3x3 s2 max); 100 KB 0.0083 vs 0.0068
    # (3x3 s1 max), 0.0144 vs 0.0087 (2x2 max); 200 KB global average a tie, 401 KB 0.0059 vs
    # 0.0044. (With the workers pinned, before tvm_pool unpinned them, 401 KB was faster on one
    # thread: 0.0071 vs 0.0104 ms.)
    min_parallel_bytes: int = 96 * 1024
    # Inputs up to this size are treated as cache-resident (the last-level cache is 16-32 MB on
    # current x86 servers; a pooling benchmark or a network layer re-reads warm data).
    in_cache_bytes: int = 16 * 1024 * 1024
    # Padded planes up to this size are copied per plane (L1 is 32-48 KB on current x86 cores).
    # Measured (1 thread): 28x28 3x3 s1 0.059 ms with the copy vs 0.24 ms with the checks
    # inlined, 56x56 3x3 s1 avg 0.039 vs 0.058; 112x112 3x3 s2 (51 KB) 0.118 vs 0.079.
    plane_copy_bytes: int = 32 * 1024
    # Window taps unrolled in a vector-row reduction.
    max_unrolled_taps: int = 64
    # The row schedule leaves the output row to LLVM's vectoriser; with more taps unrolled than
    # this it gathers them (1-D avg k64 s32, 1 thread: 2.9 ms unrolled, 1.3 ms as a loop).
    max_unrolled_row_taps: int = 16
    # Longest innermost pass row vectorised whole; longer rows are split into equal vector chunks.
    max_vector_row: int = 1024
    # Longest row of passes along one axis that TVM vectorises (longer ones are LLVM's).
    max_short_row: int = 64
    # Partial sums per output: one register's lanes, at most 8. Fewer partial sums leave less to
    # add up per output (AVX-512, 1-D avg k64 s32 over 128x16000, 1 thread: 0.27 ms with 8
    # lanes, 0.38 ms with 16). The sums round differently from the compute's in-order loop: a
    # few ulp of the sum, within the tolerances the average tests hold against onnxruntime.
    max_partial_sum_lanes: int = 8
    # The most lanes of one register in TVM-vectorised pass rows and padded-copy pieces
    # (vector_row_lanes). aarch64 takes 16, whole int8 registers: its 3x3 s2 p1 int8 max over
    # 1x64x112x112 went from 0.265 to 0.211 M instructions, over 1x64x56x56 from 0.159 to
    # 0.100 M, with the strided taps' loads ending at their last lane (strided_loads) (8-lane
    # pieces: 0.265 and 0.158); 0.092 M with the 12-lane rest as one piece (cpu_passes._rest_pieces).
    max_row_lanes: int = 8
    # A long sum (a global average over a large plane: at least long_sum_taps taps) keeps
    # whole registers of partial sums, long_sum_registers of them, whose adds overlap: one
    # 8-lane chain was bound by the add's latency (x86 AVX-512, global average at 2 threads,
    # 8 / 16 / 32 lanes: 8x40x112x112 0.41 / 0.22 / 0.215 ms, 1x144x56x56 0.046 / 0.026 /
    # 0.024 ms, 8x512x28x28 0.46 / 0.45 / 0.36 ms).
    long_sum_taps: int = 256
    long_sum_registers: int = 2
    # Planes of at least very_long_sum_taps taps take very_long_sum_registers (x86, AVX-512, 2
    # threads, interleaved with the 2-register schedule: 1x64x112x112 0.047 -> 0.039 ms,
    # 1x240x56x56 0.043 -> 0.037, 8x528x56x56 1.72 -> 1.56; 28x28 planes unchanged with 4 and
    # 0.72x with 8, hence the threshold).
    very_long_sum_taps: int = 2048
    very_long_sum_registers: int = 4
    # Scratch buffers (per-plane copies) of at most this many bytes go on the stack, once per
    # thread, instead of a workspace allocation per plane (schedules/stack_buffers.py); 0: off.
    stack_buffer_bytes: int = 0
    # Are channel-first windows that tile their planes exactly, over output rows shorter than
    # a register, one flat loop per plane over a copy that sets the window's rows apart
    # (schedules/cpu_short_rows.py)? x86: LLVM gathered and scattered across such rows.
    plane_copy_short_rows: bool = False
    # The rest of a row after its whole registers is vectorised too from this many lanes on (a
    # half NEON register: 3x3 s3 max over 96x54x54, rows of 16 + 2 outputs: 5.10 -> 4.43
    # instructions per output; scalar, the 2 took as many instructions as the 16).
    min_rest_lanes: int = 2
    # Rows of an overlapping pass computed together before the last pass reads them, where the
    # last pass reads its rows at unit-stride shifted offsets (3x3 s1 windows); 1: row by row.
    # Row by row, the last pass loads its vectors (one lane on, two lanes on) across the stores
    # the pass made just before, which cannot be forwarded: each such load waits for those stores
    # to reach the cache. Two rows at a time put a row of other work between them. x86 (znver4,
    # 2 threads, interleaved, ms, 1 -> 2 rows): 3x3 s1 p1 average over 1x192x35x35 0.076 ->
    # 0.039 (onnxruntime 0.072), 8x256x35x35 0.78 -> 0.37, 1x768x17x17 0.045 -> 0.037; 14x14,
    # 28x28 and 56x56 planes unchanged (their rows hold more work between); 3 or more rows a
    # tile: LLVM unrolled some of them into shuffles (56x56: 0.029 -> 0.11). Strided last passes
    # (3x3 s2) keep 1: their gathers ran slower with 2 (1x64x112x112: 0.031 -> 0.063).
    pass_row_tile: int = 1
    # Pieces of a padded row's middle (each its own loop after loop_partition). A 3x3 s2 row of
    # 112 is 7; longer rows keep the per-plane copy.
    max_padded_row_pieces: int = 16

    # --- channel-last pools (loops [N, *spatial, C], schedules/cpu_channels.py) ---
    # Measured on x86 at 1 thread (znver3, medians of interleaved runs on a shared machine) and
    # on emulated aarch64 (bench/arm_instructions.py).
    # The vector over C, in chunks of this many registers (a longer C is a loop of chunks).
    # x86 (AVX2), 3x3 s2 p1 max over 1x112x112x64: 0.105 ms with 2 registers, 0.106 with 1,
    # 0.113 with 4, 0.5 with 8 (spilled); 3-D 1x3x3 over 1x16x56x56x64: 1.32 ms with 2, 1.43
    # with 4, 1.52 with 1. NEON takes 4 (schedules/arm.py).
    channel_vector_registers: int = 2
    # A window reduction's accumulators over C: a tile of this many registers, kept in registers
    # while every tap of the window is added in (2x2 s2 average over 1x56x56x128: 0.037 ms with
    # 4, 0.037 with 2, 0.038 with 8, 0.039 with 16; max with indices 3x3 s2 over 1x112x112x64:
    # 1.30 ms with 4, 1.35 with 2, 1.76 with 8).
    channel_tile_registers: int = 4
    # ... and for windows of more taps than max_unrolled_row_taps: wider tiles, fewer passes over
    # the window's rows (7x7 adaptive average over 8x7x7x2048: 0.112 ms with 4 registers, 0.077
    # with 8, 0.074 with 16).
    long_window_tile_registers: int = 16
    # ... or, with long_window_rows_outer, the window read row by row over all of C, tiles of
    # this many registers adding each row's taps into sums kept in L1 (cpu_channels._rows_outer).
    # 7x7 global average over 8x7x7x2048, 2 threads, interleaved with LiteRT and a copy: 0.070
    # -> 0.069 ms (1 register 0.075, 4 0.069, 32 0.078); input flushed from every cache first:
    # 0.143 -> 0.114 ms.
    long_window_rows_outer: bool = True
    long_window_row_registers: int = 4
    # C is split into tiles for the parallel loop when batch x output rows give too few tasks
    # (4 per thread), each tile at least this many registers (8x8 average over 1x8x8x2048: 0.0066
    # ms with 1, 0.0062 with 4, 0.0063 with 16: within the noise).
    min_channel_tile_registers: int = 1
    # A 1-D chain of several passes (doubling levels) runs on tiles of about this many outputs
    # of its axis, in parallel: each tile's levels stay in cache (1-D max k32 s1 p16 over
    # 1x4096x64: 0.150 ms in tiles of 256, 0.166 of 512, 0.167 of 128 or 64, 0.237 in tiles of
    # C over the whole row; channel-first 0.155).
    channel_last_row_tile: int = 256
    # Is the padding of a channel-last chain copied per parallel chunk of rows (else inlined
    # into the first pass: the same bounds check for every lane of the vector over C, the
    # columns cut at the padding's edges)? 3x3 s2 p1 max over 1x112x112x64: 0.113 ms inlined,
    # 0.218 copied (each output row copies the 3 input rows it reads).
    channel_last_pad_copy: bool = False
    # Is a stride-1 column pass (3x3 s1) computed column by column inside each chunk of C,
    # unrolled, so that LLVM loads each column once for the outputs that share it? NEON: 3x3 s1
    # p1 max over 1x28x28x192, 0.49 -> 0.42 M instructions. x86 (3x3 s1 p1 average over
    # 1x28x28x192): 0.063 vs 0.063 ms, no gain, the loops stay as they were measured.
    channel_tap_reuse: bool = False
    # Are the pointwise consumers of a channel-last chain (the average's division, ...) computed
    # inside its last pass (cpu_channels.inline_consumers)? x86, 3x3 s1 p1 average over
    # 1x28x28x192, 2 threads: 0.032 ms per row after the passes, 0.025 ms inside the last pass.
    channel_inline_consumers: bool = True

    def vector_bits_for(self, dtype: str) -> int:
        """The register width for ``dtype``'s arithmetic (half of it for a widened dtype)."""
        return self.vector_bits // 2 if dtype in self.widened_dtypes else self.vector_bits


def target_threads(target) -> int:
    """The threads a module for ``target`` runs with: its num-cores, else 1."""
    cores = target.attrs.get("num-cores", None)
    return int(cores) if cores else 1


def dtype_bits(dtype: str) -> int:
    return tvm.runtime.DataType(dtype).bits


def choose_lanes(extent, dtype_bits: int, vbits: int) -> int:
    """Lanes of the vector tile along an output axis of ``extent``: the widest divisor of the
    extent up to one vector register (so no tail predicate), at least 4; 1 means scalar."""
    if extent is None or extent < 4:
        return 1
    widest = max(vbits // max(dtype_bits, 8), 4)
    for lanes in range(min(widest, extent), 3, -1):
        if extent % lanes == 0:
            return lanes
    return 1


def vector_row_lanes(config: CpuConfig, dtype: str):
    """(most lanes of one TVM-vectorised pass row chunk, lanes of one register) for a family
    with ``vector_row_registers``."""
    lanes = min(max(config.vector_bits_for(dtype) // dtype_bits(dtype), 1), config.max_row_lanes)
    return lanes * (config.vector_row_registers or 1), lanes


def register_tile(sch, loop, config: CpuConfig, dtype: str):
    """The inner loop of ``loop`` cut into tiles of one register's lanes, for families with
    ``register_tiles`` and a row that the lanes divide but LLVM's loop (two registers an
    iteration) would end in a scalar tail; else None. Rows LLVM covers exactly stay as they
    are: tiled, 2x2 s2 max over 224x224 went from 2.3 to 3.3 instructions per output (NEON)."""
    if not config.register_tiles:
        return None
    extent = analysis.loop_extent(sch, loop)
    lanes = choose_lanes(extent, dtype_bits(dtype), config.vector_bits_for(dtype))
    if lanes < 2 or extent % (2 * lanes) == 0:
        return None
    return sch.split(loop, [None, lanes])[1]


def inner_read_stride(sch, block):
    """How far the reads move per step of the innermost output axis, along their innermost
    dimension: the first read that moves (reads that stay put, such as a fused per-channel
    parameter, are skipped; 0 when none moves). None: unknown."""
    info = sch.get(block)
    n_spatial = sum(1 for iv in info.iter_vars if int(iv.iter_type) == 0)
    steps = analysis.moving_reads(info.reads, info.iter_vars[n_spatial - 1].var, dims=[-1])
    return steps[0][0] if steps else 0
