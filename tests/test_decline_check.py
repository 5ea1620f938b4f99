"""The suite's own check (tests/conftest.py): a decline fails a test even where the test
silences warnings."""

from __future__ import annotations

import os
import warnings

import pytest
from tvm import te

from tvm_pool import compute
from tvm_pool.schedules import cpu_passes, decline, x86
from tvm_pool.targets import resolve_target

pytest_plugins = ["pytester"]


def test_a_silenced_decline_still_fails_the_test(pytester, monkeypatch):
    """The conftest fixture, run on a test that silences every warning around a decline."""
    tests = os.path.dirname(__file__)
    monkeypatch.setenv("PYTHONPATH", tests)  # the conftest's helpers
    with open(os.path.join(tests, "conftest.py"), encoding="utf-8") as conftest:
        pytester.makeconftest(conftest.read())
    pytester.makepyfile(test_silenced='''
import warnings
from tvm import te
from tvm_pool import compute
from tvm_pool.schedules import cpu_passes, x86
from tvm_pool.targets import resolve_target


def test_silenced(monkeypatch):
    def broken(*args, **kwargs):
        raise IndexError("out of range")

    monkeypatch.setattr(cpu_passes, "_place_passes", broken)
    x = te.placeholder((1, 4, 9, 9), "float32", name="x")
    func = te.create_prim_func([x, compute.max_pool(x, [3, 3], strides=[2, 2], pads=[1, 1, 1, 1])])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert x86.Pool().apply(func, resolve_target("x86"), False) is None
''')
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-p", "no:xdist", "-o", "addopts=")
    result.assert_outcomes(passed=1, errors=1)
    result.stdout.fnmatch_lines(["*a schedule rule declined a pooling function:*", "*the x86 schedule declined*IndexError: out of range*"])


@pytest.mark.declines
def test_the_marker_lets_a_test_decline_on_purpose(monkeypatch):
    monkeypatch.setattr(cpu_passes, "_place_passes", lambda *a, **k: (_ for _ in ()).throw(IndexError("x")))
    x = te.placeholder((1, 4, 9, 9), "float32", name="x")
    func = te.create_prim_func([x, compute.max_pool(x, [3, 3], strides=[2, 2], pads=[1, 1, 1, 1])])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert x86.Pool().apply(func, resolve_target("x86"), False) is None
    assert [type(w.message) for w in caught] == [decline.ScheduleDeclined]
