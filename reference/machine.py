"""The engine state machine: many requests, their draft blocks, and the counters they feed.

Its rules are E1-E7, written once in SPEC.md section 5.1 ("The block lifecycle"); each check
below carries its rule id on its code line (``# [E3] ...``), and spec/RULES.md lists them. What
each event does to counts (E5, E6) is written once, over an `Arith`, in ``transitions.py``
(``stage_rule``, ``accept_rule``), so the proofs evaluate these very rules; a closed block is
folded into the counters by ``step.rfc_step`` / ``step.legacy_step``. An illegal event raises
`IllegalEvent` and changes nothing (E7); after every legal event all invariants
(``invariants.py``) hold.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace

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
from .profile import VLLM_LEGACY, CountingProfile
from .step import LegacyStepCounts, Mode, RfcStepCounts, StepInputs, legacy_step, rfc_step
from .transitions import Outcome as Outcome
from .transitions import accept_rule, fresh_block, lifecycle_rule, stage_rule


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

# The stage names of transitions.py (the count rules of each stage).
RULE_STAGE: dict[Stage, str] = {
    Stage.PROPOSE: "propose",
    Stage.PAD: "pad",
    Stage.GRAMMAR: "grammar",
    Stage.TRUNCATE: "truncate",
    Stage.AV: "av",
    Stage.VERIFY: "verify",
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


@dataclass(frozen=True)
class Block:
    """One request's draft block in one step, as far as its stages have run."""

    step: int
    stages: tuple[Stage, ...]
    # The stage inputs so far, as transitions.py keeps them: a stage that has not run keeps
    # everything (caps normalised), accepted 0, applied and reported until the block closes.
    so_far: StepInputs[int, bool]
    stale: bool = False
    stale_dropped: bool = False  # the engine drops this stale output (it is then discarded)

    @property
    def last_stage(self) -> Stage:
        return self.stages[-1]

    def inputs(self, accepted: int, applied: bool, legacy_reported: bool) -> StepInputs[int, bool]:
        """The block's stage inputs, closed with these values."""
        return replace(
            self.so_far, accepted=accepted, applied=applied, legacy_reported=legacy_reported
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
    rfc: RfcStepCounts[int]  # what it adds to the counters (rfc_step, legacy_step of inputs)
    legacy: LegacyStepCounts[int]


@dataclass(frozen=True)
class EngineConfig:
    mode: Mode
    k: int
    drop_stale_output: bool = False
    profile: CountingProfile = VLLM_LEGACY  # the release whose pipeline the blocks follow

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
        totals, counters = self.totals, new_state.counters
        # [R7] each request keeps its own counters, folded by the same rules as the totals
        for c in closed:
            totals = totals.add_counts(c.rfc, c.legacy)
            counters = counters.add_counts(c.rfc, c.legacy)
        if self.check:
            check_invariants(totals)
            check_invariants(counters)
            check_monotone(self.totals, totals)
        # [E7] an illegal event changes nothing; after a legal one every invariant holds
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
        # [E1] steps strictly increase
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
        # [E1] no event names a step that has not begun
        if self.current_step is None or step > self.current_step:
            raise self._illegal(
                f"step {step} has not begun (current step: {self.current_step})",
                event,
                rid,
                self.describe(rid),
            )
        if isinstance(event, AddRequest):
            # [E2] a request id is added once, in the current step
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
        # [E2] any other event needs a request that was added and has not ended
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
        drop = False
        if isinstance(event, Preempt):
            flag = event.drop_stale_output
            if flag is None:
                drop = self.config.drop_stale_output
            elif isinstance(flag, bool):
                drop = flag
            else:
                raise self._illegal(
                    "drop_stale_output must be a bool or None",
                    event,
                    state.request,
                    state.describe(),
                )
            status = RequestStatus.ACTIVE
            kind, outcome = "preempt", Outcome.DISCARDED_PREEMPTED
        elif isinstance(event, Finish):
            status, kind, outcome = RequestStatus.FINISHED, "finish", Outcome.DISCARDED_FINISHED
        else:
            status, kind, outcome = RequestStatus.ABORTED, "abort", Outcome.DISCARDED_ABORTED
        # [E6] Finish/Abort discard every open block; Preempt those not in flight (async: stale)
        for block in state.blocks:
            discarded = self._close(state, block, kind, outcome)
            if discarded is None:  # async, in flight: its output comes back stale (rule E6)
                keep.append(replace(block, stale=True, stale_dropped=drop))
            else:
                closed.append(discarded)
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

    def _close(
        self, state: RequestState, block: Block, kind: str, outcome: Outcome
    ) -> ClosedBlock | None:
        """One open block under a Finish, Abort or Preempt (``kind``): discarded with
        ``outcome``, or None when it stays open as stale output (transitions.lifecycle_rule)."""
        verified = Stage.VERIFY in block.stages
        stays, discarded = lifecycle_rule(self.config.mode, kind, block.so_far, verified, INT_ARITH)
        return None if stays else self._closed(state.request, block.step, outcome, discarded)

    def _closed(
        self, request: str, step: int, outcome: Outcome, inputs: StepInputs[int, bool]
    ) -> ClosedBlock:
        """A closed block with its step counts, evaluated once: `apply` folds them into the
        engine totals and the request's counters, and replay reads them."""
        mode, profile = self.config.mode, self.config.profile
        rfc = rfc_step(mode, inputs, INT_ARITH, profile)
        legacy = legacy_step(mode, inputs, INT_ARITH, profile)
        return ClosedBlock(request, step, outcome, inputs, rfc, legacy)

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
        # [ATTR-1] a block event is keyed by the step that scheduled the block
        block = state.block_at(step)
        if block is None:
            block = self._open_block(state, stage, step, illegal)
        else:
            # [E4] a block's events follow its mode's pipeline, each stage at most once
            order = STAGE_ORDER[mode]
            if order.index(stage) <= order.index(block.last_stage):
                raise illegal(
                    f"{stage.name} cannot follow {block.last_stage.name} in {mode.value} mode"
                    + (" (at most one proposal per step)" if stage is Stage.PROPOSE else "")
                )
        needed = STAGE_REQUIRES[mode].get(stage)
        if needed is not None and needed not in block.stages:
            raise illegal(f"{stage.name} requires {needed.name} first")
        others = tuple(b for b in state.blocks if b.step != step)
        if stage is Stage.VERIFY and mode is Mode.SYNC and others:
            # Sync runs one forward pass at a time: the next block reaches the target only
            # after the engine processed the previous block's output.
            raise illegal("sync mode: the previous block's output is not processed yet")
        if isinstance(event, Accept):
            return self._accept(state, block, others, count, illegal)
        # [E5] each count is bounded by what reaches its stage (transitions.stage_rule)
        rule = RULE_STAGE[stage]
        conditions, after, named = stage_rule(
            mode, rule, block.so_far, count, k, INT_ARITH, self.config.profile
        )
        for reason, ok in conditions:
            if not ok:
                raise illegal(reason.format(**named))
        block = replace(block, stages=(*block.stages, stage), so_far=after)
        blocks = tuple(sorted((*others, block), key=_block_step)) if others else (block,)
        return (
            RequestState(
                state.request, state.structured, state.status, blocks, state.counters, step
            ),
            [],
        )

    def _open_block(
        self, state: RequestState, stage: Stage, step: int, illegal: Callable[[str], IllegalEvent]
    ) -> Block:
        """The block a Propose or Pad opens for ``state`` at ``step``."""
        if stage not in (Stage.PROPOSE, Stage.PAD):
            raise illegal(f"no open block at step {step}: a block opens with Propose or Pad")
        # [E3] one block per request and step, opened in the current step
        if step != self.current_step:
            raise illegal("a block can only be opened in the current step")
        if state.last_block_step == step:
            raise illegal(f"a request has at most one draft block per step (step {step})")
        # The next block opens only once the previous one is in the forward pass
        # (verified, result not yet processed): async schedules it then; sync's drafter
        # proposes from that forward pass, and an abort processed before its output (vLLM
        # EngineCoreProc) leaves both open until the Abort discards them.
        if any(Stage.VERIFY not in b.stages for b in state.blocks):
            raise illegal("the previous block has not reached the target yet")
        return Block(step, (), fresh_block(state.structured, INT_ARITH))

    def _accept(
        self,
        state: RequestState,
        block: Block,
        others: tuple[Block, ...],
        count: int,
        illegal: Callable[[str], IllegalEvent],
    ) -> tuple[RequestState, list[ClosedBlock]]:
        """``block`` closed by an Accept of ``count`` tokens; ``others``: the request's other
        open blocks."""
        mode, k = self.config.mode, self.config.k
        # [E6] Accept closes the block: applied, or discarded if its stale output was dropped
        conditions, inputs = accept_rule(
            mode,
            block.so_far,
            count,
            block.stale,
            block.stale_dropped,
            k,
            INT_ARITH,
            self.config.profile,
        )
        reasons = [r for r, ok in conditions if not ok]
        if reasons:
            raise illegal("; ".join(reasons))
        outcome = Outcome.APPLIED if inputs.applied else Outcome.DISCARDED_STALE
        closed = self._closed(state.request, block.step, outcome, inputs)
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


def _is_count(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def step_counts(
    mode: Mode, inputs: StepInputs[int, bool], profile: CountingProfile = VLLM_LEGACY
) -> dict[str, dict[str, object]]:
    """Both counters' counts of one block under ``profile``'s release (what ``spectally step
    --json`` prints)."""
    r = rfc_step(mode, inputs, INT_ARITH, profile)
    return counts_dict(r, r.fates, legacy_step(mode, inputs, INT_ARITH, profile))
