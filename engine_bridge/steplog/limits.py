"""Input limits of every reader (step logs, Prometheus scrapes, vLLM log lines, per-request
metrics) and of ``spectally step``: far above any real engine's values, checked before anything
proportional to a value is allocated, so memory stays bounded whatever one line says.

Each limit exceeded is bad input (exit 2) with a ``file:line:column`` message naming the limit.
Standard library only, and importing it imports nothing else of the bridge (``spectally step``
uses it without the bridge's optional dependencies). Documented in docs/limits.md.
"""

from __future__ import annotations

import re

# k: num_speculative_tokens (header), the Prometheus ``position`` label (+1), per-request
# ``num_spec_tokens``, the draft counts of ``spectally step``. Real engines use k <= ~16; the
# reference allocates per-position lists of length k, so an unchecked 10**9 costs gigabytes.
MAX_K = 1024

# One line of any input, in bytes (without its newline). A step-log record is ~250 bytes; a
# Prometheus sample or a vLLM log line well under 4 KiB.
MAX_LINE_BYTES = 1 << 20

# A whole document, in bytes: the JSON and YAML inputs read at once (per-request metrics, llama.cpp
# --responses, TensorRT-LLM iteration stats, `lint`'s files). Such a file is often one line
# (json.dump without indent writes one), so a line of it may be as long as the document; the
# reader holds the whole text anyway. One request's metrics with 16 detailed steps are ~450 bytes.
MAX_DOCUMENT_BYTES = 256 << 20

# JSON nesting depth (objects and arrays). Step-log records nest 3 deep; CPython's own JSON
# scanner raises RecursionError near 1,000.
MAX_DEPTH = 64

# Integers anywhere in the input (JSON numbers, log-line counts, Prometheus counters): what a
# signed 64-bit counter in an engine can hold. Python's own int parsing stops at 4,300 digits
# with a ValueError; this bound is checked first.
MAX_INT = 2**63 - 1
MAX_INT_DIGITS = len(str(MAX_INT))  # 19


def digits_too_long(digits: str) -> bool:
    """Whether a decimal integer literal (optional sign) is beyond MAX_INT, decided from its text
    alone, so no huge int is ever built."""
    body = digits.lstrip("+-").lstrip("0") or "0"
    if len(body) != MAX_INT_DIGITS:
        return len(body) > MAX_INT_DIGITS
    return body > str(MAX_INT)  # same length: lexicographic order is numeric order


# A version string's numeric parts (the header's engine_version: "0.32.0rc1+cpu") are read as
# integers to pick a counting profile; a part longer than a 64-bit integer is no version.
_LONG_DIGITS = re.compile(rf"\d{{{MAX_INT_DIGITS + 1},}}")


def version_error(name: str, value: str) -> str | None:
    """The message for a version string with a numeric part beyond MAX_INT_DIGITS digits, None
    when every part is within (no int is built either way)."""
    m = _LONG_DIGITS.search(value)
    if m is None:
        return None
    return (
        f"{name} has a numeric part of {len(m.group())} digits: beyond the limit"
        f" {MAX_INT_DIGITS} digits (2**63 - 1, docs/limits.md)"
    )


def k_error(name: str, value: int) -> str | None:
    """The message for a k-like value beyond MAX_K, None when it is within."""
    if value > MAX_K:
        return f"{name} {value} exceeds the limit {MAX_K} (docs/limits.md)"
    return None
