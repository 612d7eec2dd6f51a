"""The conformance kit: run any implementation of CORE.md against the core vectors through the
line protocol of spec/conformance/PROTOCOL.md and report per conformance level.

The implementation is a separate process (any language): one JSON request per vector on its
stdin, one JSON response per request on its stdout. Nothing here imports an implementation;
the Python reference is run the same way, through ``python -m spectally.spec.conform_adapter``.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import queue
import signal
import subprocess
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from jsonschema import Draft202012Validator
from jsonschema.exceptions import best_match
from spectally.reference.errors import SpectallyError

HERE = Path(__file__).parent / "conformance"
VECTORS = HERE / "vectors.json"
VECTORS_SCHEMA = HERE / "vectors.schema.json"
PROTOCOL_SCHEMA = HERE / "protocol.schema.json"
PROTOCOL = "spectally-conform/1"
LEVELS = ("L1", "L2", "L3")
MAX_LINE = 1 << 20  # a response line longer than 1 MiB is malformed


class KitFormatError(SpectallyError):
    """The vectors file is not a valid core-vectors document (exit 2)."""


@dataclass
class Check:
    """One expected value of one vector against the implementation's answer."""

    vector: str
    level: str
    path: str  # e.g. "totals.L1.drafted", "requests.r1.L2.verified", "error"
    expected: object
    found: object
    status: str  # "pass", "fail", "unsupported"


@dataclass
class Report:
    """Everything one run established; `exit_code` maps it onto the exit-code contract."""

    implementation: list[str]
    vectors_version: str
    checks: list[Check] = field(default_factory=list)
    problem: str | None = None  # protocol broken, crash or hang: no verdict on the rest
    stderr_tail: str = ""

    def level_summary(self) -> dict[str, dict[str, int]]:
        out = {lv: {"pass": 0, "fail": 0, "unsupported": 0} for lv in LEVELS}
        for c in self.checks:
            out[c.level][c.status] += 1
        return out

    def conformant_level(self) -> str | None:
        """The highest level n with every check of level <= n passing, at least one each
        (None: not even L1; a level no check ran, e.g. under --vector, is not established)."""
        if self.problem is not None:
            return None
        best: str | None = None
        summary = self.level_summary()
        for lv in LEVELS:
            if summary[lv]["fail"] or summary[lv]["unsupported"] or not summary[lv]["pass"]:
                break
            best = lv
        return best

    def exit_code(self, claimed: str) -> int:
        """0: every check up to the claimed level passes; 1: one fails or is unsupported;
        2: the run broke (malformed protocol, crash, hang, unstartable command)."""
        if self.problem is not None:
            return 2
        upto = LEVELS[: LEVELS.index(claimed) + 1]
        bad = [c for c in self.checks if c.level in upto and c.status != "pass"]
        return 1 if bad else 0

    def to_dict(self, claimed: str) -> dict[str, Any]:
        return {
            "implementation": self.implementation,
            "vectors_version": self.vectors_version,
            "claimed_level": claimed,
            "conformant_level": self.conformant_level(),
            "levels": self.level_summary(),
            "problem": self.problem,
            "checks": [
                {
                    "vector": c.vector,
                    "level": c.level,
                    "path": c.path,
                    "status": c.status,
                    "expected": c.expected,
                    "found": c.found,
                }
                for c in self.checks
                if c.status != "pass"
            ],
        }

    def render(self, claimed: str) -> str:
        lines = [f"implementation: {' '.join(self.implementation)}"]
        lines.append(f"core vectors {self.vectors_version}")
        unsupported: dict[tuple[str, str], int] = {}
        for c in self.checks:
            if c.status == "fail":
                lines.append(
                    f"FAIL {c.level} {c.vector}: {c.path}"
                    f" expected {json.dumps(c.expected)}, found {json.dumps(c.found)}"
                )
            elif c.status == "unsupported":
                what = c.path.rsplit(".", 1)[-1] if c.path != "error" else str(c.expected)
                unsupported[(c.level, what)] = unsupported.get((c.level, what), 0) + 1
        for (level, what), n in sorted(unsupported.items()):
            lines.append(f"unsupported {level} {what} ({n} checks)")
        summary = self.level_summary()
        for lv in LEVELS:
            s = summary[lv]
            met = not s["fail"] and not s["unsupported"]
            claimed_here = LEVELS.index(lv) <= LEVELS.index(claimed)
            if not met:
                verdict = "FAIL" if claimed_here else "not met"
            elif self.problem is not None:
                verdict = "not judged (the run broke)"  # its checks never all ran
            elif not s["pass"]:
                verdict = "not checked (no check of this level ran)"
            else:
                verdict = "pass"
            lines.append(
                f"{lv}: {verdict} ({s['pass']} passed, {s['fail']} failed,"
                f" {s['unsupported']} unsupported)"
            )
        if self.problem is not None:
            lines.append(f"run broken: {self.problem}")
            if self.stderr_tail:
                lines.append("implementation's stderr (tail):")
                lines.extend("  " + ln for ln in self.stderr_tail.splitlines())
        else:
            lines.append(f"conformant at: {self.conformant_level() or 'no level'}")
        lines.append(f"claimed: {claimed}")
        return "\n".join(lines)


def _schema(path: Path) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    return doc


def load_vectors(path: Path | None = None) -> dict[str, Any]:
    """The core vectors, checked against their schema and for unique names and request ids."""
    p = path or VECTORS
    try:
        doc: dict[str, Any] = json.loads(p.read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError) as exc:  # ValueError: bad UTF-8, JSON, ints
        why = "not valid JSON: nested too deeply" if isinstance(exc, RecursionError) else exc
        raise KitFormatError(f"{p}: {why}") from exc
    err = best_match(Draft202012Validator(_schema(VECTORS_SCHEMA)).iter_errors(doc))
    if err is not None:
        where = "/".join(str(x) for x in err.absolute_path) or "(top)"
        raise KitFormatError(f"{p}: {where}: {err.message}")
    names = [v["name"] for v in doc["vectors"]]
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
        raise KitFormatError(f"{p}: vector names repeated: {', '.join(dup)}")
    for v in doc["vectors"]:
        ids = [r["id"] for r in v["input"]["requests"]]
        if len(set(ids)) != len(ids):
            raise KitFormatError(f"{p}: vector {v['name']}: request ids repeated")
    return doc


def _equal(expected: object, found: object, tol: float) -> bool:
    if expected is None or isinstance(expected, bool):
        return found is expected
    if isinstance(expected, int):
        return isinstance(found, int) and not isinstance(found, bool) and found == expected
    if isinstance(expected, float):
        return (
            isinstance(found, (int, float))
            and not isinstance(found, bool)
            and math.isfinite(found)
            and abs(found - expected) <= tol
        )
    if isinstance(expected, list):
        return (
            isinstance(found, list)
            and len(found) == len(expected)
            and all(_equal(e, f, tol) for e, f in zip(expected, found, strict=True))
        )
    if isinstance(expected, dict):
        return isinstance(found, dict) and all(
            _equal(e, found.get(k, _MISSING), tol) for k, e in expected.items()
        )
    return expected == found


class _Missing:
    def __repr__(self) -> str:
        return "missing"


_MISSING = _Missing()


def _jsonable(x: object) -> object:
    return None if x is _MISSING else x


def judge(vector: dict[str, Any], response: dict[str, Any], tol: float) -> list[Check]:
    """Compare one response with one vector's expectations, one check per expected field."""
    name = vector["name"]
    expect = vector["expect"]
    unsupported = set(response.get("unsupported", []))
    if "error" in expect:
        rule = expect["error"]
        level = vector["level"]
        if rule in unsupported:
            status, found = "unsupported", response.get("error")
        else:
            found = response.get("error", _MISSING)
            status = "pass" if found == rule else "fail"
        return [Check(name, level, "error", rule, _jsonable(found), status)]
    checks: list[Check] = []
    scopes: list[tuple[str, dict[str, Any], object]] = [
        ("totals", expect["totals"], response.get("totals", _MISSING))
    ]
    found_requests = response.get("requests", {})
    for rid, groups in expect.get("requests", {}).items():
        got = found_requests.get(rid, _MISSING) if isinstance(found_requests, dict) else _MISSING
        scopes.append((f"requests.{rid}", groups, got))
    for prefix, groups, got in scopes:
        for level, fields in groups.items():
            for key, value in fields.items():
                f = got.get(key, _MISSING) if isinstance(got, dict) else _MISSING
                if key in unsupported:
                    status = "unsupported"
                else:
                    status = "pass" if _equal(value, f, tol) else "fail"
                checks.append(
                    Check(name, level, f"{prefix}.{level}.{key}", value, _jsonable(f), status)
                )
    return checks


class _Reader(threading.Thread):
    """Reads the implementation's stdout line by line onto a queue (None at end of file), so
    the kit can wait for each response with a timeout instead of blocking for ever."""

    def __init__(self, stream: IO[bytes]) -> None:
        super().__init__(daemon=True)
        self.stream = stream
        self.lines: queue.Queue[bytes | None] = queue.Queue()

    def run(self) -> None:
        try:
            while True:
                line = self.stream.readline(MAX_LINE + 1)
                if not line:
                    break
                self.lines.put(line)
                if len(line) > MAX_LINE:
                    break
        except (OSError, ValueError):
            pass
        self.lines.put(None)


class _Tail(threading.Thread):
    """Reads the implementation's stderr to its end, keeping only the last `TAIL` bytes: an
    implementation that floods stderr neither blocks on a full pipe nor fills a disk."""

    TAIL = 2000

    def __init__(self, fd: int) -> None:
        super().__init__(daemon=True)
        self.fd = fd
        self.kept = bytearray()

    def run(self) -> None:
        with contextlib.suppress(OSError):
            while chunk := os.read(self.fd, 65536):
                self.kept += chunk
                del self.kept[: -self.TAIL]

    def text(self) -> str:
        return bytes(self.kept).decode("utf-8", "replace").strip()


def _parse(line: bytes, want_id: str) -> dict[str, Any] | str:
    """A response object, or why the line breaks the protocol."""
    if len(line) > MAX_LINE:
        return f"a response line over {MAX_LINE} bytes"
    try:
        obj = json.loads(line.decode("utf-8"))
    except (ValueError, RecursionError) as exc:  # ValueError: also an int past the digit limit
        why = "nested too deeply" if isinstance(exc, RecursionError) else str(exc)
        return f"a response that is not one JSON line ({why}): {line[:120]!r}"
    if not isinstance(obj, dict):
        return f"a response that is not a JSON object: {line[:120]!r}"
    err = best_match(Draft202012Validator(_schema(PROTOCOL_SCHEMA)).iter_errors(obj))
    if err is not None:
        where = "/".join(str(x) for x in err.absolute_path) or "(top)"
        return f"a malformed response ({where}: {err.message}): {line[:120]!r}"
    if obj["id"] != want_id:
        return f"a response for {obj['id']!r} where {want_id!r} was asked"
    return obj


def run(
    command: list[str],
    doc: dict[str, Any],
    timeout: float,
    only: set[str] | None = None,
) -> Report:
    """Start ``command`` once, send it every vector (or those named in ``only``), judge every
    response. A crash, a hang past ``timeout`` seconds per response or a protocol breach ends
    the run with `Report.problem` set; the process is always ended before returning."""
    report = Report(implementation=list(command), vectors_version=str(doc["version"]))
    tol = float(doc["float_tolerance"])
    vectors = [v for v in doc["vectors"] if only is None or v["name"] in only]
    try:
        # Its own process group: a child it leaves behind (holding the stdout pipe open)
        # is ended with it, so neither the reader nor closing the pipe waits on it.
        proc = subprocess.Popen(
            command,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
        )
    except OSError as exc:
        report.problem = f"cannot start {command[0]!r}: {exc.strerror or exc}"
        return report
    assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
    reader = _Reader(proc.stdout)
    reader.start()
    err = _Tail(proc.stderr.fileno())
    err.start()
    try:
        for vec in vectors:
            request = {
                "protocol": PROTOCOL,
                "id": vec["name"],
                "level": vec["level"],
                "input": vec["input"],
            }
            try:
                proc.stdin.write((json.dumps(request) + "\n").encode("utf-8"))
                proc.stdin.flush()
            except (BrokenPipeError, OSError):
                pass  # it exited: the read below says so
            try:
                line = reader.lines.get(timeout=timeout)
            except queue.Empty:
                report.problem = f"no response to {vec['name']!r} within {timeout:g} s (hang)"
                break
            if line is None:
                code = proc.wait(timeout=timeout)
                report.problem = (
                    f"the implementation exited (status {code}) before answering"
                    f" {vec['name']!r} (crash)"
                )
                break
            parsed = _parse(line, vec["name"])
            if isinstance(parsed, str):
                report.problem = f"protocol broken at {vec['name']!r}: {parsed}"
                break
            report.checks.extend(judge(vec, parsed, tol))
        if report.problem is None:
            proc.stdin.close()
            try:
                proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                report.problem = (
                    f"the implementation did not exit within {timeout:g} s of end of input"
                )
    finally:
        with contextlib.suppress(OSError):  # ProcessLookupError: the group is gone already
            os.killpg(proc.pid, signal.SIGKILL)
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        reader.join(timeout=5)
        err.join(timeout=5)
        # A stream is closed only once its reader is done: closing a buffered stream that
        # another thread is blocked reading waits for that read to return.
        for stream, done in ((proc.stdin, True), (proc.stdout, not reader.is_alive())):
            if done:
                with contextlib.suppress(OSError):
                    stream.close()
        if not err.is_alive():
            with contextlib.suppress(OSError):
                proc.stderr.close()
        if report.problem is not None:
            report.stderr_tail = err.text()
    return report
