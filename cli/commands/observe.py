"""The commands that write what users look at (docs/observe.md): `spectally rules`,
`spectally dashboard`, `spectally lint` and `spectally export aiperf`."""

from __future__ import annotations

import os
import sys

import click
from spectally.exit_codes import ExitCode

from . import exits, options

SCHEME_NAMES = ("vllm", "rfc", "backport")
# The other exporter families' schemes (engine_bridge/observe/families.py), written on request.
FAMILY_SCHEME_NAMES = ("ray-vllm", "ray-rfc", "llamacpp", "lmdeploy")
_schemes = click.option(
    "--scheme",
    "schemes",
    type=click.Choice(SCHEME_NAMES + FAMILY_SCHEME_NAMES),
    multiple=True,
    help="counter names to write rules for (repeatable; default: vllm, rfc and backport): vllm"
    " (0.32-0.34 as released), rfc (SPEC REP-1), backport (spectally:* of the backport),"
    " ray-vllm / ray-rfc (the same served through Ray Serve: ray_vllm_*), llamacpp"
    " (llamacpp:spec_decode_*), lmdeploy (drafted is the configured k x steps: no acceptance"
    " rate is written)",
)


def _bad_input(message: str) -> None:
    click.echo(message, err=True)
    sys.exit(int(ExitCode.BAD_INPUT))


@click.command(
    epilog=exits.epilog(
        "0 the files are written; 2 bad input or usage (a log the replay refuses, an"
        " unwritable directory); 3 a --tests-from log ends before its totals record (the files"
        " are written, and where each such log ends is named)"
    )
)
@click.option(
    "--out",
    "out_dir",
    required=True,
    type=click.Path(file_okay=False),
    help="directory to write spectally-rules.yml (and the promtool tests) into",
)
@_schemes
@click.option("--window", default="5m", show_default=True, help="the rate() window")
@click.option(
    "--tests-from",
    "logs",
    multiple=True,
    type=click.Path(exists=True, dir_okay=False),
    help="a step log to replay into a `promtool test rules` file (repeatable): the reference's"
    " counters after each step as input series, its metrics as expected values",
)
@options.force_profile
def rules(
    out_dir: str,
    schemes: tuple[str, ...],
    window: str,
    logs: tuple[str, ...],
    force_profile: str | None,
) -> None:
    """Write Prometheus recording and alert rules for the spec's derived metrics.

    Check them with `promtool check rules DIR/spectally-rules.yml`; with --tests-from, run
    `promtool test rules DIR/test-*.yml` (from DIR)."""
    from spectally.engine_bridge.observe import rules as gen
    from spectally.engine_bridge.steplog.outputs import check_output_dir, check_outputs
    from spectally.engine_bridge.steplog.records import BadInput

    if force_profile is not None and not logs:
        raise click.UsageError("--force-profile applies to the --tests-from logs: give one")
    if logs and window != "5m":
        raise click.UsageError("--tests-from checks the 5m rules: leave --window at 5m")
    if logs and set(schemes) - set(SCHEME_NAMES):
        raise click.UsageError(
            "--tests-from replays vLLM step logs into the vllm, rfc and backport schemes only"
        )
    why = gen.window_error(window)
    if why is not None:
        raise click.BadParameter(why, param_hint="--window")
    names = list(schemes) or None
    path = os.path.join(out_dir, "spectally-rules.yml")
    test_paths = _test_paths(out_dir, logs)
    try:
        check_output_dir("--out", out_dir)
        check_outputs(
            [("--out", p) for p in (path, *test_paths)],
            [("--tests-from", log) for log in logs],
            folders_made=True,
        )
        tests, incomplete = [], []
        for log, test_path in zip(logs, test_paths, strict=True):
            text, cut = _rules_test(log, names, force_profile)
            tests.append((test_path, text))
            if cut is not None:
                incomplete.append(f"{cut}: incomplete, its test pins the counts up to there")
        os.makedirs(out_dir, exist_ok=True)
        _write(path, gen.render(names, window))
        for test_path, text in tests:
            _write(test_path, text)
    except BadInput as exc:
        _bad_input(str(exc))
    except OSError as exc:  # makedirs: a parent that cannot hold the folder
        _bad_input(f"{out_dir}: cannot write --out: {exc.strerror or exc}")
    click.echo(path)
    for test_path in test_paths:
        click.echo(test_path)
    if incomplete:
        click.echo("\n".join(incomplete), err=True)
        sys.exit(int(ExitCode.INCOMPLETE))


_LOG_SUFFIXES = ("ndjson", "jsonl", "json", "gz", "log", "txt")


def _test_paths(out_dir: str, logs: tuple[str, ...]) -> list[str]:
    """One promtool test file per log, ``test-<name>.yml``, ``<name>`` the file name without
    its step-log suffixes (``.ndjson``, ``.gz``, ...: a dot inside the name stays, so
    ``vllm-0.32-sync.ndjson`` and ``vllm-0.33-sync.ndjson`` keep their versions); logs of one
    name (from two folders) get ``-2``, ``-3``, ... so none overwrites another."""
    out, seen = [], set()
    for log in logs:
        base = os.path.basename(log)
        while (stem := base.rsplit(".", 1))[-1].lower() in _LOG_SUFFIXES and len(stem) == 2:
            base = stem[0]
        base = base or "log"
        name, n = base, 1
        while name in seen:
            n += 1
            name = f"{base}-{n}"
        seen.add(name)
        out.append(os.path.join(out_dir, f"test-{name}.yml"))
    return out


def _rules_test(
    log: str, names: list[str] | None, force_profile: str | None
) -> tuple[str, str | None]:
    """The promtool test of one log (replayed under ``force_profile`` when given), and where
    the log ends when it has no totals record (None: complete); `BadInput` for a log the replay
    refuses or that diverges (a test of a diverging log would pin counts that are not the
    spec's)."""
    from spectally.engine_bridge.observe import promtest
    from spectally.engine_bridge.observe.timeline import replay_timeline
    from spectally.engine_bridge.steplog.records import BadInput

    tl = replay_timeline(log, force_profile=force_profile)
    if tl.engine_name != "vllm":  # its counts would be fed in under vLLM's series names
        raise BadInput(
            log,
            1,
            1,
            f"a {tl.engine_name} log: --tests-from replays vLLM step logs into vLLM's series"
            " names (vllm, rfc, backport schemes); no test written",
        )
    if tl.divergence is not None:
        raise BadInput(
            log,
            1,
            1,
            f"the log diverges from the reference ({tl.divergence}); run `spectally replay` on"
            " it: no test written",
        )
    test = promtest.render(promtest.build_test(tl, "spectally-rules.yml", schemes=names))
    return test, tl.incomplete


def _write(path: str, text: str) -> None:
    from spectally.engine_bridge.steplog.outputs import write_output

    write_output(path, text)


@click.command(epilog=exits.epilog("0 the dashboard is written; 2 usage (an unwritable path)"))
@click.option(
    "--out",
    "out_file",
    required=True,
    type=click.Path(dir_okay=False, allow_dash=True),
    help="where to write the dashboard JSON (- for stdout); import it in Grafana",
)
@click.option(
    "--rfc",
    type=click.Choice(("backport", "rfc")),
    default="backport",
    show_default=True,
    help="whose RFC counters the rfc side reads: the backport's spectally:* or REP-1's names",
)
@click.option(
    "--ray",
    is_flag=True,
    help="vLLM served through Ray Serve: read vLLM's names as ray_vllm_*",
)
def dashboard(out_file: str, rfc: str, ray: bool) -> None:
    """Write a Grafana dashboard: acceptance rate and length legacy vs rfc, per position,
    drafted / verified / accepted rates."""
    from spectally.engine_bridge.observe import dashboard as gen
    from spectally.engine_bridge.steplog.outputs import check_outputs
    from spectally.engine_bridge.steplog.records import BadInput

    try:
        check_outputs([("--out", out_file)], [])
    except BadInput as exc:
        _bad_input(str(exc))
    text = gen.render(rfc, ray)
    if out_file == "-":
        click.echo(text, nl=False)
        return
    try:
        _write(out_file, text)
    except BadInput as exc:
        _bad_input(str(exc))
    click.echo(out_file)


@click.command(
    epilog=exits.epilog(
        "0 no finding; 1 findings (each names the rule or panel and the fix); 2 bad input (not"
        " rules or a dashboard, PromQL that does not parse, unreadable)",
        several=True,
    )
)
@click.argument("files", nargs=-1, required=True, metavar="FILE...")
@click.option("--json", "as_json", is_flag=True, help="print the findings as JSON")
def lint(files: tuple[str, ...], as_json: bool) -> None:
    """Check Prometheus rules (YAML) or Grafana dashboards (JSON) for the known spec-decode
    mistakes: per-position series summed into a total, rate() over a gauge, a ratio of rates
    over different windows or label sets, acceptance against a configured k, mean length
    without the + 1, metric names of different versions in one expression."""
    import json

    from spectally.engine_bridge.observe.lint import Finding, lint_file
    from spectally.engine_bridge.steplog.records import BadInput

    findings: list[Finding] = []
    bad = False
    for path in files:
        try:
            findings.extend(lint_file(path))
        except BadInput as exc:
            click.echo(str(exc), err=True)
            bad = True
    if as_json:
        click.echo(json.dumps([f.to_dict() for f in findings], indent=2))
    else:
        for f in findings:
            click.echo(f.render())
        click.echo(f"{len(findings)} finding(s) in {len(files)} file(s)", err=True)
    if bad:
        sys.exit(int(ExitCode.BAD_INPUT))
    sys.exit(int(ExitCode.DIVERGENCE if findings else ExitCode.OK))


@click.group(
    "export",
    epilog=exits.epilog(
        "0 the records are written; 1 a record the other tool's model rejects; 2 bad input or usage"
    ),
)
def export_group() -> None:
    """Export what a step log counted in other tools' formats."""


@export_group.command(
    "aiperf",
    epilog=exits.epilog(
        "0 records written; 1 a record AIPerf's model rejects (--validate); 2 bad input (a log"
        " the replay refuses) or usage (--validate without spectally[aiperf]); 3 the log ends"
        " before its totals record (its records are written, those of requests still active"
        " with their counts so far, and the end of the log is named)"
    ),
)
@click.argument("log", type=click.Path(exists=True, dir_okay=False, allow_dash=False))
@click.option(
    "--profile",
    type=click.Choice(("rfc", "vllm-legacy")),
    default="rfc",
    show_default=True,
    help="whose counters: the RFC's, or the engine's own under the log's profile (vLLM <= 0.34:"
    " equal to vLLM's own payload); each record's \"profile\" names the one used",
)
@click.option(
    "--out",
    "out_file",
    type=click.Path(dir_okay=False, allow_dash=True),
    default="-",
    help="JSON Lines file, one SpecDecodeAcceptanceRecord per request (default: stdout)",
)
@click.option("--validate", is_flag=True, help="validate every record with AIPerf's own model")
@options.force_profile
def aiperf_cmd(
    log: str, profile: str, out_file: str, validate: bool, force_profile: str | None
) -> None:
    """Per-request acceptance of a step log as AIPerf's SpecDecodeAcceptanceRecord (JSON
    Lines), so a benchmark run and a production log compare in one tool (docs/observe.md)."""
    from spectally.engine_bridge.observe import aiperf
    from spectally.engine_bridge.steplog.outputs import check_outputs
    from spectally.engine_bridge.steplog.records import BadInput

    try:
        check_outputs([("--out", out_file)], [("LOG", log)])
        result = aiperf.export(log, profile, force_profile=force_profile)
    except BadInput as exc:
        _bad_input(str(exc))
    if validate:
        try:
            from pydantic import ValidationError

            aiperf.validate(result.records)
        except ImportError as exc:
            raise click.UsageError(f"--validate needs spectally[aiperf] ({exc})") from None
        except ValidationError as exc:
            click.echo(f"{log}: AIPerf rejects a record: {exc}", err=True)
            sys.exit(int(ExitCode.DIVERGENCE))
    lines = "".join(line + "\n" for line in aiperf.jsonl(result.records))
    if out_file == "-":
        click.echo(lines, nl=False)
    else:
        try:
            _write(out_file, lines)
        except BadInput as exc:
            _bad_input(str(exc))
    click.echo(
        f"{len(result.records)} records ({result.profile}"
        + (f"; the log replayed under {force_profile} FORCED" if force_profile else "")
        + ")"
        + (f", {result.skipped} requests without a spec step skipped" if result.skipped else ""),
        err=True,
    )
    if result.incomplete is not None:
        click.echo(result.incomplete, err=True)
        sys.exit(int(ExitCode.INCOMPLETE))
