"""The shape table's plumbing, compiled: keys and slots, and per-step sums over shapes.

`blocks.ShapeTable` finds each block's shape (everything the rules read of a block) in an
open-addressing hash table over numpy arrays. The key of a block packs its nine counts
(-1 .. k + 2, stored + 1 in ``width`` bits each, in `blocks.COUNT_FIELDS` order) and its
three flags (applied, structured, stale: one bit each) into one int64 (`ShapeTable._key`
says the same with numpy, column by column; the tests hold the two equal). Its slot is the
top ``bits`` bits of ``key * MIX`` modulo 2**64 (Fibonacci hashing, `ShapeTable._slots`),
and a key is found by linear probing from there (the table at most a quarter full, so a
search takes one or two probes); `shape_ids` adds the keys it does not find, in the order of
their first blocks. `run_sums` then sums, per engine step (a run of the chunk's blocks), the
packed legacy counts of its blocks' shapes (`sequence.Lanes`, read from the table by shape id
instead of gathered into one word per block first).

This module is no rule: the rules run over the shapes the table holds (blocks.py). It is
the table's plumbing, which numpy can only do as a dozen passes over the chunk (a bound
check, a product, the flags, a multiply, gathers, compares, a sort of the new keys; then a
gather per word and a segment sum); compiled (jit.py), each is one pass over the rows (the
probe adds the new shapes and counts every block on the way). numba is imported only for
chunks of at least `MIN_ROWS` blocks (smaller ones take the numpy path: `ShapeTable._key`,
`_probe`, ``np.add.reduceat``; the same keys, ids and sums), unless the kernels are loaded
already.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .jit import compile_kernels, loaded

Ints = np.ndarray[Any, np.dtype[np.int64]]
Bools = np.ndarray[Any, np.dtype[np.bool_]]

MIX = 0x9E3779B97F4A7C15  # Fibonacci hashing: the top bits of key * 2**64 / phi
COUNTS = 9  # the counts of a block in a key: blocks.COUNT_FIELDS (checked at its import)
# Chunks with fewer blocks take the numpy path, so a small log never imports numba: 8,192
# request_step lines are about 1.5-1.8 MB, above what `scanner.MIN_BYTES` (1 MiB) lets the typed
# decoder take alone. The tests set 0 so that every chunk runs the kernels.
MIN_ROWS = 1 << 13
_KERNELS = ("_shape_keys", "_shape_ids", "_run_sums")


def compiled() -> bool:
    """Compile the kernels or load them from numba's cache (once per process); False where
    numba cannot be imported."""
    return compile_kernels(globals(), PYTHON, _KERNELS)


def wanted(rows: int) -> bool:
    """Whether a chunk of ``rows`` blocks takes the compiled kernels: numba importable, and
    `MIN_ROWS` blocks or more (compiled on the first such chunk) or the kernels compiled
    already (then a few blocks, such as a step carried over a chunk boundary, cost less
    there than the numpy path's dozen calls)."""
    return (rows >= MIN_ROWS or loaded(__name__)) and compiled()


def _shape_keys(
    counts: Ints,
    applied: Bools,
    structured: Bools,
    stale: Bools,
    width: int,
    high: int,
    keys: Ints,
) -> bool:
    """For each row of ``counts`` (n, `COUNTS`): its key into ``keys``. False if any count
    is outside -1 .. ``high`` (k + 2): no key fits then (``keys`` is garbage), and the
    caller checks the blocks unpacked."""
    # The bound check is a running maximum (no branch in the loop), and a row is a constant
    # `COUNTS` columns, so the compiler unrolls it.
    limit = np.uint64(high + 1)  # value + 1 as unsigned: -1 .. high <-> 0 .. high + 1
    worst = np.uint64(0)
    for i in range(counts.shape[0]):
        key = np.int64(0)
        for j in range(COUNTS):
            value = counts[i, j] + 1
            worst = max(worst, np.uint64(value))
            key = (key << width) | value
        key = (key << 3) | (np.int64(applied[i]) << 2)
        key |= (np.int64(structured[i]) << 1) | np.int64(stale[i])
        keys[i] = key
    return not worst > limit


def _shape_ids(
    keys: Ints,
    start: int,
    shift: np.uint64,
    slot_keys: Ints,
    slot_ids: Ints,
    ids: Ints,
    weights: Ints,
    first_rows: Ints,
    next_id: int,
    room: int,
) -> tuple[int, int]:
    """From row ``start`` on: each key's shape id into ``ids`` and one more block of that id
    into ``weights``. A key not in the table is added there with the next id (``next_id``,
    ``next_id + 1``, ...; its row into ``first_rows``) while fewer than ``room`` were added;
    returns the row it stopped at (``len(keys)`` when done) and how many it added.

    Linear probing from the key's home slot (the top bits of ``key * MIX``; ``shift``: 64 -
    bits, for a table of 2**bits slots) to the key or the first free slot (-1: a key is
    never negative); keys are never removed, so a free slot ends every search."""
    mask = len(slot_keys) - 1
    added = 0
    for i in range(start, len(keys)):
        key = keys[i]
        slot = np.int64((np.uint64(key) * np.uint64(MIX)) >> shift)
        held = slot_keys[slot]
        while held != key and held != -1:
            slot = (slot + 1) & mask
            held = slot_keys[slot]
        if held == -1:  # a new shape
            if added == room:
                return i, added
            slot_keys[slot] = key
            slot_ids[slot] = next_id + added
            first_rows[added] = i
            added += 1
        found = slot_ids[slot]
        ids[i] = found
        weights[found] += 1
    return len(keys), added


def _run_sums(starts: Ints, ids: Ints, by_shape: Ints, out: Ints) -> None:
    """``out[r, w]`` += the sum of ``by_shape[ids[i], w]`` over the blocks ``i`` of run
    ``r`` (run r is ``starts[r]`` up to the next start, the last one up to ``len(ids)``);
    int64 sums wrap modulo 2**64 as ``np.add.reduceat``'s do."""
    n = len(ids)
    for r in range(len(starts)):
        stop = starts[r + 1] if r + 1 < len(starts) else n
        for i in range(starts[r], stop):
            row = ids[i]
            for w in range(by_shape.shape[1]):
                out[r, w] += by_shape[row, w]


PYTHON: dict[str, Any] = {name: globals()[name] for name in _KERNELS}


def shape_keys(
    counts: Ints, applied: Bools, structured: Bools, stale: Bools, width: int, k: int
) -> Ints | None:
    """The blocks' keys, or None when a count does not fit a key (`_shape_keys`). The
    caller compiles the kernels first (`compiled`); the plain Python source is for the
    tests."""
    n, columns = counts.shape
    if columns != COUNTS:
        raise ValueError(f"a count matrix of {columns} columns, not {COUNTS}")
    keys = np.empty(n, dtype=np.int64)
    if not _shape_keys(counts, applied, structured, stale, width, k + 2, keys):
        return None
    return keys


def shape_ids(
    keys: Ints,
    start: int,
    slot_keys: Ints,
    slot_ids: Ints,
    ids: Ints,
    weights: Ints,
    next_id: int,
    room: int,
) -> tuple[int, Ints]:
    """`_shape_ids` from row ``start``: the row it stopped at and the first rows of the
    keys it added (ids ``next_id`` on). ``ids``, ``weights`` and the table are written in
    place; ``weights`` must have room for ``next_id + room`` ids. The plain Python source's
    uint64 product warns of the wrap-around that numba's machine code does silently."""
    bits = len(slot_keys).bit_length() - 1
    first_rows = np.empty(max(min(room, len(keys) - start), 0), dtype=np.int64)
    stop, added = _shape_ids(
        keys,
        start,
        np.uint64(64 - bits),
        slot_keys,
        slot_ids,
        ids,
        weights,
        first_rows,
        next_id,
        room,
    )
    return int(stop), first_rows[:added]


def run_sums(starts: Ints, ids: Ints, by_shape: Ints) -> Ints:
    """Per run of blocks (``starts``: each run's first block), the sums of its blocks' rows
    of ``by_shape`` (one row per shape id, ``ids`` per block): what ``np.add.reduceat`` over
    ``by_shape[ids]`` gives, without gathering a row per block (`_run_sums`). The caller
    compiles the kernel first (`compiled`)."""
    out = np.zeros((len(starts), by_shape.shape[1]), dtype=np.int64)
    _run_sums(starts.astype(np.int64, copy=False), ids, by_shape, out)
    return out
