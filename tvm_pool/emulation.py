"""An emulated aarch64 device, built only from the package registries.

The device is an aarch64 Python 3.11 (Debian's arm64 packages, unpacked with ``dpkg -x``) with
the aarch64 wheels of TVM's runtime, run by ``qemu-aarch64`` (Debian's ``qemu-user``) with
``-L ROOT``: no chroot, no binfmt. It runs `tvm-pool compile --target arm` artifacts with TVM's
runtime only, serves as a TVM RPC device, and counts executed aarch64 instructions with a qemu
TCG plugin (:func:`build_plugin`, ``tvm_pool/qemu_plugin/insn_count.c``).

    python -m tvm_pool.emulation build                 # fetch + unpack into the cache (idempotent)
    python -m tvm_pool.emulation run script.py ARGS    # run a script on the device
    python -m tvm_pool.emulation rpc-start --port 9190 # an RPC server under qemu (background)
    python -m tvm_pool.emulation rpc-stop

The cache is ``$TVM_POOL_AARCH64_CACHE`` (default ``~/.cache/tvm_pool/aarch64``). Building needs
``apt-get`` (Debian/Ubuntu, as root: it adds the arm64 architecture and installs ``qemu-user``
when missing) and ``pip download``. Emulated instruction counts are not hardware time.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import zipfile
from dataclasses import dataclass
from pathlib import Path

PYTHON_VERSION = "3.11"
# Debian (bookworm) arm64 packages: Python 3.11 and the C libraries it and the wheels load.
DEBS = (
    "python3.11-minimal", "libpython3.11-minimal", "libpython3.11-stdlib",
    "libc6", "libstdc++6", "libgcc-s1", "libgomp1", "zlib1g", "libffi8", "libssl3", "libexpat1",
    "libbz2-1.0", "liblzma5", "libcrypt1", "libuuid1", "libsqlite3-0", "libtinfo6", "libncursesw6",
    "libreadline8",
)
# The aarch64 wheels: TVM (its runtime library is all the device loads) and what it imports.
WHEELS = (
    "apache-tvm==0.27.0.post1",
    "apache-tvm-ffi==0.1.14.post1",
    "numpy==2.4.6",
    "ml_dtypes==0.6.0",
    "typing_extensions==4.16.0",
    # the RPC server (tvm.exec.rpc_server) runs its sessions in a popen worker that needs these
    "cloudpickle==3.1.2",
    "psutil==7.2.2",
)
# The compiler library is not needed on a device: dropping it keeps the cache at ~100 MB and
# proves that artifacts run with the runtime alone.
_DROP = ("tvm/lib/libtvm_compiler.so",)
_FORMAT = 1
QEMU = "qemu-aarch64"
PLUGIN_SOURCE = Path(__file__).resolve().parent / "qemu_plugin" / "insn_count.c"
# The syscall number the guest issues to mark a point in the instruction count (unused on
# aarch64 Linux: qemu answers ENOSYS; the plugin's syscall callback records the count).
MARK_SYSCALL = 4000
# The global function an RPC server started by rpc_start registers on the device: it returns
# what the device is, so that a tuning run through a tracker can say its timings are emulated.
EMULATED_DEVICE_FUNC = "tvm_pool.emulated_device"
EMULATED_DEVICE = "qemu-aarch64 user-mode emulation (tvm_pool.emulation): timings are emulated, not the hardware's"


class EmulationError(RuntimeError):
    """The emulated device cannot be built or started; the message says what is missing."""


def cache_dir() -> Path:
    env = os.environ.get("TVM_POOL_AARCH64_CACHE")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "tvm_pool" / "aarch64"


def _stamp_key() -> str:
    return hashlib.sha256(json.dumps([_FORMAT, DEBS, WHEELS]).encode()).hexdigest()[:16]


@dataclass
class Device:
    """A built emulated device: ``command()`` / ``run()`` execute aarch64 Python under qemu."""

    root: Path
    site: Path

    @property
    def python(self) -> Path:
        return self.root / "usr" / "bin" / f"python{PYTHON_VERSION}"

    @property
    def wrapper(self) -> Path:
        """A shell script that runs the device's Python (for tools that want one executable)."""
        return self.root.parent / "bin" / "python3"

    def env(self, extra: dict | None = None, *, runtime_only: bool = True) -> dict:
        env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "LD_LIBRARY_PATH", "PYTHONHOME")}
        # One guest thread unless ``extra`` says otherwise: the host's TVM_NUM_THREADS (which
        # importing tvm_pool sets, see tvm_pool.thread_pool) counts the host's cores, not the board's.
        env.update(PYTHONPATH=str(self.site), PYTHONNOUSERSITE="1", TVM_NUM_THREADS="1")
        if runtime_only:
            env["TVM_USE_RUNTIME_LIB"] = "1"
        env.update(extra or {})
        return env

    def command(self, args, *, plugin: str | None = None, qemu_args=()) -> list[str]:
        cmd = [QEMU, "-L", str(self.root)]
        if plugin:
            cmd += ["-plugin", plugin]
        return cmd + list(qemu_args) + [str(self.python), *map(str, args)]

    def run(self, args, *, env=None, plugin=None, timeout=600, **kw) -> subprocess.CompletedProcess:
        return subprocess.run(self.command(args, plugin=plugin), env=self.env(env), timeout=timeout,
                              capture_output=True, text=True, **kw)

    def libtvm_runtime(self) -> Path:
        return self.site / "tvm" / "lib" / "libtvm_runtime.so"


def _log(msg: str, quiet: bool) -> None:
    if not quiet:
        print(f"[tvm_pool.emulation] {msg}", file=sys.stderr, flush=True)


def _is_root() -> bool:
    return hasattr(os, "geteuid") and os.geteuid() == 0


def _sh(cmd, **kw) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, capture_output=True, text=True, **kw)


def ensure_qemu(quiet: bool = False) -> str:
    """The path of qemu-aarch64, installing Debian's qemu-user when missing (root + apt-get)."""
    found = shutil.which(QEMU)
    if found:
        return found
    if shutil.which("apt-get") and _is_root():
        _log("installing qemu-user (apt-get)", quiet)
        env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
        res = _sh(["apt-get", "install", "-y", "-qq", "--no-install-recommends", "qemu-user"], env=env)
        if res.returncode != 0:
            _sh(["apt-get", "update", "-qq"], env=env)
            res = _sh(["apt-get", "install", "-y", "-qq", "--no-install-recommends", "qemu-user"], env=env)
        if res.returncode == 0 and shutil.which(QEMU):
            return shutil.which(QEMU)
        raise EmulationError(f"apt-get install qemu-user failed: {res.stderr.strip()[-300:]}")
    raise EmulationError(
        f"{QEMU} not found: install Debian's qemu-user (apt-get install qemu-user; this needs root)"
    )


def _ensure_arm64_apt(quiet: bool) -> None:
    """apt must know the arm64 packages: add the architecture and update when it does not."""
    if not shutil.which("apt-get") or not shutil.which("dpkg"):
        raise EmulationError("apt-get/dpkg not found: the emulated device is built from Debian's arm64 packages")
    policy = _sh(["apt-cache", "policy", f"{DEBS[0]}:arm64"]).stdout
    if "Candidate:" in policy and "(none)" not in policy.split("Candidate:")[1].splitlines()[0]:
        return
    if not _is_root():
        raise EmulationError(
            "apt does not know the arm64 packages and this is not root: run (as root) "
            "`dpkg --add-architecture arm64 && apt-get update`, then build again"
        )
    _log("adding the arm64 architecture to apt (dpkg --add-architecture arm64; apt-get update)", quiet)
    if "arm64" not in _sh(["dpkg", "--print-foreign-architectures"]).stdout.split():
        subprocess.run(["dpkg", "--add-architecture", "arm64"], check=True)
    res = _sh(["apt-get", "update", "-qq"], env=dict(os.environ, DEBIAN_FRONTEND="noninteractive"))
    if res.returncode != 0:
        raise EmulationError(f"apt-get update failed (are the Debian mirrors reachable?): {res.stderr.strip()[-300:]}")


def _fetch_debs(root: Path, work: Path, quiet: bool) -> None:
    _ensure_arm64_apt(quiet)
    debs = work / "debs"
    debs.mkdir(parents=True, exist_ok=True)
    os.chmod(debs, 0o777)  # apt-get download drops privileges to _apt when it can
    _log(f"downloading {len(DEBS)} Debian arm64 packages", quiet)
    res = _sh(["apt-get", "download", *[f"{d}:arm64" for d in DEBS]], cwd=debs)
    if res.returncode != 0:
        raise EmulationError(f"apt-get download failed (Debian mirrors unreachable?): {res.stderr.strip()[-400:]}")
    for deb in sorted(debs.glob("*.deb")):
        subprocess.run(["dpkg", "-x", str(deb), str(root)], check=True)


def _fetch_wheels(site: Path, work: Path, quiet: bool) -> None:
    wheels = work / "wheels"
    wheels.mkdir(parents=True, exist_ok=True)
    _log(f"downloading {len(WHEELS)} aarch64 wheels (pip download)", quiet)
    cmd = [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:",
           "--python-version", PYTHON_VERSION, "--implementation", "cp",
           "--platform", "manylinux_2_28_aarch64", "--platform", "manylinux2014_aarch64",
           "-d", str(wheels), *WHEELS]
    res = _sh(cmd)
    if res.returncode != 0:
        raise EmulationError(f"pip download failed (PyPI unreachable?): {res.stderr.strip()[-400:]}")
    for whl in sorted(wheels.glob("*.whl")):
        with zipfile.ZipFile(whl) as zf:
            zf.extractall(site)
    for rel in _DROP:
        (site / rel).unlink(missing_ok=True)
    shutil.rmtree(wheels, ignore_errors=True)


def build(cache: Path | None = None, *, quiet: bool = False, force: bool = False) -> Device:
    """Build the device into ``cache`` (default :func:`cache_dir`); quick when already built."""
    cache = Path(cache) if cache else cache_dir()
    root, site, stamp = cache / "root", cache / "site", cache / "stamp.json"
    device = Device(root, site)
    ensure_qemu(quiet)
    if not force and stamp.exists() and json.loads(stamp.read_text()).get("key") == _stamp_key() \
            and device.python.exists() and device.libtvm_runtime().exists():
        return device
    _log(f"building the emulated aarch64 device in {cache}", quiet)
    t0 = time.time()
    work = cache / "tmp"
    for d in (root, site, work):
        shutil.rmtree(d, ignore_errors=True)
    stamp.unlink(missing_ok=True)
    root.mkdir(parents=True)
    site.mkdir(parents=True)
    _fetch_debs(root, work, quiet)
    _fetch_wheels(site, work, quiet)
    shutil.rmtree(work, ignore_errors=True)
    device.wrapper.parent.mkdir(parents=True, exist_ok=True)
    device.wrapper.write_text(
        "#!/bin/sh\n# The emulated aarch64 device's Python (tvm_pool.emulation).\n"
        f'PYTHONPATH="{site}" TVM_USE_RUNTIME_LIB="${{TVM_USE_RUNTIME_LIB:-1}}" '
        f'exec {QEMU} -L "{root}" "{device.python}" "$@"\n'
    )
    device.wrapper.chmod(0o755)
    check = device.run(["-c", "import numpy, tvm; from tvm.runtime.vm import VirtualMachine; print(tvm.base._RUNTIME_ONLY)"],
                       timeout=300)
    if check.returncode != 0 or "True" not in check.stdout:
        raise EmulationError(f"the emulated Python cannot import TVM's runtime: {check.stderr.strip()[-600:]}")
    stamp.write_text(json.dumps({"key": _stamp_key(), "debs": DEBS, "wheels": WHEELS}, indent=1))
    _log(f"built in {time.time() - t0:.0f} s", quiet)
    return device


# --------------------------------------------------------------------------------------------
# The instruction counter (a qemu TCG plugin)
# --------------------------------------------------------------------------------------------


def build_plugin(cache: Path | None = None) -> Path:
    """Compile the instruction-count plugin with the host's gcc (cached by source hash)."""
    cache = Path(cache) if cache else cache_dir()
    src = PLUGIN_SOURCE.read_bytes() + (PLUGIN_SOURCE.parent / "qemu-plugin-api.h").read_bytes()
    out = cache / "plugins" / f"insn_count-{hashlib.sha256(src).hexdigest()[:12]}.so"
    if out.exists():
        return out
    cc = shutil.which("gcc") or shutil.which("cc")
    if cc is None:
        raise EmulationError("gcc not found: the qemu instruction-count plugin is built with the host's C compiler")
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(".tmp.so")
    res = _sh([cc, "-O2", "-shared", "-fPIC", "-o", str(tmp), str(PLUGIN_SOURCE), f"-I{PLUGIN_SOURCE.parent}"])
    if res.returncode != 0:
        raise EmulationError(f"building the qemu plugin failed: {res.stderr.strip()[-400:]}")
    tmp.replace(out)
    return out


def plugin_arg(plugin: Path, out_file: Path) -> str:
    """The ``-plugin`` argument: count instructions, write marks and the total to ``out_file``."""
    return f"{plugin},out={out_file}"


def read_counts(out_file: Path) -> dict:
    """{"marks": [(tag, count), ...], "total": N} from the plugin's output file."""
    marks, total = [], None
    for line in Path(out_file).read_text().splitlines():
        parts = line.split()
        if parts and parts[0] == "mark":
            marks.append((int(parts[1]), int(parts[2])))
        elif parts and parts[0] == "total":
            total = int(parts[1])
    return {"marks": marks, "total": total}


# Guest-side helper (aarch64 Python): ``mark(tag)`` records the instruction count so far.
GUEST_MARK = f"""
import ctypes as _ct
_libc = _ct.CDLL(None, use_errno=True)
_libc.syscall.restype = _ct.c_long
def mark(tag):
    _libc.syscall(_ct.c_long({MARK_SYSCALL}), _ct.c_long(tag))
"""


RUNNER = Path(__file__).resolve().parent / "device_runner.py"


def _storable(arr):
    """npz cannot name bfloat16: store its bits as uint16 (the runner views them back)."""
    return arr.view("uint16") if str(arr.dtype) == "bfloat16" else arr


def _restore(arr, dtype: str):
    if dtype == "bfloat16":
        import ml_dtypes  # pylint: disable=import-outside-toplevel

        return arr.view("uint16").view(ml_dtypes.bfloat16)
    return arr


def run_artifacts(device: Device, jobs: list[dict], workdir: Path, *, count: bool = False, timeout: float = 1800,
                  env: dict | None = None) -> list[dict]:
    """Run compiled artifacts on the device in one qemu process (``tvm_pool/device_runner.py``).

    Each job: ``{"name", "module": .so, "inputs": list of arrays, "count_calls": N}``; returns
    one dict per job with ``outputs`` (list of arrays) or ``error``, and with ``count`` the
    executed aarch64 instructions of one call (``insns_per_call``), measured by the plugin."""
    import numpy as np  # pylint: disable=import-outside-toplevel

    workdir = Path(workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    spec = []
    for i, job in enumerate(jobs):
        inputs = workdir / f"in{i}.npz"
        np.savez(inputs, **{f"arr_{k}": _storable(a) for k, a in enumerate(job["inputs"])})
        spec.append({"name": job.get("name", str(i)), "module": str(job["module"]), "inputs": str(inputs),
                     "input_names": [f"arr_{k}" for k in range(len(job["inputs"]))],
                     "input_dtypes": [str(a.dtype) for a in job["inputs"]],
                     "output": str(workdir / f"out{i}.npz"), "count_calls": int(job.get("count_calls", 0)) if count else 0})
    jobs_file, results_file, counts_file = workdir / "jobs.json", workdir / "results.json", workdir / "counts.txt"
    jobs_file.write_text(json.dumps({"jobs": spec, "results": str(results_file)}))
    plugin = plugin_arg(build_plugin(), counts_file) if count else None
    extra = {"TVM_NUM_THREADS": "1", "PYTHONHASHSEED": "0"} if count else {}
    extra.update(env or {})
    res = device.run([RUNNER, jobs_file], env=extra, plugin=plugin, timeout=timeout)
    if res.returncode != 0 or not results_file.exists():
        raise EmulationError(f"the device runner failed ({res.returncode}): {(res.stdout + res.stderr)[-1500:]}")
    report = json.loads(results_file.read_text())
    marks = dict(read_counts(counts_file)["marks"]) if count else {}
    out = []
    for i, (job, r) in enumerate(zip(spec, report["results"])):
        r = dict(r, runtime_only=report["runtime_only"])
        if r.get("ok"):
            with np.load(job["output"]) as data:
                r["outputs"] = [_restore(data[f"out{k}"], d) for k, d in enumerate(r["output_dtypes"])]
            base = r.get("mark_base")
            if base is not None and base + 3 in marks:
                once = marks[base + 1] - marks[base]
                many = marks[base + 3] - marks[base + 2]
                r["insns_per_call"] = (many - once) / r["count_calls"]
        out.append(r)
    return out


# --------------------------------------------------------------------------------------------
# RPC server
# --------------------------------------------------------------------------------------------


def _pidfile(cache: Path, port: int) -> Path:
    return cache / "rpc" / f"server-{port}.pid"


def rpc_start(port: int = 9190, *, host: str = "127.0.0.1", tracker: str | None = None, key: str = "aarch64-qemu",
              cache: Path | None = None, wait: float = 180.0, quiet: bool = False) -> int:
    """Start ``python -m tvm.exec.rpc_server`` on the device (background); returns its pid.

    Without ``tracker`` it listens on ``host:port`` (connect with ``tvm.rpc.connect``); with a
    ``tracker`` (``HOST:PORT``) it registers under ``key``, like a board in a farm. Its sessions
    answer ``EMULATED_DEVICE_FUNC`` (``tvm-pool tune`` then says its timings are emulated)."""
    cache = Path(cache) if cache else cache_dir()
    device = build(cache, quiet=quiet)
    server_args = ["--host", host, "--port", str(port), "--port-end", str(port + 1)]
    if tracker:
        server_args += ["--tracker", tracker, "--key", key]
    # The server runs each session in a child Python (sys.executable). Without binfmt the host
    # cannot exec the aarch64 interpreter directly: the child goes through the wrapper script.
    # The sessions are forked from the server's process, which TVM starts as a fresh Python:
    # EMULATED_DEVICE_FUNC is registered there through Server's server_init_callback (which
    # tvm.exec.rpc_server does not expose, hence the partial).
    launcher = ("import functools, runpy, sys; from tvm import rpc; sys.executable = sys.argv[1]; "
                "sys.argv = ['rpc_server'] + sys.argv[2:]\n"
                "def mark():\n"
                "    import tvm\n"
                f"    tvm.register_global_func({EMULATED_DEVICE_FUNC!r}, lambda: {EMULATED_DEVICE!r}, override=True)\n"
                "rpc.Server = functools.partial(rpc.Server, server_init_callback=mark)\n"
                "runpy.run_module('tvm.exec.rpc_server', run_name='__main__', alter_sys=True)")
    args = ["-c", launcher, str(device.wrapper), *server_args]
    log = cache / "rpc" / f"server-{port}.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "w") as fh:
        proc = subprocess.Popen(device.command(args), env=device.env(), stdout=fh, stderr=subprocess.STDOUT,
                                start_new_session=True, cwd=str(log.parent))
    _pidfile(cache, port).write_text(str(proc.pid))
    deadline = time.time() + wait
    while time.time() < deadline:
        if proc.poll() is not None:
            raise EmulationError(f"the RPC server exited ({proc.returncode}): {log.read_text()[-600:]}")
        if "bind to" in log.read_text() or "listening" in log.read_text().lower():
            time.sleep(0.5)
            return proc.pid
        time.sleep(0.5)
    rpc_stop(port, cache=cache)
    raise EmulationError(f"the RPC server did not start within {wait:.0f} s: {log.read_text()[-600:]}")


def rpc_stop(port: int = 9190, *, cache: Path | None = None) -> bool:
    """Stop the RPC server started by :func:`rpc_start` on ``port``; False when none ran."""
    cache = Path(cache) if cache else cache_dir()
    pidfile = _pidfile(cache, port)
    if not pidfile.exists():
        return False
    pid = int(pidfile.read_text())
    pidfile.unlink()
    (cache / "rpc" / f"server-{port}.log").unlink(missing_ok=True)
    try:
        os.killpg(pid, signal.SIGTERM)  # its own session: qemu and nothing else
    except ProcessLookupError:
        return False
    for _ in range(50):
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.1)
    try:
        os.killpg(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass  # it exited after the last check: stopped all the same
    return True


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tvm_pool.emulation", description=__doc__.splitlines()[0])
    parser.add_argument("--cache", help="cache directory (default: $TVM_POOL_AARCH64_CACHE or ~/.cache/tvm_pool/aarch64)")
    sub = parser.add_subparsers(dest="cmd", required=True)
    b = sub.add_parser("build", help="fetch and unpack the device (idempotent)")
    b.add_argument("--force", action="store_true")
    r = sub.add_parser("run", help="run an aarch64 Python command on the device: run script.py ARGS / run -c CODE")
    r.add_argument("args", nargs=argparse.REMAINDER)
    s = sub.add_parser("rpc-start", help="start an RPC server under qemu (background)")
    s.add_argument("--port", type=int, default=9190)
    s.add_argument("--host", default="127.0.0.1")
    s.add_argument("--tracker", help="HOST:PORT of an RPC tracker to register with")
    s.add_argument("--key", default="aarch64-qemu")
    t = sub.add_parser("rpc-stop", help="stop the RPC server started by rpc-start")
    t.add_argument("--port", type=int, default=9190)
    sub.add_parser("plugin", help="build the instruction-count plugin and print its path")
    argv = list(sys.argv[1:] if argv is None else argv)
    if "run" in argv:  # everything after `run` goes to the device's Python, options included
        at = argv.index("run")
        args = parser.parse_args(argv[: at + 1])
        args.args = argv[at + 1 :]
    else:
        args = parser.parse_args(argv)
    cache = Path(args.cache) if args.cache else None
    try:
        if args.cmd == "build":
            device = build(cache, force=args.force)
            print(f"root {device.root}\nsite {device.site}\npython {device.wrapper}")
        elif args.cmd == "run":
            device = build(cache, quiet=True)
            return subprocess.run(device.command(args.args), env=device.env()).returncode
        elif args.cmd == "rpc-start":
            pid = rpc_start(args.port, host=args.host, tracker=args.tracker, key=args.key, cache=cache)
            print(f"RPC server pid {pid} on {args.host}:{args.port}")
        elif args.cmd == "rpc-stop":
            print("stopped" if rpc_stop(args.port, cache=cache) else "no server was running")
        elif args.cmd == "plugin":
            print(build_plugin(cache))
    except EmulationError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
