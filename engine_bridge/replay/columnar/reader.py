"""Reading for the columnar checker: the log in chunks of whole lines, decoded into columns
(`decode_columns` -> `Lines`): the canonical request_step lines straight from the bytes
(scanner.py, compiled, in a log large enough to repay loading numba; array_scan.py, numpy
only, in the others), every other line by a typed, validating decoder (msgspec) into one
struct per record (`decode_chunk`), whose values fill the same columns.

Why msgspec (measured, docs/replay.md): it decodes a chunk of NDJSON straight into typed
structs at about ten times the speed of ``json.loads`` and validates while it decodes (exact
field names, ``int`` not ``bool``/``float``, bounds, enums); pyarrow's and polars' NDJSON
readers are faster per byte but build columns without per-line errors, accept duplicate and
unknown keys as a schema choice, and cost a large dependency.

The fast decoder only has to be *stricter* than the reference decoder (`records.parse_line`):
a line it does not vouch for is decoded by `records.parse_line` itself (so the reference's
rules, limits and messages apply), and any line that decoder rejects makes the columnar
checker hand the whole log to the reference replay. msgspec accepts duplicate keys (the last
wins) and integers of any size: sizes are bounded in the struct types, and a line is vouched
for only when its count of ``":`` (every key ends with one; nothing else in a line without
whitespace can make fewer) equals the number of fields decoded, so a repeated key always
sends the line to `records.parse_line`.

A small opener lives here (gzip by its magic bytes, else plain); the reference replay reads
through `records.iter_lines`, which reports stream errors with their messages.
"""

from __future__ import annotations

import gzip
import io
import mmap
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from itertools import compress, repeat
from operator import attrgetter, itemgetter
from typing import Any, BinaryIO, cast

import msgspec
import numpy as np
from spectally.engine_bridge.steplog.limits import MAX_LINE_BYTES
from spectally.engine_bridge.steplog.records import BadInput, Record, load_schema, parse_line
from spectally.engine_bridge.steplog.source import BOM, close_stream, log_bytes, open_binary
from spectally.engine_bridge.steplog.typed import (
    KIND,
    HeaderLine,
    LineKind,
    Request,
    RequestStep,
    StepStats,
    TotalsLine,
)

from . import array_scan, scanner
from .key_bytes import glued_values, key_colons, key_marks
from .scanner import ABSENT as ABSENT
from .scanner import COLUMNS as COLUMNS
from .scanner import NULL as NULL
from .scanner import OUTCOMES as OUTCOMES

CHUNK_BYTES = 1 << 24  # decompressed bytes read at a time; memory is a few chunks

Kinds = np.ndarray[Any, np.dtype[np.int8]]
Bytes = np.ndarray[Any, np.dtype[np.uint8]]
Positions = np.ndarray[Any, np.dtype[np.intp]]
Ints = np.ndarray[Any, np.dtype[np.int64]]
OTHER = int(LineKind.OTHER)  # a plain int: numpy converts it per line


class Irregular(Exception):
    """The columnar checker cannot vouch for this log: the reference replay judges it."""


_DECODER = msgspec.json.Decoder(RequestStep | Request | StepStats | HeaderLine | TotalsLine)
_FIXED_KEYS: dict[type, int] = {RequestStep: 12, Request: 4, StepStats: 6}  # with "record"


def _keys(rec: Any) -> int:
    """Fields the decoded record had in its line (``record`` and the optional ones included);
    -1 for a header or totals line (always decoded again by `records.parse_line`)."""
    kind = type(rec)
    n = _FIXED_KEYS.get(kind, -1)  # None (undecodable) and header/totals lines: -1
    if kind is RequestStep:
        return n + (rec.delivered is not msgspec.UNSET)
    if kind is Request:
        return (
            n
            + (rec.structured is not msgspec.UNSET)
            + (rec.reason is not msgspec.UNSET)
            + (rec.drop_stale_output is not msgspec.UNSET)
        )
    return n


def delivered_in_schema() -> bool:
    """Whether the step-log schema has the optional ``delivered`` field (BRIEF interface 3)."""
    props: dict[str, Any] = load_schema()["$defs"]["request_step"]["properties"]
    return "delivered" in props


# -- reading -------------------------------------------------------------------------------------


def open_log(path: str) -> BinaryIO:
    """The decompressed byte stream of a log (`source.open_binary`: the one opener, so gzip,
    stdin and other compressions are told apart exactly as the reference replay does)."""
    try:
        return open_binary(path)
    except BadInput as exc:
        raise Irregular(str(exc)) from None


# The compiled kernels (the byte scanner, the shape keys) are loaded for a log of at least this
# many (decompressed) bytes: importing numba and loading them costs ~0.35-0.4 s of CPU once per
# process, and the scanner saves ~5-6 ms per MiB over the typed decoder alone (fresh
# processes on synth's uniform logs, with it / without: 46 MiB 0.71-0.77 / 0.59-0.67 s, 61 MiB
# 0.72-0.82 / 0.70-0.77 s, 77 MiB 0.85-0.88 / 0.91-0.92 s), so a log under ~64 MiB replays
# faster without them. (Measured against the typed decoder; below it the canonical lines are
# now read by array_scan.py, which narrows the gap per MiB, so the crossover lies higher: not
# measured again.) The tests set it to 0 (tests/conftest.py).
JIT_MIN_LOG_BYTES = 64 << 20


def worth_compiling(
    path: str, lines: Sequence[tuple[int, bytes, bool]] | None, run_bytes: int = 0
) -> bool:
    """Whether the log, or the run of logs this process replays (``run_bytes``), is large
    enough to repay loading the compiled kernels (`source.log_bytes`; True when the log's size
    cannot be told)."""
    if run_bytes >= JIT_MIN_LOG_BYTES:
        return True
    if lines is not None:
        return sum(len(raw) for _, raw, _ in lines) >= JIT_MIN_LOG_BYTES
    size = log_bytes(path)
    return size is None or size >= JIT_MIN_LOG_BYTES


# Engine steps the columnar checker gives back to the reader (`ByteChunks.keep`) are at most
# this many bytes; a longer one stays decoded and is carried (checked on its own).
KEEP_BYTES = 1 << 20


# A read buffer the process has used, for its next log: the logs of a run (restart logs, one
# after another) fault its 18 MiB of pages in once (~24 ms of CPU a log otherwise). A log
# takes it while it reads, so two logs read at once never share one; the bytes a log finds
# past its chunks are stale either way (`ByteChunks`).
_SPARE: list[mmap.mmap] = []


class ByteChunks:
    """The log's bytes in chunks of whole lines (each ends with a newline, except perhaps the
    last). A stream error (corrupt gzip, unreadable file) is `Irregular`: the reference replay
    reads the log again and reports it.

    The chunks of a stream are views of one buffer that the next chunk overwrites (read into
    with ``readinto``: no fresh memory, so no page faults and no copy per chunk); a chunk is
    valid until the iteration is resumed. Between two chunks, `keep` gives the last lines of
    the one just read back: the next chunk starts with them. (The columnar checker gives back
    an engine step the chunk boundary cut, so that it is decoded again and checked with the
    rest of its lines in the next chunk, rather than carried decoded and checked on its own:
    every check has costs of its own, whatever its size.)"""

    def __init__(self, path: str, lines: Sequence[tuple[int, bytes, bool]] | None) -> None:
        self.path, self.lines = path, lines
        self._buffer: bytearray | mmap.mmap = bytearray()
        self._end = 0  # the length of the chunk just read (buffer[:_end])
        self._back = 0  # where the lines given back start (_end: none)
        self._open = False  # a chunk (not the last) was just read: `keep` may give lines back

    def keep(self, count: int) -> bool:
        """Give the last ``count`` lines of the chunk just read back, to be read again at the
        front of the next chunk. False (nothing given back) after the last chunk, for lines
        of a list (not a stream), for more lines than the chunk has, and for more than
        `KEEP_BYTES` in all: the caller keeps them itself."""
        if not self._open or count < 1:
            return False
        buffer, end = self._buffer, self._end
        at = end
        for _ in range(count):
            if at == 0:
                return False
            at = buffer.rfind(b"\n", 0, at - 1) + 1  # the start of the line ending at at - 1
            if end - at > KEEP_BYTES:
                return False
        self._back = at
        return True

    def __iter__(self) -> Iterator[bytes | memoryview]:
        if self.lines is not None:
            lines = self.lines
            for start in range(0, len(lines), 1 << 15):
                part = lines[start : start + (1 << 15)]
                yield b"".join(raw + b"\n" if nl else raw for _, raw, nl in part)
            return
        # The buffer's front: lines given back (at most KEEP_BYTES), then a partial line (at
        # most MAX_LINE_BYTES, else Irregular); at most CHUNK_BYTES are read after them.
        # An anonymous map, not a bytearray: its pages cost only once data lands in them
        # (a bytearray is zeroed whole, ~20 ms for its 18 MiB, whatever the log's size). The
        # process keeps it for its next log (`_SPARE`), whose pages are then touched already.
        size = KEEP_BYTES + MAX_LINE_BYTES + 1 + CHUNK_BYTES
        spare = _SPARE.pop() if _SPARE else None
        buffer = self._buffer = spare if spare and len(spare) == size else mmap.mmap(-1, size)
        view = memoryview(buffer)
        try:
            yield from self._chunks(buffer, view)
        finally:
            self._open = False
            if not _SPARE:  # one kept: logs read one after another need no more
                _SPARE.append(buffer)

    def _chunks(self, buffer: mmap.mmap, view: memoryview) -> Iterator[memoryview]:
        stream = open_log(self.path)
        rest = whole = 0  # bytes at the buffer's front, and of those the whole lines
        try:
            while True:
                try:
                    got = cast(io.BufferedIOBase, stream).readinto(view[rest : rest + CHUNK_BYTES])
                except (EOFError, OSError, gzip.BadGzipFile) as exc:
                    raise Irregular(f"stream error: {exc}") from None
                if not got:
                    if rest:
                        yield view[:rest]
                    return
                filled = rest + got
                cut = buffer.rfind(b"\n", rest, filled) + 1
                if cut == 0:
                    rest = filled
                    if rest - whole > MAX_LINE_BYTES:  # memory stays bounded, whatever a line
                        raise Irregular("a line over the limit")
                    continue
                self._end = self._back = cut
                self._open = True
                yield view[:cut]
                self._open = False
                back = self._back
                view[: filled - back] = buffer[back:filled]
                rest, whole = filled - back, cut - back
        finally:
            close_stream(stream)


def byte_chunks(path: str, lines: Sequence[tuple[int, bytes, bool]] | None) -> ByteChunks:
    """The log's bytes in chunks of whole lines (`ByteChunks`)."""
    return ByteChunks(path, lines)


# -- decoding ------------------------------------------------------------------------------------


def decode_chunk(path: str, first_line: int, chunk: bytes) -> tuple[list[Any], Kinds]:
    """Decode one chunk of whole lines: one struct per line (header and totals: the dict of
    `records.parse_line`), and each line's kind (`KIND`).

    Every line is vouched for by the typed decoder or decoded by `records.parse_line`; a line
    that one rejects raises `Irregular` (the reference replay reports it). A byte-order mark
    anywhere in the chunk does too: msgspec reads U+FEFF inside a string as any character,
    the reference's line check (`source.check_line`) refuses it outside the input's first
    bytes (encoded surrogates, the line check's other byte test, msgspec refuses itself)."""
    records, kinds, _ = _decode_chunk(path, first_line, chunk)
    return records, kinds


def _decode_chunk(
    path: str, first_line: int, chunk: bytes
) -> tuple[list[Any], Kinds, list[Any] | None]:
    """`decode_chunk`, and the request_step records in line order where the whole-chunk check
    (`_keys_match`) collected them (else None)."""
    if not chunk.isascii() and BOM in chunk:  # one pass for an ASCII chunk, the usual one
        raise Irregular("a byte-order mark inside the log")
    records: list[Any] | None
    try:
        records = _DECODER.decode_lines(chunk)
    except (msgspec.DecodeError, msgspec.ValidationError):
        records = None
    matched = _keys_match(chunk, records) if records is not None else None
    if records is not None and matched is not None:
        kinds, blocks = matched
        n = len(records)
        if n and type(records[0]) is HeaderLine:
            records[0] = _reparse(path, first_line, chunk[: chunk.find(b"\n")], True)
        if n and type(records[-1]) is TotalsLine:
            start = chunk.rfind(b"\n", 0, len(chunk) - 1) + 1
            text = chunk[start:]
            records[-1] = _reparse(
                path, first_line + n - 1, text.rstrip(b"\n"), text.endswith(b"\n")
            )
        return records, kinds, blocks
    n = chunk.count(b"\n") + (not chunk.endswith(b"\n"))
    records = _decode_lines_one_by_one(path, first_line, chunk, n)
    return records, np.fromiter(map(KIND.get, map(type, records), repeat(OTHER)), np.int8, n), None


def _keys_match(chunk: bytes, records: list[Any]) -> tuple[Kinds, list[Any]] | None:
    """Whether no line of the chunk can hold a repeated key, for the whole chunk at once.

    Every key is followed by ``:`` (after JSON whitespace, if any), so a line has at least as
    many key colons (`key_bytes.key_colons`; without whitespace, simply colons) as keys, and
    at least as many keys as fields decoded; if the chunk's key colons equal the fields
    decoded (header and totals lines aside), every line has exactly one key per field
    decoded. (Counting fewer fields than were decoded only sends the chunk to the
    line-by-line check.) Returns the lines' kinds, or None when the chunk must be checked
    line by line; with them, the request_step records, in line order. Decoded records and
    lines correspond when their counts are equal and each line holds one value
    (`_one_value_per_line`)."""
    n = len(records)
    data = np.frombuffer(chunk, dtype=np.uint8)
    ends = np.flatnonzero(data == 10)
    lines = len(ends) + (not chunk.endswith(b"\n"))
    if n != lines:
        return None  # an empty line, which decode_lines skips
    spaced = b" " in chunk or b"\t" in chunk or b"\r" in chunk
    if not _one_value_per_line(chunk, data, ends, lines, compact=not spaced):
        return None
    if len(chunk) > MAX_LINE_BYTES and np.diff(ends, prepend=-1, append=len(chunk)).max() > (
        MAX_LINE_BYTES + 1
    ):
        return None  # a line over the limit: the reference decoder says so
    kinds = np.fromiter(map(KIND.get, map(type, records), repeat(OTHER)), np.int8, n)
    per_kind = np.bincount(kinds, minlength=len(LineKind))
    head = int(kinds[0] == LineKind.HEADER)
    tail = int(n > 1 and kinds[-1] == LineKind.TOTALS)
    if per_kind[LineKind.HEADER] + per_kind[LineKind.TOTALS] != head + tail or per_kind[OTHER]:
        return None  # a header or totals line is vouched for only first / last in a chunk
    fields = sum(keys * int(per_kind[KIND[t]]) for t, keys in _FIXED_KEYS.items())
    if per_kind[LineKind.REQUEST]:
        # a request record's optional fields, counted one field at a time over all of them
        # (C passes; `_keys` called per record took as long as the rest of this check)
        requests = itemgetter_list(records, np.flatnonzero(kinds == LineKind.REQUEST))
        fields += sum(
            len(requests) - list(map(field, requests)).count(msgspec.UNSET)
            for field in _REQUEST_OPTIONAL
        )
    steps = (
        list(compress(records, (kinds == LineKind.REQUEST_STEP).tolist()))
        if per_kind[LineKind.REQUEST_STEP]
        else []
    )
    if steps:
        fields += len(steps) - list(map(_DELIVERED, steps)).count(msgspec.UNSET)
    start = chunk.find(b"\n") + 1 if head else 0
    end = chunk.rfind(b"\n", 0, len(chunk) - 1) + 1 if tail else len(chunk)
    body = data[start:end]
    if spaced:
        found, doubtful = key_colons(body)  # (a log written with ", " and ": " separators)
        if len(doubtful):
            return None
        colons = len(found)
    else:
        colons = int(np.count_nonzero(body == 58))  # ":"; the same bound, in one pass
    return (kinds, steps) if colons == fields else None


def _one_value_per_line(
    chunk: bytes, data: Bytes, ends: Positions, lines: int, *, compact: bool
) -> bool:
    """Whether the chunk's ``lines`` lines (``ends``: its newlines), as many as the values
    decode_lines read, hold one value each.

    decode_lines also reads two values from one line ({...}{...}) and none from a blank one,
    so equal counts prove nothing while a line may be blank: every line must hold a "{" (a
    line the decoder reads holds one, a blank line none). Nor do they while one line may hold
    two values and another a value's first part: a "{" inside a string passes the check
    above, and decode_lines reads a value across a newline (JSON whitespace). With no blank
    line and no value following another on its line ("}" then "{" with no newline between:
    `key_bytes.glued_values`), each of the n - 1 gaps between the n values holds one of the
    n - 1 newlines inside the chunk, so no value holds one: each line is exactly one value.

    ``compact``: the chunk holds no space, tab or carriage return (the usual chunk), so a "{"
    follows a "}" where "}{" occurs; then a chunk each of whose lines after the first holds
    exactly one "{", at its start, and whose first line starts with one and holds no "}{",
    passes both tests, without the passes over every "{" (any other chunk takes them)."""
    if compact and lines:
        first = int(ends[0]) + 1 if len(ends) else len(chunk)  # the first line's end
        starts = ends[: lines - 1] + 1
        if (
            data[0] == 123
            and b"}{" not in chunk[:first]
            and (data[starts] == 123).all()
            and np.count_nonzero(data[first:] == 123) == lines - 1
        ):
            return True
    opens = np.flatnonzero(data == 123)
    braces = np.bincount(np.searchsorted(ends, opens), minlength=lines)
    return bool(braces[:lines].all()) and not glued_values(data, opens)


def itemgetter_list(records: list[Any], index: np.ndarray[Any, np.dtype[np.intp]]) -> list[Any]:
    """``[records[i] for i in index]``, in one C call."""
    if len(index) == 0:
        return []
    if len(index) == 1:
        return [records[int(index[0])]]
    return list(itemgetter(*index.tolist())(records))


_DELIVERED = attrgetter("delivered")
_REQUEST_OPTIONAL = tuple(map(attrgetter, ("structured", "reason", "drop_stale_output")))


def _reparse(path: str, lineno: int, text: bytes, has_newline: bool) -> Any:
    if len(text) > MAX_LINE_BYTES:  # the reference's line source (source.iter_lines) says so
        raise Irregular(f"line {lineno} is over the limit")
    try:
        rec: Record = parse_line(path, lineno, text, has_newline)
    except BadInput as exc:
        raise Irregular(str(exc)) from None
    return _from_dict(rec)


def _decode_lines_one_by_one(path: str, first_line: int, chunk: bytes, n: int) -> list[Any]:
    """`decode_chunk` line by line: each line the typed decoder does not vouch for (a decoding
    error, a possibly repeated key) goes to `records.parse_line`."""
    texts = chunk.split(b"\n")
    has_last_newline = chunk.endswith(b"\n")
    if has_last_newline:
        texts.pop()
    records: list[Any] = []
    for text in texts:
        try:
            records.append(_DECODER.decode(text))
        except (msgspec.DecodeError, msgspec.ValidationError):
            records.append(None)
    keys = np.fromiter(map(_keys, records), dtype=np.int64, count=n)
    keys[np.fromiter(map(len, texts), np.int64, n) > MAX_LINE_BYTES] = -1  # the limit's message
    for i in np.flatnonzero(key_marks(chunk, n) != keys).tolist():
        has_newline = has_last_newline or i < n - 1
        records[i] = _reparse(path, first_line + i, texts[i], has_newline)
    return records


_KINDS: dict[str, type] = {"request_step": RequestStep, "request": Request, "step_stats": StepStats}


def _from_dict(rec: Record) -> Any:
    """A record `records.parse_line` accepted, as the typed decoder's struct (header and totals
    stay dicts); `Irregular` when the struct types are stricter than the reference."""
    kind = _KINDS.get(rec["record"])
    if kind is None:
        return rec
    fields = {k: v for k, v in rec.items() if k not in ("record", "meta")}  # meta: ignored
    try:
        return msgspec.convert(fields, kind, strict=True)
    except msgspec.ValidationError as exc:
        raise Irregular(f"not typed-decodable: {exc}") from None


# -- columns ---------------------------------------------------------------------------------

OUTCOME_CODE = {name: code for code, name in enumerate(OUTCOMES)}
SCAN = True  # False: every line through the typed decoder (benchmarks, tests)
_STEP = attrgetter("step")


@dataclass
class Lines:
    """Consecutive lines of a log as columns, one row per line: the unit the columnar checker
    works on. ``values`` holds a request_step line's `scanner.COLUMNS` (nulls `NULL`, no
    ``delivered`` `ABSENT`) and every other line's step in column 0 (header, totals: 0);
    ``outcome`` its index in `OUTCOMES` and ``rid`` its request id's index in ``ids`` (-1 on
    other lines). ``objs`` holds the decoded record of every other line (structs; header and
    totals: the dicts of `records.parse_line`); a request_step line's record is its row
    (`record` builds the struct again)."""

    kinds: Kinds
    values: Ints
    outcome: Ints
    rid: Ints
    ids: list[str]
    objs: dict[int, Any]

    def __len__(self) -> int:
        return len(self.kinds)

    @property
    def steps(self) -> Ints:
        steps: Ints = self.values[:, 0]
        return steps

    def record(self, i: int) -> Any:
        """Line ``i``'s record, as the typed decoder gives it."""
        rec = self.objs.get(i)
        if rec is not None:
            return rec
        row = self.values[i].tolist()
        fields: dict[str, Any] = {
            name: None if value == NULL else value for name, value in zip(COLUMNS, row, strict=True)
        }
        if row[-1] == ABSENT:
            del fields["delivered"]
        fields["request"] = self.ids[int(self.rid[i])]
        fields["outcome"] = OUTCOMES[int(self.outcome[i])]
        return RequestStep(**fields)

    def head(self, stop: int) -> Lines:
        """The first ``stop`` lines, sharing the record dict: no pass over it as `cut` makes
        (the lines keep their numbers, and nothing looks up a line past ``stop``). Only for
        reading: `then` would carry the shared dict's later lines along."""
        if stop == len(self):
            return self
        return Lines(
            self.kinds[:stop],
            self.values[:stop],
            self.outcome[:stop],
            self.rid[:stop],
            self.ids,
            self.objs,
        )

    def cut(self, start: int, stop: int) -> Lines:
        """Lines ``start`` to ``stop`` (exclusive)."""
        objs = {i - start: rec for i, rec in self.objs.items() if start <= i < stop}
        return Lines(
            self.kinds[start:stop],
            self.values[start:stop],
            self.outcome[start:stop],
            self.rid[start:stop],
            self.ids,
            objs,
        )

    def own(self) -> Lines:
        """These lines as a copy that shares no array with this one and holds only the ids
        it uses (what a chunk carries to the next: the chunk's own columns can then be
        freed)."""
        rid, ids = self._used_ids()
        return Lines(
            self.kinds.copy(),
            self.values.copy(),
            self.outcome.copy(),
            rid,
            ids,
            dict(self.objs),
        )

    def _used_ids(self) -> tuple[Ints, list[str]]:
        """The ids these lines use, in id order, and each line's index among them (-1 for a
        line without a request)."""
        used, rid = np.unique(self.rid, return_inverse=True)
        ids = [self.ids[i] for i in used.tolist() if i >= 0]
        return (rid.reshape(-1) - int(used[0] < 0) if len(used) else self.rid.copy()), ids

    def then(self, more: Lines) -> Lines:
        """These lines followed by ``more`` (this one's ids compacted to those it uses, so a
        carried remainder does not accumulate ids over the chunks)."""
        rid, ids = self._used_ids()
        offset = len(ids)
        n = len(self)
        objs = dict(self.objs)
        objs.update((i + n, rec) for i, rec in more.objs.items())
        return Lines(
            np.concatenate([self.kinds, more.kinds]),
            np.concatenate([self.values, more.values]),
            np.concatenate([self.outcome, more.outcome]),
            np.concatenate([rid, np.where(more.rid >= 0, more.rid + offset, -1)]),
            ids + more.ids,
            objs,
        )


def empty_lines() -> Lines:
    return Lines(
        np.zeros(0, np.int8),
        np.zeros((0, len(COLUMNS)), np.int64),
        np.zeros(0, np.int64),
        np.zeros(0, np.int64),
        [],
        {},
    )


def decode_columns(path: str, first_line: int, chunk: bytes | memoryview) -> Lines:
    """Decode one chunk of whole lines into columns: the canonical request_step lines
    straight from the bytes (`scanner.scan`), every other line through `decode_chunk` (the
    typed decoder, or `records.parse_line`; `Irregular` where either refuses). The columns
    are the ones the typed decoder's structs give, line for line. ``chunk`` is only read
    during the call (`byte_chunks` reuses its buffer)."""
    scan = _scan(chunk)
    if scan is not None:
        lines = Lines(
            np.zeros(len(scan.taken), np.int8), scan.values, scan.outcome, scan.rid, scan.ids, {}
        )
        rest = np.flatnonzero(~scan.taken)
        if len(rest) == 0:
            return lines
        if len(rest) < len(scan.taken):  # the lines left, joined: no copy of the chunk
            view = memoryview(chunk)
            bounds = zip(scan.starts[rest].tolist(), (scan.stops[rest] + 1).tolist(), strict=True)
            text = b"".join([view[a:b] for a, b in bounds])
        else:
            text = bytes(chunk)
        records, kinds, blocks = _decode_chunk(path, first_line + int(rest[0]), text)
        lines.kinds[rest] = kinds
        _fill(lines, rest, records, kinds, blocks)
        return lines
    records, kinds, blocks = _decode_chunk(path, first_line, bytes(chunk))
    n = len(records)  # one per line (`decode_chunk`)
    lines = Lines(
        kinds,
        np.zeros((n, len(COLUMNS)), np.int64),
        np.full(n, -1, np.int64),
        np.full(n, -1, np.int64),
        [],
        {},
    )
    _fill(lines, None, records, kinds, blocks)
    return lines


def _scan(chunk: bytes | memoryview) -> scanner.Scan | None:
    """The chunk's canonical request_step lines read from the bytes: by the compiled scanner
    once its kernel is loaded (a chunk of `scanner.MIN_BYTES` or more, a log large enough to
    repay numba's import: `JIT_MIN_LOG_BYTES`), else over whole arrays (`array_scan`: no
    compiler, the compact form only); None with `SCAN` off."""
    if not SCAN:
        return None
    if len(chunk) >= scanner.MIN_BYTES and scanner.compiled():
        return scanner.scan(chunk)
    return array_scan.scan(chunk)


def _fill(
    lines: Lines, rest: Ints | None, records: list[Any], kinds: Kinds, blocks: list[Any] | None
) -> None:
    """The columns of lines ``rest`` (None: every line) from their decoded ``records``
    (``kinds``, `KIND`; ``blocks``: the request_step ones, if collected): a request_step's
    row (`_block_rows`), every other record in ``objs`` and its step (header, totals: none)
    in column 0."""
    block = kinds == LineKind.REQUEST_STEP
    others = np.flatnonzero(~block)
    other_records = itemgetter_list(records, others)
    where = others if rest is None else rest[others]
    lines.objs = dict(zip(where.tolist(), other_records, strict=True))
    has_step = kinds[others] <= LineKind.STEP_STATS  # request, step_stats (not header, totals)
    stepped = list(compress(other_records, has_step.tolist()))
    lines.values[where[has_step], 0] = np.fromiter(map(_STEP, stepped), np.int64, len(stepped))
    if len(others) < len(records):
        if blocks is None:
            blocks = list(compress(records, block.tolist()))
        at = np.flatnonzero(block)
        _block_rows(lines, at if rest is None else rest[at], blocks)


# What a nullable column holds where its line has null, or no such key (`delivered`): the
# mark, looked up by identity (an int is never equal to either); any other value is itself.
_MARKS: dict[Any, int] = {None: NULL, msgspec.UNSET: ABSENT}
_NULLABLE = frozenset(("grammar_valid", "invalid", "verified", "delivered"))
_COLUMN_GETTERS = tuple((attrgetter(name), name in _NULLABLE) for name in COLUMNS)
_OUTCOME = attrgetter("outcome")
_REQUEST = attrgetter("request")


def _block_rows(lines: Lines, at: Ints, blocks: list[Any]) -> None:
    """The columns of request_step lines the typed decoder decoded (lines ``at``), one
    column at a time over all of them (C iterators: a Python loop over the records, testing
    every value for null, took longer than the decoding itself)."""
    n = len(blocks)
    rows = np.empty((n, len(COLUMNS)), np.int64)
    for j, (get, nullable) in enumerate(_COLUMN_GETTERS):
        if nullable:
            column = list(map(get, blocks))
            first = column[0]
            if (first is None or first is msgspec.UNSET) and column.count(first) == n:
                rows[:, j] = _MARKS[first]  # all null or all absent (delivered, as a rule)
            else:
                rows[:, j] = np.fromiter(map(_MARKS.get, column, column), np.int64, n)
        else:
            rows[:, j] = np.fromiter(map(get, blocks), np.int64, n)
    lines.values[at] = rows
    lines.outcome[at] = np.fromiter(
        map(OUTCOME_CODE.__getitem__, map(_OUTCOME, blocks)), np.int64, n
    )
    # the request ids in order of first appearance, after the ones the lines have
    ids = list(map(_REQUEST, blocks))
    index = {name: i for i, name in enumerate(lines.ids)}
    for name in dict.fromkeys(ids):
        index.setdefault(name, len(index))
    lines.rid[at] = np.fromiter(map(index.__getitem__, ids), np.int64, n)
    lines.ids = list(index)
