"""Byte counts over a chunk of NDJSON lines that let the typed decoder's records stand for
the reference decoder's (reader.py): where a line's keys may end.

msgspec accepts a repeated key (the last wins), which the reference decoder refuses. A key
is a JSON string followed by ``:`` after optional whitespace, so the colons whose previous
byte other than whitespace is ``"`` bound a line's keys from above; reader compares their
count with the fields the typed decoder produced (docs/replay.md, "Decoding").

msgspec's ``decode_lines`` also reads a value across a newline and two values from one line,
which the reference decoder (one value per line) refuses: `glued_values` finds a value that
follows another on its line, which reader needs to prove one value per line.
"""

from __future__ import annotations

from typing import Any

import numpy as np

Bytes = np.ndarray[Any, np.dtype[np.uint8]]
Positions = np.ndarray[Any, np.dtype[np.intp]]

# Whitespace bytes `key_colons` steps back over before a colon; a longer run sends the line
# to the reference decoder (a bounded number of passes whatever the line).
KEY_GAP = 32


def key_colons(data: Bytes) -> tuple[Positions, Positions]:
    """The positions of the colons that may end a key: those whose previous byte other than
    JSON whitespace (space, tab, carriage return) is ``"``. A key is a string followed by
    ``:`` after optional whitespace, so a line has at least one such colon per key; a colon
    inside a string value may add more, which only sends the line to the reference decoder.
    Second, the colons after more than `KEY_GAP` whitespace bytes, left undecided (their
    lines' counts prove nothing). The colons first, then the bytes before them, one byte a
    round for those after whitespace: one mask the chunk's size, no more."""
    colon = np.flatnonzero(data == 58)
    colon = colon[colon > 0]
    at = colon - 1
    found = []
    for _ in range(KEY_GAP + 1):
        byte = data[at]
        found.append(colon[byte == 34])
        blank = (byte == 32) | (byte == 9) | (byte == 13)
        colon, at = colon[blank], at[blank] - 1
        colon, at = colon[at >= 0], at[at >= 0]
        if not len(at):
            break
    return np.concatenate(found), colon


def key_marks(chunk: bytes, n: int) -> np.ndarray[Any, np.dtype[np.int64]]:
    """Per line, the count of its colons that may end a key (`key_colons`): at least its
    keys; -2 for a line with a colon left undecided."""
    data = np.frombuffer(chunk, dtype=np.uint8)
    ends = np.flatnonzero(data == 10)[:n]
    if len(ends) < n:  # the last line has no newline
        ends = np.append(ends, len(data))
    colon, doubtful = key_colons(data)
    counts = np.bincount(np.searchsorted(ends, colon), minlength=n + 1)[:n].astype(np.int64)
    where = np.searchsorted(ends, doubtful)
    counts[where[where < n]] = -2
    return counts


def glued_values(data: Bytes, opens: Positions) -> bool:
    """Whether a ``{`` (of ``opens``, their positions) may follow a ``}`` on the same line:
    its previous byte other than space, tab and carriage return is ``}`` (never so inside one
    JSON value outside strings: only two values side by side, or a ``}{`` inside a string,
    which only sends the chunk to the line-by-line check), or more than `KEY_GAP` of those
    bytes precede it (undecided: True). The same bounded passes as `key_colons`."""
    at = opens[opens > 0] - 1
    for _ in range(KEY_GAP + 1):
        if not len(at):
            return False
        byte = data[at]
        if (byte == 125).any():
            return True
        blank = (byte == 32) | (byte == 9) | (byte == 13)
        at = at[blank] - 1
        at = at[at >= 0]
    return bool(len(at))
