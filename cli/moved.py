"""The module paths that moved, and where each one is now.

A dotted path that a doc, a log header or an earlier layout named keeps importing: `MOVED`
maps every module path that no longer exists to the module that holds its code now, and
`install` puts `MovedFinder` at the end of ``sys.meta_path`` (``spectally/__init__.py`` does,
so any ``spectally.*`` import sets it up). An import of an old path returns the current module
itself (one module object, one set of classes), and ``python -m OLD`` runs the current module
as ``__main__``. Old paths that are attributes, not modules, are kept by the package that held
them (``spectally.engine_bridge.vllm.recorder.RecordingScheduler``); the short public paths are
in `spectally.vllm`.

A path stays here for good: removing one breaks whoever still names it. The finder answers only
for these names and only after every other finder found nothing, so a real module at an old
path wins. This module imports nothing of spectally.
"""

from __future__ import annotations

import importlib
import importlib.machinery
import sys
from types import CodeType, ModuleType
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from importlib.abc import Loader
else:
    Loader = object  # see _MovedLoader

_BRIDGE = "spectally.engine_bridge"
_VLLM = f"{_BRIDGE}.vllm"
_COLUMNAR = f"{_BRIDGE}.replay.columnar"
# the columnar judge's modules, once named with a ``col`` prefix inside a ``columnar`` package
_COL_PREFIXED = {
    "colblocks": "blocks",
    "colbytes": "key_bytes",
    "colkeys": "hashing",
    "colread": "reader",
    "colscan": "scanner",
    "colseq": "sequence",
    "colstore": "store",
}

# old path -> current path: the commands before they shared one package, the bridge's flat
# modules before it was arranged by stage, and the columnar judge's modules before their names
# lost the ``col`` prefix.
MOVED: dict[str, str] = {
    "spectally.cli": "spectally.commands",
    "spectally.compare": "spectally.commands.compare",
    "spectally.explain": "spectally.commands.explain",
    "spectally.import_engines": "spectally.commands.import_engines",
    "spectally.import_llamacpp": "spectally.commands.import_llamacpp",
    "spectally.observe_cli": "spectally.commands.observe",
    "spectally.parity": "spectally.commands.parity",
    "spectally.proofs.cli": "spectally.commands.prove",
    "spectally.spec.vectors_cli": "spectally.commands.vectors",
    f"{_BRIDGE}.cli": "spectally.commands.replay",
    "spectally.comparison": f"{_BRIDGE}.compare.engines",
    f"{_BRIDGE}.parity": f"{_BRIDGE}.compare.parity",
    f"{_BRIDGE}.version_diff": f"{_BRIDGE}.compare.version_diff",
    f"{_BRIDGE}.array_arith": f"{_COLUMNAR}.array_arith",
    f"{_BRIDGE}.jit": f"{_COLUMNAR}.jit",
    f"{_BRIDGE}.columnar": f"{_COLUMNAR}.judge",
    f"{_COLUMNAR}.columnar": f"{_COLUMNAR}.judge",
    **{f"{_BRIDGE}.{old}": f"{_COLUMNAR}.{new}" for old, new in _COL_PREFIXED.items()},
    **{f"{_COLUMNAR}.{old}": f"{_COLUMNAR}.{new}" for old, new in _COL_PREFIXED.items()},
    f"{_BRIDGE}.accounts": f"{_BRIDGE}.replay.accounts",
    f"{_BRIDGE}.reference_replay": f"{_BRIDGE}.replay.reference_replay",
    f"{_BRIDGE}.report": f"{_BRIDGE}.replay.report",
    **{
        f"{_BRIDGE}.{name}": f"{_BRIDGE}.steplog.{name}"
        for name in ("limits", "profiles", "records", "release_pin", "source", "translate")
    },
    f"{_BRIDGE}.fleet_ray": f"{_BRIDGE}.fleet.ray",
    f"{_BRIDGE}.fleet_report": f"{_BRIDGE}.fleet.report",
    f"{_BRIDGE}.synth_varied": f"{_BRIDGE}.synth.varied",
    **{
        f"{_VLLM}.{name}": f"{_VLLM}.capture.{name}"
        for name in (
            "async_sim",
            "counting_source",
            "engine033",
            "env",
            "fixtures",
            "scenarios",
            "serve_capture",
            "sim_scheduler",
            "sim_so",
            "soak",
            "sources",
            "tiny_models",
        )
    },
    **{
        f"{_VLLM}.{name}": f"{_VLLM}.recorder.{name}"
        for name in ("backport", "cpu_async", "cpu_kernel_fix", "gpu_worker", "recording")
    },
    f"{_VLLM}.steplog": f"{_BRIDGE}.steplog.writer",
}


# At run time a plain class, not a subclass of importlib.abc.Loader: the import system calls
# these methods by name, and importing importlib.abc costs every spectally process
# importlib.resources, tempfile and shutil (tens of ms of start-up).
class _MovedLoader(Loader):
    """Loads an old path as the current module itself; runs it under ``python -m``."""

    def __init__(self, current: str) -> None:
        self.current = current
        self.own_spec: importlib.machinery.ModuleSpec | None = None

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        module = importlib.import_module(self.current)
        self.own_spec = module.__spec__
        return module

    def exec_module(self, module: ModuleType) -> None:
        # The import system gave the module the old path's spec; it keeps its own.
        module.__spec__ = self.own_spec

    def get_code(self, fullname: str) -> CodeType:
        """``python -m OLD``: run the current module as ``__main__`` (runpy asks for this)."""
        source = (
            "import runpy\n"
            f"runpy.run_module({self.current!r}, run_name='__main__', alter_sys=True)\n"
        )
        return compile(source, f"<{fullname}: moved to {self.current}>", "exec")


class MovedFinder:
    """Finds the old paths of `MOVED`, and nothing else."""

    def find_spec(
        self,
        fullname: str,
        path: object = None,
        target: ModuleType | None = None,
    ) -> importlib.machinery.ModuleSpec | None:
        current = MOVED.get(fullname)
        if current is None:
            return None
        return importlib.machinery.ModuleSpec(fullname, _MovedLoader(current))


def install() -> None:
    """Put `MovedFinder` last on ``sys.meta_path`` (once)."""
    if not any(isinstance(finder, MovedFinder) for finder in sys.meta_path):
        sys.meta_path.append(MovedFinder())
