"""The one way every reader opens its input (step logs, Prometheus scrapes, vLLM log lines,
per-request metrics, ``--metrics``): a path or ``-`` (stdin), plain or gzip.

What it guarantees, each failure a `BadInput` with ``file:line:column``:

* a missing file, a directory, an unreadable file: ``cannot read: <why>`` (line 1);
* gzip is recognised by its magic bytes; bz2, xz, zstd, zip and lz4 magic bytes get a plain
  "not supported, decompress first" message instead of garbage, and a UTF-16 or UTF-32
  byte-order mark a "convert to UTF-8 first" one; a corrupt or truncated gzip
  stream (bad CRC, bad length, cut short, zlib error) is reported at the line it broke in;
* every line at most ``limits.MAX_LINE_BYTES`` (read with a bounded ``readline``, so one huge
  line never sits in memory; a document read whole, `read_text`, at most
  ``limits.MAX_DOCUMENT_BYTES`` in all, however its lines fall), strict UTF-8 (no
  surrogates), no byte-order mark except one at the very start of the input (dropped), JSON
  nesting at most ``limits.MAX_DEPTH``;
* JSON values: no duplicate keys, no NaN/Infinity, integers within ``limits.MAX_INT``
  (`strict_loads`), so "last key wins" never hides a second value.

Why hand-checks over a library: the standard ``json`` module's C scanner is what replay's speed
rests on (docs/replay.md), and its hooks (``object_pairs_hook``, ``parse_int``,
``parse_constant``) give the strict checks exactly; third-party strict parsers (orjson,
simdjson) accept duplicate keys silently or have no depth/int limit of ours.
"""

from __future__ import annotations

import codecs
import gzip
import io
import json
import math
import operator
import os
import re
import stat
import sys
import zlib
from collections.abc import Iterable, Iterator
from itertools import accumulate, count
from typing import Any, BinaryIO, cast

from spectally.reference.errors import SpectallyError

from .limits import (
    MAX_DEPTH,
    MAX_DOCUMENT_BYTES,
    MAX_INT,
    MAX_INT_DIGITS,
    MAX_LINE_BYTES,
    digits_too_long,
)


class BadInput(SpectallyError):
    """A malformed or misplaced record; ``str()`` is ``file:line:column: reason``."""

    def __init__(self, path: str, line: int, column: int, reason: str) -> None:
        self.path = path
        self.line = line
        self.column = column
        self.reason = reason
        super().__init__(f"{path}:{line}:{column}: {reason}")


GZIP_MAGIC = b"\x1f\x8b"
BOM = codecs.BOM_UTF8
# Compressions spectally does not read: (magic bytes, name, the command that decompresses).
OTHER_COMPRESSIONS = (
    (b"BZh", "bzip2", "bzip2 -dc"),
    (b"\xfd7zXZ\x00", "xz", "xz -dc"),
    (b"\x28\xb5\x2f\xfd", "zstd", "zstd -dc"),
    (b"PK\x03\x04", "zip", "unzip -p"),
    (b"\x04\x22\x4d\x18", "lz4", "lz4 -dc"),
)
_GZIP_ERRORS = (EOFError, OSError, zlib.error)
# Byte-order marks of the encodings a UTF-8 reader would read as garbage (UTF-32's first).
UTF16_MARKS = (
    (codecs.BOM_UTF32_LE, "UTF-32LE"),
    (codecs.BOM_UTF32_BE, "UTF-32BE"),
    (codecs.BOM_UTF16_LE, "UTF-16LE"),
    (codecs.BOM_UTF16_BE, "UTF-16BE"),
)


def _cannot_read(path: str, exc: OSError) -> BadInput:
    return BadInput(path, 1, 1, f"cannot read: {exc.strerror or exc}")


def open_binary(path: str) -> BinaryIO:
    """The decompressed byte stream of ``path`` (``-`` = stdin); `BadInput` if it cannot be read
    or is compressed with something other than gzip. The caller closes it (`close_stream`)."""
    raw: BinaryIO
    if path == "-":
        raw = sys.stdin.buffer
        if not isinstance(raw, io.BufferedReader):  # peek() needs a buffered reader
            raw = io.BufferedReader(cast(io.RawIOBase, raw))
    else:
        try:
            raw = open(path, "rb")  # noqa: SIM115 - closed by the caller (close_stream)
        except OSError as exc:
            raise _cannot_read(path, exc) from None
    try:  # the first read (where a directory fails on some systems)
        head = raw.peek(8)[:8] if isinstance(raw, io.BufferedReader) else b""
    except OSError as exc:
        raise _cannot_read(path, exc) from None
    if head[:2] == GZIP_MAGIC:
        return gzip.GzipFile(fileobj=raw, mode="rb")  # type: ignore[return-value]
    for mark, name in UTF16_MARKS:  # what Windows PowerShell's `>` writes
        if head.startswith(mark):
            close_stream(raw)
            raise BadInput(
                path,
                1,
                1,
                f"{name} text (its byte-order mark): spectally reads UTF-8; convert it first"
                f" (e.g. iconv -f {name[:6]} -t UTF-8 FILE | spectally ... -)",
            )
    for magic, name, tool in OTHER_COMPRESSIONS:
        if head.startswith(magic):
            close_stream(raw)
            raise BadInput(
                path,
                1,
                1,
                f"{name}-compressed input: spectally reads plain text or gzip, not"
                f" bzip2/xz/zstd/zip/lz4; decompress it first (e.g. {tool} FILE | spectally ... -)",
            )
    return raw


def rereadable(path: str) -> bool:
    """Whether ``path`` reads the same bytes when opened again: a regular file (or one that
    cannot be looked at, whose opener reports why). Stdin, pipes, FIFOs, sockets and character
    devices give their bytes once; a reader that reads twice copies them first."""
    if path == "-":
        return False
    try:
        mode = os.stat(path).st_mode
    except (OSError, ValueError):
        return True
    return stat.S_ISREG(mode) or stat.S_ISDIR(mode)


def _stat(path: str) -> os.stat_result | None:
    """``os.stat`` through every symlink; None for a path that cannot be looked at (its
    reader says why)."""
    try:
        return os.stat(path)
    except (OSError, ValueError):  # ValueError: a NUL in the path
        return None


def first_repeat(paths: Iterable[str | None]) -> tuple[int, int] | None:
    """The indices (earlier, later) of the first two ``paths`` that name one input: the same
    device and inode, through every symlink, or ``-`` twice (stdin gives its bytes once). A
    ``None`` path, or one that cannot be looked at (its reader says why), is left out."""
    seen: dict[tuple[int, int], int] = {}
    for i, path in enumerate(paths):
        if path is None:
            continue
        if path == "-":
            key = (-1, -1)
        else:
            st = _stat(path)
            if st is None:
                continue
            key = (st.st_dev, st.st_ino)
        first = seen.setdefault(key, i)
        if first != i:
            return first, i
    return None


# How much of a log's start (decompressed), with its size, tells a copy of it: 64 KiB hold
# hundreds of records. Two runs can still write the same bytes (an offline engine numbers its
# requests 0, 1, 2, ...; greedy sampling), so a copy is reported, never refused.
COPY_PREFIX_BYTES = 1 << 16


def copies(paths: Iterable[str | None]) -> list[tuple[int, int]]:
    """(earlier, later) index pairs of regular files among ``paths`` with one content: the
    same decompressed size and the same first `COPY_PREFIX_BYTES` (a copy, a log and its
    gzipped copy, or a byte-identical rerun); each later file paired with the first it equals.
    A ``None`` path, a stream, an empty file, one that cannot be read (its reader says why)
    and one file named twice (`first_repeat` says so) are left out."""
    import hashlib  # here: only a run of several logs looks for copies

    seen: dict[tuple[int, bytes], int] = {}
    files: set[tuple[int, int]] = set()
    pairs: list[tuple[int, int]] = []
    for i, path in enumerate(paths):
        if path is None or path == "-":
            continue
        st = _stat(path)
        if st is None or not stat.S_ISREG(st.st_mode) or (st.st_dev, st.st_ino) in files:
            continue
        files.add((st.st_dev, st.st_ino))
        size = log_bytes(path)
        if not size:
            continue
        try:
            stream = open_binary(path)
            try:
                head = stream.read(COPY_PREFIX_BYTES)
            finally:
                close_stream(stream)
        except (BadInput, OSError, *_GZIP_ERRORS):
            continue
        first = seen.setdefault((size, hashlib.blake2b(head, digest_size=16).digest()), i)
        if first != i:
            pairs.append((first, i))
    return pairs


def log_bytes(path: str) -> int | None:
    """The decompressed size of a regular file: its size on disk, or a gzip file's recorded
    length (ISIZE: the length modulo 2**32; a value below the file's own size means it wrapped,
    and the answer is then "huge"); None when it cannot be told (stdin, a pipe, an error)."""
    if not rereadable(path):
        return None
    try:
        with open(path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            if f.read(2) == GZIP_MAGIC and size >= 18:
                f.seek(-4, os.SEEK_END)
                length = int.from_bytes(f.read(4), "little")
                size = length if length >= size else 1 << 62
    except OSError:
        return None
    return size


# Bytes no line of NDJSON holds: JSON allows only tab, newline and carriage return among the
# control characters outside strings, and none raw inside them.
_CONTROL = re.compile(rb"[\x00-\x08\x0b\x0c\x0e-\x1f]")


def copy_checked(
    path: str, out: BinaryIO, *, max_line: int = MAX_LINE_BYTES, max_bytes: int | None = None
) -> None:
    """Copy the decompressed bytes of ``path`` to ``out`` (replay's copy of a stream: stdin, a
    pipe; `read_text`'s document), MAX_LINE_BYTES at a time, stopping with `BadInput` at the
    first line longer than ``max_line``, past ``max_bytes`` in all (when given) or at the first
    control byte no JSON line holds: an endless input (``/dev/zero``, ``/dev/urandom``, a pipe
    that never ends a line) ends there instead of filling the disk or memory."""
    assert max_line >= MAX_LINE_BYTES  # a chunk then never holds a whole line that is too long
    stream = open_binary(path)
    line, run = 1, 0  # the line being read, and its bytes so far
    total = 0
    try:
        while True:
            try:
                chunk = stream.read(MAX_LINE_BYTES)
            except _GZIP_ERRORS as exc:
                raise BadInput(path, line, 1, gzip_error(exc)) from None
            if not chunk:
                return
            bad = _CONTROL.search(chunk)
            if bad is not None:
                at = bad.start()
                nl = chunk.count(b"\n", 0, at)
                start = chunk.rfind(b"\n", 0, at) + 1
                col = (run if nl == 0 else 0) + at - start + 1
                raise BadInput(
                    path,
                    line + nl,
                    col,
                    f"control byte 0x{chunk[at]:02x}: no JSON or YAML text holds one (a binary"
                    " file?)",
                )
            total += len(chunk)
            if max_bytes is not None and total > max_bytes:
                raise BadInput(
                    path,
                    line + chunk.count(b"\n"),
                    1,
                    f"input larger than the limit of {max_bytes} bytes for a document read"
                    " whole (docs/limits.md)",
                )
            last = chunk.rfind(b"\n")
            if last < 0:
                run += len(chunk)
            else:
                if run + chunk.find(b"\n") > max_line:
                    break
                line += chunk.count(b"\n")
                run = len(chunk) - last - 1
            if run > max_line:  # (a chunk holds at most the limit: no long line inside)
                break
            out.write(chunk)
    finally:
        close_stream(stream)
    raise BadInput(
        path,
        line,
        max_line + 1,
        f"line longer than the limit of {max_line} bytes (docs/limits.md)",
    )


def close_stream(stream: BinaryIO) -> None:
    if stream is not sys.stdin.buffer:
        stream.close()


_SURROGATE = re.compile(rb"\xed[\xa0-\xbf]")
_TOKENS = re.compile(rb'"(?:[^"\\]|\\.)*"|[\[\]{}]')


def too_deep(line: bytes | str) -> int | None:
    """0-based offset of the first bracket nested deeper than MAX_DEPTH, None if none (brackets
    inside JSON strings do not count)."""
    data = line.encode("utf-8", "surrogatepass") if isinstance(line, str) else line
    if _max_depth(data) <= MAX_DEPTH:
        return None  # the usual answer, from C-level passes (a file of many values is long)
    depth = 0
    for m in _TOKENS.finditer(data):
        c = data[m.start()]
        if c in (0x5B, 0x7B):  # [ {
            depth += 1
            if depth > MAX_DEPTH:
                return len(data[: m.start()].decode("utf-8", "replace"))
        elif c in (0x5D, 0x7D):
            depth -= 1
    return None


_STRING = re.compile(rb'"(?:[^"\\]|\\.)*"')  # what `_TOKENS` takes as a string
_NOT_BRACKETS = bytes(set(range(256)) - set(b"[]{}"))
_OPEN_CLOSE = bytes.maketrans(b"[{]}", b"\x02\x02\x00\x00")  # the depth change, plus one


def _max_depth(data: bytes) -> int:
    """The deepest nesting of brackets outside strings (the brackets `too_deep` reads): the
    running sum of +1 / -1 per bracket, its maximum, without a Python step per byte."""
    brackets = _STRING.sub(b"", data).translate(None, _NOT_BRACKETS).translate(_OPEN_CLOSE)
    return max(map(operator.sub, accumulate(brackets), count(1)), default=0)


def check_line(path: str, lineno: int, line: bytes) -> None:
    """The byte-level checks of one line (without its newline): cheap substring scans first, the
    exact check only when one of them hits. Raises `BadInput` with the column."""
    if BOM in line:
        at = line.index(BOM)
        raise BadInput(
            path,
            lineno,
            len(line[:at].decode("utf-8", "replace")) + 1,
            "stray UTF-8 byte-order mark (U+FEFF) inside the input (only the very first bytes"
            " of a file may hold one)",
        )
    if b"\xed" in line:
        m = _SURROGATE.search(line)
        if m is not None:
            raise BadInput(
                path,
                lineno,
                m.start() + 1,
                "line is not valid UTF-8 (an encoded UTF-16 surrogate)",
            )
    if line.count(b"[") + line.count(b"{") > MAX_DEPTH:
        deep = too_deep(line)
        if deep is not None:
            raise BadInput(
                path,
                lineno,
                deep + 1,
                f"JSON nested deeper than the limit {MAX_DEPTH} (docs/limits.md)",
            )


def iter_lines(path: str) -> Iterator[tuple[int, bytes, bool]]:
    """(line number, line without its newline, has_newline) for every line of an input, each
    checked by `check_line`. Memory is one line (at most MAX_LINE_BYTES)."""
    stream = open_binary(path)
    lineno = 0
    limit = MAX_LINE_BYTES + 1
    gz = isinstance(stream, gzip.GzipFile)
    try:
        while True:
            try:
                line = stream.readline(limit)
            except _GZIP_ERRORS as exc:
                if not gz:
                    raise BadInput(path, lineno + 1, 1, f"cannot read: {exc}") from None
                raise BadInput(path, lineno + 1, 1, gzip_error(exc)) from None
            if not line:
                return
            lineno += 1
            if line.endswith(b"\n"):
                line, has_newline = line[:-1], True
            elif len(line) == limit:
                raise BadInput(
                    path,
                    lineno,
                    limit,
                    f"line longer than the limit of {MAX_LINE_BYTES} bytes (docs/limits.md)",
                )
            else:
                has_newline = False
            if lineno == 1 and line.startswith(BOM):
                line = line[len(BOM) :]
            # check_line's cheap scans inline (this loop is replay's hot path): the call only
            # when one of them hits.
            # (A stray BOM and an encoded surrogate are both non-ASCII; isascii is one fast pass.)
            if not line.isascii() or line.count(b"[") + line.count(b"{") > MAX_DEPTH:
                check_line(path, lineno, line)
            yield lineno, line, has_newline
    finally:
        close_stream(stream)


def gzip_error(exc: BaseException) -> str:
    return f"corrupt or truncated gzip stream (the file fails `gzip -t`): {exc}"


def decode(path: str, lineno: int, line: bytes) -> str:
    """Strict UTF-8; `BadInput` at the first bad byte."""
    try:
        return line.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise BadInput(path, lineno, exc.start + 1, "line is not valid UTF-8") from None


def iter_text_lines(path: str) -> Iterator[tuple[int, str]]:
    """(line number, text) for every line of a text input: `iter_lines` plus strict UTF-8."""
    for lineno, line, _ in iter_lines(path):
        yield lineno, decode(path, lineno, line)


def read_text(path: str) -> str:
    """A whole document (JSON or YAML read at once), each line checked as `iter_text_lines`
    checks it, except that one line may be the whole document (`json.dump` writes one line):
    at most MAX_DOCUMENT_BYTES in all, read by `copy_checked`, so an endless input ends at its
    first control byte or at that limit."""
    buffer = io.BytesIO()
    copy_checked(path, buffer, max_line=MAX_DOCUMENT_BYTES, max_bytes=MAX_DOCUMENT_BYTES)
    data = buffer.getvalue()
    if data.startswith(BOM):
        data = data[len(BOM) :]
    lines = data.split(b"\n")
    if lines[-1] == b"":  # the newline that ends the last line (or an empty input)
        lines.pop()
    parts: list[str] = []
    for lineno, line in enumerate(lines, start=1):
        if not line.isascii() or line.count(b"[") + line.count(b"{") > MAX_DEPTH:
            check_line(path, lineno, line)
        parts.append(decode(path, lineno, line) + "\n")
    return "".join(parts)


def json_values(path: str, text: str, *, allow_nan: bool = True) -> list[tuple[int, Any]]:
    """(line, JSON value) for a JSON document, the items of a top-level array, or NDJSON.

    Strict JSON (`strict_raw_decode`: no duplicate keys, integers within 2**63 - 1) but
    NaN and Infinity are read as floats unless ``allow_nan`` is false: Python's json.dumps
    writes them, so a vLLM dump may hold one, and a NaN mean length is the engine's violation
    to report, not unreadable input."""
    if text.count("[") + text.count("{") > MAX_DEPTH:
        at = too_deep(text)
        if at is not None:
            line, col = line_col(text, at)
            raise BadInput(path, line, col, f"JSON nested deeper than the limit {MAX_DEPTH}")
    line_of = _LineCounter(text)
    i = len(text) - len(text.lstrip())
    if text[i : i + 1] == "[":
        out: list[tuple[int, Any]] = []
        i += 1
        while True:
            i = _skip(_SEPARATORS, text, i)
            if i >= len(text):
                line, col = line_col(text, i)
                raise BadInput(path, line, col, "unterminated JSON array")
            if text[i] == "]":
                return out
            value, end = strict_raw_decode(path, text, i, allow_nan=allow_nan)
            out.append((line_of(i), value))
            i = end
    values: list[tuple[int, Any]] = []
    while i < len(text):
        value, end = strict_raw_decode(path, text, i, allow_nan=allow_nan)
        values.append((line_of(i), value))
        i = _skip(_BLANK, text, end)
    return values


_SEPARATORS = re.compile(r"[ \t\r\n,]*")
_BLANK = re.compile(r"[ \t\r\n]*")


def _skip(chars: re.Pattern[str], text: str, i: int) -> int:
    """The offset after the run of ``chars`` at ``i`` (in one C call, not a loop per byte)."""
    m = chars.match(text, i)
    return m.end() if m else i


class _LineCounter:
    """1-based line of an offset of ``text``, for offsets that only grow: the newlines are
    counted from the last offset asked for, not from the start (the values of a 30 MB file
    cost one pass, not one pass each)."""

    def __init__(self, text: str) -> None:
        self.text, self.at, self.line = text, 0, 1

    def __call__(self, offset: int) -> int:
        self.line += self.text.count("\n", self.at, offset)
        self.at = offset
        return self.line


# -- strict JSON ---------------------------------------------------------------------------------


class _Reject(ValueError):
    """Raised by a strict-JSON hook: why, and the text to point the column at."""

    def __init__(self, reason: str, needle: str, nth: int = 1) -> None:
        super().__init__(reason)
        self.reason = reason
        self.needle = needle
        self.nth = nth


def _pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    obj = dict(pairs)
    if len(obj) != len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise _Reject(
                    f"duplicate key {key!r} in a JSON object (its first value would be lost)",
                    json.dumps(key),
                    nth=2,
                )
            seen.add(key)
    return obj


def _int(digits: str) -> int:
    if len(digits) >= MAX_INT_DIGITS and digits_too_long(digits):  # shorter ones always fit
        shown = digits if len(digits) <= 24 else f"{digits[:20]}... ({len(digits)} digits)"
        raise _Reject(f"integer {shown} exceeds the limit 2**63 - 1 = {MAX_INT}", digits)
    return int(digits)


def _float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise _Reject(f"number {text} is out of range (not a finite double)", text)
    return value


def _constant(name: str) -> Any:
    raise _Reject(f"{name} is not valid JSON (no NaN or Infinity)", name)


STRICT_DECODER = json.JSONDecoder(
    object_pairs_hook=_pairs, parse_int=_int, parse_float=_float, parse_constant=_constant
)
# The same, reading NaN and Infinity as floats (for values Python's json.dumps wrote).
NAN_DECODER = json.JSONDecoder(object_pairs_hook=_pairs, parse_int=_int)


def _offset_of(text: str, start: int, needle: str, nth: int) -> int:
    at = start - 1
    for _ in range(nth):
        found = text.find(needle, at + 1)
        if found < 0:
            break
        at = found
    return max(at, start)


def line_col(text: str, offset: int) -> tuple[int, int]:
    """1-based (line, column) of a character offset."""
    line = text.count("\n", 0, offset) + 1
    return line, offset - (text.rfind("\n", 0, offset) + 1) + 1


def strict_raw_decode(
    path: str, text: str, start: int, first_line: int = 1, *, allow_nan: bool = False
) -> tuple[Any, int]:
    """One JSON value of ``text`` from ``start``, strictly (see the module doc): (value, end).
    `BadInput` positions count lines from ``first_line``; JSON syntax errors keep json's text."""
    try:
        return (NAN_DECODER if allow_nan else STRICT_DECODER).raw_decode(text, start)
    except _Reject as exc:
        line, col = line_col(text, _offset_of(text, start, exc.needle, exc.nth))
        raise BadInput(path, first_line + line - 1, col, exc.reason) from None
    except json.JSONDecodeError as exc:
        raise BadInput(
            path, first_line + exc.lineno - 1, exc.colno, f"bad JSON: {exc.msg}"
        ) from None
    except RecursionError:  # only for text that skipped check_line (a caller's own input)
        line, col = line_col(text, start)
        raise BadInput(
            path, first_line + line - 1, col, f"JSON nested deeper than the limit {MAX_DEPTH}"
        ) from None


def needs_strict(line: bytes, obj: Any) -> bool:
    """Whether ``obj``, decoded from ``line`` by plain json, may hide what `strict_loads` rejects:
    a duplicate key, an integer beyond MAX_INT, NaN, Infinity or a number beyond a double (both
    decode to non-finite floats). One walk over the decoded values, no scan of the text but a
    count: distinct keys <= key:value pairs <= colons in the text, so as many colons as keys
    means no key repeats. True only means "decode strictly to be sure" (e.g. a colon inside a
    string)."""
    keys = 0
    stack = [obj]
    while stack:
        o = stack.pop()
        if type(o) is dict:
            keys += len(o)
            values: Any = o.values()
        elif type(o) is list:
            values = o
        else:
            values = (o,)
        for v in values:
            t = type(v)
            if t is int:
                if v > MAX_INT or v < -MAX_INT:
                    return True
            elif t is float:
                if v - v != 0.0:  # nan and +-inf (v - v is nan), finite floats give 0.0
                    return True
            elif t is dict or t is list:
                stack.append(v)
    return line.count(b":") != keys


def strict_loads(path: str, lineno: int, text: str) -> Any:
    """One JSON value filling a line, strictly; `BadInput` with file:line:column otherwise."""
    start = len(text) - len(text.lstrip())
    value, end = strict_raw_decode(path, text, start, lineno)
    rest = text[end:]
    if rest.strip():
        col = end + (len(rest) - len(rest.lstrip())) + 1
        raise BadInput(path, lineno, col, "bad JSON: Extra data")
    return value
