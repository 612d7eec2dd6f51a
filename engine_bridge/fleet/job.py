"""One file of a fleet, the unit of work every backend runs: `replay_one` replays it exactly as
the sequential `replay_file` does and turns the `ReplayResult` into plain, picklable data
(`FileOutcome`: the rendered report, the JSON view, the reference `Counters`, the header's engine
and config). The local and Ray backends (`local`, `ray`) both ship this function and these types,
so a file's verdict, report and exit code are those of a sequential run whichever backend ran it.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Generator, Sequence
from dataclasses import dataclass
from typing import Any, cast

from spectally.exit_codes import ExitCode, Verdict
from spectally.reference.counters import Counters
from spectally.reference.errors import SpectallyError

from ..replay.dispatch import render_summary, replay_file, result_json
from ..replay.options import ReplayOptions as ReplayOptions
from ..steplog.records import BadInput
from ..steplog.source import copies, first_repeat


class BackendUnavailable(SpectallyError):
    """A fleet backend cannot run the files (Ray missing or unreachable): bad usage, exit 2.
    ``stuck``: a call is still hanging in a background thread (exit without waiting)."""

    def __init__(self, message: str, *, stuck: bool = False) -> None:
        super().__init__(message)
        self.stuck = stuck


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
    status: Verdict
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


def check_distinct(paths: Sequence[str]) -> None:
    """`BadInput` naming the second path when two name one log (`source.first_repeat`: the
    same device and inode, through every symlink; ``-`` twice: stdin reads once): the fleet
    would count it twice. A missing or unreadable path is left to its replay to report."""
    repeat = first_repeat(paths)
    if repeat is not None:
        first, second = paths[repeat[0]], paths[repeat[1]]
        raise BadInput(
            second,
            1,
            1,
            f"the same log as {first!r}, given twice: its counts would enter the fleet"
            " totals twice (name each log once)",
        )


def copy_notes(paths: Sequence[str]) -> list[str]:
    """A note for each path holding the same log as an earlier one (`source.copies`): a copy
    or a gzipped copy would enter the fleet totals twice, but a byte-identical rerun of a
    deterministic engine is two runs, so the user decides; nothing is refused."""
    return [
        f"note: {paths[later]} holds the same log as {paths[first]} (the same decompressed"
        " size and first 64 KiB: a copy, a gzipped copy or a byte-identical rerun); both"
        " enter the fleet totals"
        for first, later in copies(paths)
    ]


def read_engine_info(path: str, force_profile: str | None = None) -> EngineInfo | None:
    """The header of a regular file (read again: `ReplayResult` does not carry it); None when
    the first line is not a valid header (the replay itself reports why). ``force_profile``:
    the profile --force-profile gives every log."""
    from ..steplog.header import Header
    from ..steplog.profiles import resolve
    from ..steplog.records import BadInput, iter_lines, parse_line

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
    import tempfile  # here, the one place that needs them: a replay's start-up skips them
    import traceback

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
        status=Verdict.INTERNAL_ERROR,
        exit_code=int(ExitCode.INTERNAL_ERROR),
        report=line,
        report_to_stderr=True,
        result={
            "path": path,
            "status": Verdict.INTERNAL_ERROR,
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
        result = replay_file(path, options, progress=progress)
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
    except ModuleNotFoundError:  # an optional dependency not installed: the command names it
        raise
    except Exception as exc:  # a bug, not an input problem: this file's verdict is "internal"
        return internal_error(path, exc)
