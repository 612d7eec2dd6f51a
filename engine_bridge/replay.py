"""Streaming replay of a step log through the reference (TLA+-style trace validation).

A cursor walks the log one line at a time; each record is translated into reference events
(translate.py) and folded into the reference `Engine`; after every record the engine's own
numbers are asserted against the reference's profile for that engine version:

* ``request_step``: ``scheduled`` and ``invalid`` against ``step.pipeline`` /
  ``step.legacy_scheduled_invalid`` of the block the reference built, ``accepted`` against
  ``max(sampled - 1, 0)``, and the claimed ``outcome`` against how the reference closed it;
* ``step_stats``: num_drafts / num_draft_tokens / num_accepted_tokens / per-position accepted
  against the sum of ``step.legacy_step`` over that step's blocks (a step without a
  ``step_stats`` record is compared with zeros: the engine counted nothing);
* at the end: every record consumed, open blocks reported, the ``totals`` record and an optional
  final Prometheus scrape against the reference totals.

The rfc counters are folded alongside; the summary shows both profiles and explains the shift.
Memory is independent of the log length: one line, the open requests and the current step.
Finished and aborted requests are dropped from the engine once closed (a bounded table of recently
ended ids keeps "already finished" messages precise).
"""

from __future__ import annotations

import json
import sys
from array import array
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from functools import lru_cache
from operator import add, itemgetter
from typing import Any

from spectally.reference.arith import INT_ARITH
from spectally.reference.counters import Counters
from spectally.reference.errors import IllegalEvent, InvariantViolation
from spectally.reference.events import Accept, Event, StepBegin
from spectally.reference.fastpath import BlockFolder, PreparedBlock
from spectally.reference.invariants import check_invariants
from spectally.reference.machine import BlockCounts, Engine, EngineConfig, RequestState
from spectally.reference.metrics import derived_metrics, legacy_metrics
from spectally.reference.step import (
    LegacyStepCounts,
    Mode,
    StepInputs,
    legacy_scheduled_invalid,
    legacy_step,
    pipeline,
)

from .records import (
    REQUEST_STEP_FIELDS,
    REQUEST_STEP_ORDER,
    BadInput,
    Record,
    check_record,
    iter_lines,
    parse_line,
    request_step_inline_ok,
)
from .translate import (
    DISCARDED_OUTCOMES,
    LEGACY_MAX_VERSION,
    LIFECYCLE_DISCARDED,
    BlockPlan,
    Header,
    Untranslatable,
    lifecycle_event,
    translate_block,
)

ENDED_MEMORY = 100_000  # recently ended request ids kept for precise messages
ENDED_ID_BYTES = 48  # UTF-8 bytes of an ended id stored inline; longer ids are kept as str


class EndedIds:
    """The last `capacity` ended request ids with (status, line), in fixed preallocated storage.

    A ring of `capacity` slots (id bytes, length, status code, line, hash) and an
    open-addressing index (linear probing, backward-shift deletion) are allocated up front, so
    the peak memory is reached at creation and stays flat however long the log is; only ids
    longer than ENDED_ID_BYTES bytes are kept as extra `str` objects (at most `capacity`).
    The oldest id is forgotten when a new one ends with the ring full.
    """

    def __init__(self, capacity: int = ENDED_MEMORY, width: int = ENDED_ID_BYTES) -> None:
        self.capacity = max(1, capacity)
        self.width = min(max(0, width), 255)
        size = 1
        while size < 2 * self.capacity + 1:
            size *= 2
        self.mask = size - 1
        self.index = array("i", bytes(size * 4))  # slot + 1; 0 = empty
        self.ids = bytearray(self.capacity * width)
        self.lens = bytearray(self.capacity)
        self.lines = array("q", bytes(self.capacity * 8))
        self.codes = bytearray(self.capacity)
        self.hashes = array("q", bytes(self.capacity * 8))
        self.long: dict[int, str] = {}
        self.statuses: list[str] = []
        self.next = 0
        self.size = 0

    def __len__(self) -> int:
        return self.size

    def _matches(self, slot: int, rid: str, h: int) -> bool:
        if self.hashes[slot] != h:
            return False
        long = self.long.get(slot)
        if long is not None:
            return long == rid
        start = slot * self.width
        return self.ids[start : start + self.lens[slot]] == rid.encode()

    def _find(self, rid: str) -> int:
        """The index position holding rid, or -1."""
        h = hash(rid)
        i = h & self.mask
        index = self.index
        while True:
            s = index[i]
            if s == 0:
                return -1
            if self._matches(s - 1, rid, h):
                return i
            i = (i + 1) & self.mask

    def get(self, rid: str) -> tuple[str, int] | None:
        i = self._find(rid)
        if i < 0:
            return None
        slot = self.index[i] - 1
        return self.statuses[self.codes[slot]], self.lines[slot]

    def __contains__(self, rid: object) -> bool:
        return isinstance(rid, str) and self._find(rid) >= 0

    def _unlink(self, i: int) -> None:
        """Empty index position i, shifting later entries of its probe run back."""
        index, mask, hashes = self.index, self.mask, self.hashes
        j = i
        while True:
            j = (j + 1) & mask
            s = index[j]
            if s == 0:
                break
            home = hashes[s - 1] & mask
            # move s back to i unless its home lies cyclically in (i, j]
            if (i < j and not i < home <= j) or (j < i and j < home <= i):
                index[i] = s
                i = j
        index[i] = 0

    def put(self, rid: str, status: str, line: int) -> None:
        """Remember rid as ended (status, line); forget the oldest id when full."""
        if status not in self.statuses:
            self.statuses.append(status)
        code = self.statuses.index(status)
        i = self._find(rid)
        if i >= 0:  # already remembered: update in place (keeps its age)
            slot = self.index[i] - 1
            self.codes[slot] = code
            self.lines[slot] = line
            return
        slot = self.next
        self.next = (slot + 1) % self.capacity
        if self.size == self.capacity:  # the ring is full: slot holds the oldest id
            old = self._find_slot(slot)
            self._unlink(old)
            self.long.pop(slot, None)
            self.size -= 1
        data = rid.encode()
        if len(data) > self.width:
            self.long[slot] = rid
        else:
            start = slot * self.width
            self.ids[start : start + len(data)] = data
            self.lens[slot] = len(data)
        self.codes[slot] = code
        self.lines[slot] = line
        h = hash(rid)
        self.hashes[slot] = h
        i = h & self.mask
        while self.index[i] != 0:
            i = (i + 1) & self.mask
        self.index[i] = slot + 1
        self.size += 1

    def _find_slot(self, slot: int) -> int:
        """The index position of an occupied ring slot."""
        i = self.hashes[slot] & self.mask
        while self.index[i] != slot + 1:
            i = (i + 1) & self.mask
        return i


LEGACY_FIELDS = ("num_drafts", "num_draft_tokens", "num_accepted_tokens")


class StopReplay(Exception):
    """Raised internally when the divergence limit is reached."""


@dataclass
class Divergence:
    """One disagreement between the log and the reference."""

    path: str
    line: int
    column: int
    kind: str
    step: int | None
    reason: str
    record: Record | None = None
    rows: list[tuple[str, Any, Any]] = field(default_factory=list)
    state: list[str] = field(default_factory=list)

    def render(self) -> str:
        out = [f"{self.path}:{self.line}:{self.column}: divergence ({self.kind}): {self.reason}"]
        if self.record is not None:
            out.append(f"  record: {json.dumps(self.record, separators=(',', ':'))}")
        if self.rows:
            width = max(len(r[0]) for r in self.rows)
            exp_w = max(len("expected"), *(len(_fmt(r[1])) for r in self.rows))
            out.append(f"  {'counter'.ljust(width)}  {'expected'.ljust(exp_w)}  actual")
            for name, expected, actual in self.rows:
                mark = "" if expected == actual else "   <-- differs"
                out.append(
                    f"  {name.ljust(width)}  {_fmt(expected).ljust(exp_w)}  {_fmt(actual)}{mark}"
                )
        if self.state:
            out.append("  reference state:")
            out.extend(f"    {line}" for line in self.state)
        return "\n".join(out)

    def to_dict(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "line": self.line,
            "column": self.column,
            "kind": self.kind,
            "step": self.step,
            "reason": self.reason,
            "record": self.record,
            "counters": [{"name": n, "expected": e, "actual": a} for n, e, a in self.rows],
            "state": self.state,
        }


def _fmt(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, list):
        return "[" + ", ".join(str(v) for v in value) + "]"
    return str(value)


@dataclass
class StepAccount:
    """The legacy counts the reference predicts for one engine step."""

    step: int
    k: int
    num_drafts: int = 0
    num_draft_tokens: int = 0
    num_accepted_tokens: int = 0
    per_pos: list[int] = field(default_factory=list)
    # (line, request, (legacy num_drafts, num_draft_tokens, num_accepted_tokens)) per block
    blocks: list[tuple[int, str, tuple[int, int, int]]] = field(default_factory=list)
    tainted: str | None = None
    reported: bool = False
    # fast-path blocks not yet summed: FastBlock -> how many (see `Replayer._fold_fast`)
    fast: dict[FastBlock, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.per_pos:
            self.per_pos = [0] * self.k

    def add(self, line: int, rid: str, lg: LegacyStepCounts[int]) -> None:
        """One block of the step and the legacy counts it adds."""
        self.blocks.append(
            (line, rid, (lg.num_drafts, lg.num_draft_tokens, lg.num_accepted_tokens))
        )
        if not lg.num_drafts:
            return
        self.num_drafts += lg.num_drafts
        self.num_draft_tokens += lg.num_draft_tokens
        self.num_accepted_tokens += lg.num_accepted_tokens
        per_pos = self.per_pos
        for i in range(lg.num_accepted_tokens):
            per_pos[i] += 1

    def values(self) -> tuple[int, int, int, list[int]]:
        return self.num_drafts, self.num_draft_tokens, self.num_accepted_tokens, self.per_pos

    def empty(self) -> bool:
        return self.num_drafts == 0 and self.num_draft_tokens == 0 and not any(self.per_pos)


@dataclass
class Shift:
    """Why the rfc counters differ from the legacy ones, term by term (applied/stale blocks)."""

    grammar_invalid: int = 0  # grammar-invalid drafts: excluded by legacy, drafted under rfc
    truncated: int = 0  # drafts cut by the schedule: not counted by legacy, drafted under rfc
    padding: int = 0  # placeholder slots legacy counts as drafted; rfc does not
    stale_drafted: int = 0  # stale outputs legacy counts; rfc discards them
    stale_accepted: int = 0
    stale_steps: int = 0
    steps_without_slots: int = 0  # applied, drafts proposed, none scheduled: rfc step only
    padding_only_steps: int = 0  # only placeholders scheduled: legacy step only

    def add(self, terms: tuple[int, ...]) -> None:
        for name, value in zip(SHIFT_TERMS, terms, strict=True):
            if value:
                setattr(self, name, getattr(self, name) + value)


SHIFT_TERMS = (
    "grammar_invalid",
    "truncated",
    "padding",
    "stale_drafted",
    "stale_accepted",
    "stale_steps",
    "steps_without_slots",
    "padding_only_steps",
)


def shift_terms(mode: Mode, x: StepInputs[int, bool], lg: LegacyStepCounts[int]) -> tuple[int, ...]:
    """What one block adds to each `Shift` term (see `SHIFT_TERMS`)."""
    p = pipeline(mode, x, INT_ARITH)
    if x.applied:
        if mode is Mode.SYNC:
            grammar = x.proposed - p.after_grammar_sync
            truncated = p.after_grammar_sync - p.scheduled_drafts
        else:
            d = p.scheduled_drafts
            grammar = d - min(d, x.grammar_valid) if x.structured else 0
            truncated = x.proposed - p.scheduled_drafts
        # async + structured: vLLM counts padding as invalid, so legacy never drafted it
        padding = (
            0 if (mode is Mode.ASYNC and x.structured) else (p.scheduled_slots - p.scheduled_drafts)
        )
        return (
            grammar,
            truncated,
            padding,
            0,
            0,
            0,
            int(x.proposed > 0 and p.scheduled_slots == 0),
            int(x.proposed == 0 and p.scheduled_slots > 0),
        )
    if x.legacy_reported:
        return (0, 0, 0, lg.num_draft_tokens, lg.num_accepted_tokens, lg.num_drafts, 0, 0)
    return (0,) * len(SHIFT_TERMS)


@dataclass(frozen=True)
class BlockProfile:
    """What the reference says of one closed block: the engine-visible numbers to check, its
    vllm-legacy counts and its shift terms. A pure function of (mode, inputs), so cached."""

    scheduled_slots: int
    invalid: int
    legacy: LegacyStepCounts[int]
    shift: tuple[int, ...]


@lru_cache(maxsize=1 << 16)
def block_profile(mode: Mode, x: StepInputs[int, bool]) -> BlockProfile:
    lg = legacy_step(mode, x, INT_ARITH)
    return BlockProfile(
        scheduled_slots=pipeline(mode, x, INT_ARITH).scheduled_slots,
        invalid=legacy_scheduled_invalid(mode, x, INT_ARITH),
        legacy=lg,
        shift=shift_terms(mode, x, lg),
    )


@dataclass(frozen=True, eq=False)
class FastBlock:
    """A request_step record shape known to replay clean on a request with no open block: its
    block prepared by the replay's `BlockFolder` (closed, or left open for a lifecycle event to
    discard), the vllm-legacy counts it adds and its shift terms. Compared and hashed by
    identity (a step's account counts its fast blocks per FastBlock object)."""

    prepared: PreparedBlock
    shift: tuple[tuple[str, int], ...]  # nonzero Shift terms
    row: tuple[int, int, int]  # legacy num_drafts, num_draft_tokens, num_accepted_tokens


FAST_MEMO = 1 << 16  # distinct record shapes remembered (then the memo starts afresh)
# A request_step record's eight counts, in the order the hot loop of `Replayer.feed_lines`
# unpacks them (`REQUEST_STEP_ORDER` after record, step, request, outcome): with the structured
# flag (and, for a discarded block, the outcome) they are the record's shape.
SHAPE_COUNTS = itemgetter(*REQUEST_STEP_ORDER[4:])


@dataclass
class Held:
    """A lifecycle record whose event waits for the discarded blocks that follow it."""

    event: Event
    line: int
    record: Record
    step: int


@dataclass
class Claim:
    """A request_step record whose outcome the reference confirms only when the block closes."""

    line: int
    outcome: str
    record: Record


@dataclass
class ReplayResult:
    path: str
    status: str  # "agree", "diverge", "bad_input"
    divergences: list[Divergence]
    bad_input: BadInput | None
    summary: dict[str, Any]
    notes: list[str]
    # The reference's counters (both profiles) of everything replayed, or None (bad input):
    # fleet replay merges them with the reference's own `Counters.merge`.
    totals: Counters | None = None

    @property
    def exit_code(self) -> int:
        return {"agree": 0, "diverge": 1, "bad_input": 2}[self.status]


# json.loads's own scanner: json.loads(s) with no options is JSONDecoder().decode(s), which is
# scan_once(s, 0) (after leading whitespace) and then nothing but whitespace up to the end.
_SCAN_ONCE = json.JSONDecoder().scan_once


def _counts_ok(counts: tuple[Any, ...]) -> bool:
    """Every count an int >= 0 (not a bool), or None."""
    return all(c is None or (type(c) is int and c >= 0) for c in counts)


class Replayer:
    """Folds one step log through the reference; feed records with `feed`, then `finish`."""

    def __init__(
        self,
        path: str,
        *,
        max_divergences: int = 1,
        check_invariants: bool = False,
        metrics: str | None = None,
    ) -> None:
        self.path = path
        self.max_divergences = max(1, max_divergences)
        self.check = check_invariants
        self.metrics_path = metrics
        self.header: Header | None = None
        self.engine: Engine | None = None
        self.folder: BlockFolder | None = None  # whole blocks at once into `engine`
        self.mode = Mode.SYNC
        self.k = 1
        self.step: int | None = None
        self.account: StepAccount | None = None
        self.held: dict[str, Held] = {}
        self.held_accepts: dict[str, list[tuple[Accept, Claim]]] = {}
        self.claims: dict[tuple[str, int], Claim] = {}
        self.ended = EndedIds(ENDED_MEMORY)
        self.quarantined: dict[str, int] = {}
        self.divergences: list[Divergence] = []
        self.notes: list[str] = []
        self.counts: dict[str, int] = dict.fromkeys(
            ("header", "request", "request_step", "step_stats", "totals"), 0
        )
        self.steps = 0
        self.requests = 0
        self.checked = 0
        self.failed = 0
        self.skipped = 0
        self.shift = Shift()
        self.legacy_sum = [0, 0, 0]
        self.legacy_pos: list[int] = []
        self.reported_sum = [0, 0, 0]
        self.reported_pos: list[int] = []
        self.totals_record: tuple[int, Record] | None = None
        self.open_blocks: list[str] = []
        self.line = 0
        # (structured, record counts) -> FastBlock, or None: that shape takes the slow path.
        self.fast: dict[tuple[Any, ...], FastBlock | None] = {}
        # (structured, outcome, record counts) -> FastBlock, or None, for blocks a lifecycle
        # event discards (`_fast_discarded`).
        self.fast_discarded: dict[tuple[Any, ...], FastBlock | None] = {}

    # -- driver ----------------------------------------------------------------------------------

    def feed(self, line: int, rec: Record) -> None:
        self.line = line
        kind = rec["record"]
        self.counts[kind] += 1
        if self.totals_record is not None:
            raise BadInput(self.path, line, 1, "record after the totals record (totals is last)")
        if kind == "header":
            self._header(line, rec)
            return
        if self.engine is None:
            raise BadInput(self.path, line, 1, "the first record must be the header")
        if kind == "totals":
            self._per_pos_length(line, rec)
            self.totals_record = (line, rec)
            return
        self._advance(line, rec["step"])
        if kind == "request_step":
            self._request_step(line, rec)
        elif kind == "request":
            self._request(line, rec)
        else:
            self._step_stats(line, rec)

    def finish(self) -> None:
        if self.engine is None:
            raise BadInput(self.path, max(self.line, 1), 1, "empty log: no header record")
        self._close_account()
        for rid in list(self.held):
            self._release(rid)
        for rid, state in self.engine.requests.items():
            for block in state.blocks:
                claim = self.claims.pop((rid, block.step), None)
                where = f"request {rid!r} {block.describe()}"
                self.open_blocks.append(where)
                if claim is not None and rid not in self.quarantined:
                    self._diverge(
                        claim.line,
                        1,
                        "end",
                        block.step,
                        f"the record claims {claim.outcome}, but no later record closes the"
                        f" block: still open at the end of the log ({where})",
                        claim.record,
                        [("outcome", "open", claim.outcome)],
                        self._state(rid),
                    )
        self._final_checks()

    def feed_lines(self, lines: Iterable[tuple[int, bytes, bool]]) -> None:
        """`feed` every line of a log: parse_line + feed, with the common case inlined.

        The common case is an applied request_step record at the current step for a request
        with nothing pending whose record shape is memoised (`_fast_request_step`): its line is
        decoded by ``json.loads`` as `parse_line` decodes it, validated field by field in one
        expression (the checks of `records._fast_ok` for request_step: exact key set, ints >= 0,
        nullable ints, a non-empty request id, the outcome) and the block goes to
        `BlockFolder.fold`. Anything else, or any check failing, goes through `parse_line` and
        `feed` (which re-decodes nothing: the decoded object is passed on), so errors, texts and
        state are those of the per-record path."""
        path = self.path
        loads = json.loads
        scan = _SCAN_ONCE
        fields = REQUEST_STEP_FIELDS
        width = len(REQUEST_STEP_ORDER)
        inline = request_step_inline_ok() and type(self)._fast_request_step is _FAST_REQUEST_STEP
        held, quarantined, get_plan = self.held, self.quarantined, self.fast.get
        done = 0  # fast-path records not yet added to counts["request_step"] and `checked`
        lineno = self.line
        try:
            while True:
                # (Re)load what only `feed` changes: the engine, the step and its account.
                engine = self.engine
                folder = self.folder
                account = self.account
                hot = (
                    inline
                    and engine is not None
                    and folder is not None
                    and account is not None
                    and not account.reported
                    and self.totals_record is None
                )
                if hot:
                    assert engine is not None and folder is not None and account is not None
                    get_state, fold_block = engine.requests.get, folder.fold
                    current = self.step
                    add_block, fast_blocks = account.blocks.append, account.fast
                    fast_count = fast_blocks.get
                for lineno, raw, has_newline in lines:
                    if raw[:2] != b'{"':
                        rec = parse_line(path, lineno, raw, has_newline)
                        break
                    try:
                        # json.loads(text) is decode(): scan_once(text, 0), then only
                        # whitespace may follow; the same C scanner, without the wrappers.
                        text = raw.decode("utf-8", "surrogatepass")
                        obj, end = scan(text, 0)
                        if end != len(text):
                            obj = loads(text)  # whitespace after the object, or extra data
                    except (ValueError, StopIteration):  # not UTF-8 or not JSON: parse_line
                        rec = parse_line(path, lineno, raw, has_newline)  # raises the BadInput
                        break
                    if hot and type(obj) is dict and len(obj) == width:
                        try:
                            (
                                kind,
                                step,
                                rid,
                                outcome,
                                proposed,
                                padding,
                                grammar_valid,
                                scheduled,
                                invalid,
                                verified,
                                accepted,
                                sampled,
                            ) = fields(obj)
                        except KeyError:
                            pass
                        else:
                            if (
                                kind == "request_step"
                                and outcome == "applied"
                                and step == current
                                and type(step) is int
                                and type(rid) is str
                                and rid
                                and rid not in held
                                and rid not in quarantined
                                and type(proposed)
                                is type(padding)
                                is type(scheduled)
                                is type(accepted)
                                is type(sampled)
                                is int
                                and (grammar_valid is None or type(grammar_valid) is int)
                                and (invalid is None or type(invalid) is int)
                                and (verified is None or type(verified) is int)
                            ):
                                # ">= 0" of every count: the memo holds a FastBlock only for
                                # counts that are ints >= 0 (`_fast_request_step`), so a hit on
                                # these int (not bool, not float) counts implies it.
                                state = get_state(rid)
                                if state is not None:
                                    plan = get_plan(
                                        (
                                            state.structured,
                                            proposed,
                                            padding,
                                            grammar_valid,
                                            scheduled,
                                            invalid,
                                            verified,
                                            accepted,
                                            sampled,
                                        )
                                    )
                                    if (
                                        plan is not None
                                        and fold_block(rid, step, plan.prepared) is not None
                                    ):
                                        done += 1
                                        add_block((lineno, rid, plan.row))
                                        fast_blocks[plan] = fast_count(plan, 0) + 1
                                        continue
                    rec = check_record(path, lineno, raw, obj)
                    break
                else:
                    return
                self._flush_fast(done)
                done = 0
                self.feed(lineno, rec)
        finally:
            self.line = lineno
            self._flush_fast(done)

    def _flush_fast(self, done: int) -> None:
        if done:
            self.counts["request_step"] += done
            self.checked += done

    # -- records ---------------------------------------------------------------------------------

    def _header(self, line: int, rec: Record) -> None:
        if self.header is not None:
            raise BadInput(self.path, line, 1, "a second header record")
        if sum(self.counts.values()) > 1:
            raise BadInput(self.path, line, 1, "the header must be the first record")
        header = Header.from_record(rec)
        if header.profile is None:
            newest = ".".join(str(v) for v in LEGACY_MAX_VERSION)
            raise BadInput(
                self.path,
                line,
                1,
                f"no counting profile for {header.engine} {header.engine_version}: replay"
                f" predicts the engine's counters for vllm <= {newest} (vllm-legacy) only",
            )
        self.header = header
        self.mode = header.mode
        self.k = header.k
        self.engine = Engine(
            EngineConfig(header.mode, header.k, header.drop_stale_output), check=self.check
        )
        self.folder = BlockFolder(self.engine)
        self.legacy_pos = [0] * self.k
        self.reported_pos = [0] * self.k

    def _advance(self, line: int, step: int) -> None:
        current = self.step
        if current is not None and step <= current:
            if step < current:
                raise BadInput(
                    self.path, line, 1, f"step went backwards: step {step} after step {current}"
                )
            return
        self._close_account()
        for rid, held in list(self.held.items()):
            if held.step + 1 < step:
                self._release(rid)
        assert self.engine is not None
        self.engine.apply(StepBegin(step))
        self.step = step
        self.steps += 1
        self.account = StepAccount(step, self.k)

    def _lookup(self, line: int, rec: Record) -> RequestState | None:
        """The request's state; None when it ended (a divergence is recorded) or is
        quarantined after an earlier divergence (counted as skipped)."""
        assert self.engine is not None
        rid = rec["request"]
        if rid in self.quarantined:
            self.skipped += 1
            return None
        state = self.engine.requests.get(rid)
        if state is not None:
            return state
        ended = self.ended.get(rid)
        if ended is None:
            raise BadInput(
                self.path,
                line,
                _col(rec, "request"),
                f"record for unknown request {rid!r} (no add record before it)",
            )
        status, at = ended
        self._diverge(
            line,
            _col(rec, "request"),
            rec["record"],
            rec.get("step"),
            f"request already {status} (line {at})",
            rec,
            [],
            [f"request {rid!r}: {status} at line {at}"],
        )
        self.quarantined[rid] = line
        return None

    def _request(self, line: int, rec: Record) -> None:
        assert self.engine is not None
        rid = rec["request"]
        if rec["event"] == "add":
            if rid in self.engine.requests or rid in self.ended or rid in self.quarantined:
                raise BadInput(
                    self.path, line, _col(rec, "request"), f"request {rid!r} added twice"
                )
            self._apply(lifecycle_event(rec), line, rec)
            self.requests += 1
            return
        if rid in self.held:
            self._release(rid)
        if self._lookup(line, rec) is None:
            return
        self.held[rid] = Held(lifecycle_event(rec), line, rec, rec["step"])

    def _request_step(self, line: int, rec: Record) -> None:
        assert self.engine is not None and self.account is not None
        rid = rec["request"]
        step = rec["step"]
        outcome = rec["outcome"]
        if self.account.reported:
            raise BadInput(
                self.path, line, 1, f"request_step for step {step} after that step's step_stats"
            )
        if outcome == "applied":
            if self._fast_request_step(line, rec, rid, step):
                return
        elif outcome in LIFECYCLE_DISCARDED and self._fast_discarded(line, rec, rid, step, outcome):
            return
        held = self.held.get(rid)
        if held is not None and not (outcome in DISCARDED_OUTCOMES and step <= held.step + 1):
            self._release(rid)
        state = self._lookup(line, rec)
        if state is None:
            self.account.tainted = self.account.tainted or f"request {rid!r} is quarantined"
            return
        self.checked += 1
        mode = self.mode
        try:
            plan = translate_block(mode, state.structured, rec)
        except Untranslatable as exc:
            self.account.tainted = f"line {line} could not be translated"
            self._diverge(
                line,
                _col(rec, exc.field),
                "request_step",
                step,
                exc.reason,
                rec,
                [],
                self._state(rid),
            )
            return
        for event in plan.events:
            if not self._apply(event, line, rec):
                self.account.tainted = f"line {line} was rejected by the reference"
                return
        accepted = rec["accepted"]
        expected_accepted = max(rec["sampled"] - 1, 0)
        drop = self.engine.config.drop_stale_output
        if outcome == "applied":
            assert plan.accept is not None
            closed = self._apply_closing(plan.accept, line, rec)
            if closed is None:
                self.account.tainted = f"line {line} was rejected by the reference"
                return
            inputs, actual_outcome = closed
        else:
            block = self.engine.requests[rid].block_at(step)
            assert block is not None
            held = self.held.get(rid)
            if held is not None and held.record["event"] == "preempt":
                # vLLM decides per preemption whether stale output is dropped.
                drop = held.record.get("drop_stale_output", drop)
            reported = outcome == "discarded_stale" and not drop
            inputs = block.inputs(state.structured, accepted, False, reported)
            actual_outcome = outcome
            claim = Claim(line, outcome, rec)
            self.claims[(rid, step)] = claim
            if plan.accept is not None:
                self.held_accepts.setdefault(rid, []).append((plan.accept, claim))
                held = self.held.get(rid)
                if held is not None and held.record["event"] == "preempt":
                    self._release(rid)
        prof = block_profile(mode, inputs)
        if plan.in_forward_pass:
            exp_invalid = prof.invalid
            act_invalid = rec["invalid"] or 0
        else:
            exp_invalid = act_invalid = rec["invalid"] or 0
        scheduled = rec["scheduled"]
        if (
            prof.scheduled_slots != scheduled
            or exp_invalid != act_invalid
            or expected_accepted != accepted
            or actual_outcome != outcome
        ):
            rows = [
                ("scheduled", prof.scheduled_slots, scheduled),
                ("invalid", exp_invalid, act_invalid),
                ("accepted", expected_accepted, accepted),
                ("outcome", actual_outcome, outcome),
            ]
            bad = next(n for n, e, a in rows if e != a)
            reason = {
                "scheduled": "scheduled slots differ from the reference's schedule of this block",
                "invalid": "num_invalid_spec_tokens differs from the reference's count",
                "accepted": "accepted is not max(sampled - 1, 0)",
                "outcome": "the block's outcome differs from the reference's",
            }[bad]
            self.account.tainted = f"line {line} diverged"
            self._diverge(
                line, _col(rec, bad), "request_step", step, reason, rec, rows, self._state(rid)
            )
            return
        lg = prof.legacy
        self.account.add(line, rid, lg)
        if lg.num_drafts:
            self.legacy_sum[0] += lg.num_drafts
            self.legacy_sum[1] += lg.num_draft_tokens
            self.legacy_sum[2] += lg.num_accepted_tokens
            for i in range(lg.num_accepted_tokens):
                self.legacy_pos[i] += 1
        self.shift.add(prof.shift)

    def _fast_request_step(self, line: int, rec: Record, rid: str, step: int) -> bool:
        """An applied block on a request with nothing pending (no held lifecycle event, no
        quarantine, no open block): when its record shape is known to agree (`_fast_shape`),
        the whole block goes to `BlockFolder.fold` at once and the legacy sums are advanced
        from the memoised profile. Exactly what the slow path does for such a record; False
        (nothing done) whenever anything differs, and the slow path takes the record."""
        engine, folder = self.engine, self.folder
        assert engine is not None and folder is not None and self.account is not None
        if rid in self.held or rid in self.quarantined:
            return False
        state = engine.requests.get(rid)
        if state is None:
            return False
        key = (state.structured, *SHAPE_COUNTS(rec))  # as `feed_lines` builds it
        plan = self._known_shape(self.fast, key, state, step, rec, self._fast_shape)
        if plan is None or folder.fold(rid, step, plan.prepared) is None:
            return False
        self._count_fast(line, rid, plan)
        return True

    def _fast_discarded(self, line: int, rec: Record, rid: str, step: int, outcome: str) -> bool:
        """A block the record says a lifecycle event discards (finished, aborted, preempted:
        no Accept), on a request with no open block: when its record shape is known to agree
        (`_discarded_shape`), its events open it at once (`BlockFolder.open`) and its claim
        waits, as on the slow path, for the lifecycle event that closes it. False (nothing
        done) whenever anything differs, and the slow path takes the record."""
        engine, folder = self.engine, self.folder
        assert engine is not None and folder is not None
        # A held lifecycle event is at most one step old here (`_advance` releases older ones),
        # so the slow path would not release it before this record either.
        if rid in self.quarantined:
            return False
        state = engine.requests.get(rid)
        if state is None:
            return False
        key = (state.structured, outcome, *SHAPE_COUNTS(rec))
        plan = self._known_shape(self.fast_discarded, key, state, step, rec, self._discarded_shape)
        if plan is None or folder.open(rid, step, plan.prepared) is None:
            return False
        self.claims[(rid, step)] = Claim(line, outcome, rec)
        self._count_fast(line, rid, plan)
        return True

    def _known_shape(
        self,
        memo: dict[tuple[Any, ...], FastBlock | None],
        key: tuple[Any, ...],
        state: RequestState,
        step: int,
        rec: Record,
        learn: Callable[[RequestState, Record], FastBlock | None],
    ) -> FastBlock | None:
        """The `FastBlock` memoised for a record shape (``key`` ends with the record's eight
        counts), learnt by ``learn`` on first sight; None: the slow path takes the record."""
        if key in memo:
            return memo[key]
        assert self.engine is not None
        if state.blocks or step != self.engine.current_step or state.last_block_step == step:
            return None  # a shape is learnt only on a request in the fast path's state
        # Only counts that are ints >= 0 get a FastBlock: `feed_lines` relies on it.
        plan = learn(state, rec) if _counts_ok(key[-8:]) else None
        if len(memo) >= FAST_MEMO:
            memo.clear()
        memo[key] = plan
        return plan

    def _count_fast(self, line: int, rid: str, plan: FastBlock) -> None:
        """Count a fast block: checked, listed in its step's account, summed at step close."""
        account = self.account
        assert account is not None
        self.checked += 1
        account.blocks.append((line, rid, plan.row))
        fast_blocks = account.fast
        fast_blocks[plan] = fast_blocks.get(plan, 0) + 1

    def _fold_fast(self) -> None:
        """Add the current step's fast-path blocks (counted per `FastBlock`) to the step's
        account, the legacy sums and the shift; before anything reads them."""
        account = self.account
        if account is None or not account.fast:
            return
        per_pos, step_pos = self.legacy_pos, account.per_pos
        shift = self.shift.__dict__  # Shift's fields (a plain dataclass: no setattr hooks)
        drafts = tokens = accepted = 0
        for plan, n in account.fast.items():
            d, t, a = plan.row  # `StepAccount.add` for n blocks at once (listed already)
            if d:
                drafts += n * d
                tokens += n * t
                accepted += n * a
                for i in range(a):
                    step_pos[i] += n
                    per_pos[i] += n
            for name, value in plan.shift:
                shift[name] += n * value
        account.num_drafts += drafts
        account.num_draft_tokens += tokens
        account.num_accepted_tokens += accepted
        total = self.legacy_sum
        total[0] += drafts
        total[1] += tokens
        total[2] += accepted
        account.fast.clear()

    def _fast_shape(self, state: RequestState, rec: Record) -> FastBlock | None:
        """The `FastBlock` of an applied record on ``state`` (active, no open block, current
        step), or None when the slow path must take it: untranslatable, rejected by the
        reference, or any check of `_request_step` failing."""
        assert self.folder is not None
        try:
            plan = translate_block(self.mode, state.structured, rec)
        except Untranslatable:
            return None
        if plan.accept is None:
            return None
        events: BlockCounts = (
            *((type(e), _count(e)) for e in plan.events),
            (Accept, plan.accept.num_tokens),
        )
        prepared = self.folder.prepare(state, rec["step"], events)
        if prepared is None or prepared.fold is None:
            return None
        return self._checked_shape(plan, prepared, prepared.fold.x, rec)

    def _discarded_shape(self, state: RequestState, rec: Record) -> FastBlock | None:
        """The `FastBlock` of a record whose block a lifecycle event discards, on ``state``
        (active, no open block, current step): its events leave the block open; None when the
        slow path must take it, as in `_fast_shape`."""
        assert self.folder is not None
        try:
            plan = translate_block(self.mode, state.structured, rec)
        except Untranslatable:
            return None
        assert plan.accept is None  # only a stale block's record carries an Accept
        events: BlockCounts = tuple((type(e), _count(e)) for e in plan.events)
        prepared = self.folder.prepare(state, rec["step"], events)
        if prepared is None or prepared.opened is None:
            return None
        # What `_request_step` checks of such a block: not applied, not reported (not stale).
        inputs = prepared.opened.inputs(state.structured, rec["accepted"], False, False)
        return self._checked_shape(plan, prepared, inputs, rec)

    def _checked_shape(
        self,
        plan: BlockPlan,
        prepared: PreparedBlock,
        inputs: StepInputs[int, bool],
        rec: Record,
    ) -> FastBlock | None:
        """The `FastBlock` of a block with these ``inputs`` when every per-block check of
        `_request_step` passes on ``rec`` (scheduled slots, invalid, accepted), else None."""
        prof = block_profile(self.mode, inputs)
        act_invalid = rec["invalid"] or 0
        exp_invalid = prof.invalid if plan.in_forward_pass else act_invalid
        if (
            prof.scheduled_slots != rec["scheduled"]
            or exp_invalid != act_invalid
            or max(rec["sampled"] - 1, 0) != rec["accepted"]
        ):
            return None
        shift = tuple((n, v) for n, v in zip(SHIFT_TERMS, prof.shift, strict=True) if v)
        lg = prof.legacy
        return FastBlock(
            prepared, shift, (lg.num_drafts, lg.num_draft_tokens, lg.num_accepted_tokens)
        )

    def _step_stats(self, line: int, rec: Record) -> None:
        account = self.account
        assert account is not None
        self._fold_fast()
        if account.reported:
            raise BadInput(self.path, line, 1, f"a second step_stats record for step {rec['step']}")
        self._per_pos_length(line, rec)
        account.reported = True
        per_pos = rec["num_accepted_tokens_per_pos"]
        actual = (rec["num_drafts"], rec["num_draft_tokens"], rec["num_accepted_tokens"], per_pos)
        reported = self.reported_sum
        reported[0] += actual[0]
        reported[1] += actual[1]
        reported[2] += actual[2]
        self.reported_pos = list(map(add, self.reported_pos, per_pos))
        self._compare_account(account, line, rec, actual)

    def _close_account(self) -> None:
        self._fold_fast()
        account = self.account
        if account is None or account.reported:
            return
        account.reported = True
        if account.empty() and account.tainted is None:
            return
        self._compare_account(account, None, None, (0, 0, 0, [0] * self.k))

    def _compare_account(
        self,
        account: StepAccount,
        line: int | None,
        rec: Record | None,
        actual: tuple[int, int, int, list[int]],
    ) -> None:
        if account.tainted is not None:
            self.notes.append(f"step {account.step}: step_stats not compared ({account.tainted})")
            return
        self.checked += 1
        expected = account.values()
        if expected == actual:
            return
        names = (*LEGACY_FIELDS, "num_accepted_tokens_per_pos")
        rows = [(n, e, a) for n, e, a in zip(names, expected, actual, strict=True)]
        if all(e == a for _, e, a in rows):
            return
        if line is None:
            reason = "the engine reported no step_stats for this step, the reference counts"
            where = account.blocks[-1][0] if account.blocks else self.line
        else:
            bad = [n for n, e, a in rows if e != a]
            reason = f"{', '.join(bad)} differ from the sum of legacy_step over the step's blocks"
            where = line
        state = [f"step {account.step} blocks (line: request -> legacy drafts/tokens/accepted):"]
        for bline, rid, (nd, nt, na) in account.blocks:
            state.append(f"  line {bline}: {rid!r} -> {nd}/{nt}/{na}; {self._describe(rid)}")
        self._diverge(where, 1, "step_stats", account.step, reason, rec, rows, state)

    # -- engine ----------------------------------------------------------------------------------

    def _apply(self, event: Event, line: int, rec: Record) -> bool:
        """Apply one event; on an illegal event record a divergence and quarantine the request."""
        assert self.engine is not None and self.folder is not None
        try:
            # A Finish or an Abort at once where it can (`BlockFolder.try_end`: the same
            # transition), anything else through `Engine.apply`.
            ended = self.folder.try_end(event)
            closed = self.engine.apply(event) if ended is None else ended
        except IllegalEvent as exc:
            rid = getattr(event, "request", None)
            self._diverge(
                line,
                1,
                rec["record"],
                rec.get("step"),
                f"the reference rejects {_event_text(event)}: {exc.reason}",
                rec,
                [],
                [f"request {rid!r}: {exc.state}", *self._counters(rid)],
            )
            if rid is not None:
                self.quarantined[rid] = line
            return False
        except InvariantViolation as exc:  # the reference itself is wrong: say so loudly
            self._diverge(line, 1, "invariant", rec.get("step"), str(exc), rec, [], [])
            return False
        for c in closed:
            claim = self.claims.pop((c.request, c.step), None)
            if claim is None or claim.outcome == c.outcome.value:
                continue
            self._diverge(
                claim.line,
                _col(claim.record, "outcome"),
                "request_step",
                c.step,
                f"the record claims {claim.outcome}; the reference closes the block as"
                f" {c.outcome.value} (at line {line}: {_event_text(event)})",
                claim.record,
                [("outcome", c.outcome.value, claim.outcome)],
                self._state(c.request),
            )
        return True

    def _apply_closing(
        self, accept: Accept, line: int, rec: Record
    ) -> tuple[StepInputs[int, bool], str] | None:
        assert self.engine is not None
        try:
            closed = self.engine.apply(accept)
        except IllegalEvent as exc:
            self._diverge(
                line,
                _col(rec, "accepted"),
                "request_step",
                rec["step"],
                f"the reference rejects {_event_text(accept)}: {exc.reason}",
                rec,
                [],
                [f"request {accept.request!r}: {exc.state}", *self._counters(accept.request)],
            )
            self.quarantined[accept.request] = line
            return None
        c = closed[0]
        return c.inputs, c.outcome.value

    def _release(self, rid: str) -> None:
        """Apply a held lifecycle event (and, after a preemption, the held stale accepts)."""
        held = self.held.pop(rid)
        assert self.engine is not None
        if not self._apply(held.event, held.line, held.record):
            self.held_accepts.pop(rid, None)
            return
        event = held.record["event"]
        accepts = self.held_accepts.pop(rid, [])
        if event == "preempt":
            for accept, claim in accepts:
                if self.claims.get((rid, accept.step)) is claim:  # still open, now stale
                    self._apply(accept, claim.line, claim.record)
            return
        state = self.engine.requests.pop(rid)
        self.ended.put(rid, state.status.value, held.line)

    # -- reporting -------------------------------------------------------------------------------

    def _diverge(
        self,
        line: int,
        column: int,
        kind: str,
        step: int | None,
        reason: str,
        rec: Record | None,
        rows: list[tuple[str, Any, Any]],
        state: list[str],
        path: str | None = None,
    ) -> None:
        self.failed += 1
        self.divergences.append(
            Divergence(path or self.path, line, column, kind, step, reason, rec, rows, state)
        )
        if len(self.divergences) >= self.max_divergences:
            raise StopReplay

    def _describe(self, rid: str) -> str:
        assert self.engine is not None
        state = self.engine.requests.get(rid)
        if state is not None:
            kind = "structured" if state.structured else "unstructured"
            return f"{kind}, {state.describe()}"
        ended = self.ended.get(rid)
        return f"{ended[0]} at line {ended[1]}" if ended else "unknown"

    def _state(self, rid: str) -> list[str]:
        return [f"request {rid!r}: {self._describe(rid)}", *self._counters(rid)]

    def _counters(self, rid: str | None) -> list[str]:
        assert self.engine is not None
        state = self.engine.requests.get(rid) if rid is not None else None
        if state is None:
            return []
        c = state.counters
        r, lg = c.rfc, c.legacy
        return [
            f"rfc: drafted {r.drafted} verified {r.verified} accepted {r.accepted}"
            f" spec_steps {r.spec_steps}",
            f"vllm-legacy: num_drafts {lg.num_drafts} num_draft_tokens {lg.num_draft_tokens}"
            f" num_accepted_tokens {lg.num_accepted_tokens}",
        ]

    def _per_pos_length(self, line: int, rec: Record) -> None:
        n = len(rec["num_accepted_tokens_per_pos"])
        if n != self.k:
            raise BadInput(
                self.path,
                line,
                _col(rec, "num_accepted_tokens_per_pos"),
                f"num_accepted_tokens_per_pos has {n} entries; the header says k = {self.k}",
            )

    def _final_checks(self) -> None:
        assert self.engine is not None
        totals = self.engine.totals
        try:
            check_invariants(totals)
        except InvariantViolation as exc:
            self._diverge(self.line, 1, "invariant", self.step, str(exc), None, [], [])
        ref = (*self.legacy_sum, self.legacy_pos)
        machine = (
            totals.legacy.num_drafts,
            totals.legacy.num_draft_tokens,
            totals.legacy.num_accepted_tokens,
            list(totals.per_position("legacy_accepted")),
        )
        if not self.divergences and tuple(ref) != machine:
            self._diverge(
                self.line,
                1,
                "internal",
                self.step,
                "the engine totals of the reference differ from the replay's per-block sums",
                None,
                _rows(ref, machine),
                [],
            )
        if self.totals_record is not None:
            line, rec = self.totals_record
            self.checked += 1
            actual = tuple(rec[f] for f in (*LEGACY_FIELDS, "num_accepted_tokens_per_pos"))
            rows = _rows(ref, actual)
            if any(e != a for _, e, a in rows):
                self._diverge(
                    line,
                    1,
                    "totals",
                    None,
                    f"the totals record ({rec['source']}) differs from the reference's"
                    " vllm-legacy totals",
                    rec,
                    rows,
                    [
                        f"sum of step_stats records: {_fmt(list(self.reported_sum))}"
                        f" per_pos {_fmt(self.reported_pos)}"
                    ],
                )
        if self.metrics_path is not None:
            self._check_metrics(ref)

    def _check_metrics(self, ref: tuple[Any, ...]) -> None:
        from .importers.prometheus import read_scrapes, spec_totals

        assert self.header is not None
        scrapes = read_scrapes([self.metrics_path or ""])
        if not scrapes:
            raise BadInput(self.metrics_path or "", 1, 1, "no Prometheus samples found")
        last = scrapes[-1]
        engine = None if self.header.engine_index is None else str(self.header.engine_index)
        got = spec_totals(last, self.k, engine=engine)
        self.checked += 1
        rows = _rows(ref, got)
        if any(e != a for _, e, a in rows):
            self._diverge(
                last.line,
                1,
                "metrics",
                None,
                f"the final Prometheus scrape ({last.path}) differs from the reference's"
                " vllm-legacy totals",
                None,
                rows,
                [f"replayed log: {self.path}"],
                path=last.path,
            )

    # -- summary ---------------------------------------------------------------------------------

    def summary(self) -> dict[str, Any]:
        assert self.engine is not None and self.header is not None
        self._fold_fast()
        totals: Counters = self.engine.totals
        d = totals.to_dict()
        legacy = d["vllm-legacy"]
        rfc = d["rfc"]
        agreement = (
            100.0 if self.checked == 0 else 100.0 * (self.checked - self.failed) / self.checked
        )
        return {
            "path": self.path,
            "engine": f"{self.header.engine} {self.header.engine_version}",
            "profile": self.header.profile,
            "scheduling": self.mode.value,
            "k": self.k,
            "records": sum(self.counts.values()),
            "records_by_kind": dict(self.counts),
            "steps": self.steps,
            "requests": self.requests,
            "checked": self.checked,
            "failed": self.failed,
            "agreement_percent": round(agreement, 2),
            "skipped_after_divergence": self.skipped,
            "open_blocks": list(self.open_blocks),
            "totals": {"vllm-legacy": legacy, "rfc": rfc},
            "metrics": {
                "vllm-legacy": legacy_metrics(totals),
                "rfc": derived_metrics(totals),
            },
            "shift": explain_shift(totals, self.shift),
        }


_FAST_REQUEST_STEP = Replayer._fast_request_step  # feed_lines inlines it only while unpatched


def _rows(expected: tuple[Any, ...], actual: tuple[Any, ...]) -> list[tuple[str, Any, Any]]:
    names = (*LEGACY_FIELDS, "num_accepted_tokens_per_pos")
    return [(n, _plain(e), _plain(a)) for n, e, a in zip(names, expected, actual, strict=True)]


def _plain(value: Any) -> Any:
    return list(value) if isinstance(value, tuple) else value


def _col(rec: Record, name: str) -> int:
    """1-based column of ``name`` in the record as the recorder writes it (compact JSON)."""
    text = json.dumps(rec, separators=(",", ":"))
    at = text.find(json.dumps(name) + ":")
    return at + 1 if at >= 0 else 1


def _count(event: Event) -> int:
    count: int = getattr(event, "num_tokens", None) or getattr(event, "num_slots", 0)
    return count


def _event_text(event: Event) -> str:
    name = type(event).__name__
    count = getattr(event, "num_tokens", getattr(event, "num_slots", None))
    rid = getattr(event, "request", None)
    step = getattr(event, "step", None)
    if count is not None:
        return f"{name}({count}) for {rid!r} at step {step}"
    if rid is not None:
        return f"{name} of {rid!r} at step {step}"
    return f"{name}({step})"


# -- shift ---------------------------------------------------------------------------------------


def _ratio(num: int, den: int, offset: int = 0, if_zero: float | None = None) -> float | None:
    return if_zero if den == 0 else offset + num / den


def _num(value: float | None, digits: int = 2) -> str:
    return "n/a" if value is None else f"{value:.{digits}f}"


def explain_shift(totals: Counters, s: Shift) -> dict[str, Any]:
    """Each metric under both profiles with the counts that move it, in words."""
    lg, r = totals.legacy, totals.rfc
    drafted_terms = [
        (s.grammar_invalid, "grammar-invalid drafts now count as drafted"),
        (s.truncated, "drafts cut by the schedule now count as drafted"),
        (-s.padding, "placeholder (padding) slots no longer count as drafted"),
        (-s.stale_drafted, "drafted tokens of stale outputs no longer count"),
    ]
    delta_drafted = r.drafted - lg.num_draft_tokens
    unexplained = delta_drafted - sum(v for v, _ in drafted_terms)
    if unexplained:
        drafted_terms.append((unexplained, "unexplained (please report)"))
    step_terms = [
        (s.steps_without_slots, "steps whose drafts were all cut before scheduling now count"),
        (-s.padding_only_steps, "steps with only placeholder slots no longer count"),
        (-s.stale_steps, "stale steps no longer count"),
    ]
    delta_steps = r.spec_steps - lg.num_drafts
    unexplained_steps = delta_steps - sum(v for v, _ in step_terms)
    if unexplained_steps:
        step_terms.append((unexplained_steps, "unexplained (please report)"))
    accepted_terms = [(-s.stale_accepted, "accepted tokens of stale outputs no longer count")]

    def words(terms: list[tuple[int, str]]) -> str:
        parts = [f"{abs(v):,} {text}" for v, text in terms if v]
        return "; ".join(parts) if parts else "no change"

    rate_l = _ratio(lg.num_accepted_tokens, lg.num_draft_tokens)
    rate_r = _ratio(r.accepted, r.drafted)
    len_l = _ratio(lg.num_accepted_tokens, lg.num_drafts, 1, 1.0)
    len_r = _ratio(r.accepted, r.spec_steps, 1, 1.0)
    return {
        "drafted": {
            "vllm-legacy": lg.num_draft_tokens,
            "rfc": r.drafted,
            "why": words(drafted_terms),
        },
        "spec_steps": {"vllm-legacy": lg.num_drafts, "rfc": r.spec_steps, "why": words(step_terms)},
        "accepted": {
            "vllm-legacy": lg.num_accepted_tokens,
            "rfc": r.accepted,
            "why": words(accepted_terms),
        },
        "acceptance_rate": {
            "vllm-legacy": rate_l,
            "rfc": rate_r,
            "why": f"acceptance rate {_num(rate_l)} → {_num(rate_r)}: "
            + words(drafted_terms + accepted_terms),
        },
        "mean_acceptance_length": {
            "vllm-legacy": len_l,
            "rfc": len_r,
            "why": f"mean acceptance length {_num(len_l)} → {_num(len_r)}: "
            + words(step_terms + accepted_terms),
        },
        "terms": {
            "grammar_invalid": s.grammar_invalid,
            "truncated": s.truncated,
            "padding": s.padding,
            "stale_drafted": s.stale_drafted,
            "stale_accepted": s.stale_accepted,
            "stale_steps": s.stale_steps,
            "steps_without_slots": s.steps_without_slots,
            "padding_only_steps": s.padding_only_steps,
        },
    }


# -- entry points --------------------------------------------------------------------------------


def _counted(
    lines: Iterable[tuple[int, bytes, bool]], bar: Any
) -> Iterator[tuple[int, bytes, bool]]:
    n = 0
    for n, line in enumerate(lines, start=1):
        yield line
        if n % 4096 == 0:
            bar.update(4096)
    bar.update(n % 4096)  # the last partial batch: the bar ends at the record count


def replay_file(
    path: str,
    *,
    max_divergences: int = 1,
    metrics: str | None = None,
    check_invariants: bool = False,
    progress: bool | None = None,
    lines: Iterable[tuple[int, bytes, bool]] | None = None,
) -> ReplayResult:
    """Replay one log (``-`` = stdin). ``lines`` overrides reading ``path`` (tests, benchmarks)."""
    replayer = Replayer(
        path, max_divergences=max_divergences, check_invariants=check_invariants, metrics=metrics
    )
    bad: BadInput | None = None
    source = iter_lines(path) if lines is None else lines
    bar = None
    if progress is None:
        progress = sys.stderr.isatty()
    if progress:
        from tqdm import tqdm

        bar = tqdm(desc=path, unit=" records", unit_scale=True, file=sys.stderr, mininterval=0.5)
    if bar is not None:
        source = _counted(source, bar)
    try:
        replayer.feed_lines(source)
        replayer.finish()
    except StopReplay:
        pass
    except BadInput as exc:
        bad = exc
    except OSError as exc:
        bad = BadInput(path, max(replayer.line, 1), 1, f"cannot read: {exc.strerror or exc}")
    finally:
        if bar is not None:
            bar.close()
    if bad is not None:
        status = "bad_input"
    elif replayer.divergences:
        status = "diverge"
    else:
        status = "agree"
    summary = replayer.summary() if replayer.header is not None and bad is None else {}
    totals = replayer.engine.totals if summary and replayer.engine is not None else None
    return ReplayResult(path, status, replayer.divergences, bad, summary, replayer.notes, totals)


def render_summary(result: ReplayResult) -> str:
    """The human-readable end-of-replay report."""
    if result.bad_input is not None:
        return f"{result.bad_input}"
    s = result.summary
    out: list[str] = []
    for d in result.divergences:
        out.append(d.render())
    verdict = {"agree": "AGREE", "diverge": f"DIVERGE ({len(result.divergences)} shown)"}[
        result.status
    ]
    out.append(
        f"{result.path}: {verdict} with the {s['profile']} profile ({s['engine']},"
        f" {s['scheduling']}, k={s['k']})"
    )
    kinds = ", ".join(f"{k} {v}" for k, v in s["records_by_kind"].items() if v)
    out.append(f"  records {s['records']} ({kinds}); steps {s['steps']}; requests {s['requests']}")
    out.append(
        f"  agreement {s['agreement_percent']:.2f}% ({s['checked'] - s['failed']} of"
        f" {s['checked']} checks)"
        + (
            f"; {s['skipped_after_divergence']} records skipped after a divergence"
            if s["skipped_after_divergence"]
            else ""
        )
    )
    legacy, rfc = s["totals"]["vllm-legacy"], s["totals"]["rfc"]
    out.append("  totals                 vllm-legacy      rfc")
    out.append(f"    spec steps           {legacy['spec_steps']:>11}  {rfc['spec_steps']:>7}")
    out.append(f"    drafted              {legacy['drafted']:>11}  {rfc['drafted']:>7}")
    out.append(f"    verified             {'-':>11}  {rfc['verified']:>7}")
    out.append(f"    accepted             {legacy['accepted']:>11}  {rfc['accepted']:>7}")
    out.append(
        f"    accepted per pos     {_fmt(legacy['per_position']['accepted'])}"
        f"  {_fmt(rfc['per_position']['accepted'])}"
    )
    mlg, mrfc = s["metrics"]["vllm-legacy"], s["metrics"]["rfc"]
    out.append("  metrics                vllm-legacy      rfc")
    out.append(
        f"    acceptance rate      {_num(mlg['acceptance_rate'], 3):>11}"
        f"  {_num(mrfc['acceptance_rate'], 3):>7}"
    )
    out.append(
        f"    mean accept. length  {_num(mlg['mean_acceptance_length'], 3):>11}"
        f"  {_num(mrfc['mean_acceptance_length'], 3):>7}"
    )
    out.append(f"    draft quality        {'-':>11}  {_num(mrfc['draft_quality'], 3):>7}")
    out.append(f"    verification rate    {'-':>11}  {_num(mrfc['verification_rate'], 3):>7}")
    per_l = ", ".join(_num(v, 3) for v in mlg["per_position_acceptance_per_step"])
    per_r = ", ".join(_num(v, 3) for v in mrfc["per_position_acceptance_per_step"])
    out.append(f"    per-position rate    [{per_l}]  [{per_r}]")
    out.append("  shift legacy → rfc:")
    for key in ("acceptance_rate", "mean_acceptance_length"):
        out.append(f"    {s['shift'][key]['why']}")
    for key in ("drafted", "spec_steps"):
        item = s["shift"][key]
        out.append(f"    {key} {item['vllm-legacy']} → {item['rfc']}: {item['why']}")
    if s["open_blocks"]:
        out.append(f"  blocks left open at end: {len(s['open_blocks'])}")
        out.extend(f"    {b}" for b in s["open_blocks"][:20])
    for note in result.notes[:20]:
        out.append(f"  note: {note}")
    if len(result.notes) > 20:
        out.append(f"  note: ... {len(result.notes) - 20} more")
    return "\n".join(out)


def result_json(result: ReplayResult) -> dict[str, Any]:
    return {
        "path": result.path,
        "status": result.status,
        "exit_code": result.exit_code,
        "bad_input": None if result.bad_input is None else str(result.bad_input),
        "divergences": [d.to_dict() for d in result.divergences],
        "notes": result.notes,
        "summary": result.summary,
    }
