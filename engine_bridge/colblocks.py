"""Columnar block checks: a whole chunk of ``request_step`` records against the step rules.

The record columns are translated into the stage inputs the reference machine would build
for each block (`block_inputs`: the column form of translate.py's events as reference/
machine.py applies them), and the rules of reference/step.py are evaluated over those
arrays by `ArrayArith`: ``admissibility``, ``pipeline``, ``legacy_scheduled_invalid``,
``rfc_step``, ``legacy_step``, ``position_increment``, and the counter folds of
reference/counters.py. A block any check refuses makes the chunk `Irregular`: the reference
replay then judges the whole log and writes the report.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

import numpy as np
from spectally.reference.arith import INT_ARITH
from spectally.reference.counters import (
    Counters,
    LegacyTotals,
    PositionCounts,
    RfcTotals,
    legacy_add_step,
    legacy_zero,
    rfc_add_step,
    rfc_zero,
)
from spectally.reference.step import (
    Mode,
    StepInputs,
    admissibility,
    legacy_scheduled_invalid,
    legacy_step,
    pipeline,
    position_increment,
    rfc_step,
)

from .array_arith import ARRAY_ARITH, Bools, Ints
from .colread import Irregular
from .report import SHIFT_TERMS, shift_terms
from .translate import delivered_consistent, vllm_accepted

NULL = -1  # a null count in a column


@dataclass
class BlockColumns:
    """One chunk's request_step records, one element per record (nulls are -1)."""

    proposed: Ints
    padding: Ints
    grammar_valid: Ints
    scheduled: Ints
    invalid: Ints
    verified: Ints
    accepted: Ints
    sampled: Ints
    delivered: Ints  # -1: absent or null
    applied: Bools  # outcome "applied"
    structured: Bools  # of the request
    stale: Bools  # outcome "discarded_stale": dropped stale output, its Accept after a Preempt


@dataclass
class BlockResult:
    """What the checked blocks add: per-block legacy counts (for the step accounts) and the
    chunk's counters and shift terms."""

    legacy_drafts: Ints
    legacy_tokens: Ints
    legacy_accepted: Ints
    counters: Counters
    shift: dict[str, int]


def _fail(bad: Bools, what: str) -> None:
    if bad.any():
        raise Irregular(f"{what} ({int(np.count_nonzero(bad))} blocks)")


def block_inputs(mode: Mode, c: BlockColumns) -> tuple[StepInputs[Any, Any], Bools, Ints, Bools]:
    """The inputs the reference machine builds for each block after its events (before the
    Accept), whether the block reached the forward pass, the drafts `Verify` names, and which
    blocks translate.py or the machine's event checks refuse."""
    n, pad, g, s, inv, v = (
        c.proposed,
        c.padding,
        c.grammar_valid,
        c.scheduled,
        c.invalid,
        c.verified,
    )
    sync = Mode(mode) is Mode.SYNC
    has_g, has_v = g >= 0, v >= 0
    slots = n + pad
    kept = np.where(has_g, g, n) if sync else n
    offered = np.where(c.structured, kept, slots) if sync else slots
    scheduled_drafts = np.minimum(kept, s)
    closes = c.applied | c.stale  # blocks closed by an Accept (translate_block's plan.accept)
    in_forward = (s > 0) | (c.sampled > 0) | closes  # translate_block's in_forward
    refused = (
        (has_g & ~c.structured)  # translate: grammar_valid on an unstructured request
        | (s > offered)  # translate: scheduled above what was offered
        | (has_v & (v > scheduled_drafts))  # translate: verified above the scheduled drafts
    )
    if sync:
        refused |= has_g & (g > n)  # translate: grammar_valid above the proposal
        grammar_valid = kept  # GrammarReject(n - g) leaves g
    else:
        valid = np.where(has_g, g, np.where(inv >= 0, np.maximum(s - inv, 0), NULL))
        rejects = c.structured & in_forward & (valid >= 0) & (valid < scheduled_drafts)
        grammar_valid = np.where(rejects, valid, n)  # GrammarReject after Verify
    schedule_cap = np.where(s < offered, s, slots)  # Truncate(offered - s)
    av_cap = np.where(has_v & (v < scheduled_drafts), v, slots)  # AVSkip(drafts - v)
    verify = np.where(has_v, v, scheduled_drafts)
    x = StepInputs(
        proposed=n,
        padding=pad,
        structured=c.structured,
        grammar_valid=grammar_valid,
        schedule_cap=schedule_cap,
        av_cap=av_cap,
        accepted=c.accepted,
        applied=c.applied,
        legacy_reported=c.applied,
    )
    return x, in_forward, verify, refused


def check_blocks(mode: Mode, k: int, c: BlockColumns) -> BlockResult:
    """Every per-block check of the reference replay, over the whole chunk; `Irregular` if
    any block fails one (or is a pattern the columnar checker leaves to the reference).

    Every check and count depends only on the block's record (its counts, outcome and
    structured flag), so the rules run once per distinct record shape and the results are
    weighted by how many blocks share it (exact: the folds are sums)."""
    key = _shape_key(k, c)
    if key is None:
        return _check_rows(mode, k, c, None)
    first, inverse, counts = _groups(key)
    rows = BlockColumns(*(getattr(c, f.name)[first] for f in fields(BlockColumns)))
    result = _check_rows(mode, k, rows, counts)
    result.legacy_drafts = result.legacy_drafts[inverse]
    result.legacy_tokens = result.legacy_tokens[inverse]
    result.legacy_accepted = result.legacy_accepted[inverse]
    return result


def _groups(key: Ints) -> tuple[Ints, Ints, Ints]:
    """``np.unique(key, return_index, return_inverse, return_counts)`` without the ordered
    unique values (one argsort; several times faster than np.unique on these sizes)."""
    n = len(key)
    order = np.argsort(key)
    ordered = key[order]
    new = np.empty(n, dtype=np.bool_)
    new[:1] = True
    np.not_equal(ordered[1:], ordered[:-1], out=new[1:])
    starts = np.flatnonzero(new)
    inverse = np.empty(n, dtype=np.int64)
    inverse[order] = np.cumsum(new) - 1
    counts = np.diff(np.append(starts, n))
    return order[starts], inverse, counts


def _shape_key(k: int, c: BlockColumns) -> Ints | None:
    """One int64 per block that is equal exactly when the blocks' records are (counts -1..k+2
    packed in fixed-width bit fields); None when they do not fit in 63 bits."""
    width = (k + 3).bit_length()
    columns = [getattr(c, f.name) for f in fields(BlockColumns)]
    if width * len(columns) > 63:
        return None
    key = np.zeros(len(c.proposed), dtype=np.int64)
    for column in columns:
        if column.dtype != np.bool_ and len(column) and int(column.max()) > k + 2:
            return None  # a count far above k: checked block by block (and refused there)
        key <<= width
        key |= column.astype(np.int64) + 1  # -1 (null) .. k + 2 -> 0 .. k + 3
    return key


def _check_rows(mode: Mode, k: int, c: BlockColumns, weights: Ints | None) -> BlockResult:
    """`check_blocks` over rows that stand for ``weights`` blocks each (None: one each)."""
    ar = ARRAY_ARITH
    x, in_forward, verify, refused = block_inputs(mode, c)
    _fail(refused, "a record translate.py refuses")
    n, pad = c.proposed, c.padding
    _fail((n > k) | (n + pad > k), "a block above k")  # Propose, Pad (E5)
    p = pipeline(mode, x, ar)
    _fail(in_forward & (p.verified != verify), "Verify names other drafts than reached")
    ok = np.ones(len(n), dtype=np.bool_)
    closes = c.applied | c.stale
    for _, cond in admissibility(mode, x, ar, ar.lit(k)):
        ok &= cond | ~closes  # the Accept of an applied or dropped stale block (E5, E6)
    _fail(~ok, "an inadmissible block Accept")
    # What replay checks of the record: scheduled slots, invalid, accepted, delivered.
    _fail(p.scheduled_slots != c.scheduled, "scheduled differs from the reference's")
    expected_invalid = legacy_scheduled_invalid(mode, x, ar)
    actual_invalid = np.maximum(c.invalid, 0)
    _fail(in_forward & (expected_invalid != actual_invalid), "invalid differs")
    _fail(c.accepted != vllm_accepted(c.sampled, ar), "accepted is not max(sampled - 1, 0)")
    present = c.delivered >= 0
    if present.any():
        consistent = delivered_consistent(c.applied, c.delivered, c.sampled, ar)
        _fail(present & ~consistent, "delivered contradicts the outcome")
    lg = legacy_step(mode, x, ar)  # discarded blocks: not reported, so zeros
    size = len(c.proposed)
    shift = dict(
        zip(
            SHIFT_TERMS,
            (_total(t, size, weights) for t in shift_terms(mode, x, lg, ar)),
            strict=True,
        )
    )
    # A block a lifecycle event discards is folded with nothing accepted and, if it never
    # reached the target, nothing verified (transitions.discard_rule); a dropped stale block
    # keeps its Accept's count, not applied (transitions.accept_rule; x has applied False).
    folded = StepInputs(
        proposed=x.proposed,
        padding=x.padding,
        structured=x.structured,
        grammar_valid=x.grammar_valid,
        schedule_cap=x.schedule_cap,
        av_cap=np.where(in_forward, x.av_cap, 0),
        accepted=np.where(closes, x.accepted, 0),
        applied=x.applied,
        legacy_reported=x.legacy_reported,
    )
    return BlockResult(
        np.asarray(lg.num_drafts, dtype=np.int64),
        np.asarray(lg.num_draft_tokens, dtype=np.int64),
        np.asarray(lg.num_accepted_tokens, dtype=np.int64),
        fold_counters(mode, k, folded, weights),
        shift,
    )


def fold_counters(
    mode: Mode, k: int, x: StepInputs[Any, Any], weights: Ints | None = None
) -> Counters:
    """The counters of all these blocks (each row standing for ``weights`` blocks): the
    reference's folds (``rfc_add_step``, ``legacy_add_step``) over the arrays, summed; per
    position, ``position_increment`` of each distinct prefix length times how many blocks
    have it."""
    ar = ARRAY_ARITH
    size = len(x.proposed)
    rfc = rfc_step(mode, x, ar)
    lg = legacy_step(mode, x, ar)
    r = rfc_add_step(rfc_zero(ar), rfc, ar)
    legacy = legacy_add_step(legacy_zero(ar), lg, ar)
    rfc_totals = RfcTotals(*(_total(getattr(r, f.name), size, weights) for f in fields(RfcTotals)))
    legacy_totals = LegacyTotals(
        *(_total(getattr(legacy, f.name), size, weights) for f in fields(LegacyTotals))
    )
    lengths = (rfc.drafted, rfc.verified, rfc.accepted, lg.num_accepted_tokens)
    histograms = [_histogram(length, size, k, weights) for length in lengths]
    positions = tuple(
        PositionCounts(
            *(
                sum(count * position_increment(a, i, INT_ARITH) for a, count in enumerate(h))
                for h in histograms
            )
        )
        for i in range(k)
    )
    return Counters(k=k, rfc=rfc_totals, legacy=legacy_totals, positions=positions)


def _total(column: Any, size: int, weights: Ints | None) -> int:
    """Σ of a fold's column over the blocks (the column may be a scalar: the rule gave the
    same value to every row)."""
    array = np.broadcast_to(np.asarray(column, dtype=np.int64), (size,))
    return int(array.sum() if weights is None else array @ weights)


def _histogram(length: Any, size: int, k: int, weights: Ints | None) -> list[int]:
    """How many blocks have each prefix length 0..k."""
    array = np.broadcast_to(np.asarray(length, dtype=np.int64), (size,))
    counts = np.bincount(array, weights=weights, minlength=k + 1)
    return [int(v) for v in counts]
