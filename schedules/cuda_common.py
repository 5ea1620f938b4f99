"""What every part of the CUDA schedule shares: the binding hooks (where the real schedule and
its CPU simulation differ), the scheduled unit, and one thread per output over fused loops."""

from __future__ import annotations

from dataclasses import dataclass

from tvm import s_tir

from . import analysis
from .cuda_config import CudaConfig

# --------------------------------------------------------------------------------------------
# Binding hooks: the real schedule and its CPU simulation differ only here.
# --------------------------------------------------------------------------------------------


class Binder:
    """Binds loops to GPU threads and sets storage scopes (the real schedule)."""

    simulate = False

    def __init__(self, sch: s_tir.Schedule):
        self.sch = sch
        self._bound = []  # srefs of the loops bound (or, simulated, that would be)

    def bind(self, loop, tag: str) -> None:
        self._bound.append(self.sch.get_sref(loop))
        self.sch.bind(loop, tag)

    def is_bound(self, block) -> bool:
        """Whether ``block`` sits under a loop this binder bound (its kernel is placed)."""
        for loop in self.sch.get_loops(block):
            sref = self.sch.get_sref(loop)
            if any(sref.same_as(b) for b in self._bound):
                return True
        return False

    def scope(self, block, index: int, scope: str) -> None:
        self.sch.set_scope(block, index, scope)


class SerialBinder(Binder):
    """The CPU simulation: bound loops stay serial loops, staged buffers stay global (and are
    still compacted to the per-block region by TVM's CompactBufferAllocation)."""

    simulate = True

    def bind(self, loop, tag: str) -> None:
        self._bound.append(self.sch.get_sref(loop))

    def scope(self, block, index: int, scope: str) -> None:
        pass


@dataclass
class Unit:
    """One pooling reduction as scheduled: the block that writes its result, and the loops
    consumers attach to (the per-output thread loop) and kernels are launched on."""

    final: object  # SBlockRV
    thread_loop: object  # LoopRV: the per-output thread loop
    attached: frozenset = frozenset()  # names of the blocks attached to it (write-backs, consumers)


# --------------------------------------------------------------------------------------------
# Small facts about blocks
# --------------------------------------------------------------------------------------------


def name(sch, rv) -> str:
    return sch.get(rv).name_hint


def written(block) -> list:
    return [analysis.region_buffer(w) for w in block.writes]


def consumer_names(sch, rv) -> set:
    return {name(sch, c) for c in sch.get_consumers(rv)}


def pooled_axes(block, n_spatial: int, rank: int) -> list[int]:
    """Positions, among ``block``'s ``n_spatial`` data-parallel iterators, of the ``rank``
    pooled spatial axes: the last ones channel-first, the ones before C channel-last."""
    end = n_spatial - 1 if analysis.is_channel_last(block) else n_spatial
    return list(range(end - rank, end))


def localize(sch, rv, binder: Binder) -> None:
    """Every buffer ``rv`` writes that is not a function parameter lives in registers."""
    params = analysis.function_params(sch)
    for i, buf in enumerate(written(sch.get(rv))):
        if not any(buf.same_as(p) for p in params):
            binder.scope(rv, i, "local")


# --------------------------------------------------------------------------------------------
# One thread per output
# --------------------------------------------------------------------------------------------


def largest_divisor_at_most(n: int, cap: int) -> int:
    for d in range(max(1, min(n, cap)), 0, -1):
        if n % d == 0:
            return d
    return 1


def _round_up(value: int, multiple: int) -> int:
    return (value + multiple - 1) // multiple * multiple


def block_threads(config: CudaConfig, outputs: int | None, per_thread: int = 1) -> int:
    """Threads per block for ``outputs`` elements, ``per_thread`` each: up to
    ``config.max_threads``, a multiple of the warp size."""
    limit = config.max_threads
    if outputs is None:
        return limit
    return max(config.warp_size, min(limit, _round_up(-(-outputs // per_thread), config.warp_size)))


def outputs_per_thread(config: CudaConfig, total: int | None) -> int:
    """Two outputs per thread on large outputs (so no more threads than outputs are launched
    even where a tile's tail leaves some idle); one on small ones (more blocks to spread)."""
    return 2 if total is not None and total >= config.min_outputs_two_per_thread else 1


def bind_spatial(sch, block, spatial, reduce_loops, config: CudaConfig, binder: Binder):
    """Fuse the static spatial loops (symbolic ones move inside, serial), one thread each."""
    static = [l for l in spatial if analysis.loop_extent(sch, l) is not None]
    symbolic = [l for l in spatial if analysis.loop_extent(sch, l) is None]
    if not static:
        if symbolic:
            raise ValueError("no static output loop to bind")
        static = [sch.add_unit_loop(block)]
    if symbolic:
        sch.reorder(*static, *symbolic, *reduce_loops)
    fused = sch.fuse(*static) if len(static) > 1 else static[0]
    total = analysis.loop_extent(sch, fused)
    per_thread = outputs_per_thread(config, total) if not symbolic else 1
    threads = block_threads(config, total, per_thread)
    if per_thread > 1:
        bx, _, tx = sch.split(fused, [None, per_thread, threads])
    else:
        bx, tx = sch.split(fused, [None, threads])
    binder.bind(bx, "blockIdx.x")
    binder.bind(tx, "threadIdx.x")
    return tx
