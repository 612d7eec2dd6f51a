"""A divergence is data (the reference's state as values, the field at fault, the rule of SPEC.md
it breaks); the report renders it. These pin what each kind of divergence carries and how its
state and column render, on small hand-written logs (they prove the replay's bookkeeping, not
an engine)."""

from __future__ import annotations

import json
from pathlib import Path

from spectally.engine_bridge.replay.dispatch import replay_file
from spectally.engine_bridge.replay.report import ReportedSums, RequestView, StepBlocks

BASIC = Path(__file__).parents[1] / "traces" / "agree" / "sync_basic.ndjson"


def replay_lines(tmp_path: Path, lines: list[str], keep_going: int = 1) -> dict[str, object]:
    path = tmp_path / "log.ndjson"
    path.write_text("\n".join(lines) + "\n")
    result = replay_file(str(path), progress=False, max_divergences=keep_going)
    assert result.status == "diverge", result.status
    divergence = result.divergences[0]
    rendered = divergence.render()
    data = divergence.to_dict()
    assert rendered.splitlines()[0].startswith(f"{path}:{data['line']}:{data['column']}: ")
    for line in data["state"]:  # type: ignore[attr-defined]
        assert f"    {line}" in rendered.splitlines()
    return {"divergence": divergence, **data}


def column_of(line: str, field: str) -> int:
    return line.index(f'"{field}":') + 1


def test_a_record_after_its_request_ended(tmp_path: Path) -> None:
    lines = BASIC.read_text().splitlines()
    late = (
        '{"record":"request_step","step":4,"request":"b","proposed":1,"padding":0,'
        '"grammar_valid":null,"scheduled":1,"invalid":null,"verified":null,"sampled":1,'
        '"accepted":0,"outcome":"applied"}'
    )
    lines.insert(10, late)  # after b's finish (line 9) and step 3's step_stats
    got = replay_lines(tmp_path, lines)
    assert got["reason"] == "request already finished (line 9)"
    assert got["rule"] == "E2"
    assert got["line"] == 11 and got["column"] == column_of(late, "request")
    assert got["state"] == ["request 'b': finished at line 9"]
    assert got["divergence"].state == RequestView("b", ended=("finished", 9))  # type: ignore[attr-defined]


def test_accepted_not_sampled_minus_one(tmp_path: Path) -> None:
    """The state is the reference's at detection, though the replay goes on to the end (the
    request finishes later): a snapshot, rendered when the report is."""
    lines = BASIC.read_text().splitlines()
    lines[3] = lines[3].replace('"accepted":2', '"accepted":1')
    got = replay_lines(tmp_path, lines, keep_going=50)
    assert got["rule"] == "L3"
    assert got["column"] == column_of(lines[3], "accepted")
    state = got["state"]
    assert state[0] == "request 'a': unstructured, active; no open block"  # type: ignore[index]
    assert state[1] == "rfc: drafted 3 verified 3 accepted 1 spec_steps 1"  # type: ignore[index]
    view = got["divergence"].state  # type: ignore[attr-defined]
    assert isinstance(view, RequestView) and view.state is not None and view.ended is None


def test_step_stats_that_differ(tmp_path: Path) -> None:
    lines = BASIC.read_text().splitlines()
    lines[5] = lines[5].replace('"num_drafts":2', '"num_drafts":3')
    got = replay_lines(tmp_path, lines)
    assert (got["kind"], got["rule"], got["line"], got["column"]) == ("step_stats", "L1", 6, 1)
    blocks = got["divergence"].state  # type: ignore[attr-defined]
    assert isinstance(blocks, StepBlocks) and [b[:3] for b in blocks.blocks] == [
        (4, "a", (1, 3, 2)),
        (5, "b", (1, 2, 0)),
    ]
    assert got["state"][0] == (  # type: ignore[index]
        "step 2 blocks (line: request -> legacy drafts/tokens/accepted):"
    )


def test_totals_that_differ(tmp_path: Path) -> None:
    lines = BASIC.read_text().splitlines()
    lines[-1] = lines[-1].replace('"num_drafts":5', '"num_drafts":6')
    got = replay_lines(tmp_path, lines)
    assert (got["kind"], got["rule"]) == ("totals", "L1")
    assert got["divergence"].state == ReportedSums((5, 11, 6), [3, 2, 1])  # type: ignore[attr-defined]
    assert got["state"] == ["sum of step_stats records: [5, 11, 6] per_pos [3, 2, 1]"]
    assert json.loads(json.dumps(got["rule"])) == "L1"
