"""Kernels scheduled by a tuning record of anything but a pool are built as the record was
measured: tvm_pool's TIR lowering passes (stack buffers, NaN max as OR, strided loads) leave them
alone (schedules/pipelines.py, ``AS_MEASURED``), and the records' lookup marks them."""

from __future__ import annotations

import numpy as np
import pytest
import tvm
from tvm import relax, te
from tvm.s_tir import meta_schedule as ms

from tvm_pool import lowering
from tvm_pool.schedules import tir_pipeline, x86
from tvm_pool.schedules.pipelines import AS_MEASURED, as_measured
from tvm_pool.targets import is_x86, resolve_target


@pytest.fixture(name="host")
def _host():
    target = resolve_target("host")
    if not is_x86(target) or not x86.STACK_BUFFER_BYTES:
        pytest.skip("the stack-buffer pass runs on x86 hosts")
    return target


def _row_scratch() -> tvm.tirx.PrimFunc:
    """A parallel loop over 64 rows, each first computed into a 2 KB scratch row: a global
    buffer under the stack-buffer limit, allocated inside the parallel loop."""
    a = te.placeholder((64, 512), name="a")
    c = te.compute((64, 512), lambda i, j: a[i, j] + 1.0, name="c")
    b = te.compute((64, 512), lambda i, j: c[i, 511 - j] * 2.0, name="b")  # reversed: the row must be kept
    sch = tvm.s_tir.Schedule(te.create_prim_func([a, b]))
    row, _ = sch.get_loops(sch.get_sblock("b"))
    sch.compute_at(sch.get_sblock("c"), row)
    sch.parallel(row)
    return sch.mod["main"]


def test_lowering_passes_leave_a_measured_kernel_as_tvm_lowers_it(host):
    func = _row_scratch()
    irs = {}
    for name, marked in (("plain", func), ("measured", func.with_attr(AS_MEASURED, True))):
        lib = tvm.tirx.build(tvm.IRModule({name: marked.with_attr("global_symbol", name)}), target=host,
                             pipeline=tir_pipeline(host))
        irs[name] = lib
    plain, measured = (irs[name].inspect_source("ll") for name in ("plain", "measured"))
    # on the stack, LLVM may keep the row in registers (it does here); as TVM lowers it, a
    # workspace allocation per row
    assert "TVMBackendAllocWorkspace" not in plain, "the unmarked kernel's scratch row is not on the stack"
    assert "TVMBackendAllocWorkspace" in measured, "the marked kernel's scratch row is not TVM's workspace"
    x = np.random.default_rng(0).standard_normal((64, 512)).astype("float32")
    for name in ("plain", "measured"):
        out = tvm.runtime.tensor(np.zeros_like(x))
        irs[name][name](tvm.runtime.tensor(x), out)
        np.testing.assert_array_equal(out.numpy(), (x[:, ::-1] + 1) * 2)


def _conv_pool_module() -> tvm.IRModule:
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((1, 8, 16, 16), "float32"))
    with bb.function("main", [x]):
        with bb.dataflow():
            weight = relax.const(np.random.default_rng(1).standard_normal((8, 8, 3, 3)).astype("float32"))
            conv = bb.emit(relax.op.nn.relu(relax.op.nn.conv2d(x, weight, padding=1)))
            out = bb.emit_output(relax.op.nn.max_pool2d(conv, 2, 2))
        bb.emit_func_output(out)
    return bb.get()


def test_records_lookup_marks_tuned_kernels_but_not_pools(host):
    fused = lowering.fuse(_conv_pool_module(), host, "NCHW")
    database = ms.database.MemoryDatabase()
    tasks = ms.relax_integration.extract_tasks(fused, host)
    assert len(tasks) == 2, [t.task_name for t in tasks]
    for task in tasks:  # a record of each whose trace changes nothing (an empty trace is no record)
        sch = tvm.s_tir.Schedule(task.dispatched[0])
        sch.get_sblock("root")
        entry = database.commit_workload(task.dispatched[0])
        database.commit_tuning_record(ms.database.TuningRecord(sch.trace, entry, [1e-3], target=host))
    with host, database:
        applied = lowering._apply_records(host)(fused)  # pylint: disable=protected-access
    marks = {gv.name_hint: as_measured(f) for gv, f in applied.functions_items() if isinstance(f, tvm.tirx.PrimFunc)}
    conv = [name for name in marks if "conv2d" in name]
    pool = [name for name in marks if "pool" in name]
    assert conv and pool, marks
    assert all(marks[name] for name in conv), marks
    assert not any(marks[name] for name in pool), marks
    scheduled = {gv.name_hint: bool(f.attrs.get("tirx.is_scheduled", False)) for gv, f in applied.functions_items()
                 if isinstance(f, tvm.tirx.PrimFunc)}
    assert all(scheduled.values()), scheduled
