"""Synthetic step logs with realistic shape, for benchmarks, tests and the bundled example.

`generate` streams records (constant memory: only the running batch is kept) of a vLLM 0.32
engine with ``batch`` concurrent requests. Each step every running request drafts a block;
structured requests see the grammar cut it; a token budget sometimes truncates it; AV (when on)
verifies a prefix; the target accepts a prefix of what is eligible. Requests finish at random,
and in async mode the block already in flight is written after the finish as
``discarded_finished``, as the recorder does.

``step_stats`` are computed here the way vLLM 0.32's ``make_spec_decoding_stats`` counts
(counted when scheduled > 0 and the output is applied; drafted = scheduled - invalid;
accepted = max(sampled - 1, 0)), independently of the reference, so a replay of a synthetic log
cross-checks the reference against a second transcription of vLLM's rule.
"""

from __future__ import annotations

import json
import random
from collections.abc import Iterable, Iterator
from typing import Any

Record = dict[str, Any]


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
    yield {
        "record": "header",
        "schema_version": 1,
        "engine": "vllm",
        "engine_version": engine_version,
        "num_speculative_tokens": k,
        "scheduling": mode,
        "spec_method": "eagle",
        "structured_outputs_backend": "xgrammar" if structured_share > 0 else None,
        "adaptive_verification": av,
        "drop_stale_output": False,
        "config": {
            "synthetic": True,
            "generator": "spectally.engine_bridge.synth",
            "seed": seed,
            **(config or {}),
        },
    }
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
            out.append(
                {
                    "record": "request",
                    "step": step,
                    "request": rid,
                    "event": "add",
                    "structured": active[rid],
                }
            )
        stats = [0, 0, 0]
        pos = [0] * k
        finished: list[str] = []
        for rid, structured in active.items():
            rec = _block(rng, step, rid, structured, k, mode, av)
            out.append(rec)
            if rec["scheduled"] > 0:
                accepted = max(rec["sampled"] - 1, 0)
                stats[0] += 1
                stats[1] += rec["scheduled"] - (rec["invalid"] or 0)
                stats[2] += accepted
                for i in range(accepted):
                    pos[i] += 1
            if rng.random() < 1.0 / mean_steps:
                finished.append(rid)
        for rid in finished:
            out.append(
                {
                    "record": "request",
                    "step": step,
                    "request": rid,
                    "event": "finish",
                    "reason": "stop",
                }
            )
        close_step(out, step, stats, pos, totals, totals_pos)
        for rid in finished:
            structured = active.pop(rid)
            if mode == "async":  # the next block was already in flight: discarded, uncounted
                rec = _block(rng, step + 1, rid, structured, k, mode, av)
                rec["outcome"] = "discarded_finished"
                rec["sampled"] = rec["accepted"] = 0
                in_flight.append(rec)
        yield from out
        emitted += len(out)
    yield from in_flight
    yield {
        "record": "totals",
        "source": "synthetic",
        "num_drafts": totals[0],
        "num_draft_tokens": totals[1],
        "num_accepted_tokens": totals[2],
        "num_accepted_tokens_per_pos": totals_pos,
    }


def schedulable(
    sync: bool, structured: bool, proposed: int, padding: int, grammar_valid: int | None
) -> tuple[int, int]:
    """(drafts kept for the schedule, slots offered to it): sync structured proposals are cut
    by the grammar first; otherwise every draft and placeholder slot is offered."""
    kept = grammar_valid if (structured and sync and grammar_valid is not None) else proposed
    offered = kept if (structured and sync) else proposed + padding
    return kept, offered


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


def close_step(
    out: list[Record],
    step: int,
    stats: list[int],
    pos: list[int],
    totals: list[int],
    totals_pos: list[int],
) -> None:
    """End a generated step: its ``step_stats`` record (only when some block was counted, as
    vLLM logs it) and the step's counts added to the running totals. Shared by both
    generators."""
    if not stats[0]:
        return
    out.append(
        {
            "record": "step_stats",
            "step": step,
            "num_drafts": stats[0],
            "num_draft_tokens": stats[1],
            "num_accepted_tokens": stats[2],
            "num_accepted_tokens_per_pos": pos,
        }
    )
    for i in range(3):
        totals[i] += stats[i]
    for i, n in enumerate(pos):
        totals_pos[i] += n


def engine_block(
    rng: random.Random,
    *,
    step: int,
    rid: str,
    sync: bool,
    structured: bool,
    proposed: int,
    padding: int,
    grammar_valid: int | None,
    scheduled: int,
    scheduled_drafts: int,
    av: bool,
    p_full_verify: float,
    p_accept: float,
) -> Record:
    """What the engine does with a scheduled block (AV cap, async grammar check, acceptance),
    as its applied ``request_step`` record, computed independently of the reference. Shared by
    the two generators (synth_varied.py draws its blocks with other odds)."""
    verified: int | None = None
    if av:
        verified = (
            scheduled_drafts if rng.random() < p_full_verify else rng.randint(0, scheduled_drafts)
        )
    in_pass = scheduled_drafts if verified is None else verified
    invalid: int | None = None
    eligible = in_pass
    if not sync and structured:
        assert grammar_valid is not None
        valid = min(scheduled_drafts, grammar_valid)
        invalid = scheduled - valid
        grammar_valid = scheduled - invalid
        eligible = min(in_pass, valid)
    accepted = 0
    while accepted < eligible and rng.random() < p_accept:
        accepted += 1
    return {
        "record": "request_step",
        "step": step,
        "request": rid,
        "proposed": proposed,
        "padding": padding,
        "grammar_valid": grammar_valid,
        "scheduled": scheduled,
        "invalid": invalid,
        "verified": verified,
        "sampled": accepted + 1,
        "accepted": accepted,
        "outcome": "applied",
    }


def as_lines(records: Iterable[Record]) -> Iterator[bytes]:
    """Records as NDJSON lines the way the recorder writes them (compact separators; bytes,
    newline included)."""
    dumps = json.JSONEncoder(separators=(",", ":")).encode
    for rec in records:
        yield (dumps(rec) + "\n").encode()


def lines(n_records: int, **kwargs: Any) -> Iterator[bytes]:
    """The records of `generate` as NDJSON lines."""
    return as_lines(generate(n_records, **kwargs))
