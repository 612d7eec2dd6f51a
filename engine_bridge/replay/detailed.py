"""Many requests' detailed steps (``spectally import requests``) replayed as columns.

`importers.requests.replay_steps` applies a request's detailed entries to a reference engine
one event at a time: an entry (accepted a, drafted d) is one async legacy block of a
structured request, Propose(max(d, 1)), Verify(max(d, 1)), GrammarReject(1) when d is 0,
Accept(a). Here the same blocks, all requests of one k at once, are the columns of
request_step records that translate into those events (proposed = scheduled = max(d, 1),
invalid = max(d, 1) - d, sampled = a + 1), and `blocks.check_blocks` evaluates
reference/step.py's rules over them. A request agrees when every block of its batch passes
and its blocks' legacy counts sum to its reported (steps, drafted, accepted). Any other
request is replayed through the reference, which writes the message: one with a sum that
differs or a value above k from its first entry; one whose blocks the checks refuse (a
refused batch is halved down to it) from the refused slice of its blocks, every block before
having passed the same rules. The result is the reference's, request by request
(tests/replay/test_detailed.py compares the two).
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import chain
from typing import Any

import numpy as np
from spectally.reference.step import Mode

from ..importers.requests import (
    RequestMetrics,
    StepReplay,
    first_refusal,
    reference_replays,
    replay_steps,
)
from .columnar import jit
from .columnar.array_arith import Ints
from .columnar.blocks import NULL, BlockColumns, check_blocks
from .columnar.reader import Irregular
from .columnar.sequence import Lanes

# Fewer blocks than this: the reference alone (it replays a few thousand blocks in less time
# than importing numpy takes).
MIN_BLOCKS = 4096
BATCH_BLOCKS = 1 << 16  # blocks per columnar check: its temporaries stay a few MB


def replay_requests(requests: Sequence[RequestMetrics]) -> list[StepReplay]:
    """`importers.requests.reference_replays` of ``requests`` (each `replayable`), the
    agreeing ones found by the columnar checks."""
    blocks = sum(len(r.metrics["per_step_drafted"]) for r in requests)
    if blocks < MIN_BLOCKS:
        return reference_replays(requests)
    out: list[StepReplay | None] = [None] * len(requests)
    by_k: dict[int, list[int]] = {}
    for i, r in enumerate(requests):
        m = r.metrics
        k = m["num_spec_tokens"]
        if max(m["per_step_drafted"], default=0) > k or max(m["per_step_accepted"], default=0) > k:
            out[i] = replay_steps(r)  # a block above k: the reference says which
        else:
            by_k.setdefault(k, []).append(i)
    with jit.allowed(False):  # numba's import costs more than these few shapes
        for k, members in by_k.items():
            for batch in _batches(requests, members):
                _replay_batch(requests, k, batch, out)
    return [replay if replay is not None else StepReplay(None) for replay in out]


def _batches(requests: Sequence[RequestMetrics], members: list[int]) -> list[list[int]]:
    """``members`` in order, cut into runs of about `BATCH_BLOCKS` blocks."""
    batches: list[list[int]] = [[]]
    size = 0
    for i in members:
        n = len(requests[i].metrics["per_step_drafted"])
        if size and size + n > BATCH_BLOCKS:
            batches.append([])
            size = 0
        batches[-1].append(i)
        size += n
    return batches


class _Refused(Exception):
    """The columnar checks refuse a block of the batch's slice starting at block ``start``."""

    def __init__(self, start: int) -> None:
        super().__init__(start)
        self.start = start


def _replay_batch(
    requests: Sequence[RequestMetrics], k: int, batch: list[int], out: list[StepReplay | None]
) -> None:
    """Fill ``out`` for the requests of ``batch``: agreement from the columnar checks, the
    reference's result for the rest. A refused batch is halved down to the request the
    checks refuse, and the reference then starts at the refused slice of its blocks (every
    block before passed the same rules), so one bad request costs a few columnar checks and
    a slice of reference replay."""
    try:
        agrees = _agreement(k, [requests[i].metrics for i in batch])
    except _Refused as refused:
        if len(batch) > 1:
            half = len(batch) // 2
            _replay_batch(requests, k, batch[:half], out)
            _replay_batch(requests, k, batch[half:], out)
            return
        r = requests[batch[0]]
        why = first_refusal(r, refused.start)
        out[batch[0]] = StepReplay(why) if why is not None else replay_steps(r)
        return
    for i, ok in zip(batch, agrees, strict=True):
        out[i] = StepReplay(None) if ok else replay_steps(requests[i])


def _agreement(k: int, metrics: list[dict[str, Any]]) -> list[bool]:
    """Whether each request's blocks sum to its reported legacy counters (`_Refused` when
    the columnar checks refuse a block of the batch)."""
    per_acc = [m["per_step_accepted"] for m in metrics]
    per_dr = [m["per_step_drafted"] for m in metrics]
    lengths = np.fromiter(map(len, per_dr), np.int64, len(metrics))
    total = int(lengths.sum())
    accepted = np.fromiter(chain.from_iterable(per_acc), np.int64, total)
    drafted = np.fromiter(chain.from_iterable(per_dr), np.int64, total)
    owner = np.repeat(np.arange(len(metrics)), lengths)
    sums = np.zeros((3, len(metrics)), np.int64)
    # One request may hold more blocks than a batch: the rules see slices of `BATCH_BLOCKS`,
    # so their temporaries stay that size, and the sums add up over the slices.
    for start in range(0, total, BATCH_BLOCKS):
        at = slice(start, start + BATCH_BLOCKS)
        try:
            counts = _legacy_counts(k, accepted[at], drafted[at])
        except Irregular:
            raise _Refused(start) from None
        for row, column in zip(sums, counts, strict=True):
            row += np.bincount(owner[at], weights=column, minlength=len(metrics)).astype(np.int64)
    reported = [
        np.array([m[name] for m in metrics], dtype=np.int64)
        for name in ("num_spec_steps", "num_draft_tokens", "num_accepted_draft_tokens")
    ]
    same = np.ones(len(metrics), np.bool_)
    for got, want in zip(sums, reported, strict=True):
        same &= got == want
    agrees: list[bool] = same.tolist()
    return agrees


def _legacy_counts(k: int, accepted: Ints, drafted: Ints) -> tuple[Ints, ...]:
    """Each block's legacy counts (num_drafts, num_draft_tokens, num_accepted_tokens) as
    the rules give them (`Irregular` when they refuse a block)."""
    size = len(drafted)
    slots = np.maximum(drafted, 1)
    null = np.full(size, NULL, np.int64)
    yes = np.ones(size, np.bool_)
    columns = BlockColumns(
        proposed=slots,
        padding=np.zeros(size, np.int64),
        grammar_valid=null,
        scheduled=slots,
        invalid=slots - drafted,
        verified=null,
        accepted=accepted,
        sampled=accepted + 1,
        delivered=null,
        applied=yes,
        structured=yes,
        stale=np.zeros(size, np.bool_),
    )
    legacy = check_blocks(Mode.ASYNC, k, columns).legacy
    return legacy.unpacked(k) if isinstance(legacy, Lanes) else legacy
