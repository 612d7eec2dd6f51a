"""`import logs` on every layout of vLLM's spec-decode log line, V0 to 0.34.

Two kinds of evidence: lines that users and maintainers pasted publicly (each cited by thread and
date, kept as pasted), and lines written here by each release's own computation and format string
(copied from that release's source, independently of the reader's table), over many counts, so a
rounding edge of any layout is exercised. The reader must pass every consistent line, catch each
inconsistency by name, and refuse what no layout prints with the nearest layout's name, its
versions and the column where the line departs.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st
from spectally.engine_bridge.cli import import_group
from spectally.engine_bridge.importers import log_layouts, logs
from spectally.engine_bridge.importers.findings import NOTE, OK, VIOLATION, Finding
from spectally.engine_bridge.steplog.source import BadInput

# -- real pasted lines -------------------------------------------------------------------------

REAL = {
    # vllm-project/vllm issue #7301, cadedaniel's comment of 2024-08-08 (V0)
    "v0-7301-cadedaniel": (
        "Speculative metrics: Draft acceptance rate: 0.607, System efficiency: 0.510, Number of"
        " speculative tokens: 4, Number of accepted tokens: 32594, Number of draft tokens:"
        " 53716, Number of emitted tokens: 34244.",
        "v0",
    ),
    # vllm-project/vllm issue #7301, Neo9061's comment of 2025-02-06 (V0, two lines)
    "v0-7301-neo9061-a": (
        "INFO 02-06 03:05:53 metrics.py:475] Speculative metrics: Draft acceptance rate: 0.200,"
        " System efficiency: 0.167, Number of speculative tokens: 5, Number of accepted tokens:"
        " 1, Number of draft tokens: 5, Number of emitted tokens: 1.",
        "v0",
    ),
    "v0-7301-neo9061-b": (
        "INFO 02-06 03:18:09 metrics.py:475] Speculative metrics: Draft acceptance rate: 0.067,"
        " System efficiency: 0.167, Number of speculative tokens: 5, Number of accepted tokens:"
        " 1, Number of draft tokens: 15, Number of emitted tokens: 3.",
        "v0",
    ),
    # vllm-project/vllm PR #15902, description of 2025-04-01: the line before the PR
    # (PR #15151's V1 layout, trailing ", " included) and after it
    "v1-15902-before": (
        "Speculative metrics: Draft acceptance rate: 1.000, Number of accepted tokens: 66,"
        " Number of draft tokens: 66, ",
        "v1-speculative",
    ),
    "v1-15902-after": (
        "SpecDecoding metrics: Draft acceptance rate: 100.0%, Accepted: 66 tokens, Drafted: 66"
        " tokens",
        "v1-rate-only",
    ),
    # vllm-project/vllm issue #15958, 2025-04-02: main at 44f990515 printing the line with
    # nothing drafted (speculative decoding off), nan% as vLLM prints it
    "v1-15958-nan": (
        "INFO 04-02 18:03:41 [metrics.py:53] SpecDecoding metrics: Draft acceptance rate: nan%,"
        " Accepted: 0 tokens, Drafted: 0 tokens",
        "v1-rate-only",
    ),
    # vllm-project/vllm PR #24127, description (test result of 2025-09-09)
    "v1-24127": (
        "(APIServer pid=2236552) INFO 09-09 11:51:35 [metrics.py:96] SpecDecoding metrics: Draft"
        " acceptance rate: 88.8%, Mean acceptance length: 5.44, Accepted throughput: 4.37"
        " tokens/s, Drafted throughput: 4.92 tokens/s, Accepted: 262 tokens, Drafted: 295"
        " tokens, Per-position acceptance rate: 0.983, 0.949, 0.915, 0.881, 0.712",
        "v1-rate-first-throughput",
    ),
    # AEON-7/Qwen3.6-27B-AEON-Ultimate-Uncensored-DFlash issue #6, 2026-05-01 (k = 15)
    "v1-aeon7-6": (
        "(APIServer pid=1) INFO 05-01 14:24:50 [metrics.py:101] SpecDecoding metrics: Mean"
        " acceptance length: 2.37, Accepted throughput: 8.90 tokens/s, Drafted throughput: 97.50"
        " tokens/s, Accepted: 89 tokens, Drafted: 975 tokens, Per-position acceptance rate:"
        " 0.600, 0.385, 0.215, 0.108, 0.062, 0.000, 0.000, 0.000, 0.000, 0.000, 0.000, 0.000,"
        " 0.000, 0.000, 0.000, Avg Draft acceptance rate: 9.1%",
        "v1-mean-first",
    ),
    # vllm-project/vllm-ascend issue #13665 (vllm-ascend serves through vLLM's own logger)
    "ascend-13665": (
        "(APIServer pid=6485) INFO 08-05 20:20:43 [metrics.py:100] SpecDecoding metrics: Mean"
        " acceptance length: 1.00, Accepted throughput: 0.00 tokens/s, Drafted throughput: 1.23"
        " tokens/s, Accepted: 0 tokens, Drafted: 495 tokens, Per-position acceptance rate:"
        " 0.000, 0.000, 0.000, 0.000, 0.000, Avg Draft acceptance rate: 0.0%",
        "v1-mean-first",
    ),
}


@pytest.mark.parametrize("name", sorted(REAL))
def test_real_pasted_lines_are_read_and_consistent(name: str) -> None:
    text, layout = REAL[name]
    x = logs.parse_line("paste", 1, text)
    assert x is not None
    assert x.layout.name == layout
    findings = logs.check_line(x)
    assert [f.verdict for f in findings] == [OK], [f.render() for f in findings]
    assert findings[0].message.startswith(x.layout.describe())
    assert (str(x.layout), x.versions) == (layout, x.layout.versions)  # what `explain` names


def test_real_v0_values_and_efficiency() -> None:
    x = logs.parse_line("paste", 1, REAL["v0-7301-cadedaniel"][0])
    assert x is not None
    assert (x.k, x.accepted, x.drafted, x.emitted) == (4, 32594, 53716, 34244)
    msg = logs.check_line(x)[0].message
    assert "system efficiency 0.510 = emitted 34244 / (53716 // k 4 * 5)" in msg


ASCEND_NEXT = [
    "(APIServer pid=6485) INFO 08-05 20:35:43 [metrics.py:100] SpecDecoding metrics: Mean"
    " acceptance length: 1.00, Accepted throughput: 0.00 tokens/s, Drafted throughput: 0.55"
    " tokens/s, Accepted: 0 tokens, Drafted: 495 tokens, Per-position acceptance rate:"
    " 0.000, 0.000, 0.000, 0.000, 0.000, Avg Draft acceptance rate: 0.0%",
    "(APIServer pid=6485) INFO 08-05 20:38:23 [metrics.py:100] SpecDecoding metrics: Mean"
    " acceptance length: 1.00, Accepted throughput: 0.00 tokens/s, Drafted throughput: 3.09"
    " tokens/s, Accepted: 0 tokens, Drafted: 495 tokens, Per-position acceptance rate:"
    " 0.000, 0.000, 0.000, 0.000, 0.000, Avg Draft acceptance rate: 0.0%",
]


def test_ascend_intervals_match_their_timestamps(tmp_path: Path) -> None:
    """Three consecutive lines of vllm-project/vllm-ascend issue #13665 (grep of one server's
    log): 495 / 0.55 tokens/s = 900s and 495 / 3.09 = 160.2s, the 15:00 and 2:40 between the
    timestamps. Without the middle line (a cut paste), the third line's 160s meets a 17:40 gap:
    a note, never a violation."""
    path = tmp_path / "d3.log"
    path.write_text("".join(line + "\n" for line in [REAL["ascend-13665"][0], *ASCEND_NEXT]))
    findings = logs.check_files([str(path)])
    assert {f.verdict for f in findings} == {OK}
    intervals = [f for f in findings if f.check == "interval vs timestamps"]
    assert [f.line for f in intervals] == [2, 3]
    assert "= 900.0s, the 900s since line 1" in intervals[0].message
    path.write_text(REAL["ascend-13665"][0] + "\n" + ASCEND_NEXT[1] + "\n")
    findings = logs.check_files([str(path)])
    assert not [f for f in findings if f.verdict == VIOLATION]
    notes = [f for f in findings if f.verdict == NOTE]
    assert [(f.check, f.line) for f in notes] == [("interval vs timestamps", 2)]
    assert "the timestamps are 1060s after line 1" in notes[0].message


# -- prefixes and paste wrapping ---------------------------------------------------------------

LINE = REAL["v1-aeon7-6"][0].split("[metrics.py:101] ")[1]
WRAPPED = [
    "INFO 05-01 14:24:50 [metrics.py:101] " + LINE,
    "(APIServer pid=1) INFO 05-01 14:24:50 [metrics.py:101] " + LINE,
    "(EngineCore_DP0 pid=77) INFO 05-01 14:24:50 [metrics.py:101] " + LINE,
    "vllm-1  | (APIServer pid=1) INFO 05-01 14:24:50 [metrics.py:101] " + LINE,
    "2026-05-01T14:24:50.123456789Z " + LINE,
    "> " + LINE,
    "`" + LINE + "`",
    "\x1b[32mINFO\x1b[0m 05-01 14:24:50 [metrics.py:101] " + LINE + "\x1b[0m",
    LINE + "  \r",
    "| " + LINE + " |",
]


@pytest.mark.parametrize("text", WRAPPED)
def test_prefixes_and_paste_wrapping(text: str) -> None:
    x = logs.parse_line("p", 1, text)
    assert x is not None and x.layout.name == "v1-mean-first"
    assert (x.accepted, x.drafted, len(x.per_pos or ())) == (89, 975, 15)
    assert [f.verdict for f in logs.check_line(x)] == [OK]


def test_markdown_paste_through_the_command(tmp_path: Path) -> None:
    body = "\n".join(
        [
            "I see this:",
            "```",
            REAL["v1-24127"][0],
            "```",
            "> " + REAL["v1-15902-after"][0],
            "and the old one: `" + REAL["v0-7301-cadedaniel"][0] + "`",
        ]
    )
    path = tmp_path / "issue.md"
    path.write_text(body + "\n")
    result = CliRunner().invoke(import_group, ["logs", "--json", str(path)])
    assert result.exit_code == 0, result.output
    assert "v1-rate-first-throughput" in result.stdout and "v0 (vLLM" in result.stdout


def test_process_identity_comes_from_the_prefix() -> None:
    a = logs.parse_line("p", 1, WRAPPED[1])
    b = logs.parse_line("p", 2, WRAPPED[3])
    assert a is not None and b is not None
    assert a.stamp == b.stamp and a.stamp is not None and a.stamp.second == 50
    assert a.origin == "(APIServer pid=1) INFO"
    assert b.origin == "vllm-1  | (APIServer pid=1) INFO"


# -- each release's own computation, over many counts ------------------------------------------
# The format strings below are copied from each release's source (see docs/log-layouts.md), not
# from the reader's table.

V0_FMT = (
    "Speculative metrics: Draft acceptance rate: {:.3f}, System efficiency: {:.3f}, Number of"
    " speculative tokens: {}, Number of accepted tokens: {}, Number of draft tokens: {}, Number"
    " of emitted tokens: {}."
)
V0_OLD_FMT = (
    "Speculative metrics: Draft acceptance rate: {:.3f}, System efficiency: {:.3f}, Number of"
    " speculative tokens: {}, Number of accepted tokens: {}, Number of draft tokens tokens: {},"
    " Number of emitted tokens tokens: {}."
)
V1_15151 = (
    "Speculative metrics: Draft acceptance rate: %.3f, Number of accepted tokens: %d, Number of"
    " draft tokens: %d, "
)
V1_15902 = (
    "SpecDecoding metrics: Draft acceptance rate: %.1f%%, Accepted: %d tokens, Drafted: %d tokens"
)
V1_16665 = (
    "SpecDecoding metrics: Draft acceptance rate: %.1f%%, Mean acceptance length: %.2f,"
    " Accepted: %d tokens, Drafted: %d tokens, Per-position acceptance rate: %s"
)
V1_24127_PR = (
    "SpecDecoding metrics: Draft acceptance rate: %.1f%%, Mean acceptance length: %.2f,"
    " Accepted throughput: %.2f tokens/s, Drafted throughput: %.2f tokens/s, Accepted: %d"
    " tokens, Drafted: %d tokens, Per-position acceptance rate: %s"
)
V1_CURRENT = (
    "SpecDecoding metrics: Mean acceptance length: %.2f, Accepted throughput: %.2f tokens/s,"
    " Drafted throughput: %.2f tokens/s, Accepted: %d tokens, Drafted: %d tokens, Per-position"
    " acceptance rate: %s, Avg Draft acceptance rate: %.1f%%"
)


def v1_lines(per_step: list[tuple[int, int]], k: int, seconds: float) -> dict[str, str]:
    """One interval of V1 steps (drafted, accepted), printed by every V1 layout's log()."""
    n = len(per_step)
    drafted = sum(d for d, _ in per_step)
    accepted = sum(a for _, a in per_step)
    per_pos = [sum(1 for _, a in per_step if a > i) for i in range(k)]
    rates = ", ".join(f"{p / n:.3f}" for p in per_pos)
    pct = accepted / drafted * 100 if drafted > 0 else float("nan")
    frac = accepted / drafted if drafted > 0 else float("nan")
    mean = 1 + accepted / n
    tp_a, tp_d = accepted / seconds, drafted / seconds
    return {
        "v1-speculative": V1_15151 % (frac, accepted, drafted),
        "v1-rate-only": V1_15902 % (pct, accepted, drafted),
        "v1-rate-first-mean": V1_16665 % (pct, mean, accepted, drafted, rates),
        "v1-rate-first-mean 0.8.5": V1_16665 % (pct, accepted / n, accepted, drafted, rates),
        "v1-rate-first-throughput": V1_24127_PR % (pct, mean, tp_a, tp_d, accepted, drafted, rates),
        "v1-mean-first": V1_CURRENT % (mean, tp_a, tp_d, accepted, drafted, rates, pct),
    }


def v0_line(per_seq: list[tuple[int, int]], k: int, fmt: str = V0_FMT) -> str:
    """V0's totals over sequences of k drafts each: (accepted anywhere, emitted) per sequence."""
    drafted = k * len(per_seq)
    accepted = sum(a for a, _ in per_seq)
    emitted = sum(e for _, e in per_seq)
    most = drafted // k * (k + 1)
    rate = accepted / drafted if drafted > 0 else float("nan")
    eff = emitted / most if most > 0 else float("nan")
    return fmt.format(rate, eff, k, accepted, drafted, emitted)


@st.composite
def v1_steps(draw: st.DrawFn) -> tuple[list[tuple[int, int]], int, float]:
    k = draw(st.integers(1, 8))
    steps = draw(
        st.lists(
            st.integers(0, k).flatmap(lambda d: st.tuples(st.just(d), st.integers(0, d))),
            min_size=1,
            max_size=60,
        )
    )
    seconds = draw(st.floats(0.5, 30.0))
    return steps, k, seconds


def verdicts_of(text: str) -> tuple[str, list[Finding]]:
    x = logs.parse_line("gen", 1, text)
    assert x is not None
    return x.layout.name, logs.check_line(x)


@settings(max_examples=150, deadline=None)
@given(v1_steps())
def test_every_v1_layout_passes_its_own_consistent_lines(
    case: tuple[list[tuple[int, int]], int, float],
) -> None:
    steps, k, seconds = case
    for label, text in v1_lines(steps, k, seconds).items():
        name, findings = verdicts_of(text)
        assert name == label.split()[0]
        assert [f.verdict for f in findings] == [OK], (label, text, [f.render() for f in findings])
        if label.endswith("0.8.5") and any(a for _, a in steps):
            assert "vLLM 0.8.5's mean" in findings[0].message


@settings(max_examples=100, deadline=None)
@given(
    st.integers(1, 8).flatmap(
        lambda k: st.tuples(
            st.just(k),
            st.lists(
                st.integers(0, k).flatmap(
                    lambda a: st.tuples(
                        st.just(a), st.integers(1, a + 1) if a < k else st.just(k + 1)
                    )
                ),
                max_size=40,
            ),
        )
    )
)
def test_v0_passes_its_own_consistent_lines(case: tuple[int, list[tuple[int, int]]]) -> None:
    k, per_seq = case
    for fmt in (V0_FMT, V0_OLD_FMT):
        name, findings = verdicts_of(v0_line(per_seq, k, fmt))
        assert name.startswith("v0")
        assert [f.verdict for f in findings] == [OK], [f.render() for f in findings]


CHECKS = (
    "accepted<=drafted",
    "acceptance rate vs Accepted/Drafted",
    "system efficiency vs emitted",
    "drafted multiple of k",
    "mean length vs per-position",
    "integral num_drafts",
)


@pytest.mark.parametrize(
    ("text", "check"),
    [
        # the rate, each layout
        (V1_15902 % (66.6, 2, 3), "acceptance rate vs Accepted/Drafted"),
        (V1_15902 % (66.7, 2, 3), None),
        (V1_15151 % (0.667, 2, 3), None),
        (V1_15151 % (0.668, 2, 3), "acceptance rate vs Accepted/Drafted"),
        (V1_15902 % (float("nan"), 0, 0), None),
        (V1_15902 % (0.0, 0, 0), "acceptance rate vs Accepted/Drafted"),
        (V1_15151 % (1.0, 4, 4), None),
        (V1_15151 % (1.0, 5, 4), "accepted<=drafted acceptance rate vs Accepted/Drafted"),
        # V0's efficiency and k
        (V0_FMT.format(0.5, 0.5, 2, 2, 4, 3), None),  # 3 / (4 // 2 * 3)
        (V0_FMT.format(0.5, 0.6, 2, 2, 4, 3), "system efficiency vs emitted"),
        # emitted 1 over (1000 // 1) * 2 = 0.0005, a half-ulp: 0.000 and 0.001 both pass
        (V0_FMT.format(0.001, 0.0, 1, 1, 1000, 1), None),
        (V0_FMT.format(0.001, 0.001, 1, 1, 1000, 1), None),
        (V0_FMT.format(0.5, 0.502, 2, 2, 4, 3), "system efficiency vs emitted"),
        (V0_FMT.format(0.4, 0.5, 2, 2, 5, 3), "drafted multiple of k"),
        (V0_FMT.format(float("nan"), float("nan"), 3, 0, 0, 0), None),
        (V0_FMT.format(float("nan"), 0.0, 3, 0, 0, 0), "system efficiency vs emitted"),
        # the mean: neither definition
        (
            V1_16665 % (50.0, 1.75, 2, 4, "0.500, 0.500"),
            "mean length vs per-position integral num_drafts",
        ),
        # the current layout's mean cannot be 0.8.5's
        (
            V1_CURRENT % (1.0, 1, 2, 2, 4, "0.500, 0.500", 50.0),
            "mean length vs per-position",
        ),
    ],
)
def test_inconsistent_lines_are_caught_by_name(text: str, check: str | None) -> None:
    _, findings = verdicts_of(text)
    bad = {f.check for f in findings if f.verdict == VIOLATION}
    names = {c for c in CHECKS if check and c in check}
    assert bad == names, [f.render() for f in findings]


def test_rounding_edges_of_the_rate_are_never_flagged() -> None:
    """A/D exactly on a half-ulp of %.1f%% and of %.3f: Python rounds either way; both pass."""
    for accepted, drafted in [(1, 2000), (1, 8), (3, 8), (5, 8), (1, 16), (7, 16)]:
        for text in (
            V1_15902 % (accepted / drafted * 100, accepted, drafted),
            V1_15151 % (accepted / drafted, accepted, drafted),
        ):
            _, findings = verdicts_of(text)
            assert [f.verdict for f in findings] == [OK], text


# -- refusals: nearest layout, versions, column ------------------------------------------------


def refusal(text: str) -> BadInput:
    with pytest.raises(BadInput) as info:
        logs.parse_line("x.log", 3, text)
    return info.value


def test_an_unknown_layout_names_the_nearest_and_where_it_departs() -> None:
    text = (
        "INFO SpecDecoding metrics: Draft acceptance rate: 50.0%, Accepted: 1 tokens, Rejected: 1"
    )
    err = refusal(text)
    col = text.index("Rejected") + 1
    assert (err.line, err.column) == (3, col)
    assert "in no layout of vLLM 0.4.1-0.34 (an older or a modified vLLM, not supported)" in str(
        err
    )
    assert "nearest, v1-rate-only (vLLM 0.8.3-0.8.4)" in str(err)
    assert "'Drafted: '" in str(err)


def test_extra_fields_after_a_complete_line_are_refused_at_their_column() -> None:
    text = V1_15902 % (100.0, 66, 66) + ", Draft length histogram: 3:5"
    err = refusal(text)
    assert err.column == text.index(", Draft length") + 1
    assert "the end of the line" in str(err)


def test_a_value_the_format_does_not_print_is_named() -> None:
    text = V1_CURRENT % (2.0, 1, 2, 2, 4, "0.500, 0.500", 50.0)
    bad = text.replace("Drafted throughput: 2.00", "Drafted throughput: 2.0")
    err = refusal(bad)
    assert err.column == bad.index("2.0 tokens/s") + 1
    assert str(err).endswith(
        "Drafted throughput is '2.0 tokens/s, Accepted: ', not a value vLLM"
        " prints there (%.2f) in the layout v1-mean-first (vLLM 0.10.2-0.34)"
    )


@pytest.mark.parametrize(
    ("rates", "reason", "at"),
    [
        ("", "Per-position acceptance rate is an empty list", "0.500, 0.500"[:0]),
        ("0.500, , 0.500", "Per-position acceptance rate has an entry that is no rate", ", 0.500"),
        ("0.500, 0.500, ", "Per-position acceptance rate has an entry that is no rate", ""),
        ("0.500, 0.5", "Per-position acceptance rate has an entry that is no rate", "0.5"),
    ],
)
def test_empty_or_short_per_position_lists_are_bad_input(rates: str, reason: str, at: str) -> None:
    """Each is exit 2 naming the field, its column at the list (empty) or at the entry that is
    no rate, in both layouts: the list last (0.8.5-0.10.1.1) and before the rate (0.10.2+)."""
    for fmt in (V1_CURRENT % (2.0, 1, 2, 2, 4, rates, 50.0), V1_16665 % (50.0, 2.0, 2, 4, rates)):
        text = "INFO " + fmt
        err = refusal(text)
        assert reason in str(err), str(err)
        start = text.index("Per-position acceptance rate: ") + len("Per-position acceptance rate: ")
        if not rates:
            assert err.column == start + 1
        else:
            entry = rates.rindex(at) if at else len(rates)
            assert err.column == start + entry + 1, (err.column, text[err.column - 1 :][:20])


def test_empty_per_position_list_through_the_command_is_exit_2(tmp_path: Path) -> None:
    path = tmp_path / "x.log"
    path.write_text(V1_16665 % (50.0, 2.0, 2, 4, "") + "\n")
    result = CliRunner().invoke(import_group, ["logs", str(path)])
    assert result.exit_code == 2, result.output
    assert "Per-position acceptance rate is an empty list" in result.stderr
    assert "Traceback" not in result.output


@pytest.mark.parametrize(
    ("text", "needle", "reason"),
    [
        (V0_FMT.format(0.5, 0.5, 0, 2, 4, 3), "0, Number of acc", "k is 1..1024"),
        (V0_FMT.format(0.5, 1.5, 2, 2, 4, 3), "1.500", "System efficiency 1.500 is outside"),
        (V1_15151 % (1.5, 2, 3), "1.500", "Draft acceptance rate 1.500 is outside [0, 1]"),
        (V1_16665 % (50.0, -0.5, 2, 4, "0.500"), "-0.50", "below 0: it is Accepted/num_drafts"),
    ],
)
def test_values_no_release_prints(text: str, needle: str, reason: str) -> None:
    err = refusal(text)
    assert reason in str(err)
    assert err.column == text.index(needle) + 1


def test_the_table_is_the_format_strings_of_the_sources() -> None:
    """Each layout's format string, as `%` formats it, reads back as that layout."""
    samples = {"d": 3, "f": 0.5, "s": "0.500"}
    for layout in log_layouts.LAYOUTS:
        values = tuple(samples[p.kind] for p in layout.parts if not isinstance(p, str))
        text = layout.fmt % values
        got = log_layouts.match(text, 0)
        assert isinstance(got, log_layouts.Parsed) and got.layout == layout, layout.name
        assert layout.versions and "vllm" in layout.source.lower()
    assert {layout.marker for layout in log_layouts.LAYOUTS} == {
        "SpecDecoding metrics:",
        "Speculative metrics:",
    }


def test_no_marker_names_both(tmp_path: Path) -> None:
    path = tmp_path / "x.log"
    path.write_text("INFO starting\n")
    result = CliRunner().invoke(import_group, ["logs", str(path)])
    assert result.exit_code == 2
    assert (
        "no 'SpecDecoding metrics:' line (nor 'Speculative metrics:') in 1 lines" in result.stderr
    )


def test_data_parallel_engines_are_told_apart_by_their_stats_line(tmp_path: Path) -> None:
    """With several engines one API server prints each engine's 'Engine NNN:' stats line and
    then that engine's spec-decode line (vllm/v1/metrics/loggers.py LoggingStatLogger.log), all
    with one pid: each engine's interval is measured from its own previous line."""
    lines = []
    for t in (0, 10, 20):
        for engine, at in (("000", t), ("001", t + 5)):
            head = f"(APIServer pid=9) INFO 11-29 16:40:{at:02d} [loggers.py:260] "
            lines.append(head + f"Engine {engine}: Avg prompt throughput: 0.0 tokens/s")
            lines.append(
                head.replace("loggers.py:260", "metrics.py:137")
                + V1_CURRENT % (1.5, 2.0, 4.0, 20, 40, "0.500, 0.000, 0.000, 0.000", 50.0)
            )
    path = tmp_path / "dp.log"
    path.write_text("".join(line + "\n" for line in lines))
    findings = logs.check_files([str(path)])
    intervals = [f for f in findings if f.check == "interval vs timestamps"]
    assert [(f.line, f.verdict) for f in intervals] == [(6, OK), (8, OK), (10, OK), (12, OK)]
    assert "the 10s since line 2" in intervals[0].message
    # without the stats lines the engines cannot be told apart: 5s gaps, a note each
    path.write_text("".join(line + "\n" for line in lines if "Engine 0" not in line))
    notes = [f for f in logs.check_files([str(path)]) if f.verdict == NOTE]
    assert len(notes) == 5 and {f.check for f in notes} == {"interval vs timestamps"}
