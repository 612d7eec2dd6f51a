"""Hostile input, case by case, through the real `spectally` command
(in process, click's CliRunner), with the exit code of the contract (spectally.exit_codes), a
one-line ``file:line:column`` message and no traceback. Each test is one reported case.
"""

from __future__ import annotations

import bz2
import gzip
import json
import lzma
import os
import re
import socket
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any, BinaryIO

import pytest
from click.testing import CliRunner, Result
from log_lines import ADD, HEADER, dumps
from spectally.commands import main
from spectally.engine_bridge import synth
from spectally.engine_bridge.fleet import ray as fleet_ray
from spectally.engine_bridge.replay.dispatch import replay_file
from spectally.exit_codes import ExitCode

FIXTURES = Path(__file__).parents[1] / "fixtures" / "vllm"
LOG = FIXTURES / "ngram-k3-greedy.ndjson.gz"
SERVED = FIXTURES / "serve-ngram-k3"


def run(*args: str, stdin: bytes | None = None) -> Result:
    return CliRunner().invoke(main, list(args), input=stdin)


def assert_bad(result: Result, path: Path | str, line: int | None = None) -> str:
    """Exit 2, one ``path:line:col: reason`` line on stderr, no traceback; returns the reason."""
    assert result.exit_code == ExitCode.BAD_INPUT, (result.exit_code, result.output)
    assert "Traceback" not in result.output
    message = result.stderr.strip().splitlines()[-1]
    m = re.match(rf"^{re.escape(str(path))}:(\d+):(\d+): (.+)$", message)
    assert m, message
    if line is not None:
        assert int(m[1]) == line, message
    return m[3]


def log_lines() -> list[str]:
    return gzip.decompress(LOG.read_bytes()).decode().splitlines()


def write(tmp_path: Path, name: str, lines: list[str]) -> Path:
    path = tmp_path / name
    path.write_text("".join(line + "\n" for line in lines))
    return path


# -- replay: tracebacks that were exit 1 -------------------------------------------------------


def test_replay_deep_nesting(tmp_path: Path) -> None:
    nested = "[" * 1000 + "]" * 1000
    path = write(
        tmp_path, "x.ndjson", [dumps(HEADER), dumps({**ADD, "meta": {}})[:-3] + nested + "}"]
    )
    assert "nested deeper than the limit 64" in assert_bad(run("replay", str(path)), path, 2)


def test_replay_deep_nesting_at_top_level(tmp_path: Path) -> None:
    path = write(tmp_path, "x.ndjson", [dumps(HEADER), "[" * 1000 + "]" * 1000])
    assert "nested deeper" in assert_bad(run("replay", str(path)), path, 2)


@pytest.mark.parametrize("digits", [20, 5000])
def test_replay_huge_integer(tmp_path: Path, digits: int) -> None:
    line = dumps(ADD).replace('"step":1', '"step":' + "9" * digits)
    path = write(tmp_path, "x.ndjson", [dumps(HEADER), line])
    reason = assert_bad(run("replay", str(path)), path, 2)
    assert "exceeds the limit 2**63 - 1" in reason


def test_replay_gzip_corrupted_middle_byte(tmp_path: Path) -> None:
    data = bytearray(LOG.read_bytes())
    data[len(data) // 2] ^= 0x55
    path = tmp_path / "x.ndjson.gz"
    path.write_bytes(bytes(data))
    assert_bad(run("replay", str(path)), path)


def test_replay_truncated_gzip_is_bad_input_not_a_traceback(tmp_path: Path) -> None:
    data = LOG.read_bytes()
    path = tmp_path / "x.ndjson.gz"
    path.write_bytes(data[: len(data) // 2])
    assert "gzip" in assert_bad(run("replay", str(path)), path)


@pytest.mark.parametrize(
    ("name", "content"),
    [
        ("binary.prom", bytes(range(256)) * 4),
        ("inf.prom", b'vllm:spec_decode_num_drafts_total{engine="0"} +Inf\n'),
        ("nan.prom", b'vllm:spec_decode_num_drafts_total{engine="0"} NaN\n'),
        ("steplog.prom", gzip.decompress(LOG.read_bytes())),
    ],
)
def test_replay_bad_metrics_file(tmp_path: Path, name: str, content: bytes) -> None:
    metrics = tmp_path / name
    metrics.write_bytes(content)
    assert_bad(run("replay", "--metrics", str(metrics), str(LOG)), metrics)


# -- limits: one short line must not allocate without bound --------------------------------------


def test_replay_header_k_beyond_the_limit(tmp_path: Path) -> None:
    path = write(tmp_path, "x.ndjson", [dumps({**HEADER, "num_speculative_tokens": 10**9})])
    reason = assert_bad(run("replay", str(path)), path, 1)
    assert reason == "num_speculative_tokens 1000000000 exceeds the limit 1024 (docs/limits.md)"


def test_replay_line_longer_than_the_limit(tmp_path: Path) -> None:
    path = write(
        tmp_path, "x.ndjson", [dumps(HEADER), dumps({**ADD, "meta": {"x": "y" * (1 << 20)}})]
    )
    assert "line longer than the limit" in assert_bad(run("replay", str(path)), path, 2)


def test_prometheus_position_beyond_the_limit(tmp_path: Path) -> None:
    scrape = tmp_path / "m.prom"
    scrape.write_text(
        'vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",position="1000000000"} 1\n'
    )
    assert "position 1000000000 is beyond k <= 1024" in assert_bad(
        run("import", "prometheus", str(scrape)), scrape, 1
    )


def test_requests_num_spec_tokens_beyond_the_limit(tmp_path: Path) -> None:
    first = SERVED.with_suffix(".requests.jsonl").read_text().splitlines()[0]
    value = json.loads(first)
    metrics = value["metrics"]["speculative_decoding"]
    metrics["num_spec_tokens"] = 10**9
    path = write(tmp_path, "r.jsonl", [json.dumps(value)])
    assert "exceeds the limit 1024" in assert_bad(run("import", "requests", str(path)), path, 1)


def test_step_proposed_beyond_the_limit() -> None:
    result = run("step", "--mode", "sync", "--proposed", "1000000000", "--accepted", "1")
    assert result.exit_code == ExitCode.BAD_INPUT
    assert "exceeds the limit 1024" in result.output and "Traceback" not in result.output


def test_step_at_the_limit_is_fine() -> None:
    result = run("step", "--mode", "sync", "--proposed", "1024", "--accepted", "1", "--json")
    assert result.exit_code == ExitCode.OK
    assert json.loads(result.output)["rfc"]["drafted"] == 1024


# -- importers: crashes and silent passes ---------------------------------------------------------


@pytest.mark.parametrize("command", ["prometheus", "logs", "requests"])
def test_importer_missing_file_and_directory(tmp_path: Path, command: str) -> None:
    missing = tmp_path / "nope"
    assert "cannot read: No such file or directory" in assert_bad(
        run("import", command, str(missing)), missing, 1
    )
    assert "cannot read: Is a directory" in assert_bad(
        run("import", command, str(tmp_path)), tmp_path, 1
    )


@pytest.mark.parametrize(
    ("command", "fixture"),
    [("prometheus", ".prom"), ("logs", ".log"), ("requests", ".requests.jsonl")],
)
def test_importer_invalid_utf8(tmp_path: Path, command: str, fixture: str) -> None:
    lines = SERVED.with_suffix(fixture).read_bytes().splitlines(keepends=True)
    path = tmp_path / f"x{fixture}"
    path.write_bytes(b"".join(lines[:1]) + b"\xff\xfe garbage\n" + b"".join(lines[1:]))
    assert assert_bad(run("import", command, str(path)), path, 2) == "line is not valid UTF-8"


@pytest.mark.parametrize(
    ("command", "fixture"),
    [("prometheus", ".prom"), ("logs", ".log"), ("requests", ".requests.jsonl")],
)
def test_importers_read_gzip_as_replay_does(tmp_path: Path, command: str, fixture: str) -> None:
    plain = SERVED.with_suffix(fixture)
    packed = tmp_path / f"x{fixture}.gz"
    packed.write_bytes(gzip.compress(plain.read_bytes()))
    want = run("import", command, "--json", str(plain))
    got = run("import", command, "--json", str(packed))
    assert want.exit_code == got.exit_code == ExitCode.OK, got.output
    assert got.output.replace(str(packed), str(plain)) == want.output


@pytest.mark.parametrize("value", ["NaN", "+Inf", "-Inf"])
def test_prometheus_non_finite_sample(tmp_path: Path, value: str) -> None:
    scrape = tmp_path / "m.prom"
    scrape.write_text(f'vllm:spec_decode_num_drafts_total{{engine="0"}} {value}\n')
    reason = assert_bad(run("import", "prometheus", str(scrape)), scrape, 1)
    assert "must be a finite number" in reason


def test_logs_nan_mean_with_nonzero_counts_is_a_violation(tmp_path: Path) -> None:
    line = SERVED.with_suffix(".log").read_text().splitlines()[0]
    nan_line = re.sub(r"Mean acceptance length: [0-9.]+", "Mean acceptance length: nan", line)
    path = write(tmp_path, "x.log", [nan_line])
    result = run("import", "logs", str(path))
    assert result.exit_code == ExitCode.DIVERGENCE, result.output
    assert "mean length finite" in result.output and "Traceback" not in result.output


def test_requests_nan_mean_with_nonzero_counts_is_a_violation(tmp_path: Path) -> None:
    first = SERVED.with_suffix(".requests.jsonl").read_text().splitlines()[0]
    value = json.loads(first)
    metrics = value["metrics"]["speculative_decoding"]
    assert metrics["num_accepted_draft_tokens"] > 0
    metrics["mean_acceptance_length"] = float("nan")
    path = write(tmp_path, "r.jsonl", [json.dumps(value)])  # json.dumps writes NaN
    result = run("import", "requests", str(path))
    assert result.exit_code == ExitCode.DIVERGENCE, result.output
    assert "VIOLATION mean_acceptance_length" in result.output and "nan != 1 + " in result.output


@pytest.mark.parametrize(
    ("name", "content", "reason"),
    [
        ("empty.log", b"", "empty input: nothing to check"),
        ("binary.log", bytes(range(256)), "line is not valid UTF-8"),
        ("steps.log", gzip.decompress(LOG.read_bytes()), "no 'SpecDecoding metrics:' line"),
    ],
)
def test_logs_nothing_to_check_is_not_exit_0(
    tmp_path: Path, name: str, content: bytes, reason: str
) -> None:
    path = tmp_path / name
    path.write_bytes(content)
    assert reason in assert_bad(run("import", "logs", str(path)), path)


def test_requests_on_a_step_log_is_not_exit_0() -> None:
    reason = assert_bad(run("import", "requests", str(LOG)), LOG, 1)
    assert "this is a step log: check it with `spectally replay`" in reason


def test_prometheus_on_a_step_log_is_not_exit_0() -> None:
    assert "no Prometheus vllm:spec_decode_* samples" in assert_bad(
        run("import", "prometheus", str(LOG)), LOG, 1
    )


# -- silent acceptance ------------------------------------------------------------------------


def test_replay_duplicate_key_on_the_first_record_of_a_shape(tmp_path: Path) -> None:
    lines = log_lines()
    i = next(
        n for n, text in enumerate(lines) if '"record":"request_step"' in text.replace(" ", "")
    )
    lines[i] = lines[i][:-1] + ', "accepted": 0}'
    path = write(tmp_path, "x.ndjson", lines)
    assert "duplicate key 'accepted'" in assert_bad(run("replay", str(path)), path, i + 1)


def test_replay_duplicate_key_on_a_memoised_shape(tmp_path: Path) -> None:
    """Replay's inline path reuses the check of an earlier record of the same shape; a line with
    a repeated key must not ride on it (the last request_step is surely of a known shape)."""
    lines = log_lines()
    i = max(n for n, text in enumerate(lines) if '"request_step"' in text)
    rec = json.loads(lines[i])
    text = json.dumps(rec)
    lines[i] = text[:-1] + f', "accepted": {rec["accepted"]}' + "}"
    path = write(tmp_path, "x.ndjson", lines)
    assert "duplicate key 'accepted'" in assert_bad(run("replay", str(path)), path, i + 1)


def test_requests_duplicate_key(tmp_path: Path) -> None:
    first = SERVED.with_suffix(".requests.jsonl").read_text().splitlines()[0]
    path = write(tmp_path, "r.jsonl", [first[:-1] + ', "id": "again"}'])
    assert "duplicate key 'id'" in assert_bad(run("import", "requests", str(path)), path, 1)


def test_replay_bom_in_the_middle(tmp_path: Path) -> None:
    lines = log_lines()
    lines[3] = "\ufeff" + lines[3]
    path = write(tmp_path, "x.ndjson", lines)
    assert "byte-order mark" in assert_bad(run("replay", str(path)), path, 4)


def test_replay_bom_at_the_start_is_dropped(tmp_path: Path) -> None:
    path = tmp_path / "x.ndjson"
    path.write_bytes(b"\xef\xbb\xbf" + gzip.decompress(LOG.read_bytes()))
    assert run("replay", str(path)).exit_code == ExitCode.OK


@pytest.mark.parametrize(
    ("suffix", "pack", "name"),
    [(".bz2", bz2.compress, "bzip2"), (".xz", lzma.compress, "xz")],
)
def test_other_compressions_are_named(tmp_path: Path, suffix: str, pack: Any, name: str) -> None:
    path = tmp_path / f"x.ndjson{suffix}"
    path.write_bytes(pack(gzip.decompress(LOG.read_bytes())))
    reason = assert_bad(run("replay", str(path)), path, 1)
    assert reason.startswith(f"{name}-compressed input: spectally reads plain text or gzip, not")


def test_stdin_gzip(tmp_path: Path) -> None:
    assert run("replay", "-", stdin=LOG.read_bytes()).exit_code == ExitCode.OK


# -- the top-level wrapper: Ctrl-C, internal errors, usage --------------------------------------


def test_ctrl_c_is_130(monkeypatch: pytest.MonkeyPatch) -> None:
    from spectally.engine_bridge.fleet import job

    def interrupted(*args: Any, **kwargs: Any) -> Any:
        raise KeyboardInterrupt

    monkeypatch.setattr(job, "replay_file", interrupted)  # one log: replayed in this process
    result = run("replay", str(LOG))
    assert result.exit_code == ExitCode.INTERRUPTED
    assert "Traceback" not in result.output and "interrupted" in result.stderr


def test_internal_error_is_70_with_a_report(monkeypatch: pytest.MonkeyPatch) -> None:
    from spectally.reference import machine

    def broken(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("deliberate\nbug")

    monkeypatch.setattr(machine, "step_counts", broken)
    result = run("step", "--mode", "sync", "--proposed", "3", "--accepted", "1")
    assert result.exit_code == ExitCode.INTERNAL_ERROR
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in result.output
    assert "internal error" in lines[0] and "RuntimeError: deliberate bug" in lines[0]
    report = Path(lines[0].rsplit("full report: ", 1)[1])
    try:
        text = report.read_text()
        assert "Traceback" in text and "deliberate" in text and "'step'" in text
    finally:
        report.unlink()


@pytest.mark.parametrize(
    "args",
    [[], ["nope"], ["step", "--mode", "never"], ["replay"], ["import", "logs"], ["step"]],
)
def test_usage_errors_are_2(args: list[str]) -> None:
    result = run(*args)
    assert result.exit_code == ExitCode.BAD_INPUT, result.output
    assert "Traceback" not in result.output


@pytest.mark.parametrize(
    "args",
    [
        ["--help"],
        ["step", "--help"],
        ["vectors", "--help"],
        ["replay", "--help"],
        ["import", "--help"],
        ["import", "logs", "--help"],
        ["prove", "--help"],
    ],
)
def test_every_help_states_the_exit_codes(args: list[str]) -> None:
    pytest.importorskip("z3") if args[0] == "prove" else None
    result = run(*args)
    assert result.exit_code == ExitCode.OK
    text = " ".join(result.output.split())
    assert "Exit codes" in text and "70 internal error" in text and "130 interrupted" in text


# -- replay-level verdicts: the `col` branch ------------------------------------------------


def test_log_cut_at_a_record_boundary_is_incomplete(tmp_path: Path) -> None:
    lines = log_lines()
    path = write(tmp_path, "x.ndjson", lines[: len(lines) // 2])
    result = run("replay", str(path))
    assert result.exit_code == ExitCode.INCOMPLETE, result.output
    assert "totals" in result.output


def test_crc_is_checked_before_a_divergence_is_trusted(tmp_path: Path) -> None:
    """A divergence early in a gzip log whose tail is corrupt: the file fails `gzip -t`, so the
    verdict is bad input, not DIVERGE."""
    lines = log_lines()
    i = next(n for n, text in enumerate(lines) if '"step_stats"' in text)
    rec = json.loads(lines[i])
    rec["num_drafts"] += 1  # a divergence at line i + 1
    lines[i] = json.dumps(rec)
    data = bytearray(gzip.compress("".join(t + "\n" for t in lines).encode()))
    data[-6] ^= 0xFF  # the CRC32 in the gzip trailer
    path = tmp_path / "x.ndjson.gz"
    path.write_bytes(bytes(data))
    assert_bad(run("replay", str(path)), path)


def test_request_step_after_its_step_stats_has_one_exit_code(tmp_path: Path) -> None:
    lines = log_lines()
    i = next(n for n, text in enumerate(lines) if '"step_stats"' in text)
    j = next(n for n in range(i - 1, 0, -1) if '"request_step"' in lines[n])
    lines[i], lines[j] = lines[j], lines[i]  # the request_step now follows its step_stats
    path = write(tmp_path, "x.ndjson", lines)
    codes = {run("replay", *extra, str(path)).exit_code for extra in ([], ["--keep-going", "5"])}
    assert codes == {ExitCode.BAD_INPUT}


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        ("NaN", "NaN is not valid JSON"),
        ("-Infinity", "-Infinity is not valid JSON"),
        ("1e999", "number 1e999 is out of range"),
        (str(2**63), "integer 9223372036854775808 exceeds the limit 2**63 - 1"),
    ],
)
def test_replay_non_finite_and_huge_numbers_in_meta(
    tmp_path: Path, value: str, reason: str
) -> None:
    """Plain json.loads takes these; `source.needs_strict` must send the line to the strict
    decoder (meta is free-form, so the schema would not notice)."""
    line = dumps({**ADD, "meta": {"x": "marker"}}).replace('"marker"', value)
    path = write(tmp_path, "x.ndjson", [dumps(HEADER), line])
    assert reason in assert_bad(run("replay", str(path)), path, 2)


def test_replay_colons_inside_strings_are_not_duplicate_keys(tmp_path: Path) -> None:
    """More colons than keys only sends a line to the strict decoder, which finds nothing."""
    lines = [
        dumps({**json.loads(text), "meta": {"note": "a: b: c"}}) if '"request"' in text else text
        for text in log_lines()
    ]
    path = write(tmp_path, "x.ndjson", lines)
    assert run("replay", str(path)).exit_code == ExitCode.OK


# -- the default (columnar) path never vouches for what the reference refuses ------------------


def both_bad(path: Path, line: int) -> str:
    """Exit 2 with the same message on the default path and on ``--reference``."""
    reasons = {
        assert_bad(run("replay", *flag, str(path)), path, line) for flag in ([], ["--reference"])
    }
    assert len(reasons) == 1, reasons
    return reasons.pop()


def big_log() -> list[str]:
    """A synthetic log over 1 MiB: its chunk goes through the byte scanner (scanner) first."""
    text = b"".join(synth.lines(8000, batch=8, seed=1)).decode()
    assert len(text) > 1 << 20
    return text.splitlines()


@pytest.mark.parametrize("size", ["small", "over 1 MiB"])
@pytest.mark.parametrize("field", ["request", "reason"])
def test_replay_bom_inside_a_string(tmp_path: Path, size: str, field: str) -> None:
    """msgspec reads U+FEFF inside a string as any character; the reference refuses it."""
    lines = log_lines() if size == "small" else big_log()
    if field == "request":
        rid = json.loads(lines[1])["request"]
        lines = [line.replace(f'"request":"{rid}"', f'"request":"\ufeff{rid}"') for line in lines]
        at = 2
    else:
        at = next(i for i, line in enumerate(lines) if '"event":"finish"' in line) + 1
        rec = json.loads(lines[at - 1])
        rec["reason"] = "\ufeff" + rec.get("reason", "stop")
        lines[at - 1] = json.dumps(rec, separators=(",", ":"), ensure_ascii=False)
    path = write(tmp_path, "x.ndjson", lines)
    assert "byte-order mark" in both_bad(path, at)


def test_replay_two_records_on_a_line_and_one_split_over_two(tmp_path: Path) -> None:
    """As many lines as records, a "{" on every line (inside a string on the split record's
    second line): decode_lines reads it all, the reference refuses the joined line."""
    lines = log_lines()
    rid = json.loads(lines[5])["request"]
    lines = [line.replace(f'"{rid}"', f'"{rid}{{"') for line in lines]
    split = lines[5].index(',"request"') + 1
    lines = [*lines[:3], lines[3] + lines[4], lines[5][:split], lines[5][split:], *lines[6:]]
    path = write(tmp_path, "x.ndjson", lines)
    assert "Extra data" in both_bad(path, 4)


def test_replay_key_and_colon_on_two_lines(tmp_path: Path) -> None:
    """``"step"\\n:`` repeats a key across a newline (the last value would win), the lines
    balanced by two records on one line."""
    lines = log_lines()
    i = next(i for i, line in enumerate(lines) if "request_step" in line)
    k = lines[i].index('"step":')
    twice = (lines[i][:k] + '"step":999,"step"\n:' + lines[i][k + 7 :]).split("\n")
    lines = [*lines[:3], lines[3] + lines[4], *lines[5:i], *twice, *lines[i + 1 :]]
    path = write(tmp_path, "x.ndjson", lines)
    both_bad(path, 4)


# -- streams that read once: spooled, never opened twice --------------------------------------

DIVERGING = Path(__file__).parents[1] / "traces" / "diverge" / "aborted_in_flight_counted.ndjson"


def replay_process(path: str, pass_fds: tuple[int, ...] = ()) -> subprocess.CompletedProcess[str]:
    """``spectally replay PATH`` in a process of its own, bounded in time: a reader that opens
    a FIFO a second time waits for a writer that never comes."""
    return subprocess.run(
        [sys.executable, "-m", "spectally.commands", "replay", path],
        pass_fds=pass_fds,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def feed(target: Callable[[], BinaryIO], data: bytes) -> threading.Thread:
    def write() -> None:
        with target() as out:
            out.write(data)

    thread = threading.Thread(target=write, daemon=True)
    thread.start()
    return thread


@pytest.mark.parametrize("log", [DIVERGING, LOG], ids=["diverging", "gzip agreeing"])
def test_replay_process_substitution(log: Path) -> None:
    """``spectally replay <(cat LOG)``: a /dev/fd path to a pipe, read once."""
    expected = replay_file(str(log), progress=False, reference=True).exit_code
    read, write = os.pipe()
    try:
        thread = feed(lambda: os.fdopen(write, "wb"), log.read_bytes())
        result = replay_process(f"/dev/fd/{read}", (read,))
        thread.join(5)
    finally:
        os.close(read)
    assert result.returncode == expected, result.stderr


def test_replay_named_pipe(tmp_path: Path) -> None:
    """A FIFO is opened once: a second open would wait for a writer for ever."""
    fifo = tmp_path / "log.fifo"
    os.mkfifo(fifo)
    thread = feed(lambda: fifo.open("wb"), DIVERGING.read_bytes())
    result = replay_process(str(fifo))
    thread.join(5)
    assert result.returncode == ExitCode.DIVERGENCE, result.stderr
    assert "diverge" in result.stdout.lower(), result.stdout


@pytest.mark.parametrize("digits", [20, 5000])
def test_replay_engine_version_with_a_huge_part(tmp_path: Path, digits: int) -> None:
    """The profile lookup reads a version's parts as integers: a part beyond 19 digits is bad
    input on both paths (5,000 digits was int()'s digit limit, an internal error)."""
    lines = log_lines()
    lines[0] = lines[0].replace(
        '"engine_version":"0.32.0"', f'"engine_version":"0.{"3" * digits}.0"'
    )
    assert f"numeric part of {digits} digits" in both_bad(write(tmp_path, "x.ndjson", lines), 1)


@pytest.mark.parametrize(
    ("pattern", "replacement", "field", "at"),
    [
        (r"rate: [0-9., ]+, Avg", "rate: nan, nan, nan, Avg", "Per-position acceptance", "nan"),
        (r"rate: ([0-9.]+), ", r"rate: \1, -0.100, ", "Per-position acceptance", "-0.100"),
        (r"rate: [0-9.]+, ", "rate: 1.500, ", "Per-position acceptance rate 1.500", "1.500"),
        (r"length: [0-9.]+", "length: 0.50", "Mean acceptance length 0.50 is below 1", "0.50"),
        (r"Accepted throughput: [0-9.]+", "Accepted throughput: -1.00", "Accepted", "-1.00"),
        (r"acceptance rate: [0-9.]+%", "acceptance rate: 142.0%", "Avg Draft", "142.0"),
    ],
)
def test_logs_a_value_the_format_cannot_print(
    tmp_path: Path, pattern: str, replacement: str, field: str, at: str
) -> None:
    """NaN compares false and nothing bounded the rates: such lines were 'consistent' (exit 0).
    Each is bad input naming the field, its column pointing at the value."""
    line = SERVED.with_suffix(".log").read_text().splitlines()[0]
    edited = re.sub(pattern, replacement, line, count=1)
    assert edited != line and "Accepted: 0 tokens" not in edited
    path = write(tmp_path, "x.log", [edited])
    result = run("import", "logs", str(path))
    assert assert_bad(result, path, 1).startswith(field)
    found = re.match(rf"{re.escape(str(path))}:1:(\d+):", result.stderr.strip().splitlines()[-1])
    assert found
    column = int(found[1])
    assert edited[column - 1 :].startswith(at), (column, edited[column - 1 :][:20])


# -- --ray: a refused address fails at once ----------------------------------------------------


def closed_port() -> int:
    """A loopback port nothing listens on (bound, then closed)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
    return port


@pytest.mark.parametrize("scheme", ["", "ray://"])
def test_ray_refused_address_is_bad_input(scheme: str) -> None:
    """Nothing listens there: exit 2 at once, before Ray is even imported (so no Ray install is
    needed here; tests/fleet/test_fleet_ray.py checks the same with Ray)."""
    address = f"{scheme}127.0.0.1:{closed_port()}"
    result = run("replay", str(LOG), f"--ray={address}")
    assert result.exit_code == ExitCode.BAD_INPUT, result.output
    assert "connection refused" in result.stderr and "Traceback" not in result.output


def test_ray_probe_passes_a_listening_address_and_leaves_others_to_ray() -> None:
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        fleet_ray.probe_address(f"127.0.0.1:{server.getsockname()[1]}")
    for address in ("auto", "local", "ray://", "host-without-port", "[::1]:notaport"):
        fleet_ray.probe_address(address)  # nothing to probe: ray.init decides
    with pytest.raises(fleet_ray.RayUnavailable, match="connection refused"):
        fleet_ray.probe_address(f"127.0.0.1:{closed_port()}")
