"""The engine state machine: many requests, their draft blocks, and the counters they feed.

Rules (SPEC.md section 5 states them normatively; this is the executable text):

E1  Steps. ``StepBegin(s)`` starts engine step s; steps strictly increase. An event naming a
    step that has not begun is illegal.
E2  Requests. ``AddRequest`` introduces a request id once. Any other event for an unknown id,
    or for a request that finished or was aborted, is illegal.
E3  Blocks. A request has at most one draft block per step. ``Propose`` (or ``Pad``) opens it,
    only in the current step; opening a second block for the same step is illegal. In sync mode
    the previous block must be closed first; in async it must at least be in the forward pass.
E4  Stage order. A block's events follow its mode's pipeline, each stage at most once:
        sync : Propose, Pad, GrammarReject, Truncate, AVSkip, Verify, Accept
        async: Propose, Pad, Truncate, AVSkip, Verify, GrammarReject, Accept
    Stages may be skipped (no grammar, no cut, AV off) except that ``Accept`` and, in async,
    ``GrammarReject`` need ``Verify`` first. ``GrammarReject`` needs a structured request.
E5  Counts. Counts are >= 0 and bounded by what reaches the stage: the block holds at most k
    slots, a cut removes at most what is left, ``Verify`` must name exactly the drafts that
    reached the target, and ``Accept`` at most the eligible ones (step.admissibility).
E6  Closing. ``Accept`` closes a block: applied, or discarded if the block went stale.
    ``Finish``/``Abort`` discard every open block of the request and end it. ``Preempt``
    discards blocks not yet verified and makes verified (in-flight, async) blocks stale; the
    engine drops a stale output (so vllm-legacy does not count it either) when the Preempt's
    ``drop_stale_output`` says so, or, when that is None, the engine's configured default.
    A closed block is folded into the counters by ``step.rfc_step`` / ``step.legacy_step``.
E7  Atomicity. An illegal event raises `IllegalEvent` naming request, step, state and event,
    and changes nothing. After every legal event all invariants (invariants.py) hold.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable
from dataclasses import dataclass, replace
from typing import Any

from .arith import INT_ARITH
from .counters import Counters, counts_dict
from .errors import IllegalEvent
from .events import (
    EVENT_TYPES,
    Abort,
    Accept,
    AddRequest,
    AVSkip,
    BlockEvent,
    Event,
    Finish,
    GrammarReject,
    Pad,
    Preempt,
    Propose,
    RequestEvent,
    StepBegin,
    Truncate,
    Verify,
)
from .invariants import check_invariants, check_monotone
from .step import Mode, StepInputs, admissibility, legacy_step, pipeline, rfc_step


class Stage(enum.IntEnum):
    """Pipeline stages; a block's ``last_stage`` is the latest one it went through."""

    PROPOSE = 0
    PAD = 1
    GRAMMAR = 2
    TRUNCATE = 3
    AV = 4
    VERIFY = 5
    ACCEPT = 6


STAGE_ORDER: dict[Mode, tuple[Stage, ...]] = {
    Mode.SYNC: (
        Stage.PROPOSE,
        Stage.PAD,
        Stage.GRAMMAR,
        Stage.TRUNCATE,
        Stage.AV,
        Stage.VERIFY,
        Stage.ACCEPT,
    ),
    Mode.ASYNC: (
        Stage.PROPOSE,
        Stage.PAD,
        Stage.TRUNCATE,
        Stage.AV,
        Stage.VERIFY,
        Stage.GRAMMAR,
        Stage.ACCEPT,
    ),
}

# A stage that may only follow another one (rule E4).
STAGE_REQUIRES: dict[Mode, dict[Stage, Stage]] = {
    Mode.SYNC: {Stage.ACCEPT: Stage.VERIFY},
    Mode.ASYNC: {Stage.ACCEPT: Stage.VERIFY, Stage.GRAMMAR: Stage.VERIFY},
}

BLOCK_EVENT_STAGE: dict[type, Stage] = {
    Propose: Stage.PROPOSE,
    Pad: Stage.PAD,
    GrammarReject: Stage.GRAMMAR,
    Truncate: Stage.TRUNCATE,
    AVSkip: Stage.AV,
    Verify: Stage.VERIFY,
    Accept: Stage.ACCEPT,
}


class RequestStatus(str, enum.Enum):
    ACTIVE = "active"
    FINISHED = "finished"
    ABORTED = "aborted"


class Outcome(str, enum.Enum):
    """How a block closed (SPEC.md "discarded")."""

    APPLIED = "applied"
    DISCARDED_FINISHED = "discarded_finished"
    DISCARDED_ABORTED = "discarded_aborted"
    DISCARDED_PREEMPTED = "discarded_preempted"
    DISCARDED_STALE = "discarded_stale"


@dataclass(frozen=True)
class Block:
    """One request's draft block in one step, as far as its stages have run."""

    step: int
    stages: tuple[Stage, ...]
    proposed: int = 0
    padding: int = 0
    grammar_valid: int | None = None
    schedule_cap: int | None = None
    av_cap: int | None = None
    stale: bool = False
    stale_dropped: bool = False  # the engine drops this stale output (vllm-legacy then skips it)

    @property
    def last_stage(self) -> Stage:
        return self.stages[-1]

    def inputs(
        self, structured: bool, accepted: int, applied: bool, legacy_reported: bool
    ) -> StepInputs[int, bool]:
        slots = self.proposed + self.padding
        return StepInputs(
            proposed=self.proposed,
            padding=self.padding,
            structured=structured,
            grammar_valid=self.proposed if self.grammar_valid is None else self.grammar_valid,
            schedule_cap=slots if self.schedule_cap is None else self.schedule_cap,
            av_cap=slots if self.av_cap is None else self.av_cap,
            accepted=accepted,
            applied=applied,
            legacy_reported=legacy_reported,
        )

    def describe(self) -> str:
        stale = ", stale" if self.stale else ""
        return f"block@{self.step} after {self.last_stage.name}{stale}"


@dataclass(frozen=True)
class RequestState:
    """One request: its open blocks and the counters of its closed ones."""

    request: str
    structured: bool
    status: RequestStatus
    blocks: tuple[Block, ...]  # open blocks, oldest first
    counters: Counters
    last_block_step: int | None = None  # step of the latest block opened (E3: one per step)

    def block_at(self, step: int) -> Block | None:
        for block in self.blocks:
            if block.step == step:
                return block
        return None

    def describe(self) -> str:
        blocks = ", ".join(b.describe() for b in self.blocks) or "no open block"
        return f"{self.status.value}; {blocks}"


@dataclass(frozen=True)
class ClosedBlock:
    """A block folded into the counters: what replay compares against an engine."""

    request: str
    step: int
    outcome: Outcome
    inputs: StepInputs[int, bool]


@dataclass(frozen=True)
class EngineConfig:
    mode: Mode
    k: int
    drop_stale_output: bool = False

    def __post_init__(self) -> None:
        if not isinstance(self.mode, Mode):
            raise TypeError(f"mode must be a Mode, got {self.mode!r}")
        if isinstance(self.k, bool) or not isinstance(self.k, int) or self.k < 1:
            raise ValueError(f"k (num_speculative_tokens) must be an int >= 1, got {self.k!r}")
        if not isinstance(self.drop_stale_output, bool):
            raise TypeError(f"drop_stale_output must be a bool, got {self.drop_stale_output!r}")


class Engine:
    """Folds events into counters, engine-wide and per request, checking every rule."""

    def __init__(self, config: EngineConfig, *, check: bool = True) -> None:
        self.config = config
        self.check = check
        self.current_step: int | None = None
        self.requests: dict[str, RequestState] = {}
        self.totals = Counters.zero(config.k)  # engine-wide; replaced, never mutated

    # -- public API -------------------------------------------------------------------------

    def apply(self, event: Event) -> list[ClosedBlock]:
        """Apply one event; return the blocks it closed. Raises `IllegalEvent` and changes
        nothing when the event is illegal (or on any other exception)."""
        if not isinstance(event, EVENT_TYPES):
            raise TypeError(f"not a spectally event: {event!r}")
        if isinstance(event, StepBegin):
            self._step_begin(event)
            return []
        request = self._request_for(event)
        new_state, closed = self._transition(request, event)
        mode = self.config.mode
        totals, counters = self.totals, new_state.counters
        for c in closed:
            totals = totals.add_step(mode, c.inputs)
            counters = counters.add_step(mode, c.inputs)
        if self.check:
            check_invariants(totals)
            check_invariants(counters)
            check_monotone(self.totals, totals)
        # Commit only now: everything above may raise.
        self.requests[request.request] = replace(new_state, counters=counters)
        self.totals = totals
        return closed

    def run(self, events: Iterable[Event]) -> list[ClosedBlock]:
        """Apply events in order; return every block they closed. On the first error it raises
        with every earlier event applied and the failing one not applied (E7)."""
        closed: list[ClosedBlock] = []
        for event in events:
            closed.extend(self.apply(event))
        return closed

    def request_counters(self, request: str) -> Counters:
        """One request's counters (finished and aborted requests included); KeyError if unknown."""
        return self.requests[request].counters

    def describe(self, request: str | None) -> str:
        if request is None or request not in self.requests:
            return f"engine at step {self.current_step}"
        return self.requests[request].describe()

    # -- transitions ------------------------------------------------------------------------

    def _illegal(self, reason: str, event: Event, request: str | None, state: str) -> IllegalEvent:
        step = getattr(event, "step", self.current_step)
        return IllegalEvent(reason, event=event, request=request, step=step, state=state)

    def _step_begin(self, event: StepBegin) -> None:
        if not _is_count(event.step):
            raise self._illegal("step must be an int >= 0", event, None, self.describe(None))
        if self.current_step is not None and event.step <= self.current_step:
            raise self._illegal(
                f"steps must increase (current step is {self.current_step})",
                event,
                None,
                self.describe(None),
            )
        self.current_step = event.step

    def _request_for(self, event: BlockEvent | RequestEvent) -> RequestState:
        rid: str = event.request
        if not isinstance(rid, str):
            raise self._illegal("request id must be a string", event, None, "n/a")
        step = event.step
        if not _is_count(step):
            raise self._illegal("step must be an int >= 0", event, rid, self.describe(rid))
        if self.current_step is None or step > self.current_step:
            raise self._illegal(
                f"step {step} has not begun (current step: {self.current_step})",
                event,
                rid,
                self.describe(rid),
            )
        if isinstance(event, AddRequest):
            if rid in self.requests:
                raise self._illegal("request id already added", event, rid, self.describe(rid))
            if step != self.current_step:
                raise self._illegal(
                    "a request is added in the current step", event, rid, self.describe(rid)
                )
            if not isinstance(event.structured, bool):
                raise self._illegal("structured must be a bool", event, rid, self.describe(rid))
            return RequestState(
                rid, event.structured, RequestStatus.ACTIVE, (), Counters.zero(self.config.k)
            )
        state = self.requests.get(rid)
        if state is None:
            raise self._illegal("unknown request", event, rid, "unknown")
        if state.status is not RequestStatus.ACTIVE:
            raise self._illegal(
                f"request already {state.status.value}", event, rid, state.describe()
            )
        return state

    def _transition(
        self, state: RequestState, event: BlockEvent | RequestEvent
    ) -> tuple[RequestState, list[ClosedBlock]]:
        if isinstance(event, AddRequest):
            return state, []
        if isinstance(event, (Finish, Abort, Preempt)):
            return self._lifecycle(state, event)
        return self._block_event(state, event)

    def _lifecycle(
        self, state: RequestState, event: Finish | Abort | Preempt
    ) -> tuple[RequestState, list[ClosedBlock]]:
        closed: list[ClosedBlock] = []
        keep: list[Block] = []
        if isinstance(event, Preempt):
            drop = event.drop_stale_output
            if drop is None:
                drop = self.config.drop_stale_output
            elif not isinstance(drop, bool):
                raise self._illegal(
                    "drop_stale_output must be a bool or None",
                    event,
                    state.request,
                    state.describe(),
                )
            status = RequestStatus.ACTIVE
            for block in state.blocks:
                in_flight = self.config.mode is Mode.ASYNC and Stage.VERIFY in block.stages
                if in_flight:
                    keep.append(_block(block, stale=True, stale_dropped=drop))
                else:
                    closed.append(self._discard(state, block, Outcome.DISCARDED_PREEMPTED))
        else:
            finished = isinstance(event, Finish)
            status = RequestStatus.FINISHED if finished else RequestStatus.ABORTED
            outcome = Outcome.DISCARDED_FINISHED if finished else Outcome.DISCARDED_ABORTED
            closed = [self._discard(state, block, outcome) for block in state.blocks]
        # The closed blocks are folded into the counters by `apply`.
        return (
            RequestState(
                state.request,
                state.structured,
                status,
                tuple(keep),
                state.counters,
                state.last_block_step,
            ),
            closed,
        )

    def _discard(self, state: RequestState, block: Block, outcome: Outcome) -> ClosedBlock:
        if Stage.VERIFY not in block.stages:
            # Nothing of this block reached the target forward pass, so none of its drafts is
            # verified: without this the caps alone would count them in discarded_verified.
            block = _block(block, av_cap=0)
        inputs = block.inputs(state.structured, accepted=0, applied=False, legacy_reported=False)
        return ClosedBlock(state.request, block.step, outcome, inputs)

    def _block_event(
        self, state: RequestState, event: BlockEvent
    ) -> tuple[RequestState, list[ClosedBlock]]:
        mode, k = self.config.mode, self.config.k
        rid = state.request
        stage = BLOCK_EVENT_STAGE[type(event)]
        count: int = event.num_slots if isinstance(event, (Pad, Truncate)) else event.num_tokens
        step: int = event.step

        def illegal(reason: str) -> IllegalEvent:
            return self._illegal(reason, event, rid, state.describe())

        if not _is_count(count):
            raise illegal("count must be an int >= 0")
        block = state.block_at(step)
        if block is None:
            if stage not in (Stage.PROPOSE, Stage.PAD):
                raise illegal(f"no open block at step {step}: a block opens with Propose or Pad")
            if step != self.current_step:
                raise illegal("a block can only be opened in the current step")
            if state.last_block_step == step:
                raise illegal(f"a request has at most one draft block per step (step {step})")
            # Sync runs one block at a time; async may schedule the next block while the
            # previous one is in the forward pass (verified, result not yet back).
            if mode is Mode.SYNC and state.blocks:
                raise illegal("sync mode: the previous block is still open")
            if any(Stage.VERIFY not in b.stages for b in state.blocks):
                raise illegal("the previous block has not reached the target yet")
            block = Block(step=step, stages=())
        else:
            order = STAGE_ORDER[mode]
            if order.index(stage) <= order.index(block.last_stage):
                raise illegal(
                    f"{stage.name} cannot follow {block.last_stage.name} in {mode.value} mode"
                    + (" (at most one proposal per step)" if stage is Stage.PROPOSE else "")
                )
        needed = STAGE_REQUIRES[mode].get(stage)
        if needed is not None and needed not in block.stages:
            raise illegal(f"{stage.name} requires {needed.name} first")

        if isinstance(event, Propose):
            if count > k:
                raise illegal(f"cannot propose {count} drafts with k={k}")
            block = _block(block, proposed=count)
        elif isinstance(event, Pad):
            if block.proposed + count > k:
                raise illegal(f"block of {block.proposed} drafts + {count} padding exceeds k={k}")
            block = _block(block, padding=count)
        elif not isinstance(event, Accept):  # Accept is checked below (admissibility)
            # What the block's stages so far let through (only these stages read it).
            so_far = pipeline(mode, block.inputs(state.structured, 0, True, True), INT_ARITH)
            if isinstance(event, GrammarReject):
                if not state.structured:
                    raise illegal("grammar rejection for a request without structured output")
                # sync: of the proposal; async: of the scheduled drafts (num_invalid_spec_tokens).
                base = block.proposed if mode is Mode.SYNC else so_far.scheduled_drafts
                if count > base:
                    raise illegal(f"grammar rejects {count} of only {base} drafts")
                block = _block(block, grammar_valid=base - count)
            elif isinstance(event, Truncate):
                if count > so_far.scheduled_slots:
                    raise illegal(f"cannot cut {count} of {so_far.scheduled_slots} slots")
                block = _block(block, schedule_cap=so_far.scheduled_slots - count)
            elif isinstance(event, AVSkip):
                if count > so_far.scheduled_drafts:
                    raise illegal(f"AV cannot skip {count} of {so_far.scheduled_drafts} drafts")
                block = _block(block, av_cap=so_far.scheduled_drafts - count)
            elif isinstance(event, Verify) and count != so_far.verified:
                raise illegal(
                    f"verify names {count} drafts but {so_far.verified} reached the target"
                )
        block = _block(block, stages=(*block.stages, stage))

        others = tuple(b for b in state.blocks if b.step != step)
        if not isinstance(event, Accept):
            blocks = tuple(sorted((*others, block), key=_block_step)) if others else (block,)
            return (
                RequestState(
                    state.request, state.structured, state.status, blocks, state.counters, step
                ),
                [],
            )

        applied = not block.stale
        reported = applied or not block.stale_dropped
        inputs = block.inputs(state.structured, count, applied, reported)
        reasons = [r for r, ok in admissibility(mode, inputs, INT_ARITH, k) if not ok]
        if reasons:
            raise illegal("; ".join(reasons))
        outcome = Outcome.APPLIED if applied else Outcome.DISCARDED_STALE
        closed = ClosedBlock(rid, step, outcome, inputs)
        new = RequestState(
            state.request,
            state.structured,
            state.status,
            others,
            state.counters,
            state.last_block_step,
        )
        return new, [closed]  # `apply` folds it into the counters


def _block_step(block: Block) -> int:
    return block.step


def _block(
    b: Block,
    *,
    stages: tuple[Stage, ...] | None = None,
    proposed: int | None = None,
    padding: int | None = None,
    grammar_valid: int | None = None,
    schedule_cap: int | None = None,
    av_cap: int | None = None,
    stale: bool | None = None,
    stale_dropped: bool | None = None,
) -> Block:
    """``dataclasses.replace(b, ...)`` for the fields given (not None; no field is ever set
    back to None)."""
    changes: dict[str, Any] = {
        "stages": stages,
        "proposed": proposed,
        "padding": padding,
        "grammar_valid": grammar_valid,
        "schedule_cap": schedule_cap,
        "av_cap": av_cap,
        "stale": stale,
        "stale_dropped": stale_dropped,
    }
    return replace(b, **{name: v for name, v in changes.items() if v is not None})


def _is_count(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def step_counts(mode: Mode, inputs: StepInputs[int, bool]) -> dict[str, dict[str, object]]:
    """Both profiles' counts of one block (what ``spectally step --json`` prints)."""
    r = rfc_step(mode, inputs, INT_ARITH)
    return counts_dict(r, r.fates, legacy_step(mode, inputs, INT_ARITH))
