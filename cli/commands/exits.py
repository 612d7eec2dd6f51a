"""The exit-code help at the end of every command's ``--help``, composed in one place.

Each command states what the codes mean for it (`epilog`'s argument); the end every command
shares (70 internal error, 130 interrupted) and, for commands that read several inputs, the
severity order come from `spectally.exit_codes`, where the contract is written.
"""

from __future__ import annotations

from spectally.exit_codes import EXIT_COMMON, EXIT_SEVERAL


def epilog(meanings: str, several: bool = False) -> str:
    """``Exit codes: MEANINGS; 70 ...; 130 ...`` (click rewraps the text)."""
    return f"Exit codes: {meanings}; {EXIT_COMMON}" + (f" {EXIT_SEVERAL}" if several else "")


# The root command's: what the codes mean for every command.
ROOT = (
    "Exit codes (every command): 0 ok / agree; 1 a divergence or violation (only that); 2 bad"
    " input or usage; 3 incomplete input (replay: no totals record); "
    f"{EXIT_COMMON} {EXIT_SEVERAL} Each command's --help says what they mean for it."
)
