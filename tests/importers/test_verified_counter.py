"""`import logs` and `import prometheus` on the verified counter of the counting fix (patches/).

The patched vLLM exports ``vllm:spec_decode_num_verified_draft_tokens`` (a counter, scraped as
``..._total``) and appends ``, Verified: %d tokens`` to its periodic log line. Both importers
read it, check drafted >= verified >= accepted (per line; per label set, per scrape and per
interval), and report it in their totals (``totals`` in the JSON). A scrape or a line without it
reads as before.

The log layout's format string is compared with the one the patch itself adds (read from
patches/, not from the reader's table); the scrapes are written by prometheus_client under vLLM's
names and labels; the real material (``fix-sync-ngram-k3-abort.*`` in tests/fixtures/vllm/) is
what the patched 0.33.0 engine wrote in the engine tier's n-gram run.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from prom_exporters import SpecDecodeExporter
from spectally.engine_bridge.cli import import_group
from spectally.engine_bridge.importers import log_layouts, logs, prometheus
from spectally.engine_bridge.importers.findings import OK, VIOLATION, Finding

REPO = Path(__file__).resolve().parents[2]
PATCHES = [REPO / "patches" / f"vllm-{v}-spec-decode-counting.patch" for v in ("0.33.0", "0.34.0")]
FIXTURES = REPO / "tests" / "fixtures" / "vllm"
LAYOUT = "v1-mean-first-verified"


def patched_hunk(patch: Path) -> tuple[list[str], list[str]]:
    """The string literals of the patch's hunk of ``SpecDecodingLogging.log``'s
    ``logger.info`` call: before the patch (context and removed lines) and after it (context
    and added lines)."""
    text = patch.read_text()
    hunk = text[text.index("+++ b/vllm/v1/spec_decode/metrics.py") :]
    hunk = hunk[: hunk.index("\ndiff --git")] if "\ndiff --git" in hunk else hunk
    hunk = hunk[hunk.rindex("@@", 0, hunk.index('"Verified: %d tokens"')) :]
    before: list[str] = []
    after: list[str] = []
    for ln in hunk.splitlines()[1:]:
        m = re.fullmatch(r'([ +-])\s*"(.*)",?', ln)
        if m is None:
            if before or after:
                break
            continue
        if m.group(1) != "+":
            before.append(m.group(2))
        if m.group(1) != "-":
            after.append(m.group(2))
    return before, after


def line(
    *, drafted: int, verified: int, accepted: int, n: int, per_pos: list[int], seconds: float = 5.0
) -> str:
    """One interval as the patched SpecDecodingLogging.log prints it (its format string)."""
    (layout,) = [x for x in log_layouts.LAYOUTS if x.name == LAYOUT]
    fmt = layout.fmt
    rates = ", ".join(f"{p / n:.3f}" for p in per_pos)
    pct = accepted / drafted * 100 if drafted else float("nan")
    values = (1 + accepted / n, accepted / seconds, drafted / seconds, accepted, drafted)
    return "INFO 12-03 10:00:00 [metrics.py:120] " + fmt % (*values, rates, pct, verified)


def findings_of(tmp_path: Path, *lines: str) -> list[Finding]:
    path = tmp_path / "x.vllm.log"
    path.write_text("\n".join(lines) + "\n")
    return logs.check_files([str(path)])


def violations(findings: list[Finding]) -> dict[str, str]:
    return {f.check: f.message for f in findings if f.verdict == VIOLATION}


def totals(findings: list[Finding], check: str) -> dict[str, Any]:
    (got,) = [f.to_dict() for f in findings if f.check == check]
    assert got["verdict"] == OK
    result: dict[str, Any] = got["totals"]
    return result


# -- the log line ----------------------------------------------------------------------------


def test_the_layout_is_the_format_string_the_patches_add() -> None:
    """The layout is v1-mean-first with what each patch appends to its format string (the
    hunk's literals before and after the patch, read from patches/)."""
    (layout,) = [x for x in log_layouts.LAYOUTS if x.name == LAYOUT]
    (stock,) = [x for x in log_layouts.LAYOUTS if x.name == "v1-mean-first"]
    for patch in PATCHES:
        before, after = patched_hunk(patch)
        assert len(after) >= 4 and after[-1] == "Verified: %d tokens", (patch.name, after)
        assert stock.fmt.endswith("".join(before)), patch.name
        assert layout.fmt == stock.fmt.removesuffix("".join(before)) + "".join(after)
    assert "counting fix" in layout.versions and "patches/" in layout.versions


def test_a_consistent_patched_line_is_read_with_verified(tmp_path: Path) -> None:
    text = line(drafted=60, verified=45, accepted=10, n=20, per_pos=[6, 3, 1])
    x = logs.parse_line("x", 1, text)
    assert x is not None and x.layout.name == LAYOUT
    assert (x.drafted, x.verified, x.accepted) == (60, 45, 10)
    found = findings_of(tmp_path, text, text.replace("10:00:00", "10:00:05"))  # 5 s later
    assert not violations(found)
    (ok,) = [f for f in found if f.check == "log line consistent" and f.line == 1]
    assert "Drafted 60 >= Verified 45 >= Accepted 10" in ok.message
    assert f"{LAYOUT} (vLLM the counting fix" in ok.message
    assert totals(found, "log totals") == {
        "lines": 2,
        "drafted": 120,
        "verified": 90,
        "accepted": 20,
    }


@pytest.mark.parametrize(
    ("drafted", "verified", "accepted", "check", "message"),
    [
        (30, 31, 10, "verified<=drafted", "Verified 31 > Drafted 30"),
        (60, 9, 10, "accepted<=verified", "Accepted 10 > Verified 9"),
    ],
)
def test_verified_outside_drafted_and_accepted_is_a_violation(
    tmp_path: Path, drafted: int, verified: int, accepted: int, check: str, message: str
) -> None:
    text = line(drafted=drafted, verified=verified, accepted=accepted, n=20, per_pos=[6, 3, 1])
    bad = violations(findings_of(tmp_path, text))
    assert bad == {check: message}


def test_equal_counts_are_consistent(tmp_path: Path) -> None:
    text = line(drafted=30, verified=30, accepted=30, n=10, per_pos=[10, 10, 10])
    assert not violations(findings_of(tmp_path, text))


def test_import_logs_gives_verified_in_its_json(tmp_path: Path) -> None:
    path = tmp_path / "x.vllm.log"
    path.write_text(line(drafted=60, verified=45, accepted=10, n=20, per_pos=[6, 3, 1]) + "\n")
    result = CliRunner().invoke(import_group, ["logs", "--json", str(path)])
    assert result.exit_code == 0, result.output
    got = [f for f in json.loads(result.stdout) if f["check"] == "log totals"]
    assert got[0]["totals"]["verified"] == 45
    bad = path.with_name("bad.vllm.log")
    bad.write_text(line(drafted=60, verified=9, accepted=10, n=20, per_pos=[6, 3, 1]) + "\n")
    result = CliRunner().invoke(import_group, ["logs", str(bad)])
    assert result.exit_code == 1
    assert "VIOLATION accepted<=verified: Accepted 10 > Verified 9" in result.stdout


def test_a_line_without_verified_reads_as_before(tmp_path: Path) -> None:
    text = line(drafted=60, verified=45, accepted=10, n=20, per_pos=[6, 3, 1])
    old = text.removesuffix(", Verified: 45 tokens")
    x = logs.parse_line("x", 1, old)
    assert x is not None and x.layout.name == "v1-mean-first" and x.verified is None
    found = findings_of(tmp_path, old)
    assert not violations(found)
    assert totals(found, "log totals")["verified"] is None


def test_verified_is_totalled_only_when_every_line_prints_it(tmp_path: Path) -> None:
    text = line(drafted=60, verified=45, accepted=10, n=20, per_pos=[6, 3, 1])
    old = text.removesuffix(", Verified: 45 tokens")
    found = findings_of(tmp_path, text, old)
    assert totals(found, "log totals") == {
        "lines": 2,
        "drafted": 120,
        "verified": None,
        "accepted": 20,
    }


@pytest.mark.parametrize(
    ("counted", "verdict", "needle"),
    [
        (45, OK, "Σ Verified 45; "),
        (44, VIOLATION, "the log intervals count more than the counters"),
        (47, "note", "ahead by 0 accepted / 0 drafted / 2 verified"),
    ],
)
def test_logged_verified_is_reconciled_with_the_counter(
    tmp_path: Path, counted: int, verdict: str, needle: str
) -> None:
    e = Engine()
    e.count(60, counted, 10)
    prom = tmp_path / "s.prom"
    prom.write_text(e.scrape())
    log = tmp_path / "x.vllm.log"
    log.write_text(line(drafted=60, verified=45, accepted=10, n=20, per_pos=[6, 3, 1]) + "\n")
    (got,) = [f for f in logs.check_files([str(log)], str(prom)) if f.check == "logs vs Prometheus"]
    assert got.verdict == verdict and needle in got.message, got.message
    assert f"drafted 60, verified {counted}" in got.message


def test_a_cut_verified_field_is_refused_naming_the_layout() -> None:
    text = line(drafted=60, verified=45, accepted=10, n=20, per_pos=[6, 3, 1])
    with pytest.raises(logs.BadInput) as err:
        logs.parse_line("x", 1, text.replace("Verified: 45", "Verified: x"))
    assert "Verified is 'x tokens'" in str(err.value) and LAYOUT in str(err.value)


# -- the Prometheus counter ------------------------------------------------------------------

Engine = SpecDecodeExporter  # the patched vLLM's counters, vLLM's or Ray Serve's names


def check(text: str) -> list[Finding]:
    return prometheus.check_scrapes(prometheus.scrapes_of_text(text, "s.prom"))


@pytest.mark.parametrize("prefix", ["vllm:spec_decode_", "ray_vllm_spec_decode_"])
def test_the_verified_counter_is_read_checked_and_totalled(prefix: str) -> None:
    e = Engine(prefix=prefix)
    e.count(3, 2, 1)
    first = e.scrape()
    e.count(3, 3, 2)
    found = check(first + e.scrape())
    assert not violations(found)
    oks = [f.message for f in found if f.check == "counter invariants"]
    assert all("verified<=drafted, accepted<=verified" in m for m in oks), oks
    assert "verified 5," in oks[-1]
    (interval,) = [f for f in found if f.check == "monotone and interval invariants"]
    assert "+3 verified" in interval.message
    assert totals(found, "counter totals") == {
        "spec_steps": 2,
        "drafted": 6,
        "verified": 5,
        "accepted": 3,
        "accepted_per_pos": [2, 1, 0],
    }


@pytest.mark.parametrize(
    ("step", "check_name", "needle"),
    [
        (
            (3, 4, 1),
            "verified<=drafted",
            "vllm:spec_decode_num_verified_draft_tokens_total 4 >"
            " vllm:spec_decode_num_draft_tokens_total 3",
        ),
        (
            (3, 1, 2),
            "accepted<=verified",
            "vllm:spec_decode_num_accepted_tokens_total 2 >"
            " vllm:spec_decode_num_verified_draft_tokens_total 1",
        ),
    ],
)
def test_verified_outside_drafted_and_accepted_names_the_counters(
    step: tuple[int, int, int], check_name: str, needle: str
) -> None:
    e = Engine()
    e.count(*step)
    bad = violations(check(e.scrape()))
    assert set(bad) == {check_name} and needle in bad[check_name]
    # the same inconsistency inside an interval: consistent totals, an inconsistent delta
    e = Engine()
    e.count(3, 3, 0)
    first = e.scrape()
    e.count(*step)
    e.count(0, 0, 0)  # keeps per-position within num_drafts
    bad = violations(check(first + e.scrape()))
    assert f"interval {check_name}" in bad, bad


def test_the_verified_counter_must_be_monotone() -> None:
    e = Engine()
    e.count(3, 3, 1)
    e.count(3, 3, 1)
    first = e.scrape()
    later = first.replace(
        'vllm:spec_decode_num_verified_draft_tokens_total{engine="0",model_name="m"} 6.0',
        'vllm:spec_decode_num_verified_draft_tokens_total{engine="0",model_name="m"} 4.0',
    )
    assert later != first
    bad = violations(check(first + later))
    assert "monotone" in bad
    assert "vllm:spec_decode_num_verified_draft_tokens 6 → 4" in bad["monotone"]


def test_a_scrape_without_the_verified_counter_reads_as_before() -> None:
    e = Engine(verified=False)
    e.count(3, 0, 1)
    first = e.scrape()
    e.count(3, 0, 2)
    found = check(first + e.scrape())
    assert not violations(found)
    assert not [f for f in found if f.check == "missing counters"]
    oks = [f.message for f in found if f.check == "counter invariants"]
    assert oks and not any("verified" in m for m in oks)
    assert totals(found, "counter totals")["verified"] is None


def test_import_prometheus_gives_verified_in_its_json(tmp_path: Path) -> None:
    e = Engine()
    e.count(3, 2, 1)
    path = tmp_path / "s.prom"
    path.write_text(e.scrape())
    result = CliRunner().invoke(import_group, ["prometheus", "--json", str(path)])
    assert result.exit_code == 0, result.output
    got = [f for f in json.loads(result.stdout) if f["check"] == "counter totals"]
    assert got[0]["totals"]["verified"] == 2


# -- real material: the patched 0.33.0 engine's n-gram run (engine tier) ---------------------

REAL = "fix-sync-ngram-k3-abort"


def test_the_real_patched_engine_log_and_scrape_read_back() -> None:
    """What the patched engine wrote: every log line in the verified layout and consistent, the
    scrape's counters consistent, and the log's sums equal to the scrape's totals (the run's
    last interval is logged when the engine stops, so nothing is left over)."""
    log = FIXTURES / f"{REAL}.vllm.log"
    prom = FIXTURES / f"{REAL}.prom"
    lines = logs.read_lines(str(log))
    assert lines and {x.layout.name for x in lines} == {LAYOUT}
    found = logs.check_files([str(log)], str(prom))
    assert not violations(found)
    want = totals(found, "log totals")
    assert want["drafted"] >= want["verified"] > want["accepted"] > 0, want
    scraped = prometheus.check_files([str(prom)])
    assert not violations(scraped)
    got = totals(scraped, "counter totals")
    assert (got["drafted"], got["verified"], got["accepted"]) == (
        want["drafted"],
        want["verified"],
        want["accepted"],
    )
    (reconciled,) = [f for f in found if f.check == "logs vs Prometheus"]
    assert reconciled.verdict == OK and f"verified {got['verified']}" in reconciled.message


def test_the_real_scrape_with_one_counter_changed_is_caught() -> None:
    """The real scrape with its verified counter set below accepted: named as a violation."""
    text = (FIXTURES / f"{REAL}.prom").read_text()
    accepted = re.search(r"^vllm:spec_decode_num_accepted_tokens_total\{[^}]*\} (\S+)$", text, re.M)
    assert accepted is not None
    low = float(accepted.group(1)) - 1
    broken = re.sub(
        r"^(vllm:spec_decode_num_verified_draft_tokens_total\{[^}]*\}) \S+$",
        lambda m: f"{m.group(1)} {low}",
        text,
        flags=re.M,
    )
    assert broken != text
    assert "accepted<=verified" in violations(check(broken))
