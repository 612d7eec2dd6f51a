"""Fleet replay on a Ray cluster: the same per-file work as the local backend, as Ray tasks.

Each file is one task running `job.replay_one`, the function a local worker runs, so a file's
outcome is the same whichever backend replayed it. Ray pickles ``replay_one`` by reference: the
workers import it from their own ``spectally`` installation (every node needs
``pip install 'spectally[bridge]'`` of the same version, and the log paths must be readable
there: a shared file system, or the same paths on every node). Ray is an optional extra
(``spectally[ray]``); nothing imports it unless ``--ray`` is given.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from .job import (
    BackendUnavailable,
    FileOutcome,
    ReplayOptions,
    internal_error,
    regular_file,
    replay_one,
)


class RayUnavailable(BackendUnavailable):
    """Ray is missing, the cluster cannot be reached, or its workers cannot run spectally.
    ``stuck``: a Ray call is still hanging in a background thread (exit without waiting)."""


# ray.init retries an unreachable GCS for minutes on end; no answer in this long is an error.
CONNECT_TIMEOUT_S = 120.0
CONNECT_TIMEOUT_ENV = "SPECTALLY_RAY_CONNECT_TIMEOUT"


def connect_timeout() -> float:
    try:
        return float(os.environ.get(CONNECT_TIMEOUT_ENV, CONNECT_TIMEOUT_S))
    except ValueError:
        return CONNECT_TIMEOUT_S


# A TCP connect to a "host:port" address before ray.init: a port nothing listens on is refused
# at once, where ray.init would retry it until the connect timeout.
PROBE_TIMEOUT_S = 2.0


def probe_address(address: str, timeout: float = PROBE_TIMEOUT_S) -> None:
    """`RayUnavailable` when nothing listens at a ``host:port`` or ``ray://host:port``
    address (the connection is refused); anything else (``auto``, ``local``, a slow or
    unresolvable host) is left to ``ray.init``, which reports it in its own words."""
    hostport = address.removeprefix("ray://")
    host, sep, port = hostport.rpartition(":")
    if not sep or not port.isdigit() or not host:
        return
    host = host.removeprefix("[").removesuffix("]")  # an IPv6 literal
    try:
        with socket.create_connection((host, int(port)), timeout=timeout):
            return
    except ConnectionRefusedError:
        raise RayUnavailable(
            f"cannot connect to the Ray cluster at {address!r}: nothing listens at"
            f" {host}:{port} (connection refused); is the head running (ray start --head)?"
        ) from None
    except (OSError, ValueError, OverflowError):
        return


def _init(ray: Any, address: str, timeout: float) -> None:
    """``ray.init`` with a deadline: it runs in a daemon thread the driver stops waiting for.
    Ray's logger at ERROR: its warnings (here, that a non-main thread sets no SIGTERM handler)
    would make stderr differ from a local run's; its failures raise."""
    failed: list[BaseException] = []

    def init() -> None:
        try:
            ray.init(address=address, logging_level=logging.ERROR, log_to_driver=False)
        except BaseException as exc:  # handed to the caller below
            failed.append(exc)

    thread = threading.Thread(target=init, name="ray.init", daemon=True)
    thread.start()
    thread.join(timeout)
    if thread.is_alive():
        raise RayUnavailable(
            f"no Ray cluster answered at {address!r} within {timeout:g} s ({CONNECT_TIMEOUT_ENV}"
            " sets the limit); for a head bound to 127.0.0.1, set"
            " RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0 for this command too (docs/fleet.md)",
            stuck=True,
        )
    if failed:
        exc = failed[0]
        raise RayUnavailable(
            f"cannot connect to the Ray cluster at {address!r}: {type(exc).__name__}: {exc}"
        )


def _probe() -> str:
    """Runs on a worker: proves it can import the replay (fails there if spectally is absent)."""
    from spectally import __version__
    from spectally.engine_bridge.replay import dispatch  # noqa: F401 - the import is the check

    return str(__version__)


def connect(address: str) -> tuple[Any, bool]:
    """``ray.init(address=...)`` (``auto``: the cluster this machine joined / RAY_ADDRESS;
    ``ray://host:10001``: a remote cluster's client server; ``local``: a throwaway local Ray),
    then one probe task. Returns the ``ray`` module and whether this call connected (and so
    must disconnect). A refused ``host:port`` fails at once (`probe_address`), Ray or not."""
    probe_address(address)
    try:
        import ray  # type: ignore[import-not-found, unused-ignore]
    except ImportError as exc:
        raise RayUnavailable(f"--ray needs Ray: pip install 'spectally[ray]' ({exc})") from None
    owned = not ray.is_initialized()
    timeout = connect_timeout()
    if owned:
        _init(ray, address, timeout)
    from spectally import __version__

    try:
        version = ray.get(ray.remote(num_cpus=0)(_probe).remote(), timeout=timeout)
    except Exception as exc:
        if owned:
            ray.shutdown()
        raise RayUnavailable(
            f"the Ray workers cannot run spectally ({type(exc).__name__}: {exc});"
            " install spectally[bridge] on every node (docs/fleet.md)"
        ) from None
    if version != __version__:
        if owned:
            ray.shutdown()
        raise RayUnavailable(
            f"the Ray workers run spectally {version}, this driver {__version__}:"
            " install the same version on every node"
        )
    return ray, owned


def replay_ray(paths: Sequence[str], options: ReplayOptions, address: str) -> Iterator[FileOutcome]:
    """Every file's outcome in input order, each replayed by one Ray task (1 CPU). Stdin and
    pipes exist only here, so the driver replays those itself."""
    ray, owned = connect(address)
    refs: dict[int, Any] = {}
    try:
        task = ray.remote(num_cpus=1)(replay_one)
        refs = {i: task.remote(p, options) for i, p in enumerate(paths) if regular_file(p)}
        here = {i: replay_one(p, options) for i, p in enumerate(paths) if i not in refs}
        for i, path in enumerate(paths):
            if i in here:
                yield here.pop(i)
                continue
            try:
                outcome: FileOutcome = ray.get(refs.pop(i))
            except Exception as exc:  # the task's worker died, or the cluster went away
                outcome = internal_error(path, exc)
            yield outcome
    finally:
        for ref in refs.values():
            ray.cancel(ref, force=True)
        if owned:
            ray.shutdown()


# -- a throwaway local cluster (the Ray test tier and the benchmark) -------------------------------

# Ray binds its servers to loopback only when the node IP is 127.0.0.1, and keeps 127.0.0.1 only
# when told the cluster is single-machine (otherwise it swaps in the machine's routable address).
# Drivers of such a cluster need the same variable.
LOOPBACK_ENV = {"RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0", "RAY_USAGE_STATS_ENABLED": "0"}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _session_pids(sid: int) -> list[int]:
    """Every live process of session ``sid`` (the head's, Ray's services and workers)."""
    pids = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            with contextlib.suppress(OSError):
                if os.getsid(int(entry)) == sid:
                    pids.append(int(entry))
    return pids


def _end_session(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM to the head's process group (``ray start --block`` stops its services), then
    SIGKILL whatever is left of its session: nothing of the cluster outlives it."""
    sid = proc.pid
    with contextlib.suppress(ProcessLookupError):
        os.killpg(sid, signal.SIGTERM)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=10)  # a graceful stop under load takes seconds; then no more patience
    deadline = time.monotonic() + 5
    while _session_pids(sid) and time.monotonic() < deadline:
        time.sleep(0.5)
    for pid in _session_pids(sid):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    if proc.poll() is None:
        proc.kill()
        proc.wait(timeout=10)


@contextlib.contextmanager
def local_head(num_cpus: int = 2, start_timeout_s: float = 180.0) -> Iterator[str]:
    """A fresh Ray head on 127.0.0.1 (``ray start --head --block``, in its own session, with
    `LOOPBACK_ENV`); yields its address; ends the whole session on exit, pass or fail. Linux
    only (it finds the session's processes in /proc)."""
    ray_bin = Path(sys.executable).parent / "ray"
    if not ray_bin.exists():
        raise RayUnavailable(f"{ray_bin} is missing: pip install 'spectally[ray]'")
    port = _free_port()
    temp = tempfile.mkdtemp(prefix="sptray", dir="/tmp")  # short: Ray's socket paths are long
    log_path = Path(temp) / "head.log"
    args = [str(ray_bin), "start", "--head", "--block", "--num-cpus", str(num_cpus)]
    args += ["--node-ip-address", "127.0.0.1", "--port", str(port), "--temp-dir", temp]
    args += ["--include-dashboard", "false", "--disable-usage-stats"]
    args += ["--object-store-memory", str(200 * 1024 * 1024)]
    previous = None
    if threading.current_thread() is threading.main_thread():
        # A SIGTERM (a CI timeout) must still run the `finally` below: the head lives in its
        # own session and would outlive this process otherwise.
        previous = signal.signal(signal.SIGTERM, _exit_on_sigterm)
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(
            args,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env={**os.environ, **LOOPBACK_ENV},
            start_new_session=True,
        )
        try:
            deadline = time.monotonic() + start_timeout_s
            text = ""
            while "Ray runtime started" not in text:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RayUnavailable(
                        f"ray start did not come up (exit {proc.poll()}):\n{text[-3000:]}"
                    )
                time.sleep(0.5)
                text = log_path.read_text(errors="replace")
            yield f"127.0.0.1:{port}"
        finally:
            _end_session(proc)
            shutil.rmtree(temp, ignore_errors=True)
            if previous is not None:
                signal.signal(signal.SIGTERM, previous)


def _exit_on_sigterm(signum: int, frame: object) -> None:
    raise SystemExit(128 + signum)
