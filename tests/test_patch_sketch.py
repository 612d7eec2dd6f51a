"""The vLLM 0.33.0 patch sketch's counting logic against every step vector.

docs/vllm-0.33-patch-sketch.md holds, in one ```python block, the functions a vLLM patch would
add (`worker_num_verified`, `count_spec_block`). This test extracts that block, executes it, and
feeds it, for each step vector, the values vLLM's own variables would hold for the vector's
block (`vllm_view` below: what the scheduler and the worker have in hand, per
docs/vllm-source-notes.md). Its output must equal the vector's hand-written `rfc` expectation.
Deliberately broken copies of the sketch (the legacy drafted formula, a legacy spec-step rule,
no async grammar cut, stale output discarded) must fail, so the check is not vacuous.
"""

from __future__ import annotations

import re
import sys
import types
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from spectally.spec import vectors as vec_mod

SKETCH = Path(vec_mod.__file__).parent.parent / "docs" / "vllm-0.33-patch-sketch.md"
DOC = vec_mod.load()
# The sketch patches vLLM 0.33.0: vectors of another release's pipeline (input.profile, e.g.
# vllm-0.34, whose sync grammar keeps the first invalid draft) are not its to match.
STEP_VECTORS = [
    v
    for v in DOC["vectors"]
    if v["kind"] == "step"
    and "error" not in v["expect"]
    and v["input"].get("profile", "vllm-legacy") == "vllm-legacy"
]


def sketch_source() -> str:
    if not SKETCH.exists():
        pytest.skip("docs/ is not part of an installed package; run from a source checkout")
    text = SKETCH.read_text(encoding="utf-8")
    blocks: list[str] = re.findall(r"```python\n(.*?)```", text, re.DOTALL)
    counting = [b for b in blocks if "def count_spec_block" in b]
    assert len(counting) == 1, "the sketch must hold exactly one counting block"
    return counting[0]


def load_sketch(source: str) -> SimpleNamespace:
    """Execute the block as a module of its own (dataclasses look their module up)."""
    module = types.ModuleType("vllm_patch_sketch")
    sys.modules[module.__name__] = module
    try:
        exec(compile(source, str(SKETCH), "exec"), module.__dict__)  # the doc's code only
    finally:
        del sys.modules[module.__name__]
    return SimpleNamespace(**module.__dict__)


def vllm_view(sketch: SimpleNamespace, inp: dict[str, Any]) -> tuple[bool, Any]:
    """The block as vLLM holds it: (async?, SpecBlock) for one step vector's input.

    Stage inputs are caps (SPEC.md CAP-1); here they become the values vLLM computes:
    `validate_tokens` keeps the grammar-valid prefix and strips padding (sync, structured);
    `scheduled_spec_decode_tokens` holds the slots the schedule kept (padding included);
    AV gives the worker `min(slots, V)` draft logit rows plus the bonus row; the deferred
    grammar check (async, structured) marks the scheduled slots past the valid prefix invalid.
    """
    n, p, a = inp["proposed"], inp["padding"], inp["accepted"]
    structured = inp["grammar_valid"] is not None
    g = inp["grammar_valid"] if structured else n
    s = inp["scheduled"] if inp["scheduled"] is not None else n + p
    v = inp["av_verify"] if inp["av_verify"] is not None else n + p
    is_async = inp["mode"] == "async"
    if is_async:
        kept, offered_slots = n, n + p  # placeholders: nothing is cut before the schedule
    else:
        kept = g  # validate_tokens (structured) / unchanged (plain)
        offered_slots = g if structured else n + p
    slots = min(offered_slots, s)
    real_scheduled = min(kept, slots)
    num_logits = 1 + min(slots, v)
    invalid = slots - min(real_scheduled, g) if (is_async and structured) else 0
    block = sketch.SpecBlock(
        num_proposed=n,
        num_padding=p,
        num_grammar_kept=kept,
        num_scheduled_slots=slots,
        num_verified=sketch.worker_num_verified(num_logits, slots, real_scheduled),
        num_invalid=invalid,
        num_accepted=a,
        applied=inp.get("applied", True),
    )
    return is_async, block


def as_expectation(c: Any) -> dict[str, Any]:
    return {
        "drafted": c.drafted,
        "verified": c.verified,
        "accepted": c.accepted,
        "spec_steps": c.spec_steps,
        "padding": c.padding,
        "fates": dict(c.fates),
        "discarded": {
            "steps": c.discarded_steps,
            "drafted": c.discarded_drafted,
            "verified": c.discarded_verified,
        },
    }


def mismatches(sketch: SimpleNamespace, vector: dict[str, Any]) -> list[str]:
    is_async, block = vllm_view(sketch, vector["input"])
    actual = as_expectation(sketch.count_spec_block(is_async, block))
    out: list[str] = []
    vec_mod.compare(vector["expect"]["rfc"], actual, vector["name"], DOC["float_tolerance"], out)
    return out


def test_the_sketch_is_checked_on_every_producible_step_vector() -> None:
    assert len(STEP_VECTORS) >= 20
    sketch = load_sketch(sketch_source())
    for vector in STEP_VECTORS:
        assert "rfc" in vector["expect"], vector["name"]
        assert mismatches(sketch, vector) == [], vector["name"]


def test_the_sketch_gives_the_rfc_row() -> None:
    sketch = load_sketch(sketch_source())
    row = next(v for v in STEP_VECTORS if v["name"] == "rfc-row-async-av-grammar")
    is_async, block = vllm_view(sketch, row["input"])
    c = sketch.count_spec_block(is_async, block)
    assert (c.drafted, c.verified, c.accepted, c.spec_steps) == (4, 3, 1, 1)


MUTANTS = {
    # vLLM <= 0.33's drafted: scheduled slots minus the async grammar-invalid ones (L2)
    "legacy drafted": (
        "out.drafted = b.num_proposed  # R1",
        "out.drafted = b.num_scheduled_slots - b.num_invalid  # R1",
    ),
    # vLLM <= 0.33's step rule: a step needs a scheduled slot (L4)
    "legacy spec step": (
        "out.spec_steps = 1 if b.num_proposed > 0 else 0",
        "out.spec_steps = 1 if b.num_scheduled_slots > 0 else 0",
    ),
    # forgetting that async verifies grammar-invalid drafts
    "no async grammar cut": (
        "eligible = min(b.num_verified, b.num_scheduled_slots - b.num_invalid)",
        "eligible = b.num_verified",
    ),
    # padding counted as verified by the worker
    "padding verified": (
        "min(num_logits - 1, num_scheduled_slots, num_real_drafts)",
        "min(num_logits - 1, num_scheduled_slots)",
    ),
    # a discarded block's drafts leaking into drafted
    "discarded counted": (
        "out.discarded_drafted = b.num_proposed\n",
        "out.discarded_drafted = b.num_proposed\n        out.drafted = b.num_proposed\n",
    ),
}


@pytest.mark.parametrize("name", sorted(MUTANTS))
def test_a_broken_sketch_disagrees_with_some_vector(name: str) -> None:
    old, new = MUTANTS[name]
    source = sketch_source()
    assert source.count(old) == 1, f"mutant {name!r} no longer applies to the sketch"
    mutant = load_sketch(source.replace(old, new))
    failing = [v["name"] for v in STEP_VECTORS if mismatches(mutant, v)]
    assert failing, f"mutant {name!r} passes every step vector"
