"""Importers of what stock vLLM 0.32 emits, fed real-format artifacts: Prometheus text written by
prometheus_client itself (as vLLM's SpecDecodingProm exposes it), log lines formatted with
SpecDecodingLogging's format string, per-request metrics as RequestOutput / OpenAI JSON."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from prometheus_client import CollectorRegistry, Counter, generate_latest
from spectally.engine_bridge.cli import import_group
from spectally.engine_bridge.importers import logs, prometheus, requests
from spectally.engine_bridge.importers.findings import NOTE, OK, VIOLATION

# vLLM 0.32 v1/spec_decode/metrics.py SpecDecodingLogging.log
LOG_FORMAT = (
    "SpecDecoding metrics: Mean acceptance length: %.2f, Accepted throughput: %.2f tokens/s,"
    " Drafted throughput: %.2f tokens/s, Accepted: %d tokens, Drafted: %d tokens,"
    " Per-position acceptance rate: %s, Avg Draft acceptance rate: %.1f%%"
)
PREFIX = "(EngineCore_DP0 pid=4242) INFO 11-29 16:40:%02d [metrics.py:137] "


def vllm_log_line(drafts: int, drafted: int, per_pos: list[int], seconds: float, at: int) -> str:
    accepted = sum(per_pos)
    rates = ", ".join(f"{a / drafts:.3f}" for a in per_pos)
    rate = accepted / drafted * 100 if drafted > 0 else float("nan")
    return PREFIX % at + LOG_FORMAT % (
        1 + accepted / drafts,
        accepted / seconds,
        drafted / seconds,
        accepted,
        drafted,
        rates,
        rate,
    )


class Engine:
    """A vLLM engine's spec-decode Prometheus counters (same names, labels, types)."""

    def __init__(self, k: int) -> None:
        self.registry = CollectorRegistry()
        labels = ["model_name", "engine"]
        self.drafts = Counter(
            "vllm:spec_decode_num_drafts", "drafts", labels, registry=self.registry
        )
        self.tokens = Counter(
            "vllm:spec_decode_num_draft_tokens", "draft tokens", labels, registry=self.registry
        )
        self.accepted = Counter(
            "vllm:spec_decode_num_accepted_tokens", "accepted", labels, registry=self.registry
        )
        self.per_pos = Counter(
            "vllm:spec_decode_num_accepted_tokens_per_pos",
            "per pos",
            [*labels, "position"],
            registry=self.registry,
        )
        self.k = k

    def observe(self, drafted: int, accepted: int, engine: str = "0") -> None:
        """SpecDecodingStats.observe_draft, then the Prometheus increment."""
        lab = {"model_name": "m", "engine": engine}
        self.drafts.labels(**lab).inc(1)
        self.tokens.labels(**lab).inc(drafted)
        self.accepted.labels(**lab).inc(accepted)
        for i in range(self.k):
            self.per_pos.labels(**lab, position=str(i)).inc(1 if i < accepted else 0)

    def scrape(self) -> str:
        return generate_latest(self.registry).decode()


def verdicts(findings: list[Any]) -> dict[str, int]:
    return {v: sum(1 for f in findings if f.verdict == v) for v in (OK, NOTE, VIOLATION)}


# -- Prometheus --------------------------------------------------------------------------------


def test_prometheus_scrapes_of_a_consistent_engine(tmp_path: Path) -> None:
    eng = Engine(3)
    path = tmp_path / "metrics.txt"
    text = ""
    for drafted, accepted in [(3, 2), (3, 0), (2, 2), (3, 3)]:
        eng.observe(drafted, accepted)
        eng.observe(3, 1, engine="1")
        text += eng.scrape()
    path.write_text(text)
    scrapes = prometheus.read_scrapes([str(path)])
    assert len(scrapes) == 4
    assert prometheus.spec_totals(scrapes[-1], 3) == (8, 23, 11, [7, 3, 1])
    assert prometheus.spec_totals(scrapes[-1], 3, engine="1") == (4, 12, 4, [4, 0, 0])
    findings = prometheus.check_scrapes(scrapes)
    assert verdicts(findings)[VIOLATION] == 0
    # per scrape and engine, per interval, and the file's counter totals
    assert verdicts(findings)[OK] == 4 * 2 + 3 * 2 + 1


def _tamper(text: str, sample: str, value: str) -> str:
    lines = text.splitlines()
    for i, line in enumerate(lines):
        if line.startswith(sample):
            lines[i] = line.rsplit(" ", 1)[0] + " " + value
    return "\n".join(lines) + "\n"


def test_prometheus_violations_name_the_line(tmp_path: Path) -> None:
    eng = Engine(3)
    eng.observe(3, 2)
    eng.observe(3, 1)
    first = eng.scrape()
    eng.observe(3, 3)
    second = _tamper(eng.scrape(), 'vllm:spec_decode_num_drafts_total{engine="0"', "1.0")
    path = tmp_path / "metrics.txt"
    path.write_text(
        _tamper(
            first,
            'vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",'
            'model_name="m",position="2"}',
            "2.0",
        )
        + second
    )
    findings = [f for f in prometheus.check_files([str(path)]) if f.verdict == VIOLATION]
    checks = {f.check for f in findings}
    assert "sum(per_pos)==accepted" in checks
    assert "per_pos non-increasing" in checks
    assert "monotone" in checks
    monotone = next(f for f in findings if f.check == "monotone")
    assert (
        path.read_text()
        .splitlines()[monotone.line - 1]
        .startswith("vllm:spec_decode_num_drafts_total")
    )
    assert "num_drafts 2 → 1" in monotone.message


def test_prometheus_restart_is_a_note(tmp_path: Path) -> None:
    first = Engine(2)
    first.observe(2, 1)
    second = Engine(2)  # a new process: counters restart with a new _created timestamp
    path = tmp_path / "m.txt"
    text = first.scrape()
    second.observe(1, 0)
    later = second.scrape().replace("_created{", "_created{")
    # make sure the timestamps differ
    later = (
        "\n".join(
            line.rsplit(" ", 1)[0] + " 9.9e+09" if "_created{" in line else line
            for line in later.splitlines()
        )
        + "\n"
    )
    path.write_text(text + later)
    findings = prometheus.check_files([str(path)])
    assert any(f.verdict == NOTE and f.check == "counter reset" for f in findings)
    assert verdicts(findings)[VIOLATION] == 0


def test_prometheus_cli_and_bad_line(tmp_path: Path) -> None:
    eng = Engine(2)
    eng.observe(2, 1)
    path = tmp_path / "m.txt"
    path.write_text(eng.scrape())
    result = CliRunner().invoke(import_group, ["prometheus", str(path)])
    assert result.exit_code == 0, result.output
    assert "0 violations" in result.stdout
    path.write_text('vllm:spec_decode_num_drafts_total{engine="0" 3\n')
    bad = CliRunner().invoke(import_group, ["prometheus", str(path)])
    assert bad.exit_code == 2
    assert bad.stderr.startswith(f"{path}:1:1: bad Prometheus sample line")


# -- log lines ---------------------------------------------------------------------------------


def test_log_lines_as_vllm_prints_them(tmp_path: Path) -> None:
    path = tmp_path / "vllm.log"
    path.write_text(
        "INFO 11-29 16:39:58 [llm_engine.py:200] starting\n"
        + vllm_log_line(10, 40, [8, 5, 2, 0], 10.0, 0)
        + "\n"
        + vllm_log_line(7, 28, [7, 7, 6, 5], 10.0, 10)
        + "\n"
        + vllm_log_line(3, 12, [1, 0, 0, 0], 9.7, 20)
        + "\n"
    )
    lines = logs.read_lines(str(path))
    assert [x.line for x in lines] == [2, 3, 4]
    assert lines[0].per_pos == (0.8, 0.5, 0.2, 0.0)
    assert lines[0].mean == 2.5 and lines[0].rate == 37.5
    findings = logs.check_files([str(path)])
    # three lines, the two intervals between their timestamps, and the file's log totals
    assert verdicts(findings) == {OK: 6, NOTE: 0, VIOLATION: 0}
    assert "num_drafts (not printed) in 10" in findings[0].message
    assert findings[0].message.startswith("v1-mean-first (vLLM 0.10.2-0.34)")
    assert "interval ≈ 10.0s" in findings[0].message


def test_rounding_is_tolerated_and_explained() -> None:
    # 1/3 acceptance per position rounds down three times: mean 2.00 vs 1 + 0.333*3 = 1.999
    x = logs.parse_line("l", 1, vllm_log_line(3, 9, [3, 1, 1, 1], 1.0, 0))
    assert x is not None
    assert verdicts(logs.check_line(x))[VIOLATION] == 0


@pytest.mark.parametrize(
    ("edit", "check"),
    [
        (
            ("Mean acceptance length: 2.50", "Mean acceptance length: 2.60"),
            "mean length vs per-position",
        ),
        (
            ("acceptance rate: 37.5%", "acceptance rate: 38.5%"),
            "acceptance rate vs Accepted/Drafted",
        ),
        (("0.800, 0.500", "0.500, 0.800"), "per-position non-increasing"),
        (("Accepted: 15 tokens", "Accepted: 45 tokens"), "accepted<=drafted"),
        (
            ("Accepted throughput: 1.50", "Accepted throughput: 3.00"),
            "throughputs vs Accepted/Drafted",
        ),
    ],
)
def test_log_line_violations(edit: tuple[str, str], check: str) -> None:
    text = vllm_log_line(10, 40, [8, 5, 2, 0], 10.0, 0)
    assert edit[0] in text
    x = logs.parse_line("l", 7, text.replace(*edit))
    assert x is not None
    bad = [f for f in logs.check_line(x) if f.verdict == VIOLATION]
    assert check in {f.check for f in bad}
    assert all(f.line == 7 for f in bad)


def test_mean_message_states_the_tolerance() -> None:
    text = vllm_log_line(10, 40, [8, 5, 2, 0], 10.0, 0).replace("2.50", "2.60", 1)
    x = logs.parse_line("l", 1, text)
    assert x is not None
    msg = next(f.message for f in logs.check_line(x) if f.check == "mean length vs per-position")
    assert msg == (
        "mean 2.60 but 1 + Σ per-position = 2.500; off by 0.1000 > ±0.0070 (%.2f half-ulp"
        " 0.005 + 4 * %.3f half-ulp 0.0005)"
    )


def test_logs_reconcile_with_prometheus(tmp_path: Path) -> None:
    eng = Engine(4)
    for _ in range(10):
        eng.observe(4, 2)
    prom = tmp_path / "m.txt"
    prom.write_text(eng.scrape())
    log = tmp_path / "vllm.log"
    log.write_text(vllm_log_line(6, 24, [6, 6, 0, 0], 10.0, 0) + "\n")
    result = CliRunner().invoke(import_group, ["logs", str(log), "--metrics", str(prom), "-q"])
    assert result.exit_code == 0, result.output
    assert "NOTE logs vs Prometheus" in result.stdout
    assert "counters are ahead by 8 accepted / 16 drafted" in result.stdout


def test_garbled_log_line_is_bad_input(tmp_path: Path) -> None:
    log = tmp_path / "vllm.log"
    log.write_text("x\nINFO SpecDecoding metrics: Mean acceptance length: oops\n")
    result = CliRunner().invoke(import_group, ["logs", str(log)])
    assert result.exit_code == 2
    assert result.stderr.strip() == (
        f"{log}:2:52: Mean acceptance length is 'oops', not a value vLLM prints there (%.2f) in"
        " the layout v1-mean-first (vLLM 0.10.2-0.34)"
    )


# -- per-request metrics ------------------------------------------------------------------------


def request_metrics(
    per_step: list[tuple[int, int]], k: int, detailed: bool = True
) -> dict[str, Any]:
    """What vLLM 0.32 reports for a request whose counted steps were (accepted, drafted)."""
    steps = len(per_step)
    accepted = sum(a for a, _ in per_step)
    drafted = sum(d for _, d in per_step)
    hist = [0] * (k + 1)
    for a, _ in per_step:
        hist[a] += 1
    m: dict[str, Any] = {
        "num_spec_steps": steps,
        "num_draft_tokens": drafted,
        "num_accepted_draft_tokens": accepted,
        "acceptance_histogram": hist,
        "mean_acceptance_length": 1 + accepted / steps if steps else 1.0,
        "draft_acceptance_rate": accepted / drafted if drafted else 0.0,
        "num_spec_tokens": k,
    }
    if detailed:
        m["per_step_accepted"] = [a for a, _ in per_step]
        m["per_step_drafted"] = [d for _, d in per_step]
    return m


def test_offline_request_outputs_with_detailed_steps(tmp_path: Path) -> None:
    outputs = [
        {
            "request_id": "0",
            "outputs": [
                {"text": "x", "spec_decode_metrics": request_metrics([(2, 3), (0, 3), (3, 3)], 3)}
            ],
        },
        # async + SO: a step whose drafts were all grammar-invalid counts with 0 drafted
        {
            "request_id": "1",
            "outputs": [{"text": "y", "spec_decode_metrics": request_metrics([(1, 2), (0, 0)], 3)}],
        },
        {
            "request_id": "2",
            "outputs": [{"text": "z", "spec_decode_metrics": request_metrics([], 3)}],
        },
    ]
    path = tmp_path / "outputs.json"
    path.write_text(json.dumps(outputs, indent=2))
    findings = requests.check_files([str(path)])
    assert verdicts(findings) == {OK: 3, NOTE: 0, VIOLATION: 0}
    starts = [i for i, line in enumerate(path.read_text().splitlines(), 1) if line == "  {"]
    assert [f.line for f in findings] == starts
    assert "3 detailed steps replayed through the reference" in findings[0].message


def test_many_detailed_requests_through_the_command(tmp_path: Path) -> None:
    """Enough detailed steps for the columnar replay (replay/detailed.py): every request is
    replayed, and one whose last step accepts a token after an all-invalid step is named."""
    steps = [(2, 3), (0, 3), (0, 0), (3, 3)] * 4
    metrics = request_metrics(steps, 3)
    lines = [
        json.dumps({"id": f"cmpl-{i}", "metrics": {"speculative_decoding": metrics}})
        for i in range(300)
    ]
    bad = request_metrics([*steps[:-1], (1, 0)], 3)  # its sums agree: only the replay sees it
    lines[123] = json.dumps({"id": "cmpl-bad", "metrics": {"speculative_decoding": bad}})
    path = tmp_path / "responses.jsonl"
    path.write_text("\n".join(lines) + "\n")
    result = CliRunner().invoke(import_group, ["requests", "--json", str(path)])
    assert result.exit_code == 1, result.output
    findings = json.loads(result.stdout)
    bad_ones = [f for f in findings if f["verdict"] == VIOLATION]
    assert [(f["line"], f["check"]) for f in bad_ones] == [(124, "detailed replay")]
    assert "cmpl-bad: detailed step 16: the reference rejects" in bad_ones[0]["message"]
    replayed = [f for f in findings if "16 detailed steps replayed" in f["message"]]
    assert len(replayed) == 299


def test_openai_responses_ndjson_and_reconciliation(tmp_path: Path) -> None:
    eng = Engine(3)
    per_request = [[(2, 3), (1, 3)], [(3, 3)]]
    lines = []
    for i, steps in enumerate(per_request):
        for a, d in steps:
            eng.observe(d, a)
        lines.append(
            json.dumps(
                {
                    "id": f"cmpl-{i}",
                    "object": "text_completion",
                    "metrics": {"speculative_decoding": request_metrics(steps, 3, detailed=False)},
                }
            )
        )
    path = tmp_path / "responses.ndjson"
    path.write_text("\n".join(lines) + "\n")
    prom = tmp_path / "m.txt"
    prom.write_text(eng.scrape())
    findings = requests.check_files([str(path)], str(prom))
    assert verdicts(findings)[VIOLATION] == 0
    assert {f.check for f in findings if f.path == str(prom)} == {
        "Σ num_spec_steps == num_drafts",
        "Σ num_draft_tokens == num_draft_tokens",
        "Σ num_accepted_draft_tokens == num_accepted_tokens",
        "Σ histogram tails == accepted per position",
    }
    eng.observe(3, 3)  # a request that never reported (aborted)
    prom.write_text(eng.scrape())
    bad = [f for f in requests.check_files([str(path)], str(prom)) if f.verdict == VIOLATION]
    assert len(bad) == 4
    assert "2 requests sum to 3, the counters say 4" in bad[0].message


@pytest.mark.parametrize(
    ("field", "value", "check"),
    [
        ("num_spec_steps", 4, "num_spec_steps == Σ histogram"),
        ("num_accepted_draft_tokens", 6, "accepted == Σ i·histogram[i]"),
        ("mean_acceptance_length", 2.0, "mean_acceptance_length"),
        ("draft_acceptance_rate", 0.9, "draft_acceptance_rate"),
        ("per_step_drafted", [3, 3, 4], "detailed replay"),
        ("acceptance_histogram", [1, 0, 1], "histogram length"),
    ],
)
def test_request_metric_violations(field: str, value: Any, check: str) -> None:
    m = request_metrics([(2, 3), (0, 3), (3, 3)], 3)
    m[field] = value
    r = requests.RequestMetrics("f", 1, "r", m)
    replay = requests.replay_steps(r) if requests.replayable(r) else None
    assert check in {f.check for f in requests.check_request(r, replay) if f.verdict == VIOLATION}


def test_requests_bad_json(tmp_path: Path) -> None:
    path = tmp_path / "r.json"
    path.write_text('[{"request_id": "0", "outputs": []},\n {"request_id": }]')
    result = CliRunner().invoke(import_group, ["requests", str(path)])
    assert result.exit_code == 2
    assert result.stderr.strip() == f"{path}:2:17: bad JSON: Expecting value"


RECORDED_LOGS = [
    p
    for p in sorted((Path(__file__).parents[1] / "fixtures" / "vllm").glob("*.log"))
    if logs.MARKER in p.read_text(errors="replace")
]


@pytest.mark.parametrize("path", RECORDED_LOGS, ids=lambda p: p.name)
def test_recorded_vllm_log_lines_are_consistent(path: Path) -> None:
    findings = logs.check_files([str(path)])
    assert [f.render() for f in findings if f.verdict == VIOLATION] == []


# Artifacts of real served vLLM runs (scripts/capture_vllm.sh, serve_capture.py): the server's
# stdout, its /metrics scrapes and the per-request metrics of every response.
SERVED_RUNS = sorted(
    p.name.removesuffix(".prom")
    for p in (Path(__file__).parents[1] / "fixtures" / "vllm").glob("serve-*.prom")
)


def test_served_runs_are_committed() -> None:
    assert len(SERVED_RUNS) >= 3


@pytest.mark.parametrize("run", SERVED_RUNS)
def test_recorded_vllm_artifacts_are_consistent(run: str) -> None:
    base = Path(__file__).parents[1] / "fixtures" / "vllm" / run
    runner = CliRunner()
    for args in (
        ["prometheus", f"{base}.prom"],
        ["logs", "--metrics", f"{base}.prom", f"{base}.log"],
        ["requests", "--metrics", f"{base}.prom", f"{base}.requests.jsonl"],
    ):
        result = runner.invoke(import_group, [*args, "--json"])
        assert result.exit_code == 0, (args, result.output)
        findings = json.loads(result.output)
        rows = findings["findings"] if isinstance(findings, dict) else findings
        assert rows and all(row["verdict"] != VIOLATION for row in rows), args
