"""How the benchmarks summarise what they measured: a one-line reason for a peer that could not
run, a number as a table cell, the geometric mean of ratios. The CPU (``runner``), CUDA
(``cuda``) and ARM (``arm_instructions``) benchmarks all print through these, so their reports
read alike and none of them has to import another's internals.
"""

from __future__ import annotations

import math


def short_reason(err: BaseException) -> str:
    """The last non-empty line of ``err`` (at most 160 characters), or its class name: TVM's
    errors carry the C++ traceback first and the message last, and a report cell has room for
    one line."""
    text = str(err).strip().splitlines()
    line = next((t for t in reversed(text) if t.strip()), type(err).__name__)
    return line.strip()[:160]


def fmt(value, unit: str, digits: int = 2) -> str:
    """``value`` with ``digits`` decimals and ``unit`` appended, or "-" where there is none (a
    ratio whose peer did not run)."""
    return "-" if value is None else f"{value:.{digits}f}{unit}"


def geomean(values) -> float | None:
    """Geometric mean of the positive ``values``, None when there are none: speedups are
    ratios, and one workload twice as fast must weigh as much as one twice as slow."""
    values = [v for v in values if v]
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else None
