"""How the reference replay judges the blocks a preemption leaves in flight, and when a
discarded block must be discarded, on logs a real engine wrote: async vLLM 0.32 with
``drop_stale_output`` (tests/fixtures/vllm, the ``reset`` scenario), each case altered in one
field of one record, and every recorded log with one discarded record's outcome or one end
record's step changed.

In the ``reset`` log every request is preempted at steps 4 and 11 (``request`` records, lines
16-19 and 49-52) and the block each had in the forward pass comes back stale and dropped: a
``discarded_stale`` record right after (lines 20-23 and 53-56). The replay holds the
preemption until the stale block's record is read, then applies it and the block's Accept at
once (`Replayer._claim_discarded`), so a stale Accept the reference rejects is named at that
record, before the record's own counts are compared; and it keeps the claimed outcome of a
discarded block until the reference closes the block, then names the outcome that differs
(rule E6). The event that closes it must name the block's step, or in async the next one
(ATTR-2): a claim nothing discards by then is named at its own record as soon as that window
has passed. Each verdict is the same on the default path (the columnar checker, which hands a
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


@pytest.mark.parametrize(
    "outcome", ["discarded_finished", "discarded_aborted", "discarded_preempted"]
)
def test_a_dropped_stale_block_claimed_otherwise_diverges_at_its_record(
    tmp_path: Path, outcome: str
) -> None:
    """The record at line 20 claims another discarded outcome for the block the step-4
    preemption dropped. The preemption leaves the block open (async: its output comes back
    stale) and nothing of steps 4-5 discards it; r0 runs on to its finish at step 39 (line
    167), which would close the block as discarded_finished. The claim is named at its own
    record once step 7 begins (every event of step 5 applied), by ATTR-2, whichever outcome it
    claims: a claim of the finish that comes 34 steps later agrees no more than one that
    never comes."""
    path = altered(tmp_path, 20, R0, outcome=outcome)
    result = judged(path, max_divergences=5)
    assert summary(result) == [(20, "request_step", 4, "outcome", "ATTR-2")]
    (divergence,) = result.divergences
    assert divergence.rows == [("discarded at step", "<= 5", "none")]
    assert divergence.reason == (
        f"the record claims {outcome}, but nothing discarded it by step 5: the event that"
        " discards a block of step 4 names step 5 at the latest (async; SPEC.md ATTR-2)"
    )


FIXTURES = ROOT / "tests" / "fixtures" / "vllm"
DISCARDED = ("discarded_finished", "discarded_aborted", "discarded_preempted", "discarded_stale")
END_OUTCOME = {"finish": "discarded_finished", "abort": "discarded_aborted"}


def records(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in gzip.decompress(path.read_bytes()).splitlines()]


def write(tmp_path: Path, recs: list[dict[str, Any]]) -> Path:
    path = tmp_path / "changed.ndjson"
    path.write_bytes(b"".join(json.dumps(r, separators=(",", ":")).encode() + b"\n" for r in recs))
    return path


def refutable(recs: list[dict[str, Any]], at: int, async_: bool) -> bool:
    """Whether the log itself refutes the claim of the discarded record at index ``at``: no
    request record of its request within its window (SPEC.md ATTR-2: steps ``s - 1`` to ``s``,
    or ``s + 1`` in async) gives that outcome (E6: a preemption discards a block that never
    reached the forward pass; one that did comes back stale). Written from the rules, not
    from either judge."""
    rec = recs[at]
    rid, step, outcome = rec["request"], rec["step"], rec["outcome"]
    last = step + 1 if async_ else step
    window = [
        r
        for r in recs
        if r["record"] == "request" and r["request"] == rid and step - 1 <= r["step"] <= last
    ]
    if outcome == "discarded_stale":  # dropped output of a block in flight: async only
        drops = any(r["event"] == "preempt" and r.get("drop_stale_output") for r in window)
        return not (async_ and drops)
    if outcome == "discarded_preempted":
        in_forward_pass = rec["scheduled"] > 0 or rec["sampled"] > 0
        return in_forward_pass or not any(r["event"] == "preempt" for r in window)
    return not any(END_OUTCOME.get(r["event"]) == outcome for r in window)


def lifecycle_variety(path: Path) -> bool:
    """A recorded log with discarded records and more than plain finishes: async scheduling,
    a preemption or an abort (the others add only more of the same sync finishes)."""
    text = gzip.decompress(path.read_bytes())
    other = (b'"scheduling":"async"', b'"event":"preempt"', b'"event":"abort"')
    return b"discarded_" in text and any(word in text for word in other)


CHANGED_OUTCOMES = [
    pytest.param(path, id=path.name.removesuffix(".ndjson.gz"))
    for path in sorted(FIXTURES.glob("*.ndjson.gz"))
    if lifecycle_variety(path)
]


@pytest.mark.parametrize("path", CHANGED_OUTCOMES)
def test_every_wrong_discarded_outcome_of_a_real_log_diverges_at_its_record(
    tmp_path: Path, path: Path
) -> None:
    """Discarded records of every recorded log (the first and the last of each outcome, so
    that the default suite stays fast), each outcome changed to each other discarded one:
    wherever the log refutes the new claim (`refutable`), both judges diverge, and the first
    divergence is that record's line; where it cannot (a finish within the window of a block
    a preemption dropped: which came first is not in the log), both agree."""
    recs = records(path)
    async_ = recs[0]["scheduling"] == "async"
    changed = refuted = 0
    chosen: dict[str, list[int]] = {}
    for at, rec in enumerate(recs):
        if rec.get("outcome") in DISCARDED:
            chosen.setdefault(rec["outcome"], []).append(at)
    for at in sorted({at for ats in chosen.values() for at in (ats[0], ats[-1])}):
        rec = recs[at]
        for outcome in DISCARDED:
            if outcome == rec["outcome"]:
                continue
            recs[at] = {**rec, "outcome": outcome}
            result = judged(write(tmp_path, recs))
            where = f"line {at + 1}: {rec['outcome']} -> {outcome}"
            if refutable(recs, at, async_):
                refuted += 1
                assert str(result.status) == "diverge", where
                assert result.divergences[0].line == at + 1, where
            else:
                assert str(result.status) == "agree", where
            changed += 1
        recs[at] = rec
    assert changed and refuted, (changed, refuted)


def moved_end(recs: list[dict[str, Any]], at: int, step: int) -> list[dict[str, Any]]:
    """``recs`` with the end record at index ``at`` stamped with ``step`` and moved to just
    before that step's step_stats record (where a recorder writes an end of that step)."""
    out = [r for i, r in enumerate(recs) if i != at]
    stats = next(i for i, r in enumerate(out) if r["record"] == "step_stats" and r["step"] >= step)
    out.insert(stats, {**recs[at], "step": step})
    return out


@pytest.mark.parametrize(
    ("name", "end_line", "block_line", "deadline"),
    [
        # async: r3 finishes at step 32 (line 146); its block of step 33 (line 150) is
        # discarded_finished, which a finish of step 34 at the latest may discard
        ("async-draft-noise05-k3-reset-drop", 146, 150, 34),
        # sync: r1 is aborted at step 3 (line 16); its proposal for step 4 (line 17) is
        # discarded_aborted, which an abort of step 4 at the latest may discard
        ("draft-noise05-k3-greedy-abort", 16, 17, 4),
    ],
)
def test_an_end_record_later_than_its_discarded_block_allows_diverges(
    tmp_path: Path, name: str, end_line: int, block_line: int, deadline: int
) -> None:
    """The end record of a request whose last block is discarded, written up to the block's
    deadline (ATTR-2), agrees on the columnar checker itself; one step later both judges name
    the block's record, by ATTR-2, though the end's kind is the claimed one (this is the
    columnar checker's own check: without it the log agreed there)."""
    recs = records(FIXTURES / f"{name}.ndjson.gz")
    block = recs[block_line - 1]
    assert recs[end_line - 1]["request"] == block["request"]
    assert END_OUTCOME[recs[end_line - 1]["event"]] == block["outcome"]
    path = write(tmp_path, moved_end(recs, end_line - 1, deadline))
    assert str(judged(path).status) == "agree"
    assert replay_file(str(path), progress=False).checker == "columnar"
    late = moved_end(recs, end_line - 1, deadline + 1)
    result = judged(write(tmp_path, late))
    line = late.index(block) + 1
    assert summary(result) == [(line, "request_step", block["step"], "outcome", "ATTR-2")]


def test_a_claim_the_log_cannot_refute_agrees(tmp_path: Path) -> None:
    """What ATTR-2 leaves open, shown on a log of the simulated async engine: plain1 is
    preempted with drop at step 12 (line 77) and finishes at step 13 (line 83), within the
    window of its block of step 12 (line 80). The engine writes discarded_finished for that
    block if the finish came before the block's output was processed, discarded_stale if
    after; the log does not order them, so both claims agree, on both paths."""
    recs = records(FIXTURES / "sim-vllm-0.33.0-async-so-json-k4.ndjson.gz")
    block = recs[79]
    assert (block["request"], block["step"], block["outcome"]) == ("plain1", 12, "discarded_stale")
    assert [(r["event"], r["step"]) for r in (recs[76], recs[82])] == [
        ("preempt", 12),
        ("finish", 13),
    ]
    recs[79] = {**block, "outcome": "discarded_finished"}
    assert not refutable(recs, 79, True)
    assert str(judged(write(tmp_path, recs)).status) == "agree"


def test_a_preemption_past_its_stale_blocks_window_diverges_at_the_block(tmp_path: Path) -> None:
    """r0's preemption of step 4 (line 19) written at step 6, just before r0's block of step 6,
    which releases it at once: the reference makes the block of step 4 stale and its held
    Accept closes it as the claimed discarded_stale, but at step 6, past its deadline (step
    5). Both judges name the block's record (line 19 once the preemption moved down), by
    ATTR-2, with the preemption's line; at its own step the log agrees."""
    recs = records(LOG)
    preempt = recs[18]
    assert (preempt["request"], preempt["event"], preempt["step"]) == (R0, "preempt", 4)
    late = recs[:18] + recs[19:]
    at = next(i for i, r in enumerate(late) if (r.get("request"), r.get("step")) == (R0, 6))
    late.insert(at, {**preempt, "step": 6})
    result = judged(write(tmp_path, late), max_divergences=5)
    assert summary(result) == [(19, "request_step", 4, "outcome", "ATTR-2")]
    (divergence,) = result.divergences
    assert divergence.rows == [("discarded at step", "<= 5", 6)]
    assert f"(line {at + 1}: Preempt of {R0!r} at step 6)" in divergence.reason
