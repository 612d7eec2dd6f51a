"""The reporting surfaces of SPEC.md section 7, rendered from an engine's counters: the proposed
Prometheus samples (REP-1), the periodic ``SpecDecoding metrics:`` log line, and the
per-request payload. A trace vector's ``expect.surfaces`` is compared with what these write.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from spectally.reference.counters import Counters
from spectally.reference.machine import Engine
from spectally.reference.metrics import derived_metrics

PROMETHEUS_COUNTERS: dict[str, Callable[[Counters], int]] = {
    "vllm:spec_decode_num_spec_steps_total": lambda c: c.rfc.spec_steps,
    "vllm:spec_decode_num_drafts_total": lambda c: c.rfc.spec_steps,
    "vllm:spec_decode_num_draft_tokens_total": lambda c: c.rfc.drafted,
    "vllm:spec_decode_num_verified_draft_tokens_total": lambda c: c.rfc.verified,
    "vllm:spec_decode_num_accepted_tokens_total": lambda c: c.rfc.accepted,
    "vllm:spec_decode_num_padding_slots_total": lambda c: c.rfc.padding,
    "vllm:spec_decode_num_discarded_steps_total": lambda c: c.rfc.discarded_steps,
    "vllm:spec_decode_num_discarded_draft_tokens_total": lambda c: c.rfc.discarded_drafted,
    "vllm:spec_decode_num_discarded_verified_tokens_total": lambda c: c.rfc.discarded_verified,
}
"""Proposed scalar counters (label ``engine`` omitted here; SPEC.md REP-1)."""

PROMETHEUS_LABELLED: dict[str, tuple[str, Callable[[Counters], Iterable[tuple[str, int]]]]] = {
    "vllm:spec_decode_num_draft_tokens_by_fate_total": (
        "fate",
        lambda c: c.fates_dict().items(),
    ),
    "vllm:spec_decode_num_draft_tokens_per_pos_total": (
        "position",
        lambda c: ((str(i), v) for i, v in enumerate(c.per_position("drafted"))),
    ),
    "vllm:spec_decode_num_verified_draft_tokens_per_pos_total": (
        "position",
        lambda c: ((str(i), v) for i, v in enumerate(c.per_position("verified"))),
    ),
    "vllm:spec_decode_num_accepted_tokens_per_pos_total": (
        "position",
        lambda c: ((str(i), v) for i, v in enumerate(c.per_position("accepted"))),
    ),
}
"""Proposed labelled counters: name -> (label, samples)."""


def prometheus_samples(c: Counters, engine: str) -> dict[str, int]:
    """Exposition-format sample keys (``name{engine="0",...}``) -> value, model label omitted."""
    out: dict[str, int] = {}
    for name, get in PROMETHEUS_COUNTERS.items():
        out[f'{name}{{engine="{engine}"}}'] = get(c)
    for name, (label, samples) in PROMETHEUS_LABELLED.items():
        for value_label, value in samples(c):
            out[f'{name}{{engine="{engine}",{label}="{value_label}"}}'] = value
    return out


def log_line(c: Counters, engine: str, interval_s: float) -> str:
    """The periodic log line (SPEC.md REP-2) for one engine and one interval's counter deltas.

    vLLM 0.32's fields keep their order and meaning (per-position rate is M6, accepted_i / spec
    steps); the engine prefix comes first and the new fields are appended, so parsers of the
    old line keep working. Undefined ratios print as ``n/a``.
    """
    m = derived_metrics(c)
    per_step = m["per_position_acceptance_per_step"]
    assert isinstance(per_step, list)
    r = c.rfc
    return (
        f"Engine {engine}: SpecDecoding metrics: "
        f"Mean acceptance length: {m['mean_acceptance_length']:.2f}, "
        f"Accepted throughput: {r.accepted / interval_s:.2f} tokens/s, "
        f"Drafted throughput: {r.drafted / interval_s:.2f} tokens/s, "
        f"Accepted: {r.accepted} tokens, Drafted: {r.drafted} tokens, "
        f"Per-position acceptance rate: {', '.join(_fixed(v, '.3f') for v in per_step)}, "
        f"Avg Draft acceptance rate: {_percent(m['acceptance_rate'])}, "
        f"Verified throughput: {r.verified / interval_s:.2f} tokens/s, "
        f"Verified: {r.verified} tokens, Spec steps: {r.spec_steps}, "
        f"Draft quality: {_percent(m['draft_quality'])}"
    )


def _fixed(value: object, spec: str) -> str:
    return "n/a" if value is None else format(value, spec)


def _percent(value: object) -> str:
    return "n/a" if value is None else f"{100 * float(value):.1f}%"  # type: ignore[arg-type]


def request_payload(c: Counters) -> dict[str, Any]:
    """The per-request payload (SPEC.md REP-3), sent when the request finishes."""
    r = c.rfc
    accepted_pos = c.per_position("accepted")
    # histogram[j] = spec steps that accepted exactly j drafts, from the prefix counts.
    histogram = [r.spec_steps - (accepted_pos[0] if accepted_pos else 0)]
    for j in range(1, c.k + 1):
        after = accepted_pos[j] if j < c.k else 0
        histogram.append(accepted_pos[j - 1] - after)
    m = derived_metrics(c)
    return {
        "num_spec_steps": r.spec_steps,
        "num_draft_tokens": r.drafted,
        "num_verified_draft_tokens": r.verified,
        "num_accepted_draft_tokens": r.accepted,
        "num_padding_slots": r.padding,
        "acceptance_histogram": histogram,
        "mean_acceptance_length": m["mean_acceptance_length"],
        "draft_acceptance_rate": m["acceptance_rate"],
        "draft_quality": m["draft_quality"],
        "num_spec_tokens": c.k,
    }


def surfaces(
    engines: dict[str, Engine], requests: dict[str, Counters], interval_s: float, k: int
) -> dict[str, Any]:
    prom: dict[str, int] = {}
    lines = []
    for label, engine in engines.items():
        prom.update(prometheus_samples(engine.totals, label))
        lines.append(log_line(engine.totals, label, interval_s))
    return {
        "prometheus": prom,
        "log_line": lines[0] if len(lines) == 1 else lines,
        "request_payload": {rid: request_payload(c) for rid, c in requests.items()},
    }
