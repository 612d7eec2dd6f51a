"""The local fleet backend: many step logs (one per engine core, data-parallel rank, replica or
day) replayed on every local core, results in input order whatever the scheduling.

Each log is independent, so the unit of work is one whole file (`job.replay_one`). The parent
only orders and merges; it never replays.

Workers: the standard library's `concurrent.futures.ProcessPoolExecutor` (why, rather than
multiprocessing.Pool, joblib or xargs -P: docs/fleet.md). Workers are started once per run from a
fork server that has already imported the replay modules, then reused for every file, so the
~1 s interpreter + import start-up is paid once per worker, not once per file.
"""

from __future__ import annotations

import dataclasses
import os
import signal
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING

from ..steplog.source import log_bytes
from .job import FileOutcome, ReplayOptions, internal_error, regular_file, replay_one

# multiprocessing and concurrent.futures are imported where a pool starts (`_pooled`,
# `mp_context`): a replay of one log (the usual command) runs in this process and does not
# pay their import (~0.01 s of its start-up).
if TYPE_CHECKING:
    import multiprocessing.context
    from concurrent.futures import ProcessPoolExecutor

# Modules every worker needs; the fork server imports them once, workers inherit them.
PRELOAD = ["spectally.engine_bridge.fleet.job", "spectally.engine_bridge.replay.dispatch"]


def usable_cores() -> int:
    """The cores this process may run on (CPU affinity / cgroup cpusets), not the machine's."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - no sched_getaffinity (macOS, Windows)
        return os.cpu_count() or 1


def _ignore_sigint() -> None:
    """Worker initializer: Ctrl-C is the parent's to handle (it stops the workers itself), so a
    worker never dies half-way through a report with its own KeyboardInterrupt traceback."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def mp_context() -> multiprocessing.context.BaseContext:
    """A fork server where the platform has one (safe with threads in the parent, and its
    workers fork from a process that already imported the replay), else spawn."""
    import multiprocessing

    if "forkserver" in multiprocessing.get_all_start_methods():
        ctx = multiprocessing.get_context("forkserver")
        # The fork server is `python -c ...`, whose sys.path starts with the working directory,
        # and it imports the preloaded modules before it takes this process's sys.path: from a
        # folder holding `spectally/`, that folder would be imported as the package. Python
        # 3.11's PYTHONSAFEPATH (`_no_working_directory`) keeps it out; without it, no preload
        # (each worker imports the replay once, with this process's sys.path).
        ctx.set_forkserver_preload(PRELOAD if sys.version_info >= (3, 11) else [])
        return ctx
    return multiprocessing.get_context("spawn")  # pragma: no cover - no fork server (Windows)


@contextmanager
def _no_working_directory() -> Iterator[None]:
    """While processes start: PYTHONSAFEPATH=1, so a fork server started now (and the workers
    it forks) never puts the working directory on sys.path; the fleet's workers import the
    installed package wherever the user stands."""
    before = os.environ.get("PYTHONSAFEPATH")
    os.environ["PYTHONSAFEPATH"] = "1"
    try:
        yield
    finally:
        if before is None:
            del os.environ["PYTHONSAFEPATH"]
        else:
            os.environ["PYTHONSAFEPATH"] = before


def _largest_first(paths: Sequence[str], indices: list[int]) -> list[int]:
    """Submission order: the biggest files first, so no worker starts a long file last while
    the others sit idle (the report order is the input order regardless)."""

    def size(i: int) -> int:
        try:
            return os.stat(paths[i]).st_size
        except OSError:
            return 0

    return sorted(indices, key=lambda i: (-size(i), i))


def _in_order(n: int, ready: Iterator[tuple[int, FileOutcome]]) -> Iterator[FileOutcome]:
    """Yield outcomes in input order as soon as each one and all before it are done."""
    held: dict[int, FileOutcome] = {}
    nxt = 0
    for i, outcome in ready:
        held[i] = outcome
        while nxt in held:
            yield held.pop(nxt)
            nxt += 1
    assert nxt == n, f"{n - nxt} outcomes missing"


def _stop(pool: ProcessPoolExecutor) -> None:
    """Cancel what has not started and end the running workers at once (Ctrl-C, or an error
    here). The workers are taken before `shutdown`, which forgets them."""
    processes = list((getattr(pool, "_processes", None) or {}).values())
    for proc in processes:
        if proc.is_alive():
            proc.terminate()
    pool.shutdown(wait=False, cancel_futures=True)
    for proc in processes:
        proc.join(5)
        if proc.is_alive():  # pragma: no cover - a worker that ignores SIGTERM
            proc.kill()


def replay_local(
    paths: Sequence[str],
    options: ReplayOptions,
    jobs: int,
    progress: bool | None = None,
) -> Iterator[FileOutcome]:
    """Every file's outcome, in input order, replayed by up to ``jobs`` worker processes.

    ``jobs <= 1`` (or a single file) replays in this process, one file after another: the
    sequential command. Stdin and other non-regular files (pipes) can be read once and only by
    this process, so they are always replayed here, while the workers run.
    """
    shippable = [i for i, p in enumerate(paths) if regular_file(p)]
    if jobs <= 1 or len(shippable) <= 1:
        options = _with_run_bytes(options, _bytes(paths, shippable))
        for path in paths:
            yield replay_one(path, options, progress)
        return
    shipped = set(shippable)
    here = [i for i in range(len(paths)) if i not in shipped]
    workers = min(jobs, len(shippable))
    options = _with_run_bytes(options, _bytes(paths, shippable) // workers)
    yield from _in_order(len(paths), _pooled(paths, shippable, here, options, workers))


def _bytes(paths: Sequence[str], indices: list[int]) -> int:
    """The (decompressed) bytes of the regular files among ``paths``, as far as they tell."""
    return sum(log_bytes(paths[i]) or 0 for i in indices)


def _with_run_bytes(options: ReplayOptions, run_bytes: int) -> ReplayOptions:
    """``options`` with the bytes one process replays in this run (`ReplayOptions.run_bytes`),
    unless the caller set them."""
    if options.run_bytes:
        return options
    return dataclasses.replace(options, run_bytes=run_bytes)


def _pooled(
    paths: Sequence[str], shippable: list[int], here: list[int], options: ReplayOptions, jobs: int
) -> Iterator[tuple[int, FileOutcome]]:
    from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait

    pool = ProcessPoolExecutor(
        max_workers=jobs, mp_context=mp_context(), initializer=_ignore_sigint
    )
    try:
        with _no_working_directory():  # the first submit starts the fork server and workers
            futures: dict[Future[FileOutcome], int] = {
                pool.submit(replay_one, paths[i], options): i
                for i in _largest_first(paths, shippable)
            }
        for i in here:
            yield i, replay_one(paths[i], options, False)
        pending = set(futures)
        while pending:
            done, pending = wait(pending, return_when=FIRST_COMPLETED)
            for fut in done:
                i = futures[fut]
                try:
                    yield i, fut.result()
                except ModuleNotFoundError:  # an extra not installed: the command names it
                    raise
                except Exception as exc:  # the worker process died (killed, out of memory)
                    yield i, internal_error(paths[i], exc)
    except BaseException:  # Ctrl-C, or the consumer stopped early: leave no worker behind
        _stop(pool)
        raise
    pool.shutdown(wait=True)
