"""`spectally import ...` and `spectally explain` on inputs an attacker or a hurried operator
gives them: each is exit 2 naming file:line (or recognised, for explain), never a verdict
reached on values the command did not really read.

The inputs are the repository's real captures (tests/fixtures), changed by one line where a
case needs it.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner
from spectally.cli import main
from spectally.exit_codes import ExitCode

FIX = Path(__file__).parent.parent / "fixtures"
SCRAPE = FIX / "vllm/serve-draft-noise05-k3-so-json.prom"


def one_scrape() -> str:
    """The first of the fixture's two scrapes (the second starts where its first line repeats)."""
    lines = SCRAPE.read_text().splitlines(keepends=True)
    return "".join(lines[: lines.index(lines[0], 1)])


def spectally(*args: str) -> tuple[int, str]:
    res = CliRunner().invoke(main, list(args))
    return res.exit_code, res.output


def _series_line(text: str, name: str) -> tuple[int, str]:
    """(1-based line, text) of the first sample of ``name`` in a scrape."""
    for no, line in enumerate(text.splitlines(), start=1):
        if line.startswith(name):
            return no, line
    raise AssertionError(f"no {name} sample")


def test_prometheus_series_twice_in_one_scrape(tmp_path: Path) -> None:
    """A series twice in one scrape (two scrapes pasted without their # HELP / # TYPE lines)
    is refused at the second: the last value silently won before."""
    text = one_scrape()
    first, line = _series_line(text, "vllm:spec_decode_num_accepted_tokens_total")
    scrape = tmp_path / "twice.prom"
    scrape.write_text(text + line.rsplit(" ", 1)[0] + " 1.0\n")
    code, out = spectally("import", "prometheus", str(scrape))
    last = len(text.splitlines()) + 1
    assert code == ExitCode.BAD_INPUT, out
    assert f"{scrape}:{last}:1: vllm:spec_decode_num_accepted_tokens_total{{" in out
    assert f"appears twice in one scrape (first at line {first})" in out


def test_openmetrics_eof_ends_a_scrape(tmp_path: Path) -> None:
    """OpenMetrics' `# EOF` ends one exposition: the samples after it (here without # HELP /
    # TYPE lines) are the next scrape, checked against the first, not repeats in one."""
    text = one_scrape()
    samples = "".join(line for line in text.splitlines(keepends=True) if not line.startswith("#"))
    scrape = tmp_path / "two.prom"
    scrape.write_text(text + "# EOF\n" + samples + "# EOF\n")
    code, out = spectally("import", "prometheus", str(scrape))
    assert code == ExitCode.OK, out
    assert "scrapes 1→2" in out and "+0 drafts" in out
    assert "counter totals: scrape 2, 1 label sets" in out


def test_logs_metrics_series_twice(tmp_path: Path) -> None:
    """`import logs --metrics` reads the scrape through the same reader: the same refusal."""
    text = one_scrape()
    _, line = _series_line(text, "vllm:spec_decode_num_draft_tokens_total")
    scrape = tmp_path / "twice.prom"
    scrape.write_text(text + line + "\n")
    log = FIX / "vllm/serve-draft-noise05-k3-so-json.log"
    code, out = spectally("import", "logs", str(log), "--metrics", str(scrape))
    assert code == ExitCode.BAD_INPUT, out
    assert f"{scrape}:{len(text.splitlines()) + 1}:1:" in out and "appears twice" in out


def copy(src: Path, dst: Path) -> Path:
    shutil.copyfile(src, dst)
    return dst


LOG = FIX / "vllm/serve-draft-noise05-k3-so-json.log"
REQUESTS = FIX / "vllm/serve-draft-noise05-k3-so-json.requests.jsonl"


@pytest.mark.parametrize(
    ("command", "path", "what"),
    [
        ("prometheus", SCRAPE, "SCRAPE"),
        ("logs", LOG, "LOG"),
        ("requests", REQUESTS, "JSON"),
        ("sglang", LOG, "FILE"),
    ],
)
def test_one_file_named_twice(tmp_path: Path, command: str, path: Path, what: str) -> None:
    """The same file twice (here once through a symlink) was read twice: doubled sums
    reconciled against a scrape, or a scrape compared with itself (+0, ok)."""
    link = tmp_path / f"link{path.suffix}"
    link.symlink_to(path)
    code, out = spectally("import", command, str(path), str(link))
    assert code == ExitCode.BAD_INPUT, out
    assert out.startswith(f"{link}:1:1: {what} 2 is the same file as {what} 1 ({str(path)!r})")


def test_llamacpp_metrics_before_is_after(tmp_path: Path) -> None:
    """One scrape as --metrics-before and --metrics-after made totals of 0 beside the log's
    verification steps, written with exit 0."""
    run = FIX / "llamacpp/noise05"
    after = f"{run}.metrics.after"
    code, out = spectally(
        "import", "llamacpp", f"{run}.server.log", "--out", str(tmp_path / "steps.ndjson"),
        "--metrics-before", after, "--metrics-after", after,
    )  # fmt: skip
    assert code == ExitCode.BAD_INPUT, out
    assert out.startswith(f"{after}:1:1: --metrics-after is the same file as --metrics-before")
    assert not (tmp_path / "steps.ndjson").exists()


def test_requests_dump_appended_to_itself(tmp_path: Path) -> None:
    """A request twice in one file (the same id, the same metrics) entered every sum twice:
    exit 0 alone, and against the scrape a 'violation' that was the copy's."""
    first = REQUESTS.read_text().splitlines()[0]
    dump = tmp_path / "twice.jsonl"
    dump.write_text(REQUESTS.read_text() + first + "\n")
    code, out = spectally("import", "requests", str(dump), "--metrics", str(SCRAPE))
    last = len(REQUESTS.read_text().splitlines()) + 1
    assert code == ExitCode.BAD_INPUT, out
    assert out.startswith(f"{dump}:{last}:1: request 'cmpl-8043785f5e758f85' appears twice")
    assert "(first at line 1)" in out


def test_requests_reused_id_two_requests(tmp_path: Path) -> None:
    """Two requests that share an id (a client's own ids, reused) but not their metrics are
    two requests: checked, not refused."""
    a, b = (json.loads(line) for line in REQUESTS.read_text().splitlines()[:2])
    b["id"] = a["id"]
    dump = tmp_path / "reused.jsonl"
    dump.write_text(json.dumps(a) + "\n" + json.dumps(b) + "\n")
    code, out = spectally("import", "requests", str(dump))
    assert code == ExitCode.OK, out
    assert out.count(f"OK request metrics consistent: {a['id']}:") == 2


def test_llamacpp_log_with_a_byte_order_mark(tmp_path: Path) -> None:
    """A log saved by an editor with a UTF-8 byte-order mark hid its `version:` line: exit 2
    asking for --engine-version. The mark is dropped as every reader drops it."""
    run = FIX / "llamacpp/noise05"
    log = tmp_path / "bom.server.log"
    log.write_bytes(b"\xef\xbb\xbf" + Path(f"{run}.server.log").read_bytes())
    code, out = spectally(
        "import", "llamacpp", str(log), "--out", str(tmp_path / "steps.ndjson"),
        "--metrics-before", f"{run}.metrics.before", "--metrics-after", f"{run}.metrics.after",
    )  # fmt: skip
    assert code == ExitCode.OK, out
    header = json.loads((tmp_path / "steps.ndjson").read_text().splitlines()[0])
    assert header["engine_version"] == "0.5.0-dev+0c1e570"


def _cut_after(text: str, name: str) -> str:
    """``text`` up to and including the first sample of ``name``: a scrape cut short."""
    no, _ = _series_line(text, name)
    return "".join(text.splitlines(keepends=True)[:no])


def test_prometheus_cut_scrape_is_no_violation(tmp_path: Path) -> None:
    """A second scrape cut after its drafted counter (curl interrupted) was differenced with
    0 for every counter it lacks: negative per-position deltas, exit 1, the engine blamed for
    bytes that never arrived. What it lacks is now noted, not checked."""
    text = one_scrape()
    scrape = tmp_path / "cut.prom"
    scrape.write_text(text + _cut_after(text, "vllm:spec_decode_num_draft_tokens_total"))
    code, out = spectally("import", "prometheus", str(scrape))
    assert code == ExitCode.OK, out
    assert "VIOLATION" not in out
    assert "NOTE interval not checked: scrapes 1→2" in out
    assert "vllm:spec_decode_num_accepted_tokens_per_pos[0]" in out


def test_prometheus_scrape_without_drafted(tmp_path: Path) -> None:
    """A scrape without the drafted counter (filtered by a relabel rule) compared accepted with
    0 drafted: a violation on a counter the scrape does not hold."""
    text = one_scrape()
    kept = [ln for ln in text.splitlines(keepends=True) if "num_draft_tokens" not in ln]
    scrape = tmp_path / "filtered.prom"
    scrape.write_text("".join(kept))
    code, out = spectally("import", "prometheus", str(scrape))
    assert code == ExitCode.OK, out
    assert "NOTE missing counters" in out and "no vllm:spec_decode_num_draft_tokens_total" in out
    assert "accepted<=drafted" not in out and "drafted<=k*num_drafts" not in out
    assert "sum(per_pos)==accepted" in out  # what it holds is still checked


@pytest.mark.parametrize(
    ("command", "data", "dropped"),
    [
        ("logs", LOG, "vllm:spec_decode_num_accepted_tokens_total"),
        ("requests", REQUESTS, "vllm:spec_decode_num_accepted_tokens_total"),
        ("requests", REQUESTS, "vllm:spec_decode_num_accepted_tokens_per_pos_total"),
    ],
)
def test_metrics_without_a_reconciled_counter(
    tmp_path: Path, command: str, data: Path, dropped: str
) -> None:
    """--metrics whose last scrape lacks a counter the sums are reconciled with compared them
    with 0: 'the log intervals count more than the counters', exit 1."""
    kept = [ln for ln in SCRAPE.read_text().splitlines(keepends=True) if dropped not in ln]
    scrape = tmp_path / "filtered.prom"
    scrape.write_text("".join(kept))
    code, out = spectally("import", command, str(data), "--metrics", str(scrape))
    assert code == ExitCode.BAD_INPUT, out
    assert out.startswith(f"{scrape}:")
    assert "--metrics: scrape 2 {engine=" in out
    assert f"has no {dropped}: nothing to reconcile the sums with" in out


def test_stdin_named_twice() -> None:
    """`-` twice read stdin twice: the second reader found it empty, and `import llamacpp -
    --responses -` reported the log's requests as diverging from responses it never read."""
    run = FIX / "llamacpp/noise05"
    log = Path(f"{run}.server.log").read_text()
    res = CliRunner().invoke(
        main, ["import", "llamacpp", "-", "--out", os.devnull, "--responses", "-"], input=log
    )
    assert res.exit_code == ExitCode.BAD_INPUT, res.output
    assert res.output.startswith("-:1:1: --responses is stdin, as SERVER_LOG is")
    res = CliRunner().invoke(main, ["import", "prometheus", "-", "-"], input=one_scrape())
    assert res.exit_code == ExitCode.BAD_INPUT, res.output
    assert res.output.startswith("-:1:1: SCRAPE 2 is stdin, as SCRAPE 1 is")


def llamacpp_with_responses(tmp_path: Path, responses: Path) -> tuple[int, str]:
    """`import llamacpp` of the noise05 capture into tmp_path with ``--responses``."""
    log = FIX / "llamacpp/noise05.server.log"
    out = tmp_path / "steps.ndjson"
    return spectally(
        "import", "llamacpp", str(log), "--out", str(out), "--responses", str(responses)
    )


def test_llamacpp_responses_on_one_line_longer_than_a_line_may_be(tmp_path: Path) -> None:
    """The capture's responses, each with 60 KB of generated text, dumped on one line (~1.2 MB)
    as json.dump writes them: read like the committed file, where the line limit refused it."""
    run = FIX / "llamacpp/noise05"
    replies = json.loads(Path(f"{run}.responses.json").read_text())
    for reply in replies:
        reply["content"] = "x" * 60_000
    responses = tmp_path / "responses.json"
    responses.write_text(json.dumps(replies))
    assert responses.stat().st_size > 1 << 20
    read = llamacpp_with_responses(tmp_path, responses)
    assert read == llamacpp_with_responses(tmp_path, Path(f"{run}.responses.json"))
    assert read[0] != ExitCode.BAD_INPUT, read[1]


@pytest.mark.parametrize("content", ["", "[]\n", '{"responses": []}\n'])
def test_llamacpp_empty_responses(tmp_path: Path, content: str) -> None:
    """An empty --responses file compared no response with the log: 'only in the log [...]',
    exit 1, as if the server had answered otherwise."""
    responses = tmp_path / "responses.json"
    responses.write_text(content)
    code, out = llamacpp_with_responses(tmp_path, responses)
    assert code == ExitCode.BAD_INPUT, out
    assert out.startswith(f"{responses}:1:1: no responses (an empty file or list)")


def test_llamacpp_boolean_draft_counts(tmp_path: Path) -> None:
    """`draft_n: true` passed as the count 1 (bool is an int in Python)."""
    run = FIX / "llamacpp/noise05"
    replies = json.loads(Path(f"{run}.responses.json").read_text())
    drafted = next(i for i, r in enumerate(replies) if "draft_n" in r["timings"])
    replies[drafted]["timings"].update(draft_n=True, draft_n_accepted=True)
    responses = tmp_path / "responses.json"
    responses.write_text(json.dumps(replies))
    code, out = llamacpp_with_responses(tmp_path, responses)
    assert code == ExitCode.BAD_INPUT, out
    assert out.startswith(f"{responses}:1:1: bad draft_n / draft_n_accepted: True / True")


@pytest.mark.parametrize("label", ['position="x"', 'position="01"', 'position="-1"'])
def test_per_position_sample_without_an_index(tmp_path: Path, label: str) -> None:
    """A per-position sample whose position is no index vLLM writes was dropped, and the
    checks ran on the other positions: 'drafted > k * num_drafts' with k one short, exit 1."""
    text = one_scrape()
    scrape = tmp_path / "pos.prom"
    scrape.write_text(text.replace('position="2"', label))
    no = _series_line(text, "vllm:spec_decode_num_accepted_tokens_per_pos_total")[0] + 2
    code, out = spectally("import", "prometheus", str(scrape))
    column = scrape.read_text().splitlines()[no - 1].index("position=") + 1
    assert code == ExitCode.BAD_INPUT, out
    assert out.startswith(f"{scrape}:{no}:{column}: vllm:spec_decode_num_accepted_tokens_per_pos")


def test_per_position_sample_without_a_position(tmp_path: Path) -> None:
    text = one_scrape()
    scrape = tmp_path / "pos.prom"
    scrape.write_text(text.replace(',position="2"', ""))
    code, out = spectally("import", "prometheus", str(scrape))
    assert code == ExitCode.BAD_INPUT, out
    assert "_per_pos_total without a position label" in out


@pytest.mark.parametrize("position", ["0", "1"])
def test_per_position_samples_with_a_gap(tmp_path: Path, position: str) -> None:
    """A scrape missing one draft position (a cut or edited scrape; vLLM exports every one)
    read it as 0 accepted: the checks then reported a per-position increase or a wrong sum.
    It is refused at the next position's sample."""
    text = one_scrape()
    lines = text.splitlines(keepends=True)
    gone = next(
        i
        for i, line in enumerate(lines)
        if line.startswith("vllm:spec_decode_num_accepted_tokens_per_pos_total")
        and f'position="{position}"' in line
    )
    scrape = tmp_path / "gap.prom"
    scrape.write_text("".join(lines[:gone] + lines[gone + 1 :]))
    code, out = spectally("import", "prometheus", str(scrape))
    assert code == ExitCode.BAD_INPUT, out
    # The sample after the removed one moved up to its line.
    assert out.startswith(f"{scrape}:{gone + 1}:1: vllm:spec_decode_num_accepted_tokens_per_pos")
    assert f"has position {int(position) + 1} but not {position}" in out


def _iteration(i: int, accepted: int = 3, length: float | None = None) -> dict[str, object]:
    """One TensorRT-LLM iteration record (IterationStats.specDecodingStats of two requests;
    ``length``: an acceptanceLength other than the executor's)."""
    stats = {
        "numDraftTokens": 6,
        "numAcceptedTokens": accepted,
        "numRequestsWithDraftTokens": 2,
        "acceptanceLength": (accepted + 2) / 2 if length is None else length,
    }
    return {"iter": i, "specDecodingStats": stats}


def test_trtllm_dump_appended_to_itself(tmp_path: Path) -> None:
    """An iteration record twice (same iter, same stats) entered the totals twice, exit 0;
    an iteration number that comes again with other stats (a restart) is another iteration."""
    records = [_iteration(i) for i in range(4)]
    stats = tmp_path / "stats.jsonl"
    stats.write_text("".join(json.dumps(r) + "\n" for r in [*records, records[2]]))
    code, out = spectally("import", "trtllm", str(stats))
    assert code == ExitCode.BAD_INPUT, out
    assert out.startswith(f"{stats}:5:1: iteration 2 appears twice, the same record both times")
    assert "(first at line 3)" in out
    stats.write_text("".join(json.dumps(r) + "\n" for r in [*records, _iteration(2, 1)]))
    code, out = spectally("import", "trtllm", str(stats))
    assert code == ExitCode.OK, out
    assert "trtllm totals: 5 iterations" in out


def test_vllm_log_appended_to_itself(tmp_path: Path) -> None:
    """A server log appended to itself passed (exit 0) with every interval counted twice, and
    with --metrics the doubled sums were the engine's violation. A timestamped line that
    repeats an earlier one exactly is now refused at the copy."""
    text = LOG.read_text()
    log = tmp_path / "twice.log"
    log.write_text(text + text)
    code, out = spectally("import", "logs", str(log), "--metrics", str(SCRAPE))
    first = next(no for no, t in enumerate(text.splitlines(), 1) if "SpecDecoding metrics" in t)
    copy_at = len(text.splitlines()) + first
    assert code == ExitCode.BAD_INPUT, out
    assert out.startswith(f"{log}:{copy_at}:1: this line repeats line {first} exactly")


def test_unstamped_equal_lines_are_two_intervals(tmp_path: Path) -> None:
    """Without a timestamp two equal lines are two intervals that counted the same (a paste)."""
    line = next(t for t in LOG.read_text().splitlines() if "SpecDecoding metrics" in t)
    bare = line[line.index("SpecDecoding metrics") :]
    log = tmp_path / "paste.log"
    log.write_text(f"{bare}\n{bare}\n")
    code, out = spectally("import", "logs", str(log))
    assert code == ExitCode.OK, out
    assert "log totals: 2 lines" in out


def test_trtllm_pretty_printed_list_names_each_record_line(tmp_path: Path) -> None:
    """Every finding of a pretty-printed list (json.dump(..., indent=1)) named line 1, so a
    violation pointed at the file's first bracket; each now names its record's first line."""
    records = [_iteration(0), _iteration(1), _iteration(2), _iteration(3, length=9.0)]
    stats = tmp_path / "stats.json"
    stats.write_text(json.dumps(records, indent=1))
    code, out = spectally("import", "trtllm", str(stats))
    starts = [no for no, t in enumerate(stats.read_text().splitlines(), 1) if t == " {"]
    assert code == ExitCode.DIVERGENCE, out
    assert f"{stats}:{starts[3]}: VIOLATION acceptanceLength" in out
    assert f"{stats}:{starts[1]}: OK trtllm specDecodingStats: iteration 1" in out


@pytest.mark.parametrize("path", [REQUESTS, FIX / "llamacpp/noise05.responses.json"])
def test_sglang_on_another_engines_responses(path: Path) -> None:
    """JSON of another engine's responses passed `import sglang` with a note per response and
    nothing checked, exit 0."""
    code, out = spectally("import", "sglang", str(path))
    assert code == ExitCode.BAD_INPUT, out
    assert out.startswith(f"{path}:1:1: no response with spec_verify_ct in ")
    assert "nothing to check" in out


META = {
    "spec_verify_ct": 4,
    "spec_num_correct_drafts": 3,
    "spec_num_proposed_drafts": 12,
    "completion_tokens": 8,
    "spec_accept_rate": 0.25,
    "spec_accept_length": 2.0,
    "spec_correct_drafts_histogram": [2, 1, 1, 0],
}


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("spec_accept_rate", "0.25", "spec_accept_rate '0.25' is not a number"),
        ("spec_accept_length", True, "spec_accept_length True is not a number"),
        ("spec_correct_drafts_histogram", [2, 1, "x", 0], "is no list of counts"),
    ],
)
def test_sglang_meta_field_of_the_wrong_type(
    tmp_path: Path, field: str, value: object, message: str
) -> None:
    """A ratio or histogram of the wrong type was left out of the checks without a word, and
    the response passed on what remained."""
    good = tmp_path / "good.json"
    good.write_text(json.dumps({"meta_info": META}) + "\n")
    assert spectally("import", "sglang", str(good))[0] == ExitCode.OK
    bad = tmp_path / "meta.json"
    bad.write_text(json.dumps({"meta_info": {**META, field: value}}) + "\n")
    code, out = spectally("import", "sglang", str(bad))
    assert code == ExitCode.BAD_INPUT, out
    assert out.startswith(f"{bad}:1:1: ") and message in out


def test_sglang_list_names_each_response_line(tmp_path: Path) -> None:
    meta = tmp_path / "meta.json"
    meta.write_text(json.dumps([{"meta_info": META}, {"meta_info": META}], indent=1))
    code, out = spectally("import", "sglang", str(meta))
    starts = [no for no, t in enumerate(meta.read_text().splitlines(), 1) if t == " {"]
    assert code == ExitCode.OK, out
    assert f"{meta}:{starts[1]}: OK sglang meta_info" in out


def test_llamacpp_draft_max_against_the_scrape(tmp_path: Path) -> None:
    """--draft-max 64 beside a server whose per-position counter has 4 positions wrote a step
    log with k = 64 and 60 per-position totals the server never reported, exit 0."""
    run = FIX / "llamacpp/noise05"
    after = f"{run}.metrics.after"
    args = ["import", "llamacpp", f"{run}.server.log", "--out", str(tmp_path / "steps.ndjson")]
    args += ["--metrics-before", f"{run}.metrics.before", "--metrics-after", after]
    code, out = spectally(*args, "--draft-max", "64")
    assert code == ExitCode.BAD_INPUT, out
    assert out.startswith(f"{after}:1:1: --draft-max 64, but this scrape's per-position counter")
    assert "has 4 positions" in out and not (tmp_path / "steps.ndjson").exists()
    assert spectally(*args, "--draft-max", "4")[0] == ExitCode.OK


@pytest.mark.parametrize(
    ("command", "encoding", "name"),
    [
        (["import", "prometheus"], "utf-16-le", "UTF-16LE"),
        (["import", "logs"], "utf-16-be", "UTF-16BE"),
        (["import", "llamacpp"], "utf-16-le", "UTF-16LE"),
        (["explain"], "utf-32-le", "UTF-32LE"),
    ],
)
def test_utf16_input_is_named(tmp_path: Path, command: list[str], encoding: str, name: str) -> None:
    """A UTF-16 file (what Windows PowerShell's `>` writes) was 'not valid UTF-8' at 1:1, or,
    where a reader decodes leniently, 'no version: line' or 'no engine output': never what it
    is. Every reader now names the encoding and how to convert it."""
    source = {"prometheus": SCRAPE, "logs": LOG, "llamacpp": FIX / "llamacpp/noise05.server.log"}
    text = source.get(command[-1], SCRAPE).read_text()
    path = tmp_path / "utf16.txt"
    path.write_bytes(("\ufeff" + text).encode(encoding))
    code, out = spectally(*command, str(path))
    assert code == ExitCode.BAD_INPUT, out
    assert out.startswith(f"{path}:1:1: {name} text (its byte-order mark): spectally reads UTF-8")
    assert f"iconv -f {name[:6]} -t UTF-8" in out


def test_created_only_label_set_names_its_line(tmp_path: Path) -> None:
    """A label set with only a `_created` sample was noted at line 0, a line no file has."""
    text = one_scrape()
    scrape = tmp_path / "created.prom"
    extra = 'vllm:spec_decode_num_drafts_created{engine="1",model_name="m"} 1.7e9\n'
    scrape.write_text(text + extra)
    code, out = spectally("import", "prometheus", str(scrape))
    assert code == ExitCode.OK, out
    at = len(text.splitlines()) + 1
    assert f'{scrape}:{at}: NOTE missing counters: scrape 1 {{engine="1",model_name="m"}}' in out
    assert f"{scrape}:0:" not in out


@pytest.mark.parametrize("twice", ["scrape", "position"])
def test_llamacpp_scrape_with_a_series_twice(tmp_path: Path, twice: str) -> None:
    """Two llama-server scrapes appended in one file (or a position given twice, as 1 and 01)
    kept the last value of each series without a word."""
    run = FIX / "llamacpp/noise05"
    text = Path(f"{run}.metrics.after").read_text()
    after = tmp_path / "after.txt"
    if twice == "scrape":
        after.write_text(Path(f"{run}.metrics.before").read_text() + text)
    else:
        line = next(t for t in text.splitlines() if 'position="1"' in t)
        after.write_text(text + line.replace('position="1"', 'position="01"') + "\n")
    code, out = spectally(
        "import", "llamacpp", f"{run}.server.log", "--out", str(tmp_path / "steps.ndjson"),
        "--metrics-before", f"{run}.metrics.before", "--metrics-after", str(after),
    )  # fmt: skip
    assert code == ExitCode.BAD_INPUT, out
    assert out.startswith(f"{after}:") and "appears twice (first at line" in out
