"""llama.cpp's counting profile, pinned by spec/vectors-llamacpp.json.

Each vector is written as a llama-server log (the line formats of server-common.h's SLT_INF,
as the real logs in tests/fixtures/llamacpp/ show them) with its expected counters as the
/metrics delta, imported, and replayed: the replay AGREEs only if the importer and the replay's
profile count exactly as llama.cpp does, and its RFC totals must be the vector's. These logs are
hand-written from the vectors: they pin the rules; the real logs are replayed in
test_llamacpp_fixtures.py.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from spectally.engine_bridge.llamacpp.importer import import_log, write
from spectally.engine_bridge.llamacpp.profile import DECLARATIONS, LLAMACPP_REPORTS, llamacpp_step
from spectally.engine_bridge.replay.dispatch import replay_file
from spectally.engine_bridge.steplog.translate import profile_for

ROOT = Path(__file__).resolve().parents[2]
VECTORS = json.loads((ROOT / "spec" / "vectors-llamacpp.json").read_text())


def slot_line(task: int, msg: str, func: str = "update_slots", slot: int = 0) -> str:
    return f"slot {func[:12]:>12}: id {slot:2d} | task {task} | {msg}"


def metrics_text(c: dict[str, Any]) -> str:
    out = [
        f"llamacpp:spec_decode_num_draft_tokens_total {c['num_draft_tokens']}",
        f"llamacpp:spec_decode_num_accepted_tokens_total {c['num_accepted_tokens']}",
        f"llamacpp:spec_decode_num_drafts_total {c['num_drafts']}",
    ]
    out += [
        f'llamacpp:spec_decode_num_accepted_tokens_per_pos_total{{position="{i}"}} {v}'
        for i, v in enumerate(c["per_pos"])
    ]
    return "\n".join(out) + "\n"


def server_log(lines: list[str], drafted: int, accepted: int) -> str:
    out = [
        "version: 0.5.0-dev (build 1, commit 0c1e570)",
        slot_line(1, "processing task, is_child = 0", "launch_slot_"),
    ]
    out += [slot_line(1, line, "operator()") for line in lines]
    # server_slot::print_timings' own figures: R = A / D, mean = 1 + A / verification steps.
    steps = sum(1 for line in lines if "restore" not in line and "new n_tokens" not in line)
    rate = accepted / drafted if drafted else 0.0
    mean = 1 + accepted / steps if steps else 1.0
    out.append(
        slot_line(
            1,
            f"draft acceptance = {rate:0.5f} ({accepted:5d} accepted / {drafted:5d} generated),"
            f" mean len = {mean:5.2f}",
            "print_timing",
        )
    )
    out.append(slot_line(1, "stop processing: n_tokens = 40, truncated = 0", "release"))
    return "\n".join(out) + "\n"


def run_vector(tmp: Path, vec: dict[str, Any], lines: list[str] | None = None) -> Any:
    ll = vec["llamacpp"]
    (tmp / "server.log").write_text(
        server_log(lines or vec["lines"], ll["num_draft_tokens"], ll["num_accepted_tokens"])
    )
    (tmp / "after.txt").write_text(metrics_text(ll))
    imported = import_log(
        str(tmp / "server.log"), metrics_after=str(tmp / "after.txt"), k=VECTORS["k"]
    )
    write(imported.records, str(tmp / "steps.ndjson"))
    return imported, replay_file(str(tmp / "steps.ndjson"), reference=True, progress=False)


@pytest.mark.parametrize("vec", VECTORS["vectors"], ids=lambda v: v["name"])
def test_vector_replays_agree(tmp_path: Path, vec: dict[str, Any]) -> None:
    imported, result = run_vector(tmp_path, vec)
    assert imported.exit_code == 0, imported.divergences
    assert result.status == "agree", [d.render() for d in result.divergences]
    rfc = result.summary["totals"]["rfc"]
    assert {n: rfc[n] for n in vec["rfc"]} == vec["rfc"]
    reported = result.summary["totals"]["vllm-legacy"]
    ll = vec["llamacpp"]
    assert (reported["spec_steps"], reported["drafted"], reported["accepted"]) == (
        ll["num_drafts"],
        ll["num_draft_tokens"],
        ll["num_accepted_tokens"],
    )


def test_restore_pair_counted_twice_diverges(tmp_path: Path) -> None:
    """The naive reading (every line a step) must not agree with llama.cpp's counters."""
    vec = next(v for v in VECTORS["vectors"] if v["name"].startswith("recurrent restore"))
    naive = [line.replace(" (restore checkpoint)", "") for line in vec["lines"]]
    imported, result = run_vector(tmp_path, vec, naive)
    assert imported.divergences  # the request's own line disagrees with the step lines
    assert result.status == "diverge"


def test_llamacpp_step_is_the_vectors_rule() -> None:
    for vec in VECTORS["vectors"]:
        if "restore" in vec["lines"][0]:
            continue
        totals = [0, 0, 0]
        for line in vec["lines"]:
            m = re.match(r"accepted\s+(\d+)/\s*(\d+)", line)
            assert m is not None
            for i, v in enumerate(llamacpp_step(int(m.group(2)), int(m.group(1)))):
                totals[i] += v
        ll = vec["llamacpp"]
        assert totals == [ll["num_drafts"], ll["num_draft_tokens"], ll["num_accepted_tokens"]]
    with pytest.raises(ValueError):
        llamacpp_step(2, 3)


def test_profile_is_registered() -> None:
    assert profile_for("llama.cpp", "0.5.0-dev+0c1e570") == LLAMACPP_REPORTS.profile
    assert DECLARATIONS[LLAMACPP_REPORTS.profile] is LLAMACPP_REPORTS
    assert LLAMACPP_REPORTS.grammar_forbidden_drafted == "all"
    assert LLAMACPP_REPORTS.verified_equals_drafted and not LLAMACPP_REPORTS.accepted_includes_bonus


def test_earlier_declaration_names_still_import() -> None:
    """The declarations' earlier names (docs named them) give the same objects."""
    from spectally.engine_bridge import engines
    from spectally.engine_bridge.llamacpp import profile

    for old, current in engines.EARLIER_NAMES.items():
        assert getattr(engines, old) is getattr(engines, current)
    assert profile.LLAMACPP is engines.LLAMACPP_REPORTS
    assert profile.VLLM_LEGACY is engines.VLLM_LEGACY_REPORTS
    assert profile.VLLM_034 is engines.VLLM_034_REPORTS
    with pytest.raises(AttributeError):
        engines.NOT_A_DECLARATION  # noqa: B018
