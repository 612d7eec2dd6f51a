"""Logs cut before their totals record (an engine killed, a live log still being written): the
columnar checker gives the reference replay's verdict itself, without handing the log over.

A log cut at a record boundary is INCOMPLETE (exit 3) when everything present agreed; one cut
mid-line ends in a final partial line, which is bad input (exit 2, the reference decoder's
message) when everything before it agreed. `same` asserts status, exit code, report, JSON and
totals are the plain reference replay's, and ``ReplayResult.checker`` that the columnar path
vouched for them (handed to the reference replay, a cut log would cost its whole length:
minutes per 100k records). Cuts: at a record boundary, mid-line, gzip, right after the header,
mid-step (the last step's step_stats not written: the report's note), right after a held
finish, abort or preemption, with preemptions and stale output in flight (sync and async).
Mutants of the cut handling make these tests fail.
"""

from __future__ import annotations

import gzip
import random
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st
from spectally.engine_bridge import synth
from spectally.engine_bridge.cli import replay
from spectally.engine_bridge.replay.columnar import judge, sequence
from spectally.engine_bridge.replay.dispatch import replay_file
from test_columnar import same, strict_columnar  # noqa: F401 (autouse)
from test_columnar_chunks import LineChunks


def _log(mode: str, seed: int = 3, n: int = 600, preempt: float = 0.3) -> list[bytes]:
    return list(
        synth.varied.lines(
            n,
            mode=mode,
            k=4,
            min_batch=6,
            max_batch=14,
            seed=seed,
            preempt_share=preempt,
            abort_share=0.3,
        )
    )


def _at(lines: list[bytes], marker: bytes, skip: int = 30) -> int:
    """The index of the first line after ``skip`` that holds ``marker``."""
    return next(i for i, raw in enumerate(lines) if marker in raw and i > skip)


def _step_start(lines: list[bytes]) -> int:
    """A cut inside a step, after some of its blocks and before its step_stats."""
    i = _at(lines, b'"step_stats"', skip=len(lines) // 2)
    return i - 1


def _cut_data(lines: list[bytes], how: str) -> bytes:
    if how == "boundary":
        return b"".join(lines[: len(lines) // 2])
    if how == "mid-line":
        half = len(lines) // 2
        return b"".join(lines[:half]) + lines[half][: len(lines[half]) // 2]
    if how == "gzip":
        return gzip.compress(b"".join(lines[: len(lines) // 3]))
    if how == "after header":
        return lines[0]
    if how == "header and no newline":
        return lines[0][:-1]  # a whole record without its newline: read as usual
    if how == "mid-step":
        return b"".join(lines[: _step_start(lines)])
    marker = {
        "held finish": b'"event":"finish"',
        "held abort": b'"event":"abort"',
        "held preempt": b'"event":"preempt"',
    }[how]
    return b"".join(lines[: _at(lines, marker) + 1])


CUTS = [
    "boundary",
    "mid-line",
    "gzip",
    "after header",
    "header and no newline",
    "mid-step",
    "held finish",
    "held abort",
    "held preempt",
]


@pytest.mark.parametrize("mode", ["sync", "async"])
@pytest.mark.parametrize("how", CUTS)
def test_a_cut_log_is_judged_on_the_columnar_path(tmp_path: Path, mode: str, how: str) -> None:
    path = tmp_path / ("log.ndjson.gz" if how == "gzip" else "log.ndjson")
    path.write_bytes(_cut_data(_log(mode), how))
    fast, _ = same(path)
    want = "bad_input" if how == "mid-line" else "incomplete"
    assert (fast.status, fast.checker) == (want, "columnar")
    if how == "mid-step":
        assert any("step_stats not compared" in note for note in fast.notes)
    if want == "incomplete":
        still_open = fast.summary["incomplete"]["open_requests"]
        assert still_open == 0 if "header" in how else still_open > 0


def test_a_cut_log_across_chunks_from_lines_and_stdin(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Cut logs read in chunks of a few lines (the last step crosses chunks), given as lines,
    and read from stdin."""
    lines = _log("async", seed=11)
    data = b"".join(lines[: _step_start(lines)])
    path = tmp_path / "log.ndjson"
    path.write_bytes(data)
    whole, _ = same(path)
    assert (whole.status, whole.checker) == ("incomplete", "columnar")
    listed = [(n, raw[:-1], True) for n, raw in enumerate(data.splitlines(True), start=1)]
    fast = replay_file("mem", lines=listed, progress=False)
    assert (fast.status, fast.checker) == ("incomplete", "columnar")
    assert fast.summary == {**whole.summary, "path": "mem"}
    for payload in (data, data + lines[len(data.splitlines())][:20]):
        a = CliRunner().invoke(replay, ["-", "--json"], input=payload)
        b = CliRunner().invoke(replay, ["-", "--json", "--reference"], input=payload)
        assert a.exit_code == b.exit_code and a.output == b.output
        assert a.exit_code in (2, 3)
    monkeypatch.setattr(judge, "byte_chunks", LineChunks(7))
    chunked, _ = same(path)
    assert (chunked.status, chunked.checker) == ("incomplete", "columnar")


@pytest.mark.parametrize("cut", [False, True])
def test_an_add_with_a_drop_flag_is_bad_input_whole_or_cut(tmp_path: Path, cut: bool) -> None:
    """``drop_stale_output`` on an add record is bad input (records.validate): the columnar
    path must not vouch for such a log, cut or whole."""
    lines = _log("async")
    at = _at(lines, b'"event":"add"')
    lines[at] = lines[at].replace(b'"event":"add"', b'"event":"add","drop_stale_output":true')
    path = tmp_path / "log.ndjson"
    path.write_bytes(b"".join(lines[: len(lines) // 2] if cut else lines))
    fast, _ = same(path)
    assert (fast.status, fast.checker) == ("bad_input", "reference")


def test_a_cut_gzip_stream_is_the_reference_verdict(tmp_path: Path) -> None:
    """A gzip stream itself cut short is bad input (the stream fails ``gzip -t``): the same
    verdict either way (the reference replay reads the stream and reports it)."""
    packed = gzip.compress(b"".join(_log("sync")))
    path = tmp_path / "log.ndjson.gz"
    path.write_bytes(packed[: len(packed) // 2])
    fast, _ = same(path)
    assert fast.status == "bad_input"


@settings(max_examples=40, deadline=None)
@given(
    seed=st.integers(0, 10_000),
    mode=st.sampled_from(["sync", "async"]),
    varied=st.booleans(),
    preempt=st.sampled_from([0.0, 0.3]),
    mid_line=st.booleans(),
    packed=st.booleans(),
    where=st.floats(0.0, 1.0),
)
def test_generated_logs_cut_anywhere(
    tmp_path_factory: pytest.TempPathFactory,
    seed: int,
    mode: str,
    varied: bool,
    preempt: float,
    mid_line: bool,
    packed: bool,
    where: float,
) -> None:
    """A generated log (both generators, sync and async, preemptions) cut at a random line
    boundary, or in the middle of the line there: the reference's verdict, on the columnar
    path."""
    rng = random.Random(seed)
    if varied:
        lines = _log(mode, seed=seed, n=rng.randrange(100, 400), preempt=preempt)
    else:
        lines = list(synth.lines(rng.randrange(100, 400), mode=mode, batch=8, seed=seed))
    at = 1 + int(where * (len(lines) - 2))  # header kept, totals cut
    data = b"".join(lines[:at])
    if mid_line:
        data += lines[at][: max(1, len(lines[at]) // 3)]
    path = tmp_path_factory.mktemp("cut") / ("log.ndjson.gz" if packed else "log.ndjson")
    path.write_bytes(gzip.compress(data) if packed else data)
    fast, _ = same(path)
    assert fast.status == ("bad_input" if mid_line else "incomplete")
    assert fast.checker == "columnar"


# -- mutants: the comparison has teeth -----------------------------------------------------------


def test_mutant_open_request_count_off_by_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "log.ndjson"
    path.write_bytes(_cut_data(_log("async"), "boundary"))
    same(path)
    original = sequence.RequestTable.finish
    monkeypatch.setattr(sequence.RequestTable, "finish", lambda self: original(self) + 1)
    with pytest.raises(AssertionError):
        same(path)


def test_mutant_note_of_the_last_step_lost(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "log.ndjson"
    path.write_bytes(_cut_data(_log("sync"), "mid-step"))
    same(path)
    original = sequence.check_step_stats
    monkeypatch.setattr(judge, "check_step_stats", lambda *a: original(*a) and False)
    with pytest.raises(AssertionError):
        same(path)


def test_mutant_last_step_compared_with_zeros(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Comparing the cut step's missing step_stats with zeros would refuse the log: the
    columnar path then stops vouching (the verdict stays the reference's)."""
    path = tmp_path / "log.ndjson"
    path.write_bytes(_cut_data(_log("sync"), "mid-step"))
    assert same(path)[0].checker == "columnar"
    original = sequence.check_step_stats

    def compared(*args: Any) -> bool:
        return original(*args[:5])  # no cut step: compared with zeros

    monkeypatch.setattr(judge, "check_step_stats", compared)
    assert same(path)[0].checker == "reference"
