"""The model signature that travels inside a compiled tvm_pool artifact.

A module compiled by ``tvm-pool compile`` carries, next to the Relax function ``main``, a
second Relax function ``tvm_pool_signature`` that takes no arguments and returns a JSON string::

    {"format": "tvm_pool.signature/1",
     "entry": "main",
     "inputs":  [{"name": "x", "shape": [1, 3, 32, 32], "dtype": "float32"}],
     "outputs": [{"name": "logits", "shape": [1, 10], "dtype": "float32"},
                 {"name": "pool1_indices", "shape": [1, 8, 16, 16], "dtype": "int64"}],
     "target": "{...}", "tvm_pool_version": "0.1.0", "source": "model.onnx"}

``inputs`` lists ``main``'s parameters in order; ``outputs`` lists what ``main`` returns in
order (one tensor, or the fields of the returned tuple). A symbolic dimension is written as its
name (a string). The function is an ordinary VM function, so any TVM runtime reads it without
tvm_pool and without TVM's compiler::

    import json, tvm
    from tvm.runtime.vm import VirtualMachine
    vm = VirtualMachine(tvm.runtime.load_module("model.so"), tvm.cpu())
    signature = json.loads(str(vm["tvm_pool_signature"]()))

(C++: ``vm->GetFunction("tvm_pool_signature")`` then ``tvm::ffi::json::Parse``; see
examples/deploy_cpp.)

Only :func:`read_signature` and :func:`load` are needed at run time; both work with the runtime
library alone (``TVM_USE_RUNTIME_LIB=1``).
"""

from __future__ import annotations

import json
from typing import Any, Sequence

SIGNATURE_FUNCTION = "tvm_pool_signature"
SIGNATURE_FORMAT = "tvm_pool.signature/1"
ENTRY = "main"


class SignatureError(Exception):
    """The artifact has no (readable) tvm_pool signature."""


class ArtifactError(Exception):
    """The file is not a shared library this machine can load (checked before dlopen, which
    crashes the process on a truncated file instead of failing)."""


# --------------------------------------------------------------------------------------------
# Writing (needs TVM's compiler: Relax types and the BlockBuilder).
# --------------------------------------------------------------------------------------------


def _dim(d) -> int | str:
    from tvm import tirx  # pylint: disable=import-outside-toplevel

    if isinstance(d, int):
        return d
    if isinstance(d, tirx.IntImm):
        return int(d.value)
    return str(d)


def tensor_spec(name: str, ty) -> dict:
    """{"name", "shape", "dtype"} of a Relax tensor type (shape None when the rank is unknown)."""
    from tvm import relax  # pylint: disable=import-outside-toplevel

    if not isinstance(ty, relax.TensorType):
        raise SignatureError(f"'{name}' is not a tensor ({ty}); tvm_pool artifacts take and return tensors")
    shape = None
    if isinstance(ty.shape, relax.ShapeExpr):
        shape = [_dim(d) for d in ty.shape.values]
    dtype = str(ty.dtype) if ty.dtype is not None else None
    return {"name": name, "shape": shape, "dtype": dtype}


def output_types(func) -> list:
    """The tensor types ``func`` returns, in order (a tuple's fields, or the one tensor)."""
    from tvm import relax  # pylint: disable=import-outside-toplevel

    ret = func.ret_ty
    if isinstance(ret, relax.TensorType):
        return [ret]
    fields = getattr(ret, "fields", None)
    if fields is None:
        raise SignatureError(f"main returns {ret}; expected a tensor or a tuple of tensors")
    return list(fields)


def make_signature(
    mod,
    input_names: Sequence[str] | None = None,
    output_names: Sequence[str] | None = None,
    **extra: Any,
) -> dict:
    """The signature of ``mod["main"]``: names (ONNX names when given, else the Relax parameter
    names / ``output_<i>``), shapes and dtypes from the Relax types."""
    func = mod[ENTRY]
    params = list(func.params)
    num_input = func.attrs.get("num_input") if func.attrs is not None and "num_input" in func.attrs else None
    if num_input is not None:
        params = params[: int(num_input)]
    if input_names is None:
        input_names = [p.name_hint for p in params]
    if len(input_names) != len(params):
        raise SignatureError(f"main takes {len(params)} inputs but {len(input_names)} input names were given")
    outs = output_types(func)
    if output_names is None:
        output_names = [f"output_{i}" for i in range(len(outs))]
    if len(output_names) != len(outs):
        raise SignatureError(f"main returns {len(outs)} outputs but {len(output_names)} output names were given")
    return {
        "format": SIGNATURE_FORMAT,
        "entry": ENTRY,
        "inputs": [tensor_spec(n, p.ty) for n, p in zip(input_names, params)],
        "outputs": [tensor_spec(n, t) for n, t in zip(output_names, outs)],
        **extra,
    }


def embed_signature(mod, signature: dict):
    """Return ``mod`` with the Relax function ``tvm_pool_signature`` (returning ``signature`` as
    a JSON string) added. Compile the result as usual; the function survives compilation,
    ``export_library`` and ``load_module``."""
    import tvm  # pylint: disable=import-outside-toplevel
    from tvm import relax  # pylint: disable=import-outside-toplevel

    text = json.dumps(signature, sort_keys=False)
    bb = relax.BlockBuilder(mod)
    with bb.function(SIGNATURE_FUNCTION, [], {"global_symbol": SIGNATURE_FUNCTION}, pure=True):
        bb.emit_func_output(tvm.ir.StringImm(text))
    return bb.get()


# --------------------------------------------------------------------------------------------
# Reading (runtime only).
# --------------------------------------------------------------------------------------------


def read_signature(vm) -> dict:
    """The signature embedded in a loaded artifact (a ``VirtualMachine`` or its runtime module)."""
    try:
        fn = vm[SIGNATURE_FUNCTION]
    except (AttributeError, KeyError, RuntimeError) as err:  # tvm raises AttributeError
        raise SignatureError(
            f"this module has no '{SIGNATURE_FUNCTION}' function: it was not compiled by tvm-pool compile"
        ) from err
    if fn is None:
        raise SignatureError(
            f"this module has no '{SIGNATURE_FUNCTION}' function: it was not compiled by tvm-pool compile"
        )
    try:
        signature = json.loads(str(fn()))
    except ValueError as err:
        raise SignatureError(f"the embedded signature is not valid JSON: {err}") from err
    if signature.get("format") != SIGNATURE_FORMAT:
        raise SignatureError(f"unknown signature format {signature.get('format')!r} (expected {SIGNATURE_FORMAT})")
    return signature


def device_for(signature: dict):
    """The device a signature's target runs on (``tvm.cuda()`` for CUDA targets, else CPU)."""
    import tvm  # pylint: disable=import-outside-toplevel

    target = signature.get("target") or ""
    kind = json.loads(target).get("kind") if target.startswith("{") else target.split()[0] if target else "llvm"
    return tvm.cuda() if kind == "cuda" else tvm.cpu()


# ELF e_machine values of the CPUs tvm-pool targets (and a few it may meet).
_ELF_MACHINES = {3: "i386", 40: "arm", 62: "x86_64", 183: "aarch64", 243: "riscv64"}
_HOST_MACHINES = {"x86_64": "x86_64", "amd64": "x86_64", "aarch64": "aarch64", "arm64": "aarch64"}


def check_shared_object(path: str) -> None:
    """Raise :class:`ArtifactError` unless ``path`` is a complete ELF shared library for this
    machine's CPU: the header, program headers, loadable segments and section headers must
    lie inside the file (a truncated file makes dlopen die of SIGBUS), and the machine field
    must match (dlopen only says "cannot open shared object file")."""
    import platform  # pylint: disable=import-outside-toplevel
    import struct  # pylint: disable=import-outside-toplevel

    with open(path, "rb") as f:
        data = f.read()
    size = len(data)
    if size < 64 or data[:4] != b"\x7fELF":
        raise ArtifactError("not a shared library (no ELF header); compile one with tvm-pool compile")
    if data[4] != 2 or data[5] not in (1, 2):
        raise ArtifactError("not a 64-bit ELF shared library")
    end = "<" if data[5] == 1 else ">"
    e_type, e_machine = struct.unpack_from(end + "HH", data, 16)
    phoff, shoff = struct.unpack_from(end + "QQ", data, 32)
    phentsize, phnum, shentsize, shnum = struct.unpack_from(end + "HHHH", data, 54)
    if e_type != 3:
        raise ArtifactError("an ELF file but not a shared library")
    arch = _ELF_MACHINES.get(e_machine, f"ELF machine {e_machine}")
    host = _HOST_MACHINES.get(platform.machine().lower(), platform.machine().lower())
    if arch != host:
        raise ArtifactError(f"built for {arch}; this machine is {host} (run it on an {arch} machine)")
    truncated = ArtifactError(f"truncated shared library ({size} bytes; its headers describe a longer file)")
    if phoff + phnum * phentsize > size or shoff + shnum * shentsize > size or phentsize < 56:
        raise truncated
    for i in range(phnum):
        p_type, _flags, p_offset, _vaddr, _paddr, p_filesz = struct.unpack_from(end + "IIQQQQ", data, phoff + i * phentsize)
        if p_type == 1 and p_offset + p_filesz > size:  # PT_LOAD
            raise truncated


def load(path: str, device=None):
    """Load an artifact: returns ``(VirtualMachine, signature)``. Runtime-only TVM suffices.
    The file is checked first (:func:`check_shared_object`)."""
    import tvm  # pylint: disable=import-outside-toplevel
    from tvm.runtime.vm import VirtualMachine  # pylint: disable=import-outside-toplevel

    check_shared_object(path)
    lib = tvm.runtime.load_module(path)
    probe = VirtualMachine(lib, tvm.cpu()) if device is None else None
    if probe is not None:
        signature = read_signature(probe)
        device = device_for(signature)
        if device.dlpack_device_type() == tvm.cpu().dlpack_device_type():
            return probe, signature
    vm = VirtualMachine(lib, device)
    return vm, read_signature(vm)
