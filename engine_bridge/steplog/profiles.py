"""Which counting profile a step log is replayed under, and forcing one (``--force-profile``).

A profile is one declaration of an engine release's counting facts (`reference/profile.py`:
``CountingProfile``, engine-neutral; the step rules of `reference/step.py` read its fields).
The header's ``engine`` and ``engine_version`` choose it through `header.profile_for`, which
reads the release table ``reference.profile.RELEASES``: a release that counts like a known one
is one line there; one that does not is one new ``CountingProfile`` plus the vectors that pin
its difference (spec/vectors.py). The declaration form:

    CountingProfile(
        name="vllm-0.34", engine="vllm",
        sync_grammar_keeps=GrammarKeep.PREFIX_AND_FIRST_INVALID,  # sync cut before scheduling
        async_counted_keeps=GrammarKeep.EVERYTHING,  # what async drafted keeps of the slots
        padding_counted=True, av_counted=False, stale_output_counted=True,
        step_counts=StepCounts.SCHEDULED_SLOTS, skip_drafts=SkipDrafts.LOOKAHEAD,
        source=(("sync grammar", "file:function"), ...),
    )

Another engine (llama.cpp, SGLang) declares its own with ``engine="llama.cpp"`` and its own
``RELEASES`` lines; every field's answers are listed in `reference/profile.py`.

The evidence that a release counts as its profile is the counting-source pin
(``release_pin.json``, which ``engine_bridge/vllm/capture/counting_source.py`` writes).

A version the table does not know is refused (exit 2): replaying it under a profile is a claim
that it counts like that profile, which the replay cannot check. The user who has checked it (a
release candidate, a fork, a dev build whose counting source `counting_source` finds unchanged)
says so with ``--force-profile NAME``; every report then states that the profile was forced,
what the header said and what was assumed.

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

from spectally.reference.profile import FIXED, releases_of
from spectally.reference.profile import PROFILES as DECLARED

from .header import Header, profile_for
from .release_pin import pinned_releases

FORCE_FLAG = "--force-profile"


def _versions(name: str) -> str:
    """The releases a profile models, in words: "vllm <= 0.33" (older ones included) or
    "vllm 0.34"."""
    declared = DECLARED[name]
    prefixes = releases_of(name)
    if profile_for(declared.engine, "0") == name:
        return f"{declared.engine} <= {prefixes[-1]}"
    fixed = " with the counting fix" if name in FIXED.values() else ""
    return f"{declared.engine} {', '.join(prefixes)}{fixed}"


# profile -> (engine, the versions it models, in words): the declarations, read.
PROFILES: dict[str, tuple[str, str]] = {
    name: (declared.engine, _versions(name)) for name, declared in DECLARED.items()
}


def compared_releases(profile: str) -> list[str]:
    """The releases whose counting source was compared and found to count as ``profile`` (the
    evidence pinned in release_pin.json); [] when the pin cannot be read."""
    engine = PROFILES[profile][0]
    return [v for v in pinned_releases() if profile_for(engine, v) == profile]


def known_profiles() -> str:
    """Every profile with the versions it models: "vllm-legacy (vllm 0.32, 0.33 (and older);
    counting source compared for 0.32.0, 0.33.0)"."""
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
    compare a new release's counting source, and the flag that forces a profile (offering the
    header's engine's profiles first: a vLLM log is not forced to count as llama.cpp)."""
    own = [name for name, (engine, _) in PROFILES.items() if engine == header.engine]
    names = " | ".join(own or PROFILES)
    return (
        f"no counting profile for {header.engine} {header.engine_version}: the replay has"
        f" {known_profiles()}. If this version counts as one of them (compare its source:"
        " python -m spectally.engine_bridge.vllm.capture.counting_source WHEEL), replay with"
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
