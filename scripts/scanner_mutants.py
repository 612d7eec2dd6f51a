"""Deliberate bugs in the scanners and the compiled kernels: each must fail its tests. The
scanner (engine_bridge/replay/columnar/scanner.py) against tests/columnar/test_colscan.py, the
scanner over whole arrays (array_scan.py) against tests/columnar/test_colarray.py, the shape
keys (engine_bridge/replay/columnar/hashing.py) against tests/columnar/test_colblocks_shapes.py.

    .venv/bin/python scripts/scanner_mutants.py          # about 1 minute a mutant (recompiles)
    .venv/bin/python scripts/scanner_mutants.py control  # only mutants whose name has "control"

Each mutant rewrites its module in place, runs the test file and puts the file back (also on
Ctrl-C), so run it on a clean checkout (it refuses a modified kernel module). Prints one line a
mutant: CAUGHT (the tests failed) or MISSED; exits 1 if any is missed. One mutant is listed as
equivalent: it changes no verdict, and is kept to say so.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
SCANNER = REPO / "engine_bridge" / "replay" / "columnar" / "scanner.py"
KEYS = REPO / "engine_bridge" / "replay" / "columnar" / "hashing.py"
ARRAYS = REPO / "engine_bridge" / "replay" / "columnar" / "array_scan.py"
TESTS = {
    SCANNER: "tests/columnar/test_colscan.py",
    KEYS: "tests/columnar/test_colblocks_shapes.py",
    ARRAYS: "tests/columnar/test_colarray.py",
}

# (name, text in scanner.py, replacement)
MUTANTS = [
    ("19 digits taken", "if digits > MAX_DIGITS or", "if digits > MAX_DIGITS + 1 or"),
    (
        "leading zero taken",
        "(digits > 1 and data[at] == 0x30)",
        "(digits > 2 and data[at] == 0x30)",
    ),
    ("backslash in an id", "c in (_QUOTE, _BACKSLASH)", "c == _QUOTE"),
    ("control byte in an id", "if c < 0x20 or c > 0x7E", "if c < 0x10 or c > 0x7E"),
    ("non-ASCII in an id", "if c < 0x20 or c > 0x7E", "if c < 0x20 or c > 0xFE"),
    ("null in every field", "if nullable and at + 4 <= end", "if at + 4 <= end"),
    ("line end not checked", "(at + 1 == end or data[at + 1] == _NEWLINE)", "True"),
    (
        "ids told apart by bytes only",
        "hashes[known] == digest and first[known, 1] == id_size",
        "hashes[known] == digest",
    ),
    ("delivered absent read as null", "row[9] = ABSENT", "row[9] = NULL"),
    (
        "last literal byte near the end",
        "for j in range(size):  # near",
        "for j in range(size - 1):  # near",
    ),
    (
        "last line without newline lost",
        "newlines + int(end > 0 and data[end - 1] != _NEWLINE)",
        "newlines",
    ),
    (
        "big-endian words",
        "for j in range(7, -1, -1):\n        word = (word",
        "for j in range(8):\n        word = (word",
    ),
    (
        "255-byte id declined",
        "at == id_at or at - id_at > MAX_ID_BYTES",
        "at == id_at or at - id_at >= MAX_ID_BYTES",
    ),
    ("empty id taken", "at == id_at or at - id_at", "at - id_at"),
    ("id read one byte late", "first[distinct, 0] = id_at", "first[distinct, 0] = id_at + 1"),
    (
        "one key not compared",
        "at = _match(data, end, at, words, masks, size)",
        "at = at + size if at >= 0 else -1",
    ),
    (
        "outcome word not compared",
        "after = _match(data, end, at, _WORD_W[word], _WORD_M[word], _WORD_N[word])",
        "after = at + _WORD_N[word]",
    ),
    ("declined row not cleared", "row[:] = 0\n", "pass\n"),
    # json.dumps' default separators, the second style
    (
        "spaced style never tried",
        "        if at < 0:\n            style = 1\n",
        "        if False:\n            style = 1\n",
    ),
    (
        "spaced delivered read compact",
        "_DELIVERED_W[style], _DELIVERED_M[style], _DELIVERED_N[style]",
        "_DELIVERED_W[0], _DELIVERED_M[0], _DELIVERED_N[0]",
    ),
    ("spaced key sizes compact", "_KEY_N[style, key]", "_KEY_N[0, key]"),
]
# (name, text in hashing.py, replacement)
KEY_MUTANTS = [
    ("bound off by one", "return not worst > limit", "return not worst >= limit"),
    ("no bound check", "return not worst > limit", "return True"),
    ("field one bit narrower", "key = (key << width) | value",
     "key = (key << (width - 1)) | value"),
    ("count not shifted by one", "value = counts[i, j] + 1", "value = counts[i, j]"),
    ("a count left out of the key", "for j in range(COUNTS):", "for j in range(COUNTS - 1):"),
    ("flags swapped", "(np.int64(structured[i]) << 1) | np.int64(stale[i])",
     "(np.int64(stale[i]) << 1) | np.int64(structured[i])"),
    ("no probing past the home slot", "while held != key and held != -1:", "while False:"),
    ("probing by two slots", "slot = (slot + 1) & mask", "slot = (slot + 2) & mask"),
    ("a new shape's first row not its own", "first_rows[added] = i", "first_rows[added] = start"),
    ("new ids off by one", "slot_ids[slot] = next_id + added",
     "slot_ids[slot] = next_id + added + 1"),
    ("a row skipped where it stops", "return i, added", "return i + 1, added"),
    ("a found block not counted", "weights[found] += 1", "weights[found] += i > 0"),
    ("last run cut short", "if r + 1 < len(starts) else n", "if r + 1 < len(starts) else n - 1"),
    ("a run's first block skipped", "for i in range(starts[r], stop):",
     "for i in range(starts[r] + 1, stop):"),
    ("first word only", "for w in range(by_shape.shape[1]):", "for w in range(1):"),
    ("block's own row, not its shape's", "row = ids[i]", "row = i % len(by_shape)"),
]  # fmt: skip
# (name, text in array_scan.py, replacement)
ARRAY_MUTANTS = [
    ("8 digits taken", "(length <= MAX_DIGITS)", "(length <= MAX_DIGITS + 1)"),
    ("leading zero taken", "good &= (length == 1) | ((word & _U(0xFF)) != _U(0x30))", "pass"),
    ("null in every field", "        if nullable:\n            null",
     "        if True:\n            null"),
    ("backslash in an id", "| ((slash - _ONES) & ~slash)", ""),
    ("control byte in an id", "| ((word - _U(0x2020202020202020)) & ~word)", ""),
    ("bytes above 0x7E in an id", "| (word + _ONES)\n                | word\n", ""),
    ("id one byte longer", "end = offset + 8 * j + first[hit]",
     "end = offset + 8 * j + first[hit] + 1"),
    ("line end not checked", "ints.ok &= close + 1 == stops", "pass"),
    ("closing brace not checked", "ints.ok &= chunk.data[np.minimum(close, chunk.size)] == 0x7D",
     "pass"),
    ("one key not compared", "ints.ok &= _equals(rows, key)",
     "ints.ok &= _equals(rows, key) | True"),
    ("delivered key not compared", "ints.ok[delivered] &= keyed & part.ok",
     "ints.ok[delivered] &= part.ok"),
    ("a literal's last byte not compared", "min(8, len(literal) - i)",
     "min(8, len(literal) - i - 1)"),
    ("hash collisions not looked for", "if not (words == words[first[inverse]]).all():",
     "if False:"),
    ("ids numbered by hash, not by first line", "rank[order] = np.arange(len(order))",
     "rank[:] = np.arange(len(order))"),
    ("two digits read as one", "several = lengths > 1", "several = lengths > 2"),
    ("delivered absent read as null", "values[-1, plain] = ABSENT", "values[-1, plain] = NULL"),
]  # fmt: skip
# Accepted by both decoders alike (JSON allows U+007F unescaped): no verdict can change.
EQUIVALENT = [("DEL byte in an id", "c > 0x7E", "c > 0x7F")]
# The key after the id (`","proposed":`) starts with the closing quote and is compared
# anyway, so an id ended by any other byte is declined there: no line is taken otherwise.
ARRAY_EQUIVALENT = [("id not closed by a quote", "np.where(byte == _U(0x22), end, -1)", "end")]


def run(
    name: str, old: str, new: str, source: str, module: Path = SCANNER, tests: str = ""
) -> bool:
    """Whether the tests (``tests``, else the module's in `TESTS`; test files separated by
    spaces) fail with ``old`` replaced by ``new`` in ``module`` (whose text is ``source``,
    written back afterwards). Also used by `run_all`."""
    assert source.count(old) >= 1, f"{name}: {old!r} is not in {module.name}"
    module.write_text(source.replace(old, new, 1))
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "pytest", *(tests or TESTS[module]).split(), "-x", "-q", "-p",
             "no:cacheprovider"],
            cwd=REPO, capture_output=True, text=True, check=False, timeout=1800,
        )  # fmt: skip
    finally:
        # Put back at once: the next mutant may be of another module, and must be judged
        # with this one unchanged.
        module.write_text(source)
    lines = proc.stdout.strip().splitlines() or [""]
    print(f"{'CAUGHT' if proc.returncode != 0 else 'MISSED'}  {name}  ({lines[-1]})", flush=True)
    for line in lines:
        if line.startswith(("FAILED", "ERROR")):  # which test, and its error's first line
            print(f"        {line}", flush=True)
    return proc.returncode != 0


# A mutant for `run_all`: (module, name, text in the module, replacement, test files: "" for
# the module's in `TESTS`)
Mutant = tuple[Path, str, str, str, str]


def run_all(mutants: Sequence[Mutant], equivalent: Sequence[Mutant] = ()) -> int:
    """Each mutant through `run` (which puts its module back, also on Ctrl-C), then the
    equivalent ones (reported, not counted). Refuses (2) modules with changes (run on a
    clean checkout); else 1 if any mutant is missed. Also used by the other mutant scripts."""
    modules = sorted({m[0] for m in [*mutants, *equivalent]})
    status = subprocess.run(
        ["git", "status", "--porcelain", *map(str, modules)],
        cwd=REPO, capture_output=True, text=True,
    ).stdout  # fmt: skip
    if status.strip():
        names = ", ".join(module.name for module in modules)
        print(f"{names}: changes; run this on a clean checkout", file=sys.stderr)
        return 2
    sources = {module: module.read_text() for module in modules}
    missed = []
    for module, name, old, new, tests in mutants:
        if not run(name, old, new, sources[module], module, tests):
            missed.append(name)
    for module, name, old, new, tests in equivalent:
        print("equivalent:", end=" ")
        run(name, old, new, sources[module], module, tests)
    print(f"{len(mutants) - len(missed)} of {len(mutants)} mutants caught")
    return 1 if missed else 0


def main() -> int:
    wanted = sys.argv[1:]
    chosen: list[Mutant] = [
        (module, *m, "")
        for module, mutants in ((SCANNER, MUTANTS), (KEYS, KEY_MUTANTS), (ARRAYS, ARRAY_MUTANTS))
        for m in mutants
        if not wanted or any(a in m[0] for a in wanted)
    ]
    equivalent: list[Mutant] = (
        []
        if wanted
        else [(SCANNER, *m, "") for m in EQUIVALENT] + [(ARRAYS, *m, "") for m in ARRAY_EQUIVALENT]
    )
    return run_all(chosen, equivalent)


if __name__ == "__main__":
    sys.exit(main())
