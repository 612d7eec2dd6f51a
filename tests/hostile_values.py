"""Hostile values the fuzzers put into real logs: JSON field values of every type and size,
numbers for non-JSON lines, and text encodings a step log must not be in."""

# Values a field's value is replaced with (raw JSON text): every type, boundaries, huge ones.
HOSTILE_JSON = [
    '"text"',
    "1.5",
    "-1",
    "null",
    "true",
    "[]",
    "{}",
    "0",
    "1024",
    "1025",
    "1000000000",
    str(2**63 - 1),
    str(2**63),
    "9" * 5000,
    "1e999",
    "NaN",
    "-Infinity",
    "[" * 200 + "]" * 200,
    '"\\ud800"',
    '"\u00e9\u4e2d"',
]
# Replacements for numbers inside non-JSON lines (Prometheus samples, vLLM log lines).
HOSTILE_NUMBERS = [
    "NaN",
    "+Inf",
    "-Inf",
    "nan",
    "inf",
    "-1",
    "1.5",
    "0",
    "1e400",
    "9" * 30,
    "9" * 5000,
    "1000000000",
    "",
    "x",
]
# Encodings other than UTF-8, which every reader refuses.
ENCODINGS = ["utf-16", "utf-32", "latin-1", "cp1252"]
