"""Every rule of SPEC.md has a code line that carries its id, every id on a code line is a rule
of SPEC.md, and spec/RULES.md (the index rendered from them) is fresh."""

from __future__ import annotations

from pathlib import Path

from spectally.spec import render

ROOT = Path(__file__).resolve().parents[2]
SPEC = (ROOT / "spec" / "SPEC.md").read_text(encoding="utf-8")


def test_every_rule_has_a_code_line_and_every_tag_is_a_rule() -> None:
    defined = render.spec_rules(SPEC)
    tagged = render.code_rules(ROOT)
    assert len(defined) >= 50  # the id pattern still finds SPEC.md's definitions
    assert [r for r in defined if r not in tagged] == [], "rules without a code line"
    assert sorted(set(tagged) - set(defined)) == [], "code lines naming no rule of SPEC.md"


def test_a_tag_points_at_the_code_below_it() -> None:
    for places in render.code_rules(ROOT).values():
        for place in places:
            path, line = place.rsplit(":", 1)
            text = (ROOT / path).read_text(encoding="utf-8").splitlines()[int(line) - 1]
            assert text.strip() and not text.strip().startswith("#"), place


def test_the_index_is_fresh() -> None:
    rules = (ROOT / "spec" / "RULES.md").read_text(encoding="utf-8")
    assert render.render_rules(SPEC, ROOT) == rules, "run: python -m spectally.spec.render"
