"""The scanner over whole arrays (engine_bridge/replay/columnar/array_scan.py) takes a line only
where the typed decoder and the reference decoder both accept it, with their values, and only
where the compiled scanner (scanner.py) takes it too, with the same values.

The lines are test_colscan.py's: canonical request_step lines in both styles, near-canonical
ones (one mutation of each class, one byte replaced, deleted or inserted), every single-byte
change of a few lines in one chunk; a compact canonical line within this scanner's bounds
(integers of at most `array_scan.MAX_DIGITS` digits, ids of at most `MAX_ID_BYTES`) must be
taken, so the property is not vacuous. Chunks of mixed lines decode through
`reader.decode_columns` with this scanner to the typed decoder's columns, and whole logs (the
recorded ones, generated ones with and without preemptions) give the columnar checker's
result unchanged.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import test_colscan as colscan
from hypothesis import given
from hypothesis import strategies as st
from spectally.engine_bridge import synth
from spectally.engine_bridge.replay.columnar import array_scan, reader, scanner
from spectally.engine_bridge.replay.columnar.scanner import OUTCOMES, Scan


@pytest.fixture(autouse=True)
def _array_scanner(monkeypatch: pytest.MonkeyPatch) -> None:
    """decode_columns takes this scanner: the compiled one is left for chunks of a size no
    test reaches (the tests lower `scanner.MIN_BYTES` to 0 elsewhere)."""
    monkeypatch.setattr(scanner, "MIN_BYTES", 1 << 62)


def _row(s: Scan, line: int) -> tuple[list[int], str, str] | None:
    if not s.taken[line]:
        assert (s.values[line] == 0).all() and s.rid[line] == s.outcome[line] == -1
        return None
    return s.values[line].tolist(), s.ids[int(s.rid[line])], OUTCOMES[int(s.outcome[line])]


def _scan_both(chunk: bytes) -> Scan:
    """This scanner on ``chunk``, checked line by line against the compiled one: every line
    it takes, the compiled scanner takes with the same values."""
    mine, compiled = array_scan.scan(chunk), scanner.scan(chunk)
    assert mine.starts.tolist() == compiled.starts.tolist()
    assert mine.stops.tolist() == compiled.stops.tolist()
    for line in np.flatnonzero(mine.taken).tolist():
        assert _row(mine, line) == _row(compiled, line), chunk
    return mine


def check(line: bytes) -> tuple[list[int], str, str] | None:
    """This scanner on ``line`` alone, with and without its newline, between other lines and
    followed by stale bytes in its buffer (as reader.py's chunks are): declined, or the
    decoders' values."""
    want = colscan.expected(line)
    got = _row(_scan_both(line + b"\n"), 0)
    if got is not None:
        assert got == want, line
    assert _row(_scan_both(line), 0) == got, line
    other = b'{"record":"request","step":1,"request":"r","event":"finish"}'
    assert _row(_scan_both(other + b"\n" + line + b"\n" + other), 1) == got, line
    for stale in (b"}\n", b"0" * 2000, b'"}' * 1000, line[-40:] * 40):
        buffer = bytearray(line + stale)
        assert _row(array_scan.scan(memoryview(buffer)[: len(line)]), 0) == got, (line, stale)
    return got


def _within(rec: dict[str, Any]) -> bool:
    small = all(v is None or type(v) is str or v < 10**array_scan.MAX_DIGITS for v in rec.values())
    return small and len(rec["request"]) <= scanner.MAX_ID_BYTES


@given(colscan.canonical(), st.booleans())
def test_canonical_lines_are_taken_with_the_decoders_values(
    rec: dict[str, Any], spaced: bool
) -> None:
    line = colscan.dumps(rec, spaced)
    got = check(line)
    if _within(rec) and not spaced:
        assert got is not None, line  # the scanner reads what it is meant to read
        assert got == colscan.expected(line)
    if spaced:
        assert got is None  # the second style is left to the typed decoder


@pytest.mark.parametrize("size", [1, 2, 7, 8, 9, 31, 32, 33, 254, 255, 256, 300])
def test_id_lengths(size: int) -> None:
    rec = {"record": "request_step", "step": 3, "request": "x" * size, "proposed": 2,
           "padding": 0, "grammar_valid": None, "scheduled": 2, "invalid": None,
           "verified": 1, "sampled": 2, "accepted": 1, "outcome": "applied"}  # fmt: skip
    got = check(colscan.dumps(rec))
    assert (got is not None) == (size <= scanner.MAX_ID_BYTES)
    assert got is None or got[1] == "x" * size


@pytest.mark.parametrize("digits", [1, 2, 6, 7, 8, 9, 18, 19])
def test_integer_lengths(digits: int) -> None:
    for value in (int("9" * digits), 10 ** (digits - 1)):
        for name in ("step", "proposed", "grammar_valid", "accepted", "verified", "delivered"):
            rec = {"record": "request_step", "step": 3, "request": "r", "proposed": 2,
                   "padding": 0, "grammar_valid": None, "scheduled": 2, "invalid": None,
                   "verified": 1, "sampled": 2, "accepted": 1, "outcome": "applied"}  # fmt: skip
            rec[name] = value
            got = check(colscan.dumps(rec))
            assert (got is not None) == (digits <= array_scan.MAX_DIGITS), (name, value)
            if got is not None:
                assert got[0][scanner.COLUMNS.index(name)] == value


@given(colscan.mutated())
def test_near_canonical_lines_are_declined_or_decoded_alike(line: bytes) -> None:
    check(line)


def test_every_outcome_and_delivered_form() -> None:
    base = json.loads(colscan.BASES[0]) | {"step": 10**array_scan.MAX_DIGITS - 1}
    for outcome in OUTCOMES:
        for delivered in ({}, {"delivered": None}, {"delivered": 0}, {"delivered": 1234567}):
            line = colscan.dumps(base | {"outcome": outcome} | delivered)
            assert check(line) == colscan.expected(line) is not None


@pytest.mark.parametrize("mul", [array_scan._HASH_MUL, np.uint64(0)])
def test_ids_map_to_one_str_each_even_when_every_hash_collides(
    monkeypatch: pytest.MonkeyPatch, mul: np.uint64
) -> None:
    """Ids that share words (a prefix, a longer id, the same bytes at another length) stay
    apart, also when every id hashes alike (the classes then come from the words)."""
    ids = ["ab", "a", "b", "a", "ab", "b\x7e", "a", "x" * 40, "x" * 41, "x" * 40, "x" * 39]
    ids += ["y" * 8, "y" * 16, "y" * 8 + "z", "y" * 16, "y" * 7]
    rec = {"record": "request_step", "step": 1, "request": "", "proposed": 1, "padding": 0,
           "grammar_valid": None, "scheduled": 1, "invalid": None, "verified": None,
           "sampled": 1, "accepted": 0, "outcome": "applied"}  # fmt: skip
    chunk = b"".join(colscan.dumps({**rec, "request": rid}) + b"\n" for rid in ids)
    monkeypatch.setattr(array_scan, "_HASH_MUL", mul)
    s = array_scan.scan(chunk)
    assert s.taken.all()
    assert [s.ids[i] for i in s.rid.tolist()] == ids
    assert s.ids == list(dict.fromkeys(ids))  # numbered in order of first appearance
    compiled = scanner.scan(chunk)
    assert (s.ids, s.rid.tolist()) == (compiled.ids, compiled.rid.tolist())


@pytest.mark.parametrize("group", [1, 2, 7, 1000])
def test_groups_do_not_change_the_scan(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, group: int
) -> None:
    """Lines are read `array_scan.GROUP` at a time; each group's ids may be of another width
    and each id is numbered across groups in order of first appearance: the scan is the same
    whatever the groups."""
    ids = ["ab", "a", "x" * 40, "y" * 8, "a", "x" * 41, "z" * 250, "ab", "y" * 8]
    rec = json.loads(colscan.BASES[0])
    lines = [colscan.dumps({**rec, "request": rid, "step": i}) for i, rid in enumerate(ids)]
    text = b"\n".join(lines) + b"\n" + b"".join(synth.varied.lines(1500, seed=5))
    whole = array_scan.scan(text)
    assert whole.taken.sum() > len(ids) and len(whole.starts) < array_scan.GROUP
    monkeypatch.setattr(array_scan, "GROUP", group)
    parts = array_scan.scan(text)
    assert parts.ids == whole.ids
    for name in ("starts", "stops", "taken", "values", "outcome", "rid"):
        assert np.array_equal(getattr(parts, name), getattr(whole, name)), name


@given(colscan.CHUNKS)
def test_chunks_decode_to_the_typed_decoders_columns(chunk: bytes) -> None:
    colscan.decodes_alike(chunk)


COMPACT_BASES = [
    *colscan.BASES[:1],
    b'{"record":"request_step","step":1234567,"request":"a","proposed":0,"padding":0,'
    b'"grammar_valid":0,"scheduled":0,"invalid":10,"verified":null,"sampled":0,'
    b'"accepted":0,"outcome":"discarded_stale","delivered":0}',
]


@pytest.mark.parametrize("base", COMPACT_BASES, ids=["applied", "stale-delivered"])
def test_every_single_byte_change(base: bytes) -> None:
    lines = sorted(colscan._one_byte_changes(base))
    s = _scan_both(b"\n".join(lines) + b"\n")
    taken = np.flatnonzero(s.taken).tolist()
    for i in taken:
        assert _row(s, i) == colscan.expected(lines[i]), lines[i]
    canonical_changes = [
        i
        for i, line in enumerate(lines)
        if colscan.expected(line) is not None
        and colscan._canonical(line)
        and line == colscan.dumps(json.loads(line))
        and _within(json.loads(line))
    ]
    assert canonical_changes and set(canonical_changes) <= set(taken)
    for i, line in enumerate(lines):  # each again as a chunk's last line without its newline
        assert _row(array_scan.scan(line), 0) == (colscan.expected(line) if i in taken else None)


def test_the_recorders_lines_are_all_taken() -> None:
    for path in colscan.LOGS:
        text = colscan._text(path)
        assert int(array_scan.scan(text).taken.sum()) == text.count(b'{"record":"request_step"')


def _logs(tmp_path: Path) -> list[Path]:
    logs = list(colscan.LOGS)
    options: list[dict[str, Any]] = [{}, {"preempt_share": 0.2}, {"mode": "sync"}]
    for seed, kwargs in enumerate(options):
        path = tmp_path / f"gen{seed}.ndjson"
        path.write_bytes(b"".join(synth.varied.lines(3000, seed=seed, **kwargs)))
        logs.append(path)
    path = tmp_path / "steady.ndjson"
    path.write_bytes(b"".join(synth.lines(3000, seed=4)))
    return [*logs, path]


@pytest.mark.parametrize("chunk", [reader.CHUNK_BYTES, 6000])
def test_columnar_checker_alike_with_either_scanner_and_without(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, chunk: int
) -> None:
    """The same result (report, JSON, totals; or handed to the reference) through this
    scanner, through the compiled one and through the typed decoder alone."""
    monkeypatch.setattr(reader, "CHUNK_BYTES", chunk)
    vouched = 0
    for path in _logs(tmp_path):
        mine = colscan._columnar(path, True, monkeypatch)
        assert mine == colscan._columnar(path, False, monkeypatch), path
        monkeypatch.setattr(scanner, "MIN_BYTES", 0)
        assert mine == colscan._columnar(path, True, monkeypatch), path
        monkeypatch.setattr(scanner, "MIN_BYTES", 1 << 62)
        vouched += mine is not None
    assert vouched > len(colscan.LOGS) // 2


def test_a_mid_sized_log_replays_through_it_without_numba(tmp_path: Path) -> None:
    """Below `reader.JIT_MIN_LOG_BYTES` a replay reads the canonical lines with this scanner
    and never imports numba (a fresh process: the tests load numba themselves)."""
    path = tmp_path / "mid.ndjson"
    path.write_bytes(b"".join(synth.varied.lines(20_000, seed=3, preempt_share=0.05)))
    code = (
        "import sys\n"
        "from spectally.engine_bridge.replay import replay_file\n"
        "from spectally.engine_bridge.replay.columnar import array_scan\n"
        "taken = []\n"
        "scan = array_scan.scan\n"
        "array_scan.scan = lambda chunk: taken.append(scan(chunk)) or taken[-1]\n"
        "r = replay_file(sys.argv[1])\n"
        "n = sum(int(s.taken.sum()) for s in taken)\n"
        "print(r.status, r.checker, 'numba' in sys.modules, n)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, str(path)], capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr
    status, checker, numba, taken = done.stdout.split()
    assert (status, checker, numba) == ("agree", "columnar", "False")
    assert int(taken) == path.read_bytes().count(b'{"record":"request_step"')
