"""Per-request parity of a sync run and an async run of the same workload (RFC: "num_spec_steps
is counted the same way under sync and async scheduling").

Each log is replayed through the reference (reference_replay.Replayer, so every record is
checked as `spectally replay` checks it), which gives every request's rfc counters and every
applied block's stage inputs. A request's *token story* is what reached the request, in order:
its applied blocks (drafts proposed and padding, the grammar-valid drafts the target could accept
after the schedule and AV, tokens sampled and delivered), its preemptions and how it ended
(finish reason or abort). Blocks that never reached the request (discarded) are not part of the
story: which of them a recorder sees depends on the mode (the sync scheduler holds the next
proposal, the async one only placeholders), and the rfc counters leave them out (R6).

For each request present in both logs:

* the stories are equal: then the counters THM-1 makes mode-independent MUST be equal
  (drafted, accepted, spec steps, padding, verified less the async grammar-invalid verified
  drafts, the accepted and rejected fates, per-position drafted and accepted). Any difference is
  a violation of the RFC's promise, reported with the request and the first block whose counts
  differ;
* the stories part: the first place they part is shown, with what differs (preemption, abort
  or finish timing, sampled tokens, schedule truncation, the proposal).

Requests are matched by id; when the ids differ between the runs (vLLM's offline `LLM` gives
"<index>-<random>" ids), by the part before the first "-".
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from spectally.exit_codes import ExitCode, combine
from spectally.reference.arith import INT_ARITH
from spectally.reference.counters import Counters
from spectally.reference.events import Event
from spectally.reference.machine import ClosedBlock, Engine, Outcome
from spectally.reference.step import Mode, RfcStepCounts, StepInputs, pipeline

from ..replay.reference_replay import Replayer, StopReplay
from ..steplog.records import BadInput, Record, parse_line
from ..steplog.source import iter_lines

__all__ = [
    "PARITY_COUNTERS",
    "BadInput",
    "LogDiverges",
    "ParityReport",
    "RequestParity",
    "Run",
    "StoryEntry",
    "compare_runs",
    "parity_counts",
    "read_run",
    "render",
    "report_json",
]

# The counters compared when the stories are equal (THM-1: mode-independent for one story).
PARITY_COUNTERS = (
    "drafted",
    "verified_eligible",
    "accepted",
    "spec_steps",
    "padding",
    "fate_accepted",
    "fate_rejected",
    "per_position_drafted",
    "per_position_accepted",
)


@dataclass(frozen=True)
class StoryEntry:
    """One thing that happened to a request, as far as the request could see it."""

    kind: str  # "block", "preempt", "finish", "abort"
    step: int
    line: int
    proposed: int = 0
    padding: int = 0
    eligible: int = 0  # grammar-valid drafts that reached the target (after schedule and AV)
    scheduled: int = 0  # drafts the schedule kept
    sampled: int = 0
    delivered: int | None = None
    reason: str | None = None

    def key(self) -> tuple[Any, ...]:
        """What must agree between the modes for the stories to be equal."""
        if self.kind == "block":
            return (self.kind, self.proposed, self.padding, self.eligible, self.sampled)
        return (self.kind, self.reason)

    def describe(self) -> str:
        if self.kind == "block":
            delivered = "" if self.delivered is None else f", delivered {self.delivered}"
            return (
                f"step {self.step}: proposed {self.proposed}, padding {self.padding},"
                f" scheduled drafts {self.scheduled}, accept-eligible {self.eligible},"
                f" sampled {self.sampled}{delivered} (line {self.line})"
            )
        reason = f" ({self.reason})" if self.reason else ""
        return f"step {self.step}: {self.kind}{reason} (line {self.line})"


@dataclass
class Run:
    """One replayed log: its mode, and per request its story, counters and applied blocks."""

    path: str
    mode: Mode
    k: int
    complete: bool
    order: list[str] = field(default_factory=list)  # request ids in the order they were added
    stories: dict[str, list[StoryEntry]] = field(default_factory=dict)
    counters: dict[str, Counters] = field(default_factory=dict)
    blocks: dict[tuple[str, int], RfcStepCounts[int]] = field(default_factory=dict)


class LogDiverges(ValueError):
    """A log that does not replay against the reference: its counters cannot be compared."""


class _ClosingEngine(Engine):
    """The reference engine, keeping what each applied block added (to locate a violation)."""

    applied: dict[tuple[str, int], tuple[StepInputs[int, bool], RfcStepCounts[int]]]
    # Every request's counters, kept after the replay forgets an ended request.
    kept: dict[str, Counters]

    def apply(self, event: Event) -> list[ClosedBlock]:
        closed = super().apply(event)
        rid = getattr(event, "request", None)
        if rid is not None:
            self.kept[rid] = self.requests[rid].counters
        for c in closed:
            if c.outcome is Outcome.APPLIED:
                self.applied[(c.request, c.step)] = (c.inputs, c.rfc)
        return closed


class _Recorder(Replayer):
    def _header(self, line: int, rec: Record) -> None:
        super()._header(line, rec)
        assert self.engine is not None
        engine = _ClosingEngine(self.engine.config, check=self.check)
        engine.applied = {}
        engine.kept = {}
        self.engine = engine


def read_run(
    path: str,
    lines: Iterable[tuple[int, bytes, bool]] | None = None,
    force_profile: str | None = None,
) -> Run:
    """Replay one log through the reference (under ``force_profile`` when given) and collect
    every request's story and counters. BadInput when the log is malformed; ValueError (with
    the replay's reason) when the log diverges from the reference (LogDiverges), since its
    counters then cannot be trusted."""
    replayer = _Recorder(path, force_profile=force_profile)
    records: list[tuple[int, Record]] = []
    try:
        for lineno, raw, has_newline in iter_lines(path) if lines is None else lines:
            rec = parse_line(path, lineno, raw, has_newline)
            records.append((lineno, rec))
            replayer.feed(lineno, rec)
        replayer.finish()
    except StopReplay:
        pass
    if replayer.divergences:
        first = replayer.divergences[0]
        raise LogDiverges(
            f"{path}:{first.line}: the log diverges from the reference ({first.reason});"
            " run `spectally replay` on it first"
        )
    engine = replayer.engine
    header = replayer.header
    assert isinstance(engine, _ClosingEngine) and header is not None
    run = Run(path, header.mode, header.k, replayer.totals_record is not None)
    for lineno, rec in records:
        _story_record(run, engine, lineno, rec)
    run.counters = dict(engine.kept)
    run.blocks = {key: rfc for key, (_, rfc) in engine.applied.items()}
    return run


def _story_record(run: Run, engine: _ClosingEngine, lineno: int, rec: Record) -> None:
    kind = rec["record"]
    if kind == "request":
        rid, event = rec["request"], rec["event"]
        if event == "add":
            run.order.append(rid)
            run.stories[rid] = []
            return
        reason = rec.get("reason") if event == "finish" else None
        run.stories[rid].append(StoryEntry(event, rec["step"], lineno, reason=reason))
        return
    if kind != "request_step" or rec["outcome"] != "applied":
        return
    inputs, _ = engine.applied[(rec["request"], rec["step"])]
    kept = pipeline(run.mode, inputs, INT_ARITH)
    entry = StoryEntry(
        "block",
        rec["step"],
        lineno,
        proposed=inputs.proposed,
        padding=inputs.padding,
        eligible=kept.eligible,
        scheduled=kept.scheduled_drafts,
        sampled=rec["sampled"],
        delivered=rec.get("delivered"),
    )
    run.stories[rec["request"]].append(entry)


def parity_counts(c: Counters) -> dict[str, Any]:
    """The counters compared (PARITY_COUNTERS) of one request's counter state."""
    r = c.rfc
    return {
        "drafted": r.drafted,
        "verified_eligible": r.verified - r.grammar_invalid_verified,
        "accepted": r.accepted,
        "spec_steps": r.spec_steps,
        "padding": r.padding,
        "fate_accepted": r.accepted_fate,
        "fate_rejected": r.rejected,
        "per_position_drafted": list(c.per_position("drafted")),
        "per_position_accepted": list(c.per_position("accepted")),
    }


def _block_counts(r: RfcStepCounts[int]) -> tuple[int, ...]:
    f = r.fates
    return (
        r.drafted,
        r.verified - f.grammar_invalid_verified,
        r.accepted,
        r.spec_steps,
        r.padding,
        f.accepted,
        f.rejected,
    )


@dataclass
class RequestParity:
    key: str
    sync_id: str
    async_id: str
    blocks: int  # applied blocks in the sync story
    story_equal: bool
    counters_equal: bool
    parted_at: int | None = None  # index (1-based) of the first story entry that differs
    what: str = ""  # why the stories part, or which counter differs
    sync_entry: str = ""
    async_entry: str = ""
    differing: list[tuple[str, Any, Any]] = field(default_factory=list)
    legacy_equal: bool = True

    @property
    def violation(self) -> bool:
        return self.story_equal and not self.counters_equal


@dataclass
class ParityReport:
    sync_path: str
    async_path: str
    requests: list[RequestParity]
    only_sync: list[str]
    only_async: list[str]
    incomplete: list[str]

    @property
    def exit_code(self) -> ExitCode:
        codes = [ExitCode.OK]
        if any(r.violation for r in self.requests):
            codes.append(ExitCode.DIVERGENCE)
        if self.incomplete:
            codes.append(ExitCode.INCOMPLETE)
        return combine(codes)

    def summary(self) -> dict[str, int]:
        equal = [r for r in self.requests if r.story_equal]
        return {
            "requests_compared": len(self.requests),
            "stories_equal": len(equal),
            "counters_equal": sum(r.counters_equal for r in equal),
            "violations": sum(r.violation for r in self.requests),
            "legacy_num_drafts_differ": sum(not r.legacy_equal for r in equal),
        }


def _match(sync: Run, asy: Run) -> tuple[list[tuple[str, str, str]], list[str], list[str]]:
    """(key, sync id, async id) for every request of both runs; ids in one run only."""
    if set(sync.order) & set(asy.order):
        common = [rid for rid in sync.order if rid in asy.stories]
        pairs = [(rid, rid, rid) for rid in common]
        return (
            pairs,
            [r for r in sync.order if r not in asy.stories],
            [r for r in asy.order if r not in sync.stories],
        )
    s_keys = _prefix_keys(sync.order)
    a_keys = _prefix_keys(asy.order)
    if s_keys is None or a_keys is None:
        raise ValueError(
            "the two logs share no request id, and the ids are not '<index>-<suffix>' ids with"
            " unique indices; record both runs with the same request ids"
        )
    pairs = [(key, rid, a_keys[key]) for key, rid in s_keys.items() if key in a_keys]
    return (
        pairs,
        [rid for key, rid in s_keys.items() if key not in a_keys],
        [rid for key, rid in a_keys.items() if key not in s_keys],
    )


def _prefix_keys(ids: list[str]) -> dict[str, str] | None:
    keys: dict[str, str] = {}
    for rid in ids:
        head, sep, _ = rid.partition("-")
        if not sep or head in keys:
            return None
        keys[head] = rid
    return keys


def _why_part(s: StoryEntry | None, a: StoryEntry | None) -> str:
    """What differs at the first entry where two stories part."""
    if s is None or a is None:
        ended = "sync" if s is None else "async"
        return f"the {ended} log ends the request's story here (no end record for it)"
    for kind, what in (("preempt", "preemption"), ("abort", "abort timing")):
        if (s.kind == kind) != (a.kind == kind):
            who = "sync" if s.kind == kind else "async"
            return f"{what}: {who} {kind}ed the request here, the other run did not"
    if s.kind == "finish" or a.kind == "finish":
        if s.kind == a.kind:
            return f"finish reason: {s.reason!r} against {a.reason!r}"
        who = "sync" if s.kind == "finish" else "async"
        return f"finish timing: {who} finished the request here, the other applied a block"
    if (s.proposed, s.padding) != (a.proposed, a.padding):
        return "proposal: the drafter proposed a different block"
    if s.eligible != a.eligible:
        if s.scheduled != a.scheduled:
            return "schedule truncation: the schedule kept a different number of drafts"
        return "grammar or AV cut: a different number of drafts could be accepted"
    return "sampled tokens: the target sampled a different number of tokens"


def _compare(key: str, sid: str, aid: str, sync: Run, asy: Run) -> RequestParity:
    s_story, a_story = sync.stories[sid], asy.stories[aid]
    s_counts = parity_counts(sync.counters[sid])
    a_counts = parity_counts(asy.counters[aid])
    differing = [
        (n, s_counts[n], a_counts[n]) for n in PARITY_COUNTERS if s_counts[n] != a_counts[n]
    ]
    s_leg, a_leg = sync.counters[sid].legacy, asy.counters[aid].legacy
    result = RequestParity(
        key,
        sid,
        aid,
        blocks=sum(e.kind == "block" for e in s_story),
        story_equal=True,
        counters_equal=not differing,
        differing=differing,
        legacy_equal=(s_leg.num_drafts, s_leg.num_draft_tokens)
        == (a_leg.num_drafts, a_leg.num_draft_tokens),
    )
    for i in range(max(len(s_story), len(a_story))):
        s = s_story[i] if i < len(s_story) else None
        a = a_story[i] if i < len(a_story) else None
        if s is not None and a is not None and s.key() == a.key():
            if s.kind == "block" and not differing:
                continue
            if s.kind == "block":
                sb = sync.blocks[(sid, s.step)]
                ab = asy.blocks[(aid, a.step)]
                if _block_counts(sb) != _block_counts(ab) and not result.what:
                    result.parted_at = i + 1
                    result.what = "counters differ at this block although the story is equal"
                    result.sync_entry, result.async_entry = s.describe(), a.describe()
            continue
        result.story_equal = False
        result.parted_at = i + 1
        result.what = _why_part(s, a)
        result.sync_entry = s.describe() if s else "(no further entry)"
        result.async_entry = a.describe() if a else "(no further entry)"
        return result
    if differing and not result.what:
        result.what = "counters differ although every block's counts agree"
    return result


def compare_runs(sync: Run, asy: Run) -> ParityReport:
    """Compare every request of a sync run with the same request of an async run.
    ValueError when the logs are not a sync and an async run of the same k."""
    if sync.mode is not Mode.SYNC or asy.mode is not Mode.ASYNC:
        raise ValueError(
            f"expected a sync log then an async log; got {sync.mode.value} ({sync.path}) and"
            f" {asy.mode.value} ({asy.path})"
        )
    if sync.k != asy.k:
        raise ValueError(
            f"num_speculative_tokens differs: {sync.k} ({sync.path}) against {asy.k}"
            f" ({asy.path}): runs of one workload and one k are compared"
        )
    pairs, only_sync, only_async = _match(sync, asy)
    if not pairs:
        raise ValueError("the two logs have no request in common")
    incomplete = [run.path for run in (sync, asy) if not run.complete]
    requests = [_compare(key, sid, aid, sync, asy) for key, sid, aid in pairs]
    return ParityReport(sync.path, asy.path, requests, only_sync, only_async, incomplete)


def _name(r: RequestParity) -> str:
    if r.sync_id == r.async_id:
        return f"request {r.key!r}"
    return f"request {r.key!r} (sync {r.sync_id!r}, async {r.async_id!r})"


def render(report: ParityReport, verbose: bool = False) -> str:
    lines = [f"parity: sync {report.sync_path} against async {report.async_path}"]
    for r in report.requests:
        if r.violation:
            lines.append(
                f"VIOLATION {_name(r)}: the token story is the same, the counters are not"
                f" (block {r.parted_at}: {r.what})"
            )
            if r.sync_entry:
                lines.append(f"    sync:  {r.sync_entry}")
                lines.append(f"    async: {r.async_entry}")
            lines.extend(f"    {n}: sync {s}, async {a}" for n, s, a in r.differing)
        elif not r.story_equal:
            lines.append(f"{_name(r)}: stories part at entry {r.parted_at}: {r.what}")
            lines.append(f"    sync:  {r.sync_entry}")
            lines.append(f"    async: {r.async_entry}")
            if verbose:
                lines.extend(f"    {n}: sync {s}, async {a}" for n, s, a in r.differing)
        elif verbose:
            legacy = "" if r.legacy_equal else "; vllm-legacy num_drafts/num_draft_tokens differ"
            lines.append(f"{_name(r)}: story equal over {r.blocks} blocks, counters equal{legacy}")
    for path, ids in ((report.sync_path, report.only_sync), (report.async_path, report.only_async)):
        if ids:
            lines.append(f"only in {path}, not compared: {', '.join(ids)}")
    for path in report.incomplete:
        lines.append(f"{path}: no totals record (the run was cut short)")
    s = report.summary()
    lines.append(
        f"{s['requests_compared']} requests compared, {s['stories_equal']} stories equal,"
        f" {s['counters_equal']} counters equal ({s['violations']} violations;"
        f" vllm-legacy num_drafts/num_draft_tokens differ on {s['legacy_num_drafts_differ']}"
        " of the equal stories)"
    )
    return "\n".join(lines)


def report_json(report: ParityReport) -> dict[str, Any]:
    return {
        "sync": report.sync_path,
        "async": report.async_path,
        "summary": report.summary(),
        "exit_code": int(report.exit_code),
        "requests": [
            {
                "request": r.key,
                "sync_id": r.sync_id,
                "async_id": r.async_id,
                "story_equal": r.story_equal,
                "counters_equal": r.counters_equal,
                "violation": r.violation,
                "parted_at": r.parted_at,
                "what": r.what,
                "sync_entry": r.sync_entry,
                "async_entry": r.async_entry,
                "differing": [{"counter": n, "sync": s, "async": a} for n, s, a in r.differing],
                "legacy_equal": r.legacy_equal,
            }
            for r in report.requests
        ],
        "only_sync": report.only_sync,
        "only_async": report.only_async,
        "incomplete": report.incomplete,
    }
