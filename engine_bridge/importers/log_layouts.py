"""Every layout of vLLM's periodic spec-decode log line, V0 through 0.34 and the counting fix
(patches/), as data.

Each `Layout` is vLLM's own format string (``%``-style, as its source passes it to the logger;
V0's f-string written the same way), the names of its arguments in order, the vLLM releases that
print it and the change that introduced it (docs/log-layouts.md has the table with each source
line). `match` reads a line against every layout of its marker; a line that none of them reads
gets the layout it departs from last and the column where it departs, so a refusal names the
nearest layout and its versions rather than calling the line malformed.

Values are matched as the conversions print them: ``%d`` a decimal count, ``%.Nf`` exactly N
decimals (or ``nan`` / ``inf``), ``%s`` the per-position rates (``f"{p:.3f}"`` joined by
``", "``, possibly empty). Text after a complete line is allowed only where it is a paste's
decoration (white space, backticks, quotes, ``|``, colour escapes), never more fields.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

_CONV = re.compile(r"%(?:\.(\d+))?([dfs%])")
_NUMBER = r"(?:-?\d+\.\d{%d}|nan|-?inf)"
_COUNT = re.compile(r"\d+")
_RATE = _NUMBER % 3
_RATES = re.compile(rf"(?:{_RATE}(?:, {_RATE})*)?")
TRAIL = re.compile(r"(?:\s|`|\"|'|\||\x1b\[[0-9;]*m|</?code>)*")


@dataclass(frozen=True)
class Conv:
    """One ``%`` conversion of a format: the argument it prints and how."""

    name: str  # accepted, drafted, verified, emitted, k, rate, efficiency, mean, acc_tp, dr_tp,
    # per_pos
    label: str  # what the line calls it ("Avg Draft acceptance rate")
    kind: str  # "d", "f" or "s"
    digits: int  # decimals of a "f" (3 for the per-position rates of a "s")

    def pattern(self) -> re.Pattern[str]:
        if self.kind == "d":
            return _COUNT
        if self.kind == "s":
            return _RATES
        return re.compile(_NUMBER % self.digits)

    def printed_as(self) -> str:
        if self.kind == "d":
            return "%d, a count"
        if self.kind == "s":
            return "%.3f rates joined by ', '"
        return f"%.{self.digits}f"


Part = str | Conv


def _label(literal: str) -> str:
    """The name a format gives the value after ``literal`` ("..., Accepted: " -> "Accepted")."""
    text = literal.rstrip().removesuffix(":")
    for sep in (", ", "metrics: "):
        if sep in text:
            text = text.rsplit(sep, 1)[1]
    return text


def compile_format(fmt: str, args: tuple[str, ...]) -> tuple[Part, ...]:
    """``fmt`` as literal text and conversions, each conversion named by ``args`` in order."""
    parts: list[Part] = []
    literal = ""
    names = iter(args)
    at = 0
    for m in _CONV.finditer(fmt):
        literal += fmt[at : m.start()]
        at = m.end()
        if m.group(2) == "%":
            literal += "%"
            continue
        if literal:
            parts.append(literal)
        parts.append(Conv(next(names), _label(literal), m.group(2), int(m.group(1) or 3)))
        literal = ""
    literal += fmt[at:]
    if literal:
        parts.append(literal)
    if next(names, None) is not None:
        raise ValueError(f"more arguments than conversions in {fmt!r}")
    return tuple(parts)


@dataclass(frozen=True)
class Layout:
    """One layout of the line: vLLM's format string and where it comes from."""

    name: str
    fmt: str
    args: tuple[str, ...]
    versions: str  # the vLLM releases that print it
    source: str  # the change that introduced it, and the source file
    # the definitions of "Mean acceptance length" the releases of this layout print:
    # 1 is 1 + Accepted/num_drafts, 0 is Accepted/num_drafts (vLLM 0.8.5)
    mean_offsets: tuple[int, ...] = (1,)
    parts: tuple[Part, ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "parts", compile_format(self.fmt, self.args))

    @property
    def marker(self) -> str:
        first = self.parts[0]
        assert isinstance(first, str)
        return first[: first.index(":") + 1]

    def conv(self, name: str) -> Conv | None:
        return next((p for p in self.parts if isinstance(p, Conv) and p.name == name), None)

    def describe(self) -> str:
        return f"{self.name} (vLLM {self.versions})"

    def __str__(self) -> str:
        return self.name


# Newest first. Each format string is copied from the vLLM source named in `source`.
LAYOUTS: tuple[Layout, ...] = (
    Layout(
        "v1-mean-first",
        "SpecDecoding metrics: Mean acceptance length: %.2f, Accepted throughput: %.2f tokens/s,"
        " Drafted throughput: %.2f tokens/s, Accepted: %d tokens, Drafted: %d tokens,"
        " Per-position acceptance rate: %s, Avg Draft acceptance rate: %.1f%%",
        ("mean", "acc_tp", "dr_tp", "accepted", "drafted", "per_pos", "rate"),
        "0.10.2-0.34",
        "vllm-project/vllm PR #24127 as merged (vllm/v1/spec_decode/metrics.py"
        " SpecDecodingLogging.log; checked in the 0.10.2, 0.11.0, 0.32.0 and 0.34.0 sources)",
    ),
    # the fix's layout after the stock one it extends: a line both depart from at the same
    # column is named for the stock layout
    Layout(
        "v1-mean-first-verified",
        "SpecDecoding metrics: Mean acceptance length: %.2f, Accepted throughput: %.2f tokens/s,"
        " Drafted throughput: %.2f tokens/s, Accepted: %d tokens, Drafted: %d tokens,"
        " Per-position acceptance rate: %s, Avg Draft acceptance rate: %.1f%%,"
        " Verified: %d tokens",
        ("mean", "acc_tp", "dr_tp", "accepted", "drafted", "per_pos", "rate", "verified"),
        "the counting fix (patches/): 0.33.0 and 0.34.0 patched",
        "patches/vllm-0.33.0-spec-decode-counting.patch and"
        " patches/vllm-0.34.0-spec-decode-counting.patch (vllm/v1/spec_decode/metrics.py"
        " SpecDecodingLogging.log: v1-mean-first with the interval's verified drafts appended)",
    ),
    Layout(
        "v1-rate-first-throughput",
        "SpecDecoding metrics: Draft acceptance rate: %.1f%%, Mean acceptance length: %.2f,"
        " Accepted throughput: %.2f tokens/s, Drafted throughput: %.2f tokens/s,"
        " Accepted: %d tokens, Drafted: %d tokens, Per-position acceptance rate: %s",
        ("rate", "mean", "acc_tp", "dr_tp", "accepted", "drafted", "per_pos"),
        "no release: builds of PR #24127 before its merge",
        "vllm-project/vllm PR #24127, the output in its description (2025-09-09)",
    ),
    Layout(
        "v1-rate-first-mean",
        "SpecDecoding metrics: Draft acceptance rate: %.1f%%, Mean acceptance length: %.2f,"
        " Accepted: %d tokens, Drafted: %d tokens, Per-position acceptance rate: %s",
        ("rate", "mean", "accepted", "drafted", "per_pos"),
        "0.8.5-0.10.1.1",
        "vllm-project/vllm PR #16665 (vllm/v1/spec_decode/metrics.py; the 0.8.5 source prints"
        " the mean as Accepted/num_drafts, the 0.9.0 and 0.10.1.1 sources as"
        " 1 + Accepted/num_drafts)",
        mean_offsets=(1, 0),
    ),
    Layout(
        "v1-rate-only",
        "SpecDecoding metrics: Draft acceptance rate: %.1f%%, Accepted: %d tokens,"
        " Drafted: %d tokens",
        ("rate", "accepted", "drafted"),
        "0.8.3-0.8.4",
        "vllm-project/vllm PR #15902 (vllm/v1/spec_decode/metrics.py SpecDecodingMetrics.log;"
        " checked in the 0.8.3 and 0.8.4 sources)",
    ),
    Layout(
        "v1-speculative",
        "Speculative metrics: Draft acceptance rate: %.3f, Number of accepted tokens: %d,"
        " Number of draft tokens: %d, ",
        ("rate", "accepted", "drafted"),
        "no release: V1 on main between PR #15151 and PR #15902 (2025-03 to 2025-04; 0.8.2 has"
        " no V1 spec-decode line, 0.8.3 the next layout)",
        "vllm-project/vllm PR #15151 (the 'BEFORE' line quoted in PR #15902)",
    ),
    Layout(
        "v0",
        "Speculative metrics: Draft acceptance rate: %.3f, System efficiency: %.3f,"
        " Number of speculative tokens: %d, Number of accepted tokens: %d,"
        " Number of draft tokens: %d, Number of emitted tokens: %d.",
        ("rate", "efficiency", "k", "accepted", "drafted", "emitted"),
        "V0 engine, 0.5.4-0.9.2",
        "vllm/engine/metrics.py LoggingStatLogger._format_spec_decode_metrics_str with"
        " vllm/spec_decode/metrics.py AsyncMetricsCollector.get_max_num_emitted_tokens (checked"
        " in the 0.5.4, 0.6.0, 0.8.2 and 0.9.2 sources; 0.10.0 has no V0 spec decoding)",
    ),
    Layout(
        "v0-tokens-tokens",
        "Speculative metrics: Draft acceptance rate: %.3f, System efficiency: %.3f,"
        " Number of speculative tokens: %d, Number of accepted tokens: %d,"
        " Number of draft tokens tokens: %d, Number of emitted tokens tokens: %d.",
        ("rate", "efficiency", "k", "accepted", "drafted", "emitted"),
        "V0 engine, 0.4.1-0.5.3",
        "the first V0 speculative-decoding metrics (vllm/engine/metrics.py, the same"
        " computation; checked in the 0.4.1, 0.4.3 and 0.5.0 sources; 0.4.0 prints no such line)",
    ),
)

MARKERS: tuple[str, ...] = tuple(dict.fromkeys(layout.marker for layout in LAYOUTS))


@dataclass(frozen=True)
class Parsed:
    """A line read by one layout: each value's text and its 0-based column in the line."""

    layout: Layout
    values: dict[str, tuple[str, int]]


@dataclass(frozen=True)
class Departure:
    """Where a line stops following a layout: its column, and what the layout has there."""

    layout: Layout
    at: int  # 0-based column in the line
    expected: str
    conv: Conv | None  # set when a value, rather than literal text, departs


def _match_one(layout: Layout, text: str, start: int) -> Parsed | Departure:
    pos = start
    values: dict[str, tuple[str, int]] = {}
    after: Conv | None = None  # the conversion just read, when it is the per-position list
    for part in layout.parts:
        if isinstance(part, str):
            if text.startswith(part, pos):
                pos += len(part)
                after = None
                continue
            if not text[pos:].strip() and part.startswith(text[pos:]) and not part.strip():
                pos = len(text)  # a paste lost the format's trailing space
                continue
            common = 0
            while common < len(part) and pos + common < len(text):
                if text[pos + common] != part[common]:
                    break
                common += 1
            if after is not None and common <= 2 and text.startswith(", ", pos):
                return _list_entry(layout, after, pos)  # the list goes on with a non-rate
            return Departure(layout, pos + common, part[common:], None)
        m = part.pattern().match(text, pos)
        if m is None or (part.kind != "s" and not m.group()):
            return Departure(layout, pos, part.printed_as(), part)
        values[part.name] = (m.group(), pos)
        pos = m.end()
        after = part if part.kind == "s" else None
    end = TRAIL.match(text, pos)
    assert end is not None  # TRAIL matches the empty string
    if end.end() != len(text):
        if after is not None and text.startswith(", ", pos):
            return _list_entry(layout, after, pos)
        return Departure(layout, pos, "the end of the line", None)
    return Parsed(layout, values)


def _list_entry(layout: Layout, conv: Conv, pos: int) -> Departure:
    """A per-position list whose next entry, after its ", ", is no rate (empty or garbled)."""
    return Departure(layout, pos + 2, "a %.3f rate", conv)


def match(text: str, start: int) -> Parsed | Departure:
    """The layout that reads ``text`` from its marker at ``start``; else the departure of the
    layout that follows it furthest (the first in `LAYOUTS` on a tie)."""
    best: Departure | None = None
    for layout in LAYOUTS:
        if not text.startswith(layout.marker, start):
            continue
        got = _match_one(layout, text, start)
        if isinstance(got, Parsed):
            return got
        if best is None or got.at > best.at:
            best = got
    assert best is not None, "match is called at a marker"
    return best


def find_marker(text: str) -> int:
    """The column of the first marker of any layout in ``text``, -1 if none."""
    found = [at for at in (text.find(marker) for marker in MARKERS) if at >= 0]
    return min(found, default=-1)
