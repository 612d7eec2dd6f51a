"""Step events: what an engine does to one request's draft block, as frozen data.

Every event names the request and the engine step it belongs to. For block events the step is
the step the block was *scheduled* in (async results arrive one iteration later and are keyed
back to it). Counts are token counts; the machine rejects negatives.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class StepBegin:
    """The engine starts step ``step``; steps strictly increase."""

    step: int


@dataclass(frozen=True)
class AddRequest:
    """A request enters the engine. ``structured``: it has a structured-output grammar."""

    request: str
    step: int
    structured: bool = False


@dataclass(frozen=True)
class Propose:
    """The drafter proposed ``num_tokens`` drafts for the request's block at ``step``."""

    request: str
    step: int
    num_tokens: int


@dataclass(frozen=True)
class Pad:
    """``num_slots`` placeholder slots standing for no proposal (P/D padding, skipped drafting)."""

    request: str
    step: int
    num_slots: int


@dataclass(frozen=True)
class GrammarReject:
    """The grammar rejects the last ``num_tokens`` drafts (sync: of the proposal, before
    scheduling; async: of the scheduled drafts, after the forward pass was launched)."""

    request: str
    step: int
    num_tokens: int


@dataclass(frozen=True)
class Truncate:
    """The schedule (token budget, max_model_len) cuts the last ``num_slots`` slots of the block
    (padding slots first, then drafts)."""

    request: str
    step: int
    num_slots: int


@dataclass(frozen=True)
class AVSkip:
    """Adaptive verification does not send the last ``num_tokens`` scheduled drafts."""

    request: str
    step: int
    num_tokens: int


@dataclass(frozen=True)
class Verify:
    """The target forward pass ran over ``num_tokens`` drafts of the block."""

    request: str
    step: int
    num_tokens: int


@dataclass(frozen=True)
class Accept:
    """The target accepted ``num_tokens`` drafts (bonus token excluded); the result is applied,
    unless the block went stale by preemption *and* the engine dropped that stale output, in
    which case it is discarded."""

    request: str
    step: int
    num_tokens: int


@dataclass(frozen=True)
class Finish:
    """The request stopped (EOS, max_tokens, stop string). Open blocks are discarded."""

    request: str
    step: int
    reason: str = "stop"


@dataclass(frozen=True)
class Abort:
    """The request was aborted. Open blocks are discarded."""

    request: str
    step: int


@dataclass(frozen=True)
class Preempt:
    """The request was preempted. Blocks not yet in the forward pass are discarded; a block in
    flight (async) goes stale: vLLM still delivers its output to the request (its later Accept
    is applied) unless it drops it.

    ``drop_stale_output``: whether the engine drops that stale output (vLLM decides per
    preemption); None means the engine's configured default. A dropped stale output never
    reaches the request: both profiles discard it.
    """

    request: str
    step: int
    drop_stale_output: bool | None = None


BlockEvent = Propose | Pad | GrammarReject | Truncate | AVSkip | Verify | Accept
RequestEvent = AddRequest | Finish | Abort | Preempt
Event = StepBegin | BlockEvent | RequestEvent

EVENT_TYPES: tuple[type, ...] = (
    StepBegin,
    AddRequest,
    Propose,
    Pad,
    GrammarReject,
    Truncate,
    AVSkip,
    Verify,
    Accept,
    Finish,
    Abort,
    Preempt,
)
