"""store.Growing: columns appended to in place, whose values never move under a reader."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from spectally.engine_bridge.replay.columnar.store import Growing


@given(st.lists(st.lists(st.integers(-(2**63), 2**63 - 1), max_size=40), max_size=12))
def test_appends_are_the_concatenation(parts: list[list[int]]) -> None:
    store = Growing(2, np.int64, capacity=4)
    for part in parts:
        column = np.array(part, dtype=np.int64)
        store.append([column, -column])
    flat = [v for part in parts for v in part]
    first, second = store.columns()
    assert first.tolist() == flat
    assert second.tolist() == (-np.array(flat, dtype=np.int64)).tolist()
    assert len(store) == len(flat)
    for start in range(0, len(flat) + 2, 5):
        for stop in (start, start + 3, None):
            got = store.columns(start, stop)[0].tolist()
            assert got == flat[start:stop]


def test_the_buffer_doubles_and_older_views_keep_their_values() -> None:
    store = Growing(1, np.bool_, capacity=2)
    store.append([np.array([True, False])])
    before = store.columns()[0]
    store.append([np.array([True])])  # past the capacity: a new buffer, twice as large
    assert store.buffer.shape == (1, 4)
    assert before.tolist() == [True, False]
    assert store.columns()[0].tolist() == [True, False, True]
    store.append([np.zeros(0, np.bool_)])
    assert len(store) == 3
    store.append([np.ones(9, np.bool_)])  # more than double: exactly what is needed
    assert store.buffer.shape == (1, 12)


def test_a_view_writes_through_to_the_store() -> None:
    """`ShapeTable.weights` adds each chunk's blocks through a view."""
    store = Growing(1, np.int64)
    store.append([np.zeros(3, np.int64)])
    store.columns()[0][:] += np.array([1, 2, 3])
    assert store.columns()[0].tolist() == [1, 2, 3]


def test_the_wrong_number_of_columns_is_refused() -> None:
    store = Growing(3, np.int64)
    with pytest.raises(ValueError, match="2 columns for a store of 3"):
        store.append([np.zeros(1, np.int64)] * 2)
    assert len(store) == 0


def test_values_written_in_place_after_reserve_are_claimed() -> None:
    """`reserve` then writes through `buffer` then `claim` (what the compiled shape lookup
    does with the weights of the shapes it adds): the same as an append of those values;
    the room beyond is zeros; a claim past the room is refused and changes nothing."""
    store = Growing(1, np.int64, capacity=2)
    store.append([np.array([5, 6])])
    store.reserve(3)
    assert store.buffer.shape[1] >= 5 and not store.buffer[0, 2:].any()
    store.buffer[0, 2:4] = [7, 8]
    store.claim(2)
    assert store.columns()[0].tolist() == [5, 6, 7, 8]
    with pytest.raises(ValueError, match="claimed"):
        store.claim(store.buffer.shape[1] - len(store) + 1)
    assert len(store) == 4
    store.append([np.array([9])])
    assert store.columns()[0].tolist() == [5, 6, 7, 8, 9]
