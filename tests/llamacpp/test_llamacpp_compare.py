"""``spectally compare``: a real vLLM 0.32 log and a real llama.cpp log of the same workload.

tests/fixtures/vllm/sync-draft-noise05-k3-so-json-xgrammar.ndjson.gz (vLLM 0.32.0 on the CPU)
and tests/fixtures/llamacpp/vllm-workload.steps.ndjson.gz (llama-server, the same prompts,
lengths, JSON schema, drafter and k = 3): vLLM reports a far higher acceptance rate because it
leaves grammar-cut drafts out of drafted; llama.cpp counts them. In the RFC's terms both count
every draft, and the command says so.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest
from click.testing import CliRunner
from spectally.cli import main

ROOT = Path(__file__).resolve().parents[2]
VLLM = ROOT / "tests" / "fixtures" / "vllm" / "sync-draft-noise05-k3-so-json-xgrammar.ndjson.gz"
LLAMA = ROOT / "tests" / "fixtures" / "llamacpp" / "vllm-workload.steps.ndjson.gz"
LLAMA_SAME = ROOT / "tests" / "fixtures" / "llamacpp" / "same.steps.ndjson.gz"


def compare(*args: str) -> tuple[int, str]:
    res = CliRunner().invoke(main, ["compare", *args])
    return res.exit_code, res.output


def rows(report: dict[str, object]) -> dict[str, tuple[str, str]]:
    table = report["table"]
    assert isinstance(table, list)
    return {r["row"]: (r["A"], r["B"]) for r in table}


def test_vllm_and_llamacpp_are_not_comparable_as_reported() -> None:
    code, out = compare(str(VLLM), str(LLAMA), "--json")
    assert code == 0, out
    report = json.loads(out)
    assert report["comparable_as_reported"] is False
    r = rows(report)
    assert r["engine"] == ("vllm 0.32.0", "llama.cpp 0.5.0-dev+0c1e570")
    # vLLM's own drafted leaves out the grammar-cut drafts; its RFC drafted counts them.
    drafted_reported, drafted_rfc = int(r["as reported: drafted"][0]), int(r["RFC: drafted"][0])
    cut = int(r["RFC fate: grammar_invalid_unverified"][0])
    assert cut > 0 and drafted_rfc - drafted_reported == cut
    # llama.cpp reports the RFC's figures: nothing is cut before its forward pass.
    assert r["as reported: drafted"][1] == r["RFC: drafted"][1] == r["RFC: verified"][1]
    text = "\n".join(report["differences"])
    assert f"{cut} grammar-invalid drafts now count as drafted" in text
    assert "grammar-forbidden drafts counted as drafted: A vllm-legacy = none" in text
    # llama.cpp's log cannot tell grammar-forbidden drafts from other rejected ones.
    assert f"these logs: A {cut}, B not told apart" in text
    assert any("draft quality" in n for n in report["rfc_notes"])


def test_same_profile_is_comparable() -> None:
    code, out = compare(str(LLAMA_SAME), str(LLAMA), "--json")
    assert code == 0
    report = json.loads(out)
    assert report["comparable_as_reported"] is True
    assert report["differences"] == []


def test_text_report_names_both_logs() -> None:
    code, out = compare(str(VLLM), str(LLAMA))
    assert code == 0
    assert out.startswith(f"A: {VLLM}\nB: {LLAMA}\n")
    assert "comparable as reported: NO" in out


def test_a_diverging_log_is_exit_1(tmp_path: Path) -> None:
    lines = gzip.decompress(LLAMA.read_bytes()).decode().splitlines()
    totals = json.loads(lines[-1])
    totals["num_accepted_tokens"] += 1
    lines[-1] = json.dumps(totals)
    bad = tmp_path / "bad.ndjson"
    bad.write_text("\n".join(lines) + "\n")
    code, out = compare(str(VLLM), str(bad))
    assert code == 1 and "DIVERGE" in out


def test_bad_input_is_exit_2(tmp_path: Path) -> None:
    bad = tmp_path / "bad.ndjson"
    bad.write_text("not json\n")
    code, out = compare(str(bad), str(LLAMA))
    assert code == 2 and f"{bad}:1:" in out


@pytest.mark.parametrize("args", [["compare", "--help"], ["import", "llamacpp", "--help"]])
def test_help_states_the_exit_codes(args: list[str]) -> None:
    res = CliRunner().invoke(main, args)
    assert res.exit_code == 0
    text = " ".join(res.output.split())
    assert "Exit codes" in text and "70 internal error" in text and "130 interrupted" in text


def test_two_vllm_releases_on_one_workload() -> None:
    """vLLM 0.33 and 0.34's real schedulers on the same workload (the simulated-runner captures
    of engine_bridge/vllm/capture/sim_so.py): the reported figures differ by the grammar cut, the
    RFC's do not."""
    fixtures = ROOT / "tests" / "fixtures" / "vllm"
    a = fixtures / "sim-vllm-0.33.0-sync-so-json-k4.ndjson.gz"
    b = fixtures / "sim-vllm-0.34.0-sync-so-json-k4.ndjson.gz"
    code, out = compare(str(a), str(b), "--json")
    assert code == 0, out
    report = json.loads(out)
    assert report["comparable_as_reported"] is False
    r = rows(report)
    assert r["profile"] == ("vllm-legacy", "vllm-0.34")
    assert r["as reported: drafted"][0] != r["as reported: drafted"][1]
    for row in (
        "RFC: drafted",
        "RFC: accepted",
        "RFC: spec_steps",
        "RFC: acceptance rate (accepted/drafted)",
    ):
        assert r[row][0] == r[row][1], row
    assert any(
        "A vllm-legacy = none, B vllm-0.34 = first_per_block" in d for d in report["differences"]
    )
