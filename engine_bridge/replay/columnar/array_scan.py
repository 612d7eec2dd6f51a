"""The canonical ``request_step`` lines read over whole arrays (numpy): `scanner`'s byte
skeleton without a compiler, for the logs too small to repay loading numba.

`scanner.scan` reads the canonical lines in one compiled pass; numba's import and the cached
kernel cost a process about 0.35-0.4 s of CPU, which a log of a few tens of MB never earns
back. Decoding those lines with msgspec instead costs the typed decode, a copy of every
struct's fields into columns and the proof that no key repeats (reader.py), about three times
what this module costs. It reads the compact form only (``{"record":"request_step","step":S,
...}``, every line the recorder and the generators write; the spaced form is left to the
typed decoder) and takes a line only where `scanner` would take it with the same values, or
declines it (the typed decoder then reads it), never the other way round:

* the skeleton's literals are compared a 64-bit word at a time, each key at the start of a
  window of 32 bytes copied from the chunk at the key's position (one gather per field for
  all lines), the value read from the word after the key;
* an integer is 1 to `MAX_DIGITS` digits (SWAR: a byte is a digit when its high nibble is 3
  and its low nibble plus 6 does not carry), no leading zero; ``null`` only in the nullable
  fields; longer integers are declined (the typed decoder reads them);
* the id: printable ASCII without ``"`` or ``\\`` up to its closing quote, 1 to
  `scanner.MAX_ID_BYTES` bytes (each word tested for a byte outside 0x20-0x7E, a quote or a
  backslash; the first such byte must be the quote);
* the outcome one of `OUTCOMES`, then ``}`` or ``,"delivered":N}``, and the line's newline (or
  the chunk's end) right after the brace.

Ids: each distinct id of the chunk becomes one ``str``, numbered in order of first
appearance as `scanner` numbers them. The ids' words are hashed, the hashes sorted
(``np.unique``), and every id is compared word for word with its class's first id; if a
collision merged two ids, the classes are made from the words themselves (exact).
"""

from __future__ import annotations

from typing import Any, cast

import numpy as np

from .scanner import ABSENT, COLUMNS, MAX_ID_BYTES, NULL, OUTCOMES, Scan

Ints = np.ndarray[Any, np.dtype[np.int64]]
Bools = np.ndarray[Any, np.dtype[np.bool_]]
Words = np.ndarray[Any, np.dtype[np.uint64]]
Bytes = np.ndarray[Any, np.dtype[np.uint8]]

MAX_DIGITS = 7  # the digits a value's one word holds with the byte after them
# Lines read together: numpy's per-call cost is paid once per group, and a group's windows
# (32 bytes a line, 512 KiB here) stay in a core's L2 cache. 2^14 was the fastest of 2^10 to
# 2^16 on a 16 MiB chunk of a realistic log (2^12: 15 % slower; 2^16: 40 %).
GROUP = 1 << 14
_PAD = 1024  # zero bytes after the chunk: every window the reading can reach lies inside
_WIDTH = 32  # bytes in a field's window

_U = np.uint64
_ONES = _U(0x0101010101010101)
_HIGHS = _U(0x8080808080808080)
_NIBBLE_HIGH = _U(0xF0F0F0F0F0F0F0F0)
_NIBBLE_LOW = _U(0x0F0F0F0F0F0F0F0F)
_SIXES = _U(0x0606060606060606)
_THREES = _U(0x3333333333333333)
_PAIRS = _U(0x000000FF000000FF)
_MUL1 = _U(100 + (1000000 << 32))
_MUL2 = _U(1 + (10000 << 32))
_LOW32 = _U(0xFFFFFFFF)
_NULL_WORD = _U(int.from_bytes(b"null", "little"))
_HASH_MUL = _U(0x9E3779B97F4A7C15)
_ALL = _U(0xFFFFFFFFFFFFFFFF)


def _words(literal: bytes) -> tuple[tuple[int, int], ...]:
    """``literal`` as (word, mask) pairs, little-endian, the last word masked."""
    pad = literal + bytes(-len(literal) % 8)
    return tuple(
        (
            int.from_bytes(pad[i : i + 8], "little"),
            int.from_bytes(b"\xff" * min(8, len(literal) - i) + bytes(8), "little")
            & 0xFFFFFFFFFFFFFFFF,
        )
        for i in range(0, len(pad), 8)
    )


_PREFIX = b'{"record":"request_step","step":'  # 32 bytes: one window
_REQUEST = b',"request":"'
# The keys after the id (the first one closes the id's quote), as the writers order them,
# and whether each value may be null.
_FIELDS = (
    (b'","proposed":', False),
    (b',"padding":', False),
    (b',"grammar_valid":', True),
    (b',"scheduled":', False),
    (b',"invalid":', True),
    (b',"verified":', True),
    (b',"sampled":', False),
    (b',"accepted":', False),
)
_OUTCOME = b',"outcome":"'
_DELIVERED = b',"delivered":'
_ENDINGS = tuple(_OUTCOME + word.encode() + b'"' for word in OUTCOMES)  # each at most 32 bytes
assert len(_PREFIX) == _WIDTH and max(map(len, _ENDINGS)) <= _WIDTH
_NAMES = ("step", *(key.strip(b',":').decode() for key, _ in _FIELDS), "delivered")
assert _NAMES == COLUMNS, _NAMES


class _Chunk:
    """The chunk's bytes, read as windows of `_WIDTH` bytes, with at least `_PAD` bytes after
    it that the reading may touch: those of the buffer the chunk is a view of (reader.py's
    buffer, whose bytes past the chunk are stale), else zeros after a copy. What they hold
    decides nothing: every position only grows along a line, a line is taken only when its
    closing brace is right before its end (``stops``, within the chunk), and so a value or
    literal read past a line's end declines it."""

    def __init__(self, chunk: bytes | bytearray | memoryview) -> None:
        self.size = size = len(chunk)
        data = _room_after(chunk)
        if data is None:
            data = np.empty(size + _PAD, dtype=np.uint8)
            data[:size] = np.frombuffer(chunk, dtype=np.uint8)
            data[size:] = 0
        self.data = data
        # Row p of this view: the bytes from p (rows overlap; a gather copies the rows asked).
        self.rows = np.ndarray(
            (len(data) - _WIDTH + 1,), dtype=f"S{_WIDTH}", buffer=data, strides=(1,)
        )

    def window(self, at: Ints) -> Words:
        """The `_WIDTH` bytes from each of ``at`` (at most the chunk's size), as 4 words."""
        words: Words = self.rows[at].view("<u8").reshape(-1, _WIDTH // 8)
        return words


def _room_after(chunk: bytes | bytearray | memoryview) -> Bytes | None:
    """The bytes of the buffer ``chunk`` is the front of, when it has `_PAD` more after the
    chunk (no copy); else None."""
    if not isinstance(chunk, memoryview) or chunk.obj is None or not chunk.c_contiguous:
        return None
    whole: Bytes = np.frombuffer(cast(memoryview, chunk.obj), dtype=np.uint8)
    front = np.frombuffer(chunk, dtype=np.uint8)
    same = whole.ctypes.data == front.ctypes.data if len(front) else False
    if not same or len(whole) < len(chunk) + _PAD:
        return None
    return whole


def _equals(rows: Words, literal: bytes) -> Bools:
    """Whether each row's first bytes are ``literal``."""
    acc: Words | None = None
    for j, (word, mask) in enumerate(_words(literal)):
        column = rows[:, j] if mask == 0xFFFFFFFFFFFFFFFF else rows[:, j] & _U(mask)
        diff = column ^ _U(word)
        acc = diff if acc is None else acc | diff
    assert acc is not None
    same: Bools = acc == 0
    return same


def _word_at(rows: Words, offset: int) -> Words:
    """The 8 bytes from byte ``offset`` of each row (``offset + 8`` at most the row's size)."""
    j, r = divmod(offset, 8)
    if r == 0:
        return rows[:, j]
    word: Words = (rows[:, j] >> _U(8 * r)) | (rows[:, j + 1] << _U(64 - 8 * r))
    return word


def _digits(word: Words) -> Ints:
    """How many bytes of ``word`` (first byte lowest) are digits before the first that is not
    (8: all of them). A digit's byte has high nibble 3 and a low nibble that 6 does not carry
    out of: (b & 0xF0) | ((b + 6) & 0xF0) >> 4 is 0x33 for '0'..'9' only; a carry out of a byte
    (b >= 0xFA, not a digit) only changes the bytes after it."""
    marks = (word & _NIBBLE_HIGH) | (((word + _SIXES) & _NIBBLE_HIGH) >> _U(4))
    marks ^= _THREES  # zero bytes: digits
    trailing = np.bitwise_count(~marks & (marks - _U(1)))  # the trailing zero bits
    length: Ints = (trailing >> np.uint8(3)).astype(np.int64)
    return length


def _values(words: Words, lengths: Ints) -> Ints:
    """The integers of 1 to 8 digits at the start of each word, given their lengths (SWAR:
    the digits shifted to the top, then summed pairwise as lanes)."""
    shift = (_U(8) - lengths.astype(np.uint64)) << _U(3)
    lanes = (words & _NIBBLE_LOW) << shift
    lanes = lanes * _U(10) + (lanes >> _U(8))
    lanes = (((lanes & _PAIRS) * _MUL1) + (((lanes >> _U(16)) & _PAIRS) * _MUL2)) >> _U(32)
    values: Ints = (lanes & _LOW32).astype(np.int64)
    return values


class _Integers:
    """The integer fields of a group of lines, read one after another: each field's length
    places the next key, so it is known at once; the values are computed at the end."""

    def __init__(self, n: int) -> None:
        self.words = np.empty((len(COLUMNS), n), dtype=np.uint64)
        self.lengths = np.empty((len(COLUMNS), n), dtype=np.int64)
        self.ok = np.ones(n, dtype=np.bool_)

    def read(self, field: int, word: Words, nullable: bool) -> Ints:
        """Field ``field``'s value at the start of ``word``: its length in bytes (a null's is
        4; 0 where the scanner does not take it, which also clears the line's ``ok``)."""
        length = _digits(word)
        good = (length >= 1) & (length <= MAX_DIGITS)
        good &= (length == 1) | ((word & _U(0xFF)) != _U(0x30))  # no leading zero
        if nullable:
            null = (length == 0) & ((word & _LOW32) == _NULL_WORD)
            good |= null
            length = np.where(null, -4, length)  # -4: null, 4 bytes
        self.ok &= good
        self.words[field] = word
        self.lengths[field] = length
        return np.abs(length)

    def values(self) -> Ints:
        """Every field's values, fields x lines (`NULL` for null; garbage where not ok)."""
        lengths, words = self.lengths, self.words
        values = (words & _U(0x0F)).astype(np.int64)  # one digit: most counts
        several = lengths > 1
        if several.any():
            values[several] = _values(words[several], lengths[several])
        values[lengths == -4] = NULL
        return values


def _ids(chunk: _Chunk, at: Ints) -> tuple[Ints, Words, Bools]:
    """The id starting at each of ``at``: its length, its words (zero past the id; lines x
    words) and whether the scanner takes it (printable ASCII without quote or backslash, up
    to its closing quote, 1 to `MAX_ID_BYTES` bytes)."""
    n = len(at)
    length = np.full(n, -1, dtype=np.int64)
    columns: list[Words] = []
    open_ = np.arange(n)  # lines whose closing quote is not found yet
    offset = 0
    while len(open_) and offset <= MAX_ID_BYTES:
        rows = chunk.window(at[open_] + offset)
        for j in range(_WIDTH // 8):
            word = rows[:, j]
            quote = word ^ _U(0x2222222222222222)
            slash = word ^ _U(0x5C5C5C5C5C5C5C5C)
            # per byte, its high bit set where it is a quote, a backslash, below 0x20 or above
            # 0x7E (exact up to the first such byte; borrows and carries only move later ones)
            stop = (
                ((quote - _ONES) & ~quote)
                | ((slash - _ONES) & ~slash)
                | ((word - _U(0x2020202020202020)) & ~word)
                | (word + _ONES)
                | word
            ) & _HIGHS
            found = stop != 0
            first = (np.bitwise_count(~stop & (stop - _U(1))) >> np.uint8(3)).astype(np.int64)
            # the id's bytes of this word: those before its first stop byte (all: none)
            mask = np.where(found, (_U(1) << (first.astype(np.uint64) << _U(3))) - _U(1), _ALL)
            column = np.zeros(n, dtype=np.uint64)
            column[open_] = word & mask
            columns.append(column)
            hit = np.flatnonzero(found)
            if len(hit):
                lines = open_[hit]
                end = offset + 8 * j + first[hit]
                byte = (word[hit] >> (first[hit].astype(np.uint64) << _U(3))) & _U(0xFF)
                length[lines] = np.where(byte == _U(0x22), end, -1)
                rest = ~found
                open_, rows = open_[rest], rows[rest]
                if not len(open_):
                    break
        offset += _WIDTH
    taken: Bools = (length >= 1) & (length <= MAX_ID_BYTES)
    words = np.stack(columns, axis=1) if columns else np.zeros((n, 1), dtype=np.uint64)
    return length, words, taken


def _classes(words: Words, lengths: Ints) -> tuple[Ints, Ints]:
    """Each row's class among the distinct rows (ids), numbered in order of first
    appearance, and each class's first row. Hashes first; exact by comparing the words."""
    mixed = lengths.astype(np.uint64)
    for j in range(words.shape[1]):
        mixed = (mixed ^ words[:, j]) * _HASH_MUL
        mixed ^= mixed >> _U(29)
    _, first, inverse = np.unique(mixed, return_index=True, return_inverse=True)
    inverse = inverse.reshape(-1)
    if not (words == words[first[inverse]]).all():  # a collision: classes of the words
        rows = np.ascontiguousarray(words).view(f"V{8 * words.shape[1]}").reshape(-1)
        _, first, inverse = np.unique(rows, return_index=True, return_inverse=True)
        inverse = inverse.reshape(-1)
    order = np.argsort(first, kind="stable")  # classes by first appearance
    rank = np.empty(len(order), dtype=np.int64)
    rank[order] = np.arange(len(order))
    class_of: Ints = rank[inverse]
    firsts: Ints = first[order].astype(np.int64)
    return class_of, firsts


def _read(chunk: _Chunk, starts: Ints, stops: Ints) -> tuple[Bools, Ints, Ints, Ints, Words]:
    """The lines ``starts``/``stops`` (each a request_step's prefix): which are taken, their
    values (lines x `COLUMNS`), outcome codes, id lengths and id words."""
    n = len(starts)
    ints = _Integers(n)
    rows = chunk.window(starts + 24)  # the prefix's last word, then the step
    at = starts + 32 + ints.read(0, rows[:, 1], False)
    rows = chunk.window(at)
    ints.ok &= _equals(rows, _REQUEST)
    id_len, id_words, good = _ids(chunk, at + len(_REQUEST))
    ints.ok &= good
    at = at + len(_REQUEST) + np.maximum(id_len, 0)
    for field, (key, nullable) in enumerate(_FIELDS, start=1):
        rows = chunk.window(at)
        ints.ok &= _equals(rows, key)
        at = at + len(key) + ints.read(field, _word_at(rows, len(key)), nullable)
    rows = chunk.window(at)
    outcome = np.where(_equals(rows, _ENDINGS[0]), 0, -1)  # applied: most blocks
    rest = np.flatnonzero(outcome)
    for code, ending in enumerate(_ENDINGS[1:], start=1):
        if not len(rest):
            break
        hit = _equals(rows[rest], ending)
        outcome[rest[hit]] = code
        rest = rest[~hit]
    ints.ok &= outcome >= 0
    at = at + np.take(np.array([len(e) for e in _ENDINGS] + [0]), outcome)
    rows = chunk.window(at)
    plain = (rows[:, 0] & _U(0xFF)) == _U(0x7D)  # "}"
    ints.words[-1] = 0
    ints.lengths[-1] = 0
    delivered = np.flatnonzero(~plain)
    close = at.copy()
    if len(delivered):
        sub = rows[delivered]
        keyed = _equals(sub, _DELIVERED)
        word = _word_at(sub, len(_DELIVERED))
        part = _Integers(len(delivered))
        size = part.read(0, word, True)
        close[delivered] = at[delivered] + len(_DELIVERED) + size
        ints.words[-1, delivered] = word
        ints.lengths[-1, delivered] = part.lengths[0]
        ints.ok[delivered] &= keyed & part.ok
    ints.ok &= chunk.data[np.minimum(close, chunk.size)] == 0x7D
    ints.ok &= close + 1 == stops
    values = ints.values()
    values[-1, plain] = ABSENT
    return ints.ok, values.T, outcome, id_len, id_words


def scan(chunk: bytes | bytearray | memoryview) -> Scan:
    """Find the lines of ``chunk`` (whole lines; the last may lack its newline) and read the
    compact canonical ``request_step`` lines among them (module docstring), as `scanner.scan`
    gives them."""
    data = _Chunk(chunk)
    size = data.size
    stops = np.flatnonzero(data.data[:size] == 10)
    if size and data.data[size - 1] != 10:
        stops = np.append(stops, size)
    stops = stops.astype(np.int64)
    n = len(stops)
    starts = np.zeros(n, dtype=np.int64)
    starts[1:] = stops[:-1] + 1
    values = np.zeros((n, len(COLUMNS)), dtype=np.int64)
    outcome = np.full(n, -1, dtype=np.int64)
    rid = np.full(n, -1, dtype=np.int64)
    taken = np.zeros(n, dtype=np.bool_)
    if n:
        head = data.window(np.minimum(starts, size))
        candidates = np.flatnonzero(_equals(head, _PREFIX))
    else:
        candidates = np.zeros(0, dtype=np.int64)
    lengths: list[Ints] = []
    id_rows: list[Words] = []
    for first in range(0, len(candidates), GROUP):
        lines = candidates[first : first + GROUP]
        ok, columns, codes, id_len, id_words = _read(data, starts[lines], stops[lines])
        lines = lines[ok]
        taken[lines] = True
        values[lines] = columns[ok]
        outcome[lines] = codes[ok]
        lengths.append(id_len[ok])
        id_rows.append(id_words[ok])
    ids: list[str] = []
    at = np.flatnonzero(taken)
    if len(at):
        width = max(rows.shape[1] for rows in id_rows)
        words = np.zeros((len(at), width), dtype=np.uint64)
        row = 0
        for part in id_rows:
            words[row : row + len(part), : part.shape[1]] = part
            row += len(part)
        id_len = np.concatenate(lengths)
        class_of, firsts = _classes(words, id_len)
        rid[at] = class_of
        ids = [words[i].tobytes()[: id_len[i]].decode("ascii") for i in firsts.tolist()]
    return Scan(starts, stops, taken, values, outcome, rid, ids)
