"""Fleet replay: many step logs (one per engine core, data-parallel rank, replica or day) replayed
on every local core, or on a Ray cluster (`fleet_ray`), with one merged report.

Each log is independent, so the unit of work is one whole file: a worker runs exactly the
sequential `replay_file` on it and turns the `ReplayResult` into plain data (`FileOutcome`: the
rendered report, the JSON view, the reference `Counters`, the header's engine and config). The
parent only orders and merges; it never replays. So a file's verdict, report and exit code are
those of a sequential run by construction, and results come back in input order whatever the
scheduling.

The report (totals merged through the reference's own merge, per engine, the shift) is
`fleet_report`.

Local workers: the standard library's `concurrent.futures.ProcessPoolExecutor` (why, rather than
multiprocessing.Pool, joblib or xargs -P: docs/fleet.md). Workers are started once per run from a
fork server that has already imported the replay modules, then reused for every file, so the
~1 s interpreter + import start-up is paid once per worker, not once per file.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import stat
import tempfile
import traceback
from collections.abc import Callable, Generator, Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from dataclasses import dataclass
from typing import Any, cast

from spectally.exit_codes import ExitCode
from spectally.reference.counters import Counters

from .replay import render_summary, replay_file, result_json

# Modules every worker needs; the fork server imports them once, workers inherit them.
PRELOAD = ["spectally.engine_bridge.fleet", "spectally.engine_bridge.replay"]


def usable_cores() -> int:
    """The cores this process may run on (CPU affinity / cgroup cpusets), not the machine's."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - no sched_getaffinity (macOS, Windows)
        return os.cpu_count() or 1


@dataclass(frozen=True)
class ReplayOptions:
    """`replay_file`'s options, the same for every file of a fleet."""

    max_divergences: int = 1
    metrics: str | None = None
    check_invariants: bool = False
    reference: bool = False  # --reference: the plain reference replay, no columnar checker
    force_profile: str | None = None  # --force-profile: count every log under this profile


@dataclass(frozen=True)
class EngineInfo:
    """What the header says about the engine that wrote a log: the per-engine breakdown's key."""

    engine_index: int | None
    engine: str
    profile: str | None
    scheduling: str
    k: int
    spec_method: str
    structured_outputs_backend: str | None
    adaptive_verification: bool
    drop_stale_output: bool
    profile_forced: bool = False  # the profile came from --force-profile, not the header

    def label(self) -> str:
        index = "engine ?" if self.engine_index is None else f"engine {self.engine_index}"
        forced = " FORCED" if self.profile_forced else ""
        return (
            f"{index}: {self.engine}, {self.profile or 'no'} profile{forced}, {self.scheduling},"
            f" k={self.k}, {self.spec_method}, SO {self.structured_outputs_backend or 'off'},"
            f" AV {'on' if self.adaptive_verification else 'off'},"
            f" drop_stale_output {str(self.drop_stale_output).lower()}"
        )

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass(frozen=True)
class FileOutcome:
    """One replayed file as plain, picklable data (a `ReplayResult` holds a `BadInput`, whose
    pickled form does not rebuild, so nothing but this crosses a process boundary)."""

    path: str
    status: str
    exit_code: int
    report: str  # render_summary(result): exactly what a sequential run prints for this file
    report_to_stderr: bool  # bad input goes to stderr, like the sequential command
    result: dict[str, Any]  # result_json(result)
    totals: Counters | None
    shift_terms: dict[str, int] | None
    engine: EngineInfo | None
    first_divergence: str | None  # first line of the first divergence / the bad-input message


def regular_file(path: str) -> bool:
    """A path that can be opened twice and by another process: not stdin, a pipe or a device."""
    if path == "-":
        return False
    try:
        return stat.S_ISREG(os.stat(path).st_mode)
    except OSError:
        return True  # missing or unreadable: any worker reports it the same way


def read_engine_info(path: str, force_profile: str | None = None) -> EngineInfo | None:
    """The header of a regular file (read again: `ReplayResult` does not carry it); None when
    the first line is not a valid header (the replay itself reports why). ``force_profile``:
    the profile --force-profile gives every log."""
    from .profiles import resolve
    from .records import BadInput, iter_lines, parse_line
    from .translate import Header

    if not regular_file(path):
        return None
    try:
        # iter_lines is a generator: close it now, so the file is not left open until collected
        lines = cast("Generator[tuple[int, bytes, bool], None, None]", iter_lines(path))
        try:
            first = next(lines, None)
        finally:
            lines.close()
        if first is None:
            return None
        rec = parse_line(path, *first)
        if rec.get("record") != "header":
            return None
        h = resolve(Header.from_record(rec), force_profile)
    except (BadInput, OSError, ValueError, KeyError, TypeError):
        return None
    return EngineInfo(
        engine_index=h.engine_index,
        engine=f"{h.engine} {h.engine_version}",
        profile=h.profile,
        scheduling=h.mode.value,
        k=h.k,
        spec_method=h.spec_method,
        structured_outputs_backend=h.structured_outputs_backend,
        adaptive_verification=h.adaptive_verification,
        drop_stale_output=h.drop_stale_output,
        profile_forced=force_profile is not None,
    )


def internal_error(path: str, exc: Exception) -> FileOutcome:
    """A bug while replaying one file: one line naming the full report; the other files go on."""
    fd, report_path = tempfile.mkstemp(prefix="spectally-internal-", suffix=".txt")
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(f"spectally replay {path}\n")
        f.write("".join(traceback.format_exception(exc)))
    line = (
        f"{path}: internal error: {type(exc).__name__}: {exc}"
        f" (full report: {report_path}; please report it)"
    )
    return FileOutcome(
        path=path,
        status="internal_error",
        exit_code=int(ExitCode.INTERNAL_ERROR),
        report=line,
        report_to_stderr=True,
        result={
            "path": path,
            "status": "internal_error",
            "exit_code": int(ExitCode.INTERNAL_ERROR),
            "internal_error": line,
            "report": report_path,
        },
        totals=None,
        shift_terms=None,
        engine=None,
        first_divergence=line,
    )


def replay_one(path: str, options: ReplayOptions, progress: bool | None = False) -> FileOutcome:
    """Replay one file exactly as the sequential command does; the unit of work of every backend
    (in-process, local worker process, Ray task)."""
    try:
        engine = read_engine_info(path, options.force_profile)
        result = replay_file(
            path,
            max_divergences=options.max_divergences,
            metrics=options.metrics,
            check_invariants=options.check_invariants,
            progress=progress,
            reference=options.reference,
            force_profile=options.force_profile,
        )
        first: str | None = None
        if result.bad_input is not None:
            first = str(result.bad_input)
        elif result.divergences:
            first = result.divergences[0].render().split("\n", 1)[0]
        shift = result.summary.get("shift")
        return FileOutcome(
            path=path,
            status=result.status,
            exit_code=result.exit_code,
            report=render_summary(result),
            report_to_stderr=result.bad_input is not None,
            result=result_json(result),
            totals=result.totals,
            shift_terms=dict(shift["terms"]) if shift else None,
            engine=engine,
            first_divergence=first,
        )
    except Exception as exc:  # a bug, not an input problem: this file's verdict is "internal"
        return internal_error(path, exc)


# -- local backend -------------------------------------------------------------------------------


def _ignore_sigint() -> None:
    """Worker initializer: Ctrl-C is the parent's to handle (it stops the workers itself), so a
    worker never dies half-way through a report with its own KeyboardInterrupt traceback."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def mp_context() -> multiprocessing.context.BaseContext:
    """A fork server where the platform has one (safe with threads in the parent, and its
    workers fork from a process that already imported the replay), else spawn."""
    if "forkserver" in multiprocessing.get_all_start_methods():
        ctx = multiprocessing.get_context("forkserver")
        ctx.set_forkserver_preload(PRELOAD)
        return ctx
    return multiprocessing.get_context("spawn")  # pragma: no cover - no fork server (Windows)


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
    """Cancel what has not started and end the running workers (Ctrl-C, or an error here)."""
    pool.shutdown(wait=False, cancel_futures=True)
    processes = getattr(pool, "_processes", None) or {}
    for proc in list(processes.values()):
        if proc.is_alive():
            proc.terminate()


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
        for path in paths:
            yield replay_one(path, options, progress)
        return
    shipped = set(shippable)
    here = [i for i in range(len(paths)) if i not in shipped]
    yield from _in_order(len(paths), _pooled(paths, shippable, here, options, jobs))


def _pooled(
    paths: Sequence[str], shippable: list[int], here: list[int], options: ReplayOptions, jobs: int
) -> Iterator[tuple[int, FileOutcome]]:
    pool = ProcessPoolExecutor(
        max_workers=min(jobs, len(shippable)), mp_context=mp_context(), initializer=_ignore_sigint
    )
    try:
        futures: dict[Future[FileOutcome], int] = {
            pool.submit(replay_one, paths[i], options): i for i in _largest_first(paths, shippable)
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
                except Exception as exc:  # the worker process died (killed, out of memory)
                    yield i, internal_error(paths[i], exc)
    except BaseException:  # Ctrl-C, or the consumer stopped early: leave no worker behind
        _stop(pool)
        raise
    pool.shutdown(wait=True)


def run_fleet(
    paths: Sequence[str],
    options: ReplayOptions,
    *,
    jobs: int,
    ray_address: str | None = None,
    progress: bool | None = None,
    on_outcome: Callable[[FileOutcome], None] | None = None,
) -> list[FileOutcome]:
    """Replay ``paths`` locally (``jobs`` processes) or as Ray tasks (``ray_address``); every
    outcome in input order, each passed to ``on_outcome`` as soon as it and those before it are
    done (so reports stream like a sequential run's)."""
    if ray_address is not None:
        from .fleet_ray import replay_ray

        source: Iterator[FileOutcome] = replay_ray(paths, options, ray_address)
    else:
        source = replay_local(paths, options, jobs, progress)
    outcomes: list[FileOutcome] = []
    for outcome in source:
        outcomes.append(outcome)
        if on_outcome is not None:
            on_outcome(outcome)
    return outcomes
