"""Prometheus recording and alert rules for the derived metrics (SPEC.md section 6), per scheme.

Every metric is a ratio of counter rates over ONE window and ONE label set (a window's counter
deltas are a counter state, MERGE, so M-BOUNDS holds per window). Rates are summed before they
are divided: per engine (``model_name``, ``engine``) and per model (the fleet, DP-1: merged
counters, never averaged ratios). Zero denominators follow SPEC.md section 6: M1, M2, M3, M5
and M6 are undefined (PromQL NaN, what 0/0 gives) when nothing was drafted / verified / no spec
step ran in the window; M4 is 1 with no spec step, so its rule falls back to 1 explicitly.

Record names follow Prometheus' ``level:metric:operations`` convention, e.g.
``engine:spec_decode_acceptance_rate_backport:rate5m``.

Besides vLLM's schemes (schemes.py), the exporter families of families.py whose counters a
rule can rate: vLLM served through Ray Serve (``ray-vllm``, ``ray-rfc``: the ``ray_vllm_``
names), llama.cpp and LMDeploy. LMDeploy's drafted is the configured draft length times the
steps, so no acceptance rate is written for it (only what needs no drafted count); SGLang
exports interval gauges only, which no rule can rate.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import yaml

from . import families as fam
from .schemes import SCHEMES, Scheme

LEVELS = {"engine": ("model_name", "engine"), "model_name": ("model_name",)}
DEFAULT_WINDOW = "5m"
DEFAULT_FOR = "1m"
# Every scheme a rule file can be written for; without --scheme, vLLM's three (SCHEMES).
RULE_SCHEMES: dict[str, Scheme] = {**SCHEMES, **fam.FAMILY_SCHEMES}


@dataclass(frozen=True)
class Rule:
    """One recording or alert rule, as Prometheus' rule file has it."""

    name: str
    expr: str
    alert: bool = False
    labels: tuple[tuple[str, str], ...] = ()
    annotations: tuple[tuple[str, str], ...] = ()
    duration: str | None = None

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"alert" if self.alert else "record": self.name, "expr": self.expr}
        if self.duration is not None:
            d["for"] = self.duration
        if self.labels:
            d["labels"] = dict(self.labels)
        if self.annotations:
            d["annotations"] = dict(self.annotations)
        return d


# Prometheus's duration grammar (common/model ParseDuration): unit groups in this order, each
# at most once, a bare number refused; the total in nanoseconds fits a signed 64-bit integer.
_DURATION = re.compile(
    r"(?:(\d+)y)?(?:(\d+)w)?(?:(\d+)d)?(?:(\d+)h)?(?:(\d+)m)?(?:(\d+)s)?(?:(\d+)ms)?"
)
_UNIT_MS = (365 * 86400_000, 7 * 86400_000, 86400_000, 3600_000, 60_000, 1000, 1)
_MAX_DURATION_NS = 2**63 - 1


def _duration_ms(text: str) -> int | None:
    """``text`` in milliseconds, None when it is not in the duration grammar."""
    m = _DURATION.fullmatch(text) if 0 < len(text) <= 64 else None
    if m is None:
        return None
    return sum(int(g) * unit for g, unit in zip(m.groups(), _UNIT_MS, strict=True) if g)


def duration_error(text: str) -> str | None:
    """Why ``text`` is no duration Prometheus reads (None when it is one, zero included): the
    grammar, within 64-bit nanoseconds."""
    total_ms = _duration_ms(text)
    if total_ms is None:
        return (
            f"{text!r} is not a Prometheus duration (e.g. 30s, 5m, 1h30m: units y w d h m s ms,"
            " largest first, each once)"
        )
    if total_ms * 1_000_000 > _MAX_DURATION_NS:
        return f"{text!r} is beyond Prometheus's longest duration (about 292 years)"
    return None


def window_error(window: str) -> str | None:
    """Why ``window`` is no range a rate() takes in Prometheus (None when it is one): a
    duration (`duration_error`) above zero."""
    why = duration_error(window)
    if why is None and _duration_ms(window) == 0:
        return f"{window!r} is zero: a rate() window must be positive"
    return why


def record_name(level: str, quantity: str, scheme: str, window: str) -> str:
    return f"{level}:spec_decode_{quantity}_{scheme}:rate{window}"


def _by(labels: tuple[str, ...]) -> str:
    return ", ".join(labels)


def base_rate(metric: str, window: str, labels: tuple[str, ...], selector: str = "") -> str:
    """A counter's rate summed to ``labels``. Sum after rate(): rate() handles each series'
    resets, a sum of counters does not."""
    return f"sum by ({_by(labels)}) (rate({metric}{selector}[{window}]))"


def derived(scheme: Scheme, rate: Callable[[str], str], labels: tuple[str, ...]) -> dict[str, str]:
    """Every metric of SPEC.md section 6 the scheme's counters give, as PromQL over ``rate(q)``
    (the summed rate of quantity q, per ``labels``, and per position for ``*_pos``): the one
    place the formulas are written, for the rules and the dashboard."""
    have = scheme.counters()
    steps = rate("spec_steps")
    out = _acceptance_rate(scheme, rate)
    if "verified" in have:
        out["draft_quality"] = f"{rate('accepted')} / {rate('verified')}"  # M2
        out["verification_rate"] = f"{rate('verified')} / {rate('drafted')}"  # M3
    # M4: 1 + accepted / spec_steps, bonus token included; 1 when no spec step ran.
    out["mean_acceptance_length"] = f"1 + {rate('accepted')} / ({steps} > 0) or ({steps} * 0 + 1)"
    # M6: accepted_i / spec_steps, vLLM's per-position rate (NaN with no spec step).
    out["acceptance_per_step_pos"] = (
        f"{rate('accepted_pos')} / on ({_by(labels)}) group_left {steps}"
    )
    if "verified_pos" in have:
        # M5: accepted_i / verified_i, how often a draft the target saw at i was right.
        out["acceptance_given_verified_pos"] = f"{rate('accepted_pos')} / {rate('verified_pos')}"
    return out


def _acceptance_rate(scheme: Scheme, rate: Callable[[str], str]) -> dict[str, str]:
    """M1, only where drafted counts the drafts proposed (families.py): accepted over a
    configured k x steps is not an acceptance rate."""
    if fam.denominator(scheme) == fam.CONFIGURED:
        return {}
    # M1: accepted / drafted; 0/0 = NaN when nothing was drafted (undefined, never 0).
    return {"acceptance_rate": f"{rate('accepted')} / {rate('drafted')}"}


def _recorded_as(scheme: Scheme, quantity: str) -> str:
    """The record name's quantity: a configured drafted count is not recorded as drafted."""
    if quantity == "drafted" and fam.denominator(scheme) == fam.CONFIGURED:
        return "configured_draft_slots"
    return quantity


def recording_rules(scheme: Scheme, window: str = DEFAULT_WINDOW) -> list[Rule]:
    """Rates of every counter the scheme has, then every metric derivable from them."""
    out: list[Rule] = []
    for level, labels in LEVELS.items():

        def rec(q: str, lv: str = level) -> str:
            return record_name(lv, q, scheme.name, window)

        for quantity, metric in scheme.counters().items():
            keep = (*labels, "position") if quantity.endswith("_pos") else labels
            out.append(Rule(rec(_recorded_as(scheme, quantity)), base_rate(metric, window, keep)))
        out.extend(Rule(rec(q), expr) for q, expr in derived(scheme, rec, labels).items())
    return out


def alert_rules(scheme: Scheme, duration: str = DEFAULT_FOR) -> list[Rule]:
    """A counting bug in the engine: the cumulative counters break drafted >= verified >=
    accepted (INV-1, per position INV-6). Compared on the counters themselves, not on rates,
    so no window or extrapolation can make or hide a violation."""
    labels = LEVELS["engine"]
    by = _by(labels)
    pairs: list[tuple[str, str, str, str]] = []
    if scheme.verified is not None:
        pairs += [
            ("drafted", scheme.drafted, "verified", scheme.verified),
            ("verified", scheme.verified, "accepted", scheme.accepted),
        ]
    else:
        pairs.append(("drafted", scheme.drafted, "accepted", scheme.accepted))
    out: list[Rule] = []
    for big, big_metric, small, small_metric in pairs:
        out.append(
            Rule(
                f"SpecDecode{big.capitalize()}Below{small.capitalize()}_{scheme.name}",
                f"sum by ({by}) ({small_metric}) > sum by ({by}) ({big_metric})",
                alert=True,
                duration=duration,
                labels=(("severity", "critical"),),
                annotations=(
                    (
                        "summary",
                        f"{big} < {small}: the engine miscounts speculative decoding"
                        f" ({scheme.title})",
                    ),
                    (
                        "description",
                        f"{{{{ $labels.model_name }}}} engine {{{{ $labels.engine }}}}: {small}"
                        f" exceeds {big} (SPEC.md INV-1: drafted >= verified >= accepted). A"
                        " counter bug, not a workload effect; replay the engine's step log with"
                        " `spectally replay` to find the first block that breaks it.",
                    ),
                ),
            )
        )
    return out


def rule_groups(
    schemes: list[str] | None = None, window: str = DEFAULT_WINDOW, duration: str = DEFAULT_FOR
) -> dict[str, Any]:
    """The rule file's content: one recording group and one alert group per scheme."""
    groups: list[dict[str, Any]] = []
    for name in schemes or list(SCHEMES):
        scheme = RULE_SCHEMES[name]
        groups.append(
            {
                "name": f"spec_decode_{scheme.name}_recording",
                "rules": [r.to_dict() for r in recording_rules(scheme, window)],
            }
        )
        groups.append(
            {
                "name": f"spec_decode_{scheme.name}_alerts",
                "rules": [r.to_dict() for r in alert_rules(scheme, duration)],
            }
        )
    return {"groups": groups}


HEADER = (
    "# Spec-decode metrics (SPEC.md section 6) from the counters of section 7, generated by\n"
    "# `spectally rules`; do not edit: regenerate. NaN = undefined (no drafts / verified /\n"
    "# spec steps in the window), never 0.\n"
)


def render(
    schemes: list[str] | None = None, window: str = DEFAULT_WINDOW, duration: str = DEFAULT_FOR
) -> str:
    body = yaml.safe_dump(
        rule_groups(schemes, window, duration), sort_keys=False, width=1000, allow_unicode=True
    )
    return HEADER + body
