"""Columns that grow at the end, in place: what the shape table keeps for the whole log.

Why not `np.concatenate` per chunk: the table's arrays live across chunks, and an array made
afresh in each chunk is allocated among that chunk's temporaries. glibc's heap then keeps the
holes around it, and the replay's peak RSS crept up with the number of chunks (docs/replay.md,
"Memory over a long log"). Here a column moves only when its buffer doubles, so a log
of any length reallocates it a few times in all, and each append is amortised O(1), as
`list.append` is.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

Array = np.ndarray[Any, Any]


class Growing:
    """``width`` columns of one dtype, all of the same length, appended to together."""

    def __init__(self, width: int, dtype: type[np.generic], capacity: int = 1024) -> None:
        self.buffer: Array = np.zeros((width, max(capacity, 1)), dtype=dtype)
        self.size = 0

    def __len__(self) -> int:
        return self.size

    def append(self, columns: Sequence[Array] | Array) -> None:
        """Add one value to each column per element of ``columns`` (one array per column,
        all of one length; or a (columns, values) array), in one assignment."""
        if len(columns) != len(self.buffer):
            raise ValueError(f"{len(columns)} columns for a store of {len(self.buffer)}")
        size = self.size + (len(columns[0]) if len(columns) else 0)
        self.reserve(size - self.size)
        self.buffer[:, self.size : size] = columns
        self.size = size

    def reserve(self, more: int) -> None:
        """Room in the buffer for ``more`` values after the last, zeros until written
        (in place, then `claim`ed; or by `append`)."""
        size = self.size + more
        if size > self.buffer.shape[1]:
            capacity = max(size, 2 * self.buffer.shape[1])
            bigger = np.zeros((len(self.buffer), capacity), dtype=self.buffer.dtype)
            bigger[:, : self.size] = self.buffer[:, : self.size]
            self.buffer = bigger

    def claim(self, more: int) -> None:
        """Take the ``more`` values after the last as appended: written in place in
        `buffer`, after `reserve` made room for them."""
        if self.size + more > self.buffer.shape[1]:
            raise ValueError(f"{more} values claimed, {self.buffer.shape[1] - self.size} reserved")
        self.size += more

    def columns(self, start: int = 0, stop: int | None = None) -> list[Array]:
        """Views of the columns' values ``start`` to ``stop`` (default: the end). An append
        never changes values already there; one that grows the buffer leaves an older view
        on the old buffer (the same values, but not writes made through a newer view)."""
        end = self.size if stop is None else min(stop, self.size)
        return list(self.buffer[:, start:end])
