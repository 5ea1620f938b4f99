"""``tvm-pool``: compile, run, inspect and demo ONNX models with tvm_pool.

    tvm-pool demo                                   # built-in example, checked against onnxruntime
    tvm-pool compile model.onnx -o model.so [--target host|x86|arm|cuda|'<JSON>']
                     [--input-shapes NAME=D0,D1,...]...
    tvm-pool run model.so --inputs in.npz [-o out.npz] [--repeat N]
    tvm-pool inspect model.onnx [--target ...]
    tvm-pool bench [args...]                        # tvm_pool.bench

Long steps print one progress line each to stderr. Every error is one line on stderr and exit
status 2 (``--verbose`` adds the traceback).
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import io
import json
import os
import platform
import shutil
import sys
import tempfile
import time
import traceback
from typing import Sequence

EXIT_ERROR = 2

POOLING_OPS = (
    "MaxPool",
    "AveragePool",
    "LpPool",
    "GlobalMaxPool",
    "GlobalAveragePool",
    "GlobalLpPool",
    "MaxRoiPool",
    "MaxUnpool",
)
GLOBAL_POOLS = ("GlobalMaxPool", "GlobalAveragePool", "GlobalLpPool")
WINDOW_POOLS = ("MaxPool", "AveragePool", "LpPool")


class CliError(Exception):
    """An error the CLI reports as one line (exit status 2)."""


# --------------------------------------------------------------------------------------------
# Small helpers.
# --------------------------------------------------------------------------------------------


class _Progress:
    """One line per step on stderr: ``tvm-pool: [2/4] importing model.onnx``."""

    def __init__(self, total: int, quiet: bool = False):
        self.total, self.index, self.quiet = total, 0, quiet
        self.start = time.perf_counter()

    def step(self, message: str):
        self.index += 1
        if not self.quiet:
            elapsed = time.perf_counter() - self.start
            print(f"tvm-pool: [{self.index}/{self.total}] {message} (+{elapsed:.1f}s)", file=sys.stderr, flush=True)


def _one_line(err: BaseException) -> str:
    """A one-line rendering of any exception (TVM errors carry multi-line tracebacks)."""
    text = str(err).strip()
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    # TVM/FFI errors put "Traceback ..." and frames first; the message is the last line.
    if lines and lines[0].startswith("Traceback"):
        lines = lines[-1:]
    line = lines[0] if lines else type(err).__name__
    if len(lines) > 1:
        line += " ..."
    return line


def _quiet_tvm_warnings():
    import warnings  # pylint: disable=import-outside-toplevel

    # TVM's ONNX importer re-issues every onnx.checker complaint as a UserWarning.
    warnings.filterwarnings("ignore", category=UserWarning, module=r"tvm\..*")
    warnings.filterwarnings("ignore", category=UserWarning, module=r"tvm_pool\..*")


def _load_onnx(path: str):
    if not os.path.exists(path):
        raise CliError(f"{path}: no such file")
    if os.path.isdir(path):
        raise CliError(f"{path}: is a directory, not an ONNX model")
    import onnx  # pylint: disable=import-outside-toplevel
    from google.protobuf.message import DecodeError  # pylint: disable=import-outside-toplevel

    try:
        model = onnx.load(path)
    except (DecodeError, ValueError, RuntimeError, UnicodeDecodeError) as err:
        raise CliError(f"{path}: not an ONNX model ({_one_line(err)})") from err
    if model.ir_version <= 0 or not model.HasField("graph") or not model.opset_import:
        raise CliError(f"{path}: not an ONNX model (no IR version, graph or opset_import)")
    return model


def _onnx_dtype(elem_type: int) -> str:
    import onnx  # pylint: disable=import-outside-toplevel

    try:
        return onnx.helper.tensor_dtype_to_np_dtype(elem_type).name
    except (KeyError, TypeError, ValueError):
        return "float32"


def _graph_inputs(model) -> list:
    initializers = {init.name for init in model.graph.initializer}
    return [vi for vi in model.graph.input if vi.name not in initializers]


def _declared_shape(value_info) -> list | None:
    """The declared shape of an ONNX value: ints for fixed dims, names/'?' for symbolic ones."""
    ttype = value_info.type.tensor_type
    if not ttype.HasField("shape"):
        return None
    dims = []
    for d in ttype.shape.dim:
        if d.HasField("dim_value") and d.dim_value > 0:
            dims.append(int(d.dim_value))
        else:
            dims.append(d.dim_param or "?")
    return dims


def parse_input_shapes(items: Sequence[str] | None) -> dict[str, list[int]]:
    """``["x=1,3,224,224", ...]`` -> ``{"x": [1, 3, 224, 224]}``."""
    shapes: dict[str, list[int]] = {}
    for item in items or []:
        name, sep, dims = item.rpartition("=")
        if not sep or not name:
            raise CliError(f"--input-shapes {item!r}: expected NAME=D0,D1,... (e.g. input=1,3,224,224)")
        try:
            shape = [int(d) for d in dims.replace("x", ",").split(",") if d.strip()] if dims.strip() else []
        except ValueError:
            raise CliError(f"--input-shapes {item!r}: dimensions must be integers, e.g. {name}=1,3,224,224") from None
        if any(d <= 0 for d in shape):
            raise CliError(f"--input-shapes {item!r}: dimensions must be positive")
        shapes[name] = shape
    return shapes


def resolve_input_shapes(model, overrides: dict[str, list[int]]) -> dict[str, list[int]]:
    """Every graph input's static shape (declared, or from --input-shapes); one-line errors."""
    inputs = _graph_inputs(model)
    names = [vi.name for vi in inputs]
    unknown = sorted(set(overrides) - set(names))
    if unknown:
        raise CliError(f"--input-shapes names unknown input '{unknown[0]}'; the model's inputs are: {', '.join(names)}")
    shapes = {}
    for vi in inputs:
        declared = _declared_shape(vi)
        if vi.name in overrides:
            shape = overrides[vi.name]
            if declared is not None and len(declared) != len(shape):
                raise CliError(
                    f"--input-shapes {vi.name}: gives {len(shape)} dimensions, the model declares {len(declared)} "
                    f"({_fmt_shape(declared)})"
                )
            for want, got in zip(declared or [], shape):
                if isinstance(want, int) and want != got:
                    raise CliError(
                        f"--input-shapes {vi.name}: {_fmt_shape(shape)} conflicts with the declared shape "
                        f"{_fmt_shape(declared)}"
                    )
            shapes[vi.name] = shape
            continue
        if declared is None:
            raise CliError(
                f"input '{vi.name}' has no declared shape; give it with --input-shapes {vi.name}=D0,D1,..."
            )
        symbolic = [d for d in declared if not isinstance(d, int)]
        if symbolic:
            example = ",".join(str(d) if isinstance(d, int) else "1" for d in declared)
            raise CliError(
                f"input '{vi.name}' has symbolic dimension(s) {', '.join(map(str, symbolic))} "
                f"(shape {_fmt_shape(declared)}); give a static shape with --input-shapes {vi.name}={example}"
            )
        shapes[vi.name] = declared
    return shapes


def _fmt_shape(shape) -> str:
    return "?" if shape is None else "[" + ", ".join(str(d) for d in shape) + "]"


def _target_label(target) -> str:
    attrs = {k: v for k, v in json.loads(str(target)).items() if k in ("kind", "mcpu", "mtriple", "arch")}
    return " ".join(f"{k}={v}" for k, v in attrs.items())


def _resolve_target(name):
    from .errors import TvmPoolError  # pylint: disable=import-outside-toplevel
    from .targets import resolve_target  # pylint: disable=import-outside-toplevel

    if isinstance(name, str) and name.lstrip().startswith("{"):
        try:
            name = json.loads(name)
        except ValueError as err:
            raise CliError(f"--target {name!r} is not valid JSON ({err})") from None
        if not isinstance(name, dict):
            raise CliError(f"--target {name!r}: a JSON target must be an object such as {{\"kind\": \"llvm\"}}")
    try:
        return resolve_target(name)
    except (CliError, TvmPoolError):
        raise
    except Exception as err:  # pylint: disable=broad-except
        raise CliError(f"invalid target {json.dumps(name) if isinstance(name, dict) else name!r}: {_one_line(err)}") from None


@contextlib.contextmanager
def _native_output_captured(enabled: bool = True):
    """Capture what native code and TVM's importer print on fds 1 and 2 (e.g. "Error converting
    operator ..." and C++ warnings) so an error stays one line; replayed to stderr on success."""
    state = argparse.Namespace(replay=True)
    if not enabled:
        yield state
        return
    sys.stdout.flush()
    sys.stderr.flush()
    saved = [os.dup(1), os.dup(2)]
    python_text = io.StringIO()  # sys.stdout/err may not be fds 1/2 (e.g. under pytest)
    with tempfile.TemporaryFile(mode="w+b") as sink:
        os.dup2(sink.fileno(), 1)
        os.dup2(sink.fileno(), 2)
        ok = False
        try:
            with contextlib.redirect_stdout(python_text), contextlib.redirect_stderr(python_text):
                yield state
            ok = state.replay
        finally:
            gc.collect()  # native objects (BlockBuilders) warn when destroyed: do it while captured
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
            for fd in saved:
                os.close(fd)
            if ok:
                sink.seek(0)
                text = python_text.getvalue() + sink.read().decode("utf-8", "replace")
                if text.strip():
                    sys.stderr.write(text)


def _import_onnx(model, verbose: bool = False, **kwargs):
    """tvm_pool.from_onnx with importer noise captured and errors reduced to one line."""
    _quiet_tvm_warnings()
    from_onnx = _from_onnx()
    message = None
    with _native_output_captured(enabled=not verbose) as captured:
        try:
            return from_onnx(model, **kwargs)
        except Exception as err:  # pylint: disable=broad-except
            if verbose:
                raise
            captured.replay = False
            message = _describe(err)
            traceback.clear_frames(err.__traceback__)
            del err
    raise CliError(message)


def _from_onnx():
    import tvm_pool  # pylint: disable=import-outside-toplevel

    fn = getattr(tvm_pool, "from_onnx", None)
    if fn is None:
        from .onnx.importer import from_onnx as fn  # pylint: disable=import-outside-toplevel
    return fn


# --------------------------------------------------------------------------------------------
# Cross compilation.
# --------------------------------------------------------------------------------------------

_ARCH_ALIASES = {"x86_64": "x86_64", "amd64": "x86_64", "aarch64": "aarch64", "arm64": "aarch64"}


def _target_triple(target) -> str | None:
    host = target.host if target.kind.name == "cuda" and target.host is not None else target
    triple = host.attrs.get("mtriple") if "mtriple" in host.attrs else None
    return str(triple) if triple else None


def export_compiler(target):
    """``fcompile`` for export_library: None for this machine, a cross g++ for another CPU.

    A missing cross toolchain is a one-line error saying what to install."""
    triple = _target_triple(target)
    if not triple:
        return None
    arch = _ARCH_ALIASES.get(triple.split("-")[0], triple.split("-")[0])
    if arch == _ARCH_ALIASES.get(platform.machine().lower(), platform.machine().lower()):
        return None
    compiler = f"{triple}-g++"
    if shutil.which(compiler) is None:
        package = f"g++-{triple}"
        raise CliError(
            f"cross compiler {compiler} not found (needed for target {triple}); install it with: "
            f"apt-get install {package}"
        )
    from tvm.support import cc  # pylint: disable=import-outside-toplevel

    # The triple query must ask the cross compiler too (the default asks the host's g++).
    return cc.cross_compiler(compiler, get_target_triple=cc.get_target_by_dump_machine(compiler))


# --------------------------------------------------------------------------------------------
# compile
# --------------------------------------------------------------------------------------------


def compile_onnx(model, *, target="host", input_shapes=None, source: str = "", progress=None, verbose=False):
    """Import + compile an ONNX model with its signature embedded; returns (executable, signature, target)."""
    import tvm_pool  # pylint: disable=import-outside-toplevel

    from . import artifact  # pylint: disable=import-outside-toplevel

    progress = progress or _Progress(3, quiet=True)
    tgt = _resolve_target(target)
    shapes = resolve_input_shapes(model, input_shapes or {})
    dtypes = {vi.name: _onnx_dtype(vi.type.tensor_type.elem_type) for vi in _graph_inputs(model)}
    opset = next((int(o.version) for o in model.opset_import if o.domain in ("", "ai.onnx")), None)
    progress.step(f"importing {source or 'model'} (opset {opset}, {len(model.graph.node)} nodes)")
    mod = _import_onnx(model, verbose, shape_dict=shapes, dtype_dict=dtypes)
    signature = artifact.make_signature(
        mod,
        input_names=[vi.name for vi in _graph_inputs(model)],
        output_names=[vo.name for vo in model.graph.output],
        target=str(tgt),
        source=os.path.basename(source) if source else "",
        tvm_pool_version=_version(),
    )
    mod = artifact.embed_signature(mod, signature)
    progress.step(f"compiling for {_target_label(tgt)}")
    executable = tvm_pool.compile(mod, tgt)
    return executable, signature, tgt


def _version() -> str:
    try:
        from importlib.metadata import version  # pylint: disable=import-outside-toplevel

        return version("tvm_pool")
    except Exception:  # pylint: disable=broad-except
        return "unknown"


def cmd_compile(args) -> int:
    model = _load_onnx(args.model)
    overrides = parse_input_shapes(args.input_shapes)
    resolve_input_shapes(model, overrides)  # symbolic inputs fail before anything slow
    target = _resolve_target(args.target)  # unknown targets too
    fcompile = export_compiler(target)  # a missing cross toolchain too
    output = args.output or os.path.splitext(args.model)[0] + ".so"
    out_dir = os.path.dirname(os.path.abspath(output))
    if not os.path.isdir(out_dir):
        raise CliError(f"{output}: directory {out_dir} does not exist")
    progress = _Progress(4, quiet=args.quiet)
    progress.step(f"loaded {args.model}")
    executable, signature, _ = compile_onnx(
        model, target=target, input_shapes=overrides, source=args.model, progress=progress, verbose=args.verbose
    )
    progress.step(f"exporting {output}" + (" (cross-compiling)" if fcompile else ""))
    if fcompile is None:
        executable.export_library(output)
    else:
        executable.export_library(output, fcompile=fcompile)
    ins = ", ".join(f"{t['name']}{_fmt_shape(t['shape'])}" for t in signature["inputs"])
    outs = ", ".join(f"{t['name']}{_fmt_shape(t['shape'])}" for t in signature["outputs"])
    print(f"wrote {output}: inputs {ins} -> outputs {outs}")
    return 0


# --------------------------------------------------------------------------------------------
# run
# --------------------------------------------------------------------------------------------


def _load_npz(path: str) -> dict:
    import numpy as np  # pylint: disable=import-outside-toplevel

    if not os.path.exists(path):
        raise CliError(f"{path}: no such file")
    try:
        with np.load(path, allow_pickle=False) as data:
            if not hasattr(data, "files"):
                raise CliError(f"{path}: not an .npz archive (save inputs with numpy.savez)")
            return {k: data[k] for k in data.files}
    except (OSError, ValueError) as err:
        raise CliError(f"{path}: not an .npz archive ({_one_line(err)})") from err


def check_inputs(signature: dict, arrays: dict, source: str = "inputs") -> list:
    """The arrays in ``main``'s parameter order, checked against the signature (one-line errors)."""
    import numpy as np  # pylint: disable=import-outside-toplevel

    expected = signature["inputs"]
    names = [t["name"] for t in expected]
    described = ", ".join(f"{t['name']}{_fmt_shape(t['shape'])} {t['dtype']}" for t in expected)
    extra = sorted(set(arrays) - set(names))
    if extra:
        raise CliError(f"{source} has '{extra[0]}', which is not an input of the model (its inputs: {described})")
    ordered = []
    for spec in expected:
        if spec["name"] not in arrays:
            raise CliError(f"{source} lacks input '{spec['name']}' (the model takes: {described})")
        arr = np.asarray(arrays[spec["name"]])
        if spec["dtype"] and str(arr.dtype) != spec["dtype"]:
            raise CliError(f"input '{spec['name']}' has dtype {arr.dtype}; the model takes {spec['dtype']}")
        shape = spec["shape"]
        if shape is not None and (
            len(shape) != arr.ndim or any(isinstance(d, int) and d != n for d, n in zip(shape, arr.shape))
        ):
            raise CliError(f"input '{spec['name']}' has shape {list(arr.shape)}; the model takes {_fmt_shape(shape)}")
        ordered.append(np.ascontiguousarray(arr))
    return ordered


def run_artifact(vm, signature: dict, arrays: list, device) -> list:
    """Run ``main`` once on numpy arrays; returns numpy outputs in signature order."""
    import tvm  # pylint: disable=import-outside-toplevel

    tensors = [tvm.runtime.tensor(a, device) for a in arrays]
    result = vm[signature.get("entry", "main")](*tensors)
    outs = [result] if hasattr(result, "numpy") else list(result)
    return [o.numpy() for o in outs]


def time_artifact(vm, signature: dict, arrays: list, device, repeat: int) -> list[float]:
    """Wall-clock seconds of ``repeat`` calls of ``main`` (after one warm-up call)."""
    import tvm  # pylint: disable=import-outside-toplevel

    fn = vm[signature.get("entry", "main")]
    tensors = [tvm.runtime.tensor(a, device) for a in arrays]
    fn(*tensors)
    device.sync()
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn(*tensors)
        device.sync()
        times.append(time.perf_counter() - start)
    return times


def timing_summary(times: Sequence[float]) -> str:
    import numpy as np  # pylint: disable=import-outside-toplevel

    t = np.asarray(times) * 1e3
    return (
        f"median {np.median(t):.3f} ms, mean {t.mean():.3f} ms, min {t.min():.3f} ms, "
        f"max {t.max():.3f} ms, std {t.std():.3f} ms over {len(t)} runs"
    )


def cmd_run(args) -> int:
    import numpy as np  # pylint: disable=import-outside-toplevel

    from . import artifact  # pylint: disable=import-outside-toplevel

    if not os.path.exists(args.module):
        raise CliError(f"{args.module}: no such file")
    arrays = _load_npz(args.inputs)
    if args.repeat is not None and args.repeat < 1:
        raise CliError(f"--repeat must be at least 1, got {args.repeat}")
    progress = _Progress(3 if args.repeat else 2, quiet=args.quiet)
    progress.step(f"loading {args.module}")
    try:
        vm, signature = artifact.load(args.module)
    except artifact.SignatureError as err:
        raise CliError(f"{args.module}: {err}") from err
    except Exception as err:  # pylint: disable=broad-except
        hint = "; CUDA modules need a GPU and TVM's CUDA runtime" if "cuda" in str(err).lower() else ""
        raise CliError(f"{args.module}: cannot load as a compiled module ({_one_line(err)}){hint}") from err
    device = artifact.device_for(signature)
    ordered = check_inputs(signature, arrays, source=args.inputs)
    progress.step("running main")
    outputs = run_artifact(vm, signature, ordered, device)
    names = [t["name"] for t in signature["outputs"]]
    if len(names) != len(outputs):  # defensive: a hand-made signature
        names = [f"output_{i}" for i in range(len(outputs))]
    for name, out in zip(names, outputs):
        print(f"{name}: {out.dtype}{list(out.shape)}")
    if args.repeat:
        progress.step(f"timing {args.repeat} runs")
        print("timing: " + timing_summary(time_artifact(vm, signature, ordered, device, args.repeat)))
    if args.output:
        np.savez(args.output, **dict(zip(names, outputs)))
        print(f"wrote {args.output}")
    return 0


# --------------------------------------------------------------------------------------------
# inspect
# --------------------------------------------------------------------------------------------


def _node_opset(model, domain: str) -> int:
    domain = "" if domain in ("", "ai.onnx") else domain
    for entry in model.opset_import:
        if ("" if entry.domain in ("", "ai.onnx") else entry.domain) == domain:
            return int(entry.version)
    return 1


def _attrs(node) -> dict:
    import onnx  # pylint: disable=import-outside-toplevel

    out = {}
    for a in node.attribute:
        value = onnx.helper.get_attribute_value(a)
        out[a.name] = value.decode() if isinstance(value, bytes) else value
    return out


def _value_shapes(model, overrides: dict) -> dict:
    """name -> (shape list with ints/strs, dtype) for every value shape inference can type."""
    import onnx  # pylint: disable=import-outside-toplevel

    model = onnx.ModelProto.FromString(model.SerializeToString())
    for vi in model.graph.input:
        if vi.name in overrides:
            dims = vi.type.tensor_type.shape.dim
            del dims[:]
            for d in overrides[vi.name]:
                dims.add().dim_value = d
    try:
        model = onnx.shape_inference.infer_shapes(model)
    except Exception:  # pylint: disable=broad-except
        pass
    shapes = {}
    for vi in list(model.graph.input) + list(model.graph.value_info) + list(model.graph.output):
        if vi.type.HasField("tensor_type"):
            shapes[vi.name] = (_declared_shape(vi), _onnx_dtype(vi.type.tensor_type.elem_type))
    return shapes


def _windows(node, in_shape):
    """spec.resolve_windows / global_windows for a pooling node (None where not applicable)."""
    from tvm import tirx  # pylint: disable=import-outside-toplevel

    from . import spec  # pylint: disable=import-outside-toplevel

    if in_shape is None or len(in_shape) < 3:
        return None
    spatial = [d if isinstance(d, int) else tirx.Var(str(d).replace("?", "unk"), "int64") for d in in_shape[2:]]
    if node.op_type in GLOBAL_POOLS:
        return spec.global_windows(spatial)
    if node.op_type not in WINDOW_POOLS:
        return None
    a = _attrs(node)
    kernel = list(a.get("kernel_shape", []))
    if len(kernel) != len(spatial):
        return None
    rank = len(kernel)
    return spec.resolve_windows(
        spatial,
        kernel,
        list(a.get("strides", [1] * rank)),
        list(a.get("dilations", [1] * rank)),
        list(a.get("pads", [0] * (2 * rank))),
        a.get("auto_pad", "NOTSET"),
        bool(a.get("ceil_mode", 0)),
    )


def _single_node_model(model, node, shapes):
    """A one-node ONNX model of ``node`` with its inferred input types (for the schedule probe)."""
    import onnx  # pylint: disable=import-outside-toplevel
    from onnx import helper  # pylint: disable=import-outside-toplevel

    inits = {t.name: t for t in model.graph.initializer}
    inputs, initializers = [], []
    for name in node.input:
        if not name:
            continue
        if name in inits:
            initializers.append(inits[name])
            continue
        shape, dtype = shapes.get(name, (None, "float32"))
        if shape is None or not all(isinstance(d, int) for d in shape):
            return None
        inputs.append(helper.make_tensor_value_info(name, helper.np_dtype_to_tensor_dtype(__import__("numpy").dtype(dtype)), shape))
    outputs = [helper.make_tensor_value_info(o, onnx.TensorProto.UNDEFINED, None) for o in node.output if o]
    graph = helper.make_graph([node], "probe", inputs, outputs, initializer=initializers)
    probe = helper.make_model(graph, opset_imports=list(model.opset_import))
    probe.ir_version = model.ir_version
    return probe


def schedule_rule_for(probe_mod, target) -> str:
    """The name of the first tvm_pool schedule rule that applies to the node's PrimFunc(s)."""
    from tvm import relax, tirx  # pylint: disable=import-outside-toplevel

    from . import lowering  # pylint: disable=import-outside-toplevel

    try:
        from . import schedules  # pylint: disable=import-outside-toplevel
    except ImportError:
        return "none (unscheduled: tvm_pool.schedules unavailable)"
    rules = list(schedules.rules_for(target))
    if not rules:
        return "none (unscheduled)"
    if probe_mod is None:
        return "? (input shape unknown)"
    mod = probe_mod
    with target:
        mod = relax.transform.LegalizeOps(customize_legalize_map=lowering.legalize_map())(mod)
    found = []
    for _, func in mod.functions_items():
        if not isinstance(func, tirx.PrimFunc):
            continue
        func = func.with_attr("target", target)
        for rule in rules:
            try:
                space = rule.apply(func, target, False)
            except Exception:  # pylint: disable=broad-except
                space = None
            if space is not None:
                found.append(getattr(rule, "name", None) or _rule_name(rule))
                break
        else:
            found.append(None)
    names = [f for f in found if f]
    if not names:
        return "none (unscheduled)"
    return ", ".join(dict.fromkeys(names))


def _rule_name(rule) -> str:
    module = type(rule).__module__.rsplit(".", 1)[-1]
    return f"{module}.{type(rule).__name__}" if module not in ("__main__", "builtins") else type(rule).__name__


def tuning_record_for(probe_mod, target) -> str | None:
    """The shipped tuning record the target would use, if tvm_pool.schedules says so
    (``tvm_pool.schedules.tuning_record_for(target, mod) -> str | None``, when it exists)."""
    try:
        from . import schedules  # pylint: disable=import-outside-toplevel
    except ImportError:
        return None
    fn = getattr(schedules, "tuning_record_for", None)
    if fn is None or probe_mod is None:
        return None
    try:
        return fn(target, probe_mod)
    except Exception:  # pylint: disable=broad-except
        return None


def cmd_inspect(args) -> int:
    from .onnx.base import converter_for  # pylint: disable=import-outside-toplevel

    model = _load_onnx(args.model)
    overrides = parse_input_shapes(args.input_shapes)
    target = _resolve_target(args.target)
    _from_onnx()  # registers tvm_pool's converters
    _quiet_tvm_warnings()
    shapes = _value_shapes(model, overrides)
    opset = _node_opset(model, "")
    print(f"{args.model}: IR version {model.ir_version}, opset {opset}, {len(model.graph.node)} nodes")
    print(f"target: {_target_label(target)}")
    pooling = [
        n
        for n in model.graph.node
        if n.op_type in POOLING_OPS or converter_for(n.domain, n.op_type) is not None
    ]
    if not pooling:
        print("no pooling nodes")
        return 0
    failures = 0
    for index, node in enumerate(pooling):
        name = node.name or f"{node.op_type}_{list(model.graph.node).index(node)}"
        node_opset = _node_opset(model, node.domain)
        conv = converter_for(node.domain, node.op_type)
        domain = f"{node.domain}::" if node.domain not in ("", "ai.onnx") else ""
        print(f"\n[{index + 1}] node '{name}': {domain}{node.op_type}")
        if conv is not None:
            try:
                handled = f"{domain}{node.op_type} v{conv.since_version(node_opset)} (tvm_pool)"
            except Exception as err:  # pylint: disable=broad-except
                handled = f"none: {_one_line(err)}"
                failures += 1
        else:
            handled = f"{node.op_type} (stock TVM converter)"
        print(f"    converter: {handled}")
        in_shape, dtype = shapes.get(node.input[0], (None, "?")) if node.input else (None, "?")
        print(f"    input:     {node.input[0] if node.input else '?'} {dtype}{_fmt_shape(in_shape)}")
        try:
            windows = _windows(node, in_shape)
        except Exception as err:  # pylint: disable=broad-except
            windows = None
            print(f"    geometry:  ? ({_one_line(err)})")
        if windows is not None:
            out_shape = list(in_shape[:2]) + [w.out_size for w in windows]
            extra = ""
            if node.op_type == "MaxPool" and len([o for o in node.output if o]) > 1:
                extra = " (+ Indices int64, same shape)"
            print(f"    output:    {_fmt_shape(out_shape)}{extra}")
            print(
                f"    padding:   begin {_fmt_shape([w.pad_begin for w in windows])}, "
                f"end {_fmt_shape([w.pad_end for w in windows])}"
                + ("" if node.op_type in GLOBAL_POOLS else f" (auto_pad {_attrs(node).get('auto_pad', 'NOTSET')}, "
                   f"ceil_mode {int(_attrs(node).get('ceil_mode', 0))})")
            )
        probe = _single_node_model(model, node, shapes)
        try:
            probe_mod = None if probe is None else _import_onnx(probe, args.verbose)
        except CliError as err:
            print(f"    error:     {err}")
            failures += 1
            continue
        try:
            rule = schedule_rule_for(probe_mod, target)
        except Exception as err:  # pylint: disable=broad-except
            rule = f"? ({_one_line(err)})"
        print(f"    schedule:  {rule}")
        record = tuning_record_for(probe_mod, target)
        print(f"    tuning:    {record or 'none (no shipped tuning record)'}")
    if failures:
        raise CliError(f"{failures} pooling node(s) of {args.model} are invalid or unsupported (see above)")
    return 0


# --------------------------------------------------------------------------------------------
# demo
# --------------------------------------------------------------------------------------------


def demo_model(seed: int = 0):
    """A small pooling-heavy CNN (valid ONNX, opset 19) and one input batch, built in-process.

    x[1,3,32,32] -> Conv3x3 -> Relu -> MaxPool 2x2/2 (with Indices) -> Conv3x3 -> Relu
      -> AveragePool 3x3/2 ceil_mode pads 1 (count_include_pad 0) -> MaxPool 2x2/1 SAME_LOWER
      -> GlobalAveragePool -> Flatten -> Gemm -> logits[1,10]
    Outputs: logits, pool1_indices (MaxPool's second output), pool2 (the ceil-mode AveragePool).
    """
    import numpy as np  # pylint: disable=import-outside-toplevel
    import onnx  # pylint: disable=import-outside-toplevel
    from onnx import TensorProto, helper, numpy_helper  # pylint: disable=import-outside-toplevel

    rng = np.random.default_rng(seed)

    def weight(name, *shape, scale=0.3):
        return numpy_helper.from_array((rng.standard_normal(shape) * scale).astype(np.float32), name)

    inits = [
        weight("conv1_w", 8, 3, 3, 3),
        weight("conv1_b", 8, scale=0.1),
        weight("conv2_w", 16, 8, 3, 3, scale=0.2),
        weight("conv2_b", 16, scale=0.1),
        weight("fc_w", 10, 16),
        weight("fc_b", 10, scale=0.1),
    ]
    nodes = [
        helper.make_node("Conv", ["x", "conv1_w", "conv1_b"], ["c1"], name="conv1", pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c1"], ["r1"], name="relu1"),
        helper.make_node(
            "MaxPool", ["r1"], ["p1", "pool1_indices"], name="pool1", kernel_shape=[2, 2], strides=[2, 2]
        ),
        helper.make_node("Conv", ["p1", "conv2_w", "conv2_b"], ["c2"], name="conv2", pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c2"], ["r2"], name="relu2"),
        helper.make_node(
            "AveragePool", ["r2"], ["pool2"], name="pool2", kernel_shape=[3, 3], strides=[2, 2],
            pads=[1, 1, 1, 1], ceil_mode=1, count_include_pad=0,
        ),
        helper.make_node(
            "MaxPool", ["pool2"], ["p3"], name="pool3", kernel_shape=[2, 2], strides=[1, 1], auto_pad="SAME_LOWER"
        ),
        helper.make_node("GlobalAveragePool", ["p3"], ["gap"], name="gap"),
        helper.make_node("Flatten", ["gap"], ["flat"], name="flatten"),
        helper.make_node("Gemm", ["flat", "fc_w", "fc_b"], ["logits"], name="fc", transB=1),
    ]
    graph = helper.make_graph(
        nodes,
        "tvm_pool_demo",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 32, 32])],
        [
            helper.make_tensor_value_info("logits", TensorProto.FLOAT, [1, 10]),
            helper.make_tensor_value_info("pool1_indices", TensorProto.INT64, [1, 8, 16, 16]),
            helper.make_tensor_value_info("pool2", TensorProto.FLOAT, [1, 16, 9, 9]),
        ],
        initializer=inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)], producer_name="tvm_pool demo")
    model.ir_version = 10  # onnxruntime 1.31 refuses the IR version 14 that onnx 1.23 writes
    onnx.checker.check_model(model, full_check=True)
    inputs = {"x": rng.standard_normal((1, 3, 32, 32)).astype(np.float32)}
    return model, inputs


def _ort_session(model):
    try:
        import onnxruntime as ort  # pylint: disable=import-outside-toplevel
    except ImportError:
        raise CliError("the demo checks against onnxruntime, which is not installed: pip install onnxruntime") from None
    options = ort.SessionOptions()
    options.log_severity_level = 3
    return ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])


def compare_outputs(names, got, want, atol=1e-4, rtol=1e-4) -> list[tuple[str, str, str, float, bool]]:
    import numpy as np  # pylint: disable=import-outside-toplevel

    rows = []
    for name, g, w in zip(names, got, want):
        if g.shape != w.shape:
            rows.append((name, f"{list(g.shape)} vs {list(w.shape)}", str(w.dtype), float("inf"), False))
            continue
        if g.dtype.kind in "iub":
            err = float(np.max(np.abs(g.astype(np.int64) - w.astype(np.int64)))) if g.size else 0.0
            ok = err == 0
        else:
            err = float(np.max(np.abs(g.astype(np.float64) - w.astype(np.float64)))) if g.size else 0.0
            ok = bool(np.allclose(g, w, atol=atol, rtol=rtol, equal_nan=True))
        rows.append((name, str(list(g.shape)), str(g.dtype), err, ok))
    return rows


def _stock_tvm_import(model) -> str:
    """What TVM's own ONNX importer makes of ``model`` (one line)."""
    from tvm.relax.frontend.onnx import from_onnx  # pylint: disable=import-outside-toplevel

    message = "imports (outputs not checked)"
    with _native_output_captured() as captured:
        captured.replay = False
        try:
            from_onnx(onnx_copy(model))
        except Exception as err:  # pylint: disable=broad-except
            message = f"import fails: {_one_line(err)}"
            traceback.clear_frames(err.__traceback__)
            del err
    return message


def onnx_copy(model):
    import onnx  # pylint: disable=import-outside-toplevel

    return onnx.ModelProto.FromString(model.SerializeToString())


def cmd_demo(args) -> int:
    import numpy as np  # pylint: disable=import-outside-toplevel
    import tvm  # pylint: disable=import-outside-toplevel

    progress = _Progress(4, quiet=args.quiet)
    progress.step("building the demo CNN (Conv/Relu, MaxPool+Indices, AveragePool ceil_mode, SAME_LOWER, GlobalAveragePool)")
    model, inputs = demo_model()
    if args.save_model:
        import onnx  # pylint: disable=import-outside-toplevel

        onnx.save(model, args.save_model)
        np.savez(os.path.splitext(args.save_model)[0] + "_inputs.npz", **inputs)
    session = _ort_session(model)
    executable, signature, _ = compile_onnx(
        model, target=args.target, source="demo", progress=progress, verbose=args.verbose
    )
    progress.step("running tvm_pool and onnxruntime")
    vm = tvm.relax.VirtualMachine(executable, tvm.cpu())
    ordered = check_inputs(signature, inputs)
    got = run_artifact(vm, signature, ordered, tvm.cpu())
    names = [o["name"] for o in signature["outputs"]]
    want = session.run(names, inputs)
    rows = compare_outputs(names, got, want)
    tvm_times = time_artifact(vm, signature, ordered, tvm.cpu(), args.repeat)
    session.run(names, inputs)
    ort_times = []
    for _ in range(args.repeat):
        start = time.perf_counter()
        session.run(names, inputs)
        ort_times.append(time.perf_counter() - start)

    print(f"\ntvm_pool demo: {len(model.graph.node)}-node CNN, input x[1, 3, 32, 32], target {_target_label(_resolve_target(args.target))}")
    print(f"{'output':<15} {'shape':<16} {'dtype':<8} {'max abs error':>14}  check")
    for name, shape, dtype, err, ok in rows:
        print(f"{name:<15} {shape:<16} {dtype:<8} {err:>14.3g}  {'pass' if ok else 'FAIL'}")
    tvm_ms, ort_ms = np.median(tvm_times) * 1e3, np.median(ort_times) * 1e3
    print(f"time (median of {args.repeat}): tvm_pool {tvm_ms:.3f} ms, onnxruntime {ort_ms:.3f} ms")
    print(f"stock TVM 0.27 on the same model: {_stock_tvm_import(model)}")
    failed = [r[0] for r in rows if not r[4]]
    if failed:
        print(f"tvm-pool: error: demo check failed: {', '.join(failed)} differ from onnxruntime", file=sys.stderr)
        return EXIT_ERROR
    print("all outputs match onnxruntime")
    if args.save_model:
        print(f"wrote {args.save_model} and {os.path.splitext(args.save_model)[0]}_inputs.npz")
    return 0


# --------------------------------------------------------------------------------------------
# bench
# --------------------------------------------------------------------------------------------


def cmd_bench(argv: list[str]) -> int:
    try:
        from .bench import main as bench_main  # pylint: disable=import-outside-toplevel
    except ImportError as err:
        raise CliError(f"the benchmark suite is unavailable (tvm_pool.bench.main: {_one_line(err)})") from err
    result = bench_main(argv)
    return int(result or 0)


# --------------------------------------------------------------------------------------------
# argument parsing and error handling
# --------------------------------------------------------------------------------------------


class _Parser(argparse.ArgumentParser):
    """argparse with one-line usage errors (exit 2) like every other tvm-pool error."""

    def error(self, message):
        self.exit(EXIT_ERROR, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def build_parser() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("-v", "--verbose", action="store_true", default=argparse.SUPPRESS, help="show tracebacks on errors")
    common.add_argument("-q", "--quiet", action="store_true", default=argparse.SUPPRESS, help="no progress lines on stderr")

    parser = _Parser(
        prog="tvm-pool",
        description="Exact, fast pooling for Apache TVM: compile, run and inspect ONNX models.",
        parents=[common],
        epilog="Start with: tvm-pool demo",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    target_help = "host (default: this CPU), x86, arm (aarch64-linux-gnu), cuda, or a JSON target"

    p = sub.add_parser("compile", parents=[common], help="compile an ONNX model to a deployable shared library")
    p.add_argument("model", help="the ONNX model (.onnx)")
    p.add_argument("-o", "--output", help="the shared library to write (default: MODEL with .so)")
    p.add_argument("--target", default="host", help=target_help)
    p.add_argument(
        "--input-shapes", action="append", metavar="NAME=D0,D1,...",
        help="static shape of an input with symbolic dimensions (repeatable)",
    )
    p.set_defaults(func=cmd_compile)

    p = sub.add_parser("run", parents=[common], help="run a module compiled by tvm-pool compile")
    p.add_argument("module", help="the compiled module (.so)")
    p.add_argument("--inputs", required=True, help=".npz with one array per model input, by input name")
    p.add_argument("-o", "--output", help="write the outputs, by output name, to this .npz")
    p.add_argument("--repeat", type=int, help="time N runs and print median/mean/min/max")
    p.set_defaults(func=cmd_run)

    p = sub.add_parser("inspect", parents=[common], help="show how tvm_pool handles each pooling node")
    p.add_argument("model", help="the ONNX model (.onnx)")
    p.add_argument("--target", default="host", help=target_help)
    p.add_argument("--input-shapes", action="append", metavar="NAME=D0,D1,...", help="static input shapes")
    p.set_defaults(func=cmd_inspect)

    p = sub.add_parser("demo", parents=[common], help="compile a built-in CNN and check it against onnxruntime")
    p.add_argument("--target", default="host", help="a CPU target (default: host)")
    p.add_argument("--repeat", type=int, default=50, help="timed runs for the comparison (default 50)")
    p.add_argument("--save-model", metavar="PATH.onnx", help="also save the demo model (and PATH_inputs.npz)")
    p.set_defaults(func=cmd_demo)

    sub.add_parser("bench", help="run tvm_pool's benchmarks (arguments go to tvm_pool.bench)", add_help=False)
    return parser


def _split_bench(argv: list[str]) -> tuple[list[str], list[str]] | None:
    """``[global flags] bench ARGS...`` -> (global flags, ARGS), so bench gets its args untouched."""
    for i, arg in enumerate(argv):
        if not arg.startswith("-"):
            return (argv[:i], argv[i + 1 :]) if arg == "bench" else None
    return None


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    verbose = any(a in ("-v", "--verbose") for a in argv)
    try:
        bench = _split_bench(argv)
        if bench is not None:
            return cmd_bench(bench[1])
        parser = build_parser()
        try:
            args = parser.parse_args(argv)
        except SystemExit as stop:  # --help (0) and usage errors (2, one line)
            return int(stop.code or 0)
        if not getattr(args, "command", None):
            parser.print_help()
            return EXIT_ERROR
        args.verbose = getattr(args, "verbose", False)
        args.quiet = getattr(args, "quiet", False)
        return args.func(args)
    except BrokenPipeError:  # e.g. `tvm-pool inspect model.onnx | head`
        try:
            sys.stdout = open(os.devnull, "w", encoding="utf-8")  # pylint: disable=consider-using-with
        except OSError:
            pass
        return 0
    except KeyboardInterrupt:
        print("tvm-pool: interrupted", file=sys.stderr)
        return 130
    except Exception as err:  # pylint: disable=broad-except
        if verbose:
            traceback.print_exc()
        print(f"tvm-pool: error: {_describe(err)}", file=sys.stderr)
        return EXIT_ERROR


def _describe(err: BaseException) -> str:
    from .errors import TvmPoolError  # pylint: disable=import-outside-toplevel

    if isinstance(err, (CliError, TvmPoolError)):
        return _one_line(err)
    name = type(err).__name__
    if name == "OpNotImplemented":
        return f"unsupported operator: {_one_line(err)}"
    return f"{name}: {_one_line(err)} (run with --verbose for the traceback)"


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
