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
from spectally.engine_bridge.steplog.delivered import delivered_consistent, vllm_accepted
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
    SHIFT_TERMS,
    Mode,
    StepInputs,
    admissibility,
    legacy_scheduled_invalid,
    legacy_step,
    pipeline,
    position_increment,
    rfc_step,
    shift_terms,
)

from . import hashing
from .array_arith import ARRAY_ARITH, Bools, Ints
from .reader import Irregular
from .scanner import COLUMNS
from .sequence import LANES_MAX, Lanes, lane_words
from .store import Growing

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

    legacy: tuple[Ints, Ints, Ints] | Lanes  # num_drafts, num_draft_tokens, num_accepted
    counters: Counters | None  # None: left to the log's `ShapeTable.totals`
    shift: dict[str, int] | None


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


class ShapeTable:
    """The distinct block shapes of a log, each checked by the rules once, with its legacy
    counts, and how many blocks had it. A shape is everything the rules read of a block: the
    record's counts, whether it is applied or dropped stale output, and its request's
    structured flag (which discarded outcome a record claims is the lifecycle pass's check).

    Every check and count depends only on the shape, so the rules run once per shape of the
    whole log (not once per block, nor once per chunk), and the counters are folded at the
    end over the shapes, weighted by how many blocks had each (exact: the folds are sums).
    A block finds its shape through an open-addressing hash table over numpy arrays (one
    multiply, shift, a gather and a compare per block, linear probing, no sort), where a
    block of a new shape (a few per chunk once the log is under way) adds it. Memory: a few
    values per shape; past `MAX_SHAPES` the table is folded and starts afresh, so it is
    bounded whatever the log.
    """

    def __init__(self, mode: Mode, k: int) -> None:
        self.mode, self.k = mode, k
        width = (k + 3).bit_length()  # counts -1 .. k + 2 -> 0 .. k + 3
        # 9 counts of `width` bits and 3 flags of one bit (`_key`)
        self.width = width if 9 * width + 3 <= 63 else 0
        self.lanes = 3 + k <= LANES_MAX
        self.folded: list[tuple[Counters, dict[str, int]]] = []  # flushed tables, unpacked chunks
        self._reset()

    def _reset(self) -> None:
        # Per id, in stores that grow in place (`store`: no fresh arrays per chunk):
        # the shapes' columns (counts, then flags: `BlockColumns` order); legacy
        # num_drafts, num_draft_tokens, num_accepted_tokens (packed in `Lanes` words for a
        # small k: a step's sums are then a few sums of words); blocks of that shape so far.
        self._counts = Growing(len(COUNT_FIELDS), np.int64)
        self._flags = Growing(len(_FLAG_FIELDS), np.bool_)
        words = (3 + self.k + 3) // 4 if self.lanes else 3
        self._legacy = Growing(words, np.int64)
        self._weights = Growing(1, np.int64)
        self.checked = 0  # the ids below this one have passed the rules (`_check_pending`)
        # The hash table: key and id per slot (-1: free; a key is never negative), at most
        # a quarter full (`_room`).
        self.slot_keys = np.full(1 << 12, -1, dtype=np.int64)
        self.slot_ids = np.zeros(1 << 12, dtype=np.int64)

    def __len__(self) -> int:
        """The shapes in the table."""
        return len(self._counts)

    @property
    def legacy(self) -> tuple[Ints, ...]:
        return tuple(self._legacy.columns())

    @property
    def weights(self) -> Ints:
        return self._weights.columns()[0]

    def rows(self, start: int = 0, stop: int | None = None) -> BlockColumns:
        """The columns of the shapes with ids ``start`` to ``stop`` (default: the last)."""
        counts = dict(zip(COUNT_FIELDS, self._counts.columns(start, stop), strict=True))
        flags = dict(zip(_FLAG_FIELDS, self._flags.columns(start, stop), strict=True))
        return BlockColumns(**counts, **flags)

    # -- lookup ------------------------------------------------------------------------------

    def _key(self, c: BlockColumns) -> Ints | None:
        """One int64 per block, equal exactly when the blocks' shapes are: the counts
        (-1 .. k + 2, shifted to 0 .. k + 3) in fixed-width bit fields, then the three flags
        one bit each; None when a count does not fit. A column that is the same in every
        block of the chunk (often: delivered, padding, the flags) adds a constant, so only
        the varying columns cost a pass each."""
        width = self.width
        if not width:
            return None
        n = len(c.proposed)
        constant = 0
        key: Ints | None = None
        at = 0  # bit position of the last column added to `key`
        columns = [(getattr(c, name), width) for name in COUNT_FIELDS]
        columns += [(c.applied, 1), (c.structured, 1), (c.stale, 1)]
        position = 9 * width + 3
        for column, bits in columns:
            position -= bits
            if n == 0:
                continue
            low, high = int(column.min()), int(column.max())
            if bits > 1 and (low < -1 or high > self.k + 2):
                return None  # a count far above k: checked block by block (and refused there)
            offset = 1 if bits > 1 else 0
            if low == high:
                constant += (low + offset) << position
                continue
            constant += offset << position
            if key is None:
                key = column.astype(np.int64)
            else:
                _shift(key, at - position)
                key += column
            at = position
        if key is None:
            return np.full(n, constant, dtype=np.int64)
        _shift(key, at)
        key += constant  # the exact key, in 0 .. 2**63 - 1 (wrapping on the way is modular)
        return key

    def _slots(self, key: Ints) -> Ints:
        bits = len(self.slot_keys).bit_length() - 1
        mixed = key.view(np.uint64) * _MIX
        mixed >>= np.uint64(64 - bits)
        return mixed.view(np.int64)  # < 2**bits: the same value

    def _probe(self, key: Ints) -> Ints:
        """The shape id of each key (linear probing from its slot to the key or a free
        slot); -1 for a key not in the table."""
        ids = np.full(len(key), -1, dtype=np.int64)
        slots = self._slots(key)
        rows = np.arange(len(key))
        mask = len(self.slot_keys) - 1
        while len(rows):
            held = self.slot_keys[slots]
            hit = held == key[rows]
            ids[rows[hit]] = self.slot_ids[slots[hit]]
            on = ~hit & (held != -1)  # another key there: the next slot
            rows, slots = rows[on], (slots[on] + 1) & mask
        return ids

    def lookup(self, c: BlockColumns, counts: Ints | None = None) -> Ints | None:
        """The shape id of every block, each block counted in its shape's weight and new
        shapes added; None when the counts do not fit a key (the caller checks them
        unpacked; nothing counted or added). New shapes are checked by the rules before any
        verdict (`totals`), and their legacy counts evaluated at once (`_add_legacy`).
        ``counts``: optionally the count columns as one (n, 9) matrix in `COUNT_FIELDS`
        order; with it, the compiled kernels (`hashing`: the same keys as `_key`) key the
        rows in one pass and find, add and count each block's shape in another."""
        if counts is not None and self.width and hashing.wanted(len(counts)):
            ids = self._lookup_compiled(c, counts)
        else:
            ids = self._lookup_numpy(c)
        if ids is not None:
            self._add_legacy()
        return ids

    def _lookup_compiled(self, c: BlockColumns, counts: Ints) -> Ints | None:
        key = hashing.shape_keys(counts, c.applied, c.structured, c.stale, self.width, self.k)
        if key is None:
            return None
        ids = np.empty(len(key), dtype=np.int64)
        start = 0
        while start < len(key):
            room = min(self._room(1), len(key) - start)
            self._weights.reserve(room)  # the new shapes' weights are counted in place
            stop, rows = hashing.shape_ids(
                key,
                start,
                self.slot_keys,
                self.slot_ids,
                ids,
                self._weights.buffer[0],
                len(self),
                room,
            )
            self._add_shapes(c, rows, counts)
            self._weights.claim(len(rows))
            start = stop
        return ids

    def _lookup_numpy(self, c: BlockColumns) -> Ints | None:
        key = self._key(c)
        if key is None:
            return None
        ids = self._probe(key)
        miss = np.flatnonzero(ids < 0)
        batch = 1024
        while len(miss):
            # The shapes of a first batch of misses, then the rest probed again: a chunk's
            # common shapes are found in its first blocks, so few blocks take the slow path.
            part, rest = miss[:batch], miss[batch:]
            ids[part] = self._resolve(c, key, part)
            if len(rest):
                ids[rest] = self._probe(key[rest])
                rest = rest[ids[rest] < 0]
            miss, batch = rest, 4 * batch
        self.weights[:] += np.bincount(ids, minlength=len(self))
        return ids

    def _resolve(self, c: BlockColumns, key: Ints, miss: Ints) -> Ints:
        """Ids of these blocks, whose keys are not in the table: their shapes added, in key
        order (their legacy counts follow in `_add_legacy`, the rules in one batch later:
        `_check_pending`)."""
        keys, first, inverse = np.unique(key[miss], return_index=True, return_inverse=True)
        found = np.arange(len(self), len(self) + len(keys))
        self._room(len(keys))
        self._insert(keys, found)
        self._add_shapes(c, miss[first])
        self._weights.append([np.zeros(len(keys), dtype=np.int64)])
        return found[inverse.reshape(-1)]

    def _add_shapes(self, c: BlockColumns, rows: Ints, counts: Ints | None = None) -> None:
        """The shapes of blocks ``rows`` (new ones, given the next ids in this order);
        ``counts``: ``c``'s count columns as one matrix (`lookup`), gathered in one call."""
        if len(rows):
            if counts is not None:
                self._counts.append(counts[rows].T)
            else:
                self._counts.append([getattr(c, name)[rows] for name in COUNT_FIELDS])
            self._flags.append([getattr(c, name)[rows] for name in _FLAG_FIELDS])

    def _add_legacy(self) -> None:
        """The legacy counts of the shapes added since the last call (`legacy_step` over
        them at once: one evaluation per chunk, however many batches `lookup` resolved)."""
        start, size = len(self._legacy), len(self)
        if start == size:
            return
        x, _, _, _ = block_inputs(self.mode, self.rows(start))
        lg = legacy_step(self.mode, x, ARRAY_ARITH)
        values = [
            _column(v, size - start)
            for v in (lg.num_drafts, lg.num_draft_tokens, lg.num_accepted_tokens)
        ]
        self._legacy.append(list(lane_words(self.k, *values)) if self.lanes else values)

    def _check_pending(self) -> None:
        """The rules over the shapes added since the last call (`Irregular` if one fails)."""
        size = len(self)
        for start in range(self.checked, size, FOLD_ROWS):
            _check_rows(self.mode, self.k, self.rows(start, start + FOLD_ROWS))
        self.checked = size

    def _folds(self) -> list[tuple[Counters, dict[str, int]]]:
        """The counters and shift terms of the blocks of the shapes so far, in parts."""
        weights = self.weights
        return [
            _fold_rows(
                self.mode, self.k, self.rows(at, at + FOLD_ROWS), weights[at : at + FOLD_ROWS]
            )
            for at in range(0, len(weights), FOLD_ROWS)
        ]

    def _room(self, needed: int) -> int:
        """How many shapes may be added with the table at most a quarter full, at least
        ``needed``: the table grows first (by four, rehashed) until so many may."""
        size = len(self.slot_keys)
        if size // 4 - len(self) < needed:
            while size // 4 - len(self) < needed:
                size *= 4
            held = self.slot_keys >= 0
            keys, ids = self.slot_keys[held], self.slot_ids[held]
            self.slot_keys = np.full(size, -1, dtype=np.int64)
            self.slot_ids = np.zeros(size, dtype=np.int64)
            self._insert(keys, ids)
        return size // 4 - len(self)

    def _insert(self, keys: Ints, ids: Ints) -> None:
        """Put these keys (distinct, none in the table) into it: each in the first free
        slot from its own on, first come first served among keys after the same slot."""
        slots = self._slots(keys)
        mask = len(self.slot_keys) - 1
        while len(keys):
            free = np.flatnonzero(self.slot_keys[slots] == -1)
            _, first = np.unique(slots[free], return_index=True)
            won = free[first]
            self.slot_keys[slots[won]] = keys[won]
            self.slot_ids[slots[won]] = ids[won]
            rest = np.ones(len(keys), dtype=np.bool_)
            rest[won] = False
            # the others' slots are taken now (by another key, or a winner): the next one
            keys, ids, slots = keys[rest], ids[rest], (slots[rest] + 1) & mask

    # -- totals ------------------------------------------------------------------------------

    def flush(self) -> None:
        """Fold the shapes so far into the totals and start afresh (memory stays bounded)."""
        self._check_pending()
        self.folded += self._folds()
        self._reset()

    def totals(self) -> tuple[Counters, dict[str, int]]:
        """The counters and shift terms of every block looked up (both profiles)."""
        self._check_pending()
        parts = self.folded + self._folds()
        counters = Counters.zero(self.k)
        shift = dict.fromkeys(SHIFT_TERMS, 0)
        for part_counters, part_shift in parts:
            counters = counters.merge(part_counters)
            for name, value in part_shift.items():
                shift[name] += value
        return counters, shift


MAX_SHAPES = 1 << 16
# Shapes per pass of the rules (`_check_pending`) and of the fold (`_folds`): their
# temporaries stay the size of a chunk's, not of a full table's (a 65,536-shape fold at once
# raises the peak RSS of a long log by a few MB).
FOLD_ROWS = 8192
# The counts of a shape, in the order of the key's fields (and of `lookup`'s ``counts``
# matrix: the order of scanner.COLUMNS after the step, so the columnar checker's block rows
# are that matrix as they are).
COUNT_FIELDS = COLUMNS[1:]
_MIX = np.uint64(hashing.MIX)  # Fibonacci hashing: the top bits of key * 2**64 / phi


_FLAG_FIELDS = ("applied", "structured", "stale")  # `BlockColumns`' other fields
if len(COUNT_FIELDS) != hashing.COUNTS:  # the compiled keys read a row of that many counts
    raise ImportError(f"{len(COUNT_FIELDS)} count fields, hashing.COUNTS = {hashing.COUNTS}")


def _column(value: Any, size: int) -> Ints:
    """A rule's result as an int64 column of ``size`` values: an array as it is, a scalar (a
    literal that numpy broadcasts: the rule gave every row the same value) repeated
    (``np.broadcast_to`` costs ~25 us a call)."""
    column = np.asarray(value, dtype=np.int64)
    return column if column.shape == (size,) else np.full(size, column, dtype=np.int64)


def _shift(key: Ints, bits: int) -> None:
    """``key <<= bits`` in place, modulo 2**64 (unsigned: a negative partial key included)."""
    unsigned = key.view(np.uint64)
    np.left_shift(unsigned, np.uint64(bits), out=unsigned)


def check_blocks(
    mode: Mode,
    k: int,
    c: BlockColumns,
    shapes: ShapeTable | None = None,
    counts: Ints | None = None,
) -> BlockResult:
    """Every per-block check of the reference replay, over the whole chunk; `Irregular` if
    any block fails one (or is a pattern the columnar checker leaves to the reference).

    With ``shapes`` (the log's `ShapeTable`), the blocks are counted there and the result's
    counters and shift are left to `ShapeTable.totals` at the end of the log; without, the
    chunk's own counters and shift are returned. ``counts``: ``c``'s count columns as one
    (n, 9) matrix in `COUNT_FIELDS` order, when the caller has them so (faster keys)."""
    table = shapes if shapes is not None else ShapeTable(mode, k)
    ids = table.lookup(c, counts)
    if ids is None:  # counts that do not fit a key: every block is its own row
        legacy = _check_rows(mode, k, c)
        part = _fold_rows(mode, k, c, None)
        if shapes is not None:
            shapes.folded.append(part)
        counters, shift = part if shapes is None else (None, None)
        return BlockResult((legacy[:, 0], legacy[:, 1], legacy[:, 2]), counters, shift)
    per_block: tuple[Ints, Ints, Ints] | Lanes
    if table.lanes:  # the shapes' words and each block's shape: summed per step from there
        per_block = Lanes(table.legacy, ids)
    else:
        drafts, tokens, accepted = (column[ids] for column in table.legacy)
        per_block = (drafts, tokens, accepted)
    if shapes is None:
        counters, shift = table.totals()
        return BlockResult(per_block, counters, shift)
    if len(table) > MAX_SHAPES:
        table.flush()
    return BlockResult(per_block, None, None)


def _check_rows(mode: Mode, k: int, c: BlockColumns) -> Ints:
    """The rules over these rows (`Irregular` if any fails); each row's legacy counts
    (num_drafts, num_draft_tokens, num_accepted_tokens) as an (n, 3) array."""
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
    out = np.empty((len(n), 3), dtype=np.int64)
    out[:, 0] = lg.num_drafts
    out[:, 1] = lg.num_draft_tokens
    out[:, 2] = lg.num_accepted_tokens
    return out


def _fold_rows(
    mode: Mode, k: int, c: BlockColumns, weights: Ints | None
) -> tuple[Counters, dict[str, int]]:
    """The counters and shift terms of rows (checked by `_check_rows`) that stand for
    ``weights`` blocks each (None: one each)."""
    ar = ARRAY_ARITH
    x, in_forward, _, _ = block_inputs(mode, c)
    lg = legacy_step(mode, x, ar)
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
    closes = c.applied | c.stale
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
    return fold_counters(mode, k, folded, weights), shift


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
    array = _column(column, size)
    return int(array.sum() if weights is None else array @ weights)


def _histogram(length: Any, size: int, k: int, weights: Ints | None) -> list[int]:
    """How many blocks have each prefix length 0..k."""
    array = _column(length, size)
    counts = np.bincount(array, weights=weights, minlength=k + 1)
    return [int(v) for v in counts]
