"""Produce the tuning logs shipped in tuning_logs/<family>/ (run on the machine they are for).

The shipped database files are gzipped (``database_*.json.gz``: the workloads compress 14x);
every step here works on them decompressed and gzips them again at its end (:func:`plain_log`).

    python -m tvm_pool.bench.tune_shipped --target host --what demo squeezenet pools \
        --trials-demo 64 --trials-squeezenet 300 --budget-squeezenet 1800

Every record comes from tvm_pool.tune measuring on this machine: the demo model, onnx's
light_squeezenet.onnx (conv included), and pooling layers (the benchmark's workloads and the
pooling layers of ResNet, VGG, GoogLeNet/Inception, DenseNet and SqueezeNet; pooling tasks are
searched exhaustively, so these need no trial budget).
"""

from __future__ import annotations

import argparse
import contextlib
import gzip
import json
import os
import shutil
import time

import onnx
from onnx import TensorProto, helper

import tvm_pool
from tvm_pool import tuning
from tvm_pool.errors import TvmPoolError
from tvm_pool.targets import resolve_target
from tvm_pool.tuning.logs import GZIP_SUFFIX, TVM_ERRORS, cpu_model, expand_gzipped, mean_secs

from .report import RESULTS_DIR
from .workloads import build_model, make_input, workloads

# Pooling layers of common CNNs not already in the benchmark (NCHW, float32, batch 1).
CNN_POOLS = [
    # VGG-16 blocks 2-5: 2x2 s2
    ("vgg_pool2", "MaxPool", [1, 128, 112, 112], dict(kernel_shape=[2, 2], strides=[2, 2])),
    ("vgg_pool3", "MaxPool", [1, 256, 56, 56], dict(kernel_shape=[2, 2], strides=[2, 2])),
    ("vgg_pool4", "MaxPool", [1, 512, 28, 28], dict(kernel_shape=[2, 2], strides=[2, 2])),
    ("vgg_pool5", "MaxPool", [1, 512, 14, 14], dict(kernel_shape=[2, 2], strides=[2, 2])),
    # GoogLeNet: 3x3 s2 ceil between stages, 3x3 s1 p1 inside inception blocks, 7x7 avg head
    ("googlenet_pool2", "MaxPool", [1, 192, 56, 56], dict(kernel_shape=[3, 3], strides=[2, 2], ceil_mode=1)),
    ("googlenet_pool3", "MaxPool", [1, 480, 28, 28], dict(kernel_shape=[3, 3], strides=[2, 2], ceil_mode=1)),
    ("googlenet_pool4", "MaxPool", [1, 832, 14, 14], dict(kernel_shape=[3, 3], strides=[2, 2], ceil_mode=1)),
    ("googlenet_branch4b", "MaxPool", [1, 480, 14, 14], dict(kernel_shape=[3, 3], strides=[1, 1], pads=[1, 1, 1, 1])),
    ("googlenet_head", "AveragePool", [1, 1024, 7, 7], dict(kernel_shape=[7, 7], strides=[1, 1])),
    # DenseNet-121 transitions (2x2 avg s2) and head
    ("densenet_trans2", "AveragePool", [1, 256, 28, 28], dict(kernel_shape=[2, 2], strides=[2, 2])),
    ("densenet_trans3", "AveragePool", [1, 512, 14, 14], dict(kernel_shape=[2, 2], strides=[2, 2])),
    ("densenet_gap", "GlobalAveragePool", [1, 1024, 7, 7], {}),
    # SqueezeNet 1.0/1.1: 3x3 s2 (ceil) max pools, global average of the class maps
    ("squeezenet_pool1", "MaxPool", [1, 96, 111, 111], dict(kernel_shape=[3, 3], strides=[2, 2], ceil_mode=1)),
    ("squeezenet11_pool1", "MaxPool", [1, 64, 111, 111], dict(kernel_shape=[3, 3], strides=[2, 2], ceil_mode=1)),
    ("squeezenet11_pool3", "MaxPool", [1, 128, 55, 55], dict(kernel_shape=[3, 3], strides=[2, 2], ceil_mode=1)),
    ("squeezenet11_pool5", "MaxPool", [1, 256, 27, 27], dict(kernel_shape=[3, 3], strides=[2, 2], ceil_mode=1)),
    ("squeezenet_gap", "GlobalAveragePool", [1, 1000, 13, 13], {}),
]


def _pool_model(name, op, shape, attrs):
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    graph = helper.make_graph([helper.make_node(op, ["x"], ["y"], **attrs)], name, [x], [y])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 22)])
    model = onnx.shape_inference.infer_shapes(model)
    model.ir_version = 10
    return model


@contextlib.contextmanager
def plain_log(log_dir: str):
    """The log's gzipped database files decompressed in place for the duration (MetaSchedule's
    JSONDatabase reads and appends plain files), and gzipped again after, the plain ones removed."""
    names = [os.path.join(log_dir, n) for n in (tuning.WORKLOAD_FILE, tuning.RECORD_FILE)]
    expand_gzipped(log_dir)
    try:
        yield log_dir
    finally:
        for path in names:
            if os.path.exists(path):
                compress(path)


def compress(path: str) -> None:
    """``path`` gzipped to ``path.gz`` (no timestamp in the header: the same log gives the same
    bytes) and removed."""
    with open(path, "rb") as src, open(path + GZIP_SUFFIX, "wb") as raw, \
            gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0, compresslevel=9) as dst:
        shutil.copyfileobj(src, dst)
    os.remove(path)


POOL_SOURCE = "pool:"  # target.json's name for a pooling layer's run: pool:<layer>


def pool_models():
    for w in workloads(quick=False):
        yield w.name, build_model(w)
    for name, op, shape, attrs in CNN_POOLS:
        yield name, _pool_model(name, op, shape, attrs)


def prune_pooling(log_dir: str) -> int:
    """Drop the pooling records from a log (before re-tuning pools: records of one task
    measured in different sessions must not compete). Returns how many were dropped."""
    import shutil  # pylint: disable=import-outside-toplevel
    import tempfile  # pylint: disable=import-outside-toplevel

    from tvm.s_tir import meta_schedule as ms  # pylint: disable=import-outside-toplevel

    names = (tuning.WORKLOAD_FILE, tuning.RECORD_FILE)
    old = ms.database.JSONDatabase(*(os.path.join(log_dir, n) for n in names), allow_missing=False)
    with tempfile.TemporaryDirectory() as tmp:
        new = ms.database.JSONDatabase(*(os.path.join(tmp, n) for n in names), allow_missing=True)
        dropped = 0
        for record in old.get_all_tuning_records():
            if tuning.is_pooling(record.workload.mod):
                dropped += 1
                continue
            workload = new.commit_workload(record.workload.mod)
            new.commit_tuning_record(ms.database.TuningRecord(
                record.trace, workload, record.run_secs, record.target, record.args_info))
        for n in names:
            shutil.copyfile(os.path.join(tmp, n), os.path.join(log_dir, n))
    # target.json lists what the log was tuned from: the pooling runs go with their records
    meta_path = os.path.join(log_dir, tuning.META_FILE)
    if os.path.exists(meta_path):
        with open(meta_path, encoding="utf-8") as fh:
            meta = json.load(fh)
        meta["runs"] = [run for run in meta.get("runs", []) if not str(run.get("model", "")).startswith(POOL_SOURCE)]
        with open(meta_path, "w", encoding="utf-8") as fh:
            json.dump(meta, fh, indent=1)
            fh.write("\n")
    return dropped


def verify_pools(target, log_dir: str, out_dir: str, rounds: int = 15, calls: int = 20) -> list[dict]:
    """Time every benchmark workload with the log's pooling records applied against the
    hand-written schedule, interleaved in one process (median of ``rounds`` x ``calls``), and
    write ``tuned_pools_<family>_<N>threads.{json,md}`` under ``out_dir`` (N: TVM's thread count
    in this process): the check that a tuned pool is never slower than the default."""
    import numpy as np  # pylint: disable=import-outside-toplevel
    import tvm  # pylint: disable=import-outside-toplevel
    from tvm import relax  # pylint: disable=import-outside-toplevel

    rows = []
    for w in workloads(quick=False):
        mod = tvm_pool.from_onnx(build_model(w))
        tuned = tvm_pool.compile(mod, target, tuning_logs=[log_dir], shipped_logs=False)
        applied = [r for _, r in tuning.records_for(mod, target, [log_dir], shipped=False) if r != "none"]
        hand = tvm_pool.compile(mod, target, shipped_logs=False)
        # A second, separately built copy of the hand-written module: two identical modules
        # differ only by noise (code placement, the machine), and that difference is the yardstick
        # a tuned-vs-hand difference is read against.
        hand_again = tvm_pool.compile(mod, target, shipped_logs=False)
        arg = tvm.runtime.tensor(make_input(w))
        runs = {name: relax.VirtualMachine(ex, tvm.cpu())["main"]
                for name, ex in (("hand", hand), ("tuned", tuned), ("hand_again", hand_again))}
        samples = {name: [] for name in runs}
        for _ in range(rounds):
            for name, fn in runs.items():
                fn(arg)
                for _ in range(calls):
                    start = time.perf_counter()
                    fn(arg)
                    samples[name].append(time.perf_counter() - start)
        hand_ms, tuned_ms, again_ms = (float(np.median(samples[n])) * 1e3 for n in ("hand", "tuned", "hand_again"))
        rows.append({"workload": w.name, "hand_ms": hand_ms, "tuned_ms": tuned_ms, "speedup": hand_ms / tuned_ms,
                     "hand_again_ms": again_ms, "same_module_ratio": hand_ms / again_ms,
                     "record": applied[0] if applied else "none"})
        print(f"{w.name}: hand {hand_ms:.4f} ms, tuned {tuned_ms:.4f} ms, hand again {again_ms:.4f} ms "
              f"({rows[-1]['record']})", flush=True)
    threads = tuning.runtime_threads()
    stem = os.path.join(out_dir, f"tuned_pools_{tuning.target_family(target)}_{threads}threads")
    os.makedirs(out_dir, exist_ok=True)
    with open(stem + ".json", "w", encoding="utf-8") as fh:
        json.dump({"target": str(target), "log_dir": log_dir, "threads": threads, "rows": rows}, fh, indent=1)
    speedups = [r["speedup"] for r in rows]
    noise = max(abs(np.log(r["same_module_ratio"])) for r in rows)
    geomean = float(np.exp(np.mean(np.log(speedups))))
    lines = [f"# Tuned pooling records vs the hand-written schedule ({tuning.target_family(target)}, "
             f"{threads} TVM threads)", "",
             f"median of {rounds} x {calls} calls each, interleaved; speedup = hand / tuned; "
             f"geometric mean {geomean:.2f}x, lowest {min(speedups):.2f}x "
             f"({rows[speedups.index(min(speedups))]['workload']}). Noise: the same hand-written module "
             f"built twice timed up to {np.exp(noise):.2f}x apart (\"same module\" = hand / hand again).", "",
             "| workload | hand-written ms | tuned ms | speedup | same module | record |", "|---|---|---|---|---|---|"]
    lines += [f"| {r['workload']} | {r['hand_ms']:.4f} | {r['tuned_ms']:.4f} | {r['speedup']:.2f}x | "
              f"{r['same_module_ratio']:.2f}x | {r['record']} |" for r in rows]
    with open(stem + ".md", "w", encoding="utf-8") as fh:
        fh.write("\n".join(lines) + "\n")
    return rows


def merge_search_records(src: str, dst: str, source: str, cpu: str | None = None) -> int:
    """Add the best record of every non-pooling workload of the log ``src`` (a model tuned on
    this machine with ``tvm-pool tune``) to the shipped log ``dst``, and ``src``'s runs to
    ``dst``'s ``target.json`` under ``source``. Only records measured on the CPU model ``cpu``
    (this machine's by default) are taken: ``src`` may be a copy of the shipped log, tuned further
    on another CPU, whose copied records would otherwise come back as new ones. Pooling records
    stay out: the shipped log's pooling records go with its rules stamp
    (``tuning.logs.rules_stamp``), which this does not touch. Records and runs ``src`` copied
    from ``dst`` (a copy of the shipped log tuned further on this CPU) are not added again.
    Returns how many records were added."""
    import tvm_ffi  # pylint: disable=import-outside-toplevel
    from tvm.s_tir import meta_schedule as ms  # pylint: disable=import-outside-toplevel

    names = (tuning.WORKLOAD_FILE, tuning.RECORD_FILE)
    old = ms.database.JSONDatabase(*(os.path.join(src, n) for n in names), allow_missing=False)
    new = ms.database.JSONDatabase(*(os.path.join(dst, n) for n in names), allow_missing=False)
    cpu = cpu_model("host") if cpu is None else cpu
    shipped = {_record_key(record) for record in new.get_all_tuning_records()}
    best = {}  # per workload (its module's structural hash): (mean seconds, record)
    for record in old.get_all_tuning_records():
        if tuning.is_pooling(record.workload.mod) or not record.run_secs or cpu_model(record.target) != cpu:
            continue
        if _record_key(record) in shipped:
            continue  # a record of this CPU that src copied from dst
        secs = mean_secs(record.run_secs)
        key = tvm_ffi.structural_hash(record.workload.mod)
        if key not in best or secs < best[key][0]:
            best[key] = (secs, record)
    for _, record in best.values():
        target = new.commit_workload(record.workload.mod)
        new.commit_tuning_record(ms.database.TuningRecord(
            record.trace, target, record.run_secs, record.target, record.args_info))
    added = len(best)
    with open(os.path.join(src, tuning.META_FILE), encoding="utf-8") as fh:
        runs = json.load(fh).get("runs", [])
    meta_path = os.path.join(dst, tuning.META_FILE)
    with open(meta_path, encoding="utf-8") as fh:
        meta = json.load(fh)
    kept = meta.setdefault("runs", [])
    kept.extend(dict(run, model=source, records_kept=added) for run in runs if run not in kept)  # src's own runs
    with open(meta_path, "w", encoding="utf-8") as fh:
        json.dump(meta, fh, indent=1)
        fh.write("\n")
    return added


def _record_key(record) -> tuple:
    """What makes two records the same: workload, schedule and the CPU model measured on."""
    import tvm_ffi  # pylint: disable=import-outside-toplevel

    return (tvm_ffi.structural_hash(record.workload.mod), str(record.trace.as_json()), cpu_model(record.target))


def squeezenet_path() -> str:
    return os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", "light", "light_squeezenet.onnx")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--target", default="host")
    parser.add_argument("--log-dir", help="default: tuning_logs/<family> of the target")
    parser.add_argument("--what", nargs="+", default=["demo", "squeezenet", "pools"],
                        help="demo, squeezenet, pools (tune), verify (tuned pools vs hand-written, timed)")
    parser.add_argument("--trials-demo", type=int, default=64)
    parser.add_argument("--trials-squeezenet", type=int, default=300)
    parser.add_argument("--budget-squeezenet", type=float, default=None, help="seconds")
    parser.add_argument("--merge", nargs=2, metavar=("LOG", "SOURCE"),
                        help="add the best non-pooling record per workload of LOG (a model tuned here) to the shipped "
                             "log, its runs named SOURCE in target.json")
    args = parser.parse_args(argv)
    target = resolve_target(args.target)
    log_dir = args.log_dir or os.path.join("tuning_logs", tuning.target_family(target))
    with plain_log(log_dir):
        if args.merge:
            print(f"added {merge_search_records(args.merge[0], log_dir, args.merge[1])} records to {log_dir}")
            return 0
        _produce(args, target, log_dir)
    return 0


def _produce(args, target, log_dir: str) -> None:
    """The steps of ``--what`` on the (decompressed) shipped log."""
    try:  # pylint: disable=import-outside-toplevel
        from tvm_pool.demo_model import demo_model
    except ImportError:  # the CLI as a package
        from tvm_pool.cli.demo import demo_model

    for what in args.what:
        start = time.time()
        if what == "demo":
            model, _ = demo_model()
            tvm_pool.tune(tvm_pool.from_onnx(model), target, trials=args.trials_demo, log_dir=log_dir, source="demo")
        elif what == "squeezenet":
            mod = tvm_pool.from_onnx(onnx.load(squeezenet_path()))
            tvm_pool.tune(mod, target, trials=args.trials_squeezenet, log_dir=log_dir, source="light_squeezenet.onnx",
                          time_budget_s=args.budget_squeezenet)
        elif what == "pools":
            print(f"dropped {prune_pooling(log_dir)} old pooling records", flush=True)
            for name, model in pool_models():
                try:
                    tvm_pool.tune(tvm_pool.from_onnx(model), target, trials=0, log_dir=log_dir, source=f"{POOL_SOURCE}{name}")
                except (TvmPoolError, OSError, *TVM_ERRORS) as err:  # a layer TVM cannot tune: the others go on
                    print(f"{name}: skipped ({type(err).__name__}: {str(err).splitlines()[0][:200]})", flush=True)
        elif what == "verify":
            verify_pools(target, log_dir, RESULTS_DIR)
        print(f"== {what} for {tuning.target_family(target)}: {time.time() - start:.0f} s", flush=True)


if __name__ == "__main__":
    raise SystemExit(main())
