"""The one `spectally` command, and the only package that imports click.

Each command or command group is one module of this package, loaded when it is invoked
(`LAZY_COMMANDS`), so a command that needs an optional dependency (z3, the bridge) costs
nothing to the others and `spectally step` works with the reference alone. The work is done
below, in the library (`spectally.engine_bridge`, `.proofs`, `.spec`, `.reference`); a command
reads its options, calls it and prints. Adding a command:

1. a module here, ``commands/NAME.py``, with the click command (or group) and its
   ``epilog=exits.epilog("0 ...; 1 ...; 2 ...")``: what each exit code means for it;
2. a row of `LAZY_COMMANDS` (name, ``spectally.commands.NAME:attribute``, the one-line help
   of ``spectally --help``, the extra it needs); a subcommand goes into its group's module;
3. its symlinks need nothing (typecheck/spectally/commands is the folder); the tests of
   tests/cli/test_help.py then check its --help ends with the shared exit codes.

Every run ends with a code of the contract in `spectally.exit_codes` (README, "Exit codes"):
`LazyGroup.main` turns Ctrl-C into 130, a click usage error into 2 and any unexpected
exception into 70 with one line on stderr and the full report in a temp file, never a bare
traceback."""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Callable, Sequence
from typing import Any

import click
from spectally import __version__
from spectally.exit_codes import ExitCode

from . import exits

# name -> ("module:attribute" of the click command, loaded on first use; help; extra it needs).
# Every module is one command or one command group of this package.
LAZY_COMMANDS: dict[str, tuple[str, str, str]] = {
    "step": (
        "spectally.commands.step:step",
        "evaluate one request-step under both profiles",
        "",
    ),
    "vectors": (
        "spectally.commands.vectors:vectors",
        "check the reference against every vector",
        "",
    ),
    "prove": ("spectally.commands.prove:prove", "prove the invariants with Z3", "proofs"),
    "replay": (
        "spectally.commands.replay:replay",
        "replay engine logs through the reference",
        "bridge",
    ),
    "parity": (
        "spectally.commands.parity:parity",
        "sync against async, request by request",
        "bridge",
    ),
    "import": (
        "spectally.commands.replay:import_group",
        "check what engines already emit",
        "bridge",
    ),
    "rules": (
        "spectally.commands.observe:rules",
        "write Prometheus rules for the metrics",
        "observe",
    ),
    "dashboard": ("spectally.commands.observe:dashboard", "write a Grafana dashboard", "observe"),
    "lint": (
        "spectally.commands.observe:lint",
        "check rules and dashboards for mistakes",
        "observe",
    ),
    "export": (
        "spectally.commands.observe:export_group",
        "export counts to other tools",
        "observe",
    ),
    "compare": (
        "spectally.commands.compare:compare",
        "compare two engines' acceptance figures in the RFC's terms",
        "bridge",
    ),
    "conform": (
        "spectally.commands.conform:conform",
        "run an implementation of the core, in any language, against the core vectors",
        "bridge",
    ),
    "explain": (
        "spectally.commands.explain:explain_cmd",
        "say what a file is and what can be checked from it",
        "bridge",
    ),
    "version-diff": (
        "spectally.commands.version_diff:version_diff",
        "a log's vLLM counters under each release's counting",
        "bridge",
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
        with formatter.section("Commands"):
            formatter.write_dl(rows)


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


@click.group(cls=LazyGroup, epilog=exits.ROOT)
@click.version_option(__version__, prog_name="spectally")
def main() -> None:
    """spectally: the specification and executable reference of speculative-decoding
    counters (drafted >= verified >= accepted)."""


if __name__ == "__main__":  # pragma: no cover
    main()
