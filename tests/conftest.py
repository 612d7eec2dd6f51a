"""Shared pytest configuration. Keep it minimal; append, do not rewrite.

Hypothesis profiles, chosen with the environment variable HYPOTHESIS_PROFILE (default ``ci``):
  ci        deterministic (derandomize), modest example counts, no deadline: the default run
  dev       random seeds, a few more examples, for local exploration
  thorough  the slow tier: many examples and long state-machine runs
"""

from __future__ import annotations

import os

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
    `colscan.MIN_BYTES` a chunk, and the tests' logs are small, yet it is the scanner that
    has to be exact. (CLI tests in a subprocess keep the production threshold.)"""
    from spectally.engine_bridge import colscan

    monkeypatch.setattr(colscan, "MIN_BYTES", 0)
