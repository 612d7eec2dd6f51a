"""A high-variety synthetic step log: what a busy production replica writes.

`steady` writes a log with few distinct block shapes (k = 4, full proposals);
this one is built to defeat anything that relies on repeated shapes: k = 8, adaptive
verification, 35 % structured requests whose grammar cuts proposals at random, placeholder
padding (uniform-length batches and skipped drafting), token-budget cuts, 64-256 concurrent
requests drifting over time, uuid-like ids, requests of very different lengths that finish or
are aborted, with the block in flight written after the end (async) or the dropped proposal
(sync), and preemptions under memory pressure (``preempt_share``: the chance per step of a
burst of 1-3 preemptions; a preempted request pauses for 2-12 steps, then resumes): sync
writes the preempt record and, half the time, the dropped proposal (``discarded_preempted``,
nothing scheduled); async writes the preempt record and the block in flight, whose stale
output is delivered (``applied``, counted) unless the preemption drops it
(``drop_stale_output`` on the record, else the header's default: ``discarded_stale``, not
counted).

As in `steady`, ``step_stats`` and ``totals`` are counted as vLLM 0.32 counts them
(`common.count_block`), independently of the reference. Memory: the running requests only.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from spectally.reference.machine import Outcome

from ..steplog import schema
from ..steplog.schema import APPLIED, Event
from .common import (
    Record,
    as_lines,
    close_step,
    count_block,
    engine_block,
    header,
    schedulable,
    totals_record,
)

DISCARDED_FINISHED = Outcome.DISCARDED_FINISHED.value
DISCARDED_ABORTED = Outcome.DISCARDED_ABORTED.value


@dataclass(frozen=True)
class _Shape:
    """What every block of the log shares."""

    k: int
    mode: str
    av: bool
    drop_stale_output: bool
    abort_share: float


Active = dict[str, tuple[bool, float]]  # id -> (structured, chance to end per step)


def generate(
    n_records: int,
    *,
    k: int = 8,
    mode: str = "async",
    av: bool = True,
    structured_share: float = 0.35,
    min_batch: int = 64,
    max_batch: int = 256,
    abort_share: float = 0.1,
    preempt_share: float = 0.0,
    drop_stale_output: bool = False,
    seed: int = 0,
) -> Iterator[Record]:
    """About ``n_records`` records (the last step is completed, then the totals record)."""
    rng = random.Random(seed)
    yield header(
        k=k,
        mode=mode,
        structured=structured_share > 0,
        av=av,
        drop_stale_output=drop_stale_output,
        config={"generator": "spectally.engine_bridge.synth.varied"},
    )
    shape = _Shape(k, mode, av, drop_stale_output, abort_share)
    emitted = 1
    totals = [0, 0, 0]
    totals_pos = [0] * k
    active: Active = {}
    target = float(rng.randint(min_batch, max_batch))
    step = 0
    in_flight: list[Record] = []
    paused: dict[str, int] = {}  # preempted request -> the step it resumes at
    while emitted < n_records:
        step += 1
        out: list[Record] = in_flight
        target = min(max(target + rng.gauss(0, 4), min_batch), max_batch)  # drifting load
        while len(active) < target:
            rid = f"cmpl-{rng.getrandbits(128):032x}"
            structured = rng.random() < structured_share
            active[rid] = (structured, 1.0 / rng.choice((3, 10, 40, 150, 600)))
            out.append(schema.request_event(step, rid, "add", structured=structured))
        stats, pos, ended = _step(rng, step, shape, active, paused, preempt_share, out)
        for rid, event in ended:
            reason = rng.choice(("stop", "length", "eos")) if event == "finish" else None
            out.append(schema.request_event(step, rid, event, reason=reason))
        close_step(out, step, stats, pos, totals, totals_pos)
        in_flight = _after_end(rng, step, shape, active, ended)
        yield from out
        emitted += len(out)
    yield from in_flight
    yield totals_record(totals, totals_pos)


def _step(
    rng: random.Random,
    step: int,
    shape: _Shape,
    active: Active,
    paused: dict[str, int],
    preempt_share: float,
    out: list[Record],
) -> tuple[list[int], list[int], list[tuple[str, Event]]]:
    """One step's blocks of the running requests, appended to ``out``: a burst of
    preemptions under memory pressure, a token budget that may cut the step; the step's
    counts (``step_stats``, per position) and the requests that end after it."""
    k, mode, av = shape.k, shape.mode, shape.av
    stats = [0, 0, 0]
    pos = [0] * k
    ended: list[tuple[str, Event]] = []
    budget_cut = rng.random() < 0.1  # a token budget that cuts this step's blocks
    preempt: set[str] = set()
    if preempt_share and rng.random() < preempt_share:  # memory pressure: a burst
        running = [rid for rid in active if rid not in paused]
        preempt = set(rng.sample(running, min(len(running), rng.randint(1, 3))))
    for rid, (structured, end_chance) in active.items():
        if paused.get(rid, 0) > step:
            continue
        paused.pop(rid, None)
        if rid in preempt:
            out.extend(_preempted(rng, step, rid, structured, k, mode, av, shape.drop_stale_output))
            paused[rid] = step + rng.randint(2, 12)
            rec = out[-1]
            if rec["record"] != "request_step" or rec["outcome"] != APPLIED:
                continue
        elif rng.random() < 0.03:
            continue  # no draft block this step
        else:
            rec = _block(rng, step, rid, structured, k, mode, av, budget_cut)
            out.append(rec)
        count_block(rec, stats, pos)
        if rid not in paused and rng.random() < end_chance:
            ended.append((rid, "abort" if rng.random() < shape.abort_share else "finish"))
    return stats, pos, ended


def _after_end(
    rng: random.Random,
    step: int,
    shape: _Shape,
    active: Active,
    ended: list[tuple[str, Event]],
) -> list[Record]:
    """The ended requests leave ``active``; the blocks of theirs written after the end (next
    step): async, the block in flight; sync, now and then a proposal never scheduled."""
    in_flight: list[Record] = []
    for rid, event in ended:
        structured, _ = active.pop(rid)
        outcome = DISCARDED_FINISHED if event == "finish" else DISCARDED_ABORTED
        k, mode, av = shape.k, shape.mode, shape.av
        if mode == "async" and rng.random() < 0.9:  # the next block was in flight
            rec = _block(rng, step + 1, rid, structured, k, mode, av, False)
        elif mode == "sync" and rng.random() < 0.3:  # a proposal never scheduled
            rec = _block(rng, step + 1, rid, structured, k, mode, av, False)
            rec.update(scheduled=0, verified=None, invalid=None)
        else:
            continue
        rec.update(outcome=outcome, sampled=0, accepted=0)
        in_flight.append(rec)
    return in_flight


def _preempted(
    rng: random.Random,
    step: int,
    rid: str,
    structured: bool,
    k: int,
    mode: str,
    av: bool,
    default_drop: bool,
) -> list[Record]:
    """A preemption of a running request and its block of this step, as vLLM writes them."""
    r = rng.random()
    drop = default_drop
    said: bool | None = None  # the record's own drop_stale_output, when it has one
    if r < 0.3:
        drop = said = r < 0.15
    out = [schema.request_event(step, rid, "preempt", drop_stale_output=said)]
    rec = _block(rng, step, rid, structured, k, mode, av, False)
    if mode == "sync":
        if rng.random() < 0.5:  # the proposal, never scheduled
            rec.update(scheduled=0, verified=None, invalid=None, sampled=0, accepted=0)
            rec["outcome"] = Outcome.DISCARDED_PREEMPTED.value
            out.append(rec)
    elif drop:  # the stale output in flight, dropped
        rec["outcome"] = Outcome.DISCARDED_STALE.value
        out.append(rec)
    else:  # the stale output in flight, delivered: an ordinary applied block
        out.append(rec)
    return out


def _block(
    rng: random.Random,
    step: int,
    rid: str,
    structured: bool,
    k: int,
    mode: str,
    av: bool,
    budget_cut: bool,
) -> Record:
    r = rng.random()
    if r < 0.05:
        proposed, padding = 0, k  # skipped drafting: placeholders only
    else:
        proposed = k if r < 0.55 else rng.randint(1, k)
        padding = k - proposed if proposed < k and rng.random() < 0.3 else 0  # uniform batch
    grammar_valid: int | None = None
    if structured:
        grammar_valid = proposed if rng.random() < 0.5 else rng.randint(0, proposed)
    sync = mode == "sync"
    kept, offered = schedulable(sync, structured, proposed, padding, grammar_valid)
    scheduled = rng.randint(0, offered) if budget_cut and rng.random() < 0.5 else offered
    scheduled_drafts = min(kept, scheduled)
    return engine_block(
        rng,
        step=step,
        rid=rid,
        sync=sync,
        structured=structured,
        proposed=proposed,
        padding=padding,
        grammar_valid=grammar_valid,
        scheduled=scheduled,
        scheduled_drafts=scheduled_drafts,
        av=av,
        p_full_verify=0.6,
        p_accept=0.75,
    )


def lines(n_records: int, **kwargs: Any) -> Iterator[bytes]:
    """The records of `generate` as NDJSON lines."""
    return as_lines(generate(n_records, **kwargs))
