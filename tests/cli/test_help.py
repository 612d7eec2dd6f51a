"""The one front door: every command lives in `spectally.commands`, one module per command or
command group, and every command's --help ends with the exit codes the contract shares."""

from __future__ import annotations

import importlib
import pkgutil

import click
import pytest
import spectally.commands
from click.testing import CliRunner
from spectally.commands import LAZY_COMMANDS, main
from spectally.exit_codes import EXIT_COMMON


def commands() -> list[tuple[tuple[str, ...], click.Command]]:
    """Every command and subcommand, by the words that invoke it."""
    found: list[tuple[tuple[str, ...], click.Command]] = []
    ctx = click.Context(main)
    todo: list[tuple[tuple[str, ...], click.Command]] = [
        ((name,), cmd) for name in LAZY_COMMANDS if (cmd := main.get_command(ctx, name))
    ]
    while todo:
        words, cmd = todo.pop()
        found.append((words, cmd))
        if isinstance(cmd, click.Group):
            todo += [((*words, name), sub) for name, sub in cmd.commands.items()]
    return sorted(found, key=lambda item: item[0])


def test_every_command_module_is_a_command_of_the_front_door() -> None:
    # The help, the shared options; python -m; the import group's subcommands in their own modules.
    shared = {"exits", "options", "__main__", "import_llamacpp", "import_engines"}
    modules = {m.name for m in pkgutil.iter_modules(spectally.commands.__path__)} - shared
    listed = {target.split(":")[0].rsplit(".", 1)[1] for target, _, _ in LAZY_COMMANDS.values()}
    assert modules == listed
    names = {words for words, _ in commands()}
    assert ("import", "llamacpp") in names and ("version-diff",) in names
    assert ("import", "sglang") in names and ("import", "trtllm") in names
    for words, cmd in commands():  # each command is defined in the package
        assert importlib.import_module(cmd.callback.__module__).__name__.startswith(  # type: ignore[union-attr]
            "spectally.commands."
        ), words


@pytest.mark.parametrize("words", [words for words, _ in commands()], ids=" ".join)
def test_every_help_ends_with_the_shared_exit_codes(words: tuple[str, ...]) -> None:
    result = CliRunner().invoke(main, [*words, "--help"])
    assert result.exit_code == 0, result.output
    text = " ".join(result.output.split())
    assert "Exit codes:" in text, words
    assert " ".join(EXIT_COMMON.split()) in text, words


def test_the_root_help_lists_every_command() -> None:
    result = CliRunner().invoke(main, ["--help"])
    table = result.output.split("Commands:\n")[1].split("\n\n")[0]
    rows = [line for line in table.splitlines() if not line.startswith("   ")]  # not a wrap
    assert [line.split()[0] for line in rows] == sorted(LAZY_COMMANDS)
