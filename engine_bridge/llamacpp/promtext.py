"""llama-server's /metrics text: the speculative counters, and their change over a run.

``server_task_result_metrics::to_metrics`` (tools/server/server-task.cpp) writes each counter
as ``llamacpp:<name> <value>`` with the value streamed from a ``double`` (so a large count may
read ``1.2e+06``), and the per-position counter, present once any request has verified a
draft, as ``llamacpp:spec_decode_num_accepted_tokens_per_pos_total{position="i"} <value>``.
Each ``llamacpp:spec_decode_*`` line is parsed by the bridge's one Prometheus reader
(`importers.prometheus.samples_of_line`, ``prometheus_client``'s parser), so an error names the
line it is on.
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass
from functools import partial

from ..importers.inputs import refuse_second
from ..importers.prometheus import samples_of_line
from ..steplog.limits import MAX_INT, MAX_K
from ..steplog.source import BadInput, iter_text_lines

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


def _twice(name: str, first: int) -> str:
    return (
        f"{name} appears twice (first at line {first}): one value would hide the other; give"
        " one /metrics scrape per file (two appended together?)"
    )


def read(path: str) -> SpecCounters:
    """The speculative counters of one /metrics scrape (exit 2 naming file:line if bad)."""
    values: dict[str, tuple[float, int]] = {}
    per_pos: dict[int, tuple[float, int]] = {}
    first_pos_line = 1
    seen: dict[Hashable, int] = {}  # each series and the line of its sample
    # plain, gzip or -, bounded lines, strict UTF-8; each llamacpp:spec_decode_* sample line
    # parsed by the shared Prometheus reader, so every value keeps its line
    for lineno, raw in iter_text_lines(path):
        line = raw.strip()
        if not line.startswith(PREFIX):
            continue
        for sample in samples_of_line(path, lineno, line):
            name = sample.name[len(PREFIX) :].removesuffix("_total")
            labels = dict(sample.labels)
            if labels.get("position", "").strip().lstrip("-").isdigit():  # "01" is position 1
                labels["position"] = str(int(labels["position"]))
            refuse_second(
                seen,
                (sample.name, tuple(sorted(labels.items()))),
                path,
                lineno,
                partial(_twice, sample.name),
            )
            if name == PER_POS:
                first_pos_line = first_pos_line if per_pos else lineno
                position = sample.labels.get("position", "")
                try:
                    per_pos[int(position)] = (sample.value, lineno)
                except ValueError:
                    raise BadInput(
                        path, lineno, 1, f"position {position[:20]!r} is not a number"
                    ) from None
            elif name in COUNTERS:
                values[name] = (sample.value, lineno)
    missing = [c for c in COUNTERS if c not in values]
    if missing:
        raise BadInput(
            path, 1, 1, f"no {PREFIX}{missing[0]}_total: not a llama-server /metrics scrape"
        )
    counts = {c: _count(path, values[c][1], values[c][0]) for c in COUNTERS}
    if len(per_pos) > MAX_K or (per_pos and sorted(per_pos) != list(range(len(per_pos)))):
        raise BadInput(path, first_pos_line, 1, "positions not 0..k-1")
    return SpecCounters(
        counts["num_drafts"],
        counts["num_draft_tokens"],
        counts["num_accepted_tokens"],
        tuple(_count(path, per_pos[i][1], per_pos[i][0]) for i in range(len(per_pos))),
    )
