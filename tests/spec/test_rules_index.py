"""Every rule of CORE.md and SPEC.md has a code line that carries its id (a CORE rule may name
its checker instead), every id on a code line is a rule of one of them, and spec/RULES.md (the
index rendered from them) is fresh."""

from __future__ import annotations

from pathlib import Path

from spectally.spec import render

ROOT = Path(__file__).resolve().parents[2]
SPEC = (ROOT / "spec" / "SPEC.md").read_text(encoding="utf-8")
CORE = (ROOT / "spec" / "CORE.md").read_text(encoding="utf-8")


def test_every_rule_has_a_code_line_and_every_tag_is_a_rule() -> None:
    defined = render.spec_rules(SPEC)
    tagged = render.code_rules(ROOT)
    assert len(defined) >= 50  # the id pattern still finds SPEC.md's definitions
    assert [r for r in defined if r not in tagged] == [], "rules without a code line"
    core = render.spec_rules(CORE)
    assert len(core) >= 30  # the id pattern finds CORE.md's definitions too
    checked = [r for r in core if r in tagged or r in render.CORE_CHECKERS]
    assert checked == core, "CORE rules without a code line or a stated checker"
    assert all((ROOT / path).is_file() for path in render.CORE_CHECKERS.values())
    assert set(render.CORE_CHECKERS) <= set(core), "a stated checker for no CORE rule"
    stray = sorted(set(tagged) - set(defined) - set(core))
    assert stray == [], "code lines naming no rule of CORE.md or SPEC.md"


def test_a_tag_points_at_the_code_below_it() -> None:
    for places in render.code_rules(ROOT).values():
        for place in places:
            path, line = place.rsplit(":", 1)
            text = (ROOT / path).read_text(encoding="utf-8").splitlines()[int(line) - 1]
            assert text.strip() and not text.strip().startswith("#"), place


def test_the_index_is_fresh() -> None:
    rules = (ROOT / "spec" / "RULES.md").read_text(encoding="utf-8")
    assert render.render_rules(SPEC, ROOT) == rules, "run: python -m spectally.spec.render"
