"""Start-up, checked by structure rather than by time: which heavy modules a fresh process
imports for a command. (benchmarks/bench_startup.py measures the cost as ratios.)

* the command line (``--help``, ``step``, every ``--help`` of a lazily loaded command) imports
  none of numba, numpy, msgspec, jsonschema;
* a replay of a log under `dispatch.REFERENCE_MAX_BYTES` imports neither numpy nor msgspec (the
  reference replay judges it directly), nor, its records valid, jsonschema;
* a replay of a log below `reader.JIT_MIN_LOG_BYTES` does not import numba (its import and the
  kernels' loading cost more than the compiled scanner saves on such a log);
* a replay through numpy starts no OpenBLAS worker thread (it would spin for work that never
  comes).

Each check runs in a fresh interpreter with the production thresholds (tests/conftest.py lowers
them in this process).
"""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from spectally.engine_bridge import synth
from spectally.engine_bridge.fleet import local
from spectally.engine_bridge.replay import dispatch
from spectally.engine_bridge.replay.columnar import jit, reader, scanner
from spectally.engine_bridge.replay.options import ReplayOptions
from spectally.engine_bridge.steplog import source

# The production thresholds, read at import (before conftest's fixture lowers them).
SCAN_MIN_BYTES, JIT_MIN_LOG_BYTES = scanner.MIN_BYTES, reader.JIT_MIN_LOG_BYTES
REFERENCE_MAX_BYTES = dispatch.REFERENCE_MAX_BYTES
HEAVY = ("numba", "numpy", "msgspec", "jsonschema")
LOG = Path(__file__).parents[1] / "fixtures" / "vllm" / "ngram-k3-greedy.ndjson.gz"
PROBE = """
import json, sys
from spectally.commands import main
try:
    main(sys.argv[1:], standalone_mode=True)
except SystemExit:
    pass
print(json.dumps(sorted(m for m in {heavy!r} if m in sys.modules)), file=sys.stderr)
"""


def heavy_modules(*args: str, heavy: tuple[str, ...] = HEAVY) -> list[str]:
    done = subprocess.run(
        [sys.executable, "-c", PROBE.format(heavy=heavy), *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    loaded: list[str] = json.loads(done.stderr.strip().splitlines()[-1])
    return loaded


@pytest.mark.parametrize(
    "args",
    [
        ["--help"],
        ["step", "--mode", "sync", "--proposed", "3", "--accepted", "1"],
        ["replay", "--help"],
        ["import", "logs", "--help"],
        ["import", "requests", "--help"],
    ],
    ids=" ".join,
)
def test_the_command_line_imports_nothing_heavy(args: list[str]) -> None:
    assert heavy_modules(*args) == []


def test_a_small_replay_does_not_import_numba(tmp_path: Path) -> None:
    """A 1.4 MB log: chunks over the scanner's own threshold (scanner.MIN_BYTES, 1 MiB), the
    whole log under the one that repays numba's import."""
    log = tmp_path / "log.ndjson"
    log.write_bytes(b"".join(synth.lines(8000, batch=8, seed=1)))
    assert SCAN_MIN_BYTES < log.stat().st_size < JIT_MIN_LOG_BYTES
    loaded = heavy_modules("replay", str(log))
    assert "numpy" in loaded and "numba" not in loaded  # the columnar path ran, uncompiled
    assert "jsonschema" not in loaded  # a valid header and totals: no validator


MACHINE = (
    "spectally.reference.machine",
    "spectally.reference.events",
    "spectally.engine_bridge.steplog.translate",
    "spectally.engine_bridge.replay.reference_replay",
    "numpy.typing",
)


def test_a_columnar_replay_that_agrees_never_loads_the_reference_machine(tmp_path: Path) -> None:
    """The columnar checker evaluates the step rules over arrays; the reference machine, its
    events and the translation into them load only for a log it hands to the reference
    replay (and numpy.typing, for annotations, never)."""
    log = tmp_path / "log.ndjson"
    log.write_bytes(b"".join(synth.varied.lines(2000, seed=1, preempt_share=0.05)))
    assert log.stat().st_size > REFERENCE_MAX_BYTES
    assert heavy_modules("replay", str(log), heavy=(*MACHINE, "numpy")) == ["numpy"]
    bad = tmp_path / "bad.ndjson"  # one count changed: the reference replay writes the report
    bad.write_bytes(log.read_bytes().replace(b'"accepted":0,', b'"accepted":9,', 1))
    assert heavy_modules("replay", str(bad), heavy=MACHINE) == sorted(MACHINE[:4])


RUN = """
import json, sys
from spectally.commands import main
from spectally.engine_bridge.replay.columnar import reader
reader.JIT_MIN_LOG_BYTES = int(sys.argv[1])
try:
    main(sys.argv[2:], standalone_mode=True)
except SystemExit as exc:
    code = exc.code
print(json.dumps([code, "numba" in sys.modules]), file=sys.stderr)
"""


def test_restart_logs_that_repay_numba_together_load_it_though_no_log_does(
    tmp_path: Path,
) -> None:
    """Restart logs, each under `reader.JIT_MIN_LOG_BYTES`, replayed by one process in one run
    (`ReplayOptions.run_bytes`) load the compiled scanner once the run repays it, as one long
    log of their size does; one of them alone does not."""
    logs = []
    for seed in range(3):
        log = tmp_path / f"restart-{seed}.ndjson"
        log.write_bytes(b"".join(synth.lines(8000, batch=8, seed=seed)))
        logs.append(str(log))
    sizes = [Path(log).stat().st_size for log in logs]
    threshold = sum(sizes) - 1  # the run repays it; no log, nor two of them, does

    def run(*paths: str) -> list[Any]:
        done = subprocess.run(
            [sys.executable, "-c", RUN, str(threshold), "replay", "--jobs", "1", *paths],
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        result: list[Any] = json.loads(done.stderr.strip().splitlines()[-1])
        return result

    assert max(sizes) < threshold
    assert run(logs[0]) == [0, False]
    assert run(*logs[:2]) == [0, False]
    assert run(*logs) == [0, True]


def test_each_worker_is_told_its_share_of_the_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With --jobs N, each worker process replays about 1/N of the run's bytes: that share is
    what decides numba there (the pool itself is tests/fleet's)."""
    logs = []
    for seed in range(3):
        log = tmp_path / f"restart-{seed}.ndjson.gz"
        log.write_bytes(gzip.compress(b"".join(synth.lines(500, seed=seed))))
        logs.append(str(log))
    shipped: list[ReplayOptions] = []

    def pooled(paths: Any, shippable: Any, here: Any, options: ReplayOptions, jobs: int) -> Any:
        shipped.append(options)
        return iter([(i, None) for i in range(len(paths))])

    monkeypatch.setattr(local, "_pooled", pooled)
    list(local.replay_local(logs, ReplayOptions(), jobs=2))
    total = sum(source.log_bytes(log) or 0 for log in logs)  # decompressed
    assert total > sum(Path(log).stat().st_size for log in logs)
    assert [o.run_bytes for o in shipped] == [total // 2]
    list(local.replay_local(logs, ReplayOptions(run_bytes=7), jobs=2))
    assert shipped[-1].run_bytes == 7  # a caller's figure is kept


def test_a_tiny_replay_imports_neither_numpy_nor_msgspec() -> None:
    """A log under `dispatch.REFERENCE_MAX_BYTES` goes to the reference replay directly."""
    assert (source.log_bytes(str(LOG)) or 0) < REFERENCE_MAX_BYTES
    assert heavy_modules("replay", str(LOG)) == []  # the header checked without jsonschema


def test_log_bytes_reads_a_gzip_files_length(tmp_path: Path) -> None:
    plain = gzip.decompress(LOG.read_bytes())
    assert source.log_bytes(str(LOG)) == len(plain)
    (tmp_path / "x.ndjson").write_bytes(plain)
    assert source.log_bytes(str(tmp_path / "x.ndjson")) == len(plain)
    assert source.log_bytes("-") is None


def test_kernels_are_not_compiled_while_not_allowed() -> None:
    """`jit.allowed(False)` declines without deciding: a later, larger log may compile."""
    space: dict[str, Any] = {"__name__": "spectally-test-module"}
    with jit.allowed(False):
        assert jit.compile_kernels(space, {}, ()) is False
    assert "spectally-test-module" not in jit._compiled
    assert list(space) == ["__name__"]


THREADS = """
import os, sys
from spectally.commands import main
try:
    main(sys.argv[1:], standalone_mode=True)
except SystemExit:
    pass
print(len(os.listdir("/proc/self/task")), "numpy" in sys.modules, file=sys.stderr)
"""


@pytest.mark.skipif(not os.path.isdir("/proc/self/task"), reason="threads counted in /proc")
@pytest.mark.parametrize("preset", [None, "2"])
def test_a_replay_starts_no_blas_thread(preset: str | None, tmp_path: Path) -> None:
    """numpy's wheels load OpenBLAS, whose worker threads (one per core) spin waiting for
    work that no command gives them; the command line asks for none, unless the environment
    names a count itself (then OpenBLAS starts its own threads, on a machine of 2+ cores)."""
    log = tmp_path / "log.ndjson"
    log.write_bytes(b"".join(synth.lines(2000, seed=1)))
    env = {k: v for k, v in os.environ.items() if k != "OPENBLAS_NUM_THREADS"}
    if preset is not None:
        env["OPENBLAS_NUM_THREADS"] = preset
    done = subprocess.run(
        [sys.executable, "-c", THREADS, "replay", str(log)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env=env,
    )
    threads, numpy = done.stderr.split()[-2:]
    assert numpy == "True"  # the columnar checker ran
    if preset is None:
        assert threads == "1"
    elif (os.cpu_count() or 1) > 1:
        assert int(threads) > 1
