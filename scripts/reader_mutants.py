"""Deliberate bugs in giving a chunk's last step back to the reader
(engine_bridge/replay/columnar/reader.py, `ByteChunks`;
engine_bridge/replay/columnar/judge.py, `Columnar.run`): each must fail its tests
(tests/columnar/test_colread.py for the reader; tests/columnar/test_columnar_chunks.py and
tests/columnar/test_columnar_cut.py for the checker's use of it).

    .venv/bin/python scripts/reader_mutants.py   # about a minute

Each mutant rewrites its module in place, runs the tests and puts the file back (also on
Ctrl-C), so run it on a clean checkout (it refuses modified modules). Prints one line a
mutant: CAUGHT (the tests failed) or MISSED; exits 1 if any is missed.
"""

from __future__ import annotations

import sys
from pathlib import Path

from scanner_mutants import run_all  # the same runner: rewrite, run the tests, report

REPO = Path(__file__).resolve().parent.parent
READER = REPO / "engine_bridge" / "replay" / "columnar" / "reader.py"
CHECKER = REPO / "engine_bridge" / "replay" / "columnar" / "columnar.py"
TESTS = {
    READER: "tests/columnar/test_colread.py",
    CHECKER: "tests/columnar/test_columnar_chunks.py tests/columnar/test_columnar_cut.py",
}

# (module, name, text in the module, replacement)
MUTANTS = [
    (READER, "lines given back count toward a line's limit",
     "if rest - whole > MAX_LINE_BYTES:", "if rest > MAX_LINE_BYTES:"),
    (READER, "no byte limit on the lines given back",
     "            if end - at > KEEP_BYTES:\n                return False\n", ""),
    (READER, "lines given back not read again",
     "view[: filled - back] = buffer[back:filled]\n                rest, whole = filled - back,"
     " cut - back", "view[: filled - cut] = buffer[cut:filled]\n                rest, whole ="
     " filled - cut, 0"),
    (READER, "a line fewer given back than asked", "for _ in range(count):",
     "for _ in range(count - 1):"),
    (READER, "lines given back after the last chunk",
     "                yield view[:cut]\n                self._open = False\n",
     "                yield view[:cut]\n"),
    (CHECKER, "a step before the totals line given back",
     "if len(carry) and carry_line + len(carry) == first and reader.keep(len(carry)):",
     "if len(carry) and reader.keep(len(carry)):"),
    (CHECKER, "lines given back shown twice on the bar", "bar.update(first - 1 - shown)",
     "bar.update(first - 1)"),
    (CHECKER, "the next chunk's first line not moved back",
     "carry, first = empty_lines(), carry_line", "carry = empty_lines()"),
]  # fmt: skip


def main() -> int:
    return run_all([(module, name, old, new, TESTS[module]) for module, name, old, new in MUTANTS])


if __name__ == "__main__":
    sys.exit(main())
