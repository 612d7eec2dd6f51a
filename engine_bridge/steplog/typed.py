"""The step-log records as typed structs (msgspec): what the columnar judge decodes lines into.

The structs' tags, fields and outcome names are those of `schema` (a test checks each struct's
fields against `schema`'s field tuples and spec/step_log.schema.json). They validate while they
decode: exact field names, ``int`` counts within the input limits, non-empty request ids, the
reference's outcome names, the four request events.

A module of its own because msgspec is a compiled dependency the reference replay of a small
log never imports (tests/cli/test_startup.py): `schema` stays plain Python.

`LineKind` names the small integers the columnar judge stores per line (an ``int8`` column).
"""

from __future__ import annotations

import enum
from typing import TYPE_CHECKING, Annotated, Any, Literal

import msgspec

from .limits import MAX_INT
from .schema import OUTCOMES

__all__ = [
    "KIND",
    "Count",
    "HeaderLine",
    "LineKind",
    "Outcome",
    "Request",
    "RequestId",
    "RequestStep",
    "StepStats",
    "TotalsLine",
]

Count = Annotated[int, msgspec.Meta(ge=0, le=MAX_INT)]
RequestId = Annotated[str, msgspec.Meta(min_length=1)]
if TYPE_CHECKING:
    Outcome = str
else:  # the reference's outcome names, as the Literal msgspec validates against
    Outcome = Literal[OUTCOMES]

_STRUCT: dict[str, Any] = {"forbid_unknown_fields": True, "tag_field": "record", "gc": False}


class RequestStep(msgspec.Struct, tag="request_step", **_STRUCT):
    step: Count
    request: RequestId
    outcome: Outcome
    proposed: Count
    padding: Count
    grammar_valid: Count | None
    scheduled: Count
    invalid: Count | None
    verified: Count | None
    accepted: Count
    sampled: Count
    delivered: Count | msgspec.UnsetType | None = msgspec.UNSET


class Request(msgspec.Struct, tag="request", **_STRUCT):
    step: Count
    request: RequestId
    event: Literal["add", "finish", "abort", "preempt"]
    structured: bool | msgspec.UnsetType = msgspec.UNSET
    reason: str | msgspec.UnsetType = msgspec.UNSET
    drop_stale_output: bool | msgspec.UnsetType = msgspec.UNSET


class StepStats(msgspec.Struct, tag="step_stats", **_STRUCT):
    step: Count
    num_drafts: Count
    num_draft_tokens: Count
    num_accepted_tokens: Count
    num_accepted_tokens_per_pos: list[Count]


class HeaderLine(msgspec.Struct, tag="header", tag_field="record", gc=False):
    """A header: decoded again by `records.parse_line` (once per log)."""


class TotalsLine(msgspec.Struct, tag="totals", tag_field="record", gc=False):
    """A totals record: decoded again by `records.parse_line` (once per log)."""


class LineKind(enum.IntEnum):
    """A decoded line's kind, as the columnar judge stores it (one ``int8`` per line)."""

    REQUEST_STEP = 0
    REQUEST = 1
    STEP_STATS = 2
    HEADER = 3
    TOTALS = 4
    OTHER = 5  # not decoded (the line goes to `records.parse_line`)


# Plain ints, not the members: the judge turns one per line into an int8 array, and numpy
# converts an IntEnum member about twice as slowly as an int.
KIND: dict[type, int] = {
    RequestStep: int(LineKind.REQUEST_STEP),
    Request: int(LineKind.REQUEST),
    StepStats: int(LineKind.STEP_STATS),
    HeaderLine: int(LineKind.HEADER),
    TotalsLine: int(LineKind.TOTALS),
}
