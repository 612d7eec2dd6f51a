"""`spectally explain`: each kind of file named with its engine, layout, record kind, the
command that checks it and the RFC meaning of its numbers; unknown input is exit 2.

The inputs are the repository's real captures (vLLM 0.32 and llama-server logs, scrapes,
responses, step logs) and the public pastes the importers' tests cite.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest
from click.testing import CliRunner
from spectally.cli import main

FIX = Path(__file__).parent.parent / "fixtures"


def explain(*paths: str) -> tuple[int, str]:
    res = CliRunner().invoke(main, ["explain", *paths])
    return res.exit_code, res.output


@pytest.mark.parametrize(
    ("path", "engine", "kind", "command"),
    [
        (FIX / "vllm/serve-ngram-k3.log", "vLLM", "server log", "import logs"),
        (FIX / "llamacpp/same.server.log", "llama.cpp", "llama-server log", "import llamacpp"),
        (FIX / "llamacpp/same.metrics.after", "llama.cpp", "Prometheus scrape", "--metrics-after"),
        (FIX / "llamacpp/same.responses.json", "llama.cpp", "responses", "--responses"),
        (FIX / "llamacpp/same.steps.ndjson.gz", "llama.cpp 0.5.0-dev", "step log", "replay"),
    ],
)
def test_real_files_are_explained(path: Path, engine: str, kind: str, command: str) -> None:
    code, out = explain(str(path))
    assert code == 0, out
    head = out.splitlines()[0]
    assert kind in head and f"of {engine}" in head, out
    assert command in out and "in the RFC's terms" in out
    if engine == "vLLM":  # recognised by `import logs`' own parser, not by a fallback
        from spectally.engine_bridge.importers import logs

        layout = logs.read_lines(str(path))[0].layout
        assert f"layout: {layout.name} ({layout.versions})" in out


def test_traced_and_untraced_llamacpp_logs_differ(tmp_path: Path) -> None:
    code, out = explain(str(FIX / "llamacpp/same.server.log"))
    assert "LLAMA_TRACE=1 lines" in out and "cannot check" not in out
    # ggml-org/llama.cpp#24536's paste: summaries only, no traces
    log = tmp_path / "summary.log"
    log.write_text(
        "0.06.896.015 I slot print_timing: id  1 | task 0 | draft acceptance = 0.64479 (  167"
        " accepted /   259 generated), mean acceptance length =  2.92, acceptance rate per"
        " position = (0.805, 0.632, 0.483)\n"
    )
    code, out = explain(str(log))
    assert code == 0 and "ggml-org/llama.cpp#24536" in out
    assert "cannot check: single steps: run llama-server with LLAMA_TRACE=1" in out


def test_sglang_and_trtllm_records(tmp_path: Path) -> None:
    meta = tmp_path / "meta.json"
    meta.write_text(json.dumps([{"meta_info": {"spec_verify_ct": 43, "spec_accept_rate": 0.29}}]))
    code, out = explain(str(meta))
    assert code == 0 and "of SGLang" in out and "configured draft slots" in out
    log = tmp_path / "sgl.log"
    log.write_text(
        "[DP0 TP0] Decode batch, accept len: 2.20, accept rate: 0.73, cuda graph: True\n"
    )
    code, out = explain(str(log))
    assert code == 0 and "server log of SGLang" in out and "not accepted / drafted" in out
    gauges = tmp_path / "sgl.prom"
    gauges.write_text('sglang:spec_accept_length{m="x"} 3.4\n')
    code, out = explain(str(gauges))
    assert code == 0 and "last logging interval" in out
    stats = tmp_path / "trt.ndjson.gz"
    stats.write_bytes(gzip.compress(json.dumps({"iter": 3, "specDecodingStats": {}}).encode()))
    code, out = explain(str(stats))
    assert code == 0 and "of TensorRT-LLM" in out and "read in source, not run" in out


@pytest.mark.parametrize("name", ["ray_vllm:spec_decode_", "ray_vllm_spec_decode_"])
def test_ray_prefixed_vllm_scrape(tmp_path: Path, name: str) -> None:
    f = tmp_path / "ray.prom"
    f.write_text(f'{name}num_drafts_total{{ReplicaId="r1"}} 5.0\n')
    code, out = explain(str(f))
    assert code == 0 and "served through Ray" in out and f"{name}* counters" in out


@pytest.mark.parametrize("content", ["", "hello\nworld\n", '{"a": 1}\n'])
def test_unknown_input_is_exit_2(tmp_path: Path, content: str) -> None:
    f = tmp_path / "x"
    f.write_text(content)
    code, out = explain(str(f))
    assert code == 2 and f"{f}:1:1:" in out


def test_several_files_and_json(tmp_path: Path) -> None:
    bad = tmp_path / "bad"
    bad.write_text("nothing\n")
    res = CliRunner().invoke(
        main, ["explain", "--json", str(FIX / "llamacpp/same.metrics.after"), str(bad)]
    )
    assert res.exit_code == 2
    data = json.loads(res.stdout)
    assert [d["engine"] for d in data] == ["llama.cpp"]


@pytest.mark.parametrize(
    ("path", "layout"),
    [
        (
            FIX / "vllm/serve-draft-noise05-k3-so-json.requests.jsonl",
            "metrics.speculative_decoding",
        ),
        (FIX / "llamacpp/noise05.responses.json", "timings.draft_n"),
    ],
)
def test_request_files_read_past_a_record_without_spec_fields(path: Path, layout: str) -> None:
    """What `import requests` and `import llamacpp --responses` read is explained, also where
    the first record has no spec-decode fields (vLLM's per-request metrics were refused as
    unknown JSON; a llama-server response that drafted nothing came first)."""
    code, out = explain(str(path))
    assert code == 0, out
    assert f"layout: {layout}" in out
    if "vllm" in path.parts:
        assert out.splitlines()[0].endswith("per-request spec-decode metrics (JSON) of vLLM")
        assert "check it with: spectally import requests FILE" in out


def test_bom_json_is_read(tmp_path: Path) -> None:
    """A UTF-8 byte-order mark before JSON (every reader drops it) hid the JSON from explain."""
    f = tmp_path / "bom.json"
    f.write_bytes(b"\xef\xbb\xbf" + (FIX / "llamacpp/noise05.responses.json").read_bytes())
    code, out = explain(str(f))
    assert code == 0, out
    assert "per-request responses (JSON) of llama.cpp" in out


def test_a_json_dump_on_one_line_past_the_line_limit(tmp_path: Path) -> None:
    """vLLM's per-request metrics dumped on one line (json.dump, ~1.4 MB): what `import
    requests` reads whole, explain refused as a line over the line limit."""
    source = FIX / "vllm/serve-draft-noise05-k3-so-json.requests.jsonl"
    items = [json.loads(line) for line in source.read_text().splitlines() if line.strip()]
    f = tmp_path / "results.json"
    f.write_text(json.dumps(items * (1 + (1 << 20) // len(source.read_bytes()))))
    assert f.stat().st_size > 1 << 20
    code, out = explain(str(f))
    assert code == 0, out
    assert out.splitlines()[0].endswith("per-request spec-decode metrics (JSON) of vLLM")


@pytest.mark.parametrize("extra", [0, 1])
def test_a_line_at_and_past_the_line_limit(tmp_path: Path, extra: int) -> None:
    """A line of exactly the limit is read (it was refused one byte early); one byte more is
    refused, where the line is not JSON."""
    from spectally.engine_bridge.steplog.limits import MAX_LINE_BYTES

    f = tmp_path / "long.log"
    f.write_bytes(b"x" * (MAX_LINE_BYTES + extra) + b"\n")
    code, out = explain(str(f))
    assert code == 2, out
    assert ("line longer than" in out) == bool(extra), out
