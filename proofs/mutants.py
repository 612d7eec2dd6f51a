"""Non-vacuity: deliberately broken variants of the reference that the proofs must catch.

A mutant replaces one or more reference functions *in place* for the duration of a ``with``
block (`patched`), in every ``spectally.*`` module that bound the original object (``step``
and ``counters`` both hold ``position_increment``, ``machine`` holds ``rfc_step``, ...).
Reference functions call each other by global name, so ``rfc_step`` picks up a patched
``pipeline``: exactly what a real edit of ``step.py`` would do. No reference file is edited.

`catch(mutant)` runs the whole property suite under the mutant and returns the properties that
are no longer as expected; every mutant must be caught by at least one.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from typing import Any

from spectally.reference import counters as ct
from spectally.reference import metrics as mt
from spectally.reference import shapes as sh
from spectally.reference import step as st
from spectally.reference import transitions as tr
from spectally.reference.arith import Arith
from spectally.reference.step import Mode, StepInputs

from .obligations import DEFAULT_BUDGET, Budget
from .runner import PropertyResult, every_property, run_property

Factory = Callable[[Any], Callable[..., Any]]  # original function -> replacement


@dataclass(frozen=True)
class Mutant:
    name: str
    bug: str  # the deliberate bug, in words
    patches: tuple[tuple[Any, str, Factory], ...]  # (module, attribute, factory)
    # Property name prefix tried first by `catch(..., stop_at_first=True)` (only an order: a
    # mutant still counts as caught by whichever property refutes it).
    first: str = ""


@contextmanager
def patched(mutant: Mutant) -> Iterator[None]:
    """Swap the mutant's functions into every spectally module holding the originals."""
    undo: list[tuple[Any, str, Any]] = []
    try:
        for module, attr, factory in mutant.patches:
            original = getattr(module, attr)
            replacement = factory(original)
            for mod in list(sys.modules.values()):
                name = getattr(mod, "__name__", "") or ""
                if not name.startswith("spectally."):
                    continue
                if getattr(mod, attr, None) is original:
                    undo.append((mod, attr, original))
                    setattr(mod, attr, replacement)
        yield
    finally:
        for mod, attr, original in reversed(undo):
            setattr(mod, attr, original)


# -- the broken variants ----------------------------------------------------------------------


def _sync_verifies_grammar_invalid(orig: Any) -> Callable[..., Any]:
    """pipeline: sync sends grammar-invalid drafts to the target as if verified."""

    def pipeline(mode: Mode, x: StepInputs[Any, Any], ar: Arith[Any, Any], *rest: Any) -> Any:
        p = orig(mode, x, ar, *rest)
        if mode is Mode.SYNC:
            return replace(p, verified=ar.min(ar.min(x.proposed, x.schedule_cap), x.av_cap))
        return p

    return pipeline


def _async_eligible_uncapped(orig: Any) -> Callable[..., Any]:
    """pipeline: async eligible is every verified draft, grammar-invalid ones included."""

    def pipeline(mode: Mode, x: StepInputs[Any, Any], ar: Arith[Any, Any], *rest: Any) -> Any:
        p = orig(mode, x, ar, *rest)
        return replace(p, eligible=p.verified) if mode is Mode.ASYNC else p

    return pipeline


def _drafted_minus_grammar_invalid(orig: Any) -> Callable[..., Any]:
    """rfc_step: drafted subtracts grammar-invalid drafts (vLLM 0.32's async rule)."""

    def rfc_step(mode: Mode, x: StepInputs[Any, Any], ar: Arith[Any, Any], *rest: Any) -> Any:
        c = orig(mode, x, ar, *rest)
        valid = ar.ite(x.structured, ar.min(x.grammar_valid, x.proposed), x.proposed)
        invalid = ar.ite(x.applied, ar.sub(x.proposed, valid), ar.lit(0))
        return replace(c, drafted=ar.sub(c.drafted, invalid))

    return rfc_step


def _count_discarded_spec_step(orig: Any) -> Callable[..., Any]:
    """rfc_step: a discarded in-flight block still counts a spec step."""

    def rfc_step(mode: Mode, x: StepInputs[Any, Any], ar: Arith[Any, Any], *rest: Any) -> Any:
        c = orig(mode, x, ar, *rest)
        step = ar.ite(ar.lt(ar.lit(0), x.proposed), ar.lit(1), ar.lit(0))
        return replace(c, spec_steps=step)

    return rfc_step


def _count_discarded_block(orig: Any) -> Callable[..., Any]:
    """rfc_step: a discarded in-flight block is counted as if applied."""

    def rfc_step(mode: Mode, x: StepInputs[Any, Any], ar: Arith[Any, Any], *rest: Any) -> Any:
        return orig(mode, replace(x, applied=ar.truth(True)), ar, *rest)

    return rfc_step


def _spec_step_without_drafts(orig: Any) -> Callable[..., Any]:
    """rfc_step: an applied block with zero drafts counts a spec step."""

    def rfc_step(mode: Mode, x: StepInputs[Any, Any], ar: Arith[Any, Any], *rest: Any) -> Any:
        c = orig(mode, x, ar, *rest)
        return replace(c, spec_steps=ar.ite(x.applied, ar.lit(1), ar.lit(0)))

    return rfc_step


def _position_increment_le(orig: Any) -> Callable[..., Any]:
    """position_increment: off by one (``position <= length``)."""

    def position_increment(length: Any, position: Any, ar: Arith[Any, Any]) -> Any:
        return ar.ite(ar.le(position, length), ar.lit(1), ar.lit(0))

    return position_increment


def _position_accepted_from_verified(orig: Any) -> Callable[..., Any]:
    """position_add_step: the accepted vector is advanced by the verified length."""

    def position_add_step(pc: Any, position: Any, c: Any, legacy: Any, ar: Arith[Any, Any]) -> Any:
        new = orig(pc, position, c, legacy, ar)
        return replace(
            new, accepted=ar.add(pc.accepted, st.position_increment(c.verified, position, ar))
        )

    return position_add_step


def _no_accepted_bound(orig: Any) -> Callable[..., Any]:
    """admissibility: forgets that accepted <= eligible drafts."""

    def admissibility(
        mode: Mode, x: StepInputs[Any, Any], ar: Arith[Any, Any], k: Any = None, *rest: Any
    ) -> list[tuple[str, Any]]:
        return [(r, c) for r, c in orig(mode, x, ar, k, *rest) if "eligible" not in r]

    return admissibility


def _av_skipped_from_eligible(orig: Any) -> Callable[..., Any]:
    """fates: async av_skipped measured against eligible instead of verified."""

    def fates(mode: Mode, x: StepInputs[Any, Any], ar: Arith[Any, Any], *rest: Any) -> Any:
        f = orig(mode, x, ar, *rest)
        if mode is Mode.SYNC:
            return f
        p = st.pipeline(mode, x, ar, *rest)
        return replace(f, av_skipped=ar.sub(p.scheduled_drafts, p.eligible))

    return fates


def _merge_drops_padding(orig: Any) -> Callable[..., Any]:
    """rfc_merge: keeps the left padding and drops the right one."""

    def rfc_merge(a: Any, b: Any, ar: Arith[Any, Any]) -> Any:
        return replace(orig(a, b, ar), padding=a.padding)

    return rfc_merge


def _fold_overwrites_padding(orig: Any) -> Callable[..., Any]:
    """rfc_add_step: the block's padding replaces the running total instead of adding to it."""

    def rfc_add_step(t: Any, c: Any, ar: Arith[Any, Any]) -> Any:
        return replace(orig(t, c, ar), padding=c.padding)

    return rfc_add_step


def _legacy_no_invalid(orig: Any) -> Callable[..., Any]:
    """legacy_scheduled_invalid: vLLM 0.32 would not subtract async grammar-invalid drafts."""

    def legacy_scheduled_invalid(
        mode: Mode, x: StepInputs[Any, Any], ar: Arith[Any, Any], *rest: Any
    ) -> Any:
        return ar.lit(0)

    return legacy_scheduled_invalid


def _legacy_counts_empty_steps(orig: Any) -> Callable[..., Any]:
    """legacy_step: counts a step even when no slot was scheduled (sync all-rejected too)."""

    def legacy_step(mode: Mode, x: StepInputs[Any, Any], ar: Arith[Any, Any], *rest: Any) -> Any:
        c = orig(mode, x, ar, *rest)
        reported = ar.both(x.legacy_reported, ar.lt(ar.lit(0), x.proposed))
        return replace(c, num_drafts=ar.ite(reported, ar.lit(1), ar.lit(0)))

    return legacy_step


def _finish_applies_in_flight(orig: Any) -> Callable[..., Any]:
    """lifecycle_rule: a Finish or an Abort applies a block already in the forward pass."""

    def lifecycle_rule(
        mode: Mode, kind: str, x: StepInputs[Any, Any], verified: Any, ar: Arith[Any, Any]
    ) -> Any:
        stays, closed = orig(mode, kind, x, verified, ar)
        if kind == tr.PREEMPT:
            return stays, closed
        return stays, replace(closed, applied=verified, legacy_reported=verified)

    return lifecycle_rule


def _sync_abort_applies_in_flight(orig: Any) -> Callable[..., Any]:
    """lifecycle_rule: a sync Abort applies a block whose forward pass ran but whose output the
    engine never processed (counted as a spec step, as if its output had arrived)."""

    def lifecycle_rule(
        mode: Mode, kind: str, x: StepInputs[Any, Any], verified: Any, ar: Arith[Any, Any]
    ) -> Any:
        stays, closed = orig(mode, kind, x, verified, ar)
        if kind != tr.ABORT or mode is not Mode.SYNC:
            return stays, closed
        return stays, replace(closed, applied=verified, legacy_reported=verified)

    return lifecycle_rule


def _stale_applied_when_dropped(orig: Any) -> Callable[..., Any]:
    """is_applied: stale output is applied even when the engine dropped it."""

    def is_applied(stale: Any, stale_dropped: Any, ar: Arith[Any, Any]) -> Any:
        return ar.truth(True)

    return is_applied


def _stale_always_discarded(orig: Any) -> Callable[..., Any]:
    """is_applied: stale output is discarded even when delivered (the old DEC-7)."""

    def is_applied(stale: Any, stale_dropped: Any, ar: Arith[Any, Any]) -> Any:
        return ar.negate(stale)

    return is_applied


def _discard_without_av_cap(orig: Any) -> Callable[..., Any]:
    """discard_rule: a block discarded before Verify keeps its AV cap (counts as verified)."""

    def discard_rule(x: StepInputs[Any, Any], verified: Any, ar: Arith[Any, Any]) -> Any:
        return orig(x, ar.truth(True), ar)

    return discard_rule


def _acceptance_rate_over_verified(orig: Any) -> Callable[..., Any]:
    """acceptance_rate: accepted / verified instead of accepted / drafted."""

    def acceptance_rate(t: Any) -> Any:
        return mt.Ratio(t.accepted, t.verified)

    return acceptance_rate


def _mean_length_without_one(orig: Any) -> Callable[..., Any]:
    """mean_acceptance_length: accepted / spec_steps, without the + 1."""

    def mean_acceptance_length(t: Any) -> Any:
        return replace(orig(t), offset=0)

    return mean_acceptance_length


def _undefined_rate_as_zero(orig: Any) -> Callable[..., Any]:
    """acceptance_rate: 0 instead of undefined when nothing was drafted."""

    def acceptance_rate(t: Any) -> Any:
        return replace(orig(t), if_zero=0.0)

    return acceptance_rate


# -- drafter shapes (reference/shapes.py; caught by proofs/shapes.py) --------------------------


def _filler_not_drafted(orig: Any) -> Callable[..., Any]:
    """chain_step: filler slots are left out of drafted (they still enter the forward pass)."""

    def chain_step(s: sh.ChainStep[Any], ar: Arith[Any, Any]) -> Any:
        c = orig(s, ar)
        return replace(c, drafted=ar.sub(c.drafted, s.filler))

    return chain_step


def _zero_draft_step_is_spec_step(orig: Any) -> Callable[..., Any]:
    """chain_step: a step with K_t = 0 still counts a spec step."""

    def chain_step(s: sh.ChainStep[Any], ar: Arith[Any, Any]) -> Any:
        return replace(orig(s, ar), spec_steps=ar.lit(1))

    return chain_step


def _zero_draft_step_invisible(orig: Any) -> Callable[..., Any]:
    """chain_step: a step with K_t = 0 leaves no trace (vLLM's dynamic schedule today)."""

    def chain_step(s: sh.ChainStep[Any], ar: Arith[Any, Any]) -> Any:
        return replace(orig(s, ar), zero_draft_steps=ar.lit(0))

    return chain_step


def _position_past_draft_length(orig: Any) -> Callable[..., Any]:
    """chain_position: drafted_p counts position K_t too (off by one)."""

    def chain_position(s: sh.ChainStep[Any], position: Any, ar: Arith[Any, Any]) -> Any:
        _, v, a = orig(s, position, ar)
        return ar.ite(ar.le(position, s.proposed), ar.lit(1), ar.lit(0)), v, a

    return chain_position


def _tree_accepts_verified_nodes(orig: Any) -> Callable[..., Any]:
    """tree_add_layer: accepted counts every verified node, not the accepted path."""

    def tree_add_layer(w: Any, layer: Any, ar: Arith[Any, Any]) -> Any:
        return replace(orig(w, layer, ar), accepted=ar.add(w.accepted, layer.verified))

    return tree_add_layer


def _tree_drafted_is_verified(orig: Any) -> Callable[..., Any]:
    """tree_add_layer: drafted counts the nodes verified, not the nodes proposed."""

    def tree_add_layer(w: Any, layer: Any, ar: Arith[Any, Any]) -> Any:
        return replace(orig(w, layer, ar), drafted=ar.add(w.drafted, layer.verified))

    return tree_add_layer


def _tree_path_may_skip(orig: Any) -> Callable[..., Any]:
    """layer_admissibility: forgets that the accepted path cannot skip a depth."""

    def layer_admissibility(w: Any, layer: Any, ar: Arith[Any, Any]) -> Any:
        return [r for r in orig(w, layer, ar) if "skip" not in r[1]]

    return layer_admissibility


def _depth_accepted_from_verified(orig: Any) -> Callable[..., Any]:
    """depth_counts: accepted_d is 1 when a node at depth d was verified."""

    def depth_counts(layer: Any, ar: Arith[Any, Any]) -> Any:
        d, v, _ = orig(layer, ar)
        return d, v, ar.ite(ar.lt(ar.lit(0), layer.verified), ar.lit(1), ar.lit(0))

    return depth_counts


def _chain_layer_all_verified(orig: Any) -> Callable[..., Any]:
    """chain_layer: every node of a chain read as a tree is verified."""

    def chain_layer(s: Any, depth: Any, ar: Arith[Any, Any]) -> Any:
        return replace(orig(s, depth, ar), verified=ar.lit(1))

    return chain_layer


def _request_keeps_first_sequence(orig: Any) -> Callable[..., Any]:
    """request_totals: a request with n > 1 reports its first sequence only."""

    def request_totals(streams: Any, ar: Arith[Any, Any]) -> Any:
        return streams[0] if streams else sh.shape_zero(ar)

    return request_totals


def _merge_drops_zero_draft_steps(orig: Any) -> Callable[..., Any]:
    """shape_merge: keeps the left zero_draft_steps and drops the right one."""

    def shape_merge(a: Any, b: Any, ar: Arith[Any, Any]) -> Any:
        return replace(orig(a, b, ar), zero_draft_steps=a.zero_draft_steps)

    return shape_merge


def _unverified_from_accepted(orig: Any) -> Callable[..., Any]:
    """three_fates: unverified = drafted - accepted (rejected drafts counted twice)."""

    def three_fates(t: Any, ar: Arith[Any, Any]) -> Any:
        return replace(orig(t, ar), unverified=ar.sub(t.drafted, t.accepted))

    return three_fates


SHAPE_MUTANTS: tuple[Mutant, ...] = tuple(
    Mutant(name, bug, ((sh, attr, factory),), first="shape")
    for name, bug, attr, factory in (
        ("filler-not-drafted", "fillers left out of drafted", "chain_step", _filler_not_drafted),
        (
            "zero-draft-step-is-spec-step",
            "a K_t = 0 step counts a spec step",
            "chain_step",
            _zero_draft_step_is_spec_step,
        ),
        (
            "zero-draft-step-invisible",
            "a K_t = 0 step leaves no trace",
            "chain_step",
            _zero_draft_step_invisible,
        ),
        (
            "position-past-draft-length",
            "per-position drafted counts position K_t",
            "chain_position",
            _position_past_draft_length,
        ),
        (
            "tree-accepts-verified-nodes",
            "tree accepted counts verified nodes",
            "tree_add_layer",
            _tree_accepts_verified_nodes,
        ),
        (
            "tree-drafted-is-verified",
            "tree drafted counts verified nodes",
            "tree_add_layer",
            _tree_drafted_is_verified,
        ),
        (
            "tree-path-may-skip",
            "the accepted path may skip a depth",
            "layer_admissibility",
            _tree_path_may_skip,
        ),
        (
            "depth-accepted-from-verified",
            "accepted_d counts a verified depth",
            "depth_counts",
            _depth_accepted_from_verified,
        ),
        (
            "chain-layer-all-verified",
            "a chain read as a tree verifies every node",
            "chain_layer",
            _chain_layer_all_verified,
        ),
        (
            "request-keeps-first-sequence",
            "an n > 1 request reports its first sequence",
            "request_totals",
            _request_keeps_first_sequence,
        ),
        (
            "merge-drops-zero-draft-steps",
            "shape_merge drops the right zero_draft_steps",
            "shape_merge",
            _merge_drops_zero_draft_steps,
        ),
        (
            "unverified-from-accepted",
            "unverified fate = drafted - accepted",
            "three_fates",
            _unverified_from_accepted,
        ),
    )
)


MUTANTS: tuple[Mutant, ...] = (
    Mutant(
        "sync-verifies-grammar-invalid",
        "sync counts grammar-invalid drafts as verified",
        ((st, "pipeline", _sync_verifies_grammar_invalid),),
    ),
    Mutant(
        "drafted-minus-grammar-invalid",
        "drafted subtracts grammar-invalid drafts",
        ((st, "rfc_step", _drafted_minus_grammar_invalid),),
    ),
    Mutant(
        "position-increment-le",
        "per-position counts off by one (position_increment uses <=)",
        ((st, "position_increment", _position_increment_le),),
        # step:INV-5 (sync), first in the suite's order, refutes it too (its lemma fails), but
        # the linearising solver exhausts the budget on its main obligation (minutes)
        first="step:INV-7",
    ),
    Mutant(
        "count-discarded-spec-step",
        "a discarded in-flight block still counts a spec step",
        ((st, "rfc_step", _count_discarded_spec_step),),
    ),
    Mutant(
        "count-discarded-block",
        "a discarded in-flight block is counted as applied",
        ((st, "rfc_step", _count_discarded_block),),
    ),
    Mutant(
        "async-eligible-uncapped",
        "async eligible not capped by the grammar",
        ((st, "pipeline", _async_eligible_uncapped),),
        first="story:sync-async",
    ),
    Mutant(
        "spec-step-without-drafts",
        "a spec step is counted with zero drafts",
        ((st, "rfc_step", _spec_step_without_drafts),),
    ),
    Mutant(
        "position-accepted-from-verified",
        "the accepted per-position vector advances by the verified length",
        ((ct, "position_add_step", _position_accepted_from_verified),),
    ),
    Mutant(
        "no-accepted-bound",
        "admissibility forgets accepted <= eligible",
        ((st, "admissibility", _no_accepted_bound),),
    ),
    Mutant(
        "av-skipped-from-eligible",
        "async av_skipped fate measured against eligible, not verified",
        ((st, "fates", _av_skipped_from_eligible),),
    ),
    Mutant(
        "merge-drops-padding",
        "rfc_merge drops the right operand's padding",
        ((ct, "rfc_merge", _merge_drops_padding),),
        first="merge:monoid",
    ),
    Mutant(
        "fold-overwrites-padding",
        "rfc_add_step overwrites the padding total with the block's padding",
        ((ct, "rfc_add_step", _fold_overwrites_padding),),
        first="trace:INV-9",
    ),
    Mutant(
        "legacy-no-invalid-subtraction",
        "legacy profile does not subtract async grammar-invalid drafts",
        ((st, "legacy_scheduled_invalid", _legacy_no_invalid),),
        first="legacy:drafted>=verified",
    ),
    Mutant(
        "finish-applies-in-flight",
        "Finish/Abort apply a block already in the forward pass",
        ((tr, "lifecycle_rule", _finish_applies_in_flight),),
        first="story",
    ),
    Mutant(
        "sync-abort-applies-in-flight",
        "a sync Abort applies a block whose forward pass ran but whose output was not processed",
        ((tr, "lifecycle_rule", _sync_abort_applies_in_flight),),
        first="story",
    ),
    Mutant(
        "stale-applied-when-dropped",
        "stale output is applied even when the engine dropped it",
        ((tr, "is_applied", _stale_applied_when_dropped),),
        first="story",
    ),
    Mutant(
        "stale-always-discarded",
        "stale output is discarded even when delivered (the old DEC-7)",
        ((tr, "is_applied", _stale_always_discarded),),
        first="story",
    ),
    Mutant(
        "discard-without-av-cap",
        "a block discarded before Verify counts its drafts as discarded verified",
        ((tr, "discard_rule", _discard_without_av_cap),),
        first="event:discard",
    ),
    Mutant(
        "acceptance-rate-over-verified",
        "acceptance rate = accepted / verified",
        ((mt, "acceptance_rate", _acceptance_rate_over_verified),),
        first="metrics:identities",
    ),
    Mutant(
        "mean-length-without-one",
        "mean acceptance length without the + 1",
        ((mt, "mean_acceptance_length", _mean_length_without_one),),
        first="metrics:identities",
    ),
    Mutant(
        "undefined-rate-as-zero",
        "an undefined acceptance rate reported as 0",
        ((mt, "acceptance_rate", _undefined_rate_as_zero),),
        first="metrics:identities",
    ),
    Mutant(
        "legacy-counts-empty-steps",
        "legacy profile counts a step with no scheduled slot",
        ((st, "legacy_step", _legacy_counts_empty_steps),),
        first="legacy:sync-async-spec-steps",
    ),
    *SHAPE_MUTANTS,
)


def decisive(r: PropertyResult) -> bool:
    """The solver settled the property, the other way than expected (not a mere unknown):
    an expected-proved property refuted, or an expected-refuted one proved."""
    return r.verdict in ("proved", "refuted") and r.verdict != r.expected


def catch(
    mutant: Mutant, budget: Budget = DEFAULT_BUDGET, stop_at_first: bool = False
) -> list[PropertyResult]:
    """Run the property suite under ``mutant``; return the properties that catch it (settled
    the other way than expected). With ``stop_at_first``, stop at the first one."""
    caught: list[PropertyResult] = []
    props = every_property()
    if mutant.first:
        props.sort(key=lambda p: not p.name.startswith(mutant.first))
    with patched(mutant):
        for prop in props:
            result = run_property(prop, budget)
            if decisive(result):
                caught.append(result)
                if stop_at_first:
                    break
    return caught


def catch_table(budget: Budget = DEFAULT_BUDGET) -> dict[str, list[str]]:
    """mutant name -> ``name (mode)`` of every property that catches it."""
    return {m.name: [f"{r.name} ({r.mode})" for r in catch(m, budget)] for m in MUTANTS}


def markdown_table(table: dict[str, list[str]]) -> str:
    bugs = {m.name: m.bug for m in MUTANTS}
    lines = ["| mutant | deliberate bug | properties that catch it |", "|---|---|---|"]
    for name, caught in table.items():
        lines.append(f"| `{name}` | {bugs[name]} | {', '.join(caught) or '**none**'} |")
    return "\n".join(lines)


if __name__ == "__main__":  # python -m spectally.proofs.mutants: the table for docs/proofs.md
    print(markdown_table(catch_table()))
