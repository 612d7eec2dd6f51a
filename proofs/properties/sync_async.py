"""``theorem:sync-async``: the same stage inputs count alike under sync and async scheduling."""

from __future__ import annotations

import z3
from spectally.reference import counters as ct
from spectally.reference import step as st
from spectally.reference.counters import RfcTotals
from spectally.reference.profile import VLLM_034
from spectally.reference.step import Mode

from .. import model as md
from ..model import AR, Context, State, fresh_tag
from ..obligations import Obligation, Shown
from ..z3arith import Cond, Num
from .lemmas import conjunct_terms

# -- theorem:sync-async -----------------------------------------------------------------------


def theorem_sync_async() -> list[Obligation]:
    tag = fresh_tag("theorem.sync-async")
    ctx = Context.fresh(tag)
    x = md.sym_inputs(f"{tag}.x")
    adm_s = md.admissible(Mode.SYNC, x, ctx)
    adm_a = md.admissible(Mode.ASYNC, x, ctx)
    cs, ca = st.rfc_step(Mode.SYNC, x, AR), st.rfc_step(Mode.ASYNC, x, AR)
    giv = ca.fates.grammar_invalid_verified
    shown = Shown(
        inputs={"sync block": (Mode.SYNC, x), "async block": (Mode.ASYNC, x)},
        terms={
            "sync verified": cs.verified,
            "async verified": ca.verified,
            "async grammar_invalid_verified": giv,
            "sync spec_steps": cs.spec_steps,
            "async spec_steps": ca.spec_steps,
        },
    )
    same = [
        ("drafted equal", cs.drafted == ca.drafted),
        ("accepted equal", cs.accepted == ca.accepted),
        ("spec_steps equal", cs.spec_steps == ca.spec_steps),
        ("padding equal", cs.padding == ca.padding),
        ("discarded steps equal", cs.discarded_steps == ca.discarded_steps),
        ("discarded drafted equal", cs.discarded_drafted == ca.discarded_drafted),
        ("verified differ by grammar_invalid_verified", ca.verified - cs.verified == giv),
        ("sync has no grammar_invalid_verified", cs.fates.grammar_invalid_verified == 0),
        ("async has no grammar_invalid_unverified", ca.fates.grammar_invalid_unverified == 0),
    ]
    out = [
        Obligation(
            "accepted admissibility is one set: admissible(sync, x) == admissible(async, x)",
            tuple(ctx.facts()),
            adm_s == adm_a,
            Shown(inputs={"block": (Mode.SYNC, x)}, terms={"sync": adm_s, "async": adm_a}),
        ),
        Obligation(
            "same stage inputs: equal drafted/accepted/spec_steps, verified differ by "
            "grammar_invalid_verified",
            (*ctx.facts(), adm_s, adm_a),
            z3.And(*(c for _, c in same)),
            Shown(shown.inputs, terms={**shown.terms, **conjunct_terms(same)}),
        ),
    ]
    # vLLM 0.34's sync trim keeps the first invalid draft, which is verified: the sync side has a
    # grammar_invalid_verified term of its own, and the rest of the theorem stands.
    ns, na = st.rfc_step(Mode.SYNC, x, AR, VLLM_034), st.rfc_step(Mode.ASYNC, x, AR, VLLM_034)
    same_034 = [
        ("drafted equal", ns.drafted == na.drafted),
        ("accepted equal", ns.accepted == na.accepted),
        ("spec_steps equal", ns.spec_steps == na.spec_steps),
        ("padding equal", ns.padding == na.padding),
        (
            "verified differ by the grammar_invalid_verified difference",
            na.verified - ns.verified
            == na.fates.grammar_invalid_verified - ns.fates.grammar_invalid_verified,
        ),
    ]
    out.append(
        Obligation(
            "vllm-0.34, same stage inputs: equal drafted/accepted/spec_steps, verified differ by"
            " the grammar_invalid_verified difference",
            (*ctx.facts(), adm_s, adm_a),
            z3.And(*(c for _, c in same_034)),
            Shown(shown.inputs, terms=conjunct_terms(same_034)),
        )
    )
    all_rejected = [
        ("spec_steps equal", cs.spec_steps == ca.spec_steps),
        (
            "an applied block with drafts is one spec step in both modes",
            z3.Implies(z3.And(x.applied, x.proposed > 0), cs.spec_steps == 1),
        ),
        ("sync verifies nothing", cs.verified == 0),
        ("async verifies only grammar-invalid drafts", ca.verified == giv),
        ("drafted equal", cs.drafted == ca.drafted),
        ("accepted is zero", z3.And(cs.accepted == 0, ca.accepted == 0)),
    ]
    out.append(
        Obligation(
            "grammar rejects every draft (structured, grammar_valid == 0)",
            (*ctx.facts(), adm_s, adm_a, x.structured, x.grammar_valid == 0),
            z3.And(*(c for _, c in all_rejected)),
            Shown(shown.inputs, terms={**shown.terms, **conjunct_terms(all_rejected)}),
        )
    )
    # DEC-3's alternatives: two later-stage definitions of a spec step that are mode-independent
    # too (the decision keeps N >= 1 for other reasons, recorded there).
    ps, pa = st.pipeline(Mode.SYNC, x, AR), st.pipeline(Mode.ASYNC, x, AR)
    valid = z3.If(x.structured, x.grammar_valid, x.proposed)
    alternatives = [
        (
            "at least one eligible draft: same in both modes",
            (ps.eligible >= 1) == (pa.eligible >= 1),
        ),
        (
            "at least one grammar-valid draft scheduled: same in both modes",
            (z3.If(ps.scheduled_drafts < valid, ps.scheduled_drafts, valid) >= 1)
            == (z3.If(pa.scheduled_drafts < valid, pa.scheduled_drafts, valid) >= 1),
        ),
    ]
    out.append(
        Obligation(
            "DEC-3 alternatives: 'eligible >= 1' and 'grammar-valid scheduled >= 1' are"
            " mode-independent",
            (*ctx.facts(), adm_s, adm_a),
            z3.And(*(c for _, c in alternatives)),
            Shown(shown.inputs, terms=conjunct_terms(alternatives)),
        )
    )
    # Along traces: states folded from the same blocks in each mode stay related.
    ss, sa = State.fresh(f"{tag}.sync"), State.fresh(f"{tag}.async")

    def related(a: RfcTotals[Num], b: RfcTotals[Num]) -> list[tuple[str, Cond]]:
        return [
            ("drafted equal", a.drafted == b.drafted),
            ("accepted equal", a.accepted == b.accepted),
            ("spec_steps equal", a.spec_steps == b.spec_steps),
            (
                "verified differ by grammar_invalid_verified",
                b.verified - a.verified == b.grammar_invalid_verified - a.grammar_invalid_verified,
            ),
        ]

    zero = ct.rfc_zero(AR)
    nxt_s = ct.rfc_add_step(ss.rfc, cs, AR)
    nxt_a = ct.rfc_add_step(sa.rfc, ca, AR)
    rel_next = related(nxt_s, nxt_a)
    out.append(
        Obligation(
            "traces: the relation holds initially and is preserved by folding the same block",
            (*ctx.facts(), adm_s, adm_a, *(c for _, c in related(ss.rfc, sa.rfc))),
            z3.And(*(c for _, c in related(zero, zero)), *(c for _, c in rel_next)),
            Shown(
                shown.inputs,
                states={"sync state": ss, "async state": sa},
                terms=conjunct_terms(rel_next),
            ),
        )
    )
    return out
