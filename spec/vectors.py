"""Conformance vectors: load ``vectors.json``, check its shape, run every vector through the
reference and report per-vector results.

Standard library only (plus the reference). The file format is described in APPENDIX.md
("Running the vectors against another implementation"); in short there are two kinds of vector:

``step``
    ``input`` holds the StepQuery fields of one (request, engine step) draft block (``null`` =
    stage off); ``expect`` holds the counters it adds under both profiles, or the admissibility
    rules (A1-A8) it breaks. An optional ``profile`` names the engine release's counting
    profile (reference/profile.py; default ``vllm-legacy``): the release whose pipeline the
    block runs through; ``expect``'s ``vllm-legacy`` object then holds that release's own
    counters (vLLM's SpecDecodingStats, whatever the release).
``trace``
    ``config`` (mode, k, drop_stale_output, optional profile) and ``events`` (the reference's
    event names and fields); ``expect`` holds engine totals, per-request counters, derived
    metrics, closed blocks, reporting surfaces, or the illegal-event rule (E1-E7) broken at
    event index ``at``.

Expected objects are compared as *subsets*: every key written in a vector is checked, keys it
omits are not. Integers compare exactly, floats within ``float_tolerance``.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeGuard

from spectally.reference import events as ev
from spectally.reference.counters import Counters
from spectally.reference.errors import (
    IllegalEvent,
    InvariantViolation,
    SpectallyError,
)
from spectally.reference.machine import Engine, EngineConfig, Outcome, step_counts
from spectally.reference.metrics import derived_metrics, legacy_metrics
from spectally.reference.profile import PROFILES, VLLM_LEGACY, CountingProfile
from spectally.reference.step import Mode, StepQuery, token_fates
from spectally.spec import conform, conform_adapter
from spectally.spec.surfaces import surfaces

VECTORS_PATH = Path(__file__).with_name("vectors.json")
FORMAT = "spectally-conformance-vectors"
VERSION = 1

FATES = (
    "accepted",
    "rejected",
    "grammar_invalid_verified",
    "grammar_invalid_unverified",
    "av_skipped",
    "truncated",
)
RULE_ID = re.compile(r"^(?:[A-Z]+-?[0-9]+|[A-Z]+(?:-[A-Z0-9]+)+|MERGE)$")
NAME = re.compile(r"^[a-z0-9]+(?:-[a-z0-9]+)*$")

# Admissibility reasons of step.admissibility -> SPEC.md rule (A1-A8).
ADMISSIBILITY_RULES: dict[str, str] = {
    "proposed must be >= 0": "A1",
    "padding must be >= 0": "A1",
    "grammar-valid prefix must be >= 0": "A2",
    "grammar-valid prefix cannot exceed the proposal (G <= N)": "A2",
    "without structured output every draft is grammar-valid (G == N)": "A3",
    "schedule cap must be >= 0": "A4",
    "AV cap must be >= 0": "A5",
    "accepted must be >= 0": "A6",
    "accepted cannot exceed the drafts eligible for acceptance": "A6",
    "an applied block is always reported by vLLM <= 0.32": "A7",
    "the block (proposed + padding) cannot exceed k": "A8",
}

# IllegalEvent reasons of machine.Engine -> SPEC.md rule (E1-E6); first match wins.
ILLEGAL_EVENT_RULES: tuple[tuple[re.Pattern[str], str], ...] = tuple(
    (re.compile(pattern), rule)
    for pattern, rule in (
        (r"at most one proposal per step|at most one draft block per step", "E3"),
        (r"^step must be|^steps must increase|has not begun", "E1"),
        (r"^request id|^unknown request|^request already|request is added", "E2"),
        (r"no open block|block can only be opened|previous block", "E3"),
        (r"cannot follow|requires .* first|without structured output", "E4"),
        (r".", "E5"),  # counts: k, cuts, verify, accept (admissibility)
    )
)

EVENT_FIELDS: dict[str, tuple[type, dict[str, type], dict[str, type]]] = {
    # name -> (class, required fields, optional fields)
    "StepBegin": (ev.StepBegin, {"step": int}, {}),
    "AddRequest": (ev.AddRequest, {"request": str, "step": int}, {"structured": bool}),
    "Propose": (ev.Propose, {"request": str, "step": int, "num_tokens": int}, {}),
    "Pad": (ev.Pad, {"request": str, "step": int, "num_slots": int}, {}),
    "GrammarReject": (ev.GrammarReject, {"request": str, "step": int, "num_tokens": int}, {}),
    "Truncate": (ev.Truncate, {"request": str, "step": int, "num_slots": int}, {}),
    "AVSkip": (ev.AVSkip, {"request": str, "step": int, "num_tokens": int}, {}),
    "Verify": (ev.Verify, {"request": str, "step": int, "num_tokens": int}, {}),
    "Accept": (ev.Accept, {"request": str, "step": int, "num_tokens": int}, {}),
    "Finish": (ev.Finish, {"request": str, "step": int}, {"reason": str}),
    "Abort": (ev.Abort, {"request": str, "step": int}, {}),
    "Preempt": (ev.Preempt, {"request": str, "step": int}, {"drop_stale_output": bool}),
}

OUTCOMES = tuple(o.value for o in Outcome)


class VectorFormatError(SpectallyError, ValueError):
    """vectors.json does not have the documented shape. The message names the JSON path."""


# -- shape validation ------------------------------------------------------------------------


def _fail(path: str, message: str) -> VectorFormatError:
    return VectorFormatError(f"{path}: {message}")


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_num(value: object) -> TypeGuard[int | float]:
    return (_is_int(value) or isinstance(value, float)) and not (
        isinstance(value, float) and math.isnan(value)
    )


def _obj(
    value: object, path: str, required: Iterable[str], optional: Iterable[str] = ()
) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise _fail(path, f"expected an object, got {type(value).__name__}")
    req, opt = set(required), set(optional)
    missing = sorted(req - value.keys())
    if missing:
        raise _fail(path, f"missing key(s) {', '.join(missing)}")
    unknown = sorted(value.keys() - req - opt)
    if unknown:
        raise _fail(path, f"unknown key(s) {', '.join(unknown)} (allowed: {sorted(req | opt)})")
    return value


# The largest draft count or k a vector's input may name: the step log's and `spectally step`'s
# limit (engine_bridge/steplog/limits.py MAX_K). The reference sizes per-draft and per-position
# lists by these counts, so an unchecked 10**12 in a vectors file runs for ever.
MAX_INPUT_COUNT = 1024


def _count(value: object, path: str, *, nullable: bool = False, bounded: bool = False) -> None:
    if value is None and nullable:
        return
    if not _is_int(value):
        raise _fail(path, f"expected an integer{' or null' if nullable else ''}, got {value!r}")
    if bounded and isinstance(value, int) and value > MAX_INPUT_COUNT:
        raise _fail(path, f"{value} exceeds the limit {MAX_INPUT_COUNT} of an input count")


def _counts(value: object, path: str, keys: Iterable[str], required: bool = True) -> None:
    keys = tuple(keys)
    obj = _obj(value, path, keys if required else (), () if required else keys)
    for key in obj:
        _count(obj[key], f"{path}.{key}")


def _vector_of_counts(value: object, path: str) -> None:
    if not isinstance(value, list):
        raise _fail(path, "expected a list of integers")
    for i, item in enumerate(value):
        _count(item, f"{path}[{i}]")


def _check_rfc(value: object, path: str) -> None:
    obj = _obj(
        value,
        path,
        ("drafted", "verified", "accepted", "spec_steps"),
        ("padding", "fates", "discarded", "per_position"),
    )
    for key in ("drafted", "verified", "accepted", "spec_steps", "padding"):
        if key in obj:
            _count(obj[key], f"{path}.{key}")
    if "fates" in obj:
        _counts(obj["fates"], f"{path}.fates", FATES)
    if "discarded" in obj:
        _counts(obj["discarded"], f"{path}.discarded", ("steps", "drafted", "verified"))
    if "per_position" in obj:
        pp = _obj(
            obj["per_position"], f"{path}.per_position", (), ("drafted", "verified", "accepted")
        )
        for key, vec in pp.items():
            _vector_of_counts(vec, f"{path}.per_position.{key}")


def _check_legacy(value: object, path: str) -> None:
    obj = _obj(value, path, ("drafted", "accepted", "spec_steps"), ("per_position",))
    for key in ("drafted", "accepted", "spec_steps"):
        _count(obj[key], f"{path}.{key}")
    if "per_position" in obj:
        pp = _obj(obj["per_position"], f"{path}.per_position", ("accepted",))
        _vector_of_counts(pp["accepted"], f"{path}.per_position.accepted")


def _check_profiles(value: object, path: str) -> None:
    obj = _obj(value, path, ("rfc", "vllm-legacy"))
    _check_rfc(obj["rfc"], f"{path}.rfc")
    _check_legacy(obj["vllm-legacy"], f"{path}.vllm-legacy")


def _check_metrics(value: object, path: str) -> None:
    obj = _obj(value, path, (), ("rfc", "vllm-legacy"))
    for profile, metrics in obj.items():
        if not isinstance(metrics, dict) or not metrics:
            raise _fail(f"{path}.{profile}", "expected a non-empty object of metric values")
        for name, val in metrics.items():
            vals = val if isinstance(val, list) else [val]
            for i, item in enumerate(vals):
                if item is not None and not _is_num(item):
                    raise _fail(
                        f"{path}.{profile}.{name}[{i}]", f"expected a number or null: {item!r}"
                    )


def _check_step(vec: dict[str, Any], path: str) -> None:
    inp = _obj(
        vec["input"],
        f"{path}.input",
        ("mode", "proposed", "padding", "grammar_valid", "scheduled", "av_verify", "accepted"),
        ("applied", "legacy_reported", "k", "profile"),
    )
    if "profile" in inp and inp["profile"] not in PROFILES:
        raise _fail(f"{path}.input.profile", f"expected one of {sorted(PROFILES)}")
    if inp["mode"] not in ("sync", "async"):
        raise _fail(f"{path}.input.mode", f"expected 'sync' or 'async', got {inp['mode']!r}")
    for key in ("proposed", "padding", "accepted"):
        _count(inp[key], f"{path}.input.{key}", bounded=True)
    for key in ("grammar_valid", "scheduled", "av_verify"):
        _count(inp[key], f"{path}.input.{key}", nullable=True, bounded=True)
    for key in ("applied", "legacy_reported"):
        if key in inp and not isinstance(inp[key], bool):
            raise _fail(f"{path}.input.{key}", "expected a boolean")
    if "k" in inp:
        _count(inp["k"], f"{path}.input.k", bounded=True)
    exp = vec["expect"]
    if isinstance(exp, dict) and "error" in exp:
        _obj(exp, f"{path}.expect", ("error",))
        err = _obj(exp["error"], f"{path}.expect.error", ("kind", "violates"))
        if err["kind"] != "inadmissible":
            raise _fail(f"{path}.expect.error.kind", "step vectors only expect 'inadmissible'")
        _rule_list(err["violates"], f"{path}.expect.error.violates")
        return
    obj = _obj(exp, f"{path}.expect", ("rfc", "vllm-legacy"), ("token_fates",))
    _check_profiles({"rfc": obj["rfc"], "vllm-legacy": obj["vllm-legacy"]}, f"{path}.expect")
    rfc = obj["rfc"]
    for key in ("padding", "fates"):
        if key not in rfc:
            raise _fail(f"{path}.expect.rfc", f"step vectors must state {key}")
    if "token_fates" in obj:
        tf = obj["token_fates"]
        if not isinstance(tf, list) or any(f not in FATES for f in tf):
            raise _fail(f"{path}.expect.token_fates", f"expected a list of fates from {FATES}")


def _check_event(value: object, path: str) -> None:
    if not isinstance(value, dict) or "event" not in value:
        raise _fail(path, "expected an object with an 'event' name")
    name = value["event"]
    if name not in EVENT_FIELDS:
        raise _fail(f"{path}.event", f"unknown event {name!r} (known: {sorted(EVENT_FIELDS)})")
    _, required, optional = EVENT_FIELDS[name]
    _obj(value, path, ("event", *required), (*optional, "engine"))
    for key, typ in {**required, **optional}.items():
        if key in value and not (
            isinstance(value[key], typ) and (typ is bool or not isinstance(value[key], bool))
        ):
            raise _fail(f"{path}.{key}", f"expected {typ.__name__}, got {value[key]!r}")
    if "engine" in value and not isinstance(value["engine"], str):
        raise _fail(f"{path}.engine", "expected a string engine label")


def _check_trace(vec: dict[str, Any], path: str) -> None:
    cfg = _obj(vec["config"], f"{path}.config", ("mode", "k", "drop_stale_output"), ("profile",))
    if "profile" in cfg and cfg["profile"] not in PROFILES:
        raise _fail(f"{path}.config.profile", f"expected one of {sorted(PROFILES)}")
    if cfg["mode"] not in ("sync", "async"):
        raise _fail(f"{path}.config.mode", f"expected 'sync' or 'async', got {cfg['mode']!r}")
    _count(cfg["k"], f"{path}.config.k", bounded=True)
    if not isinstance(cfg["drop_stale_output"], bool):
        raise _fail(f"{path}.config.drop_stale_output", "expected a boolean")
    events = vec["events"]
    if not isinstance(events, list) or not events:
        raise _fail(f"{path}.events", "expected a non-empty list of events")
    for i, item in enumerate(events):
        _check_event(item, f"{path}.events[{i}]")
    exp = _obj(
        vec["expect"],
        f"{path}.expect",
        (),
        ("totals", "requests", "engines", "metrics", "closed", "surfaces", "error"),
    )
    if not exp.keys() - {"error"} and "error" not in exp:
        raise _fail(f"{path}.expect", "expects nothing")
    if "error" not in exp and "totals" not in exp:
        raise _fail(f"{path}.expect", "a trace that runs to the end must state its totals")
    if "totals" in exp:
        _check_profiles(exp["totals"], f"{path}.expect.totals")
    for group in ("requests", "engines"):
        if group in exp:
            grp = exp[group]
            if not isinstance(grp, dict) or not grp:
                raise _fail(f"{path}.expect.{group}", "expected a non-empty object")
            for key, val in grp.items():
                _check_profiles(val, f"{path}.expect.{group}.{key}")
    if "metrics" in exp:
        _check_metrics(exp["metrics"], f"{path}.expect.metrics")
    if "closed" in exp:
        closed = exp["closed"]
        if not isinstance(closed, list):
            raise _fail(f"{path}.expect.closed", "expected a list")
        for i, item in enumerate(closed):
            c = _obj(item, f"{path}.expect.closed[{i}]", ("request", "step", "outcome"))
            if c["outcome"] not in OUTCOMES:
                raise _fail(f"{path}.expect.closed[{i}].outcome", f"expected one of {OUTCOMES}")
    if "surfaces" in exp:
        s = _obj(
            exp["surfaces"],
            f"{path}.expect.surfaces",
            (),
            ("log_interval_s", "prometheus", "log_line", "request_payload"),
        )
        if "log_line" in s and not _is_num(s.get("log_interval_s")):
            raise _fail(f"{path}.expect.surfaces", "log_line needs log_interval_s")
    if "error" in exp:
        err = _obj(exp["error"], f"{path}.expect.error", ("at", "violates"))
        _count(err["at"], f"{path}.expect.error.at")
        if err["at"] != len(events) - 1:
            raise _fail(f"{path}.expect.error.at", "the illegal event must be the last event")
        _rule_list([err["violates"]], f"{path}.expect.error.violates")


def _rule_list(value: object, path: str) -> None:
    if not isinstance(value, list) or not value:
        raise _fail(path, "expected a non-empty list of rule IDs")
    for i, rule in enumerate(value):
        if not isinstance(rule, str) or not RULE_ID.match(rule):
            raise _fail(f"{path}[{i}]", f"not a rule ID: {rule!r}")


def validate(doc: object) -> dict[str, Any]:
    """Check the whole document's shape; raise `VectorFormatError` naming the first bad path."""
    top = _obj(doc, "$", ("format", "version", "float_tolerance", "vectors"), ("description",))
    if top["format"] != FORMAT:
        raise _fail("$.format", f"expected {FORMAT!r}")
    if top["version"] != VERSION:
        raise _fail("$.version", f"unsupported version {top['version']!r} (this reader: {VERSION})")
    if not _is_num(top["float_tolerance"]) or top["float_tolerance"] < 0:
        raise _fail("$.float_tolerance", "expected a number >= 0")
    vectors = top["vectors"]
    if not isinstance(vectors, list) or not vectors:
        raise _fail("$.vectors", "expected a non-empty list")
    seen: set[str] = set()
    for i, vec in enumerate(vectors):
        path = f"$.vectors[{i}]"
        if not isinstance(vec, dict) or vec.get("kind") not in KINDS:
            raise _fail(f"{path}.kind", "expected kind 'step' or 'trace'")
        _obj(vec, path, ("name", "kind", "title", "rule", *KINDS[vec["kind"]], "expect"), ("note",))
        name = vec["name"]
        if not isinstance(name, str) or not NAME.match(name):
            raise _fail(f"{path}.name", f"expected a kebab-case name, got {name!r}")
        if name in seen:
            raise _fail(f"{path}.name", f"duplicate vector name {name!r}")
        seen.add(name)
        path = f"$.vectors[{i}] ({name})"
        if not isinstance(vec["title"], str) or not vec["title"].strip():
            raise _fail(f"{path}.title", "expected a non-empty string")
        _rule_list(vec["rule"], f"{path}.rule")
        CHECKS[vec["kind"]](vec, path)
    return top


def load(path: Path | str | None = None) -> dict[str, Any]:
    """Read and validate a vectors file (default: the one shipped next to this module)."""
    p = Path(path) if path is not None else VECTORS_PATH
    try:
        doc = json.loads(p.read_text(encoding="utf-8"))
    except (ValueError, RecursionError) as exc:  # bad UTF-8 or JSON, an int past the limit
        why = "nested too deeply" if isinstance(exc, RecursionError) else exc
        raise VectorFormatError(f"{p}: not valid JSON: {why}") from exc
    return validate(doc)


# -- running ---------------------------------------------------------------------------------


@dataclass
class VectorResult:
    """The outcome of one vector: ``mismatches`` is empty when the reference agrees."""

    name: str
    kind: str
    rules: list[str]
    title: str
    mismatches: list[str] = field(default_factory=list)
    actual: dict[str, Any] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return not self.mismatches

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "kind": self.kind,
            "ok": self.ok,
            "rules": self.rules,
            "mismatches": self.mismatches,
        }


def compare(expected: object, actual: object, path: str, tol: float, out: list[str]) -> None:
    """Append a line to ``out`` for every place where ``actual`` differs from the subset
    ``expected``."""
    if isinstance(expected, dict):
        if not isinstance(actual, dict):
            out.append(f"{path}: expected an object, got {actual!r}")
            return
        for key, val in expected.items():
            if key not in actual:
                out.append(f"{path}.{key}: not produced by the reference")
            else:
                compare(val, actual[key], f"{path}.{key}", tol, out)
        return
    if isinstance(expected, list):
        if not isinstance(actual, (list, tuple)) or len(actual) != len(expected):
            out.append(f"{path}: expected {expected!r}, got {actual!r}")
            return
        for i, (e, a) in enumerate(zip(expected, actual, strict=True)):
            compare(e, a, f"{path}[{i}]", tol, out)
        return
    if isinstance(expected, float) or isinstance(actual, float):
        if expected is None or actual is None or not _is_num(expected) or not _is_num(actual):
            if expected != actual:
                out.append(f"{path}: expected {expected!r}, got {actual!r}")
        elif abs(float(expected) - float(actual)) > tol:
            out.append(f"{path}: expected {expected!r}, got {actual!r}")
        return
    if expected != actual or type(expected) is not type(actual):
        out.append(f"{path}: expected {expected!r}, got {actual!r}")


def step_query(inp: dict[str, Any]) -> tuple[StepQuery, int | None]:
    """The StepQuery (and optional k) a step vector's input stands for."""
    query = StepQuery(
        mode=Mode(inp["mode"]),
        proposed=inp["proposed"],
        accepted=inp["accepted"],
        grammar_valid=inp["grammar_valid"],
        scheduled=inp["scheduled"],
        av_verify=inp["av_verify"],
        padding=inp["padding"],
        applied=inp.get("applied", True),
        legacy_reported=inp.get("legacy_reported"),
    )
    return query, inp.get("k")


def vector_profile(obj: dict[str, Any]) -> CountingProfile:
    """The counting profile a vector's input or config names (default vllm-legacy)."""
    name = obj.get("profile")
    return VLLM_LEGACY if name is None else PROFILES[name]


def admissibility_rules(reasons: Iterable[str]) -> list[str]:
    """SPEC.md A-rules for the reference's admissibility reasons, sorted, without repeats."""
    rules = set()
    for reason in reasons:
        if reason not in ADMISSIBILITY_RULES:
            raise KeyError(f"admissibility reason not mapped to an A-rule: {reason!r}")
        rules.add(ADMISSIBILITY_RULES[reason])
    return sorted(rules)


def illegal_event_rule(reason: str) -> str:
    """The SPEC.md E-rule an `IllegalEvent` reason breaks."""
    for pattern, rule in ILLEGAL_EVENT_RULES:
        if pattern.search(reason):
            return rule
    raise AssertionError("unreachable: the last pattern matches everything")  # pragma: no cover


def run_step(vec: dict[str, Any], tol: float) -> VectorResult:
    result = VectorResult(vec["name"], "step", list(vec["rule"]), vec["title"])
    query, k = step_query(vec["input"])
    reasons = query.violations(k)
    actual: dict[str, Any]
    if reasons:
        actual = {"error": {"kind": "inadmissible", "violates": admissibility_rules(reasons)}}
    else:
        inputs = query.inputs()
        profile = vector_profile(vec["input"])
        actual = {
            **step_counts(query.mode, inputs, profile),
            "token_fates": token_fates(query.mode, inputs, profile),
        }
    result.actual = actual
    expected = vec["expect"]
    if "error" in expected:
        exp_err = {"kind": "inadmissible", "violates": sorted(expected["error"]["violates"])}
        compare(exp_err, actual.get("error"), "error", tol, result.mismatches)
    elif "error" in actual:
        result.mismatches.append(f"inadmissible: {'; '.join(reasons)}")
    else:
        compare(expected, actual, "", tol, result.mismatches)
    return result


def decode_event(obj: dict[str, Any]) -> ev.Event:
    """A vector's event object as a reference event (the ``engine`` label is not part of it)."""
    cls = EVENT_FIELDS[obj["event"]][0]
    fields_ = {k: v for k, v in obj.items() if k not in ("event", "engine")}
    event: ev.Event = cls(**fields_)
    return event


def counters_view(c: Counters) -> dict[str, Any]:
    return c.to_dict()


def run_trace(vec: dict[str, Any], tol: float) -> VectorResult:
    result = VectorResult(vec["name"], "trace", list(vec["rule"]), vec["title"])
    cfg = vec["config"]
    config = EngineConfig(
        Mode(cfg["mode"]), cfg["k"], cfg["drop_stale_output"], vector_profile(cfg)
    )
    engines: dict[str, Engine] = {}
    closed: list[dict[str, Any]] = []
    actual: dict[str, Any] = {}
    for i, obj in enumerate(vec["events"]):
        label = obj.get("engine", "0")
        engine = engines.setdefault(label, Engine(config))
        before = engine.totals
        try:
            for c in engine.apply(decode_event(obj)):
                closed.append({"request": c.request, "step": c.step, "outcome": c.outcome.value})
        except IllegalEvent as exc:
            actual["error"] = {
                "at": i,
                "violates": illegal_event_rule(exc.reason),
                "reason": exc.reason,
            }
            if engine.totals != before:  # E7: an illegal event changes nothing
                result.mismatches.append(f"E7: event {i} was illegal but changed the totals")
            break
        except InvariantViolation as exc:
            result.mismatches.append(f"reference broke {exc.name} at event {i}: {exc.detail}")
            break
    totals = Counters.zero(config.k)
    requests: dict[str, Counters] = {}
    for label, engine in engines.items():
        totals = totals.merge(engine.totals)
        parts = [state.counters for state in engine.requests.values()]
        summed = Counters.zero(config.k)
        for part in parts:
            summed = summed.merge(part)
        if summed != engine.totals:
            result.mismatches.append(f"INV-10: engine {label} totals != sum of its requests")
        for rid, state in engine.requests.items():
            key = rid if len(engines) == 1 else f"{label}/{rid}"
            requests[key] = state.counters
    actual["totals"] = counters_view(totals)
    actual["requests"] = {rid: counters_view(c) for rid, c in requests.items()}
    actual["engines"] = {label: counters_view(e.totals) for label, e in engines.items()}
    actual["metrics"] = {"rfc": derived_metrics(totals), "vllm-legacy": legacy_metrics(totals)}
    actual["closed"] = closed
    expected = vec["expect"]
    surf = expected.get("surfaces")
    if surf is not None:
        actual["surfaces"] = surfaces(engines, requests, surf.get("log_interval_s", 10.0), config.k)
        actual["surfaces"]["log_interval_s"] = surf.get("log_interval_s")
    result.actual = actual
    exp = dict(expected)
    if "error" in exp:
        compare(exp.pop("error"), actual.get("error"), "error", tol, result.mismatches)
    elif "error" in actual:
        err = actual["error"]
        result.mismatches.append(f"illegal event {err['at']} ({err['violates']}): {err['reason']}")
    compare(exp, actual, "", tol, result.mismatches)
    return result


def run_vector(vec: dict[str, Any], tol: float = 1e-9) -> VectorResult:
    """Run one (validated) vector through the reference."""
    return RUNS[vec["kind"]](vec, tol)


def run_all(doc: dict[str, Any] | None = None) -> list[VectorResult]:
    """Run every vector of ``doc`` (default: the shipped vectors.json)."""
    doc = load() if doc is None else validate(doc)
    tol = float(doc["float_tolerance"])
    return [run_vector(vec, tol) for vec in doc["vectors"]]


def rules_pinned(doc: dict[str, Any]) -> dict[str, list[str]]:
    """Rule ID -> names of the vectors that pin it."""
    out: dict[str, list[str]] = {}
    for vec in doc["vectors"]:
        for rule in vec["rule"]:
            out.setdefault(rule, []).append(vec["name"])
    return out


# -- the core vectors (spec/conformance/vectors.json) ------------------------------------------
# The engine-neutral vectors of CORE.md (trees, per-step draft length, fillers, n > 1, fates
# among them) are written once, in the conformance kit; `spectally vectors` runs them here
# through the reference's protocol adapter and judges the answers with the kit's own judge.


def run_core(vec: dict[str, Any], tol: float) -> VectorResult:
    """One core vector through the Python reference (``conform_adapter``), judged by the kit."""
    result = VectorResult(vec["name"], "core", list(vec["rules"]), vec["title"])
    request = {"protocol": conform.PROTOCOL, "id": vec["name"], "level": vec["level"]}
    response = conform_adapter.answer({**request, "input": vec["input"]})
    result.actual = response
    for check in conform.judge(vec, response, tol):
        if check.status != "pass":
            found = "missing" if check.found is None else repr(check.found)
            result.mismatches.append(f"{check.path}: expected {check.expected!r}, got {found}")
    return result


def load_core() -> dict[str, Any]:
    """The kit's core vectors, each marked kind "core" for `run_vector`."""
    doc = conform.load_vectors()
    return {**doc, "vectors": [{**v, "kind": "core"} for v in doc["vectors"]]}


def load_defaults() -> list[dict[str, Any]]:
    """Every shipped vectors file: the step and trace vectors, then the core vectors."""
    return [load(), load_core()]


KINDS: dict[str, tuple[str, ...]] = {
    "step": ("input",),
    "trace": ("config", "events"),
}
CHECKS = {"step": _check_step, "trace": _check_trace}
RUNS = {"step": run_step, "trace": run_trace, "core": run_core}
