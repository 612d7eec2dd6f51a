"""Peak RSS of the current process (imported by bench_replay.py's memory subprocesses)."""

from __future__ import annotations

import resource


def peak() -> float:
    """VmHWM in MB: the high-water mark of this process since its exec (``ru_maxrss`` would
    keep the parent's size across fork and exec)."""
    try:
        with open("/proc/self/status", encoding="ascii") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024.0
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
