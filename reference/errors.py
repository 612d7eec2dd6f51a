"""Typed errors. An error never leaves a half-applied change behind."""

from __future__ import annotations


class SpectallyError(Exception):
    """Base class of every error spectally raises on purpose."""


class IllegalEvent(SpectallyError):
    """An event no engine could emit in the current state. The state is left unchanged.

    Carries the request, step, the request's (or block's) state and the event, so a replay can
    print exactly where and why it stopped.
    """

    def __init__(
        self, reason: str, *, event: object, request: str | None, step: int | None, state: str
    ) -> None:
        self.reason = reason
        self.event = event
        self.request = request
        self.step = step
        self.state = state
        where = f"request {request!r}" if request is not None else "engine"
        super().__init__(f"{reason} [{where}, step {step}, state {state}, event {event!r}]")


class InvariantViolation(SpectallyError):
    """A named invariant of SPEC.md failed. Raised only if the reference itself is wrong."""

    def __init__(self, name: str, detail: str) -> None:
        self.name = name
        self.detail = detail
        super().__init__(f"invariant {name} violated: {detail}")


class InadmissibleStep(SpectallyError):
    """Stage inputs that no engine can produce (e.g. accepted above what is eligible)."""

    def __init__(self, reasons: list[str]) -> None:
        self.reasons = reasons
        super().__init__("; ".join(reasons))
