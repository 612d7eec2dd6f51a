"""``trace:INV-n``: the invariants along any trace of blocks, by induction (INV-1..10)."""

from __future__ import annotations

from collections.abc import Callable

import z3
from spectally.reference.step import Mode

from .. import model as md
from ..model import Context, State, fresh_tag
from ..obligations import Obligation, Shown
from ..z3arith import Cond
from .lemmas import conjunct_terms, sum_lemma

# -- trace:INV-n ------------------------------------------------------------------------------


def trace_inv(name: str, mode: Mode) -> Callable[[], list[Obligation]]:
    def build() -> list[Obligation]:
        tag = fresh_tag(f"trace.{name}.{mode.value}")
        ctx = Context.fresh(tag)
        s = State.fresh(f"{tag}.s")
        x = md.sym_inputs(f"{tag}.x")
        after = md.fold(s, mode, x, ctx, tag)
        base = ctx.facts()
        out: list[Obligation] = []
        zero_conj = md.INVARIANTS[name](State.zero(), ctx)
        out.append(
            Obligation(
                f"{name} initiation: the zero state",
                tuple(base),
                z3.And(*(c for _, c in zero_conj)),
                Shown(terms={"k": ctx.k, **conjunct_terms(zero_conj)}),
            )
        )
        conj = md.INVARIANTS[name](after.state, ctx)
        out.append(
            Obligation(
                f"{name} consecution: Inv(s) and admissible(x) -> {name}(fold(s, x))",
                (
                    *base,
                    md.admissible(mode, x, ctx),
                    md.all_invariants(s, ctx),
                    # the INV-5 lemma at n = k (proved below); only INV-5 needs it
                    *(after.sum_facts if name == "INV-5" else ()),
                ),
                z3.And(*(c for _, c in conj)),
                Shown(
                    inputs={"block": (mode, x)},
                    states={"state": s},
                    terms={"k": ctx.k, "i": ctx.i, "j": ctx.j, **conjunct_terms(conj)},
                ),
            )
        )
        a, b = State.fresh(f"{tag}.a"), State.fresh(f"{tag}.b")
        merged = md.INVARIANTS[name](md.merge(a, b), ctx)
        out.append(
            Obligation(
                f"{name} merge: Inv(a) and Inv(b) -> {name}(merge(a, b))",
                (*base, md.all_invariants(a, ctx), md.all_invariants(b, ctx)),
                z3.And(*(c for _, c in merged)),
                Shown(states={"a": a, "b": b}, terms={"k": ctx.k, **conjunct_terms(merged)}),
            )
        )
        if name == "INV-5":
            out += sum_lemma(mode, f"{tag}.lemma")
        return out

    return build


def trace_monotone(mode: Mode) -> Callable[[], list[Obligation]]:
    def build() -> list[Obligation]:
        tag = fresh_tag(f"trace.INV-9.{mode.value}")
        ctx = Context.fresh(tag)
        s = State.fresh(f"{tag}.s")
        x = md.sym_inputs(f"{tag}.x")
        after = md.fold(s, mode, x, ctx, tag).state
        before_terms, after_terms = s.terms(), after.terms()
        conj = [
            (f"{key} does not decrease", after_terms[key] >= before_terms[key])
            for key in before_terms
            if not key.startswith("sum(")  # sums are a proof device, not counters
        ]
        return [
            Obligation(
                "INV-9: every fold (rfc_add_step, legacy_add_step, position_add_step at any "
                "position) adds non-negative amounts",
                (*ctx.facts(), md.admissible(mode, x, ctx)),
                z3.And(*(c for _, c in conj)),
                Shown(
                    inputs={"block": (mode, x)},
                    terms={"i": ctx.i, "j": ctx.j, **conjunct_terms(conj)},
                ),
            )
        ]

    return build


def totals_are_sums(mode: Mode) -> Callable[[], list[Obligation]]:
    """INV-10: the engine totals are the merge of the per-request counters. The machine folds
    every closed block into the engine totals and into its request's counters; with
    T == merge(R, rest) before, folding x into T and into R keeps T == merge(R, rest)."""

    def build() -> list[Obligation]:
        tag = fresh_tag(f"trace.INV-10.{mode.value}")
        ctx = Context.fresh(tag)
        x = md.sym_inputs(f"{tag}.x")
        t, r, rest = State.fresh(f"{tag}.T"), State.fresh(f"{tag}.R"), State.fresh(f"{tag}.rest")

        def equal(a: State, b: State) -> list[tuple[str, Cond]]:
            bt = b.terms()
            return [
                (f"{name} equal", term == bt[name])
                for name, term in a.terms().items()
                if not name.startswith("sum(")  # a proof device, not a counter
            ]

        before = equal(t, md.merge(r, rest))
        after = equal(
            md.fold(t, mode, x, ctx, f"{tag}.t").state,
            md.merge(md.fold(r, mode, x, ctx, f"{tag}.r").state, rest),
        )
        zero = State.zero()
        return [
            Obligation(
                "INV-10 initiation: no request, and a new request's zero counters, change nothing",
                tuple(ctx.facts()),
                z3.And(
                    *(c for _, c in equal(zero, md.merge(zero, zero))),
                    *(c for _, c in equal(t, md.merge(t, zero))),
                ),
                Shown(states={"T": t}),
            ),
            Obligation(
                "INV-10 consecution: T == merge(R, rest) -> fold(T, x) == merge(fold(R, x), rest)",
                (*ctx.facts(), md.admissible(mode, x, ctx), *(c for _, c in before)),
                z3.And(*(c for _, c in after)),
                Shown(
                    inputs={"block": (mode, x)},
                    states={"T": t, "R": r, "rest": rest},
                    terms=conjunct_terms(after),
                ),
            ),
        ]

    return build
