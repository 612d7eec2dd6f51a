"""Fleet replay on a Ray cluster: the same per-file work as the local backend, as Ray tasks.

Each file is one task running `fleet.replay_one`, the function a local worker runs, so a file's
outcome is the same whichever backend replayed it. Ray pickles ``replay_one`` by reference: the
workers import it from their own ``spectally`` installation (every node needs
``pip install 'spectally[bridge]'`` of the same version, and the log paths must be readable
there: a shared file system, or the same paths on every node). Ray is an optional extra
(``spectally[ray]``); nothing imports it unless ``--ray`` is given.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from typing import Any

from .fleet import FileOutcome, ReplayOptions, internal_error, regular_file, replay_one


class RayUnavailable(RuntimeError):
    """Ray is missing, the cluster cannot be reached, or its workers cannot run spectally."""


def _probe() -> str:
    """Runs on a worker: proves it can import the replay (fails there if spectally is absent)."""
    from spectally import __version__
    from spectally.engine_bridge import replay  # noqa: F401 - the import is the check

    return str(__version__)


def connect(address: str) -> tuple[Any, bool]:
    """``ray.init(address=...)`` (``auto``: the cluster this machine joined / RAY_ADDRESS;
    ``ray://host:10001``: a remote cluster's client server; ``local``: a throwaway local Ray),
    then one probe task. Returns the ``ray`` module and whether this call connected (and so
    must disconnect)."""
    try:
        import ray  # type: ignore[import-not-found, unused-ignore]
    except ImportError as exc:
        raise RayUnavailable(f"--ray needs Ray: pip install 'spectally[ray]' ({exc})") from None
    owned = not ray.is_initialized()
    if owned:
        try:
            ray.init(address=address, logging_level=logging.WARNING, log_to_driver=False)
        except Exception as exc:  # ConnectionError, ValueError, RuntimeError, ...: Ray's own
            raise RayUnavailable(
                f"cannot connect to the Ray cluster at {address!r}: {type(exc).__name__}: {exc}"
            ) from None
    from spectally import __version__

    try:
        version = ray.get(ray.remote(num_cpus=0)(_probe).remote())
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
