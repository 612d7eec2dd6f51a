"""Importers for what stock vLLM already emits: Prometheus scrapes, the periodic
``SpecDecoding metrics:`` log line, and per-request spec-decode metrics. Each yields `Finding`s
with ``file:line`` and a verdict."""

from .findings import Finding, exit_code, render_findings

__all__ = ["Finding", "exit_code", "render_findings"]
