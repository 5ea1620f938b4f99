"""Fixtures every test file may take; the helpers they share are in ``helpers/`` and
``oracles.py``, which import as top-level modules (this directory is put on sys.path)."""

import gc
import os
import sys
import zlib

import numpy as np
import pytest

from tvm_pool.targets import host_target

sys.path.insert(0, os.path.dirname(__file__))

from helpers import NO_GPU_REASON, OPTIONAL_PACKAGES, cuda_device_present, has_package  # noqa: E402


class _OptionalPackageModule(pytest.Module):
    """A test file whose import fails because an optional package (torch, tflite, ...: the
    test extra's, :data:`helpers.OPTIONAL_PACKAGES`) is not installed is skipped, naming the
    package, instead of failing collection. Test files say so themselves with a module-level
    ``pytest.importorskip``; this catches one that imports such a package at the top (or through
    a helper module) without it. Any other import error still fails collection."""

    def _getobj(self):
        try:
            return super()._getobj()
        except pytest.Collector.CollectError as err:
            missing = err.__cause__
            root = (getattr(missing, "name", None) or "").split(".")[0]
            if isinstance(missing, ModuleNotFoundError) and root in OPTIONAL_PACKAGES and not has_package(root):
                pytest.skip(f"{self.path.name} needs {root}, not installed: {OPTIONAL_PACKAGES[root]}", allow_module_level=True)
            raise


def pytest_pycollect_makemodule(module_path, parent):
    if module_path.name == "__init__.py":
        return None  # pytest's Package
    return _OptionalPackageModule.from_parent(parent, path=module_path)


def pytest_collection_modifyitems(config, items):
    """A ``gpu``-marked test skips, saying so, where TVM sees no CUDA device (the marker's
    promise in pyproject.toml, kept here for every test that carries it)."""
    gpu_items = [item for item in items if item.get_closest_marker("gpu")]
    if gpu_items and not cuda_device_present():
        for item in gpu_items:
            item.add_marker(pytest.mark.skip(reason=NO_GPU_REASON))


@pytest.fixture(scope="session")
def host():
    """This machine's CPU as a target. Run tests build for it and no other CPU name: a fixed
    mcpu (znver5) can emit instructions the host lacks (SIGILL)."""
    return host_target()


@pytest.fixture
def rng(request) -> np.random.Generator:
    """A generator seeded from the test's id: each test its own data, the same on every run."""
    return np.random.default_rng(zlib.crc32(request.node.nodeid.encode()))


# What TVM's C++ BlockBuilder writes to stderr (fd 2) when it is destroyed with a block still
# open: an importer raised inside `with bb.function()` and did not close it
# (tvm_pool.block_builders.closed_on_error).
BUILDER_LEAK = "BlockBuilder destroyed with remaining blocks!"


@pytest.fixture(scope="module", autouse=True)
def _builders_collected_per_module():
    """Collect garbage when a test file ends, inside its last test's captured teardown: a builder
    that the file's tests left open is destroyed there at the latest, and the check below fails
    that teardown (automatic collection may destroy it earlier, in another of its tests)."""
    yield
    gc.collect()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    """Fail the phase (setup, call, teardown) during which TVM destroyed a BlockBuilder left
    open: its warning is in that phase's captured stderr. (A test that captures fd 2 itself
    with capfd, or a run with -s, bypasses this; tests/test_builder_cleanup.py checks the
    importers' error paths explicitly.)"""
    report = yield
    title = f"Captured stderr {report.when}"
    leaked = sum(content.count(BUILDER_LEAK) for name, content in report.sections if name == title)
    if leaked and not report.failed:
        report.outcome = "failed"
        report.longrepr = (
            f"{leaked} Relax BlockBuilder(s) destroyed with blocks still open during this test's {report.when} "
            f"(TVM: {BUILDER_LEAK!r}): an importer raised inside a builder without closing it "
            "(wrap its entry point in tvm_pool.block_builders.closed_on_error). It was left by this test "
            f"or an earlier one of {item.path.name}: each file's garbage is collected when it ends."
        )
    return report


@pytest.fixture
def no_settle(monkeypatch):
    """The benchmark's pause between peers and its timed warm-up of each turn are for real
    measurements; tests of the benchmark do not need them (a turn's warm-up is then its
    WARMUP_CALLS calls)."""
    from tvm_pool.bench import timing  # pylint: disable=import-outside-toplevel

    monkeypatch.setattr(timing, "settle", lambda: None)
    monkeypatch.setattr(timing, "WARMUP_S", 0.0)


@pytest.fixture(autouse=True)
def _no_schedule_declines(request, monkeypatch):
    """A schedule rule that declines a pooling function (tvm_pool/schedules/decline.py: the
    function keeps TVM's default code, the compile goes on with a warning) fails the test, also
    where the test silences warnings around a compile; pyproject's filterwarnings makes the
    warning an error where it is not silenced. Tests of the decline itself are marked
    ``declines``."""
    if request.node.get_closest_marker("declines"):
        yield
        return
    from tvm_pool.schedules import decline  # pylint: disable=import-outside-toplevel

    declined = []
    warn = decline._warn  # pylint: disable=protected-access

    def recorded(family, func, reason):
        declined.append(f"the {family} schedule declined {decline.function_label(func)}: {reason}")
        warn(family, func, reason)

    monkeypatch.setattr(decline, "_warn", recorded)
    yield
    assert not declined, "a schedule rule declined a pooling function:\n" + "\n".join(declined)
