"""Render SPEC.md's scenario table from vectors.json (the table is generated, never edited).

    python -m spectally.spec.render          # rewrite the generated section of SPEC.md
    python -m spectally.spec.render --check  # exit 1 if SPEC.md differs from a fresh render

Only the text between the BEGIN/END GENERATED markers is replaced.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from spectally.spec.vectors import load, rules_pinned

SPEC_PATH = Path(__file__).with_name("SPEC.md")
BEGIN = "<!-- BEGIN GENERATED: scenarios -->"
END = "<!-- END GENERATED: scenarios -->"


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
        if "error" in exp:
            rfc = legacy = "inadmissible: " + ", ".join(exp["error"]["violates"])
        else:
            rfc, legacy = _counts(exp)
    else:
        cfg = vec["config"]
        setup = f"trace, {cfg['mode']}, k={cfg['k']}, {len(vec['events'])} events"
        if cfg["drop_stale_output"]:
            setup += ", drop_stale_output"
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
        f"{len(doc['vectors'])} vectors in `spec/vectors.json`. Counts: rfc drafted / verified /"
        " accepted / spec steps; vllm-legacy drafted / accepted / spec steps (trace vectors:"
        " engine totals).",
        "",
        "| # | vector | scenario | setup | rfc d / v / a / steps | legacy d / a / steps | pins |",
        "|---|---|---|---|---|---|---|",
    ]
    lines.extend(_row(i, vec) for i, vec in enumerate(doc["vectors"], start=1))
    lines += ["", "Rule index (rule: the vectors that pin it):", ""]
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


def render_spec(spec_text: str, doc: dict[str, Any]) -> str:
    """``spec_text`` with its generated section replaced by a fresh render."""
    try:
        head, rest = spec_text.split(BEGIN, 1)
        _, tail = rest.split(END, 1)
    except ValueError as exc:
        raise ValueError(f"SPEC.md must contain {BEGIN} ... {END} exactly once") from exc
    return f"{head}{BEGIN}\n{render_table(doc)}\n{END}{tail}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if SPEC.md is stale")
    parser.add_argument("--spec", type=Path, default=SPEC_PATH)
    parser.add_argument("--vectors", type=Path, default=None)
    args = parser.parse_args(argv)
    text = args.spec.read_text(encoding="utf-8")
    fresh = render_spec(text, load(args.vectors))
    if args.check:
        if fresh != text:
            print(f"{args.spec}: scenario table is stale; run python -m spectally.spec.render")
            return 1
        return 0
    if fresh != text:
        args.spec.write_text(fresh, encoding="utf-8")
        print(f"{args.spec}: scenario table rewritten")
    return 0


if __name__ == "__main__":
    sys.exit(main())
