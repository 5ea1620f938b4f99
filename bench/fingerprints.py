"""Structural fingerprints of the PrimFuncs tvm_pool generates and schedules, for proving a
refactor behaviour-preserving: ``python -m tvm_pool.bench.fingerprints OUT.json`` before the
change, again after, then ``--compare BEFORE.json AFTER.json``.

For every benchmark workload (:func:`.workloads.workloads`) and a few more shapes that reach the
forms the benchmark does not (window reductions with padding, indices, Lp, dilation, fp16
averages, ...), and for x86 (AVX2, AVX-512, two cores), aarch64 (one and four cores) and CUDA:
the structural hash of each fused PrimFunc as generated, as the target's rule schedules it, and
of each point of its tuning design space (``pool_candidates``; CPU targets).
"""

from __future__ import annotations

import argparse
import json
import sys

TARGETS = {
    "x86": "x86",
    "avx512": {"kind": "llvm", "mtriple": "x86_64-linux-gnu", "mcpu": "skylake-avx512", "num-cores": 2},
    "x86_2": {"kind": "llvm", "mtriple": "x86_64-linux-gnu", "mcpu": "znver4", "num-cores": 2},
    "arm": "arm",
    "arm_4": {"kind": "llvm", "mtriple": "aarch64-linux-gnu", "mcpu": "cortex-a72", "mattr": ["+neon"], "num-cores": 4},
    "cuda": "cuda",
}


def extra_workloads() -> list:
    from .workloads import Workload as W  # pylint: disable=import-outside-toplevel

    pads1 = [1, 1, 1, 1]
    return [
        W("x_dil", "", "MaxPool", [1, 8, 20, 20], dict(kernel_shape=[3, 3], strides=[1, 1], dilations=[2, 2], pads=[2, 2, 2, 2])),
        W("x_avg_incl", "", "AveragePool", [1, 16, 30, 30], dict(kernel_shape=[3, 3], strides=[2, 2], pads=pads1, count_include_pad=1)),
        W("x_avg_ceil", "", "AveragePool", [2, 8, 17, 17], dict(kernel_shape=[3, 3], strides=[2, 2], pads=pads1, ceil_mode=1)),
        W("x_lp", "", "LpPool", [1, 8, 16, 16], dict(kernel_shape=[3, 3], strides=[2, 2], pads=pads1, p=2)),
        W("x_idx_small", "", "MaxPool", [1, 4, 9, 9], dict(kernel_shape=[3, 3], strides=[2, 2], pads=pads1), indices=True),
        W("x_idx_3d", "", "MaxPool", [1, 4, 6, 10, 10], dict(kernel_shape=[2, 2, 2], strides=[2, 2, 2]), indices=True),
        W("x_max_pad_nonsep", "", "MaxPool", [1, 32, 40, 40], dict(kernel_shape=[2, 2], strides=[2, 2], pads=pads1)),
        W("x_avg_pad_2x2", "", "AveragePool", [1, 32, 40, 40], dict(kernel_shape=[2, 2], strides=[2, 2], pads=pads1)),
        W("x_int8_pad", "", "MaxPool", [1, 64, 56, 56], dict(kernel_shape=[2, 2], strides=[2, 2], pads=[0, 0, 1, 1]), dtype="int8"),
        W("x_fp16_avg", "", "AveragePool", [1, 32, 28, 28], dict(kernel_shape=[3, 3], strides=[1, 1], pads=pads1), dtype="float16"),
        W("x_1d_pad", "", "AveragePool", [1, 16, 300], dict(kernel_shape=[5], strides=[3], pads=[2, 2])),
        W("x_gmax_small", "", "GlobalMaxPool", [1, 32, 5, 5]),
        W("x_gavg_1d", "", "GlobalAveragePool", [1, 32, 100]),
        W("x_big_win", "", "MaxPool", [1, 8, 64, 64], dict(kernel_shape=[9, 9], strides=[4, 4], pads=[4, 4, 4, 4])),
        W("x_fused_avg", "", "AveragePool", [1, 32, 28, 28], dict(kernel_shape=[3, 3], strides=[2, 2], pads=pads1), fused=True),
        W("x_fused_2x2", "", "MaxPool", [1, 16, 30, 30], dict(kernel_shape=[2, 2], strides=[2, 2], pads=[0, 0, 1, 1]), fused=True),
        W("x_tiny", "", "MaxPool", [1, 1, 3, 3], dict(kernel_shape=[3, 3], strides=[1, 1])),
    ]


def _hash(node) -> str:
    import tvm_ffi  # pylint: disable=import-outside-toplevel

    return "%016x" % (tvm_ffi.structural_hash(node) & ((1 << 64) - 1))


def _target_entries(mod, target, cpu: bool) -> dict:
    """{function name: its hashes} for one workload's Relax module on one target."""
    # pylint: disable=import-outside-toplevel
    import tvm

    from tvm_pool import lowering
    from tvm_pool.schedules import meta_schedule, schedule_pass

    fused = lowering.fuse(mod, target)
    generated = {gv.name_hint: f for gv, f in fused.functions_items() if isinstance(f, tvm.tirx.PrimFunc)}
    entries = {name: {"generated": _hash(f)} for name, f in generated.items()}  # before the pass mutates
    with target:
        scheduled = schedule_pass(target)(fused)
    for gv, func in scheduled.functions_items():
        if gv.name_hint in entries:
            entries[gv.name_hint]["scheduled"] = _hash(func)
            if cpu:
                points = meta_schedule.pool_candidates(tvm.IRModule({"main": generated[gv.name_hint]}), target)
                entries[gv.name_hint]["candidates"] = [(label, _hash(sch.mod)) for label, sch in points]
    return entries


def fingerprints() -> dict:
    # pylint: disable=import-outside-toplevel
    import tvm_pool
    from tvm_pool.targets import resolve_target

    from .workloads import build_model, workloads

    out = {}
    for w in workloads(quick=False) + extra_workloads():
        mod = tvm_pool.from_onnx(build_model(w))
        for name, spec in TARGETS.items():
            target = resolve_target(spec)
            for func, entry in _target_entries(mod, target, target.kind.name == "llvm").items():
                out[f"{w.name}/{name}/{func}"] = entry
        print(w.name, file=sys.stderr, flush=True)
    return out


def compare(before: dict, after: dict) -> list[str]:
    """One line per field that differs (or a key only one side has)."""
    lines = []
    for key in sorted(set(before) | set(after)):
        a, b = before.get(key), after.get(key)
        if a is None or b is None:
            lines.append(f"{key}: only {'after' if a is None else 'before'}")
            continue
        lines += [f"{key}: {field} differs" for field in ("generated", "scheduled", "candidates") if a.get(field) != b.get(field)]
    return lines


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tvm_pool.bench.fingerprints", description=__doc__.split("\n\n")[0])
    parser.add_argument("out", nargs="?", help="write the fingerprints here (JSON)")
    parser.add_argument("--compare", nargs=2, metavar=("BEFORE", "AFTER"), help="compare two fingerprint files")
    args = parser.parse_args(argv)
    if args.compare:
        with open(args.compare[0], encoding="utf-8") as f, open(args.compare[1], encoding="utf-8") as g:
            lines = compare(json.load(f), json.load(g))
        print("\n".join(lines) if lines else "identical")
        return 1 if lines else 0
    if not args.out:
        parser.error("give OUT.json, or --compare BEFORE AFTER")
    with open(args.out, "w", encoding="utf-8") as f:
        json.dump(fingerprints(), f, indent=1, sort_keys=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
