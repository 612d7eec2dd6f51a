"""The one `spectally` command. Subcommands that need optional dependencies (z3, the bridge)
are imported only when invoked, so `spectally step` works with the reference alone.

Every run ends with a code of the contract in `spectally.exit_codes` (README, "Exit codes"):
`LazyGroup.main` turns Ctrl-C into 130, a click usage error into 2 and any unexpected
exception into 70 with one line on stderr and the full report in a temp file, never a bare
traceback."""

from __future__ import annotations

import importlib
import json
import os
import sys
from collections.abc import Callable, Sequence
from typing import Any

import click
from spectally import __version__
from spectally.exit_codes import EXIT_COMMON, ExitCode
from spectally.reference.profile import PROFILES as _DECLARED

# Each command's exit codes, shown at the end of its --help (click rewraps the text).
EXIT_HELP: dict[str, str] = {
    "step": "Exit codes: 0 the counters are printed; 2 inadmissible input or usage (a count"
    " beyond the limit 1024 included); " + EXIT_COMMON,
    "vectors": "Exit codes: 0 every vector agrees with the reference; 1 a vector disagrees;"
    " 2 a malformed vectors file or usage; " + EXIT_COMMON,
    "prove": "Exit codes: 0 every property as expected (proved, or refuted where a refutation"
    " is expected); 1 a property is not as expected (the counterexample is printed); 2 usage; "
    + EXIT_COMMON,
}

# name -> ("module:attribute" of a click command loaded on first use, help, extra it needs).
LAZY_COMMANDS: dict[str, tuple[str, str, str]] = {
    "vectors": (
        "spectally.spec.vectors_cli:vectors",
        "check the reference against every vector",
        "",
    ),
    "prove": ("spectally.proofs.cli:prove", "prove the invariants with Z3", "proofs"),
    "replay": (
        "spectally.engine_bridge.cli:replay",
        "replay engine logs through the reference",
        "bridge",
    ),
    "parity": (
        "spectally.parity:parity",
        "sync against async, request by request",
        "bridge",
    ),
    "import": (
        "spectally.engine_bridge.cli:import_group",
        "check what engines already emit",
        "bridge",
    ),
    "rules": ("spectally.observe_cli:rules", "write Prometheus rules for the metrics", "observe"),
    "dashboard": ("spectally.observe_cli:dashboard", "write a Grafana dashboard", "observe"),
    "lint": ("spectally.observe_cli:lint", "check rules and dashboards for mistakes", "observe"),
    "export": ("spectally.observe_cli:export_group", "export counts to other tools", "observe"),
    "compare": (
        "spectally.compare:compare",
        "compare two engines' acceptance figures in the RFC's terms",
        "bridge",
    ),
    "conform": (
        "spectally.commands.conform:conform",
        "run an implementation of the core, in any language, against the core vectors",
        "bridge",
    ),
    "explain": (
        "spectally.explain:explain_cmd",
        "say what a file is and what can be checked from it",
        "bridge",
    ),
    "version-diff": (
        "spectally.engine_bridge.version_diff:version_diff",
        "a log's vLLM counters under each release's counting",
        "bridge",
    ),
}
# Subcommands of a lazy group kept in modules of their own: group -> (module:attribute, ...).
LAZY_SUBCOMMANDS: dict[str, tuple[str, ...]] = {
    "import": (
        "spectally.import_llamacpp:llamacpp_cmd",
        "spectally.import_engines:sglang_cmd",
        "spectally.import_engines:trtllm_cmd",
    ),
}


class LazyGroup(click.Group):
    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*super().list_commands(ctx), *LAZY_COMMANDS})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name in LAZY_COMMANDS:
            target, _, extra = LAZY_COMMANDS[cmd_name]
            module_name, attr = target.split(":")
            try:
                module = importlib.import_module(module_name)
            except ImportError as exc:  # a missing optional dependency: say which (exit 2)
                raise click.UsageError(
                    f"'{cmd_name}' is unavailable ({exc}); install spectally[{extra or 'dev'}]"
                ) from exc
            command: click.Command = getattr(module, attr)
            if cmd_name in EXIT_HELP and not command.epilog:
                # The command's own module is another part's; its exit codes are listed here.
                command.epilog = EXIT_HELP[cmd_name]
            for sub in LAZY_SUBCOMMANDS.get(cmd_name, ()):
                sub_module, sub_attr = sub.split(":")
                assert isinstance(command, click.Group)
                command.add_command(getattr(importlib.import_module(sub_module), sub_attr))
            return command
        return super().get_command(ctx, cmd_name)

    def main(
        self,
        args: Sequence[str] | None = None,
        prog_name: str | None = None,
        complete_var: str | None = None,
        standalone_mode: bool = True,
        **extra: Any,
    ) -> Any:
        """click's entry point (the console script and CliRunner both call it), with every
        outcome mapped onto the exit-code contract (`guarded`)."""
        # No command uses numpy's linear algebra, yet numpy's wheels load OpenBLAS, which
        # starts a worker thread per core that spins waiting for work it is never given: about
        # 0.1 s of CPU in a replay of 200,000 records, and a core taken from fleet workers.
        # One thread, unless the environment says otherwise (read when numpy loads; child
        # processes, the fleet's workers among them, inherit it).
        os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
        if not standalone_mode:
            return super().main(args, prog_name, complete_var, standalone_mode=False, **extra)

        def run() -> Any:
            return super(LazyGroup, self).main(
                args, prog_name, complete_var, standalone_mode=False, **extra
            )

        sys.exit(guarded(run, args))

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        rows = [(name, LAZY_COMMANDS[name][1]) for name in sorted(LAZY_COMMANDS)]
        for name in super().list_commands(ctx):
            cmd = super().get_command(ctx, name)
            rows.append((name, cmd.get_short_help_str() if cmd else ""))
        with formatter.section("Commands"):
            formatter.write_dl(sorted(rows))


def guarded(run: Callable[[], Any], args: Sequence[str] | None = None) -> ExitCode:
    """Run click's non-standalone ``main`` and return the contract's exit code for whatever
    happened; a command's own ``sys.exit(code)`` passes through unchanged."""
    try:
        rv = run()
    except click.exceptions.Abort:  # click's wrapping of KeyboardInterrupt / EOF at a prompt
        click.echo("spectally: interrupted", err=True)
        return ExitCode.INTERRUPTED
    except KeyboardInterrupt:
        click.echo("spectally: interrupted", err=True)
        return ExitCode.INTERRUPTED
    except click.ClickException as exc:  # usage errors and bad parameters
        exc.show()
        return ExitCode.BAD_INPUT
    except ModuleNotFoundError as exc:
        extra = EXTRA_OF_MODULE.get((exc.name or "").split(".")[0])
        if extra is None:
            return _internal_error(exc, args)
        click.echo(
            f"spectally: this needs {exc.name!r}, which is not installed: install"
            f" spectally[{extra}] (pip install 'spectally[{extra}]')",
            err=True,
        )
        return ExitCode.BAD_INPUT
    except Exception as exc:
        return _internal_error(exc, args)
    return ExitCode(rv) if isinstance(rv, int) else ExitCode.OK


# The optional dependencies' modules, by the extra of pyproject.toml that installs them: a
# command that reaches one not installed names the extra (exit 2), never an internal error.
EXTRA_OF_MODULE: dict[str, str] = {
    **dict.fromkeys(
        ("jsonschema", "prometheus_client", "tqdm", "msgspec", "numpy", "numba"), "bridge"
    ),
    **dict.fromkeys(
        ("yaml", "promql_parser", "grafana_foundation_sdk", "matplotlib", "re2"), "observe"
    ),
    **dict.fromkeys(("z3", "crosshair"), "proofs"),
    **dict.fromkeys(("aiperf", "pydantic"), "aiperf"),
    "ray": "ray",
}


def _internal_error(exc: BaseException, args: Sequence[str] | None) -> ExitCode:
    """Exit 70: one line on stderr naming the full report written to a temp file."""
    try:
        report = write_report(exc, args)
    except OSError as why:  # no writable temp dir: still one line, never a traceback
        report = f"(not written: {why})"
    summary = " ".join(f"{type(exc).__name__}: {exc}".split())[:300]
    click.echo(
        f"spectally: internal error (a bug in spectally, exit {int(ExitCode.INTERNAL_ERROR)}):"
        f" {summary}; full report: {report}",
        err=True,
    )
    return ExitCode.INTERNAL_ERROR


def write_report(exc: BaseException, args: Sequence[str] | None) -> str:
    """The full report of an internal error, in a fresh temp file; returns its path."""
    # Imported here, the one place that needs them: every command's start-up skips them.
    import platform
    import tempfile
    import traceback

    argv = list(args) if args is not None else sys.argv[1:]
    fd, path = tempfile.mkstemp(prefix="spectally-internal-error-", suffix=".txt")
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(
            f"spectally {__version__}, Python {platform.python_version()}"
            f" ({platform.platform()})\n"
            f"arguments: {argv!r}\n\n"
            "Please report this with the input that caused it.\n\n"
        )
        f.write("".join(traceback.format_exception(type(exc), exc, exc.__traceback__)))
    return path


@click.group(
    cls=LazyGroup,
    epilog="Exit codes (every command): 0 ok / agree; 1 a divergence or violation (only that);"
    " 2 bad input or usage; 3 incomplete input (replay: no totals record); 70 internal error"
    " (one line + the path of the full report); 130 interrupted. Each command's --help says"
    " what they mean for it.",
)
@click.version_option(__version__, prog_name="spectally")
def main() -> None:
    """spectally: the specification and executable reference of speculative-decoding
    counters (drafted >= verified >= accepted)."""


def _bounded(ctx: click.Context, param: click.Parameter, value: int | None) -> int | None:
    """A draft count of `spectally step`, at most limits.MAX_K (checked before anything is
    sized by it: the reference builds per-draft lists). Negative counts are the reference's
    to reject (`StepQuery.violations`)."""
    from spectally.engine_bridge.steplog.limits import MAX_K

    if value is not None and value > MAX_K:
        raise click.BadParameter(f"{value} exceeds the limit {MAX_K} (k at most {MAX_K})")
    return value


@main.command(epilog=EXIT_HELP["step"])
@click.option(
    "--mode",
    type=click.Choice(["sync", "async"]),
    required=True,
    help="scheduling mode (where the grammar stage sits)",
)
@click.option(
    "--proposed",
    type=int,
    callback=_bounded,
    required=True,
    metavar="N",
    help="drafts the drafter proposed",
)
@click.option(
    "--grammar-valid",
    type=int,
    callback=_bounded,
    default=None,
    metavar="G",
    help="longest grammar-valid prefix of the proposal (omit: no structured output)",
)
@click.option(
    "--scheduled",
    type=int,
    callback=_bounded,
    default=None,
    metavar="S",
    help="drafts the schedule allows (omit: no cut)",
)
@click.option(
    "--av-verify",
    type=int,
    callback=_bounded,
    default=None,
    metavar="V",
    help="scheduled drafts AV sends to the target (omit: AV off)",
)
@click.option(
    "--accepted",
    type=int,
    callback=_bounded,
    required=True,
    metavar="A",
    help="drafts the target accepted (bonus token excluded)",
)
@click.option(
    "--profile",
    "profile_name",
    type=click.Choice(sorted(_DECLARED)),
    default="vllm-legacy",
    show_default=True,
    help="the engine release's counting profile (reference/profile.py): its pipeline and its"
    " own counters",
)
@click.option("--json", "as_json", is_flag=True, help="print JSON")
def step(
    mode: str,
    proposed: int,
    grammar_valid: int | None,
    scheduled: int | None,
    av_verify: int | None,
    accepted: int,
    profile_name: str,
    as_json: bool,
) -> None:
    """Evaluate one request-step: each draft's fate and the counters under both profiles."""
    from spectally.reference.machine import step_counts
    from spectally.reference.profile import PROFILES
    from spectally.reference.step import Mode, StepQuery, token_fates

    profile = PROFILES[profile_name]

    query = StepQuery(
        mode=Mode(mode),
        proposed=proposed,
        accepted=accepted,
        grammar_valid=grammar_valid,
        scheduled=scheduled,
        av_verify=av_verify,
    )
    reasons = query.violations()
    if reasons:
        # One line, non-zero exit: no engine can produce these stage inputs.
        click.echo(f"spectally step: inadmissible input: {'; '.join(reasons)}", err=True)
        sys.exit(ExitCode.BAD_INPUT)
    inputs = query.inputs()
    result: dict[str, Any] = step_counts(query.mode, inputs, profile)
    fates = token_fates(query.mode, inputs, profile)
    result["token_fates"] = fates
    if as_json:
        click.echo(json.dumps(result, indent=2))
        return
    click.echo(f"mode {mode}: {proposed} drafted")
    if profile_name != "vllm-legacy":
        click.echo(f"profile {profile_name}: the release's pipeline and its own counters")
    for i, fate in enumerate(fates):
        click.echo(f"  draft {i}: {fate}")
    rfc, legacy = result["rfc"], result["vllm-legacy"]
    click.echo(
        f"rfc         drafted {rfc['drafted']}  verified {rfc['verified']}  "
        f"accepted {rfc['accepted']}  spec_steps {rfc['spec_steps']}"
    )
    click.echo(
        f"vllm-legacy drafted {legacy['drafted']}  accepted {legacy['accepted']}  "
        f"spec_steps {legacy['spec_steps']}"
    )


if __name__ == "__main__":  # pragma: no cover
    main()
