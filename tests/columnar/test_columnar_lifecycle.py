"""The columnar checker on preemptions, stale output and lifecycle records: the same result as
the plain reference replay, and the fast path really taken.

Logs come from `synth.varied` with preemptions (sync: the dropped proposal; async: the stale
block in flight, delivered or dropped, by the header's default or the record's own
``drop_stale_output``), then are changed: one engine number tampered, one line corrupted, or
one lifecycle record or outcome changed (moved, written steps later, removed, repeated, its
drop flag flipped, an outcome swapped), which exercises the patterns the lifecycle pass
refuses. `same` asserts the status, exit code, report, JSON and totals are the reference's;
an unchanged log must be vouched for by the columnar checker itself
(``ReplayResult.checker``).
"""

from __future__ import annotations

import gzip
import json
import random
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from spectally.engine_bridge import synth
from spectally.engine_bridge.replay.columnar import reader
from spectally.engine_bridge.replay.dispatch import replay_file
from test_columnar import _corrupt, _tamper, same, strict_columnar  # noqa: F401 (autouse)

OUTCOMES = (
    "applied",
    "discarded_finished",
    "discarded_aborted",
    "discarded_preempted",
    "discarded_stale",
)


def _log(seed: int, mode: str, drop: bool, n: int = 400, av: bool = True) -> list[bytes]:
    return list(
        synth.varied.lines(
            n,
            mode=mode,
            av=av,
            k=3,
            min_batch=4,
            max_batch=12,
            seed=seed,
            preempt_share=0.5,
            drop_stale_output=drop,
        )
    )


def _dump(rec: dict[str, Any]) -> bytes:
    return (json.dumps(rec, separators=(",", ":")) + "\n").encode()


def _lifecycle_at(lines: list[bytes]) -> list[int]:
    """Lines of end records and discarded blocks."""
    return [
        i
        for i, raw in enumerate(lines)
        if (b'"event":"' in raw and b'"add"' not in raw) or b'"discarded_' in raw
    ]


def _change(how: str, lines: list[bytes], i: int, rng: random.Random) -> list[bytes]:
    """One lifecycle change at line ``i`` (an end record or a discarded block)."""
    out = list(lines)
    rec = json.loads(out[i])
    if how == "remove":
        del out[i]
    elif how == "repeat":
        out.insert(i, out[i])
    elif how == "move":
        j = min(max(1, i + rng.choice((-3, -2, -1, 1, 2, 3, 8))), len(out) - 2)
        out.insert(j, out.pop(i))
    elif how == "late":  # the same record, written 1-3 steps later
        rec["step"] += rng.randint(1, 3)
        del out[i]
        at = [
            j
            for j, raw in enumerate(out)
            if j and json.loads(raw).get("step", 1 << 62) >= rec["step"]
        ]
        out.insert(at[0] if at else len(out) - 1, _dump(rec))
    elif how == "drop flag" and rec["record"] == "request":
        if rec["event"] == "preempt" and "drop_stale_output" in rec and rng.random() < 0.3:
            del rec["drop_stale_output"]
        else:
            rec["drop_stale_output"] = not rec.get("drop_stale_output", False)
        out[i] = _dump(rec)
    elif how == "outcome" and rec["record"] == "request_step":
        rec["outcome"] = rng.choice([o for o in OUTCOMES if o != rec["outcome"]])
        out[i] = _dump(rec)
    elif how == "outcome":
        rec["event"] = rng.choice([e for e in ("finish", "abort", "preempt") if e != rec["event"]])
        out[i] = _dump(rec)
    return out


def _write(tmp: Path, lines: list[bytes]) -> Path:
    path = tmp / "log.ndjson.gz"
    path.write_bytes(gzip.compress(b"".join(lines)))
    return path


@settings(max_examples=30, deadline=None)
@given(
    seed=st.integers(0, 10_000),
    mode=st.sampled_from(["sync", "async"]),
    drop=st.booleans(),
    av=st.booleans(),
    change=st.sampled_from(
        ["none", "tamper", "corrupt", "remove", "repeat", "move", "late", "drop flag", "outcome"]
    ),
)
def test_preemption_heavy_logs(
    tmp_path_factory: pytest.TempPathFactory,
    seed: int,
    mode: str,
    drop: bool,
    av: bool,
    change: str,
) -> None:
    rng = random.Random(seed)
    lines = _log(seed, mode, drop, rng.randrange(200, 500), av)
    assert any(b'"preempt"' in raw for raw in lines)
    if change == "tamper":
        lines = _tamper(rng, lines)
    elif change == "corrupt":
        lines = _corrupt(rng, lines)
    elif change != "none":
        lines = _change(change, lines, rng.choice(_lifecycle_at(lines)), rng)
    fast, _ = same(_write(tmp_path_factory.mktemp("gen"), lines))
    if change == "none":
        assert fast.status == "agree"
        assert fast.checker == "columnar"


@pytest.mark.parametrize("mode", ["sync", "async"])
@pytest.mark.parametrize("drop", [False, True])
def test_every_lifecycle_change_of_a_log(tmp_path: Path, mode: str, drop: bool) -> None:
    """Each change at every end record / discarded block of one small log (deterministic):
    the reference's verdict either way, and the columnar path vouches for part of the
    changed logs that still agree (moving a record within its step often keeps it valid)."""
    lines = _log(7, mode, drop, 120)
    rng = random.Random(1)
    statuses: dict[str, int] = {}
    vouched = 0
    for i in _lifecycle_at(lines):
        for how in ("remove", "repeat", "move", "late", "drop flag", "outcome"):
            fast, _ = same(_write(tmp_path, _change(how, lines, i, rng)))
            statuses[fast.status] = statuses.get(fast.status, 0) + 1
            vouched += fast.checker == "columnar"
    assert statuses.get("diverge", 0) > 0 and statuses.get("agree", 0) > 0, statuses
    assert vouched > 0


def test_preempted_logs_stay_on_the_fast_path(tmp_path: Path) -> None:
    """Valid logs with preemptions at a production-like rate (a burst every ~10 steps) agree
    on the columnar path in every mode, AV on and off, with and without dropped output."""
    for seed, mode, drop, av in [
        (1, "sync", False, True),
        (2, "sync", True, False),
        (3, "async", False, True),
        (4, "async", True, True),
        (5, "async", True, False),
    ]:
        lines = list(
            synth.varied.lines(
                3000,
                mode=mode,
                av=av,
                seed=seed,
                min_batch=16,
                max_batch=32,
                preempt_share=0.1,
                drop_stale_output=drop,
            )
        )
        assert sum(b'"preempt"' in raw for raw in lines) > 0
        path = _write(tmp_path, lines)
        fast = replay_file(str(path), progress=False)
        assert (fast.status, fast.checker) == ("agree", "columnar")
        if seed == 4:  # one full comparison of a larger log
            same(path)


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_lifecycle_state_across_chunks(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, mode: str
) -> None:
    """Chunks of a few lines: held end records, open discarded blocks and waiting stale
    Accepts carry from one chunk to the next (and are released once the engine is two steps
    past them), with the reference's verdicts."""
    monkeypatch.setattr(reader, "CHUNK_BYTES", 1500)
    lines = _log(11, mode, mode == "async", 300)
    fast, _ = same(_write(tmp_path, lines))
    assert (fast.status, fast.checker) == ("agree", "columnar")
    rng = random.Random(2)
    for i in _lifecycle_at(lines)[::3]:
        for how in ("late", "move", "outcome"):
            same(_write(tmp_path, _change(how, lines, i, rng)))


def _in_flight_aborted(lines: list[bytes]) -> int:
    """Blocks discarded by an abort after their forward pass (scheduled > 0)."""
    n = 0
    for raw in lines:
        rec = json.loads(raw)
        if rec.get("outcome") == "discarded_aborted" and rec["scheduled"] > 0:
            n += 1
    return n


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_aborts_between_the_forward_pass_and_its_output(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, mode: str
) -> None:
    """Logs of the recorder (stand-in scheduler, tests/fake_scheduler.py) with aborts processed
    between a step's forward pass and its output, as vLLM's EngineCoreProc does (SPEC E3, E6):
    the columnar path vouches for them with the reference's result, and each lifecycle change
    of such a log gets the reference's verdict either way."""
    from recorder_stories import finish_recording, random_story, recording_engine

    in_flight = 0
    rng = random.Random(3)
    for seed in range(8):
        engine = recording_engine(tmp_path, monkeypatch, mode, seed)
        engine.min_draft = 1
        random_story(engine, random.Random(seed), kv=False, reset=True, in_flight=0.3)
        finish_recording(engine)
        path = Path(engine.log)  # type: ignore[attr-defined]
        lines = path.read_bytes().splitlines(keepends=True)
        in_flight += _in_flight_aborted(lines)
        fast, _ = same(path)
        assert (fast.status, fast.checker) == ("agree", "columnar")
        for i in _lifecycle_at(lines)[:: 1 + len(lines) // 40]:
            for how in ("move", "late", "outcome"):
                same(_write(tmp_path, _change(how, lines, i, rng)))
    assert in_flight > 0


def test_sync_block_verified_before_the_previous_output_is_refused(tmp_path: Path) -> None:
    """E3, sync: the proposal made in an unprocessed forward pass may open, never run. A log
    whose next block reached the target (scheduled > 0) before the aborted one closed is
    refused by the reference and left to it by the columnar path."""
    header = {
        "record": "header",
        "schema_version": 1,
        "engine": "vllm",
        "engine_version": "0.32.0",
        "num_speculative_tokens": 2,
        "scheduling": "sync",
        "spec_method": "ngram",
        "structured_outputs_backend": None,
        "adaptive_verification": False,
        "drop_stale_output": False,
        "engine_index": 0,
        "config": {},
    }

    def block(step: int, scheduled: int) -> dict[str, Any]:
        return {
            "record": "request_step",
            "step": step,
            "request": "a",
            "proposed": 2,
            "padding": 0,
            "grammar_valid": None,
            "scheduled": scheduled,
            "invalid": None,
            "verified": None,
            "sampled": 3 if scheduled else 0,
            "accepted": 2 if scheduled else 0,
            "outcome": "discarded_aborted",
            "delivered": 0,
        }

    add = {"record": "request", "step": 1, "request": "a", "event": "add", "structured": False}
    abort = {"record": "request", "step": 1, "request": "a", "event": "abort"}
    totals = {
        "record": "totals",
        "source": "get_metrics",
        "num_drafts": 0,
        "num_draft_tokens": 0,
        "num_accepted_tokens": 0,
        "num_accepted_tokens_per_pos": [0, 0],
    }
    for scheduled, status in ((0, "agree"), (2, "diverge")):
        recs = [header, add, abort, block(1, 2), block(2, scheduled), totals]
        fast, plain = same(_write(tmp_path, [_dump(r) for r in recs]))
        assert fast.status == status
        if status == "diverge":
            assert "output is not processed yet" in plain.divergences[0].reason
        else:
            assert fast.checker == "columnar"
