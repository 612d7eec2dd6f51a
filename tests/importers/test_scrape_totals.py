"""The captures' totals record comes from the one Prometheus reader (`importers.prometheus`):
the last scrape of each committed serve fixture gives the totals record its log ends with."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest
from spectally.engine_bridge.vllm.capture.serve_capture import _totals_from_scrape

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "vllm"
SERVED = sorted(FIXTURES.glob("serve-*.prom"))


def _last_scrape(text: str) -> str:
    """A concatenation of scrapes: the last one starts where the file's first line repeats."""
    first = text.splitlines(keepends=True)[0]
    return text[text.rindex(first) :]


@pytest.mark.parametrize("prom", SERVED, ids=lambda p: p.stem)
def test_the_last_scrape_gives_the_committed_totals_record(prom: Path) -> None:
    log = prom.with_name(prom.name.removesuffix(".prom") + ".ndjson.gz")
    last_line = gzip.decompress(log.read_bytes()).splitlines()[-1]
    committed = json.loads(last_line)
    text = prom.read_text()
    k = len(committed["num_accepted_tokens_per_pos"])
    assert _last_scrape(text) != text  # the fixture holds several scrapes
    got = _totals_from_scrape(_last_scrape(text), k)
    assert json.dumps(got, separators=(",", ":")).encode() == last_line


def test_every_scrape_of_a_text_is_summed_and_no_sample_reads_zero() -> None:
    text = _last_scrape(SERVED[0].read_text())
    once = _totals_from_scrape(text, 3)
    twice = _totals_from_scrape(text + text, 3)
    assert twice["num_drafts"] == 2 * once["num_drafts"] > 0
    assert twice["num_accepted_tokens_per_pos"] == [
        2 * n for n in once["num_accepted_tokens_per_pos"]
    ]
    assert _totals_from_scrape("", 2)["num_accepted_tokens_per_pos"] == [0, 0]
