"""``metrics:bounds``: the derived metrics' bounds and per-position rates, from the invariants."""

from __future__ import annotations

import z3
from spectally.reference import metrics as mt

from .. import model as md
from ..model import AR, Context, State, fresh_tag
from ..obligations import Obligation, Shown
from ..z3arith import Cond

# -- metrics:bounds ---------------------------------------------------------------------------


def metric_bounds() -> list[Obligation]:
    tag = fresh_tag("metrics")
    ctx = Context.fresh(tag)
    s = State.fresh(f"{tag}.s")
    t = s.rfc
    claims: list[tuple[str, Cond]] = list(mt.metric_bounds(t, ctx.k, AR))
    claims += [
        ("verification_rate in [0,1]", z3.And(t.verified >= 0, t.verified <= t.drafted)),
        (
            "no drafts -> nothing verified or accepted (rate undefined, not 0)",
            z3.Implies(t.drafted == 0, z3.And(t.verified == 0, t.accepted == 0)),
        ),
        (
            "no spec step -> nothing accepted (mean length 1.0 is exact)",
            z3.Implies(t.spec_steps == 0, t.accepted == 0),
        ),
        (
            "accepted_i / verified_i in [0,1]",
            z3.And(s.pos_i.accepted >= 0, s.pos_i.accepted <= s.pos_i.verified),
        ),
        (
            "accepted_i / spec_steps in [0,1]",
            z3.And(s.pos_i.accepted >= 0, s.pos_i.accepted <= t.spec_steps),
        ),
        ("accepted_i / spec_steps non-increasing in i", s.pos_j.accepted <= s.pos_i.accepted),
        (
            "legacy accepted_i / num_drafts in [0,1]",
            z3.And(s.pos_i.legacy_accepted >= 0, s.pos_i.legacy_accepted <= s.legacy.num_drafts),
        ),
        (
            "legacy accepted_i / num_drafts non-increasing in i",
            s.pos_j.legacy_accepted <= s.pos_i.legacy_accepted,
        ),
    ]
    hyps = (*ctx.facts(), md.all_invariants(s, ctx))
    return [
        Obligation(
            f"Inv(s) -> {label}",
            hyps,
            cond,
            Shown(states={"state": s}, terms={"k": ctx.k, "i": ctx.i, "j": ctx.j}),
        )
        for label, cond in claims
    ]
