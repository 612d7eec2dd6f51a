"""Exporter families: which engine a Prometheus name comes from, counter or gauge, and what its
drafted count divides by. The one table `spectally lint` and `spectally rules` read.

The *denominator* of a family is what its drafted count means:

- ``proposed``: the drafts the drafter actually proposed (vLLM, llama.cpp; TensorRT-LLM and
  TokenSpeed too, which export no Prometheus spec-decode counter). accepted / drafted is M1.
- ``configured``: the configured draft length times the steps (SGLang 0.5.23, LMDeploy 0.18,
  read in source). accepted / drafted then falls arithmetically as the draft budget rises and
  ranks budgets wrongly; it is not M1. LMDeploy exports it under vLLM-shaped names
  (``lmdeploy:spec_decode_num_draft_tokens_total``), SGLang only as interval gauges.

vLLM served through Ray Serve exports every ``vllm:X`` as ``ray_vllm_X`` (Ray's metric names
take a ``ray_`` prefix and no colon); `canonical` maps such a name back, so every check that
knows vLLM's names knows Ray's.
"""

from __future__ import annotations

from dataclasses import dataclass

from .schemes import GAUGES, SCHEMES, V0_COUNTERS, Scheme

PROPOSED = "proposed"
CONFIGURED = "configured"
COUNTER = "counter"
GAUGE = "gauge"

RAY_PREFIX = "ray_vllm_"
VLLM_PREFIX = "vllm:"


@dataclass(frozen=True)
class Family:
    name: str
    engine: str
    denominator: str  # PROPOSED | CONFIGURED


@dataclass(frozen=True)
class Series:
    """One exported name: its family, the quantity it carries and whether it is a counter."""

    name: str
    family: str
    quantity: str  # drafted | accepted | spec_steps | accepted_pos | ... | rate | mean_length
    kind: str  # COUNTER | GAUGE


FAMILIES = {
    f.name: f
    for f in (
        Family("vllm", "vLLM (and vllm-ascend)", PROPOSED),
        Family("ray-vllm", "vLLM served through Ray Serve (ray_vllm_ names)", PROPOSED),
        Family("llamacpp", "llama.cpp server", PROPOSED),
        Family("lmdeploy", "LMDeploy 0.18", CONFIGURED),
        Family("sglang", "SGLang 0.5.23", CONFIGURED),
    )
}

_L = "lmdeploy:spec_decode_"
_C = "llamacpp:spec_decode_"
OTHER_SERIES: tuple[Series, ...] = (
    # LMDeploy's PrometheusStatLogger: num_draft_tokens is num_spec_tokens per draft.
    Series(_L + "num_drafts_total", "lmdeploy", "spec_steps", COUNTER),
    Series(_L + "num_draft_tokens_total", "lmdeploy", "drafted", COUNTER),
    Series(_L + "num_accepted_tokens_total", "lmdeploy", "accepted", COUNTER),
    Series(_L + "num_accepted_tokens_per_pos_total", "lmdeploy", "accepted_pos", COUNTER),
    Series(_L + "mean_accept_rate", "lmdeploy", "rate", GAUGE),
    Series(_L + "mean_accept_length", "lmdeploy", "mean_length", GAUGE),
    # SGLang's scheduler metrics: values of the last logging interval, set as gauges.
    Series("sglang:spec_accept_rate", "sglang", "rate", GAUGE),
    Series("sglang:spec_accept_length", "sglang", "mean_length", GAUGE),
    # llama-server's /metrics (engine_bridge/llamacpp/promtext.py), and the n_drafted names
    # of llama.cpp builds that export those.
    Series(_C + "num_drafts_total", "llamacpp", "spec_steps", COUNTER),
    Series(_C + "num_draft_tokens_total", "llamacpp", "drafted", COUNTER),
    Series(_C + "num_accepted_tokens_total", "llamacpp", "accepted", COUNTER),
    Series(_C + "num_accepted_tokens_per_pos_total", "llamacpp", "accepted_pos", COUNTER),
    Series("llamacpp:n_drafted_total", "llamacpp", "drafted", COUNTER),
    Series("llamacpp:n_drafted_accepted_total", "llamacpp", "accepted", COUNTER),
)


def _vllm_series() -> list[Series]:
    out: dict[str, Series] = {}
    for scheme in SCHEMES.values():
        if not scheme.drafted.startswith(VLLM_PREFIX):
            continue  # the backport's spectally: names are its own, below
        for quantity, name in scheme.counters().items():
            out.setdefault(name, Series(name, "vllm", quantity, COUNTER))
    v0 = {"accepted_tokens": "accepted", "draft_tokens": "drafted", "emitted_tokens": "emitted"}
    for name in V0_COUNTERS:
        quantity = v0[name.removeprefix(VLLM_PREFIX + "spec_decode_num_").removesuffix("_total")]
        out.setdefault(name, Series(name, "vllm", quantity, COUNTER))
    out[VLLM_PREFIX + "spec_decode_num_drafts_total"] = Series(
        VLLM_PREFIX + "spec_decode_num_drafts_total", "vllm", "spec_steps", COUNTER
    )
    for name in GAUGES:
        if name.startswith(VLLM_PREFIX):
            out[name] = Series(name, "vllm", "rate", GAUGE)
    return sorted(out.values(), key=lambda s: s.name)


def ray_name(name: str) -> str:
    """The name Ray Serve exports a vLLM name under."""
    return RAY_PREFIX + name.removeprefix(VLLM_PREFIX)


def canonical(name: str) -> str:
    """A Ray Serve name as the vLLM name it stands for; any other name unchanged."""
    return VLLM_PREFIX + name[len(RAY_PREFIX) :] if name.startswith(RAY_PREFIX) else name


_VLLM = _vllm_series()
SERIES: dict[str, Series] = {
    s.name: s
    for s in (
        *_VLLM,
        *(Series(ray_name(s.name), "ray-vllm", s.quantity, s.kind) for s in _VLLM),
        *OTHER_SERIES,
    )
}
GAUGE_NAMES = frozenset(n for n, s in SERIES.items() if s.kind == GAUGE)
CONFIGURED_DRAFTED = frozenset(
    n
    for n, s in SERIES.items()
    if s.quantity == "drafted" and FAMILIES[s.family].denominator == CONFIGURED
)
CONFIGURED_RATES = frozenset(
    n
    for n, s in SERIES.items()
    if s.quantity == "rate" and FAMILIES[s.family].denominator == CONFIGURED
)
PROPOSED_DRAFTED = frozenset(
    n
    for n, s in SERIES.items()
    if s.quantity == "drafted" and FAMILIES[s.family].denominator == PROPOSED
) | frozenset(s.drafted for s in SCHEMES.values())
ACCEPTED_ANY = frozenset(n for n, s in SERIES.items() if s.quantity == "accepted")
STEPS_ANY = frozenset(n for n, s in SERIES.items() if s.quantity == "spec_steps")


def family_of(name: str) -> Family | None:
    series = SERIES.get(name)
    return FAMILIES[series.family] if series is not None else None


def _ray(scheme: Scheme) -> Scheme:
    def r(name: str | None) -> str | None:
        return None if name is None else ray_name(name)

    return Scheme(
        f"ray-{scheme.name}",
        f"{scheme.title}, served through Ray Serve",
        drafted=ray_name(scheme.drafted),
        verified=r(scheme.verified),
        accepted=ray_name(scheme.accepted),
        spec_steps=ray_name(scheme.spec_steps),
        drafted_pos=r(scheme.drafted_pos),
        verified_pos=r(scheme.verified_pos),
        accepted_pos=ray_name(scheme.accepted_pos),
    )


def _vllm_shaped(name: str, title: str, prefix: str) -> Scheme:
    """A scheme under vLLM 0.32's names with another engine's prefix (no verified counter)."""
    return Scheme(
        name,
        title,
        drafted=prefix + "num_draft_tokens_total",
        verified=None,
        accepted=prefix + "num_accepted_tokens_total",
        spec_steps=prefix + "num_drafts_total",
        drafted_pos=None,
        verified_pos=None,
        accepted_pos=prefix + "num_accepted_tokens_per_pos_total",
    )


# Rules schemes of the other families (the vLLM ones are schemes.SCHEMES). LMDeploy's drafted
# is configured: `rules.derived` writes no acceptance rate for it.
FAMILY_SCHEMES: dict[str, Scheme] = {
    s.name: s
    for s in (
        _ray(SCHEMES["vllm"]),
        _ray(SCHEMES["rfc"]),
        _vllm_shaped("llamacpp", "llama.cpp server", _C),
        _vllm_shaped("lmdeploy", "LMDeploy 0.18 (drafted = configured k x steps)", _L),
    )
}


def denominator(scheme: Scheme) -> str:
    """What a rules scheme's drafted counter divides by: its family's denominator."""
    family = family_of(scheme.drafted)
    return family.denominator if family is not None else PROPOSED  # the backport: proposed
