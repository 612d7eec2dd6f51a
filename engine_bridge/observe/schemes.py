"""The spec-decode counter names each exporter uses (SPEC.md section 7, REP-1).

A scheme maps the specification's quantities to one exporter's Prometheus names (with the
``_total`` suffix, as scraped). ``None``: the exporter has no such counter.

- ``vllm``: vLLM 0.32 - 0.34 as released (legacy semantics, SPEC.md section 8): no verified
  counter; spec steps are ``num_drafts``; only accepted is exported per position.
- ``rfc``: the names REP-1 gives a vLLM that counts by the RFC (drafted and accepted keep
  their names and take the corrected values; ``num_drafts`` stays as an alias of spec steps).
- ``backport``: the RFC counters as ``spectally.engine_bridge.vllm.recorder.backport`` publishes
  them next to a legacy vLLM's own, under the ``spectally:`` prefix; its verified counters have
  the specification's name (``FORMER_NAMES``: what older scrapes call them).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Scheme:
    name: str
    title: str
    drafted: str
    verified: str | None
    accepted: str
    spec_steps: str
    drafted_pos: str | None
    verified_pos: str | None
    accepted_pos: str

    def counters(self) -> dict[str, str]:
        """quantity -> metric name, for the counters this scheme has."""
        names = {
            "drafted": self.drafted,
            "verified": self.verified,
            "accepted": self.accepted,
            "spec_steps": self.spec_steps,
            "drafted_pos": self.drafted_pos,
            "verified_pos": self.verified_pos,
            "accepted_pos": self.accepted_pos,
        }
        return {q: n for q, n in names.items() if n is not None}


V = "vllm:spec_decode_"
S = "spectally:spec_decode_"

VLLM = Scheme(
    "vllm",
    "vLLM 0.32-0.34 (legacy counting)",
    drafted=V + "num_draft_tokens_total",
    verified=None,
    accepted=V + "num_accepted_tokens_total",
    spec_steps=V + "num_drafts_total",
    drafted_pos=None,
    verified_pos=None,
    accepted_pos=V + "num_accepted_tokens_per_pos_total",
)
RFC = Scheme(
    "rfc",
    "RFC names (SPEC REP-1)",
    drafted=V + "num_draft_tokens_total",
    verified=V + "num_verified_draft_tokens_total",
    accepted=V + "num_accepted_tokens_total",
    spec_steps=V + "num_spec_steps_total",
    drafted_pos=V + "num_draft_tokens_per_pos_total",
    verified_pos=V + "num_verified_draft_tokens_per_pos_total",
    accepted_pos=V + "num_accepted_tokens_per_pos_total",
)
BACKPORT = Scheme(
    "backport",
    "RFC counters of the spectally backport",
    drafted=S + "num_drafted_tokens_total",
    verified=S + "num_verified_draft_tokens_total",
    accepted=S + "num_accepted_tokens_total",
    spec_steps=S + "num_spec_steps_total",
    drafted_pos=S + "num_drafted_tokens_per_pos_total",
    verified_pos=S + "num_verified_draft_tokens_per_pos_total",
    accepted_pos=S + "num_accepted_tokens_per_pos_total",
)
SCHEMES = {s.name: s for s in (VLLM, RFC, BACKPORT)}
# The backport's verified counters before they took the specification's name, as scraped: the
# committed scrapes of real servers (tests/fixtures/vllm/*.prom) carry these. Former -> current.
FORMER_NAMES = {
    S + "num_verified_tokens_total": S + "num_verified_draft_tokens_total",
    S + "num_verified_tokens_per_pos_total": S + "num_verified_draft_tokens_per_pos_total",
}

# vLLM's V0 engine (up to 0.10): counters plus gauges of ratios it computed itself.
V0_COUNTERS = frozenset(
    V + n
    for n in ("num_accepted_tokens_total", "num_draft_tokens_total", "num_emitted_tokens_total")
)
# Gauges users meet next to these counters: vLLM V0's ratios, SGLang's last-interval values.
GAUGES = frozenset(
    {
        V + "draft_acceptance_rate",
        V + "efficiency",
        "sglang:spec_accept_length",
        "sglang:spec_accept_rate",
    }
)
# Which exporter generations a name belongs to; an expression whose names share none mixes them.
GENERATIONS: dict[str, frozenset[str]] = {}
for _scheme in SCHEMES.values():
    for _name in _scheme.counters().values():
        GENERATIONS[_name] = GENERATIONS.get(_name, frozenset()) | {_scheme.name}
GENERATIONS[RFC.spec_steps.replace("num_spec_steps", "num_drafts")] |= {"rfc"}  # kept alias
for _former in FORMER_NAMES:
    GENERATIONS[_former] = frozenset({"backport"})
for _name in V0_COUNTERS | {V + "draft_acceptance_rate", V + "efficiency"}:
    GENERATIONS[_name] = GENERATIONS.get(_name, frozenset()) | {"vllm-v0"}

STEP_NAMES = frozenset(s.spec_steps for s in SCHEMES.values())
ACCEPTED_NAMES = frozenset(s.accepted for s in SCHEMES.values())
DRAFTED_NAMES = frozenset(s.drafted for s in SCHEMES.values())
PER_POSITION = frozenset(
    n for s in SCHEMES.values() for n in (s.drafted_pos, s.verified_pos, s.accepted_pos) if n
)
