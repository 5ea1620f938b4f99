"""What the CUDA schedule knows about a GPU, as data: :class:`CudaConfig`, one frozen value per
target, made by :meth:`.cuda.Pool.config` and passed to every schedule step. A tuning knob is
``dataclasses.replace(config, ...)`` (:meth:`.cuda.Pool.knobs`); nothing module-global is ever
changed."""

from __future__ import annotations

from dataclasses import dataclass

from tvm.target import Target


@dataclass(frozen=True)
class CudaConfig:  # pylint: disable=too-many-instance-attributes
    """Every threshold and target fact the CUDA schedule reads, and the knobs of one attempt.
    ``CudaConfig()`` is a GPU that states no limits; :meth:`for_target` reads a target's."""

    # --- target facts ---
    # The target's limit on threads per block (None: it states none).
    max_threads_per_block: int | None = None
    # Static shared memory per block: the target's, at most the 48 KB every CUDA arch gives
    # without opting in to more.
    shared_limit: int = 48 * 1024
    warp_size: int = 32

    # --- thresholds ---
    # Threads per block: 256 (8 warps) keeps 8 blocks per SM resident on sm_75..sm_90.
    threads: int = 256
    # Window taps up to this many are unrolled (straight-line code).
    max_unrolled_taps: int = 64
    # A window reduction with one output per plane and at least this many taps is a warp reduction.
    global_min_taps: int = 32
    # From this many outputs on, each thread computes two (consecutive threads still take
    # consecutive outputs: thread t of a block computes outputs t and t + blockDim).
    min_outputs_two_per_thread: int = 8192
    # Channel-first separable chains of these spatial ranks take one output per thread at any
    # size; 1-D chains and channel-last ones take two from ``min_outputs_two_per_thread``.
    # Measured on an H100 (bench/cuda_replay.py, µs per call, one against two): 3-D 2x2x2 max
    # 6.0 / 10.7, 3-D 2x2x2 average 5.8 / 8.9, global max 7x7 at batch 32 10.2 / 17.4, the
    # ResNet stem at batch 32 57 / 68, a 3-D 1x3x3 max 11.8 / 13.0; but a 1-D k32 s1 chain
    # 12.2 / 9.6 and an NDHWC 1x3x3 max 10.9 / 10.0.
    one_output_per_thread_ranks: tuple = (2, 3)
    # Widest row tile kept whole (wider rows take warp-wide column tiles).
    max_whole_row: int = 64
    # A thread loads its contiguous input in pieces of this many bytes (ld.global.v4.f32, v8
    # halves, v16 bytes) where every piece's address is provably a multiple of it: see
    # :func:`.cuda_verify.vector_accesses`.
    vector_bytes: int = 16
    # The largest tile scale tried when a staged tile does not fit shared memory (scales double
    # from ``tile_scale``); at this scale a row tile also drops to warp-wide columns.
    max_tile_scale: int = 8
    # Channel-last pools (threads over the contiguous channels, see :mod:`.cuda_channel_last`):
    # channels per CUDA block of a tile (a wider C is split into chunks, preferably dividing it in
    # whole 16-byte pieces), ...
    max_tile_channels: int = 64
    # ... the 16-byte pieces one thread holds at once for a pass whose taps are one expression
    # (more taps load one element at a time) ...
    max_thread_pieces: int = 16
    # ... and a global window reduction's channels per block: one DRAM sector (32 bytes) of
    # channels per tap row, the block's other threads splitting the taps (a cross-thread sum).
    sector_bytes: int = 32
    # ... unless it has at least this many outputs: then a thread per output loops over the taps
    # (consecutive threads on consecutive channels, so each tap is a coalesced row of channels).
    # ResNet-50's head in NHWC at batch 128 (128x7x7x2048, adaptive_avg_pool2d to 1x1) on an H200:
    # 70 us as sectors x tap groups, 14 us a thread per output; PyTorch 16 us, the copy 15 us.
    global_min_outputs_per_thread: int = 1 << 16

    # --- the attempt (the rule's fallbacks move these; a tuning knob sets where they start) ---
    # Earlier separable passes staged in shared memory (else inlined into the last pass).
    staged: bool = True
    # Channel-first chains of overlapping windows (3x3 s2, 1x3x3, ceil mode, Indices' keys,
    # averages, Lp) keep their tiles, one output per thread, each thread computing the earlier
    # passes' values it needs into registers (cuda_passes.in_registers). Measured on an
    # H200 at kernel-bound sizes (us, registers / staged in shared memory / inlined / stock TVM):
    # 3x3 s2 max over 32x64x112x112 41 / 54 / 89 / 41; float16 66 / 94 / 87 / 78; int8 90 / 132 /
    # 90 / 127; 1x3x3 s(1,2,2) over 8x64x16x56x56 57 / 78 / 111 / 42; ceil mode on 111x111 47 /
    # 82 / 61 / 39; 3x3 s1 average 49 / 74 / 49; Relu, max, Add 55 / 61 / 100. Inlining names a
    # NaN-propagating max's operands twice, so each earlier pass is computed twice per level.
    registers: bool = True
    # Divides the rows (then planes) of a separable chain's tile, for shared memory.
    tile_scale: int = 1
    # Global window reductions as a warp per plane (else a thread per plane).
    warp: bool = True
    # 16-byte loads where they are provably aligned (else scalar loads).
    vector: bool = True

    @classmethod
    def for_target(cls, target: Target, **overrides) -> CudaConfig:
        """The config of a CUDA ``target``: its thread and shared-memory limits."""
        limit = target.attrs.get("max_threads_per_block", None) or target.attrs.get("max_num_threads", None)
        shared = target.attrs.get("max_shared_memory_per_block", None)
        facts = {"max_threads_per_block": int(limit) if limit else None}
        if shared:
            facts["shared_limit"] = min(int(shared), cls.shared_limit)
        return cls(**{**facts, **overrides})

    @property
    def max_threads(self) -> int:
        """Threads per block the schedule launches at most: ``threads``, within the target's limit."""
        return min(self.threads, self.max_threads_per_block) if self.max_threads_per_block else self.threads

    @property
    def global_planes_per_block(self) -> int:
        """Planes per block of the warp reduction (one warp each)."""
        return self.max_threads // self.warp_size

    @property
    def tile_scales(self) -> tuple:
        """The tile scales a staged schedule tries, in order (doubling up to ``max_tile_scale``)."""
        scales, scale = [], max(1, self.tile_scale)
        while scale <= self.max_tile_scale:
            scales.append(scale)
            scale *= 2
        return tuple(scales) or (self.tile_scale,)
