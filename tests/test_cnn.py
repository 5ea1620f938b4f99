"""Whole CNNs with pooling compile through tvm_pool and match onnxruntime."""

from __future__ import annotations

import numpy as np
import pytest

from cnn_models import MODELS
from oracles import run_onnxruntime, run_tvm_pool


@pytest.mark.parametrize("name", sorted(MODELS))
@pytest.mark.parametrize("batch", [1, 3])
def test_cnn_matches_onnxruntime(name, batch):
    model = MODELS[name](batch=batch)
    shape = [d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim]
    x = np.random.default_rng(batch).standard_normal(shape).astype("float32")
    ours = run_tvm_pool(model, {"X": x})
    want = run_onnxruntime(model, {"X": x})
    assert len(ours) == len(want)
    for got, exp in zip(ours, want):
        assert got.shape == exp.shape
        if exp.dtype.kind in "iu":
            np.testing.assert_array_equal(got, exp)
        else:
            np.testing.assert_allclose(got, exp, rtol=1e-4, atol=1e-4)
