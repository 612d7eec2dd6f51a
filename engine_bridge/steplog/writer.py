"""Step-log output for the recorder: whole-line writer, blocks, and the step-order buffer.

No vLLM import here, so the ordering rules can be tested on any machine
(tests/vllm/test_recorder.py).

Why a buffer: records are *stamped* with the engine step they belong to, but they are *observed*
in engine order, which is not step order. Sync: once step s's output is processed the recorder
already knows records of step s+1 (the ``discarded_finished`` proposal of a request that just
finished, the ``add`` of a new arrival), while an abort that arrives before the next ``schedule()``
still belongs to step s. Async: the output of step s is processed after step s+1 was scheduled.
`StepOrderBuffer` therefore holds every record until no record with a smaller step can arrive
any more (the *floor*, given by the recorder) and writes in (step, arrival) order.
"""

from __future__ import annotations

import heapq
import itertools
import json
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from . import schema
from .schema import Record as Record


class StepLogWriter:
    """Whole-line NDJSON appender: one ``os.write`` per record on an ``O_APPEND`` fd (a kill can
    lose buffered records but never leaves a torn line)."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._fd: int | None = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)

    def write(self, record: Record) -> None:
        if self._fd is None:
            return
        data = (json.dumps(record, separators=(",", ":")) + "\n").encode()
        written = os.write(self._fd, data)
        if written != len(data):  # regular files do not short-write; fail loudly if one does
            raise OSError(f"short write to {self.path}: {written} of {len(data)} bytes")

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


class StepOrderBuffer:
    """Holds records until their step is closed, then hands them to ``sink`` in step order.

    ``release(floor)`` writes every held record whose step is below ``floor`` (the smallest
    step any record still to come can carry), ordered by (step, arrival); records of one step
    keep their arrival order. ``drain()`` writes everything (shutdown). A record stamped below
    a step already written would break the log's order: it is written anyway (no lost data)
    and counted in ``late`` so the caller can report it.
    """

    def __init__(self, sink: Callable[[Record], None]) -> None:
        self._sink = sink
        self._heap: list[tuple[int, int, Record]] = []
        self._seq = itertools.count()
        self.written_step = -1  # highest step written so far
        self.late = 0

    def __len__(self) -> int:
        return len(self._heap)

    def push(self, step: int, record: Record) -> None:
        if step < self.written_step:
            self.late += 1
        heapq.heappush(self._heap, (step, next(self._seq), record))

    def release(self, floor: int | None) -> None:
        while self._heap and (floor is None or self._heap[0][0] < floor):
            step, _, record = heapq.heappop(self._heap)
            self.written_step = max(self.written_step, step)
            self._sink(record)

    def drain(self) -> None:
        self.release(None)


@dataclass
class Block:
    """One (step, request) draft block; becomes a ``request_step`` record."""

    request: str
    proposed: int
    padding: int = 0
    grammar_valid: int | None = None
    step: int = -1
    scheduled: int = 0
    invalid: int | None = None
    verified: int | None = None
    sampled: int = 0
    accepted: int = 0
    outcome: str = schema.APPLIED
    # Output tokens the engine appended to the request from this block's result (observed:
    # output length after minus before update_from_output). None = not observed.
    delivered: int | None = None

    def record(self) -> Record:
        return schema.request_step(
            step=self.step,
            request=self.request,
            proposed=self.proposed,
            padding=self.padding,
            grammar_valid=self.grammar_valid,
            scheduled=self.scheduled,
            invalid=self.invalid,
            verified=self.verified,
            sampled=self.sampled,
            accepted=self.accepted,
            outcome=self.outcome,
            delivered=self.delivered,
        )

    def empty(self) -> bool:
        return self.proposed == 0 and self.padding == 0 and self.scheduled == 0


def count_proposal(drafts: list[int], placeholders_are_drafts: bool) -> tuple[int, int]:
    """(proposed, padding) of a raw draft list; ``-1`` entries are placeholders."""
    n_pad = sum(1 for t in drafts if t == -1)
    if placeholders_are_drafts:
        return len(drafts), 0
    return len(drafts) - n_pad, n_pad


_FINISH_REASON = {
    "FINISHED_STOPPED": "stop",
    "FINISHED_LENGTH_CAPPED": "length",
    "FINISHED_IGNORED": "ignored",
    "FINISHED_ERROR": "error",
}


def status_name(status: Any) -> str:
    """``RequestStatus.FINISHED_ABORTED`` -> ``"FINISHED_ABORTED"`` (plain strings pass)."""
    return str(getattr(status, "name", status))


def finish_reason(status: Any) -> str:
    name = status_name(status)
    return _FINISH_REASON.get(name) or name.lower().removeprefix("finished_")


# -- driver-side helpers (no engine needed) ---------------------------------------------------
SPEC_METRICS = {
    "vllm:spec_decode_num_drafts": "num_drafts",
    "vllm:spec_decode_num_draft_tokens": "num_draft_tokens",
    "vllm:spec_decode_num_accepted_tokens": "num_accepted_tokens",
}


def totals_record(source: str, counts: list[int], per_pos: list[int]) -> Record:
    """The closing ``totals`` record: ``counts`` is (drafts, draft tokens, accepted tokens),
    ``per_pos`` the accepted tokens per draft position; ``source`` names where they were read."""
    return schema.totals(source, counts, per_pos)


def totals_from_metrics(metrics: Any, k: int) -> Record:
    """The ``totals`` record from ``LLM.get_metrics()`` (summed over engines / labels)."""
    rec = totals_record("get_metrics", [0, 0, 0], [0] * k)
    for m in metrics:
        field = SPEC_METRICS.get(m.name)
        if field is not None:
            rec[field] += int(m.value)
        elif m.name == "vllm:spec_decode_num_accepted_tokens_per_pos":
            for i, v in enumerate(m.values[:k]):
                rec["num_accepted_tokens_per_pos"][i] += int(v)
    return rec


def subtract_totals(after: Record, before: Record) -> Record:
    out = dict(after)
    for key in ("num_drafts", "num_draft_tokens", "num_accepted_tokens"):
        out[key] = after[key] - before[key]
    out["num_accepted_tokens_per_pos"] = [
        a - b
        for a, b in zip(
            after["num_accepted_tokens_per_pos"], before["num_accepted_tokens_per_pos"], strict=True
        )
    ]
    return out


def append_record(path: str, record: Record) -> None:
    """Append one whole record (e.g. ``totals`` after the engine has shut down)."""
    writer = StepLogWriter(path)
    try:
        writer.write(record)
    finally:
        writer.close()
