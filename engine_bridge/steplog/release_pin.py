"""The counting-source pin: per engine release, the hash of every function that decides its counts.

``release_pin.json`` (next to this module) is the evidence behind the release table of
``reference/profile.py``: which releases were compared, function by function, and found to count
as their declared profile. ``engine_bridge/vllm/capture/counting_source.py`` writes and checks it
from a vLLM wheel or source tree; the replay reads it here (standard library only), so the replay
core never imports the recorder package ``engine_bridge.vllm``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

PIN = Path(__file__).with_name("release_pin.json")


def load_pin(path: Path = PIN) -> dict[str, Any]:
    """The pin as written: ``releases`` (version -> target -> hash), ``text``, ``targets``,
    ``profiles`` (version -> profile name the comparison supports)."""
    pin: dict[str, Any] = json.loads(path.read_text("utf-8"))
    return pin


def pinned_releases(path: Path = PIN) -> list[str]:
    """The releases whose counting source is pinned; [] when the pin cannot be read."""
    try:
        return sorted(load_pin(path)["releases"])
    except (OSError, ValueError, KeyError):  # pragma: no cover - a damaged checkout
        return []
