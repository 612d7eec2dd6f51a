"""Columns straight from the bytes for canonical ``request_step`` lines.

Both writers of step logs in this project (the recorder, ``vllm/steplog.py``: ``Block.record``
+ ``json.dumps(separators=(",", ":"))``, and the generators ``synth.py`` /
``synth_varied.py``) write a ``request_step`` record in one byte form::

    {"record":"request_step","step":S,"request":"ID","proposed":P,"padding":D,
     "grammar_valid":G,"scheduled":C,"invalid":I,"verified":V,"sampled":X,"accepted":A,
     "outcome":"O"}                      (one line, no whitespace; ``,"delivered":N`` may
                                          come before the closing brace)

`scan` recognises such lines in a chunk of whole lines by their exact byte skeleton, with
numpy whole-array operations (no loop over lines), and reads their values from the bytes.
Every other line (other record kinds, other key orders, whitespace, escapes, ...) is left
to the typed decoder (colread.py), so the scanner only has to be exact on what it takes:
a line is taken only if msgspec's typed decoder and the reference decoder
(`records.parse_line`) both accept it with the same values:

* the keys exactly as above, in that order, each once, no whitespace anywhere;
* integers in JSON's grammar: digits only (no sign, fraction, exponent), no leading zero,
  at most 18 digits (so below 2**63 - 1, the limit of both decoders; longer ones are left
  to them), ``null`` only in the nullable fields (grammar_valid, invalid, verified,
  delivered);
* the request id non-empty, printable ASCII without ``"`` or ``\\`` (escapes, control
  characters and non-ASCII are left to the decoders), shorter than `ID_WINDOWS`' last;
* the outcome one of `OUTCOMES`; the line ends right after the closing brace.

Request ids: each distinct id of the chunk becomes one Python ``str`` (ids are hashed over
their bytes; every id is then compared byte for byte with its hash class's first id, so a
collision can never merge two ids: on one, the ids are sorted by their bytes instead).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

Ints = np.ndarray[Any, np.dtype[np.int64]]
Bools = np.ndarray[Any, np.dtype[np.bool_]]
Bytes2D = np.ndarray[Any, np.dtype[np.uint8]]

OUTCOMES = (
    "applied",
    "discarded_finished",
    "discarded_aborted",
    "discarded_preempted",
    "discarded_stale",
)
# The values of a taken line, in this order (`Scan.values` columns).
COLUMNS = (
    "step",
    "proposed",
    "padding",
    "grammar_valid",
    "scheduled",
    "invalid",
    "verified",
    "sampled",
    "accepted",
    "delivered",
)
NULL = -1  # a null value (grammar_valid, invalid, verified, delivered)
ABSENT = -2  # no delivered key in the line

_PREFIX = b'{"record":"request_step","step":'
_REQUEST = b',"request":"'
# The keys after the id, each with whether its value may be null, as the writers order them.
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
MAX_DIGITS = 18  # 10**18 - 1 < 2**63 - 1: no value the scanner takes is over the limit
ID_WINDOWS = (48, 256)  # bytes searched for an id's closing quote (longer ids: the decoder)
_PAD = 512  # zero bytes after the chunk, so every window read stays inside the buffer
_HASH_MUL = np.uint64(0x9E3779B97F4A7C15)


GROUP = 8192  # lines read together: their bytes stay in the CPU cache across the reads

_U = np.uint64
_LOW = _U(0x0F0F0F0F0F0F0F0F)
_HIGH = _U(0xF0F0F0F0F0F0F0F0)
_THREES = _U(0x3030303030303030)
_SIXES = _U(0x0606060606060606)
_ONES = _U(0x0101010101010101)
_PAIRS = _U(0x000000FF000000FF)
_MUL1 = _U(100 + (1000000 << 32))
_MUL2 = _U(1 + (10000 << 32))
_LOW32 = _U(0xFFFFFFFF)
_NULL_WORD = _U(int.from_bytes(b"null", "little"))
_ZERO_CHAR = _U(0x30)
_FIRST = _U(0xFF)
_LOW_NIBBLE = _U(0x0F)
_SPACE = np.uint8(0x20)
_PRINTABLE = np.uint8(0x7F - 0x20)  # (byte - 0x20) below this: 0x20..0x7E (it wraps below)
Words = np.ndarray[Any, np.dtype[np.uint64]]


@dataclass
class Scan:
    """One chunk, scanned. Per line: ``starts`` (first byte), ``stops`` (its newline, or the
    chunk's end), ``taken``. Per taken line, in line order: ``values`` (one column per
    `COLUMNS` name; `NULL`, delivered `ABSENT`), ``outcome`` (index in `OUTCOMES`), ``rid``
    (index in ``ids``: one str per distinct request id)."""

    starts: Ints
    stops: Ints
    taken: Bools
    values: Ints
    outcome: Ints
    rid: Ints
    ids: list[str]


class _Pattern:
    """A literal as masked 64-bit words, compared with the first bytes of a window's rows."""

    def __init__(self, literal: bytes, width: int) -> None:
        self.size = len(literal)
        self.words = np.frombuffer(literal.ljust(width, b"\0"), dtype="<u8")
        self.masks = np.frombuffer((b"\xff" * len(literal)).ljust(width, b"\0"), dtype="<u8")

    def match(self, rows: Words) -> Bools:
        acc = (rows[:, 0] & self.masks[0]) ^ self.words[0]
        for j in range(1, -(-self.size // 8)):
            acc |= (rows[:, j] & self.masks[j]) ^ self.words[j]
        same: Bools = acc == 0
        return same


class _Buffer:
    """The chunk followed by `_PAD` zero bytes, read through windows of fixed width."""

    def __init__(self, chunk: bytes) -> None:
        self.size = len(chunk)
        self.raw = chunk + bytes(_PAD)
        self.data = np.frombuffer(self.raw, dtype=np.uint8)
        self.views: dict[int, np.ndarray[Any, Any]] = {}

    def window(self, at: Ints, width: int) -> Bytes2D:
        """Row i: the ``width`` bytes from ``at[i]`` (positions past the chunk read zeros)."""
        view = self.views.get(width)
        if view is None:
            view = np.ndarray(
                (len(self.raw) - width + 1,), dtype=f"S{width}", buffer=self.raw, strides=(1,)
            )
            self.views[width] = view
        rows: Bytes2D = view[np.minimum(at, self.size)].view(np.uint8).reshape(-1, width)
        return rows

    def words(self, at: Ints, width: int) -> Words:
        """`window` as 64-bit little-endian words (``width`` a multiple of 8)."""
        words: Words = self.window(at, width).view("<u8")
        return words

    def byte(self, at: Ints) -> Bytes2D:
        found: Bytes2D = self.data[np.minimum(at, self.size)]
        return found

    def long_integer(self, at: Ints, nullable: bool) -> tuple[Ints, Ints, Bools]:
        """A JSON integer (or ``null`` where ``nullable``) at each position, up to 18 digits:
        its value (`NULL` for null), the position after it, and whether the scanner takes it.
        (The general form of `_integer`, for the few integers of 8 digits or more.)"""
        digits = self.window(at, MAX_DIGITS + 1) - np.uint8(48)  # wraps: non-digits >= 10
        is_digit = digits < 10
        length = np.where(is_digit.all(axis=1), MAX_DIGITS + 1, is_digit.argmin(axis=1))
        good = (length >= 1) & (length <= MAX_DIGITS) & ((length == 1) | (digits[:, 0] != 0))
        value = np.zeros(len(at), dtype=np.int64)
        width = int(length[good].max()) if good.any() else 0
        for j in range(width):  # at most 18 steps, each over the whole column
            value = np.where(j < length, value * 10 + digits[:, j], value)
        if nullable:
            null = (length == 0) & (self.words(at, 8)[:, 0] == _NULL_WORD)
            good |= null
            value[null] = NULL
            length = np.where(null, 4, length)
        return value, at + length, good


_START = _Pattern(_PREFIX, 48)
_REQUEST_AT = _Pattern(_REQUEST, 16)
_DELIVERED_AT = _Pattern(_DELIVERED, 24)
_CLOSE = 0x7D  # }
_THREES3 = _U(0x3333333333333333)
_FIELD_AT = tuple((_Pattern(literal, 32), nullable) for literal, nullable in _FIELDS)
_OUTCOME_PATTERNS = [_Pattern(_OUTCOME + word.encode() + b'"', 32) for word in OUTCOMES]
_OUTCOME_MASKS = np.stack([p.masks for p in _OUTCOME_PATTERNS])[:, None, :]
_OUTCOME_WORDS = np.stack([p.words for p in _OUTCOME_PATTERNS])[:, None, :]
_OUTCOME_SIZES = np.array([p.size for p in _OUTCOME_PATTERNS], dtype=np.int64)


def _match_each(rows: Words, masks: Words, words: Words) -> Bools:
    """Per pattern (masks, words: patterns x 1 x words) and row (rows: lines x words, or
    patterns x lines x words): whether the row starts with the pattern's literal."""
    diff = (rows & masks) ^ words
    acc = diff[..., 0]
    for j in range(1, diff.shape[-1]):
        acc = acc | diff[..., j]
    same: Bools = acc == 0
    return same


def _word_at(rows: Words, offset: int) -> Words:
    """The 8 bytes at byte ``offset`` of each row, as one word."""
    j, r = divmod(offset, 8)
    if r == 0:
        return rows[:, j]
    word: Words = (rows[:, j] >> _U(8 * r)) | (rows[:, j + 1] << _U(64 - 8 * r))
    return word


def _identities(rows: Bytes2D) -> tuple[Ints, list[str]]:
    """Each row's index among the distinct rows, and the distinct rows as str. A row is an id
    padded with zero bytes (an id the scanner takes holds none), its width a multiple of 8."""
    if len(rows) == 0:
        return np.zeros(0, dtype=np.int64), []
    words = rows.view("<u8")
    mixed = np.zeros(len(rows), dtype=np.uint64)
    for j in range(words.shape[1]):
        mixed = (mixed ^ words[:, j]) * _HASH_MUL
        mixed ^= mixed >> _U(29)
    _, first, inverse = np.unique(mixed, return_index=True, return_inverse=True)
    if not (words == words[first[inverse]]).all():  # a hash collision: sort the bytes instead
        _, first, inverse = np.unique(
            rows.view(f"V{rows.shape[1]}").ravel(), return_index=True, return_inverse=True
        )
    names = rows[first].view(f"S{rows.shape[1]}").ravel().tolist()
    return inverse.reshape(-1).astype(np.int64), [name.decode("ascii") for name in names]


def _line_bounds(chunk: bytes) -> tuple[Ints, Ints]:
    data = np.frombuffer(chunk, dtype=np.uint8)
    stops = np.flatnonzero(data == 10)
    if chunk and not chunk.endswith(b"\n"):
        stops = np.append(stops, len(chunk))
    starts = np.zeros(len(stops), dtype=np.int64)
    starts[1:] = stops[:-1] + 1
    return starts, stops.astype(np.int64)


def _digits(word: Words) -> Ints:
    """How many of the 8 bytes of ``word`` (first byte lowest) are digits before the first
    one that is not (8: all). Per byte, (b & 0xF0) | ((b + 6) & 0xF0) >> 4 is 0x33 exactly
    for '0'..'9'; a carry out of a byte (b >= 0xFA, not a digit) only changes later bytes."""
    marks = (word & _HIGH) | (((word + _SIXES) & _HIGH) >> _U(4))
    marks ^= _THREES3  # zero bytes: digits
    trailing = np.bitwise_count(~marks & (marks - _U(1)))  # the trailing zero bits
    length: Ints = (trailing >> np.uint8(3)).astype(np.int64)
    return length


def _values(words: Words, lengths: Ints) -> Ints:
    """The integers of up to 8 digits at the start of each word, given their lengths (SWAR:
    the digits shifted to the top as leading zeros, then summed pairwise as lanes)."""
    lanes = (words & _LOW) << ((8 - lengths).astype(np.uint64) << _U(3))
    lanes = lanes * _U(10) + (lanes >> _U(8))
    lanes = (((lanes & _PAIRS) * _MUL1) + (((lanes >> _U(16)) & _PAIRS) * _MUL2)) >> _U(32)
    values: Ints = (lanes & _LOW32).astype(np.int64)
    return values


class _Reader:
    """The integers of a group of lines, field by field: each field's length is needed at
    once (it places the next field); values and checks are computed for all fields at the
    end, over one stacked array."""

    def __init__(self, buf: _Buffer) -> None:
        self.buf = buf
        self.words: list[Words] = []
        self.lengths: list[Ints] = []
        self.nulls: list[Bools | None] = []
        self.long: list[tuple[int, Ints, Ints, Bools]] = []

    def integer(self, at: Ints, word: Words, nullable: bool) -> Ints:
        """Read one field's integer (or null) at ``at`` (``word``: its first 8 bytes); returns
        the position after it."""
        length = _digits(word)
        field = len(self.words)
        self.words.append(word)
        self.lengths.append(length)
        end = at + length
        null: Bools | None = None
        if nullable:
            null = (length == 0) & ((word & _LOW32) == _NULL_WORD)
            end += null << 2
        self.nulls.append(null)
        if length.max() == 8:  # 8 digits or more: read again, up to 18
            long = np.flatnonzero(length == 8)
            value, end[long], good = self.buf.long_integer(at[long], nullable)
            self.long.append((field, long, value, good))
        return end

    def values(self) -> tuple[Ints, Bools]:
        """Every field's values and whether each is an integer the scanner takes (both
        fields x lines; `NULL` for null)."""
        shape = (len(self.words), len(self.words[0]))
        values = np.empty(shape, dtype=np.int64)
        good = np.empty(shape, dtype=np.bool_)
        for field, (word, length, null) in enumerate(
            zip(self.words, self.lengths, self.nulls, strict=True)
        ):
            several = np.flatnonzero(length > 1)
            if len(several) * 4 > len(length):
                values[field] = _values(word, length)
            else:  # mostly one digit (counts up to k): the SWAR sum only where needed
                values[field] = word & _LOW_NIBBLE
                if len(several):
                    values[field][several] = _values(word[several], length[several])
            good[field] = (length == 1) | ((length > 1) & ((word & _FIRST) != _ZERO_CHAR))
            if null is not None:
                good[field] |= null
                values[field][null] = NULL
        for field, long, value, long_good in self.long:
            values[field][long] = value
            good[field][long] = long_good
        return values, good


def _scan_group(buf: _Buffer, starts: Ints, stops: Ints) -> tuple[Bools, Ints, Ints, Bytes2D]:
    """`scan` over a few lines: which are taken, their value columns (lines x `COLUMNS`),
    outcome codes and id rows (zero-padded; every array over all the lines)."""
    rows = buf.words(starts, 48)
    ok = _START.match(rows)
    reader = _Reader(buf)
    at = reader.integer(starts + len(_PREFIX), _word_at(rows, len(_PREFIX)), nullable=False)
    row = np.arange(len(at))
    for width in ID_WINDOWS:  # the id: id characters up to the closing quote
        window = buf.window(at, 16 + width)
        ids = window[:, len(_REQUEST) : len(_REQUEST) + width]
        # id characters: printable ASCII but '"' and '\\' (no control, non-ASCII, escape)
        is_id = ((ids - _SPACE) < _PRINTABLE) & (ids != 0x22) & (ids != 0x5C)
        id_len = is_id.argmin(axis=1)  # the first byte that is not an id character
        closed = (ids[row, id_len] == 34) & (id_len >= 1)
        if closed[ok].all():
            break
    ok &= closed & _REQUEST_AT.match(window.view("<u8"))
    longest = -(-int(id_len[ok].max()) // 8) * 8 if ok.any() else 8
    ids = ids[:, :longest]
    id_rows = ids * (np.arange(longest) < id_len[:, None])  # zero bytes after the id
    at = at + len(_REQUEST) + id_len
    for pattern, nullable in _FIELD_AT:
        rows = buf.words(at, 32)
        ok &= pattern.match(rows)
        at = reader.integer(at + pattern.size, _word_at(rows, pattern.size), nullable)
    rows = buf.words(at, 32)
    outcome = np.where(_OUTCOME_PATTERNS[0].match(rows), 0, -1)  # applied: most blocks
    rest = np.flatnonzero(outcome)
    if len(rest):  # each word has its own length: one match at most
        hits = _match_each(rows[rest], _OUTCOME_MASKS[1:], _OUTCOME_WORDS[1:])
        outcome[rest] = np.where(hits.any(axis=0), hits.argmax(axis=0) + 1, -1)
    ok &= outcome >= 0
    at = at + _OUTCOME_SIZES[outcome]
    plain = (buf.byte(at) == _CLOSE) & (at + 1 == stops)
    rows = buf.words(at, 24)
    end = reader.integer(at + _DELIVERED_AT.size, _word_at(rows, _DELIVERED_AT.size), True)
    values, good = reader.values()
    ok &= good[:-1].all(axis=0)
    closed = (buf.byte(end) == _CLOSE) & (end + 1 == stops)
    ok &= plain | (_DELIVERED_AT.match(rows) & good[-1] & closed)
    values[-1] = np.where(plain, ABSENT, values[-1])
    return ok, values.T, outcome, id_rows


def scan(chunk: bytes) -> Scan:
    """Find the lines of ``chunk`` (whole lines; the last may lack its newline) and read the
    canonical ``request_step`` lines among them (module docstring)."""
    starts, stops = _line_bounds(chunk)
    buf = _Buffer(chunk)
    taken = np.zeros(len(starts), dtype=np.bool_)
    values: list[Ints] = []
    outcomes: list[Ints] = []
    id_rows: list[Bytes2D] = []
    for first in range(0, len(starts), GROUP):
        part = slice(first, first + GROUP)
        ok, columns, outcome, rows = _scan_group(buf, starts[part], stops[part])
        taken[part] = ok
        values.append(columns[ok])
        outcomes.append(outcome[ok])
        id_rows.append(rows[ok])
        if first == 0 and len(ok) == GROUP and not ok.any():
            break  # a log written in another form: the typed decoder reads it all
    width = max((rows.shape[1] for rows in id_rows), default=8)
    padded = np.zeros((int(np.count_nonzero(taken)), width), dtype=np.uint8)
    at = 0
    for rows in id_rows:
        padded[at : at + len(rows), : rows.shape[1]] = rows
        at += len(rows)
    rid, ids = _identities(padded)
    return Scan(
        starts=starts,
        stops=stops,
        taken=taken,
        values=np.concatenate(values) if values else np.zeros((0, len(COLUMNS)), np.int64),
        outcome=np.concatenate(outcomes) if outcomes else np.zeros(0, np.int64),
        rid=rid,
        ids=ids,
    )
