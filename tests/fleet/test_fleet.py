"""Fleet replay (`spectally replay --jobs N`): the same per-file reports and exit codes as the
sequential run, in input order, and a fleet report merged through the reference's merge."""

from __future__ import annotations

import contextlib
import json
import os
import pickle
import random
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result
from fleet_dp import build as build_dp
from fleet_dp import combine_scrapes, relabel_log
from spectally.engine_bridge import fleet
from spectally.engine_bridge.cli import replay
from spectally.engine_bridge.fleet import (
    FileOutcome,
    ReplayOptions,
    job,
    local,
    replay_local,
    replay_one,
)
from spectally.engine_bridge.fleet.report import fleet_summary, merge_totals
from spectally.reference.counters import Counters

ROOT = Path(__file__).resolve().parents[2]
VLLM = ROOT / "tests" / "fixtures" / "vllm"
TRACES = ROOT / "tests" / "traces"
AGREE = [
    VLLM / "ngram-k3-greedy.ndjson.gz",
    VLLM / "draft-noise05-k3-so-json-xgrammar.ndjson.gz",
    VLLM / "ngram-k5-greedy.ndjson.gz",
    TRACES / "agree" / "async_stale_counted.ndjson",
]
DIVERGING = TRACES / "diverge" / "totals_mismatch.ndjson"


@pytest.fixture
def bad_input(tmp_path: Path) -> Path:
    path = tmp_path / "bad.ndjson"
    first = (VLLM / "ngram-k3-greedy.ndjson.gz").name  # a real header, then a broken record
    import gzip

    with gzip.open(VLLM / first, "rt") as f:
        header = f.readline()
    path.write_text(header + '{"record": "request_step", "step": \n')
    return path


def run(args: list[str], stdin: str | None = None) -> Result:
    return CliRunner().invoke(replay, args, input=stdin)


def mixed(bad_input: Path) -> list[str]:
    return [str(AGREE[0]), str(DIVERGING), str(AGREE[1]), str(bad_input), str(AGREE[2])]


def test_jobs_two_prints_exactly_what_the_sequential_run_prints(bad_input: Path) -> None:
    files = mixed(bad_input)
    seq = run([*files, "--jobs", "1"])
    par = run([*files, "--jobs", "2"])
    assert seq.exit_code == par.exit_code == 2  # bad input outranks the divergence
    assert par.stdout == seq.stdout
    assert par.stderr == seq.stderr
    # the per-file reports are the single-file command's, in input order
    singles = [run([f]) for f in files]
    assert [s.exit_code for s in singles] == [0, 1, 0, 2, 0]
    assert seq.stdout.startswith("".join(s.stdout for s in singles))
    assert seq.stderr == "".join(s.stderr for s in singles)
    assert "3 of 5 logs agree with the reference" in seq.stdout


def test_jobs_two_json_equals_sequential_json(bad_input: Path) -> None:
    files = mixed(bad_input)
    seq = run([*files, "--jobs", "1", "--json"])
    par = run([*files, "--jobs", "2", "--json"])
    assert seq.exit_code == par.exit_code == 2
    payload = json.loads(par.stdout)
    assert payload == json.loads(seq.stdout)
    assert [f["status"] for f in payload["files"]] == [
        "agree",
        "diverge",
        "agree",
        "bad_input",
        "agree",
    ]
    for f in files:
        single = json.loads(run([f, "--json"]).stdout)
        assert single in payload["files"]
    fleet_part = payload["fleet"]
    assert fleet_part["exit_code"] == 2
    assert fleet_part["statuses"] == {"agree": 3, "diverge": 1, "bad_input": 1}
    first = {f["path"]: f["first_divergence"] for f in fleet_part["files"]}
    assert first[str(DIVERGING)].startswith(f"{DIVERGING}:8:1: divergence (totals)")
    assert first[str(bad_input)].startswith(f"{bad_input}:2:")
    assert first[str(AGREE[0])] is None


def test_exit_code_is_the_most_severe_of_the_files() -> None:
    both = run([str(AGREE[0]), str(DIVERGING), "--jobs", "2"])
    assert both.exit_code == 1
    ok = run([str(AGREE[0]), str(AGREE[3]), "--jobs", "2"])
    assert ok.exit_code == 0, ok.output


def test_merged_totals_are_the_sum_of_every_agreeing_file() -> None:
    """Each counter of the fleet totals against an independent sum of the per-file JSON reports
    (k=3 and k=5 logs: per-position vectors of the shorter k are zero past its end)."""
    payload = json.loads(run([*map(str, AGREE), str(DIVERGING), "--json"]).stdout)
    agreeing = [f for f in payload["files"] if f["status"] == "agree"]
    assert len(agreeing) == 4
    merged = payload["fleet"]["merged"]
    assert merged["merged_logs"] == 4 and merged["k"] == 5
    assert payload["fleet"]["excluded_from_totals"] == [str(DIVERGING)]
    for profile in ("vllm-legacy", "rfc"):
        for name, value in merged["totals"][profile].items():
            if name == "per_position":
                for vector, got in value.items():
                    want = [0] * 5
                    for f in agreeing:
                        for i, v in enumerate(
                            f["summary"]["totals"][profile]["per_position"][vector]
                        ):
                            want[i] += v
                    assert got == want, (profile, vector)
            elif isinstance(value, dict):  # rfc fates
                for fate, got in value.items():
                    want = sum(f["summary"]["totals"][profile][name][fate] for f in agreeing)
                    assert got == want, (profile, name, fate)
            else:
                want = sum(f["summary"]["totals"][profile][name] for f in agreeing)
                assert value == want, (profile, name)
    shift = payload["fleet"]["shift"]
    for term, got in shift["terms"].items():
        assert got == sum(f["summary"]["shift"]["terms"][term] for f in agreeing), term


def test_fleet_report_does_not_depend_on_the_input_order() -> None:
    """Merge is commutative: any permutation of the files gives the same fleet totals, per-engine
    breakdown and shift; the per-file lines follow the order given."""
    files = [*map(str, AGREE), str(DIVERGING)]
    base = json.loads(run([*files, "--json", "--jobs", "2"]).stdout)["fleet"]
    rng = random.Random(7)
    for _ in range(2):
        order = files[:]
        rng.shuffle(order)
        got = json.loads(run([*order, "--json", "--jobs", "2"]).stdout)["fleet"]
        assert [f["path"] for f in got["files"]] == order
        for key in ("merged", "shift", "statuses", "exit_code", "logs", "agree"):
            assert got[key] == base[key], key
        assert sorted(json.dumps(e, sort_keys=True) for e in got["engines"]) == sorted(
            json.dumps(e, sort_keys=True) for e in base["engines"]
        )


def test_outcomes_come_back_in_input_order_whatever_finishes_first() -> None:
    """The largest file is submitted first and finishes last; a shuffled completion order is
    put back in input order as soon as each prefix is complete."""
    done = list(range(6))
    random.Random(3).shuffle(done)
    fakes = {
        i: FileOutcome(f"f{i}", "agree", 0, "", False, {}, None, None, None, None) for i in done
    }
    got = [o.path for o in local._in_order(6, iter((i, fakes[i]) for i in done))]
    assert got == [f"f{i}" for i in range(6)]
    with pytest.raises(AssertionError, match="1 outcomes missing"):
        list(local._in_order(6, iter((i, fakes[i]) for i in range(5))))


def test_stdin_is_replayed_by_the_parent_alongside_the_workers() -> None:
    text = (TRACES / "agree" / "sync_basic.ndjson").read_text()
    files = [str(AGREE[0]), "-", str(AGREE[3])]
    seq = run([*files, "--jobs", "1"], stdin=text)
    par = run([*files, "--jobs", "2"], stdin=text)
    assert seq.exit_code == par.exit_code == 0, par.output
    assert par.stdout == seq.stdout
    assert "3 of 3 logs agree" in par.stdout


def test_outcomes_survive_pickling(bad_input: Path) -> None:
    """What crosses a process boundary (local worker or Ray task) rebuilds equal."""
    opts = ReplayOptions(max_divergences=3)
    for path in (AGREE[0], DIVERGING, bad_input):
        outcome = replay_one(str(path), opts)
        assert pickle.loads(pickle.dumps(outcome)) == outcome
    assert replay_one(str(AGREE[0]), opts).totals is not None
    assert replay_one(str(bad_input), opts).totals is None


def test_engine_info_comes_from_the_header() -> None:
    info = fleet.read_engine_info(str(VLLM / "serve-draft-noise05-k3.ndjson.gz"))
    assert info is not None
    assert (info.engine_index, info.k, info.spec_method, info.scheduling) == (
        0,
        3,
        "draft_model",
        "sync",
    )
    assert fleet.read_engine_info("-") is None  # stdin cannot be read twice
    assert fleet.read_engine_info(str(ROOT / "README.md")) is None


def test_a_bug_in_one_file_is_an_internal_error_and_the_others_go_on(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    real = job.replay_file

    def buggy(path: str, *args: Any, **kwargs: Any) -> Any:
        if path == str(AGREE[1]):
            raise ZeroDivisionError("planted bug")
        return real(path, *args, **kwargs)

    monkeypatch.setattr(job, "replay_file", buggy)
    outcomes = list(replay_local([str(p) for p in AGREE[:3]], ReplayOptions(), jobs=1))
    assert [o.status for o in outcomes] == ["agree", "internal_error", "agree"]
    assert outcomes[1].exit_code == 70
    report = outcomes[1].result["report"]
    assert "ZeroDivisionError: planted bug" in Path(report).read_text()
    assert outcomes[1].report.count("\n") == 0 and report in outcomes[1].report
    assert fleet_summary(outcomes)["exit_code"] == 70
    Path(report).unlink()


def test_merge_widens_to_the_largest_k() -> None:
    a = replay_one(str(AGREE[0]), ReplayOptions()).totals  # k=3
    b = replay_one(str(AGREE[2]), ReplayOptions()).totals  # k=5
    assert a is not None and b is not None and (a.k, b.k) == (3, 5)
    m = merge_totals([a, b])
    assert m is not None and m.k == 5
    assert m.rfc.drafted == a.rfc.drafted + b.rfc.drafted
    assert m.per_position("accepted")[3:] == b.per_position("accepted")[3:]
    assert merge_totals([a, b]) == merge_totals([b, a])
    assert merge_totals([]) is None
    assert merge_totals([a]) == a.merge(Counters.zero(3))


# -- data parallel: two engines' logs and one scrape with engine labels -------------------------


def test_data_parallel_fleet_matches_the_scrape_per_engine_and_merged(tmp_path: Path) -> None:
    """Built from two real recordings relabelled engine 0 and 1 (not a real DP run: see
    tests/fleet_dp.py); each log is checked against its engine's series, the merged totals
    against the scrape summed over both engine labels."""
    e0, e1, scrape = build_dp(tmp_path)
    result = run([str(e0), str(e1), "--metrics", str(scrape), "--json"])
    assert result.exit_code == 0, result.output
    payload = json.loads(result.stdout)
    check = payload["fleet"]["metrics"]
    assert check["checked"] and check["agree"]
    assert check["scrape_engines"] == ["0", "1"] and check["log_engines"] == ["0", "1"]
    engines = payload["fleet"]["engines"]
    assert [e["engine"]["engine_index"] for e in engines] == [0, 1]
    for e, f in zip(engines, payload["files"], strict=True):
        assert e["merged"]["totals"] == f["summary"]["totals"]
    text = run([str(e0), str(e1), "--metrics", str(scrape)]).stdout
    assert "fleet metrics: AGREE" in text and "engine 1: vllm 0.32.0" in text


def test_data_parallel_scrape_with_an_engine_no_log_covers_diverges(tmp_path: Path) -> None:
    """Mutant: the scrape counts a third engine whose log is missing. Each log still matches its
    own engine's series; only the fleet check sees the gap."""
    e0, e1, _ = build_dp(tmp_path)
    runs = ("serve-draft-noise05-k3", "serve-draft-noise05-k3-so-json", "serve-draft-noise05-k3")
    scrape = tmp_path / "three.prom"
    combine_scrapes([(VLLM / f"{r}.prom", str(i)) for i, r in enumerate(runs)], scrape)
    result = run([str(e0), str(e1), "--metrics", str(scrape)])
    assert result.exit_code == 1, result.output
    assert "fleet metrics: DIVERGE" in result.stdout
    assert "0, 1, 2" in result.stdout
    assert "2 of 2 logs agree with the reference" in result.stdout


def test_data_parallel_logs_with_the_same_engine_index_diverge(tmp_path: Path) -> None:
    """Mutant: both logs claim engine 0; the second one's counts are not engine 0's series."""
    e0, _, scrape = build_dp(tmp_path)
    twin = tmp_path / "twin.ndjson.gz"
    relabel_log(VLLM / "serve-draft-noise05-k3-so-json.ndjson.gz", twin, 0)
    result = run([str(e0), str(twin), "--metrics", str(scrape), "--json"])
    assert result.exit_code == 1
    payload = json.loads(result.stdout)
    assert [f["status"] for f in payload["files"]] == ["agree", "diverge"]
    assert payload["fleet"]["metrics"]["checked"] is False


# -- options --------------------------------------------------------------------------------------


def test_ray_address_that_is_a_file_is_a_usage_error() -> None:
    result = run(["--ray", str(AGREE[0]), str(AGREE[1])])
    assert result.exit_code == 2
    assert "--ray took" in result.output and "--ray=ADDRESS" in result.output


def test_jobs_and_ray_exclude_each_other() -> None:
    result = run([str(AGREE[0]), "--jobs", "2", "--ray=auto"])
    assert result.exit_code == 2 and "exclude each other" in result.output


def test_ray_missing_is_bad_usage_not_a_traceback(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "ray", None)  # `import ray` raises ImportError
    result = run([str(AGREE[0]), str(AGREE[1]), "--ray=auto"])
    assert result.exit_code == 2
    assert "pip install 'spectally[ray]'" in result.stderr


def test_default_jobs_are_the_usable_cores() -> None:
    import os

    assert fleet.usable_cores() == len(os.sched_getaffinity(0))


def test_one_file_keeps_the_single_log_output() -> None:
    result = run([str(AGREE[0]), "--json"])
    assert json.loads(result.stdout)["path"] == str(AGREE[0])  # an object, no fleet wrapper
    assert "fleet:" not in run([str(AGREE[0])]).stdout


@pytest.mark.skipif(shutil.which("mkfifo") is None, reason="needs mkfifo")
def test_a_named_pipe_is_read_by_the_parent_only(tmp_path: Path) -> None:
    """A FIFO can be read once: it is replayed here, never re-opened for its header."""
    import os
    import threading

    fifo = tmp_path / "pipe.ndjson"
    os.mkfifo(fifo)
    data = (TRACES / "agree" / "sync_basic.ndjson").read_bytes()

    def feed() -> None:
        with open(fifo, "wb") as f:
            f.write(data)

    writer = threading.Thread(target=feed, daemon=True)
    writer.start()
    result = run([str(AGREE[0]), str(fifo), str(AGREE[3]), "--jobs", "2"])
    writer.join(timeout=60)
    assert result.exit_code == 0, result.output
    assert "3 of 3 logs agree" in result.stdout


def test_jobs_two_replays_in_other_processes(monkeypatch: pytest.MonkeyPatch) -> None:
    """A bug planted in this process only: the sequential run reports it for every file, the
    workers (forked from a server that imported the unpatched replay) do not see it."""

    def planted(path: str, **kwargs: Any) -> Any:
        raise ZeroDivisionError("planted in the parent")

    monkeypatch.setattr(job, "replay_file", planted)
    files = [str(p) for p in AGREE[:3]]
    here = list(replay_local(files, ReplayOptions(), jobs=1))
    assert {o.status for o in here} == {"internal_error"}
    pooled = list(replay_local(files, ReplayOptions(), jobs=2))
    assert [o.status for o in pooled] == ["agree"] * 3
    for o in here:
        Path(o.result["report"]).unlink()


def _descendants(pid: int) -> set[int]:
    parents: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat", encoding="ascii", errors="replace") as f:
                    parents[int(entry)] = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue
    found: set[int] = set()
    frontier = {pid}
    while frontier:
        frontier = {c for c, p in parents.items() if p in frontier} - found
        found |= frontier
    return found


def _ctrl_c_as_from_a_terminal() -> None:
    """SIGINT back to its default in the command (run between fork and exec). A shell without
    job control starts a background command with SIGINT ignored, an ignored signal stays
    ignored across exec, and Python then installs no KeyboardInterrupt handler: a test run
    started that way (``bash .ci/run &`` in a script) gave the command no Ctrl-C to obey."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


@pytest.mark.skipif(not Path("/proc").is_dir(), reason="reads the process tree from /proc")
def test_ctrl_c_stops_the_workers_and_exits_130(tmp_path: Path) -> None:
    """The parent blocks reading a FIFO nobody writes (no race with the workers finishing);
    SIGINT then must end the command with 130 and leave no worker or fork server behind."""
    fifo = tmp_path / "never.ndjson"
    os.mkfifo(fifo)
    writer = os.open(fifo, os.O_RDWR | os.O_NONBLOCK)  # holds the FIFO open: no EOF ever
    try:
        files = [str(AGREE[0]), str(AGREE[1]), str(fifo)]
        proc = subprocess.Popen(
            [sys.executable, "-m", "spectally", "replay", "--jobs", "2", *files],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            preexec_fn=_ctrl_c_as_from_a_terminal,
        )
        seen: set[int] = set()
        try:
            deadline = time.monotonic() + 120
            while len(seen) < 3 and time.monotonic() < deadline:  # fork server + 2 workers
                seen |= _descendants(proc.pid)
                time.sleep(0.2)
            assert len(seen) >= 3, f"workers never started: {seen}"
            proc.send_signal(signal.SIGINT)
            _, err = proc.communicate(timeout=120)
        finally:
            if proc.poll() is None:  # a failed run leaves nothing running behind it
                for pid in (*_descendants(proc.pid), proc.pid):
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(pid, signal.SIGKILL)
                proc.communicate()
    finally:
        os.close(writer)
    assert proc.returncode == 130, err
    assert "interrupted" in err
    deadline = time.monotonic() + 30
    while any(Path(f"/proc/{p}").exists() for p in seen) and time.monotonic() < deadline:
        time.sleep(0.2)
    left = [p for p in seen if Path(f"/proc/{p}").exists()]
    assert not left, f"processes left behind: {left}"
