"""Non-vacuity: every deliberately broken variant of the reference fails at least one proof,
the unmutated reference passes them all, and patching leaves no trace behind."""

from __future__ import annotations

import pytest

pytest.importorskip("z3")

from spectally.proofs.mutants import MUTANTS, Mutant, catch, decisive, patched
from spectally.proofs.runner import run_all
from spectally.reference import counters as ct
from spectally.reference import machine as mc
from spectally.reference import step as st


def test_unmutated_reference_passes_every_property() -> None:
    assert all(r.ok for r in run_all())


def test_mutant_names_are_unique() -> None:
    names = [m.name for m in MUTANTS]
    assert len(names) == len(set(names))
    assert len(MUTANTS) >= 6


@pytest.mark.parametrize("mutant", MUTANTS, ids=lambda m: m.name)
def test_every_mutant_is_caught(mutant: Mutant) -> None:
    caught = catch(mutant, timeout_ms=3_000, stop_at_first=True)
    assert caught, f"no property catches mutant {mutant.name}: {mutant.bug}"
    assert all(decisive(r) for r in caught)


@pytest.mark.slow
@pytest.mark.parametrize("mutant", MUTANTS, ids=lambda m: m.name)
def test_every_mutant_full_catch_list(mutant: Mutant, request: pytest.FixtureRequest) -> None:
    """The whole suite under each mutant (the table in docs/proofs.md); ~2 min in all, so it
    runs only when the slow tier is asked for (``pytest -m slow``)."""
    if "slow" not in (request.config.getoption("markexpr") or ""):
        pytest.skip("slow tier: run with -m slow")
    assert catch(mutant, timeout_ms=5_000)


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
