"""Synthetic step logs with realistic shape, for benchmarks, tests and the bundled example.

`generate` streams records (constant memory: only the running batch is kept) of a vLLM 0.32
engine with ``batch`` concurrent requests. Each step every running request drafts a block;
structured requests see the grammar cut it; a token budget sometimes truncates it; AV (when on)
verifies a prefix; the target accepts a prefix of what is eligible. Requests finish at random,
and in async mode the block already in flight is written after the finish as
``discarded_finished``, as the recorder does.

``step_stats`` and ``totals`` are counted as vLLM 0.32 counts them (`common.count_block`),
independently of the reference.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from typing import Any

from spectally.reference.machine import Outcome

from ..steplog import schema
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


def generate(
    n_records: int,
    *,
    k: int = 4,
    mode: str = "async",
    batch: int = 32,
    structured_share: float = 0.3,
    av: bool = False,
    mean_steps: int = 40,
    seed: int = 0,
    engine_version: str = "0.32.0",
    config: dict[str, Any] | None = None,
) -> Iterator[Record]:
    """About ``n_records`` records (the last step is completed, then the totals record)."""
    rng = random.Random(seed)
    yield header(
        k=k,
        mode=mode,
        structured=structured_share > 0,
        av=av,
        drop_stale_output=False,
        config={"generator": "spectally.engine_bridge.synth", "seed": seed, **(config or {})},
        engine_version=engine_version,
    )
    emitted = 1
    totals = [0, 0, 0]
    totals_pos = [0] * k
    active: dict[str, bool] = {}  # request id -> structured
    next_id = 0
    step = 0
    in_flight: list[Record] = []  # blocks of finished requests, already scheduled for step + 1
    while emitted < n_records:
        step += 1
        out: list[Record] = in_flight
        in_flight = []
        while len(active) < batch:
            rid = f"req-{next_id}"
            next_id += 1
            active[rid] = rng.random() < structured_share
            out.append(schema.request_event(step, rid, "add", structured=active[rid]))
        stats = [0, 0, 0]
        pos = [0] * k
        finished: list[str] = []
        for rid, structured in active.items():
            rec = _block(rng, step, rid, structured, k, mode, av)
            out.append(rec)
            count_block(rec, stats, pos)
            if rng.random() < 1.0 / mean_steps:
                finished.append(rid)
        for rid in finished:
            out.append(schema.request_event(step, rid, "finish", reason="stop"))
        close_step(out, step, stats, pos, totals, totals_pos)
        for rid in finished:
            structured = active.pop(rid)
            if mode == "async":  # the next block was already in flight: discarded, uncounted
                rec = _block(rng, step + 1, rid, structured, k, mode, av)
                rec["outcome"] = Outcome.DISCARDED_FINISHED.value
                rec["sampled"] = rec["accepted"] = 0
                in_flight.append(rec)
        yield from out
        emitted += len(out)
    yield from in_flight
    yield totals_record(totals, totals_pos)


def _block(
    rng: random.Random, step: int, rid: str, structured: bool, k: int, mode: str, av: bool
) -> Record:
    proposed = k if rng.random() < 0.8 else rng.randint(1, k)
    padding = 0
    grammar_valid: int | None = None
    if structured:
        grammar_valid = proposed if rng.random() < 0.6 else rng.randint(0, proposed)
    kept, offered = schedulable(mode == "sync", structured, proposed, padding, grammar_valid)
    scheduled = offered if rng.random() < 0.95 else rng.randint(0, offered)
    scheduled_drafts = min(kept, scheduled)
    return engine_block(
        rng,
        step=step,
        rid=rid,
        sync=mode == "sync",
        structured=structured,
        proposed=proposed,
        padding=padding,
        grammar_valid=grammar_valid,
        scheduled=scheduled,
        scheduled_drafts=scheduled_drafts,
        av=av,
        p_full_verify=0.7,
        p_accept=0.7,
    )


def lines(n_records: int, **kwargs: Any) -> Iterator[bytes]:
    """The records of `generate` as NDJSON lines."""
    return as_lines(generate(n_records, **kwargs))
