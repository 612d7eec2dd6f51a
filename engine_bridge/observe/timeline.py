"""What the observe modules read from a replay, in one place: the replay's result (the JSON
`spectally replay --json` prints) and the reference's engine totals after each step of the log.

The timeline is the cumulative counter state (both profiles, per position) as the reference
machine holds it when each new step begins, then once more at the end: what a scrape after
every engine step would show. It is read from `Replayer.engine.totals`, the same state the
replay's report and its final checks use. Each request's counters are kept as it ends (the
replay drops an ended request from the reference engine's table; `_Requests` keeps it).
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields, replace
from typing import Any

from spectally.reference.counters import Counters, LegacyTotals, PositionCounts, RfcTotals

from ..replay.reference_replay import Replayer, StopReplay
from ..steplog.records import BadInput
from ..steplog.source import iter_lines


@dataclass(frozen=True)
class RequestCounts:
    """One request's counters when it ended (or at the end of the log, still active)."""

    request: str
    status: str  # the reference's RequestStatus value: finished, aborted, active
    counters: Counters


class _Requests(dict[str, Any]):
    """The reference engine's request table, keeping every request the replay drops from it
    when the request ends (`Replayer._release`), with its final counters."""

    def __init__(self) -> None:
        super().__init__()
        self.ended: list[RequestCounts] = []

    def pop(self, key: str, *default: Any) -> Any:
        state = super().pop(key, *default)
        if state is not None and hasattr(state, "counters"):
            self.ended.append(RequestCounts(key, state.status.value, state.counters))
        return state


class _Observed(Replayer):
    def _header(self, line: int, rec: Any) -> None:
        super()._header(line, rec)
        assert self.engine is not None
        self.engine.requests = _Requests()


@dataclass
class Timeline:
    path: str
    k: int
    steps: list[int]  # the log's step number of each snapshot (the last: the end of the log)
    totals: list[Counters]  # cumulative, one per entry of `steps`
    engine: str = "0"  # the header's engine_index, the label vLLM exports it under
    requests: list[RequestCounts] = field(default_factory=list)  # in the order they ended
    engine_name: str = "vllm"  # the header's engine (vllm, llama.cpp)
    # The first divergence from the reference as file:line: reason (the timeline stops there);
    # None when the log agrees. Writers of what a log counted refuse such a log.
    divergence: str | None = None
    # Without its totals record, where the log ends as file:line: reason (None: it has one):
    # the replay calls it incomplete (exit 3), what was present agreed but the log was cut.
    incomplete: str | None = None
    # The counting profile of the engine's own counters (`Counters.legacy`): the header's, or
    # the one --force-profile named (vllm-legacy, vllm-0.34, llama.cpp, ...).
    profile: str = "vllm-legacy"


def replay_timeline(
    path: str, force_profile: str | None = None, max_points: int | None = None
) -> Timeline:
    """Replay ``path`` through the reference machine, keeping the totals after each step
    (with ``max_points``: after every stride-th step, the stride doubling whenever the points
    would exceed it, so memory stays bounded on any log). Raises `BadInput` for a log the
    replay refuses; a divergence stops the timeline there."""
    replayer = _Observed(path, force_profile=force_profile)
    steps: list[int] = []
    totals: list[Counters] = []
    stride, seen = 1, 0
    try:
        for lineno, raw, has_newline in iter_lines(path):
            before = replayer.step
            replayer.feed_lines([(lineno, raw, has_newline)])
            if replayer.engine is not None and replayer.step != before and before is not None:
                seen += 1
                if seen % stride == 0:
                    steps.append(before)
                    totals.append(replayer.engine.totals)
                if max_points is not None and len(steps) >= max_points:
                    steps, totals, stride = steps[1::2], totals[1::2], stride * 2
        replayer.finish()
    except StopReplay:
        pass
    if replayer.engine is None:
        raise BadInput(path, 1, 1, "empty log: no header record")
    steps.append(replayer.step if replayer.step is not None else 0)
    totals.append(replayer.engine.totals)
    index = replayer.header.engine_index if replayer.header is not None else None
    table = replayer.engine.requests
    requests = list(table.ended) if isinstance(table, _Requests) else []
    requests += [RequestCounts(r, s.status.value, s.counters) for r, s in table.items()]
    first = replayer.divergences[0] if replayer.divergences else None
    return Timeline(
        path,
        replayer.k,
        steps,
        totals,
        str(index or 0),
        requests,
        replayer.header.engine if replayer.header is not None else "vllm",
        None if first is None else f"{first.path}:{first.line}: {first.reason}",
        None
        if replayer.totals_record is not None
        else f"{path}:{max(replayer.line, 1)}:1: the log ends before its totals record",
        (replayer.header.profile if replayer.header is not None else None) or "vllm-legacy",
    )


def _minus(a: Any, b: Any) -> Any:
    return replace(a, **{f.name: getattr(a, f.name) - getattr(b, f.name) for f in fields(a)})


def window(later: Counters, earlier: Counters) -> Counters:
    """The counter deltas between two states of one engine: a counter state itself (MERGE),
    so the reference's metric functions apply to it."""
    rfc: RfcTotals[int] = _minus(later.rfc, earlier.rfc)
    legacy: LegacyTotals[int] = _minus(later.legacy, earlier.legacy)
    positions: tuple[PositionCounts[int], ...] = tuple(
        _minus(a, b) for a, b in zip(later.positions, earlier.positions, strict=True)
    )
    return replace(later, rfc=rfc, legacy=legacy, positions=positions)
