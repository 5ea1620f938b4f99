"""The RPC tracker and the devices registered with it under a key: configuration, the check
before a run, and what each measurement needs of a device (its inputs filled)."""

from __future__ import annotations

import socket
from dataclasses import dataclass

import tvm

from ..errors import TvmPoolError
from .logs import TVM_ERRORS, short_error


def rpc_config(rpc):
    """``{"tracker": "HOST:PORT", "key": KEY, "timeout": S}`` or ``"HOST:PORT/KEY"`` -> RPCConfig
    (``timeout``: the session timeout, 60 s by default)."""
    from tvm.s_tir.meta_schedule.runner import RPCConfig  # pylint: disable=import-outside-toplevel

    if isinstance(rpc, RPCConfig):
        return rpc
    if isinstance(rpc, str):
        tracker, _, key = rpc.partition("/")
        rpc = {"tracker": tracker, "key": key}
    tracker, key = rpc.get("tracker", ""), rpc.get("key", "")
    host, _, port = str(tracker).rpartition(":")
    if not host or not port.isdigit() or not key:
        raise TvmPoolError(f"invalid RPC tracker {tracker!r} / key {key!r}: use HOST:PORT and a key")
    return RPCConfig(
        tracker_host=host,
        tracker_port=int(port),
        tracker_key=str(key),
        session_timeout_sec=int(rpc.get("timeout", 60)),
    )


def rpc_workers(rpc, devices: int) -> int:
    """Candidates measured at once: ``rpc["workers"]`` when given, else one per device."""
    workers = rpc.get("workers") if isinstance(rpc, dict) else None
    if workers is None:
        return max(1, devices)
    if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
        raise TvmPoolError(f"RPC workers must be an integer >= 1, got {workers!r}")
    return workers


def tracker_summary(config) -> dict:
    """The tracker's summary (``server_info``: a server per connection, busy ones included;
    ``queue_info``: free and pending per key); TvmPoolError in one line when it does not answer."""
    from tvm import rpc as tvm_rpc  # pylint: disable=import-outside-toplevel

    where = f"{config.tracker_host}:{config.tracker_port}"
    try:
        # TVM's own connect retries a refused connection for 60 s
        socket.create_connection((config.tracker_host, config.tracker_port), timeout=10).close()
        return tvm_rpc.connect_tracker(config.tracker_host, config.tracker_port).summary()
    except (OSError, *TVM_ERRORS) as err:  # refused, reset, timed out, or not a tracker
        raise TvmPoolError(f"RPC tracker {where} does not answer: {short_error(err)}") from None


def server_keys(summary) -> list[str]:
    """The key of every server the tracker lists (one entry per server)."""
    return [str(item.get("key", "")).partition(":")[2] for item in summary.get("server_info", [])]


def count_devices(config) -> int:
    """Servers registered under the config's key (TvmPoolError when the tracker does not answer)."""
    return server_keys(tracker_summary(config)).count(config.tracker_key)


@dataclass
class RpcDevice:
    """What :func:`rpc_device` learnt from the devices behind the tracker."""

    threads: int  # TVM's thread count there: the target's num-cores when it names none
    emulated: str | None = None  # the emulated device's description; None for real hardware
    count: int = 1  # servers registered under the key when the run began


def rpc_device(rpc) -> RpcDevice:
    """Check the tracker and the devices before tuning, and ask one of them what it is.

    A tracker that does not answer, or has no server under the key, fails here in one line
    (TvmPoolError) instead of in every candidate's measurement. The servers under the key are
    counted (a worker each, :mod:`.farm`); one session is then opened: an RPC server started
    by :mod:`tvm_pool.emulation` answers ``EMULATED_DEVICE_FUNC`` with a description of the
    emulation (its timings are not the hardware's); a real device has no such function. The
    devices under one key are taken to be alike (TVM's tracker hands out any of them)."""
    from ..emulation import EMULATED_DEVICE_FUNC  # pylint: disable=import-outside-toplevel

    config = rpc_config(rpc)
    keys = server_keys(tracker_summary(config))
    if config.tracker_key not in keys:
        raise TvmPoolError(
            f"no RPC server with key {config.tracker_key!r} on the tracker {config.tracker_host}:{config.tracker_port} "
            f"(registered: {', '.join(map(repr, sorted(set(keys)))) or 'none'})"
        )
    session = config.connect_server()
    device = RpcDevice(threads=int(session.get_function("runtime.NumThreads")()), count=keys.count(config.tracker_key))
    try:
        device.emulated = str(session.get_function(EMULATED_DEVICE_FUNC)())
    except AttributeError:  # real hardware
        pass
    return device


def alloc_argument(session, device, args_info, alloc_repeat):
    """The measurement's inputs on the device (RPCRunner's ``f_alloc_argument``). MetaSchedule's
    default fills them on the device with ``tvm.contrib.random.random_fill_for_measure``, which
    TVM's runtime-only library (all a device without a compiler has, e.g. the aarch64 wheel's)
    lacks: there they are filled here by the same function and copied to the device."""
    # pylint: disable=import-outside-toplevel
    from tvm.s_tir.meta_schedule.runner.utils import alloc_argument_common

    name = "tvm.contrib.random.random_fill_for_measure"
    try:
        fill = session.get_function(name)
    except AttributeError:
        fill_here = tvm.get_global_func(name)

        def fill(tensor):
            host = tvm.runtime.empty(tensor.shape, tensor.dtype, tvm.cpu())
            fill_here(host)
            host.copyto(tensor)

    return alloc_argument_common(fill, device, args_info, alloc_repeat)
