"""Sequence rules for the columnar checker: the order of records, per request and per step.

What the reference replay enforces one record at a time (reference_replay.py, machine.py
E1-E3, E6), checked here over a chunk of whole steps:

* steps never go back (one comparison of neighbours over the step column);
* add before use, once; nothing after a request's end (per-request line intervals: a block
  is legal only between its request's add line and the line that closes it);
* one block per request per step (one sort of (step run, request) keys, a look at neighbours);
* a request_step is never after its step's step_stats, and a step has one step_stats;
* step_stats = the sum of the step's blocks' legacy counts (segment sums over the sorted
  step column; per position from a histogram of accepted lengths per step).

Lifecycle records are few (one add and one end per request, preemptions): a chunk's adds are
applied at once, then the other records take one lean pass in line order
(`RequestTable.lifecycle`), together with the discarded blocks and the applied blocks of the
requests that have a lifecycle record or a discarded block open.
That pass mirrors how the reference replay holds a ``finish`` / ``abort`` / ``preempt``
record until the discarded blocks written after it are read (reference_replay.py: `Held`,
``held_accepts``, claims) and how the machine closes blocks (machine.py E3, E6: the
decision is `transitions.lifecycle_rule`, the stale outcome `transitions.is_applied`): a
block whose claimed outcome the reference would not confirm, a block opened where the
machine refuses it, a record of an ended request, or a discarded block never closed is
`Irregular` and the log goes to the reference replay.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import msgspec
import numpy as np
from spectally.engine_bridge.steplog.schema import LIFECYCLE_OUTCOME
from spectally.reference.arith import INT_ARITH
from spectally.reference.step import Mode, StepInputs
from spectally.reference.transitions import discard_deadline, is_applied, lifecycle_rule

from . import hashing
from .array_arith import Ints
from .reader import Irregular

# lifecycle_rule decides from the mode, the event and whether the block was verified; the
# counts it also returns (the discarded block) are folded by blocks from the record.
_NO_COUNTS: StepInputs[int, bool] = StepInputs(0, 0, False, 0, 0, 0, 0, False, False)

INF_LINE = np.iinfo(np.int64).max
ENDED_RING = 1 << 18  # ended ids remembered (as hashes) to refuse a second add of one
STALE = "discarded_stale"
ARITH = INT_ARITH


class SlotMap(dict[str, int]):
    """Request id -> slot of a request still open; a missing id is slot -1."""

    def __missing__(self, key: str) -> int:
        return -1


@dataclass(eq=False, slots=True)
class OpenBlock:
    """A discarded block the reference machine keeps open until a lifecycle event closes it
    (its record's claimed outcome is confirmed then)."""

    step: int
    outcome: str  # the record's claim
    verified: bool  # reached Verify (the forward pass)
    stale: bool = False
    dropped: bool = False


@dataclass(slots=True)
class Life:
    """One request's lifecycle state, as the reference replay holds it."""

    held: tuple[str, int, bool] | None = None  # held end record: event, step, drop stale
    open: list[OpenBlock] = field(default_factory=list)
    accepts: list[OpenBlock] = field(default_factory=list)  # discarded_stale: Accept waits
    ended: bool = False


# One event of the lifecycle pass, in line order: (line, request id, step, what, a, b) where
# ``what`` is a request record's event ("add", "finish", "abort", "preempt"; a: structured,
# b: drop_stale_output, msgspec.UNSET when absent) or a block's outcome (a: scheduled,
# b: sampled). Plain tuples: the pass handles a few per request, and a tuple is the cheapest
# thing to build from the columns and to unpack.
Event = tuple[int, str, int, str, Any, Any]
END_EVENTS = frozenset(("finish", "abort", "preempt"))
_PLAIN_ENDS = frozenset(("finish", "abort"))  # a preemption keeps the request (`_release`)


class RequestTable:
    """The open requests: slot per id, structured flag and add line per slot, and the
    lifecycle state of the requests with an end record or a discarded block under way."""

    def __init__(self) -> None:
        self.slots = SlotMap()
        size = 1024
        self.free: list[int] = list(range(size - 1, -1, -1))
        self.structured = np.zeros(size, dtype=np.bool_)
        self.open_line = np.zeros(size, dtype=np.int64)  # line of the add record
        self.life: dict[str, Life] = {}
        # Written through now (np.full), not as ids end: np.zeros is mapped lazily, and peak
        # RSS would creep up by its 2 MB over the first 2**18 ended requests.
        self.ended = np.full(ENDED_RING, 0, dtype=np.int64)
        self.ended_next = 0
        self.requests = 0
        self.mode = Mode.SYNC
        self.drop_default = False
        # transitions.lifecycle_rule's verdict (does the block stay open, stale?) per
        # (mode, event, verified): the rule itself, evaluated once per distinct input.
        self._stays: dict[tuple[Mode, str, bool], bool] = {}

    def _grow(self) -> None:
        size = 2 * len(self.structured)
        self.structured = np.resize(self.structured, size)
        self.open_line = np.resize(self.open_line, size)
        self.free.extend(range(size - 1, size // 2 - 1, -1))

    def add(self, adds: list[Event]) -> None:
        """The chunk's add records, all at once, before its other lifecycle events: a record
        of the request written before its add line is refused there by its line (so the
        order is the reference's). An id added twice, or again after its request ended, is
        refused."""
        if not adds:
            return
        for _, _, _, _, structured, drop in adds:
            if structured is not True and structured is not False:
                raise Irregular("add without structured")
            if drop is not msgspec.UNSET:
                raise Irregular("drop_stale_output on an add")  # records.validate
        rids = [e[1] for e in adds]
        if len(set(rids)) < len(rids) or not self.slots.keys().isdisjoint(rids):
            raise Irregular("a request added twice")
        while len(self.free) < len(rids):
            self._grow()
        slots = self.free[-len(rids) :][::-1]  # as many pops
        del self.free[-len(rids) :]
        self.slots.update(zip(rids, slots, strict=True))
        self.structured[slots] = [e[4] for e in adds]
        self.open_line[slots] = [e[0] for e in adds]
        self.requests += len(rids)
        if self.ended_next:
            seen = self.ended[: min(self.ended_next, ENDED_RING)]
            # Each remembered hash searched among the added ones: no sort of the ring.
            mine = np.sort(np.fromiter(map(hash, rids), np.int64, len(rids)))
            at = np.minimum(np.searchsorted(mine, seen), len(mine) - 1)
            if (mine[at] == seen).any():
                raise Irregular("an id added again after its request ended")

    def watched(self) -> set[str]:
        """Requests with lifecycle state carried from an earlier chunk."""
        return set(self.life)

    def lifecycle(self, adds: list[Event], events: list[Event], last_step: int) -> list[str]:
        """Apply the chunk's add records (`add`), then its other lifecycle records, discarded
        blocks and the applied blocks of watched requests (`Event`s, in line order); returns
        the ids that ended for good (freed at the end of the chunk, after the block checks
        read their slots)."""
        self.add(adds)
        done: list[str] = []
        # Requests do not touch each other's state, so each one's events are taken together,
        # in its own line order; most end plainly (`_plain_ends`) and need no more.
        mine: dict[str, list[Event]] = {}
        for event in events:
            found = mine.get(event[1])
            if found is None:
                mine[event[1]] = [event]
            else:
                found.append(event)
        done.extend(self._plain_ends(mine, last_step))
        lives = self.life
        for rid, own in mine.items():
            # After its last end record or discarded block, a request's applied blocks change
            # nothing once its state is settled (nothing held or open, not ended: `_block`
            # returns at once; its open-request check is `check_block_order`'s), as after a
            # preemption released in the chunk: the rest of them are not walked.
            last = len(own) - 1
            while last >= 0 and own[last][3] == "applied":
                last -= 1
            for at, (line, _, step, what, a, b) in enumerate(own):
                if at > last:
                    life = lives.get(rid)
                    if life is None or not (life.held or life.open or life.ended):
                        break
                if what in END_EVENTS:
                    self._end_record(rid, line, what, step, b, done)
                else:
                    self._block(rid, line, step, what, a, b, done)
        for rid, life in self.life.items():
            # A held end is released once the engine is past its step + 1 (reference replay:
            # `_advance`); every record of the request after that would release it first.
            if life.held is not None and life.held[1] + 1 < last_step:
                self._release(rid, life, done)
        return done

    def _plain_ends(self, mine: dict[str, list[Event]], last_step: int) -> list[str]:
        """The requests (taken out of ``mine``) whose events of the chunk are the usual end,
        which the pass would apply with no other effect than ending them: nothing carried
        over; a finish or abort record (no drop_stale_output); then at most one block,
        discarded with that event's outcome, of a step the held end still covers (its step
        + 1 at most), which `transitions.lifecycle_rule` closes (not kept open as stale);
        and the end released within the chunk (the engine past its step + 1). Their end
        records are checked as `_end_record` checks them, all at once (`Irregular` if one
        is of a request unknown, ended or added after it)."""
        life, unset = self.life, msgspec.UNSET
        # what the rule does to a block at such an end, per (event, verified)
        closes = {
            (event, verified): not self.stays(event, verified)
            for event in _PLAIN_ENDS
            for verified in (False, True)
        }
        plain: list[str] = []
        lines: list[int] = []
        for rid, own in mine.items():
            if len(own) > 2 or rid in life:
                continue
            line, _, step, event, _, flag = own[0]  # a block first: its outcome is no event
            if event not in _PLAIN_ENDS or flag is not unset or step + 1 >= last_step:
                continue
            if len(own) == 2:
                # (a second request record: its event is no outcome)
                _, _, block_step, outcome, scheduled, sampled = own[1]
                if (
                    outcome != LIFECYCLE_OUTCOME[event]
                    or block_step > step + 1
                    or not closes[event, scheduled > 0 or sampled > 0]  # verified (`_block`)
                ):
                    continue
            plain.append(rid)
            lines.append(line)
        if not plain:
            return plain
        slots = np.fromiter(map(self.slots.__getitem__, plain), np.int64, len(plain))
        if (slots < 0).any() or (np.asarray(lines) <= self.open_line[slots]).any():
            raise Irregular("an end record of an unknown or ended request")
        for rid in plain:
            del mine[rid]
        return plain

    def _end_record(
        self, rid: str, line: int, event: str, step: int, flag: Any, done: list[str]
    ) -> None:
        if event != "preempt" and flag is not msgspec.UNSET:
            raise Irregular("drop_stale_output on a request that is not preempted")
        slot = self.slots[rid]
        if slot < 0 or line <= self.open_line[slot]:
            raise Irregular(f"{event} of an unknown or ended request {rid!r}")
        life = self.life.get(rid)
        if life is None:
            life = self.life[rid] = Life()
        elif life.held is not None:
            self._release(rid, life, done)
        if life.ended:
            raise Irregular(f"{event} of an ended request {rid!r}")
        drop = self.drop_default if flag is msgspec.UNSET or flag is None else bool(flag)
        life.held = (event, step, drop)

    def _block(
        self,
        rid: str,
        line: int,
        step: int,
        outcome: str,
        scheduled: int,
        sampled: int,
        done: list[str],
    ) -> None:
        slot = self.slots[rid]
        if slot < 0 or line <= self.open_line[slot]:
            raise Irregular(f"a block of an unknown request {rid!r}")
        discarded = outcome != "applied"
        life = self.life.get(rid)
        if life is None:
            if not discarded:
                return
            life = self.life[rid] = Life()
        if life.held is not None and not (discarded and step <= life.held[1] + 1):
            self._release(rid, life, done)
        if life.ended:
            raise Irregular(f"a block of an ended request {rid!r}")
        # E3: a block opens only while the open ones are in the forward pass (verified); in
        # sync it reaches Verify only once they closed (translate: a block is in the forward
        # pass when scheduled > 0, sampled > 0, applied or discarded_stale).
        verified = scheduled > 0 or sampled > 0 or outcome == STALE or not discarded
        if life.open and (
            not all(b.verified for b in life.open) or (self.mode is Mode.SYNC and verified)
        ):
            raise Irregular("a block opened while the machine refuses it")
        if not discarded:
            return
        block = OpenBlock(step, outcome, verified)
        life.open.append(block)
        if outcome == STALE:
            life.accepts.append(block)
            if life.held is not None and life.held[0] == "preempt":
                self._release(rid, life, done)

    def stays(self, event: str, verified: bool) -> bool:
        """transitions.lifecycle_rule: whether an open block stays open (stale) at this
        event (the rule evaluated once per distinct input, then remembered)."""
        key = (self.mode, event, verified)
        stays = self._stays.get(key)
        if stays is None:
            stays = self._stays[key] = bool(
                lifecycle_rule(self.mode, event, _NO_COUNTS, verified, ARITH)[0]
            )
        return stays

    def _release(self, rid: str, life: Life, done: list[str]) -> None:
        """The held end record's event, as the machine applies it (E6), then, after a
        preemption, the Accepts of the blocks it made stale."""
        assert life.held is not None
        event, at, drop = life.held
        life.held = None
        accepts, life.accepts = life.accepts, []
        outcome = LIFECYCLE_OUTCOME[event]
        keep: list[OpenBlock] = []
        for block in life.open:
            # [ATTR-2] this event (or, for a stale block, its Accept after it) discards the block
            if at > discard_deadline(self.mode, block.step):
                raise Irregular(f"a block of step {block.step} discarded by a {event} at {at}")
            if self.stays(event, block.verified):
                block.stale, block.dropped = True, drop
                keep.append(block)
            elif block.outcome != outcome:
                raise Irregular(f"a {block.outcome} block closed by a {event}")
        life.open = []
        if event != "preempt":
            life.ended = True
            done.append(rid)
            return
        for block in accepts:
            if block in keep:  # still open, now stale: its Accept (E6)
                if is_applied(block.stale, block.dropped, ARITH):
                    raise Irregular("stale output delivered, yet the record says discarded_stale")
                keep.remove(block)
        if keep:
            raise Irregular("a block left stale with an outcome no Accept confirms")

    def release(self, done: list[str]) -> None:
        """Forget requests that ended for good (and lifecycle state that is settled);
        remember the ended ids (hashes) for a while."""
        life, slots, free = self.life, self.slots, self.free
        hashes = []
        for rid in done:
            life.pop(rid, None)  # none for a request that ended plainly
            slot = slots.pop(rid, -1)
            if slot < 0:
                continue
            free.append(slot)
            hashes.append(hash(rid))
        if hashes:
            kept = hashes[-ENDED_RING:]  # the ring keeps the last ones
            first = self.ended_next + len(hashes) - len(kept)
            self.ended[(first + np.arange(len(kept))) % ENDED_RING] = kept
            self.ended_next += len(hashes)
        settled = [r for r, v in life.items() if v.held is None and not v.open]
        for rid in settled:
            del life[rid]

    def finish(self) -> int:
        """End of log: held end records are released (as the reference does); a discarded
        block still open is left to the reference. Returns how many requests are still open
        (the reference machine's requests at the end: preempted ones included)."""
        done: list[str] = []
        for rid, life in self.life.items():
            if life.held is not None:
                self._release(rid, life, done)
            if life.open:
                raise Irregular("a discarded block still open at the end")
        return len(self.slots) - len(set(done))


def check_block_order(slot: Ints, line: Ints, table: RequestTable) -> None:
    """Blocks only of known requests, after their add lines (what happens at their ends is
    checked by `RequestTable.lifecycle`)."""
    if (slot < 0).any():
        raise Irregular("a block of an unknown or ended request")
    if not (line > table.open_line[slot]).all():
        raise Irregular("a block before its request's add")


def check_one_block_per_step(step: Ints, slot: Ints) -> None:
    """No two blocks with the same step and slot (request); slots are >= 0."""
    if len(step) < 2:
        return
    if (step[1:] >= step[:-1]).all():
        # Steps never go back (the chunk's usual case): a step is one run of the column, so
        # (run, slot) packed in one int64 and one sort of those keys finds a repeat
        # (np.lexsort over two keys took ten times as long).
        run = np.zeros(len(step), dtype=np.int64)
        np.cumsum(step[1:] != step[:-1], out=run[1:])
        key = run * (int(slot.max()) + 1) + slot
        key.sort()
        twice = bool((key[1:] == key[:-1]).any())
    else:
        order = np.lexsort((slot, step))
        step, slot = step[order], slot[order]
        twice = bool(((step[1:] == step[:-1]) & (slot[1:] == slot[:-1])).any())
    if twice:
        raise Irregular("two blocks of one request in one step")


@dataclass
class StatsColumns:
    step: Ints
    line: Ints
    values: Ints  # (n, 3 + k): num_drafts, num_draft_tokens, num_accepted_tokens, per position


LANE = 16  # bits per packed count
LANES_MAX = 16  # at most four words per block
_LANE_SHIFTS = np.arange(0, 64, LANE, dtype=np.uint64)  # lane b of a word: bits 16 b ..


@dataclass
class Lanes:
    """Per block legacy counts packed ``LANE`` bits a lane, four lanes a word: num_drafts,
    num_draft_tokens, num_accepted_tokens, then per position i whether accepted > i. A step's
    sums are then the sums of its blocks' words, lane by lane, while no lane's sum reaches
    2**16 (checked: the longest step times the largest lane value, k).

    ``ids`` None: ``words`` has one entry per block. Else ``words`` has one entry per shape
    (the `blocks.ShapeTable`'s) and ``ids`` the shape of each block."""

    words: tuple[Ints, ...]
    ids: Ints | None = None

    def per_block(self) -> tuple[Ints, ...]:
        if self.ids is None:
            return self.words
        ids = self.ids
        return tuple(word[ids] for word in self.words)

    def unpacked(self, k: int) -> tuple[Ints, Ints, Ints]:
        lanes = _all_lanes(np.stack(self.per_block(), axis=1), 3)
        return lanes[:, 0], lanes[:, 1], lanes[:, 2]

    def step_sums(self, starts: Ints) -> Ints:
        """The words summed over each run of blocks (``starts``: the runs' first blocks), as
        an (runs, words) array: per shape in one compiled pass (`hashing.run_sums`) for a
        chunk of `hashing.MIN_ROWS` blocks or more, else gathered and `np.add.reduceat`."""
        ids = self.ids
        if ids is not None and hashing.wanted(len(ids)):
            return hashing.run_sums(starts, ids, np.stack(self.words, axis=1))
        return np.stack([np.add.reduceat(word, starts) for word in self.per_block()], axis=1)


def lane_words(k: int, drafts: Ints, tokens: Ints, accepted: Ints) -> tuple[Ints, ...]:
    """The `Lanes` words of these legacy counts (3 + k lanes, at most ``LANES_MAX``; each
    value below 2**16): lanes 4w .. 4w + 3 in word w, lane b of a word at bit ``LANE * b``."""
    n, count = len(drafts), 3 + k
    lanes = np.zeros((n, -(-count // 4) * 4), dtype=np.uint64)
    lanes[:, 0], lanes[:, 1], lanes[:, 2] = drafts, tokens, accepted
    lanes[:, 3:count] = accepted[:, None] > np.arange(k)
    shifted = lanes.reshape(n, -1, 4) << _LANE_SHIFTS
    words = np.bitwise_or.reduce(shifted, axis=2).view(np.int64)  # (n, words)
    return tuple(words.T)  # views: the shape table's store copies them in


def _all_lanes(words: Ints, count: int) -> Ints:
    """The first ``count`` lanes of ``words`` (n, words) as an (n, count) array: lane i is
    bits ``LANE * (i % 4)`` up of word ``i // 4`` (one broadcast shift over all words instead
    of a few operations per lane; a chunk has a few thousand steps, so the per-call costs
    were most of the time)."""
    lanes = (words.view(np.uint64)[:, :, None] >> _LANE_SHIFTS) & np.uint64((1 << LANE) - 1)
    return lanes.reshape(len(words), -1)[:, :count].astype(np.int64)


def _union(a: Ints, b: Ints) -> Ints:
    """The sorted distinct values of both arrays: `np.union1d`, without its masked-array test
    (which imports numpy.ma, about 5 ms of a replay's start-up)."""
    both = np.concatenate([a, b])
    both.sort()
    first = np.ones(len(both), dtype=np.bool_)
    first[1:] = both[1:] != both[:-1]
    return both[first]


def check_step_stats(
    k: int,
    block_step: Ints,
    block_line: Ints,
    legacy: tuple[Ints, Ints, Ints] | Lanes,
    stats: StatsColumns,
    cut_step: int | None = None,
) -> bool:
    """Each step's step_stats against the sum of its blocks' legacy counts (zeros for a step
    without step_stats); `Irregular` on any difference or order problem.

    ``cut_step``: the last step of a log that ends before its totals record; without a
    step_stats record it is not compared (as the reference replay's ``_close_account``).
    Returns whether that step counted something all the same (the report notes it)."""
    if len(stats.step) > 1 and (stats.step[1:] == stats.step[:-1]).any():
        raise Irregular("a second step_stats record for a step")
    # The chunk's steps never go back, so each step's blocks are one run of the block
    # columns: segment sums (np.add.reduceat) instead of a sort or a search per block.
    n = len(block_step)
    change = np.flatnonzero(block_step[1:] != block_step[:-1]) + 1
    starts = np.concatenate([np.zeros(min(n, 1), dtype=np.intp), change])
    run_step = block_step[starts]
    if n and len(stats.step):
        # a request_step after its step's step_stats: the step's last block is after it
        last_line = block_line[np.append(change, n) - 1]
        at = np.minimum(np.searchsorted(run_step, stats.step), len(run_step) - 1)
        if ((run_step[at] == stats.step) & (last_line[at] > stats.line)).any():
            raise Irregular("a request_step after its step's step_stats")
    if len(run_step) == len(stats.step) and (run_step == stats.step).all():
        steps = run_step  # every step has blocks and its step_stats (the usual chunk)
    else:
        steps = _union(run_step, stats.step)
    expected = np.zeros((len(steps), 3 + k), dtype=np.int64)
    if n and isinstance(legacy, Lanes):
        if int(np.diff(np.append(starts, n)).max()) * (k + 1) >= 1 << LANE:
            legacy = legacy.unpacked(k)  # a step so long that a lane could overflow
        elif steps is run_step:  # the usual chunk: the sums are the rows as they are
            expected = _all_lanes(legacy.step_sums(starts), 3 + k)
        else:
            expected[np.searchsorted(steps, run_step)] = _all_lanes(legacy.step_sums(starts), 3 + k)
    if n and not isinstance(legacy, Lanes):
        rows = np.searchsorted(steps, run_step)
        drafts, tokens, accepted = legacy
        expected[rows, 0] = np.add.reduceat(drafts, starts)
        expected[rows, 1] = np.add.reduceat(tokens, starts)
        expected[rows, 2] = np.add.reduceat(accepted, starts)
        run = np.zeros(n, dtype=np.intp)
        run[change] = k + 1
        np.cumsum(run, out=run)  # the block's run times (k + 1)
        run += accepted
        hist = np.bincount(run, minlength=len(starts) * (k + 1)).reshape(len(starts), k + 1)
        # blocks whose accepted prefix reaches position i = those with length > i
        expected[rows, 3:] = np.cumsum(hist[:, ::-1], axis=1)[:, ::-1][:, 1:]
    # A step without step_stats compares with zeros (so only a non-empty account differs).
    if steps is run_step:  # each step's step_stats row, in step order
        actual = stats.values
    else:
        actual = np.zeros_like(expected)
        if len(stats.step):
            actual[np.searchsorted(steps, stats.step)] = stats.values
    uncompared = False
    if cut_step is not None and cut_step not in stats.step:
        row = int(np.searchsorted(steps, cut_step))
        if row < len(steps) and steps[row] == cut_step:
            uncompared = bool(expected[row].any())
            expected[row] = 0
    if (expected != actual).any():
        raise Irregular("step_stats differ from the sum of legacy_step")
    return uncompared
