"""The columnar checker's sequence pieces (sequence.py) against plain Python statements of the
same checks: one block per request per step (sorted or not), the lifecycle rule's remembered
verdicts (each one `transitions.lifecycle_rule`'s own, whatever the order of first use), and
the ring of ended ids (an id added again is refused, also after the ring wrapped)."""

from __future__ import annotations

from typing import Any

import msgspec
import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from spectally.engine_bridge.replay.columnar import sequence
from spectally.engine_bridge.replay.columnar.reader import Irregular
from spectally.engine_bridge.replay.columnar.sequence import RequestTable, check_one_block_per_step
from spectally.engine_bridge.steplog.translate import LIFECYCLE_OUTCOME
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


steps = st.lists(st.integers(0, 9), max_size=12).map(lambda v: np.array(sorted(v), np.int64))


@given(steps, steps)
def test_union_is_numpys(a: Any, b: Any) -> None:
    """`sequence._union` (a step_stats check's steps) is `np.union1d`, without its import of
    numpy.ma."""
    got = sequence._union(a, b)
    assert got.tolist() == np.union1d(a, b).tolist() and got.dtype == np.int64


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
        expected, _ = lifecycle_rule(mode, event, sequence._NO_COUNTS, verified, INT_ARITH)
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
    monkeypatch.setattr(sequence, "ENDED_RING", 4)
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
    """Lane i of packed words as the `sequence.Lanes` layout states it: 16 bits from bit
    16 * (i % 4) of word i // 4."""
    return (words[i // 4].view(np.uint64) >> np.uint64(16 * (i % 4))).astype(np.int64) & 0xFFFF


@pytest.mark.parametrize("k", [1, 4, 8, 13])
def test_all_lanes_at_once_are_each_lane(k: int) -> None:
    """`sequence._all_lanes` (every lane of the step sums in one broadcast) gives lane i as
    the layout states it (`_lane`), top lane bits and all, for every word count up to four."""
    rng = np.random.default_rng(k)
    count = 3 + k
    words = tuple(
        rng.integers(np.iinfo(np.int64).min, np.iinfo(np.int64).max, 50, dtype=np.int64)
        for _ in range((count + 3) // 4)
    )
    got = sequence._all_lanes(np.stack(words, axis=1), count)
    assert got.shape == (50, count)
    for i in range(count):
        assert (got[:, i] == _lane(words, i)).all()


@pytest.mark.parametrize("k", [1, 4, 5, 8, 13])
def test_lane_words_pack_each_lane_where_lane_reads_it(k: int) -> None:
    """`sequence.lane_words` then the layout (`_lane`): drafts, tokens, accepted and, per position
    i, whether accepted > i, each back from its 16 bits (top lanes of a word included)."""
    rng = np.random.default_rng(k)
    drafts, tokens, accepted = (rng.integers(0, 1 << 16, 40) for _ in range(3))
    accepted[:5] = np.arange(5)  # small values, so every position lane is 0 and 1 somewhere
    words = sequence.lane_words(k, drafts, tokens, accepted)
    assert len(words) == -(-(3 + k) // 4)
    assert all(w.dtype == np.int64 and w.shape == (40,) for w in words)
    want = [drafts, tokens, accepted, *((accepted > i).astype(np.int64) for i in range(k))]
    for i, lane in enumerate(want):
        assert (_lane(words, i) == lane).all(), i


# -- plain ends (`RequestTable._plain_ends`) against the full pass ---------------------------

_RECORD_EVENTS = ("finish", "abort", "preempt")
_OUTCOMES = (
    "applied",
    "discarded_finished",
    "discarded_aborted",
    "discarded_preempted",
    "discarded_stale",
)
_FLAGS = (msgspec.UNSET, None, True, False)


@st.composite
def _request_events(draw: st.DrawFn) -> tuple[list[Any], list[Any], int, int]:
    """One or two requests' events for a chunk, in line order: end records and blocks of
    steps near the first end (mostly the usual end: a finish or abort, then a discarded
    block of the next step), optionally a request not added, or added after its end record,
    or with lifecycle state carried from an earlier chunk; the chunk's last step."""
    events: list[Any] = []
    adds: list[Any] = []
    line = 10
    for rid in draw(st.sampled_from([["a"], ["a", "b"]])):
        add_line = draw(st.sampled_from([1] * 7 + [50]))  # 50: after the events
        if draw(st.integers(0, 9)):
            adds.append((add_line, rid, 1, "add", False, msgspec.UNSET))
        step = draw(st.integers(3, 5))
        own: list[Any] = []
        if draw(st.integers(0, 3)):  # the usual end
            event = draw(st.sampled_from(["finish", "abort"]))
            own.append((step, event, None, msgspec.UNSET))
            if draw(st.booleans()):
                own.append(
                    (
                        step + draw(st.sampled_from([1, 1, 1, 0, 2])),  # 2: after the end
                        LIFECYCLE_OUTCOME[event],
                        draw(st.integers(0, 1)),
                        draw(st.integers(0, 1)),
                    )
                )
        for _ in range(draw(st.sampled_from([0, 0, 0, 1, 2, 3] if own else [1, 2, 3]))):
            if draw(st.booleans()):
                own.append(
                    (
                        step + draw(st.integers(0, 2)),
                        draw(st.sampled_from(_RECORD_EVENTS)),
                        None,
                        draw(st.sampled_from(_FLAGS)),
                    )
                )
            else:
                own.append(
                    (
                        step + draw(st.integers(-1, 2)),
                        draw(st.sampled_from(_OUTCOMES)),
                        draw(st.integers(0, 1)),
                        draw(st.integers(0, 1)),
                    )
                )
        for s, what, a, b in own:
            events.append((line, rid, s, what, a, b))
            line += 3
    events.sort(key=lambda e: (e[2], e[0]))  # steps never go back
    events = [(10 + 3 * i, *e[1:]) for i, e in enumerate(events)]
    return adds, events, draw(st.integers(3, 12)), draw(st.sampled_from([0, 0, 0, 0, 0, 1, 2, 3]))


def _outcome(table: RequestTable, adds: list[Any], events: list[Any], last: int, carry: int) -> Any:
    """What the table does with the events after a first chunk that leaves request "a" with
    a held preemption (``carry`` 1), and an open block of that preemption's next step too
    (2), or only an open block, discarded as aborted (3): the error, or the ids done and
    the state left."""
    try:
        if carry:
            first = [(2, "a", 2, "preempt", None, msgspec.UNSET)] if carry < 3 else []
            first += [(3, "a", 3, "discarded_preempted", 1, 0)] if carry == 2 else []
            first += [(3, "a", 3, "discarded_aborted", 0, 0)] if carry == 3 else []
            add = (1, "a", 1, "add", False, msgspec.UNSET)
            table.release(table.lifecycle([add], first, 3))
            assert "a" in table.life  # carried
            adds = [a for a in adds if a[1] != "a"]  # added in that first chunk
        done = table.lifecycle(adds, events, last)
        table.release(done)
    except Irregular:
        return "irregular"
    life = {
        rid: (
            v.held,
            [(b.step, b.outcome, b.verified, b.stale, b.dropped) for b in v.open],
            v.ended,
        )
        for rid, v in table.life.items()
    }
    return sorted(done), dict(table.slots), life, sorted(table.ended[: table.ended_next].tolist())


_USUAL_END = [(10, "a", 4, "finish", None, msgspec.UNSET), (13, "a", 5, "discarded_finished", 1, 0)]


@settings(max_examples=400)  # milliseconds each; about a tenth take the shortcut
@given(_request_events(), st.sampled_from(list(Mode)))
@example(([], _USUAL_END, 9, 2), Mode.ASYNC)  # the usual end of a request with a stale block
@example(([], _USUAL_END, 9, 1), Mode.ASYNC)  # ... with a preemption held
@example(([], _USUAL_END, 9, 3), Mode.SYNC)  # ... with a block open, of another outcome
def test_plain_ends_are_what_the_full_pass_does(case: Any, mode: Mode) -> None:
    """The shortcut for requests that end plainly changes nothing: the same verdict (refused
    or not), the same requests ended, slots, held state and ended ids as the full pass over
    every event, in sync and async, with state carried over or not."""
    adds, events, last, carry = case
    full = RequestTable()
    full.mode = mode
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(RequestTable, "_plain_ends", lambda self, mine, last_step: [])
        want = _outcome(full, adds, events, last, carry)
    table = RequestTable()
    table.mode = mode
    assert _outcome(table, adds, events, last, carry) == want


def test_the_usual_ends_take_the_shortcut() -> None:
    """A finish or abort and its discarded block of the next step, released in the chunk, is
    settled without the full pass; a preemption, a drop_stale_output, an end still held at
    the chunk's end, or a block of another outcome is not."""
    adds = [(1, rid, 1, "add", False, msgspec.UNSET) for rid in "abcdef"]
    events = [
        (10, "a", 3, "finish", None, msgspec.UNSET),
        (11, "a", 4, "discarded_finished", 1, 0),
        (12, "b", 3, "abort", None, msgspec.UNSET),
        (13, "c", 3, "preempt", None, msgspec.UNSET),
        (14, "d", 3, "finish", None, True),
        (15, "e", 7, "finish", None, msgspec.UNSET),
        (16, "f", 3, "finish", None, msgspec.UNSET),
        (17, "f", 4, "discarded_aborted", 1, 0),
    ]
    table = RequestTable()
    table.add(adds)
    mine: dict[str, list[Any]] = {}
    for e in events:
        mine.setdefault(e[1], []).append(e)
    assert table._plain_ends(mine, 8) == ["a", "b"]
    assert sorted(mine) == ["c", "d", "e", "f"]
    with pytest.raises(Irregular, match="unknown or ended"):
        RequestTable()._plain_ends({"a": [events[0]]}, 8)  # never added


@pytest.mark.parametrize(
    ("mode", "end", "outcome", "drop"),
    [
        *[(m, "finish", "discarded_finished", msgspec.UNSET) for m in Mode],
        *[(m, "abort", "discarded_aborted", msgspec.UNSET) for m in Mode],
        (Mode.ASYNC, "preempt", "discarded_stale", True),  # stale output: async only
    ],
)
def test_a_block_discarded_past_its_deadline_is_refused(
    mode: Mode, end: str, outcome: str, drop: Any
) -> None:
    """SPEC.md ATTR-2 in the lifecycle pass: a block of step 3 written before the record that
    discards it (a stale block before its preemption, or a block in flight before its
    request's end) is closed when that record is released; a record of the block's deadline
    (sync 3, async 4) is taken, one a step later refused, whichever event it is."""
    deadline = 4 if mode is Mode.ASYNC else 3
    for step, refused in ((deadline, False), (deadline + 1, True)):
        table = RequestTable()
        table.mode = mode
        add = (1, "a", 1, "add", False, msgspec.UNSET)
        events = [(2, "a", 3, outcome, 1, 1), (3, "a", step, end, None, drop)]
        if refused:
            with pytest.raises(
                Irregular, match=f"a block of step 3 discarded by a {end} at {step}"
            ):
                table.lifecycle([add], events, 20)
        else:
            done = table.lifecycle([add], events, 20)
            assert done == ([] if end == "preempt" else ["a"])
