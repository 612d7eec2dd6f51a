"""``spectally import sglang`` and ``spectally import trtllm``: what SGLang and TensorRT-LLM
report, checked against their own definitions (engine_bridge/engines.py declares both).

The work is in `spectally.engine_bridge.importers.sglang` and `.trtllm`; this module is the
commands, added to the ``import`` group through ``LAZY_SUBCOMMANDS``.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, NoReturn

import click
from spectally.exit_codes import ExitCode

from . import exits

if TYPE_CHECKING:
    from spectally.engine_bridge.importers.findings import Finding

EXIT_HELP = exits.epilog(
    "0 every check holds (notes explain what cannot be checked); 1 a violation;"
    " 2 bad input or usage (unreadable or malformed input, a value the engine cannot print,"
    " nothing to check), printed as file:line:column: reason",
    several=True,
)


def run_findings(
    check: Callable[[], list[Finding]], as_json: bool, files: tuple[str, ...] = ()
) -> NoReturn:
    """Print an importer's findings (or its bad input) and exit with the contract's code;
    ``files`` (its FILE arguments) must be different files."""
    from spectally.engine_bridge.importers.findings import exit_code, render_findings
    from spectally.engine_bridge.importers.inputs import refuse_repeats
    from spectally.engine_bridge.steplog.source import BadInput

    try:
        refuse_repeats((f"FILE {i}", path) for i, path in enumerate(files, start=1))
        findings = check()
    except BadInput as exc:
        click.echo(str(exc), err=True)
        sys.exit(ExitCode.BAD_INPUT)
    if as_json:
        click.echo(json.dumps([f.to_dict() for f in findings], indent=2))
    else:
        click.echo(render_findings(findings))
    sys.exit(exit_code(findings))


@click.command("sglang", epilog=EXIT_HELP)
@click.argument("files", nargs=-1, required=True, metavar="FILE...")
@click.option(
    "--draft-tokens",
    type=click.IntRange(1, 1024),
    default=None,
    metavar="D",
    help="the run's draft slots per verify pass: --speculative-num-draft-tokens - 1 (checks"
    " accept len - 1 = accept rate x D)",
)
@click.option("--json", "as_json", is_flag=True, help="print findings as JSON")
def sglang_cmd(files: tuple[str, ...], draft_tokens: int | None, as_json: bool) -> None:
    """Check SGLang's decode-batch log lines ('accept len', 'accept rate'), its
    sglang:spec_accept_* gauges, or responses' meta_info (spec_verify_ct, spec_accept_rate,
    spec_accept_length, ...): plain, gzip or - for stdin; each file by what it holds."""
    from spectally.engine_bridge.importers import sglang

    run_findings(lambda: sglang.check_files(list(files), draft_tokens), as_json, files)


@click.command("trtllm", epilog=EXIT_HELP)
@click.argument("files", nargs=-1, required=True, metavar="STATS...")
@click.option("--json", "as_json", is_flag=True, help="print findings as JSON")
def trtllm_cmd(files: tuple[str, ...], as_json: bool) -> None:
    """Check TensorRT-LLM's iteration stats (trtllm-serve /metrics JSON or LLM.get_stats(): a
    JSON list or NDJSON): each specDecodingStats against its own definitions (read in source,
    not run)."""
    from spectally.engine_bridge.importers import trtllm

    run_findings(lambda: trtllm.check_files(list(files)), as_json, files)
