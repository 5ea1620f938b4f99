"""bench/fingerprints.py: the structural check that a refactor keeps every schedule."""

from __future__ import annotations

import tvm_pool
from tvm_pool.bench import fingerprints
from tvm_pool.bench.workloads import Workload, build_model
from tvm_pool.targets import resolve_target


def test_entries_hash_generated_scheduled_and_candidates():
    w = Workload("w", "", "MaxPool", [1, 8, 20, 20], dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]))
    mod = tvm_pool.from_onnx(build_model(w))
    first = fingerprints._target_entries(mod, resolve_target("x86"), cpu=True)  # pylint: disable=protected-access
    again = fingerprints._target_entries(mod, resolve_target("x86"), cpu=True)  # pylint: disable=protected-access
    ((name, entry),) = first.items()
    assert "max_pool" in name and entry == again[name]  # deterministic
    assert entry["generated"] != entry["scheduled"]
    assert entry["candidates"][0][0].startswith("hand-written") and len(entry["candidates"]) > 1


def test_compare_names_each_difference():
    before = {"a/x86/f": {"generated": "1", "scheduled": "2"}, "b/x86/f": {"generated": "3", "scheduled": "4"}}
    after = {"a/x86/f": {"generated": "1", "scheduled": "9"}, "c/x86/f": {"generated": "3", "scheduled": "4"}}
    assert fingerprints.compare(before, after) == [
        "a/x86/f: scheduled differs", "b/x86/f: only before", "c/x86/f: only after"]
    assert fingerprints.compare(before, before) == []
