"""The drafter-shape proofs (proofs/shapes.py): each property proved on the reference, registered
with `spectally prove`, and each shape mutant refuted by the property written for it."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("z3")

from click.testing import CliRunner
from spectally.cli import main
from spectally.proofs.mutants import SHAPE_MUTANTS, Mutant, decisive, patched
from spectally.proofs.runner import every_property, run_property
from spectally.proofs.shapes import SHAPE_PROPERTIES, shape_properties

NAMES = {name for name, _ in SHAPE_PROPERTIES}


def test_every_shape_property_is_proved_and_registered() -> None:
    assert {p.name for p in every_property()} >= NAMES
    for prop in shape_properties():
        result = run_property(prop)
        assert result.verdict == "proved" and result.ok, result.lines(verbose=True)
        assert all(o.status == "holds" for o in result.outcomes)


def test_prove_only_shape_runs_them() -> None:
    result = CliRunner().invoke(main, ["prove", "--only", "shape", "--json"])
    assert result.exit_code == 0, result.output
    payload = json.loads(result.output)
    assert {p["name"] for p in payload["properties"]} == NAMES
    assert payload["ok"] is True


# mutant -> the shape properties that must refute it (each mutant's own claim)
EXPECTED = {
    "filler-not-drafted": {"shape:chain-step", "shape:totals"},
    "zero-draft-step-is-spec-step": {"shape:chain-step", "shape:totals"},
    "zero-draft-step-invisible": {"shape:chain-step", "shape:totals"},
    "position-past-draft-length": {"shape:chain-step"},
    "tree-accepts-verified-nodes": {"shape:tree-step", "shape:chain-is-tree"},
    "tree-drafted-is-verified": {"shape:tree-step", "shape:chain-is-tree"},
    "tree-path-may-skip": {"shape:tree-step"},
    "depth-accepted-from-verified": {"shape:tree-step"},
    "chain-layer-all-verified": {"shape:chain-is-tree"},
    "request-keeps-first-sequence": {"shape:parallel"},
    "merge-drops-zero-draft-steps": {"shape:parallel", "shape:totals"},
    "unverified-from-accepted": {"shape:totals"},
}


def test_every_shape_mutant_has_its_expectation() -> None:
    assert {m.name for m in SHAPE_MUTANTS} == set(EXPECTED)


@pytest.mark.parametrize("mutant", SHAPE_MUTANTS, ids=lambda m: m.name)
def test_each_shape_mutant_is_refuted_where_expected(mutant: Mutant) -> None:
    with patched(mutant):
        caught = {p.name for p in shape_properties() if decisive(run_property(p))}
    assert caught >= EXPECTED[mutant.name], caught
