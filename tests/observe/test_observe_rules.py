"""Prometheus rules from the spec's formulas (docs/observe.md): generated, parsed, equal to the
real run's scrape, and (marker `promtool`) checked and unit-tested by the real promtool on
series replayed from the committed `vllm serve` fixtures."""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
from pathlib import Path

import promql_parser
import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families
from rule_files import MISSHAPEN_RULES, WELL_SHAPED_RULES
from spectally.engine_bridge.observe import promtest, rules
from spectally.engine_bridge.observe.schemes import FORMER_NAMES, SCHEMES
from spectally.engine_bridge.observe.timeline import replay_timeline

FIXTURES = Path(__file__).parents[1] / "fixtures" / "vllm"
SERVE_LOGS = sorted(glob.glob(str(FIXTURES / "serve-*.ndjson.gz")))


def test_every_rule_parses_and_names_are_unique() -> None:
    doc = yaml.safe_load(rules.render())
    names = []
    for group in doc["groups"]:
        for rule in group["rules"]:
            promql_parser.parse(rule["expr"])
            names.append(rule.get("record") or rule["alert"])
    assert len(names) == len(set(names))
    assert "engine:spec_decode_acceptance_rate_backport:rate5m" in names
    assert "SpecDecodeDraftedBelowVerified_rfc" in names
    assert "SpecDecodeVerifiedBelowAccepted_backport" in names


def test_mean_length_falls_back_to_one_and_ratios_stay_nan() -> None:
    """SPEC.md section 6: M4 is 1 with no spec step; M1 is left NaN (0/0), never 0."""
    d = rules.derived(SCHEMES["rfc"], lambda q: f"r_{q}", ("model_name", "engine"))
    assert (
        d["mean_acceptance_length"]
        == "1 + r_accepted / (r_spec_steps > 0) or (r_spec_steps * 0 + 1)"
    )
    assert d["acceptance_rate"] == "r_accepted / r_drafted"
    assert "draft_quality" not in rules.derived(SCHEMES["vllm"], str, ("model_name",))


def _scrape(path: Path) -> dict[tuple[str, str], float]:
    out = {}
    for family in text_string_to_metric_families(path.read_text()):
        for s in family.samples:
            if s.name.endswith("_total"):
                name = FORMER_NAMES.get(s.name, s.name)  # committed scrapes: the former name
                out[(name, s.labels.get("position", ""))] = s.value
    return out


@pytest.mark.parametrize("log", SERVE_LOGS, ids=os.path.basename)
def test_replayed_series_end_at_the_runs_scrape(log: str) -> None:
    """The input series' last values are the counters the real server exported at the end of
    the run (vLLM's own and the backport's), so the tests' series are the run's counters."""
    tl = replay_timeline(log)
    scrape = _scrape(Path(log.replace(".ndjson.gz", ".prom")))
    compared = 0
    for name in ("vllm", "backport"):
        scheme = SCHEMES[name]
        values = promtest.counter_values(scheme, tl.totals[-1])
        for quantity, metric in scheme.counters().items():
            value = values[quantity]
            if isinstance(value, list):
                for i, v in enumerate(value):
                    assert scrape[(metric, str(i))] == v, (metric, i)
                    compared += 1
            else:
                assert scrape[(metric, "")] == value, metric
                compared += 1
    assert compared == (3 + tl.k) + (4 + 3 * tl.k)  # vllm's own counters + the backport's


@pytest.mark.parametrize("log", SERVE_LOGS, ids=os.path.basename)
def test_promtool_tests_have_defined_points(log: str) -> None:
    test = promtest.build_test(replay_timeline(log), "r.yml")
    for t in test["tests"]:
        times = {e["eval_time"] for e in t["promql_expr_test"]}
        assert len(times) >= 2, (t["name"], times)  # one point in the log, one after it


def _promtool() -> str:
    path = shutil.which("promtool")
    if path is None:
        pytest.skip("promtool not found: apt-get install -y prometheus (docs/observe.md)")
    return path


def _run(args: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, cwd=cwd, capture_output=True, text=True, timeout=120)


@pytest.mark.promtool
def test_promtool_check_rules(tmp_path: Path) -> None:
    (tmp_path / "r.yml").write_text(rules.render())
    res = _run([_promtool(), "check", "rules", "r.yml"], tmp_path)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "SUCCESS" in res.stdout


@pytest.mark.promtool
@pytest.mark.parametrize("log", SERVE_LOGS, ids=os.path.basename)
def test_promtool_unit_tests_from_replayed_logs(tmp_path: Path, log: str) -> None:
    promtool = _promtool()
    (tmp_path / "r.yml").write_text(rules.render())
    (tmp_path / "t.yml").write_text(
        promtest.render(promtest.build_test(replay_timeline(log), "r.yml"))
    )
    res = _run([promtool, "test", "rules", "t.yml"], tmp_path)
    assert res.returncode == 0, res.stdout + res.stderr


@pytest.mark.promtool
def test_promtool_catches_a_rule_without_the_plus_one(tmp_path: Path) -> None:
    """The unit tests fail when a formula is wrong (here M4 without its + 1)."""
    promtool = _promtool()
    text = rules.render().replace("expr: 1 + ", "expr: 0 + ")
    (tmp_path / "r.yml").write_text(text)
    tl = replay_timeline(SERVE_LOGS[0])
    (tmp_path / "t.yml").write_text(promtest.render(promtest.build_test(tl, "r.yml")))
    res = _run([promtool, "test", "rules", "t.yml"], tmp_path)
    assert res.returncode != 0
    assert "mean_acceptance_length" in res.stdout + res.stderr


def _rendered(annotations: dict[str, str]) -> dict[str, str]:
    """The annotations as Prometheus renders them for the series of the test below."""
    return {
        k: v.replace("{{ $labels.model_name }}", "m").replace("{{ $labels.engine }}", "0")
        for k, v in annotations.items()
    }


@pytest.mark.promtool
def test_alert_fires_when_verified_exceeds_drafted(tmp_path: Path) -> None:
    """Hand-written series (this proves the rule, not an engine): verified overtakes drafted."""
    promtool = _promtool()
    (tmp_path / "r.yml").write_text(rules.render(["backport"]))
    labels = '{model_name="m", engine="0"}'
    test = {
        "rule_files": ["r.yml"],
        "evaluation_interval": "1m",
        "tests": [
            {
                "interval": "1m",
                "input_series": [
                    {
                        "series": f"spectally:spec_decode_num_drafted_tokens_total{labels}",
                        "values": "0 3 6 6 6 6",
                    },
                    {
                        "series": f"spectally:spec_decode_num_verified_draft_tokens_total{labels}",
                        "values": "0 3 6 9 12 15",
                    },
                    {
                        "series": f"spectally:spec_decode_num_accepted_tokens_total{labels}",
                        "values": "0 1 2 3 4 5",
                    },
                ],
                "alert_rule_test": [
                    {
                        "eval_time": "2m",
                        "alertname": "SpecDecodeDraftedBelowVerified_backport",
                        "exp_alerts": [],
                    },
                    {
                        "eval_time": "5m",
                        "alertname": "SpecDecodeDraftedBelowVerified_backport",
                        "exp_alerts": [
                            {
                                "exp_labels": {
                                    "severity": "critical",
                                    "model_name": "m",
                                    "engine": "0",
                                },
                                "exp_annotations": _rendered(
                                    dict(rules.alert_rules(SCHEMES["backport"])[0].annotations)
                                ),
                            }
                        ],
                    },
                    {
                        "eval_time": "5m",
                        "alertname": "SpecDecodeVerifiedBelowAccepted_backport",
                        "exp_alerts": [],
                    },
                ],
            }
        ],
    }
    (tmp_path / "t.yml").write_text(yaml.safe_dump(test))
    res = _run([promtool, "test", "rules", "t.yml"], tmp_path)
    assert res.returncode == 0, res.stdout + res.stderr


def test_cli_writes_rules_and_promtool_tests(tmp_path: Path) -> None:
    from click.testing import CliRunner
    from spectally.cli import main

    res = CliRunner().invoke(
        main,
        ["rules", "--out", str(tmp_path), "--scheme", "backport", "--tests-from", SERVE_LOGS[0]],
    )
    assert res.exit_code == 0, res.output
    doc = yaml.safe_load((tmp_path / "spectally-rules.yml").read_text())
    assert [g["name"] for g in doc["groups"]] == [
        "spec_decode_backport_recording",
        "spec_decode_backport_alerts",
    ]
    test = yaml.safe_load((tmp_path / "test-serve-draft-noise05-k3-so-json.yml").read_text())
    assert test["rule_files"] == ["spectally-rules.yml"]
    assert [t["name"].split(":")[0] for t in test["tests"]] == ["backport"]
    bad = tmp_path / "bad.ndjson"
    bad.write_text('{"record":"request"}\n')
    assert (
        CliRunner()
        .invoke(main, ["rules", "--out", str(tmp_path), "--tests-from", str(bad)])
        .exit_code
        == 2
    )


def test_family_schemes_rate_their_own_names() -> None:
    """Ray Serve's ray_vllm_ names, llama.cpp's and LMDeploy's (families.py); LMDeploy's drafted
    is configured (k x steps), so no acceptance rate is written for it."""
    doc = yaml.safe_load(rules.render(["ray-rfc", "llamacpp", "lmdeploy"]))
    by_group = {g["name"]: g["rules"] for g in doc["groups"]}
    for records in by_group.values():
        for rule in records:
            promql_parser.parse(rule["expr"])
    ray = {r.get("record"): r["expr"] for r in by_group["spec_decode_ray-rfc_recording"]}
    assert "ray_vllm_spec_decode_num_verified_draft_tokens_total" in str(ray.values())
    assert "vllm:" not in str(ray.values())
    assert "engine:spec_decode_acceptance_rate_ray-rfc:rate5m" in ray
    llama = {r.get("record") for r in by_group["spec_decode_llamacpp_recording"]}
    assert "engine:spec_decode_acceptance_rate_llamacpp:rate5m" in llama
    lmd = {r.get("record"): r["expr"] for r in by_group["spec_decode_lmdeploy_recording"]}
    assert not any("acceptance_rate" in name for name in lmd)
    assert not any("drafted" in name for name in lmd)
    assert "engine:spec_decode_configured_draft_slots_lmdeploy:rate5m" in lmd
    assert "engine:spec_decode_mean_acceptance_length_lmdeploy:rate5m" in lmd


def test_default_rules_are_vllms_schemes() -> None:
    doc = yaml.safe_load(rules.render())
    assert [g["name"].rsplit("_", 1)[0] for g in doc["groups"]][::2] == [
        f"spec_decode_{name}" for name in SCHEMES
    ]


def test_cli_writes_family_rules_and_refuses_their_replay(tmp_path: Path) -> None:
    from click.testing import CliRunner
    from spectally.cli import main
    from spectally.observe_cli import FAMILY_SCHEME_NAMES, SCHEME_NAMES

    assert set(SCHEME_NAMES + FAMILY_SCHEME_NAMES) == set(rules.RULE_SCHEMES)
    res = CliRunner().invoke(main, ["rules", "--out", str(tmp_path), "--scheme", "lmdeploy"])
    assert res.exit_code == 0, res.output
    assert "lmdeploy:spec_decode_num_drafts_total" in (tmp_path / "spectally-rules.yml").read_text()
    res = CliRunner().invoke(
        main,
        ["rules", "--out", str(tmp_path), "--scheme", "ray-vllm", "--tests-from", SERVE_LOGS[0]],
    )
    assert res.exit_code == 2 and "vllm, rfc and backport" in res.output


@pytest.mark.promtool
def test_lint_reads_rule_files_as_promtool_does(tmp_path: Path) -> None:
    """Every file of the wrong shape that lint refuses, promtool refuses; every file of the
    right shape lint reads, promtool loads (the fields of later Prometheus versions aside:
    promtool 2.42 refuses query_offset and group labels)."""
    promtool = _promtool()
    cases = {k: (v[0], 1) for k, v in MISSHAPEN_RULES.items()}
    cases.update({k: (v, 0) for k, v in WELL_SHAPED_RULES.items()})
    for case, (text, lint_exit) in cases.items():
        (tmp_path / "r.yml").write_text(text)
        res = _run([promtool, "check", "rules", "r.yml"], tmp_path)
        assert (res.returncode != 0) == bool(lint_exit), (case, res.stdout + res.stderr)
