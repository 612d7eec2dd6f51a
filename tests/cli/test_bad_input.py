"""Every class of malformed step log gets one line ``file:line:column: reason`` and exit 2.

One test per class; each shows the exact message a user sees.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest
from click.testing import CliRunner
from log_lines import ADD, HEADER, dumps
from spectally.commands.replay import replay
from spectally.engine_bridge.replay.dispatch import replay_file

STEP = {
    "record": "request_step",
    "step": 2,
    "request": "a",
    "proposed": 3,
    "padding": 0,
    "grammar_valid": None,
    "scheduled": 3,
    "invalid": None,
    "verified": None,
    "sampled": 2,
    "accepted": 1,
    "outcome": "applied",
}


line = dumps


def col(rec: dict[str, object], field: str) -> int:
    """1-based column of ``"field":`` in the record's compact JSON line."""
    return line(rec).index(json.dumps(field) + ":") + 1


def bad(tmp_path: Path, text: str, name: str = "log.ndjson") -> str:
    """Replay ``text`` through the CLI; return the one-line error (exit code 2 asserted)."""
    path = tmp_path / name
    path.write_text(text)
    result = CliRunner().invoke(replay, [str(path)])
    assert result.exit_code == 2, result.output
    assert result.stdout == ""
    message = result.stderr.strip()
    assert "\n" not in message
    return message.replace(str(path), name)


def log(*records: dict[str, object]) -> str:
    return "".join(line(r) + "\n" for r in records)


def test_bad_json(tmp_path: Path) -> None:
    text = log(HEADER, ADD) + '{"record":"request_step","step":2,,}\n'
    assert bad(tmp_path, text) == (
        "log.ndjson:3:35: bad JSON: Expecting property name enclosed in double quotes"
    )


def test_missing_field(tmp_path: Path) -> None:
    rec = dict(STEP)
    del rec["scheduled"]
    assert bad(tmp_path, log(HEADER, ADD, rec)) == (
        "log.ndjson:3:1: missing field 'scheduled' in a request_step record"
    )


def test_unknown_field(tmp_path: Path) -> None:
    rec = {**STEP, "acepted": 1}
    assert bad(tmp_path, log(HEADER, ADD, rec)) == (
        f"log.ndjson:3:{col(rec, 'acepted')}: unknown field 'acepted' in a request_step record"
    )


def test_unknown_record_kind(tmp_path: Path) -> None:
    assert bad(tmp_path, log(HEADER, {"record": "steps"})) == (
        "log.ndjson:2:2: unknown record kind 'steps' (expected one of header, request,"
        " request_step, step_stats, totals)"
    )


def test_wrong_type(tmp_path: Path) -> None:
    rec = {**STEP, "proposed": "3"}
    assert bad(tmp_path, log(HEADER, ADD, rec)) == (
        f"log.ndjson:3:{col(rec, 'proposed')}: proposed: '3' is not of type 'integer'"
    )


def test_bool_is_not_a_count(tmp_path: Path) -> None:
    rec = {**STEP, "padding": False}
    assert bad(tmp_path, log(HEADER, ADD, rec)) == (
        f"log.ndjson:3:{col(rec, 'padding')}: padding: False is not of type 'integer'"
    )


def test_float_is_not_a_count(tmp_path: Path) -> None:
    rec = {**STEP, "sampled": 2.0}
    assert bad(tmp_path, log(HEADER, ADD, rec)) == (
        f"log.ndjson:3:{col(rec, 'sampled')}: sampled: 2.0 is not an integer"
    )


def test_negative_count(tmp_path: Path) -> None:
    rec = {**STEP, "accepted": -1}
    assert bad(tmp_path, log(HEADER, ADD, rec)) == (
        f"log.ndjson:3:{col(rec, 'accepted')}: accepted: -1 is less than the minimum of 0"
    )


def test_bad_enum(tmp_path: Path) -> None:
    rec = {**STEP, "outcome": "dropped"}
    message = bad(tmp_path, log(HEADER, ADD, rec))
    assert message.startswith(
        f"log.ndjson:3:{col(rec, 'outcome')}: outcome: 'dropped' is not one of"
    )


def test_add_without_structured(tmp_path: Path) -> None:
    rec = {k: v for k, v in ADD.items() if k != "structured"}
    assert bad(tmp_path, log(HEADER, rec)) == (
        "log.ndjson:2:1: missing field 'structured' in a request record"
    )


def test_drop_stale_output_only_on_preempt(tmp_path: Path) -> None:
    rec = {**ADD, "drop_stale_output": True}
    assert bad(tmp_path, log(HEADER, rec)) == (
        f"log.ndjson:2:{col(rec, 'drop_stale_output')}: "
        "drop_stale_output is only for preempt records, not 'add'"
    )


def test_step_going_backwards(tmp_path: Path) -> None:
    text = log(HEADER, ADD, STEP, {**STEP, "step": 1})
    assert bad(tmp_path, text) == "log.ndjson:4:1: step went backwards: step 1 after step 2"


def test_record_for_unknown_request(tmp_path: Path) -> None:
    rec = {**STEP, "request": "b"}
    assert bad(tmp_path, log(HEADER, ADD, rec)) == (
        f"log.ndjson:3:{col(rec, 'request')}: record for unknown request 'b' (no add record"
        " before it)"
    )


def test_request_added_twice(tmp_path: Path) -> None:
    assert bad(tmp_path, log(HEADER, ADD, ADD)) == (
        f"log.ndjson:3:{col(ADD, 'request')}: request 'a' added twice"
    )


def test_truncated_final_line(tmp_path: Path) -> None:
    cut = line(STEP)[:60]  # a writer killed mid-line
    assert bad(tmp_path, log(HEADER, ADD) + cut) == (
        f"log.ndjson:3:{len(cut) + 1}: truncated final line (no newline at end): Expecting"
        " ',' delimiter"
    )


def test_complete_final_line_without_newline_is_accepted(tmp_path: Path) -> None:
    path = tmp_path / "log.ndjson"
    stats = {
        "record": "step_stats",
        "step": 2,
        "num_drafts": 1,
        "num_draft_tokens": 3,
        "num_accepted_tokens": 1,
        "num_accepted_tokens_per_pos": [1, 0, 0],
    }
    totals = {**stats, "record": "totals", "source": "test"}
    del totals["step"]
    path.write_text(log(HEADER, ADD, STEP, stats) + line(totals))
    assert replay_file(str(path), progress=False).status == "agree"


def test_unsupported_schema_version(tmp_path: Path) -> None:
    assert bad(tmp_path, log({**HEADER, "schema_version": 2})) == (
        "log.ndjson:1:20: unsupported schema_version 2 (this replay reads version 1)"
    )


def test_unsupported_engine_version(tmp_path: Path) -> None:
    assert bad(tmp_path, log({**HEADER, "engine_version": "0.35.0"})) == (
        "log.ndjson:1:1: no counting profile for vllm 0.35.0: the replay has vllm-legacy"
        " (vllm <= 0.33; counting source compared for 0.32.0, 0.33.0), vllm-0.34 (vllm 0.34;"
        " counting source compared for 0.34.0), llama.cpp (llama.cpp 0.5). If this version"
        " counts as one of them (compare its source: python -m"
        " spectally.engine_bridge.vllm.capture.counting_source WHEEL), replay with --force-profile"
        " vllm-legacy | vllm-0.34"
    )


def test_header_not_first(tmp_path: Path) -> None:
    assert bad(tmp_path, log(ADD, HEADER)) == "log.ndjson:1:1: the first record must be the header"


def test_second_header(tmp_path: Path) -> None:
    assert bad(tmp_path, log(HEADER, HEADER)) == "log.ndjson:2:1: a second header record"


def test_empty_log(tmp_path: Path) -> None:
    assert bad(tmp_path, "") == "log.ndjson:1:1: empty log: no header record"


def test_empty_line(tmp_path: Path) -> None:
    assert bad(tmp_path, log(HEADER) + "\n" + log(ADD)) == "log.ndjson:2:1: empty line"


def test_not_an_object(tmp_path: Path) -> None:
    assert bad(tmp_path, log(HEADER) + "[1, 2]\n") == (
        "log.ndjson:2:1: a record must be a JSON object, got list"
    )


def test_per_position_length(tmp_path: Path) -> None:
    stats = {
        "record": "step_stats",
        "step": 2,
        "num_drafts": 1,
        "num_draft_tokens": 3,
        "num_accepted_tokens": 1,
        "num_accepted_tokens_per_pos": [1, 0],
    }
    assert bad(tmp_path, log(HEADER, ADD, STEP, stats)) == (
        f"log.ndjson:4:{col(stats, 'num_accepted_tokens_per_pos')}:"
        " num_accepted_tokens_per_pos has 2 entries; the header says k = 3"
    )


def test_request_step_after_its_step_stats(tmp_path: Path) -> None:
    stats = {
        "record": "step_stats",
        "step": 2,
        "num_drafts": 0,
        "num_draft_tokens": 0,
        "num_accepted_tokens": 0,
        "num_accepted_tokens_per_pos": [0, 0, 0],
    }
    text = log(HEADER, ADD, stats, STEP)
    assert bad(tmp_path, text) == (
        "log.ndjson:4:1: request_step for step 2 after that step's step_stats"
    )


def test_record_after_totals(tmp_path: Path) -> None:
    totals = {
        "record": "totals",
        "source": "get_metrics",
        "num_drafts": 0,
        "num_draft_tokens": 0,
        "num_accepted_tokens": 0,
        "num_accepted_tokens_per_pos": [0, 0, 0],
    }
    assert bad(tmp_path, log(HEADER, totals, ADD)) == (
        "log.ndjson:3:1: record after the totals record (totals is last)"
    )


def test_invalid_utf8(tmp_path: Path) -> None:
    path = tmp_path / "log.ndjson"
    path.write_bytes(log(HEADER).encode() + b'{"record":"\xff"}\n')
    result = replay_file(str(path), progress=False)
    assert result.bad_input is not None
    assert str(result.bad_input).endswith(":2:12: line is not valid UTF-8")


def test_truncated_gzip(tmp_path: Path) -> None:
    path = tmp_path / "log.ndjson.gz"
    data = gzip.compress(log(HEADER, ADD, STEP).encode())
    path.write_bytes(data[: len(data) - 12])
    result = replay_file(str(path), progress=False)
    assert result.status == "bad_input"
    assert "corrupt or truncated gzip stream" in str(result.bad_input)


def test_missing_file(tmp_path: Path) -> None:
    result = CliRunner().invoke(replay, [str(tmp_path / "nope.ndjson")])
    assert result.exit_code == 2
    assert "nope.ndjson:1:1: cannot read: No such file or directory" in result.stderr


@pytest.mark.parametrize("args", [[], ["--keep-going", "0", "x"]])
def test_usage_errors_exit_2(args: list[str]) -> None:
    assert CliRunner().invoke(replay, args).exit_code == 2
