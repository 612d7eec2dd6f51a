"""The columnar checker: a step log judged chunk by chunk over whole columns.

Each chunk of whole lines is decoded into columns (reader.py: canonical request_step lines
straight from the bytes, scanner.py; the other lines through a typed decoder) and checked at
once: the blocks against the step rules evaluated over arrays
(blocks.py), the order of records per request and per step (sequence.py). The chunk's last
engine step waits for the next chunk, so every check sees whole steps. Memory is a few
chunks plus the open requests, whatever the log's length.

The reference replay (reference_replay.py) is the authority. The columnar checker only ever
says "agree", or of a log cut short where everything present agreed what the reference says
of it ("incomplete": no totals record; "bad_input": a final line without newline that the
reference decoder rejects), and only for a log where every check passed and every record
fits a pattern it handles; for anything else (a divergence, bad input, a block still open at
the end, ...) it raises `Irregular` and `replay_file` replays the log through the reference
machine, which writes the report. Either way the report is built by the same functions
(`report.make_summary`, `report.stats_not_compared`) from the same totals (the reference's
`Counters`), tallies and shift terms.
"""

from __future__ import annotations

import gc
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from itertools import chain, repeat
from operator import attrgetter, itemgetter
from typing import Any

import numpy as np
from spectally.engine_bridge.steplog.header import LEGACY_PROFILE, Header
from spectally.engine_bridge.steplog.limits import MAX_LINE_BYTES
from spectally.engine_bridge.steplog.profiles import resolve
from spectally.engine_bridge.steplog.records import BadInput, Record, exported_counters, parse_line
from spectally.engine_bridge.steplog.typed import LineKind
from spectally.exit_codes import Verdict
from spectally.reference.counters import Counters
from spectally.reference.errors import InvariantViolation
from spectally.reference.invariants import check_invariants

from ..accounts import metrics_divergence
from ..report import ReplayResult, Tally, make_summary, stats_not_compared
from . import jit
from .array_arith import Ints
from .blocks import COUNT_FIELDS, BlockColumns, ShapeTable, check_blocks
from .reader import (
    ABSENT,
    COLUMNS,
    OUTCOME_CODE,
    OUTCOMES,
    Irregular,
    Lines,
    byte_chunks,
    decode_columns,
    delivered_in_schema,
    empty_lines,
    worth_compiling,
)
from .sequence import (
    INF_LINE,
    Event,
    Lanes,
    RequestTable,
    StatsColumns,
    check_block_order,
    check_one_block_per_step,
    check_step_stats,
)

Legacy = tuple[Ints, Ints, Ints] | Lanes  # each block's legacy counts (`check_blocks`)
STALE = OUTCOME_CODE["discarded_stale"]
APPLIED = OUTCOME_CODE["applied"]
STRICT = False  # re-raise unexpected exceptions instead of falling back (tests)
MAX_EXACT_FLOAT = 2**53  # delivered and per-position counts are bounded by this here
_COUNT = {name: i for i, name in enumerate(COLUMNS[1:])}  # a column of `_check`'s blocks
# Those rows are the shape table's key fields in its order, so `check_blocks` takes them as
# they are (one matrix, `hashing.shape_keys`); a reordering must fail here, not go slow.
assert COLUMNS[1:] == COUNT_FIELDS, (COLUMNS, COUNT_FIELDS)
_STATS_TOTALS = attrgetter("num_drafts", "num_draft_tokens", "num_accepted_tokens")


def _delivered(column: Ints, known: bool) -> None:
    """The optional ``delivered`` column, in place (-1: absent or null); a log that carries
    the field while the schema does not know it goes to the reference (which then rejects
    it)."""
    if (column == ABSENT).all():
        column[:] = -1
        return
    if not known:
        raise Irregular("a delivered field the schema does not know")
    column[:] = np.where(column < 0, -1, np.minimum(column, MAX_EXACT_FLOAT))


@dataclass
class _Blocks:
    """The request_step lines of whole steps: their counts (rows of `_COUNT` columns, a
    view), request index (in the lines' ``ids``), outcome, line numbers and steps."""

    counts: Ints
    rid: Ints
    outcome: Ints
    applied: np.ndarray[Any, np.dtype[np.bool_]]
    lines: Ints
    steps: Ints

    @classmethod
    def of(cls, records: Lines, lines: Ints, steps: Ints) -> _Blocks:
        """The blocks of ``records`` (lines ``lines``, counting up from the first: no gather
        needed; steps ``steps``)."""
        at = np.flatnonzero(records.kinds == LineKind.REQUEST_STEP)
        # The counts as rows (np.take: faster than values[at]); the columns after the step
        # are blocks.COUNT_FIELDS, the shape table's key fields, in order. The whole rows
        # are taken, then the step left out by a view: `np.take` of the strided
        # ``values[:, 1:]`` first copied all of it, one more array of the chunk's size (the
        # one whose size moved from chunk to chunk, so glibc's heap grew to fit it).
        outcome = records.outcome[at]
        return cls(
            counts=np.take(records.values, at, axis=0)[:, 1:],
            rid=records.rid[at],
            outcome=outcome,
            applied=outcome == APPLIED,
            lines=at + lines[0],
            steps=np.take(steps, at),
        )

    def walked(self, ids: list[str], ends: list[Event], watched: Iterable[str]) -> Ints:
        """The blocks the lifecycle pass walks: the discarded ones, and the applied ones of a
        request written after its first end record (``ends``) or discarded block, or of a
        request whose state carries over (``watched``)."""
        discarded = np.flatnonzero(~self.applied)
        # The first line of each request's end record or discarded block (0: its state
        # carries over). Both lists are in line order, so a dict built from the end back
        # keeps each request's first line of one list; the two are merged by the minimum.
        first = dict(
            zip(
                map(ids.__getitem__, self.rid[discarded[::-1]].tolist()),
                self.lines[discarded[::-1]].tolist(),
                strict=True,
            )
        )
        for rid, line in {e[1]: e[0] for e in reversed(ends)}.items():
            if line < first.get(rid, INF_LINE):
                first[rid] = line
        first.update(dict.fromkeys(watched, 0))
        if first:
            # ``ids`` may name one request twice (a carried step's ids, then the chunk's)
            after = np.fromiter(map(first.get, ids, repeat(INF_LINE)), np.int64, len(ids))
            late = self.applied & (self.lines > after[self.rid])
            if late.any():  # (masks, not np.union1d: its masked-array test imports numpy.ma)
                walk: Ints = np.flatnonzero(~self.applied | late)
                return walk
        return discarded

    def events(self, walk: Ints, ids: list[str]) -> list[Event]:
        """Blocks ``walk`` as the lifecycle pass's events, in line order."""
        return list(
            zip(
                self.lines[walk].tolist(),
                map(ids.__getitem__, self.rid[walk].tolist()),
                self.steps[walk].tolist(),
                map(OUTCOMES.__getitem__, self.outcome[walk].tolist()),
                self.counts[walk, _COUNT["scheduled"]].tolist(),
                self.counts[walk, _COUNT["sampled"]].tolist(),
                strict=True,
            )
        )


class Columnar:
    """One log through the columnar checks; `run` returns the agreeing result or raises
    `Irregular`."""

    def __init__(self, path: str, metrics: str | None, force_profile: str | None = None) -> None:
        self.path = path
        self.metrics = metrics
        self.force_profile = force_profile
        self.header: Header | None = None
        self.totals_record: tuple[int, Record] | None = None
        self.more_totals: list[tuple[int, Record]] = []  # other sources' (spec/STEP_LOG.md)
        self.tally = Tally()
        self.table = RequestTable()
        self.shapes: ShapeTable | None = None  # the log's block shapes, folded at the end
        self.last_step = -1
        self.carry_step = -1  # the step of the carried (last, maybe unfinished) step's lines
        self.delivered_known = delivered_in_schema()
        self.notes: list[str] = []
        # A final line without a newline that the reference decoder rejects (a log cut
        # mid-line): the verdict is that bad input, once every line before it agreed.
        self.bad_last: BadInput | None = None

    def run(
        self, source: str, lines: Sequence[tuple[int, bytes, bool]] | None, bar: Any
    ) -> ReplayResult:
        carry = empty_lines()
        carry_line = first = 1  # the line of carry[0]; a batch's records are consecutive lines
        shown = 0  # lines on the bar (lines given back are decoded again, not shown again)
        reader = byte_chunks(source, lines)
        for whole in reader:
            chunk = whole if whole[-1:] == b"\n" else self._cut_last(bytes(whole), first)
            if not chunk:
                continue
            carry, carry_line, first = self._chunk(chunk, first, carry, carry_line)
            if bar is not None and first - 1 > shown:
                bar.update(first - 1 - shown)
                shown = first - 1
            # The carried step, when it is this chunk's last lines (it is, but before a
            # totals line), goes back to the reader: the next chunk starts with it and checks
            # it with the rest of its lines, one check a chunk instead of two (`_chunk`
            # checks a decoded carry on its own). The reader refuses a step longer than the
            # chunk (begun in an earlier one) or than `KEEP_BYTES`.
            if len(carry) and carry_line + len(carry) == first and reader.keep(len(carry)):
                carry, first = empty_lines(), carry_line
        self._steps(carry, carry_line, final=True)
        return self._finish()

    def _chunk(
        self, chunk: bytes | memoryview, first: int, carry: Lines, carry_line: int
    ) -> tuple[Lines, int, int]:
        """Decode and check one chunk (lines ``first``, ...) after the carried lines (lines
        ``carry_line``, ...); returns the new carry, its first line and the next chunk's first
        line. The carry leaves as its own copy (`Lines.own`), so this chunk's columns are
        freed here, before the next chunk is decoded: a carry of views kept them alive
        through the next chunk, whose arrays then landed around them, and glibc's heap kept
        the holes (the peak RSS crept up with the number of chunks)."""
        records = decode_columns(self.path, first, chunk)
        start, first = first, first + len(records)
        records, start = self._strip_dicts(records, start)
        if len(carry) and len(records):
            # The carried (unfinished) step takes this chunk's lines of that step and is
            # checked on its own, so only those few lines are joined to it (not the whole
            # chunk: `Lines.then` copies every column).
            later = np.flatnonzero(records.steps != self.carry_step)
            head = int(later[0]) if len(later) else len(records)
            if head == len(records):
                return carry.then(records), carry_line, first
            if head:
                carry = carry.then(records.cut(0, head))
            self._steps(carry, carry_line, final=False, whole=True)
            records, start = records.cut(head, len(records)), start + head
        elif len(carry):
            return carry, carry_line, first
        carry, carry_line = self._steps(records, start, final=False)
        return carry.own(), carry_line, first

    def _cut_last(self, chunk: bytes, first: int) -> bytes:
        """The last chunk (lines ``first``, ...) without its final line when that line has no
        newline and the reference decoder rejects it (`records.parse_line`: the same
        message); it stays when it decodes (a last record without its newline is fine)."""
        cut = chunk.rfind(b"\n") + 1
        text = chunk[cut:]
        lineno = first + chunk.count(b"\n", 0, cut)
        if lineno == 1 or len(text) > MAX_LINE_BYTES:
            return chunk  # a BOM to strip, a line over the limit: decode_chunk refuses it
        try:
            parse_line(self.path, lineno, text, False)
        except BadInput as exc:
            self.bad_last = exc
            return chunk[:cut]
        return chunk

    def _strip_dicts(self, records: Lines, start: int) -> tuple[Lines, int]:
        """Take the header (line 1) and the totals record (the last line) out of the records
        (lines ``start``, ``start + 1``, ...); returns the rest and its first line."""
        if len(records) and start == 1:
            head = records.objs.get(0)
            if type(head) is not dict or head["record"] != "header":
                raise Irregular("the first record is not the header")
            try:
                header = resolve(Header.from_record(head), self.force_profile)
            except (KeyError, ValueError) as exc:
                raise Irregular(f"header: {exc}") from None
            if header.profile is None:
                raise Irregular("no counting profile")
            if header.profile != LEGACY_PROFILE:
                # The array rules (blocks.block_inputs) mirror translate.py for vllm-legacy;
                # a log of another profile is the reference replay's.
                raise Irregular(f"profile {header.profile}: checked by the reference replay")
            self.header = header
            self.tally.counts["header"] += 1
            records, start = records.cut(1, len(records)), 2
        # The totals records at the end (one per source; several: spec/STEP_LOG.md).
        tail: list[tuple[int, Record]] = []
        while len(records):
            last = records.objs.get(len(records) - 1)
            if type(last) is not dict or last["record"] != "totals":
                break
            tail.insert(0, (start + len(records) - 1, last))
            records = records.cut(0, len(records) - 1)
        if self.totals_record is not None and len(records):
            raise Irregular("a record after the totals record")
        for line, rec in tail:
            if self.totals_record is None:
                self.totals_record = (line, rec)
            else:
                self.more_totals.append((line, rec))
            self.tally.counts["totals"] += 1
        sources = [r["source"] for _, r in self.all_totals()]
        if len(set(sources)) != len(sources):
            raise Irregular("two totals records of one source")
        return records, start

    def all_totals(self) -> list[tuple[int, Record]]:
        first = [] if self.totals_record is None else [self.totals_record]
        return first + self.more_totals

    def _steps(
        self, records: Lines, start: int, final: bool, whole: bool = False
    ) -> tuple[Lines, int]:
        """Check the records of whole steps (lines ``start``, ...); return the last (maybe
        unfinished) step's records and their first line. ``whole``: the last step is
        complete too (the next line is of a later step)."""
        if not len(records):
            return records, start
        if self.header is None:
            raise Irregular("no header")
        if (records.kinds > LineKind.STEP_STATS).any():
            raise Irregular("a header or totals record out of place")
        steps = records.steps
        if steps[0] < self.last_step or (steps[1:] < steps[:-1]).any():
            raise Irregular("a step went backwards")
        cut = len(records) if final or whole else int(np.searchsorted(steps, steps[-1]))
        self.carry_step = int(steps[-1])
        if cut == 0:
            return records, start
        lines = np.arange(start, start + cut, dtype=np.int64)
        # The last step of a log cut before its totals record: its step_stats may be missing.
        cut_step = int(steps[-1]) if final and self.totals_record is None else None
        self._check(records.head(cut), lines, steps[:cut], cut_step)
        return records.cut(cut, len(records)), start + cut

    def _check(self, records: Lines, lines: Ints, steps: Ints, cut_step: int | None) -> None:
        """Check whole steps (``records``: lines ``lines``, steps ``steps``): the request
        records and blocks through the lifecycle pass and the order checks, the blocks
        against the step rules, the step_stats records against the blocks' sums."""
        kinds = records.kinds
        new = np.count_nonzero(steps[1:] != steps[:-1]) + int(steps[0] != self.last_step)
        self.tally.steps += int(new)
        self.last_step = int(steps[-1])
        rq_at = np.flatnonzero(kinds == LineKind.REQUEST)
        ss_at = np.flatnonzero(kinds == LineKind.STEP_STATS)
        blocks = _Blocks.of(records, lines, steps)
        counts = self.tally.counts
        counts["request_step"] += len(blocks.lines)
        counts["request"] += len(rq_at)
        counts["step_stats"] += len(ss_at)
        done, slot = self._lifecycle(records, lines[rq_at], rq_at, blocks)
        legacy = self._rules(blocks, slot)
        self._step_stats(records, ss_at, lines, steps, blocks, legacy, cut_step)
        self.tally.checked += len(blocks.lines) + len(ss_at)
        self.table.release(done)

    def _lifecycle(
        self, records: Lines, rq_lines: Ints, rq_at: Ints, blocks: _Blocks
    ) -> tuple[list[str], Ints]:
        """The request records, the discarded blocks and the applied blocks of a request
        written after its first end record or discarded block of the chunk (or all of them,
        when its lifecycle state carries over), in line order, through the request table
        (`RequestTable.lifecycle`); every other block only needs its request open
        (`check_block_order`), and one block per request per step. Returns what the table
        releases after the checks and each block's request slot."""
        header = self.header
        assert header is not None
        table = self.table
        table.mode, table.drop_default = header.mode, header.drop_stale_output
        ids, objs = records.ids, records.objs
        requests: list[Event] = [
            (line, rec.request, rec.step, rec.event, rec.structured, rec.drop_stale_output)
            for line, rec in zip(
                rq_lines.tolist(), map(objs.__getitem__, rq_at.tolist()), strict=True
            )
        ]
        adds = [e for e in requests if e[3] == "add"]
        ends = [e for e in requests if e[3] != "add"] if len(adds) < len(requests) else []
        events = blocks.events(blocks.walked(ids, ends, table.watched()), ids)
        if ends:
            events = sorted(events + ends, key=itemgetter(0))  # two sorted runs: a merge
        done = table.lifecycle(adds, events, self.last_step)
        self.tally.requests = table.requests
        slot = np.fromiter(map(table.slots.__getitem__, ids), np.int64, len(ids))[blocks.rid]
        check_block_order(slot, blocks.lines, table)
        check_one_block_per_step(blocks.steps, slot)
        return done, slot

    def _rules(self, blocks: _Blocks, slot: Ints) -> Legacy:
        """The blocks against the step rules, through the log's shape table
        (`blocks.check_blocks`); returns each block's legacy counts."""
        header = self.header
        assert header is not None
        counts, col = blocks.counts, _COUNT
        _delivered(counts[:, col["delivered"]], self.delivered_known)  # (a view: in place)
        columns = BlockColumns(
            proposed=counts[:, col["proposed"]],
            padding=counts[:, col["padding"]],
            grammar_valid=counts[:, col["grammar_valid"]],
            scheduled=counts[:, col["scheduled"]],
            invalid=counts[:, col["invalid"]],
            verified=counts[:, col["verified"]],
            accepted=counts[:, col["accepted"]],
            sampled=counts[:, col["sampled"]],
            delivered=counts[:, col["delivered"]],
            applied=blocks.applied,
            structured=self.table.structured[slot],
            stale=blocks.outcome == STALE,
        )
        if self.shapes is None:
            self.shapes = ShapeTable(header.mode, header.k)
        return check_blocks(header.mode, header.k, columns, self.shapes, counts).legacy

    def _step_stats(
        self,
        records: Lines,
        ss_at: Ints,
        lines: Ints,
        steps: Ints,
        blocks: _Blocks,
        legacy: Legacy,
        cut_step: int | None,
    ) -> None:
        """The step_stats records against the sums of their steps' blocks
        (`check_step_stats`); the note when the last step of a cut log had none."""
        assert self.header is not None
        k = self.header.k
        stats = list(map(records.objs.__getitem__, ss_at.tolist()))
        per_pos = list(map(attrgetter("num_accepted_tokens_per_pos"), stats))
        if not set(map(len, per_pos)) <= {k}:
            raise Irregular("a per-position vector whose length is not k")
        # One row per record (the decoder bounds every count by 2**63 - 1): the three totals
        # and the k per-position counts, each read in one pass of C iterators (a tuple
        # built per record took 2.5 times as long)
        values = np.empty((len(stats), 3 + k), dtype=np.int64)
        values[:, :3] = np.fromiter(
            chain.from_iterable(map(_STATS_TOTALS, stats)), np.int64, 3 * len(stats)
        ).reshape(len(stats), 3)
        values[:, 3:] = np.fromiter(chain.from_iterable(per_pos), np.int64, k * len(stats)).reshape(
            len(stats), k
        )
        if len(stats) and int(values[:, 3:].max(initial=0)) > MAX_EXACT_FLOAT:
            raise Irregular("a per-position count too large")
        stats_columns = StatsColumns(steps[ss_at], lines[ss_at], values)
        if check_step_stats(k, blocks.steps, blocks.lines, legacy, stats_columns, cut_step):
            assert cut_step is not None
            self.notes.append(stats_not_compared(cut_step))

    def _finish(self) -> ReplayResult:
        header = self.header
        if header is None:
            raise Irregular("no header")
        still_open = self.table.finish()
        complete = self.totals_record is not None
        counters = Counters.zero(header.k)
        if self.shapes is not None:
            counters, shift = self.shapes.totals()
            for name, value in shift.items():
                self.tally.shift[name] += value
        try:
            check_invariants(counters)
        except InvariantViolation as exc:
            raise Irregular(str(exc)) from None
        legacy = counters.legacy
        ref = (
            legacy.num_drafts,
            legacy.num_draft_tokens,
            legacy.num_accepted_tokens,
            list(counters.per_position("legacy_accepted")),
        )
        for _, rec in self.all_totals():
            if exported_counters(rec) != ref:
                raise Irregular("totals differ")
            self.tally.checked += 1
        if self.metrics is not None:
            try:
                if metrics_divergence(self.metrics, header, ref, self.path) is not None:
                    raise Irregular("metrics differ")
            except BadInput as exc:
                raise Irregular(str(exc)) from None
            self.tally.checked += 1
        if self.bad_last is not None:
            # What the reference replay says of this log: everything before the cut line
            # read without a divergence (checked here, and more), then the cut line.
            return ReplayResult(
                self.path, Verdict.BAD_INPUT, [], self.bad_last, {}, [], None, checker="columnar"
            )
        if not complete:
            # An incomplete log: everything present agreed (reference_replay.finish).
            self.tally.open_requests = still_open
        summary = make_summary(self.path, header, self.tally, counters, self.force_profile)
        status = Verdict.AGREE if complete else Verdict.INCOMPLETE
        return ReplayResult(
            self.path, status, [], None, summary, self.notes, counters, checker="columnar"
        )


@contextmanager
def collector_paused() -> Iterator[None]:
    """CPython's cyclic garbage collector off for the block, as it was after.

    Why: a full collection walks every tracked object of the process, and numba's import
    alone leaves about 110,000 of them; the checker's per-chunk lists and tuples trigger two
    or three full collections per million records, about 75 ms each (a fifth of the
    replay's CPU time on a log of many short requests). The checker makes no reference
    cycles (tests/columnar/test_columnar.py collects after replays, irregular ones included, and
    finds nothing), so nothing waits for the collector; memory is freed by reference counts
    as before. Objects are still collected after the block, and a collection requested
    inside it (``gc.collect``) still runs."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def replay_columnar(
    path: str,
    *,
    source: str | None = None,
    metrics: str | None = None,
    lines: Sequence[tuple[int, bytes, bool]] | None = None,
    bar: Any = None,
    force_profile: str | None = None,
    run_bytes: int = 0,
) -> ReplayResult | None:
    """The agreeing result of a log the columnar checker vouches for; None: the reference
    replay must judge it. ``source`` is the file to read (default ``path``; stdin is spooled
    to a file by the caller), ``path`` the name reports use; ``force_profile`` as in
    `replay_file`; ``run_bytes`` as `ReplayOptions.run_bytes`."""
    compile_ = worth_compiling(source or path, lines, run_bytes)
    try:
        with collector_paused(), jit.allowed(compile_):
            return Columnar(path, metrics, force_profile).run(source or path, lines, bar)
    except Irregular:
        return None
    except Exception:
        # A fault of the columnar code on some input must not decide a verdict either: the
        # reference judges the log (the tests set STRICT so that such a fault fails them).
        if STRICT:
            raise
        return None
