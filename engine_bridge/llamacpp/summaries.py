"""llama-server's acceptance summaries, checked without traces: each line one verdict.

The lines every llama.cpp user has, in the layouts the server has printed (each read by the
format string that prints it, not by examples):

* ``multiline`` (llama.cpp before the per-request summary moved onto its slot line):
  ``server_slot::print_timings`` printed ``SLT_INF(slot, "\\n...draft acceptance rate = %0.5f
  (%5d accepted / %5d generated)\\n")``: a ``slot print_timing: id N | task T |`` line with
  nothing after it, then unprefixed lines, the last ``draft acceptance rate = R ( A accepted /
  D generated)``;
* ``rate`` ``slot print_timing: ... | draft acceptance = %0.5f (%5d accepted / %5d
  generated)``; ``mean-len`` the same with ``, mean len = %5.2f`` (llama.cpp 0.5.0-dev at
  commit 0c1e570 and later), optionally followed at trace verbosity by ``acc per pos = (%s)``;
  ``pr24536`` with ``, mean acceptance length = %5.2f, acceptance rate per position = (%s)``
  (ggml-org/llama.cpp#24536);
* ``statistics`` ``statistics %16s: #calls(b,g,a) = %4zu %6zu %6zu, #gen drafts = %6zu, #acc
  drafts = %5zu, #gen tokens = %6zu, #acc tokens = %5zu[, #mean acc len = %.2f, #acc rate/pos
  = (%.3f, ...)][, dur(b,g,a) = ...]`` (common/speculative.cpp
  ``common_speculative_print_stats``, one per speculative implementation, totals since the
  server started).

The definitions checked (tools/server/server-context.cpp ``server_slot::print_timings``; PR
24536 follows vLLM's): R = (float) A / D; mean acceptance length = 1 + A / n and rate at
position i = accepted_at_i / n, n = ``n_draft_verif_steps`` (not printed); in the statistics
line n = a (``n_call_accept``), the rate at position 0 is ``#acc drafts`` / a exactly
(``common_speculative_accept`` counts a draft as accepted and adds position 0 on the same
condition, n_accepted > 0), and the rates sum to ``#acc tokens`` / a. Every float is compared
within its format's half-ulp, and the message says which.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, replace

from ..importers.findings import OK, VIOLATION, Finding
from ..steplog.limits import MAX_K, digits_too_long
from ..steplog.source import BadInput

NUM = r"\d+(?:\.\d+)?"
SLOT_HEAD = re.compile(r"slot\s+print_timing: id\s+(?P<slot>\d+) \| task (?P<task>-?\d+) \|\s*$")
SUMMARY = re.compile(
    r"draft acceptance = (?P<r>" + NUM + r") \(\s*(?P<a>\d+) accepted /\s*(?P<d>\d+) generated\)"
    r"(?:, mean len =\s*(?P<mean_len>" + NUM + r")"
    r"|, mean acceptance length =\s*(?P<mean_acc>" + NUM + r"),"
    r" acceptance rate per position = \((?P<pos>[^)]*)\))?\s*$"
)
MULTILINE = re.compile(
    r"draft acceptance rate = (?P<r>" + NUM + r") \(\s*(?P<a>\d+) accepted /\s*(?P<d>\d+)"
    r" generated\)\s*$"
)
ACC_PER_POS = re.compile(r"^\s*acc per pos = \((?P<pos>[^)]*)\)\s*$")
STATS = re.compile(
    r"statistics\s+(?P<impl>\S+): #calls\(b,g,a\) =\s*(?P<b>\d+)\s+(?P<g>\d+)\s+(?P<ca>\d+),"
    r" #gen drafts =\s*(?P<gd>\d+), #acc drafts =\s*(?P<ad>\d+), #gen tokens =\s*(?P<gt>\d+),"
    r" #acc tokens =\s*(?P<at>\d+)"
    r"(?:, #mean acc len = (?P<mean>" + NUM + r"), #acc rate/pos = \((?P<pos>[^)]*)\))?"
    r"(?:, dur\(b,g,a\) = [^,]+, [^,]+, \S+ ms)?\s*$"
)
SLOT = re.compile(r"slot\s+[^:|]*: id\s+(?P<slot>\d+) \| task (?P<task>-?\d+) \| (?P<msg>.*)$")

RATIO_TOL = 0.000005 + 1e-7  # %0.5f half-ulp, plus the float (32-bit) ratio's own rounding
MEAN_HALF_ULP = 0.005  # %5.2f / %.2f
POS_HALF_ULP = 0.0005  # %.3f
EPS = 1e-9
MAX_SEARCH = 200_000  # candidate step counts tried for the per-position integrality check

LAYOUTS = {
    "multiline": "llama-server's multi-line print_timings ('draft acceptance rate = R (A accepted"
    " / D generated)' on a line of its own), llama.cpp server builds before the summary moved"
    " onto the slot line",
    "rate": "'slot print_timing: ... draft acceptance = R (A accepted / D generated)'",
    "mean-len": "'... draft acceptance = R (A / D), mean len = M' (llama.cpp 0.5.0-dev, commit"
    " 0c1e570 and later)",
    "pr24536": "'... mean acceptance length = M, acceptance rate per position = (...)'"
    " (ggml-org/llama.cpp#24536)",
    "statistics": "common_speculative_print_stats' per-implementation totals since start",
}


@dataclass(frozen=True)
class Summary:
    """One per-request summary (layouts multiline, rate, mean-len, pr24536)."""

    path: str
    line: int
    layout: str
    slot: int
    task: int
    rate: float
    accepted: int
    drafted: int
    mean: float | None
    per_pos: tuple[float, ...] | None


@dataclass(frozen=True)
class Statistics:
    """One ``statistics <impl>:`` line."""

    path: str
    line: int
    impl: str
    calls_accept: int
    gen_drafts: int
    acc_drafts: int
    gen_tokens: int
    acc_tokens: int
    mean: float | None
    per_pos: tuple[float, ...] | None


Parsed = Summary | Statistics


def _int(path: str, no: int, m: re.Match[str], name: str) -> int:
    text = m.group(name)
    if digits_too_long(text):
        raise BadInput(
            path,
            no,
            m.start(name) + 1,
            f"a count of {len(text)} digits: beyond the limit 2**63 - 1 (docs/limits.md)",
        )
    return int(text)


def _float(path: str, no: int, m: re.Match[str], name: str, what: str) -> float:
    text = m.group(name)
    if len(text) > 40:
        raise BadInput(path, no, m.start(name) + 1, f"{what} of {len(text)} characters")
    return float(text)


def _rates(path: str, no: int, m: re.Match[str], name: str) -> tuple[float, ...]:
    text = m.group(name).strip()
    if not text:
        return ()
    if text.count(",") >= MAX_K:
        raise BadInput(path, no, m.start(name) + 1, f"more than {MAX_K} per-position rates")
    out = []
    col = m.start(name)
    for part in text.split(","):
        part_s = part.strip()
        if not re.fullmatch(NUM, part_s) or len(part_s) > 40:
            raise BadInput(path, no, col + 1, f"per-position rate {part_s!r} is not a number")
        value = float(part_s)
        if value > 1.0:
            raise BadInput(
                path,
                no,
                col + 1,
                f"per-position rate {part_s} is above 1: it is accepted at that position over"
                " verification steps",
            )
        out.append(value)
        col += len(part) + 1
    return tuple(out)


def parse(path: str, lines: Iterable[tuple[int, str]]) -> Iterator[Parsed]:
    """Every summary and statistics line of a llama-server log, in order."""
    head: tuple[int, int, int] | None = None  # (line, slot, task) of a bare print_timing line
    pending: Summary | None = None  # a mean-len summary that a trace 'acc per pos' may follow
    for no, text in lines:
        if pending is not None:
            s = SLOT.search(text)
            per = ACC_PER_POS.match(s.group("msg")) if s is not None else None
            if (
                per is not None
                and s is not None
                and (int(s.group("slot")), int(s.group("task"))) == (pending.slot, pending.task)
            ):
                pos = _rates(path, no, per, "pos")
                yield replace(pending, per_pos=pos)
                pending = None
                continue
            yield pending
            pending = None
        if "statistics" in text and "#calls(b,g,a)" in text:
            yield _statistics(path, no, text)
        elif (h := SLOT_HEAD.search(text)) is not None:
            head = (no, int(h.group("slot")), int(h.group("task")))
        elif "draft acceptance rate = " in text:
            yield _multiline_summary(path, no, text, head)
        elif "draft acceptance = " in text:
            summary = _slot_summary(path, no, text)
            if summary.layout == "mean-len":
                pending = summary
            else:
                yield summary
    if pending is not None:
        yield pending


def _statistics(path: str, no: int, text: str) -> Statistics:
    """A ``statistics <impl>:`` line (common_speculative_print_stats)."""
    m = STATS.search(text)
    if m is None:
        at = text.index("statistics")
        raise BadInput(path, no, at + 1, "unrecognised llama.cpp 'statistics' line")
    mean = _float(path, no, m, "mean", "#mean acc len") if m.group("mean") else None
    stat_pos = _rates(path, no, m, "pos") if m.group("mean") else None
    return Statistics(
        path,
        no,
        m.group("impl"),
        _int(path, no, m, "ca"),
        _int(path, no, m, "gd"),
        _int(path, no, m, "ad"),
        _int(path, no, m, "gt"),
        _int(path, no, m, "at"),
        mean,
        stat_pos,
    )


def _multiline_summary(path: str, no: int, text: str, head: tuple[int, int, int] | None) -> Summary:
    """A ``draft acceptance rate = `` line, of the slot and task its print_timing ``head``
    line names (-1, -1 without one)."""
    m = MULTILINE.search(text)
    if m is None:
        at = text.index("draft acceptance rate")
        raise BadInput(path, no, at + 1, "unrecognised 'draft acceptance rate' line")
    slot, task = (head[1], head[2]) if head is not None else (-1, -1)
    return Summary(
        path,
        no,
        "multiline",
        slot,
        task,
        _float(path, no, m, "r", "draft acceptance rate"),
        _int(path, no, m, "a"),
        _int(path, no, m, "d"),
        None,
        None,
    )


def _slot_summary(path: str, no: int, text: str) -> Summary:
    """A slot's one-line ``draft acceptance = `` summary, in whichever layout it has: the rate
    alone, with the mean length, or with the mean and the per-position rates (pr24536)."""
    s = SLOT.search(text)
    at = text.index("draft acceptance = ")
    m = SUMMARY.search(text, at)
    if s is None or m is None or m.start() != at:
        raise BadInput(path, no, at + 1, "unrecognised 'draft acceptance' summary")
    layout = "pr24536" if m.group("mean_acc") else "mean-len" if m.group("mean_len") else "rate"
    mean_name = "mean_acc" if layout == "pr24536" else "mean_len"
    return Summary(
        path,
        no,
        layout,
        int(s.group("slot")),
        int(s.group("task")),
        _float(path, no, m, "r", "draft acceptance"),
        _int(path, no, m, "a"),
        _int(path, no, m, "d"),
        _float(path, no, m, mean_name, "mean length") if layout != "rate" else None,
        _rates(path, no, m, "pos") if layout == "pr24536" else None,
    )


def steps_range(
    accepted: int, drafted: int, mean: float, per_pos: tuple[float, ...] | None
) -> tuple[int, int, int] | None:
    """(lowest, highest, how many) step counts n consistent with the printed mean (and
    per-position rates), 1 <= n <= drafted; None if none. n = 0 only with nothing accepted."""
    if accepted == 0:
        return (0, drafted, drafted + 1) if abs(mean - 1.0) <= MEAN_HALF_ULP + EPS else None
    hi_gap, lo_gap = mean - 1 + MEAN_HALF_ULP, mean - 1 - MEAN_HALF_ULP
    if hi_gap <= 0:
        return None
    n_min = max(1, math.ceil(accepted / hi_gap - EPS))
    n_max = min(drafted, math.floor(accepted / lo_gap + EPS)) if lo_gap > 0 else drafted
    if per_pos:
        k = len(per_pos)
        n_min = max(n_min, math.ceil(drafted / k) - 1, math.ceil(accepted / k))
    if n_min > n_max:
        return None
    if not per_pos or n_max - n_min > MAX_SEARCH:
        return (n_min, n_max, n_max - n_min + 1)
    found = [n for n in range(n_min, n_max + 1) if _counts_fit(accepted, n, per_pos)]
    return (found[0], found[-1], len(found)) if found else None


def _counts_fit(accepted: int, n: int, per_pos: tuple[float, ...]) -> bool:
    """Whether integer counts c_i <= n with c_i / n within %.3f of each rate sum to accepted."""
    lo_sum = hi_sum = 0
    for p in per_pos:
        lo = max(0, math.ceil((p - POS_HALF_ULP) * n - EPS))
        hi = min(n, math.floor((p + POS_HALF_ULP) * n + EPS))
        if lo > hi:
            return False
        lo_sum, hi_sum = lo_sum + lo, hi_sum + hi
    return lo_sum <= accepted <= hi_sum


def _nonincreasing(per_pos: tuple[float, ...]) -> str | None:
    for i in range(1, len(per_pos)):
        if per_pos[i] > per_pos[i - 1]:
            return (
                f"position {i} rate {per_pos[i]:.3f} > position {i - 1} rate"
                f" {per_pos[i - 1]:.3f} (a draft accepted at i was accepted at i - 1: rounding is"
                " monotone, so exact)"
            )
    return None


# llama.cpp's per-request and per-implementation acceptance summaries
def check_summary(x: Summary) -> list[Finding]:
    """Every check one per-request summary allows."""
    bad: list[tuple[str, str]] = []
    who = f"task {x.task}" if x.task >= 0 else "a request"
    if x.accepted > x.drafted:
        bad.append(("accepted<=generated", f"{x.accepted} accepted > {x.drafted} generated"))
    exact = x.accepted / x.drafted if x.drafted else math.nan
    if x.drafted == 0:
        bad.append(("summary printed", "0 generated: the server prints no summary then"))
    elif abs(x.rate - exact) > RATIO_TOL:
        bad.append(
            (
                "rate vs accepted/generated",
                f"printed {x.rate:.5f} but {x.accepted}/{x.drafted} = {exact:.7f}; more than the"
                " %0.5f half-ulp 0.000005 apart",
            )
        )
    n_text = "not printed"
    if x.per_pos is not None:
        if (why := _nonincreasing(x.per_pos)) is not None:
            bad.append(("per-position non-increasing", why))
        if x.mean is not None and x.per_pos:
            k = len(x.per_pos)
            tol = MEAN_HALF_ULP + k * POS_HALF_ULP + EPS
            implied = 1 + sum(x.per_pos)
            if abs(x.mean - implied) > tol:
                bad.append(
                    (
                        "mean length vs per-position",
                        f"mean {x.mean:.2f} but 1 + Σ per-position = {implied:.3f}; off by"
                        f" {abs(x.mean - implied):.4f} > ±{tol:.4f} (%.2f half-ulp 0.005 + {k} *"
                        " %.3f half-ulp 0.0005)",
                    )
                )
        elif not x.per_pos and x.accepted > 0:
            bad.append(
                (
                    "per-position rates present",
                    f"{x.accepted} accepted but no per-position rate: the server prints them"
                    " whenever a verification step counted",
                )
            )
    if x.mean is not None and x.drafted > 0:
        rng = steps_range(x.accepted, x.drafted, x.mean, x.per_pos)
        if rng is None:
            bad.append(
                (
                    "integral verification steps",
                    f"no step count n <= {x.drafted} gives mean {x.mean:.2f} = 1 + {x.accepted}/n"
                    " within ±0.005"
                    + (" with every per-position rate a count over n" if x.per_pos else ""),
                )
            )
        else:
            n_text = f"{rng[0]}" if rng[0] == rng[1] else f"{rng[0]}..{rng[1]}"
    findings = [Finding(x.path, x.line, VIOLATION, c, f"{who}: {m}") for c, m in bad]
    if not bad:
        extra = "" if x.mean is None else f", mean {x.mean:.2f} = 1 + A/n with n in {n_text}"
        pos = (
            ""
            if not x.per_pos
            else f", {len(x.per_pos)} per-position rates non-increasing summing to mean - 1"
        )
        findings.append(
            Finding(
                x.path,
                x.line,
                OK,
                f"llama.cpp summary ({x.layout})",
                f"{who}: {x.accepted} accepted / {x.drafted} generated = {x.rate:.5f}{extra}{pos}",
            )
        )
    return findings


def check_statistics(x: Statistics) -> list[Finding]:
    """Every check one ``statistics`` line allows (common_speculative_print_stats' sums)."""
    bad = _statistics_counts(x) + _statistics_mean(x) + _statistics_per_pos(x)
    findings = [Finding(x.path, x.line, VIOLATION, c, f"{x.impl}: {m}") for c, m in bad]
    if not bad:
        a = x.calls_accept
        findings.append(
            Finding(
                x.path,
                x.line,
                OK,
                "llama.cpp statistics",
                f"{x.impl}: #acc drafts {x.acc_drafts} <= #calls a {a}, #gen drafts"
                f" {x.gen_drafts} <= #gen tokens {x.gen_tokens}"
                + (
                    f", #mean acc len {x.mean:.2f} = 1 + {x.acc_tokens}/{a} and the"
                    " per-position rates agree with the counts"
                    if x.mean is not None
                    else " (no mean or per-position rates in this layout)"
                ),
            )
        )
    return findings


def _statistics_counts(x: Statistics) -> list[tuple[str, str]]:
    """The counts' own order: accepted drafts within the accept calls and the accepted
    tokens, generated drafts within the generated tokens."""
    bad: list[tuple[str, str]] = []
    a = x.calls_accept
    if x.acc_drafts > a:
        bad.append(("#acc drafts <= accept calls", f"#acc drafts {x.acc_drafts} > #calls a {a}"))
    if x.acc_drafts > x.acc_tokens:
        bad.append(
            (
                "#acc drafts <= #acc tokens",
                f"#acc drafts {x.acc_drafts} > #acc tokens {x.acc_tokens}: an accepted draft"
                " adds at least one token",
            )
        )
    if x.gen_drafts > x.gen_tokens:
        bad.append(
            (
                "#gen drafts <= #gen tokens",
                f"#gen drafts {x.gen_drafts} > #gen tokens {x.gen_tokens}: a generated draft has"
                " at least one token",
            )
        )
    return bad


def _statistics_mean(x: Statistics) -> list[tuple[str, str]]:
    """The printed #mean acc len against 1 + #acc tokens / #calls a, within its rounding."""
    a = x.calls_accept
    if x.mean is None:
        return []
    if a == 0:
        return [("mean printed", "#mean acc len printed with #calls a = 0")]
    implied = 1 + x.acc_tokens / a
    if abs(x.mean - implied) <= MEAN_HALF_ULP + EPS:
        return []
    return [
        (
            "#mean acc len vs counts",
            f"printed {x.mean:.2f} but 1 + #acc tokens / #calls a = 1 +"
            f" {x.acc_tokens}/{a} = {implied:.4f}; more than the %.2f half-ulp 0.005"
            " apart",
        )
    ]


def _statistics_per_pos(x: Statistics) -> list[tuple[str, str]]:
    """The per-position rates: non-increasing, position 0 the accept calls that accepted,
    their sum the accepted tokens per accept call, within their rounding."""
    a = x.calls_accept
    if x.per_pos is None or a == 0:
        return []
    pos = x.per_pos
    bad: list[tuple[str, str]] = []
    if (why := _nonincreasing(pos)) is not None:
        bad.append(("#acc rate/pos non-increasing", why))
    if not pos:
        if x.acc_tokens:
            bad.append(
                ("#acc rate/pos present", f"#acc tokens {x.acc_tokens} but no per-position rate")
            )
        return bad
    if abs(pos[0] - x.acc_drafts / a) > POS_HALF_ULP + EPS:
        bad.append(
            (
                "#acc rate/pos[0] vs #acc drafts",
                f"position 0 rate {pos[0]:.3f} but #acc drafts / #calls a ="
                f" {x.acc_drafts}/{a} = {x.acc_drafts / a:.4f} (both count the accept"
                " calls with n_accepted > 0)",
            )
        )
    tol = len(pos) * POS_HALF_ULP + EPS
    if abs(sum(pos) - x.acc_tokens / a) > tol:
        bad.append(
            (
                "#acc rate/pos vs #acc tokens",
                f"Σ rates {sum(pos):.3f} but #acc tokens / #calls a ="
                f" {x.acc_tokens / a:.4f}; off by more than ±{tol:.4f}",
            )
        )
    if x.acc_tokens > len(pos) * x.acc_drafts:
        bad.append(
            (
                "#acc tokens <= positions x #acc drafts",
                f"#acc tokens {x.acc_tokens} > {len(pos)} positions x #acc drafts {x.acc_drafts}",
            )
        )
    return bad


def check(parsed: Iterable[Parsed]) -> list[Finding]:
    out: list[Finding] = []
    for x in parsed:
        out.extend(check_summary(x) if isinstance(x, Summary) else check_statistics(x))
    return out
