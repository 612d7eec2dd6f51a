"""Speed only: fold a whole draft block into an `Engine` at once.

Nothing here is a rule. machine.py is the executable spec, event by event; a replay folds
millions of blocks, most of them alike, and this module lets it apply a block given as its
events, ``((Propose, 4), (Verify, 4), (Accept, 2))`` for one request and step, in one go.

A `BlockFolder` does so only when the result cannot depend on anything but the block itself:

- the engine runs with runtime checks off (``Engine(config, check=False)``);
- ``step`` is the engine's current step (an int, not a bool);
- the request is active, has no open block and has opened no block in this step (E3);
- every count is an int (a bool count must fail as `Engine.apply` fails it);
- every rule is the one the modules were loaded with (no mutant, no monkeypatch; checked on
  the first block of every engine step).

Then the block's effect is a pure function of (mode, k, drop_stale_output, structured, events):
the applied block the events close or the block they leave open. `BlockFolder.prepare`
computes it once, by the engine's own transition (`Engine._block_event`) on a fresh request,
and memoises it as a `PreparedBlock`; `fold` (a closing block) and `open` (a block left open)
then apply it to any request in that state. An illegal block is never prepared: the folder
declines it, and `apply_block` then applies the events one by one with `Engine.apply`, which
reports the first illegal one exactly as it always does (E7). A closed block is folded into
the request's and the engine's `CounterSum` as `Engine.apply` folds it. A Finish or an Abort
goes through `try_end`: each open block is discarded by the engine's own `Engine._discard`,
memoised per block shape.

tests/test_fast_path.py checks all of this against `Engine.apply` on random traces, legal and
illegal; proofs/ and the mutant tests exercise the plain engine (a patched rule switches the
folder off from the next engine step on).
"""

from __future__ import annotations

from . import counters as _counters
from . import machine as _machine
from .counters import CounterSum, Fold
from .errors import IllegalEvent
from .events import Abort, Event, Finish
from .machine import (
    BLOCK_EVENT_TYPES,
    Block,
    BlockCounts,
    ClosedBlock,
    Engine,
    Outcome,
    RequestState,
    RequestStatus,
)
from .step import StepInputs

MAX_MEMO = 1 << 16  # distinct blocks a folder remembers (then it starts afresh)

_MISSING = object()
# RequestState(...) without the frozen dataclass's per-field object.__setattr__ (one per fast
# block); the folder fills every field, as __init__ would.
_new_state = object.__new__


def _machine_rules() -> tuple[object, ...]:
    """The rules machine.py calls, as currently bound by name there (a mutant patches them)."""
    ns = vars(_machine)
    names = (
        "stage_rule",
        "accept_rule",
        "lifecycle_rule",
        "rfc_step",
        "legacy_step",
    )
    return tuple(ns[name] for name in names)


_ORIGINAL_RULES = _machine_rules()


def rules_intact() -> bool:
    """True when no rule the machine or the counters use is patched (see `CounterSum`)."""
    return _machine_rules() == _ORIGINAL_RULES and _counters.rules_intact()


class PreparedBlock:
    """What a block's events, checked, do to a fresh request (structured or not): close one
    applied block (``fold``: `Fold` of its inputs) or leave one open (``opened``, at the step
    it was first seen). Made only by `BlockFolder.prepare`, for that folder."""

    __slots__ = ("fold", "folder", "opened", "structured")

    def __init__(
        self, folder: BlockFolder, structured: bool, fold: Fold | None, opened: Block | None
    ) -> None:
        self.folder = folder
        self.structured = structured
        self.fold = fold
        self.opened = opened


class BlockFolder:
    """Applies whole blocks to ``engine`` at once (see the module docstring), else declines."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        # (structured, events) -> the prepared block, or None (the folder declines it).
        self._memo: dict[tuple[bool, BlockCounts], PreparedBlock | None] = {}
        # (structured, outcome, the block at step 0) -> the `Fold` of that block discarded.
        self._discards: dict[tuple[object, ...], Fold] = {}
        self._rules_step: int | None = None  # the engine step whose rules were found intact

    # -- by events ---------------------------------------------------------------------------

    def apply_block(self, request: str, step: int, events: BlockCounts) -> list[ClosedBlock]:
        """Exactly `Engine.apply` of each event ``cls(request, step, count)`` in turn (same
        rules, same `IllegalEvent` for the first illegal one, with the legal ones before it
        applied, E7), at once when the folder can (`try_block`, `try_open`)."""
        inputs = self.try_block(request, step, events)
        if inputs is not None:
            return [ClosedBlock(request, step, Outcome.APPLIED, inputs)]
        if self.try_open(request, step, events) is not None:
            return []
        closed: list[ClosedBlock] = []
        for cls, count in events:
            closed.extend(self.engine.apply(cls(request, step, count)))
        return closed

    def try_block(
        self, request: str, step: int, events: BlockCounts
    ) -> StepInputs[int, bool] | None:
        """`prepare` and `fold`: apply ``events``, which open and close one applied block, at
        once and return its inputs; None, having changed nothing, when the folder cannot."""
        state = self.engine.requests.get(request)
        prepared = None if state is None else self.prepare(state, step, events)
        return None if prepared is None else self.fold(request, step, prepared)

    def try_open(self, request: str, step: int, events: BlockCounts) -> Block | None:
        """`prepare` and `open`: apply ``events``, which open one block and leave it open, at
        once and return that block; None, having changed nothing, when the folder cannot."""
        state = self.engine.requests.get(request)
        prepared = None if state is None else self.prepare(state, step, events)
        return None if prepared is None else self.open(request, step, prepared)

    # -- prepared ----------------------------------------------------------------------------

    def prepare(self, state: RequestState, step: int, events: BlockCounts) -> PreparedBlock | None:
        """What ``events`` do to ``state`` (active, no open block, no block opened in this
        step, ``step`` the current one), memoised per (structured, events): a `PreparedBlock`
        when they close one applied block or leave one block open, else None (an illegal
        event, a count that is not an int, anything else; the state is not such a state).
        Changes nothing."""
        if not (
            not state.blocks
            and state.status is RequestStatus.ACTIVE
            and step == self.engine.current_step
            and state.last_block_step != step
        ):
            return None
        # True == 1: a bool count must go the way of `apply`, so the counts are checked before
        # the memo (by value) is consulted.
        for event in events:
            if type(event[1]) is not int:
                return None
        key = (state.structured, events)
        memo = self._memo
        prepared = memo.get(key, _MISSING)
        if prepared is _MISSING:
            prepared = self._run_fresh(state, step, events)
            if len(memo) >= MAX_MEMO:
                memo.clear()
            memo[key] = prepared
        assert prepared is None or isinstance(prepared, PreparedBlock)
        return prepared

    def fold(
        self, request: str, step: int, prepared: PreparedBlock
    ) -> StepInputs[int, bool] | None:
        """Apply a prepared closing block to ``request`` at ``step``; return its inputs. None,
        having changed nothing, when the block does not close or the guard fails."""
        fold = prepared.fold
        state = None if fold is None else self._ready(request, step, prepared)
        if state is None:
            return None
        assert fold is not None
        # `CounterSum.add_fold` on the request's and the engine's sums, inlined (the same
        # pending counts, the same bound).
        sums = state.sums
        pending = sums._pending
        pending[fold] = pending.get(fold, 0) + 1
        sums._view = None
        if len(pending) > CounterSum.MAX_PENDING:
            sums.value()
        totals = self.engine._totals
        pending = totals._pending
        pending[fold] = pending.get(fold, 0) + 1
        totals._view = None
        if len(pending) > CounterSum.MAX_PENDING:
            totals.value()
        self._commit(request, state, step, ())
        return fold.x

    def open(self, request: str, step: int, prepared: PreparedBlock) -> Block | None:
        """Apply a prepared block that stays open to ``request`` at ``step``; return the open
        block. None, having changed nothing, when the block closes or the guard fails."""
        opened = prepared.opened
        state = None if opened is None else self._ready(request, step, prepared)
        if state is None:
            return None
        assert opened is not None
        block = _at_step(opened, step)
        self._commit(request, state, step, (block,))
        return block

    def _ready(self, request: str, step: int, prepared: PreparedBlock) -> RequestState | None:
        """The request's state if ``prepared`` may be applied to it at ``step`` (the guard of
        the module docstring), else None."""
        engine = self.engine
        state = engine.requests.get(request)
        if (
            state is None
            or state.blocks
            or state.status is not RequestStatus.ACTIVE
            or state.structured is not prepared.structured
            or prepared.folder is not self
            or engine.check
            or type(step) is not int
            or step != engine.current_step
            or state.last_block_step == step
            or (step != self._rules_step and not self._rules_ok(step))
        ):
            return None
        return state

    def _commit(
        self, request: str, state: RequestState, step: int, blocks: tuple[Block, ...]
    ) -> None:
        """The request's new state: ``state`` with these open blocks and this step as its latest
        block step (E3); ``status`` stays ACTIVE. Built without the frozen dataclass's per-field
        setattr."""
        new = _new_state(RequestState)
        fields = new.__dict__
        fields.update(state.__dict__)
        fields["blocks"] = blocks
        fields["last_block_step"] = step
        self.engine.requests[request] = new

    # -- lifecycle -------------------------------------------------------------------------

    def try_end(self, event: Event) -> list[ClosedBlock] | None:
        """`Engine.apply` of a legal ``Finish`` or ``Abort``, with its discards memoised:
        every open block of the request is closed as discarded (its inputs computed once per
        block shape by the engine's own `Engine._discard`) and folded, and the request ends.
        Returns the closed blocks; None, having changed nothing, when the folder cannot (the
        event is anything else, illegal, or the guard of the module docstring fails)."""
        engine = self.engine
        if type(event) is Finish:
            status, outcome = RequestStatus.FINISHED, Outcome.DISCARDED_FINISHED
        elif type(event) is Abort:
            status, outcome = RequestStatus.ABORTED, Outcome.DISCARDED_ABORTED
        else:
            return None
        request, step, current = event.request, event.step, engine.current_step
        state = engine.requests.get(request) if type(request) is str else None
        if state is None:
            return None
        assert current is not None  # a request is added in a step that began (E1, E2)
        if (
            state.status is not RequestStatus.ACTIVE
            or engine.check
            or type(step) is not int
            or not 0 <= step <= current
            or (current != self._rules_step and not self._rules_ok(current))
        ):
            return None
        closed: list[ClosedBlock] = []
        sums, totals, memo = state.sums, engine._totals, self._discards
        for block in state.blocks:
            key = (state.structured, outcome, _at_step(block, 0))  # its shape, not its step
            fold = memo.get(key)
            if fold is None:
                discarded = engine._discard(state, block, outcome)
                if len(memo) >= MAX_MEMO:
                    memo.clear()
                fold = memo[key] = Fold(engine.config.mode, discarded.inputs)
            sums.add_fold(fold)
            totals.add_fold(fold)
            closed.append(ClosedBlock(request, block.step, outcome, fold.x))
        engine.requests[request] = RequestState(
            request, state.structured, status, (), sums, state.last_block_step
        )
        return closed

    def _rules_ok(self, step: int) -> bool:
        """Whether every rule is the original, checked once per engine step."""
        if not rules_intact():
            return False
        self._rules_step = step
        return True

    def _run_fresh(
        self, state: RequestState, step: int, events: BlockCounts
    ) -> PreparedBlock | None:
        """``events`` through `Engine._block_event` on a fresh copy of ``state`` (which the
        caller found active, with no open block, at the current step), prepared: the applied
        block they close, the one they leave open, or None (an illegal event, anything else)."""
        engine = self.engine
        fresh = RequestState(
            state.request,
            state.structured,
            state.status,
            (),
            CounterSum.zero(engine.config.k),
            None,
        )
        closed: list[ClosedBlock] = []
        try:
            for cls, count in events:
                event = cls(state.request, step, count)
                if not isinstance(event, BLOCK_EVENT_TYPES):
                    return None
                fresh, closed = engine._block_event(fresh, event)
        except IllegalEvent:
            return None
        if closed:
            # A fresh request opens one block in the step (E3) and it cannot be stale, so the
            # events closed exactly that block, applied, and any event after it was illegal.
            assert not fresh.blocks and len(closed) == 1
            assert closed[0].outcome is Outcome.APPLIED
            fold = Fold(engine.config.mode, closed[0].inputs)
            return PreparedBlock(self, state.structured, fold, None)
        if len(fresh.blocks) == 1:
            return PreparedBlock(self, state.structured, None, fresh.blocks[0])
        return None


def _at_step(block: Block, step: int) -> Block:
    """``block`` (memoised at the step it was first seen) at ``step``."""
    if block.step == step:
        return block
    return Block(
        step,
        block.stages,
        block.proposed,
        block.padding,
        block.grammar_valid,
        block.schedule_cap,
        block.av_cap,
        block.stale,
        block.stale_dropped,
    )
