"""Whether the processes a test saw have been ended, read from /proc.

A process sent SIGKILL finishes its exit on the kernel's time: its pipes close before it
becomes a zombie, so on a busy machine it can still read as running ("R") for a moment after
the command that ended it returned. Ended here means gone, a zombie, inside the kernel's exit
(the PF_EXITING flag) or with SIGKILL pending: each is past the point of no return. A process
that was never ended shows none of these for as long as it runs."""

from __future__ import annotations

import signal
import time
from collections.abc import Iterable
from pathlib import Path

PF_EXITING = 0x4  # stat's flags word: the process is in the kernel's exit
SIGKILL_PENDING = 1 << (signal.SIGKILL - 1)  # its bit in the SigPnd and ShdPnd masks


def ended(pid: int) -> bool:
    """Whether ``pid`` is gone, a zombie, exiting or about to (module docstring)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:  # FileNotFoundError, or ESRCH while it is being removed
        return True
    fields = stat.rsplit(")", 1)[1].split()  # the name may hold spaces and parentheses
    state, flags = fields[0], int(fields[6])
    pending = 0
    for line in status.splitlines():
        key, _, value = line.partition(":")
        if key in ("SigPnd", "ShdPnd"):
            pending |= int(value, 16)
    return state in ("Z", "X") or bool(flags & PF_EXITING) or bool(pending & SIGKILL_PENDING)


def not_ended(pids: Iterable[int], seconds: float = 10.0) -> list[int]:
    """Those of ``pids`` not `ended` within ``seconds``. Polled, because a SIGKILL is taken off
    the pending set a moment before the exit flag is raised; a process never ended stays
    running far longer than this."""
    deadline = time.monotonic() + seconds
    while (left := [pid for pid in pids if not ended(pid)]) and time.monotonic() < deadline:
        time.sleep(0.05)
    return left
