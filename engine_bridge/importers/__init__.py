"""Importers for what stock vLLM already emits: Prometheus scrapes (Ray Serve's names
included), the periodic spec-decode log line in every layout from V0 to 0.34 (`log_layouts`), and
per-request spec-decode metrics. Each yields `Finding`s with ``file:line`` and a verdict."""

from .findings import Finding, exit_code, render_findings

__all__ = ["Finding", "exit_code", "render_findings"]
