"""Running CrossHair on the contracts, the bug examples and the correct examples.

- ``proofs/bugs_detected/*.py``: buggy counter implementations; CrossHair must find a
  counterexample in each. ``proofs/correct_code/*.py``: their fixed counterparts; every
  condition must be confirmed. Each example has a golden ``<name>.out``: CrossHair's output with
  ``--report_all``, absolute paths made relative to the repository (CrossHair prints no timings).
- ``spectally.proofs.contracts`` and the contracts in ``reference/*.py`` docstrings: reported
  per function as confirmed over all paths / no counterexample found / counterexample.

``python -m spectally.proofs.crosshair_run --update`` rewrites the goldens;
``python -m spectally.proofs.crosshair_run`` prints the per-function report.
"""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

PROOFS_DIR = Path(__file__).resolve().parent
REPO = PROOFS_DIR.parent
EXAMPLE_DIRS = ("bugs_detected", "correct_code")
EXAMPLE_TIMEOUT_S = 5.0
LINE = re.compile(r"^(?P<file>[^:]+):(?P<line>\d+): (?P<kind>error|info): (?P<message>.*)$")


def crosshair_command() -> list[str]:
    exe = Path(sys.executable).with_name("crosshair")
    return [str(exe)] if exe.exists() else [sys.executable, "-m", "crosshair"]


def run_check(
    target: str, per_condition_timeout: float, report_all: bool = True, extra: tuple[str, ...] = ()
) -> tuple[int, str]:
    """``crosshair check TARGET [EXTRA...]``; returns (exit code, normalised stdout)."""
    cmd = [
        *crosshair_command(),
        "check",
        target,
        *extra,
        f"--per_condition_timeout={per_condition_timeout}",
        *(["--report_all"] if report_all else []),
    ]
    env = dict(os.environ, PYTHONHASHSEED="0")
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO, env=env, check=False)
    return proc.returncode, normalise(proc.stdout)


def normalise(output: str) -> str:
    """Paths relative to the repository, lines sorted (CrossHair may report out of order)."""
    lines = []
    for line in output.splitlines():
        line = line.replace(str(REPO) + os.sep, "")
        if line.strip():
            lines.append(line.rstrip())
    return "\n".join(sorted(lines)) + ("\n" if lines else "")


def examples() -> list[Path]:
    return sorted(p for d in EXAMPLE_DIRS for p in (PROOFS_DIR / d).glob("*.py"))


def golden_path(example: Path) -> Path:
    return example.with_suffix(".out")


def check_example(example: Path) -> tuple[int, str]:
    return run_check(str(example), EXAMPLE_TIMEOUT_S)


def update_goldens() -> None:
    for example in examples():
        _, out = check_example(example)
        golden_path(example).write_text(out)
        print(f"{golden_path(example).relative_to(REPO)}: {out.count(chr(10))} line(s)")


@dataclass(frozen=True)
class Finding:
    function: str
    line: int
    verdict: str  # confirmed over all paths | no counterexample found | counterexample
    message: str


def findings(output: str, source: Path) -> list[Finding]:
    """CrossHair's ``--report_all`` lines, attributed to the function whose docstring holds
    the condition."""
    spans = _function_spans(source)
    out: list[Finding] = []
    for raw in output.splitlines():
        m = LINE.match(raw)
        if not m or not source.as_posix().endswith(m["file"].replace(os.sep, "/")):
            continue
        line = int(m["line"])
        name = next((n for n, (a, b) in spans.items() if a <= line <= b), "?")
        message = m["message"]
        if m["kind"] == "error":
            verdict = "counterexample"
        elif message.startswith("Confirmed over all paths"):
            verdict = "confirmed over all paths"
        else:
            verdict = "no counterexample found"
        out.append(Finding(name, line, verdict, message))
    return out


def _function_spans(source: Path) -> dict[str, tuple[int, int]]:
    tree = ast.parse(source.read_text())
    spans: dict[str, tuple[int, int]] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef):
            for item in node.body:
                if isinstance(item, ast.FunctionDef):
                    spans[f"{node.name}.{item.name}"] = (item.lineno, item.end_lineno or 0)
        elif isinstance(node, ast.FunctionDef) and node.col_offset == 0:
            spans[node.name] = (node.lineno, node.end_lineno or 0)
    return spans


def report(target: str, source: Path, per_condition_timeout: float) -> list[Finding]:
    _, out = run_check(target, per_condition_timeout)
    return findings(out, source)


def main(argv: list[str]) -> int:
    if "--update" in argv:
        update_goldens()
        return 0
    timeout = 10.0
    targets = [
        ("spectally.proofs.contracts", PROOFS_DIR / "contracts.py"),
        ("spectally.reference.step", REPO / "reference" / "step.py"),
    ]
    for target, source in targets:
        for f in report(target, source, timeout):
            print(f"{target}.{f.function} (line {f.line}): {f.verdict}  [{f.message}]")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
