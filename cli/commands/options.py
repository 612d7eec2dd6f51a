"""The options several commands share, declared once: every command that replays a step log
takes ``--force-profile`` with the same meaning, the same check and the same help."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import click

F = TypeVar("F", bound=Callable[..., Any])


def _check_profile(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    """--force-profile: a profile of the table, else a usage error (exit 2) naming them."""
    if value is None:
        return None
    from spectally.engine_bridge.steplog.profiles import check_profile

    try:
        return check_profile(value)
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from None


def force_profile(command: F) -> F:
    """``--force-profile PROFILE``, passed to ``command`` as ``force_profile`` (None: each
    log's own profile, from its header)."""
    option = click.option(
        "--force-profile",
        "force_profile",
        default=None,
        metavar="PROFILE",
        callback=_check_profile,
        help="count every log under PROFILE (vllm-legacy: vLLM <= 0.33; vllm-0.34: vLLM 0.34;"
        " llama.cpp: llama.cpp 0.5; header counting rfc: vllm-legacy-rfc: vLLM 0.32, 0.33 with"
        " the counting fix; vllm-0.34-rfc: vLLM 0.34 with the counting fix) whatever engine"
        " version its header names, e.g. a newer release whose counting source you compared"
        " (docs/replay.md, Profiles); without it such a log is refused (exit 2). Reports say"
        " the profile was FORCED.",
    )
    return option(command)
