"""`spectally import sglang`: SGLang's log lines, gauges and meta_info against SGLang 0.5.23.

Real output is read from public pastes (cited per case); the reading is pinned to SGLang's own
code: the released wheel's functions are hashed (`SOURCE_PIN`) and their text is executed on the
steps the reference replays from a committed step log, and what they report is judged here.
The wheel is looked for in ~/.cache/spectally/sglang-0.5.23/ (`pip download --no-deps
sglang==0.5.23 -d ~/.cache/spectally/sglang-0.5.23`) or $SPECTALLY_SGLANG_WHEEL; without it the
pin tests are skipped, and everything else runs.
"""

from __future__ import annotations

import glob
import gzip
import json
import os
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from click.testing import CliRunner
from spectally.cli import main
from spectally.engine_bridge.engines import SGLANG_REPORTS
from spectally.engine_bridge.importers import sglang
from spectally.engine_bridge.replay import replay_file

FIXTURE = Path(__file__).parent.parent / "fixtures" / "llamacpp" / "same.steps.ndjson.gz"


def run(*args: str) -> tuple[int, str]:
    res = CliRunner().invoke(main, ["import", "sglang", *args])
    return res.exit_code, res.output


# sgl-project/sglang#33518, comment of 2026-08-07 (DSpark, block 5, completion_tokens 106).
META_33518 = {
    "completion_tokens": 106,
    "spec_accept_rate": 0.2930232558139535,
    "spec_accept_length": 2.4651162790697674,
    "spec_num_correct_drafts": 63,
    "spec_num_proposed_drafts": 215,
    "spec_verify_ct": 43,
    "spec_correct_drafts_histogram": [11, 14, 11, 4, 0, 3],
}
# sgl-project/sglang#13754 ("fix spec dec request level metrics"): the earlier field names.
META_13754 = {
    "id": "cf5e164f23c14777ac8d07d61fd84509",
    "completion_tokens": 200,
    "spec_accept_rate": 0.011702127659574468,
    "spec_accept_length": 1.0638297872340425,
    "spec_verify_ct": 188,
    "spec_accept_token_num": 11,
    "spec_draft_token_num": 940,
}
# sgl-project/sglang#6081 (2025-05-31): 'accept len' alone; #16974 (2026-01-12): with a rate.
LOG = [
    "[2025-05-31 18:31:21 DP0 TP0] Decode batch. #running-req: 8, #token: 37217, token usage:"
    " 0.13, accept len: 2.90, cuda graph: True, gen throughput (token/s): 171.01, #queue-req: 0",
    "[DP0 TP0] Decode batch, accept len: 2.20, accept rate: 0.73, cuda graph: True",
]


def test_real_meta_info_holds_every_identity(tmp_path: Path) -> None:
    f = tmp_path / "resp.ndjson"
    f.write_text(json.dumps({"meta_info": META_33518}) + "\n" + json.dumps(META_13754) + "\n")
    code, out = run(str(f))
    assert code == 0, out
    assert "proposed 215 = 43 x d 5" in out and "proposed 940 = 188 x d 5" in out
    assert "histogram of 6 buckets agrees" in out


@pytest.mark.parametrize(
    ("field", "value", "check"),
    [
        ("spec_accept_rate", 0.3, "spec_accept_rate = correct / proposed"),
        ("spec_accept_length", 2.5, "spec_accept_length = completion_tokens / verify_ct"),
        ("spec_num_proposed_drafts", 216, "proposed = verify_ct x d"),
        ("spec_num_correct_drafts", 64, "histogram weights to correct"),
        ("spec_correct_drafts_histogram", [11, 14, 11, 4, 1, 3], "histogram sums to verify_ct"),
    ],
)
def test_meta_info_mutants_are_caught(tmp_path: Path, field: str, value: Any, check: str) -> None:
    f = tmp_path / "resp.json"
    f.write_text(json.dumps([{"meta_info": {**META_33518, field: value}}]))
    code, out = run(str(f))
    assert code == 1 and check in out, out


def test_log_lines_are_read_with_and_without_rate(tmp_path: Path) -> None:
    f = tmp_path / "server.log"
    f.write_text("\n".join(LOG) + "\n")
    code, out = run(str(f))
    assert code == 0, out
    assert "no rate printed" in out and "draft length not given" in out
    # With the draft length given, 2.20 = 1 + 0.73 x d holds for no d: a release whose rate
    # has another denominator (#16974 predates 0.5.23) is named, not passed.
    code, out = run(str(f), "--draft-tokens", "2")
    assert code == 1 and "accept len vs accept rate" in out


def test_log_line_below_one_and_unprintable_rate(tmp_path: Path) -> None:
    f = tmp_path / "server.log"
    f.write_text("Decode batch, accept len: 0.50, accept rate: 0.10\n")
    assert run(str(f))[0] == 1
    f.write_text("Decode batch, accept len: 2.00, accept rate: 1.50\n")
    code, out = run(str(f))
    assert code == 2 and f"{f}:1:" in out


def test_gauges_are_checked_and_called_interval_values(tmp_path: Path) -> None:
    f = tmp_path / "metrics.txt"
    f.write_text(
        "# TYPE sglang:spec_accept_length gauge\n"
        'sglang:spec_accept_length{model_name="m"} 3.4\n'
        "# TYPE sglang:spec_accept_rate gauge\n"
        'sglang:spec_accept_rate{model_name="m"} 0.8\n'
    )
    code, out = run(str(f), "--draft-tokens", "3")
    assert code == 0, out
    assert "interval values" in out
    f.write_text(f.read_text().replace("0.8", "0.5"))
    assert run(str(f), "--draft-tokens", "3")[0] == 1


def _wheel() -> str | None:
    env = os.environ.get("SPECTALLY_SGLANG_WHEEL")
    if env:
        return env
    found = glob.glob(os.path.expanduser("~/.cache/spectally/sglang-0.5.23/sglang-0.5.23-*.whl"))
    return found[0] if found else None


WHEEL = _wheel()
needs_wheel = pytest.mark.skipif(WHEEL is None, reason="the sglang 0.5.23 wheel is not here")


@needs_wheel
def test_source_pin_holds() -> None:
    assert WHEEL is not None
    assert sglang.pin_mismatches(WHEEL) == []
    changed = ((*sglang.SOURCE_PIN[0][:3], "0" * 64),)
    assert sglang.pin_mismatches(WHEEL, changed)


def _load(wheel: str, index: int, env: dict[str, Any]) -> Callable[..., Any]:
    """A pinned function of the wheel, compiled from its text (its module does not import on
    a CPU-only machine)."""
    member, qualname, _, _ = sglang.SOURCE_PIN[index]
    _, text = sglang.function_text(wheel, member, qualname)
    namespace: dict[str, Any] = {"Dict": dict, "Any": Any, "Union": Any, **env}
    exec(compile(text, f"{member}:{qualname}", "exec"), namespace)
    fn: Callable[..., Any] = namespace[qualname.split(".")[1]]
    return fn


def _steps() -> tuple[list[tuple[str, int, int]], int]:
    with gzip.open(FIXTURE) as f:
        recs = [json.loads(line) for line in f]
    steps = [
        (r["request"], r["proposed"], r["accepted"]) for r in recs if r["record"] == "request_step"
    ]
    return steps, int(recs[0]["num_speculative_tokens"])


@needs_wheel
def test_released_code_counts_as_declared(tmp_path: Path) -> None:
    """SGLang's own update_spec_metrics, get_num_generated_tokens and
    _calculate_spec_decoding_metrics, run on the steps the reference replays (a real
    llama-server capture, k = 4, drafts shorter than k included): the figures they report are
    the declared ones (accepted / (steps x configured d), (accepted + steps) / steps), which
    this importer passes, and which differ from the RFC's accepted / drafted."""
    assert WHEEL is not None
    steps, k = _steps()
    result = replay_file(str(FIXTURE))
    rfc = result.summary["totals"]["rfc"]
    assert (rfc["spec_steps"], rfc["accepted"]) == (len(steps), sum(a for _, _, a in steps))

    update = _load(WHEEL, 0, {})
    generated = _load(WHEEL, 3, {})
    spec = SimpleNamespace(speculative_num_draft_tokens=k + 1)
    calc = _load(WHEEL, 2, {"get_spec": lambda: spec, "_ragged_verify_cap_accept": lambda: False})
    reporter = SimpleNamespace(
        spec_num_accept_tokens=0,
        spec_num_correct_drafts=0,
        spec_num_forward_ct=0,
        spec_num_block_accept_tokens=0,
        spec_num_cap_tokens=0,
    )
    per_req: dict[str, list[int]] = {}
    for rid, _, accepted in steps:
        batch = SimpleNamespace(num_non_draft_tokens_per_req=1, num_correct_drafts=accepted)
        update(reporter, 1, accepted, num_accept_tokens=generated(batch, 1))
        per_req.setdefault(rid, []).append(accepted)
    # metrics_reporter.py:973-982, the interval figures from the sums SGLang's code kept.
    length = reporter.spec_num_accept_tokens / reporter.spec_num_forward_ct
    rate = reporter.spec_num_correct_drafts / (reporter.spec_num_forward_ct * k)
    assert rate == rfc["accepted"] / (rfc["spec_steps"] * k)  # the configured denominator
    assert rate != rfc["accepted"] / rfc["drafted"]  # not the RFC's drafted
    assert length == 1 + rfc["accepted"] / rfc["spec_steps"]  # bonus included
    assert SGLANG_REPORTS.rate_denominator == "configured"

    metas = []
    for rid, corrects in per_req.items():
        recv = SimpleNamespace(
            spec_verify_ct=[len(corrects)],
            spec_num_correct_drafts=[sum(corrects)],
            completion_tokens=[sum(corrects) + len(corrects)],
            spec_num_cap_tokens=None,
            spec_num_block_accept_tokens=None,
            spec_correct_drafts_histogram=[[corrects.count(i) for i in range(k + 1)]],
            spec_cap_lens_histogram=None,
        )
        meta: dict[str, Any] = {"id": rid, "completion_tokens": recv.completion_tokens[0]}
        calc(None, meta, recv, 0)
        metas.append({"meta_info": meta})
    f = tmp_path / "meta.ndjson"
    f.write_text("".join(json.dumps(m) + "\n" for m in metas))
    code, out = run(str(f), "--draft-tokens", str(k))
    assert code == 0, out
    log = tmp_path / "server.log"
    log.write_text(f"Decode batch, accept len: {length:.2f}, accept rate: {rate:.2f}, \n")
    code, out = run(str(log), "--draft-tokens", str(k))
    assert code == 0, out


def test_rate_alone_and_per_position_series(tmp_path: Path) -> None:
    """A scrape with the rate gauge alone, or only the per-position series of newer releases
    (sgl-project/sglang#31750), is read, not an internal error; a rate above 1 is exit 2."""
    f = tmp_path / "metrics.txt"
    f.write_text('sglang:spec_accept_rate{model_name="m"} 0.4\n')
    code, out = run(str(f))
    assert code == 0 and "accept rate without length" in out, out
    f.write_text('sglang:spec_accept_rate_per_position{position="0"} 0.9\n')
    code, out = run(str(f))
    assert code == 0 and "per-position" in out, out
    f.write_text('sglang:spec_accept_rate_per_position{position="0"} 1.9\n')
    assert run(str(f))[0] == 2


def test_gauge_values_the_engine_cannot_export_are_exit_2(tmp_path: Path) -> None:
    f = tmp_path / "metrics.txt"
    for text in ("sglang:spec_accept_rate 1.5\n", "sglang:spec_accept_length NaN\n"):
        f.write_text(text)
        code, out = run(str(f))
        assert code == 2 and f"{f}:1:" in out, out


def test_a_malformed_gauge_line_is_exit_2_naming_its_line(tmp_path: Path) -> None:
    """The gauges are parsed by the bridge's one Prometheus reader: a line it cannot parse is
    bad input at its file:line, as for vLLM's and llama-server's scrapes."""
    f = tmp_path / "metrics.txt"
    for bad in ('sglang:spec_accept_length{model_name="m" 3.4', "sglang:spec_accept_rate 0.4 x y"):
        f.write_text(f"# TYPE sglang:spec_accept_length gauge\n{bad}\n")
        code, out = run(str(f))
        assert code == 2 and f"{f}:2:1: bad Prometheus sample line" in out, out


def test_stdin_is_read_once(tmp_path: Path) -> None:
    res = CliRunner().invoke(
        main, ["import", "sglang", "-"], input=json.dumps({"meta_info": META_33518}) + "\n"
    )
    assert res.exit_code == 0 and "1 ok" in res.output, res.output
