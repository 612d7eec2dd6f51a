"""What the two generators share: the header and totals records, vLLM's count of one block,
the engine's handling of a scheduled block, the close of a step, and the NDJSON writer.

Counts follow vLLM 0.32's ``make_spec_decoding_stats`` (a block counts when it had scheduled
slots and its output was applied; drafted = scheduled - invalid; accepted = max(sampled - 1, 0)),
computed here independently of the reference, so a replay of a synthetic log cross-checks the
reference against a second transcription of vLLM's rule.
"""

from __future__ import annotations

import json
import random
from collections.abc import Iterable, Iterator
from typing import Any

from ..steplog import schema, writer
from ..steplog.schema import Record as Record


def header(
    *,
    k: int,
    mode: str,
    structured: bool,
    av: bool,
    drop_stale_output: bool,
    config: dict[str, Any],
    engine_version: str = "0.32.0",
) -> Record:
    """The header record of a synthetic vLLM log (EAGLE drafts, xgrammar when structured)."""
    return schema.header(
        engine="vllm",
        engine_version=engine_version,
        num_speculative_tokens=k,
        scheduling=mode,
        spec_method="eagle",
        structured_outputs_backend="xgrammar" if structured else None,
        adaptive_verification=av,
        drop_stale_output=drop_stale_output,
        config={"synthetic": True, **config},
    )


def totals_record(totals: list[int], totals_pos: list[int]) -> Record:
    """The closing totals record: the counts summed over every ``step_stats`` record."""
    return writer.totals_record("synthetic", totals[:3], totals_pos)


def count_block(rec: Record, stats: list[int], pos: list[int]) -> None:
    """Add an applied block to its step's counts, as vLLM counts it (only with scheduled slots)."""
    if rec["scheduled"] > 0:
        accepted = max(rec["sampled"] - 1, 0)
        stats[0] += 1
        stats[1] += rec["scheduled"] - (rec["invalid"] or 0)
        stats[2] += accepted
        for i in range(accepted):
            pos[i] += 1


def schedulable(
    sync: bool, structured: bool, proposed: int, padding: int, grammar_valid: int | None
) -> tuple[int, int]:
    """(drafts kept for the schedule, slots offered to it): sync structured proposals are cut
    by the grammar first; otherwise every draft and placeholder slot is offered."""
    kept = grammar_valid if (structured and sync and grammar_valid is not None) else proposed
    offered = kept if (structured and sync) else proposed + padding
    return kept, offered


def close_step(
    out: list[Record],
    step: int,
    stats: list[int],
    pos: list[int],
    totals: list[int],
    totals_pos: list[int],
) -> None:
    """End a generated step: its ``step_stats`` record (only when some block was counted, as
    vLLM logs it) and the step's counts added to the running totals."""
    if not stats[0]:
        return
    out.append(schema.step_stats(step, stats, pos))
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
    as its applied ``request_step`` record, computed independently of the reference."""
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
    return schema.request_step(
        step=step,
        request=rid,
        proposed=proposed,
        padding=padding,
        grammar_valid=grammar_valid,
        scheduled=scheduled,
        invalid=invalid,
        verified=verified,
        sampled=accepted + 1,
        accepted=accepted,
    )


def as_lines(records: Iterable[Record]) -> Iterator[bytes]:
    """Records as NDJSON lines the way the recorder writes them (compact separators; bytes,
    newline included)."""
    dumps = json.JSONEncoder(separators=(",", ":")).encode
    for rec in records:
        yield (dumps(rec) + "\n").encode()
