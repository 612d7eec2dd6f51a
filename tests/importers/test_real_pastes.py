"""`import logs` on whole log excerpts that users and maintainers pasted publicly.

The files under tests/fixtures/pastes/ are copied verbatim from the threads their README cites:
vLLM 0.9.0.1's and 2025-09 main's `v1-rate-first-mean` line (the layout without throughputs,
printed from 0.8.5 to 0.10.1.1), data-parallel engines told apart by the `Engine NNN:` stats
line, and two consecutive intervals of one engine whose throughputs meet the timestamps. Each
consistent line passes within print precision; a copy with one number changed is caught and
the check that catches it is named. The readers follow vLLM's format strings
(`log_layouts.LAYOUTS`), not these files.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from spectally.engine_bridge.importers import logs
from spectally.engine_bridge.importers.findings import NOTE, OK, VIOLATION, Finding, Totals

PASTES = Path(__file__).parent.parent / "fixtures" / "pastes"

# file: (layout, engine of each spec-decode line, (Σ Drafted, Σ Accepted))
EXCERPTS = {
    "vllm-19254-ngram.log": ("v1-rate-first-mean", ["000", "000"], (1875, 875)),
    "vllm-24049-dp.log": ("v1-rate-first-mean", ["000", "001"], (185, 44)),
    "vllm-41789-mtp.log": ("v1-mean-first", ["000", "000"], (5376, 40)),
}


def check(path: Path) -> list[Finding]:
    return logs.check_files([str(path)])


@pytest.mark.parametrize("name", sorted(EXCERPTS))
def test_excerpt_is_read_with_its_layout_engines_and_totals(name: str) -> None:
    layout, engines, (drafted, accepted) = EXCERPTS[name]
    lines = logs.read_lines(str(PASTES / name))
    assert [x.layout.name for x in lines] == [layout] * len(engines)
    assert [x.engine for x in lines] == engines
    findings = check(PASTES / name)
    assert {f.verdict for f in findings} == {OK}, [f.render() for f in findings]
    totals = [f.totals for f in findings if isinstance(f, Totals)]
    assert totals and totals[0] is not None
    assert (totals[0]["drafted"], totals[0]["accepted"]) == (drafted, accepted)


def test_rate_first_mean_lines_follow_one_plus_accepted_over_drafts() -> None:
    """vLLM 0.9.0.1 and 2025-09 main print mean = 1 + Accepted/num_drafts (0.8.5 printed
    Accepted/num_drafts): the per-position rates say which, and num_drafts comes out whole
    (n-gram k = 3: 387 drafted tokens = 129 drafts; data parallel k = 5: 110 = 22, 75 = 15)."""
    lines = [
        x
        for name in ("vllm-19254-ngram.log", "vllm-24049-dp.log")
        for x in logs.read_lines(str(PASTES / name))
    ]
    assert [logs.mean_offset(x) for x in lines] == [1, 1, 1, 1]
    assert [logs.drafts_range(x) for x in (lines[0], lines[2], lines[3])] == [
        (129, 129),
        (22, 22),
        (15, 15),
    ]
    message = logs.check_line(lines[0])[0].message
    assert message.startswith("v1-rate-first-mean (vLLM 0.8.5-0.10.1.1): ")
    assert "mean 2.16 = 1 + Σ per-position within rounding; num_drafts (not printed) in 129" in (
        message
    )


def test_one_engine_interval_meets_its_timestamps() -> None:
    """1724 drafted tokens / 172.41 tokens/s = 10.0s, the 10s between the two intervals of
    engine 000 (vLLM measures from its previous line)."""
    findings = check(PASTES / "vllm-41789-mtp.log")
    intervals = [f for f in findings if f.check == "interval vs timestamps"]
    assert [(f.verdict, f.line) for f in intervals] == [(OK, 5)]
    assert "= 10.0s, the 10s since line 2" in intervals[0].message


# (file, line, text there, the copy's text, the check that names it, its verdict)
MUTANTS = [
    (
        "vllm-19254-ngram.log",
        4,
        "rate: 48.7%",
        "rate: 49.7%",
        "acceptance rate vs Accepted/Drafted",
        VIOLATION,
    ),
    (
        "vllm-19254-ngram.log",
        2,
        "length: 2.16",
        "length: 2.26",
        "mean length vs per-position",
        VIOLATION,
    ),
    (
        "vllm-19254-ngram.log",
        2,
        "0.543, 0.357",
        "0.543, 0.367",
        "mean length vs per-position",
        VIOLATION,
    ),
    (
        "vllm-24049-dp.log",
        2,
        "Accepted: 17 ",
        "Accepted: 18 ",
        "acceptance rate vs Accepted/Drafted",
        VIOLATION,
    ),
    (
        "vllm-24049-dp.log",
        4,
        "0.333, 0.333, 0.333",
        "0.333, 0.433, 0.333",
        "per-position non-increasing",
        VIOLATION,
    ),
    (
        "vllm-41789-mtp.log",
        5,
        "Drafted throughput: 172.41",
        "Drafted throughput: 182.41",
        "throughputs vs Accepted/Drafted",
        VIOLATION,
    ),
    (
        "vllm-41789-mtp.log",
        5,
        "length: 1.03",
        "length: 1.13",
        "mean length vs per-position",
        VIOLATION,
    ),
    ("vllm-41789-mtp.log", 5, "06:11:33", "06:11:53", "interval vs timestamps", NOTE),
]


@pytest.mark.parametrize(
    ("name", "line", "old", "new", "check_name", "verdict"),
    MUTANTS,
    ids=[f"{m[0]}:{m[1]}:{m[3]}" for m in MUTANTS],
)
def test_one_changed_number_is_caught_and_named(
    tmp_path: Path, name: str, line: int, old: str, new: str, check_name: str, verdict: str
) -> None:
    text = (PASTES / name).read_text().splitlines()
    assert text[line - 1].count(old) == 1
    text[line - 1] = text[line - 1].replace(old, new)
    path = tmp_path / name
    path.write_text("\n".join(text) + "\n")
    flagged = [f for f in check(path) if f.verdict != OK]
    assert (check_name, verdict, line) in [(f.check, f.verdict, f.line) for f in flagged], [
        f.render() for f in flagged
    ]
    assert {f.line for f in flagged} == {line}
