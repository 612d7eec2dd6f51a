"""llama-server's acceptance summaries checked without traces (`spectally import llamacpp LOG`).

Every layout is read from real output users and maintainers pasted publicly (cited per line);
each consistent line is judged OK, and a one-number change to it is caught and named. The
readers follow the format strings of server_slot::print_timings and
common_speculative_print_stats (engine_bridge/llamacpp/summaries.py), not these examples.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest
from click.testing import CliRunner
from spectally.cli import main
from spectally.engine_bridge.llamacpp import summaries
from spectally.engine_bridge.llamacpp.importer import refused_by_replay
from spectally.engine_bridge.steplog.source import BadInput
from test_llamacpp_profile import metrics_text, server_log

# (layout, line, where it was pasted)
REAL = [
    (
        "pr24536",
        "0.06.896.015 I slot print_timing: id  1 | task 0 | draft acceptance = 0.64479 (  167"
        " accepted /   259 generated), mean acceptance length =  2.92, acceptance rate per"
        " position = (0.805, 0.632, 0.483)",
        "ggml-org/llama.cpp#24536, comment of 2026-06-15 (EAGLE3)",
    ),
    (
        "statistics",
        "0.06.896.057 I statistics     draft-eagle3: #calls(b,g,a) =    1     87     87, #gen"
        " drafts =     87, #acc drafts =    70, #gen tokens =    259, #acc tokens =   167,"
        " #mean acc len = 2.92, #acc rate/pos = (0.805, 0.632, 0.483), dur(b,g,a) = 0.005,"
        " 325.555, 0.114 ms",
        "ggml-org/llama.cpp#24536, comment of 2026-06-15",
    ),
    (
        "mean-len",
        "4.58.584.379 I slot print_timing: id  0 | task 4827 | draft acceptance = 0.98444 ( "
        " 886 accepted /   900 generated), mean len =  4.94",
        "ggml-org/llama.cpp#27342 (DFlash2), a review-thread paste",
    ),
    (
        "mean-len",
        "132.15.702.033 I slot print_timing: id  0 | task 9161 | draft acceptance = 0.92727 ("
        "   51 accepted /    55 generated), mean len =  5.64",
        "noonghunna/club-3090#1106, llama.cpp DeepSeek-V4 bench paste",
    ),
    (
        "mean-len",
        "5.27.453.102 I slot print_timing: id  0 | task 160 | draft acceptance = 0.46218 (   55"
        " accepted /   119 generated), mean len =  2.38",
        "noonghunna/club-3090#1124",
    ),
    (
        "mean-len",
        "4.01.806.856 I slot print_timing: id  0 | task 0 | draft acceptance = 0.65959 ( 5995"
        " accepted /  9089 generated), mean len =  4.30",
        "lemonade-sdk/llamacpp-rocm#129",
    ),
    (
        "statistics",
        "[53409] 4.48.313.680 I statistics draft-mtp: #calls(b,g,a) = 10 727 727, #gen drafts ="
        " 727, #acc drafts = 632, #gen tokens = 1447, #acc tokens = 1135, dur(b,g,a) = 0.007,"
        " 30384.874, 1.156 ms",
        "ggml-org/llama.cpp#23269 (MTP clean-up), a comment pasting llama-swap output",
    ),
    (
        "statistics",
        "[53409] 5.05.552.782 I statistics ngram-mod: #calls(b,g,a) = 11 800 4, #gen drafts ="
        " 4, #acc drafts = 4, #gen tokens = 256, #acc tokens = 47, dur(b,g,a) = 0.340, 2.107,"
        " 1.102 ms",
        "ggml-org/llama.cpp#23269",
    ),
]
# The multi-line layout, as ggml-org/llama.cpp#23269's comment pasted it (llama-swap prefix).
MULTILINE = [
    "[53409] 4.48.313.649 I slot print_timing: id  0 | task 689 | ",
    "[53409] prompt eval time =     900.22 ms /    30 tokens (   30.01 ms per token,    33.33"
    " tokens per second)",
    "[53409]        eval time =   14323.78 ms /   192 tokens (   74.60 ms per token,    13.40"
    " tokens per second)",
    "[53409]       total time =   15224.00 ms /   222 tokens",
    "[53409] draft acceptance rate = 0.81944 (  118 accepted /   144 generated)",
]


def _check(lines: list[str]) -> list[summaries.Finding]:
    return summaries.check(summaries.parse("log", enumerate(lines, start=1)))


@pytest.mark.parametrize(("layout", "line", "where"), REAL, ids=[r[2][:40] for r in REAL])
def test_real_lines_are_consistent(layout: str, line: str, where: str) -> None:
    findings = _check([line])
    assert [f.verdict for f in findings] == ["ok"], findings
    assert layout in findings[0].check or layout == "statistics"


def test_pr24536_pins_the_step_count() -> None:
    """1 + 167/n = 2.92 and three rates that are counts over n: n = 87 only, as the statistics
    line of the same run says (#calls a = 87)."""
    assert summaries.steps_range(167, 259, 2.92, (0.805, 0.632, 0.483)) == (87, 87, 1)


def test_multiline_layout_is_read_and_attributed() -> None:
    findings = _check(MULTILINE)
    assert [(f.verdict, f.line) for f in findings] == [("ok", 5)]
    assert "task 689" in findings[0].message and "multiline" in findings[0].check


# One number changed in a real line, and the check that must name it.
MUTANTS = [
    (REAL[0][1].replace("0.64479", "0.64480"), "rate vs accepted/generated"),
    (REAL[0][1].replace("2.92", "2.95"), "mean length vs per-position"),
    (REAL[0][1].replace("0.632, 0.483", "0.483, 0.632"), "per-position non-increasing"),
    (REAL[0][1].replace("167 accepted", "267 accepted"), "accepted<=generated"),
    (REAL[2][1].replace("4.94", "1.00"), "integral verification steps"),
    (REAL[1][1].replace("#acc drafts =    70", "#acc drafts =    71"), "vs #acc drafts"),
    (REAL[1][1].replace("#mean acc len = 2.92", "#mean acc len = 2.93"), "#mean acc len"),
    (REAL[1][1].replace("#acc tokens =   167", "#acc tokens =   170"), "#mean acc len"),
    (REAL[6][1].replace("#acc drafts = 632", "#acc drafts = 728"), "accept calls"),
    (REAL[7][1].replace("#gen tokens = 256", "#gen tokens = 3"), "#gen drafts <= #gen tokens"),
    (REAL[1][1].replace("(0.805, 0.632, 0.483)", "()"), "#acc rate/pos present"),
    (MULTILINE[-1].replace("0.81944", "0.81945"), "rate vs accepted/generated"),
]


@pytest.mark.parametrize(("line", "check"), MUTANTS)
def test_changed_number_is_caught(line: str, check: str) -> None:
    findings = _check([line])
    bad = [f for f in findings if f.verdict == "violation"]
    assert bad and any(check in f.check for f in bad), findings


def test_trace_per_position_line_attaches_to_its_summary() -> None:
    """At trace verbosity the newest server prints 'acc per pos = (...)' after 'mean len'."""
    lines = [
        "slot print_timing: id  0 | task 7 | draft acceptance = 0.50000 (    3 accepted /     6"
        " generated), mean len =  2.50",
        "slot print_timing: id  0 | task 7 |      acc per pos = (1.000, 0.500)",
    ]
    findings = _check(lines)
    assert [f.verdict for f in findings] == ["ok"]
    bad = _check([lines[0], lines[1].replace("0.500)", "0.900)")])
    assert any(f.check == "per-position non-increasing" for f in bad) or any(
        f.check == "mean length vs per-position" for f in bad
    )


def run(*args: str, stdin: bytes | None = None) -> tuple[int, str]:
    res = CliRunner().invoke(main, ["import", "llamacpp", *args], input=stdin)
    return res.exit_code, res.output


def test_command_checks_summaries_without_out(tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    log.write_text("\n".join([r[1] for r in REAL] + MULTILINE) + "\n")
    code, out = run(str(log))
    assert code == 0, out
    assert f"{len(REAL) + 1} checks: {len(REAL) + 1} ok" in out
    log.write_text(MUTANTS[0][0] + "\n")
    code, out = run(str(log))
    assert code == 1 and f"{log}:1: VIOLATION rate vs accepted/generated" in out


def test_gzip_and_stdin_are_read(tmp_path: Path) -> None:
    text = ("\n".join(MULTILINE) + "\n").encode()
    gz = tmp_path / "server.log.gz"
    gz.write_bytes(gzip.compress(text))
    assert run(str(gz))[0] == 0
    code, out = run("-", stdin=text)
    assert code == 0 and "1 ok" in out


def test_multiline_with_out_names_the_missing_traces(tmp_path: Path) -> None:
    """The older layout with --engine-version once gave a 0-step log blamed on /metrics."""
    log = tmp_path / "server.log"
    log.write_text("\n".join(MULTILINE) + "\n")
    out = tmp_path / "steps.ndjson"
    code, text = run(str(log), "--out", str(out), "--engine-version", "0.4.0")
    assert code == 2, text
    assert "144 tokens were drafted" in text and "LLAMA_TRACE=1" in text and "/metrics" not in text
    assert not out.exists()


@pytest.mark.parametrize(
    "content",
    ["INFO 05-01 14:24:50 [metrics.py:101] SpecDecoding metrics: Accepted: 3 tokens\n", "", "x\n"],
)
def test_not_a_llamacpp_log_is_refused(tmp_path: Path, content: str) -> None:
    log = tmp_path / "other.log"
    log.write_text(content)
    for extra in ((), ("--out", str(tmp_path / "o.ndjson"), "--engine-version", "0.5.0")):
        code, text = run(str(log), *extra)
        assert code == 2 and "not a llama-server log" in text, text


@pytest.mark.parametrize("version", ["1" * 50, "", " ", "0.5;rm -rf /"])
def test_unnameable_engine_version_is_usage_error(tmp_path: Path, version: str) -> None:
    log = tmp_path / "server.log"
    log.write_text(server_log(["accepted  2/ 4 draft tokens"], 4, 2))
    code, text = run(str(log), "--out", str(tmp_path / "o.ndjson"), "--engine-version", version)
    assert code == 2, text
    assert not (tmp_path / "o.ndjson").exists()


def test_metrics_going_backwards_is_refused(tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    log.write_text(server_log(["accepted  2/ 4 draft tokens"], 4, 2))
    big = {"num_drafts": 9, "num_draft_tokens": 40, "num_accepted_tokens": 20, "per_pos": [9]}
    small = {"num_drafts": 8, "num_draft_tokens": 36, "num_accepted_tokens": 18, "per_pos": [8]}
    (tmp_path / "before").write_text(metrics_text(big))
    (tmp_path / "after").write_text(metrics_text(small))
    code, text = run(
        str(log),
        "--out",
        str(tmp_path / "o.ndjson"),
        "--metrics-before",
        str(tmp_path / "before"),
        "--metrics-after",
        str(tmp_path / "after"),
    )
    assert code == 2 and "went backwards" in text, text
    assert not (tmp_path / "o.ndjson").exists()


@pytest.mark.parametrize(
    "line",
    [
        "slot print_timing: id  0 | task 1 | draft acceptance = 0.5 ("
        + "9" * 5000
        + " accepted /     6 generated)",
        "slot update_slots: id  0 | task 1 | accepted " + "7" * 5000 + "/ 4 draft tokens",
        "statistics x: #calls(b,g,a) = 1 1 " + "1" * 5000 + ", #gen drafts = 1, #acc drafts = 0,"
        " #gen tokens = 1, #acc tokens = 0",
        "slot print_timing: id  0 | task 1 | draft acceptance = 0.50000 (    3 accepted /     6"
        " generated), mean acceptance length =  2.50, acceptance rate per position = (1.500)",
    ],
)
def test_oversized_or_impossible_numbers_are_bad_input(tmp_path: Path, line: str) -> None:
    log = tmp_path / "server.log"
    log.write_text(line + "\n")
    code, text = run(str(log))
    assert code == 2 and f"{log}:1:" in text, text


def test_replay_gate_names_what_the_replay_refuses() -> None:
    """The step log is replayed in memory before it is written: records the replay refuses
    are never written."""
    header = {
        "record": "header",
        "schema_version": 1,
        "engine": "llama.cpp",
        "engine_version": "0.5.0-dev+0c1e570",
        "num_speculative_tokens": 2,
        "scheduling": "sync",
        "spec_method": "draft-simple",
        "structured_outputs_backend": None,
        "adaptive_verification": False,
        "drop_stale_output": False,
        "config": {},
    }
    totals = {
        "record": "totals",
        "source": "test",
        "num_drafts": -1,
        "num_draft_tokens": 0,
        "num_accepted_tokens": 0,
        "num_accepted_tokens_per_pos": [0, 0],
    }
    assert refused_by_replay([header], "x.ndjson") is None
    why = refused_by_replay([header, totals], "x.ndjson")
    assert why is not None and "x.ndjson:2" in why


def test_bad_input_messages_name_line_and_column() -> None:
    with pytest.raises(BadInput) as exc:
        list(summaries.parse("f", [(3, "slot print_timing: id 0 | task 1 | draft acceptance = x")]))
    assert str(exc.value).startswith("f:3:")
    assert json.dumps(str(exc.value))


def test_traced_summary_mean_is_checked_against_its_verifications(tmp_path: Path) -> None:
    """2 verifications accepting 2 and 1: the summary's mean must be 1 + 3/2 = 2.50. A mean of
    2.00 is consistent on its own (n = 3 fits), so only the traces can catch it."""
    lines = ["accepted  2/ 4 draft tokens", "accepted  1/ 4 draft tokens"]
    log = tmp_path / "server.log"
    text = server_log(lines, 8, 3)
    assert "mean len =  2.50" in text
    log.write_text(text.replace("mean len =  2.50", "mean len =  2.00"))
    counts = {"num_drafts": 2, "num_draft_tokens": 8, "num_accepted_tokens": 3, "per_pos": [2, 1]}
    (tmp_path / "after").write_text(metrics_text(counts))
    out = tmp_path / "o.ndjson"
    code, msg = run(str(log), "--out", str(out), "--metrics-after", str(tmp_path / "after"))
    assert code == 1 and "mean acceptance length 2.00" in msg, msg
    assert out.exists()  # a divergence still writes the step log


def test_gzipped_scrapes_and_responses_are_read(tmp_path: Path) -> None:
    """Every input of import llamacpp goes through the shared opener, not only the log."""
    log = tmp_path / "server.log.gz"
    log.write_bytes(gzip.compress(server_log(["accepted  2/ 4 draft tokens"], 4, 2).encode()))
    counts = {"num_drafts": 1, "num_draft_tokens": 4, "num_accepted_tokens": 2, "per_pos": [1, 1]}
    (tmp_path / "after.gz").write_bytes(gzip.compress(metrics_text(counts).encode()))
    responses = [{"timings": {"draft_n": 4, "draft_n_accepted": 2}}]
    (tmp_path / "resp.gz").write_bytes(gzip.compress(json.dumps(responses).encode()))
    out = tmp_path / "o.ndjson"
    code, text = run(
        str(log),
        "--out",
        str(out),
        "--metrics-after",
        str(tmp_path / "after.gz"),
        "--responses",
        str(tmp_path / "resp.gz"),
    )
    assert code == 0, text
    assert "1 verification steps" in text


@pytest.mark.parametrize("name", ["mamba", "noise05", "same", "unrelated", "vllm-workload"])
def test_every_committed_capture_summary_is_consistent(name: str) -> None:
    """The real llama-server captures of tests/fixtures/llamacpp (llama.cpp 0.5.0-dev, commit
    0c1e570: the 'mean len' layout, restore-and-replay pairs in mamba) pass every check."""
    log = Path(__file__).parent.parent / "fixtures" / "llamacpp" / f"{name}.server.log"
    code, out = run(str(log))
    assert code == 0, out
    assert " 0 violations" in out and "(mean-len)" in out


def test_out_naming_an_input_is_refused(tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    text = server_log(["accepted  2/ 4 draft tokens"], 4, 2)
    log.write_text(text)
    link = tmp_path / "link.ndjson"
    link.symlink_to(log)
    for out in (log, link):
        code, msg = run(str(log), "--out", str(out), "--engine-version", "0.5.0")
        assert code == 2 and "is an input" in msg, msg
    assert log.read_text() == text
