"""The columnar checker read in chunks of a few lines: an engine step that crosses a chunk
boundary is joined whole before it is checked (the carried step takes the next chunk's lines
of that step; a chunk may hold nothing else, or only the totals line), so the result is the
whole file's, and a step's two blocks of one request on both sides of a boundary are seen."""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from spectally.engine_bridge import synth
from spectally.engine_bridge.replay.columnar import judge
from spectally.engine_bridge.replay.dispatch import replay_file
from test_columnar import same, strict_columnar  # noqa: F401 (autouse)


def _log(tmp_path: Path, mode: str) -> tuple[Path, list[bytes]]:
    lines = list(
        synth.varied.lines(300, mode=mode, k=3, min_batch=2, max_batch=6, seed=5, preempt_share=0.3)
    )
    path = tmp_path / "log.ndjson"
    path.write_bytes(b"".join(lines))
    return path, lines


class LineChunks:
    """Stands in for `reader.byte_chunks`: a reader of ``n`` lines a chunk with the real
    reader's `keep` (with ``keeps``; else it refuses, as for a step too long to give back):
    lines given back start the next chunk. ``kept`` counts the lines given back."""

    def __init__(self, n: int, keeps: bool = True) -> None:
        self.n, self.keeps = n, keeps
        self.kept = 0
        self._parts: list[bytes] = []
        self._size = self._back = 0
        self._open = False

    def __call__(self, source: str, lines: object) -> LineChunks:
        self._parts = Path(source).read_bytes().splitlines(True)
        return self

    def keep(self, count: int) -> bool:
        if not (self.keeps and self._open and 0 < count <= self._size):
            return False
        self._back = count
        self.kept += count
        return True

    def __iter__(self) -> Iterator[bytes]:
        parts, front = self._parts, []
        for at in range(0, len(parts), self.n):
            chunk = front + parts[at : at + self.n]
            self._size, self._back, self._open = len(chunk), 0, at + self.n < len(parts)
            yield b"".join(chunk)
            self._open = False
            front = chunk[len(chunk) - self._back :] if self._back else []


@pytest.mark.parametrize("keeps", [True, False], ids=["given-back", "carried"])
@pytest.mark.parametrize("mode", ["sync", "async"])
def test_every_small_chunk_size_gives_the_whole_files_result(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, mode: str, keeps: bool
) -> None:
    """Whether the step cut by a chunk boundary goes back to the reader (the next chunk
    starts with it) or is carried decoded and checked on its own."""
    path, _ = _log(tmp_path, mode)
    whole = replay_file(str(path), progress=False)
    assert (whole.status, whole.checker) == ("agree", "columnar")
    for n in range(1, 10):
        reader = LineChunks(n, keeps)
        monkeypatch.setattr(judge, "byte_chunks", reader)
        fast = replay_file(str(path), progress=False)
        assert (fast.status, fast.checker) == ("agree", "columnar"), n
        assert fast.summary == whole.summary
        assert fast.totals == whole.totals
        assert (reader.kept > 0) is keeps


def test_the_progress_bar_shows_lines_given_back_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Lines given back are decoded again with the next chunk, not counted again."""
    path, lines = _log(tmp_path, "async")
    reader = LineChunks(5)
    monkeypatch.setattr(judge, "byte_chunks", reader)
    result = replay_file(str(path), progress=True)
    assert (result.status, result.checker) == ("agree", "columnar") and reader.kept > 0
    last = capsys.readouterr().err.replace("\r", "\n").splitlines()[-1]
    assert f"{len(lines)} records" in last, last


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_a_repeated_block_across_a_chunk_boundary_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, mode: str
) -> None:
    """A request_step line written twice: with one line a chunk, the two copies are in two
    chunks, the first one carried; the columnar path must not vouch for it."""
    path, lines = _log(tmp_path, mode)
    at = [i for i, raw in enumerate(lines) if b'"applied"' in raw][len(lines) // 8]
    assert json.loads(lines[at])["record"] == "request_step"
    lines.insert(at + 1, lines[at])
    path.write_bytes(b"".join(lines))
    for n, keeps in itertools.product((1, 2, 3, 8), (True, False)):
        monkeypatch.setattr(judge, "byte_chunks", LineChunks(n, keeps))
        fast, _ = same(path)
        assert fast.checker == "reference" and fast.status != "agree"


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_a_chunks_columns_are_freed_when_it_is_done(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, mode: str
) -> None:
    """The carry leaves a chunk as its own copy (`Lines.own`): nothing the checker keeps
    holds a view of the chunk's columns, so they are freed before the next chunk is decoded
    (a carry of views kept them through the next chunk: glibc's heap then grew with the
    chunks). Seen through weak references to each chunk's decoded arrays."""
    import gc
    import weakref

    path, _ = _log(tmp_path, mode)
    monkeypatch.setattr(judge, "byte_chunks", LineChunks(7, keeps=False))
    decoded: list[list[weakref.ref[object]]] = []
    decode = judge.decode_columns

    def recording(*args: object) -> object:
        lines = decode(*args)  # type: ignore[arg-type]
        decoded.append([weakref.ref(a) for a in (lines.values, lines.rid, lines.kinds)])
        return lines

    alive: list[int] = []
    chunk = judge.Columnar._chunk

    def checked(self: judge.Columnar, *args: object) -> object:
        result = chunk(self, *args)  # type: ignore[arg-type]
        alive.append(sum(ref() is not None for ref in decoded[-1]))
        return result

    monkeypatch.setattr(judge, "decode_columns", recording)
    monkeypatch.setattr(judge.Columnar, "_chunk", checked)
    was = gc.isenabled()
    gc.disable()  # freed by their reference counts, not by a collection
    try:
        result = replay_file(str(path), progress=False)
    finally:
        if was:
            gc.enable()
    assert (result.status, result.checker) == ("agree", "columnar")
    assert len(alive) > 20
    assert alive == [0] * len(alive)
