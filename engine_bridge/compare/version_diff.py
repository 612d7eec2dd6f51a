"""What an engine upgrade does to the numbers a user sees: one step log, counted under every
release's counting profile.

A step log states each draft block's stage inputs (proposed, padding, grammar-valid prefix,
scheduled, verified, accepted, outcome). Those are the workload: the same requests, drafts and
samples. Each release's profile (reference/profile.py) says what its pipeline does with them:
where the grammar cuts, what vLLM subtracts from drafted. So the log, judged first under its own
release's profile (it must replay AGREE: a log the replay refutes predicts nothing), is then
counted block by block under each other profile with the reference's step rules
(`step.legacy_step`, `step.rfc_step`): vLLM's own drafted, accepted and acceptance rate per
release, beside the RFC's counters, which do not depend on the release (only ``verified`` moves
where a release verifies more, e.g. 0.34's first invalid draft).

What the prediction assumes: the target release schedules what the log's release scheduled (no
different budget cuts) and accepts the same drafts. A draft 0.34 additionally verifies is
grammar-invalid, so rejection sampling refuses it: accepted does not move.

``spectally version-diff LOG [--to 0.34.0] [--json]`` prints it (spectally.commands.version_diff).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from spectally.reference.arith import INT_ARITH
from spectally.reference.profile import (
    FIXED,
    OLDEST_COUNTS_AS,
    PROFILES,
    RELEASES,
    CountingProfile,
    GrammarKeep,
    releases_of,
)
from spectally.reference.step import Mode, StepInputs, grammar_keeps, legacy_step, rfc_step

from ..steplog.header import Header, counting_profile, profile_for
from ..steplog.limits import version_error
from ..steplog.profiles import resolve
from ..steplog.records import BadInput, Record, parse_line
from ..steplog.source import iter_lines

APPLIED = ("applied",)


@dataclass
class Column:
    """One profile's totals over the log."""

    profile: str
    num_drafts: int = 0
    drafted: int = 0
    accepted: int = 0
    rfc: dict[str, int] = field(
        default_factory=lambda: {"drafted": 0, "verified": 0, "accepted": 0, "spec_steps": 0}
    )

    def view(self) -> dict[str, Any]:
        rate = self.accepted / self.drafted if self.drafted else None
        length = 1 + self.accepted / self.num_drafts if self.num_drafts else None
        return {
            "profile": self.profile,
            "releases": releases_of(self.profile),
            "vllm": {
                "num_drafts": self.num_drafts,
                "num_draft_tokens": self.drafted,
                "num_accepted_tokens": self.accepted,
                "acceptance_rate": rate,
                "mean_acceptance_length": length,
            },
            "rfc": dict(self.rfc),
        }


def block_inputs(
    mode: Mode, structured: bool, rec: Record, own: CountingProfile
) -> StepInputs[int, bool]:
    """The stage inputs of a ``request_step`` record, read under its own release's profile
    (what translate.py's events leave: the schedule and AV caps are the cuts the record shows
    beyond what ``own``'s grammar kept)."""
    n, pad, g, s = rec["proposed"], rec["padding"], rec["grammar_valid"], rec["scheduled"]
    v, invalid, outcome = rec["verified"], rec["invalid"], rec["outcome"]
    slots = n + pad
    valid = n if g is None else g
    grammar_count = own.async_counted_keeps is not GrammarKeep.EVERYTHING
    if mode is Mode.ASYNC and g is None and invalid is not None and structured and grammar_count:
        valid = max(s - invalid, 0)
    probe = StepInputs(n, pad, structured, min(valid, n), slots, slots, 0, True, True)
    if mode is Mode.SYNC:
        kept = grammar_keeps(own.sync_grammar_keeps, probe, INT_ARITH) if structured else n
        offered = kept if structured else slots
    else:
        kept, offered = n, slots
    schedule_cap = s if s < offered else slots
    drafts = min(kept, s)
    in_forward = s > 0 or rec["sampled"] > 0 or outcome in ("applied", "discarded_stale")
    av_cap = v if v is not None and v < drafts else slots
    if not in_forward:
        av_cap = 0
    applied = outcome in APPLIED
    return StepInputs(
        proposed=n,
        padding=pad,
        structured=structured,
        grammar_valid=min(valid, n),
        schedule_cap=schedule_cap,
        av_cap=av_cap,
        accepted=rec["accepted"] if applied else 0,
        applied=applied,
        legacy_reported=applied,
    )


def log_engine(path: str) -> str:
    """The engine the log's header names (`BadInput` for a log without a readable header)."""
    for lineno, line, has_newline in iter_lines(path):
        if not line.strip():
            continue
        rec = parse_line(path, lineno, line, has_newline)
        if rec["record"] != "header":
            break
        return str(rec["engine"])
    raise BadInput(path, 1, 1, "no header record: not a step log")


def resolve_targets(path: str, versions: tuple[str, ...] | list[str]) -> list[str]:
    """The counting profiles of ``--to`` ``versions``, read as releases of the log's own
    engine (a llama.cpp log's ``--to 0.5.0`` is llama.cpp 0.5.0, never vLLM 0.5.0). `BadInput`
    (exit 2) naming the reason for a version too long to be one, or without a profile: what
    ``--to`` accepts for this engine, and ``--force-profile`` for replaying such a log."""
    if not versions:
        return []
    engine = log_engine(path)
    accepted = [prefix for e, prefix, _ in RELEASES if e == engine]
    older = OLDEST_COUNTS_AS.get(engine)
    takes = ", ".join(f"{p}.x" for p in accepted) + (
        f" (and any release before {older[0]})" if older else ""
    )
    out: list[str] = []
    for version in versions:
        why = version_error("--to", version)
        if why is None and profile_for(engine, version) is None:
            why = (
                f"--to {version!r}: no counting profile for {engine} {version} (no such"
                f" {engine} release is declared, reference/profile.py RELEASES); for this"
                f" {engine} log --to takes {takes or 'no release'}. A log of an undeclared"
                " release replays only with --force-profile PROFILE"
                f" ({', '.join(n for n, p in PROFILES.items() if p.engine == engine)})"
            )
        if why is not None:
            raise BadInput(path, 1, 1, why)
        out.append(str(profile_for(engine, version)))
    return out


def diff(
    path: str, targets: list[str] | None = None, force_profile: str | None = None
) -> dict[str, Any]:
    """The log's counts under its own profile (``force_profile``, --force-profile, when given)
    and each of ``targets`` (default: every one). Raises BadInput on a log the replay does not
    judge AGREE under its own profile."""
    from ..replay.dispatch import replay_file

    result = replay_file(path, progress=False, force_profile=force_profile)
    if result.bad_input is not None:  # unreadable or malformed: the reader's own file:line
        raise result.bad_input
    if result.status != "agree":
        first = result.divergences[0] if result.divergences else None
        why = (
            f"it diverges here: {first.reason}"
            if first is not None
            else "incomplete: it ends before its totals record"
        )
        raise BadInput(
            path,
            1 if first is None else first.line,
            1,
            f"the log does not replay AGREE under its own profile ({why}): a version diff"
            " predicts from a log the replay confirms; run spectally replay",
        )
    header: Header | None = None
    structured: dict[str, bool] = {}
    columns: dict[str, Column] = {}
    for lineno, line, has_newline in iter_lines(path):
        if not line.strip():
            continue
        rec = parse_line(path, lineno, line, has_newline)
        kind = rec["record"]
        if kind == "header":
            header = resolve(Header.from_record(rec), force_profile)
            own_name = header.profile
            assert own_name is not None  # replay_file refused it otherwise
            # Default: the releases of the log's own engine (another engine: spectally compare).
            # The releases as shipped: a profile of the counting fix only when it is the log's.
            same_engine = [
                n
                for n, p in PROFILES.items()
                if p.engine == header.engine and n not in FIXED.values()
            ]
            names = [own_name, *[t for t in (targets or same_engine) if t != own_name]]
            columns = {name: Column(name) for name in names}
        elif kind == "request" and rec["event"] == "add":
            structured[rec["request"]] = bool(rec["structured"])
        elif kind == "request_step" and header is not None:
            own = counting_profile(header.profile)
            x = block_inputs(header.mode, structured.get(rec["request"], False), rec, own)
            for name, col in columns.items():
                profile = PROFILES[name]
                lg = legacy_step(header.mode, x, INT_ARITH, profile)
                rc = rfc_step(header.mode, x, INT_ARITH, profile)
                col.num_drafts += lg.num_drafts
                col.drafted += lg.num_draft_tokens
                col.accepted += lg.num_accepted_tokens
                for key in col.rfc:
                    col.rfc[key] += getattr(rc, key)
    assert header is not None
    own_col = columns[str(header.profile)]
    return {
        "file": path,
        "engine": f"{header.engine} {header.engine_version}",
        "mode": header.mode.value,
        "k": header.k,
        "own_profile": header.profile,
        "own_profile_forced": force_profile is not None,
        "replay": result.status,
        "columns": [c.view() for c in columns.values()],
        "own_matches_replay": _own_matches(own_col, result.summary),
    }


def _own_matches(col: Column, summary: dict[str, Any]) -> bool:
    """Under its own profile the diff must give the replay's own totals (a self-check of
    `block_inputs` against the replay's translation)."""
    totals = summary["totals"]
    lg, rfc = totals["vllm-legacy"], totals["rfc"]
    return (col.num_drafts, col.drafted, col.accepted) == (
        lg["spec_steps"],
        lg["drafted"],
        lg["accepted"],
    ) and all(col.rfc[key] == rfc[key] for key in col.rfc)


def _fmt(value: float | None, digits: int = 3) -> str:
    return "n/a" if value is None else f"{value:.{digits}f}"


def render(d: dict[str, Any]) -> str:
    cols = d["columns"]
    head = f"{d['file']}: {d['engine']}, {d['mode']}, k={d['k']}; replay {d['replay'].upper()}"
    names = [
        f"{c['profile']} ({', '.join(c['releases'])})"
        + ((" own FORCED" if d.get("own_profile_forced") else " own") if i == 0 else "")
        for i, c in enumerate(cols)
    ]
    width = max(24, *(len(n) + 2 for n in names))
    engine = d["engine"].split(" ", 1)[0]  # "vllm 0.33.0", "llama.cpp 0.5.0-dev+..."
    who = "vLLM" if engine == "vllm" else engine
    lines = [head, f"  what {who} reports under each release's counting:"]
    lines.append("    " + " " * 26 + "".join(n.ljust(width) for n in names))
    rows = (
        ("num_drafts", "num_drafts", None),
        ("num_draft_tokens", "drafted", None),
        ("num_accepted_tokens", "accepted", None),
        ("acceptance_rate", "acceptance rate", 3),
        ("mean_acceptance_length", "mean acceptance length", 3),
    )
    for key, label, digits in rows:
        cells = []
        for c in cols:
            value = c["vllm"][key]
            cells.append(str(value) if digits is None else _fmt(value, digits))
        lines.append("    " + label.ljust(26) + "".join(x.ljust(width) for x in cells))
    lines.append("  the RFC's counters (the same for every release but verified):")
    for key in ("drafted", "verified", "accepted", "spec_steps"):
        cells = [str(c["rfc"][key]) for c in cols]
        lines.append("    " + key.ljust(26) + "".join(x.ljust(width) for x in cells))
    base = cols[0]["vllm"]
    for c in cols[1:]:
        v = c["vllm"]
        shift = v["num_draft_tokens"] - base["num_draft_tokens"]
        rate = (
            f"{_fmt(base['acceptance_rate'])} -> {_fmt(v['acceptance_rate'])}"
            if base["acceptance_rate"] is not None
            else "n/a"
        )
        lines.append(
            f"  upgrade to {c['profile']}: {who} drafted {shift:+d}, num_drafts"
            f" {v['num_drafts'] - base['num_drafts']:+d}, acceptance rate {rate}"
        )
    return "\n".join(lines)
