"""SPEC.md and DECISIONS.md against the reference: names, IDs and examples must not drift."""

from __future__ import annotations

import copy
import importlib.util
import re
import shutil
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest
from spectally.reference import invariants, machine
from spectally.reference.arith import INT_ARITH
from spectally.reference.step import Mode, StepInputs, StepQuery, admissibility
from spectally.spec import figures, render, surfaces, user_changes
from spectally.spec import vectors as vec_mod

SPEC_DIR = Path(vec_mod.__file__).parent
SPEC = (SPEC_DIR / "SPEC.md").read_text(encoding="utf-8")
DECISIONS = (SPEC_DIR / "DECISIONS.md").read_text(encoding="utf-8")


def spec_table_row(rule: str) -> str:
    match = re.search(rf"^\| \*\*\[{re.escape(rule)}\]\*\* \|.*$", SPEC, re.MULTILINE)
    assert match, f"SPEC.md has no table row defining {rule}"
    return match.group(0)


def test_reference_invariants_are_specified_with_their_names_and_proofs() -> None:
    for full_name in invariants.INVARIANTS:
        rule, name = full_name.split(" ", 1)
        row = spec_table_row(rule)
        assert f"| {name} |" in row, f"{rule}: SPEC.md names it differently from invariants.py"
        assert f"`step:{rule}`" in row and f"`trace:{rule}`" in row
    for rule in ("INV-9", "INV-10"):
        assert f"`trace:{rule}`" in spec_table_row(rule)
    expected = {
        "THM-1": "theorem:sync-async",
        "M-BOUNDS": "metrics:bounds",
        "MERGE": "merge:monoid",
        "LX-1": "legacy:drafted>=verified",
        "LX-2": "legacy:sync-async-spec-steps",
    }
    for rule, prop in expected.items():
        assert f"`{prop}`" in spec_table_row(rule)


def test_proved_by_names_follow_the_convention() -> None:
    kinds = "step|trace|theorem|metrics|merge|legacy|event|story"
    names = set(re.findall(rf"`((?:{kinds}):[^`]+)`", SPEC))
    pattern = re.compile(
        r"^(?:(?:step|trace):INV-\d+|step:discarded|theorem:sync-async|metrics:bounds|merge:monoid"
        r"|legacy:drafted>=verified|legacy:sync-async-spec-steps"
        r"|event:block|event:close|event:discard|story:sync-async|metrics:identities)$"
    )
    assert names and all(pattern.match(n) for n in names), sorted(names)


def test_every_admissibility_reason_maps_to_a_specified_a_rule() -> None:
    x = StepInputs(1, 0, True, 1, 1, 1, 0, True, True)
    reasons = [reason for reason, _ in admissibility(Mode.ASYNC, x, INT_ARITH, k=4)]
    assert set(reasons) == set(vec_mod.ADMISSIBILITY_RULES)
    for rule in set(vec_mod.ADMISSIBILITY_RULES.values()):
        assert f"**[{rule}]**" in SPEC


def test_event_rules_of_the_machine_are_specified() -> None:
    """The machine checks exactly the E rules SPEC.md states (its docstring points there)."""
    tagged = set(re.findall(r"# \[(E\d+)\]", Path(machine.__file__).read_text()))
    specified = set(re.findall(r"\*\*\[(E\d+)\]", SPEC))
    assert tagged == specified and len(specified) == 7, (tagged, specified)
    assert "SPEC.md section 5.1" in (machine.__doc__ or "")


def test_prometheus_names_match_the_reporting_table() -> None:
    table = SPEC[SPEC.index("**[REP-1]") : SPEC.index("**[REP-2]")]
    documented = set(re.findall(r"`(vllm:spec_decode_[a-z_]+_total)", table))
    rendered = set(surfaces.PROMETHEUS_COUNTERS) | set(surfaces.PROMETHEUS_LABELLED)
    assert documented == rendered


def test_request_payload_fields_match_the_table() -> None:
    table = SPEC[SPEC.index("**[REP-3]") : SPEC.index("**[DP-1]")]
    documented = set(re.findall(r"^\| `([a-z_]+)` \|", table, re.MULTILINE))
    doc = vec_mod.load()
    trace = next(v for v in doc["vectors"] if v["name"] == "trace-rfc-row")
    payload = vec_mod.run_vector(trace).actual["surfaces"]["request_payload"]["r1"]
    assert documented == set(payload)


def test_log_line_example_is_what_the_reference_prints() -> None:
    example = re.search(r"```\n(Engine 0: SpecDecoding metrics: .*)\n```", SPEC)
    assert example
    doc = vec_mod.load()
    trace = next(v for v in doc["vectors"] if v["name"] == "trace-rfc-row")
    assert vec_mod.run_vector(trace).actual["surfaces"]["log_line"] == example.group(1)


def test_decisions_answer_every_question_of_the_counting_notes() -> None:
    table = DECISIONS[: DECISIONS.index("## DEC-1 ")]
    answered = {int(n) for n in re.findall(r"^\| (\d)\. ", table, re.MULTILINE)}
    assert answered == set(range(1, 10))
    for dec in set(re.findall(r"DEC-\d+", table)):
        assert f"## {dec} " in DECISIONS


def test_decisions_cited_in_spec_exist() -> None:
    for dec in set(re.findall(r"DEC-\d+", SPEC)):
        assert f"## {dec} " in DECISIONS, dec


def test_plain_rule_references_point_to_defined_rules() -> None:
    defined = set(re.findall(r"\*\*\[([A-Z][A-Z0-9-]*)\]", SPEC))
    cited = set(re.findall(r"\b((?:INV|THM|REP|ATTR|PIPE|CAP|LX|DP)-\d+|[ARELMF]\d+)\b", SPEC))
    assert cited <= defined, sorted(cited - defined)


def test_proved_by_names_exist_in_the_proofs_registry() -> None:
    pytest.importorskip("z3")
    from spectally.proofs.properties import all_properties

    registry = {p.name for p in all_properties()}
    named = set(re.findall(r"`((?:step|trace|theorem|metrics|merge|legacy):[^`]+)`", SPEC))
    assert named, "SPEC.md names no proof"
    assert named <= registry, f"SPEC.md names unknown proofs: {sorted(named - registry)}"


# -- generated figures, worked example and appendix ------------------------------------------

VECTORS = {v["name"]: v for v in vec_mod.load()["vectors"]}
APPENDIX = (SPEC_DIR / "APPENDIX.md").read_text(encoding="utf-8")
REPO = SPEC_DIR.parent


def generated(name: str, text: str = SPEC) -> str:
    """The body of one generated section of SPEC.md."""
    begin, end = render.BEGIN.format(name), render.END.format(name)
    assert text.count(begin) == 1 and text.count(end) == 1, name
    return text.split(begin, 1)[1].split(end, 1)[0]


def test_generated_parts_are_fresh() -> None:
    doc = vec_mod.load()
    assert render.render_spec(SPEC, doc) == SPEC, "run: python -m spectally.spec.render"
    assert render.render_appendix(doc) == APPENDIX, "run: python -m spectally.spec.render"
    assert render.main(["--check"]) == 0


def test_drift_is_detected(tmp_path: Path) -> None:
    """The freshness check is not vacuous: an edited vector or a hand edit makes it fail."""
    doc = copy.deepcopy(vec_mod.load())
    row = next(v for v in doc["vectors"] if v["name"] == figures.RFC_ROW_VECTORS[Mode.ASYNC])
    row["input"]["av_verify"] = 2  # AV verifies 2: the async example and timeline change
    assert render.render_spec(SPEC, doc) != SPEC
    assert "verified = 2 known" in generated("timeline-async", render.render_spec(SPEC, doc))
    spec, appendix = tmp_path / "SPEC.md", tmp_path / "APPENDIX.md"
    shutil.copytree(SPEC_DIR / "figures", tmp_path / "figures")
    spec.write_text(SPEC, encoding="utf-8")
    appendix.write_text(APPENDIX, encoding="utf-8")
    assert render.main(["--check", "--spec", str(spec), "--appendix", str(appendix)]) == 0
    spec.write_text(SPEC.replace("verified = 3 known", "verified = 4 known"), encoding="utf-8")
    assert render.main(["--check", "--spec", str(spec), "--appendix", str(appendix)]) == 1
    spec.write_text(SPEC, encoding="utf-8")
    svg = tmp_path / "figures" / "timeline-async.svg"
    svg.write_text(svg.read_text(encoding="utf-8").replace("+4 / +3", "+4 / +2"), encoding="utf-8")
    assert render.main(["--check", "--spec", str(spec), "--appendix", str(appendix)]) == 1
    shutil.copy(SPEC_DIR / "figures" / "timeline-async.svg", svg)
    spec.write_text(SPEC, encoding="utf-8")
    appendix.write_text(APPENDIX.replace("| 1 |", "| 01 |", 1), encoding="utf-8")
    assert render.main(["--check", "--spec", str(spec), "--appendix", str(appendix)]) == 1


def test_the_scenario_table_and_rule_index_live_in_the_appendix() -> None:
    assert "| # | vector |" not in SPEC and "## Rule index" not in SPEC
    for name in VECTORS:
        assert f"| `{name}` |" in APPENDIX, name
    for rule in vec_mod.rules_pinned(vec_mod.load()):
        assert f"- **{rule}**: " in APPENDIX, rule


def _arrow_order(rule: str) -> list[str]:
    """The stage list of PIPE-1/PIPE-2 as the normative sentence writes it."""
    text = SPEC[SPEC.index(f"**[{rule}]**") :]
    line = re.search(r"^(propose → .*)\.$", text, re.MULTILINE)
    assert line, rule
    return line.group(1).split(" → ")


@pytest.mark.parametrize(("mode", "rule"), [(Mode.SYNC, "PIPE-1"), (Mode.ASYNC, "PIPE-2")])
def test_pipeline_diagram_is_the_reference_order_and_the_rule(mode: Mode, rule: str) -> None:
    order = figures.stage_order(mode)
    assert _arrow_order(rule) == order
    lane = re.search(rf"^- {mode.value} \({rule}\): (.*)$", generated("pipeline"), re.MULTILINE)
    assert lane, rule
    assert [label.split(":")[0] for label in lane.group(1).split(" → ")] == order
    svg_labels = _svg_texts(SPEC_DIR / "figures" / "pipeline.svg")
    lane_at = svg_labels.index(f"{mode.value} ({rule})")
    shown = svg_labels[lane_at + 1 : lane_at + 1 + len(order)]
    assert [label.split(":")[0] for label in shown] == order


def _svg_texts(path: Path) -> list[str]:
    """Every <text> of an SVG file, in document order (the file must be well-formed XML)."""
    root = ET.parse(path).getroot()
    return [el.text or "" for el in root.iter("{http://www.w3.org/2000/svg}text")]


def test_stage_order_follows_the_reference() -> None:
    """Reordering a stage in the reference would reorder the diagram (a mutant, by hand)."""
    assert figures.stage_order(Mode.SYNC).index("grammar") < figures.stage_order(Mode.SYNC).index(
        "target forward pass"
    )
    assert figures.stage_order(Mode.ASYNC).index("grammar") > figures.stage_order(Mode.ASYNC).index(
        "target forward pass"
    )


def example(section: str) -> str:
    """The worked example of one mode ("example-sync" / "example-async"), in APPENDIX.md."""
    mode = section.removeprefix("example-")
    start = APPENDIX.index(f"### {mode.capitalize()}\n")
    end = APPENDIX.index("### Async\n") if mode == "sync" else APPENDIX.index("\n## ", start)
    return APPENDIX[start:end]


def _applied_line(section: str) -> dict[str, int]:
    body = example(section)
    m = re.search(
        r"drafted (\d+), verified (\d+), accepted (\d+), spec steps (\d+)\*\*, padding (\d+); "
        r"fates (.*?)\. vLLM 0\.32\.0 and 0\.33\.0 report drafted (\d+), accepted (\d+), "
        r"steps (\d+)",
        body,
    )
    assert m, section
    fates = dict.fromkeys(vec_mod.FATES, 0)
    for part in m.group(6).split(", "):
        name, count = part.rsplit(" ", 1)
        fates[name] = int(count)
    keys = ("drafted", "verified", "accepted", "spec_steps", "padding")
    out = {k: int(m.group(i + 1)) for i, k in enumerate(keys)}
    out |= {f"fate:{k}": v for k, v in fates.items()}
    out |= {"legacy:" + k: int(m.group(7 + i)) for i, k in enumerate(("d", "a", "s"))}
    return out


def _table(section: str) -> list[dict[str, str]]:
    """The worked example's table as rows of {column: cell}."""
    rows = [r for r in example(section).splitlines() if r.startswith("| ")]
    cells = [[c.strip() for c in r.strip().strip("|").split("|")] for r in rows]
    header = cells[0]
    return [dict(zip(header, row, strict=True)) for row in cells[1:] if not set(row[0]) <= {"-"}]


def _table_fates(section: str) -> list[str]:
    """Each draft's fate as the worked example's table shows it (the stage that cut it)."""
    table = _table(section)
    drafts = [c for c in table[0] if re.fullmatch(r"d\d+", c)]
    fates = ["accepted"] * len(drafts)
    for row in table:
        for i, column in enumerate(drafts):
            if row[column] not in ("kept", ""):
                fates[i] = row[column].strip("`")
    return fates


@pytest.mark.parametrize("mode", [Mode.SYNC, Mode.ASYNC])
def test_worked_example_matches_the_vectors_that_pin_the_rfc_row(mode: Mode) -> None:
    """The narrative's numbers against the hand-written expectations of the vectors it names."""
    name = figures.RFC_ROW_VECTORS[mode]
    section = f"example-{mode.value}"
    assert f"`{name}`" in example(section)
    vector = VECTORS[name]
    assert vector["input"]["mode"] == mode.value
    rfc, legacy = vector["expect"]["rfc"], vector["expect"]["vllm-legacy"]
    shown = _applied_line(section)
    for key in ("drafted", "verified", "accepted", "spec_steps", "padding"):
        assert shown[key] == rfc[key], key
    for fate, count in rfc["fates"].items():
        assert shown[f"fate:{fate}"] == count, fate
    assert (shown["legacy:d"], shown["legacy:a"], shown["legacy:s"]) == (
        legacy["drafted"],
        legacy["accepted"],
        legacy["spec_steps"],
    )
    assert _table_fates(section) == vector["expect"]["token_fates"]
    last = _table(section)[-1]  # after the accept stage every count is known
    assert [last[c] for c in ("drafted", "verified", "accepted")] == [
        str(rfc["drafted"]),
        str(rfc["verified"]),
        str(rfc["accepted"]),
    ]
    # The same numbers through the user-facing API (`spectally step`'s StepQuery).
    query, _ = vec_mod.step_query(vector["input"])
    assert query == StepQuery(Mode(mode), proposed=4, accepted=1, grammar_valid=2, av_verify=3)


def test_async_example_is_the_rfc_row_and_the_trace_agrees() -> None:
    """The RFC's own numbers (drafted 4, verified 3, accepted 1, vLLM today 2) and the trace."""
    shown = _applied_line("example-async")
    assert (shown["drafted"], shown["verified"], shown["accepted"], shown["legacy:d"]) == (
        4,
        3,
        1,
        2,
    )
    totals = VECTORS[figures.RFC_ROW_TRACE]["expect"]["totals"]
    for key in ("drafted", "verified", "accepted", "spec_steps"):
        assert totals["rfc"][key] == shown[key], key


@pytest.mark.parametrize("mode", [Mode.SYNC, Mode.ASYNC])
def test_timelines_show_the_vector_counts(mode: Mode) -> None:
    rfc = VECTORS[figures.RFC_ROW_VECTORS[mode]]["expect"]["rfc"]
    body = generated(f"timeline-{mode.value}")
    assert f"+{rfc['drafted']} / +{rfc['verified']} / +{rfc['accepted']}" in body
    assert f"spec step +{rfc['spec_steps']}" in body
    assert f"verified = {rfc['verified']} known" in body
    assert f"drafted = {rfc['drafted']} known" in body


def test_diagrams_are_committed_svg_that_match_their_source() -> None:
    """SPEC.md shows SVG files rendered from figures.py (no Mermaid source left); each is
    well-formed XML, fresh, and carries the counts of the vector it draws."""
    assert "```mermaid" not in SPEC
    doc = vec_mod.load()
    for path, fresh in render.render_figures(doc):
        assert path.read_text(encoding="utf-8") == fresh, f"{path.name}: run the renderer"
        assert f"(figures/{path.name})" in SPEC, path.name
        assert _svg_texts(path), path.name
    for mode in (Mode.SYNC, Mode.ASYNC):
        rfc = VECTORS[figures.RFC_ROW_VECTORS[mode]]["expect"]["rfc"]
        text = " ".join(_svg_texts(SPEC_DIR / "figures" / f"timeline-{mode.value}.svg"))
        assert f"verified = {rfc['verified']} known" in text
        assert f"+{rfc['drafted']} / +{rfc['verified']} / +{rfc['accepted']}" in text


# -- the repository is self-contained ---------------------------------------------------------

# Written with one-letter classes ([k], [e]) so this line does not itself match a plain-text
# search for such paths; the strings it matches are the same.
OUTSIDE = re.compile(
    r"/wor[k]/|\.\./shar[e]d|shar[e]d/reference|vllm-0\.3[23]-(?:counting|changes)\.md"
)


def test_no_file_points_outside_the_repository() -> None:
    if not (REPO / "pyproject.toml").exists():
        pytest.skip("not a source checkout")
    offenders = []
    skip = {".git", ".venv", "node_modules", "__pycache__", ".mypy_cache", ".pytest_cache"}
    for path in REPO.rglob("*"):
        if set(path.relative_to(REPO).parts) & skip or not path.is_file():
            continue
        if path.suffix not in {".md", ".py", ".json", ".toml", ".sh", ".txt", ".cfg", ".yaml"}:
            continue
        if path == Path(__file__):
            continue  # this file names the patterns it looks for
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if OUTSIDE.search(line):
                offenders.append(f"{path.relative_to(REPO)}:{number}: {line.strip()[:80]}")
    assert not offenders, "\n".join(offenders)


# -- docs/implementing-in-vllm.md agrees with the reference's surfaces ------------------------

IMPLEMENTING = REPO / "docs" / "implementing-in-vllm.md"


def _implementing() -> str:
    if not IMPLEMENTING.exists():
        pytest.skip("docs/ is not part of an installed package; run from a source checkout")
    return IMPLEMENTING.read_text(encoding="utf-8")


def test_implementing_guide_names_every_prometheus_counter() -> None:
    text = _implementing()
    section = text[text.index("## 4. Prometheus names") : text.index("## 5. The log line")]
    documented = {
        f"{n}_total" for n in re.findall(r"^\| `(vllm:spec_decode_[a-z_]+)", section, re.M)
    }
    rendered = set(surfaces.PROMETHEUS_COUNTERS) | set(surfaces.PROMETHEUS_LABELLED)
    assert documented == rendered
    assert "vllm:spec_decode_num_verified_draft_tokens" in SPEC[SPEC.index("## 11.") :]


def test_implementing_guide_log_line_is_what_the_reference_prints() -> None:
    example = re.search(r"```\n(Engine 0: SpecDecoding metrics: .*)\n```", _implementing())
    assert example
    trace = next(v for v in vec_mod.load()["vectors"] if v["name"] == "trace-rfc-row")
    assert vec_mod.run_vector(trace).actual["surfaces"]["log_line"] == example.group(1)


def test_implementing_guide_new_payload_fields_exist() -> None:
    section = _implementing().split("## 6. Per-request metrics", 1)[1].split("## 7.", 1)[0]
    trace = next(v for v in vec_mod.load()["vectors"] if v["name"] == "trace-rfc-row")
    payload = vec_mod.run_vector(trace).actual["surfaces"]["request_payload"]["r1"]
    named = set(re.findall(r"`([a-z_]+)`", section)) - {"summary", "detailed", "null"}
    named -= {"per_step_verified", "spec_decode_metrics", "speculative_decoding"}
    assert named and named <= set(payload), sorted(named - set(payload))


def test_spec_and_guide_name_the_same_new_worker_fields() -> None:
    patch = (REPO / "patches" / "vllm-0.34.0-spec-decode-counting.patch").read_text(
        encoding="utf-8"
    )
    for name in ("num_draft_tokens", "num_verified_draft_tokens"):
        assert f"+    {name}: list[int] | None = None" in patch, name
        assert f"ModelRunnerOutput.{name}" in _implementing(), name
    assert "ModelRunnerOutput" in SPEC[SPEC.index("## 11.") :]
    assert "vllm:spec_decode_num_verified_draft_tokens" in patch


def test_the_summary_at_the_top_states_the_vectors_numbers() -> None:
    brief = SPEC[SPEC.index("**In brief.**") : SPEC.index("## What changes for users")]
    brief = " ".join(brief.split())
    for mode in (Mode.ASYNC, Mode.SYNC):
        rfc = VECTORS[figures.RFC_ROW_VECTORS[mode]]["expect"]["rfc"]
        claim = (
            f"drafted {rfc['drafted']}, verified {rfc['verified']}, accepted {rfc['accepted']}"
            f" under {mode.value}"
        )
        assert claim in brief, claim
        assert rfc["spec_steps"] == 1  # "both count one spec step"
    # The current release's sync row: 0.34.0 keeps the first invalid draft, so it is verified.
    rfc = VECTORS["vllm034-sync-keeps-first-invalid"]["expect"]["rfc"]
    claim = f"drafted {rfc['drafted']}, verified {rfc['verified']}, accepted {rfc['accepted']}"
    assert f"{claim} under sync on vLLM 0.34.0" in brief, claim
    assert "both count one spec step" in brief


# -- the maintainer's view: what changes for users, required vs added --------------------------


def test_user_change_table_names_every_run_and_is_measured() -> None:
    """Every measured row names its fixture, which exists; the figures are a fresh replay
    (test_generated_parts_are_fresh); a different fixture gives a different table."""
    body = generated("user-changes")
    for run in user_changes.RUNS:
        assert (REPO / run.path).exists(), run.path
        name = Path(run.path).name.removesuffix(".ndjson.gz")
        assert f"| {run.shape} | `{name}` |" in body, name
    for _, vector in user_changes.VECTOR_SHAPES:
        assert f"`{vector}`" in body and vector in VECTORS
    # The table is built from the replay, not written by hand: the committed totals are a
    # fresh replay of every run, and the row prints them.
    script = _load_script("measure_user_changes")
    assert script.measure_all() == user_changes.measured(), "run scripts/measure_user_changes.py"
    so_row = next(r for r in body.splitlines() if "so-json-xgrammar` | 0.32.0" in r)
    totals = script.measure(user_changes.RUNS[3].path)
    assert f"{totals['legacy']['num_draft_tokens']} → {totals['rfc']['drafted']}" in so_row


def _load_script(name: str) -> Any:
    """A module of scripts/ (not a package: loaded by path)."""
    spec = importlib.util.spec_from_file_location(name, REPO / "scripts" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_spec_opens_with_the_change_table() -> None:
    first = SPEC.index("## ")
    assert SPEC[first:].startswith("## What changes for users")


def test_every_rule_says_whether_the_rfc_asks_it() -> None:
    """Each counting, metric and reporting rule is marked RFC, ADD-n, kept or model, and every
    ADD-n has its PR row."""
    for rule in re.findall(r"\*\*\[((?:R|M|F)\d+|REP-\d|DP-1|PIPE-\d|CAP-1|ATTR-1)\]", SPEC):
        text = SPEC[SPEC.index(f"**[{rule}]") :][:400]
        assert re.search(r"\((?:RFC|ADD-\d|kept|model)", text), rule
    adds = set(re.findall(r"ADD-\d", SPEC))
    plan = SPEC[SPEC.index("## 10. Pull requests") : SPEC.index("## 11.")]
    for add in adds:
        assert f"({add})" in plan, add


def test_spec_normative_text_fits_a_ten_minute_read() -> None:
    """At most ~450 lines outside the generated blocks for the chain (sections up to 11), and
    at most 60 for the drafter shapes (section 12), read only by those who implement them."""
    chain, shapes = SPEC.split("\n## 12. Drafter shapes\n", 1)
    for name in render.SECTIONS:
        chain = chain.replace(generated(name), "\n")
    assert len(chain.splitlines()) <= 460, len(chain.splitlines())
    assert len(shapes.splitlines()) <= 60, len(shapes.splitlines())
