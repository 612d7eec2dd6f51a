"""llama.cpp's counting declaration and its per-verification increments.

The replay counts a llama.cpp log under the ``llama.cpp`` counting profile declared with the
others in ``reference/profile.py`` (``LLAMACPP``: the pipeline facts the step rules read: no
grammar cut before the forward pass, no padding, no async path, a step per verification). What
the *reported* figures mean (the bonus token, drafts accepted past a stop string, when the
counters are exported) is declared with every other engine's in `engine_bridge/engines.py`
(one `CountingDeclaration` per profile, each fact with the source behind it, named
``<ENGINE>_REPORTS``); this module re-exports llama.cpp's and the replayable ones, under those
names and under the names earlier code imports (``LLAMACPP``, ``VLLM_LEGACY``, ``VLLM_034``: the
same objects). llama.cpp's facts cite its tree at commit 0c1e57098, vendored by the
``llama-cpp-python==0.3.36`` source package (``scripts/build_llamacpp.py``).

How replay judges a llama.cpp step log: the importer (`importer.py`) writes every verification
as a sync ``request_step`` with nothing cut between proposal and forward pass (``padding`` 0,
``grammar_valid`` null, ``scheduled`` = ``verified`` = ``proposed``, ``applied``); under the
``llama.cpp`` profile the replay's engine-side rule (`reference.step.legacy_step`) then gives
exactly llama.cpp's increments (``stats.n_draft_verif_steps += 1``, ``n_draft_tokens +=
draft.size()``, ``n_draft_accepted += n_accepted``). `tests/llamacpp/test_llamacpp_profile.py` pins
that with the log-level vectors of ``spec/vectors-llamacpp.json``; the step-level vectors of
``spec/vectors.json`` with ``"profile": "llama.cpp"`` pin the declaration itself.
"""

from __future__ import annotations

from ..engines import (
    DECLARATIONS,
    LLAMACPP_REPORTS,
    VLLM_034_REPORTS,
    VLLM_LEGACY_REPORTS,
    CountingDeclaration,
)

__all__ = [
    "DECLARATIONS",
    "ENGINE",
    "LLAMACPP",
    "LLAMACPP_REPORTS",
    "PROFILE",
    "SOURCE_COMMIT",
    "VLLM_034",
    "VLLM_034_REPORTS",
    "VLLM_LEGACY",
    "VLLM_LEGACY_REPORTS",
    "CountingDeclaration",
    "llamacpp_step",
]

# the earlier names of the same declarations
LLAMACPP = LLAMACPP_REPORTS
VLLM_LEGACY = VLLM_LEGACY_REPORTS
VLLM_034 = VLLM_034_REPORTS

PROFILE = "llama.cpp"
ENGINE = "llama.cpp"
SOURCE_COMMIT = "0c1e57098"


def llamacpp_step(drafted: int, accepted: int) -> tuple[int, int, int]:
    """llama.cpp's (num_drafts, num_draft_tokens, num_accepted_tokens) increments for one
    counted verification of ``drafted`` tokens with ``accepted`` accepted (update_slots)."""
    if not 0 <= accepted <= drafted:
        raise ValueError(f"accepted {accepted} outside 0..{drafted}")
    return (1 if drafted > 0 else 0), drafted, accepted
