"""The common result of every importer: one `Finding` per check, with ``file:line``."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import asdict, dataclass
from typing import Any

from spectally.exit_codes import ExitCode

OK = "ok"
NOTE = "note"
VIOLATION = "violation"


@dataclass(frozen=True)
class Finding:
    """One check's verdict: ``ok``, ``note`` (explained, not an error) or ``violation``."""

    path: str
    line: int
    verdict: str
    check: str
    message: str

    def render(self) -> str:
        return f"{self.path}:{self.line}: {self.verdict.upper()} {self.check}: {self.message}"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class Totals(Finding):
    """An ``ok`` finding that also carries the counts an importer read (``totals`` in its JSON),
    so a caller compares them without parsing the message."""

    totals: dict[str, Any] | None = None


def render_findings(findings: Iterable[Finding], *, verbose: bool = True) -> str:
    """All findings (``verbose``) or only notes and violations, then a one-line tally."""
    items = list(findings)
    lines = [f.render() for f in items if verbose or f.verdict != OK]
    tally = {v: sum(1 for f in items if f.verdict == v) for v in (OK, NOTE, VIOLATION)}
    lines.append(
        f"{len(items)} checks: {tally[OK]} ok, {tally[NOTE]} notes, {tally[VIOLATION]} violations"
    )
    return "\n".join(lines)


def exit_code(findings: Iterable[Finding]) -> ExitCode:
    """OK when nothing is violated, DIVERGENCE otherwise."""
    violated = any(f.verdict == VIOLATION for f in findings)
    return ExitCode.DIVERGENCE if violated else ExitCode.OK
