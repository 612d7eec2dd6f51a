"""The columnar checker read in chunks of a few lines: an engine step that crosses a chunk
boundary is joined whole before it is checked (the carried step takes the next chunk's lines
of that step; a chunk may hold nothing else, or only the totals line), so the result is the
whole file's, and a step's two blocks of one request on both sides of a boundary are seen."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from spectally.engine_bridge import columnar, synth_varied
from spectally.engine_bridge.replay import replay_file
from test_columnar import same, strict_columnar  # noqa: F401 (autouse)


def _log(tmp_path: Path, mode: str) -> tuple[Path, list[bytes]]:
    lines = list(
        synth_varied.lines(300, mode=mode, k=3, min_batch=2, max_batch=6, seed=5, preempt_share=0.3)
    )
    path = tmp_path / "log.ndjson"
    path.write_bytes(b"".join(lines))
    return path, lines


def _chunks_of(n: int):  # type: ignore[no-untyped-def]
    def chunks(source: str, lines: object) -> Iterator[bytes]:
        parts = Path(source).read_bytes().splitlines(True)
        for i in range(0, len(parts), n):
            yield b"".join(parts[i : i + n])

    return chunks


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_every_small_chunk_size_gives_the_whole_files_result(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, mode: str
) -> None:
    path, _ = _log(tmp_path, mode)
    whole = replay_file(str(path), progress=False)
    assert (whole.status, whole.checker) == ("agree", "columnar")
    for n in range(1, 10):
        monkeypatch.setattr(columnar, "byte_chunks", _chunks_of(n))
        fast = replay_file(str(path), progress=False)
        assert (fast.status, fast.checker) == ("agree", "columnar"), n
        assert fast.summary == whole.summary
        assert fast.totals == whole.totals


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
    for n in (1, 2, 3):
        monkeypatch.setattr(columnar, "byte_chunks", _chunks_of(n))
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
    monkeypatch.setattr(columnar, "byte_chunks", _chunks_of(7))
    decoded: list[list[weakref.ref[object]]] = []
    decode = columnar.decode_columns

    def recording(*args: object) -> object:
        lines = decode(*args)  # type: ignore[arg-type]
        decoded.append([weakref.ref(a) for a in (lines.values, lines.rid, lines.kinds)])
        return lines

    alive: list[int] = []
    chunk = columnar.Columnar._chunk

    def checked(self: columnar.Columnar, *args: object) -> object:
        result = chunk(self, *args)  # type: ignore[arg-type]
        alive.append(sum(ref() is not None for ref in decoded[-1]))
        return result

    monkeypatch.setattr(columnar, "decode_columns", recording)
    monkeypatch.setattr(columnar.Columnar, "_chunk", checked)
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
