"""Fuzzing every command that reads input: structured mutations of the committed real vLLM
artifacts (tests/fixtures/vllm), run through the real `spectally` command in process.

Each example asserts the exit-code and message contract, whatever the input:

* the exit code is one of the contract's for that command (70, an internal error, never is);
* no traceback anywhere in the output;
* bad input (exit 2) is one message ``file:line[:column]: reason`` naming an input file;
* a divergence or violation (exit 1) names ``file:line``;
* bounded memory: the peak of Python allocations (tracemalloc) stays under PEAK_LIMIT, far below
  what any size read from the input (k = 10**9, a 5,000-digit number) would cost if allocated.

No timing assertion: time is bounded by the examples' count (the Hypothesis profile of
tests/conftest.py: ``ci`` by default, ``thorough`` for the long tier). The long tier:

    HYPOTHESIS_PROFILE=thorough .venv/bin/python -m pytest -m '' tests/cli/test_fuzz_cli.py

runs these with 3,000 examples each plus the exhaustive byte-level cases (`fuzz` marker).
"""

from __future__ import annotations

import gzip
import json
import re
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result
from hostile_values import ENCODINGS, HOSTILE_JSON, HOSTILE_NUMBERS
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from spectally.commands import main
from spectally.exit_codes import ExitCode

FIXTURES = Path(__file__).parents[1] / "fixtures" / "vllm"
LOGS = ["ngram-k3-t0.8.ndjson.gz", "draft-same-k3-greedy.ndjson.gz", "serve-ngram-k3.ndjson.gz"]
SERVED = FIXTURES / "serve-ngram-k3"
PEAK_LIMIT = 64 << 20  # bytes; a fixture replays in a few MB
LOCATED = re.compile(r"^(?P<path>.+?):(?P<line>\d+)(?::(?P<col>\d+))?: \S")


def lines_of(path: Path) -> list[bytes]:
    data = path.read_bytes()
    if data[:2] == b"\x1f\x8b":
        data = gzip.decompress(data)
    return data.splitlines()


LOG_LINES = {name: lines_of(FIXTURES / name) for name in LOGS}


def _json_field_change(line: bytes, data: st.DataObject) -> bytes:
    try:
        obj = json.loads(line)
    except ValueError:
        return line
    if not isinstance(obj, dict) or not obj:
        return line
    key = data.draw(st.sampled_from(sorted(obj)))
    value = data.draw(st.sampled_from(HOSTILE_JSON))
    head = json.dumps({k: v for k, v in obj.items() if k != key})[:-1]
    sep = ", " if len(obj) > 1 else ""
    return f"{head}{sep}{json.dumps(key)}: {value}}}".encode("utf-8", "surrogatepass")


def _number_change(line: bytes, data: st.DataObject) -> bytes:
    spans = [m.span() for m in re.finditer(rb"-?\d+(?:\.\d+)?", line)]
    if not spans:
        return line
    start, end = data.draw(st.sampled_from(spans))
    return line[:start] + data.draw(st.sampled_from(HOSTILE_NUMBERS)).encode() + line[end:]


def mutate_lines(lines: list[bytes], data: st.DataObject, field: Callable[..., bytes]) -> bytes:
    """One structured mutation of a line-based input; returns the mutated bytes (uncompressed)."""
    lines = list(lines)
    n = len(lines)
    i = data.draw(st.integers(0, n - 1), label="line")
    kind = data.draw(
        st.sampled_from(
            [
                "field",
                "duplicate",
                "swap",
                "delete",
                "cut_at_line",
                "cut_mid_line",
                "duplicate_key",
                "deep",
                "bom",
                "bad_byte",
                "encoding",
                "long_line",
                "concatenate",
            ]
        ),
        label="kind",
    )
    if kind == "field":
        lines[i] = field(lines[i], data)
    elif kind == "duplicate":
        lines.insert(i, lines[i])
    elif kind == "swap":
        j = data.draw(st.integers(0, n - 1))
        lines[i], lines[j] = lines[j], lines[i]
    elif kind == "delete":
        del lines[i]
    elif kind == "cut_at_line":
        return b"".join(line + b"\n" for line in lines[:i])
    elif kind == "cut_mid_line":
        text = b"".join(line + b"\n" for line in lines)
        return text[: data.draw(st.integers(0, len(text)))]
    elif kind == "duplicate_key":
        line = lines[i]
        if line.endswith(b"}"):
            m = re.search(rb'"([a-z_]+)":', line)
            if m:
                lines[i] = line[:-1] + b', "' + m[1] + b'": 0}'
    elif kind == "deep":
        depth = data.draw(st.sampled_from([63, 65, 1000, 100_000]))
        lines[i] = lines[i][:-1] + b', "meta": ' + b"[" * depth + b"]" * depth + b"}"
    elif kind == "bom":
        lines[i] = b"\xef\xbb\xbf" + lines[i]
    elif kind == "bad_byte":
        at = data.draw(st.integers(0, len(lines[i])))
        byte = data.draw(st.sampled_from([b"\xff", b"\x00", b"\xed\xa0\x80", b"\xc3", b"\r"]))
        lines[i] = lines[i][:at] + byte + lines[i][at:]
    elif kind == "encoding":
        text = b"".join(line + b"\n" for line in lines).decode("utf-8") + "\u00e9\n"
        enc = data.draw(st.sampled_from(ENCODINGS))
        return text.encode(enc, "replace")
    elif kind == "long_line":
        lines[i] = b" " * ((1 << 20) + 1) + lines[i]
    elif kind == "concatenate":
        lines += lines
    return b"".join(line + b"\n" for line in lines)


def maybe_gzip(raw: bytes, data: st.DataObject) -> bytes:
    """Plain, gzip, or gzip with a flipped bit / cut short (where the CRC must catch it)."""
    how = data.draw(st.sampled_from(["plain", "gzip", "bitflip", "cut"]), label="container")
    if how == "plain":
        return raw
    packed = bytearray(gzip.compress(raw, mtime=0))
    if how == "bitflip":
        at = data.draw(st.integers(0, len(packed) - 1))
        packed[at] ^= 1 << data.draw(st.integers(0, 7))
    elif how == "cut":
        return bytes(packed[: data.draw(st.integers(0, len(packed) - 1))])
    return bytes(packed)


def invoke(args: list[str], paths: list[Path], allowed: set[int]) -> Result:
    """Run ``spectally ARGS`` in process under tracemalloc and check the contract."""
    tracemalloc.start()
    try:
        result = CliRunner().invoke(main, args)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    output = result.output
    assert result.exit_code in allowed, (result.exit_code, output[-2000:])
    assert "Traceback" not in output, output[-2000:]
    assert peak < PEAK_LIMIT, f"peak {peak / 2**20:.1f} MiB"
    names = {str(p) for p in paths}
    if not paths:  # `spectally step`: no file, one plain message (the command's or click's)
        if result.exit_code == ExitCode.BAD_INPUT:
            assert re.search(r"^(spectally step: |Error: )", result.stderr, re.M), output
        return result
    if result.exit_code == ExitCode.BAD_INPUT:
        last = result.stderr.strip().splitlines()[-1]
        m = LOCATED.match(last)
        assert m and m["path"] in names, last
    elif result.exit_code == ExitCode.DIVERGENCE:
        assert any(
            (m := LOCATED.match(line.strip())) and m["path"] in names
            for line in output.splitlines()
        ), output[-2000:]
    return result


REPLAY_CODES = {ExitCode.OK, ExitCode.DIVERGENCE, ExitCode.BAD_INPUT, ExitCode.INCOMPLETE}
IMPORT_CODES = {ExitCode.OK, ExitCode.DIVERGENCE, ExitCode.BAD_INPUT}
FUZZ = settings(suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])


@FUZZ
@given(data=st.data())
def test_fuzz_replay(tmp_path: Path, data: st.DataObject) -> None:
    name = data.draw(st.sampled_from(LOGS), label="fixture")
    raw = mutate_lines(LOG_LINES[name], data, _json_field_change)
    path = tmp_path / "log.ndjson"
    path.write_bytes(maybe_gzip(raw, data))
    invoke(["replay", str(path)], [path], REPLAY_CODES)


@FUZZ
@given(data=st.data())
def test_fuzz_replay_metrics(tmp_path: Path, data: st.DataObject) -> None:
    raw = mutate_lines(lines_of(SERVED.with_suffix(".prom")), data, _number_change)
    metrics = tmp_path / "m.prom"
    metrics.write_bytes(maybe_gzip(raw, data))
    log = SERVED.with_suffix(".ndjson.gz")
    invoke(["replay", "--metrics", str(metrics), str(log)], [metrics, log], REPLAY_CODES)


@FUZZ
@given(data=st.data())
def test_fuzz_import_prometheus(tmp_path: Path, data: st.DataObject) -> None:
    raw = mutate_lines(lines_of(SERVED.with_suffix(".prom")), data, _number_change)
    path = tmp_path / "m.prom"
    path.write_bytes(maybe_gzip(raw, data))
    invoke(["import", "prometheus", str(path)], [path], IMPORT_CODES)


@FUZZ
@given(data=st.data())
def test_fuzz_import_logs(tmp_path: Path, data: st.DataObject) -> None:
    raw = mutate_lines(lines_of(SERVED.with_suffix(".log")), data, _number_change)
    path = tmp_path / "server.log"
    path.write_bytes(maybe_gzip(raw, data))
    metrics = SERVED.with_suffix(".prom")
    invoke(["import", "logs", "--metrics", str(metrics), str(path)], [path, metrics], IMPORT_CODES)


def _request_field_change(line: bytes, data: st.DataObject) -> bytes:
    """A hostile value at a field of the nested speculative_decoding metrics, or the top."""
    try:
        obj = json.loads(line)
        metrics = obj["metrics"]["speculative_decoding"]
    except (ValueError, KeyError, TypeError):
        return _json_field_change(line, data)
    key = data.draw(st.sampled_from(sorted(metrics)))
    marker = "__HOSTILE__"
    metrics[key] = marker
    value = data.draw(st.sampled_from(HOSTILE_JSON))
    return json.dumps(obj).replace(json.dumps(marker), value).encode("utf-8", "surrogatepass")


@FUZZ
@given(data=st.data())
def test_fuzz_import_requests(tmp_path: Path, data: st.DataObject) -> None:
    raw = mutate_lines(lines_of(SERVED.with_suffix(".requests.jsonl")), data, _request_field_change)
    path = tmp_path / "r.jsonl"
    path.write_bytes(maybe_gzip(raw, data))
    metrics = SERVED.with_suffix(".prom")
    invoke(
        ["import", "requests", "--metrics", str(metrics), str(path)], [path, metrics], IMPORT_CODES
    )


COUNT = st.one_of(
    st.integers(-3, 8),
    st.integers(-(2**70), 2**70),
    st.sampled_from([1023, 1024, 1025, 10**9, 2**63]),
)


@FUZZ
@given(
    mode=st.sampled_from(["sync", "async", "bogus"]),
    counts=st.fixed_dictionaries(
        {"--proposed": COUNT, "--accepted": COUNT},
        optional={"--grammar-valid": COUNT, "--scheduled": COUNT, "--av-verify": COUNT},
    ),
)
def test_fuzz_step(mode: str, counts: dict[str, int]) -> None:
    args = ["step", "--mode", mode, "--json"]
    for option, value in counts.items():
        args += [option, str(value)]
    result = invoke(args, [], {ExitCode.OK, ExitCode.BAD_INPUT})
    if result.exit_code == ExitCode.OK:
        payload: dict[str, Any] = json.loads(result.output)
        rfc = payload["rfc"]
        assert rfc["drafted"] >= rfc["verified"] >= rfc["accepted"] >= 0


def test_replay_log_cut_at_every_line_boundary(tmp_path: Path) -> None:
    """Every prefix of a real log, cut at a record boundary: agree, incomplete or bad input
    (never a traceback or an internal error)."""
    lines = LOG_LINES[LOGS[0]]
    path = tmp_path / "log.ndjson"
    for n in range(len(lines) + 1):
        path.write_bytes(b"".join(line + b"\n" for line in lines[:n]))
        invoke(["replay", str(path)], [path], REPLAY_CODES)


# -- the long tier (marker `fuzz`): exhaustive byte-level cases ------------------------------------


@pytest.mark.fuzz
def test_gzip_cut_at_every_byte(tmp_path: Path) -> None:
    packed = (FIXTURES / LOGS[0]).read_bytes()
    path = tmp_path / "log.ndjson.gz"
    for n in range(len(packed)):
        path.write_bytes(packed[:n])
        invoke(["replay", str(path)], [path], REPLAY_CODES)


@pytest.mark.fuzz
def test_gzip_every_bit_flip(tmp_path: Path) -> None:
    """Every bit of a gzipped real log flipped in turn: each run ends with an exit code of the
    contract and no traceback."""
    packed = (FIXTURES / LOGS[0]).read_bytes()
    path = tmp_path / "log.ndjson.gz"
    for at in range(len(packed)):
        for bit in range(8):
            data = bytearray(packed)
            data[at] ^= 1 << bit
            path.write_bytes(bytes(data))
            invoke(["replay", str(path)], [path], REPLAY_CODES)
