"""Run the property suite and judge each property against what is expected of it."""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from .obligations import DEFAULT_BUDGET, Budget, Outcome, discharge, format_witness
from .properties import Property, all_properties
from .shapes import shape_properties


@dataclass
class PropertyResult:
    name: str
    profile: str
    mode: str
    expected: str
    verdict: str  # proved | refuted | unknown
    seconds: float
    outcomes: list[Outcome] = field(default_factory=list)
    note: str = ""

    @property
    def ok(self) -> bool:
        """Proved when expected proved; refuted, every scenario with a replayed witness,
        when expected refuted."""
        if self.verdict != self.expected:
            return False
        if self.expected == "refuted":
            return all(o.status == "fails" and _replays(o.witness) for o in self.outcomes)
        return True

    @property
    def failing(self) -> list[Outcome]:
        return [o for o in self.outcomes if o.status != "holds"]

    def witnesses(self) -> list[dict[str, Any]]:
        return [o.witness for o in self.outcomes if o.witness is not None]

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "name": self.name,
            "profile": self.profile,
            "mode": self.mode,
            "expected": self.expected,
            "verdict": self.verdict,
            "ok": self.ok,
            "seconds": round(self.seconds, 4),
            "obligations": [
                {
                    "label": o.label,
                    "status": o.status,
                    "seconds": round(o.seconds, 4),
                    "rlimit": o.rlimit,
                }
                | ({"reason": o.reason} if o.reason else {})
                for o in self.outcomes
            ],
        }
        ws = self.witnesses()
        if ws:
            out["witness"] = ws[0]
            out["witnesses"] = ws
        if self.note:
            out["note"] = self.note
        return out

    def lines(self, verbose: bool = False) -> list[str]:
        mark = "ok" if self.ok else "FAIL"
        verdict = self.verdict
        if self.verdict == "refuted":
            verdict = "refuted with witness"
        head = (
            f"{self.name:<30} {self.profile:<11} {self.mode:<5} {verdict:<21}"
            f" {self.seconds:7.3f}s  {mark}"
            + ("" if self.expected == "proved" else " (expected refuted)")
        )
        out = [head]
        if self.note:
            out.append(f"    note: {self.note}")
        show_detail = verbose or not self.ok or self.verdict == "refuted"
        if show_detail:
            for o in self.outcomes:
                if o.status == "holds" and not verbose:
                    continue
                out.append(f"  - {o.label}: {o.status}" + (f" ({o.reason})" if o.reason else ""))
                if o.witness is not None:
                    out += format_witness(o.witness)
        return out


def _replays(w: dict[str, Any] | None) -> bool:
    if w is None:
        return False
    entries = [v for v in w.values() if isinstance(v, dict) and "replay" in v]
    return bool(entries) and all(v["replay"] == "ok" for v in entries)


def run_property(p: Property, budget: Budget = DEFAULT_BUDGET) -> PropertyResult:
    start = time.perf_counter()
    note = ""
    outcomes: list[Outcome] = []
    try:
        obligations = p.obligations()
        for ob in obligations:
            outcomes.append(discharge(ob, budget))
    except Exception as exc:  # a broken reference (or mutant) must not crash the whole run
        note = f"could not build/check: {type(exc).__name__}: {exc}"
    seconds = time.perf_counter() - start
    statuses = {o.status for o in outcomes}
    if note or not outcomes:
        verdict = "unknown"
    elif statuses == {"holds"}:
        verdict = "proved"
    elif "fails" in statuses:
        verdict = "refuted"
    else:
        verdict = "unknown"
    if verdict == "refuted" and p.expected == "refuted":
        bad = [o for o in outcomes if o.witness is not None and not _replays(o.witness)]
        if bad:
            note = "a witness does not replay through the reference: " + bad[0].label
            verdict = "unknown"
    return PropertyResult(p.name, p.profile, p.mode, p.expected, verdict, seconds, outcomes, note)


def every_property() -> list[Property]:
    """The chain properties and the drafter-shape ones (proofs/shapes.py), in that order."""
    return all_properties() + shape_properties()


def run_all(
    selection: Iterable[Property] | None = None, budget: Budget = DEFAULT_BUDGET
) -> list[PropertyResult]:
    props = list(selection) if selection is not None else every_property()
    return [run_property(p, budget) for p in props]


def select(names: Iterable[str] | None) -> list[Property]:
    """Properties whose name starts with one of ``names`` (all when None or empty)."""
    props = every_property()
    wanted = [n for n in (names or []) if n]
    if not wanted:
        return props
    return [p for p in props if any(p.name.startswith(w) for w in wanted)]
