"""Golden step-log traces, etcd/raft style: every trace in tests/traces/agree replays clean;
every trace in tests/traces/diverge fails with the report pinned in ``<name>.expected``.

Regenerate the pinned reports (then review the diff!) with ``SPECTALLY_REGEN_GOLDEN=1 pytest
tests/replay/test_golden_traces.py``.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from click.testing import CliRunner
from spectally.engine_bridge.cli import replay
from spectally.engine_bridge.replay.dispatch import replay_file

TRACES = Path(__file__).parents[1] / "traces"
AGREE = sorted((TRACES / "agree").glob("*.ndjson"))
DIVERGE = sorted((TRACES / "diverge").glob("*.ndjson"))
REGEN = os.environ.get("SPECTALLY_REGEN_GOLDEN") == "1"


def test_there_are_traces() -> None:
    assert len(AGREE) >= 8
    assert len(DIVERGE) >= 8


@pytest.mark.parametrize("path", AGREE, ids=lambda p: p.stem)
def test_agree_traces_replay_clean(path: Path) -> None:
    result = replay_file(str(path), progress=False)
    assert result.bad_input is None, str(result.bad_input)
    assert result.status == "agree", "\n".join(d.render() for d in result.divergences)
    assert result.summary["agreement_percent"] == 100.0
    assert result.summary["open_blocks"] == []
    assert result.notes == []


def normalise(text: str, path: Path) -> str:
    return text.replace(str(path), path.name)


@pytest.mark.parametrize("path", DIVERGE, ids=lambda p: p.stem)
def test_diverge_traces_fail_with_the_golden_report(path: Path) -> None:
    result = CliRunner().invoke(replay, [str(path)])
    assert result.exit_code == 1, result.output
    report = normalise(result.stdout, path)
    expected = path.with_suffix(".expected")
    if REGEN:
        expected.write_text(report)
    assert expected.exists(), f"missing {expected.name}; regenerate with SPECTALLY_REGEN_GOLDEN=1"
    assert report == expected.read_text()


def test_all_traces_in_one_run_count_passes() -> None:
    paths = [str(p) for p in AGREE[:2] + DIVERGE[:1]]
    result = CliRunner().invoke(replay, paths)
    assert result.exit_code == 1
    assert "2 of 3 logs agree with the reference" in result.stdout
