"""Render the generated parts of the specification (never edited by hand).

    python -m spectally.spec.render          # rewrite SPEC.md's generated sections, APPENDIX.md
                                             # and RULES.md
    python -m spectally.spec.render --check  # exit 1 if any differs from a fresh render

SPEC.md: only the text between each ``<!-- BEGIN GENERATED: name -->`` / ``<!-- END GENERATED:
name -->`` pair is replaced (the stage-pipeline and timeline diagrams and the worked example,
from `figures.py`). APPENDIX.md is generated whole: the counting-profile table (from the
declarations of reference/profile.py), the scenario table of every vector and the rule index,
from vectors.json. RULES.md is generated whole: each rule of SPEC.md with the code lines that
carry its id (a ``# [E3] ...`` comment beside the check), so the spec and the code read side by
side.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from spectally.exit_codes import ExitCode
from spectally.reference.profile import PROFILES, RELEASES
from spectally.reference.step import Mode
from spectally.spec import figures
from spectally.spec.vectors import load, rules_pinned

SPEC_PATH = Path(__file__).with_name("SPEC.md")
APPENDIX_PATH = Path(__file__).with_name("APPENDIX.md")
RULES_PATH = Path(__file__).with_name("RULES.md")
# The package folders whose code lines carry rule ids (the installed layout: siblings of spec/).
CODE_ROOT = Path(__file__).resolve().parent.parent
CODE_FOLDERS = ("reference", "proofs", "engine_bridge")
SKIPPED = ("bugs_detected", "correct_code")  # the CrossHair examples: deliberately wrong code
# A rule is defined where a line (or a list item, or a table row) opens with its bold id.
RULE_DEFINITION = re.compile(r"^(?:- |\| )?\*\*\[([A-Z]+-?[0-9]+)\]", re.MULTILINE)
RULE_TAG = re.compile(r"\[([A-Z]+-?[0-9]+)\]")
BEGIN = "<!-- BEGIN GENERATED: {} -->"
END = "<!-- END GENERATED: {} -->"

# SPEC.md's generated sections, in document order: name -> renderer.
SECTIONS: dict[str, Callable[[dict[str, Any]], str]] = {
    "pipeline": lambda doc: figures.pipeline_mermaid(),
    "timeline-sync": lambda doc: figures.timeline_mermaid(doc, Mode.SYNC),
    "timeline-async": lambda doc: figures.timeline_mermaid(doc, Mode.ASYNC),
    "example-sync": lambda doc: figures.worked_example(doc, Mode.SYNC),
    "example-async": lambda doc: figures.worked_example(doc, Mode.ASYNC),
}

APPENDIX_HEAD = """# Appendix: conformance vectors and rule index (generated)

Generated from `spec/vectors.json` by `python -m spectally.spec.render`; do not edit (a test
fails when it is stale). The vector format and how to run the vectors against another
implementation are in [SPEC.md section 11](SPEC.md#11-conformance-vectors); the rules are
defined in [SPEC.md](SPEC.md), the decisions in [DECISIONS.md](DECISIONS.md).

"""


def _step_inputs(inp: dict[str, Any]) -> str:
    parts = [f"N={inp['proposed']}"]
    if inp["padding"]:
        parts.append(f"P={inp['padding']}")
    for key, sym in (("grammar_valid", "G"), ("scheduled", "S"), ("av_verify", "V")):
        if inp[key] is not None:
            parts.append(f"{sym}={inp[key]}")
    parts.append(f"A={inp['accepted']}")
    if "k" in inp:
        parts.append(f"k={inp['k']}")
    if inp.get("applied") is False:
        parts.append("not applied" + (", reported" if inp.get("legacy_reported") else ""))
    elif inp.get("legacy_reported") is False:
        parts.append("not reported")
    return " ".join(parts)


def _counts(exp: dict[str, Any]) -> tuple[str, str]:
    r, lg = exp["rfc"], exp["vllm-legacy"]
    rfc = f"{r['drafted']} / {r['verified']} / {r['accepted']} / {r['spec_steps']}"
    if r.get("padding"):
        rfc += f" (+{r['padding']} pad)"
    legacy = f"{lg['drafted']} / {lg['accepted']} / {lg['spec_steps']}"
    return rfc, legacy


def _row(i: int, vec: dict[str, Any]) -> str:
    exp = vec["expect"]
    if vec["kind"] == "step":
        setup = f"step, {vec['input']['mode']}: {_step_inputs(vec['input'])}"
        if "profile" in vec["input"]:
            setup += f", {vec['input']['profile']}"
        if "error" in exp:
            rfc = legacy = "inadmissible: " + ", ".join(exp["error"]["violates"])
        else:
            rfc, legacy = _counts(exp)
    else:
        cfg = vec["config"]
        setup = f"trace, {cfg['mode']}, k={cfg['k']}, {len(vec['events'])} events"
        if cfg["drop_stale_output"]:
            setup += ", drop_stale_output"
        if "profile" in cfg:
            setup += f", {cfg['profile']}"
        if "error" in exp:
            err = exp["error"]
            rfc = legacy = f"illegal event {err['at']}: {err['violates']}"
        else:
            rfc, legacy = _counts(exp["totals"])
    rules = ", ".join(vec["rule"])
    title = vec["title"].replace("|", "\\|")
    return f"| {i} | `{vec['name']}` | {title} | {setup} | {rfc} | {legacy} | {rules} |"


def render_table(doc: dict[str, Any]) -> str:
    """The generated section's body (without the markers)."""
    lines = [
        "## Scenarios",
        "",
        f"{len(doc['vectors'])} vectors. Counts: rfc drafted / verified /"
        " accepted / spec steps; vllm-legacy drafted / accepted / spec steps (trace vectors:"
        " engine totals).",
        "",
        "| # | vector | scenario | setup | rfc d / v / a / steps | legacy d / a / steps | pins |",
        "|---|---|---|---|---|---|---|",
    ]
    lines.extend(_row(i, vec) for i, vec in enumerate(doc["vectors"], start=1))
    lines += ["", "## Rule index", "", "Each rule and decision, with the vectors that pin it.", ""]
    for rule, names in sorted(rules_pinned(doc).items(), key=lambda kv: _rule_key(kv[0])):
        lines.append(f"- **{rule}**: " + ", ".join(f"`{n}`" for n in names))
    return "\n".join(lines)


def _rule_key(rule: str) -> tuple[int, str, int]:
    """Order rule IDs as the document does: section prefix first, then number."""
    order = ["PIPE", "CAP", "F", "A", "R", "E", "ATTR", "INV", "THM", "M-BOUNDS", "MERGE", "M"]
    order += ["REP", "DP", "L", "LX", "DEC"]
    prefix = rule if rule in order else rule.rstrip("0123456789").rstrip("-")
    digits = rule[len(rule.rstrip("0123456789")) :]
    rank = order.index(prefix) if prefix in order else len(order)
    return rank, prefix if prefix in order else rule, int(digits) if digits else 0


PROFILE_FIELDS = (
    ("releases", "releases"),
    ("sync_grammar_keeps", "sync: the grammar cut before scheduling keeps"),
    ("async_counted_keeps", "async: the engine's drafted keeps (rest subtracted)"),
    ("padding_counted", "padding counts as drafted"),
    ("av_counted", "AV's cut visible to drafted"),
    ("stale_output_counted", "delivered stale output counted"),
    ("step_counts", "a block counts a step when"),
    ("skip_drafts", "drafting skipped for"),
)


def render_profiles() -> str:
    """The counting-profile table: one column per declaration (reference/profile.py)."""
    names = list(PROFILES)
    lines = [
        "## Counting profiles",
        "",
        "Each engine release's counting facts, as declared in `reference/profile.py` (the step"
        " rules read these fields; a release that counts like a known one is one `RELEASES`"
        " line).",
        "",
        "| fact | " + " | ".join(f"`{n}`" for n in names) + " |",
        "|---|" + "---|" * len(names),
    ]
    for field, label in PROFILE_FIELDS:
        cells = []
        for name in names:
            if field == "releases":
                value = ", ".join(f"{e} {v}" for e, v, p in RELEASES if p == name)
            else:
                raw = getattr(PROFILES[name], field)
                value = getattr(raw, "value", None) or ("yes" if raw else "no")
            cells.append(str(value))
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    lines += ["", "Where each fact was read:", ""]
    for name in names:
        sources = "; ".join(f"{fact}: `{where}`" for fact, where in PROFILES[name].source)
        lines.append(f"- `{name}`: {sources}")
    return "\n".join(lines) + "\n\n"


def render_appendix(doc: dict[str, Any]) -> str:
    """The whole of APPENDIX.md."""
    return APPENDIX_HEAD + render_profiles() + render_table(doc) + "\n"


def spec_rules(spec_text: str) -> list[str]:
    """The rule ids SPEC.md defines (``**[E3]**``), in document order."""
    return list(dict.fromkeys(RULE_DEFINITION.findall(spec_text)))


def code_rules(root: Path = CODE_ROOT) -> dict[str, list[str]]:
    """Each rule id named by a full-line ``# [ID] ...`` comment under `CODE_FOLDERS`, with the
    ``file:line`` of the code the comment stands beside (the first line after it that is not a
    comment)."""
    found: dict[str, list[str]] = {}
    for folder in CODE_FOLDERS:
        for path in sorted((root / folder).rglob("*.py")):
            if any(part in SKIPPED for part in path.parts):
                continue
            lines = path.read_text(encoding="utf-8").splitlines()
            for i, line in enumerate(lines):
                text = line.strip()
                if not text.startswith("# ["):
                    continue
                at = next(
                    (j for j in range(i + 1, len(lines)) if not lines[j].strip().startswith("#")),
                    i,
                )
                where = f"{path.relative_to(root).as_posix()}:{at + 1}"
                for rule in RULE_TAG.findall(text):
                    found.setdefault(rule, []).append(where)
    return found


RULES_HEAD = """# Rule index: SPEC.md rule -> code (generated)

Generated by `python -m spectally.spec.render` from the `# [ID] ...` comments beside the checks;
do not edit (a test fails when it is stale, when a rule of [SPEC.md](SPEC.md) has no code line,
or when a code line names a rule SPEC.md does not define). Paths are relative to the package
root (the repository's folders).

| rule | code |
|---|---|
"""


def render_rules(spec_text: str, root: Path = CODE_ROOT) -> str:
    """The whole of RULES.md: every rule of SPEC.md with the code lines that carry its id."""
    found = code_rules(root)
    rows = []
    for rule in spec_rules(spec_text):
        where = ", ".join(f"`{w}`" for w in found.get(rule, [])) or "**none**"
        rows.append(f"| {rule} | {where} |")
    return RULES_HEAD + "\n".join(rows) + "\n"


def render_spec(spec_text: str, doc: dict[str, Any]) -> str:
    """``spec_text`` with every generated section replaced by a fresh render."""
    out = spec_text
    for name, renderer in SECTIONS.items():
        begin, end = BEGIN.format(name), END.format(name)
        if out.count(begin) != 1 or out.count(end) != 1:
            raise ValueError(f"SPEC.md must contain {begin} ... {end} exactly once")
        head, rest = out.split(begin, 1)
        _, tail = rest.split(end, 1)
        out = f"{head}{begin}\n{renderer(doc)}\n{end}{tail}"
    return out


def main(argv: list[str] | None = None) -> ExitCode:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if anything is stale")
    parser.add_argument("--spec", type=Path, default=SPEC_PATH)
    parser.add_argument("--appendix", type=Path, default=APPENDIX_PATH)
    parser.add_argument("--vectors", type=Path, default=None)
    parser.add_argument("--rules", type=Path, default=RULES_PATH)
    args = parser.parse_args(argv)
    doc = load(args.vectors)
    spec_text = args.spec.read_text(encoding="utf-8")
    old_appendix = args.appendix.read_text(encoding="utf-8") if args.appendix.exists() else ""
    old_rules = args.rules.read_text(encoding="utf-8") if args.rules.exists() else ""
    outputs = (
        (args.spec, spec_text, render_spec(spec_text, doc)),
        (args.appendix, old_appendix, render_appendix(doc)),
        (args.rules, old_rules, render_rules(spec_text)),
    )
    stale = ExitCode.OK
    for path, old, fresh in outputs:
        if fresh == old:
            continue
        if args.check:
            print(f"{path}: generated text is stale; run python -m spectally.spec.render")
            stale = ExitCode.DIVERGENCE
        else:
            path.write_text(fresh, encoding="utf-8")
            print(f"{path}: rewritten")
    return stale


if __name__ == "__main__":
    sys.exit(main())
