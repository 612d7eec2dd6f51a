"""Shared pytest configuration. Keep it minimal; append, do not rewrite.

Hypothesis profiles, chosen with the environment variable HYPOTHESIS_PROFILE (default ``ci``):
  ci        deterministic (derandomize), modest example counts, no deadline: the default run
  dev       random seeds, a few more examples, for local exploration
  thorough  the slow tier: many examples and long state-machine runs
"""

from __future__ import annotations

import os
from typing import Any

import pytest
from hypothesis import HealthCheck, settings

settings.register_profile(
    "ci",
    derandomize=True,
    max_examples=60,
    stateful_step_count=40,
    deadline=None,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.register_profile("dev", max_examples=200, deadline=None, print_blob=True)
settings.register_profile(
    "thorough",
    max_examples=3000,
    stateful_step_count=150,
    deadline=None,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


@pytest.fixture(autouse=True)
def _scan_every_chunk(monkeypatch: pytest.MonkeyPatch) -> None:
    """The compiled scanner on every chunk, however small: a replay reaches it only from
    `scanner.MIN_BYTES` a chunk, and the tests' logs are small, yet it is the scanner that
    has to be exact. The same for the compiled shape keys (`hashing.MIN_ROWS` blocks), for
    the log size that loads them (`reader.JIT_MIN_LOG_BYTES`) and for the size under which
    a replay goes to the reference directly (`dispatch.REFERENCE_MAX_BYTES`).
    (CLI tests in a subprocess keep the production thresholds.)"""
    from spectally.engine_bridge.replay import dispatch
    from spectally.engine_bridge.replay.columnar import hashing, reader, scanner

    monkeypatch.setattr(dispatch, "REFERENCE_MAX_BYTES", 0)
    monkeypatch.setattr(reader, "JIT_MIN_LOG_BYTES", 0)
    monkeypatch.setattr(scanner, "MIN_BYTES", 0)
    monkeypatch.setattr(hashing, "MIN_ROWS", 0)


# -- coverage: measured where the reference itself is tested -------------------------------------
# `pytest --cov` enforces 100 % branch coverage of reference/ (pyproject [tool.coverage]). The
# modules below test other layers (the columnar and fleet replay, the recorder, the CLI fuzzers,
# the proofs' mutants, CrossHair, mypy) and reach the reference only through them; under the
# tracer they ran 2-5x slower (test_columnar_lifecycle: 305 s of a 13.8 min run). Their test
# calls run with coverage paused (pytest-cov's `no_cover` marker): every assertion still runs, and
# the reference's own tests alone keep the gate at 100 % (a branch reached only from these
# modules fails the gate: give it a test of the reference). Setup still runs traced.
UNTRACED = frozenset(
    {
        "test_backport",
        "test_colblocks_shapes",
        "test_colscan",
        "test_colseq",
        "test_columnar",
        "test_columnar_chunks",
        "test_columnar_cut",
        "test_columnar_lifecycle",
        "test_crosshair",
        "test_differential_paths",
        "test_fleet",
        "test_force_profile",
        "test_fuzz_cli",
        "test_hostile_input",
        "test_mutants",
        "test_parity",
        "test_recorder",
        "test_recorder_loud",
        "test_replay",
        "test_typing",
        "test_vllm_patch",
    }
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if item.path.stem in UNTRACED:
            item.add_marker(pytest.mark.no_cover)


@pytest.fixture(scope="session")
def proof_results() -> list[Any]:
    """`run_all()` over the unmutated reference, once per session: test_proofs checks every
    verdict and test_mutants its baseline (the same call, ~15 s, was made in each)."""
    pytest.importorskip("z3")
    from spectally.proofs.runner import run_all

    return list(run_all())
