"""A llama-server log (``LLAMA_TRACE=1``) as a step log of the project's schema.

Each counted verification becomes one ``request_step``: proposed = scheduled = verified = the
draft's length N (llama.cpp cuts drafts only before proposing, and every draft token enters the
target batch: profile.py), sampled = accepted + 1, outcome ``applied``; and one ``step_stats``
with llama.cpp's own increments for it (update_slots: one verification step, N draft tokens,
A accepted, positions below A). A recurrent target's restore-checkpoint line and the replay
line that follows it are one step: drafted from the first (the draft the server counted),
accepted from the second less the replayed correction (``spec_is_replay``).

llama.cpp logs no iteration counter, so a step here is the verification's ordinal in the log;
request lifecycle records carry the ordinal of the last verification before them.

The independent totals: the ``/metrics`` scrapes before and after the run, differenced, become
the ``totals`` record the replay compares with its own count of the request_steps. The
responses' ``timings.draft_n`` / ``draft_n_accepted`` and each request's own ``draft
acceptance`` log line are checked here against the request's verification lines (a mismatch is
a divergence, exit 1). Without ``/metrics`` the step log has no totals, and replay reports it
incomplete.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..importers.findings import Finding
from ..steplog import schema
from ..steplog.limits import MAX_DEPTH, MAX_K, digits_too_long, version_error
from ..steplog.schema import Record
from ..steplog.source import BadInput, line_col, read_text, too_deep
from . import promtext, serverlog, summaries
from .profile import ENGINE

TRACE_HINT = "run llama-server with LLAMA_TRACE=1 to log each verification"


@dataclass
class Task:
    rid: str
    slot: int
    line: int
    drafted: int = 0
    accepted: int = 0
    steps: int = 0
    released: bool = False
    pending: tuple[int, int] | None = None  # (line, drafted) of a restore awaiting its replay
    timings: tuple[int, int] | None = None  # the task's own (drafted, accepted) line


@dataclass
class Imported:
    """The step log's records and what the import found."""

    records: list[Record]
    divergences: list[str] = field(default_factory=list)
    incomplete: list[str] = field(default_factory=list)
    replays: int = 0
    findings: list[Finding] = field(default_factory=list)  # the summaries' own checks

    @property
    def exit_code(self) -> int:
        if self.divergences:
            return 1
        return 3 if self.incomplete else 0


def _per_pos(accepted: int, k: int) -> list[int]:
    return [1 if i < accepted else 0 for i in range(k)]


class Importer:
    def __init__(self, path: str, k: int | None, version: str | None) -> None:
        self.path = path
        self.k = k
        self.version = version
        self.tasks: dict[int, Task] = {}
        self.body: list[Record] = []
        self.step = 0
        self.replays = 0
        self.max_drafted = 0
        self.divergences: list[str] = []

    def _task(self, ln: serverlog.Line, what: str) -> Task:
        task = self.tasks.get(ln.task)
        if task is None:
            raise BadInput(
                self.path,
                ln.line,
                1,
                f"{what} for task {ln.task}, which no 'processing task' line"
                " started (the log must cover each request from its start)",
            )
        if task.released:
            raise BadInput(self.path, ln.line, 1, f"{what} for task {ln.task} after it stopped")
        return task

    def feed(self, ln: serverlog.Line) -> None:
        if ln.kind == "build":
            self.version = self.version or ln.text
        elif ln.kind == "launch":
            if ln.task in self.tasks:
                raise BadInput(
                    self.path, ln.line, 1, f"task {ln.task} starts twice (one server run per log)"
                )
            task = Task(f"task-{ln.task}", ln.slot, ln.line)
            self.tasks[ln.task] = task
            self.body.append(
                schema.request_event(
                    self.step,
                    task.rid,
                    "add",
                    structured=False,
                    meta={"slot": ln.slot, "line": ln.line},
                )
            )
        elif ln.kind == "restore":
            task = self._task(ln, "a verification")
            if task.pending is None:  # a replay that restores again keeps the first draft
                task.pending = (ln.line, ln.n)
        elif ln.kind == "verify":
            self._verify(self._task(ln, "a verification"), ln)
        elif ln.kind == "timings":
            task = self._task(ln, "a 'draft acceptance' line")
            if ln.n > 0 and task.steps == 0:
                raise BadInput(
                    self.path,
                    ln.line,
                    1,
                    f"task {ln.task} drafted {ln.n} tokens but the log has"
                    f" none of its verification lines: {TRACE_HINT}",
                )
            task.timings = (ln.n, ln.a)
            if (task.drafted, task.accepted) != task.timings:
                self.divergences.append(
                    f"{self.path}:{ln.line}: task {ln.task}'s verification lines sum to"
                    f" {task.drafted} drafted / {task.accepted} accepted; its own 'draft"
                    f" acceptance' line says {ln.n} / {ln.a}"
                )
        elif ln.kind == "release":
            task = self._task(ln, "'stop processing'")
            if task.pending is not None:
                raise BadInput(
                    self.path,
                    ln.line,
                    1,
                    f"task {ln.task} stopped between a checkpoint restore"
                    f" (line {task.pending[0]}) and its replay: llama.cpp counts that draft with"
                    " no verification step, which a step log cannot state",
                )
            task.released = True
            self.body.append(
                schema.request_event(
                    self.step, task.rid, "finish", reason="stop", meta={"line": ln.line}
                )
            )

    def _verify(self, task: Task, ln: serverlog.Line) -> None:
        meta: dict[str, Any] = {"line": ln.line, "slot": ln.slot}
        if task.pending is not None:
            # spec_is_replay: the A accepted drafts plus the correction come back as a draft of
            # A+1; the step counts the first draft's length and n_accepted - 1 accepted.
            restore_line, drafted = task.pending
            accepted = max(ln.a - 1, 0)
            task.pending = None
            self.replays += 1
            meta.update(restore_line=restore_line, replay=f"{ln.a}/{ln.n}")
        else:
            drafted, accepted = ln.n, ln.a
        if drafted > MAX_K:
            raise BadInput(
                self.path, ln.line, 1, f"a draft of {drafted} tokens exceeds k <= {MAX_K}"
            )
        if self.k is not None and drafted > self.k:
            raise BadInput(
                self.path, ln.line, 1, f"a draft of {drafted} tokens exceeds --draft-max {self.k}"
            )
        self.max_drafted = max(self.max_drafted, drafted)
        self.step += 1
        task.drafted += drafted
        task.accepted += accepted
        task.steps += 1
        self.body.append(
            schema.request_step(
                step=self.step,
                request=task.rid,
                proposed=drafted,
                padding=0,
                grammar_valid=None,
                scheduled=drafted,
                invalid=None,
                verified=drafted,
                sampled=accepted + 1,
                accepted=accepted,
                meta=meta,
            )
        )
        counts = (1 if drafted else 0, drafted, accepted)
        per_pos = [accepted]  # widened to k by import_log
        self.body.append(schema.step_stats(self.step, counts, per_pos))


NOT_LLAMACPP = (
    "not a llama-server log: no 'slot ... | task ... |' line, no acceptance summary and no"
    " 'statistics' line"
)
# Lines either reader looks at; the rest of a server log (prompts, loading) is skipped once.
KEYWORDS = ("slot ", "version: ", "draft acceptance", "statistics", "acc per pos")
_VERSION = re.compile(r"[0-9A-Za-z][0-9A-Za-z.+_-]{0,63}")


def engine_version_error(value: str) -> str | None:
    """Why a version string cannot name a llama.cpp build, None when it can."""
    if not _VERSION.fullmatch(value):
        return (
            f"{value[:40]!r} is no version: 1 to 64 letters, digits and . + _ -, starting with"
            " a letter or digit (e.g. 0.5.0-dev+0c1e570)"
        )
    return version_error("--engine-version", value)


def relevant_lines(path: str) -> list[tuple[int, str]]:
    """The numbered lines of a server log that either reader looks at."""
    return [(no, t) for no, t in serverlog.read_lines(path) if any(w in t for w in KEYWORDS)]


def _forward(
    delta: promtext.SpecCounters,
    before: promtext.SpecCounters,
    after: promtext.SpecCounters | None,
    path: str,
) -> None:
    """/metrics counters only grow while one server runs: a decrease is bad input."""
    assert after is not None
    for name in ("num_drafts", "num_draft_tokens", "num_accepted_tokens"):
        if getattr(delta, name) < 0:
            raise BadInput(
                path,
                1,
                1,
                f"llamacpp:spec_decode_{name}_total went backwards ({getattr(before, name)} before,"
                f" {getattr(after, name)} after): the server restarted between the scrapes, or"
                " --metrics-before and --metrics-after are swapped",
            )
    if any(v < 0 for v in delta.per_pos):
        raise BadInput(path, 1, 1, "a per-position counter went backwards between the scrapes")


def _check_mean(imp: Importer, p: summaries.Summary) -> None:
    """A summary's mean acceptance length against its task's verification lines: 1 + A/steps."""
    task = imp.tasks.get(p.task)
    if task is None or not task.steps or p.mean is None:
        return
    exact = 1 + task.accepted / task.steps
    if abs(p.mean - exact) > summaries.MEAN_HALF_ULP + summaries.EPS:
        imp.divergences.append(
            f"{imp.path}:{p.line}: task {p.task}'s mean acceptance length {p.mean:.2f}; its"
            f" {task.steps} verification lines give 1 + {task.accepted}/{task.steps} ="
            f" {exact:.4f}"
        )


def _check_responses_text(path: str, text: str) -> None:
    """`BadInput` for a responses file nested deeper than MAX_DEPTH across its lines (json's
    scanner recurses: a `RecursionError` otherwise), checked on the text before decoding."""
    deep = too_deep(text)
    if deep is not None:
        line, col = line_col(text, deep)
        raise BadInput(path, line, col, f"JSON nested deeper than the limit {MAX_DEPTH}")


def _bounded_int(path: str, text: str) -> Callable[[str], int]:
    """json's ``parse_int`` hook: `BadInput` for an integer wider than MAX_INT_DIGITS digits
    (Python's int() stops at 4,300 with a ValueError), decided from the digits alone."""

    def parse(digits: str) -> int:
        if digits_too_long(digits):
            line, col = line_col(text, max(text.find(digits), 0))
            raise BadInput(path, line, col, f"an integer of {len(digits)} digits: beyond 2**63 - 1")
        return int(digits)

    return parse


def read_responses(path: str) -> list[tuple[int, int]]:
    """(draft_n, draft_n_accepted) of every response that drafted (a JSON list or NDJSON)."""
    text = read_text(path)  # plain, gzip or -, bounded, strict UTF-8
    _check_responses_text(path, text)
    items: list[tuple[int, Any]] = []
    as_int = _bounded_int(path, text)
    try:
        whole = json.loads(text, parse_int=as_int)
        if isinstance(whole, dict):
            whole = whole.get("responses", [whole])
        if not isinstance(whole, list):
            raise BadInput(path, 1, 1, "expected a JSON list of responses")
        items = [(1, r) for r in whole]
    except json.JSONDecodeError:
        for no, line in enumerate(text.splitlines(), start=1):
            if line.strip():
                try:
                    items.append((no, json.loads(line, parse_int=as_int)))
                except json.JSONDecodeError as exc:
                    raise BadInput(path, no, exc.colno, f"not JSON: {exc.msg}") from None
    if not items:  # nothing to compare: not a run whose requests all agree
        raise BadInput(
            path,
            1,
            1,
            "no responses (an empty file or list): --responses takes llama-server's replies,"
            " a JSON list or one per line",
        )
    out = []
    for no, resp in items:
        timings = resp.get("timings") if isinstance(resp, dict) else None
        if not isinstance(timings, dict):
            raise BadInput(path, no, 1, "a response without 'timings' (llama-server adds them)")
        if "draft_n" in timings:
            d, a = timings["draft_n"], timings.get("draft_n_accepted")
            if type(d) is not int or type(a) is not int or not 0 <= a <= d:  # bool: no count
                raise BadInput(path, no, 1, f"bad draft_n / draft_n_accepted: {d!r} / {a!r}")
            out.append((d, a))
    return out


def check_summaries(log: str) -> list[Finding]:
    """The findings of every acceptance summary and statistics line of a server log (no traces
    needed); `BadInput` when the log has none."""
    lines = relevant_lines(log)
    parsed = list(summaries.parse(log, lines))
    if not parsed:
        seen = any(True for _ in serverlog.parse(log, lines))
        raise BadInput(
            log,
            1,
            1,
            "no acceptance summary ('draft acceptance ...') and no 'statistics' line: nothing"
            " to check (the server prints one per request that drafted)"
            if seen
            else NOT_LLAMACPP,
        )
    return summaries.check(parsed)


def import_log(
    log: str,
    *,
    metrics_before: str | None = None,
    metrics_after: str | None = None,
    responses: str | None = None,
    k: int | None = None,
    engine_version: str | None = None,
    spec_method: str = "draft-simple",
) -> Imported:
    """Read ``log`` (and the optional scrapes and responses) into a step log's records."""
    if engine_version is not None and (why := engine_version_error(engine_version)):
        raise BadInput(log, 1, 1, f"--engine-version: {why}")
    after = promtext.read(metrics_after) if metrics_after else None
    before = promtext.read(metrics_before) if metrics_before else promtext.ZERO
    imp, parsed = _read_log(log, k, engine_version)
    delta = after.minus(before) if after is not None else None
    if delta is not None:
        _forward(delta, before, after, metrics_after or "")
    if k is None:
        k = max(len(delta.per_pos) if delta else 0, imp.max_drafted, 1)
    elif after is not None and after.per_pos and len(after.per_pos) != k:
        # the server sizes its per-position counter by its --spec-draft-n-max: a k of the
        # option's own would pad the totals with positions it never reported, or drop some
        raise BadInput(
            metrics_after or "",
            1,
            1,
            f"--draft-max {k}, but this scrape's per-position counter has"
            f" {len(after.per_pos)} positions (llama-server sizes it by its --spec-draft-n-max):"
            f" give {len(after.per_pos)}, or leave --draft-max out",
        )
    result = Imported(_records(imp, k, spec_method), list(imp.divergences), replays=imp.replays)
    result.findings = summaries.check(parsed)
    for tid, task in imp.tasks.items():
        if not task.released:
            result.incomplete.append(f"{log}:{task.line}: task {tid} has no 'stop processing' line")
    if responses is not None:
        _check_responses(result, imp, responses)
    if delta is None:
        result.incomplete.append(f"{log}: no /metrics scrape given: the step log has no totals")
    elif not result.incomplete:
        result.records.append(_totals(delta, k, metrics_after or ""))
    return result


def _read_log(
    log: str, k: int | None, engine_version: str | None
) -> tuple[Importer, list[summaries.Parsed]]:
    """The log's verification lines fed to an `Importer`, and its summaries (each summary's
    mean checked against the lines); `BadInput` when there is nothing to import."""
    lines = relevant_lines(log)
    imp = Importer(log, k, engine_version)
    seen = 0
    for ln in serverlog.parse(log, lines):
        seen += 1
        imp.feed(ln)
    parsed = list(summaries.parse(log, lines))
    if not seen and not parsed:
        raise BadInput(log, 1, 1, NOT_LLAMACPP)
    if imp.step == 0:
        drafted = sum(p.drafted for p in parsed if isinstance(p, summaries.Summary))
        if drafted:
            raise BadInput(
                log,
                parsed[0].line,
                1,
                f"the log's summaries say {drafted} tokens were drafted but it has no"
                f" verification line: {TRACE_HINT}; without --out, `spectally import llamacpp`"
                " checks the summaries themselves",
            )
        raise BadInput(
            log, 1, 1, "no verification line and no acceptance summary: nothing was drafted"
        )
    if imp.version is None:
        raise BadInput(log, 1, 1, "no 'version:' line (llama-server --version): --engine-version")
    for p in parsed:
        if isinstance(p, summaries.Summary) and p.mean is not None:
            _check_mean(imp, p)
    return imp, parsed


def _records(imp: Importer, k: int, spec_method: str) -> list[Record]:
    """The step log's header and the imported records, each per-position counter k long."""
    assert imp.version is not None  # _read_log refuses a log without one
    header = schema.header(
        engine=ENGINE,
        engine_version=imp.version,
        num_speculative_tokens=k,
        scheduling="sync",
        spec_method=spec_method,
        structured_outputs_backend=None,
        adaptive_verification=False,
        drop_stale_output=False,
        config={"source": "llama-server log (LLAMA_TRACE=1)"},
        meta={"recurrent_replays": imp.replays},
    )
    records = [header]
    for rec in imp.body:
        if rec["record"] == "step_stats":
            rec["num_accepted_tokens_per_pos"] = _per_pos(rec["num_accepted_tokens_per_pos"][0], k)
        records.append(rec)
    return records


def _totals(delta: promtext.SpecCounters, k: int, metrics_after: str) -> Record:
    """The ``totals`` record of the /metrics counters' change over the run."""
    if any(delta.per_pos[k:]):
        raise BadInput(metrics_after, 1, 1, f"accepted at a position beyond k = {k}")
    pos = list(delta.per_pos[:k]) + [0] * (k - len(delta.per_pos[:k]))
    counts = (delta.num_drafts, delta.num_draft_tokens, delta.num_accepted_tokens)
    return schema.totals("llamacpp:/metrics after - before", counts, pos)


def _check_responses(result: Imported, imp: Importer, path: str) -> None:
    """The responses' timings against the requests' verification lines, as multisets (a
    response names no task id), and their sums."""
    said = Counter(read_responses(path))
    logged = Counter((t.drafted, t.accepted) for t in imp.tasks.values() if t.drafted)
    if said != logged:
        extra, missing = said - logged, logged - said
        result.divergences.append(
            f"{path}: responses' (draft_n, draft_n_accepted) differ from the log's requests:"
            f" only in responses {sorted(extra.elements())}, only in the log"
            f" {sorted(missing.elements())}"
        )


def encode(records: list[Record]) -> list[bytes]:
    return [json.dumps(rec, separators=(",", ":")).encode() for rec in records]


def refused_by_replay(records: list[Record], out: str) -> str | None:
    """What the replay would refuse in these records (its bad-input reason), None if nothing:
    the step log is replayed in memory before it is written."""
    from ..replay import replay_file

    lines = [(i, b, True) for i, b in enumerate(encode(records), start=1)]
    result = replay_file(out, lines=lines, reference=True)
    if result.bad_input is not None:
        return str(result.bad_input)
    return None


def write(records: list[Record], out: str) -> None:
    """Write the step log whole: into a temporary file beside ``out``, renamed into place only
    when complete (a failure leaves no partial step log)."""
    import os
    import tempfile

    folder = os.path.dirname(os.path.abspath(out))
    fd, tmp = tempfile.mkstemp(prefix=".spectally-", suffix=".ndjson", dir=folder)
    try:
        with os.fdopen(fd, "wb") as f:
            for line in encode(records):
                f.write(line + b"\n")
        os.replace(tmp, out)
    except BaseException:
        os.unlink(tmp)
        raise
