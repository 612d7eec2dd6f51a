"""Start-up: what a fresh ``spectally`` process costs before and around its first record.

    python benchmarks/bench_startup.py                 # a 200,000-record log, 5 rounds
    python benchmarks/bench_startup.py --records 20000 --rounds 3
    python benchmarks/bench_startup.py --kind preempted      # the realistic async log
    python benchmarks/bench_startup.py --python /tmp/old/.venv/bin/python --python .venv/bin/python
    python benchmarks/bench_startup.py --instructions        # the fixed cost, load-independent

Every figure is a fresh process, its CPU time (user + system, from
``resource.getrusage(RUSAGE_CHILDREN)``: less sensitive than wall time to a shared machine's
other load), best of ``--rounds``:

* ``python -c pass``: the interpreter alone;
* ``spectally --help``, ``spectally step ...``: the command line without the replay's imports;
* ``json.loads`` over every line of a small real log (tests/fixtures/vllm, 110 records) and
  ``spectally replay`` of the same log;
* the same two over a synthetic log of ``--records`` records (spectally.engine_bridge.synth):
  users replay many small logs, one per engine restart, so start-up counts;
* the floors of such a replay: ``import numpy, msgspec`` (what the columnar checker cannot do
  without), the columnar checker's import alone, and a process that imports the typed
  decoder's struct types (reader.py) and decodes the synthetic log with them, chunk by chunk
  as the replay reads it (msgspec's typed ``decode_lines``), nothing else.

The floors run with ``OPENBLAS_NUM_THREADS=1``, as the command line sets it for every
``spectally`` process (numpy's OpenBLAS threads otherwise spin at its import); the
``spectally`` commands run without it in their environment, so each checkout decides.

What an installed package costs: pip writes every module's bytecode (``.pyc``) at install
time, while an editable install in an environment that sets ``PYTHONDONTWRITEBYTECODE`` would
compile every module from source in every process (about 0.09 s here). So the benchmark first
compiles the package folders of each interpreter's ``spectally`` (``compileall``, into the
``__pycache__`` folders that git ignores; ``PYTHONDONTWRITEBYTECODE`` only stops writing them,
reading still works).

``--python`` (repeatable) names the interpreters whose ``spectally`` to measure, say the
virtual environments of two checkouts, before and after a change: their cases run interleaved
in the same rounds, one column each. The cases without spectally (``python -c pass``,
``import numpy, msgspec``, ``json.loads``) run with the first one.

The ratios are the figures (no timed assertion): each command against ``python -c pass``, and
``json.loads`` over a log against ``spectally replay`` of it (above 1: the replay, start-up
included, is faster than merely parsing the log with the standard library).

``--instructions`` measures the fixed cost instead in instructions, which do not move with the
machine's load: ``python -c pass``, ``import numpy, msgspec`` and the columnar checker's import,
each once under valgrind's callgrind (its ``Collected`` count; about 30 s in all). Instruction
counts leave out the kernel's work and the memory's stalls, so they compare imports (work of the
interpreter), not a replay over arrays.
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from spectally.engine_bridge import synth

SMALL = Path(__file__).parent.parent / "tests" / "fixtures" / "vllm" / "ngram-k3-greedy.ndjson.gz"
JSON_LOADS = (
    "import gzip, json, sys\n"
    "path = sys.argv[1]\n"
    "with (gzip.open if path.endswith('.gz') else open)(path, 'rb') as f:\n"
    "    for line in f:\n"
    "        json.loads(line)\n"
)
TYPED_DECODE = (
    "import sys, msgspec\n"
    "from spectally.engine_bridge.replay.columnar import reader as c\n"
    "types = c.RequestStep | c.Request | c.StepStats | c.HeaderLine | c.TotalsLine\n"
    "decode = msgspec.json.Decoder(types).decode_lines\n"
    "for chunk in c.byte_chunks(sys.argv[1], None):\n"
    "    decode(chunk)\n"
)
# Run by each interpreter: its own spectally's folders (an editable install maps them from
# the checkout), every module compiled to bytecode where the import system looks for it.
COMPILE = (
    "import compileall, importlib.util\n"
    "for name in ('spectally', 'spectally.spec', 'spectally.reference', 'spectally.proofs',\n"
    "             'spectally.engine_bridge'):\n"
    "    spec = importlib.util.find_spec(name)\n"
    "    for folder in (spec.submodule_search_locations or []) if spec else []:\n"
    "        compileall.compile_dir(folder, quiet=1)\n"
)


# The environment of every case: the floors' with one OpenBLAS thread, spectally's as it sets it.
FLOOR_ENV = {**os.environ, "OPENBLAS_NUM_THREADS": "1"}
COMMAND_ENV = {k: v for k, v in os.environ.items() if k != "OPENBLAS_NUM_THREADS"}


def cpu_seconds(args: list[str], env: dict[str, str]) -> float:
    """The CPU time of one fresh process running ``args`` (its output discarded)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False, env=env)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


IMPORTS = {  # the fixed cost's layers, as --instructions measures them
    "python -c pass": "pass",
    "import numpy, msgspec": "import numpy, msgspec",
    "import the columnar checker": "import spectally.engine_bridge.replay.columnar",
}


def instructions(python: str, code: str) -> int:
    """The instructions one fresh process running ``code`` executes (callgrind's count)."""
    res = subprocess.run(
        ["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null", python, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        env=FLOOR_ENV,
    )
    counts = [line.split()[-1] for line in res.stderr.splitlines() if "Collected :" in line]
    if not counts:
        raise SystemExit(f"no instruction count from valgrind:\n{res.stderr[-2000:]}")
    return int(counts[-1])


def main_instructions(pythons: list[str]) -> None:
    if shutil.which("valgrind") is None:
        raise SystemExit("--instructions needs valgrind (apt-get install -y valgrind)")
    head = "".join(f" {f'M instr. [{i + 1}]':>15}" for i in range(len(pythons)))
    print(f"{'process':<36}{head}")
    for name, code in IMPORTS.items():
        row = "".join(f" {instructions(py, code) / 1e6:>15,.0f}" for py in pythons)
        print(f"{name:<36}{row}")
    for i, python in enumerate(pythons):
        print(f"[{i + 1}] {python}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument(
        "--kind",
        choices=("uniform", "varied", "preempted"),
        default="uniform",
        help="the synthetic log: uniform (synth.steady), varied (synth.varied: async, k=8,"
        " grammar cuts, AV) or preempted (varied with preemptions, the realistic async log)",
    )
    parser.add_argument(
        "--python",
        action="append",
        default=None,
        metavar="PATH",
        help="an interpreter whose spectally to measure (repeatable; default: this one)",
    )
    parser.add_argument(
        "--instructions",
        action="store_true",
        help="the fixed cost in instructions (valgrind's callgrind), not CPU seconds",
    )
    args = parser.parse_args()
    pythons: list[str] = args.python or [sys.executable]
    for py in pythons:
        subprocess.run([py, "-c", COMPILE], check=True)
    if args.instructions:
        main_instructions(pythons)
        return
    py = pythons[0]
    fd, big = tempfile.mkstemp(prefix="spectally-bench-startup-", suffix=".ndjson")
    with os.fdopen(fd, "wb") as out:
        if args.kind == "uniform":
            out.writelines(synth.lines(args.records, seed=1))
        else:
            share = 0.05 if args.kind == "preempted" else 0.0
            out.writelines(synth.varied.lines(args.records, seed=1, preempt_share=share))
    n = args.records
    alone = {  # without spectally: the first interpreter only
        "python -c pass": [py, "-c", "pass"],
        "import numpy, msgspec": [py, "-c", "import numpy, msgspec"],
        "json.loads small log": [py, "-c", JSON_LOADS, str(SMALL)],
        f"json.loads {n} records": [py, "-c", JSON_LOADS, big],
    }
    step = ["step", "--mode", "sync", "--proposed", "3", "--accepted", "1"]
    each = {  # every interpreter's spectally (the arguments after the interpreter)
        "import the columnar checker": ["-c", "import spectally.engine_bridge.replay.columnar"],
        f"typed decode {n} records": ["-c", TYPED_DECODE, big],
        "spectally --help": ["-m", "spectally", "--help"],
        "spectally step": ["-m", "spectally", *step],
        "spectally replay small log": ["-m", "spectally", "replay", str(SMALL)],
        f"spectally replay {n} records": ["-m", "spectally", "replay", big],
    }
    cases = {(name, 0): (cmd, FLOOR_ENV) for name, cmd in alone.items()}
    for i, python in enumerate(pythons):
        for name, rest in each.items():
            env = COMMAND_ENV if rest[:2] == ["-m", "spectally"] else FLOOR_ENV
            cases[name, i] = ([python, *rest], env)
    try:
        best = {key: float("inf") for key in cases}
        for _ in range(args.rounds):  # interleaved: a slow spell touches every case alike
            for key, (command, env) in cases.items():
                best[key] = min(best[key], cpu_seconds(command, env))
    finally:
        os.unlink(big)
    base = best["python -c pass", 0]
    head = "".join(f" {f'CPU s [{i + 1}]':>10} {'x pass':>7}" for i in range(len(pythons)))
    print(f"{'process':<36}{head}")
    for name in [*alone, *each]:
        row = ""
        for i in range(len(pythons)):
            seconds = best.get((name, i))
            row += f" {seconds:>10.3f} {seconds / base:>7.1f}" if seconds is not None else " " * 19
        print(f"{name:<36}{row}")
    for i, python in enumerate(pythons):
        print(f"[{i + 1}] {python}")
        for size in ("small log", f"{n} records"):
            ratio = best[f"json.loads {size}", 0] / best[f"spectally replay {size}", i]
            print(f"    replay {size}: {ratio:.2f}x the speed of json.loads (start-up included)")
        floor = best[f"typed decode {n} records", i] / best[f"spectally replay {n} records", i]
        print(f"    replay {n} records: {floor:.2f}x the speed of the typed decode alone")


if __name__ == "__main__":
    main()
