"""The shape table of the columnar checker (blocks.ShapeTable) against the rules evaluated
block by block: the same legacy counts per block, the same counters and shift terms, through
hash collisions, long probe chains, a table flushed when it grows, keys that do not fit,
and legacy counts packed in lanes (sequence.Lanes) or not."""

from __future__ import annotations

from dataclasses import fields, replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from spectally.engine_bridge import synth
from spectally.engine_bridge.replay.columnar import blocks, hashing, judge, sequence
from spectally.engine_bridge.replay.columnar.blocks import BlockColumns, ShapeTable
from spectally.engine_bridge.replay.columnar.reader import Irregular
from spectally.engine_bridge.replay.columnar.sequence import Lanes, StatsColumns
from spectally.reference.counters import Counters
from spectally.reference.step import Mode
from test_columnar import same, strict_columnar  # noqa: F401 (autouse)
from test_columnar_chunks import LineChunks


def _chunks(tmp_path: Path, k: int, mode: str = "async") -> tuple[Mode, list[BlockColumns]]:
    """The block columns the columnar checker builds for a generated log, per chunk of a few
    hundred lines."""
    mode_, seen, _ = _spied(tmp_path, k, mode)
    return mode_, seen


def _spied(
    tmp_path: Path, k: int, mode: str = "async"
) -> tuple[Mode, list[BlockColumns], list[Any]]:
    """`_chunks`, and the count matrix the checker passed with each chunk (or None)."""
    lines = list(
        synth.varied.lines(3000, mode=mode, k=k, min_batch=8, max_batch=40, seed=k, av=True)
    )
    path = tmp_path / "log.ndjson"
    path.write_bytes(b"".join(lines))
    seen: list[BlockColumns] = []
    matrices: list[Any] = []
    original = blocks.check_blocks

    def spy(mode: Mode, k: int, c: BlockColumns, shapes: Any = None, counts: Any = None) -> Any:
        seen.append(c)
        matrices.append(counts)
        return original(mode, k, c, shapes, counts)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(judge, "check_blocks", spy)
        mp.setattr(judge, "byte_chunks", LineChunks(300))
        result = judge.Columnar(str(path), None).run(str(path), None, None)
    assert result.status == "agree"
    return Mode(mode), seen, matrices


def _plain(mode: Mode, k: int, chunks: list[BlockColumns]) -> tuple[Any, ...]:
    """Every block its own row: `_check_rows` and `_fold_rows`, no table."""
    legacy = [blocks._check_rows(mode, k, c) for c in chunks]
    counters = Counters.zero(k)
    shift: dict[str, int] = {}
    for c in chunks:
        part, terms = blocks._fold_rows(mode, k, c, None)
        counters = counters.merge(part)
        for name, value in terms.items():
            shift[name] = shift.get(name, 0) + value
    return legacy, counters, shift


def _matrix(c: BlockColumns) -> Any:
    """The count columns as one (n, 9) matrix (`ShapeTable.lookup`'s ``counts``)."""
    return np.stack([getattr(c, name) for name in blocks.COUNT_FIELDS], axis=1)


def _through_table(
    table: ShapeTable, mode: Mode, k: int, chunks: list[BlockColumns], matrix: bool = False
) -> Any:
    legacy = []
    for c in chunks:
        result = blocks.check_blocks(mode, k, c, table, _matrix(c) if matrix else None)
        per_block = result.legacy
        if isinstance(per_block, Lanes):
            per_block = per_block.unpacked(k)
        legacy.append(np.stack(per_block, axis=1))
    counters, shift = table.totals()
    return legacy, counters, shift


@pytest.mark.parametrize("k", [3, 8, 20])
@pytest.mark.parametrize("table_size", [4, 1 << 12])
@pytest.mark.parametrize("matrix", [False, True])
def test_the_table_gives_what_the_rules_give_block_by_block(
    tmp_path: Path, k: int, table_size: int, matrix: bool
) -> None:
    mode, chunks = _chunks(tmp_path, k)
    legacy, counters, shift = _plain(mode, k, chunks)
    table = ShapeTable(mode, k)
    table.slot_keys = np.full(table_size, -1, dtype=np.int64)  # tiny: collisions, rehashes
    table.slot_ids = np.zeros(table_size, dtype=np.int64)
    got_legacy, got_counters, got_shift = _through_table(table, mode, k, chunks, matrix)
    for want, got in zip(legacy, got_legacy, strict=True):
        assert (want == got).all()
    assert got_counters == counters
    assert got_shift == shift
    assert table.lanes is (k <= 13)


@pytest.mark.parametrize("k", [3, 8])
def test_a_blocks_key_does_not_depend_on_its_chunk(tmp_path: Path, k: int) -> None:
    """Columns constant over a chunk are folded into one constant: the key of a block is the
    same whatever else the chunk holds (else one shape could take two keys, or two shapes
    one key)."""
    mode, chunks = _chunks(tmp_path, k)
    table = ShapeTable(mode, k)
    for c in chunks[:3]:
        keys = table._key(c)
        assert keys is not None
        for i in range(0, len(keys), max(1, len(keys) // 25)):
            alone = BlockColumns(*(getattr(c, f.name)[i : i + 1] for f in fields(BlockColumns)))
            assert table._key(alone) == keys[i : i + 1]


@pytest.mark.parametrize("k", [3, 8, 64])
def test_the_compiled_keys_are_the_column_keys(tmp_path: Path, k: int) -> None:
    """The keys of the compiled pass over the count matrix the columnar checker passes
    (`hashing.shape_keys`) are the keys from the columns (`_key`), block for block, and that
    matrix holds the very values of the columns; a count that does not fit gives no key
    either way (k = 64 has no key width; a count put just above k + 2 or just below -1)."""
    mode, chunks, matrices = _spied(tmp_path, k)
    assert all(m is not None for m in matrices)
    table = ShapeTable(mode, k)
    assert (k == 64) is (table.width == 0)
    for c, counts in zip(chunks, matrices, strict=True):
        for j, name in enumerate(blocks.COUNT_FIELDS):
            assert (counts[:, j] == getattr(c, name)).all()
        want = table._key(c)
        if not table.width:
            assert want is None
            continue
        assert want is not None
        got = _compiled_keys(table, counts, c)
        assert got is not None and (got == want).all()
        for row, value in ((len(counts) // 2, k + 3), (len(counts) - 1, -2)):
            bad = counts.copy()
            bad[row, 4] = value
            assert _compiled_keys(table, bad, c) is None
            column = c.invalid.copy()
            column[row] = value
            assert table._key(replace(c, invalid=column)) is None
        for value in (k + 2, -1):  # the bounds themselves fit
            edge = counts.copy()
            edge[0, 4] = value
            column = c.invalid.copy()
            column[0] = value
            keys = table._key(replace(c, invalid=column))
            got = _compiled_keys(table, edge, c)
            assert keys is not None and got is not None and (got == keys).all()


def _compiled_keys(table: ShapeTable, counts: Any, c: BlockColumns) -> Any:
    return hashing.shape_keys(counts, c.applied, c.structured, c.stale, table.width, table.k)


@pytest.mark.parametrize("room", [1 << 20, 7])
def test_the_compiled_ids_are_the_probed_ids(tmp_path: Path, room: int) -> None:
    """`hashing.shape_ids` on a copy of the table, chunk after chunk: a block whose key is
    in the table gets the id `_probe` finds; a new key gets the next id, in the order of
    its first block, and its later blocks that id; every block is counted once in its id's
    weight; afterwards the table finds every key (`_probe`), each in a slot of its own. With
    little ``room``, it stops at the first new key past it, having done the rows before."""
    mode, chunks, matrices = _spied(tmp_path, 8)
    table = ShapeTable(mode, 8)
    table.slot_keys = np.full(1 << 16, -1, dtype=np.int64)  # room for the log's shapes
    table.slot_ids = np.zeros(1 << 16, dtype=np.int64)
    shapes: dict[int, int] = {}  # key -> id, as a plain statement of what the table holds
    for c, counts in zip(chunks, matrices, strict=True):
        key = _compiled_keys(table, counts, c)
        assert key is not None
        known = table._probe(key)
        ids = np.full(len(key), -7, dtype=np.int64)
        weights = np.zeros(len(shapes) + len(key), dtype=np.int64)
        stop, rows = hashing.shape_ids(
            key, 0, table.slot_keys, table.slot_ids, ids, weights, len(shapes), room
        )
        added = len(rows)
        assert added <= room and (stop == len(key) or added == room)
        before = set(shapes)
        for i in range(stop):
            k = int(key[i])
            assert bool(known[i] == -1) is (k not in before)
            shapes.setdefault(k, len(shapes))
            assert ids[i] == shapes[k]
        assert [shapes[int(key[r])] for r in rows] == list(range(len(shapes) - added, len(shapes)))
        assert (key[rows][:, None] != key[rows]).sum() == added * (added - 1)  # distinct
        assert (weights == np.bincount(ids[:stop], minlength=len(weights))).all()
        assert (ids[stop:] == -7).all()
        assert (table._probe(key[:stop]) == ids[:stop]).all()
        held = table.slot_keys[table.slot_keys >= 0]
        assert len(held) == len(set(held.tolist())) == len(shapes)
        if stop < len(key):
            assert table._probe(key[stop : stop + 1])[0] == -1  # the first new key not added
            break


def test_the_compiled_kernels_are_their_python_source(tmp_path: Path) -> None:
    """numba's machine code gives what the kernels' sources give run as plain Python (the
    sources the other tests read as the specification of the compiled passes): the keys,
    and the ids, weights, added rows and table of `shape_ids`, also when it stops early."""
    mode, chunks, matrices = _spied(tmp_path, 8)
    table = ShapeTable(mode, 8)
    assert hashing.compiled()
    for c, counts in zip(chunks[:4], matrices[:4], strict=True):
        runs = []
        for python in (False, True):
            with pytest.MonkeyPatch.context() as mp, np.errstate(over="ignore"):
                if python:
                    mp.setattr(hashing, "_shape_keys", hashing.PYTHON["_shape_keys"])
                    mp.setattr(hashing, "_shape_ids", hashing.PYTHON["_shape_ids"])
                key = _compiled_keys(table, counts, c)
                assert key is not None
                outputs: list[Any] = [key]
                for room in (3, 1 << 20):
                    slot_keys, slot_ids = table.slot_keys.copy(), table.slot_ids.copy()
                    ids = np.full(len(key), -7, dtype=np.int64)
                    weights = np.zeros(len(table) + len(key), dtype=np.int64)
                    stop, rows = hashing.shape_ids(
                        key, 0, slot_keys, slot_ids, ids, weights, len(table), room
                    )
                    outputs += [np.array([stop]), rows, ids, weights, slot_keys, slot_ids]
            runs.append(outputs)
        assert all((a == b).all() for a, b in zip(*runs, strict=True))
        table.lookup(c, counts)


def test_keys_at_the_end_of_long_probe_chains(tmp_path: Path) -> None:
    """Every key hashed to slot 0 (the hash multiplier 0): each key is found, or added, at
    the end of one chain through all the others, by the numpy path and by the kernels'
    source alike, and the table still gives what the rules give block by block."""
    mode, chunks = _chunks(tmp_path, 4)
    want = _plain(mode, 4, chunks)
    for compiled in (False, True):
        table = ShapeTable(mode, 4)
        with pytest.MonkeyPatch.context() as mp, np.errstate(over="ignore"):
            mp.setattr(blocks, "_MIX", np.uint64(0))
            mp.setattr(hashing, "MIX", 0)
            mp.setattr(hashing, "_shape_keys", hashing.PYTHON["_shape_keys"])
            mp.setattr(hashing, "_shape_ids", hashing.PYTHON["_shape_ids"])
            mp.setattr(hashing, "wanted", lambda rows, c=compiled: c)
            got = _through_table(table, mode, 4, chunks, matrix=True)
        assert all((a == b).all() for a, b in zip(want[0], got[0], strict=True))
        assert got[1:] == want[1:]
        held = np.flatnonzero(table.slot_keys >= 0)
        assert len(held) > 10 and (held == np.arange(len(held))).all()  # one chain from 0


def test_a_full_table_is_folded_and_started_afresh(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    mode, chunks = _chunks(tmp_path, 8)
    want = _plain(mode, 8, chunks)
    monkeypatch.setattr(blocks, "MAX_SHAPES", 5)
    table = ShapeTable(mode, 8)
    got = _through_table(table, mode, 8, chunks)
    assert len(table.folded) > 1
    assert got[1:] == want[1:]


@pytest.mark.parametrize("fold_rows", [1, 3, 64])
def test_the_table_folds_and_checks_its_shapes_in_slices(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fold_rows: int
) -> None:
    """`FOLD_ROWS` shapes at a time (the rules and the fold): the same totals as one pass,
    with the last, partial slice included, and the table flushed on the way."""
    mode, chunks = _chunks(tmp_path, 8)
    want = _plain(mode, 8, chunks)
    monkeypatch.setattr(blocks, "FOLD_ROWS", fold_rows)
    monkeypatch.setattr(blocks, "MAX_SHAPES", 200)
    table = ShapeTable(mode, 8)
    got = _through_table(table, mode, 8, chunks)
    assert len(table.folded) > 200 // fold_rows
    assert got[1:] == want[1:]


@pytest.mark.parametrize("fold_rows", [3, 1 << 13])
def test_a_bad_new_shape_is_refused_before_any_verdict(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fold_rows: int
) -> None:
    """Also when it is the last new shape, in the last slice of the rules' pass, and when it
    is the only shape added since the rules last ran."""
    monkeypatch.setattr(blocks, "FOLD_ROWS", fold_rows)
    mode, chunks = _chunks(tmp_path, 4)
    table = ShapeTable(mode, 4)
    for c in chunks[:-1]:
        blocks.check_blocks(mode, 4, c, table)
    if fold_rows == 3:
        table.totals()  # the rules run over the shapes so far
        assert table.checked == len(table.weights)
    last = chunks[-1]
    bad = BlockColumns(*(getattr(last, f.name)[-1:].copy() for f in fields(BlockColumns)))
    bad.scheduled[0] += 1  # scheduled above what the rules give: a shape not seen before
    blocks.check_blocks(mode, 4, bad, table)  # its rules run in one batch, later
    assert table.checked < len(table.weights)
    with pytest.raises(Irregular):
        table.totals()


@pytest.mark.parametrize("k", [20, 64])
def test_logs_without_lanes_or_keys(tmp_path: Path, k: int) -> None:
    """k = 20: the legacy counts are not packed; k = 64: the counts do not fit a 63-bit key
    (every block is its own row). Same verdict as the reference, on the columnar path."""
    lines = synth.varied.lines(400, mode="async", k=k, min_batch=4, max_batch=12, seed=2)
    path = tmp_path / "log.ndjson"
    path.write_bytes(b"".join(lines))
    fast, _ = same(path)
    assert (fast.status, fast.checker) == ("agree", "columnar")


def test_a_step_too_long_for_the_lanes() -> None:
    """A step whose lane sums could pass 2**16 is summed unpacked: the same verdicts."""
    k = 8
    n = 8200  # 8200 * k > 2**16: the token lane's sum would overflow
    drafts = np.ones(n, dtype=np.int64)
    tokens = np.full(n, k, dtype=np.int64)
    accepted = np.full(n, k, dtype=np.int64)
    lanes = Lanes(sequence.lane_words(k, drafts, tokens, accepted))
    steps = np.full(n, 7, dtype=np.int64)
    lines = np.arange(n, dtype=np.int64)
    outcomes = []
    for values in ([n, n * k, n * k, *[n] * k], [n, n * k, n * k - 1, *[n] * k]):
        stats = StatsColumns(np.array([7]), np.array([n]), np.array([values], dtype=np.int64))
        verdicts = []
        for legacy in (lanes, (drafts, tokens, accepted)):
            try:
                sequence.check_step_stats(k, steps, lines, legacy, stats)
                verdicts.append("ok")
            except Irregular:
                verdicts.append("refused")
        assert verdicts[0] == verdicts[1]
        outcomes.append(verdicts[0])
    assert outcomes == ["ok", "refused"]
    assert lanes.unpacked(k)[1].tolist() == tokens.tolist()


@pytest.mark.parametrize("seed", range(4))
def test_step_sums_over_shapes_are_the_sums_of_gathered_words(seed: int) -> None:
    """`hashing.run_sums` (per run, the shapes' words summed by id, compiled) is
    ``np.add.reduceat`` of the words gathered per block, wrap-around included; and the
    compiled kernel is its Python source. `Lanes.step_sums` takes either path alike."""
    rng = np.random.default_rng(seed)
    shapes, n = int(rng.integers(1, 300)), int(rng.integers(1, 5000))
    info = np.iinfo(np.int64)
    by_shape = rng.integers(info.min, info.max, (shapes, 3), dtype=np.int64)
    ids = rng.integers(0, shapes, n)
    starts = np.flatnonzero(np.r_[True, rng.random(n - 1) < 0.05])  # runs of any length
    want = np.stack([np.add.reduceat(by_shape[ids, w], starts) for w in range(3)], axis=1)
    assert hashing.compiled()
    assert (hashing.run_sums(starts, ids, by_shape) == want).all()
    with pytest.MonkeyPatch.context() as mp, np.errstate(over="ignore"):
        mp.setattr(hashing, "_run_sums", hashing.PYTHON["_run_sums"])
        assert (hashing.run_sums(starts, ids, by_shape) == want).all()
    lanes = Lanes(tuple(by_shape.T.copy()), ids)
    for compiled in (True, False):  # the compiled path, then the numpy one
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(hashing, "wanted", lambda rows, c=compiled: c)
            assert (lanes.step_sums(starts) == want).all()
    gathered = lanes.per_block()
    assert all((g == by_shape[ids, w]).all() for w, g in enumerate(gathered))


def test_a_log_under_a_mebibyte_never_imports_numba(tmp_path: Path) -> None:
    """Importing numba costs a process ~0.7 s: a log the scanner leaves to the typed decoder
    (under `scanner.MIN_BYTES`) must not pay it for the shape keys either, however many blocks
    it packs into that mebibyte (`hashing.MIN_ROWS`). Run in a fresh process: the tests'
    own thresholds are 0."""
    import subprocess
    import sys

    from spectally.engine_bridge import synth

    limit = 1 << 20  # scanner.MIN_BYTES outside the tests (checked in the subprocess below)
    path = tmp_path / "small.ndjson"
    with path.open("wb") as log:
        size = 0
        for line in synth.lines(100_000, seed=3):
            if size + len(line) >= limit:
                break
            log.write(line)
            size += len(line)
    blocks = path.read_bytes().count(b'"request_step"')
    assert blocks > 4096  # more blocks than a smaller threshold would let through
    code = (
        "import sys\n"
        "from spectally.engine_bridge.replay.columnar import scanner\n"
        "from spectally.engine_bridge.replay.dispatch import replay_file\n"
        "r = replay_file(sys.argv[1], progress=False)\n"
        "print(scanner.MIN_BYTES, r.status, r.checker, 'numba' in sys.modules)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code, str(path)], capture_output=True, text=True, check=True
    ).stdout.split()
    assert out == [str(limit), "incomplete", "columnar", "False"], out
