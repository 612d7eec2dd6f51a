"""Columns straight from the bytes for canonical ``request_step`` lines (a compiled scanner).

Both writers of step logs in this project (the recorder, ``steplog/writer.py``: ``Block.record``
+ ``json.dumps(separators=(",", ":"))``, and the generators of ``synth/``) write a
``request_step`` record in one byte form::

    {"record":"request_step","step":S,"request":"ID","proposed":P,"padding":D,
     "grammar_valid":G,"scheduled":C,"invalid":I,"verified":V,"sampled":X,"accepted":A,
     "outcome":"O"}                      (one line, no whitespace; ``,"delivered":N`` may
                                          come before the closing brace)

The scanner also reads the same skeleton with json.dumps' default separators (``", "`` and
``": "``, one space after every comma and colon of the skeleton), what any Python writer that
does not ask for compact output writes; a line's prefix decides its style, and the rest of
the line must keep it.

`scan` walks a chunk of whole lines once, byte by byte, in a loop that numba compiles to
machine code (`_scan_lines`), recognises such lines by their exact byte skeleton and reads
their values. Every other line (other record kinds, other key orders, whitespace, escapes,
...) is left to the typed decoder (reader.py), so the scanner only has to be exact on what
it takes: a line is taken only if msgspec's typed decoder and the reference decoder
(`records.parse_line`) both accept it with the same values:

* the keys exactly as above, in that order, each once, no whitespace anywhere (or, in the
  second style, exactly one space after each comma and colon of the skeleton, none
  elsewhere);
* integers in JSON's grammar: digits only (no sign, fraction, exponent), no leading zero,
  at most 18 digits (so below 2**63 - 1, the limit of both decoders; longer ones are left
  to them), ``null`` only in the nullable fields (grammar_valid, invalid, verified,
  delivered);
* the request id 1 to `MAX_ID_BYTES` bytes of printable ASCII without ``"`` or ``\\``
  (escapes, control characters and non-ASCII are left to the decoders);
* the outcome one of `OUTCOMES`; the line ends right after the closing brace.

Request ids: each distinct id of the chunk becomes one Python ``str``. Ids are hashed over
their bytes into an open-addressing table, and an id joins a class only after a byte-for-byte
comparison with the class's first id, so a hash collision can never merge two ids.

Why numba: the scanner is a byte loop, which numpy can only run as dozens of passes over the
whole chunk (the scanner this replaced: about 1.5 µs a line, as slow as msgspec's typed
decode); compiled, it is one pass (docs/replay.md, "Figures"). numba compiles the same Python
source (the kernel below runs unchanged as plain Python, which the tests use to check the
compiled code against), is a dependency vLLM itself installs, and caches the machine code
beside this module (``cache=True``), so only the first run on a machine pays the compile.
numba is imported only when a chunk of at least `MIN_BYTES` is scanned, so small logs start
fast. Where it cannot be imported, `compiled()` is False and reader.py sends every line to the
typed decoder: slower, and exactly as exact.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
from spectally.engine_bridge.steplog.schema import OUTCOMES as OUTCOMES
from spectally.engine_bridge.steplog.schema import REQUEST_STEP_FIELDS

from .jit import compile_kernels

Ints = np.ndarray[Any, np.dtype[np.int64]]
Bools = np.ndarray[Any, np.dtype[np.bool_]]
Bytes = np.ndarray[Any, np.dtype[np.uint8]]
Words = np.ndarray[Any, np.dtype[np.uint64]]

# The values of a taken line, in this order (`Scan.values` columns): the record's integer
# fields in the order the writers write them.
COLUMNS = tuple(f for f in REQUEST_STEP_FIELDS if f not in ("record", "request", "outcome", "meta"))
NULL = -1  # a null value (grammar_valid, invalid, verified, delivered)
ABSENT = -2  # no delivered key in the line
MAX_DIGITS = 18  # 10**18 - 1 < 2**63 - 1: no value the scanner takes is over the limit
MAX_ID_BYTES = 255  # longer ids are left to the decoders
HASH_MUL = 0x100000001B3  # FNV-1a's prime (a module global so a test can force collisions)
_HASH_START = 0xCBF29CE484222325  # FNV-1a's offset basis

# Chunks shorter than this go to the typed decoder: importing numba and loading the compiled
# kernel costs a process about 0.9 s and 60 MB once, more than a small log takes to decode.
MIN_BYTES = 1 << 20


@dataclass
class Scan:
    """One chunk, scanned; every array has one entry (row) per line. ``starts`` (first byte),
    ``stops`` (its newline, or the chunk's end), ``taken``; for a taken line ``values`` (one
    column per `COLUMNS` name; `NULL`, delivered `ABSENT`), ``outcome`` (index in
    `OUTCOMES`) and ``rid`` (index in ``ids``: one str per distinct request id); a line not
    taken has zero values and outcome and rid -1."""

    starts: Ints
    stops: Ints
    taken: Bools
    values: Ints
    outcome: Ints
    rid: Ints
    ids: list[str]


# -- the byte skeleton, as masked little-endian 64-bit words -----------------------------------


def _literal(text: bytes) -> tuple[Words, Words, int]:
    """``text`` as words to compare 8 bytes at a time: (words, masks, length)."""
    pad = -len(text) % 8
    words = np.frombuffer(text + bytes(pad), dtype="<u8").astype(np.uint64)
    masks = np.frombuffer(b"\xff" * len(text) + bytes(pad), dtype="<u8").astype(np.uint64)
    return words, masks, len(text)


def _table(texts: list[bytes], width: int = 0) -> tuple[Words, Words, Ints]:
    """Several literals as rows of one table (numba reads module-level arrays as constants),
    at least ``width`` words wide."""
    width = max(width, *(-(-len(t) // 8) for t in texts))
    words = np.zeros((len(texts), width), dtype=np.uint64)
    masks = np.zeros((len(texts), width), dtype=np.uint64)
    for row, text in enumerate(texts):
        w, m, _ = _literal(text)
        words[row, : len(w)] = w
        masks[row, : len(m)] = m
    return words, masks, np.array([len(t) for t in texts], dtype=np.int64)


def _spaced(compact: bytes) -> bytes:
    return compact.replace(b",", b", ").replace(b":", b": ")


def _styled(compact: bytes) -> tuple[Words, Words, Ints]:
    """A literal of the skeleton in both styles, one row each (0: compact, 1: spaced)."""
    return _table([compact, _spaced(compact)])


# The skeleton's literals, each in the two styles a line may take: 0 the compact one, 1
# json.dumps' default separators (", " and ": "). The prefix decides a line's style.
_PREFIX_W, _PREFIX_M, _PREFIX_N = _styled(b'{"record":"request_step","step":')
_REQUEST_W, _REQUEST_M, _REQUEST_N = _styled(b',"request":"')
# The keys after the id (the first one closes the id's quote), as the writers order them,
# and whether each value may be null; one table per style.
_KEYS = [
    b'","proposed":',
    b',"padding":',
    b',"grammar_valid":',
    b',"scheduled":',
    b',"invalid":',
    b',"verified":',
    b',"sampled":',
    b',"accepted":',
]
_SPACED_KEYS = [_spaced(key) for key in _KEYS]
_KEY_WIDTH = max(-(-len(key) // 8) for key in _SPACED_KEYS)
_STYLES = [_table(keys, _KEY_WIDTH) for keys in (_KEYS, _SPACED_KEYS)]
_KEY_W, _KEY_M, _KEY_N = (np.stack(parts) for parts in zip(*_STYLES, strict=True))
_NULLABLE = np.array([0, 0, 1, 0, 1, 1, 0, 0], dtype=np.int64)
_OUTCOME_W, _OUTCOME_M, _OUTCOME_N = _styled(b',"outcome":"')
_WORD_W, _WORD_M, _WORD_N = _table([word.encode() + b'"' for word in OUTCOMES])
_DELIVERED_W, _DELIVERED_M, _DELIVERED_N = _styled(b',"delivered":')
_NULL_WORD = int.from_bytes(b"null", "little")
_NEWLINE, _QUOTE, _BACKSLASH, _CLOSE = 0x0A, 0x22, 0x5C, 0x7D


# -- the kernel: plain Python over ints and arrays, compiled by numba -------------------------

# The kernel's functions by name: plain Python until `compiled` swaps in numba's machine code
# (module globals, because numba resolves the calls between them by global name). `PYTHON`
# keeps the sources, which the tests run as plain Python against the compiled code.
_INLINED = ("_word", "_match", "_integer")
_KERNELS = ("_scan_lines", "_count_lines")


def compiled() -> bool:
    """Compile the kernel, or load it from numba's cache beside this module (once per
    process, `jit.compile_kernels`); False where numba cannot be imported (every line then
    goes to the typed decoder)."""
    return compile_kernels(globals(), PYTHON, _KERNELS, _INLINED)


def _word(data: Bytes, at: int) -> np.uint64:
    """The 8 bytes from ``at`` as a little-endian word (the caller keeps them in the data)."""
    word = np.uint64(0)
    for j in range(7, -1, -1):
        word = (word << np.uint64(8)) | np.uint64(data[at + j])
    return word


def _match(data: Bytes, end: int, at: int, words: Words, masks: Words, size: int) -> int:
    """The position after the literal (``words``/``masks``, ``size`` bytes) when the bytes at
    ``at`` (before ``end``) start with it; else -1. -1 in gives -1 out, so a line's reading
    goes straight on and is judged once, at its end."""
    if at < 0 or at + size > end:
        return -1
    if at + 8 * len(words) <= end:  # whole words: the usual case
        for j in range(len(words)):
            if (_word(data, at + 8 * j) & masks[j]) != words[j]:
                return -1
        return at + size
    for j in range(size):  # near the chunk's end: byte by byte, never reading past it
        if int(data[at + j]) != (int(words[j >> 3]) >> (8 * (j & 7))) & 0xFF:
            return -1
    return at + size


def _integer(data: Bytes, end: int, at: int, nullable: bool, row: Ints, column: int) -> int:
    """A JSON integer of at most `MAX_DIGITS` digits (or ``null`` where ``nullable``) at
    ``at``: stores it in ``row[column]`` (`NULL` for null) and returns the position after
    it; -1 where there is none the scanner takes."""
    if at < 0:
        return -1
    value = 0
    j = at
    while j < end and j - at <= MAX_DIGITS:
        c = int(data[j])
        if c < 0x30 or c > 0x39:
            break
        value = value * 10 + (c - 0x30)
        j += 1
    digits = j - at
    if digits == 0:
        if nullable and at + 4 <= end:
            found = 0
            for i in range(3, -1, -1):
                found = (found << 8) | int(data[at + i])
            if found == _NULL_WORD:
                row[column] = NULL
                return at + 4
        return -1
    if digits > MAX_DIGITS or (digits > 1 and data[at] == 0x30):
        return -1
    row[column] = value
    return j


def _scan_lines(
    data: Bytes,
    end: int,
    hash_mul: int,
    starts: Ints,
    stops: Ints,
    values: Ints,
    outcome: Ints,
    rid: Ints,
    first: Ints,
    table: Ints,
    hashes: Words,
) -> int:
    """Scan ``data[:end]`` line by line into the arrays (one row per line; ``first``: the
    start and length of each distinct id's first occurrence; ``table``: an empty hash table,
    -1s, its size a power of two above twice the lines). Returns the number of distinct ids."""
    slots = len(table) - 1
    line = 0
    distinct = 0
    pos = 0
    # Every line ends at a newline or at ``end``, so there are never more rows than
    # `_count_lines` counted; the bound is checked anyway: compiled code has no bounds checks,
    # and a wrong count must give wrong columns (which the tests see), never a write past them.
    while pos < end and line < len(starts):
        start = pos
        row = values[line]
        style = 0  # the compact skeleton, else json.dumps' default separators
        at = _match(data, end, start, _PREFIX_W[0], _PREFIX_M[0], _PREFIX_N[0])
        if at < 0:
            style = 1
            at = _match(data, end, start, _PREFIX_W[1], _PREFIX_M[1], _PREFIX_N[1])
        at = _integer(data, end, at, False, row, 0)
        at = _match(data, end, at, _REQUEST_W[style], _REQUEST_M[style], _REQUEST_N[style])
        id_at = at
        digest = np.uint64(_HASH_START)
        if at >= 0:  # the id: id characters up to the closing quote
            while at < end and at - id_at <= MAX_ID_BYTES:
                c = data[at]
                if c < 0x20 or c > 0x7E or c in (_QUOTE, _BACKSLASH):
                    break
                digest = (digest ^ np.uint64(c)) * np.uint64(hash_mul)
                at += 1
            if at >= end or data[at] != _QUOTE or at == id_at or at - id_at > MAX_ID_BYTES:
                at = -1
        id_size = at - id_at
        for key in range(len(_NULLABLE)):
            words, masks, size = _KEY_W[style, key], _KEY_M[style, key], _KEY_N[style, key]
            at = _match(data, end, at, words, masks, size)
            at = _integer(data, end, at, _NULLABLE[key] != 0, row, key + 1)
        at = _match(data, end, at, _OUTCOME_W[style], _OUTCOME_M[style], _OUTCOME_N[style])
        code = after = -1
        if at >= 0:
            for word in range(len(_WORD_N)):
                after = _match(data, end, at, _WORD_W[word], _WORD_M[word], _WORD_N[word])
                if after >= 0:
                    code = word
                    break
            at = after
        row[9] = ABSENT
        if at >= 0 and at < end and data[at] != _CLOSE:
            at = _match(
                data, end, at, _DELIVERED_W[style], _DELIVERED_M[style], _DELIVERED_N[style]
            )
            at = _integer(data, end, at, True, row, 9)
        if (
            at >= 0
            and at < end
            and data[at] == _CLOSE
            and (at + 1 == end or data[at + 1] == _NEWLINE)
        ):
            stop = at + 1
            outcome[line] = code
            slot = np.int64(digest & np.uint64(slots))
            while True:  # the id's class: probe until its first occurrence or a free slot
                known = table[slot]
                if known < 0:
                    table[slot] = distinct
                    hashes[distinct] = digest
                    first[distinct, 0] = id_at
                    first[distinct, 1] = id_size
                    rid[line] = distinct
                    distinct += 1
                    break
                if hashes[known] == digest and first[known, 1] == id_size:
                    other = first[known, 0]
                    same = True
                    for j in range(id_size):
                        if data[other + j] != data[id_at + j]:
                            same = False
                            break
                    if same:
                        rid[line] = known
                        break
                slot = (slot + 1) & slots
        else:
            row[:] = 0
            outcome[line] = -1
            rid[line] = -1
            stop = start
            while stop < end and data[stop] != _NEWLINE:
                stop += 1
        starts[line] = start
        stops[line] = stop
        line += 1
        pos = stop + 1
    return distinct


def _count_lines(data: Bytes, end: int) -> int:
    """Lines in ``data[:end]``: its newlines, plus one for a last line without its own."""
    newlines = 0
    for i in range(end):
        newlines += data[i] == _NEWLINE
    return newlines + int(end > 0 and data[end - 1] != _NEWLINE)


PYTHON: dict[str, Any] = {name: globals()[name] for name in _INLINED + _KERNELS}


def scan(chunk: bytes | bytearray | memoryview) -> Scan:
    """Find the lines of ``chunk`` (whole lines; the last may lack its newline) and read the
    canonical ``request_step`` lines among them (module docstring). Compiles the kernel
    first (`compiled`); without numba it runs as plain Python (correct, and very slow)."""
    compiled()
    data: Bytes = np.frombuffer(chunk, dtype=np.uint8)
    out = kernel_arrays(int(_count_lines(data, len(data))))
    distinct = int(_scan_lines(data, len(data), HASH_MUL, *out))
    starts, stops, values, outcome, rid, first = out[:6]
    view = memoryview(chunk).cast("B")
    ids = [str(view[at : at + size], "ascii") for at, size in first[:distinct].tolist()]
    return Scan(starts, stops, outcome >= 0, values, outcome, rid, ids)


def kernel_arrays(lines: int) -> tuple[np.ndarray[Any, Any], ...]:
    """`_scan_lines`' output arrays for a chunk of ``lines`` lines, in its argument order:
    starts, stops, values, outcome, rid, first (start and length of each distinct id), an
    empty hash table (-1s; a power of two above twice the lines) and the ids' hashes."""
    return (
        np.empty(lines, dtype=np.int64),
        np.empty(lines, dtype=np.int64),
        np.empty((lines, len(COLUMNS)), dtype=np.int64),
        np.empty(lines, dtype=np.int64),
        np.empty(lines, dtype=np.int64),
        np.empty((lines, 2), dtype=np.int64),
        np.full(1 << (2 * lines + 1).bit_length(), -1, dtype=np.int64),
        np.empty(lines, dtype=np.uint64),
    )
