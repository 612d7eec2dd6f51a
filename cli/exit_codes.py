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

The verdict on one input (`Verdict`: a log, a file of a fleet) maps onto one code. The help
text every command shares (`EXIT_COMMON`, `EXIT_SEVERAL`) is written here, once. This module
imports nothing of spectally: every layer may use it.
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


class Verdict(str, enum.Enum):
    """The verdict on one input: a replayed log, one file of a fleet. Its value is the
    ``status`` of the JSON reports; `label` is how the text reports print it."""

    AGREE = "agree"
    DIVERGE = "diverge"
    BAD_INPUT = "bad_input"
    INCOMPLETE = "incomplete"
    INTERNAL_ERROR = "internal_error"

    def __str__(self) -> str:
        return str(self.value)

    @property
    def label(self) -> str:
        """``AGREE``, ``DIVERGE``, ``BAD INPUT``, ``INCOMPLETE``, ``INTERNAL ERROR``."""
        return self.name.replace("_", " ")

    @property
    def exit_code(self) -> ExitCode:
        return VERDICT_EXIT[self]


VERDICT_EXIT: dict[Verdict, ExitCode] = {
    Verdict.AGREE: ExitCode.OK,
    Verdict.DIVERGE: ExitCode.DIVERGENCE,
    Verdict.BAD_INPUT: ExitCode.BAD_INPUT,
    Verdict.INCOMPLETE: ExitCode.INCOMPLETE,
    Verdict.INTERNAL_ERROR: ExitCode.INTERNAL_ERROR,
}

# The end of every command's exit-code help (click rewraps the text).
EXIT_COMMON = (
    "70 internal error (a bug in spectally: one line on stderr, the full report in a temp file"
    " whose path it prints); 130 interrupted (Ctrl-C)."
)
# For commands that take several inputs: the severity order, spelled from `SEVERITY`.
EXIT_SEVERAL = (
    "Several files: the most severe code (" + " > ".join(str(int(code)) for code in SEVERITY) + ")."
)
