"""The step-log format, both ways: what a log is, how it is read, and how it is written.

A step log is NDJSON (spec/STEP_LOG.md): a header, one record per engine event or step, and a
closing totals record. This package is the bottom of the bridge; every stage above reads logs
through it and it imports nothing of the bridge.

- ``schema``: the record defined once (kinds, field and outcome names, ``Record``) and one
  constructor per record kind, which every producer of logs calls; ``typed``: the same
  records as msgspec structs (the columnar judge's decoder);
- ``source``: bytes in (plain or gzip, seekable or a pipe), lines out, with the input checks;
- ``limits``: the input limits every reader applies before allocating;
- ``records``: one line parsed and checked against the schema (``parse_line``, ``BadInput``);
- ``header``: the header as the replay reads it (``Header``) and the profile it names
  (``profile_for``); ``delivered``: the ``delivered`` rule and vLLM's accepted count, shared by
  both judges;
- ``translate``: records into reference events, by counting profile (the reference replay's
  only; a log the columnar checker settles never imports it, nor the reference machine);
- ``profiles``: which profile reads which engine release (``resolve``, ``check_profile``),
  with ``release_pin`` and ``release_pin.json`` pinning each release's counting source;
- ``writer``: the recorder's side, whole-line appends in step order and the totals record
  (``StepLogWriter``, ``StepOrderBuffer``, ``totals_record``).

``__all__`` below is what code outside the package imports.
"""

from __future__ import annotations

from .header import Header
from .profiles import check_profile, resolve
from .records import BadInput, Record, parse_line
from .source import iter_lines
from .writer import StepLogWriter, StepOrderBuffer, append_record, totals_record

__all__ = [
    "BadInput",
    "Header",
    "Record",
    "StepLogWriter",
    "StepOrderBuffer",
    "append_record",
    "check_profile",
    "iter_lines",
    "parse_line",
    "resolve",
    "totals_record",
]
