"""``spectally explain FILE...``: what a file is, and what can be checked from it.

For each file: the engine, the layout and the releases that print it, the kind of record (a
step log, a server log, a Prometheus scrape, per-request JSON, iteration stats), which
spectally command checks it and what it can and cannot check, and the RFC meaning of each
number the file reports (drafted = every proposed draft, verified = entered the target's
forward pass, accepted = accepted by the target without the bonus token, a step = one
verification of one request; acceptance rate = accepted / drafted, mean acceptance length =
1 + accepted / steps). The engines' own meanings come from `engine_bridge/engines.py`.

Only the first lines are read (`HEAD_LINES`; a JSON document on one line whole, up to the
document limit, as the importers read it), through the readers' shared opener (plain, gzip,
``-``). vLLM's log layouts are recognised by the ``import logs`` reader's own parser, called in
one place (`_vllm_log`), and vLLM's per-request metrics by the ``import requests`` reader's
(`_explain_vllm_requests`). A JSON file is explained by the first of its records that holds
what spectally reads (a response without spec-decode fields may come first).
"""

from __future__ import annotations

import json
import re
import sys
import zlib
from dataclasses import asdict, dataclass, field
from typing import Any

import click
from spectally.exit_codes import ExitCode

from . import exits

HEAD_LINES = 5000
EXIT_HELP = exits.epilog(
    "0 every file is recognised and explained; 2 a file that cannot be read or"
    " holds no engine output spectally knows (the message says what it looked for)"
)

RFC = {
    "drafted": "RFC drafted: every token the drafter proposed",
    "verified": "RFC verified: tokens that entered the target's forward pass",
    "accepted": "RFC accepted: drafts the target accepted, the bonus token excluded",
    "steps": "RFC spec steps: verifications of one request each",
}


@dataclass
class Explanation:
    path: str
    engine: str
    kind: str
    layout: str
    versions: str
    command: str
    checks: list[str]
    cannot: list[str]
    numbers: list[tuple[str, str]] = field(default_factory=list)

    def render(self) -> str:
        out = [
            f"{self.path}: {self.kind} of {self.engine}",
            f"  layout: {self.layout} ({self.versions})",
            f"  check it with: {self.command}",
        ]
        out += [f"  can check: {c}" for c in self.checks]
        out += [f"  cannot check: {c}" for c in self.cannot]
        if self.numbers:
            out.append("  the numbers it reports, in the RFC's terms:")
            out += [f"    {name}: {meaning}" for name, meaning in self.numbers]
        return "\n".join(out)


def _head(path: str) -> list[tuple[int, str]]:
    from spectally.engine_bridge.steplog.limits import MAX_DOCUMENT_BYTES, MAX_LINE_BYTES
    from spectally.engine_bridge.steplog.source import (
        BOM,
        BadInput,
        close_stream,
        gzip_error,
        open_binary,
    )

    stream = open_binary(path)
    out: list[tuple[int, str]] = []
    try:
        for no in range(1, HEAD_LINES + 1):
            try:
                raw = stream.readline(MAX_LINE_BYTES + 1)
                limit = MAX_LINE_BYTES
                cut = len(raw) > limit and not raw.endswith(b"\n")  # the line goes on
                if cut and raw.lstrip(BOM + b" \t").startswith((b"[", b"{")):
                    # A JSON document on one line (json.dump writes one): read as the
                    # importers read it, up to the document limit.
                    limit = MAX_DOCUMENT_BYTES
                    raw += stream.readline(limit + 1 - len(raw))
            except (EOFError, OSError, zlib.error) as exc:
                raise BadInput(path, no, 1, gzip_error(exc)) from None
            if not raw:
                break
            if len(raw) > limit and not raw.endswith(b"\n"):
                raise BadInput(path, no, 1, f"line longer than {limit} bytes")
            if no == 1 and raw.startswith(BOM):  # dropped, as every reader drops it
                raw = raw[len(BOM) :]
            out.append((no, raw.decode("utf-8", errors="replace").rstrip("\r\n")))
    finally:
        close_stream(stream)
    return out


def _json(text: str) -> Any:
    try:
        return json.loads(text)
    except (ValueError, RecursionError):
        return None


def _vllm_log(path: str, no: int, text: str) -> tuple[str, str] | None:
    """(layout, releases) of a vLLM spec-decode log line, through `import logs`' own parser;
    None if it is not one. The one call into engine_bridge/importers/logs.py."""
    from spectally.engine_bridge.importers import logs
    from spectally.engine_bridge.steplog.source import BadInput

    try:
        parsed = logs.parse_line(path, no, text)
    except BadInput as exc:
        return (f"unread: {exc.reason}", "a layout `import logs` does not read")
    if parsed is None:
        return None
    return parsed.layout.name, parsed.layout.versions


def explain(path: str) -> Explanation:
    from spectally.engine_bridge.engines import LLAMACPP_REPORTS, SGLANG_REPORTS, TRTLLM_REPORTS
    from spectally.engine_bridge.steplog.source import BadInput

    lines = _head(path)
    texts = [t for _, t in lines if t.strip()]
    if not texts:
        raise BadInput(path, 1, 1, "empty input: nothing to explain")
    records = _records(texts)
    if records:
        for record in records:
            known = _explain_json(path, record)
            if known is not None:
                return known
        raise BadInput(
            path,
            1,
            1,
            f"no JSON record spectally knows among the first {len(records)} (keys of the"
            f" first: {sorted(records[0])[:8]}; looked for a step log header, vLLM's"
            " per-request spec-decode metrics, llama-server timings.draft_n, SGLang meta_info,"
            " TensorRT-LLM specDecodingStats)",
        )
    joined = "\n".join(texts)
    from spectally.engine_bridge.importers.prometheus import RAY_PREFIXES

    # vLLM's own names, and the same names as Ray Serve exports them (the reader's list)
    prefix = next(
        (
            p
            for p in ("vllm:spec_decode_", *RAY_PREFIXES)
            if re.search(f"^{re.escape(p)}", joined, re.M)
        ),
        None,
    )
    if prefix is not None:
        return Explanation(
            path,
            "vLLM",
            "Prometheus scrape",
            f"{prefix}* counters" + (" (served through Ray)" if prefix in RAY_PREFIXES else ""),
            "vLLM V1 (0.8.x and later)",
            "spectally import prometheus FILE",
            [
                "accepted <= drafted, Σ per-position = accepted, per-position non-increasing,"
                " monotone counters across scrapes",
            ],
            [
                "verified (vLLM exports no verified counter)",
                "the RFC's drafted: grammar-cut drafts are left out by vLLM <= 0.33",
            ],
            [
                ("num_drafts_total", "vLLM steps: scheduled blocks with drafts (not RFC steps)"),
                ("num_draft_tokens_total", "vLLM drafted: scheduled slots, padding included"),
                ("num_accepted_tokens_total", RFC["accepted"]),
            ],
        )
    for prefix, engine in (
        ("llamacpp:spec_decode_", "llama.cpp"),
        ("lmdeploy:spec_decode_", "LMDeploy"),
    ):
        if prefix in joined:
            return Explanation(
                path,
                engine,
                "Prometheus scrape",
                f"{prefix}* counters",
                "llama.cpp 0.5.0-dev (commit 0c1e570) and later"
                if engine == "llama.cpp"
                else "LMDeploy 0.18 (names only)",
                "spectally import llamacpp LOG --metrics-before A --metrics-after B"
                if engine == "llama.cpp"
                else "spectally import prometheus (vLLM-shaped names; not wired for lmdeploy:)",
                ["the totals of a traced log's step log, differenced over idle scrapes"]
                if engine == "llama.cpp"
                else [],
                [
                    "running requests (llama.cpp's /metrics moves when a request stops)"
                    if engine == "llama.cpp"
                    else "anything: LMDeploy's drafted means configured slots (not proposed)",
                ],
                [
                    ("num_drafts_total", RFC["steps"]),
                    (
                        "num_draft_tokens_total",
                        RFC["drafted"]
                        if engine == "llama.cpp"
                        else "configured draft slots x steps",
                    ),
                    ("num_accepted_tokens_total", RFC["accepted"]),
                ],
            )
    if "sglang:spec_accept_" in joined:
        return Explanation(
            path,
            "SGLang",
            "Prometheus scrape",
            "sglang:spec_accept_length / sglang:spec_accept_rate gauges",
            "SGLang 0.5.x (definitions pinned at 0.5.23)",
            "spectally import sglang FILE --draft-tokens D",
            ["accept length >= 1, and accept length - 1 = rate x D within rounding"],
            [
                "totals of any kind: the gauges hold the last logging interval's ratios",
                "the RFC's acceptance rate: the denominator is configured slots, not drafts",
            ],
            [
                (
                    "spec_accept_length",
                    "1 + RFC accepted / RFC steps over the interval (bonus included)",
                ),
                (
                    "spec_accept_rate",
                    "RFC accepted / (steps x configured D), not accepted / drafted",
                ),
            ],
        )
    return _explain_log(
        path, lines, LLAMACPP_REPORTS.engine, SGLANG_REPORTS.engine, TRTLLM_REPORTS.engine
    )


def _records(texts: list[str]) -> list[dict[str, Any]]:
    """The JSON objects of a file's first lines: a JSON array's items, else one object per line
    (NDJSON); none if the first line is not JSON."""
    first = _json(texts[0])
    whole = _json("\n".join(texts)) if texts[0].lstrip().startswith("[") else None
    if isinstance(whole, list):
        items = [item if isinstance(item, dict) else _json(item) for item in whole]
    elif isinstance(first, dict):
        items = [first, *(_json(t) for t in texts[1:])]
    else:
        return []
    return [item for item in items if isinstance(item, dict)]


def _explain_json(path: str, rec: dict[str, Any]) -> Explanation | None:
    """What the record is; None if it is none of the JSON records spectally reads (a
    response without spec-decode fields, say: the next one may have them)."""
    if rec.get("record") == "header":
        engine = str(rec.get("engine", "?"))
        version = str(rec.get("engine_version", "?"))
        return Explanation(
            path,
            f"{engine} {version}",
            "spectally step log",
            f"schema_version {rec.get('schema_version')}, k = {rec.get('num_speculative_tokens')},"
            f" {rec.get('scheduling')} scheduling",
            "written by the recorder or an importer",
            "spectally replay FILE",
            [
                "every step against the reference (the engine's own counters, step by step)",
                "the RFC's drafted, verified, accepted and steps, and the shift from the"
                " engine's counting to the RFC's",
            ],
            [],
            [(name, meaning) for name, meaning in RFC.items()],
        )
    meta = rec.get("meta_info", rec)
    if isinstance(meta, dict) and "spec_verify_ct" in meta:
        return Explanation(
            path,
            "SGLang",
            "per-request meta_info (JSON)",
            "spec_verify_ct, spec_accept_rate, spec_accept_length"
            + (
                ", spec_num_correct_drafts / spec_num_proposed_drafts"
                if "spec_num_proposed_drafts" in meta
                else ""
            ),
            "SGLang 0.5.x (definitions pinned at 0.5.23; older releases name the counts"
            " spec_accept_token_num / spec_draft_token_num)",
            "spectally import sglang FILE",
            [
                "proposed = verify_ct x D, rate = correct / proposed, length ="
                " completion_tokens / verify_ct, the histogram against both",
            ],
            ["the RFC's drafted: proposed counts configured slots, not what the drafter proposed"],
            [
                ("spec_verify_ct", RFC["steps"]),
                ("spec_num_correct_drafts", RFC["accepted"]),
                ("spec_num_proposed_drafts", "configured draft slots x steps (>= RFC drafted)"),
                ("spec_accept_length", "1 + accepted / steps plus the prefill token's share"),
            ],
        )
    if isinstance(rec.get("specDecodingStats"), dict):
        return Explanation(
            path,
            "TensorRT-LLM",
            "iteration stats (JSON)",
            "IterationStats.specDecodingStats",
            "TensorRT-LLM PyTorch executor (read in source, not run)",
            "spectally import trtllm FILE",
            [
                "accepted <= drafted, requests <= drafted, acceptanceLength ="
                " (accepted + requests) / requests"
            ],
            [
                "per-request figures (the stats are per iteration)",
                "draft token id 0: taken for padding when num_draft_tokens is 0",
            ],
            [
                ("numDraftTokens", RFC["drafted"] + " (tree modes: the path length)"),
                ("numAcceptedTokens", RFC["accepted"]),
                ("numRequestsWithDraftTokens", RFC["steps"] + " in this iteration"),
                ("acceptanceLength", "1 + accepted / steps for this iteration"),
            ],
        )
    timings = rec.get("timings")
    if isinstance(timings, dict) and "draft_n" in timings:
        return Explanation(
            path,
            "llama.cpp",
            "per-request responses (JSON)",
            "timings.draft_n / draft_n_accepted",
            "llama.cpp server (ggml-org/llama.cpp#12603 and later)",
            "spectally import llamacpp LOG --out STEPS --responses FILE",
            ["each request's sums against a traced log's verification lines"],
            ["steps (no per-request step count is reported)"],
            [("draft_n", RFC["drafted"]), ("draft_n_accepted", RFC["accepted"])],
        )
    return _explain_vllm_requests(path, rec)


def _explain_vllm_requests(path: str, rec: dict[str, Any]) -> Explanation | None:
    """vLLM's per-request spec-decode metrics, found by `import requests`' own reader (the one
    call into engine_bridge/importers/requests.py); None if the record holds none."""
    from spectally.engine_bridge.importers import requests

    found = requests.extract(path, 1, rec)
    if not found:
        return None
    metrics = found[0].metrics
    where = (
        "RequestOutput.outputs[].spec_decode_metrics (offline)"
        if "outputs" in rec
        else "metrics.speculative_decoding (OpenAI API)"
        if "metrics" in rec
        else "bare metrics objects"
    )
    detailed = isinstance(metrics, dict) and "per_step_accepted" in metrics
    return Explanation(
        path,
        "vLLM",
        "per-request spec-decode metrics (JSON)",
        where + (", detailed per-step lists" if detailed else ""),
        "vLLM 0.32 and later, PR #48915: --per-request-spec-decode-metrics summary|detailed",
        "spectally import requests FILE --metrics SCRAPE",
        [
            "num_spec_steps = Σ histogram, accepted = Σ i·histogram[i], accepted <= drafted <="
            " k·steps, the mean length and the rate by vLLM's formulas",
            "detailed: each step replayed through the reference's step rules",
            "with --metrics: the sums over requests against the Prometheus counters",
        ],
        [
            "verified (no per-request verified count)",
            "the RFC's drafted: grammar-cut drafts are left out by vLLM <= 0.33",
        ],
        [
            ("num_spec_steps", "vLLM steps: scheduled blocks with drafts (not RFC steps)"),
            ("num_draft_tokens", "vLLM drafted: scheduled slots, padding included"),
            ("num_accepted_draft_tokens", RFC["accepted"]),
            ("mean_acceptance_length", "1 + accepted / num_spec_steps (1.0 with no step)"),
            ("draft_acceptance_rate", "accepted / num_draft_tokens (0.0 with none drafted)"),
        ],
    )


def _explain_log(path: str, lines: list[tuple[int, str]], *_: str) -> Explanation:
    from spectally.engine_bridge.llamacpp import serverlog, summaries
    from spectally.engine_bridge.steplog.source import BadInput

    layouts: dict[str, int] = {}
    traces = 0
    vllm: tuple[str, str] | None = None
    sglang = 0
    for no, text in lines:
        if vllm is None and ("SpecDecoding metrics" in text or "Speculative metrics" in text):
            vllm = _vllm_log(path, no, text) or ("'Speculative metrics:'", "vLLM V0 / 0.8.2")
        if "accept len: " in text and "Decode batch" in text:
            sglang += 1
        m = serverlog.SLOT.search(text)
        if m is not None and serverlog.ACCEPTED.match(m.group("msg")):
            traces += 1
    try:
        for p in summaries.parse(path, lines):
            name = p.layout if isinstance(p, summaries.Summary) else "statistics"
            layouts[name] = layouts.get(name, 0) + 1
    except BadInput:
        pass
    if layouts or traces:
        names = ", ".join(f"{summaries.LAYOUTS[k]} x{v}" for k, v in layouts.items())
        checks = []
        if layouts:
            checks.append(
                "each summary: rate = accepted / generated (%0.5f), the mean length and"
                " per-position rates against an integral step count (ggml-org/llama.cpp#24536);"
                " each statistics line against its counts"
            )
        if traces:
            checks.append(
                f"{traces} traced verifications: a step log the replay judges step by step"
            )
        return Explanation(
            path,
            "llama.cpp",
            "llama-server log",
            (names or "traced verification lines")
            + (f"; {traces} LLAMA_TRACE=1 lines" if traces else ""),
            "each layout above names the releases that print it",
            "spectally import llamacpp FILE"
            + (" --out STEPS (then spectally replay STEPS)" if traces else ""),
            checks,
            []
            if traces
            else ["single steps: run llama-server with LLAMA_TRACE=1 to log each verification"],
            [
                (
                    "generated",
                    RFC["drafted"] + " (every draft token, grammar-forbidden ones included)",
                ),
                ("accepted", RFC["accepted"]),
                ("verification steps (not printed; n of the mean)", RFC["steps"]),
            ],
        )
    if vllm is not None:
        return Explanation(
            path,
            "vLLM",
            "server log",
            vllm[0],
            vllm[1],
            "spectally import logs FILE",
            [
                "what the layout prints: rate against Accepted/Drafted, mean length against the"
                " per-position rates"
            ],
            ["verified and the RFC's drafted (vLLM leaves grammar-cut drafts out up to 0.33)"],
            [
                ("Drafted", "vLLM drafted over the interval: scheduled slots, padding included"),
                ("Accepted", RFC["accepted"]),
            ],
        )
    if sglang:
        return Explanation(
            path,
            "SGLang",
            "server log",
            "'Decode batch, ... accept len: L, accept rate: R'",
            "SGLang 0.4.x-0.5.x (definitions pinned at 0.5.23)",
            "spectally import sglang FILE --draft-tokens D",
            ["accept len >= 1; with D, accept len - 1 = accept rate x D"],
            ["totals: each line is one logging interval's ratio"],
            [
                ("accept len", "1 + accepted / steps over the interval (bonus included)"),
                ("accept rate", "accepted / (steps x configured D), not accepted / drafted"),
            ],
        )
    raise BadInput(
        path,
        1,
        1,
        f"no engine output spectally knows in the first {len(lines)} lines (looked for a step"
        " log header, vLLM's 'SpecDecoding metrics:', llama-server summaries and traces,"
        " SGLang's 'accept len', Prometheus spec-decode series, SGLang meta_info, TensorRT-LLM"
        " specDecodingStats, vLLM per-request metrics)",
    )


@click.command("explain", epilog=EXIT_HELP)
@click.argument("files", nargs=-1, required=True, metavar="FILE...")
@click.option("--json", "as_json", is_flag=True, help="print one JSON object per file")
def explain_cmd(files: tuple[str, ...], as_json: bool) -> None:
    """Say what each file is (engine, layout and its releases, kind of record), what spectally
    can and cannot check from it, and the RFC meaning of each number it reports."""
    from spectally.engine_bridge.steplog.source import BadInput

    code = ExitCode.OK
    out: list[dict[str, Any]] = []
    for path in files:
        try:
            e = explain(path)
        except BadInput as exc:
            click.echo(str(exc), err=True)
            code = ExitCode.BAD_INPUT
            continue
        if as_json:
            out.append(asdict(e))
        else:
            click.echo(e.render())
    if as_json:
        click.echo(json.dumps(out, indent=2))
    sys.exit(code)
