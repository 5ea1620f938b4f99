"""``tvm-pool run model.so --inputs in.npz [-o out.npz] [--repeat N]``: run a compiled module."""

from __future__ import annotations

import os
import time
from typing import Sequence

from .common import CliError, Progress, check_output, common_options, fmt_shape, one_line, require_input_file

NAME = "run"


def add_parser(subparsers):
    p = subparsers.add_parser(NAME, parents=[common_options()], help="run a module compiled by tvm-pool compile")
    p.add_argument("module", help="the compiled module (.so)")
    p.add_argument("--inputs", required=True, help=".npz with one array per model input, by input name")
    p.add_argument("-o", "--output", help="write the outputs, by output name, to this .npz")
    p.add_argument("--repeat", type=int, help="time N runs and print median/mean/min/max")
    return p


def load_npz(path: str) -> dict:
    import numpy as np  # pylint: disable=import-outside-toplevel

    require_input_file(path, "an .npz archive")
    try:
        data = np.load(path, allow_pickle=False)
    except (OSError, ValueError, EOFError) as err:
        raise CliError(f"{path}: not an .npz archive ({one_line(err)})") from err
    if not hasattr(data, "files"):  # a .npy file: one array, no names
        raise CliError(
            f"{path}: a single array (.npy), not an .npz archive; save the inputs by name with "
            "numpy.savez(PATH, NAME=array, ...)"
        )
    try:
        with data:
            return {k: data[k] for k in data.files}
    except (OSError, ValueError, EOFError, KeyError) as err:
        raise CliError(f"{path}: not a readable .npz archive ({one_line(err)})") from err


def _as_dtype(arr, dtype: str):
    """``arr`` as the model's ``dtype`` where the bits already are: numpy's .npz stores
    bfloat16 (an ml_dtypes type) as raw 2-byte records (``|V2``), which this reads back."""
    if dtype == "bfloat16" and arr.dtype.kind == "V" and arr.dtype.itemsize == 2:
        import ml_dtypes  # pylint: disable=import-outside-toplevel

        return arr.view(ml_dtypes.bfloat16)
    return arr


def check_inputs(signature: dict, arrays: dict, source: str = "inputs") -> list:
    """The arrays in ``main``'s parameter order, checked against the signature (one-line errors)."""
    import numpy as np  # pylint: disable=import-outside-toplevel

    expected = signature["inputs"]
    names = [t["name"] for t in expected]
    described = ", ".join(f"{t['name']}{fmt_shape(t['shape'])} {t['dtype']}" for t in expected)
    extra = sorted(set(arrays) - set(names))
    if extra:
        raise CliError(f"{source} has '{extra[0]}', which is not an input of the model (its inputs: {described})")
    ordered = []
    for spec in expected:
        if spec["name"] not in arrays:
            raise CliError(f"{source} lacks input '{spec['name']}' (the model takes: {described})")
        arr = _as_dtype(np.asarray(arrays[spec["name"]]), spec["dtype"])
        if spec["dtype"] and str(arr.dtype) != spec["dtype"]:
            raise CliError(f"input '{spec['name']}' has dtype {arr.dtype}; the model takes {spec['dtype']}")
        shape = spec["shape"]
        if shape is not None and (
            len(shape) != arr.ndim or any(isinstance(d, int) and d != n for d, n in zip(shape, arr.shape))
        ):
            raise CliError(f"input '{spec['name']}' has shape {list(arr.shape)}; the model takes {fmt_shape(shape)}")
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


def output_path(args) -> str | None:
    """``-o`` as numpy.savez writes it (``.npz`` added), checked before any work."""
    if not args.output:
        return None
    path = args.output if args.output.endswith(".npz") or os.path.isdir(args.output) else args.output + ".npz"
    return check_output(path, "-o", {"the --inputs archive": args.inputs, "the module": args.module})


def _load_module(path: str):
    from .. import artifact  # pylint: disable=import-outside-toplevel

    require_input_file(path, "a compiled module")
    try:
        artifact.check_shared_object(path)  # before dlopen, which a truncated file crashes
    except (OSError, artifact.ArtifactError) as err:
        raise CliError(f"{path}: cannot load as a compiled module: {err}") from err
    if not path.endswith(".so"):
        raise CliError(
            f"{path}: cannot load as a compiled module: TVM's runtime needs the .so extension; rename it to "
            f"{os.path.splitext(path)[0]}.so (tvm-pool compile adds it)"
        )
    try:
        return artifact.load(path)
    except artifact.SignatureError as err:
        raise CliError(f"{path}: {err}") from err
    # TVM's runtime: RuntimeError when it cannot load or place the module (a CUDA module without
    # a GPU), AttributeError for a shared library that is not a TVM module ("Module has no
    # function 'vm_load_executable'").
    except (RuntimeError, AttributeError) as err:
        hint = "; CUDA modules need a GPU and TVM's CUDA runtime" if "cuda" in str(err).lower() else ""
        raise CliError(f"{path}: cannot load as a compiled module ({one_line(err)}){hint}") from err


def _checked_call(what: str, fn, *args):
    """Run the module; its run-time checks (invalid sizes or indices) and allocation failures
    become one-line errors."""
    try:
        return fn(*args)
    except MemoryError as err:
        raise CliError(f"{what}: out of memory ({one_line(err)})") from err
    # The module's checks raise the error they name (ValueError for sizes, IndexError for
    # MaxUnpool indices); TVM's runtime its own (RuntimeError: std::bad_alloc among them).
    except (ValueError, IndexError, RuntimeError) as err:
        message = one_line(err)
        if "bad_alloc" in message:
            message = "out of memory (std::bad_alloc): the outputs need more memory than this machine has"
        raise CliError(f"{what}: {message}") from err


def run(args) -> int:
    import numpy as np  # pylint: disable=import-outside-toplevel

    from .. import artifact  # pylint: disable=import-outside-toplevel

    if args.repeat is not None and args.repeat < 1:
        raise CliError(f"--repeat must be at least 1, got {args.repeat}")
    require_input_file(args.module, "a compiled module")
    output = output_path(args)
    arrays = load_npz(args.inputs)
    progress = Progress(3 if args.repeat else 2, quiet=args.quiet)
    progress.step(f"loading {args.module}")
    vm, signature = _load_module(args.module)
    device = artifact.device_for(signature)
    ordered = check_inputs(signature, arrays, source=args.inputs)
    progress.step("running main")
    outputs = _checked_call(f"{args.module}: main failed", run_artifact, vm, signature, ordered, device)
    names = [t["name"] for t in signature["outputs"]]
    if len(names) != len(outputs):  # defensive: a hand-made signature
        names = [f"output_{i}" for i in range(len(outputs))]
    for name, out in zip(names, outputs):
        print(f"{name}: {out.dtype}{list(out.shape)}")
    if args.repeat:
        progress.step(f"timing {args.repeat} runs")
        print("timing: " + timing_summary(time_artifact(vm, signature, ordered, device, args.repeat)))
    if output:
        np.savez(output, **dict(zip(names, outputs)))
        print(f"wrote {output}")
    return 0
