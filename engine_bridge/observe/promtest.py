"""`promtool test rules` unit tests whose input is a replayed step log.

Input series: the reference's cumulative counters after each step of the log (`timeline`), one
sample per step, 1 minute apart, starting from 0 (counters start at 0 with the engine), under
every scheme's names (vllm: the legacy profile's counters; rfc, backport: the rfc profile's).
The counts are the real run's; the one-step-per-minute clock is the test's.

Expected values: the reference's metric functions (`derived_metrics`, `legacy_metrics`) on the
counter deltas of the window. How a 5m `rate()` sees a window: evaluated at ``j`` minutes +
30 s, the window ``(t - 5m, t]`` holds the samples of steps ``j-4 .. j``; Prometheus extrapolates
the increase by 30 s on each side (the same factor 5/4 for every series, which a ratio cancels)
unless a series would reach 0 within those 30 s (then it stops at 0: a different factor). So
evaluation points are taken where every rising series' first sample in the window is at least
1/8 of its increase (240 s x first / increase >= 30 s), and a ratio of rates is exactly the ratio
of the window's deltas. Checks compare within 1e-9; one more point after the log, counters flat,
checks the zero-division rules (NaN; M4 = 1).
"""

from __future__ import annotations

from typing import Any

import yaml
from spectally.reference.counters import Counters
from spectally.reference.metrics import derived_metrics, legacy_metrics

from .rules import alert_rules, record_name
from .schemes import SCHEMES, Scheme
from .timeline import Timeline, window

WINDOW_SAMPLES = 4  # samples j-4 .. j in (t - 5m, t] at t = j min + 30 s
TOLERANCE = 1e-9
FLAT_MINUTES = 8  # samples repeated after the log: every 5m window then sees no increase


def counter_values(scheme: Scheme, c: Counters) -> dict[str, int | list[int]]:
    """The scheme's counters in a counter state (quantity -> value or per-position list)."""
    if scheme.verified is None:  # the legacy profile, vLLM's own counters
        lg = c.legacy
        return {
            "drafted": lg.num_draft_tokens,
            "accepted": lg.num_accepted_tokens,
            "spec_steps": lg.num_drafts,
            "accepted_pos": list(c.per_position("legacy_accepted")),
        }
    r = c.rfc
    return {
        "drafted": r.drafted,
        "verified": r.verified,
        "accepted": r.accepted,
        "spec_steps": r.spec_steps,
        "drafted_pos": list(c.per_position("drafted")),
        "verified_pos": list(c.per_position("verified")),
        "accepted_pos": list(c.per_position("accepted")),
    }


def expected_metrics(scheme: Scheme, delta: Counters) -> dict[str, Any]:
    """quantity -> the reference's value (or per-position list) for the window's deltas."""
    if scheme.verified is None:
        m = legacy_metrics(delta)
        return {
            "acceptance_rate": m["acceptance_rate"],
            "mean_acceptance_length": m["mean_acceptance_length"],
            "acceptance_per_step_pos": m["per_position_acceptance_per_step"],
        }
    m = derived_metrics(delta)
    return {
        "acceptance_rate": m["acceptance_rate"],
        "draft_quality": m["draft_quality"],
        "verification_rate": m["verification_rate"],
        "mean_acceptance_length": m["mean_acceptance_length"],
        "acceptance_per_step_pos": m["per_position_acceptance_per_step"],
        "acceptance_given_verified_pos": m["per_position_acceptance_given_verified"],
    }


def eval_points(tl: Timeline, scheme: Scheme, limit: int = 3) -> list[int]:
    """Sample indices j (sample 0 is the zero state) where a 5m rate is the window's delta
    scaled by one common factor for every series (module docstring), spread over the log."""
    states = [Counters.zero(tl.k), *tl.totals]
    good: list[int] = []
    for j in range(WINDOW_SAMPLES, len(states)):
        first = _flat(counter_values(scheme, states[j - WINDOW_SAMPLES]))
        last = _flat(counter_values(scheme, states[j]))
        rising = [(f, e - f) for f, e in zip(first, last, strict=True) if e > f]
        if rising and all(8 * f >= inc for f, inc in rising):
            good.append(j)
    if len(good) <= limit:
        return good
    return [good[i * (len(good) - 1) // (limit - 1)] for i in range(limit)]


def _flat(values: dict[str, int | list[int]]) -> list[int]:
    out: list[int] = []
    for v in values.values():
        out.extend(v if isinstance(v, list) else [v])
    return out


def _labels(labels: dict[str, str]) -> str:
    return "{" + ", ".join(f'{k}="{v}"' for k, v in labels.items()) + "}"


def _minutes(j: int) -> str:
    return f"{j}m30s"


def build_test(
    tl: Timeline, rule_file: str, model: str = "model", schemes: list[str] | None = None
) -> dict[str, Any]:
    """The promtool test file (as data) for one replayed log, every scheme at once."""
    base = {"model_name": model, "engine": tl.engine}
    states = [Counters.zero(tl.k), *tl.totals]
    flat_states = states + [states[-1]] * FLAT_MINUTES
    tests: list[dict[str, Any]] = []
    # One test per scheme: the rfc scheme reuses two of vLLM's names, so each scheme's series
    # live in a test (a TSDB) of their own.
    for name in schemes or list(SCHEMES):
        scheme = SCHEMES[name]
        per_state = [counter_values(scheme, s) for s in flat_states]
        input_series: list[dict[str, str]] = []
        for quantity, metric in scheme.counters().items():
            if quantity.endswith("_pos"):
                for i in range(tl.k):
                    vals = [_at(v[quantity], i) for v in per_state]
                    labels = {**base, "position": str(i)}
                    input_series.append(
                        {"series": metric + _labels(labels), "values": _values(vals)}
                    )
            else:
                vals = [_at(v[quantity], None) for v in per_state]
                input_series.append({"series": metric + _labels(base), "values": _values(vals)})
        expr_tests: list[dict[str, Any]] = []
        for j in eval_points(tl, scheme):
            delta = window(states[j], states[j - WINDOW_SAMPLES])
            expr_tests.extend(_checks(scheme, base, _minutes(j), expected_metrics(scheme, delta)))
        # After the log: no increase in any window, so the ratios are undefined (NaN) and M4 = 1.
        after = len(states) + FLAT_MINUTES - 1
        zero = window(states[-1], states[-1])
        expr_tests.extend(_checks(scheme, base, f"{after}m", expected_metrics(scheme, zero)))
        tests.append(
            {
                "name": f"{name}: replay of {tl.path}",
                "interval": "1m",
                "input_series": input_series,
                "promql_expr_test": expr_tests,
                "alert_rule_test": [
                    {"eval_time": _minutes(len(states) - 1), "alertname": r.name, "exp_alerts": []}
                    for r in alert_rules(scheme)
                ],
            }
        )
    return {"rule_files": [rule_file], "evaluation_interval": "30s", "tests": tests}


def _at(value: int | list[int], i: int | None) -> int:
    if isinstance(value, list):
        assert i is not None
        return value[i]
    return value


def _values(vals: list[int]) -> str:
    return " ".join(str(v) for v in vals)


def _checks(
    scheme: Scheme, base: dict[str, str], at: str, expected: dict[str, Any]
) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for quantity, value in expected.items():
        rec = record_name("engine", quantity, scheme.name, "5m")
        if isinstance(value, list):
            for i, v in enumerate(value):
                out.append(_check(f'{rec}{{position="{i}"}}', v, {**base, "position": str(i)}, at))
        else:
            out.append(_check(rec, value, base, at))
    return out


def _check(selector: str, value: float | None, labels: dict[str, str], at: str) -> dict[str, Any]:
    """1 when the rule's sample equals the reference's value within TOLERANCE; undefined
    (None) must be NaN, the one value not equal to itself."""
    if value is None:
        expr = f"{selector} != bool {selector}"
    else:
        expr = f"abs({selector} - {value!r}) < bool {TOLERANCE}"
    return {"expr": expr, "eval_time": at, "exp_samples": [{"labels": _labels(labels), "value": 1}]}


def render(test: dict[str, Any]) -> str:
    return yaml.safe_dump(test, sort_keys=False, width=1000)
