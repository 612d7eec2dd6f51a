"""`spectally export aiperf LOG`: per-request acceptance as AIPerf's `SpecDecodeAcceptanceRecord`.

AIPerf (NVIDIA's benchmark client, PyPI ``aiperf``; 0.13.0 read here) builds one record per
request from vLLM's per-request payload (SPEC REP-3). This module builds the same record from a
step log's replay, so a benchmark run and a production log are compared with one tool.

Fields, from the request's counters when it ended (``profile`` rfc: the RFC's counters;
vllm-legacy: the engine's own, what vLLM <= 0.34 reports; each record's ``profile`` names the
counting profile its counts are under: ``rfc``, or the log's own, e.g. ``vllm-legacy``,
``vllm-0.34``, ``llama.cpp``):

- ``num_draft_tokens``: drafted (legacy: ``num_draft_tokens``, L2);
- ``num_accepted_draft_tokens``: accepted, bonus excluded;
- ``num_spec_steps``: spec steps (legacy: ``num_drafts``);
- ``acceptance_histogram``: ``{j: steps that accepted exactly j}`` from the per-position
  accepted prefix counts (REP-3: ``h_0 = spec_steps - accepted_0``, ``h_j = accepted_{j-1} -
  accepted_j``), zero buckets dropped as AIPerf's vLLM adapter does;
- ``mean_acceptance_length``: M4, ``draft_acceptance_rate``: M1 (the reference's functions);
- ``num_spec_tokens``: k; ``engine``: the header's engine;
- extra fields (AIPerf's model allows them): ``request_id``, ``status``, ``profile`` and, for
  rfc, ``num_verified_draft_tokens``.

Requests without a spec step: vLLM <= 0.34 still sends a payload (every count 0, acceptance
rate 0.0, mean length 1.0) and AIPerf turns it into a record, so the vllm-legacy export writes
the same. Under rfc, M1 is undefined there (never 0, SPEC section 6) and AIPerf's
``draft_acceptance_rate`` must be a finite float, so the request gets no record and is counted
in `Export.skipped` (no spec step is the same as nothing drafted: drafted_0 = spec_steps).
The vllm-legacy export equals vLLM's own payload field for field
(tests/observe/test_observe_aiperf.py checks it against the payloads a real `vllm serve` run
returned).

Where AIPerf's "Accepted per Verified" differs from the RFC's verified: AIPerf computes
``(accepted + steps) / (drafted + steps)``, calling ``drafted + steps`` "verified tokens (proposed
drafts plus one bonus per step)": every proposed draft counts as verified, plus the bonus
position. The RFC's verified counts only the drafts the target actually scored: not the ones
cut by the schedule, by the grammar before the forward pass, or skipped by adaptive
verification, and never the bonus token. So AIPerf's ratio is neither M2 (accepted /
verified) nor M3 (verified / drafted); it equals ``(accepted + steps) / (verified + steps)``
only when nothing was cut (verified = drafted), and it is never below ``1 / (1 + k)`` even for
a drafter that is always wrong.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from spectally.reference.counters import Counters
from spectally.reference.metrics import acceptance_rate, mean_acceptance_length

from ..steplog.records import BadInput
from .timeline import RequestCounts, replay_timeline

PROFILES = ("rfc", "vllm-legacy")


@dataclass
class Export:
    records: list[dict[str, Any]] = field(default_factory=list)
    skipped: int = 0  # rfc: requests without a spec step (M1 undefined)
    profile: str = "rfc"  # the profile the records' counts are under (their "profile")
    # The log ends before its totals record: why, as file:line: reason (None: complete). The
    # records are still written (what was present agreed); the command says so and exits 3.
    incomplete: str | None = None


def histogram(spec_steps: int, accepted_prefix: list[int]) -> dict[int, int]:
    """REP-3's acceptance histogram from per-position accepted prefix counts, sparse."""
    k = len(accepted_prefix)
    at = [spec_steps, *accepted_prefix, 0]  # at[j]: steps that accepted at least j
    hist = {j: at[j] - at[j + 1] for j in range(k + 1)}
    return {j: n for j, n in hist.items() if n}


def record(
    rc: RequestCounts, profile: str, engine: str, own: str = "vllm-legacy"
) -> dict[str, Any] | None:
    """One request's AIPerf record, or None when AIPerf would have none (module docstring);
    ``own``: the profile the engine's own counters are under, the label of a non-rfc record."""
    c: Counters = rc.counters
    if profile == "rfc":
        t = c.rfc
        drafted, accepted, steps = t.drafted, t.accepted, t.spec_steps
        prefix = list(c.per_position("accepted"))
        rate = acceptance_rate(t).value()
        length = mean_acceptance_length(t).value()
    else:
        lg = c.legacy
        drafted, accepted, steps = lg.num_draft_tokens, lg.num_accepted_tokens, lg.num_drafts
        prefix = list(c.per_position("legacy_accepted"))
        rate = accepted / drafted if drafted else 0.0  # vLLM's value with no draft
        length = 1 + accepted / steps if steps else 1.0
    if rate is None or length is None:
        return None
    out: dict[str, Any] = {
        "engine": engine,
        "mean_acceptance_length": length,
        "draft_acceptance_rate": rate,
        "acceptance_histogram": histogram(steps, prefix),
        "num_accepted_draft_tokens": accepted,
        "num_draft_tokens": drafted,
        "num_spec_steps": steps,
        "num_spec_tokens": c.k,
        "request_id": rc.request,
        "status": rc.status,
        "profile": profile if profile == "rfc" else own,
    }
    if profile == "rfc":
        out["num_verified_draft_tokens"] = c.rfc.verified
    return out


def export(
    path: str, profile: str = "rfc", engine: str | None = None, force_profile: str | None = None
) -> Export:
    """Every request of a step log, as AIPerf records labelled with the header's engine
    (``engine`` overrides it), replayed under its header's profile or ``force_profile``
    (--force-profile). `BadInput` for a log the replay refuses, and for a log that diverges
    from the reference: its counts are not the spec's, so nothing is exported. A log without
    its totals record is exported with `Export.incomplete` saying so."""
    timeline = replay_timeline(path, force_profile=force_profile, max_points=2)
    result = Export(profile=profile if profile == "rfc" else timeline.profile)
    if timeline.divergence is not None:
        raise BadInput(
            path,
            1,
            1,
            f"the log diverges from the reference ({timeline.divergence}); run `spectally"
            " replay` on it: nothing exported",
        )
    if timeline.incomplete is not None:
        active = sum(rc.status == "active" for rc in timeline.requests)
        result.incomplete = (
            f"{timeline.incomplete}: incomplete ({active} requests still active there: the"
            " record of one holds its counts so far)"
        )
    for rc in timeline.requests:
        rec = record(rc, profile, engine or timeline.engine_name, timeline.profile)
        if rec is None:
            result.skipped += 1
        else:
            result.records.append(rec)
    return result


def jsonl(records: list[dict[str, Any]]) -> Iterator[str]:
    for rec in records:
        yield json.dumps(rec, separators=(",", ":"))


def validate(records: list[dict[str, Any]]) -> None:
    """Validate with AIPerf's own model (needs spectally[aiperf]); raises its ValidationError."""
    from aiperf.common.models.spec_decode_models import SpecDecodeAcceptanceRecord

    for rec in records:
        SpecDecodeAcceptanceRecord.model_validate(rec)
