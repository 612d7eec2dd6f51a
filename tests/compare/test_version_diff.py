"""`spectally version-diff`: a log's vLLM counters under each release's counting profile.

Under the log's own profile the diff must reproduce the replay's totals (its reading of the
records is the replay's); under another profile it follows that release's declared pipeline:
for a vLLM 0.32 structured-output log, 0.34 counts one more drafted token per sync grammar-cut
block and every async slot, while the RFC's drafted, accepted and spec steps do not move."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner
from spectally.commands import main
from spectally.engine_bridge.compare.version_diff import diff

VLLM = Path(__file__).parents[1] / "fixtures" / "vllm"
LOGS = [
    "draft-noise05-k3-so-json-xgrammar",
    "async-draft-noise05-k3-so-json-xgrammar",
    "draft-noise05-k3-greedy-preempt",
    "async-draft-noise05-k3-reset-drop",
]


@pytest.mark.parametrize("name", LOGS)
def test_own_profile_reproduces_the_replay_and_rfc_does_not_move(name: str) -> None:
    d = diff(str(VLLM / f"{name}.ndjson.gz"))
    assert d["own_matches_replay"]
    own, new = d["columns"]
    assert (own["profile"], new["profile"]) == ("vllm-legacy", "vllm-0.34")
    for key in ("drafted", "accepted", "spec_steps"):
        assert own["rfc"][key] == new["rfc"][key], key
    assert own["vllm"]["num_accepted_tokens"] == new["vllm"]["num_accepted_tokens"]
    assert new["rfc"]["verified"] >= own["rfc"]["verified"]


def test_a_sync_grammar_cut_gains_one_drafted_token_per_cut_block() -> None:
    path = VLLM / "draft-noise05-k3-so-json-xgrammar.ndjson.gz"
    import gzip

    with gzip.open(path, "rt") as fh:
        recs = [json.loads(line) for line in fh]
    cut = [
        r
        for r in recs
        if r["record"] == "request_step"
        and r["outcome"] == "applied"
        and r["grammar_valid"] is not None
        and r["grammar_valid"] < r["proposed"]
    ]
    d = diff(str(path))
    own, new = (c["vllm"] for c in d["columns"])
    assert new["num_draft_tokens"] - own["num_draft_tokens"] == len(cut)
    newly_counted = sum(1 for r in cut if r["scheduled"] == 0)  # 0.32 counted no step there
    assert new["num_drafts"] - own["num_drafts"] == newly_counted


def test_cli_text_json_and_refusals(tmp_path: Path) -> None:
    runner = CliRunner()
    log = str(VLLM / "async-draft-noise05-k3-so-json-xgrammar.ndjson.gz")
    text = runner.invoke(main, ["version-diff", log, "--to", "0.34.0"])
    assert text.exit_code == 0, text.output
    assert "upgrade to vllm-0.34: vLLM drafted +" in text.output
    as_json = runner.invoke(main, ["version-diff", log, "--json"])
    assert json.loads(as_json.output)["own_profile"] == "vllm-legacy"
    unknown = runner.invoke(main, ["version-diff", log, "--to", "0.99.0"])
    assert unknown.exit_code == 2 and "no counting profile for vllm 0.99.0" in unknown.output
    bad = tmp_path / "bad.ndjson"
    bad.write_text('{"record": "header"}\n')
    refused = runner.invoke(main, ["version-diff", str(bad)])
    assert refused.exit_code == 2


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_the_0_33_log_predicts_what_0_34s_scheduler_reported(mode: str) -> None:
    """One workload (same requests, drafts and samples: sim_so.py, seed 0) run through vLLM
    0.33.0's and 0.34.0's real schedulers: the diff of the 0.33 log under vllm-0.34 is exactly
    the 0.34 log's own counts, and the RFC's counters are equal in both logs."""
    old = diff(str(VLLM / f"sim-vllm-0.33.0-{mode}-so-json-k4.ndjson.gz"))
    new = diff(str(VLLM / f"sim-vllm-0.34.0-{mode}-so-json-k4.ndjson.gz"))
    assert old["own_matches_replay"] and new["own_matches_replay"]
    predicted = {c["profile"]: c for c in old["columns"]}["vllm-0.34"]
    measured = new["columns"][0]
    assert measured["profile"] == "vllm-0.34"
    assert predicted["vllm"] == measured["vllm"]
    assert predicted["rfc"] == measured["rfc"]
    assert old["columns"][0]["rfc"]["drafted"] == measured["rfc"]["drafted"]
    assert predicted["vllm"]["num_draft_tokens"] > old["columns"][0]["vllm"]["num_draft_tokens"]


def test_text_names_the_logs_engine() -> None:
    """A llama.cpp log's counters are llama.cpp's, not vLLM's."""
    log = Path(__file__).parents[1] / "fixtures" / "llamacpp" / "noise05.steps.ndjson.gz"
    result = CliRunner().invoke(main, ["version-diff", str(log)])
    assert result.exit_code == 0, result.output
    assert "what llama.cpp reports under each release's counting:" in result.output
    assert "vLLM" not in result.output


@pytest.mark.parametrize(
    ("case", "line", "says"),
    [
        ("missing", 1, ":1:1: cannot read: No such file or directory"),
        ("empty", 1, ":1:1: empty log: no header record"),
        ("header only", 1, "(incomplete: it ends before its totals record)"),
        ("diverging", 8, "(it diverges here: the totals record (get_metrics) differs"),
    ],
)
def test_a_log_that_does_not_agree_is_refused_with_its_reason(
    tmp_path: Path, case: str, line: int, says: str
) -> None:
    """version-diff on a log the replay does not judge AGREE named only the verdict
    ("(bad_input)", "(diverge)"): it now gives the reader's own file:line: reason for a log it
    cannot read, and the first divergence's line and reason."""
    diverging = Path(__file__).parents[1] / "traces" / "diverge" / "totals_mismatch.ndjson"
    log = {
        "missing": tmp_path / "missing.ndjson",
        "empty": tmp_path / "empty.ndjson",
        "header only": tmp_path / "header.ndjson",
        "diverging": diverging,
    }[case]
    if case == "empty":
        log.write_text("")
    elif case == "header only":
        log.write_text(diverging.read_text().splitlines()[0] + "\n")
    result = CliRunner().invoke(main, ["version-diff", str(log)])
    assert result.exit_code == 2, result.output
    assert result.stderr.startswith(f"{log}:{line}:1")
    assert says in result.stderr
    assert "internal error" not in result.stderr
