"""Checks of the CUDA schedule that need no GPU (used by test_schedules_cuda.py and the bench).

- :func:`simulate`: build a Relax module for the CPU with the CUDA rule in simulation mode
  (``cuda.Pool(simulate=True)``: every thread-bound loop serial, staged buffers global).
  :func:`simulating` does the same for any ``tvm_pool.compile`` for the CPU within it.
- :func:`cuda_build`: build for a CUDA arch through ``tvm_pool.compile``, capturing the scheduled
  TIR and the lowered device kernels (a registered TIR pipeline that wraps TVM's default one).
- :func:`verify_gpu`: TVM's VerifyGPUCode limits on every device kernel.
- :func:`ptxas_report`: nvcc/ptxas ``-v`` on the generated CUDA source: registers, spills,
  shared memory per kernel and arch.
- :func:`ptx_kernels`: ``nvcc -ptx`` on the generated CUDA source, per kernel (the 16-byte loads
  are ``ld.global.nc.v4`` there: :data:`PTX_VECTOR_LOAD`).
- :func:`launch_report`: per kernel of the scheduled TIR, blocks, threads per block, elements
  written, and global bytes read and written (an ideal-cache DRAM estimate: each kernel reads
  every global buffer it touches once and writes every one once).
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import re
import shutil
import subprocess
import tempfile
from unittest import mock

import numpy as np
import tvm
import tvm_ffi
from tvm import relax, s_tir, tirx
from tvm.s_tir import dlight
from tvm.tirx import compilation_pipeline

import tvm_pool
from tvm_pool import lowering
from tvm_pool.schedules import cuda

ARCHS = ("sm_75", "sm_80", "sm_90")
CPU = {"kind": "llvm"}


def have_nvcc() -> bool:
    return shutil.which("nvcc") is not None


def gpu_target(arch: str = "sm_80") -> tvm.target.Target:
    return tvm.target.Target({"kind": "cuda", "arch": arch}, host={"kind": "llvm"})


# ---------------------------------------------------------------------------------------------
# Simulation on the CPU
# ---------------------------------------------------------------------------------------------


def simulate(mod: tvm.IRModule, arch: str = "sm_80", overrides: dict | None = None):
    """Compile ``mod`` for the CPU with the CUDA schedule, thread-bound loops left serial, every
    buffer access bounds-checked (``overrides``: of the rule's CudaConfig, a tuning knob)."""
    with simulating(arch, overrides):
        return tvm_pool.compile(mod, target=CPU)


@contextlib.contextmanager
def simulating(arch: str = "sm_80", overrides: dict | None = None):
    """Within it, tvm_pool.compile for the CPU schedules with the CUDA rule in simulation mode
    (the checked rule: no write outside a buffer) and bounds-checks every buffer access."""
    with scheduling(CheckedPool(simulate=True, gpu_target=gpu_target(arch), overrides=overrides)):
        with bounds_checked():
            yield


@contextlib.contextmanager
def scheduling(rule):
    """Within it, tvm_pool.compile schedules with ``rule`` (then TVM's own dlight rules)."""
    with mock.patch.object(lowering, "schedule_passes", lambda _t: [dlight.ApplyDefaultSchedule(rule)]):
        yield


def bounds_checked():
    """A PassContext in which TVM instruments every buffer access with a bounds check (an
    out-of-bounds access then raises at run time instead of corrupting memory)."""
    return tvm.transform.PassContext(config={"tirx.instrument_bound_checkers": True})


def scheduled_funcs(mod: tvm.IRModule, target) -> dict:
    """The PrimFuncs of ``mod`` after tvm_pool's Relax pipeline (scheduled, not yet lowered)."""
    target = tvm.target.Target(target) if not isinstance(target, tvm.target.Target) else target
    seen = {}

    @tvm.transform.module_pass(opt_level=0, name="tvm_pool.test.capture_scheduled")
    def capture(m, _ctx):
        for gv, f in m.functions_items():
            if isinstance(f, tirx.PrimFunc):
                seen[gv.name_hint] = f
        return m

    real = lowering.schedule_passes
    with mock.patch.object(lowering, "schedule_passes", lambda t: list(real(t)) + [capture]):
        lowering.pipeline(target)(mod)
    return seen


# ---------------------------------------------------------------------------------------------
# CUDA build with the TIR captured
# ---------------------------------------------------------------------------------------------

_CAPTURED: dict = {}
_PIPELINE = "tvm_pool_test_capture"


def _capture_factory(**_kwargs):
    base, finalize_host, finalize_device = compilation_pipeline.get_tir_pipeline("s_tir")

    @tvm.transform.module_pass(opt_level=0, name="tvm_pool.test.capture")
    def run(mod, _ctx):
        _CAPTURED["scheduled"] = mod
        out = base(mod)
        _CAPTURED["lowered"] = out
        return out

    return run, finalize_host, finalize_device


def _register_pipeline() -> None:
    if _PIPELINE not in compilation_pipeline.PIPELINE_MAP:
        compilation_pipeline.register_tir_pipeline(_PIPELINE, _capture_factory)


def _find_module(module, kind: str):
    if module.kind == kind:
        return module
    for sub in module.imports:
        found = _find_module(sub, kind)
        if found is not None:
            return found
    return None


class Build:
    """What :func:`cuda_build` returns."""

    def __init__(self, executable, source, scheduled, lowered):
        self.executable = executable
        self.source = source
        self.scheduled = scheduled  # {name: PrimFunc} before TVM's TIR lowering
        self.lowered = lowered  # IRModule after it (host and device functions)

    def kernels(self) -> dict:
        """The device kernels: name -> lowered PrimFunc."""
        out = {}
        for gv, f in self.lowered.functions_items():
            tgt = f.attrs.get("target", None) if f.attrs is not None else None
            if tgt is not None and tgt.kind.name == "cuda":
                out[gv.name_hint] = f
        return out


def cuda_build(mod: tvm.IRModule, arch: str = "sm_80", schedule: bool = True, overrides: dict | None = None) -> Build:
    """Build ``mod`` for a CUDA ``arch`` (``overrides``: of the rule's CudaConfig, a tuning
    knob; the checked rule then schedules alone)."""
    _register_pipeline()
    _CAPTURED.clear()
    rule = contextlib.nullcontext() if overrides is None else scheduling(CheckedPool(overrides=overrides))
    with rule:
        ex = tvm_pool.compile(mod, target=gpu_target(arch), schedule=schedule, tir_pipeline=_PIPELINE)
    cu = _find_module(ex.mod, "cuda")
    source = cu.inspect_source("") if cu is not None else ""
    scheduled = {gv.name_hint: f for gv, f in _CAPTURED["scheduled"].functions_items() if isinstance(f, tirx.PrimFunc)}
    return Build(ex, source, scheduled, _CAPTURED["lowered"])


GPU_LIMITS = {
    "max_shared_memory_per_block": cuda.CudaConfig().shared_limit,
    "max_threads_per_block": 1024,
    "max_thread_x": 1024,
    "max_thread_y": 1024,
    "max_thread_z": 64,
    "max_vthread": 1,
    "max_vector_bytes": 16,
    "max_kernels": 1,  # VerifyGPUCode counts per device function: one launch each
}


def verify_gpu(build: Build) -> dict:
    """VerifyGPUCode on every device kernel: name -> bool. It needs constant launch extents:
    a kernel's symbolic sizes (its integer parameters, a dynamic batch) are set to 4 first."""
    limits = {k: v for k, v in GPU_LIMITS.items() if k != "max_kernels"}

    def constant_sizes(f):
        sizes = {p: tirx.IntImm(str(p.ty), 4) for p in f.params if str(p.ty) in ("int32", "int64")}
        return f.specialize(sizes) if sizes else f

    return {name: bool(s_tir.analysis.verify_gpu_code(constant_sizes(f), limits)) for name, f in build.kernels().items()}


# ---------------------------------------------------------------------------------------------
# ptxas
# ---------------------------------------------------------------------------------------------

_PTXAS_FUNC = re.compile(r"Compiling entry function '(\w+)' for '(sm_\d+)'")
_PTXAS_SPILL = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
_PTXAS_USED = re.compile(r"Used (\d+) registers(?:, used (\d+) barriers)?(?:, (\d+) bytes smem)?")


def ptxas_report(sources: list[str], archs=ARCHS) -> list[dict]:
    """Compile each CUDA source for every arch (nvcc -fatbin, ptxas -v; two nvcc processes at a
    time); one row per kernel and arch: source index, registers, stack frame, spill stores and
    loads, shared bytes."""
    from concurrent.futures import ThreadPoolExecutor  # pylint: disable=import-outside-toplevel

    gencode = []
    for arch in archs:
        num = arch.split("_")[1]
        gencode += ["-gencode", f"arch=compute_{num},code=sm_{num}"]
    with tempfile.TemporaryDirectory() as tmp:

        def one(index_source):
            index, source = index_source
            path = os.path.join(tmp, f"m{index}.cu")
            with open(path, "w") as fh:
                fh.write(source)
            cmd = ["nvcc", "-fatbin", *gencode, "-Xptxas", "-v,--warn-on-spills,--warn-on-local-memory-usage",
                   "-o", path + ".fatbin", path]
            proc = subprocess.run(cmd, cwd=tmp, capture_output=True, text=True, check=False)
            if proc.returncode != 0:
                raise RuntimeError(f"nvcc failed on source {index}:\n{proc.stderr[-4000:]}")
            return [dict(row, source=index) for row in _parse_ptxas(proc.stdout + "\n" + proc.stderr)]

        with ThreadPoolExecutor(max_workers=2) as pool:
            return [row for rows in pool.map(one, enumerate(sources)) for row in rows]


_PTX_ENTRY = re.compile(r"\.visible \.entry (\w+)\(")
# A 16-byte global load: ld.global[.nc].v4.{f32,u32,b32} (v8 halves and v16 bytes come out as v4.u32).
PTX_VECTOR_LOAD = re.compile(r"ld\.global(?:\.nc)?\.v4\.\w32")
PTX_GLOBAL_VECTOR = re.compile(r"ld\.global(?:\.nc)?\.v[248]\.")


def ptx_kernels(source: str, arch: str = "sm_80") -> dict:
    """nvcc -ptx on a CUDA source: kernel name -> its PTX text."""
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "m.cu")
        with open(path, "w") as fh:
            fh.write(source)
        proc = subprocess.run(["nvcc", "-ptx", f"-arch={arch}", "-o", path + ".ptx", path], cwd=tmp,
                              capture_output=True, text=True, check=False)
        if proc.returncode != 0:
            raise RuntimeError(f"nvcc -ptx failed:\n{proc.stderr[-4000:]}")
        with open(path + ".ptx") as fh:
            text = fh.read()
    starts = [(m.group(1), m.start()) for m in _PTX_ENTRY.finditer(text)]
    return {name: text[at: starts[i + 1][1] if i + 1 < len(starts) else len(text)]
            for i, (name, at) in enumerate(starts)}


def _parse_ptxas(text: str) -> list[dict]:
    rows, cur = [], None
    for line in text.splitlines():
        m = _PTXAS_FUNC.search(line)
        if m:
            cur = {"kernel": m.group(1), "arch": m.group(2)}
            rows.append(cur)
            continue
        if cur is None:
            continue
        m = _PTXAS_SPILL.search(line)
        if m:
            cur.update(stack=int(m.group(1)), spill_stores=int(m.group(2)), spill_loads=int(m.group(3)))
        m = _PTXAS_USED.search(line)
        if m:
            cur.update(registers=int(m.group(1)), smem=int(m.group(3) or 0))
    return rows


# ---------------------------------------------------------------------------------------------
# Launch shapes and DRAM bytes, from the scheduled TIR
# ---------------------------------------------------------------------------------------------


def _buf_info(buf):
    ty = buf.ty if hasattr(buf, "ty") and hasattr(buf.ty, "shape") else buf
    scope = str(getattr(ty, "storage_scope", "") or (buf.scope() if hasattr(buf, "scope") else "global") or "global")
    n = 1
    for d in ty.shape:
        n *= int(d) if isinstance(d, tirx.IntImm) else 0
    return n, max(tvm.runtime.DataType(str(ty.dtype)).bits // 8, 1), scope


def launch_report(func: tirx.PrimFunc) -> list[dict]:
    """One row per kernel (root-level loop nest with thread bindings) of a scheduled PrimFunc:
    blocks, threads per block, threads launched, elements written (the largest global buffer it
    writes), global bytes read and written."""
    root = func.body.block if hasattr(func.body, "block") else func.body
    body = root.body
    nests = list(body.seq) if isinstance(body, tirx.SeqStmt) else [body]
    scopes = {}
    for buf in root.alloc_buffers:
        scopes[buf.same_as] = None  # placeholder (identity kept below)
    allocated = list(root.alloc_buffers)
    rows = []
    for nest in nests:
        extents = {}
        reads, writes = [], []

        def visit_for(node):
            if node.kind == tirx.ForKind.THREAD_BINDING and node.thread_binding is not None:
                tag = str(node.thread_binding.thread_tag)
                extents[tag] = max(extents.get(tag, 1), int(node.extent))

        def visit_block(node):
            for r in node.reads:
                reads.append(r.buffer if hasattr(r, "buffer") else r.source)
            for w in node.writes:
                writes.append(w.buffer if hasattr(w, "buffer") else w.source)
            for b in node.alloc_buffers:
                allocated.append(b)

        tvm_ffi.structural_walk(nest, [(tirx.For, visit_for), (s_tir.SBlock, visit_block)], order="post")
        if not extents:
            continue

        def global_unique(bufs):
            out = []
            for b in bufs:
                if any(b.same_as(o) for o in out):
                    continue
                if _buf_info(b)[2] != "global":
                    continue
                out.append(b)
            return out

        blocks = 1
        threads = 1
        for tag, ext in extents.items():
            if tag.startswith("blockIdx"):
                blocks *= ext
            elif tag.startswith("threadIdx"):
                threads *= ext
        gw = global_unique(writes)
        gr = [b for b in global_unique(reads) if not any(b.same_as(w) for w in gw)]
        written = max((_buf_info(b)[0] for b in gw), default=0)
        rows.append(
            dict(
                blocks=blocks,
                threads_per_block=threads,
                threads=blocks * threads,
                elements_written=written,
                bytes_read=sum(_buf_info(b)[0] * _buf_info(b)[1] for b in gr),
                bytes_written=sum(_buf_info(b)[0] * _buf_info(b)[1] for b in gw),
            )
        )
    return rows


def min_bytes(func: tirx.PrimFunc) -> int:
    """Input read once plus output written once: the bytes of the function's parameters."""
    total = 0
    for p in func.params:
        ty = p.ty if hasattr(p, "ty") else None
        if ty is None or not hasattr(ty, "shape"):
            continue
        n, size, _ = _buf_info(p)
        total += n * size
    return total


def data(shape, dtype, seed=0, nan=False):
    """Random data with ties (test_schedules_x86's), and NaN every 23rd element if asked."""
    from test_schedules_x86 import _data  # pylint: disable=import-outside-toplevel

    x = _data(shape, dtype, seed)
    if nan and dtype.startswith(("float", "bfloat")):
        x.flat[::23] = np.nan
    return x


def run_cpu(ex, *inputs):
    return run_on(ex, tvm.cpu(), *inputs)


def run_on(ex, device, *inputs):
    """Run a compiled module's ``main`` on ``device``: numpy inputs in, numpy outputs out."""
    vm = relax.VirtualMachine(ex, device)
    return _flat(vm["main"](*[tvm.runtime.tensor(x, device) for x in inputs]))


def _flat(out) -> list:
    """A result's tensors, nested tuples flattened, as numpy arrays."""
    if hasattr(out, "numpy"):
        return [out.numpy()]
    return [a for o in out for a in _flat(o)]


# ---------------------------------------------------------------------------------------------
# Writes stay inside their buffers
# ---------------------------------------------------------------------------------------------


def out_of_bounds_writes(func: tirx.PrimFunc) -> list[str]:
    """Every block write region that can leave its buffer, given the block's iterator domains
    (a schedule that widens a block's domain past its buffer writes out of bounds: on a GPU,
    silent corruption). Empty when every write stays inside."""
    from tvm import sym  # pylint: disable=import-outside-toplevel

    problems = []

    def visit(block):
        if block.name_hint == "root":
            return
        ana = sym.Analyzer()
        for iv in block.iter_vars:
            ana.bind(iv.var, tvm.ir.Range.from_min_extent(iv.dom.min, iv.dom.extent))
        for region in block.writes:
            buf = region.buffer if hasattr(region, "buffer") else region.source
            shape = (buf.ty if hasattr(buf, "ty") and hasattr(buf.ty, "shape") else buf).shape
            for axis, (rng, dim) in enumerate(zip(region.region, shape)):
                if not (isinstance(dim, tirx.IntImm) and isinstance(rng.extent, tirx.IntImm)):
                    continue
                bound = ana.const_int_bound(rng.min)
                if bound.min_value < 0 or bound.max_value + int(rng.extent) > int(dim):
                    problems.append(f"{block.name_hint} writes {buf.name} axis {axis} in "
                                    f"[{bound.min_value}, {bound.max_value + int(rng.extent) - 1}], size {int(dim)}")

    tvm_ffi.structural_walk(func.body, [(s_tir.SBlock, visit)], order="post")
    return problems


class CheckedPool(cuda.Pool):
    """The rule, asserting that every schedule it returns (compile's and tuning's alike) writes
    only inside its buffers; ``overrides`` of its CudaConfig make it a tuning knob's rule."""

    def __init__(self, simulate: bool = False, gpu_target=None, overrides: dict | None = None):
        super().__init__(simulate=simulate, gpu_target=gpu_target)
        self.overrides = dict(overrides or {})

    def config(self, target):
        return dataclasses.replace(super().config(target), **self.overrides)

    def schedule(self, base, config):
        sch = super().schedule(base, config)
        if sch is not None:
            problems = out_of_bounds_writes(sch.mod["main"])
            assert not problems, "\n".join(problems)
        return sch


def batch_module(cases):
    """One Relax function pooling every ``(shape, dtype, emit)`` case (one input each, a tuple
    of every output): one build, one CUDA source, one nvcc run."""
    bb = relax.BlockBuilder()
    params, outs = [], []
    with bb.function("main"):
        with bb.dataflow():
            for i, (shape, dtype, emit) in enumerate(cases):
                x = relax.Var(f"x{i}", relax.TensorType(shape, dtype))
                params.append(x)
                outs.append(emit(bb, x))
            out = bb.emit_output(relax.Tuple(outs))
        bb.emit_func_output(out, params=params)
    return bb.get()


def module(shape, dtype, emit, epilogue=None, prologue=None, branch=False):
    """``x -> prologue -> emit -> epilogue(y[, x2])``; with ``branch`` a second input of the
    pool's output shape joins the epilogue (add with a branch, concat)."""
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType(shape, dtype))
    params = [x]
    with bb.function("main"):
        with bb.dataflow():
            inp = bb.emit(prologue(x)) if prologue else x
            y = emit(bb, inp)
            if epilogue is not None:
                if branch:
                    x2 = relax.Var("x2", relax.TensorType([int(d) for d in y.ty.shape.values], dtype))
                    params.append(x2)
                    y = bb.emit(epilogue(y, x2))
                else:
                    y = bb.emit(epilogue(y))
            out = bb.emit_output(y)
        bb.emit_func_output(out, params=params)
    return bb.get()


def inputs_for(mod, seed=0, nan=False):
    """Seeded inputs (:func:`data`) for every parameter of ``mod["main"]``."""
    return [data([int(d) for d in p.ty.shape.values], str(p.ty.dtype), seed=seed + i, nan=nan)
            for i, p in enumerate(mod["main"].params)]
