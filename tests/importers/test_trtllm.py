"""`spectally import trtllm`: TensorRT-LLM's iteration stats against PyExecutor._update_iter_stats.

Read in source, not run: no public paste of `specDecodingStats` values was found in the issue
threads searched, so the records here are built by the executor's own rule
(acceptanceLength = (accepted + requests) / requests, 0.0 with no request), one field broken
per mutant.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from spectally.cli import main


def it(
    i: int, drafted: int, accepted: int, requests: int, length: float | None = None
) -> dict[str, Any]:
    if length is None:
        length = (accepted + requests) / requests if requests else 0.0
    return {
        "iter": i,
        "specDecodingStats": {
            "numDraftTokens": drafted,
            "numAcceptedTokens": accepted,
            "numRequestsWithDraftTokens": requests,
            "acceptanceLength": length,
            "iterLatencyMS": 1.5,
            "draftOverhead": 0.1,
        },
    }


GOOD = [it(1, 0, 0, 0), it(2, 24, 12, 8), it(3, 9, 9, 3)]


def run(tmp: Path, records: list[dict[str, Any]]) -> tuple[int, str]:
    f = tmp / "stats.json"
    f.write_text(json.dumps(records))
    res = CliRunner().invoke(main, ["import", "trtllm", str(f)])
    return res.exit_code, res.output


def test_consistent_iterations_pass_with_totals(tmp_path: Path) -> None:
    code, out = run(tmp_path, GOOD)
    assert code == 0, out
    assert "drafted 33, accepted 21, request-steps 11" in out


@pytest.mark.parametrize(
    ("record", "check"),
    [
        (it(2, 24, 25, 8), "accepted <= drafted"),
        (it(2, 4, 2, 8), "requests <= drafted"),
        (it(2, 24, 12, 0, 0.0), "requests > 0"),
        (it(2, 24, 12, 8, 2.4), "acceptanceLength = (accepted + requests) / requests"),
        (it(1, 0, 0, 0, 2.0), "acceptanceLength with no request"),
    ],
)
def test_mutants_are_caught(tmp_path: Path, record: dict[str, Any], check: str) -> None:
    code, out = run(tmp_path, [*GOOD, record])
    assert code == 1 and check in out, out


def test_bad_counts_are_exit_2(tmp_path: Path) -> None:
    bad = it(2, 24, 12, 8)
    bad["specDecodingStats"]["numDraftTokens"] = -1
    assert run(tmp_path, [bad])[0] == 2
    assert run(tmp_path, [{"iter": 1}])[0] == 2
