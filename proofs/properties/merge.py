"""``merge:monoid``: the counters' merges are a commutative monoid, and a fold is a merge."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import fields
from typing import Any

import z3
from spectally.reference import counters as ct
from spectally.reference import step as st
from spectally.reference.counters import LegacyTotals, PositionCounts, RfcTotals

from .. import model as md
from ..model import AR, fresh_tag
from ..obligations import Obligation, Shown
from ..z3arith import Cond
from .lemmas import MODES

# -- merge:monoid -----------------------------------------------------------------------------


def merge_laws() -> list[Obligation]:
    tag = fresh_tag("merge")
    out: list[Obligation] = []
    kinds: list[tuple[str, type, Callable[..., Any], Callable[..., Any]]] = [
        ("rfc", RfcTotals, ct.rfc_merge, ct.rfc_zero),
        ("legacy", LegacyTotals, ct.legacy_merge, ct.legacy_zero),
        ("position", PositionCounts, ct.position_merge, ct.position_zero),
    ]
    for label, kind, merge, zero_of in kinds:

        def sym(name: str, kind: type = kind, label: str = label) -> Any:
            return kind(*(z3.Int(f"{tag}.{label}.{name}.{f.name}") for f in fields(kind)))

        a, b, c = sym("a"), sym("b"), sym("c")
        zero = zero_of(AR)

        def same(u: Any, v: Any, kind: type = kind) -> Cond:
            return z3.And(*(getattr(u, f.name) == getattr(v, f.name) for f in fields(kind)))

        laws = [
            ("associative", same(merge(merge(a, b, AR), c, AR), merge(a, merge(b, c, AR), AR))),
            ("commutative", same(merge(a, b, AR), merge(b, a, AR))),
            ("zero is a left identity", same(merge(zero, a, AR), a)),
            ("zero is a right identity", same(merge(a, zero, AR), a)),
        ]
        for law, cond in laws:
            out.append(Obligation(f"{label}_merge {law}", (), cond, Shown()))
    out += _fold_is_merge(tag)
    return out


def _fold_is_merge(tag: str) -> list[Obligation]:
    """Folding a block is merging its own counts: add_step(t, x) == merge(t, add_step(0, x)).
    With associativity and commutativity, folding a trace equals merging the folds of any split
    of its blocks (induction on the trace)."""
    out: list[Obligation] = []
    for mode in MODES:
        x = md.sym_inputs(f"{tag}.{mode.value}.x")
        p = z3.Int(f"{tag}.{mode.value}.position")
        rfc = RfcTotals(*(z3.Int(f"{tag}.{mode.value}.t.{f.name}") for f in fields(RfcTotals)))
        lg = LegacyTotals(*(z3.Int(f"{tag}.{mode.value}.l.{f.name}") for f in fields(LegacyTotals)))
        pc = PositionCounts(
            *(z3.Int(f"{tag}.{mode.value}.p.{f.name}") for f in fields(PositionCounts))
        )
        c, lc = st.rfc_step(mode, x, AR), st.legacy_step(mode, x, AR)
        # (name, folded, merged): the three counter dataclasses differ in type, not in shape.
        pairs: list[tuple[str, Any, Any]] = [
            (
                "rfc_add_step",
                ct.rfc_add_step(rfc, c, AR),
                ct.rfc_merge(rfc, ct.rfc_add_step(ct.rfc_zero(AR), c, AR), AR),
            ),
            (
                "legacy_add_step",
                ct.legacy_add_step(lg, lc, AR),
                ct.legacy_merge(lg, ct.legacy_add_step(ct.legacy_zero(AR), lc, AR), AR),
            ),
            (
                "position_add_step",
                ct.position_add_step(pc, p, c, lc, AR),
                ct.position_merge(pc, ct.position_add_step(ct.position_zero(AR), p, c, lc, AR), AR),
            ),
        ]
        for name, folded, merged in pairs:
            cond = z3.And(
                *(getattr(folded, f.name) == getattr(merged, f.name) for f in fields(folded))
            )
            out.append(
                Obligation(
                    f"{name} ({mode.value}) is merge with the block's own counts",
                    (p >= 0,),
                    cond,
                    Shown(inputs={"block": (mode, x)}),
                )
            )
    return out
