"""The one exit-code contract of every `spectally` command.

Every command (step, vectors, prove, replay, import ...) exits with one of these codes and
with no other. Each code means one thing only, so a CI job can branch on it:

- ``OK`` (0): every check agrees / passes.
- ``DIVERGENCE`` (1): a divergence or violation was found (and only that).
- ``BAD_INPUT`` (2): bad input or usage: a malformed, oversized or misplaced record, a file
  that cannot be read, an unknown option. Printed as ``file:line:column: reason``.
- ``INCOMPLETE`` (3): the input ended early (a step log without its totals record, cut at a
  record boundary): everything that was present agreed, but the run cannot be judged whole.
- ``INTERNAL_ERROR`` (70, sysexits' EX_SOFTWARE): a bug in spectally. A one-line summary is
  printed with the path of the full report; never a bare traceback.
- ``INTERRUPTED`` (130): stopped by SIGINT (Ctrl-C), as shells report it (128 + 2).

Several inputs in one command: the most severe code wins, in the order
INTERNAL_ERROR > INTERRUPTED > BAD_INPUT > DIVERGENCE > INCOMPLETE > OK.
"""

from __future__ import annotations

import enum


class ExitCode(enum.IntEnum):
    OK = 0
    DIVERGENCE = 1
    BAD_INPUT = 2
    INCOMPLETE = 3
    INTERNAL_ERROR = 70
    INTERRUPTED = 130


# Most severe first: combining the codes of several inputs keeps the first one present.
SEVERITY: tuple[ExitCode, ...] = (
    ExitCode.INTERNAL_ERROR,
    ExitCode.INTERRUPTED,
    ExitCode.BAD_INPUT,
    ExitCode.DIVERGENCE,
    ExitCode.INCOMPLETE,
    ExitCode.OK,
)


def combine(codes: list[ExitCode] | tuple[ExitCode, ...]) -> ExitCode:
    """The exit code of a command that checked several inputs: the most severe one."""
    present = set(codes)
    for code in SEVERITY:
        if code in present:
            return code
    return ExitCode.OK
