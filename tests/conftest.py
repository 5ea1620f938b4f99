"""Fixtures every test file may take; the helpers they share are in ``helpers/`` and
``oracles.py``, which import as top-level modules (this directory is put on sys.path)."""

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
