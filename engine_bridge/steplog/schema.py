"""The step-log record, defined once: its kinds, field names, outcome names, and one constructor
per record kind.

Every producer of step logs builds its records here (the recorder in vLLM, the llama.cpp
importer, the synthetic generators, the capture drivers' totals), and both judges read them by
the names declared here: the reference replay reads the plain dicts as the ``TypedDict``s
below, the columnar judge decodes into the typed structs of `typed`, whose fields these names
fix. spec/STEP_LOG.md is the format's prose and spec/step_log.schema.json its validator; a test
keeps the three equal.

Each constructor writes its keys in one fixed order, the order every log ever written has: a
record's bytes (``json.dumps`` keeps insertion order) do not depend on who built it. Optional
fields are written only when given (``None`` means absent, except for the nullable counts
``grammar_valid``, ``invalid``, ``verified``, which are always written).

Each body record kind is a ``TypedDict`` here (`RequestStepRecord`, `RequestRecord`,
`StepStatsRecord`, `TotalsRecord`): its keys, in written order, are the kind's field tuple
(`REQUEST_STEP_FIELDS`, ...), the constructors build their records as it, and the reference
replay (`replay.reference_replay`, `translate`) reads its request_step, request and step_stats
records through it, so mypy checks every field name either spells against this one definition.

Outcome names come from the reference (`spectally.reference.transitions.Outcome`); the reference
never imports the bridge. This module is plain Python (no msgspec, no numpy): the reference
replay of a small log imports it and must start fast.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Final, Literal, TypedDict, cast

from spectally.reference.transitions import Outcome

if TYPE_CHECKING:  # typing's own from 3.11; a string annotation here, never evaluated
    from typing import NotRequired

__all__ = [
    "APPLIED",
    "COUNTERS",
    "DISCARDED_OUTCOMES",
    "EVENTS",
    "HELD_ACCEPT_OUTCOMES",
    "LIFECYCLE_OUTCOME",
    "OUTCOMES",
    "PER_POS",
    "RECORD_KINDS",
    "REQUEST_FIELDS",
    "REQUEST_STEP_FIELDS",
    "SCHEMA_VERSION",
    "STEP_STATS_FIELDS",
    "TOTALS_FIELDS",
    "Event",
    "Record",
    "RequestRecord",
    "RequestStepRecord",
    "StepStatsRecord",
    "TotalsRecord",
    "header",
    "request_event",
    "request_step",
    "step_stats",
    "totals",
]

Record = dict[str, Any]
"""One step-log record as JSON gives it: the form every producer writes and the reference
replay reads."""

SCHEMA_VERSION: Final = 1
RECORD_KINDS: Final = ("header", "request", "request_step", "step_stats", "totals")
OUTCOMES: Final[tuple[str, ...]] = tuple(o.value for o in Outcome)
APPLIED: Final = Outcome.APPLIED.value
DISCARDED_OUTCOMES: Final = frozenset(o.value for o in Outcome if o is not Outcome.APPLIED)
# The outcome a lifecycle event gives to the blocks it discards.
LIFECYCLE_OUTCOME: Final = {
    "finish": Outcome.DISCARDED_FINISHED.value,
    "abort": Outcome.DISCARDED_ABORTED.value,
    "preempt": Outcome.DISCARDED_PREEMPTED.value,
}
# The discarded outcome whose block still closes by its Accept, after the Preempt.
HELD_ACCEPT_OUTCOMES: Final = frozenset((Outcome.DISCARDED_STALE.value,))
Event = Literal["add", "finish", "abort", "preempt"]
EVENTS: Final[tuple[Event, ...]] = ("add", "finish", "abort", "preempt")

# The body records, each field in written order, ``record`` first; optional fields last.


class RequestStepRecord(TypedDict):
    """A ``request_step`` record: one request's draft block in one step and how it closed."""

    record: Literal["request_step"]
    step: int
    request: str
    proposed: int
    padding: int
    grammar_valid: int | None
    scheduled: int
    invalid: int | None
    verified: int | None
    sampled: int
    accepted: int
    outcome: str
    delivered: NotRequired[int | None]
    meta: NotRequired[Mapping[str, Any]]


class RequestRecord(TypedDict):
    """A ``request`` record: a request's arrival, end or preemption."""

    record: Literal["request"]
    step: int
    request: str
    event: Event
    reason: NotRequired[str]
    structured: NotRequired[bool]  # required on add
    drop_stale_output: NotRequired[bool]  # preempt only
    meta: NotRequired[Mapping[str, Any]]


class StepStatsRecord(TypedDict):
    """A ``step_stats`` record: the engine's own counts of one step."""

    record: Literal["step_stats"]
    step: int
    num_drafts: int
    num_draft_tokens: int
    num_accepted_tokens: int
    num_accepted_tokens_per_pos: Sequence[int]
    meta: NotRequired[Mapping[str, Any]]


class TotalsRecord(TypedDict):
    """The closing ``totals`` record: the engine's own counts over the run, and their source."""

    record: Literal["totals"]
    source: str
    num_drafts: int
    num_draft_tokens: int
    num_accepted_tokens: int
    num_accepted_tokens_per_pos: Sequence[int]
    meta: NotRequired[Mapping[str, Any]]


REQUEST_STEP_FIELDS: Final = tuple(RequestStepRecord.__annotations__)
REQUEST_FIELDS: Final = tuple(RequestRecord.__annotations__)
STEP_STATS_FIELDS: Final = tuple(StepStatsRecord.__annotations__)
TOTALS_FIELDS: Final = tuple(TotalsRecord.__annotations__)
COUNTERS: Final = STEP_STATS_FIELDS[2:5]  # num_drafts, num_draft_tokens, num_accepted_tokens
PER_POS: Final = STEP_STATS_FIELDS[5]  # num_accepted_tokens_per_pos


def header(
    *,
    engine: str,
    engine_version: str | None,
    num_speculative_tokens: int,
    scheduling: str,
    spec_method: str,
    structured_outputs_backend: str | None,
    adaptive_verification: bool,
    drop_stale_output: bool,
    config: Mapping[str, Any],
    engine_index: int | None = None,
    counting: str | None = None,
    meta: Mapping[str, Any] | None = None,
) -> Record:
    """The ``header`` record (first line): the engine, its release and its configuration.
    ``counting`` is ``"rfc"`` when the engine carries the counting fix (STEP_LOG.md)."""
    rec: Record = {
        "record": "header",
        "schema_version": SCHEMA_VERSION,
        "engine": engine,
        "engine_version": engine_version,
        "num_speculative_tokens": num_speculative_tokens,
        "scheduling": scheduling,
        "spec_method": spec_method,
        "structured_outputs_backend": structured_outputs_backend,
        "adaptive_verification": adaptive_verification,
        "drop_stale_output": drop_stale_output,
    }
    if engine_index is not None:
        rec["engine_index"] = engine_index
    if counting is not None:
        rec["counting"] = counting
    rec["config"] = config
    if meta is not None:
        rec["meta"] = meta
    return rec


def request_event(
    step: int,
    request: str,
    event: Event,
    *,
    reason: str | None = None,
    structured: bool | None = None,
    drop_stale_output: bool | None = None,
    meta: Mapping[str, Any] | None = None,
) -> Record:
    """A ``request`` record: a request's arrival (``add``, with ``structured``) or its end
    (``finish`` with a ``reason``, ``abort``) or a preemption (``preempt``, optionally with
    ``drop_stale_output``)."""
    rec: RequestRecord = {"record": "request", "step": step, "request": request, "event": event}
    if reason is not None:
        rec["reason"] = reason
    if structured is not None:
        rec["structured"] = structured
    if drop_stale_output is not None:
        rec["drop_stale_output"] = drop_stale_output
    if meta:
        rec["meta"] = meta
    return cast(Record, rec)


def request_step(
    *,
    step: int,
    request: str,
    proposed: int,
    padding: int,
    grammar_valid: int | None,
    scheduled: int,
    invalid: int | None,
    verified: int | None,
    sampled: int,
    accepted: int,
    outcome: str = APPLIED,
    delivered: int | None = None,
    meta: Mapping[str, Any] | None = None,
) -> Record:
    """A ``request_step`` record: one request's draft block in one step and how it closed."""
    rec: RequestStepRecord = {
        "record": "request_step",
        "step": step,
        "request": request,
        "proposed": proposed,
        "padding": padding,
        "grammar_valid": grammar_valid,
        "scheduled": scheduled,
        "invalid": invalid,
        "verified": verified,
        "sampled": sampled,
        "accepted": accepted,
        "outcome": outcome,
    }
    if delivered is not None:
        rec["delivered"] = delivered
    if meta:
        rec["meta"] = meta
    return cast(Record, rec)


def step_stats(
    step: int, counts: Sequence[int], per_pos: Sequence[int], *, verified: int | None = None
) -> Record:
    """A ``step_stats`` record: the engine's own counts of one step; ``counts`` is (drafts,
    draft tokens, accepted tokens), ``per_pos`` the accepted tokens per draft position.
    ``verified``: an engine with the counting fix also reports its verified drafts, which
    schema version 1 carries in ``meta``."""
    drafts, draft_tokens, accepted = counts
    rec: StepStatsRecord = {
        "record": "step_stats",
        "step": step,
        "num_drafts": drafts,
        "num_draft_tokens": draft_tokens,
        "num_accepted_tokens": accepted,
        "num_accepted_tokens_per_pos": per_pos,
    }
    if verified is not None:
        rec["meta"] = {"num_verified_draft_tokens": verified}
    return cast(Record, rec)


def totals(source: str, counts: Sequence[int], per_pos: Sequence[int]) -> Record:
    """The closing ``totals`` record: ``counts`` is (drafts, draft tokens, accepted tokens),
    ``per_pos`` the accepted tokens per draft position; ``source`` names where they were
    read."""
    drafts, draft_tokens, accepted = counts
    rec: TotalsRecord = {
        "record": "totals",
        "source": source,
        "num_drafts": drafts,
        "num_draft_tokens": draft_tokens,
        "num_accepted_tokens": accepted,
        "num_accepted_tokens_per_pos": per_pos,
    }
    return cast(Record, rec)
