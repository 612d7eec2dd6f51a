"""``spectally import llamacpp``: a llama-server log as a step log the replay judges.

The work is in `spectally.engine_bridge.llamacpp.importer`; this module is the command.
"""

from __future__ import annotations

import json
import sys

import click
from spectally.exit_codes import EXIT_COMMON, ExitCode

EXIT_HELP = (
    "Exit codes: 0 the step log is written and every check agrees; 1 the log's per-request"
    " lines or the responses' timings disagree with its verification lines (the step log is"
    " still written); 2 bad input or usage, named file:line; 3 incomplete: a request without"
    " its 'stop processing' line, or no /metrics scrape (the step log has no totals);"
    " " + EXIT_COMMON
)


@click.command("llamacpp", epilog=EXIT_HELP)
@click.argument("server_log", type=click.Path(dir_okay=False))
@click.option("--out", "out", required=True, type=click.Path(dir_okay=False), help="step log")
@click.option(
    "--metrics-before", type=click.Path(dir_okay=False), help="/metrics text before the run"
)
@click.option(
    "--metrics-after", type=click.Path(dir_okay=False), help="/metrics text after the run"
)
@click.option(
    "--responses",
    type=click.Path(dir_okay=False),
    help="the responses' JSON (a list or NDJSON): timings.draft_n / draft_n_accepted",
)
@click.option(
    "--draft-max",
    type=click.IntRange(1, 1024),
    default=None,
    help="--spec-draft-n-max of the server (default: the per-position counter's length)",
)
@click.option("--engine-version", default=None, help="when the log lacks a version: line")
@click.option("--spec-method", default="draft-simple", show_default=True, help="--spec-type")
def llamacpp_cmd(
    server_log: str,
    out: str,
    metrics_before: str | None,
    metrics_after: str | None,
    responses: str | None,
    draft_max: int | None,
    engine_version: str | None,
    spec_method: str,
) -> None:
    """Turn a llama-server log captured with LLAMA_TRACE=1 (one 'accepted A/N draft tokens'
    line per verification) into a step log (engine llama.cpp). The /metrics scrapes before and
    after the run become its totals (scrape them with the server idle, and let the log cover
    exactly the requests between them: /metrics moves only when a request stops); recurrent
    targets' restore-and-replay pairs count once."""
    from spectally.engine_bridge.llamacpp.importer import import_log
    from spectally.engine_bridge.steplog.outputs import check_outputs, write_output
    from spectally.engine_bridge.steplog.source import BadInput

    try:
        check_outputs(
            [("--out", out)],
            [
                ("SERVER_LOG", server_log),
                ("--metrics-before", metrics_before),
                ("--metrics-after", metrics_after),
                ("--responses", responses),
            ],
        )
        result = import_log(
            server_log,
            metrics_before=metrics_before,
            metrics_after=metrics_after,
            responses=responses,
            k=draft_max,
            engine_version=engine_version,
            spec_method=spec_method,
        )
    except BadInput as exc:
        click.echo(str(exc), err=True)
        sys.exit(ExitCode.BAD_INPUT)
    text = "".join(json.dumps(rec, separators=(",", ":")) + "\n" for rec in result.records)
    try:
        write_output(out, text)
    except BadInput as exc:
        click.echo(str(exc), err=True)
        sys.exit(ExitCode.BAD_INPUT)
    steps = sum(1 for r in result.records if r["record"] == "request_step")
    click.echo(
        f"{out}: {len(result.records)} records, {steps} verification steps"
        f" ({result.replays} recurrent replay pairs counted once)"
    )
    for line in result.divergences:
        click.echo(f"DIVERGE {line}")
    for line in result.incomplete:
        click.echo(f"INCOMPLETE {line}")
    sys.exit(result.exit_code)
