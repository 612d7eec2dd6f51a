"""The columnar checker's sequence pieces (colseq.py) against plain Python statements of the
same checks: one block per request per step (sorted or not), the lifecycle rule's remembered
verdicts (each one `transitions.lifecycle_rule`'s own, whatever the order of first use), and
the ring of ended ids (an id added again is refused, also after the ring wrapped)."""

from __future__ import annotations

from typing import Any

import msgspec
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from spectally.engine_bridge import colseq
from spectally.engine_bridge.colread import Irregular
from spectally.engine_bridge.colseq import RequestTable, check_one_block_per_step
from spectally.reference.arith import INT_ARITH
from spectally.reference.step import Mode
from spectally.reference.transitions import lifecycle_rule

blocks = st.lists(
    st.tuples(st.integers(0, 6), st.integers(0, 9)), min_size=0, max_size=40
)  # (step, slot)


@given(blocks, st.booleans())
def test_one_block_per_step_is_the_plain_check(pairs: list[tuple[int, int]], ordered: bool) -> None:
    if ordered:
        pairs = sorted(pairs, key=lambda p: p[0])  # the chunk's case: steps never go back
    step = np.array([p[0] for p in pairs], dtype=np.int64)
    slot = np.array([p[1] for p in pairs], dtype=np.int64)
    twice = len(set(pairs)) < len(pairs)
    if twice:
        with pytest.raises(Irregular, match="two blocks of one request"):
            check_one_block_per_step(step, slot)
    else:
        check_one_block_per_step(step, slot)


def test_one_block_per_step_sees_repeats_in_any_run() -> None:
    """A repeat in the first, a middle and the last step of a sorted column, and a repeat
    that is not adjacent in the column."""
    step = np.array([1, 1, 1, 2, 2, 5, 5, 5], dtype=np.int64)
    for slots in ([3, 0, 3, 1, 2, 0, 1, 2], [0, 1, 2, 4, 4, 0, 1, 2], [0, 1, 2, 0, 1, 7, 1, 7]):
        with pytest.raises(Irregular):
            check_one_block_per_step(step, np.array(slots, dtype=np.int64))
    check_one_block_per_step(step, np.array([3, 0, 1, 3, 0, 3, 0, 1], dtype=np.int64))


CASES = [
    (mode, event, verified)
    for mode in Mode
    for event in ("finish", "abort", "preempt")
    for verified in (False, True)
]


@pytest.mark.parametrize("first", range(len(CASES)))
def test_remembered_lifecycle_verdicts_are_the_rules(first: int) -> None:
    """Every (mode, event, verified), each one first in turn: the verdict the table remembers
    is `transitions.lifecycle_rule`'s for that very input (a cache keyed on less than the
    rule reads would hand the first input's verdict to another)."""
    table = RequestTable()
    for mode, event, verified in CASES[first:] + CASES[:first]:
        table.mode = mode
        expected, _ = lifecycle_rule(mode, event, colseq._NO_COUNTS, verified, INT_ARITH)
        assert table.stays(event, verified) is bool(expected)


def _add(table: RequestTable, rid: str, line: int) -> list[str]:
    return table.lifecycle([(line, rid, 1, "add", False, msgspec.UNSET)], [], 1)


def _end(table: RequestTable, rid: str, line: int) -> None:
    done = table.lifecycle([], [(line, rid, 1, "finish", None, msgspec.UNSET)], 5)
    assert done == [rid]
    table.release(done)


def test_a_record_before_its_add_is_refused() -> None:
    """Adds are applied before the chunk's other events, so the order is checked by line: an
    end record or a block written before its request's add is refused, as the reference
    refuses a record of an unknown request."""
    add = (5, "r", 1, "add", True, msgspec.UNSET)
    for event in [
        (4, "r", 1, "finish", None, msgspec.UNSET),
        (4, "r", 1, "discarded_aborted", 0, 0),
    ]:
        with pytest.raises(Irregular, match="unknown"):
            RequestTable().lifecycle([add], [event], 1)
        later = (6, *event[1:])
        RequestTable().lifecycle([add], [later], 1)
    with pytest.raises(Irregular, match="added twice"):
        RequestTable().lifecycle([add, (7, *add[1:])], [], 1)


def test_an_id_added_again_after_it_ended_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    """The ring of ended ids (hashes), also once it wrapped: the last ``ENDED_RING`` ended ids
    are remembered, in the order they ended."""
    monkeypatch.setattr(colseq, "ENDED_RING", 4)
    table = RequestTable()
    table.ended = np.zeros(4, dtype=np.int64)
    line = 1
    for i in range(6):
        _add(table, f"r{i}", line)
        _end(table, f"r{i}", line + 1)
        line += 2
    for i in range(2, 6):  # the last four
        with pytest.raises(Irregular, match="added again"):
            _add(RequestTableCopy(table), f"r{i}", line)
        # among many ids added in one chunk (whatever its hash's rank among theirs)
        with pytest.raises(Irregular, match="added again"):
            adds = [f"n{j}" for j in range(20)] + [f"r{i}"]
            RequestTableCopy(table).lifecycle(
                [(line + j, rid, 9, "add", True, msgspec.UNSET) for j, rid in enumerate(adds)],
                [],
                9,
            )
    _add(table, "r0", line)  # forgotten: the ring wrapped past it
    # several ended in one chunk, more than the ring holds: the last ones are kept
    table = RequestTable()
    table.ended = np.zeros(4, dtype=np.int64)
    ids = [f"s{i}" for i in range(6)]
    adds = [(i + 1, rid, 1, "add", True, msgspec.UNSET) for i, rid in enumerate(ids)]
    table.lifecycle(adds, [], 1)
    ends = [(10 + i, rid, 1, "abort", None, msgspec.UNSET) for i, rid in enumerate(ids)]
    done = table.lifecycle([], ends, 5)
    table.release(done)
    assert table.ended_next == 6
    assert sorted(table.ended.tolist()) == sorted(hash(r) for r in ids[2:])


class RequestTableCopy(RequestTable):
    """A table that shares another's ended ids (so one refused add does not change it)."""

    def __init__(self, other: RequestTable) -> None:
        super().__init__()
        self.ended = other.ended.copy()
        self.ended_next = other.ended_next


def _lane(words: tuple[Any, ...], i: int) -> Any:
    """Lane i of packed words as the `colseq.Lanes` layout states it: 16 bits from bit
    16 * (i % 4) of word i // 4."""
    return (words[i // 4].view(np.uint64) >> np.uint64(16 * (i % 4))).astype(np.int64) & 0xFFFF


@pytest.mark.parametrize("k", [1, 4, 8, 13])
def test_all_lanes_at_once_are_each_lane(k: int) -> None:
    """`colseq._all_lanes` (every lane of the step sums in one broadcast) gives lane i as
    the layout states it (`_lane`), top lane bits and all, for every word count up to four."""
    rng = np.random.default_rng(k)
    count = 3 + k
    words = tuple(
        rng.integers(np.iinfo(np.int64).min, np.iinfo(np.int64).max, 50, dtype=np.int64)
        for _ in range((count + 3) // 4)
    )
    got = colseq._all_lanes(np.stack(words, axis=1), count)
    assert got.shape == (50, count)
    for i in range(count):
        assert (got[:, i] == _lane(words, i)).all()


@pytest.mark.parametrize("k", [1, 4, 5, 8, 13])
def test_lane_words_pack_each_lane_where_lane_reads_it(k: int) -> None:
    """`colseq.lane_words` then the layout (`_lane`): drafts, tokens, accepted and, per position
    i, whether accepted > i, each back from its 16 bits (top lanes of a word included)."""
    rng = np.random.default_rng(k)
    drafts, tokens, accepted = (rng.integers(0, 1 << 16, 40) for _ in range(3))
    accepted[:5] = np.arange(5)  # small values, so every position lane is 0 and 1 somewhere
    words = colseq.lane_words(k, drafts, tokens, accepted)
    assert len(words) == -(-(3 + k) // 4)
    assert all(w.dtype == np.int64 and w.shape == (40,) for w in words)
    want = [drafts, tokens, accepted, *((accepted > i).astype(np.int64) for i in range(k))]
    for i, lane in enumerate(want):
        assert (_lane(words, i) == lane).all(), i
