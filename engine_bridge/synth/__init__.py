"""Synthetic step logs for benchmarks, tests and the bundled example.

The public face:

- `generate`, `lines` (`steady`): a log with few distinct block shapes (k = 4, full proposals);
- `varied.generate`, `varied.lines`: a high-variety log, what a busy production replica writes
  (k = 8, AV, grammar cuts, padding, preemptions, drifting load);
- `as_lines` (`common`): records as NDJSON lines, the way the recorder writes them.

Both generators count ``step_stats`` and ``totals`` as vLLM 0.32 does, independently of the
reference (`common`), so a replay of a synthetic log cross-checks the reference against a second
transcription of vLLM's rule.
"""

from __future__ import annotations

from . import steady, varied
from .common import as_lines
from .steady import generate, lines

__all__ = ["as_lines", "generate", "lines", "steady", "varied"]
