"""Streaming replay (engine_bridge/replay/dispatch.py): agreement, reports, options, end checks."""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from prometheus_client import CollectorRegistry, Counter, generate_latest
from spectally.engine_bridge import synth
from spectally.engine_bridge.cli import replay
from spectally.engine_bridge.replay.dispatch import Replayer, render_summary, replay_file
from spectally.engine_bridge.steplog.records import parse_line

ROOT = Path(__file__).parents[2]
EXAMPLE = ROOT / "engine_bridge" / "examples" / "step-log-async-eagle-xgrammar.ndjson"
FIXTURES = sorted((ROOT / "tests" / "fixtures" / "vllm").glob("*.ndjson*"))
TRACES = ROOT / "tests" / "traces"


def write(
    tmp_path: Path, records: list[dict[str, Any]], name: str = "log.ndjson", complete: bool = True
) -> Path:
    """The log; ``complete`` ends it with the totals record an engine writes at shutdown (the
    sum of its step_stats), so that it is judged whole."""
    path = tmp_path / name
    if complete and records and records[0]["record"] == "header":
        records = [*records, totals_of(records)]
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def totals_of(records: list[dict[str, Any]]) -> dict[str, Any]:
    k = records[0]["num_speculative_tokens"]
    sums = {"num_drafts": 0, "num_draft_tokens": 0, "num_accepted_tokens": 0}
    per_pos = [0] * k
    for r in records:
        if r["record"] == "step_stats":
            for name in sums:
                sums[name] += r[name]
            step_pos = r["num_accepted_tokens_per_pos"]
            per_pos = [a + b for a, b in zip(per_pos, step_pos, strict=True)]
    return {"record": "totals", "source": "test", **sums, "num_accepted_tokens_per_pos": per_pos}


def header(**kw: Any) -> dict[str, Any]:
    h = {
        "record": "header",
        "schema_version": 1,
        "engine": "vllm",
        "engine_version": "0.32.0",
        "num_speculative_tokens": 4,
        "scheduling": "async",
        "spec_method": "eagle",
        "structured_outputs_backend": "xgrammar",
        "adaptive_verification": True,
        "drop_stale_output": False,
    }
    h.update(kw)
    return h


def block(step: int, rid: str, **kw: Any) -> dict[str, Any]:
    b = {
        "record": "request_step",
        "step": step,
        "request": rid,
        "proposed": 4,
        "padding": 0,
        "grammar_valid": None,
        "scheduled": 4,
        "invalid": None,
        "verified": None,
        "sampled": 1,
        "accepted": 0,
        "outcome": "applied",
    }
    b.update(kw)
    return b


def stats(step: int, drafts: int, tokens: int, accepted: int, per_pos: list[int]) -> dict[str, Any]:
    return {
        "record": "step_stats",
        "step": step,
        "num_drafts": drafts,
        "num_draft_tokens": tokens,
        "num_accepted_tokens": accepted,
        "num_accepted_tokens_per_pos": per_pos,
    }


def add(rid: str, structured: bool = False, step: int = 1) -> dict[str, Any]:
    return {
        "record": "request",
        "step": step,
        "request": rid,
        "event": "add",
        "structured": structured,
    }


def test_the_rfc_row(tmp_path: Path) -> None:
    """Async + AV, k=4, grammar rejects the last 2: drafted 4, verified 3, accepted 1; vLLM 0.32
    reports 2 drafted (less than verified)."""
    path = write(
        tmp_path,
        [
            header(),
            add("r", structured=True),
            block(2, "r", grammar_valid=2, invalid=2, verified=3, sampled=2, accepted=1),
            stats(2, 1, 2, 1, [1, 0, 0, 0]),
        ],
    )
    result = replay_file(str(path), progress=False)
    assert result.status == "agree"
    rfc = result.summary["totals"]["rfc"]
    legacy = result.summary["totals"]["vllm-legacy"]
    assert (rfc["drafted"], rfc["verified"], rfc["accepted"]) == (4, 3, 1)
    assert (legacy["drafted"], legacy["accepted"], legacy["spec_steps"]) == (2, 1, 1)
    shift = result.summary["shift"]
    assert shift["acceptance_rate"]["why"] == (
        "acceptance rate 0.50 → 0.25: 2 grammar-invalid drafts now count as drafted"
    )


@pytest.mark.parametrize("path", FIXTURES, ids=lambda p: p.name)
def test_recorded_vllm_logs_replay_clean(path: Path) -> None:
    result = replay_file(str(path), progress=False)
    assert result.status == "agree", "\n".join(d.render() for d in result.divergences)
    assert result.summary["checked"] > 0


def test_bundled_example_replays_clean_with_json_output() -> None:
    result = CliRunner().invoke(replay, [str(EXAMPLE), "--json"])
    assert result.exit_code == 0, result.output
    payload = json.loads(result.stdout)
    assert payload["status"] == "agree"
    assert payload["summary"]["agreement_percent"] == 100.0
    assert payload["summary"]["records"] == len(EXAMPLE.read_text().splitlines())
    assert set(payload["summary"]["metrics"]) == {"vllm-legacy", "rfc"}


@pytest.mark.parametrize("mode", ["sync", "async"])
@pytest.mark.parametrize("av", [False, True])
def test_synthetic_logs_agree(tmp_path: Path, mode: str, av: bool) -> None:
    """synth/ computes step_stats with its own transcription of vLLM's rule: the reference's
    vllm-legacy profile must agree with it everywhere."""
    path = tmp_path / "s.ndjson"
    path.write_bytes(b"".join(synth.lines(1500, mode=mode, av=av, seed=11)))
    result = replay_file(str(path), progress=False)
    assert result.status == "agree", "\n".join(d.render() for d in result.divergences)
    assert result.summary["records_by_kind"]["totals"] == 1


def test_finished_requests_are_dropped_from_memory() -> None:
    replayer = Replayer("synthetic")
    for n, raw in enumerate(synth.lines(2500, batch=16, mean_steps=5, seed=4), start=1):
        replayer.feed(n, parse_line("synthetic", n, raw[:-1], True))
    replayer.finish()
    assert replayer.engine is not None
    assert replayer.tally.requests > 100
    assert len(replayer.engine.requests) <= 16  # only the running batch is kept
    assert not replayer.divergences


def test_gzip_and_stdin(tmp_path: Path) -> None:
    text = EXAMPLE.read_bytes()
    gz = tmp_path / "example.log"  # no .gz suffix: recognised by its magic bytes
    gz.write_bytes(gzip.compress(text))
    assert replay_file(str(gz), progress=False).status == "agree"
    result = CliRunner().invoke(replay, ["-", "--json"], input=text)
    assert result.exit_code == 0
    assert json.loads(result.stdout)["path"] == "-"


def _two_divergences(tmp_path: Path) -> Path:
    return write(
        tmp_path,
        [
            header(scheduling="sync", adaptive_verification=False),
            add("a"),
            add("b"),
            block(2, "a", sampled=3, accepted=2),
            block(2, "b", sampled=2, accepted=1),
            stats(2, 2, 8, 9, [2, 1, 0, 0]),
            block(3, "a", sampled=2, accepted=1),
            stats(3, 1, 3, 1, [1, 0, 0, 0]),
        ],
        complete=False,
    )


def test_first_divergence_stops_and_keep_going_reports_more(tmp_path: Path) -> None:
    path = _two_divergences(tmp_path)
    first = CliRunner().invoke(replay, [str(path)])
    assert first.exit_code == 1
    assert first.stdout.startswith(f"{path}:6:1: divergence (step_stats): num_accepted_tokens")
    assert "DIVERGE (1 shown)" in first.stdout
    both = CliRunner().invoke(replay, [str(path), "--keep-going", "5"])
    assert both.exit_code == 1
    assert f"{path}:8:1: divergence (step_stats): num_draft_tokens" in both.stdout
    assert "DIVERGE (2 shown)" in both.stdout
    assert "agreement 60.00% (3 of 5 checks)" in both.stdout


def test_divergence_report_shows_counters_and_state(tmp_path: Path) -> None:
    result = replay_file(str(_two_divergences(tmp_path)), progress=False)
    d = result.divergences[0]
    assert (d.line, d.kind, d.step) == (6, "step_stats", 2)
    assert ("num_accepted_tokens", 3, 9) in d.rows
    text = d.render()
    assert "num_accepted_tokens          3             9   <-- differs" in text
    assert "line 4: 'a' -> 1/4/2; unstructured, active; no open block" in text


@pytest.mark.parametrize("reference", [False, True])
def test_the_options_object_and_its_fields_by_name_replay_alike(
    tmp_path: Path, reference: bool
) -> None:
    from spectally.engine_bridge.replay.options import ReplayOptions

    path = str(_two_divergences(tmp_path))
    options = ReplayOptions(max_divergences=2, reference=reference)
    by_object = replay_file(path, options, progress=False)
    by_name = replay_file(path, progress=False, max_divergences=2, reference=reference)
    assert len(by_object.divergences) == len(by_name.divergences) == 2
    assert [d.render() for d in by_object.divergences] == [d.render() for d in by_name.divergences]
    # a field given by name overrides the object's
    assert len(replay_file(path, options, progress=False, max_divergences=1).divergences) == 1


def test_a_step_without_step_stats_is_reported_at_its_last_block(tmp_path: Path) -> None:
    """The engine wrote no step_stats for a step whose blocks the reference counts: the
    divergence names the step's last block (where the record should have followed) and
    lists both blocks."""
    records = [
        header(),
        add("a"),
        add("b"),
        block(1, "a", sampled=2, accepted=1),
        block(1, "b"),
        block(2, "a"),
        stats(2, 1, 4, 0, [0, 0, 0, 0]),
    ]
    result = replay_file(str(write(tmp_path, records)), progress=False)
    d = result.divergences[0]
    assert (d.line, d.kind, d.step) == (5, "step_stats", 1)
    assert d.reason.startswith("the engine reported no step_stats for this step")
    assert ("num_drafts", 2, 0) in d.rows
    text = d.render()
    assert "line 4: 'a' -> 1/4/1;" in text and "line 5: 'b' -> 1/4/0;" in text


def _prometheus(values: dict[str, float], per_pos: list[int], engine: str = "0") -> str:
    registry = CollectorRegistry()
    labels = {"model_name": "m", "engine": engine}
    for name, value in values.items():
        c = Counter(f"vllm:spec_decode_{name}", name, list(labels), registry=registry)
        c.labels(**labels).inc(value)
    pos = Counter(
        "vllm:spec_decode_num_accepted_tokens_per_pos",
        "per pos",
        [*labels, "position"],
        registry=registry,
    )
    for i, v in enumerate(per_pos):
        pos.labels(**labels, position=str(i)).inc(v)
    return generate_latest(registry).decode()


def test_metrics_scrape_is_compared(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        [
            header(scheduling="sync", adaptive_verification=False),
            add("a"),
            block(2, "a", sampled=3, accepted=2),
            stats(2, 1, 4, 2, [1, 1, 0, 0]),
        ],
    )
    good = tmp_path / "good.prom"
    good.write_text(
        _prometheus(
            {"num_drafts": 1, "num_draft_tokens": 4, "num_accepted_tokens": 2}, [1, 1, 0, 0]
        )
    )
    assert CliRunner().invoke(replay, [str(path), "--metrics", str(good)]).exit_code == 0
    bad = tmp_path / "bad.prom"
    bad.write_text(
        _prometheus(
            {"num_drafts": 2, "num_draft_tokens": 4, "num_accepted_tokens": 2}, [1, 1, 0, 0]
        )
    )
    result = CliRunner().invoke(replay, [str(path), "--metrics", str(bad)])
    assert result.exit_code == 1
    assert result.stdout.startswith(f"{bad}:")
    assert "divergence (metrics): the final Prometheus scrape" in result.stdout
    assert "num_drafts                   1             2   <-- differs" in result.stdout


def test_check_invariants_flag(tmp_path: Path) -> None:
    path = TRACES / "agree" / "async_stale_counted.ndjson"
    assert CliRunner().invoke(replay, [str(path), "--check-invariants"]).exit_code == 0


def test_no_progress_bar_when_stderr_is_not_a_terminal() -> None:
    result = CliRunner().invoke(replay, [str(EXAMPLE)])
    assert result.exit_code == 0
    assert result.stderr == ""


def test_open_blocks_are_reported(tmp_path: Path) -> None:
    path = TRACES / "diverge" / "stale_without_preempt.ndjson"
    result = replay_file(str(path), progress=False)
    assert result.summary["open_blocks"] == ["request 'a' block@3 after VERIFY"]


def test_help_documents_exit_codes() -> None:
    text = CliRunner().invoke(replay, ["--help"]).output
    assert "0 every log agrees" in text and "1 a divergence" in text and "2 bad input" in text


def test_progress_bar_counts_every_record(capsys: pytest.CaptureFixture[str]) -> None:
    """The progress bar (on when stderr is a terminal, or asked for) ends at the record count."""
    log = ROOT / "engine_bridge" / "examples" / "vllm-0.32-cpu-draft-model-so-json.ndjson.gz"
    result = replay_file(str(log), progress=True)
    assert result.status == "agree" and result.summary["records"] == 224
    err = capsys.readouterr().err
    assert "224 records" in err.replace("\r", "\n").splitlines()[-1]


# -- hostile input at the replay level ---------------------------------------------------------


def test_a_log_cut_at_a_record_boundary_is_incomplete(tmp_path: Path) -> None:
    lines = list(synth.lines(400, batch=8, seed=2))
    cut = next(i for i in range(len(lines) - 1, 0, -1) if b'"request_step"' in lines[i])
    path = tmp_path / "cut.ndjson"
    path.write_bytes(b"".join(lines[: cut + 1]))  # ends inside a step, before its step_stats
    for reference in (False, True):
        result = replay_file(str(path), progress=False, reference=reference)
        assert result.status == "incomplete" and result.exit_code == 3
        assert not result.divergences
        assert result.summary["incomplete"]["open_requests"] == 8
        text = render_summary(result)
        assert "INCOMPLETE" in text and "8 requests still open" in text
        assert "step_stats not compared (the log ends before them)" in text
    out = CliRunner().invoke(replay, [str(path)])
    assert out.exit_code == 3


def test_a_divergence_in_a_corrupt_gzip_is_bad_input(tmp_path: Path) -> None:
    """The verdict is trusted only once the stream read to its end (CRC included)."""
    lines = list(synth.lines(3000, batch=8, seed=3))
    at = next(i for i, raw in enumerate(lines) if b'"step_stats"' in raw)
    lines[at] = lines[at].replace(b'"num_drafts":', b'"num_drafts":1', 1)  # diverges early
    data = bytearray(gzip.compress(b"".join(lines)))
    whole = tmp_path / "whole.ndjson.gz"
    whole.write_bytes(bytes(data))
    assert replay_file(str(whole), progress=False).status == "diverge"
    data[-6] ^= 0xFF  # the CRC at the end
    broken = tmp_path / "broken.ndjson.gz"
    broken.write_bytes(bytes(data))
    for reference in (False, True):
        result = replay_file(str(broken), progress=False, reference=reference)
        assert result.status == "bad_input", result.status
        assert "gzip" in str(result.bad_input)


def test_request_step_after_its_step_stats_has_one_exit_code(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        [
            header(scheduling="sync", adaptive_verification=False),
            add("a"),
            add("b"),
            block(2, "a", sampled=3, accepted=2),
            stats(2, 1, 4, 2, [1, 1, 0, 0]),
            block(2, "b", sampled=2, accepted=1),
        ],
    )
    for args in ([], ["--keep-going", "5"], ["--reference"]):
        out = CliRunner().invoke(replay, [str(path), *args])
        assert out.exit_code == 2, out.output
        assert "request_step for step 2 after that step's step_stats" in out.output


def test_ctrl_c_is_not_swallowed(monkeypatch: pytest.MonkeyPatch) -> None:
    def interrupted(*args: Any, **kwargs: Any) -> Any:
        raise KeyboardInterrupt

    from spectally.engine_bridge.replay.columnar import reader

    monkeypatch.setattr(reader, "open_log", interrupted)
    with pytest.raises(KeyboardInterrupt):
        replay_file(str(EXAMPLE), progress=False)

    def lines() -> Any:
        yield (1, EXAMPLE.read_bytes().splitlines()[0], True)
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        replay_file("x", progress=False, lines=lines())


@pytest.mark.parametrize(
    ("log", "own"),
    [
        ("tests/fixtures/llamacpp/noise05.steps.ndjson.gz", "llama.cpp"),
        ("tests/fixtures/vllm/sim-vllm-0.34.0-sync-so-json-k4.ndjson.gz", "vllm-0.34"),
        ("tests/fixtures/vllm/draft-noise05-k3-greedy.ndjson.gz", "vllm-legacy"),
    ],
)
def test_report_titles_the_engines_column_with_the_logs_profile(log: str, own: str) -> None:
    """The text names the profile the log was counted with; the JSON key stays put."""
    result = replay_file(str(ROOT / log), progress=False)
    text = render_summary(result)
    assert f"  totals {own:>27}      rfc" in text
    assert f"  metrics {own:>26}      rfc" in text
    assert f"  shift {own} → rfc:" in text
    assert set(result.summary["totals"]) == {"vllm-legacy", "rfc"}
