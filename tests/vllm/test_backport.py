"""The backport's cached counting (engine_bridge/vllm/recorder/backport.py) gives exactly what the
reference gives block by block, on the committed real vLLM logs: totals, and the Prometheus
counters it publishes. No vLLM needed (prometheus_client only)."""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import pytest
from spectally.engine_bridge.steplog.translate import counting_profile, profile_for
from spectally.engine_bridge.vllm.recorder import backport
from spectally.engine_bridge.vllm.recorder.backport import BackportPublisher, rfc_block_counts
from spectally.reference.counters import Counters
from spectally.reference.step import Mode

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "vllm"
LOGS = sorted(p.name for p in FIXTURES.glob("*.ndjson.gz"))


def _records(name: str) -> list[dict[str, Any]]:
    with gzip.open(FIXTURES / name, "rt") as fh:
        return [json.loads(line) for line in fh]


def _feed(name: str, label: str) -> tuple[BackportPublisher, Counters]:
    records = _records(name)
    header = records[0]
    k = header["num_speculative_tokens"]
    mode = Mode(header["scheduling"])
    # the header's release decides the pipeline (vLLM 0.34 verifies the first invalid draft)
    profile = counting_profile(profile_for(header["engine"], header["engine_version"]))
    pub = BackportPublisher(k, label, log_interval=0)
    direct = Counters.zero(k)
    for record in records:
        pub.observe(record)
        if record["record"] == "request_step":
            direct = direct.merge(rfc_block_counts(mode, k, record, profile))
    return pub, direct


@pytest.mark.parametrize("name", LOGS)
def test_cached_totals_equal_block_by_block_reference(name: str) -> None:
    pub, direct = _feed(name, f"t-{name}")
    assert pub.totals == direct
    # what was published to Prometheus is the same
    scalar = {key: child._value.get() for key, child in pub._scalar.items()}
    r = direct.rfc
    assert scalar == {
        "drafted": r.drafted,
        "verified": r.verified,
        "accepted": r.accepted,
        "spec_steps": r.spec_steps,
    }
    for what in ("drafted", "verified", "accepted"):
        published = [child._value.get() for child in pub._pos[what]]
        assert published == list(direct.per_position(what))


def test_times_is_repeated_merge() -> None:
    record = next(r for r in _records(LOGS[0]) if r["record"] == "request_step" and r["accepted"])
    block = rfc_block_counts(Mode.SYNC, 3, record)
    for n in (1, 2, 3, 7, 8, 33):
        folded = block
        for _ in range(n - 1):
            folded = folded.merge(block)
        assert backport.times(block, n) == folded


def _async_log_with_discarded_scheduled_blocks() -> str:
    for name in LOGS:
        records = _records(name)
        if records[0]["scheduling"] == "async" and any(
            r["record"] == "request_step" and r["outcome"] != "applied" and r["sampled"]
            for r in records
        ):
            return name
    raise AssertionError("no async fixture with a discarded block that was computed")


@pytest.mark.parametrize(
    ("dropped", "log"),
    [(1, "draft-noise05-k3-greedy.ndjson.gz"), (6, None)],
    ids=["without-accepted", "without-outcome"],
)
def test_a_key_missing_an_input_is_caught(
    monkeypatch: pytest.MonkeyPatch, dropped: int, log: str | None
) -> None:
    """Mutants: a cache key without one of the inputs counts different blocks alike; the
    comparison above catches it (the outcome one on an async log, where a block finished or
    aborted while in flight has the shape of an applied one)."""
    original = backport.block_key
    monkeypatch.setattr(
        backport, "block_key", lambda r: original(r)[:dropped] + original(r)[dropped + 1 :]
    )
    pub, direct = _feed(log or _async_log_with_discarded_scheduled_blocks(), f"mutant{dropped}")
    assert pub.totals != direct


@pytest.mark.parametrize(
    "name",
    ["sim-vllm-0.34.0-sync-so-json-k4.ndjson.gz", "sim-vllm-0.34.0-async-so-json-k4.ndjson.gz"],
)
def test_the_backport_of_a_0_34_engine_counts_what_the_replay_counts(name: str) -> None:
    """Live RFC counters from a vLLM 0.34 log equal the replay's rfc totals (its profile's
    pipeline: the first invalid draft is verified in sync)."""
    from spectally.engine_bridge.replay.dispatch import replay_file

    pub, _ = _feed(name, f"r-{name}")
    result = replay_file(str(FIXTURES / name), progress=False)
    assert result.status == "agree" and result.totals is not None
    assert pub.totals.rfc == result.totals.rfc


def test_summary_key_reads_the_verified_counter_under_either_name() -> None:
    """Committed scrapes and manifests predate the spec's verified name; both names give one key."""
    summary_key, PREFIX = backport.summary_key, backport.PREFIX
    assert summary_key(PREFIX + "num_verified_draft_tokens") == "verified_tokens"
    assert summary_key(PREFIX + "num_verified_tokens") == "verified_tokens"
    assert summary_key(PREFIX + "num_drafted_tokens") == "drafted_tokens"
    assert summary_key(PREFIX + "num_verified_draft_tokens_per_pos") is None
    assert summary_key(PREFIX + "num_verified_tokens_per_pos") is None
    assert summary_key(PREFIX + "backport_errors") is None
    assert summary_key("vllm:spec_decode_num_draft_tokens") is None
