"""colread.Lines: the columns of a chunk of lines, cut, joined and carried."""

from __future__ import annotations

import numpy as np
from spectally.engine_bridge.colread import COLUMNS, Lines, empty_lines


def test_own_copies_the_lines_and_keeps_only_their_ids() -> None:
    """`Lines.own` (what a chunk carries to the next): the same lines, sharing no array with
    the chunk, with the ids they use and nothing else (line without a request: -1)."""
    kinds = np.array([0, 1, 0, 2, 0], np.int8)
    values = np.arange(5 * len(COLUMNS), dtype=np.int64).reshape(5, -1)
    outcome = np.array([1, -1, 0, -1, 1], np.int64)
    rid = np.array([3, 1, -1, -1, 3], np.int64)
    lines = Lines(kinds, values, outcome, rid, ["a", "b", "c", "d"], {1: "rq", 3: "ss"})
    tail = lines.cut(1, 5)
    own = tail.own()
    for mine, theirs in zip(
        (own.kinds, own.values, own.outcome, own.rid), (kinds, values, outcome, rid), strict=True
    ):
        assert not np.shares_memory(mine, theirs)
    assert own.ids == ["b", "d"]
    assert own.rid.tolist() == [0, -1, -1, 1]
    assert [own.ids[r] if r >= 0 else None for r in own.rid.tolist()] == [
        tail.ids[r] if r >= 0 else None for r in tail.rid.tolist()
    ]
    assert own.kinds.tolist() == [1, 0, 2, 0]
    assert own.values.tolist() == values[1:].tolist()
    assert own.outcome.tolist() == outcome[1:].tolist()
    assert own.objs == {0: "rq", 2: "ss"} and own.objs is not tail.objs
    assert empty_lines().own().ids == [] and len(empty_lines().own()) == 0
