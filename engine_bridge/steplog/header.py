"""A step log's header as the replay reads it, and the counting profile it names.

`profile_for` picks the profile from the header's engine and version (reference/profile.py
`RELEASES`); `Header` is what the replay needs of the header record. Both judges and every
command that reads a header import this module; it imports no event of the reference machine,
so a replay that the columnar checker settles never loads the machine (`translate` does).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from spectally.reference.profile import (
    FIXED,
    OLDEST_COUNTS_AS,
    PROFILES,
    RELEASES,
    VLLM_LEGACY,
    CountingProfile,
)
from spectally.reference.step import Mode

from .schema import Record

LEGACY_PROFILE = VLLM_LEGACY.name


def parse_version(version: str) -> tuple[int, ...]:
    """Leading numeric components of a version string: "0.32.0rc1+cpu" -> (0, 32, 0)."""
    parts: list[int] = []
    for piece in version.split("."):
        m = re.match(r"\d+", piece)
        if m is None:
            break
        parts.append(int(m.group()))
        if m.end() != len(piece):
            break
    return tuple(parts)


def profile_for(engine: str, engine_version: str, counting: str | None = None) -> str | None:
    """The counting profile an engine version reports under (reference/profile.py `RELEASES`:
    a release prefix matches the version's leading numbers); None when none is declared. A
    version older than every release an engine declares counts like its oldest when the engine
    is in `OLDEST_COUNTS_AS` (vLLM's counting is unchanged back to the V1 engine's spec-decode
    stats; llama.cpp's older servers counted differently, so they get no profile). With
    ``counting`` "rfc" (the header of an engine with the counting fix), the profile of that
    release with the fix (`FIXED`), None when the release has none."""
    if counting == "rfc":
        base = profile_for(engine, engine_version)
        return FIXED.get(base) if base is not None else None
    version = parse_version(engine_version)
    if not version:
        return None
    declared = [(parse_version(p), name) for e, p, name in RELEASES if e == engine]
    for prefix, name in declared:
        if version[: len(prefix)] == prefix:
            return name
    if declared and engine in OLDEST_COUNTS_AS and version < min(declared)[0]:
        return min(declared)[1]
    return None


def counting_profile(name: str | None) -> CountingProfile:
    """The declaration of a profile name (a header's ``profile``); vllm-legacy when None."""
    return VLLM_LEGACY if name is None else PROFILES[name]


@dataclass(frozen=True)
class Header:
    """What the replay needs from the header record."""

    engine: str
    engine_version: str
    k: int
    mode: Mode
    drop_stale_output: bool
    adaptive_verification: bool
    structured_outputs_backend: str | None
    spec_method: str
    engine_index: int | None
    profile: str | None

    @classmethod
    def from_record(cls, rec: Record) -> Header:
        return cls(
            engine=rec["engine"],
            engine_version=rec["engine_version"],
            k=rec["num_speculative_tokens"],
            mode=Mode(rec["scheduling"]),
            drop_stale_output=rec["drop_stale_output"],
            adaptive_verification=rec["adaptive_verification"],
            structured_outputs_backend=rec["structured_outputs_backend"],
            spec_method=rec["spec_method"],
            engine_index=rec.get("engine_index"),
            profile=profile_for(rec["engine"], rec["engine_version"], rec.get("counting")),
        )
