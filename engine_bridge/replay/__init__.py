"""The replay of one step log: open it, pick the judge, return a ``ReplayResult``.

- ``dispatch``: ``replay_file`` opens the log and sends it to a judge; ``replay_reference``
  replays it through the reference alone;
- ``reference_replay``: the plain reference replay, the authority, which writes every
  divergence (``Replayer``);
- ``columnar/``: the second judge of the same question, over whole arrays, for large logs;
- ``accounts``: step accounts and the end-of-log comparisons both judges share;
- ``report``: divergences as data and their rendering, once, at the end (``Divergence``,
  ``ReplayResult``);
- ``detailed``: the per-request detailed steps of ``spectally import requests``, as columns
  through the columnar block rules, the reference as fallback (imported by its command only).

``__all__`` below is what code outside the package imports.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .dispatch import (
    Divergence,
    ReplayResult,
    explain_shift,
    render_summary,
    replay_file,
    replay_reference,
    result_json,
)

if TYPE_CHECKING:
    from .reference_replay import Replayer


def __getattr__(name: str) -> Any:
    """``Replayer`` on first use (see `dispatch.__getattr__`)."""
    if name == "Replayer":
        from .reference_replay import Replayer

        return Replayer
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "Divergence",
    "ReplayResult",
    "Replayer",
    "explain_shift",
    "render_summary",
    "replay_file",
    "replay_reference",
    "result_json",
]
