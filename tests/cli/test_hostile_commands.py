"""Hostile option values and inputs on `conform`, `vectors`, `step`, `export aiperf`,
`rules`, `dashboard` and the options of `replay`, through the real `spectally` command: no value
is an internal error or a hang, no run reports a verdict on what it did not check, no log counts
twice, and a cut log or a scrape of another server is said to be one."""

from __future__ import annotations

import gzip
import json
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner
from processes import not_ended
from spectally.commands import main
from spectally.exit_codes import ExitCode
from test_production_hostile import assert_bad, run

ROOT = Path(__file__).parents[2]
SYNC = ROOT / "tests" / "traces" / "agree" / "sync_basic.ndjson"
REFERENCE = [sys.executable, "-m", "spectally.spec.conform_adapter"]


@pytest.mark.parametrize("value", ["nan", "inf", "1e308", "-1", "0", "x", ""])
def test_conform_timeout_out_of_range_is_a_usage_error(value: str) -> None:
    """nan passes every range comparison (and waited for ever on a silent implementation);
    inf and 1e308 overflowed the clock (exit 70). A working implementation makes the refusal,
    not the run, the reason for exit 2."""
    assert_bad(
        run("conform", "--timeout", value, "--vector", "chain-one-step", *REFERENCE), "--timeout"
    )


def test_conform_ends_a_child_that_holds_the_pipe(tmp_path: Path) -> None:
    """An implementation that exits leaving a child with its stdout open: the kit reports the
    hang after --timeout and ends the child (closing the pipe waited on the child: a hang)."""
    pid_file = tmp_path / "child.pid"
    result = run("conform", "--timeout", "1", "sh", "-c", f"sleep 600 & echo $! > {pid_file}")
    assert result.exit_code == ExitCode.BAD_INPUT, result.output
    assert "run broken: no response to 'chain-one-step'" in result.stdout
    # Left alive, the child would sleep for 600 s holding the pipe.
    assert not not_ended([int(pid_file.read_text())])


def test_conform_broken_run_judges_no_level() -> None:
    """A run that broke before any check says so per level, never `pass (0 passed ...)`."""
    result = run("conform", "--timeout", "5", "sh", "-c", "echo garbage")
    assert result.exit_code == ExitCode.BAD_INPUT
    assert "pass" not in result.stdout.replace("0 passed", "")
    assert "L1: not judged (the run broke)" in result.stdout


def test_conform_a_level_without_vectors_is_not_checked() -> None:
    """--vector of one L1 check: the levels no check ran are not checked, not passing."""
    result = run("conform", "--level", "L1", "--vector", "refuse-negative", *REFERENCE)
    assert result.exit_code == 0, result.output
    assert "L1: pass (1 passed" in result.stdout
    assert "L2: not checked (no check of this level ran)" in result.stdout
    assert "L3: not checked (no check of this level ran)" in result.stdout
    assert "conformant at: L1\n" in result.stdout  # not L3: nothing of L2 or L3 was checked


@pytest.mark.parametrize("spelling", ["dot", "symlink", "stdin"])
def test_replay_refuses_one_log_given_twice(tmp_path: Path, spelling: str) -> None:
    """One log named twice (another spelling, a symlink, `-` twice) entered the fleet totals
    twice (exit 0, every count doubled; with --metrics a fleet DIVERGE): refused, exit 2,
    naming the second path, before any replay."""
    first, second = str(SYNC), str(SYNC.parent / "." / SYNC.name)
    if spelling == "symlink":
        second = str(tmp_path / "link.ndjson")
        Path(second).symlink_to(SYNC)
    elif spelling == "stdin":
        first = second = "-"
    line = assert_bad(run("replay", "--jobs", "1", first, second), "given twice")
    assert line.startswith(f"{second}:1:1: the same log as {first!r}")


@pytest.mark.parametrize("copy", ["plain", "gzipped"])
def test_replay_notes_a_copy_of_a_log(tmp_path: Path, copy: str) -> None:
    """A log next to its copy or its gzipped copy (`logs/*`: run.ndjson and run.ndjson.gz)
    entered the fleet totals twice without a word. Content cannot tell a copy from a
    byte-identical rerun (two runs), so the copy is named and both are counted."""
    data = SYNC.read_bytes()
    second = tmp_path / ("copy.ndjson" if copy == "plain" else "copy.ndjson.gz")
    second.write_bytes(data if copy == "plain" else gzip.compress(data))
    result = run("replay", "--jobs", "1", str(SYNC), str(second))
    assert result.exit_code == 0, result.output
    assert result.stderr.startswith(
        f"spectally replay: note: {second} holds the same log as {SYNC} (the same"
    ), result.stderr
    assert "2 of 2 logs agree with the reference" in result.stdout


def test_replay_of_a_log_and_its_cut_copy_is_not_a_copy(tmp_path: Path) -> None:
    """The same first bytes but not the same size: two logs (a cut copy replays as itself)."""
    data = SYNC.read_bytes()
    cut = tmp_path / "cut.ndjson"
    cut.write_bytes(data[: data.rindex(b"\n", 0, len(data) - 1) + 1])
    result = run("replay", "--jobs", "1", str(SYNC), str(cut))
    assert "holds the same log" not in result.output, result.output


def test_one_log_named_twice_is_refused_without_a_copy_note() -> None:
    """The same file twice is the refusal's, not a note's: one message, exit 2."""
    result = run("replay", "--jobs", "1", str(SYNC), str(SYNC.parent / "." / SYNC.name))
    assert result.exit_code == ExitCode.BAD_INPUT
    assert "holds the same log" not in result.output


def test_copies_leaves_out_what_is_no_file(tmp_path: Path) -> None:
    """Missing paths, folders, stdin, an empty file and one file named twice are never copies
    (their replays, or the refusal of a file named twice, say what they are)."""
    from spectally.engine_bridge.steplog.source import copies

    (tmp_path / "a").write_text("")
    (tmp_path / "b").write_text("")
    same = str(SYNC.parent / "." / SYNC.name)
    paths = [str(tmp_path / "missing"), str(tmp_path), "-", None, str(SYNC), same, "a\0b"]
    assert copies([*paths, str(tmp_path / "a"), str(tmp_path / "b")]) == []


def test_replay_of_two_logs_still_merges() -> None:
    other = SYNC.parent / "async_structured_outputs.ndjson"
    result = run("replay", "--jobs", "1", SYNC, other)
    assert result.exit_code == 0, result.output
    assert "2 of 2 logs agree with the reference" in result.stdout


def _scrape(*series: tuple[str, str], counts: tuple[int, ...] = (5, 11, 6, 3, 2, 1)) -> str:
    """A vLLM /metrics text: sync_basic.ndjson's counters under each (model_name, engine)."""
    names = ("num_drafts", "num_draft_tokens", "num_accepted_tokens")
    lines = []
    for model, engine in series:
        labels = f'model_name="{model}",engine="{engine}"'
        for name, value in zip(names, counts[:3], strict=True):
            lines.append(f"vllm:spec_decode_{name}_total{{{labels}}} {value}")
        for pos, value in enumerate(counts[3:]):
            lines.append(
                f'vllm:spec_decode_num_accepted_tokens_per_pos_total{{{labels},position="{pos}"}}'
                f" {value}"
            )
    return "\n".join(lines) + "\n"


def _engine_0_log(tmp_path: Path) -> Path:
    lines = SYNC.read_text().splitlines()
    header = json.loads(lines[0])
    header["engine_index"] = 0
    log = tmp_path / "engine0.ndjson"
    log.write_text("\n".join([json.dumps(header), *lines[1:]]) + "\n")
    return log


@pytest.mark.parametrize("reference", [False, True])
def test_replay_metrics_of_another_engine_is_bad_input(tmp_path: Path, reference: bool) -> None:
    """A scrape with no series of the log's engine read as zeros: a `divergence (metrics)`
    (exit 1) against a scrape that was never the log's, and AGREE for a log that counted
    nothing. Now exit 2 at the scrape, naming the engine and the labels it has."""
    log = _engine_0_log(tmp_path)
    scrape = tmp_path / "engine1.prom"
    scrape.write_text(_scrape(("m", "1")))
    flags = ["--reference"] if reference else []
    line = assert_bad(run("replay", log, "--metrics", scrape, *flags), "engine 0")
    assert line.startswith(f"{scrape}:1:1: the last scrape has no spec-decode series of engine 0")
    assert "its engine labels: 1" in line
    scrape.write_text(_scrape(("m", "0")))  # the same counters under the log's engine: agree
    assert run("replay", log, "--metrics", scrape, *flags).exit_code == 0


@pytest.mark.parametrize("reference", [False, True])
@pytest.mark.parametrize(
    "cut", ["num_drafts_total", "num_accepted_tokens_total", "num_accepted_tokens_per_pos"]
)
def test_replay_metrics_lacking_a_counter_is_bad_input(
    tmp_path: Path, cut: str, reference: bool
) -> None:
    """A scrape cut short or filtered, without one of the counters the totals are compared
    with, read it as 0: a false `divergence (metrics)`. Now exit 2 at the scrape, naming it."""
    log = _engine_0_log(tmp_path)
    scrape = tmp_path / "cut.prom"
    kept = [line for line in _scrape(("m", "0")).splitlines() if f"_{cut}" not in line]
    scrape.write_text("\n".join(kept) + "\n")
    flags = ["--reference"] if reference else []
    line = assert_bad(run("replay", log, "--metrics", scrape, *flags), "--metrics: scrape 1")
    assert line.startswith(f"{scrape}:1:1:") and f"has no vllm:spec_decode_{cut}" in line


def test_replay_metrics_of_two_models_is_bad_input(tmp_path: Path) -> None:
    """Two servers' scrapes in one file (two model_name label sets for the log's engine) were
    summed into a false divergence: exit 2 naming the models."""
    scrape = tmp_path / "two.prom"
    scrape.write_text(_scrape(("m", "0"), ("other", "0")))
    assert_bad(run("replay", _engine_0_log(tmp_path), "--metrics", scrape), "2 models (m, other)")


@pytest.mark.parametrize(
    ("option", "reason"),
    [
        ("--proposed", "proposed must be >= 0"),
        ("--grammar-valid", "grammar-valid prefix must be >= 0"),
        ("--scheduled", "schedule cap must be >= 0"),
        ("--av-verify", "AV cap must be >= 0"),
        ("--accepted", "accepted must be >= 0"),
    ],
)
@pytest.mark.parametrize("value", ["-1", "-1000000000000000000000000000000"])
def test_step_negative_count_is_the_only_reason(option: str, reason: str, value: str) -> None:
    """`--proposed -1` also blamed the grammar-valid prefix, the schedule cap and the AV cap
    the user never gave (they default to the proposal), and a negative cap blamed accepted:
    now only the negative counts given are the reasons."""
    counts = {"--proposed": "3", "--accepted": "0", option: value}
    result = run("step", "--mode", "async", *[a for pair in counts.items() for a in pair])
    assert result.exit_code == ExitCode.BAD_INPUT, result.output
    assert result.stderr == f"spectally step: inadmissible input: {reason}\n"


def _cut(tmp_path: Path, keep: int | None = None) -> Path:
    """sync_basic.ndjson without its totals record (or only its first ``keep`` lines)."""
    lines = SYNC.read_text().splitlines()
    assert json.loads(lines[-1])["record"] == "totals"
    log = tmp_path / "cut.ndjson"
    log.write_text("\n".join(lines[:-1] if keep is None else lines[:keep]) + "\n")
    return log


@pytest.mark.parametrize("keep", [None, 1, 2])
def test_export_aiperf_of_a_cut_log_says_so(tmp_path: Path, keep: int | None) -> None:
    """A log without its totals record (header only, a request that never ends, a cut log)
    exported its records with exit 0, unfinished requests' partial counts as if final: now
    the records are written, the end of the log is named, and the exit is 3 (incomplete)."""
    log = _cut(tmp_path, keep)
    lines = len(log.read_text().splitlines())
    result = run("export", "aiperf", log)
    assert result.exit_code == ExitCode.INCOMPLETE, result.output
    assert f"{log}:{lines}:1: the log ends before its totals record: incomplete (" in result.stderr
    if keep is None:  # both requests ended before the cut: their records are all there
        assert [json.loads(ln)["status"] for ln in result.stdout.splitlines()] == ["finished"] * 2
    assert run("export", "aiperf", SYNC).exit_code == 0


def test_rules_tests_from_a_cut_log_says_so(tmp_path: Path) -> None:
    """rules --tests-from a log without its totals record: the files are written and the
    exit is 3, naming where the log ends (it was exit 0)."""
    log = _cut(tmp_path)
    out = tmp_path / "rules"
    result = run("rules", "--out", out, "--tests-from", log, "--tests-from", SYNC)
    assert result.exit_code == ExitCode.INCOMPLETE, result.output
    assert result.stderr.startswith(f"{log}:13:1: the log ends before its totals record")
    assert sorted(p.name for p in out.iterdir()) == [
        "spectally-rules.yml",
        "test-cut.yml",
        "test-sync_basic.yml",
    ]


@pytest.mark.parametrize(
    ("args", "what"),
    [
        (["replay", str(SYNC), "--html", ""], "--html"),
        (["export", "aiperf", str(SYNC), "--out", ""], "--out"),
        (["dashboard", "--out", ""], "--out"),
        (["rules", "--out", ""], "--out"),
    ],
)
def test_an_empty_output_path_is_refused_first(args: list[str], what: str) -> None:
    """`--html ''` replayed every log, printed the verdict, then failed with ':1:1: cannot
    write' (its temporary file made in the folder above the working one): refused before any
    work, naming the option."""
    result = run(*args)
    assert_bad(result, f"'':1:1: {what} is an empty path: name a file")
    assert "AGREE" not in result.stdout  # nothing was replayed


@pytest.mark.parametrize("exists", [False, True])
@pytest.mark.parametrize(
    ("args", "what"),
    [
        (["replay", str(SYNC), "--html"], "--html"),
        (["export", "aiperf", str(SYNC), "--out"], "--out"),
        (["dashboard", "--out"], "--out"),
    ],
)
def test_an_output_path_ending_in_a_slash_is_refused_first(
    tmp_path: Path, args: list[str], what: str, exists: bool
) -> None:
    """`--html new/` (or `FILE/` of an existing file) replayed every log, then failed with
    'cannot write: Not a directory': a path ending in '/' names a folder, refused first."""
    target = tmp_path / "report"
    if exists:
        target.write_text("kept")
    result = run(*args, f"{target}/")
    assert_bad(result, f"{target}/:1:1: {what} ends in '/': it names a folder, not a file")
    assert "AGREE" not in result.stdout
    assert not exists or target.read_text() == "kept"


HOSTILE_DOCUMENTS = {
    "deep": ("[" * 100_000 + "]" * 100_000).encode(),
    "wide int": b'{"version": ' + b"9" * 5000 + b"}",
    "not UTF-8": b"\xff\xfe{}",
}


@pytest.mark.parametrize("case", sorted(HOSTILE_DOCUMENTS))
@pytest.mark.parametrize("command", ["vectors --file", "conform --vectors"])
def test_a_hostile_vectors_file_is_malformed(tmp_path: Path, case: str, command: str) -> None:
    """Deep nesting, a 5,000-digit number or bytes that are not UTF-8 in a vectors file were
    internal errors (RecursionError, ValueError, UnicodeDecodeError: exit 70)."""
    path = tmp_path / "vectors.json"
    path.write_bytes(HOSTILE_DOCUMENTS[case])
    tail = ["true"] if command.startswith("conform") else []
    assert_bad(run(*command.split(), path, *tail), "malformed vectors file", str(path))


@pytest.mark.parametrize("case", ["deep", "wide int"])
def test_a_hostile_response_breaks_the_protocol(case: str) -> None:
    """An implementation answering with deep nesting or a 5,000-digit number was an internal
    error (exit 70): it is a response that breaks the protocol (exit 2)."""
    body = {"deep": "'[' * 100_000 + ']' * 100_000", "wide int": "'{\"id\": ' + '9' * 5000 + '}'"}
    script = f"import sys; sys.stdin.readline(); print({body[case]}, flush=True); sys.stdin.read()"
    result = run("conform", "--timeout", "30", sys.executable, "-c", script)
    assert result.exit_code == ExitCode.BAD_INPUT, result.output
    assert "run broken: protocol broken at 'chain-one-step': a response that is not" in (
        result.stdout
    )


def test_conform_keeps_only_the_tail_of_a_flood_of_stderr(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The implementation's stderr went to a temporary file, whole: one that floods stderr
    while the kit waits --timeout seconds filled the disk at the pipe's speed. The kit now
    keeps the last 2,000 bytes in memory: it runs with no temporary folder at all."""
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "no-such-folder"))
    script = "import sys; sys.stderr.write('x' * 5_000_000 + 'THE END'); sys.exit(3)"
    result = run("conform", "--timeout", "30", sys.executable, "-c", script)
    assert result.exit_code == ExitCode.BAD_INPUT, result.output
    assert "exited (status 3) before answering" in result.stdout
    tail = result.stdout.split("implementation's stderr (tail):\n", 1)[1].split("\n")[0]
    assert tail.endswith("THE END")
    assert 1000 < tail.count("x") <= 2000


@pytest.mark.parametrize(
    ("log", "label"),
    [
        (SYNC, "vllm-legacy"),
        (ROOT / "tests" / "fixtures" / "llamacpp" / "mamba.steps.ndjson.gz", "llama.cpp"),
        (
            ROOT / "tests" / "fixtures" / "vllm" / "sim-vllm-0.34.0-sync-so-json-k4.ndjson.gz",
            "vllm-0.34",
        ),
    ],
)
def test_export_aiperf_labels_the_engines_own_profile(log: Path, label: str) -> None:
    """`export aiperf --profile vllm-legacy` of a llama.cpp log wrote llama.cpp's own counts
    labelled "profile": "vllm-legacy" (a vLLM 0.34 log's likewise): each record now names the
    profile its counts are under, and the summary line says it."""
    result = run("export", "aiperf", log, "--profile", "vllm-legacy")
    assert result.exit_code == 0, result.output
    labels = {json.loads(line)["profile"] for line in result.stdout.splitlines()}
    assert labels == {label}
    assert f"records ({label})" in result.stderr
    rfc = run("export", "aiperf", log)
    assert {json.loads(line)["profile"] for line in rfc.stdout.splitlines()} == {"rfc"}


def test_rules_tests_from_refuses_a_llamacpp_log(tmp_path: Path) -> None:
    """A llama.cpp step log in --tests-from became a test feeding llama.cpp's counts in as
    vllm:spec_decode_* series (exit 0), though the option replays vLLM logs only."""
    log = ROOT / "tests" / "fixtures" / "llamacpp" / "mamba.steps.ndjson.gz"
    out = tmp_path / "rules"
    line = assert_bad(run("rules", "--out", out, "--tests-from", log), "a llama.cpp log")
    assert line.startswith(f"{log}:1:1:")
    assert not out.exists()


def test_rules_test_files_keep_the_dots_of_a_log_name(tmp_path: Path) -> None:
    """`--tests-from vllm-0.32-x.ndjson --tests-from vllm-0.33-x.ndjson.gz` wrote
    test-vllm-0.yml and test-vllm-0-2.yml (the name cut at its first dot): only the step-log
    suffixes are dropped now, so each test file says which log it is."""
    logs = [tmp_path / "vllm-0.32-x.ndjson", tmp_path / "vllm-0.33-x.ndjson.gz"]
    logs[0].write_bytes(SYNC.read_bytes())
    logs[1].write_bytes(gzip.compress(SYNC.read_bytes()))
    out = tmp_path / "rules"
    result = run("rules", "--out", out, *[a for log in logs for a in ("--tests-from", log)])
    assert result.exit_code == 0, result.output
    assert sorted(p.name for p in out.iterdir()) == [
        "spectally-rules.yml",
        "test-vllm-0.32-x.yml",
        "test-vllm-0.33-x.yml",
    ]


@pytest.mark.parametrize("where", ["step proposed", "step k", "trace k"])
def test_vectors_refuses_an_input_count_past_the_limit(tmp_path: Path, where: str) -> None:
    """A vector whose input names 10**12 drafts (or k) ran for ever: the reference sizes its
    per-draft and per-position lists by it. Past 1024 (the step log's limit) it is malformed."""
    doc = json.loads((ROOT / "spec" / "vectors.json").read_text())
    kind = where.split()[0]
    vec = next(v for v in doc["vectors"] if v["kind"] == kind)
    if where == "step proposed":
        vec["input"]["proposed"] = 10**12
    elif where == "step k":
        vec["input"]["k"] = 10**12
    else:
        vec["config"]["k"] = 10**12
    doc["vectors"] = [vec]
    path = tmp_path / "vectors.json"
    path.write_text(json.dumps(doc))
    field = {"step proposed": "input.proposed", "step k": "input.k", "trace k": "config.k"}
    assert_bad(
        run("vectors", "--file", path),
        f"{field[where]}: 1000000000000 exceeds the limit 1024 of an input count",
    )


def test_compare_refuses_stdin_twice() -> None:
    """`compare - -` read the log from stdin, then found stdin empty and called the second
    log '-:1:1: empty log': a usage error naming why."""
    result = CliRunner().invoke(main, ["compare", "-", "-"], input=SYNC.read_text())
    assert_bad(result, "stdin is read once")
