"""Fleet replay: many step logs replayed on every local core (`local`) or on a Ray cluster
(`ray`), with one merged report (`report`).

The public face, what the ``replay`` command and a user import:

- `run_fleet`: every file's `FileOutcome`, in input order, from either backend;
- `ReplayOptions`, `FileOutcome`, `EngineInfo`, `replay_one`, `read_engine_info` (`job`): one
  file, the unit of work both backends run; `check_distinct`, no log given twice;
  `copy_notes`, the logs that hold the same content as an earlier one;
  `BackendUnavailable`, what a backend raises when it cannot run (bad usage, exit 2);
- `replay_local`, `usable_cores` (`local`): the local backend;
- `fleet_summary`, `render_fleet` (`report`): the merged report as data and as text.

The Ray backend (`ray`: `replay_ray`, `RayUnavailable`, `local_head`) is imported only when a
run asks for it, so Ray is never needed for a local run.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence

from .job import (
    BackendUnavailable,
    EngineInfo,
    FileOutcome,
    ReplayOptions,
    check_distinct,
    copy_notes,
    read_engine_info,
    replay_one,
)
from .local import replay_local, usable_cores
from .report import fleet_summary, render_fleet

__all__ = [
    "BackendUnavailable",
    "EngineInfo",
    "FileOutcome",
    "ReplayOptions",
    "check_distinct",
    "copy_notes",
    "fleet_summary",
    "read_engine_info",
    "render_fleet",
    "replay_local",
    "replay_one",
    "run_fleet",
    "usable_cores",
]


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
    done (so reports stream like a sequential run's). `BadInput` (before any replay) when
    two paths are one log: its counts would enter the fleet totals twice."""
    check_distinct(paths)
    if ray_address is not None:
        from .ray import replay_ray

        source: Iterator[FileOutcome] = replay_ray(paths, options, ray_address)
    else:
        source = replay_local(paths, options, jobs, progress)
    outcomes: list[FileOutcome] = []
    for outcome in source:
        outcomes.append(outcome)
        if on_outcome is not None:
            on_outcome(outcome)
    return outcomes
