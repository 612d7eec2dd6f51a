"""Reading a llama-server log: the lines that say what speculative decoding did.

llama-server (tools/server/server-context.cpp) logs through ``SLT_INF``, whose prefix is
``slot <function>: id <slot> | task <task> | `` (server-common.h). The lines read here:

* ``processing task, is_child = C`` (``launch_slot_with_task``): a request starts on a slot;
* ``accepted A/N draft tokens`` (``update_slots``, only with ``LLAMA_TRACE=1``): one
  verification of an N-token draft, A drafts accepted (the bonus token excluded);
* ``accepted A/N draft tokens (restore checkpoint)``: a recurrent target rejected part of the
  draft; the server restores its checkpoint, counts nothing, and verifies the A accepted
  tokens plus the correction again as a draft of A+1 at the next iteration, whose plain line is
  the one counted;
* ``draft acceptance = R (A accepted / D generated), ...`` (``server_slot::print_timings``):
  the request's own totals, printed when it stops;
* ``stop processing: n_tokens = T, truncated = U`` (``server_slot::release``): the request
  stopped; /metrics adds its counts now (``metrics_on_prediction``).

The version comes from a ``version: 0.5.0-dev (build 1, commit 0c1e570)`` line: what
``llama-server --version`` prints (the server's own log does not say it), which
scripts/capture_llamacpp.py writes at the top of the log; it becomes ``0.5.0-dev+0c1e570``.
Any other line is skipped: a log has many. A line that starts like one of these and does not
parse is bad input, named ``file:line``.
"""

from __future__ import annotations

import re
import zlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from ..steplog.limits import MAX_LINE_BYTES, digits_too_long, version_error
from ..steplog.source import BOM, BadInput, close_stream, gzip_error, open_binary

SLOT = re.compile(r"slot\s+[^:|]*: id\s+(?P<slot>\d+) \| task (?P<task>-?\d+) \| (?P<msg>.*)$")
ACCEPTED = re.compile(
    r"^accepted\s+(?P<a>\d+)/\s*(?P<n>\d+) draft tokens(?P<restore> \(restore checkpoint\))?\s*$"
)
# update_slots' SLT_DBG twin of the verification line (printed at debug verbosity): skipped.
ACCEPTED_DEBUG = re.compile(r"^accepted \d+/\d+ draft tokens, new n_tokens = \d+\s*$")
LAUNCH = re.compile(r"^processing task, is_child = (?P<child>\d+)\s*$")
RELEASE = re.compile(r"^stop processing: n_tokens = (?P<n>\d+), truncated = (?P<t>\d+)\s*$")
TIMINGS = re.compile(r"^draft acceptance = \S+ \(\s*(?P<a>\d+) accepted /\s*(?P<d>\d+) generated\)")
# ``llama-server --version``: "version: 0.5.0-dev (build 1, commit 0c1e570)".
VERSION = re.compile(r"^version: (?P<v>\S+) \(build \d+, commit (?P<c>\w+)\)")
# Line beginnings that commit a line to one of the forms above.
HINTS = ("accepted", "processing task", "stop processing", "draft acceptance")


@dataclass(frozen=True)
class Line:
    """One line that matters, with its 1-based number in the file."""

    line: int
    kind: str  # "launch", "verify", "restore", "timings", "release", "build"
    slot: int = -1
    task: int = -1
    a: int = 0  # accepted (verify, restore, timings)
    n: int = 0  # drafted (verify, restore, timings)
    text: str = ""  # build string


def read_lines(path: str) -> Iterator[tuple[int, str]]:
    """The file's lines (plain, gzip or ``-``: the readers' shared opener; undecodable bytes
    replaced, since a server log may print token pieces), numbered from 1; a line longer than
    the readers' limit (docs/limits.md) is bad input, read no further than the limit."""
    stream = open_binary(path)
    try:
        no = 0
        while True:
            try:
                raw = stream.readline(MAX_LINE_BYTES + 1)
            except (EOFError, OSError, zlib.error) as exc:
                raise BadInput(path, no + 1, 1, gzip_error(exc)) from None
            if not raw:
                return
            no += 1
            if len(raw) > MAX_LINE_BYTES:
                raise BadInput(path, no, 1, f"line longer than {MAX_LINE_BYTES} bytes")
            if no == 1 and raw.startswith(BOM):  # an editor's UTF-8 mark, as every reader drops
                raw = raw[len(BOM) :]
            yield no, raw.decode("utf-8", errors="replace").rstrip("\r\n")
    finally:
        close_stream(stream)


def _count(path: str, no: int, col: int, text: str) -> int:
    if digits_too_long(text):
        raise BadInput(path, no, col, f"a count of {len(text)} digits: beyond the limit 2**63 - 1")
    return int(text)


def parse(path: str, lines: Iterable[tuple[int, str]] | None = None) -> Iterator[Line]:
    """The lines of a llama-server log that matter (see the module docstring)."""
    for no, text in read_lines(path) if lines is None else lines:
        if (v := VERSION.match(text)) is not None:
            version = f"{v.group('v')}+{v.group('c')}"
            if (why := version_error("the version line", version)) is not None:
                raise BadInput(path, no, v.start("v") + 1, why)
            yield Line(no, "build", text=version)
            continue
        m = SLOT.search(text)
        if m is None:
            continue
        msg = m.group("msg")
        if not msg.startswith(HINTS):
            continue
        col = m.start("msg") + 1
        slot = _count(path, no, m.start("slot") + 1, m.group("slot"))
        task = _count(path, no, m.start("task") + 1, m.group("task").lstrip("-"))
        task = -task if m.group("task").startswith("-") else task
        if (v := ACCEPTED.match(msg)) is not None:
            a = _count(path, no, col + v.start("a"), v.group("a"))
            n = _count(path, no, col + v.start("n"), v.group("n"))
            if a > n:
                raise BadInput(path, no, m.start("msg") + 1, f"accepted {a} exceeds drafted {n}")
            kind = "restore" if v.group("restore") else "verify"
            yield Line(no, kind, slot, task, a, n)
        elif ACCEPTED_DEBUG.match(msg) is not None:
            continue
        elif (v := LAUNCH.match(msg)) is not None:
            yield Line(no, "launch", slot, task)
        elif (v := RELEASE.match(msg)) is not None:
            yield Line(no, "release", slot, task)
        elif (v := TIMINGS.match(msg)) is not None:
            a = _count(path, no, col + v.start("a"), v.group("a"))
            d = _count(path, no, col + v.start("d"), v.group("d"))
            yield Line(no, "timings", slot, task, a, d)
        else:
            raise BadInput(path, no, m.start("msg") + 1, f"unrecognised llama-server line: {msg!r}")
