"""Non-vacuity: every deliberately broken variant of the reference fails at least one proof,
the unmutated reference passes them all, and patching leaves no trace behind."""

from __future__ import annotations

import pytest

pytest.importorskip("z3")

from spectally.proofs.mutants import MUTANTS, Mutant, catch, decisive, patched
from spectally.proofs.runner import PropertyResult
from spectally.reference import counters as ct
from spectally.reference import machine as mc
from spectally.reference import step as st


def test_unmutated_reference_passes_every_property(proof_results: list[PropertyResult]) -> None:
    assert all(r.ok for r in proof_results)  # conftest: run_all() on the unmutated reference


def test_mutant_names_are_unique() -> None:
    names = [m.name for m in MUTANTS]
    assert len(names) == len(set(names))
    assert len(MUTANTS) >= 6


@pytest.mark.parametrize("mutant", MUTANTS, ids=lambda m: m.name)
def test_every_mutant_is_caught(mutant: Mutant) -> None:
    caught = catch(mutant, stop_at_first=True)
    assert caught, f"no property catches mutant {mutant.name}: {mutant.bug}"
    assert all(decisive(r) for r in caught)


@pytest.mark.slow
@pytest.mark.parametrize("mutant", MUTANTS, ids=lambda m: m.name)
def test_every_mutant_full_catch_list(mutant: Mutant, request: pytest.FixtureRequest) -> None:
    """The whole suite under each mutant (the table in docs/proofs.md); ~2 min in all, so it
    runs only when the slow tier is asked for (``pytest -m slow``)."""
    if "slow" not in (request.config.getoption("markexpr") or ""):
        pytest.skip("slow tier: run with -m slow")
    assert catch(mutant)


def test_patch_reaches_every_module_and_is_undone() -> None:
    mutant = next(m for m in MUTANTS if m.name == "position-increment-le")
    original = st.position_increment
    assert ct.position_increment is original
    with patched(mutant):
        assert st.position_increment is not original
        assert ct.position_increment is st.position_increment  # counters bound it by name
    assert st.position_increment is original and ct.position_increment is original


def test_patch_is_undone_when_the_body_raises() -> None:
    mutant = next(m for m in MUTANTS if m.name == "count-discarded-block")
    original = st.rfc_step
    with pytest.raises(RuntimeError), patched(mutant):
        assert mc.rfc_step is not original
        raise RuntimeError("boom")
    assert st.rfc_step is original and mc.rfc_step is original


STORY_MUTANTS = (
    "finish-applies-in-flight",
    "sync-abort-applies-in-flight",
    "stale-applied-when-dropped",
    "stale-always-discarded",
)


@pytest.mark.parametrize("name", STORY_MUTANTS)
def test_event_mutants_are_refuted_with_a_witness_trace(name: str) -> None:
    """`spectally prove` fails under each event-rule mutant and prints the story that shows
    it: the sync and the async events, run through the rules, and their unequal counts."""
    import json

    from click.testing import CliRunner
    from spectally.cli import main

    mutant = next(m for m in MUTANTS if m.name == name)
    with patched(mutant):
        result = CliRunner().invoke(main, ["prove", "--only", "story", "--json"])
    assert result.exit_code == 1
    (story,) = json.loads(result.output)["properties"]
    assert story["verdict"] == "refuted"
    w = story["witness"]
    assert w["async events"].startswith("Propose(")  # sync may have no block at all
    assert isinstance(w["sync events"], str)
    assert w["sync rfc"] != w["async rfc"]


def test_metric_mutants_fail_an_identity() -> None:
    """The metric mutants pass every bound (`metrics:bounds`); only the identities see them."""
    from spectally.proofs.properties import all_properties
    from spectally.proofs.runner import run_property

    props = [p for p in all_properties() if p.name.startswith("metrics:")]
    names = ("acceptance-rate-over-verified", "mean-length-without-one", "undefined-rate-as-zero")
    for name in names:
        mutant = next(m for m in MUTANTS if m.name == name)
        with patched(mutant):
            caught = {p.name for p in props if decisive(run_property(p))}
        assert caught == {"metrics:identities"}, name
