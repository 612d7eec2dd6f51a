"""Deliberate bugs in the lifecycle pass's shortcuts (engine_bridge/replay/columnar/sequence.py):
plain ends (`RequestTable._plain_ends`), each of which must fail tests/columnar/test_colseq.py,
whose differential test runs the pass with the shortcut and without it; and the walk of a
request's applied blocks stopped once its state is settled (`RequestTable.lifecycle`),
caught there or by tests/columnar/test_columnar_lifecycle.py (columnar against reference replays).

    .venv/bin/python scripts/lifecycle_mutants.py   # a few seconds to a minute a mutant

Each mutant rewrites sequence.py in place, runs the test file and puts the file back (also on
Ctrl-C), so run it on a clean checkout (it refuses a modified sequence.py). Prints one line a
mutant: CAUGHT (the tests failed) or MISSED; exits 1 if any is missed. One mutant is listed
as equivalent: it changes no verdict, and is kept to say so.
"""

from __future__ import annotations

import sys
from pathlib import Path

from scanner_mutants import run_all  # the same runner: rewrite, run the tests, report

REPO = Path(__file__).resolve().parent.parent
MODULE = REPO / "engine_bridge" / "replay" / "columnar" / "sequence.py"
TESTS = "tests/columnar/test_colseq.py tests/columnar/test_columnar_lifecycle.py"

# (name, text in sequence.py, replacement)
MUTANTS = [
    ("more than two events taken", "if len(own) > 2 or rid in life:",
     "if len(own) > 3 or rid in life:"),
    ("carried state ignored", "if len(own) > 2 or rid in life:", "if len(own) > 2:"),
    ("drop_stale_output ignored", "or flag is not unset or", "or"),
    ("an end not yet released taken", "or step + 1 >= last_step:", "or step >= last_step:"),
    ("the block's outcome unchecked",
     "outcome != LIFECYCLE_OUTCOME[event]\n                    or ", ""),
    ("a block two steps after the end taken", "or block_step > step + 1",
     "or block_step > step + 2"),
    ("an unknown request taken", "if (slots < 0).any() or (", "if ("),
    ("preemptions taken", '_PLAIN_ENDS = frozenset(("finish", "abort"))',
     '_PLAIN_ENDS = frozenset(("finish", "abort", "preempt"))'),
    ("the plain requests left in the full pass too", "        for rid in plain:\n"
     "            del mine[rid]\n", ""),
    ("the walk stopped with a block still open",
     "if life is None or not (life.held or life.open or life.ended):",
     "if life is None or not (life.held or life.ended):"),
    ("the walk stopped before the last end or discarded block", "                if at > last:",
     "                if at >= last:"),
]  # fmt: skip
# Lines are unique, so an end record is never on its add's line: no verdict can change.
# A request is ended only by a release inside `_block` or `_end_record`, which then raise
# themselves (an ended request with nothing held or open is freed at the chunk's end): the
# walk never meets an ended request that is settled, and `ended` there only mirrors `_block`.
EQUIVALENT = [
    ("an end record on its add's line taken", "(np.asarray(lines) <= self.open_line[slots])",
     "(np.asarray(lines) < self.open_line[slots])"),
    ("the walk stopped at an ended request",
     "if life is None or not (life.held or life.open or life.ended):",
     "if life is None or not (life.held or life.open):"),
]  # fmt: skip


def main() -> int:
    return run_all(
        [(MODULE, *m, TESTS) for m in MUTANTS], [(MODULE, *m, TESTS) for m in EQUIVALENT]
    )


if __name__ == "__main__":
    sys.exit(main())
