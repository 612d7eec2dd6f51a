"""``theorem:sync-async``: the same stage inputs count alike under sync and async scheduling.

One symbolic block (`Block`), read under both modes, and six obligations over it: admissibility
is one set; the rfc counters agree (verified differs by the grammar-invalid drafts async
verifies), under vLLM 0.34's pipeline too; a block whose every draft the grammar rejects;
DEC-3's alternative spec-step definitions; and along traces, the relation is kept.
"""

from __future__ import annotations

from dataclasses import dataclass

import z3
from spectally.reference import counters as ct
from spectally.reference import step as st
from spectally.reference.counters import RfcTotals
from spectally.reference.profile import VLLM_034
from spectally.reference.step import Mode, RfcStepCounts

from .. import model as md
from ..model import AR, Context, State, SymInputs, fresh_tag
from ..obligations import Obligation, Shown
from ..z3arith import Cond, Num
from .lemmas import conjunct_terms

Conjuncts = list[tuple[str, Cond]]


@dataclass(frozen=True)
class Block:
    """One symbolic block's stage inputs, counted under sync (``cs``) and async (``ca``)."""

    tag: str
    ctx: Context
    x: SymInputs
    adm_s: Cond
    adm_a: Cond
    cs: RfcStepCounts[Num]
    ca: RfcStepCounts[Num]

    @classmethod
    def fresh(cls) -> Block:
        tag = fresh_tag("theorem.sync-async")
        ctx = Context.fresh(tag)
        x = md.sym_inputs(f"{tag}.x")
        adm_s = md.admissible(Mode.SYNC, x, ctx)
        adm_a = md.admissible(Mode.ASYNC, x, ctx)
        cs, ca = st.rfc_step(Mode.SYNC, x, AR), st.rfc_step(Mode.ASYNC, x, AR)
        return cls(tag, ctx, x, adm_s, adm_a, cs, ca)

    def admissible(self) -> tuple[Cond, ...]:
        """What every obligation but the first assumes: k's facts, admissible in both modes."""
        return (*self.ctx.facts(), self.adm_s, self.adm_a)

    def shown(self, conjuncts: Conjuncts, *, counts: bool = True) -> Shown:
        """A counterexample's view: the block in both modes, each conjunct, and with
        ``counts`` the verified and spec_steps counts of both modes."""
        ca, cs = self.ca, self.cs
        terms: dict[str, Num | Cond] = {}
        if counts:
            terms = {
                "sync verified": cs.verified,
                "async verified": ca.verified,
                "async grammar_invalid_verified": ca.fates.grammar_invalid_verified,
                "sync spec_steps": cs.spec_steps,
                "async spec_steps": ca.spec_steps,
            }
        inputs: dict[str, tuple[Mode | None, SymInputs]] = {
            "sync block": (Mode.SYNC, self.x),
            "async block": (Mode.ASYNC, self.x),
        }
        return Shown(inputs, terms={**terms, **conjunct_terms(conjuncts)})

    def obligation(
        self,
        label: str,
        conjuncts: Conjuncts,
        *,
        counts: bool = True,
        assume: tuple[Cond, ...] = (),
    ) -> Obligation:
        """Every conjunct, for a block admissible in both modes (and ``assume``)."""
        return Obligation(
            label,
            (*self.admissible(), *assume),
            z3.And(*(c for _, c in conjuncts)),
            self.shown(conjuncts, counts=counts),
        )


def theorem_sync_async() -> list[Obligation]:
    b = Block.fresh()
    return [
        _one_admissible_set(b),
        _same_counts(b),
        _same_counts_034(b),
        _every_draft_rejected(b),
        _dec3_alternatives(b),
        _traces(b),
    ]


def _one_admissible_set(b: Block) -> Obligation:
    return Obligation(
        "accepted admissibility is one set: admissible(sync, x) == admissible(async, x)",
        tuple(b.ctx.facts()),
        b.adm_s == b.adm_a,
        Shown(inputs={"block": (Mode.SYNC, b.x)}, terms={"sync": b.adm_s, "async": b.adm_a}),
    )


def _same_counts(b: Block) -> Obligation:
    cs, ca = b.cs, b.ca
    same = [
        ("drafted equal", cs.drafted == ca.drafted),
        ("accepted equal", cs.accepted == ca.accepted),
        ("spec_steps equal", cs.spec_steps == ca.spec_steps),
        ("padding equal", cs.padding == ca.padding),
        ("discarded steps equal", cs.discarded_steps == ca.discarded_steps),
        ("discarded drafted equal", cs.discarded_drafted == ca.discarded_drafted),
        (
            "verified differ by grammar_invalid_verified",
            ca.verified - cs.verified == ca.fates.grammar_invalid_verified,
        ),
        ("sync has no grammar_invalid_verified", cs.fates.grammar_invalid_verified == 0),
        ("async has no grammar_invalid_unverified", ca.fates.grammar_invalid_unverified == 0),
    ]
    return b.obligation(
        "same stage inputs: equal drafted/accepted/spec_steps, verified differ by "
        "grammar_invalid_verified",
        same,
    )


def _same_counts_034(b: Block) -> Obligation:
    """vLLM 0.34's sync trim keeps the first invalid draft, which is verified: the sync side
    has a grammar_invalid_verified term of its own, and the rest of the theorem stands."""
    ns = st.rfc_step(Mode.SYNC, b.x, AR, VLLM_034)
    na = st.rfc_step(Mode.ASYNC, b.x, AR, VLLM_034)
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
    return b.obligation(
        "vllm-0.34, same stage inputs: equal drafted/accepted/spec_steps, verified differ by"
        " the grammar_invalid_verified difference",
        same_034,
        counts=False,
    )


def _every_draft_rejected(b: Block) -> Obligation:
    cs, ca, x = b.cs, b.ca, b.x
    all_rejected = [
        ("spec_steps equal", cs.spec_steps == ca.spec_steps),
        (
            "an applied block with drafts is one spec step in both modes",
            z3.Implies(z3.And(x.applied, x.proposed > 0), cs.spec_steps == 1),
        ),
        ("sync verifies nothing", cs.verified == 0),
        (
            "async verifies only grammar-invalid drafts",
            ca.verified == ca.fates.grammar_invalid_verified,
        ),
        ("drafted equal", cs.drafted == ca.drafted),
        ("accepted is zero", z3.And(cs.accepted == 0, ca.accepted == 0)),
    ]
    return b.obligation(
        "grammar rejects every draft (structured, grammar_valid == 0)",
        all_rejected,
        assume=(x.structured, x.grammar_valid == 0),
    )


def _dec3_alternatives(b: Block) -> Obligation:
    """DEC-3's alternatives: two later-stage definitions of a spec step that are
    mode-independent too (the decision keeps N >= 1 for other reasons, recorded there)."""
    x = b.x
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
    return b.obligation(
        "DEC-3 alternatives: 'eligible >= 1' and 'grammar-valid scheduled >= 1' are"
        " mode-independent",
        alternatives,
        counts=False,
    )


def _related(a: RfcTotals[Num], b: RfcTotals[Num]) -> Conjuncts:
    """Two states folded from the same blocks, one in each mode."""
    return [
        ("drafted equal", a.drafted == b.drafted),
        ("accepted equal", a.accepted == b.accepted),
        ("spec_steps equal", a.spec_steps == b.spec_steps),
        (
            "verified differ by grammar_invalid_verified",
            b.verified - a.verified == b.grammar_invalid_verified - a.grammar_invalid_verified,
        ),
    ]


def _traces(b: Block) -> Obligation:
    """Along traces: states folded from the same blocks in each mode stay related."""
    ss, sa = State.fresh(f"{b.tag}.sync"), State.fresh(f"{b.tag}.async")
    zero = ct.rfc_zero(AR)
    rel_next = _related(ct.rfc_add_step(ss.rfc, b.cs, AR), ct.rfc_add_step(sa.rfc, b.ca, AR))
    shown = b.shown(rel_next, counts=False)
    return Obligation(
        "traces: the relation holds initially and is preserved by folding the same block",
        (*b.admissible(), *(c for _, c in _related(ss.rfc, sa.rfc))),
        z3.And(*(c for _, c in _related(zero, zero)), *(c for _, c in rel_next)),
        Shown(shown.inputs, states={"sync state": ss, "async state": sa}, terms=shown.terms),
    )
