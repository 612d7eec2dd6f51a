"""Per-request spec-decode metrics of vLLM 0.32 (PR #48915, docs/vllm-source-notes.md §5).

Accepted shapes (a JSON value, a JSON array of them, or NDJSON with one per line):

* offline ``RequestOutput`` dumps: ``{"request_id": ..., "outputs": [{"spec_decode_metrics":
  {...}}, ...]}``;
* OpenAI-API responses: ``{"id": ..., "metrics": {"speculative_decoding": {...}}}``;
* a bare metrics object with a ``request_id``.

Metrics fields: ``num_spec_steps`` (= Σ histogram), ``num_draft_tokens``,
``num_accepted_draft_tokens``, ``acceptance_histogram`` (length k+1), ``mean_acceptance_length``
(1 + accepted/steps, 1.0 with no step), ``draft_acceptance_rate`` (accepted/drafted, 0.0 with
none), ``num_spec_tokens``; ``detailed`` adds ``per_step_accepted`` / ``per_step_drafted``,
which are replayed one legacy block per entry (`replay_steps`: through a reference engine of
the request's own; `spectally import requests` runs replay/detailed.py, the same rules over
columns with this as its fallback), and whose per-request legacy counters must equal the
summary fields. A request twice in one file (its id and its metrics the same: a dump appended
to itself) is bad input; two requests that share only an id are two. Σ over requests reconciles
with the Prometheus totals (num_spec_steps ↔ num_drafts, num_draft_tokens,
num_accepted_draft_tokens ↔ num_accepted_tokens, histogram tails ↔ per-position accepted).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from spectally.reference.errors import IllegalEvent
from spectally.reference.events import (
    Accept,
    AddRequest,
    Event,
    GrammarReject,
    Propose,
    StepBegin,
    Verify,
)
from spectally.reference.machine import Engine, EngineConfig
from spectally.reference.metrics import Ratio
from spectally.reference.step import Mode

from ..steplog.limits import k_error
from ..steplog.source import BadInput, json_values, read_text
from .findings import OK, VIOLATION, Finding

REQUIRED = (
    "num_spec_steps",
    "num_draft_tokens",
    "num_accepted_draft_tokens",
    "acceptance_histogram",
    "mean_acceptance_length",
    "draft_acceptance_rate",
    "num_spec_tokens",
)
FLOAT_TOL = 1e-6


@dataclass(frozen=True)
class RequestMetrics:
    path: str
    line: int
    request: str
    metrics: dict[str, Any]
    named: bool = True  # the record names its request (else ``request`` is "line N")


def extract(path: str, line: int, value: Any) -> list[RequestMetrics]:
    """The spec-decode metrics found in one JSON value."""
    if not isinstance(value, dict):
        raise BadInput(path, line, 1, f"expected a JSON object, got {type(value).__name__}")
    out: list[RequestMetrics] = []
    if "outputs" in value and isinstance(value["outputs"], list):
        rid = str(value.get("request_id", f"line {line}"))
        for j, completion in enumerate(value["outputs"]):
            m = completion.get("spec_decode_metrics") if isinstance(completion, dict) else None
            if m is not None:
                name = rid if len(value["outputs"]) == 1 else f"{rid}[{j}]"
                out.append(RequestMetrics(path, line, name, m, "request_id" in value))
        return out
    metrics = value.get("metrics")
    if isinstance(metrics, dict) and "speculative_decoding" in metrics:
        m = metrics["speculative_decoding"]
        if m is not None:
            rid = str(value.get("id", f"line {line}"))
            out.append(RequestMetrics(path, line, rid, m, "id" in value))
        return out
    if "num_spec_steps" in value:
        rid = str(value.get("request_id", f"line {line}"))
        out.append(RequestMetrics(path, line, rid, value, "request_id" in value))
    return out


def _refuse_repeated_ids(found: list[RequestMetrics]) -> None:
    """`BadInput` at the second of two requests of one file with the same id and the same
    metrics: one request twice (a dump appended to itself) would enter every sum twice. Two
    requests that share an id but not their metrics (a client reusing its own request ids)
    are two requests."""
    seen: dict[str, list[RequestMetrics]] = {}
    for r in found:
        if not r.named:
            continue
        same = seen.setdefault(r.request, [])
        twin = next((o for o in same if o.metrics == r.metrics), None)  # compared on an id clash
        if twin is not None:
            raise BadInput(
                r.path,
                r.line,
                1,
                f"request {r.request!r} appears twice in this file, the same metrics both times"
                f" (first at line {twin.line}): counted twice, every sum would be off. A dump"
                " appended to itself? Keep one copy",
            )
        same.append(r)


def read_requests(paths: list[str]) -> list[RequestMetrics]:
    """The metrics of every file, each read through `source` (path or -, gzip, strict UTF-8,
    bounded: `read_text`). A file without any is `BadInput`: nothing was checked, so exit 0
    would lie (a step log is named as one: it is replay's input)."""
    out: list[RequestMetrics] = []
    for path in paths:
        found: list[RequestMetrics] = []
        values = json_values(path, read_text(path))
        for line, value in values:
            found.extend(extract(path, line, value))
        _refuse_repeated_ids(found)
        if not found:
            first = values[0][1] if values else None
            hint = (
                "this is a step log: check it with `spectally replay`"
                if isinstance(first, dict) and "record" in first
                else "started with --per-request-spec-decode-metrics?"
            )
            raise BadInput(path, 1, 1, f"no per-request spec-decode metrics found ({hint})")
        out.extend(found)
    return out


def _validate(r: RequestMetrics) -> None:
    m = r.metrics
    if not isinstance(m, dict):
        raise BadInput(r.path, r.line, 1, f"{r.request}: spec-decode metrics must be an object")
    for name in REQUIRED:
        if name not in m:
            raise BadInput(r.path, r.line, 1, f"{r.request}: missing field {name!r}")
    for name in (
        "num_spec_steps",
        "num_draft_tokens",
        "num_accepted_draft_tokens",
        "num_spec_tokens",
    ):
        v = m[name]
        if type(v) is not int or v < 0:
            raise BadInput(r.path, r.line, 1, f"{r.request}: {name} must be an int >= 0, got {v!r}")
    why = k_error("num_spec_tokens", m["num_spec_tokens"])
    if why is not None:  # before the histograms of length k + 1 are built
        raise BadInput(r.path, r.line, 1, f"{r.request}: {why}")
    if not _counts(m["acceptance_histogram"]):
        raise BadInput(
            r.path, r.line, 1, f"{r.request}: acceptance_histogram must be a list of ints >= 0"
        )
    for name in ("per_step_accepted", "per_step_drafted"):
        v = m.get(name)
        if v is not None and not _counts(v):
            raise BadInput(r.path, r.line, 1, f"{r.request}: {name} must be a list of ints >= 0")


def _counts(value: Any) -> bool:
    """Whether ``value`` is a list of ints >= 0 (bool is no int here), in C-level passes: the
    detailed lists of a large file hold millions of entries."""
    return isinstance(value, list) and set(map(type, value)) <= {int} and min(value, default=0) >= 0


@dataclass(frozen=True)
class StepReplay:
    """What the replay of one request's detailed steps found: ``problem`` None when the
    reference agrees with the reported counters, else what it refuses."""

    problem: str | None


# Many requests' detailed steps replayed at once, one result per request, in order (the
# reference one by one, `reference_replays`; or replay/detailed.py, the same results faster).
Replays = Callable[[Sequence[RequestMetrics]], list[StepReplay]]


# [REP-3] the per-request payload sent when the request finishes
def check_request(r: RequestMetrics, replay: StepReplay | None = None) -> list[Finding]:
    """Internal consistency of one request's metrics (`BadInput` where a field is missing or
    of the wrong type), with ``replay``: what the replay of its detailed steps found (None:
    not replayed, `replayable` is false)."""
    _validate(r)
    return _consistency(r, replay)


def _consistency(r: RequestMetrics, replay: StepReplay | None) -> list[Finding]:
    """`check_request` of a request `_validate` has passed."""
    m = r.metrics
    k = m["num_spec_tokens"]
    steps, drafted, accepted = (
        m["num_spec_steps"],
        m["num_draft_tokens"],
        m["num_accepted_draft_tokens"],
    )
    hist: list[int] = m["acceptance_histogram"]
    bad = _histogram_and_bounds(k, steps, drafted, accepted, hist)
    bad += _ratios(m, steps, drafted, accepted)
    per_acc, per_dr = m.get("per_step_accepted"), m.get("per_step_drafted")
    replayed = ""
    if per_acc is not None or per_dr is not None:
        bad.extend(_check_detailed(r, k, steps, drafted, accepted, hist, per_acc, per_dr))
        if replay is not None and replay.problem is not None:
            bad.append(("detailed replay", replay.problem))
        elif replay is not None and per_acc is not None:
            replayed = (
                f"; {len(per_acc)} detailed steps replayed through the reference's step rules"
            )
    findings = [Finding(r.path, r.line, VIOLATION, c, f"{r.request}: {msg}") for c, msg in bad]
    if not bad:
        findings.append(
            Finding(
                r.path,
                r.line,
                OK,
                "request metrics consistent",
                f"{r.request}: {steps} steps, drafted {drafted}, accepted"
                f" {accepted}, histogram {hist}{replayed}",
            )
        )
    return findings


def _histogram_and_bounds(
    k: int, steps: int, drafted: int, accepted: int, hist: list[int]
) -> list[tuple[str, str]]:
    """The acceptance histogram against the counts (k + 1 buckets, summing to the steps,
    weighting to the accepted drafts) and accepted <= drafted <= k x steps: (check, why) of
    each that fails."""
    bad: list[tuple[str, str]] = []
    if len(hist) != k + 1:
        bad.append(
            ("histogram length", f"acceptance_histogram has {len(hist)} entries, k + 1 = {k + 1}")
        )
    if sum(hist) != steps:
        bad.append(
            ("num_spec_steps == Σ histogram", f"Σ histogram {sum(hist)} != num_spec_steps {steps}")
        )
    weighted = sum(i * v for i, v in enumerate(hist))
    if weighted != accepted:
        bad.append(
            (
                "accepted == Σ i·histogram[i]",
                f"Σ i·histogram[i] = {weighted} != num_accepted_draft_tokens {accepted}",
            )
        )
    if accepted > drafted:
        bad.append(("accepted <= drafted", f"accepted {accepted} > drafted {drafted}"))
    if drafted > k * steps:
        bad.append(("drafted <= k·steps", f"drafted {drafted} > k={k} * steps {steps}"))
    return bad


def _ratios(m: dict[str, Any], steps: int, drafted: int, accepted: int) -> list[tuple[str, str]]:
    """vLLM's per-request formulas: the reference's `Ratio`s over the legacy counters, with
    the values vLLM gives an empty denominator; (field, why) of each the request misreports."""
    bad: list[tuple[str, str]] = []
    for name, ratio, formula, if_zero in (
        (
            "mean_acceptance_length",
            Ratio(accepted, steps, offset=1, if_zero=1.0),
            f"1 + {accepted}/{steps}",
            " (1.0 with no step)",
        ),
        (
            "draft_acceptance_rate",
            Ratio(accepted, drafted, if_zero=0.0),
            f"{accepted}/{drafted}",
            " (0.0 with nothing drafted)",
        ),
    ):
        expected = ratio.value()
        assert expected is not None  # if_zero is set
        reported = m[name]
        if (
            type(reported) not in (int, float)
            or not math.isfinite(reported)
            or abs(reported - expected) > FLOAT_TOL
        ):
            why = if_zero if ratio.denominator == 0 else ""
            bad.append((name, f"{reported} != {formula} = {expected:.6f}{why}"))
    return bad


def _check_detailed(
    r: RequestMetrics,
    k: int,
    steps: int,
    drafted: int,
    accepted: int,
    hist: list[int],
    per_acc: list[int] | None,
    per_dr: list[int] | None,
) -> list[tuple[str, str]]:
    bad: list[tuple[str, str]] = []
    if per_acc is None or per_dr is None:
        return [("detailed lists", "only one of per_step_accepted / per_step_drafted is present")]
    if not len(per_acc) == len(per_dr) == steps:
        bad.append(
            (
                "detailed lengths",
                f"per_step_accepted has {len(per_acc)}, per_step_drafted"
                f" {len(per_dr)} entries; num_spec_steps is {steps}",
            )
        )
    if sum(per_acc) != accepted:
        bad.append(
            ("Σ per_step_accepted", f"{sum(per_acc)} != num_accepted_draft_tokens {accepted}")
        )
    if sum(per_dr) != drafted:
        bad.append(("Σ per_step_drafted", f"{sum(per_dr)} != num_draft_tokens {drafted}"))
    rebuilt = [0] * (k + 1)
    for a in per_acc:
        if a <= k:
            rebuilt[a] += 1
    if rebuilt != hist and len(hist) == k + 1:
        bad.append(("histogram of per_step_accepted", f"{rebuilt} != acceptance_histogram {hist}"))
    return bad


def replayable(r: RequestMetrics) -> bool:
    """Whether the request's detailed steps can be replayed: both lists, of one length, and
    a drafter (k >= 1). `_validate` has passed."""
    m = r.metrics
    per_acc, per_dr = m.get("per_step_accepted"), m.get("per_step_drafted")
    return (
        m["num_spec_tokens"] >= 1
        and per_acc is not None
        and per_dr is not None
        and len(per_acc) == len(per_dr)
    )


def replay_steps(r: RequestMetrics) -> StepReplay:
    """Each detailed entry of a `replayable` request as one legacy block, through a
    reference engine of its own (so the result is the request's alone).

    A step that drafted d > 0 and accepted a is Propose(d), Verify(d), Accept(a). vLLM also
    counts async steps whose drafts were all grammar-invalid (drafted 0): one scheduled slot,
    rejected by the grammar after the forward pass (structured request, async engine).
    """
    m = r.metrics
    engine = Engine(EngineConfig(Mode.ASYNC, m["num_spec_tokens"]), check=False)
    why = _apply_entries(engine, r, 0)
    if why is not None:
        return StepReplay(why)
    c = engine.requests[r.request].counters.legacy
    want = (m["num_spec_steps"], m["num_draft_tokens"], m["num_accepted_draft_tokens"])
    got = (c.num_drafts, c.num_draft_tokens, c.num_accepted_tokens)
    if got != want:
        return StepReplay(
            f"replayed legacy counters (steps, drafted, accepted) {got} != reported {want}"
        )
    return StepReplay(None)


def first_refusal(r: RequestMetrics, first: int) -> str | None:
    """What the reference refuses first among entries ``first`` onwards of a `replayable`
    request whose earlier entries it accepts (None: nothing): its `replay_steps` message
    then, at a fraction of the cost for a late entry. Each entry's block closes (Accept)
    before the next step begins, so a fresh engine that adds the request at entry ``first``'s
    step judges the rest as the request's own engine does."""
    engine = Engine(EngineConfig(Mode.ASYNC, r.metrics["num_spec_tokens"]), check=False)
    return _apply_entries(engine, r, first)


def _apply_entries(engine: Engine, r: RequestMetrics, first: int) -> str | None:
    """Apply entries ``first`` onwards (entry j at step j + 1) to ``engine``; the refusal's
    message, or None."""
    rid = r.request
    per_acc: list[int] = r.metrics["per_step_accepted"]
    per_dr: list[int] = r.metrics["per_step_drafted"]
    step = first + 1
    try:
        engine.apply(StepBegin(step))
        engine.apply(AddRequest(rid, step, structured=True))
        for j in range(first, len(per_dr)):
            a, d = per_acc[j], per_dr[j]
            if j > first:
                step += 1
                engine.apply(StepBegin(step))
            slots = max(d, 1)
            events: list[Event] = [Propose(rid, step, slots), Verify(rid, step, slots)]
            if slots > d:
                events.append(GrammarReject(rid, step, slots - d))
            events.append(Accept(rid, step, a))
            for event in events:
                engine.apply(event)
    except IllegalEvent as exc:
        return f"detailed step {step}: the reference rejects {exc.event!r}: {exc.reason}"
    return None


def reference_replays(requests: Sequence[RequestMetrics]) -> list[StepReplay]:
    """`replay_steps` of each request: the reference, one event at a time."""
    return [replay_steps(r) for r in requests]


def check_files(
    paths: list[str], metrics: str | None = None, replays: Replays = reference_replays
) -> list[Finding]:
    """Every request of ``paths`` checked, its detailed steps replayed by ``replays``, and
    with ``metrics`` the sums reconciled with a final Prometheus scrape."""
    requests = read_requests(paths)
    for r in requests:
        _validate(r)  # k within limits.MAX_K before anything is sized by it
    detailed = [i for i, r in enumerate(requests) if replayable(r)]
    replayed = dict(zip(detailed, replays([requests[i] for i in detailed]), strict=True))
    findings: list[Finding] = []
    for i, r in enumerate(requests):
        findings.extend(_consistency(r, replayed.get(i)))  # validated above
    if metrics is not None:
        findings.extend(reconcile(requests, metrics))
    return findings


def reconcile(requests: list[RequestMetrics], metrics: str) -> list[Finding]:
    """Σ per-request metrics against the final Prometheus totals (vLLM documents equality)."""
    from .prometheus import PER_POS, SCALARS, read_scrapes, require_counters, spec_totals

    last = read_scrapes([metrics])[-1]
    k = max(r.metrics["num_spec_tokens"] for r in requests)
    require_counters(last, (*SCALARS, PER_POS) if k else SCALARS, "--metrics")
    drafts, tokens, acc, per_pos = spec_totals(last, k)
    s_steps = sum(r.metrics["num_spec_steps"] for r in requests)
    s_dr = sum(r.metrics["num_draft_tokens"] for r in requests)
    s_acc = sum(r.metrics["num_accepted_draft_tokens"] for r in requests)
    tails = [0] * k
    for r in requests:
        hist = r.metrics["acceptance_histogram"]
        for i in range(k):
            tails[i] += sum(hist[i + 1 :])
    line = (
        max(v[1] for s in last.series.values() for v in s.scalars.values())
        if any(s.scalars for s in last.series.values())
        else last.line
    )
    pairs = [
        ("Σ num_spec_steps == num_drafts", s_steps, drafts),
        ("Σ num_draft_tokens == num_draft_tokens", s_dr, tokens),
        ("Σ num_accepted_draft_tokens == num_accepted_tokens", s_acc, acc),
        ("Σ histogram tails == accepted per position", tails, per_pos),
    ]
    findings: list[Finding] = []
    for check, ours, theirs in pairs:
        if ours == theirs:
            findings.append(
                Finding(last.path, line, OK, check, f"{len(requests)} requests: {ours} == {theirs}")
            )
        else:
            findings.append(
                Finding(
                    last.path,
                    line,
                    VIOLATION,
                    check,
                    f"{len(requests)} requests sum to {ours}, the counters say {theirs} (requests"
                    " that did not finish, were aborted or ran before the dump do not report"
                    " per-request metrics; other engines' counters are included in the scrape)",
                )
            )
    return findings
