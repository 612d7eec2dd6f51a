"""Sequence rules for the columnar checker: the order of records, per request and per step.

What the reference replay enforces one record at a time (reference_replay.py, machine.py
E1-E3, E6), checked here over a chunk of whole steps:

* steps never go back (one comparison of neighbours over the step column);
* add before use, once; nothing after a request's end (per-request line intervals: a block
  is legal only between its request's add line and the line that closes it);
* one block per request per step (a sort by (step, request) and a look at neighbours);
* a request_step is never after its step's step_stats, and a step has one step_stats;
* step_stats = the sum of the step's blocks' legacy counts (segment sums over the sorted
  step column; per position from a histogram of accepted lengths per step).

Lifecycle records are few (one add and one end per request), so they take one lean pass in
line order (`RequestTable.lifecycle`). The columnar checker handles the patterns a vLLM engine
writes without preemption: ``add``, applied blocks, and ``finish``/``abort`` with at most one
block in flight written before or after it (``discarded_finished``/``discarded_aborted``).
Anything else (preemptions, stale outputs, a discarded block with no end, ...) is `Irregular`
and goes to the reference replay.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import msgspec
import numpy as np

from .array_arith import Bools, Ints
from .colread import Irregular, Request, RequestStep

ENDED_RING = 1 << 18  # ended ids remembered (as hashes) to refuse a second add of one
INF_LINE = np.iinfo(np.int64).max
END_OUTCOME = {"finish": "discarded_finished", "abort": "discarded_aborted"}


class SlotMap(dict[str, int]):
    """Request id -> slot of a request still open; a missing id is slot -1."""

    def __missing__(self, key: str) -> int:
        return -1


@dataclass
class Pending:
    """A request whose end is under way: its end record (held, as the reference holds it)
    and/or the one discarded block of it, whichever came first."""

    slot: int
    end: str | None = None  # "finish" / "abort", once its record was read
    end_step: int = 0
    discard: str | None = None  # the discarded block's outcome, once its record was read


class RequestTable:
    """The open requests: slot per id, structured flag and line interval per slot."""

    def __init__(self) -> None:
        self.slots = SlotMap()
        size = 1024
        self.free: list[int] = list(range(size - 1, -1, -1))
        self.structured = np.zeros(size, dtype=np.bool_)
        self.open_line = np.zeros(size, dtype=np.int64)  # line of the add record
        self.close_line = np.full(size, INF_LINE, dtype=np.int64)  # no block after it
        self.pending: dict[str, Pending] = {}
        self.ended = np.zeros(ENDED_RING, dtype=np.int64)
        self.ended_next = 0
        self.requests = 0

    def _grow(self) -> None:
        size = 2 * len(self.structured)
        self.structured = np.resize(self.structured, size)
        self.open_line = np.resize(self.open_line, size)
        self.close_line = np.resize(self.close_line, size)
        self.free.extend(range(size - 1, size // 2 - 1, -1))

    def _add(self, rid: str, line: int, structured: bool) -> None:
        if rid in self.slots:
            raise Irregular(f"request {rid!r} added twice")
        if not self.free:
            self._grow()
        slot = self.free.pop()
        self.slots[rid] = slot
        self.structured[slot] = structured
        self.open_line[slot] = line
        self.close_line[slot] = INF_LINE
        self.requests += 1

    def lifecycle(self, events: list[tuple[int, Any]], last_step: int) -> list[str]:
        """Apply the chunk's lifecycle records and discarded blocks, in line order; returns
        the ids that ended for good (freed at the end of the chunk, after the block checks
        read their intervals)."""
        added: list[int] = []
        done: list[str] = []
        for line, rec in events:
            rid = rec.request
            if type(rec) is Request:
                event = rec.event
                if event == "add":
                    if rid in self.pending:
                        raise Irregular(f"request {rid!r} added twice")
                    if rec.structured is not True and rec.structured is not False:
                        raise Irregular("add without structured")
                    self._add(rid, line, rec.structured)
                    added.append(hash(rid))
                    continue
                if event not in END_OUTCOME:
                    raise Irregular(f"a {event} record (left to the reference)")
                if rec.drop_stale_output is not msgspec.UNSET:
                    raise Irregular("drop_stale_output on a request that is not preempted")
                slot = self.slots[rid]
                pending = self.pending.get(rid)
                if slot < 0 or (pending is not None and pending.end is not None):
                    raise Irregular(f"{event} of an unknown or ended request {rid!r}")
                if pending is None:
                    self.pending[rid] = Pending(slot, event, rec.step)
                    self.close_line[slot] = min(self.close_line[slot], line)
                    continue
                if pending.discard != END_OUTCOME[event]:
                    raise Irregular("a discarded block with another outcome than its end")
                pending.end = event
                done.append(rid)
                continue
            assert type(rec) is RequestStep
            slot = self.slots[rid]
            if slot < 0 or line <= self.open_line[slot]:
                raise Irregular(f"a block of an unknown request {rid!r}")
            pending = self.pending.get(rid)
            if pending is None:  # the block first, its end record later
                self.pending[rid] = Pending(slot, None, 0, rec.outcome)
                self.close_line[slot] = min(self.close_line[slot], line)
                continue
            if (
                pending.discard is not None
                or pending.end is None
                or END_OUTCOME[pending.end] != rec.outcome
                or rec.step > pending.end_step + 1
            ):
                raise Irregular("a discarded block the columnar checker does not pair")
            pending.discard = rec.outcome
            done.append(rid)
        for rid, pending in self.pending.items():
            # An end with no block in flight: final once no block can follow (step + 1).
            if (
                pending.discard is None
                and pending.end is not None
                and pending.end_step + 1 < last_step
            ):
                done.append(rid)
        if added and self.ended_next:
            seen = self.ended[: min(self.ended_next, ENDED_RING)]
            if np.isin(np.asarray(added, dtype=np.int64), seen).any():
                raise Irregular("an id added again after its request ended")
        return done

    def release(self, done: list[str]) -> None:
        """Forget requests that ended for good; remember their ids (hashes) for a while."""
        for rid in done:
            if rid not in self.pending:
                continue
            del self.pending[rid]
            self.free.append(self.slots.pop(rid))
            self.ended[self.ended_next % ENDED_RING] = hash(rid)
            self.ended_next += 1

    def finish(self) -> None:
        """End of log: a discarded block whose end never came is left to the reference."""
        for pending in self.pending.values():
            if pending.end is None:
                raise Irregular("a discarded block still open at the end")


def check_block_order(slot: Ints, line: Ints, table: RequestTable, applied: Bools) -> None:
    """Blocks only between their request's add and close lines (a discarded block is the
    line that closes it, checked by `RequestTable.lifecycle`)."""
    if (slot < 0).any():
        raise Irregular("a block of an unknown or ended request")
    inside = (line > table.open_line[slot]) & ((line < table.close_line[slot]) | ~applied)
    if not inside.all():
        raise Irregular("a block outside its request's lifetime")


def check_one_block_per_step(step: Ints, slot: Ints) -> None:
    if len(step) < 2:
        return
    order = np.lexsort((slot, step))
    step, slot = step[order], slot[order]
    if ((step[1:] == step[:-1]) & (slot[1:] == slot[:-1])).any():
        raise Irregular("two blocks of one request in one step")


@dataclass
class StatsColumns:
    step: Ints
    line: Ints
    values: Ints  # (n, 3 + k): num_drafts, num_draft_tokens, num_accepted_tokens, per position


def check_step_stats(
    k: int,
    block_step: Ints,
    block_line: Ints,
    legacy: tuple[Ints, Ints, Ints],
    stats: StatsColumns,
) -> None:
    """Each step's step_stats against the sum of its blocks' legacy counts (zeros for a step
    without step_stats); `Irregular` on any difference or order problem."""
    if len(stats.step) > 1 and (stats.step[1:] == stats.step[:-1]).any():
        raise Irregular("a second step_stats record for a step")
    if len(block_step) and len(stats.step):
        at = np.minimum(np.searchsorted(stats.step, block_step), len(stats.step) - 1)
        hit = stats.step[at] == block_step
        if (hit & (stats.line[at] < block_line)).any():
            raise Irregular("a request_step after its step's step_stats")
    steps = np.union1d(block_step, stats.step)
    expected = np.zeros((len(steps), 3 + k), dtype=np.int64)
    if len(block_step):
        group = np.searchsorted(steps, block_step)
        drafts, tokens, accepted = legacy
        expected[:, 0] = np.bincount(group, drafts, minlength=len(steps))
        expected[:, 1] = np.bincount(group, tokens, minlength=len(steps))
        expected[:, 2] = np.bincount(group, accepted, minlength=len(steps))
        hist = np.bincount(group * (k + 1) + accepted, minlength=len(steps) * (k + 1))
        hist = hist.reshape(len(steps), k + 1)
        # blocks whose accepted prefix reaches position i = those with length > i
        expected[:, 3:] = np.cumsum(hist[:, ::-1], axis=1)[:, ::-1][:, 1:]
    # A step without step_stats compares with zeros (so only a non-empty account differs).
    actual = np.zeros_like(expected)
    if len(stats.step):
        actual[np.searchsorted(steps, stats.step)] = stats.values
    if (expected != actual).any():
        raise Irregular("step_stats differ from the sum of legacy_step")
