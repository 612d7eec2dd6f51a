"""`spectally lint` and `spectally dashboard` (docs/observe.md): each known mistake is found in a
real-shaped Grafana dashboard and rules file, a clean dashboard passes, and what spectally
generates (the dashboard, the rules) lints clean."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner
from rule_files import MISSHAPEN_RULES, NEWER_FIELDS, OTHER_RULERS, RULE, WELL_SHAPED_RULES
from spectally.cli import main
from spectally.engine_bridge.observe import dashboard, lint, rules
from spectally.engine_bridge.steplog.records import BadInput

FIX = Path(__file__).parents[1] / "fixtures" / "observe"

# Each panel of dashboard-mistakes.json and the one check it must trip.
EXPECTED = {
    "Accepted tokens/s (all series)": "per-position-into-total",
    "Accepted tokens, total + positions": "per-position-into-total",
    "SGLang accept length": "rate-of-gauge",
    "Acceptance rate (V0 gauge)": "rate-of-gauge",
    "Acceptance rate, windows": "ratio-windows",
    "Acceptance rate, 1m over 5m": "ratio-windows",
    "Acceptance rate, one model": "ratio-labels",
    "Acceptance rate, by": "ratio-labels",
    "Acceptance rate vs k": "acceptance-vs-k",
    "Acceptance rate vs $k": "acceptance-vs-k",
    "Mean acceptance length": "mean-length-plus-one",
    "Acceptance rate, backport over vLLM": "mixed-versions",
    "Efficiency, V0 with V1": "mixed-versions",
}


def _by_panel(findings: list[lint.Finding]) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for f in findings:
        out.setdefault(f.where.split("'")[1], []).append(f.check)
    return out


def test_each_mistake_is_found_once_in_its_panel() -> None:
    findings = lint.lint_file(str(FIX / "dashboard-mistakes.json"))
    assert _by_panel(findings) == {title: [check] for title, check in EXPECTED.items()}
    assert all(f.fix and f.where.startswith("panel '") for f in findings)


def test_clean_dashboard_and_generated_files_lint_clean(tmp_path: Path) -> None:
    assert lint.lint_file(str(FIX / "dashboard-clean.json")) == []
    (tmp_path / "d.json").write_text(dashboard.render())
    (tmp_path / "r.yml").write_text(rules.render())
    assert len(lint.queries(str(tmp_path / "d.json"))) >= 15
    assert lint.lint_file(str(tmp_path / "d.json")) == []
    assert len(lint.queries(str(tmp_path / "r.yml"))) == rules.render().count("expr:")
    assert lint.lint_file(str(tmp_path / "r.yml")) == []


RULES_WITH_MISTAKES = """\
groups:
- name: vllm-spec
  rules:
  - record: job:spec_decode_acceptance:ratio
    expr: >-
      rate(vllm:spec_decode_num_accepted_tokens_total[1m])
      / rate(vllm:spec_decode_num_draft_tokens_total[5m])
  - record: job:spec_decode_mean_len
    expr: |
      sum(rate(vllm:spec_decode_num_accepted_tokens_total[5m]))
        / sum(rate(vllm:spec_decode_num_drafts_total[5m]))
  - alert: LowAcceptance
    expr: rate(sglang:spec_accept_rate[5m]) < 0.2
"""


def test_rules_findings_name_the_rule_and_line(tmp_path: Path) -> None:
    path = tmp_path / "rules.yml"
    path.write_text(RULES_WITH_MISTAKES)
    got = [(f.where, f.line, f.check) for f in lint.lint_file(str(path))]
    assert got == [
        ("rule 'job:spec_decode_acceptance:ratio' (group 'vllm-spec')", 5, "ratio-windows"),
        ("rule 'job:spec_decode_mean_len' (group 'vllm-spec')", 9, "mean-length-plus-one"),
        ("alert 'LowAcceptance' (group 'vllm-spec')", 13, "rate-of-gauge"),
    ]


def test_grafana_variables_in_ranges_compare_by_name() -> None:
    text, back = lint.substitute('rate(a[$__rate_interval]) / rate(b[${w}]) + c{x="$v"} * $k')
    assert '{x="$v"}' in text and text.endswith("* 1")
    assert sorted(back.values()) == ["$__rate_interval", "${w}"]


@pytest.mark.parametrize(
    "content, why",
    [
        ("{not json", "not JSON"),
        ('{"title": "x"}', "neither a Grafana dashboard"),
        ("groups: [{name: g, rules: [{record: r, expr: 'sum(('}]}]", "does not parse"),
        ("a: [", "not YAML"),
    ],
)
def test_bad_input(tmp_path: Path, content: str, why: str) -> None:
    path = tmp_path / ("x.json" if content.startswith("{") else "x.yml")
    path.write_text(content)
    with pytest.raises(BadInput, match=why):
        lint.lint_file(str(path))


@pytest.mark.parametrize(
    "expr, why",
    [
        ("(" * 70 + "x" + ")" * 70, "nested 70 deep"),
        ("x + " * 1200 + "x", "characters, more than the limit"),
        (" or ".join(["x"] * 300), "more than 500 syntax nodes"),
    ],
)
def test_hostile_expressions_are_refused_not_crashed(tmp_path: Path, expr: str, why: str) -> None:
    """promql-parser recurses natively: far deeper input overflows its stack (a crash, not an
    exception), so the bounds are checked before it parses."""
    path = tmp_path / "d.json"
    path.write_text(json.dumps({"panels": [{"title": "t", "targets": [{"expr": expr}]}]}))
    with pytest.raises(BadInput, match=why):
        lint.lint_file(str(path))


def test_cli_exit_codes(tmp_path: Path) -> None:
    runner = CliRunner()
    bad = runner.invoke(main, ["lint", str(FIX / "dashboard-mistakes.json")])
    assert bad.exit_code == 1
    assert "fix:" in bad.output and "Mean acceptance length" in bad.output
    clean = runner.invoke(main, ["lint", str(FIX / "dashboard-clean.json")])
    assert clean.exit_code == 0, clean.output
    (tmp_path / "x.yml").write_text("a: [")
    assert runner.invoke(main, ["lint", str(tmp_path / "x.yml")]).exit_code == 2
    out = tmp_path / "d.json"
    assert runner.invoke(main, ["dashboard", "--out", str(out)]).exit_code == 0
    doc = json.loads(out.read_text())
    assert doc["uid"] == dashboard.UID and len(doc["panels"]) == 8
    # Every panel as Grafana saves one: a data source, options, at least one query.
    for panel in doc["panels"]:
        assert panel["type"] == "timeseries" and panel["datasource"]["uid"] == "${datasource}"
        assert panel["options"]["legend"]["showLegend"] is True and panel["targets"]
    assert runner.invoke(main, ["lint", "--json", str(out)]).exit_code == 0


def test_yaml_flow_mapping_is_read_as_rules(tmp_path: Path) -> None:
    path = tmp_path / "r.yml"
    path.write_text(
        '{groups: [{name: g, rules: [{alert: a, expr: "rate(sglang:spec_accept_rate[5m])"}]}]}'
    )
    assert [f.check for f in lint.lint_file(str(path))] == ["rate-of-gauge"]


def test_prometheus_operator_rule_resource(tmp_path: Path) -> None:
    path = tmp_path / "rule.yaml"
    indented = "".join("  " + line + "\n" for line in RULES_WITH_MISTAKES.splitlines())
    path.write_text(
        "apiVersion: monitoring.coreos.com/v1\nkind: PrometheusRule\nmetadata: {name: x}\n"
        "spec:\n" + indented
    )
    assert [f.check for f in lint.lint_file(str(path))] == [
        "ratio-windows",
        "mean-length-plus-one",
        "rate-of-gauge",
    ]


# -- exporter families: configured denominators, gauges, Ray's and llama.cpp's names -------------

A = "rate(vllm:spec_decode_num_accepted_tokens_total[5m])"
D = "rate(vllm:spec_decode_num_draft_tokens_total[5m])"
LA = "rate(lmdeploy:spec_decode_num_accepted_tokens_total[5m])"
LD = "rate(lmdeploy:spec_decode_num_draft_tokens_total[5m])"
LS = "rate(lmdeploy:spec_decode_num_drafts_total[5m])"
RA = "rate(ray_vllm_spec_decode_num_accepted_tokens_total[5m])"
RD = "rate(ray_vllm_spec_decode_num_draft_tokens_total[5m])"
CA = "rate(llamacpp:n_drafted_accepted_total[5m])"
CD = "rate(llamacpp:n_drafted_total[5m])"

FAMILY_CASES = [
    # LMDeploy: vLLM-shaped names, configured meaning
    (f"{LA} / {LD}", ["configured-denominator"]),
    (f"sum by (model_name) ({LA}) / sum by (model_name) ({LD})", ["configured-denominator"]),
    (f"1 + {LA} / {LS}", []),
    (f"{LA} / {LS}", ["mean-length-plus-one"]),
    ("rate(lmdeploy:spec_decode_mean_accept_rate[5m])", ["rate-of-gauge"]),
    # SGLang's interval gauges
    ("rate(sglang:spec_accept_rate[5m])", ["rate-of-gauge"]),
    ("increase(sglang:spec_accept_length[1h])", ["rate-of-gauge"]),
    ("avg_over_time(sglang:spec_accept_rate[5m])", []),
    # a configured-denominator rate beside a proposed one, even across `or`
    (f"sglang:spec_accept_rate or {A} / {D}", ["configured-denominator"]),
    (f"avg_over_time(sglang:spec_accept_rate[5m]) - on() ({A} / {D})", ["configured-denominator"]),
    # vLLM through Ray Serve: the same checks as for vLLM's own names
    (RA + " / " + RD, []),
    (RA.replace("5m", "1m") + " / " + RD, ["ratio-windows"]),
    (
        'sum(rate({__name__=~"ray_vllm_spec_decode_num_accepted_tokens.*"}[5m]))',
        ["per-position-into-total"],
    ),
    ("rate(ray_vllm_spec_decode_draft_acceptance_rate[5m])", ["rate-of-gauge"]),
    (f"{RA} / rate(ray_vllm_spec_decode_num_drafts_total[5m])", ["mean-length-plus-one"]),
    (f"{RA} / rate(spectally:spec_decode_num_drafted_tokens_total[5m])", ["mixed-versions"]),
    # llama.cpp: proposed denominator, its own names
    (f"{CA} / {CD}", []),
    (f"{CA} / {D}", ["mixed-versions"]),
    (
        "llamacpp:spec_decode_num_accepted_tokens_total"
        " + llamacpp:spec_decode_num_accepted_tokens_per_pos_total",
        ["per-position-into-total"],
    ),
]


@pytest.mark.parametrize("expr, checks", FAMILY_CASES, ids=[e for e, _ in FAMILY_CASES])
def test_families_are_checked(expr: str, checks: list[str]) -> None:
    import promql_parser

    assert [check for check, _, _ in lint.check_expr(promql_parser.parse(expr), {})] == checks


def test_messages_name_the_family_and_the_fix(tmp_path: Path) -> None:
    path = tmp_path / "r.yml"
    path.write_text(
        "groups:\n- name: g\n  rules:\n"
        f"  - record: lmdeploy:acceptance\n    expr: {LA} / {LD}\n"
        "  - alert: SGLangLow\n    expr: rate(sglang:spec_accept_rate[5m]) < 0.2\n"
        "  - alert: LMDeployLow\n    expr: rate(lmdeploy:spec_decode_mean_accept_rate[5m]) < 0.2\n"
    )
    configured, gauge, lmdeploy_gauge = lint.lint_file(str(path))
    assert configured.check == "configured-denominator" and configured.line == 5
    assert "lmdeploy:spec_decode_num_draft_tokens_total" in configured.message
    assert "configured draft length" in configured.message and "M1" in configured.message
    assert "lmdeploy:spec_decode_num_drafts_total" in configured.fix
    assert gauge.check == "rate-of-gauge" and "SGLang" in gauge.message
    assert "LMDeploy" in lmdeploy_gauge.message and "last logging interval" in gauge.message


def test_rules_of_every_family_lint_clean(tmp_path: Path) -> None:
    (tmp_path / "r.yml").write_text(rules.render(list(rules.RULE_SCHEMES)))
    assert len(lint.queries(str(tmp_path / "r.yml"))) > 100
    assert lint.lint_file(str(tmp_path / "r.yml")) == []


def test_the_ray_dashboard_reads_ray_names_and_lints_clean(tmp_path: Path) -> None:
    result = CliRunner().invoke(main, ["dashboard", "--ray", "--rfc", "rfc", "--out", "-"])
    assert result.exit_code == 0, result.output
    (tmp_path / "d.json").write_text(result.output)
    exprs = [q.expr for q in lint.queries(str(tmp_path / "d.json"))]
    assert len(exprs) >= 15 and all("vllm:" not in e for e in exprs)
    assert any("ray_vllm_spec_decode_num_verified_draft_tokens_total" in e for e in exprs)
    assert lint.lint_file(str(tmp_path / "d.json")) == []
    backport = dashboard.render(ray=True)
    assert "ray_vllm_spec_decode_num_draft_tokens_total" in backport
    assert "spectally:spec_decode_num_drafted_tokens_total" in backport


# -- the structure of a rules file, as Prometheus's loader reads it ----------------------------


@pytest.mark.parametrize("case", MISSHAPEN_RULES)
def test_a_rules_file_of_the_wrong_shape_is_refused_where_it_goes_wrong(
    tmp_path: Path, case: str
) -> None:
    text, at, words = MISSHAPEN_RULES[case]
    path = tmp_path / "r.yml"
    path.write_text(text)
    with pytest.raises(BadInput, match=words) as caught:
        lint.lint_file(str(path))
    assert f"{caught.value.line}:{caught.value.column}" == at


@pytest.mark.parametrize("case", [*WELL_SHAPED_RULES, "newer-fields", "other-rulers"])
def test_a_rules_file_the_loader_reads_is_linted(tmp_path: Path, case: str) -> None:
    path = tmp_path / "r.yml"
    extra = {"newer-fields": NEWER_FIELDS, "other-rulers": OTHER_RULERS}
    path.write_text(WELL_SHAPED_RULES.get(case) or extra[case])
    assert lint.lint_file(str(path)) == []


def test_a_misspelt_key_no_longer_hides_a_mistake(tmp_path: Path) -> None:
    """The mistake below the typo is what a clean verdict would have hidden."""
    path = tmp_path / "r.yml"
    path.write_text(RULE + "    exp: rate(sglang:spec_accept_rate[5m])\n")
    result = CliRunner().invoke(main, ["lint", str(path)])
    assert result.exit_code == 2 and "r.yml:6:5" in result.output, result.output


@pytest.mark.parametrize(
    "panels, words",
    [
        (["x"], "panel 1 is not an object"),
        ([{"title": "t", "targets": {"expr": "up"}}], "panel 't': targets is not a list"),
        ([{"title": "t", "panels": "x"}], "panel 't': panels is not a list"),
        ([{"title": "t", "targets": ["up"]}], "panel 't' query A is not an object"),
        ([{"title": "t", "targets": [{"refId": "B", "expr": ["up"]}]}], "query B: expr is not"),
        ([{"title": "t", "targets": [{"expr": 5}]}], "panel 't' query A: expr is not text"),
        ([{"title": "r", "panels": [{"title": "t", "targets": [{"expr": 5}]}]}], "(row 'r')"),
    ],
)
def test_a_dashboard_of_the_wrong_shape_is_refused(
    tmp_path: Path, panels: list[object], words: str
) -> None:
    path = tmp_path / "d.json"
    path.write_text(json.dumps({"panels": panels}))
    with pytest.raises(BadInput) as caught:
        lint.lint_file(str(path))
    assert words in caught.value.reason


def test_targets_without_a_query_are_skipped(tmp_path: Path) -> None:
    """Another data source's target, an empty new query, a panel without targets."""
    path = tmp_path / "d.json"
    targets = [{"refId": "A"}, {"expr": ""}, {"expr": None}, {"expr": "up"}]
    path.write_text(json.dumps({"panels": [{"title": "t", "targets": targets}, {"title": "u"}]}))
    assert [q.where for q in lint.queries(str(path))] == ["panel 't' query D"]
