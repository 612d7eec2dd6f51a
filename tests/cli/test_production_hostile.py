"""Hostile input at production scale, through the real `spectally` command: no output path
destroys an input, no input hangs a command, no bad input or missing extra is an internal
error, and nothing bad is accepted silently. Each test is one class of reported case; the
fleet's (Ctrl-C, the working directory) are in tests/fleet/test_fleet_hostile.py.
"""

from __future__ import annotations

import gzip
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner, Result
from spectally.commands import main
from spectally.engine_bridge.replay.dispatch import replay_file
from spectally.engine_bridge.steplog.outputs import check_outputs, write_output
from spectally.engine_bridge.steplog.records import BadInput
from spectally.exit_codes import ExitCode

ROOT = Path(__file__).parents[2]
EXAMPLE = ROOT / "engine_bridge" / "examples" / "step-log-async-eagle-xgrammar.ndjson"
LLAMA = ROOT / "tests" / "fixtures" / "llamacpp"


def run(*args: str | Path) -> Result:
    return CliRunner().invoke(main, [str(a) for a in args])


def assert_bad(result: Result, *words: str) -> str:
    """Exit 2, no traceback, a stderr line holding every word; returns that line."""
    assert result.exit_code == ExitCode.BAD_INPUT, (result.exit_code, result.output)
    assert "Traceback" not in result.output
    assert "internal error" not in result.output
    lines = [line for line in result.stderr.splitlines() if all(w in line for w in words)]
    assert lines, result.stderr
    return lines[0]


def command_after(setup: str, args: list[str]) -> subprocess.CompletedProcess[str]:
    """The real command in a fresh interpreter, after ``setup`` (Python) has run there."""
    code = (
        f"import sys\n{setup}from spectally.commands import main\n"
        f"sys.argv = ['spectally', *{args!r}]\nmain()\n"
    )
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=300, check=False
    )


@pytest.fixture
def log(tmp_path: Path) -> Path:
    path = tmp_path / "log.ndjson"
    path.write_bytes(EXAMPLE.read_bytes())
    return path


def diverging(tmp_path: Path) -> Path:
    """The example log with its totals record one draft off: a divergence, not bad input."""
    lines = EXAMPLE.read_text().splitlines()
    totals = json.loads(lines[-1])
    totals["num_drafts"] += 1
    path = tmp_path / "diverging.ndjson"
    path.write_text("\n".join([*lines[:-1], json.dumps(totals)]) + "\n")
    return path


# -- no input is ever written over ---------------------------------------------------------


def _scrape(tmp_path: Path) -> Path:
    path = tmp_path / "scrape.prom"
    path.write_text("vllm:spec_decode_num_drafts_total 1\n")
    return path


@pytest.mark.parametrize(
    "case",
    [
        "html-is-log",
        "html-is-symlink-to-log",
        "html-is-second-log",
        "html-is-metrics",
        "aiperf-out-is-log",
        "aiperf-out-is-hardlink",
        "rules-test-is-log",
        "llamacpp-out-is-log",
        "llamacpp-out-is-metrics-after",
        "llamacpp-out-is-responses",
    ],
)
def test_no_output_overwrites_an_input(tmp_path: Path, log: Path, case: str) -> None:
    other = tmp_path / "other.ndjson"
    other.write_bytes(log.read_bytes())
    scrape = _scrape(tmp_path)
    server = tmp_path / "server.log"
    server.write_bytes((LLAMA / "mamba.server.log").read_bytes())
    after = tmp_path / "after.prom"
    after.write_bytes((LLAMA / "mamba.metrics.after").read_bytes())
    responses = tmp_path / "responses.json"
    responses.write_bytes((LLAMA / "mamba.responses.json").read_bytes())
    link = tmp_path / "link.html"
    link.symlink_to(log)
    hard = tmp_path / "hard.jsonl"
    os.link(log, hard)
    rules_dir = tmp_path / "r"
    rules_dir.mkdir()
    named_like_test = rules_dir / "test-x.yml"  # the test file `--tests-from x.ndjson` writes
    named_like_test.write_bytes(log.read_bytes())
    commands: dict[str, tuple[list[str | Path], Path]] = {
        "html-is-log": (["replay", log, "--html", log], log),
        "html-is-symlink-to-log": (["replay", log, "--html", link], log),
        "html-is-second-log": (["replay", log, other, "--html", other], other),
        "html-is-metrics": (["replay", log, "--metrics", scrape, "--html", scrape], scrape),
        "aiperf-out-is-log": (["export", "aiperf", log, "--out", log], log),
        "aiperf-out-is-hardlink": (["export", "aiperf", log, "--out", hard], log),
        "rules-test-is-log": (
            ["rules", "--out", tmp_path, "--tests-from", tmp_path / "spectally-rules.yml"],
            tmp_path / "spectally-rules.yml",
        ),
        "llamacpp-out-is-log": (
            ["import", "llamacpp", server, "--out", server, "--engine-version", "0.5.0"],
            server,
        ),
        "llamacpp-out-is-metrics-after": (
            ["import", "llamacpp", server, "--metrics-after", after, "--out", after],
            after,
        ),
        "llamacpp-out-is-responses": (
            ["import", "llamacpp", server, "--responses", responses, "--out", responses],
            responses,
        ),
    }
    if case == "rules-test-is-log":
        (tmp_path / "spectally-rules.yml").write_bytes(log.read_bytes())
    args, victim = commands[case]
    before = victim.read_bytes()
    line = assert_bad(run(*args), "refused", "destroy the input")
    assert victim.read_bytes() == before, line


def test_check_outputs_compares_missing_outputs_by_resolved_path(tmp_path: Path) -> None:
    (tmp_path / "d").mkdir()
    inp = str(tmp_path / "d" / ".." / "in.txt")
    (tmp_path / "in.txt").write_text("x")
    with pytest.raises(BadInput, match="destroy"):
        check_outputs([("--out", str(tmp_path / "in.txt"))], [("IN", inp)])
    # Two outputs of one file, and an output that does not exist yet: compared by path.
    with pytest.raises(BadInput, match="two different files"):
        check_outputs([("--a", str(tmp_path / "new")), ("--b", str(tmp_path / "d/../new"))], [])
    check_outputs([("--out", str(tmp_path / "new"))], [("IN", inp)])


@pytest.mark.parametrize(
    "args",
    [
        ["replay", "{log}", "--html", "{out}"],
        ["export", "aiperf", "{log}", "--out", "{out}"],
        ["dashboard", "--out", "{out}"],
        ["rules", "--out", "{out}"],
        ["import", "llamacpp", "{server}", "--engine-version", "0.5.0", "--out", "{out}"],
    ],
)
@pytest.mark.parametrize("target", ["missing-dir", "full-disk"])
def test_every_out_into_a_missing_dir_or_a_full_disk_is_exit_2(
    tmp_path: Path, log: Path, args: list[str], target: str
) -> None:
    out = tmp_path / "no-such-dir" / "out" if target == "missing-dir" else Path("/dev/full")
    if target == "full-disk" and args[0] == "rules":
        pytest.skip("rules --out is a folder")
    server = LLAMA / "mamba.server.log"
    filled = [a.format(log=log, out=out, server=server) for a in args]
    line = assert_bad(run(*filled), str(out))
    assert ("does not exist" in line) if target == "missing-dir" else ("No space" in line)


def test_a_failed_write_leaves_the_old_file_whole(tmp_path: Path) -> None:
    """A write cut short by the file-size limit (a full disk as the kernel reports it, EFBIG)
    is exit 2, and the target keeps its old bytes: nothing truncated, no temporary left."""
    target = tmp_path / "dash.json"
    target.write_text("old dashboard\n")
    proc = command_after(
        "import resource, signal\n"
        "signal.signal(signal.SIGXFSZ, signal.SIG_IGN)\n"
        "resource.setrlimit(resource.RLIMIT_FSIZE, (1000, 1000))\n",
        ["dashboard", "--out", str(target)],
    )
    assert proc.returncode == ExitCode.BAD_INPUT, proc.stderr
    assert str(target) in proc.stderr and "cannot write" in proc.stderr, proc.stderr
    assert target.read_text() == "old dashboard\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["dash.json"]


def test_write_output_replaces_whole_and_keeps_the_mode(tmp_path: Path) -> None:
    target = tmp_path / "x.txt"
    target.write_text("old")
    target.chmod(0o640)
    write_output(str(target), "new text")
    assert target.read_text() == "new text"
    assert target.stat().st_mode & 0o777 == 0o640
    assert sorted(p.name for p in tmp_path.iterdir()) == ["x.txt"]


# -- nothing hangs -------------------------------------------------------------------------


def _rule(expr: str) -> str:
    return f"groups:\n- name: g\n  rules:\n  - record: x\n    expr: '{expr}'\n"


def test_lint_yaml_aliases_expanding_to_millions_is_exit_2(tmp_path: Path) -> None:
    """The reported file: 18 KB of aliases naming 3,000 groups of 3,000 rules."""
    rule = '&a {record: x, expr: "rate(vllm:spec_decode_num_drafts_total[5m])"}'
    text = (
        f"a: {rule}\n"
        + "r: &r ["
        + ",".join(["*a"] * 3000)
        + "]\n"
        + "groups: ["
        + ",".join(f"{{name: g{n}, rules: *r}}" for n in range(1500))
        + "]\n"
    )
    path = tmp_path / "laughs.yml"
    path.write_text(text)
    assert path.stat().st_size < 64_000
    assert_bad(run("lint", path), "more than", "rules")


def test_lint_yaml_aliases_within_the_bound_are_read(tmp_path: Path) -> None:
    text = (
        "x: &e 'rate(vllm:spec_decode_num_drafts_total[5m])'\n"
        "groups:\n- name: g\n  rules:\n  - record: a\n    expr: *e\n  - record: b\n    expr: *e\n"
    )
    path = tmp_path / "ok.yml"
    path.write_text(text)
    assert run("lint", path).exit_code == ExitCode.OK


@pytest.mark.parametrize(
    "name, text, words",
    [
        ("deep.yml", "groups:\n" + "".join("  " * i + "- \n" for i in range(1, 3000)), "YAML"),
        ("flow.yml", "groups: " + "[" * 5000 + "]" * 5000 + "\n", "nested"),
        ("deep.json", '{"panels":' + "[\n" * 5000 + "]\n" * 5000 + "}\n", "nested"),
    ],
)
def test_lint_deeply_nested_multiline_input_is_exit_2(
    tmp_path: Path, name: str, text: str, words: str
) -> None:
    path = tmp_path / name
    path.write_text(text)
    assert_bad(run("lint", path), name, words)


def test_lint_refuses_a_rule_with_two_exprs(tmp_path: Path) -> None:
    path = tmp_path / "dup.yml"
    path.write_text(
        "groups:\n- name: g\n  rules:\n  - record: x\n"
        "    expr: vllm:spec_decode_num_drafts_total\n    expr: up\n"
    )
    assert_bad(run("lint", path), "dup.yml:6:", "'expr' appears twice")


@pytest.mark.parametrize(
    "regex, code",
    [
        ("(.|.)*X", ExitCode.OK),  # exponential in Python's re; linear in RE2
        ("(a|aa)*" * 6 + "X", ExitCode.OK),
        # RE2 (Go) syntax, an error in Python's re: in a PromQL string, "\\z" is the regex \z
        (r"vllm:spec_decode\\z", ExitCode.OK),
        ("(?<x>vllm)", ExitCode.OK),  # RE2 and Go 1.22+: a named group
        ("(?P<x>vllm:spec_decode_num_drafts_total)", ExitCode.OK),
        ("(a", ExitCode.BAD_INPUT),
        ("a{2,1}", ExitCode.BAD_INPUT),
    ],
)
def test_lint_matcher_regexes_as_prometheus_runs_them(
    tmp_path: Path, regex: str, code: ExitCode
) -> None:
    path = tmp_path / "re.yml"
    path.write_text(_rule(f'sum(rate({{__name__=~"{regex}"}}[5m]))'))
    result = run("lint", path)
    assert result.exit_code == code, result.output
    assert "Traceback" not in result.output and "internal error" not in result.output


def test_lint_regex_matches_as_prometheus_anchors_it() -> None:
    from spectally.engine_bridge.observe.lint import prom_regex_matches

    names = {"vllm:a", "vllm:ab", "x\nvllm:a"}
    assert prom_regex_matches("vllm:a", names) == {"vllm:a"}  # anchored at both ends
    assert prom_regex_matches(".*vllm:a", names) == {"vllm:a", "x\nvllm:a"}  # . takes \n


@pytest.mark.parametrize("device", ["/dev/zero", "/dev/urandom"])
@pytest.mark.parametrize("path", ["default", "reference"])
def test_replay_of_an_endless_device_ends_with_exit_2(device: str, path: str) -> None:
    args = ["replay", device] + (["--reference"] if path == "reference" else [])
    proc = subprocess.run(
        [sys.executable, "-m", "spectally", *args],
        capture_output=True,
        text=True,
        timeout=300,  # a guard against a hang, not a measurement
        check=False,
    )
    assert proc.returncode == ExitCode.BAD_INPUT, proc.stderr
    # Random bytes hold a newline before the first byte refused about once in 30 reads: the
    # message then names line 2 or later. Zeros hold no newline.
    line = "1" if device == "/dev/zero" else r"\d+"
    assert re.match(rf"{device}:{line}:\d+: ", proc.stderr), proc.stderr


def test_replay_of_a_pipe_that_never_ends_a_line() -> None:
    """`yes | tr -d '\\n'`: the spool of the default path stops at the line limit."""
    writer = subprocess.Popen(
        [sys.executable, "-c", "import sys\nwhile True: sys.stdout.write('y' * 65536)"],
        stdout=subprocess.PIPE,
    )
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "spectally", "replay", "-"],
            stdin=writer.stdout,
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
    finally:
        writer.kill()
        writer.wait()
    assert proc.returncode == ExitCode.BAD_INPUT, proc.stderr
    assert proc.stderr.startswith("-:1:1048577: line longer than the limit"), proc.stderr


def test_copy_checked_stops_at_a_control_byte(tmp_path: Path) -> None:
    """The spool's stop, on a finite input: the control byte's line and column, across a chunk
    boundary too (the column counts the line's bytes in the chunk before)."""
    from spectally.engine_bridge.steplog.source import copy_checked

    path = tmp_path / "stream"
    path.write_bytes(b'{"a":1}\n{"b":2}\n' + b"x" * ((1 << 20) - 16 + 5) + b"\x07rest\n")
    with pytest.raises(BadInput) as caught, (tmp_path / "spool").open("wb") as out:
        copy_checked(str(path), out)
    column = (1 << 20) - 16 + 5 + 1  # the line's bytes in the first chunk, 5 more, the byte
    assert (caught.value.line, caught.value.column) == (3, column), str(caught.value)
    assert "control byte 0x07" in caught.value.reason


def test_replay_of_gzip_on_stdin_still_agrees(log: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "spectally", "replay", "-"],
        input=gzip.compress(log.read_bytes()),
        capture_output=True,
        timeout=300,
        check=False,
    )
    assert proc.returncode == ExitCode.OK, proc.stderr


# -- every bad input is exit 2 naming it ---------------------------------------------------


def test_version_diff_to_with_5000_digits(log: Path) -> None:
    assert_bad(run("version-diff", log, "--to", "9" * 5000), "5000 digits")


@pytest.mark.parametrize(
    "text, words",
    [
        ('[{"timings": {"draft_n": ' + "9" * 5000 + ', "draft_n_accepted": 1}}]\n', "5000 digits"),
        ("[\n" * 3000 + "]\n" * 3000, "nested deeper"),
    ],
)
def test_import_llamacpp_responses_wide_or_deep(tmp_path: Path, text: str, words: str) -> None:
    responses = tmp_path / "responses.json"
    responses.write_text(text)
    result = run(
        "import",
        "llamacpp",
        LLAMA / "mamba.server.log",
        "--metrics-before",
        LLAMA / "mamba.metrics.before",
        "--metrics-after",
        LLAMA / "mamba.metrics.after",
        "--responses",
        responses,
        "--out",
        tmp_path / "o.ndjson",
    )
    assert_bad(result, str(responses), words)
    assert not (tmp_path / "o.ndjson").exists()


# Modules of each extra, and a command that needs them (the nine of the report).
EXTRA_CASES = [
    ("observe", "yaml", ["rules", "--out", "{tmp}/r"]),
    ("observe", "grafana_foundation_sdk", ["dashboard", "--out", "{tmp}/d.json"]),
    ("observe", "promql_parser", ["lint", "{tmp}/r.yml"]),
    ("observe", "matplotlib", ["replay", "{log}", "--html", "{tmp}/r.html"]),
    ("bridge", "prometheus_client", ["import", "prometheus", "{tmp}/s.prom"]),
    ("bridge", "prometheus_client", ["replay", "{log}", "--metrics", "{tmp}/s.prom"]),
    ("bridge", "numpy", ["replay", "{log}"]),
    ("bridge", "numpy", ["version-diff", "{log}"]),
    (
        "bridge",
        "prometheus_client",
        ["import", "llamacpp", "{server}", "--metrics-after", "{after}", "--out", "{tmp}/o"],
    ),
]


@pytest.mark.parametrize("extra, module, args", EXTRA_CASES)
def test_a_missing_extra_is_named(
    tmp_path: Path, log: Path, extra: str, module: str, args: list[str]
) -> None:
    """Each command run with one of its extra's modules missing (an import hook refuses it, as
    an environment without the extra does): exit 2 naming the extra, never an internal error."""
    (tmp_path / "r.yml").write_text(_rule("vllm:spec_decode_num_drafts_total"))
    (tmp_path / "s.prom").write_text("vllm:spec_decode_num_drafts_total 1\n")
    filled = [
        a.format(
            tmp=tmp_path,
            log=log,
            server=LLAMA / "mamba.server.log",
            after=LLAMA / "mamba.metrics.after",
        )
        for a in args
    ]
    proc = command_after(
        "class Missing:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        f"        if name.split('.')[0] == {module!r}:\n"
        "            raise ModuleNotFoundError(f'No module named {name!r}', name=name)\n"
        "sys.meta_path.insert(0, Missing())\n"
        f"sys.modules.pop({module!r}, None)\n",
        filled,
    )
    assert proc.returncode == ExitCode.BAD_INPUT, proc.stderr
    assert f"spectally[{extra}]" in proc.stderr, proc.stderr
    assert "internal error" not in proc.stderr and "Traceback" not in proc.stderr


# -- nothing silent ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "window",
    ["0s", "-5m", "1y2", "5m])) or vector(1) #", "", "5m5m", "1m1h", "2w1w", "9" * 30 + "y"],
)
def test_rules_window_outside_the_duration_grammar_is_exit_2(tmp_path: Path, window: str) -> None:
    result = run("rules", "--out", tmp_path / "r", "--window", window)
    assert result.exit_code == ExitCode.BAD_INPUT, result.output
    assert "--window" in result.output
    assert not (tmp_path / "r").exists()


@pytest.mark.parametrize("window", ["30s", "1h30m", "2d", "1y2w3d4h5m6s7ms", "500ms"])
def test_rules_window_in_the_grammar_is_written(tmp_path: Path, window: str) -> None:
    result = run("rules", "--out", tmp_path, "--window", window)
    assert result.exit_code == ExitCode.OK, result.output
    assert f"[{window}]" in (tmp_path / "spectally-rules.yml").read_text()


def test_rules_tests_from_two_logs_of_one_name_keeps_both(tmp_path: Path, log: Path) -> None:
    (tmp_path / "b").mkdir()
    second = tmp_path / "b" / "log.ndjson"
    second.write_bytes(log.read_bytes())
    out = tmp_path / "r"
    result = run("rules", "--out", out, "--tests-from", log, "--tests-from", second)
    assert result.exit_code == ExitCode.OK, result.output
    assert sorted(p.name for p in out.iterdir()) == [
        "spectally-rules.yml",
        "test-log-2.yml",
        "test-log.yml",
    ]


@pytest.mark.parametrize("command", ["rules", "aiperf"])
def test_a_diverging_log_is_refused_by_writers(tmp_path: Path, command: str) -> None:
    bad = diverging(tmp_path)
    out = tmp_path / "out"
    if command == "rules":
        result = run("rules", "--out", out, "--tests-from", bad)
    else:
        result = run("export", "aiperf", bad, "--out", out)
    assert_bad(result, "diverges", "diverging.ndjson")
    assert not out.exists() or not any(out.iterdir())


def test_export_aiperf_labels_records_with_the_log_engine(tmp_path: Path) -> None:
    steps = tmp_path / "llama.ndjson"
    steps.write_bytes(gzip.decompress((LLAMA / "noise05.steps.ndjson.gz").read_bytes()))
    out = tmp_path / "a.jsonl"
    result = run("export", "aiperf", steps, "--out", out, "--profile", "vllm-legacy")
    assert result.exit_code == ExitCode.OK, result.output
    engines = {json.loads(line)["engine"] for line in out.read_text().splitlines()}
    assert engines == {"llama.cpp"}


def test_version_diff_reads_to_as_the_log_engine_release(log: Path) -> None:
    llama = LLAMA / "mamba.steps.ndjson.gz"
    ok = run("version-diff", llama, "--to", "0.5.0")
    assert ok.exit_code == ExitCode.OK, ok.output
    assert "vllm" not in ok.output.lower()
    line = assert_bad(run("version-diff", llama, "--to", "0.34.0"), "llama.cpp 0.34.0")
    assert "--force-profile" in line and "0.5.x" in line and "vllm-legacy" not in line
    line = assert_bad(run("version-diff", log, "--to", "9.9.9"), "vllm 9.9.9", "--force-profile")
    assert "llama.cpp" not in line


# -- logs of earlier drivers ---------------------------------------------------------------


def _two_totals(tmp_path: Path, second_source: str, off: int = 0) -> Path:
    lines = EXAMPLE.read_text().splitlines()
    totals = json.loads(lines[-1])
    recorder = dict(totals, source="recorder")
    driver = dict(totals, source=second_source)
    driver["num_drafts"] += off
    path = tmp_path / "two.ndjson"
    path.write_text("\n".join([*lines[:-1], json.dumps(recorder), json.dumps(driver)]) + "\n")
    return path


@pytest.mark.parametrize("judge", ["columnar", "reference"])
@pytest.mark.parametrize(
    "source, off, status",
    [("get_metrics", 0, "agree"), ("get_metrics", 1, "diverge"), ("recorder", 0, "bad_input")],
)
def test_a_second_totals_record_is_checked_like_the_first(
    tmp_path: Path, judge: str, source: str, off: int, status: str
) -> None:
    path = _two_totals(tmp_path, source, off)
    lines = None
    if judge == "columnar":  # a sequence of lines takes the columnar checker first
        lines = [(i, raw, True) for i, raw in enumerate(path.read_bytes().splitlines(), start=1)]
    result = replay_file(str(path), lines=lines, reference=judge == "reference")
    assert result.status == status, (result.status, result.bad_input)
    if status == "agree":
        assert result.summary["records_by_kind"]["totals"] == 2
        assert result.checker == judge
    if status == "diverge":
        assert result.divergences[0].line == len(path.read_text().splitlines())
