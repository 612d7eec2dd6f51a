"""The fleet report: per-file verdicts, totals merged through the reference's own merge, the
per-engine breakdown, the fleet's legacy -> rfc shift and the scrape check, as JSON-ready data
(`fleet_summary`) and as text (`render_fleet`). Built from `FileOutcome`s in input order only,
so nothing here depends on how (or where) the files were replayed.

Totals of the logs that agree are merged with ``Counters.merge`` (rfc_merge, legacy_merge,
position_merge: the monoid whose laws the proofs check), for the fleet and per engine. Logs
with different k merge at the largest k: a log with k drafts per step has nothing at positions
>= k, so its per-position counters are padded with ``position_zero``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from spectally.exit_codes import ExitCode, Verdict, combine
from spectally.reference.arith import INT_ARITH
from spectally.reference.counters import Counters, position_zero
from spectally.reference.metrics import derived_metrics, legacy_metrics

from ..replay.report import SHIFT_TERMS, explain_shift
from ..steplog.profiles import FORCE_FLAG
from .job import EngineInfo, FileOutcome


def widen(c: Counters, k: int) -> Counters:
    """``c`` at a larger k: positions >= c.k are zero (no draft of a k-token proposal is there)."""
    if c.k == k:
        return c
    pad = tuple(position_zero(INT_ARITH) for _ in range(k - c.k))
    return Counters(k=k, rfc=c.rfc, legacy=c.legacy, positions=(*c.positions, *pad))


def merge_totals(parts: Sequence[Counters]) -> Counters | None:
    """The reference's merge over ``parts`` (at the largest k), or None for no parts."""
    if not parts:
        return None
    k = max(c.k for c in parts)
    total = Counters.zero(k)
    for c in parts:
        total = total.merge(widen(c, k))
    return total


def merge_shift(terms: Sequence[dict[str, int]]) -> dict[str, int]:
    """The fleet's shift terms: each term summed over the logs (they are counts)."""
    return {name: sum(t[name] for t in terms) for name in SHIFT_TERMS}


def _counts(outcomes: Sequence[FileOutcome]) -> dict[str, int]:
    out: dict[str, int] = {}
    for o in outcomes:
        out[o.status] = out.get(o.status, 0) + 1
    return out


def _totals_view(totals: Counters | None, merged_files: int) -> dict[str, Any] | None:
    if totals is None:
        return None
    d = totals.to_dict()
    return {
        "merged_logs": merged_files,
        "k": totals.k,
        "totals": {"vllm-legacy": d["vllm-legacy"], "rfc": d["rfc"]},
        "metrics": {"vllm-legacy": legacy_metrics(totals), "rfc": derived_metrics(totals)},
    }


def _engine_sort_key(info: EngineInfo | None) -> tuple[int, int, str]:
    if info is None:
        return (2, 0, "")
    if info.engine_index is None:
        return (1, 0, info.label())
    return (0, info.engine_index, info.label())


@dataclass
class _Group:
    info: EngineInfo | None
    files: list[FileOutcome] = field(default_factory=list)


def check_scrape(
    outcomes: Sequence[FileOutcome], merged: Counters | None, metrics: str
) -> dict[str, Any]:
    """The merged vllm-legacy totals against the last scrape summed over all its ``engine``
    label sets: every engine the scrape counted must be covered by the logs (each log was
    already checked against its own engine's series by its replay). Only judged when every
    log agrees; otherwise the merged totals miss the failing logs' counts."""
    from ..importers.prometheus import read_scrapes, spec_totals

    if merged is None or any(o.status != Verdict.AGREE for o in outcomes):
        return {"scrape": metrics, "checked": False, "why": "not every log agrees"}
    scrapes = read_scrapes([metrics])
    if not scrapes:
        return {"scrape": metrics, "checked": False, "why": "no Prometheus samples found"}
    last = scrapes[-1]
    scraped = spec_totals(last, merged.k)
    expected = (
        merged.legacy.num_drafts,
        merged.legacy.num_draft_tokens,
        merged.legacy.num_accepted_tokens,
        list(merged.per_position("legacy_accepted")),
    )
    engines = sorted({dict(labels).get("engine", "") for labels in last.series})
    names = ("num_drafts", "num_draft_tokens", "num_accepted_tokens", "num_accepted_tokens_per_pos")
    return {
        "scrape": f"{last.path}:{last.line}",
        "checked": True,
        "agree": tuple(scraped) == expected,
        "scrape_engines": engines,
        "log_engines": sorted(
            {str(o.engine.engine_index) for o in outcomes if o.engine is not None}
        ),
        "counters": [
            {"name": n, "merged_logs": e, "scrape_all_engines": a}
            for n, e, a in zip(names, expected, scraped, strict=True)
        ],
    }


def fleet_summary(outcomes: Sequence[FileOutcome], metrics: str | None = None) -> dict[str, Any]:
    """The fleet report as JSON-ready data: per-file verdicts, merged totals (both profiles),
    the per-engine breakdown, each failing file's first divergence, the fleet's legacy -> rfc
    shift, and with ``metrics`` the merged totals against the scrape's engines summed. Built
    from the outcomes in input order only, so it does not depend on scheduling."""
    agreeing = [o for o in outcomes if o.status == Verdict.AGREE and o.totals is not None]
    merged = merge_totals([o.totals for o in agreeing if o.totals is not None])
    groups: dict[EngineInfo | None, _Group] = {}
    for o in outcomes:
        groups.setdefault(o.engine, _Group(o.engine)).files.append(o)
    engines = []
    # [DP-1] each data-parallel engine keeps and reports its own counters
    for info in sorted(groups, key=_engine_sort_key):
        g = groups[info]
        ok = [o.totals for o in g.files if o.status == Verdict.AGREE and o.totals is not None]
        engines.append(
            {
                "engine": None if info is None else info.to_dict(),
                "label": "no valid header" if info is None else info.label(),
                "logs": [o.path for o in g.files],
                "statuses": _counts(g.files),
                "merged": _totals_view(merge_totals(ok), len(ok)),
            }
        )
    shift = None
    if merged is not None:
        shift = explain_shift(
            merged, merge_shift([o.shift_terms for o in agreeing if o.shift_terms is not None])
        )
    codes = [ExitCode(o.exit_code) for o in outcomes]
    scrape = None
    if metrics is not None:
        scrape = check_scrape(outcomes, merged, metrics)
        if scrape["checked"] and not scrape["agree"]:
            codes.append(ExitCode.DIVERGENCE)
    return {
        "logs": len(outcomes),
        "agree": sum(1 for o in outcomes if o.status == Verdict.AGREE),
        "statuses": _counts(outcomes),
        "exit_code": int(combine(codes)),
        "files": [
            {
                "path": o.path,
                "status": o.status,
                "exit_code": o.exit_code,
                "engine_index": None if o.engine is None else o.engine.engine_index,
                "first_divergence": o.first_divergence,
            }
            for o in outcomes
        ],
        "merged": _totals_view(merged, len(agreeing)),
        "excluded_from_totals": [o.path for o in outcomes if o.status != Verdict.AGREE],
        "engines": engines,
        "shift": shift,
        "metrics": scrape,
        "profile_forced": _forced(outcomes),
    }


def _forced(outcomes: Sequence[FileOutcome]) -> dict[str, Any] | None:
    """The logs counted under a profile given with --force-profile (None: none was)."""
    infos = [
        (o.path, o.engine) for o in outcomes if o.engine is not None and o.engine.profile_forced
    ]
    if not infos:
        return None
    return {
        "flag": FORCE_FLAG,
        "profile": infos[0][1].profile,
        "logs": [path for path, _ in infos],
        "header_engines": sorted({info.engine for _, info in infos}),
    }


def _logs(n: int) -> str:
    return f"{n} log" if n == 1 else f"{n} logs"


def _num(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.3f}"


def _totals_lines(view: dict[str, Any], indent: str) -> list[str]:
    lg, rfc = view["totals"]["vllm-legacy"], view["totals"]["rfc"]
    mlg, mrfc = view["metrics"]["vllm-legacy"], view["metrics"]["rfc"]
    return [
        f"{indent}                       vllm-legacy          rfc",
        f"{indent}spec steps           {lg['spec_steps']:>13}  {rfc['spec_steps']:>11}",
        f"{indent}drafted              {lg['drafted']:>13}  {rfc['drafted']:>11}",
        f"{indent}verified             {'-':>13}  {rfc['verified']:>11}",
        f"{indent}accepted             {lg['accepted']:>13}  {rfc['accepted']:>11}",
        f"{indent}acceptance rate      {_num(mlg['acceptance_rate']):>13}"
        f"  {_num(mrfc['acceptance_rate']):>11}",
        f"{indent}mean accept. length  {_num(mlg['mean_acceptance_length']):>13}"
        f"  {_num(mrfc['mean_acceptance_length']):>11}",
        f"{indent}accepted per pos     {lg['per_position']['accepted']}"
        f"  {rfc['per_position']['accepted']}",
    ]


def _scrape_lines(scrape: dict[str, Any]) -> list[str]:
    if not scrape["checked"]:
        return [f"fleet metrics ({scrape['scrape']}): not checked: {scrape['why']}"]
    verdict = (Verdict.AGREE if scrape["agree"] else Verdict.DIVERGE).label
    out = [
        f"fleet metrics: {verdict}: merged vllm-legacy totals of the logs (engines"
        f" {', '.join(scrape['log_engines']) or '-'}) vs the last scrape summed over its engine"
        f" labels ({', '.join(scrape['scrape_engines']) or '-'}) at {scrape['scrape']}"
    ]
    for c in scrape["counters"]:
        mark = "" if c["merged_logs"] == c["scrape_all_engines"] else "   <-- differs"
        out.append(f"  {c['name']:<28} {c['merged_logs']!s:<16} {c['scrape_all_engines']!s}{mark}")
    return out


def render_fleet(summary: dict[str, Any]) -> str:
    """The fleet report printed after the per-file reports (text form of `fleet_summary`)."""
    out = [f"fleet: {_logs(summary['logs'])}"]
    forced = summary["profile_forced"]
    if forced is not None:
        out.append(
            f"profile FORCED by {forced['flag']} {forced['profile']} for"
            f" {_logs(len(forced['logs']))} (headers: {', '.join(forced['header_engines'])}):"
            f" their verdicts hold only if those versions count like {forced['profile']}"
        )
    width = max(len(f["path"]) for f in summary["files"])
    for f in summary["files"]:
        engine = "engine ?" if f["engine_index"] is None else f"engine {f['engine_index']}"
        out.append(f"  {f['path'].ljust(width)}  {Verdict(f['status']).label:<14} {engine}")
        if f["first_divergence"] is not None and f["status"] != Verdict.AGREE:
            out.append(f"    first: {f['first_divergence']}")
    out.append("per engine (header engine_index and config):")
    for e in summary["engines"]:
        statuses = ", ".join(f"{n} {s.replace('_', ' ')}" for s, n in e["statuses"].items())
        out.append(f"  {e['label']}: {_logs(len(e['logs']))} ({statuses})")
        if e["merged"] is not None:
            out.extend(_totals_lines(e["merged"], "    "))
    merged = summary["merged"]
    if merged is None:
        out.append("fleet totals: no log agrees, nothing to merge")
    else:
        out.append(
            f"fleet totals of the {merged['merged_logs']} agreeing logs (the reference's"
            f" Counters.merge, k={merged['k']}):"
        )
        out.extend(_totals_lines(merged, "  "))
        if summary["excluded_from_totals"]:
            n = len(summary["excluded_from_totals"])
            out.append(f"  not merged: {_logs(n)} without a verdict of agreement")
        out.append("fleet shift legacy → rfc:")
        shift = summary["shift"]
        for key in ("acceptance_rate", "mean_acceptance_length"):
            out.append(f"  {shift[key]['why']}")
        for key in ("drafted", "spec_steps"):
            item = shift[key]
            out.append(f"  {key} {item['vllm-legacy']} → {item['rfc']}: {item['why']}")
    scrape = summary["metrics"]
    if scrape is not None:
        out.extend(_scrape_lines(scrape))
    out.append(f"{summary['agree']} of {summary['logs']} logs agree with the reference")
    return "\n".join(out)
