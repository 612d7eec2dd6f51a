"""reader: the reader (`ByteChunks`: chunks of whole lines, lines given back) and `Lines`
(the columns of a chunk of lines, cut, joined and carried)."""

from __future__ import annotations

import itertools
import json
import os
import tempfile
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from spectally.engine_bridge.replay.columnar import key_bytes, reader
from spectally.engine_bridge.replay.columnar.reader import COLUMNS, Lines, empty_lines


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


# (text: arbitrary bytes may open with a compression's magic, which the opener refuses)
_LINE = st.text(alphabet='ab{}:" ', max_size=40).map(str.encode)


@settings(max_examples=300, deadline=None)
@given(
    lines=st.lists(_LINE, max_size=30),
    newline_at_end=st.booleans(),
    chunk_bytes=st.integers(1, 70),
    keep_bytes=st.integers(0, 120),
    asks=st.lists(st.integers(0, 5), max_size=60),
)
def test_byte_chunks_reads_each_byte_once_and_lines_given_back_again(
    lines: list[bytes], newline_at_end: bool, chunk_bytes: int, keep_bytes: int, asks: list[int]
) -> None:
    """`ByteChunks`: the new bytes of the chunks are the log, each chunk starts with the lines
    the one before gave back (`keep`), and `keep` gives back exactly when it may: after a
    chunk that is not the last, at most the chunk's lines, at most `KEEP_BYTES`. Lines given
    back do not count toward a line's limit (`MAX_LINE_BYTES`, here as long as a line)."""
    data = b"\n".join(lines) + (b"\n" if newline_at_end and lines else b"")
    with tempfile.TemporaryDirectory() as tmp, pytest.MonkeyPatch.context() as mp:
        path = os.path.join(tmp, "log.ndjson")
        with open(path, "wb") as out:
            out.write(data)
        mp.setattr(reader, "CHUNK_BYTES", chunk_bytes)
        mp.setattr(reader, "KEEP_BYTES", keep_bytes)
        mp.setattr(reader, "MAX_LINE_BYTES", 40)
        chunks = reader.byte_chunks(path, None)
        read, front, wants = b"", b"", iter(asks)
        for view in chunks:
            chunk = bytes(view)
            assert chunk.startswith(front)
            read += chunk[len(front) :]
            # a chunk not the last: it ends with a newline that was not read before
            last = not (chunk.endswith(b"\n") and len(chunk) > len(front))
            count, parts = next(wants, 0), chunk.splitlines(True)
            back = b"".join(parts[len(parts) - count :]) if count else b""
            may = not last and 0 < count <= len(parts) and len(back) <= keep_bytes
            assert chunks.keep(count) is may
            front = back if may else b""
        assert read == data
        assert not chunks.keep(1)


def test_logs_read_one_after_another_share_one_buffer_and_read_only_their_own_bytes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The process keeps a log's read buffer for its next log (`reader._SPARE`): a shorter log
    after a longer one reads its own bytes only (the longer one's stay in the buffer, stale);
    two logs read at the same time each have a buffer of their own."""
    monkeypatch.setattr(reader, "CHUNK_BYTES", 64)
    monkeypatch.setattr(reader, "_SPARE", [])
    long, short = tmp_path / "long.ndjson", tmp_path / "short.ndjson"
    long.write_bytes(b"".join(b'{"a":%d,"pad":"%s"}\n' % (i, b"x" * i) for i in range(40)))
    short.write_bytes(b'{"b":1}\n{"b":2}')

    def read(chunks: reader.ByteChunks) -> bytes:
        return b"".join(bytes(view) for view in chunks)

    first = reader.byte_chunks(str(long), None)
    assert read(first) == long.read_bytes()
    second = reader.byte_chunks(str(short), None)
    assert read(second) == short.read_bytes()
    assert second._buffer is first._buffer and [first._buffer] == reader._SPARE
    outer, inner = reader.byte_chunks(str(long), None), reader.byte_chunks(str(short), None)
    together = b""
    for view in outer:
        together += bytes(view)
        if isinstance(inner._buffer, bytearray):  # the inner log, read within the outer one
            assert read(inner) == short.read_bytes()
    assert together == long.read_bytes() and inner._buffer is not outer._buffer
    assert len(reader._SPARE) == 1


def test_byte_chunks_of_a_list_of_lines_give_nothing_back() -> None:
    """Lines given as a list (not a stream) are joined a batch at a time; `keep` refuses."""
    chunks = reader.byte_chunks("mem", [(1, b'{"a": 1}', True), (2, b"{}", False)])
    assert [bytes(chunk) for chunk in chunks] == [b'{"a": 1}\n{}']
    assert not chunks.keep(1)


def _request_lines() -> list[bytes]:
    """Request records with every combination of their optional fields, a request_step line
    with and without ``delivered``, a step_stats line: compact JSON, one per line."""
    rows: list[dict[str, object]] = []
    for structured, reason, drop in itertools.product((None, True), (None, "stop"), (None, False)):
        rec: dict[str, object] = {"record": "request", "step": 3, "request": "r", "event": "finish"}
        for name, value in (("structured", structured), ("reason", reason)):
            if value is not None:
                rec[name] = value
        if drop is not None:
            rec["drop_stale_output"] = drop
        rows.append(rec)
    step = {
        "record": "request_step", "step": 3, "request": "r", "proposed": 3, "padding": 0,
        "grammar_valid": None, "scheduled": 3, "invalid": None, "verified": None,
        "accepted": 1, "sampled": 2, "outcome": "applied",
    }  # fmt: skip
    rows += [step, {**step, "delivered": 2}]
    rows.append(
        {"record": "step_stats", "step": 3, "num_drafts": 1, "num_draft_tokens": 3,
         "num_accepted_tokens": 1, "num_accepted_tokens_per_pos": [1, 0, 0]}
    )  # fmt: skip
    return [json.dumps(rec, separators=(",", ":")).encode() + b"\n" for rec in rows]


def test_a_chunk_is_vouched_for_when_every_field_is_counted() -> None:
    """`_keys_match` counts every field decoded (each optional one a record had), so a chunk
    of distinct keys is vouched for whole; a key repeated in any one line is not (its colons
    outnumber the fields). A field left out of the count would send such chunks line by line,
    and could hide a repeated key elsewhere in the chunk."""
    lines = _request_lines()
    chunk = b"".join(lines)
    assert reader._keys_match(chunk, reader._DECODER.decode_lines(chunk)) is not None
    for i, line in enumerate(lines):
        twice = line.replace(b'"step":', b'"step":1,"step":', 1)
        bad = b"".join([*lines[:i], twice, *lines[i + 1 :]])
        assert reader._keys_match(bad, reader._DECODER.decode_lines(bad)) is None, i


def _spaced(line: bytes) -> bytes:
    """The line as json.dumps writes it by default (", " and ": ")."""
    return json.dumps(json.loads(line)).encode() + b"\n"


def test_a_spaced_chunk_is_vouched_for_unless_a_key_is_repeated() -> None:
    """A log written with ", " and ": " separators is vouched for whole, as a compact one is
    (its key colons counted past the whitespace: `key_bytes.key_colons`); a key repeated in
    any line, written with whitespace before its colon or not, is not, and
    `key_bytes.key_marks` counts it."""
    lines = [_spaced(line) for line in _request_lines()]
    chunk = b"".join(lines)
    assert reader._keys_match(chunk, reader._DECODER.decode_lines(chunk)) is not None
    fields = [len(json.loads(line)) for line in lines]
    assert key_bytes.key_marks(chunk, len(lines)).tolist() == fields
    for i, line in enumerate(lines):
        for twice in (b'"step": 1, "step":', b'"step" : 1, "step":', b'"step":1,"step"\t \r:'):
            bad_line = line.replace(b'"step":', twice, 1)
            bad = b"".join([*lines[:i], bad_line, *lines[i + 1 :]])
            assert reader._keys_match(bad, reader._DECODER.decode_lines(bad)) is None, i
            marks = key_bytes.key_marks(bad, len(lines)).tolist()
            assert marks[i] == fields[i] + 1 and marks[:i] == fields[:i], (i, twice)


def test_a_long_gap_before_a_colon_leaves_its_line_undecided() -> None:
    """`key_bytes.key_colons` steps back over at most `KEY_GAP` whitespace bytes (a bounded
    number of passes on any input): a key colon after that many is counted, one after more
    leaves its line to the reference decoder (the chunk is not vouched for whole; the line's mark
    is -2, which no field count equals)."""
    lines = [_spaced(line) for line in _request_lines()]
    fields = [len(json.loads(line)) for line in lines]
    for gap, counted in ((key_bytes.KEY_GAP, True), (key_bytes.KEY_GAP + 1, False)):
        wide = lines[1].replace(b'"step":', b'"step"' + b" " * gap + b":", 1)
        chunk = b"".join([lines[0], wide, *lines[2:]])
        vouched = reader._keys_match(chunk, reader._DECODER.decode_lines(chunk)) is not None
        assert vouched is counted
        marks = key_bytes.key_marks(chunk, len(lines)).tolist()
        assert marks == [fields[0], fields[1] if counted else -2, *fields[2:]]
        # a key repeated behind the gap: uncounted, the line would look like it has no more
        # keys than fields
        twice = lines[1].replace(b'"step":', b'"step": 1, "step"' + b" " * gap + b":", 1)
        chunk = b"".join([lines[0], twice, *lines[2:]])
        assert reader._keys_match(chunk, reader._DECODER.decode_lines(chunk)) is None
        assert key_bytes.key_marks(chunk, len(lines)).tolist()[1] != fields[1]


def test_two_records_on_a_line_and_a_blank_line_are_not_vouched_for() -> None:
    """msgspec's decode_lines reads two values from one line and none from a blank line, so
    the record count matches the line count though the records are shifted: the chunk must
    go line by line (where the reference decoder refuses the line)."""
    lines = _request_lines()
    for blank in (b"\n", b"  \n", b"\t\r\n"):
        for spaced in (False, True):
            rows = [_spaced(line) for line in lines] if spaced else list(lines)
            joined = rows[2][:-1] + (b" " if spaced else b"") + rows[3]
            bad = b"".join([*rows[:2], joined, blank, *rows[4:]])
            records = reader._DECODER.decode_lines(bad)
            assert len(records) == len(rows)  # the counts agree
            assert reader._keys_match(bad, records) is None, (blank, spaced)


_PIECES = st.sampled_from(
    [
        *_request_lines(),
        b"\n",  # a blank line
        b'{"record":"request","step":3,"request":"r","event":"finish","reason":"}{"}\n',
        b'{"record":"request","step":3,"request":"r","event":"finish","reason":"{"}\n',
        b'{"record":"request","step":3,"request":"{","event":"finish"}',  # no newline: glued
        b'{"record":"request","step":3,\n"request":"r","event":"finish"}\n',  # a value's 2 lines
        b'{"record":"request","step":3,"request":"r",\n{"event":"finish"}\n',
        b'{"record":"header","config":{"a":{}}}\n',  # objects inside
        b'{"record":"header","config":{"a":1}}{"record":"totals"}\n',
    ]
)


@settings(max_examples=400, deadline=None)
@given(st.lists(_PIECES, min_size=1, max_size=8))
def test_a_compact_chunk_takes_the_shortcut_to_the_same_answer(pieces: list[bytes]) -> None:
    """`_one_value_per_line` on a chunk without whitespace (its shortcut: one "{" a line, at
    its start, the first line aside) answers as the general test does: blank lines, values
    glued or split across lines, braces inside strings and objects inside values."""
    chunk = b"".join(pieces)
    data = np.frombuffer(chunk, dtype=np.uint8)
    ends = np.flatnonzero(data == 10)
    lines = len(ends) + (not chunk.endswith(b"\n"))
    general = reader._one_value_per_line(chunk, data, ends, lines, compact=False)
    assert reader._one_value_per_line(chunk, data, ends, lines, compact=True) == general


@pytest.mark.parametrize("scan", [False, True], ids=["typed decoder", "scanner first"])
def test_columns_name_requests_in_order_of_first_appearance(
    scan: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`decode_columns`: the request ids in the order each first appears, the scanner's lines
    first, then the typed decoder's; each request_step line's row names its id; the records
    of the other lines are in ``objs``, by line."""
    monkeypatch.setattr(reader, "SCAN", scan)
    step = json.loads(_request_lines()[-2])
    order = ("record", "step", "request", *COLUMNS[1:-1], "outcome")  # scanner's byte form
    canonical = json.dumps({name: step[name] for name in order}, separators=(",", ":"))
    spaced = [json.dumps({**step, "request": name}).encode() + b"\n" for name in "babca"]
    request = _request_lines()[0]
    chunk = b"".join([*spaced[:2], canonical.replace('"r"', '"z"').encode() + b"\n", request])
    chunk += b"".join(spaced[2:])
    lines = reader.decode_columns("log", 1, chunk)
    assert lines.ids == (["z", "b", "a", "c"] if scan else ["b", "a", "z", "c"])
    named = [lines.ids[r] if r >= 0 else None for r in lines.rid.tolist()]
    assert named == ["b", "a", "z", None, "b", "c", "a"]
    assert lines.kinds.tolist() == [0, 0, 0, 1, 0, 0, 0]
    assert list(lines.objs) == [3] and lines.objs[3].event == "finish"
    assert lines.values[:, 0].tolist() == [3] * 7
