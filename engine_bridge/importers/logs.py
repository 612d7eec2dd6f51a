"""vLLM's periodic spec-decode log line, in every layout from V0 to 0.34 and the counting fix's
(`log_layouts`), checked for internal consistency.

The line is found by its marker (``SpecDecoding metrics:``, or V0's ``Speculative metrics:``)
wherever it stands, so whatever a log or a paste puts before it is left alone: vLLM's own
``INFO mm-dd hh:mm:ss [metrics.py:N]``, ``(APIServer pid=N)``, ``(EngineCore_DP0 pid=N)``, a
container or compose prefix (``vllm-1  | ``), a timestamp, a Markdown quote (``> ``); after it,
only a paste's decoration (backticks, quotes, white space). Each line names its layout and the
vLLM releases that print it.

Every value is an interval's delta (V0: the totals since start). The integers are exact; every
float is rounded by its format, so each comparison allows the half-ulp of the formats involved
and says so, and a consistent line is never flagged:

* rate vs Accepted/Drafted: |rate - A/D| within the rate's half-ulp (``%.1f%%``: 0.05 points;
  ``%.3f``: 0.0005), ``nan`` exactly when D = 0;
* mean vs per-position rates r_i = a_i/n (n = num_drafts, not printed): mean - 1 = Σ r_i
  exactly (vLLM 0.8.5: mean = Σ r_i), so |mean - 1 - Σ r_i| <= 0.005 + k·0.0005;
* an integer n with A/n inside the mean's rounding interval and D <= k·n must exist;
* per-position rates are non-increasing (rounding is monotone, so exactly);
* throughputs: both are count / elapsed, so |acc_tp·D - dr_tp·A| <= 0.005·(A + D); where two
  consecutive lines of one process and engine (the ``Engine NNN:`` stats line V1 prints just
  before) carry timestamps, the elapsed time D/dr_tp is compared with the time between them (a
  note when they differ: lines of an unnamed engine in between, or a cut paste);
* V0: D is a multiple of k (vLLM asserts it) and the system efficiency is E / ((D // k)·(k + 1))
  (``get_max_num_emitted_tokens``), within 0.0005;
* A <= D; where the line prints Verified (the counting fix, patches/): D >= V >= A.

Each file ends with one ``ok`` ``log totals`` finding: Σ Drafted, Σ Verified (null unless every
line prints it) and Σ Accepted over its lines (V0's lines are totals since start: its last one
counts), ``totals`` in the JSON.

A value the format cannot print whatever the others say (a per-position rate outside [0, 1] or
NaN, an empty per-position list, a mean below its definition's floor, a negative throughput, a
rate outside its range, k = 0) is bad input naming the field at file:line:column, not a
finding: NaN compares false, so it would pass every check above. A line with a marker that no
layout reads is bad input naming the nearest layout, its versions, and the column where the line
departs from it.
"""

from __future__ import annotations

import math
import re
from collections.abc import Hashable
from dataclasses import dataclass, replace
from datetime import datetime

from ..steplog.limits import MAX_K, digits_too_long
from ..steplog.source import BadInput, iter_text_lines
from .findings import NOTE, OK, VIOLATION, Finding, Totals
from .inputs import refuse_second
from .log_layouts import LAYOUTS, MARKERS, Departure, Layout, Parsed, find_marker, match

MARKER = "SpecDecoding metrics:"
KNOWN_VERSIONS = "0.4.1-0.34"  # the releases whose layouts `LAYOUTS` holds (and the fix's)
POS_HALF_ULP = 0.0005  # f"{p:.3f}"
EPS = 1e-9
# vLLM's log prefix: "%(levelname)s %(asctime)s" with datefmt "%m-%d %H:%M:%S"
# V1's stats line, which the same logger prints just before the spec-decode line
# (vllm/v1/metrics/loggers.py LoggingStatLogger.log: log_prefix, then spec_decoding_logging.log)
_ENGINE = re.compile(r"Engine (\d{3}): ")
_STAMP = re.compile(r"(?<!\d)(\d\d)-(\d\d) (\d\d):(\d\d):(\d\d)(?!\d)")


@dataclass(frozen=True)
class LogLine:
    path: str
    line: int
    layout: Layout
    accepted: int
    drafted: int
    rate: float  # as printed: percent or fraction, `rate_scale` says which
    mean: float | None = None
    acc_tp: float | None = None
    dr_tp: float | None = None
    per_pos: tuple[float, ...] | None = None
    k: int | None = None  # V0 prints it
    efficiency: float | None = None
    emitted: int | None = None
    verified: int | None = None  # the counting fix's layout prints it
    stamp: datetime | None = None  # the prefix's mm-dd hh:mm:ss
    origin: str = ""  # the prefix before the timestamp: the printing process
    engine: str = ""  # the "Engine NNN:" stats line just before it from the same process

    @property
    def versions(self) -> str:
        """The vLLM releases that print this line's layout."""
        return self.layout.versions

    @property
    def rate_scale(self) -> float:
        return rate_scale(self.layout)

    def half_ulp(self, name: str) -> float:
        conv = self.layout.conv(name)
        assert conv is not None
        return 0.5 * 10.0**-conv.digits


def rate_scale(layout: Layout) -> float:
    """100 where the rate prints as a percentage (``%.1f%%``), 1 where as a fraction."""
    parts = layout.parts
    for i, part in enumerate(parts):
        if not isinstance(part, str) and part.name == "rate":
            after = parts[i + 1] if i + 1 < len(parts) else ""
            return 100.0 if isinstance(after, str) and after.startswith("%") else 1.0
    raise ValueError(f"{layout.name} prints no rate")


def parse_line(path: str, lineno: int, text: str) -> LogLine | None:
    """The parsed line, None if it has no marker; `BadInput` if the marker's line is in no
    layout (naming the nearest and the column where it departs) or holds a value its format
    cannot print."""
    at = find_marker(text)
    if at < 0:
        return None
    got = match(text, at)
    if isinstance(got, Departure):
        raise BadInput(path, lineno, got.at + 1, _departure_message(got, text))
    _check_values(path, lineno, got)
    v = got.values

    def num(name: str) -> float | None:
        return float(v[name][0]) if name in v else None

    def count(name: str) -> int | None:
        return int(v[name][0]) if name in v else None

    per_pos = None
    if "per_pos" in v:
        per_pos = tuple(float(x) for x in v["per_pos"][0].split(", "))
    stamp, origin = _prefix(text[:at])
    accepted, drafted, rate = count("accepted"), count("drafted"), num("rate")
    assert accepted is not None and drafted is not None and rate is not None
    return LogLine(
        path,
        lineno,
        got.layout,
        accepted,
        drafted,
        rate,
        mean=num("mean"),
        acc_tp=num("acc_tp"),
        dr_tp=num("dr_tp"),
        per_pos=per_pos,
        k=count("k"),
        efficiency=num("efficiency"),
        emitted=count("emitted"),
        verified=count("verified"),
        stamp=stamp,
        origin=origin,
    )


def _departure_message(d: Departure, text: str) -> str:
    found = text[d.at : d.at + 24]
    shown = repr(found) if found else "the end of the line"
    if d.conv is not None and d.conv.kind == "s":
        return (
            f"{d.conv.label} has an entry that is no rate: {shown} where vLLM prints"
            f" {d.conv.printed_as()} (an entry is missing or cut) in the layout"
            f" {d.layout.describe()}"
        )
    if d.conv is not None:
        return (
            f"{d.conv.label} is {shown}, not a value vLLM prints there ({d.conv.printed_as()})"
            f" in the layout {d.layout.describe()}"
        )
    known = ", ".join(layout.describe() for layout in LAYOUTS if layout.marker == d.layout.marker)
    return (
        f"'{d.layout.marker}' line in no layout of vLLM {KNOWN_VERSIONS} (an older or a"
        f" modified vLLM, not supported): it departs from the nearest, {d.layout.describe()},"
        " here, where that"
        f" layout has {d.expected[:40]!r} and the line {shown} (known: {known})"
    )


def _prefix(before: str) -> tuple[datetime | None, str]:
    """The timestamp vLLM's formatter writes before the message, and the text before it."""
    stamps = list(_STAMP.finditer(before))
    if not stamps:
        return None, before.strip()
    m = stamps[-1]
    month, day, hour, minute, second = (int(g) for g in m.groups())
    try:  # a leap year, so that 02-29 reads
        stamp = datetime(2000, month, day, hour, minute, second)
    except ValueError:
        return None, before.strip()
    return stamp, before[: m.start()].strip()


def _bad(path: str, lineno: int, column: int, message: str) -> BadInput:
    return BadInput(path, lineno, column + 1, message)


def _check_values(path: str, lineno: int, got: Parsed) -> None:
    """`BadInput` naming the field (and its column) whose value vLLM's format cannot print:
    a count beyond 2**63 - 1, k outside 1..MAX_K (V0 divides by it), an empty per-position list
    or a rate a_i/n outside [0, 1] or NaN (vLLM logs only intervals with drafts), a mean below
    its definition's floor, a negative throughput, an acceptance rate or a system efficiency
    outside [0, 1] of its scale (NaN stands for nothing drafted, which the checks compare).
    NaN compares false, so these are refused here rather than passing the checks unnoticed."""
    _printable_counts(path, lineno, got)
    _printable_k(path, lineno, got)
    _printable_per_pos(path, lineno, got)
    _printable_mean(path, lineno, got)
    _printable_throughputs(path, lineno, got)
    _printable_rates(path, lineno, got)


def _printable_counts(path: str, lineno: int, got: Parsed) -> None:
    """Every count within 2**63 - 1 (counted in digits, before converting)."""
    for name, (text, col) in got.values.items():
        conv = got.layout.conv(name)
        assert conv is not None
        if conv.kind == "d" and digits_too_long(text):
            raise _bad(
                path,
                lineno,
                col,
                f"{conv.label} has {len(text)} digits: beyond the limit 2**63 - 1 (docs/limits.md)",
            )


def _printable_k(path: str, lineno: int, got: Parsed) -> None:
    if "k" not in got.values:
        return
    text, col = got.values["k"]
    if int(text) < 1 or int(text) > MAX_K:
        raise _bad(
            path,
            lineno,
            col,
            f"Number of speculative tokens {text}: k is 1..{MAX_K} (V0 divides the drafted"
            " tokens by it; docs/limits.md)",
        )


def _printable_per_pos(path: str, lineno: int, got: Parsed) -> None:
    """One to MAX_K per-position rates, each in [0, 1]; the column of the one at fault."""
    if "per_pos" not in got.values:
        return
    text, col = got.values["per_pos"]
    if not text:
        raise _bad(
            path,
            lineno,
            col,
            "Per-position acceptance rate is an empty list: vLLM prints one rate per draft"
            " position (k >= 1)",
        )
    if text.count(",") >= MAX_K:  # before splitting: k rates are k - 1 separators
        raise _bad(
            path,
            lineno,
            col,
            f"more than {MAX_K} per-position rates: k is at most {MAX_K} (docs/limits.md)",
        )
    offset = col
    for i, item in enumerate(text.split(", ")):
        if not 0.0 <= float(item) <= 1.0:
            raise _bad(
                path,
                lineno,
                offset,
                f"Per-position acceptance rate {item} at position {i}: a_i/n is a number in"
                " [0, 1] (accepted at that position over the drafts of the interval)",
            )
        offset += len(item) + 2


def _printable_mean(path: str, lineno: int, got: Parsed) -> None:
    if "mean" not in got.values:
        return
    text, col = got.values["mean"]
    floor = min(got.layout.mean_offsets)
    if float(text) < floor:
        definition = "1 + Accepted/num_drafts" if floor else "Accepted/num_drafts"
        raise _bad(
            path,
            lineno,
            col,
            f"Mean acceptance length {text} is below {floor}: it is {definition}",
        )


def _printable_throughputs(path: str, lineno: int, got: Parsed) -> None:
    v = got.values
    for name in ("acc_tp", "dr_tp"):
        if name in v and float(v[name][0]) < 0.0:
            conv = got.layout.conv(name)
            assert conv is not None
            raise _bad(
                path,
                lineno,
                v[name][1],
                f"{conv.label} {v[name][0]} tokens/s is negative: it is tokens over elapsed time",
            )


def _printable_rates(path: str, lineno: int, got: Parsed) -> None:
    """The acceptance rate within [0, 1] of the layout's scale (or percent), the system
    efficiency within [0, 1]; NaN (nothing drafted) passes."""
    scale = rate_scale(got.layout)
    for name, what in (("rate", "Accepted/Drafted"), ("efficiency", "emitted over the most")):
        if name not in got.values:
            continue
        text, col = got.values[name]
        value = float(text)
        if not (math.isnan(value) or 0.0 <= value <= (scale if name == "rate" else 1.0)):
            conv = got.layout.conv(name)
            assert conv is not None
            unit = "%" if name == "rate" and scale == 100.0 else ""
            top = "100" if unit else "1"
            raise _bad(
                path,
                lineno,
                col,
                f"{conv.label} {text}{unit} is outside [0, {top}]: it is"
                f" {'100 * ' if unit else ''}{what}",
            )


def read_lines(path: str) -> list[LogLine]:
    """Every spec-decode metrics line of a log (read through `source`: path or -, gzip, strict
    UTF-8, bounded lines: an endless line ends at the line limit). An empty input, or one
    without such a line, is `BadInput`: it has nothing to check, and exit 0 would claim it was
    checked; so is a timestamped line that repeats an earlier one exactly (one process prints
    one line per interval, at its own time: a copy would count the interval twice)."""
    out: list[LogLine] = []
    seen = 0
    engines: dict[str, str] = {}  # per process, the engine of its last "Engine NNN:" line
    stamped: dict[Hashable, int] = {}  # each timestamped metrics line, where it first stood
    for lineno, text in iter_text_lines(path):
        seen = lineno
        parsed = parse_line(path, lineno, text)
        if parsed is not None and parsed.stamp is not None:
            refuse_second(stamped, text, path, lineno, _repeated_line)
        if parsed is not None:
            engine = engines.get(parsed.origin, "")
            out.append(replace(parsed, engine=engine) if engine else parsed)
        elif "Engine " in text:
            m = _ENGINE.search(text)
            if m is not None:
                engines[_prefix(text[: m.start()])[1]] = m.group(1)
    if not out:
        first, *older = MARKERS
        nor = "".join(f" (nor '{m}')" for m in older)
        what = "empty input" if not seen else f"no '{first}' line{nor} in {seen} lines"
        raise BadInput(
            path,
            1,
            1,
            f"{what}: nothing to check (a vLLM server log with speculative decoding and"
            " stats logging on prints one per interval)",
        )
    return out


def _repeated_line(first: int) -> str:
    return (
        f"this line repeats line {first} exactly, its process and timestamp included: a log"
        " appended to itself? Its intervals would be counted twice; keep one copy"
    )


def mean_offset(x: LogLine) -> int | None:
    """The mean's definition this line follows (1: 1 + A/n; 0: A/n, vLLM 0.8.5), judged from
    the per-position rates within rounding; None if none of its layout's definitions holds."""
    assert x.mean is not None and x.per_pos is not None
    for offset in x.layout.mean_offsets:
        if abs(x.mean - offset - sum(x.per_pos)) <= mean_tolerance(x):
            return offset
    return None


def mean_tolerance(x: LogLine) -> float:
    k = len(x.per_pos or ())
    return x.half_ulp("mean") + k * POS_HALF_ULP + EPS


def drafts_range(x: LogLine, offset: int = 1) -> tuple[int, int] | None:
    """Integers n consistent with the printed mean (A > 0) and D <= k·n; None if none."""
    assert x.mean is not None
    k = max(len(x.per_pos or ()), 1)
    low = max(1, math.ceil(x.drafted / k), math.ceil(x.accepted / k))
    if x.accepted == 0:
        ok = math.isclose(x.mean, offset, abs_tol=EPS) or math.isnan(x.mean)
        return (low, low) if ok else None
    if not math.isfinite(x.mean):  # nan or inf with Accepted > 0: no n gives that mean
        return None
    half = x.half_ulp("mean")
    hi_mean = x.mean - offset + half
    lo_mean = x.mean - offset - half
    if hi_mean <= 0:
        return None
    n_min = max(low, math.ceil(x.accepted / hi_mean - EPS))
    n_max = math.floor(x.accepted / lo_mean + EPS) if lo_mean > 0 else 10**12
    return (n_min, n_max) if n_min <= n_max else None


def _check_rate(x: LogLine) -> list[tuple[str, str]]:
    scale, half = x.rate_scale, x.half_ulp("rate")
    unit = "%" if scale == 100.0 else ""
    shown = f"{x.rate:.1f}%" if unit else f"{x.rate:.3f}"
    if x.drafted == 0:
        if math.isnan(x.rate):
            return []
        return [
            (
                "acceptance rate vs Accepted/Drafted",
                f"Drafted is 0 but the rate is {shown} (vLLM prints nan{unit})",
            )
        ]
    exact = scale * x.accepted / x.drafted
    if math.isnan(x.rate) or abs(x.rate - exact) > half + EPS:
        factor = "100 * " if unit else ""
        return [
            (
                "acceptance rate vs Accepted/Drafted",
                f"printed {shown} but {factor}{x.accepted}/{x.drafted} = {exact:.4f}{unit};"
                f" more than the half-ulp {half:g} of the format apart",
            )
        ]
    return []


def _check_v0(x: LogLine) -> list[tuple[str, str]]:
    """V0's system efficiency: emitted over (D // k)·(k + 1), the most that D drafted tokens in
    steps of k can emit (k accepted and one bonus each); D is a multiple of k (asserted)."""
    assert x.k is not None and x.efficiency is not None and x.emitted is not None
    bad: list[tuple[str, str]] = []
    if x.drafted % x.k:
        bad.append(
            (
                "drafted multiple of k",
                f"Number of draft tokens {x.drafted} is not a multiple of k = {x.k} (V0 drafts"
                " k tokens per sequence and asserts it)",
            )
        )
        return bad
    most = x.drafted // x.k * (x.k + 1)
    if most == 0:
        if not math.isnan(x.efficiency):
            bad.append(
                (
                    "system efficiency vs emitted",
                    f"nothing drafted but the efficiency is {x.efficiency:.3f} (vLLM prints nan)",
                )
            )
        return bad
    exact = x.emitted / most
    if math.isnan(x.efficiency) or abs(x.efficiency - exact) > x.half_ulp("efficiency") + EPS:
        bad.append(
            (
                "system efficiency vs emitted",
                f"printed {x.efficiency:.3f} but emitted {x.emitted} / ({x.drafted} // {x.k}"
                f" * {x.k + 1} = {most}) = {exact:.4f}; more than the %.3f half-ulp 0.0005"
                " apart",
            )
        )
    return bad


def _check_mean(x: LogLine) -> tuple[list[tuple[str, str]], int]:
    """The mean against the per-position rates and the integrality of num_drafts; returns the
    violations and the definition the line follows."""
    assert x.mean is not None and x.per_pos is not None
    bad: list[tuple[str, str]] = []
    k = len(x.per_pos)
    offset = x.layout.mean_offsets[0]
    if not math.isfinite(x.mean) and x.accepted > 0:
        bad.append(
            (
                "mean length finite",
                f"mean {x.mean} with Accepted {x.accepted} > 0: 1 + A/n is a finite number",
            )
        )
    elif not math.isnan(x.mean):
        found = mean_offset(x)
        if found is None:
            tol = mean_tolerance(x)
            implied = offset + sum(x.per_pos)
            half = x.half_ulp("mean")
            bad.append(
                (
                    "mean length vs per-position",
                    f"mean {x.mean:.2f} but {offset} + Σ per-position = {implied:.3f}; off by"
                    f" {abs(x.mean - implied):.4f} > ±{tol:.4f} (%.2f half-ulp {half:g} +"
                    f" {k} * %.3f half-ulp 0.0005)",
                )
            )
        else:
            offset = found
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
    if drafts_range(x, offset) is None:
        bad.append(
            (
                "integral num_drafts",
                f"no integer num_drafts n gives mean {x.mean:.2f} = {offset} + {x.accepted}/n"
                f" within ±0.005 with Drafted {x.drafted} <= k·n",
            )
        )
    return bad, offset


def _check_throughputs(x: LogLine) -> list[tuple[str, str]]:
    assert x.acc_tp is not None and x.dr_tp is not None
    if x.drafted == 0:
        return []
    if not (math.isfinite(x.acc_tp) and math.isfinite(x.dr_tp)):
        return [
            (
                "throughputs vs Accepted/Drafted",
                f"throughput {x.acc_tp}/{x.dr_tp} tokens/s is not finite",
            )
        ]
    if x.dr_tp <= 0 and x.acc_tp <= 0:
        return []
    lhs = abs(x.acc_tp * x.drafted - x.dr_tp * x.accepted)
    tol = x.half_ulp("dr_tp") * (x.accepted + x.drafted) + EPS
    if lhs <= tol:
        return []
    return [
        (
            "throughputs vs Accepted/Drafted",
            f"accepted/drafted throughput {x.acc_tp:.2f}/{x.dr_tp:.2f} is not"
            f" {x.accepted}/{x.drafted} within the %.2f half-ulps"
            f" (|{x.acc_tp:.2f}·{x.drafted} - {x.dr_tp:.2f}·{x.accepted}| ="
            f" {lhs:.3f} > {tol:.3f})",
        )
    ]


# [REP-2] the periodic spec-decode log line, every layout
def check_line(x: LogLine) -> list[Finding]:
    """Every consistency check the line's layout allows."""
    bad: list[tuple[str, str]] = []
    said: list[str] = []
    if x.accepted > x.drafted:
        bad.append(("accepted<=drafted", f"Accepted {x.accepted} > Drafted {x.drafted}"))
    if x.verified is not None:
        if x.verified > x.drafted:
            bad.append(("verified<=drafted", f"Verified {x.verified} > Drafted {x.drafted}"))
        if x.accepted > x.verified:
            bad.append(("accepted<=verified", f"Accepted {x.accepted} > Verified {x.verified}"))
        said.append(f"Drafted {x.drafted} >= Verified {x.verified} >= Accepted {x.accepted}")
    bad += _check_rate(x)
    said.append(f"Accepted {x.accepted}/Drafted {x.drafted} = rate {_shown_rate(x)}")
    if x.k is not None:
        bad += _check_v0(x)
        said.append(
            f"system efficiency {x.efficiency:.3f} = emitted {x.emitted} /"
            f" ({x.drafted} // k {x.k} * {x.k + 1})"
        )
    offset = 1
    if x.mean is not None and x.per_pos is not None:
        more, offset = _check_mean(x)
        bad += more
        rng = drafts_range(x, offset)
        n_text = "" if rng is None else f"{rng[0]}" if rng[0] == rng[1] else f"{rng[0]}..{rng[1]}"
        definition = "1 + Σ per-position" if offset else "Σ per-position (vLLM 0.8.5's mean)"
        said.append(
            f"mean {x.mean:.2f} = {definition} within rounding; num_drafts (not printed) in"
            f" {n_text}"
        )
    if x.acc_tp is not None and x.dr_tp is not None:
        bad += _check_throughputs(x)
        elapsed = f"{x.drafted / x.dr_tp:.1f}s" if x.dr_tp > 0 else "n/a"
        said.append(f"interval ≈ {elapsed}")
    findings = [Finding(x.path, x.line, VIOLATION, c, m) for c, m in bad]
    if not bad:
        findings.append(
            Finding(
                x.path,
                x.line,
                OK,
                "log line consistent",
                f"{x.layout.describe()}: {'; '.join(said)}",
            )
        )
    return findings


def _shown_rate(x: LogLine) -> str:
    return f"{x.rate:.1f}%" if x.rate_scale == 100.0 else f"{x.rate:.3f}"


def check_interval(prev: LogLine, x: LogLine) -> Finding | None:
    """The elapsed time a line's throughputs imply (D/dr_tp, A/acc_tp) against the time since
    the previous line of the same process: vLLM measures it from its previous line, and each
    timestamp is cut to the second. A note, never a violation, when they differ: another
    engine's lines in between, or a paste that left lines out, give the same picture."""
    if x.stamp is None or prev.stamp is None or (x.origin, x.engine) != (prev.origin, prev.engine):
        return None
    if x.dr_tp is None or x.acc_tp is None or prev.dr_tp is None:
        return None
    gap = (x.stamp - prev.stamp).total_seconds()
    if gap <= 0:
        return None  # a year's turn, or lines out of order
    bounds = []
    for count, tp, half in ((x.drafted, x.dr_tp, x.half_ulp("dr_tp")),):
        if count == 0 or tp <= 0:
            return None
        lo = count / (tp + half)
        hi = count / (tp - half) if tp > half else math.inf
        bounds.append((lo, hi))
    lo, hi = bounds[0]
    if hi >= gap - 1 and lo <= gap + 1:
        return Finding(
            x.path,
            x.line,
            OK,
            "interval vs timestamps",
            f"Drafted {x.drafted} / {x.dr_tp:.2f} tokens/s = {x.drafted / x.dr_tp:.1f}s, the"
            f" {gap:.0f}s since line {prev.line} within the timestamps' 1s resolution",
        )
    return Finding(
        x.path,
        x.line,
        NOTE,
        "interval vs timestamps",
        f"Drafted {x.drafted} / {x.dr_tp:.2f} tokens/s = {x.drafted / x.dr_tp:.1f}s, but the"
        f" timestamps are {gap:.0f}s after line {prev.line}: lines of another engine in between,"
        " or lines left out of the log",
    )


def check_files(paths: list[str], metrics: str | None = None) -> list[Finding]:
    findings: list[Finding] = []
    lines: list[LogLine] = []
    for path in paths:
        parsed = read_lines(path)
        lines.extend(parsed)
        last: dict[tuple[str, str], LogLine] = {}
        for x in parsed:
            findings.extend(check_line(x))
            prev = last.get((x.origin, x.engine))
            if prev is not None:
                interval = check_interval(prev, x)
                if interval is not None:
                    findings.append(interval)
            last[(x.origin, x.engine)] = x
        findings.append(_file_totals(parsed))
    if metrics is not None and lines:
        findings.append(_reconcile(lines, metrics))
    return findings


def log_totals(lines: list[LogLine]) -> tuple[int, int | None, int]:
    """(Σ Drafted, Σ Verified, Σ Accepted) of log lines: the intervals' deltas summed, V0's
    totals since start by its last line; Verified None unless every line prints it."""
    deltas = [x for x in lines if x.k is None]
    totals = [x for x in lines if x.k is not None]  # V0 prints the totals since start
    drafted = sum(x.drafted for x in deltas) + (totals[-1].drafted if totals else 0)
    accepted = sum(x.accepted for x in deltas) + (totals[-1].accepted if totals else 0)
    printed = [x.verified for x in lines if x.verified is not None]
    verified = sum(printed) if lines and len(printed) == len(lines) else None
    return drafted, verified, accepted


def _file_totals(lines: list[LogLine]) -> Totals:
    drafted, verified, accepted = log_totals(lines)
    shown = "no Verified in its layout" if verified is None else f"Σ Verified {verified}"
    layouts = ", ".join(dict.fromkeys(x.layout.name for x in lines))
    return Totals(
        lines[-1].path,
        lines[-1].line,
        OK,
        "log totals",
        f"{len(lines)} lines ({layouts}): Σ Drafted {drafted}, {shown}, Σ Accepted {accepted}",
        totals={
            "lines": len(lines),
            "drafted": drafted,
            "verified": verified,
            "accepted": accepted,
        },
    )


def _reconcile(lines: list[LogLine], metrics: str) -> Finding:
    """Σ logged Accepted / Drafted (and Verified, where both print it) against the final
    Prometheus counters."""
    from .prometheus import (
        ACCEPTED,
        DRAFT_TOKENS,
        read_scrapes,
        require_counters,
        spec_totals,
        verified_total,
    )

    last = read_scrapes([metrics])[-1]
    require_counters(last, (DRAFT_TOKENS, ACCEPTED), "--metrics")
    k = max((len(x.per_pos or ()) for x in lines), default=1)
    _, tokens, accepted, _ = spec_totals(last, k)
    dr, ver, acc = log_totals(lines)
    counted = verified_total(last)
    both = ver is not None and counted is not None
    logged = f", Σ Verified {ver}" if both else ""
    scraped = f", verified {counted}" if both else ""
    gap = counted - ver if ver is not None and counted is not None else 0
    where = (
        f"{len(lines)} log lines: Σ Accepted {acc}, Σ Drafted {dr}{logged}; {last.path}:"
        f" accepted {accepted}, drafted {tokens}{scraped}"
    )
    if acc > accepted or dr > tokens or gap < 0:
        return Finding(
            lines[-1].path,
            lines[-1].line,
            VIOLATION,
            "logs vs Prometheus",
            f"{where}: the log intervals count more than the counters",
        )
    if acc == accepted and dr == tokens and gap == 0:
        return Finding(lines[-1].path, lines[-1].line, OK, "logs vs Prometheus", where)
    more = f" / {gap} verified" if both else ""
    return Finding(
        lines[-1].path,
        lines[-1].line,
        NOTE,
        "logs vs Prometheus",
        f"{where}: the counters are ahead by {accepted - acc} accepted /"
        f" {tokens - dr} drafted{more}, counted after the last log line (the last"
        " interval is logged only when the next one starts) or before logging began",
    )
