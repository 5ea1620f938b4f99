"""The operation floor of an ARM benchmark row: the fewest 128-bit NEON instructions the form
tvm_pool computes a workload in needs, next to the bytes/16 bound (``bench/arm_instructions.py``).

The bytes/16 bound counts only the loads and stores of the data a call must move. The floor
adds what the form must compute and what it must keep between its passes, so that every gap is
either the form's (the floor is high) or the schedule's (the count is high above the floor).
Counted per call:

- **loads**: every input byte once, 32 bytes an instruction (LDP of two registers, or LD2 of two
  de-interleaved ones for strided taps; a tap read twice is the schedule's), plus each
  intermediate a pass leaves for the next (below);
- **stores**: every output byte once, 32 bytes an instruction (STP; Indices: its int64 indices
  too), plus each intermediate;
- **arithmetic** (max, add, compare, select, multiply), one instruction per 16-byte vector of
  ``lanes`` elements of the computed type:
  - a pass over one windowed axis of K taps: ``K - 1`` per vector of its outputs; passes run
    outermost axis first over the extents the later passes read (``(out - 1) * stride +
    kernel``), and every pass but the last stores its outputs, which the next loads (the
    separable form: overlapping windows, one windowed axis, or three windowed axes); along the
    contiguous axis of a channel-first plane the first ``stride`` taps come from one
    de-interleaving load and each further tap is one more load (unaligned) or EXT per output
    vector (stride 1: ``K - 1``; 3x3 s2: 1);
  - one expression of every tap (non-overlapping windows: 2x2 s2, 3x3 s3, 2x2x2 s2, 1-D k4 s4):
    ``prod(K) - 1`` per output vector, no intermediate;
  - a long stride-1 max (more than 16 taps): the doubling form, ``ceil(log2 K)`` levels of one max
    per vector, each level but the last stored and loaded, and its shifted operand one more load
    (van Herk / Gil-Werman would take 3 per output and two stored rows);
  - a long strided sum of whole strides (block sums): one add per input vector, then ``m - 1``
    per output vector for the m blocks of a window;
  - a global window: one max or add per input vector; channel-first planes end in ``log2(lanes)``
    pairwise adds or maxima per plane (FADDP/FMAXP), channel-last ones need none;
  - an average: one more per output vector (the division by the window's count);
  - float16 without ``+fullfp16``: a max on int16 order keys, 3 per input and per output vector
    (shift, and, xor: the key and back), 8 lanes; int8/uint8: 16 lanes;
  - a ReLU before the pool: one per input vector; an Add after it: one per output vector and the
    load of its other operand's vector;
  - MaxPool with Indices, as issue 40 designs it: a row pass that keeps (value, column offset) and
    a column pass that keeps the earliest row, each tap after the first a compare, a NaN test and
    two bit-selects (4 per vector of 4 lanes); both passes' values and offsets stored and loaded
    between them; the index assembled at the end (a multiply-add and the two widenings to int64:
    3 per output vector).

- **the call**: 7,000 instructions, what a call of the smallest pool costs (a 2x2 max over
  1x1x4x4, counted the same way: 7.0 k; over 1x8x8x8 7.3 k): the VM's call of ``main``, the
  output's allocation, the argument checks and the parallel launch, which every row pays once.

Not counted: loop control and address arithmetic, the horizontal pass's shuffles beyond LDn
(a stride-2 window's third tap is an EXT of two de-interleaved registers), the padding's edges.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

NEON_BYTES = 16
# Instructions of one call that are not the pool's (see the module docstring).
CALL = 7000
# Bytes one load or store instruction moves: a pair of registers (LDP/STP, LD2/ST2).
PAIR_BYTES = 32
# Taps from which a 1-D stride-1 max takes the doubling form (compute.forms.MAX_PASS_TAPS).
LONG_WINDOW_TAPS = 16
BYTES = {"float32": 4, "float16": 2, "bfloat16": 2, "int8": 1, "uint8": 1, "int16": 2}


@dataclass(frozen=True)
class Floor:
    """The floor of one row, in instructions per call, and the form it was counted for."""

    loads: float
    arithmetic: float
    stores: float
    form: str
    call: float = CALL

    @property
    def total(self) -> float:
        return self.loads + self.arithmetic + self.stores + self.call


def _vectors(elements: float, lanes: int) -> float:
    return elements / lanes


def _geometry(w):
    """(spatial sizes, kernel, strides, pads begin, pads end, output sizes) of workload ``w``."""
    spatial = list(w.shape[2:])
    rank = len(spatial)
    if w.op.startswith("Global"):
        return spatial, spatial, [1] * rank, [0] * rank, [0] * rank, [1] * rank
    a = w.attrs
    kernel, strides = list(a["kernel_shape"]), list(a.get("strides", [1] * rank))
    pads = list(a.get("pads", [0] * 2 * rank))
    begin, end = pads[:rank], pads[rank:]
    rounding = math.ceil if a.get("ceil_mode") else math.floor
    out = [int(rounding((n + b + e - k) / s)) + 1 for n, k, s, b, e in zip(spatial, kernel, strides, begin, end)]
    return spatial, kernel, strides, begin, end, out


def _passes(planes, spatial, kernel, strides, out, lanes, contiguous_last: bool = True):
    """(arithmetic, intermediate elements, shifted tap vectors) of one pass per windowed axis,
    outermost first. A pass along the contiguous (last) axis gets its first ``stride`` taps from
    de-interleaving loads; each further tap is a shifted vector (an unaligned load or an EXT)."""
    extents = [(o - 1) * s + k for o, s, k in zip(out, strides, kernel)]  # what the passes read
    current = list(extents)
    arithmetic, intermediate, shifted = 0.0, 0.0, 0.0
    windowed = [i for i, k in enumerate(kernel) if k > 1]
    for n, axis in enumerate(windowed):
        current[axis] = out[axis]
        produced = planes * float(np.prod(current))
        arithmetic += (kernel[axis] - 1) * _vectors(produced, lanes)
        if contiguous_last and axis == len(kernel) - 1:
            shifted += max(kernel[axis] - strides[axis], 0) * _vectors(produced, lanes)
        if n < len(windowed) - 1:
            intermediate += produced
    return arithmetic, intermediate, shifted


def floor(w, layout: str = "channel_first") -> Floor:
    """The operation floor of workload ``w`` (``bench.workloads.Workload``) in ``layout``."""
    size = BYTES[w.dtype]
    lanes = NEON_BYTES // size if w.dtype != "float16" else 8  # float16: int16 keys without fullfp16
    spatial, kernel, strides, begin, end, out = _geometry(w)
    planes = w.shape[0] * w.shape[1]
    in_elems, out_elems = planes * float(np.prod(spatial)), planes * float(np.prod(out))
    loads, stores = in_elems * size / PAIR_BYTES, out_elems * size / PAIR_BYTES
    windowed = [i for i, k in enumerate(kernel) if k > 1]
    whole = all(k == n for k, n in zip(kernel, spatial)) and not any(begin) and not any(end)
    average = w.op in ("AveragePool", "GlobalAveragePool")
    intermediate = shifted = 0.0
    channel_first = layout == "channel_first"
    if w.indices:
        form = "value and offset passes"
        per_tap, values, shifted = _passes(planes, spatial, kernel, strides, out, lanes, channel_first)
        arithmetic = 4 * per_tap + 3 * _vectors(out_elems, lanes)
        stores += out_elems * 8 / PAIR_BYTES
        intermediate, shifted = 2 * values, 2 * shifted  # the row pass's values and offsets (32-bit both)
    elif whole:
        form = "global"
        arithmetic = _vectors(in_elems, lanes) + (planes * math.log2(lanes) if channel_first else 0)
    elif len(windowed) == 1 and kernel[windowed[0]] > LONG_WINDOW_TAPS and strides[windowed[0]] == 1 and not average:
        form = "doubling"
        levels = math.ceil(math.log2(kernel[windowed[0]]))
        row = planes * (out[windowed[0]] + kernel[windowed[0]] - 1)
        arithmetic, intermediate = levels * _vectors(row, lanes), (levels - 1) * row
        shifted = levels * _vectors(row, lanes) if channel_first else 0.0  # x[j + 2^i]
    elif (len(windowed) == 1 and average and kernel[windowed[0]] > LONG_WINDOW_TAPS
          and kernel[windowed[0]] % strides[windowed[0]] == 0):
        form = "block sums"
        blocks = kernel[windowed[0]] // strides[windowed[0]]
        arithmetic = _vectors(in_elems, lanes) + (blocks - 1) * _vectors(out_elems, lanes)
    elif windowed and all(kernel[i] <= strides[i] for i in windowed):
        form = "all taps"
        arithmetic = (float(np.prod(kernel)) - 1) * _vectors(out_elems, lanes)
    else:
        form = "passes"
        arithmetic, intermediate, shifted = _passes(planes, spatial, kernel, strides, out, lanes, channel_first)
    if average:
        arithmetic += _vectors(out_elems, lanes)
    if w.dtype == "float16":
        arithmetic += 3 * (_vectors(in_elems, lanes) + _vectors(out_elems, lanes))
    if w.fused:
        arithmetic += _vectors(in_elems, lanes) + _vectors(out_elems, lanes)
        loads += out_elems * size / PAIR_BYTES
    loads += intermediate * size / PAIR_BYTES + shifted
    stores += intermediate * size / PAIR_BYTES
    return Floor(loads, arithmetic, stores, form)


# Rows above EXPLAIN_ABOVE times their floor, and why (checked in the generated assembly where it
# says so; "on the list": not analysed yet). By row: a channel-last row's name has its layout suffix.
EXPLAIN_ABOVE = 1.5
GAPS = {
    "maxpool_indices": "the value-and-tap passes (two 32-bit outputs a pass) as designed, plus what the floor leaves out: the "
                       "padded copy turns each float into an int32 key of the same order (about 7 operations a vector), "
                       "and the index is assembled from the tap in a stage of its own (the key back to a value, the tap's "
                       "offsets by shifts and masks, the widening to int64 and its two stores: about 18 instructions per "
                       "4 outputs) instead of in the last pass; on the list",
    "maxpool_int8_56": "47 instructions a 28-wide output row (16 + 12 int8 lanes) where the floor counts about 24: the "
                       "first pass loads its three input rows 16 bytes at a time (12 loads; the floor counts 32 bytes a "
                       "load), its 57-byte row goes through the stack (5 stores, then LD2s, loads and UZP1/UZP2 for the "
                       "second pass), and 4 of loop control (assembly): on the list",
    "maxpool_fp16": "cortex-a72 has no fullfp16, so the padded plane is copied (a widened dtype keeps the copy) as int16 "
                    "order keys: 4 vector operations a key and an address add for each store, about 7 instructions per 8 "
                    "inputs where the floor counts 3 and no copy (assembly); the passes run on the keys at 16 and 8 lanes: "
                    "on the list",
    "longwin_avg1d": "each 32-tap block is 4 LDP and 7 FADD into one 4-lane sum, as the floor counts, then reduced "
                     "to one lane (EXT, FADD, FADDP), stored alone, and the loop's 4: 19 instructions a block where "
                     "the floor counts 12; the windows' stage (two blocks added and divided) runs after the planes, "
                     "serial, about 1.4 an output (assembly); reducing 4 blocks' lanes together (3 FADDP a 4 blocks) is "
                     "on the list",
    "inception_ceil": "within 2% of 1.5x: loop control and address arithmetic, which the floor leaves out",
    "gmp_b32": "within 2% of 1.5x: loop control and address arithmetic, which the floor leaves out",
    "video3d_maxpool_ndhwc": "within 2% of 1.5x: loop control and address arithmetic, which the floor leaves out",
}
GAPS["maxpool_indices_nhwc"] = GAPS["maxpool_indices"]
GAPS["maxpool_fp16_nhwc"] = GAPS["maxpool_fp16"]
