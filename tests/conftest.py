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


@pytest.fixture(scope="session")
def host():
    """This machine's CPU as a target. Run tests build for it and no other CPU name: a fixed
    mcpu (znver5) can emit instructions the host lacks (SIGILL)."""
    return host_target()


@pytest.fixture
def rng(request) -> np.random.Generator:
    """A generator seeded from the test's id: each test its own data, the same on every run."""
    return np.random.default_rng(zlib.crc32(request.node.nodeid.encode()))


@pytest.fixture(autouse=True)
def _garbage_collected_before_captured_output(request):
    """Tests that read what they printed (capsys, capfd) start with earlier tests' garbage
    collected: TVM warns ("BlockBuilder destroyed with remaining blocks!") when it collects a
    builder that an importer left open on an error, and that line must not land in another
    test's captured output (seen once in test_cli_torch's progress lines)."""
    if {"capsys", "capfd"} & set(request.fixturenames):
        gc.collect()


@pytest.fixture
def no_settle(monkeypatch):
    """The benchmark's pause between peers and its timed warm-up of each turn are for real
    measurements; tests of the benchmark do not need them (a turn's warm-up is then its
    WARMUP_CALLS calls)."""
    from tvm_pool.bench import timing  # pylint: disable=import-outside-toplevel

    monkeypatch.setattr(timing, "settle", lambda: None)
    monkeypatch.setattr(timing, "WARMUP_S", 0.0)
