"""ONNX's own backend node tests for the pooling family, through from_onnx + compile."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from onnx.backend.test.case.node import collect_testcases

from oracles import run_tvm_pool

POOLING_OPS = {"MaxPool", "AveragePool", "LpPool", "GlobalAveragePool", "GlobalMaxPool", "GlobalLpPool", "MaxUnpool"}


def _pooling_cases():
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        cases = collect_testcases(None)
    return [c for c in cases if any(n.op_type in POOLING_OPS for n in c.model.graph.node)]


CASES = _pooling_cases()


def test_the_pooling_family_is_all_there():
    # 53 cases in onnx 1.23; a new onnx with more cases only grows this list.
    assert len(CASES) >= 53


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_onnx_backend_node_case(case):
    for inputs, expected in case.data_sets:
        names = [i.name for i in case.model.graph.input]
        got = run_tvm_pool(case.model, dict(zip(names, inputs)))
        assert len(got) == len(expected)
        for g, e in zip(got, expected):
            e = np.asarray(e)
            assert g.shape == e.shape
            if e.dtype.kind in "iu":
                np.testing.assert_array_equal(g, e)
            else:
                np.testing.assert_allclose(g.astype(np.float64), e.astype(np.float64), rtol=case.rtol, atol=case.atol)
