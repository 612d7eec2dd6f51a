"""How the reference replay judges the blocks a preemption leaves in flight, on a log a real
engine wrote: async vLLM 0.32 with ``drop_stale_output`` (tests/fixtures/vllm, the ``reset``
scenario), each case altered in one field of one record.

In that log every request is preempted at steps 4 and 11 (``request`` records, lines 16-19 and
49-52) and the block each had in the forward pass comes back stale and dropped: a
``discarded_stale`` record right after (lines 20-23 and 53-56). The replay holds the
preemption until the stale block's record is read, then applies it and the block's Accept at
once (`Replayer._claim_discarded`), so a stale Accept the reference rejects is named at that
record, before the record's own counts are compared; and it keeps the claimed outcome of a
discarded block until the reference closes the block, then names the outcome that differs
(rule E6). Each verdict is the same on the default path (the columnar checker, which hands a
log it cannot vouch for to the reference replay) as on ``--reference``.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import pytest
from spectally.engine_bridge.replay.columnar import judge
from spectally.engine_bridge.replay.dispatch import replay_file
from spectally.engine_bridge.replay.report import ReplayResult

ROOT = Path(__file__).parents[2]
LOG = ROOT / "tests" / "fixtures" / "vllm" / "async-draft-noise05-k3-reset-drop.ndjson.gz"
R0, R1 = "r0-95f71dc6", "r1-85304aab"


@pytest.fixture(autouse=True)
def strict_columnar(monkeypatch: pytest.MonkeyPatch) -> None:
    """A fault of the columnar code fails the test instead of falling back silently."""
    monkeypatch.setattr(judge, "STRICT", True)


def altered(tmp_path: Path, line: int, request: str, **fields: Any) -> Path:
    """The log with ``fields`` of its record at ``line`` (1-based; a record of ``request``)
    replaced, every other byte as the engine wrote it."""
    lines = gzip.decompress(LOG.read_bytes()).split(b"\n")
    rec = json.loads(lines[line - 1])
    assert rec["request"] == request and fields.keys() <= rec.keys(), rec
    lines[line - 1] = json.dumps({**rec, **fields}, separators=(",", ":")).encode()
    path = tmp_path / "altered.ndjson"
    path.write_bytes(b"\n".join(lines))
    return path


def judged(path: Path, max_divergences: int = 1) -> ReplayResult:
    """The reference replay's result, after checking that the default path gives the same
    verdict, exit code and divergences."""
    plain = replay_file(str(path), progress=False, reference=True, max_divergences=max_divergences)
    fast = replay_file(str(path), progress=False, max_divergences=max_divergences)
    assert (fast.status, fast.exit_code) == (plain.status, plain.exit_code)
    assert [d.to_dict() for d in fast.divergences] == [d.to_dict() for d in plain.divergences]
    assert plain.bad_input is None
    return plain


def summary(result: ReplayResult) -> list[tuple[int, str, int | None, str | None, str | None]]:
    return [(d.line, d.kind, d.step, d.at, d.rule) for d in result.divergences]


def test_the_unaltered_log_agrees_on_both_paths(tmp_path: Path) -> None:
    path = tmp_path / "log.ndjson"
    path.write_bytes(gzip.decompress(LOG.read_bytes()))
    result = judged(path)
    assert str(result.status) == "agree", [d.render() for d in result.divergences]
    assert result.exit_code == 0
    assert replay_file(str(path), progress=False).checker == "columnar"


def test_a_rejected_stale_accept_is_named_at_its_record(tmp_path: Path) -> None:
    """r1's stale block at step 11 claims 4 accepted tokens of 3 drafts: the reference rejects
    its Accept when the held preemption is applied, at line 54, before the record's counts are
    compared (which then also differ: accepted is not sampled - 1)."""
    path = altered(tmp_path, 54, R1, accepted=4)
    first = judged(path)
    assert str(first.status) == "diverge" and first.exit_code == 1
    assert summary(first) == [(54, "request_step", 11, None, None)]
    assert first.divergences[0].reason == (
        f"the reference rejects Accept(4) for {R1!r} at step 11: accepted cannot exceed the"
        " drafts eligible for acceptance"
    )
    every = judged(path, max_divergences=5)
    assert summary(every) == [
        (54, "request_step", 11, None, None),
        (54, "request_step", 11, "accepted", "L3"),
        (169, "totals", None, None, "L1"),
    ]


def test_a_stale_block_the_engine_kept_is_applied_not_discarded(tmp_path: Path) -> None:
    """r0's preemption at step 4 says the engine keeps stale output: the reference applies the
    block the record at line 20 claims was discarded stale."""
    path = altered(tmp_path, 19, R0, drop_stale_output=False)
    result = judged(path, max_divergences=5)
    assert summary(result) == [(20, "request_step", 4, "outcome", "E6")]
    (divergence,) = result.divergences
    assert divergence.rows == [("outcome", "applied", "discarded_stale")]
    assert divergence.reason == (
        "the record claims discarded_stale; the reference closes the block as applied"
        f" (at line 20: Accept(1) for {R0!r} at step 4)"
    )


def test_a_stale_block_claimed_preempted_is_named_where_it_closes(tmp_path: Path) -> None:
    """The record at line 20 claims discarded_preempted for the block in flight at the
    preemption: the reference keeps that block open (async: its output comes back stale) and
    only r0's finish at line 167 closes it, as discarded_finished."""
    path = altered(tmp_path, 20, R0, outcome="discarded_preempted")
    result = judged(path, max_divergences=5)
    assert summary(result) == [(20, "request_step", 4, "outcome", "E6")]
    (divergence,) = result.divergences
    assert divergence.rows == [("outcome", "discarded_finished", "discarded_preempted")]
    assert divergence.reason.endswith(f"(at line 167: Finish of {R0!r} at step 39)")
