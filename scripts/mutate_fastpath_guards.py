"""Remove each guard condition of reference/fastpath.py in turn and check the tests catch it.

    .venv/bin/python scripts/mutate_fastpath_guards.py     # about 2-3 minutes

Every condition of a `BlockFolder` guard (the ``if (...)`` of `_ready` and `try_end`,
the ``if not (...)`` of `prepare`) is made vacuous in its own run, then the fast-path and
replay tests run against that mutant. A mutant the tests do not catch is a guard nothing
pins: the script lists it and exits 1. The file is edited in place and always restored.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
TARGET = REPO / "reference" / "fastpath.py"
TESTS = [
    "tests/test_fast_path.py",
    "tests/test_replay.py",
    "tests/test_golden_traces.py",
    "tests/test_vllm_fixtures.py",
]
OR_GUARD = re.compile(r"^ {12}or (.+)$")  # a guard line of fold / open / try_end
AND_GUARD = re.compile(r"^ {12}and (state\..+|step .+)$")  # a guard line of prepare
FIRST_GUARD = re.compile(r"^ {12}([a-z].+)$")  # the first condition, after "if ("


def mutants(lines: list[str]) -> list[tuple[int, str, str]]:
    """(line index, guard text, the line with the guard made vacuous)."""
    out = []
    for i, line in enumerate(lines):
        before = lines[i - 1] if i else ""
        if before == "        if (" and (m := FIRST_GUARD.match(line)):
            out.append((i, m.group(1), line.replace(m.group(1), f"(False and {m.group(1)})", 1)))
        elif before == "        if not (" and (m := FIRST_GUARD.match(line)):
            out.append((i, m.group(1), line.replace(m.group(1), f"(True or {m.group(1)})", 1)))
        elif m := OR_GUARD.match(line):
            out.append((i, m.group(1), line.replace("or ", "or (False and ", 1) + ")"))
        elif m := AND_GUARD.match(line):
            out.append((i, m.group(1), line.replace("and ", "and (True or ", 1) + ")"))
    return out


def main() -> int:
    original = TARGET.read_text()
    lines = original.split("\n")
    survivors = []
    try:
        for i, guard, mutated in mutants(lines):
            TARGET.write_text("\n".join([*lines[:i], mutated, *lines[i + 1 :]]))
            run = subprocess.run(
                [sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", *TESTS],
                cwd=REPO,
                capture_output=True,
                text=True,
            )
            caught = run.returncode != 0
            last = run.stdout.strip().splitlines()[-1] if run.stdout.strip() else ""
            print(f"line {i + 1}: {guard!r}: {'caught' if caught else 'SURVIVED'} ({last})")
            if not caught:
                survivors.append(f"line {i + 1}: {guard}")
    finally:
        TARGET.write_text(original)
    print(f"{len(survivors)} surviving mutant(s)" + ("" if not survivors else ":"))
    for s in survivors:
        print(f"  {s}")
    return 1 if survivors else 0


if __name__ == "__main__":
    sys.exit(main())
