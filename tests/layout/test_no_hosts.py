"""The code names no package-index host: it asks pip where to look (pip's configuration,
``PIP_INDEX_URL`` included, else pip's own default)."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[2]
CODE = ("cli", "engine_bridge", "reference", "proofs", "spec", "scripts", "benchmarks", ".ci")
INDEX_HOSTS = re.compile(rb"pypi\.org|pythonhosted\.org|download\.pytorch\.org|npmjs\.(org|com)")


def test_no_package_index_host_in_the_code() -> None:
    named = [
        f"{path.relative_to(ROOT)}: {match.group().decode()}"
        for folder in CODE
        for path in sorted((ROOT / folder).rglob("*"))
        if path.is_file() and path.suffix in ("", ".py", ".sh", ".toml")
        for match in [INDEX_HOSTS.search(path.read_bytes())]
        if match
    ]
    assert not named, named


def _sources() -> ModuleType:
    path = ROOT / "engine_bridge" / "vllm" / "capture" / "sources.py"
    spec = importlib.util.spec_from_file_location("sources_by_path", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_index_is_the_one_pip_is_configured_with(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PIP_INDEX_URL", "file:///nowhere/simple")
    monkeypatch.setenv("PIP_EXTRA_INDEX_URL", "file:///elsewhere/simple")
    indexes = _sources().pip_indexes()
    assert indexes[0] == "file:///nowhere/simple"
    assert "file:///elsewhere/simple" in indexes


def test_a_project_is_found_on_a_local_index(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    page = tmp_path / "simple" / "demo" / "index.html"
    page.parent.mkdir(parents=True)
    page.write_text('<a href="../../files/demo-1.0.tar.gz#sha256=00">demo-1.0.tar.gz</a>')
    monkeypatch.setenv("PIP_INDEX_URL", (tmp_path / "simple").as_uri())
    monkeypatch.setenv("PIP_EXTRA_INDEX_URL", "")
    found = _sources().find_on_index("demo", "demo-1.0.tar.gz")
    assert found == (tmp_path / "files" / "demo-1.0.tar.gz").as_uri() + "#sha256=00"
