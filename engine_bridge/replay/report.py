"""The replay's report: divergences, the summary, the legacy -> rfc shift, and their rendering.

Both replay paths (the columnar checker and the reference machine, `dispatch.py`) end here, so a
log gets the same report whichever path judged it.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from spectally.exit_codes import ExitCode, Verdict
from spectally.reference.counters import Counters
from spectally.reference.metrics import derived_metrics, legacy_metrics
from spectally.reference.step import SHIFT_TERMS as SHIFT_TERMS

from ..steplog.header import Header
from ..steplog.profiles import forced_text, forced_view
from ..steplog.records import BadInput
from ..steplog.schema import COUNTERS, PER_POS

if TYPE_CHECKING:  # the reference machine: only the reference replay's views hold its state
    from spectally.reference.machine import RequestState

LEGACY_FIELDS = COUNTERS  # the engine's own counters, as step_stats and totals records name them


@dataclass(frozen=True)
class RequestView:
    """The reference's state of one request when a divergence is found, as values. The
    reference's states are frozen, so this is a snapshot, rendered when the report is."""

    request: str | None
    state: RequestState | None = None  # the request while open
    ended: tuple[str, int] | None = None  # how it ended and at which line, once closed
    rejected: str | None = None  # the reference's words for the state that rejected an event

    def description(self) -> str:
        if self.state is not None:
            kind = "structured" if self.state.structured else "unstructured"
            return f"{kind}, {self.state.describe()}"
        return f"{self.ended[0]} at line {self.ended[1]}" if self.ended else "unknown"

    def lines(self) -> list[str]:
        words = self.description() if self.rejected is None else self.rejected
        counters = [] if self.state is None else counter_lines(self.state.counters)
        return [f"request {self.request!r}: {words}", *counters]


@dataclass(frozen=True)
class StepBlocks:
    """The blocks a step's account summed (line, request, legacy drafts/tokens/accepted, the
    request's state): the state of a step_stats divergence."""

    step: int
    blocks: tuple[tuple[int, str, tuple[int, int, int], RequestView], ...]

    def lines(self) -> list[str]:
        out = [f"step {self.step} blocks (line: request -> legacy drafts/tokens/accepted):"]
        for line, rid, (nd, nt, na), view in self.blocks:
            out.append(f"  line {line}: {rid!r} -> {nd}/{nt}/{na}; {view.description()}")
        return out


@dataclass(frozen=True)
class ReportedSums:
    """The sum of the log's step_stats records: the state of a totals divergence."""

    legacy: tuple[int, ...]  # num_drafts, num_draft_tokens, num_accepted_tokens
    per_position: list[int]

    def lines(self) -> list[str]:
        return [
            f"sum of step_stats records: {fmt(list(self.legacy))} per_pos {fmt(self.per_position)}"
        ]


@dataclass(frozen=True)
class ReplayedLog:
    """The log a metrics scrape was compared with: the state of a metrics divergence."""

    path: str

    def lines(self) -> list[str]:
        return [f"replayed log: {self.path}"]


State = RequestView | StepBlocks | ReportedSums | ReplayedLog


@dataclass
class Divergence:
    """One disagreement between the log and the reference, as data: where, the counters
    expected and found (``rows``), the reference's state (``state``), the record's field at
    fault (``at``: the report's column) and the rule of SPEC.md the log breaks (``rule``, where
    one rule names it). `render` and `to_dict` write the report from it."""

    path: str
    line: int
    kind: str
    step: int | None
    reason: str
    record: Mapping[str, Any] | None = None
    rows: list[tuple[str, Any, Any]] = field(default_factory=list)
    state: State | None = None
    at: str | None = None
    rule: str | None = None

    @property
    def column(self) -> int:
        return 1 if self.at is None or self.record is None else column(self.record, self.at)

    def state_lines(self) -> list[str]:
        return [] if self.state is None else self.state.lines()

    def render(self) -> str:
        out = [f"{self.path}:{self.line}:{self.column}: divergence ({self.kind}): {self.reason}"]
        if self.record is not None:
            out.append(f"  record: {json.dumps(self.record, separators=(',', ':'))}")
        if self.rows:
            width = max(len(r[0]) for r in self.rows)
            exp_w = max(len("expected"), *(len(fmt(r[1])) for r in self.rows))
            out.append(f"  {'counter'.ljust(width)}  {'expected'.ljust(exp_w)}  actual")
            for name, expected, actual in self.rows:
                mark = "" if expected == actual else "   <-- differs"
                out.append(
                    f"  {name.ljust(width)}  {fmt(expected).ljust(exp_w)}  {fmt(actual)}{mark}"
                )
        state = self.state_lines()
        if state:
            out.append("  reference state:")
            out.extend(f"    {line}" for line in state)
        return "\n".join(out)

    def to_dict(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "line": self.line,
            "column": self.column,
            "kind": self.kind,
            "step": self.step,
            "reason": self.reason,
            "record": self.record,
            "counters": [{"name": n, "expected": e, "actual": a} for n, e, a in self.rows],
            "state": self.state_lines(),
            "rule": self.rule,
        }


@dataclass
class ReplayResult:
    path: str
    status: Verdict  # never INTERNAL_ERROR: that is the fleet's, for a file whose replay failed
    divergences: list[Divergence]
    bad_input: BadInput | None
    summary: dict[str, Any]
    notes: list[str]
    totals: Counters | None = None  # the reference's counters of the whole log (both profiles)
    # Which checker vouched for the verdict: "columnar" (the fast path agreed on its own) or
    # "reference" (the plain replay judged the log). Not part of the report or the JSON.
    checker: str = "reference"

    @property
    def exit_code(self) -> ExitCode:
        return self.status.exit_code


def fmt(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, list):
        return "[" + ", ".join(str(v) for v in value) + "]"
    return str(value)


def rows(expected: tuple[Any, ...], actual: tuple[Any, ...]) -> list[tuple[str, Any, Any]]:
    names = (*LEGACY_FIELDS, PER_POS)
    return [(n, _plain(e), _plain(a)) for n, e, a in zip(names, expected, actual, strict=True)]


def _plain(value: Any) -> Any:
    return list(value) if isinstance(value, tuple) else value


def column(rec: Mapping[str, Any], name: str) -> int:
    """1-based column of ``name`` in the record as the recorder writes it (compact JSON)."""
    text = json.dumps(rec, separators=(",", ":"))
    at = text.find(json.dumps(name) + ":")
    return at + 1 if at >= 0 else 1


# -- shift ---------------------------------------------------------------------------------------


def _ratio(num: int, den: int, offset: int = 0, if_zero: float | None = None) -> float | None:
    return if_zero if den == 0 else offset + num / den


def num(value: float | None, digits: int = 2) -> str:
    return "n/a" if value is None else f"{value:.{digits}f}"


def explain_shift(totals: Counters, shift: dict[str, int]) -> dict[str, Any]:
    """Each metric under both profiles with the counts that move it, in words."""
    lg, r = totals.legacy, totals.rfc
    s = shift
    drafted_terms = [
        (s["grammar_invalid"], "grammar-invalid drafts now count as drafted"),
        (s["truncated"], "drafts cut by the schedule now count as drafted"),
        (-s["padding"], "placeholder (padding) slots no longer count as drafted"),
        (-s["stale_drafted"], "drafted tokens of stale outputs no longer count"),
    ]
    delta_drafted = r.drafted - lg.num_draft_tokens
    unexplained = delta_drafted - sum(v for v, _ in drafted_terms)
    if unexplained:
        drafted_terms.append((unexplained, "unexplained (please report)"))
    step_terms = [
        (s["steps_without_slots"], "steps whose drafts were all cut before scheduling now count"),
        (-s["padding_only_steps"], "steps with only placeholder slots no longer count"),
        (-s["stale_steps"], "stale steps no longer count"),
    ]
    delta_steps = r.spec_steps - lg.num_drafts
    unexplained_steps = delta_steps - sum(v for v, _ in step_terms)
    if unexplained_steps:
        step_terms.append((unexplained_steps, "unexplained (please report)"))
    accepted_terms = [(-s["stale_accepted"], "accepted tokens of stale outputs no longer count")]

    def words(terms: list[tuple[int, str]]) -> str:
        parts = [f"{abs(v):,} {text}" for v, text in terms if v]
        return "; ".join(parts) if parts else "no change"

    rate_l = _ratio(lg.num_accepted_tokens, lg.num_draft_tokens)
    rate_r = _ratio(r.accepted, r.drafted)
    len_l = _ratio(lg.num_accepted_tokens, lg.num_drafts, 1, 1.0)
    len_r = _ratio(r.accepted, r.spec_steps, 1, 1.0)
    return {
        "drafted": {
            "vllm-legacy": lg.num_draft_tokens,
            "rfc": r.drafted,
            "why": words(drafted_terms),
        },
        "spec_steps": {"vllm-legacy": lg.num_drafts, "rfc": r.spec_steps, "why": words(step_terms)},
        "accepted": {
            "vllm-legacy": lg.num_accepted_tokens,
            "rfc": r.accepted,
            "why": words(accepted_terms),
        },
        "acceptance_rate": {
            "vllm-legacy": rate_l,
            "rfc": rate_r,
            "why": f"acceptance rate {num(rate_l)} → {num(rate_r)}: "
            + words(drafted_terms + accepted_terms),
        },
        "mean_acceptance_length": {
            "vllm-legacy": len_l,
            "rfc": len_r,
            "why": f"mean acceptance length {num(len_l)} → {num(len_r)}: "
            + words(step_terms + accepted_terms),
        },
        "terms": {name: s[name] for name in SHIFT_TERMS},
    }


# -- summary -------------------------------------------------------------------------------------


@dataclass
class Tally:
    """What a replay counted, whichever path counted it: the summary is built from this."""

    counts: dict[str, int] = field(
        default_factory=lambda: dict.fromkeys(
            ("header", "request", "request_step", "step_stats", "totals"), 0
        )
    )
    steps: int = 0
    requests: int = 0
    checked: int = 0
    failed: int = 0
    skipped: int = 0
    shift: dict[str, int] = field(default_factory=lambda: dict.fromkeys(SHIFT_TERMS, 0))
    open_blocks: list[str] = field(default_factory=list)
    # Set when the log ends before its totals record: requests still open at the end.
    open_requests: int | None = None


def counter_lines(counters: Counters) -> list[str]:
    """A request's counters under both profiles, for a divergence's state."""
    r, lg = counters.rfc, counters.legacy
    return [
        f"rfc: drafted {r.drafted} verified {r.verified} accepted {r.accepted}"
        f" spec_steps {r.spec_steps}",
        f"vllm-legacy: num_drafts {lg.num_drafts} num_draft_tokens {lg.num_draft_tokens}"
        f" num_accepted_tokens {lg.num_accepted_tokens}",
    ]


def stats_not_compared(step: int) -> str:
    """The note for the last step of a log cut before its totals record whose blocks count
    something but whose step_stats never came (both checkers write it)."""
    return f"step {step}: step_stats not compared (the log ends before them)"


def make_summary(
    path: str, header: Header, tally: Tally, totals: Counters, forced: str | None = None
) -> dict[str, Any]:
    """The report as data; ``forced``: the profile given with --force-profile (``header`` is
    the header as the replay used it, with that profile)."""
    d = totals.to_dict()
    legacy = d["vllm-legacy"]
    rfc = d["rfc"]
    checked, failed = tally.checked, tally.failed
    agreement = 100.0 if checked == 0 else 100.0 * (checked - failed) / checked
    return {
        "path": path,
        "engine": f"{header.engine} {header.engine_version}",
        "profile": header.profile,
        "profile_forced": forced_view(header, forced),
        "scheduling": header.mode.value,
        "k": header.k,
        "records": sum(tally.counts.values()),
        "records_by_kind": dict(tally.counts),
        "steps": tally.steps,
        "requests": tally.requests,
        "checked": checked,
        "failed": failed,
        "agreement_percent": round(agreement, 2),
        "skipped_after_divergence": tally.skipped,
        "open_blocks": list(tally.open_blocks),
        "incomplete": (
            None
            if tally.open_requests is None
            else {"missing": "totals", "open_requests": tally.open_requests}
        ),
        "totals": {"vllm-legacy": legacy, "rfc": rfc},
        "metrics": {
            "vllm-legacy": legacy_metrics(totals),
            "rfc": derived_metrics(totals),
        },
        "shift": explain_shift(totals, tally.shift),
    }


def render_summary(result: ReplayResult) -> str:
    """The human-readable end-of-replay report."""
    if result.bad_input is not None:
        return f"{result.bad_input}"
    s = result.summary
    out: list[str] = []
    for d in result.divergences:
        out.append(d.render())
    verdict = result.status.label
    if result.status is Verdict.DIVERGE:
        verdict += f" ({len(result.divergences)} shown)"
    forced = s["profile_forced"]
    out.append(
        f"{result.path}: {verdict} with the {s['profile']} profile{' FORCED' if forced else ''}"
        f" ({s['engine']}, {s['scheduling']}, k={s['k']})"
    )
    if forced:
        out.append(f"  {forced_text(forced)}")
    if result.status is Verdict.INCOMPLETE:
        out.append(
            "  the log ends before its totals record: everything present agreed, but the run"
            f" cannot be judged whole; {s['incomplete']['open_requests']} requests still open"
        )
    kinds = ", ".join(f"{k} {v}" for k, v in s["records_by_kind"].items() if v)
    out.append(f"  records {s['records']} ({kinds}); steps {s['steps']}; requests {s['requests']}")
    out.append(
        f"  agreement {s['agreement_percent']:.2f}% ({s['checked'] - s['failed']} of"
        f" {s['checked']} checks)"
        + (
            f"; {s['skipped_after_divergence']} records skipped after a divergence"
            if s["skipped_after_divergence"]
            else ""
        )
    )
    legacy, rfc = s["totals"]["vllm-legacy"], s["totals"]["rfc"]
    # The engine's own column is titled with the log's profile (vllm-0.34, llama.cpp, ...); the
    # JSON keeps the key "vllm-legacy" for that column whatever the profile.
    own = s["profile"]
    out.append(f"  totals                 {own:>11}      rfc")
    out.append(f"    spec steps           {legacy['spec_steps']:>11}  {rfc['spec_steps']:>7}")
    out.append(f"    drafted              {legacy['drafted']:>11}  {rfc['drafted']:>7}")
    out.append(f"    verified             {'-':>11}  {rfc['verified']:>7}")
    out.append(f"    accepted             {legacy['accepted']:>11}  {rfc['accepted']:>7}")
    out.append(
        f"    accepted per pos     {fmt(legacy['per_position']['accepted'])}"
        f"  {fmt(rfc['per_position']['accepted'])}"
    )
    mlg, mrfc = s["metrics"]["vllm-legacy"], s["metrics"]["rfc"]
    out.append(f"  metrics                {own:>11}      rfc")
    out.append(
        f"    acceptance rate      {num(mlg['acceptance_rate'], 3):>11}"
        f"  {num(mrfc['acceptance_rate'], 3):>7}"
    )
    out.append(
        f"    mean accept. length  {num(mlg['mean_acceptance_length'], 3):>11}"
        f"  {num(mrfc['mean_acceptance_length'], 3):>7}"
    )
    out.append(f"    draft quality        {'-':>11}  {num(mrfc['draft_quality'], 3):>7}")
    out.append(f"    verification rate    {'-':>11}  {num(mrfc['verification_rate'], 3):>7}")
    per_l = ", ".join(num(v, 3) for v in mlg["per_position_acceptance_per_step"])
    per_r = ", ".join(num(v, 3) for v in mrfc["per_position_acceptance_per_step"])
    out.append(f"    per-position rate    [{per_l}]  [{per_r}]")
    out.append(f"  shift {own} → rfc:")
    for key in ("acceptance_rate", "mean_acceptance_length"):
        out.append(f"    {s['shift'][key]['why']}")
    for key in ("drafted", "spec_steps"):
        item = s["shift"][key]
        out.append(f"    {key} {item['vllm-legacy']} → {item['rfc']}: {item['why']}")
    if s["open_blocks"]:
        out.append(f"  blocks left open at end: {len(s['open_blocks'])}")
        out.extend(f"    {b}" for b in s["open_blocks"][:20])
    for note in result.notes[:20]:
        out.append(f"  note: {note}")
    if len(result.notes) > 20:
        out.append(f"  note: ... {len(result.notes) - 20} more")
    return "\n".join(out)


def result_json(result: ReplayResult) -> dict[str, Any]:
    return {
        "path": result.path,
        "status": result.status,
        "exit_code": result.exit_code,
        "bad_input": None if result.bad_input is None else str(result.bad_input),
        "divergences": [d.to_dict() for d in result.divergences],
        "notes": result.notes,
        "summary": result.summary,
    }
