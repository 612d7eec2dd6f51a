"""The periodic ``SpecDecoding metrics:`` log line of vLLM 0.32 (SpecDecodingLogging.log,
v1/spec_decode/metrics.py:82-137), checked for internal consistency.

Format (one line per ``VLLM_LOG_STATS_INTERVAL``, an interval's deltas)::

    SpecDecoding metrics: Mean acceptance length: %.2f, Accepted throughput: %.2f tokens/s,
    Drafted throughput: %.2f tokens/s, Accepted: %d tokens, Drafted: %d tokens,
    Per-position acceptance rate: %s, Avg Draft acceptance rate: %.1f%%

with mean = 1 + A/n, rate = 100·A/D and per-position r_i = a_i/n (``%.3f`` joined by ", "),
where n = num_drafts (not printed), A = Accepted, D = Drafted, a_i = accepted at position i.
The integers are exact; every float is rounded, so each comparison allows the half-ulp of the
formats involved and says so:

* mean vs per-position: mean - 1 = Σ r_i exactly, so |mean - 1 - Σ r_i| <= 0.005 + k·0.0005;
* rate vs Accepted/Drafted: |rate - 100·A/D| <= 0.05;
* throughputs: both are count / elapsed, so |acc_tp·D - dr_tp·A| <= 0.005·(A + D);
* per-position rates are non-increasing (rounding is monotone, so exactly);
* A <= D, and an integer n with A/n inside the mean's rounding interval must exist
  (n is reported; D <= k·n bounds it from below).

A value the format cannot print whatever the others say (a per-position rate outside [0, 1]
or NaN, a mean below 1, a negative throughput, a rate outside [0, 100]) is bad input naming
the field at file:line:column (`parse_line`), not a finding: NaN compares false, so it would
pass every check above.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from ..steplog.limits import MAX_K, digits_too_long
from ..steplog.source import BadInput, iter_text_lines
from .findings import NOTE, OK, VIOLATION, Finding

MARKER = "SpecDecoding metrics:"
FLOAT = r"(?:nan|inf|-?\d+(?:\.\d+)?)"
LINE_RE = re.compile(
    r"SpecDecoding metrics: Mean acceptance length: (?P<mean>" + FLOAT + r"), "
    r"Accepted throughput: (?P<acc_tp>" + FLOAT + r") tokens/s, "
    r"Drafted throughput: (?P<dr_tp>" + FLOAT + r") tokens/s, "
    r"Accepted: (?P<accepted>\d+) tokens, Drafted: (?P<drafted>\d+) tokens, "
    r"Per-position acceptance rate: (?P<per_pos>.*?), "
    r"Avg Draft acceptance rate: (?P<rate>" + FLOAT + r")%"
)

MEAN_HALF_ULP = 0.005  # %.2f
POS_HALF_ULP = 0.0005  # %.3f
RATE_HALF_ULP = 0.05  # %.1f%%
TP_HALF_ULP = 0.005  # %.2f
EPS = 1e-9


@dataclass(frozen=True)
class LogLine:
    path: str
    line: int
    mean: float
    acc_tp: float
    dr_tp: float
    accepted: int
    drafted: int
    per_pos: tuple[float, ...]
    rate: float


def parse_line(path: str, lineno: int, text: str) -> LogLine | None:
    """The parsed line, None if it has no marker; `BadInput` if the marker's line is garbled."""
    at = text.find(MARKER)
    if at < 0:
        return None
    m = LINE_RE.search(text, at)
    if m is None:
        raise BadInput(path, lineno, at + 1, "malformed 'SpecDecoding metrics:' line")
    for name in ("accepted", "drafted"):
        if digits_too_long(m.group(name)):
            raise BadInput(
                path,
                lineno,
                m.start(name) + 1,
                f"{name.capitalize()} has {len(m.group(name))} digits: beyond the limit"
                " 2**63 - 1 (docs/limits.md)",
            )
    rates = m.group("per_pos")
    if rates.count(",") >= MAX_K:  # before splitting: k rates are k - 1 separators
        raise BadInput(
            path,
            lineno,
            m.start("per_pos") + 1,
            f"more than {MAX_K} per-position rates: k is at most {MAX_K} (docs/limits.md)",
        )
    try:
        per_pos = tuple(float(x) for x in rates.split(", ")) if rates else ()
    except ValueError:
        raise BadInput(
            path, lineno, m.start("per_pos") + 1, "malformed per-position acceptance rates"
        ) from None
    _check_ranges(path, lineno, m, per_pos)
    return LogLine(
        path,
        lineno,
        float(m.group("mean")),
        float(m.group("acc_tp")),
        float(m.group("dr_tp")),
        int(m.group("accepted")),
        int(m.group("drafted")),
        per_pos,
        float(m.group("rate")),
    )


def _check_ranges(path: str, lineno: int, m: re.Match[str], per_pos: tuple[float, ...]) -> None:
    """`BadInput` naming the field (and its column) whose value vLLM's format cannot print:
    a per-position rate a_i/n outside [0, 1] or NaN (vLLM logs only intervals with n > 0), a
    mean acceptance length 1 + A/n below 1, a negative throughput, an acceptance rate
    100·A/D outside [0, 100] (NaN stands for D = 0, which the checks compare). NaN compares
    false, so these are refused here rather than passing the consistency checks unnoticed."""
    offset = m.start("per_pos")
    for i, (text, rate) in enumerate(zip(m.group("per_pos").split(", "), per_pos, strict=True)):
        if not 0.0 <= rate <= 1.0:
            raise BadInput(
                path,
                lineno,
                offset + 1,
                f"Per-position acceptance rate {text} at position {i}: a_i/n is a number in"
                " [0, 1] (accepted at that position over the drafts of the interval)",
            )
        offset += len(text) + 2
    mean = float(m.group("mean"))
    if mean < 1.0:
        raise BadInput(
            path,
            lineno,
            m.start("mean") + 1,
            f"Mean acceptance length {m.group('mean')} is below 1: it is 1 + Accepted/num_drafts",
        )
    for name, label in (("acc_tp", "Accepted throughput"), ("dr_tp", "Drafted throughput")):
        if float(m.group(name)) < 0.0:
            raise BadInput(
                path,
                lineno,
                m.start(name) + 1,
                f"{label} {m.group(name)} tokens/s is negative: it is tokens over elapsed time",
            )
    rate = float(m.group("rate"))
    if not (math.isnan(rate) or 0.0 <= rate <= 100.0):
        raise BadInput(
            path,
            lineno,
            m.start("rate") + 1,
            f"Avg Draft acceptance rate {m.group('rate')}% is outside [0, 100]: it is"
            " 100 * Accepted/Drafted",
        )


def read_lines(path: str) -> list[LogLine]:
    """Every ``SpecDecoding metrics:`` line of a log (read through `source`: path or -, gzip,
    strict UTF-8, bounded lines). An empty input, or one without such a line, is `BadInput`: it
    has nothing to check, and exit 0 would claim it was checked."""
    out: list[LogLine] = []
    seen = 0
    for lineno, text in iter_text_lines(path):
        seen = lineno
        parsed = parse_line(path, lineno, text)
        if parsed is not None:
            out.append(parsed)
    if not out:
        what = "empty input" if not seen else f"no '{MARKER}' line in {seen} lines"
        raise BadInput(
            path,
            1,
            1,
            f"{what}: nothing to check (a vLLM server log with speculative decoding and"
            " stats logging on prints one per interval)",
        )
    return out


def drafts_range(x: LogLine) -> tuple[int, int] | None:
    """Integers n consistent with the printed mean (A > 0) and D <= k·n; None if none."""
    k = max(len(x.per_pos), 1)
    low = max(1, math.ceil(x.drafted / k), math.ceil(x.accepted / k))
    if x.accepted == 0:
        return (low, low) if math.isclose(x.mean, 1.0) or math.isnan(x.mean) else None
    if not math.isfinite(x.mean):  # nan or inf with Accepted > 0: no n gives that mean
        return None
    hi_mean = x.mean - 1 + MEAN_HALF_ULP
    lo_mean = x.mean - 1 - MEAN_HALF_ULP
    n_min = max(low, math.ceil(x.accepted / hi_mean - EPS))
    n_max = math.floor(x.accepted / lo_mean + EPS) if lo_mean > 0 else 10**12
    return (n_min, n_max) if n_min <= n_max else None


# [REP-2] the periodic 'SpecDecoding metrics:' log line
def check_line(x: LogLine) -> list[Finding]:
    """Every consistency check of one log line."""
    bad: list[tuple[str, str]] = []
    k = len(x.per_pos)
    if x.accepted > x.drafted:
        bad.append(("accepted<=drafted", f"Accepted {x.accepted} > Drafted {x.drafted}"))
    tol_mean = MEAN_HALF_ULP + k * POS_HALF_ULP + EPS
    if not math.isfinite(x.mean) and x.accepted > 0:
        bad.append(
            (
                "mean length finite",
                f"mean {x.mean} with Accepted {x.accepted} > 0: 1 + A/n is a finite number",
            )
        )
    if not math.isnan(x.mean) and k:
        implied = 1 + sum(x.per_pos)
        if abs(x.mean - implied) > tol_mean:
            bad.append(
                (
                    "mean length vs per-position",
                    f"mean {x.mean:.2f} but 1 + Σ per-position = {implied:.3f}; off by"
                    f" {abs(x.mean - implied):.4f} > ±{tol_mean:.4f} (%.2f half-ulp 0.005 +"
                    f" {k} * %.3f half-ulp 0.0005)",
                )
            )
    if x.drafted > 0:
        exact = 100.0 * x.accepted / x.drafted
        if math.isnan(x.rate) or abs(x.rate - exact) > RATE_HALF_ULP + EPS:
            bad.append(
                (
                    "acceptance rate vs Accepted/Drafted",
                    f"printed {x.rate:.1f}% but 100 * {x.accepted}/{x.drafted} = {exact:.3f}%;"
                    " more than the %.1f%% half-ulp 0.05 apart",
                )
            )
        if not (math.isfinite(x.acc_tp) and math.isfinite(x.dr_tp)):
            bad.append(
                (
                    "throughputs vs Accepted/Drafted",
                    f"throughput {x.acc_tp}/{x.dr_tp} tokens/s is not finite",
                )
            )
        elif x.dr_tp > 0 or x.acc_tp > 0:
            lhs = abs(x.acc_tp * x.drafted - x.dr_tp * x.accepted)
            tol = TP_HALF_ULP * (x.accepted + x.drafted) + EPS
            if lhs > tol:
                bad.append(
                    (
                        "throughputs vs Accepted/Drafted",
                        f"accepted/drafted throughput {x.acc_tp:.2f}/{x.dr_tp:.2f} is not"
                        f" {x.accepted}/{x.drafted} within the %.2f half-ulps"
                        f" (|{x.acc_tp:.2f}·{x.drafted} - {x.dr_tp:.2f}·{x.accepted}| ="
                        f" {lhs:.3f} > {tol:.3f})",
                    )
                )
    elif not math.isnan(x.rate):
        bad.append(
            (
                "acceptance rate vs Accepted/Drafted",
                f"Drafted is 0 but the rate is {x.rate}% (vLLM prints nan%)",
            )
        )
    incr = [i for i in range(1, k) if x.per_pos[i] > x.per_pos[i - 1]]
    if incr:
        i = incr[0]
        bad.append(
            (
                "per-position non-increasing",
                f"position {i} rate {x.per_pos[i]:.3f} > position {i - 1} rate"
                f" {x.per_pos[i - 1]:.3f} (rounding is monotone, so exact)",
            )
        )
    rng = drafts_range(x)
    if rng is None:
        bad.append(
            (
                "integral num_drafts",
                f"no integer num_drafts n gives mean {x.mean:.2f} = 1 + {x.accepted}/n"
                f" within ±0.005 with Drafted {x.drafted} <= k·n",
            )
        )
    findings = [Finding(x.path, x.line, VIOLATION, c, m) for c, m in bad]
    if not bad:
        assert rng is not None
        n_text = f"{rng[0]}" if rng[0] == rng[1] else f"{rng[0]}..{rng[1]}"
        elapsed = f"{x.drafted / x.dr_tp:.1f}s" if x.dr_tp > 0 else "n/a"
        findings.append(
            Finding(
                x.path,
                x.line,
                OK,
                "log line consistent",
                f"Accepted {x.accepted}/Drafted {x.drafted} = {x.rate:.1f}%, mean"
                f" {x.mean:.2f} = 1 + Σ per-position within rounding; num_drafts (not"
                f" printed) in {n_text}; interval ≈ {elapsed}",
            )
        )
    return findings


def check_files(paths: list[str], metrics: str | None = None) -> list[Finding]:
    findings: list[Finding] = []
    lines: list[LogLine] = []
    for path in paths:
        parsed = read_lines(path)
        lines.extend(parsed)
        for x in parsed:
            findings.extend(check_line(x))
    if metrics is not None and lines:
        findings.append(_reconcile(lines, metrics))
    return findings


def _reconcile(lines: list[LogLine], metrics: str) -> Finding:
    """Σ logged Accepted / Drafted against the final Prometheus counters."""
    from .prometheus import read_scrapes, spec_totals

    last = read_scrapes([metrics])[-1]
    k = max((len(x.per_pos) for x in lines), default=1)
    _, tokens, accepted, _ = spec_totals(last, k)
    acc = sum(x.accepted for x in lines)
    dr = sum(x.drafted for x in lines)
    where = (
        f"{len(lines)} log lines: Σ Accepted {acc}, Σ Drafted {dr}; {last.path}: accepted"
        f" {accepted}, drafted {tokens}"
    )
    if acc > accepted or dr > tokens:
        return Finding(
            lines[-1].path,
            lines[-1].line,
            VIOLATION,
            "logs vs Prometheus",
            f"{where}: the log intervals count more than the counters",
        )
    if acc == accepted and dr == tokens:
        return Finding(lines[-1].path, lines[-1].line, OK, "logs vs Prometheus", where)
    return Finding(
        lines[-1].path,
        lines[-1].line,
        NOTE,
        "logs vs Prometheus",
        f"{where}: the counters are ahead by {accepted - acc} accepted /"
        f" {tokens - dr} drafted, counted after the last log line (the last"
        " interval is logged only when the next one starts) or before logging began",
    )
