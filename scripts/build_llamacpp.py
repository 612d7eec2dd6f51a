"""Build llama.cpp's ``llama-server`` from the ``llama-cpp-python`` source package.

The sdist of ``llama-cpp-python==0.3.36`` on PyPI vendors llama.cpp under ``vendor/llama.cpp``.
This script fetches that sdist from the simple page of the package indexes pip is configured
with (``sources.find_on_index``: pip's configuration names the index, this code names no host),
checks its sha256, unpacks it, builds only ``llama-server`` with cmake (no curl, no OpenSSL,
no web UI: with the prebuilt UI on, cmake tries to download it). The tree's
``convert_hf_to_gguf.py`` and its ``gguf-py`` package stay in the unpacked source
(engine_bridge/llamacpp/gguf_models.py puts them on the path). Everything lands under
``${SPECTALLY_LLAMACPP_DIR:-~/.cache/spectally/llamacpp-0.3.36}``; a marker file makes a second
run a no-op. It takes about 11 minutes on two cores; run it outside any test timeout:

    nice -n 5 python3 scripts/build_llamacpp.py          # prints progress, then the paths
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import shutil
import subprocess
import sys
import tarfile
import time
import urllib.request
from pathlib import Path

VERSION = "0.3.36"
SDIST = f"llama_cpp_python-{VERSION}.tar.gz"
SHA256 = "832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e"
CMAKE_FLAGS = (
    "-DCMAKE_BUILD_TYPE=Release",
    "-DLLAMA_CURL=OFF",
    "-DLLAMA_OPENSSL=OFF",
    "-DLLAMA_BUILD_UI=OFF",
    "-DLLAMA_USE_PREBUILT_UI=OFF",
    "-DLLAMA_BUILD_TESTS=OFF",
    "-DLLAMA_BUILD_EXAMPLES=OFF",
    "-DBUILD_SHARED_LIBS=OFF",
)
MARKER = ".built"


def cache_dir() -> Path:
    """The build's home: ``$SPECTALLY_LLAMACPP_DIR`` or ``~/.cache/spectally/llamacpp-0.3.36``."""
    env = os.environ.get("SPECTALLY_LLAMACPP_DIR")
    return Path(env) if env else Path.home() / ".cache" / "spectally" / f"llamacpp-{VERSION}"


def say(msg: str) -> None:
    print(f"[build_llamacpp {time.strftime('%H:%M:%S')}] {msg}", flush=True)


def sdist_url() -> str:
    """The sdist's address on the package indexes pip reads (standard library only, like this
    script: ``engine_bridge/vllm/capture/sources.py`` is loaded by path)."""
    path = Path(__file__).resolve().parents[1] / "engine_bridge" / "vllm" / "capture" / "sources.py"
    spec = importlib.util.spec_from_file_location("spectally_sources", path)
    assert spec is not None and spec.loader is not None
    sources = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(sources)
    return str(sources.find_on_index("llama-cpp-python", SDIST))


def fetch(root: Path) -> Path:
    """Download and check the sdist once; return its path."""
    dest = root / SDIST
    if dest.exists() and hashlib.sha256(dest.read_bytes()).hexdigest() == SHA256:
        return dest
    say(f"downloading {SDIST}")
    part = dest.with_suffix(".part")
    with urllib.request.urlopen(sdist_url(), timeout=300) as resp, part.open("wb") as out:
        shutil.copyfileobj(resp, out)
    got = hashlib.sha256(part.read_bytes()).hexdigest()
    if got != SHA256:
        raise SystemExit(f"{SDIST}: sha256 {got}, expected {SHA256}")
    part.rename(dest)
    return dest


def unpack(root: Path, sdist: Path) -> Path:
    """Unpack the sdist; return the vendored llama.cpp tree."""
    src = root / f"llama_cpp_python-{VERSION}" / "vendor" / "llama.cpp"
    if not src.exists():
        say("unpacking")
        with tarfile.open(sdist) as tar:
            tar.extractall(root, filter="data")
    return src


def run(cmd: list[str], cwd: Path | None = None) -> None:
    say("$ " + " ".join(cmd))
    subprocess.run(cmd, cwd=cwd, check=True)


def build(root: Path) -> Path:
    """Build ``llama-server``; return its path."""
    src = unpack(root, fetch(root))
    bld = root / "build"
    run(["cmake", "-S", str(src), "-B", str(bld), "-G", "Ninja", *CMAKE_FLAGS])
    jobs = os.environ.get("SPECTALLY_LLAMACPP_JOBS", "2")
    run(["cmake", "--build", str(bld), "--target", "llama-server", "-j", jobs])
    return bld / "bin" / "llama-server"


def main() -> int:
    root = cache_dir()
    root.mkdir(parents=True, exist_ok=True)
    marker = root / MARKER
    if marker.exists():
        say(f"already built: {marker.read_text().strip()}")
        return 0
    t0 = time.monotonic()
    server = build(root)
    marker.write_text(f"{server}\n")
    say(f"llama-server at {server} ({time.monotonic() - t0:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
