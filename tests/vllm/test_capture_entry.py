"""The capture scripts' one entry (``python -m spectally.engine_bridge.vllm.capture VERB``) and
the Pythons a capture starts, without vLLM.

* Every verb names a module with a ``main``; no verb is the capture matrix, as before; the old
  module paths print what the verbs print.
* ``env.py`` and ``sources.py`` import only the standard library and run by path.
* A stray module in the caller's working folder or in the temporary folder (a ``/tmp/h2.py``
  once shadowed the ``h2`` package and broke the engine tier) cannot shadow anything in a
  Python the capture starts: each runs in a private empty folder with ``PYTHONSAFEPATH=1``.
"""

from __future__ import annotations

import ast
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from spectally.engine_bridge.vllm.capture import env
from spectally.engine_bridge.vllm.capture.__main__ import SCENARIOS, VERBS, main

CAPTURE = Path(env.__file__).resolve().parent
PACKAGE = "spectally.engine_bridge.vllm.capture"
STRAY = "import pathlib\npathlib.Path(__file__).with_name('SHADOWED').write_text('imported')\n"


def _python(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, *args], capture_output=True, text=True, cwd=cwd, timeout=120
    )


def test_every_verb_runs_a_module_main() -> None:
    import importlib

    for verb, (module, _) in VERBS.items():
        names = SCENARIOS.values() if verb == "sim" else [module]
        for name in names:
            assert callable(importlib.import_module(f"{PACKAGE}.{name}").main), (verb, name)


def test_no_verb_is_the_capture_matrix(tmp_path: Path) -> None:
    """``--out DIR`` with no verb, ``matrix``, and the old module path list the same runs."""
    listing = ["--out", str(tmp_path), "--list", "--quick"]
    outs = [
        _python("-m", PACKAGE, *listing, cwd=tmp_path),
        _python("-m", PACKAGE, "matrix", *listing, cwd=tmp_path),
        _python("-m", f"{PACKAGE}.capture", *listing, cwd=tmp_path),
    ]
    assert [p.returncode for p in outs] == [0, 0, 0], [p.stderr[-2000:] for p in outs]
    assert outs[0].stdout == outs[1].stdout == outs[2].stdout
    assert "ngram-k3-greedy" in outs[0].stdout.split()


def test_the_verbs_are_listed_and_a_wrong_one_is_a_usage_error(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["--help"]) == 0
    listed = capsys.readouterr().out
    assert all(f"  {verb} " in listed for verb in VERBS)
    assert main(["no-such-verb"]) == 2
    assert "unknown verb 'no-such-verb'" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exc:
        main(["sim", "--scenario", "nope"])
    assert exc.value.code == 2


@pytest.mark.parametrize(("verb", "old"), [("env", "env"), ("sim", "sim_so")])
def test_a_verb_and_its_old_module_path_take_the_same_options(
    tmp_path: Path, verb: str, old: str
) -> None:
    new = _python("-m", PACKAGE, verb, "--help", cwd=tmp_path)
    kept = _python("-m", f"{PACKAGE}.{old}", "--help", cwd=tmp_path)
    assert new.returncode == kept.returncode == 0, new.stderr + kept.stderr
    options = [line.split()[0] for line in kept.stdout.splitlines() if line.startswith("  -")]
    assert options and all(option in new.stdout for option in options)


@pytest.mark.parametrize("script", ["env.py", "sources.py"])
def test_env_and_sources_run_by_path_on_the_standard_library_alone(
    tmp_path: Path, script: str
) -> None:
    # -S: no site-packages at all; -I: no PYTHON* variables, no script folder on sys.path
    proc = _python("-S", "-I", str(CAPTURE / script), "--help", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "usage:" in proc.stdout


def _stray(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "h2.py").write_text(STRAY)
    return folder / "SHADOWED"


def test_a_stray_module_where_the_capture_starts_cannot_shadow_a_package(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    caller = tmp_path / "caller"
    temp = tmp_path / "temp"
    marks = [_stray(caller), _stray(temp)]
    monkeypatch.chdir(caller)  # the folder the capture is started from
    monkeypatch.setattr(tempfile, "tempdir", str(temp))  # and the temporary folder (/tmp)
    probe = "import importlib.util as u; s = u.find_spec('h2'); print(s and s.origin)"
    found = env.run_python([sys.executable, "-c", probe], capture_output=True, text=True)
    assert found.returncode == 0, found.stderr
    assert str(tmp_path) not in found.stdout, found.stdout  # h2 installed, or none at all
    proc = env.run_python([sys.executable, "-c", "import h2"], capture_output=True, text=True)
    assert not any(mark.exists() for mark in marks), proc.stderr


@pytest.mark.skipif(sys.version_info < (3, 11), reason="PYTHONSAFEPATH needs Python >= 3.11")
def test_safe_path_protects_even_a_python_started_in_the_strays_folder(tmp_path: Path) -> None:
    mark = _stray(tmp_path)
    proc = env.run_python(
        [sys.executable, "-c", "import h2"], cwd=tmp_path, capture_output=True, text=True
    )
    assert not mark.exists(), proc.stderr
    assert env.isolated({"A": "1"}) == {"A": "1", "PYTHONSAFEPATH": "1"}


def _spawns(path: Path) -> list[tuple[str, ast.Call]]:
    """(enclosing function, call) for each subprocess.run / subprocess.Popen in ``path``."""
    tree = ast.parse(path.read_text())
    found: list[tuple[str, ast.Call]] = []
    for fn in ast.walk(tree):
        if not isinstance(fn, ast.FunctionDef):
            continue
        for node in ast.walk(fn):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and isinstance(node.func.value, ast.Name)
                and node.func.value.id == "subprocess"
                and node.func.attr in ("run", "Popen")
            ):
                found.append((fn.name, node))
    return found


def test_every_python_a_capture_starts_is_isolated() -> None:
    """The capture modules start processes only through env.run_python / env.start_python.
    Not Pythons: engine033 runs `patch`; sources.py (standard library only, run by path) runs
    pip."""
    not_python = {"engine033.py", "sources.py"}
    bare = [
        f"{path.name}:{call.lineno} ({fn})"
        for path in sorted(CAPTURE.glob("*.py"))
        if path.name not in not_python
        for fn, call in _spawns(path)
        if not (path.name == "env.py" and fn in ("run_python", "start_python"))
    ]
    assert bare == [], f"not isolated: {bare}"
