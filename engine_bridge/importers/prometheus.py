"""Prometheus text exposition of vLLM's spec-decode counters (docs/vllm-source-notes.md §5).

vLLM 0.32 exports, per ``engine`` and ``model_name`` label set, the counters
``vllm:spec_decode_num_drafts_total``, ``vllm:spec_decode_num_draft_tokens_total``,
``vllm:spec_decode_num_accepted_tokens_total`` and
``vllm:spec_decode_num_accepted_tokens_per_pos_total`` (extra label ``position``, 0..k-1).
vLLM with the counting fix (patches/) also exports
``vllm:spec_decode_num_verified_draft_tokens_total``, the drafts that entered the target forward
pass; a scrape without it reads as before, and where it is there the checks below include it.

Served through Ray Serve, vLLM's metrics go through ``ray.util.metrics`` with every character
outside ``[a-zA-Z0-9_]`` replaced by ``_`` (vllm/v1/metrics/ray_wrappers.py,
``_get_sanitized_opentelemetry_name``) and Ray's exporter prefixes ``ray_``, so
``vllm:spec_decode_num_drafts_total`` is scraped as ``ray_vllm_spec_decode_num_drafts_total``
(Ray releases that keep the colon: ``ray_vllm:spec_decode_...``), with a ``ReplicaId`` label per
replica. Both spellings are read as the vLLM names; each replica is its own label set.

A file holds one or many scrapes; a scrape starts again where a ``# HELP`` or ``# TYPE`` line
repeats a metric already seen in the current scrape (what concatenated ``curl /metrics`` output
looks like), or after OpenMetrics' ``# EOF``. A series twice in one scrape is bad input naming
both lines (one value would hide the other; Prometheus refuses such a scrape). Samples are
parsed with ``prometheus_client.parser.text_string_to_metric_families`` line by line, so each
value keeps its line number.

Checks, per scrape and label set (the granularity these counters have): accepted <= drafted (with
the verified counter: drafted >= verified >= accepted), Σ per-position accepted == accepted,
per-position non-increasing, per-position[0] <= num_drafts, accepted and drafted <= k · num_drafts;
across consecutive scrapes: every counter is monotone and the same invariants hold for the interval
deltas. A counter goes back only when its process restarts: a decrease with a new ``_created``
timestamp, or with no ``_created`` sample to tell (Ray's exporter writes none), is a reset,
reported as a note; a decrease while ``_created`` stays the same is a violation. A check is left
out where a counter it reads is not in the scrape (the "missing counters" note names it), and an
interval where one scrape lacks a counter the other has (a scrape cut short or filtered) is noted,
not differenced with 0 in its place. A series its ``# TYPE`` line declares a gauge is a level, not
a running total: it is neither required to be monotone nor differenced between scrapes, and the
messages say which kind each series is. Counts print as exact integers. Each file ends with one
``ok`` ``counter totals`` finding: its last scrape's counters summed over label sets (``totals`` in
the JSON: spec_steps, drafted, verified or null, accepted, accepted_per_pos).
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Iterable
from dataclasses import dataclass, field

from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample

from ..steplog.limits import MAX_INT, MAX_K
from ..steplog.source import BadInput, iter_text_lines
from .findings import NOTE, OK, VIOLATION, Finding, Totals
from .inputs import refuse_second

PREFIX = "vllm:spec_decode_"
# the same names served through Ray Serve: sanitized to [a-zA-Z0-9_] and prefixed "ray_"
# (older Ray releases keep the colon)
RAY_PREFIXES = ("ray_vllm_spec_decode_", "ray_vllm:spec_decode_")
PREFIXES = (PREFIX, *RAY_PREFIXES)
DRAFTS = "vllm:spec_decode_num_drafts"
DRAFT_TOKENS = "vllm:spec_decode_num_draft_tokens"
ACCEPTED = "vllm:spec_decode_num_accepted_tokens"
PER_POS = "vllm:spec_decode_num_accepted_tokens_per_pos"
# the counting fix's counter (patches/): optional, so not in SCALARS ("missing counters")
VERIFIED = "vllm:spec_decode_num_verified_draft_tokens"
SCALARS = (DRAFTS, DRAFT_TOKENS, ACCEPTED)

Labels = tuple[tuple[str, str], ...]


@dataclass
class Series:
    """One label set's spec-decode counters in one scrape (values with their lines)."""

    labels: Labels
    scalars: dict[str, tuple[float, int]] = field(default_factory=dict)
    created: dict[str, float] = field(default_factory=dict)
    per_pos: dict[int, tuple[float, int]] = field(default_factory=dict)
    first: int = 0  # the line of its first sample (a ``_created`` one included)

    def line(self) -> int:
        lines = [ln for _, ln in self.scalars.values()] + [ln for _, ln in self.per_pos.values()]
        return min(lines) if lines else self.first

    def positions(self) -> list[int]:
        """Accepted per draft position, 0..k-1 (`_check_positions` refuses a series that
        skips one)."""
        return [int(self.per_pos[i][0]) for i in range(len(self.per_pos))]

    def name(self) -> str:
        return "{" + ",".join(f'{k}="{v}"' for k, v in self.labels) + "}"


@dataclass
class Scrape:
    path: str
    line: int
    index: int
    series: dict[Labels, Series] = field(default_factory=dict)
    # the ``# TYPE`` of each family (vLLM's name), as declared so far in the file
    types: dict[str, str] = field(default_factory=dict)

    def kind(self, base: str) -> str:
        """``counter`` or ``gauge``: as declared, else a counter (vLLM's spec-decode series
        are counters, and an undeclared ``_total`` sample is one)."""
        return "gauge" if self.types.get(base) == "gauge" else "counter"


def _base(sample_name: str) -> tuple[str, str]:
    for suffix in ("_total", "_created"):
        if sample_name.endswith(suffix):
            return sample_name[: -len(suffix)], suffix
    return sample_name, ""


def read_scrapes(paths: Iterable[str]) -> list[Scrape]:
    """Every scrape of every file, in order (each read through `source`: path or -, gzip, strict
    UTF-8, bounded lines). Malformed sample lines, samples beyond docs/limits.md (a non-finite
    or huge counter, a position >= MAX_K), a per-position sample whose position is no index
    (``x``, ``-1``, ``01``, none), a series that skips a position, a series twice in one
    scrape and a file without any spec-decode sample raise `BadInput`."""
    scrapes: list[Scrape] = []
    for path in paths:
        if not _read_into(scrapes, path, iter_text_lines(path)):
            # Nothing to check (a step log, an empty or unrelated file) must not pass as ok.
            raise BadInput(
                path,
                1,
                1,
                f"no Prometheus {PREFIX}* samples found (is this a /metrics scrape of vLLM with"
                f" speculative decoding? Served through Ray: {RAY_PREFIXES[0]}*)",
            )
    return scrapes


def canonical(name: str) -> str:
    """vLLM's own name for a sample or family name, whichever spelling the scrape uses."""
    for prefix in RAY_PREFIXES:
        if name.startswith(prefix):
            return PREFIX + name[len(prefix) :]
    return name


def scrapes_of_text(text: str, name: str = "<scrape>") -> list[Scrape]:
    """The scrapes of Prometheus text already in memory (``name`` stands for its file in
    errors), read and checked as `read_scrapes` reads a file; none if it has no spec-decode
    sample."""
    scrapes: list[Scrape] = []
    _read_into(scrapes, name, enumerate(text.splitlines(), start=1))
    return scrapes


def _read_into(scrapes: list[Scrape], path: str, lines: Iterable[tuple[int, str]]) -> bool:
    """Append the scrapes of one file's ``lines``; whether it had any spec-decode sample."""
    start = len(scrapes)
    current: Scrape | None = None
    seen_meta: set[tuple[str, str]] = set()
    # the current scrape's series, each with its first line: a second is refused
    seen: dict[Hashable, int] = {}
    types: dict[str, str] = {}
    found = False
    for lineno, raw in lines:
        line = raw.strip()
        if not line:
            continue
        if line == "# EOF":  # OpenMetrics: the end of one exposition
            current = None
            seen_meta = set()
            continue
        if line.startswith("#"):
            parts = line.split(None, 3)
            if len(parts) >= 3 and parts[1] in ("HELP", "TYPE"):
                key = (parts[1], parts[2])
                if current is not None and key in seen_meta:
                    current = None
                    seen_meta = set()
                seen_meta.add(key)
                if parts[1] == "TYPE" and len(parts) == 4:
                    types[canonical(parts[2])] = parts[3].strip()
            continue
        if current is None:
            current = Scrape(path, lineno, len(scrapes), types=types)
            scrapes.append(current)
            seen = {}
        if not line.startswith(PREFIXES):
            continue
        for sample in samples_of_line(path, lineno, line):
            labels = dict(sample.labels)
            _check_sample(path, lineno, raw, sample.name, labels, sample.value)
            _check_repeat(seen, path, lineno, sample.name, labels)
            _add_sample(current, sample.name, labels, sample.value, lineno)
            found = True
    for scrape in scrapes[start:]:
        for series in scrape.series.values():
            _check_positions(path, series)
    return found


def _check_positions(path: str, series: Series) -> None:
    """Refuse a series whose draft positions skip one: vLLM exports every position 0..k-1
    from its start (0 until a draft there is accepted), so a gap is a cut or edited scrape,
    and the missing position would otherwise read as 0 accepted."""
    missing = next((i for i in range(len(series.per_pos)) if i not in series.per_pos), None)
    if missing is None:
        return
    after = min(i for i in series.per_pos if i > missing)
    raise BadInput(
        path,
        series.per_pos[after][1],
        1,
        f"{PER_POS}_total{series.name()} has position {after} but not {missing}: vLLM exports"
        " every draft position 0..k-1, so the missing one would read as 0 accepted (a cut or"
        " edited scrape?)",
    )


def _check_repeat(
    seen: dict[Hashable, int], path: str, lineno: int, name: str, labels: dict[str, str]
) -> None:
    """Refuse a series the scrape already holds: one value would silently hide the other
    (Prometheus refuses such a scrape too)."""
    pairs = tuple(sorted(labels.items()))
    shown = "{" + ",".join(f'{k}="{v}"' for k, v in pairs) + "}"
    refuse_second(
        seen,
        (canonical(name), pairs),
        path,
        lineno,
        lambda first: (
            f"{name}{shown} appears twice in one scrape (first at line {first}): one"
            " value would hide the other. Two scrapes pasted together without their # HELP / # TYPE"
            " lines? Keep those lines (or end each scrape with # EOF): they mark where a scrape"
            " starts"
        ),
    )


def samples_of_line(path: str, lineno: int, line: str) -> list[Sample]:
    """The samples of one exposition line (a sample line, not a comment), parsed by
    ``prometheus_client``'s parser; `BadInput` naming ``path:lineno`` if it is malformed. Every
    reader of Prometheus text here (vLLM's scrapes, llama-server's, SGLang's gauges) parses
    through this."""
    try:
        families = list(text_string_to_metric_families(line + "\n"))
    except (ValueError, IndexError, KeyError, TypeError) as exc:
        raise BadInput(path, lineno, 1, f"bad Prometheus sample line: {exc}") from None
    return [sample for family in families for sample in family.samples]


def _check_sample(
    path: str, lineno: int, raw: str, name: str, labels: dict[str, str], value: float
) -> None:
    """The limits of one spec-decode sample, before anything is sized by it."""
    if not name.endswith("_created"):
        if not math.isfinite(value):
            raise BadInput(
                path,
                lineno,
                _value_column(raw),
                f"{name} = {value!r}: a counter sample must be a finite number",
            )
        if abs(value) > MAX_INT:
            raise BadInput(
                path,
                lineno,
                _value_column(raw),
                f"{name} = {value!r} exceeds the limit 2**63 - 1 (docs/limits.md)",
            )
    position = labels.get("position")
    column = raw.find("position=") + 1 or 1  # the label's column (1: no such label)
    if canonical(name) == PER_POS + "_total" and not _is_index(position):
        raise BadInput(
            path,
            lineno,
            column,
            f"{name} with position={position!r}: a per-position sample names its draft"
            " position as vLLM does, 0, 1, 2, ... (without it the sample would be dropped and"
            " the checks run on the other positions)"
            if position is not None
            else f"{name} without a position label: vLLM labels each per-position sample with"
            " its draft position (0, 1, 2, ...)",
        )
    if (
        position is not None
        and position.isascii()
        and position.isdigit()
        and (len(position) > len(str(MAX_K)) or int(position) >= MAX_K)
    ):
        raise BadInput(
            path,
            lineno,
            column,
            f"position {position[:20]} is beyond k <= {MAX_K} (docs/limits.md)",
        )


def _is_index(position: str | None) -> bool:
    """Whether a position label is one vLLM writes: ``str(i)`` of an index i >= 0."""
    return (
        position is not None
        and position.isascii()
        and position.isdigit()
        and (position == "0" or not position.startswith("0"))
    )


def count(value: float) -> str:
    """A sample value as an exact integer where it is one (a counter's count), else as read:
    ``7.26864e+06`` next to ``6310245`` hides the gap."""
    if math.isfinite(value) and value == int(value):
        return str(int(value))
    return repr(value)


def _value_column(raw: str) -> int:
    """1-based column of a sample line's value: the first token after the labels (or name)."""
    at = raw.rfind("}") + 1 if "}" in raw else raw.find(" ")
    if at < 0:
        return 1
    rest = raw[at:]
    return at + len(rest) - len(rest.lstrip()) + 1


def _add_sample(scrape: Scrape, name: str, labels: dict[str, str], value: float, line: int) -> None:
    base, suffix = _base(canonical(name))
    position = labels.pop("position", None)
    key: Labels = tuple(sorted(labels.items()))
    series = scrape.series.setdefault(key, Series(key, first=line))
    if suffix == "_created":
        series.created[base] = value
        return
    if base == PER_POS:
        if position is None or not (position.isascii() and position.isdigit()):
            return
        series.per_pos[int(position)] = (value, line)
    elif base in SCALARS or base == VERIFIED:
        series.scalars[base] = (value, line)


def spec_totals(
    scrape: Scrape, k: int, engine: str | None = None
) -> tuple[int, int, int, list[int]]:
    """(num_drafts, num_draft_tokens, num_accepted_tokens, per-position) summed over label sets
    (only ``engine=...`` when given)."""
    drafts = tokens = accepted = 0
    per_pos = [0] * k
    for labels, series in scrape.series.items():
        if engine is not None and dict(labels).get("engine") != engine:
            continue
        drafts += int(series.scalars.get(DRAFTS, (0.0, 0))[0])
        tokens += int(series.scalars.get(DRAFT_TOKENS, (0.0, 0))[0])
        accepted += int(series.scalars.get(ACCEPTED, (0.0, 0))[0])
        for i, v in enumerate(series.positions()[:k]):
            per_pos[i] += v
    return drafts, tokens, accepted, per_pos


def require_counters(
    scrape: Scrape, names: Iterable[str], what: str, engine: str | None = None
) -> None:
    """`BadInput` at the scrape where a label set lacks one of the counters ``names`` (vLLM's
    names; `PER_POS`: no position at all): sums reconciled with a counter it does not hold would
    be compared with 0. ``what`` names the option that gave the scrape; ``engine`` keeps the
    label sets of that ``engine`` label only."""
    for labels, series in scrape.series.items():
        if engine is not None and dict(labels).get("engine") != engine:
            continue
        lacks = [n for n in names if not (series.per_pos if n == PER_POS else n in series.scalars)]
        if lacks:
            raise BadInput(
                scrape.path,
                series.line() or scrape.line,
                1,
                f"{what}: scrape {scrape.index + 1} {series.name()} has no"
                f" {', '.join(n + '_total' for n in lacks)}: nothing to reconcile the sums with"
                " (a scrape cut short, or filtered?)",
            )


def verified_total(scrape: Scrape, engine: str | None = None) -> int | None:
    """``num_verified_draft_tokens`` summed over label sets (only ``engine=...`` when given);
    None when no label set has the series (vLLM without the counting fix)."""
    values = [
        int(series.scalars[VERIFIED][0])
        for labels, series in scrape.series.items()
        if VERIFIED in series.scalars and (engine is None or dict(labels).get("engine") == engine)
    ]
    return sum(values) if values else None


def _invariants(
    drafts: float,
    tokens: float,
    accepted: float,
    per_pos: list[int],
    verified: float | None = None,
) -> list[tuple[str, str | None]]:
    """(check name, None if it holds else why) for one set of counter values; ``verified``
    where the scrape has the counting fix's counter."""
    k = len(per_pos)
    out: list[tuple[str, str | None]] = [
        (
            "accepted<=drafted",
            None if accepted <= tokens else f"accepted {count(accepted)} > drafted {count(tokens)}",
        )
    ]
    if verified is not None:
        out.append(
            (
                "verified<=drafted",
                None
                if verified <= tokens
                else f"{VERIFIED}_total {count(verified)} > {DRAFT_TOKENS}_total {count(tokens)}",
            )
        )
        out.append(
            (
                "accepted<=verified",
                None
                if accepted <= verified
                else f"{ACCEPTED}_total {count(accepted)} > {VERIFIED}_total {count(verified)}",
            )
        )
    if per_pos:
        total = sum(per_pos)
        out.append(
            (
                "sum(per_pos)==accepted",
                None
                if total == accepted
                else f"Σ per-position {total} != accepted {count(accepted)}",
            )
        )
        bad = [i for i in range(1, k) if per_pos[i] > per_pos[i - 1]]
        out.append(
            (
                "per_pos non-increasing",
                None
                if not bad
                else f"position {bad[0]} = {per_pos[bad[0]]} > position {bad[0] - 1} ="
                f" {per_pos[bad[0] - 1]} ({per_pos})",
            )
        )
        out.append(
            (
                "per_pos[0]<=num_drafts",
                None
                if per_pos[0] <= drafts
                else f"position 0 = {per_pos[0]} > num_drafts {count(drafts)}",
            )
        )
        out.append(
            (
                "drafted<=k*num_drafts",
                None
                if tokens <= k * drafts
                else f"drafted {count(tokens)} > k={k} * num_drafts {count(drafts)}",
            )
        )
    return out


# [REP-1] the Prometheus counters, per model_name and engine label set
def check_scrapes(scrapes: list[Scrape]) -> list[Finding]:
    """Every check on every scrape and between consecutive scrapes of the same label set."""
    findings: list[Finding] = []
    previous: dict[Labels, tuple[Scrape, Series]] = {}
    for scrape in scrapes:
        if not scrape.series:
            findings.append(
                Finding(
                    scrape.path,
                    scrape.line,
                    NOTE,
                    "no spec-decode counters",
                    f"scrape {scrape.index + 1} has no {PREFIX}* samples",
                )
            )
        for labels, series in scrape.series.items():
            findings.extend(_check_series(scrape, series))
            prior = previous.get(labels)
            if prior is not None:
                findings.extend(_check_interval(prior[0], prior[1], scrape, series))
            previous[labels] = (scrape, series)
    last: dict[str, Scrape] = {}
    for scrape in scrapes:
        if scrape.series:
            last[scrape.path] = scrape
    findings.extend(_totals(scrape) for scrape in last.values())
    return findings


def _totals(scrape: Scrape) -> Totals:
    """The last scrape of a file, summed over label sets: what the counters say in total."""
    k = max((len(series.positions()) for series in scrape.series.values()), default=0)
    drafts, tokens, accepted, per_pos = spec_totals(scrape, k)
    verified = verified_total(scrape)
    shown = "no verified counter" if verified is None else f"verified {verified}"
    return Totals(
        scrape.path,
        scrape.line,
        OK,
        "counter totals",
        f"scrape {scrape.index + 1}, {len(scrape.series)} label sets: drafts {drafts}, drafted"
        f" {tokens}, {shown}, accepted {accepted}, per_pos {per_pos}",
        totals={
            "spec_steps": drafts,
            "drafted": tokens,
            "verified": verified,
            "accepted": accepted,
            "accepted_per_pos": per_pos,
        },
    )


# the counters each check of `_invariants` reads: a check is left out where one is not in the
# scrape (a cut or filtered scrape), not computed with 0 in its place
NEEDS = {
    "accepted<=drafted": {ACCEPTED, DRAFT_TOKENS},
    "verified<=drafted": {DRAFT_TOKENS},
    "accepted<=verified": {ACCEPTED},
    "sum(per_pos)==accepted": {ACCEPTED},
    "per_pos[0]<=num_drafts": {DRAFTS},
    "drafted<=k*num_drafts": {DRAFT_TOKENS, DRAFTS},
}


def _readable(
    results: list[tuple[str, str | None]], missing: set[str]
) -> list[tuple[str, str | None]]:
    """The checks of ``results`` whose counters are all there."""
    return [(c, why) for c, why in results if not NEEDS.get(c, set()) & missing]


def _values(series: Series) -> tuple[float, float, float]:
    return (
        series.scalars.get(DRAFTS, (0.0, 0))[0],
        series.scalars.get(DRAFT_TOKENS, (0.0, 0))[0],
        series.scalars.get(ACCEPTED, (0.0, 0))[0],
    )


def _verified(series: Series) -> float | None:
    got = series.scalars.get(VERIFIED)
    return None if got is None else got[0]


def _check_series(scrape: Scrape, series: Series) -> list[Finding]:
    where = f"scrape {scrape.index + 1} {series.name()}"
    findings: list[Finding] = []
    missing = [name for name in SCALARS if name not in series.scalars]
    if missing:
        findings.append(
            Finding(
                scrape.path,
                series.line(),
                NOTE,
                "missing counters",
                f"{where}: no {', '.join(m + '_total' for m in missing)}",
            )
        )
    for name, (value, line) in [
        *series.scalars.items(),
        *((f"{PER_POS}[{i}]", v) for i, v in series.per_pos.items()),
    ]:
        if value != int(value) or value < 0:
            findings.append(
                Finding(
                    scrape.path,
                    line,
                    VIOLATION,
                    "integral counter",
                    f"{where}: {name} = {value!r} is not a non-negative integer",
                )
            )
    drafts, tokens, accepted = _values(series)
    per_pos = series.positions()
    verified = _verified(series)
    missing_set = {n for n in SCALARS if n not in series.scalars}
    results = _readable(_invariants(drafts, tokens, accepted, per_pos, verified), missing_set)
    verified_line = series.scalars.get(VERIFIED, (0.0, series.line()))[1]
    line_of = {
        "accepted<=drafted": series.scalars.get(ACCEPTED, (0.0, series.line()))[1],
        "verified<=drafted": verified_line,
        "accepted<=verified": verified_line,
    }
    for check, why in results:
        if why is not None:
            line = line_of.get(check, series.per_pos.get(0, (0.0, series.line()))[1])
            findings.append(Finding(scrape.path, line, VIOLATION, check, f"{where}: {why}"))
    held = [c for c, why in results if why is None]
    if held:
        findings.append(
            Finding(
                scrape.path,
                series.line(),
                OK,
                "counter invariants",
                f"{where}: {', '.join(held)} (drafts {count(drafts)}, drafted"
                f" {count(tokens)},{'' if verified is None else f' verified {count(verified)},'}"
                f" accepted {count(accepted)}, per_pos {per_pos})",
            )
        )
    return findings


def _check_interval(s0: Scrape, a: Series, s1: Scrape, b: Series) -> list[Finding]:
    """One label set from scrape ``s0`` to ``s1``: a gauge is noted and left alone; a decrease
    is a reset or a violation; otherwise the interval's deltas keep the invariants."""
    where = f"scrapes {s0.index + 1}→{s1.index + 1} {b.name()}"
    gauges = sorted({n for n in (*SCALARS, VERIFIED, PER_POS) if s1.kind(n) == "gauge"})
    if gauges:
        # a gauge is a level: neither monotone nor differenced, and no interval is checked
        return [
            Finding(
                s1.path,
                b.line(),
                NOTE,
                "gauge, not a counter",
                f"{where}: {', '.join(gauges)} declared gauge (# TYPE): a level, not a running"
                " total, so neither required to grow nor differenced between scrapes",
            )
        ]
    went_back = _decrease(s1, a, b, where)
    if went_back is not None:
        return [went_back]
    return _interval_invariants(s1, a, b, where)


def _decrease(s1: Scrape, a: Series, b: Series, where: str) -> Finding | None:
    """A counter that went back from ``a`` to ``b``: a reset (a new ``_created``, or none to
    tell) or a violation (``_created`` the same); None if none went back."""
    known = [n for n in b.created if n in a.created]
    restarted = any(b.created[n] != a.created[n] for n in known)
    decreased: list[str] = []
    pairs = [(n, a.scalars.get(n), b.scalars.get(n)) for n in (*SCALARS, VERIFIED)]
    pairs += [(f"{PER_POS}[{i}]", a.per_pos.get(i), b.per_pos.get(i)) for i in b.per_pos]
    line = b.line()
    for name, old, new in pairs:
        if old is None or new is None:
            continue
        if new[0] < old[0]:
            if not decreased:
                line = new[1]
            decreased.append(f"{name} {count(old[0])} → {count(new[0])}")
    if not decreased:
        return None
    if restarted or not known:
        why = (
            "new _created"
            if restarted
            else "no _created sample to confirm it; a counter goes back only when its"
            " process restarts"
        )
        return Finding(
            s1.path,
            line,
            NOTE,
            "counter reset",
            f"{where}: counters reset ({why}): {'; '.join(decreased)}",
        )
    return Finding(
        s1.path,
        line,
        VIOLATION,
        "monotone",
        f"{where}: a counter decreased while its _created stayed the same (no restart):"
        f" {'; '.join(decreased)}",
    )


def _interval_invariants(s1: Scrape, a: Series, b: Series, where: str) -> list[Finding]:
    """The counter invariants over the deltas from ``a`` to ``b``: a violation per broken one,
    else one ok with the interval's growth."""
    lost = sorted(
        {n for n in (*SCALARS, VERIFIED) if (n in a.scalars) != (n in b.scalars)}
        | {f"{PER_POS}[{i}]" for i in set(a.per_pos) ^ set(b.per_pos)}
    )
    if lost:  # a delta against a counter one scrape lacks would be a guess
        return [
            Finding(
                s1.path,
                b.line(),
                NOTE,
                "interval not checked",
                f"{where}: {', '.join(lost)} in one scrape but not the other (a scrape cut"
                " short, or filtered): no interval to difference",
            )
        ]
    d0, t0, a0 = _values(a)
    d1, t1, a1 = _values(b)
    p0, p1 = a.positions(), b.positions()
    width = max(len(p0), len(p1))
    p0 += [0] * (width - len(p0))
    p1 += [0] * (width - len(p1))
    delta_pos = [y - x for x, y in zip(p0, p1, strict=True)]
    v0, v1 = _verified(a), _verified(b)
    delta_verified = None if v0 is None or v1 is None else v1 - v0
    missing = {n for n in SCALARS if n not in b.scalars}
    results = _readable(_invariants(d1 - d0, t1 - t0, a1 - a0, delta_pos, delta_verified), missing)
    bad = [(c, why) for c, why in results if why is not None]
    if bad:
        return [
            Finding(s1.path, b.line(), VIOLATION, f"interval {check}", f"{where}: {why}")
            for check, why in bad
        ]
    return [
        Finding(
            s1.path,
            b.line(),
            OK,
            "monotone and interval invariants",
            f"{where}: +{count(d1 - d0)} drafts, +{count(t1 - t0)} drafted,"
            f"{'' if delta_verified is None else f' +{count(delta_verified)} verified,'}"
            f" +{count(a1 - a0)} accepted",
        )
    ]


def check_files(paths: list[str]) -> list[Finding]:
    return check_scrapes(read_scrapes(paths))
