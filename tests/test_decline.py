"""A schedule rule that cannot handle a pooling PrimFunc declines it (schedules/decline.py):
the function keeps TVM's default code, the compile goes on, and one warning line names the
family, the function and the reason. The suite turns that warning into an error
(pyproject.toml's filterwarnings); these tests catch it on purpose."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import tvm
from tvm import relax, te, tirx

import tvm_pool
from tvm_pool import compute
from tvm_pool.schedules import ScheduleDeclined, arm, cpu_passes, cuda, x86
from tvm_pool.targets import host_target, resolve_target
from helpers import x86_only

pytestmark = pytest.mark.declines


def _max_pool_module():
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType([1, 4, 9, 9], "float32"))
    with bb.function("main", [x]):
        with bb.dataflow():
            y = bb.emit(relax.op.nn.relu(x))
            out = bb.emit_output(relax.op.nn.max_pool2d(y, pool_size=(3, 3), strides=(2, 2), padding=(1, 1)))
        bb.emit_func_output(out)
    return bb.get()


def _pool_func():
    """A 3x3 s2 p1 max as a PrimFunc with no name (as Relax's fused functions are)."""
    x = te.placeholder((1, 4, 9, 9), "float32", name="x")
    func = te.create_prim_func([x, compute.max_pool(x, [3, 3], strides=[2, 2], pads=[1, 1, 1, 1])])
    return func.without_attr("global_symbol")


def _broken(*_args, **_kwargs):
    raise IndexError("Index out of range. size: 1, got index 2")


def test_the_suite_turns_a_decline_into_an_error(monkeypatch):
    monkeypatch.setattr(cpu_passes, "_place_passes", _broken)
    with pytest.raises(ScheduleDeclined):
        x86.Pool().apply(_pool_func(), resolve_target("x86"), False)


@x86_only
def test_a_rule_bug_leaves_the_function_to_tvm_with_one_warning(monkeypatch):
    """The compile goes on, the output is right, and the warning names the family, the module's
    function and the error, on one line."""
    monkeypatch.setattr(cpu_passes, "_place_passes", _broken)
    with pytest.warns(ScheduleDeclined) as caught:
        ex = tvm_pool.compile(_max_pool_module(), target=host_target())
    assert len(caught) == 1
    message = str(caught[0].message)
    assert "\n" not in message
    assert message.startswith("the x86 schedule declined 'fused_"), message
    assert "keeps TVM's default code: IndexError: Index out of range. size: 1, got index 2" in message, message
    data = np.random.default_rng(0).standard_normal((1, 4, 9, 9)).astype("float32")
    vm = relax.VirtualMachine(ex, tvm.cpu())
    got = vm["main"](tvm.runtime.tensor(data)).numpy()
    want = tvm_pool.compile(_max_pool_module(), target=host_target(), schedule=False)
    np.testing.assert_array_equal(got, relax.VirtualMachine(want, tvm.cpu())["main"](tvm.runtime.tensor(data)).numpy())


def test_every_level_refused_names_the_last_refusal(monkeypatch):
    def refuse(*_args, **_kwargs):
        raise ValueError("TVM refused this step")

    monkeypatch.setattr(cpu_passes, "_place_passes", refuse)
    with pytest.warns(ScheduleDeclined) as caught:
        assert arm.Pool().apply(_pool_func(), resolve_target("arm"), False) is None
    assert caught[0].message.family == "arm"
    assert caught[0].message.reason == (
        "TVM refused every schedule the rule tried (the last: level 0: ValueError: TVM refused this step)")
    assert caught[0].message.function == "the PrimFunc of pad, max_pool_pass0, max_pool"


def test_cuda_rule_declines_too(monkeypatch):
    from tvm_pool.schedules import cuda_passes  # pylint: disable=import-outside-toplevel

    monkeypatch.setattr(cuda_passes, "schedule_chain", _broken)
    monkeypatch.setattr(cuda, "schedule_chain", _broken)
    with pytest.warns(ScheduleDeclined, match="the cuda schedule declined .*IndexError"):
        assert cuda.Pool(simulate=True).apply(_pool_func(), resolve_target("x86"), False) is None


def test_tuning_candidates_skip_a_failing_knob_with_a_warning(monkeypatch):
    from tvm_pool.schedules import meta_schedule  # pylint: disable=import-outside-toplevel

    monkeypatch.setattr(cpu_passes, "_place_passes", _broken)
    mod = tvm.IRModule({"main": _pool_func()})
    with pytest.warns(ScheduleDeclined, match=r"the x86 \(.*\) schedule declined") as caught:
        assert meta_schedule.pool_candidates(mod, resolve_target("x86")) == []
    assert caught[0].message.family == "x86 (hand-written)"


def test_inspect_says_which_rule_declined(monkeypatch):
    from tvm_pool.cli.probes import _first_rule  # pylint: disable=import-outside-toplevel

    monkeypatch.setattr(cpu_passes, "_place_passes", _broken)
    target = resolve_target("x86")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert _first_rule([x86.Pool()], _pool_func(), target) == (
            "none (x86 declined it: IndexError: Index out of range. size: 1, got index 2)")


def test_a_function_without_pools_is_not_declined():
    x = te.placeholder((4, 4), "float32", name="x")
    func = te.create_prim_func([x, te.compute((4, 4), lambda i, j: x[i, j] + 1.0, name="add")])
    assert x86.Pool().apply(func, resolve_target("x86"), False) is None  # no warning: the filter would raise


def test_decline_reasons_are_one_line_for_multiline_errors(monkeypatch):
    def tvm_like(*_args, **_kwargs):
        raise KeyError("Traceback (most recent call last):\n  0: frame\nthe real reason")

    monkeypatch.setattr(cpu_passes, "_place_passes", tvm_like)
    with pytest.warns(ScheduleDeclined) as caught:
        x86.Pool().apply(_pool_func(), resolve_target("x86"), False)
    assert "\n" not in str(caught[0].message)
    assert caught[0].message.reason.startswith("KeyError: ")


@x86_only
def test_cli_compile_shows_the_decline_as_one_warning_line(monkeypatch, tmp_path, capfd):
    """``tvm-pool compile`` goes on and says it, once per function, even with -q."""
    import onnx  # pylint: disable=import-outside-toplevel

    from tvm_pool import cli  # pylint: disable=import-outside-toplevel
    from tvm_pool.demo_model import demo_model  # pylint: disable=import-outside-toplevel

    onnx.save(demo_model()[0], tmp_path / "cnn.onnx")
    monkeypatch.setattr(cpu_passes, "_place_passes", _broken)
    assert cli.main(["-q", "compile", str(tmp_path / "cnn.onnx"), "-o", str(tmp_path / "cnn.so")]) == 0
    warned = [line for line in capfd.readouterr().err.splitlines() if "declined" in line]
    assert warned and all(line.startswith("tvm-pool: warning: the x86 schedule declined '") for line in warned)
    assert all(line.endswith("IndexError: Index out of range. size: 1, got index 2") for line in warned), warned
    assert len(set(warned)) == len(warned)
