"""What the reference replay keeps beside the engine: the predicted step accounts, held
lifecycle records, outcome claims, and the end-of-log comparison with a Prometheus scrape."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from spectally.reference.events import Event
from spectally.reference.step import LegacyStepCounts

from .records import BadInput, Record
from .report import Divergence, rows
from .translate import Header


class StopReplay(Exception):
    """Raised internally when the divergence limit is reached."""


@dataclass
class StepAccount:
    """The legacy counts the reference predicts for one engine step, and what the engine said."""

    step: int
    k: int
    num_drafts: int = 0
    num_draft_tokens: int = 0
    num_accepted_tokens: int = 0
    per_pos: list[int] = field(default_factory=list)
    # (line, request, (legacy num_drafts, num_draft_tokens, num_accepted_tokens)) per block
    blocks: list[tuple[int, str, tuple[int, int, int]]] = field(default_factory=list)
    tainted: str | None = None
    # The step's step_stats record (line, record), compared when the step closes, so that a
    # request_step after it is bad input whatever the divergence limit.
    stats: tuple[int, Record] | None = None

    def __post_init__(self) -> None:
        if not self.per_pos:
            self.per_pos = [0] * self.k

    def add(self, line: int, rid: str, lg: LegacyStepCounts[int]) -> None:
        """One block of the step and the legacy counts it adds."""
        self.blocks.append(
            (line, rid, (lg.num_drafts, lg.num_draft_tokens, lg.num_accepted_tokens))
        )
        self.num_drafts += lg.num_drafts
        self.num_draft_tokens += lg.num_draft_tokens
        self.num_accepted_tokens += lg.num_accepted_tokens
        for i in range(lg.num_accepted_tokens):
            self.per_pos[i] += 1

    def values(self) -> tuple[int, int, int, list[int]]:
        return self.num_drafts, self.num_draft_tokens, self.num_accepted_tokens, self.per_pos

    def empty(self) -> bool:
        return self.num_drafts == 0 and self.num_draft_tokens == 0 and not any(self.per_pos)


@dataclass
class Held:
    """A lifecycle record whose event waits for the discarded blocks that follow it."""

    event: Event
    line: int
    record: Record
    step: int


@dataclass
class Claim:
    """A request_step record whose outcome the reference confirms only when the block closes."""

    line: int
    outcome: str
    record: Record


def metrics_divergence(
    metrics_path: str, header: Header, ref: tuple[Any, ...], log_path: str
) -> Divergence | None:
    """The final Prometheus scrape against the reference's vllm-legacy totals ``ref``
    (num_drafts, num_draft_tokens, num_accepted_tokens, per-position); None when they agree."""
    from .importers.prometheus import read_scrapes, spec_totals

    scrapes = read_scrapes([metrics_path])
    if not scrapes:
        raise BadInput(metrics_path, 1, 1, "no Prometheus samples found")
    last = scrapes[-1]
    engine = None if header.engine_index is None else str(header.engine_index)
    got = spec_totals(last, header.k, engine=engine)
    table = rows(ref, got)
    if all(e == a for _, e, a in table):
        return None
    return Divergence(
        last.path,
        last.line,
        1,
        "metrics",
        None,
        f"the final Prometheus scrape ({last.path}) differs from the reference's"
        " vllm-legacy totals",
        None,
        table,
        [f"replayed log: {log_path}"],
    )


def event_text(event: Event) -> str:
    name = type(event).__name__
    count = getattr(event, "num_tokens", getattr(event, "num_slots", None))
    rid = getattr(event, "request", None)
    step = getattr(event, "step", None)
    if count is not None:
        return f"{name}({count}) for {rid!r} at step {step}"
    if rid is not None:
        return f"{name} of {rid!r} at step {step}"
    return f"{name}({step})"
