"""`spectally replay --html OUT`: one self-contained HTML file per run (one log or a fleet).

It shows the verdict, the totals under both profiles, the per-position drafted / verified /
accepted counts and the acceptance rate over the log's steps as plots, and the first
divergence with the reference's state. Plots are drawn by matplotlib (the reference plotting
library of the Python stack, well kept, typed) into SVG and inlined: the file loads nothing
(a Content-Security-Policy of ``default-src 'none'`` forbids it), so it opens offline and
can be mailed or attached to an issue as is.

What it reads: the replay's JSON result (`FileOutcome.result`, what `--json` prints) and, for
the plot over steps, a second pass of the log through the reference (`timeline`).
"""

from __future__ import annotations

import io
import json
from html import escape
from typing import Any

import matplotlib

matplotlib.use("Agg")  # no display; before pyplot is imported
import matplotlib.pyplot as plt
from matplotlib.figure import Figure

from ..fleet import FileOutcome
from ..steplog.outputs import write_output
from ..steplog.records import BadInput
from .timeline import Timeline, replay_timeline, window

CSP = "default-src 'none'; style-src 'unsafe-inline'"
# No RDF block (its namespace URLs are never fetched, but a file that names no URL is simpler
# to check) and no date (the same replay gives the same file).
SVG_METADATA: dict[str, str | None] = {"Creator": None, "Date": None, "Format": None, "Type": None}
MAX_POINTS = 400  # per log, in the plot over steps
LEGACY, RFC = "#c0504d", "#1f77b4"
STYLE = """
body{font:14px/1.45 system-ui,sans-serif;margin:2em auto;max-width:1100px;color:#222}
h1{font-size:1.5em} h2{font-size:1.25em;border-bottom:1px solid #ccc}
table{border-collapse:collapse;margin:.5em 0} td,th{border:1px solid #ccc;padding:.2em .6em;
text-align:right} th{background:#f4f4f4} td:first-child,th:first-child{text-align:left}
.verdict{font-weight:bold;padding:.3em .8em;border-radius:4px;display:inline-block}
.agree{background:#d4edda} .diverge{background:#f8d7da} .incomplete,.bad_input{background:#fff3cd}
pre{background:#f7f7f7;padding:.6em;overflow-x:auto} figure{margin:.5em 0}
"""
VERDICT = {
    "agree": "AGREE",
    "diverge": "DIVERGE",
    "incomplete": "INCOMPLETE",
    "bad_input": "BAD INPUT",
}


def _svg(fig: Figure) -> str:
    buf = io.StringIO()
    fig.savefig(buf, format="svg", bbox_inches="tight", metadata=SVG_METADATA)
    plt.close(fig)
    text = buf.getvalue()
    return text[text.index("<svg") :]  # drop the XML prolog and doctype: inline in HTML


def _setup() -> None:
    matplotlib.rcParams["svg.fonttype"] = "path"  # glyphs as paths: no font to fetch
    matplotlib.rcParams["svg.hashsalt"] = "spectally"  # stable element ids


def per_position_plot(summary: dict[str, Any], title: str) -> str:
    """Grouped bars per position: rfc drafted, verified, accepted and legacy accepted."""
    rfc = summary["totals"]["rfc"]["per_position"]
    legacy = summary["totals"]["vllm-legacy"]["per_position"]["accepted"]
    k = len(legacy)
    fig, ax = plt.subplots(figsize=(7, 3.2))
    width = 0.2
    series = [
        ("rfc drafted", rfc["drafted"], "#9ecae1"),
        ("rfc verified", rfc["verified"], "#4292c6"),
        ("rfc accepted", rfc["accepted"], "#08519c"),
        ("legacy accepted", legacy, LEGACY),
    ]
    for j, (label, values, color) in enumerate(series):
        ax.bar([i + (j - 1.5) * width for i in range(k)], values, width, label=label, color=color)
    ax.set_xticks(range(k), [str(i) for i in range(k)])
    ax.set_xlabel("draft position")
    ax.set_ylabel("tokens")
    ax.set_title(title)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1))
    return _svg(fig)


def acceptance_plot(tl: Timeline, title: str) -> str:
    """The acceptance rate (M1) over the log's steps, per interval between points and
    cumulative, under both profiles."""
    fig, ax = plt.subplots(figsize=(7, 3.2))
    xs: list[int] = []
    win: dict[str, list[float]] = {"rfc": [], "legacy": []}
    cum: dict[str, list[float]] = {"rfc": [], "legacy": []}
    prev = None
    for step, c in zip(tl.steps, tl.totals, strict=True):
        if prev is not None:
            d = window(c, prev)
            xs.append(step)
            win["rfc"].append(_rate(d.rfc.accepted, d.rfc.drafted))
            win["legacy"].append(_rate(d.legacy.num_accepted_tokens, d.legacy.num_draft_tokens))
            cum["rfc"].append(_rate(c.rfc.accepted, c.rfc.drafted))
            cum["legacy"].append(_rate(c.legacy.num_accepted_tokens, c.legacy.num_draft_tokens))
        prev = c
    ax.plot(xs, win["legacy"], ".", color=LEGACY, alpha=0.35, label="legacy, per interval")
    ax.plot(xs, win["rfc"], ".", color=RFC, alpha=0.35, label="rfc, per interval")
    ax.plot(xs, cum["legacy"], "-", color=LEGACY, label="legacy, cumulative")
    ax.plot(xs, cum["rfc"], "-", color=RFC, label="rfc, cumulative")
    ax.set_ylim(0, 1.02)
    ax.set_xlabel("engine step")
    ax.set_ylabel("accepted / drafted")
    ax.set_title(title)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1))
    return _svg(fig)


def _rate(num: int, den: int) -> float:
    """M1 for a plot: undefined (no drafts) is NaN, a gap in the line, never 0."""
    return num / den if den else float("nan")


def _num(v: Any, digits: int = 3) -> str:
    if v is None:
        return "n/a"
    return f"{v:.{digits}f}" if isinstance(v, float) else str(v)


def _totals_table(summary: dict[str, Any]) -> str:
    lg, rf = summary["totals"]["vllm-legacy"], summary["totals"]["rfc"]
    mlg, mrf = summary["metrics"]["vllm-legacy"], summary["metrics"]["rfc"]
    rows = [
        ("spec steps", lg["spec_steps"], rf["spec_steps"]),
        ("drafted", lg["drafted"], rf["drafted"]),
        ("verified", "-", rf["verified"]),
        ("accepted", lg["accepted"], rf["accepted"]),
        ("acceptance rate (M1)", _num(mlg["acceptance_rate"]), _num(mrf["acceptance_rate"])),
        (
            "mean acceptance length (M4)",
            _num(mlg["mean_acceptance_length"]),
            _num(mrf["mean_acceptance_length"]),
        ),
        ("draft quality (M2)", "-", _num(mrf["draft_quality"])),
        ("verification rate (M3)", "-", _num(mrf["verification_rate"])),
    ]
    body = "".join(
        f"<tr><td>{escape(n)}</td><td>{escape(str(a))}</td><td>{escape(str(b))}</td></tr>"
        for n, a, b in rows
    )
    return (
        '<table class="totals"><tr><th>totals</th><th>vllm-legacy</th><th>rfc</th></tr>'
        f"{body}</table>"
    )


def _state_text(state: Any) -> str:
    """The reference's state at a divergence: lines of text, or (as data) indented JSON."""
    if not state:
        return ""
    if isinstance(state, list) and all(isinstance(line, str) for line in state):
        return "\n".join(state)
    return json.dumps(state, indent=2, default=str)


def _divergence(d: dict[str, Any]) -> str:
    rows = "".join(
        f"<tr><td>{escape(str(c['name']))}</td><td>{escape(str(c['expected']))}</td>"
        f"<td>{escape(str(c['actual']))}</td></tr>"
        for c in d["counters"]
    )
    table = (
        f"<table><tr><th>counter</th><th>expected</th><th>actual</th></tr>{rows}</table>"
        if rows
        else ""
    )
    state = _state_text(d.get("state"))
    return (
        '<section class="divergence"><h3>First divergence</h3>'
        f"<p><code>{escape(d['path'])}:{d['line']}:{d['column']}</code> ({escape(d['kind'])}"
        f", step {escape(str(d['step']))}): {escape(d['reason'])}</p>"
        + (f"<pre>{escape(str(d['record']))}</pre>" if d.get("record") else "")
        + table
        + (f"<p>reference state:</p><pre>{escape(state)}</pre>" if state else "")
        + "</section>"
    )


def file_section(result: dict[str, Any], timeline: Timeline | None) -> str:
    """One log's part of the report, from its replay JSON (and its timeline, if any)."""
    status = result["status"]
    path = escape(result["path"])
    head = (
        f'<section class="log"><h2>{path}</h2>'
        f'<p><span class="verdict {status}">{VERDICT[status]}</span> exit {result["exit_code"]}'
    )
    if result["bad_input"]:
        return head + f"</p><pre>{escape(result['bad_input'])}</pre></section>"
    s = result["summary"]
    forced = " FORCED" if s["profile_forced"] else ""
    head += (
        f" &middot; profile {escape(s['profile'])}{forced} &middot; {escape(s['engine'])},"
        f" {escape(s['scheduling'])}, k={s['k']} &middot; steps {s['steps']}, requests"
        f" {s['requests']}, agreement {s['agreement_percent']:.2f}%</p>"
    )
    parts = [head, _totals_table(s)]
    parts.append(f"<figure>{per_position_plot(s, 'per position')}</figure>")
    if timeline is not None and len(timeline.steps) > 1:
        parts.append(f"<figure>{acceptance_plot(timeline, 'acceptance over steps')}</figure>")
    if result["divergences"]:
        parts.append(_divergence(result["divergences"][0]))
    notes = result.get("notes") or []
    if notes:
        items = "".join(f"<li>{escape(n)}</li>" for n in notes[:20])
        parts.append(f"<details><summary>{len(notes)} notes</summary><ul>{items}</ul></details>")
    parts.append("</section>")
    return "".join(parts)


def _timeline(result: dict[str, Any]) -> Timeline | None:
    path = result["path"]
    if result["bad_input"] or path == "-":
        return None
    forced = (result.get("summary") or {}).get("profile_forced")
    profile = forced.get("profile") if isinstance(forced, dict) else None
    try:
        return replay_timeline(path, force_profile=profile, max_points=MAX_POINTS)
    except (BadInput, OSError):
        return None


def _fleet_section(fleet: dict[str, Any]) -> str:
    code = fleet["exit_code"]
    status = "agree" if code == 0 else "diverge" if code == 1 else "incomplete"
    head = (
        '<section class="fleet"><h2>Fleet</h2>'
        f'<p><span class="verdict {status}">{fleet["agree"]} of {fleet["logs"]} logs agree</span>'
        f" exit {code}</p>"
    )
    merged = fleet.get("merged")
    if not merged:
        return head + "<p>no agreeing log: nothing merged</p></section>"
    return (
        head
        + _totals_table(merged)
        + (
            f"<figure>{per_position_plot(merged, 'fleet, per position (merged)')}</figure>"
            "</section>"
        )
    )


def render(results: list[dict[str, Any]], fleet: dict[str, Any] | None = None) -> str:
    """The whole HTML document: the fleet first (several logs), then each log."""
    _setup()
    if fleet is not None:
        code = fleet["exit_code"]
        title = f"spectally replay: {fleet['agree']} of {fleet['logs']} logs agree"
        verdict = "AGREE" if code == 0 else "DIVERGE" if code == 1 else f"exit {code}"
    else:
        title = f"spectally replay: {VERDICT[results[0]['status']]} {results[0]['path']}"
        verdict = VERDICT[results[0]["status"]]
    body = [f"<h1>{escape(title)}</h1>"]
    if fleet is not None:
        body.append(_fleet_section(fleet))
    body.extend(file_section(r, _timeline(r)) for r in results)
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f'<meta http-equiv="Content-Security-Policy" content="{CSP}">'
        f'<meta name="spectally-verdict" content="{escape(verdict)}">'
        f"<title>{escape(title)}</title><style>{STYLE}</style></head><body>"
        + "".join(body)
        + "</body></html>\n"
    )


def write_html(out: str, outcomes: list[FileOutcome], metrics: str | None = None) -> None:
    """`spectally replay --html OUT`: the report of the replay's outcomes, to ``out``."""
    from ..fleet.report import fleet_summary

    fleet = fleet_summary(outcomes, metrics) if len(outcomes) > 1 else None
    text = render([o.result for o in outcomes], fleet)
    write_output(out, text)
