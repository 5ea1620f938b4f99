"""``tvm-pool run model.so --inputs in.npz [-o out.npz] [--repeat N]``: run a compiled module.

``tvm-pool run model.pt2 [--inputs in.npz] [--input-shapes NAME=D0,...]``: compile a program saved
by ``torch.export.save`` for this CPU, then run it the same way; without ``--inputs`` it runs on
random inputs of the shapes the program was exported with (or ``--input-shapes``).

``tvm-pool run model.tflite [...]``: the same for a TFLite model (random inputs of its declared
shapes)."""

from __future__ import annotations

import os
import time
from typing import Sequence

from . import exported, tflite_files
from .common import (
    CliError,
    Progress,
    check_output,
    common_options,
    fmt_shape,
    one_line,
    parse_input_shapes,
    require_input_file,
)

NAME = "run"


def add_parser(subparsers):
    p = subparsers.add_parser(
        NAME, parents=[common_options()],
        help="run a module compiled by tvm-pool compile, or a torch.export program or TFLite model",
    )
    p.add_argument(
        "module",
        help="the compiled module (.so), or a torch.export program (.pt2) or TFLite model (.tflite), compiled for "
        "this CPU first",
    )
    p.add_argument(
        "--inputs",
        help=".npz with one array per model input, by input name (required for a .so; a .pt2 or .tflite without it "
        "runs on random inputs of the shapes it was exported with)",
    )
    p.add_argument(
        "--input-shapes", action="append", metavar="NAME=D0,D1,...",
        help="a .pt2 or .tflite only: static shape of an input (repeatable), also the random inputs' shape",
    )
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
    _check_symbolic_dims(expected, ordered, signature.get("dim_ranges") or {})
    return ordered


def _check_symbolic_dims(expected: list, arrays: list, ranges: dict) -> None:
    """A symbolic dimension takes one size across the inputs, inside the range the program was
    exported for (``dim_ranges`` of a signature compiled from a .pt2: name -> [lowest, highest])."""
    sizes: dict[str, tuple[int, str]] = {}
    for spec, arr in zip(expected, arrays):
        for dim, size in zip(spec["shape"] or [], arr.shape):
            if not isinstance(dim, str):
                continue
            if dim in sizes and sizes[dim][0] != size:
                raise CliError(
                    f"input '{spec['name']}' has {dim}={size} but input '{sizes[dim][1]}' has {dim}={sizes[dim][0]}"
                )
            sizes[dim] = (int(size), spec["name"])
            low, high = (list(ranges.get(dim) or []) + [None, None])[:2]
            if (low is not None and size < low) or (high is not None and size > high):
                raise CliError(
                    f"input '{spec['name']}' has {dim}={size}; the program was exported for {dim} in "
                    f"[{low if low is not None else 0}, {high if high is not None else 'inf'}]"
                )


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
    inputs = {"the --inputs archive": args.inputs} if args.inputs else {}
    module = "the program" if _compiled_here(args.module) else "the module"
    return check_output(path, "-o", {**inputs, module: args.module})


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


def random_inputs(signature: dict, shapes: dict, seed: int = 0) -> dict:
    """Seeded random arrays for every input of ``signature`` in ``shapes`` (name -> static
    shape): standard normal floats, integers in [0, 10), booleans."""
    import numpy as np  # pylint: disable=import-outside-toplevel

    rng = np.random.default_rng(seed)
    arrays = {}
    for spec in signature["inputs"]:
        shape, dtype = shapes[spec["name"]], spec["dtype"] or "float32"
        if dtype == "bool":
            arrays[spec["name"]] = rng.integers(0, 2, size=shape).astype(bool)
        elif np.dtype(dtype if dtype != "bfloat16" else "float32").kind in "iu":
            arrays[spec["name"]] = rng.integers(0, 10, size=shape).astype(dtype)
        elif dtype == "bfloat16":
            import ml_dtypes  # pylint: disable=import-outside-toplevel

            arrays[spec["name"]] = rng.standard_normal(shape).astype(np.float32).astype(ml_dtypes.bfloat16)
        else:
            arrays[spec["name"]] = rng.standard_normal(shape).astype(dtype)
    return arrays


def _program_vm(args, overrides, progress):
    """A .pt2 compiled for this CPU in memory: (VirtualMachine, signature, device, the shapes
    of random inputs)."""
    from tvm import relax  # pylint: disable=import-outside-toplevel

    from .. import artifact  # pylint: disable=import-outside-toplevel
    from .compile import compile_program  # pylint: disable=import-outside-toplevel

    program = exported.load_program(args.module)
    inputs = exported.program_inputs(program, args.module)
    bindings = exported.check_input_shapes(inputs, overrides, exported.symbol_ranges(program))
    if bindings:
        exported.require_static(inputs, bindings, "--input-shapes must fix every symbolic dimension of a .pt2")
    shapes = None if args.inputs else exported.example_shapes(inputs, bindings)
    progress.step(f"loaded {args.module}")
    executable, signature, _ = compile_program(
        program, target="host", input_shapes=overrides, source=args.module, progress=progress, verbose=args.verbose
    )
    device = artifact.device_for(signature)
    return relax.VirtualMachine(executable, device), signature, device, shapes


def _compiled_here(path: str) -> bool:
    """Whether ``path`` is a model ``run`` compiles first (a .pt2 or .tflite), not a module."""
    return exported.is_program_path(path) or tflite_files.is_tflite_path(path)


def run(args) -> int:
    import numpy as np  # pylint: disable=import-outside-toplevel

    from .. import artifact  # pylint: disable=import-outside-toplevel

    if args.repeat is not None and args.repeat < 1:
        raise CliError(f"--repeat must be at least 1, got {args.repeat}")
    program = _compiled_here(args.module)
    if not program:
        if not args.inputs:
            raise CliError(
                f"running {args.module} needs --inputs IN.npz (one array per input, by name); only a .pt2 program "
                "or .tflite model runs on random inputs"
            )
        if args.input_shapes:
            raise CliError(
                "--input-shapes applies to a .pt2 program or .tflite model; a compiled module takes the shapes of --inputs"
            )
    tflite = tflite_files.is_tflite_path(args.module)
    kind = "a TFLite model (.tflite)" if tflite else "a torch.export program (.pt2)"
    require_input_file(args.module, kind if program else "a compiled module")
    overrides = parse_input_shapes(args.input_shapes) if program else {}
    output = output_path(args)
    arrays = load_npz(args.inputs) if args.inputs else None
    steps = (4 if program else 2) + (1 if args.repeat else 0)
    progress = Progress(steps, quiet=args.quiet)
    if program:
        build = tflite_files.compiled_vm if tflite else _program_vm
        vm, signature, device, shapes = build(args, overrides, progress)
        if arrays is None:
            arrays = random_inputs(signature, shapes)
            described = ", ".join(f"{k}{fmt_shape(list(v.shape))}" for k, v in arrays.items())
            print(f"inputs: random (seed 0): {described}")
    else:
        progress.step(f"loading {args.module}")
        vm, signature = _load_module(args.module)
        device = artifact.device_for(signature)
    ordered = check_inputs(signature, arrays, source=args.inputs or "the random inputs")
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
