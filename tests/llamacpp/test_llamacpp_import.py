"""``spectally import llamacpp``: the exit-code contract on bad, partial and inconsistent logs.

The logs here are hand-written in llama-server's line formats (test_llamacpp_profile.py's
helpers) to reach each error path; the real logs are in test_llamacpp_fixtures.py.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from spectally.cli import main
from test_llamacpp_profile import metrics_text, server_log, slot_line

COUNTS = {"num_drafts": 2, "num_draft_tokens": 8, "num_accepted_tokens": 3, "per_pos": [2, 1, 0, 0]}
LINES = ["accepted  2/ 4 draft tokens", "accepted  1/ 4 draft tokens"]


def run(tmp: Path, log: str, *extra: str) -> tuple[int, str]:
    (tmp / "server.log").write_text(log)
    (tmp / "after.txt").write_text(metrics_text(COUNTS))
    res = CliRunner().invoke(
        main,
        [
            "import",
            "llamacpp",
            str(tmp / "server.log"),
            "--out",
            str(tmp / "steps.ndjson"),
            "--metrics-after",
            str(tmp / "after.txt"),
            *extra,
        ],
    )
    return res.exit_code, res.output


def test_good_log_exit_0(tmp_path: Path) -> None:
    code, out = run(tmp_path, server_log(LINES, 8, 3))
    assert code == 0, out
    assert "2 verification steps" in out


def test_debug_twin_lines_are_skipped(tmp_path: Path) -> None:
    """At debug verbosity update_slots also logs 'accepted A/N draft tokens, new n_tokens =
    T' for every verification: counting it too would double every step."""
    lines = [LINES[0], "accepted 2/4 draft tokens, new n_tokens = 30", LINES[1]]
    code, out = run(tmp_path, server_log(lines, 8, 3))
    assert code == 0, out
    assert "2 verification steps" in out


def test_unparsable_line_names_file_and_line(tmp_path: Path) -> None:
    log = server_log(LINES, 8, 3).replace("accepted  1/ 4 draft tokens", "accepted one of 4")
    code, out = run(tmp_path, log)
    assert code == 2
    assert f"{tmp_path / 'server.log'}:4:" in out


def test_accepted_above_drafted_is_bad_input(tmp_path: Path) -> None:
    code, out = run(tmp_path, server_log(["accepted  5/ 4 draft tokens"], 4, 5))
    assert code == 2 and ":3:" in out and "exceeds drafted" in out


def test_verification_of_unknown_task(tmp_path: Path) -> None:
    log = server_log(LINES, 8, 3) + slot_line(9, "accepted  1/ 4 draft tokens") + "\n"
    code, out = run(tmp_path, log)
    assert code == 2 and "task 9" in out


def test_cut_log_is_incomplete(tmp_path: Path) -> None:
    log = "".join(server_log(LINES, 8, 3).splitlines(keepends=True)[:-2])  # no timings, no stop
    code, out = run(tmp_path, log)
    assert code == 3 and "no 'stop processing'" in out


def test_log_without_trace_is_bad_input(tmp_path: Path) -> None:
    code, out = run(tmp_path, server_log([], 8, 3))
    assert code == 2 and "LLAMA_TRACE=1" in out


def test_own_line_disagreeing_is_divergence(tmp_path: Path) -> None:
    code, out = run(tmp_path, server_log(LINES, 8, 2))
    assert code == 1 and "DIVERGE" in out and "says 8 / 2" in out


def test_responses_disagreeing_is_divergence(tmp_path: Path) -> None:
    (tmp_path / "r.json").write_text('[{"timings": {"draft_n": 8, "draft_n_accepted": 2}}]')
    code, out = run(tmp_path, server_log(LINES, 8, 3), "--responses", str(tmp_path / "r.json"))
    assert code == 1 and "responses" in out


def test_overlong_line_is_bad_input(tmp_path: Path) -> None:
    log = server_log(LINES, 8, 3) + "x" * (1 << 21) + "\n"
    code, out = run(tmp_path, log)
    assert code == 2 and ":7:1: line longer than" in out


def test_draft_beyond_the_k_limit(tmp_path: Path) -> None:
    code, out = run(tmp_path, server_log(["accepted  0/ 99999999999 draft tokens"], 0, 0))
    assert code == 2 and "exceeds k <= 1024" in out


def test_draft_beyond_draft_max(tmp_path: Path) -> None:
    code, out = run(tmp_path, server_log(LINES, 8, 3), "--draft-max", "3")
    assert code == 2 and "--draft-max 3" in out


@pytest.mark.parametrize(
    "metrics, fragment",
    [
        ("llamacpp:prompt_tokens_total 3\n", "not a llama-server /metrics"),
        ("llamacpp:spec_decode_num_drafts_total 1.5\n"
         "llamacpp:spec_decode_num_draft_tokens_total 8\n"
         "llamacpp:spec_decode_num_accepted_tokens_total 3\n", "not a whole count"),
        ("llamacpp:spec_decode_num_drafts_total 1e300\n"
         "llamacpp:spec_decode_num_draft_tokens_total 8\n"
         "llamacpp:spec_decode_num_accepted_tokens_total 3\n", "not a whole count"),
        ("# HELP llamacpp:spec_decode_num_drafts_total drafts\n"
         "llamacpp:spec_decode_num_drafts_total{oops 1\n", ":2:1: bad Prometheus sample line"),
        ("llamacpp:spec_decode_num_drafts_total 1\n"
         "llamacpp:spec_decode_num_draft_tokens_total 8\n"
         "llamacpp:spec_decode_num_accepted_tokens_total 3\n"
         'llamacpp:spec_decode_num_accepted_tokens_per_pos_total{position="1"} 3\n',
         ":4:1: positions not 0..k-1"),
    ],
)  # fmt: skip
def test_bad_metrics(tmp_path: Path, metrics: str, fragment: str) -> None:
    (tmp_path / "before.txt").write_text(metrics)
    code, out = run(
        tmp_path, server_log(LINES, 8, 3), "--metrics-before", str(tmp_path / "before.txt")
    )
    assert code == 2 and fragment in out


def _written(tmp: Path) -> list[dict[str, Any]]:
    text = (tmp / "steps.ndjson").read_text()
    return [json.loads(line) for line in text.splitlines()]


def test_totals_are_written_only_when_every_task_is_complete(tmp_path: Path) -> None:
    """The /metrics delta covers the whole run; a log cut before a task's 'stop processing'
    line may lack verifications the counters include, so the step log then gets no totals
    record (the replay would report a divergence the engine never made) and the import is
    incomplete. The same log uncut gets the delta as its totals."""
    full = server_log(LINES, 8, 3)
    code, out = run(tmp_path, full)
    assert code == 0, out
    totals = [r for r in _written(tmp_path) if r["record"] == "totals"]
    assert len(totals) == 1
    assert (totals[0]["num_drafts"], totals[0]["num_draft_tokens"]) == (2, 8)
    assert totals[0]["num_accepted_tokens_per_pos"] == COUNTS["per_pos"]

    # cut after the first verification: the counters after the run still count both
    cut = "".join(full.splitlines(keepends=True)[:3])
    code, out = run(tmp_path, cut)
    assert code == 3, out
    assert "INCOMPLETE" in out and "task 1 has no 'stop processing' line" in out
    records = _written(tmp_path)
    assert [r["record"] for r in records].count("request_step") == 1
    assert not [r for r in records if r["record"] == "totals"]
    replayed = CliRunner().invoke(main, ["replay", str(tmp_path / "steps.ndjson")])
    assert replayed.exit_code == 3, replayed.output
    assert "DIVERG" not in replayed.output


def test_no_metrics_scrape_writes_no_totals(tmp_path: Path) -> None:
    (tmp_path / "server.log").write_text(server_log(LINES, 8, 3))
    out_path = tmp_path / "steps.ndjson"
    res = CliRunner().invoke(
        main, ["import", "llamacpp", str(tmp_path / "server.log"), "--out", str(out_path)]
    )
    assert res.exit_code == 3, res.output
    assert "no /metrics scrape given: the step log has no totals" in res.output
    assert not [r for r in _written(tmp_path) if r["record"] == "totals"]
