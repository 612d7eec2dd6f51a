"""Which counting profile a step log is replayed under, and forcing one (``--force-profile``).

A profile is the set of counting rules the replay asserts the engine's own numbers against
(`reference/step.py`). The header's ``engine`` and ``engine_version`` choose it through
`translate.profile_for` (vLLM <= 0.33: ``vllm-legacy``; the table follows the counting source
pinned in ``vllm/counting_source.json``). A version the table does not know is refused (exit 2):
replaying it under a profile is a claim that it counts like that profile, which the replay
cannot check. The user who has checked it (a release candidate, a fork, a dev build whose
counting source `counting_source` finds unchanged) says so with ``--force-profile NAME``; every
report then states that the profile was forced, what the header said and what was assumed.

Why a profile name and not an assumed version (``--assume-engine-version 0.33.0``): the name is
what every report already prints over its totals column (``vllm-legacy``), so the flag reads as
"count this log with the rules of that column"; it does not depend on the header's version
string parsing (dev builds, forks and git describe strings often do not), nor on the engine
name; and it stays one word per set of rules when several versions share one. docs/replay.md,
"Profiles".

Forcing applies to every log of the run. On a log whose version has a profile of its own the
forced one is used as well (a patched engine, e.g. a backport, may count like another
profile), and the report says so, naming the header's own profile.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from .translate import LEGACY_MAX_VERSION, LEGACY_PROFILE, Header, profile_for

FORCE_FLAG = "--force-profile"

# profile -> (engine, the versions it models, in words). Keep in step with translate.profile_for
# (tests/test_force_profile.py checks that every profile here is one profile_for returns).
PROFILES: dict[str, tuple[str, str]] = {
    LEGACY_PROFILE: ("vllm", "vllm <= " + ".".join(map(str, LEGACY_MAX_VERSION))),
}


def compared_releases(profile: str) -> list[str]:
    """The releases whose counting source was compared and found to count as ``profile`` (the
    evidence pinned in counting_source.json); [] when the pin cannot be read."""
    from .vllm.counting_source import load_pin

    engine = PROFILES[profile][0]
    try:
        releases = sorted(load_pin()["releases"])
    except (OSError, ValueError, KeyError):  # pragma: no cover - a damaged checkout
        return []
    return [v for v in releases if profile_for(engine, v) == profile]


def known_profiles() -> str:
    """Every profile with the versions it models: "vllm-legacy (vllm <= 0.33; counting source
    compared for 0.32.0, 0.33.0)"."""
    parts = []
    for name, (_, versions) in PROFILES.items():
        compared = compared_releases(name)
        seen = f"; counting source compared for {', '.join(compared)}" if compared else ""
        parts.append(f"{name} ({versions}{seen})")
    return ", ".join(parts)


def check_profile(name: str) -> str:
    """``name`` if it is a profile of the table; ValueError naming the known ones otherwise."""
    if name not in PROFILES:
        raise ValueError(f"unknown counting profile {name!r}: the profiles are {known_profiles()}")
    return name


def no_profile_reason(header: Header) -> str:
    """The refusal of a header whose engine version has no profile: what is known, how to
    compare a new release's counting source, and the flag that forces a profile."""
    names = " | ".join(PROFILES)
    return (
        f"no counting profile for {header.engine} {header.engine_version}: the replay has"
        f" {known_profiles()}. If this version counts as one of them (compare its source:"
        " python -m spectally.engine_bridge.vllm.counting_source WHEEL), replay with"
        f" {FORCE_FLAG} {names}"
    )


def resolve(header: Header, forced: str | None) -> Header:
    """The header with the profile the replay uses: ``forced`` when given, else its own."""
    if forced is None:
        return header
    return replace(header, profile=check_profile(forced))


def forced_view(header: Header, forced: str | None) -> dict[str, Any] | None:
    """The report's ``profile_forced`` entry: None when not forced; else the flag, the profile
    used, what the header says and the profile its version has of its own (None: none)."""
    if forced is None:
        return None
    return {
        "flag": FORCE_FLAG,
        "profile": forced,
        "header_engine": f"{header.engine} {header.engine_version}",
        "header_profile": profile_for(header.engine, header.engine_version),
    }


def forced_text(view: dict[str, Any]) -> str:
    """One line for the human reports, saying loudly what was assumed."""
    own = view["header_profile"]
    if own is None:
        said = f"the header says {view['header_engine']}, which has no counting profile"
    elif own == view["profile"]:
        said = f"the header says {view['header_engine']}, whose own profile is the same"
    else:
        said = f"the header says {view['header_engine']}, whose own profile {own} is overridden"
    return (
        f"profile FORCED by {view['flag']} {view['profile']}: {said}; counted as"
        f" {view['profile']} ({PROFILES[view['profile']][1]}): the verdict holds only if"
        f" {view['header_engine']} counts like that"
    )
