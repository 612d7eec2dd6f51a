"""``spectally import llamacpp``: a llama-server log's acceptance summaries checked, or (with
``--out``, from a log captured with ``LLAMA_TRACE=1``) turned into a step log the replay judges.

The work is in `spectally.engine_bridge.llamacpp`; this module is the command.
"""

from __future__ import annotations

import sys

import click
from spectally.exit_codes import ExitCode

from . import exits

EXIT_HELP = exits.epilog(
    "0 every check agrees (with --out: the step log is written); 1 a summary line"
    " contradicts itself or its counts, or (with --out) the log's per-request lines or the"
    " responses' timings disagree with its verification lines (the step log is still written);"
    " 2 bad input or usage, named file:line (not a llama-server log, --out without"
    " LLAMA_TRACE=1 lines, /metrics going backwards, a step log the replay would refuse);"
    " 3 incomplete: a request without its 'stop processing' line, or no /metrics scrape (the"
    " step log has no totals)"
)


def _version(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    if value is None:
        return None
    from spectally.engine_bridge.llamacpp.importer import engine_version_error

    if (why := engine_version_error(value)) is not None:
        raise click.BadParameter(why)
    return value


@click.command("llamacpp", epilog=EXIT_HELP)
@click.argument("server_log", type=click.Path(dir_okay=False, allow_dash=True))
@click.option(
    "--out",
    "out",
    default=None,
    type=click.Path(dir_okay=False),
    help="write the step log here (needs LLAMA_TRACE=1 lines); without it the summaries are"
    " checked",
)
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
    help="--spec-draft-n-max of the server (default, and what a scrape must agree with: its"
    " per-position counter's length)",
)
@click.option(
    "--engine-version",
    default=None,
    callback=_version,
    help="when the log lacks a version: line (e.g. 0.5.0-dev+0c1e570)",
)
@click.option("--spec-method", default="draft-simple", show_default=True, help="--spec-type")
@click.option("--json", "as_json", is_flag=True, help="print the summaries' findings as JSON")
def llamacpp_cmd(
    server_log: str,
    out: str | None,
    metrics_before: str | None,
    metrics_after: str | None,
    responses: str | None,
    draft_max: int | None,
    engine_version: str | None,
    spec_method: str,
    as_json: bool,
) -> None:
    """Check a llama-server log's acceptance summaries (plain, gzip or - for stdin): every
    'draft acceptance' line (all layouts) and every 'statistics' line, each a verdict. With
    --out, a log captured with LLAMA_TRACE=1 (one 'accepted A/N draft tokens' line per
    verification) becomes a step log (engine llama.cpp); the /metrics scrapes before and after
    the run become its totals (scrape them with the server idle, and let the log cover exactly
    the requests between them: /metrics moves only when a request stops); recurrent targets'
    restore-and-replay pairs count once."""
    from spectally.engine_bridge.importers.findings import exit_code
    from spectally.engine_bridge.steplog.source import BadInput

    if out is None:
        from spectally.commands.import_engines import run_findings
        from spectally.engine_bridge.llamacpp.importer import check_summaries

        run_findings(lambda: check_summaries(server_log), as_json)

    from spectally.engine_bridge.importers.inputs import refuse_repeats
    from spectally.engine_bridge.llamacpp.importer import encode, import_log, refused_by_replay
    from spectally.engine_bridge.steplog.outputs import check_outputs, write_output

    inputs = [
        ("SERVER_LOG", server_log),
        ("--metrics-before", metrics_before),
        ("--metrics-after", metrics_after),
        ("--responses", responses),
    ]
    try:
        check_outputs([("--out", out)], inputs)
        refuse_repeats(inputs)  # a scrape differenced with itself: totals of 0
        result = import_log(
            server_log,
            metrics_before=metrics_before,
            metrics_after=metrics_after,
            responses=responses,
            k=draft_max,
            engine_version=engine_version,
            spec_method=spec_method,
        )
        if (why := refused_by_replay(result.records, out)) is not None:
            raise BadInput(out, 1, 1, f"not written: the replay would refuse it: {why}")
        write_output(out, b"".join(line + b"\n" for line in encode(result.records)))
    except BadInput as exc:
        click.echo(str(exc), err=True)
        sys.exit(ExitCode.BAD_INPUT)
    except OSError as exc:
        click.echo(f"{out}:1:1: cannot write: {exc.strerror or exc}", err=True)
        sys.exit(ExitCode.BAD_INPUT)
    steps = sum(1 for r in result.records if r["record"] == "request_step")
    click.echo(
        f"{out}: {len(result.records)} records, {steps} verification steps"
        f" ({result.replays} recurrent replay pairs counted once)"
    )
    for f in result.findings:
        if f.verdict != "ok":
            click.echo(f.render())
    for line in result.divergences:
        click.echo(f"DIVERGE {line}")
    for line in result.incomplete:
        click.echo(f"INCOMPLETE {line}")
    if result.exit_code == 1 or exit_code(result.findings) == ExitCode.DIVERGENCE:
        sys.exit(ExitCode.DIVERGENCE)
    sys.exit(ExitCode(result.exit_code))
