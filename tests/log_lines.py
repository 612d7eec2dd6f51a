"""Hand-written step-log lines shared by the bad-input and hostile-input tests.

A minimal valid sync ngram header (k = 3) and the add record of request ``a``: tests copy and
break them one field at a time. Each test takes a copy (``dict(HEADER)``) before changing it.
"""

from __future__ import annotations

import json
from typing import Any

HEADER: dict[str, Any] = {
    "record": "header",
    "schema_version": 1,
    "engine": "vllm",
    "engine_version": "0.32.0",
    "num_speculative_tokens": 3,
    "scheduling": "sync",
    "spec_method": "ngram",
    "structured_outputs_backend": None,
    "adaptive_verification": False,
    "drop_stale_output": False,
}
ADD: dict[str, Any] = {
    "record": "request",
    "step": 1,
    "request": "a",
    "event": "add",
    "structured": False,
}


def dumps(rec: dict[str, Any]) -> str:
    """A record as the recorder writes it: compact separators, no trailing newline."""
    return json.dumps(rec, separators=(",", ":"))
