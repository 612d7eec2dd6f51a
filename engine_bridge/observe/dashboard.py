"""A Grafana dashboard for spec-decode counting, as code (grafana-foundation-sdk).

Why grafana-foundation-sdk: Grafana Labs publishes it, generated from Grafana's own schemas
(typed builders, `py.typed`), released with Grafana; grafanalib, the older community library,
last released in January 2024 and lags the panel schema.

Every query is `rules.derived` over inline rates (`rules.base_rate`), the same formulas the
recording rules hold, with ``$__rate_interval`` as the window (one window and one label
selector for a numerator and its denominator), so the dashboard needs no rules loaded and
cannot drift from them. Legacy (vLLM's own counters) and rfc (the backport's, or REP-1's)
are separate queries of one panel: each query reads one scheme's names. With ``ray``, vLLM's
names are read as Ray Serve exports them (``ray_vllm_``, families.py).
"""

from __future__ import annotations

from typing import Any

from grafana_foundation_sdk.builders import common, dashboard, prometheus, timeseries
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.models.common import (
    LegendDisplayMode,
    LegendPlacement,
    SortOrder,
    TooltipDisplayMode,
)
from grafana_foundation_sdk.models.dashboard import DataSourceRef, GridPos

from .rules import RULE_SCHEMES, base_rate, derived
from .schemes import SCHEMES, Scheme

UID = "spectally-spec-decode"
WINDOW = "$__rate_interval"
LABELS = ("model_name", "engine")
SELECTOR = '{model_name=~"$model_name"}'
DATASOURCE = DataSourceRef(type_val="prometheus", uid="${datasource}")


def _rate(scheme: Scheme, quantity: str) -> str:
    keep = (*LABELS, "position") if quantity.endswith("_pos") else LABELS
    return base_rate(scheme.counters()[quantity], WINDOW, keep, SELECTOR)


def queries(scheme: Scheme) -> dict[str, str]:
    """Every metric of the scheme and every counter rate, as the dashboard queries them."""
    out = {f"{q}_rate": _rate(scheme, q) for q in scheme.counters()}
    out.update(derived(scheme, lambda q: _rate(scheme, q), LABELS))
    return out


def _target(expr: str, ref: str, legend: str) -> prometheus.Dataquery:
    return prometheus.Dataquery().expr(expr).ref_id(ref).legend_format(legend).range()


def _panel(
    title: str,
    description: str,
    targets: list[tuple[str, str]],
    unit: str,
    pos: tuple[int, int],
    bounds: tuple[float | None, float | None] = (None, None),
) -> timeseries.Panel:
    panel = (
        timeseries.Panel()
        .title(title)
        .description(description)
        .datasource(DATASOURCE)
        .unit(unit)
        .grid_pos(GridPos(h=8, w=12, x=pos[0], y=pos[1]))
        .legend(
            common.VizLegendOptions()
            .display_mode(LegendDisplayMode.TABLE)
            .placement(LegendPlacement.BOTTOM)
            .show_legend(True)
        )
        .tooltip(common.VizTooltipOptions().mode(TooltipDisplayMode.MULTI).sort(SortOrder.NONE))
    )
    if bounds[0] is not None:
        panel = panel.min(bounds[0])
    if bounds[1] is not None:
        panel = panel.max(bounds[1])
    for i, (expr, legend) in enumerate(targets):
        panel = panel.with_target(_target(expr, chr(ord("A") + i), legend))
    return panel


def served_schemes(rfc: str, ray: bool) -> tuple[Scheme, Scheme]:
    """(legacy, rfc) schemes; through Ray Serve the vLLM names take Ray's prefix (the backport's
    spectally: names are its own)."""
    if not ray:
        return SCHEMES["vllm"], SCHEMES[rfc]
    return RULE_SCHEMES["ray-vllm"], RULE_SCHEMES.get(f"ray-{rfc}", SCHEMES[rfc])


def build(rfc: str = "backport", ray: bool = False) -> dict[str, Any]:
    """The dashboard JSON (as data), legacy = vLLM's own counters, rfc = ``rfc`` scheme."""
    legacy, rfc_scheme = served_schemes(rfc, ray)
    lg, rf = queries(legacy), queries(rfc_scheme)
    who = "{{model_name}} engine {{engine}}"
    who_pos = who + " pos {{position}}"
    panels = [
        _panel(
            "Acceptance rate (M1 = accepted / drafted)",
            "Legacy: vLLM's counters (drafted excludes grammar-cut and truncated drafts);"
            " rfc: every proposed draft. Empty (NaN) when nothing was drafted, never 0.",
            [
                (lg["acceptance_rate"], f"legacy {who}"),
                (rf["acceptance_rate"], f"rfc {who}"),
            ],
            "percentunit",
            (0, 0),
            (0, 1),
        ),
        _panel(
            "Mean acceptance length (M4 = 1 + accepted / spec steps)",
            "Tokens per spec step, bonus token included; 1 when no spec step ran.",
            [
                (lg["mean_acceptance_length"], f"legacy {who}"),
                (rf["mean_acceptance_length"], f"rfc {who}"),
            ],
            "none",
            (12, 0),
            (1, None),
        ),
        _panel(
            "Drafted / verified / accepted (tokens/s)",
            "RFC: drafted >= verified >= accepted. Legacy drafted for comparison.",
            [
                (rf["drafted_rate"], f"rfc drafted {who}"),
                (rf["verified_rate"], f"rfc verified {who}"),
                (rf["accepted_rate"], f"rfc accepted {who}"),
                (lg["drafted_rate"], f"legacy drafted {who}"),
                (lg["accepted_rate"], f"legacy accepted {who}"),
            ],
            "tps",
            (0, 8),
            (0, None),
        ),
        _panel(
            "Draft quality (M2) and verification rate (M3)",
            "M2 = accepted / verified: the drafter judged on what the target saw. M3 ="
            " verified / drafted: the share of drafts the target looked at.",
            [
                (rf["draft_quality"], f"draft quality {who}"),
                (rf["verification_rate"], f"verification rate {who}"),
            ],
            "percentunit",
            (12, 8),
            (0, 1),
        ),
        _panel(
            "Per-position acceptance per spec step (M6)",
            "accepted_i / spec steps (vLLM's per-position rate); the positions add up to"
            " M4 - 1. Never sum per-position series into a total.",
            [
                (lg["acceptance_per_step_pos"], f"legacy {who_pos}"),
                (rf["acceptance_per_step_pos"], f"rfc {who_pos}"),
            ],
            "percentunit",
            (0, 16),
            (0, 1),
        ),
        _panel(
            "Per-position acceptance given verified (M5)",
            "accepted_i / verified_i: how often a draft the target saw at position i was right.",
            [(rf["acceptance_given_verified_pos"], f"rfc {who_pos}")],
            "percentunit",
            (12, 16),
            (0, 1),
        ),
        _panel(
            "Per-position drafted / verified / accepted (tokens/s)",
            "RFC per-position counters (prefix counts).",
            [
                (rf["drafted_pos_rate"], f"drafted {who_pos}"),
                (rf["verified_pos_rate"], f"verified {who_pos}"),
                (rf["accepted_pos_rate"], f"accepted {who_pos}"),
            ],
            "tps",
            (0, 24),
            (0, None),
        ),
        _panel(
            "Spec steps (steps/s)",
            "Legacy num_drafts vs rfc spec steps (they differ when a block loses every slot).",
            [
                (lg["spec_steps_rate"], f"legacy {who}"),
                (rf["spec_steps_rate"], f"rfc {who}"),
            ],
            "none",
            (12, 24),
            (0, None),
        ),
    ]
    board = (
        dashboard.Dashboard("Speculative decoding: drafted >= verified >= accepted")
        .uid(UID)
        .tags(["spectally", "vllm", "speculative-decoding"])
        .description(
            "Generated by `spectally dashboard` from the formulas of the spectally"
            " specification; legacy = vLLM's released counters, rfc = " + rfc_scheme.title + "."
        )
        .with_variable(dashboard.DatasourceVariable("datasource").type("prometheus"))
        .with_variable(
            dashboard.QueryVariable("model_name")
            .datasource(DATASOURCE)
            .query(f"label_values({legacy.drafted}, model_name)")
            .multi(True)
            .include_all(True)
            .all_value(".*")
        )
    )
    for panel in panels:
        board = board.with_panel(panel)
    encoded: dict[str, Any] = JSONEncoder().default(board.build())
    return encoded


def render(rfc: str = "backport", ray: bool = False) -> str:
    return JSONEncoder(sort_keys=True, indent=2).encode(build(rfc, ray)) + "\n"
