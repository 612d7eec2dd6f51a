"""The default replay (the columnar checker, falling back to the reference) against
``--reference`` on byte-level mutations of real logs: the same exit code on every input, and
never AGREE on the default path where the reference does not agree.

The logs are the committed ones a real engine wrote (tests/fixtures/vllm, the bundled
engine_bridge/examples); the mutations are what a hostile or damaged file holds: a byte-order
mark inside a string, other encodings, lines joined and split (two records on one line, one
record over two, ``"key"\\n:``), repeated keys, whitespace, truncation, huge and odd numbers,
stray bytes, gzip or plain. The values replaced come from the CLI fuzzer's corpus
(test_fuzz_cli.HOSTILE_JSON, ENCODINGS). Each example draws whether the compiled scanner
reads every chunk (conftest's ``_scan_every_chunk``: a large log's path) or the typed decoder
every line (a small log's), so both of the columnar reader's decoders are under test.

Bounded: the examples' count comes from the Hypothesis profile of tests/conftest.py (``ci``:
derandomized, no deadline) with a floor of `EXAMPLES`; each example replays one small log
twice in process (milliseconds). The long tier:

    HYPOTHESIS_PROFILE=thorough .venv/bin/python -m pytest tests/replay/test_differential_paths.py
"""

from __future__ import annotations

import gzip
import os
import re
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TypeVar

import pytest
from hostile_values import ENCODINGS, HOSTILE_JSON
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from spectally.engine_bridge.replay.columnar import judge, reader
from spectally.engine_bridge.replay.dispatch import replay_file

ROOT = Path(__file__).parents[2]
LOGS = sorted(
    [
        *(ROOT / "tests" / "fixtures" / "vllm").glob("*.ndjson.gz"),
        *(ROOT / "engine_bridge" / "examples").glob("*.ndjson*"),
    ]
)
LINES = {
    path.name: gzip.decompress(path.read_bytes()) if path.suffix == ".gz" else path.read_bytes()
    for path in LOGS
}
EXAMPLES = 150  # the floor under the profile's count (ci: 60)

T = TypeVar("T")
BOM = b"\xef\xbb\xbf"
WHITESPACE = [b" ", b"\t", b"\r", b"  \t ", b"\n"]


@pytest.fixture(autouse=True)
def strict_columnar(monkeypatch: pytest.MonkeyPatch) -> None:
    """A fault of the columnar code fails the test instead of falling back silently."""
    monkeypatch.setattr(judge, "STRICT", True)


def _pick(data: st.DataObject, items: list[T], label: str) -> T | None:
    """One of ``items`` (None when there is none: the mutation then leaves the log as it is)."""
    return data.draw(st.sampled_from(items), label=label) if items else None


def _positions(data: bytes, pattern: bytes) -> list[int]:
    return [m.start() for m in re.finditer(re.escape(pattern), data)]


def _inside_string(log: bytes, data: st.DataObject) -> int:
    """An offset just after the opening quote of a string value (an id, a reason, a mode)."""
    spots = [m.end() for m in re.finditer(rb':"', log)]
    return _pick(data, spots, "string at") or 0


def _line_span(log: bytes, data: st.DataObject) -> tuple[int, int]:
    starts = [0, *(at + 1 for at in _positions(log, b"\n")[:-1])]
    i = data.draw(st.integers(0, len(starts) - 1), label="line")
    end = log.find(b"\n", starts[i])
    return starts[i], end if end >= 0 else len(log)


def bom(log: bytes, data: st.DataObject) -> bytes:
    at = data.draw(st.one_of(st.just(-1), st.integers(0, len(log))), label="bom at")
    at = _inside_string(log, data) if at < 0 else at
    return log[:at] + BOM + log[at:]


# What a request id may be renamed to hold: bytes the reference refuses inside a string (a
# BOM), bytes that look like structure to a byte count ("{", "}{", an escaped quote before a
# colon), non-ASCII text, whitespace.
ID_INSERTS = [BOM, b"{", b"}{", b'\\":', b"\xc3\xa9", b"\\u00e9", b" ", b"\t"]


def _ids(log: bytes) -> list[bytes]:
    return sorted(set(re.findall(rb'"request":"([^"\\]+)"', log)))


def rename_id(log: bytes, data: st.DataObject) -> bytes:
    """One request id renamed everywhere, so the log still agrees for the reference unless
    the new id holds what it refuses."""
    ids = _ids(log)
    if not ids:
        return log
    old = data.draw(st.sampled_from(ids), label="id")
    at = data.draw(st.integers(0, len(old)), label="insert at")
    new = old[:at] + data.draw(st.sampled_from(ID_INSERTS), label="insert") + old[at:]
    return log.replace(b'"' + old + b'"', b'"' + new + b'"')


def layout(log: bytes, data: st.DataObject) -> bytes:
    """Two records on one line and a record split over two lines before its request id, the
    id renamed to hold a "{": as many lines as records, a "{" on each. The joined lines are
    the two before the split record or the two after it (the records stay in their order,
    as a damaged file keeps them), or any two."""
    ids = _ids(log)
    if not ids:
        return log
    old = data.draw(st.sampled_from(ids), label="id")
    log = log.replace(b'"' + old + b'"', b'"{' + old + b'"')
    split = _pick(data, _positions(log, b',"request":"{' + old), "split")
    if split is None:
        return log
    cut = split + 1
    log = log[:cut] + data.draw(st.sampled_from([b"\n", b"\n "]), label="newline") + log[cut:]
    start = log.rfind(b"\n", 0, cut)  # the newline before the split record
    end = log.find(b"\n", cut + 1)  # the newline after the continuation
    near = [log.rfind(b"\n", 0, max(start, 0)), log.find(b"\n", end + 1) if end >= 0 else -1]
    anywhere = [at for at in _positions(log, b"\n")[:-1] if at not in (start, cut, end)]
    joins = [at for at in near if at >= 0] or anywhere
    at = _pick(data, joins + anywhere[:1], "join at")
    if at is None:
        return log
    return log[:at] + data.draw(st.sampled_from([b"", b" ", b"\t"]), label="gap") + log[at + 1 :]


def encoding(log: bytes, data: st.DataObject) -> bytes:
    start, end = _line_span(log, data)
    line = log[start:end].decode("utf-8", "replace")
    line = line.replace('"request":"', '"request":"\u00e9\u4e2d', 1)
    enc = data.draw(st.sampled_from(ENCODINGS), label="encoding")
    return log[:start] + line.encode(enc, "replace") + log[end:]


def join(log: bytes, data: st.DataObject) -> bytes:
    """Two lines on one, perhaps with whitespace between; perhaps a record split elsewhere
    (at a comma or before a colon: ``"key"\\n:``) so that lines and records still balance."""
    newlines = _positions(log, b"\n")[:-1]
    if not newlines:
        return log
    at = data.draw(st.sampled_from(newlines), label="join at")
    gap = data.draw(st.sampled_from([b"", b" ", b"\t"]), label="gap")
    log = log[:at] + gap + log[at + 1 :]
    splits = [m.start() + 1 for m in re.finditer(rb",", log)] + [
        m.start() + 1 for m in re.finditer(rb'"(?=:)', log)
    ]
    if data.draw(st.booleans(), label="split too"):
        cut = _pick(data, splits, "split at") or 0
        log = log[:cut] + b"\n" + log[cut:]
    return log


def split_line(log: bytes, data: st.DataObject) -> bytes:
    at = data.draw(st.integers(0, len(log)), label="newline at")
    return log[:at] + data.draw(st.sampled_from([b"\n", b"\n\n", b"\r\n"])) + log[at:]


def repeat_key(log: bytes, data: st.DataObject) -> bytes:
    """A key and its value written twice in one record (the last would win), the second colon
    perhaps after whitespace or a newline."""
    pairs = list(re.finditer(rb'"[a-z_]+"(:[^,{}\[\]]+),', log))
    if not pairs:
        return log
    m = data.draw(st.sampled_from(pairs), label="pair")
    whole: bytes = m.group()
    key = whole[: whole.index(b":")]
    sep = data.draw(st.sampled_from([b"", b" ", b"\t", b"\n"]), label="before colon")
    value: bytes = data.draw(st.sampled_from([whole[len(key) + 1 : -1], b"0", b"1", b"null"]))
    return log[: m.end()] + key + sep + b":" + value + b"," + log[m.end() :]


def whitespace(log: bytes, data: st.DataObject) -> bytes:
    spots = [m.start() + 1 for m in re.finditer(rb"[,:{]", log)] + [
        m.start() for m in re.finditer(rb"[,:}]", log)
    ]
    at = _pick(data, spots, "whitespace at") or 0
    return log[:at] + data.draw(st.sampled_from(WHITESPACE), label="whitespace") + log[at:]


def truncate(log: bytes, data: st.DataObject) -> bytes:
    return log[: data.draw(st.integers(0, len(log)), label="cut at")]


def number(log: bytes, data: st.DataObject) -> bytes:
    spans = [m.span() for m in re.finditer(rb"(?<=:)-?\d+", log)]
    start, end = _pick(data, spans, "number") or (0, 0)
    value = data.draw(st.sampled_from(HOSTILE_JSON), label="value").encode()
    return log[:start] + value + log[end:]


def byte(log: bytes, data: st.DataObject) -> bytes:
    at = data.draw(st.integers(0, len(log) - 1), label="byte at")
    new = data.draw(st.sampled_from([b"\xff", b"\x00", b"\xed\xa0\x80", b"{", b"}", b'"', b"\\"]))
    return log[:at] + new + log[at + 1 :]


MUTATIONS: list[Callable[[bytes, st.DataObject], bytes]] = [
    bom,
    rename_id,
    layout,
    encoding,
    join,
    split_line,
    repeat_key,
    whitespace,
    truncate,
    number,
    byte,
]


@contextmanager
def written(data: bytes, gz: bool) -> Iterator[str]:
    fd, path = tempfile.mkstemp(prefix="spectally-diff-", suffix=".ndjson.gz" if gz else ".ndjson")
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(gzip.compress(data, mtime=0) if gz else data)
        yield path
    finally:
        os.unlink(path)


def assert_same_verdict(path: str, scan: bool = True) -> None:
    """``scan``: the compiled scanner reads every chunk (as for a large log); else the typed
    decoder reads every line (as for a log under `reader.JIT_MIN_LOG_BYTES`)."""
    before = reader.SCAN
    reader.SCAN = scan
    try:
        fast = replay_file(path, progress=False)
    finally:
        reader.SCAN = before
    plain = replay_file(path, progress=False, reference=True)
    assert fast.exit_code == plain.exit_code, (
        fast.status,
        plain.status,
        fast.bad_input,
        plain.bad_input,
    )
    assert fast.status == plain.status
    assert fast.status != "agree" or plain.status == "agree"
    assert str(fast.bad_input) == str(plain.bad_input)


@settings(
    max_examples=max(EXAMPLES, settings().max_examples),
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(data=st.data())
def test_default_and_reference_agree_on_mutated_logs(data: st.DataObject) -> None:
    log = LINES[data.draw(st.sampled_from(sorted(LINES)), label="log")]
    how = data.draw(st.lists(st.sampled_from(MUTATIONS), min_size=1, max_size=3), label="mutations")
    for mutate in how:
        if log:
            log = mutate(log, data)
    with written(log, data.draw(st.booleans(), label="gzip")) as path:
        assert_same_verdict(path, data.draw(st.booleans(), label="scanner"))


@pytest.mark.parametrize("mutate", MUTATIONS, ids=lambda f: f.__name__)
@settings(max_examples=10, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_each_mutation_class(
    mutate: Callable[[bytes, st.DataObject], bytes], data: st.DataObject
) -> None:
    """Every class on its own, a few examples each (the mixed test may draw one rarely)."""
    log = LINES[data.draw(st.sampled_from(sorted(LINES)), label="log")]
    with written(mutate(log, data), False) as path:
        assert_same_verdict(path, data.draw(st.booleans(), label="scanner"))
