"""What the reference replay keeps beside the engine: the predicted step accounts, held
lifecycle records, outcome claims, and the end-of-log comparisons with the totals record
and a Prometheus scrape."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from spectally.reference.step import LegacyStepCounts

from ..steplog.header import Header
from ..steplog.records import BadInput, Record
from ..steplog.schema import PER_POS
from .report import (
    LEGACY_FIELDS,
    Divergence,
    ReplayedLog,
    ReportedSums,
    RequestView,
    StepBlocks,
    rows,
)

if TYPE_CHECKING:  # the reference's events: only the reference replay holds them
    from spectally.reference.events import Event

    from ..importers.prometheus import Scrape


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
    stats: tuple[int, Mapping[str, Any]] | None = None

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

    def divergence(
        self,
        log_path: str,
        line: int | None,
        rec: Mapping[str, Any] | None,
        actual: tuple[int, int, int, list[int]],
        last_line: int,
        view: Callable[[str], RequestView],
    ) -> Divergence | None:
        """The step's step_stats record (``rec`` at ``line``; None: the engine wrote none,
        ``actual`` zeros) against this account; None when they agree. The report lists the
        step's blocks, each request as ``view`` shows it; a missing record is reported
        at the step's last block (``last_line`` if it had none)."""
        expected = self.values()
        if expected == actual:
            return None
        names = (*LEGACY_FIELDS, PER_POS)
        table = [(n, e, a) for n, e, a in zip(names, expected, actual, strict=True)]
        if line is None:
            reason = "the engine reported no step_stats for this step, the reference counts"
            where = self.blocks[-1][0] if self.blocks else last_line
        else:
            bad = [n for n, e, a in table if e != a]
            reason = f"{', '.join(bad)} differ from the sum of legacy_step over the step's blocks"
            where = line
        blocks = tuple((bline, rid, counts, view(rid)) for bline, rid, counts in self.blocks)
        return Divergence(
            log_path,
            where,
            "step_stats",
            self.step,
            reason,
            rec,
            table,
            StepBlocks(self.step, blocks),
            rule="L1",
        )


@dataclass
class Held:
    """A lifecycle record whose event waits for the discarded blocks that follow it."""

    event: Event
    line: int
    record: Mapping[str, Any]
    step: int


@dataclass
class Claim:
    """A request_step record whose outcome the reference confirms only when the block closes."""

    line: int
    outcome: str
    record: Mapping[str, Any]


# A request_step field the engine reports: the report's reason when it differs, and the rule of
# SPEC.md that fixes the reference's value.
_BLOCK_REASONS = {
    "scheduled": ("scheduled slots differ from the reference's schedule of this block", "L2"),
    "invalid": ("num_invalid_spec_tokens differs from the reference's count", "L2"),
    "accepted": ("accepted is not max(sampled - 1, 0)", "L3"),
}


def block_mismatch(table: list[tuple[str, Any, Any]]) -> tuple[str, str, str] | None:
    """The first of a request_step record's ``scheduled`` / ``invalid`` / ``accepted``
    (``table``: name, the reference's, the record's) that differs, with the report's reason
    and the rule; None when all agree."""
    bad = next((name for name, expected, actual in table if expected != actual), None)
    return None if bad is None else (bad, *_BLOCK_REASONS[bad])


def metrics_divergence(
    metrics_path: str, header: Header, ref: tuple[Any, ...], log_path: str
) -> Divergence | None:
    """The final Prometheus scrape against the reference's vllm-legacy totals ``ref``
    (num_drafts, num_draft_tokens, num_accepted_tokens, per-position); None when they agree."""
    from ..importers.prometheus import (
        ACCEPTED,
        DRAFT_TOKENS,
        DRAFTS,
        PER_POS,
        read_scrapes,
        require_counters,
        spec_totals,
    )

    scrapes = read_scrapes([metrics_path])
    if not scrapes:
        raise BadInput(metrics_path, 1, 1, "no Prometheus samples found")
    last = scrapes[-1]
    engine = None if header.engine_index is None else str(header.engine_index)
    _check_scrape_is_of(last, engine)
    # A counter the scrape lacks is no zero to compare: a cut or filtered scrape.
    require_counters(last, (DRAFTS, DRAFT_TOKENS, ACCEPTED, PER_POS), "--metrics", engine)
    got = spec_totals(last, header.k, engine=engine)
    table = rows(ref, got)
    if all(e == a for _, e, a in table):
        return None
    return Divergence(
        last.path,
        last.line,
        "metrics",
        None,
        f"the final Prometheus scrape ({last.path}) differs from the reference's"
        " vllm-legacy totals",
        None,
        table,
        ReplayedLog(log_path),
        rule="REP-1",
    )


def _check_scrape_is_of(last: Scrape, engine: str | None) -> None:
    """`BadInput` at the last scrape when it holds no series of the log's engine (a scrape of
    another engine read as zeros: a false divergence, or a false AGREE on a log that counted
    nothing) or series of several models (one log is one server's: their sum is neither)."""
    labels = [dict(ls) for ls in last.series]
    mine = [ls for ls in labels if engine is None or ls.get("engine") == engine]
    if not mine:
        others = sorted({ls.get("engine", "(none)") for ls in labels})
        raise BadInput(
            last.path,
            last.line,
            1,
            f"the last scrape has no spec-decode series of engine {engine} (the log header's"
            f" engine_index) to check the log against; its engine labels: {', '.join(others)}"
            " (a scrape of another engine or server?)",
        )
    models = sorted({ls["model_name"] for ls in mine if "model_name" in ls})
    if len(models) > 1:
        raise BadInput(
            last.path,
            last.line,
            1,
            f"the last scrape holds the spec-decode series of {len(models)} models"
            f" ({', '.join(models)}) for this log's engine: their sum is no one server's"
            " counters (pass the scrape of the server that wrote the log)",
        )


def totals_divergence(
    log_path: str,
    line: int,
    rec: Record,
    ref: tuple[Any, ...],
    reported: tuple[Any, ...],
) -> Divergence | None:
    """The log's totals record (at ``line``) against the reference's vllm-legacy totals
    ``ref`` (num_drafts, num_draft_tokens, num_accepted_tokens, per-position); the sum of the
    step_stats records, ``reported`` (the same four), goes in the report's state. None when
    they agree."""
    actual = tuple(rec[f] for f in (*LEGACY_FIELDS, PER_POS))
    table = rows(ref, actual)
    if all(e == a for _, e, a in table):
        return None
    return Divergence(
        log_path,
        line,
        "totals",
        None,
        f"the totals record ({rec['source']}) differs from the reference's vllm-legacy totals",
        rec,
        table,
        ReportedSums(tuple(reported[:3]), list(reported[3])),
        rule="L1",
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
