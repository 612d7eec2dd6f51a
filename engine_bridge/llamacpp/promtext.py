"""llama-server's /metrics text: the speculative counters, and their change over a run.

``server_task_result_metrics::to_metrics`` (tools/server/server-task.cpp) writes each counter
as ``llamacpp:<name> <value>`` with the value streamed from a ``double`` (so a large count may
read ``1.2e+06``), and the per-position counter, present once any request has verified a
draft, as ``llamacpp:spec_decode_num_accepted_tokens_per_pos_total{position="i"} <value>``.
The text is parsed with ``prometheus_client``'s parser (already a dependency of the bridge).
"""

from __future__ import annotations

from dataclasses import dataclass

from ..steplog.limits import MAX_INT, MAX_K
from ..steplog.source import BadInput, read_text

PREFIX = "llamacpp:spec_decode_"
COUNTERS = ("num_drafts", "num_draft_tokens", "num_accepted_tokens")
PER_POS = "num_accepted_tokens_per_pos"


@dataclass(frozen=True)
class SpecCounters:
    num_drafts: int
    num_draft_tokens: int
    num_accepted_tokens: int
    per_pos: tuple[int, ...]

    def minus(self, before: SpecCounters) -> SpecCounters:
        k = max(len(self.per_pos), len(before.per_pos))
        pad = (0,) * k
        after_pos, before_pos = (self.per_pos + pad)[:k], (before.per_pos + pad)[:k]
        return SpecCounters(
            self.num_drafts - before.num_drafts,
            self.num_draft_tokens - before.num_draft_tokens,
            self.num_accepted_tokens - before.num_accepted_tokens,
            tuple(a - b for a, b in zip(after_pos, before_pos, strict=True)),
        )


ZERO = SpecCounters(0, 0, 0, ())


def _count(path: str, line: int, value: float) -> int:
    if not 0 <= value <= MAX_INT or value != int(value):
        raise BadInput(path, line, 1, f"a counter reads {value!r}, not a whole count")
    return int(value)


def _line_of(text: str, needle: str) -> int:
    for no, line in enumerate(text.splitlines(), start=1):
        if line.startswith(needle):
            return no
    return 1


def read(path: str) -> SpecCounters:
    """The speculative counters of one /metrics scrape (exit 2 naming file:line if bad)."""
    from prometheus_client.parser import text_string_to_metric_families

    text = read_text(path)  # plain, gzip or -, bounded lines, strict UTF-8
    values: dict[str, float] = {}
    per_pos: dict[int, float] = {}
    try:
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                if not sample.name.startswith(PREFIX):
                    continue
                name = sample.name[len(PREFIX) :].removesuffix("_total")
                if name == PER_POS:
                    per_pos[int(sample.labels["position"])] = sample.value
                elif name in COUNTERS:
                    values[name] = sample.value
    except (ValueError, KeyError, TypeError) as exc:
        raise BadInput(path, 1, 1, f"not Prometheus text: {exc}") from None
    missing = [c for c in COUNTERS if c not in values]
    if missing:
        raise BadInput(
            path, 1, 1, f"no {PREFIX}{missing[0]}_total: not a llama-server /metrics scrape"
        )
    counts = {c: _count(path, _line_of(text, f"{PREFIX}{c}_total"), values[c]) for c in COUNTERS}
    if len(per_pos) > MAX_K or (per_pos and sorted(per_pos) != list(range(len(per_pos)))):
        raise BadInput(path, _line_of(text, f"{PREFIX}{PER_POS}"), 1, "positions not 0..k-1")
    pos_line = _line_of(text, f"{PREFIX}{PER_POS}")
    return SpecCounters(
        counts["num_drafts"],
        counts["num_draft_tokens"],
        counts["num_accepted_tokens"],
        tuple(_count(path, pos_line, per_pos[i]) for i in range(len(per_pos))),
    )
