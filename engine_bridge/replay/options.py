"""`ReplayOptions`: how to replay a log, the same for every file of a run.

The one set of replay options: the ``replay`` command fills it from its flags, the fleet ships
it to every worker, and `dispatch.replay_file` takes it (or any of its fields by name, which
`ReplayOptions.of` folds in).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

__all__ = ["ReplayOptions"]


@dataclass(frozen=True)
class ReplayOptions:
    """`replay_file`'s options, the same for every file of a fleet."""

    max_divergences: int = 1  # --keep-going: divergences reported per log
    metrics: str | None = None  # --metrics: a Prometheus scrape taken after the run
    check_invariants: bool = False  # --check-invariants: every invariant after every event
    reference: bool = False  # --reference: the plain reference replay, no columnar checker
    force_profile: str | None = None  # --force-profile: count every log under this profile
    # The log bytes one process replays in the run (the fleet sets it; 0: not known). numba's
    # compiled scanner loads when the run repays its import, not only one log: a directory of
    # restart logs then costs per record what one long log does. Verdicts do not depend on it.
    run_bytes: int = 0

    @classmethod
    def of(cls, options: ReplayOptions | None, named: dict[str, Any]) -> ReplayOptions:
        """``options`` (default: every option's default) with the fields ``named`` gives
        replaced; TypeError naming a key that is no option."""
        base = cls() if options is None else options
        return dataclasses.replace(base, **named) if named else base
