"""A data-parallel fleet built from real single-engine recordings (NOT a real DP run).

Two real vLLM 0.32 online-serving logs recorded on this CPU (tests/fixtures/vllm/serve-*), each
from a single engine core (engine_index 0), are relabelled as the logs of engine cores 0 and 1,
and the last Prometheus scrape of each run is combined into one scrape in which each run's
series carry its engine's ``engine`` label, as one API server of a data-parallel deployment
exports them. Every count stays what the real engines produced; only the engine label and the
header's engine_index are rewritten (the header's config says so).

    python tests/fleet_dp.py OUT_DIR     # writes engine0.ndjson.gz, engine1.ndjson.gz, dp.prom
"""

from __future__ import annotations

import gzip
import json
import sys
from pathlib import Path

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "vllm"
RUNS = ("serve-draft-noise05-k3", "serve-draft-noise05-k3-so-json")
FIRST_FAMILY = "# HELP vllm:spec_decode_num_drafts_total"


def relabel_log(src: Path, dst: Path, engine_index: int) -> None:
    """Copy a gzip step log with the header's engine_index set (every other line byte-equal)."""
    with gzip.open(src, "rb") as f:
        lines = f.read().split(b"\n")
    header = json.loads(lines[0])
    assert header["record"] == "header"
    header["engine_index"] = engine_index
    header["config"]["relabelled"] = (
        f"recorded as engine {header.get('engine_index', 0)} of its own run ({src.name});"
        f" relabelled engine {engine_index} to build a data-parallel fleet (not a real DP run)"
    )
    lines[0] = json.dumps(header, separators=(",", ":")).encode()
    with gzip.open(dst, "wb") as f:
        f.write(b"\n".join(lines))


def _families(scrape: str) -> list[tuple[list[str], list[str]]]:
    """(comment lines, sample lines) per metric family, in order."""
    out: list[tuple[list[str], list[str]]] = []
    for line in scrape.splitlines():
        if not line.strip():
            continue
        if line.startswith("#"):
            if not out or out[-1][1]:
                out.append(([], []))
            out[-1][0].append(line)
        else:
            out[-1][1].append(line)
    return out


def last_scrape(prom: Path) -> str:
    text = prom.read_text(encoding="utf-8")
    at = text.rindex(FIRST_FAMILY)
    return text[at:]


def combine_scrapes(parts: list[tuple[Path, str]], dst: Path) -> None:
    """One scrape holding the last scrape of each (file, engine label): a family's HELP/TYPE
    once, then the samples of every part with ``engine="0"`` rewritten to its label."""
    per_part = [_families(last_scrape(p)) for p, _ in parts]
    names = [[c for c, _ in fams] for fams in per_part]
    assert all(n == names[0] for n in names), "scrapes with different metric families"
    out: list[str] = []
    for i, (comments, _) in enumerate(per_part[0]):
        out.extend(comments)
        for fams, (_, label) in zip(per_part, parts, strict=True):
            for sample in fams[i][1]:
                assert 'engine="0"' in sample, sample
                out.append(sample.replace('engine="0"', f'engine="{label}"'))
    dst.write_text("\n".join(out) + "\n", encoding="utf-8")


def build(out: Path) -> tuple[Path, Path, Path]:
    """engine0.ndjson.gz, engine1.ndjson.gz and dp.prom under ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    logs = []
    for index, run in enumerate(RUNS):
        dst = out / f"engine{index}.ndjson.gz"
        relabel_log(FIXTURES / f"{run}.ndjson.gz", dst, index)
        logs.append(dst)
    scrape = out / "dp.prom"
    combine_scrapes([(FIXTURES / f"{run}.prom", str(i)) for i, run in enumerate(RUNS)], scrape)
    return logs[0], logs[1], scrape


if __name__ == "__main__":
    for path in build(Path(sys.argv[1])):
        print(path)
