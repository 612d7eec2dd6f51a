"""``step:INV-n`` and ``step:discarded``: the state after one admissible block."""

from __future__ import annotations

from collections.abc import Callable

import z3
from spectally.reference import step as st
from spectally.reference.step import Mode

from .. import model as md
from ..model import AR, Context, State, fresh_tag
from ..obligations import Obligation, Shown
from ..z3arith import Cond
from .lemmas import conjunct_terms, sum_lemma

# -- step:INV-n -------------------------------------------------------------------------------


def step_inv(name: str, mode: Mode) -> Callable[[], list[Obligation]]:
    def build() -> list[Obligation]:
        tag = fresh_tag(f"step.{name}.{mode.value}")
        ctx = Context.fresh(tag)
        x = md.sym_inputs(f"{tag}.x")
        after = md.fold(State.zero(), mode, x, ctx, tag)
        hyps: list[Cond] = [*ctx.facts(), md.admissible(mode, x, ctx)]
        out: list[Obligation] = []
        if name == "INV-5":
            hyps += after.sum_facts
            out += sum_lemma(mode, f"{tag}.lemma")
        conjuncts = md.INVARIANTS[name](after.state, ctx)
        shown = Shown(
            inputs={"block": (mode, x)},
            terms={"k": ctx.k, "i": ctx.i, "j": ctx.j, **conjunct_terms(conjuncts)},
        )
        out.append(
            Obligation(
                f"{name} after one admissible block",
                tuple(hyps),
                z3.And(*(c for _, c in conjuncts)),
                shown,
            )
        )
        return out

    return build


def step_discarded(mode: Mode) -> Callable[[], list[Obligation]]:
    """A block counts only when applied: a discarded block adds to the discarded_* counters
    and to nothing else; an applied block adds nothing to them."""

    def build() -> list[Obligation]:
        tag = fresh_tag(f"step.discarded.{mode.value}")
        ctx = Context.fresh(tag)
        x = md.sym_inputs(f"{tag}.x")
        c = st.rfc_step(mode, x, AR)
        p = st.pipeline(mode, x, AR)
        counted = [c.drafted, c.verified, c.accepted, c.spec_steps, c.padding]
        counted += list(c.fates.as_dict().values())
        discarded = [
            ("adds nothing to any applied counter or fate", z3.And(*(v == 0 for v in counted))),
            ("discarded drafted == proposed", c.discarded_drafted == x.proposed),
            ("discarded verified == what reached the target", c.discarded_verified == p.verified),
            (
                "one discarded step when it had drafts",
                c.discarded_steps == z3.If(x.proposed > 0, 1, 0),
            ),
        ]
        applied = [
            (
                "an applied block adds nothing to discarded_*",
                z3.And(c.discarded_steps == 0, c.discarded_drafted == 0, c.discarded_verified == 0),
            )
        ]
        hyps = (*ctx.facts(), md.admissible(mode, x, ctx))
        return [
            Obligation(
                "a discarded block (applied = false) counts only as discarded",
                (*hyps, z3.Not(x.applied)),
                z3.And(*(cond for _, cond in discarded)),
                Shown(inputs={"block": (mode, x)}, terms=conjunct_terms(discarded)),
            ),
            Obligation(
                "an applied block is not discarded",
                (*hyps, x.applied),
                z3.And(*(cond for _, cond in applied)),
                Shown(inputs={"block": (mode, x)}, terms=conjunct_terms(applied)),
            ),
        ]

    return build
