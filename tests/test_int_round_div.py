"""common.int_round_div: integer averages rounded half away from zero (TFLite, TensorRT,
OpenVINO), estimated in float32 and corrected in integers for int32 sums. Checked against exact
integer arithmetic on every half, on both sides of every half, and on random sums up to the
largest a 16-bit input can make."""

import numpy as np
import pytest
import tvm
from tvm import te

from tvm_pool.compute.common import int_round_div


def _exact(total: np.ndarray, count: np.ndarray) -> np.ndarray:
    mag = (2 * np.abs(total) + count) // (2 * count)
    return np.where(total < 0, -mag, mag)


def _compiled(acc: str):
    n = te.var("n")
    total = te.placeholder((n,), acc, name="total")
    count = te.placeholder((n,), acc, name="count")
    out = te.compute((n,), lambda i: int_round_div(total[i], count[i], acc), name="q")
    return tvm.compile(te.create_prim_func([total, count, out]), target="llvm")


def _cases(rng, acc: str):
    counts = np.arange(1, 1025, dtype=np.int64)
    # every half (q + 1/2) * c for even c, and the integers next to each half
    q = rng.integers(-65536, 65537, size=counts.size)
    halves = (2 * q + 1) * counts // 2
    near = np.concatenate([halves - 1, halves, halves + 1])
    c_near = np.tile(counts, 3)
    # random sums: the average of up to 1024 16-bit values
    c_rand = rng.integers(1, 1025, size=200_000)
    t_rand = rng.integers(-32768, 65536, size=c_rand.size) * c_rand + rng.integers(-1024, 1025, size=c_rand.size)
    total = np.concatenate([near, t_rand, [0, 1, -1, 3, -3]])
    count = np.concatenate([c_near, c_rand, [1, 2, 2, 2, 2]])
    return total.astype(acc), count.astype(acc)


@pytest.mark.parametrize("acc", ["int32", "int64"])
def test_int_round_div_is_exact(acc):
    rng = np.random.default_rng(20)
    total, count = _cases(rng, acc)
    f = _compiled(acc)
    out = tvm.runtime.tensor(np.zeros_like(total))
    f(tvm.runtime.tensor(total), tvm.runtime.tensor(count), out)
    np.testing.assert_array_equal(out.numpy(), _exact(total.astype(np.int64), count.astype(np.int64)))


@pytest.mark.parametrize("count", [1, 2, 3, 4, 6, 9, 49])
def test_int_round_div_by_a_constant_is_exact(count):
    """A constant count (an interior window) lets TVM's simplifier see the divisor: it once
    took the float quotient for an exact integer one and folded the correction away, rounding
    -1.5 to -3."""
    total = np.arange(-70_000, 70_001, dtype="int32")
    t = te.placeholder(total.shape, "int32", name="total")
    out = te.compute(total.shape, lambda i: int_round_div(t[i], tvm.tirx.const(count, "int32"), "int32"), name="q")
    f = tvm.compile(te.create_prim_func([t, out]), target="llvm")
    got = tvm.runtime.tensor(np.zeros_like(total))
    f(tvm.runtime.tensor(total), got)
    np.testing.assert_array_equal(got.numpy(), _exact(total.astype(np.int64), np.int64(count)))
