"""Two replayed step logs side by side: are their acceptance figures comparable as reported?

Each log is replayed (its own profile counts what its engine reported, and the RFC profile
counts the same blocks under the RFC's definitions). The engines' figures are comparable as
reported when both logs count by the same profile, or when each engine's reported counters
already equal the RFC's on these logs. Otherwise each difference is named: the shift of each
log (what its engine leaves out of or adds to the RFC's counts, `report.explain_shift`) and the
counting declarations that differ (engine_bridge/engines.py), with whether these logs
exercise them.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

from spectally.engine_bridge.engines import DECLARATIONS, CountingDeclaration
from spectally.engine_bridge.replay.dispatch import ReplayResult

REPORTED = ("drafted", "accepted", "spec_steps")
# Declaration fields that change what a reported figure means, in words.
FIELD_WORDS = {
    "grammar_cut": "where the grammar cuts drafts",
    "grammar_forbidden_drafted": "grammar-forbidden drafts counted as drafted",
    "drafted_includes_padding": "placeholder slots counted as drafted",
    "drafted_includes_truncated": "schedule-cut drafts counted as drafted",
    "verified_equals_drafted": "every counted draft is verified",
    "accepted_includes_bonus": "the bonus token counted as accepted",
    "accepted_past_stop": "drafts accepted past a stop string counted",
    "step_counts": "when a step (num_drafts) counts",
    "per_position": "per-position accepted counter",
    "reported_when": "when the exported counters move",
}


@dataclass(frozen=True)
class Side:
    label: str
    path: str
    engine: str
    profile: str
    reported: dict[str, int]
    rfc: dict[str, Any]
    shift: dict[str, Any]
    declaration: CountingDeclaration | None
    forced: bool = False  # the profile was given with --force-profile, not read from the header

    @classmethod
    def of(cls, label: str, result: ReplayResult) -> Side:
        s = result.summary
        legacy, rfc = s["totals"]["vllm-legacy"], s["totals"]["rfc"]
        return cls(
            label,
            result.path,
            s["engine"],
            s["profile"],
            {name: legacy[name] for name in REPORTED},
            rfc,
            s["shift"],
            DECLARATIONS.get(s["profile"]),
            s.get("profile_forced") is not None,
        )

    @property
    def reported_is_rfc(self) -> bool:
        return all(self.reported[n] == self.rfc[n] for n in REPORTED)

    def exercised(self, name: str) -> int | None:
        """How many tokens or steps of this log a declaration field touches (None: the log
        cannot tell)."""
        terms = self.shift["terms"]
        fates = self.rfc["fates"]
        if name in ("grammar_cut", "grammar_forbidden_drafted"):
            grammar = int(fates["grammar_invalid_verified"] + fates["grammar_invalid_unverified"])
            if grammar == 0 and self.declaration and self.declaration.grammar_cut == "never":
                return None  # forbidden drafts are among the rejected: not told apart
            return grammar
        if name == "drafted_includes_padding":
            return int(terms["padding"])
        if name == "drafted_includes_truncated":
            return int(terms["truncated"])
        if name == "verified_equals_drafted":
            return int(self.rfc["drafted"] - self.rfc["verified"])
        if name == "step_counts":
            return int(terms["steps_without_slots"] + terms["padding_only_steps"])
        return None


def _rate(num: int, den: int, offset: int = 0) -> str:
    return "n/a" if den == 0 else f"{offset + num / den:.4f}"


def table(a: Side, b: Side) -> list[tuple[str, str, str]]:
    """(row, A, B): the reported figures, then the RFC's."""

    def both(f: Any) -> tuple[str, str]:
        return str(f(a)), str(f(b))

    rows: list[tuple[str, str, str]] = [
        ("engine", a.engine, b.engine),
        ("profile", *both(lambda s: s.profile + (" FORCED" if s.forced else ""))),
        ("as reported: drafted", *both(lambda s: s.reported["drafted"])),
        ("as reported: accepted", *both(lambda s: s.reported["accepted"])),
        ("as reported: num_drafts (steps)", *both(lambda s: s.reported["spec_steps"])),
        (
            "as reported: acceptance rate",
            *both(lambda s: _rate(s.reported["accepted"], s.reported["drafted"])),
        ),
        (
            "as reported: mean acceptance length",
            *both(lambda s: _rate(s.reported["accepted"], s.reported["spec_steps"], 1)),
        ),
    ]
    for name in ("drafted", "verified", "accepted", "spec_steps", "padding"):
        rows.append((f"RFC: {name}", *both(lambda s, n=name: s.rfc[n])))
    rows += [
        (
            "RFC: acceptance rate (accepted/drafted)",
            *both(lambda s: _rate(s.rfc["accepted"], s.rfc["drafted"])),
        ),
        (
            "RFC: draft quality (accepted/verified)",
            *both(lambda s: _rate(s.rfc["accepted"], s.rfc["verified"])),
        ),
        (
            "RFC: mean acceptance length",
            *both(lambda s: _rate(s.rfc["accepted"], s.rfc["spec_steps"], 1)),
        ),
    ]
    for fate in (
        "rejected",
        "grammar_invalid_verified",
        "grammar_invalid_unverified",
        "av_skipped",
        "truncated",
    ):
        rows.append((f"RFC fate: {fate}", *both(lambda s, f=fate: s.rfc["fates"][f])))
    return rows


def differences(a: Side, b: Side) -> list[str]:
    """Each difference between the two logs' counting, in words, with its size here."""
    out: list[str] = []
    for side in (a, b):
        if not side.reported_is_rfc:
            sh = side.shift
            out.append(
                f"{side.label} ({side.engine}) reports figures that are not the RFC's on this log:"
                f" drafted {sh['drafted']['vllm-legacy']} vs {sh['drafted']['rfc']}"
                f" ({sh['drafted']['why']}); steps {sh['spec_steps']['vllm-legacy']} vs"
                f" {sh['spec_steps']['rfc']} ({sh['spec_steps']['why']}); accepted"
                f" {sh['accepted']['vllm-legacy']} vs {sh['accepted']['rfc']}"
                f" ({sh['accepted']['why']})"
            )
    da, db = a.declaration, b.declaration
    if da is None or db is None:
        for side, d in ((a, da), (b, db)):
            if d is None:
                out.append(f"{side.label}: no counting declaration for profile {side.profile}")
        return out
    for f in fields(CountingDeclaration):
        name = f.name
        if name not in FIELD_WORDS:
            continue
        va, vb = getattr(da, name), getattr(db, name)
        if va == vb:
            continue
        ea, eb = a.exercised(name), b.exercised(name)
        sa, sb = ("not told apart" if e is None else str(e) for e in (ea, eb))
        out.append(
            f"{FIELD_WORDS[name]}: {a.label} {da.profile} = {va}{_alike(da, name)},"
            f" {b.label} {db.profile} = {vb}{_alike(db, name)}; tokens or steps it touches in"
            f" these logs: {a.label} {sa}, {b.label} {sb}\n"
            f"      {a.label}: {da.why.get(name, '')}\n      {b.label}: {db.why.get(name, '')}"
        )
    return out


def _alike(d: CountingDeclaration, name: str) -> str:
    """ " (as vllm-0.34 does)": the other declared profiles that count this way too."""
    same = [
        o.profile
        for o in DECLARATIONS.values()
        if o is not d and getattr(o, name) == getattr(d, name)
    ]
    return f" (as {', '.join(same)} too)" if same else ""


def rfc_notes(a: Side, b: Side) -> list[str]:
    """Which RFC figures of the two logs compare, and which depend on where drafts are cut."""
    notes = [
        "in the RFC's terms both logs count every proposed draft as drafted and accepted without"
        " the bonus token: acceptance rate (accepted/drafted) and mean acceptance length compare:"
        f" {a.label} {_rate(a.rfc['accepted'], a.rfc['drafted'])} /"
        f" {_rate(a.rfc['accepted'], a.rfc['spec_steps'], 1)},"
        f" {b.label} {_rate(b.rfc['accepted'], b.rfc['drafted'])} /"
        f" {_rate(b.rfc['accepted'], b.rfc['spec_steps'], 1)}"
    ]
    unverified = {s.label: int(s.rfc["drafted"] - s.rfc["verified"]) for s in (a, b)}
    if any(unverified.values()):
        notes.append(
            "draft quality (accepted/verified) does not compare: drafts cut before the forward"
            " pass are not verified in one log and are verified (and rejected) in the other"
            f" (drafted but not verified: {a.label} {unverified[a.label]},"
            f" {b.label} {unverified[b.label]})"
        )
    return notes


def verdict(a: Side, b: Side) -> tuple[bool, str]:
    """(comparable as reported, why)."""
    if a.profile == b.profile:
        return True, f"both count by the {a.profile} profile"
    if a.reported_is_rfc and b.reported_is_rfc:
        return True, (
            "each engine's reported drafted, accepted and steps equal the RFC's on these logs"
            " (the declarations below differ, but these logs do not exercise a difference in"
            " the counts; check the notes on meaning)"
        )
    off = [s.label for s in (a, b) if not s.reported_is_rfc]
    return False, (
        f"{' and '.join(off)}'s reported figures differ from the RFC's on these logs; compare the"
        " RFC rows, not the reported ones"
    )


def render(a: Side, b: Side) -> str:
    rows = table(a, b)
    w0 = max(len(r[0]) for r in rows)
    w1 = max(len(r[1]) for r in rows)
    out = [f"A: {a.path}", f"B: {b.path}", ""]
    out.append(f"{''.ljust(w0)}  {'A'.ljust(w1)}  B")
    out += [f"{r[0].ljust(w0)}  {r[1].ljust(w1)}  {r[2]}" for r in rows]
    ok, why = verdict(a, b)
    out += ["", f"comparable as reported: {'YES' if ok else 'NO'}: {why}"]
    out += [f"  - {n}" for n in rfc_notes(a, b)]
    diffs = differences(a, b)
    if diffs:
        out.append("differences:")
        out += [f"  - {d}" for d in diffs]
    return "\n".join(out)


def as_json(a: Side, b: Side) -> dict[str, Any]:
    ok, why = verdict(a, b)
    return {
        "comparable_as_reported": ok,
        "why": why,
        "table": [{"row": r, "A": x, "B": y} for r, x, y in table(a, b)],
        "rfc_notes": rfc_notes(a, b),
        "differences": differences(a, b),
    }
