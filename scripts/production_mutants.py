"""Deliberate bugs in what keeps hostile input at production scale harmless: the output guard
(engine_bridge/steplog/outputs.py), lint's bounds and regex engine, rules' --window grammar
and test files, the writers' refusal of a diverging log, the missing-extra message, the
stream spool's limits, the second totals record on both judges, version-diff's --to and the
fleet's Ctrl-C. Each must fail its tests (tests/cli/test_production_hostile.py,
tests/fleet/test_fleet_hostile.py).

    .venv/bin/python scripts/production_mutants.py   # a few minutes

Each mutant rewrites its module in place, runs the tests and puts the file back (also on
Ctrl-C), so run it on a clean checkout (it refuses modified modules). Prints one line a
mutant: CAUGHT (the tests failed) or MISSED; exits 1 if any is missed. A mutant that would
make a command hang or fill a disk (lint's alias bound, RE2 swapped for Python's re on
``(.|.)*X``, the spool without its line limit or its control-byte stop, tried on
``/dev/urandom``) is tried on a finite input instead, or left out.
"""

from __future__ import annotations

import sys
from pathlib import Path

from scanner_mutants import run_all  # the same runner: rewrite, run the tests, report

REPO = Path(__file__).resolve().parent.parent
BRIDGE = REPO / "engine_bridge"
OUTPUTS = BRIDGE / "steplog" / "outputs.py"
SOURCE = BRIDGE / "steplog" / "source.py"
LINT = BRIDGE / "observe" / "lint.py"
RULES = BRIDGE / "observe" / "rules.py"
AIPERF = BRIDGE / "observe" / "aiperf.py"
OBSERVE_CLI = REPO / "cli" / "commands" / "observe.py"
CLI = REPO / "cli" / "commands" / "__init__.py"
REFERENCE = BRIDGE / "replay" / "reference_replay.py"
COLUMNAR = BRIDGE / "replay" / "columnar" / "columnar.py"
VERSION_DIFF = BRIDGE / "compare" / "version_diff.py"
JOB = BRIDGE / "fleet" / "job.py"
LLAMA_IMPORTER = BRIDGE / "llamacpp" / "importer.py"
LOCAL = BRIDGE / "fleet" / "local.py"
HOSTILE = "tests/cli/test_production_hostile.py"
FLEET = "tests/fleet/test_fleet_hostile.py"

# (module, name, text in the module, replacement, tests)
MUTANTS = [
    (OUTPUTS, "an output never the same file as an input",
     "    return (a.st_dev, a.st_ino) == (b.st_dev, b.st_ino)", "    return False",
     f"{HOSTILE} -k overwrites"),
    (OUTPUTS, "symlinks not followed",
     "        a, b = os.stat(out), os.stat(inp)", "        a, b = os.lstat(out), os.lstat(inp)",
     f"{HOSTILE} -k overwrites"),
    (OUTPUTS, "a missing folder not checked", "        if not folders_made:\n"
     "            _check_target(what, out)", "        pass", f"{HOSTILE} -k missing_dir"),
    (OUTPUTS, "written in place, not renamed into place",
     "    if st is not None and not stat.S_ISREG(st.st_mode):", "    if st is not None:",
     f"{HOSTILE} -k failed_write"),
    (OUTPUTS, "the temporary file left behind on failure", "        if not done:",
     "        if False:", f"{HOSTILE} -k failed_write"),
    (LINT, "no YAML depth bound", "                if depth > MAX_YAML_DEPTH:",
     "                if depth > 10**9:", f"{HOSTILE} -k deeply_nested"),
    (LINT, "no JSON depth bound", "        if deep is not None:", "        if False:",
     f"{HOSTILE} -k deeply_nested"),
    (LINT, "duplicate keys let through", "            if k.value in seen:", "            if False:",
     f"{HOSTILE} -k two_exprs"),
    (LINT, "Python's re for matchers", "            hit = prom_regex_matches(m.value, matched)",
     "            hit = {n for n in matched if re.fullmatch(m.value, n)}",
     f"{HOSTILE} -k decode"),
    (LINT, "matchers not anchored", "compiled.fullmatch(n)", "compiled.search(n)",
     f"{HOSTILE} -k anchors"),
    (LINT, "a newline not matched by .", "    options.dot_nl = True", "    options.dot_nl = False",
     f"{HOSTILE} -k anchors"),
    (RULES, "a zero window accepted", "    if total_ms == 0:", "    if total_ms < 0:",
     f"{HOSTILE} -k window"),
    (RULES, "units in any order", r'(?:(\d+)y)?(?:(\d+)w)?', r'(?:(\d+)[yw])?(?:(\d+)w)?',
     f"{HOSTILE} -k window"),
    (RULES, "no duration range", "    if total_ms * 1_000_000 > _MAX_DURATION_NS:",
     "    if False:", f"{HOSTILE} -k window"),
    (OBSERVE_CLI, "two logs of one name: one test", "        while name in seen:",
     "        while False:", f"{HOSTILE} -k one_name"),
    (OBSERVE_CLI, "rules --tests-from takes a diverging log", "    if tl.divergence is not None:",
     "    if False:", f"{HOSTILE} -k diverging"),
    (AIPERF, "export aiperf takes a diverging log", "    if timeline.divergence is not None:",
     "    if False:", f"{HOSTILE} -k diverging"),
    (AIPERF, "records labelled vllm", "engine or timeline.engine_name", "engine or 'vllm'",
     f"{HOSTILE} -k labels"),
    (CLI, "a missing extra an internal error",
     "        extra = EXTRA_OF_MODULE.get((exc.name or \"\").split(\".\")[0])",
     "        extra = None", f"{HOSTILE} -k missing_extra"),
    (JOB, "a worker's missing extra an internal error",
     "    except ModuleNotFoundError:  # an optional dependency not installed: the command names"
     " it\n        raise\n", "", f"{HOSTILE} -k missing_extra"),
    (SOURCE, "control bytes spooled", "            if bad is not None:", "            if False:",
     f"{HOSTILE} -k control_byte"),
    (SOURCE, "a control byte's column off",
     "                col = (run if nl == 0 else 0) + at - start + 1",
     "                col = at - start + 1", f"{HOSTILE} -k control_byte"),
    (REFERENCE, "a second totals record not checked",
     "            for line, rec in (self.totals_record, *self.more_totals):",
     "            for line, rec in (self.totals_record,):", f"{HOSTILE} -k second_totals"),
    (REFERENCE, "one source's totals twice accepted", "        if rec[\"source\"] in sources:",
     "        if False:", f"{HOSTILE} -k second_totals"),
    (COLUMNAR, "columnar: only one totals record taken off the end",
     "            tail.insert(0, (start + len(records) - 1, last))\n"
     "            records = records.cut(0, len(records) - 1)\n",
     "            tail.insert(0, (start + len(records) - 1, last))\n"
     "            records = records.cut(0, len(records) - 1)\n            break\n",
     f"{HOSTILE} -k second_totals"),
    (VERSION_DIFF, "--to read as a vLLM release", "    engine = log_engine(path)",
     "    engine = 'vllm'", f"{HOSTILE} -k version_diff"),
    (LLAMA_IMPORTER, "--responses nesting unbounded", "    _check_responses_text(path, text)\n",
     "", f"{HOSTILE} -k responses_wide"),
    (LLAMA_IMPORTER, "--responses integers unbounded", "        if digits_too_long(digits):",
     "        if False:", f"{HOSTILE} -k responses_wide"),
    (LOCAL, "workers taken after shutdown forgot them",
     "    processes = list((getattr(pool, \"_processes\", None) or {}).values())\n"
     "    for proc in processes:\n        if proc.is_alive():\n            proc.terminate()\n"
     "    pool.shutdown(wait=False, cancel_futures=True)\n",
     "    pool.shutdown(wait=False, cancel_futures=True)\n"
     "    processes = list((getattr(pool, \"_processes\", None) or {}).values())\n",
     f"{FLEET} -k ctrl_c"),
    (LOCAL, "the fork server with the working directory on sys.path",
     'os.environ["PYTHONSAFEPATH"] = "1"', 'os.environ["PYTHONSAFEPATH"] = ""',
     f"{FLEET} -k folder"),
]  # fmt: skip


def main() -> int:
    return run_all(MUTANTS)


if __name__ == "__main__":
    sys.exit(main())
