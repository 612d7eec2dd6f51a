"""Shared Hypothesis strategies for the reference's tests (one file: import from here).

- `step_queries`: `StepQuery` objects as a user states them (caps off or on, padding, applied
  and legacy_reported flags), admissible by construction.
- `admissible_inputs`: `(mode, StepInputs, k)` admissible for that k, with raw caps (which may
  exceed the block, as an engine's budget can).
- `inadmissible_inputs`: `(mode, StepInputs, k, reason)`, an admissible block with one
  admissibility condition broken; ``reason`` is the condition's text in `step.admissibility`.
- `stage_plans` / `plan_events`: one request-step's stage inputs and the events that realise
  them in a given mode (the same plan can be run under sync and async).
- `reachable_counters`: a `Counters` state folded from admissible blocks.
- `event_traces`: `(EngineConfig, [Event])`, a legal multi-request trace (adds, blocks through
  every stage, async in-flight blocks, finish, abort, preempt, stale results).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from hypothesis import strategies as st
from spectally.reference.arith import INT_ARITH
from spectally.reference.counters import Counters
from spectally.reference.events import (
    Abort,
    Accept,
    AddRequest,
    AVSkip,
    Event,
    Finish,
    GrammarReject,
    Pad,
    Preempt,
    Propose,
    StepBegin,
    Truncate,
    Verify,
)
from spectally.reference.machine import EngineConfig
from spectally.reference.step import Mode, StepInputs, StepQuery, pipeline

MAX_K = 8

modes = st.sampled_from(list(Mode))
ks = st.integers(min_value=1, max_value=MAX_K)


def _optional_cap(limit: int) -> st.SearchStrategy[int | None]:
    """A stage cap that is off (None), or on: usually within the block, sometimes beyond it."""
    return st.one_of(st.none(), st.integers(0, limit), st.integers(limit, limit + 3))


@st.composite
def step_queries(
    draw: st.DrawFn,
    mode: Mode | None = None,
    k: int | None = None,
    structured: bool | None = None,
) -> StepQuery:
    """An admissible `StepQuery` (for ``k`` when given, else for k = MAX_K)."""
    mode = draw(modes) if mode is None else mode
    k = MAX_K if k is None else k
    proposed = draw(st.integers(0, k))
    padding = draw(st.one_of(st.just(0), st.integers(0, k - proposed)))
    structured = draw(st.booleans()) if structured is None else structured
    grammar_valid = draw(st.integers(0, proposed)) if structured else None
    scheduled = draw(_optional_cap(proposed + padding))
    av_verify = draw(_optional_cap(proposed))
    applied = draw(st.booleans())
    legacy_reported = draw(st.none() | st.just(True) if applied else st.none() | st.booleans())
    base = StepQuery(
        mode=mode,
        proposed=proposed,
        accepted=0,
        grammar_valid=grammar_valid,
        scheduled=scheduled,
        av_verify=av_verify,
        padding=padding,
        applied=applied,
        legacy_reported=legacy_reported,
    )
    eligible = pipeline(mode, base.inputs(), INT_ARITH).eligible
    return replace(base, accepted=draw(st.integers(0, eligible)))


@st.composite
def admissible_inputs(
    draw: st.DrawFn, mode: Mode | None = None, k: int | None = None
) -> tuple[Mode, StepInputs[int, bool], int]:
    """(mode, admissible StepInputs, k)."""
    k = draw(ks) if k is None else k
    q = draw(step_queries(mode=mode, k=k))
    return q.mode, q.inputs(), k


# Each breaker turns an admissible block into one that fails exactly the named condition.
_BREAKERS: dict[str, str] = {
    "proposed": "proposed must be >= 0",
    "padding": "padding must be >= 0",
    "grammar_negative": "grammar-valid prefix must be >= 0",
    "grammar_above": "grammar-valid prefix cannot exceed the proposal (G <= N)",
    "unstructured_grammar": "without structured output every draft is grammar-valid (G == N)",
    "schedule": "schedule cap must be >= 0",
    "av": "AV cap must be >= 0",
    "accepted_negative": "accepted must be >= 0",
    "accepted_above": "accepted cannot exceed the drafts eligible for acceptance",
    "unreported": "an applied block is always reported by vLLM <= 0.32",
    "k": "the block (proposed + padding) cannot exceed k",
}
BREAKER_REASONS = tuple(_BREAKERS.values())


@st.composite
def inadmissible_inputs(
    draw: st.DrawFn, mode: Mode | None = None
) -> tuple[Mode, StepInputs[int, bool], int, str]:
    """(mode, StepInputs, k, reason): condition ``reason`` fails. A negative count can break
    a condition downstream too (a negative cap makes ``eligible`` negative), so ``reason`` is
    one of the failing conditions, and the only one for accepted, unreported, k, G == N."""
    which = draw(st.sampled_from(sorted(_BREAKERS)))
    mode, x, k = draw(admissible_inputs(mode=mode))
    eligible = pipeline(mode, x, INT_ARITH).eligible
    minus = draw(st.integers(1, 3))
    if which == "proposed":
        x = replace(x, proposed=-minus, grammar_valid=-minus if not x.structured else 0)
    elif which == "padding":
        x = replace(x, padding=-minus)
    elif which == "grammar_negative":
        x = replace(x, structured=True, grammar_valid=-minus, accepted=0)
    elif which == "grammar_above":
        x = replace(x, structured=True, grammar_valid=x.proposed + minus)
    elif which == "unstructured_grammar":
        x = replace(x, proposed=max(x.proposed, 1), padding=0, structured=False, accepted=0)
        x = replace(x, grammar_valid=x.proposed - draw(st.integers(1, x.proposed)))
    elif which == "schedule":
        x = replace(x, schedule_cap=-minus, accepted=0)
    elif which == "av":
        x = replace(x, av_cap=-minus, accepted=0)
    elif which == "accepted_negative":
        x = replace(x, accepted=-minus)
    elif which == "accepted_above":
        x = replace(x, accepted=eligible + minus)
    elif which == "unreported":
        x = replace(x, applied=True, legacy_reported=False)
    else:  # "k"
        x = replace(x, padding=k - x.proposed + minus)
    return mode, x, k, _BREAKERS[which]


@dataclass(frozen=True)
class StagePlan:
    """One request-step stated as stage caps, independent of the mode (see `plan_events`)."""

    proposed: int
    padding: int
    structured: bool
    grammar_valid: int  # G, longest valid prefix of the proposal (== proposed if unstructured)
    schedule_cap: int  # S, slots
    av_cap: int  # V, drafts
    accept_fraction: float  # accepted = floor(fraction * eligible): same share in both modes


@st.composite
def stage_plans(draw: st.DrawFn, k: int, structured: bool | None = None) -> StagePlan:
    structured = draw(st.booleans()) if structured is None else structured
    proposed = draw(st.integers(0, k))
    padding = draw(st.integers(0, k - proposed))
    return StagePlan(
        proposed=proposed,
        padding=padding,
        structured=structured,
        grammar_valid=draw(st.integers(0, proposed)) if structured else proposed,
        schedule_cap=draw(st.integers(0, proposed + padding + 1)),
        av_cap=draw(st.integers(0, proposed + 1)),
        accept_fraction=draw(st.sampled_from([0.0, 0.34, 0.5, 1.0])),
    )


def plan_inputs(mode: Mode, plan: StagePlan) -> StepInputs[int, bool]:
    """The plan as admissible StepInputs in ``mode`` (accepted taken from the fraction)."""
    x: StepInputs[int, bool] = StepInputs(
        proposed=plan.proposed,
        padding=plan.padding,
        structured=plan.structured,
        grammar_valid=plan.grammar_valid,
        schedule_cap=plan.schedule_cap,
        av_cap=plan.av_cap,
        accepted=0,
        applied=True,
        legacy_reported=True,
    )
    eligible = pipeline(mode, x, INT_ARITH).eligible
    return replace(x, accepted=int(plan.accept_fraction * eligible))


def plan_events(mode: Mode, plan: StagePlan, request: str, step: int) -> list[Event]:
    """Block events realising ``plan`` in ``mode``; every stage event is emitted (counts may be
    0), so the block goes through its mode's full pipeline and closes with Accept."""
    x = plan_inputs(mode, plan)
    full = replace(x, schedule_cap=plan.proposed + plan.padding, av_cap=plan.proposed)
    p_uncut = pipeline(mode, full, INT_ARITH)
    p = pipeline(mode, x, INT_ARITH)
    truncate = Truncate(request, step, p_uncut.scheduled_slots - p.scheduled_slots)
    av_skip = AVSkip(request, step, p.scheduled_drafts - p.verified)
    verify = Verify(request, step, p.verified)
    accept = Accept(request, step, x.accepted)
    events: list[Event] = [Propose(request, step, plan.proposed), Pad(request, step, plan.padding)]
    if mode is Mode.SYNC:
        if plan.structured:
            events.append(GrammarReject(request, step, plan.proposed - plan.grammar_valid))
        events += [truncate, av_skip, verify]
    else:
        events += [truncate, av_skip, verify]
        if plan.structured:
            rejected = p.scheduled_drafts - min(p.scheduled_drafts, plan.grammar_valid)
            events.append(GrammarReject(request, step, rejected))
    events.append(accept)
    return events


@dataclass
class _Req:
    structured: bool
    in_flight: list[int]  # async: steps of verified, not yet accepted blocks


@st.composite
def event_traces(
    draw: st.DrawFn,
    mode: Mode | None = None,
    k: int | None = None,
    max_steps: int = 8,
    max_requests: int = 6,
) -> tuple[EngineConfig, list[Event]]:
    """A legal trace over many requests. In async a block may stay in flight (verified) across
    a step boundary and be accepted a step later, possibly after a preemption made it stale."""
    mode = draw(modes) if mode is None else mode
    k = draw(ks) if k is None else k
    config = EngineConfig(mode=mode, k=k, drop_stale_output=draw(st.booleans()))
    events: list[Event] = []
    active: dict[str, _Req] = {}
    next_id = 0
    step = draw(st.integers(0, 3))
    for _ in range(draw(st.integers(1, max_steps))):
        events.append(StepBegin(step))
        for _ in range(draw(st.integers(0, 2))):
            if next_id < max_requests:
                rid = f"r{next_id}"
                next_id += 1
                structured = draw(st.booleans())
                active[rid] = _Req(structured, [])
                events.append(AddRequest(rid, step, structured))
        for rid in sorted(active):
            req = active[rid]
            # Results of blocks in flight from earlier steps come back first.
            if req.in_flight and draw(st.booleans()):
                old = req.in_flight.pop(0)
                events.append(Accept(rid, old, 0))
            action = draw(st.sampled_from(["block", "block", "block", "idle", "end", "preempt"]))
            if action == "end":
                events.append(draw(st.sampled_from([Finish, Abort]))(rid, step))
                del active[rid]
                continue
            if action == "preempt":
                events.append(Preempt(rid, step))
                continue
            if action == "idle" or (mode is Mode.SYNC and req.in_flight):
                continue
            plan = draw(stage_plans(k, structured=req.structured))
            block = plan_events(mode, plan, rid, step)
            if mode is Mode.ASYNC and draw(st.booleans()):
                # Leave the block in the forward pass: its result arrives later (Accept 0 is
                # always admissible).
                block = block[: -1 - (1 if plan.structured else 0)]
                req.in_flight.append(step)
            events.extend(block)
        step += draw(st.integers(1, 2))
    return config, events


@st.composite
def reachable_counters(
    draw: st.DrawFn, k: int | None = None, mode: Mode | None = None, max_blocks: int = 6
) -> Counters:
    """A counter state some engine can reach: admissible blocks of one mode folded from zero."""
    k = draw(ks) if k is None else k
    mode = draw(modes) if mode is None else mode
    c = Counters.zero(k)
    for q in draw(st.lists(step_queries(mode=mode, k=k), max_size=max_blocks)):
        c = c.add_step(mode, q.inputs())
    return c
