"""The property suite: every claim `spectally prove` checks, as named proof obligations.

Names (SPEC.md's "proved by" column uses them verbatim):

- ``step:INV-n`` (n = 1..8): the state after one admissible block, for symbolic k and every
  admissible stage input, satisfies INV-n.
- ``step:discarded``: a discarded block counts only in discarded_*, an applied one never there.
- ``trace:INV-n`` (n = 1..9): INV-n holds after any trace of blocks of any number of requests,
  by induction: initiation (zero state), consecution (Inv ∧ admissible(x) -> INV-n after
  ``fold``) and closure under merge (sharded / per-request states combined). Inv is the
  conjunction INV-1..8. INV-9: every fold adds non-negative amounts. INV-10: the engine
  totals stay the merge of the per-request counters.
- ``theorem:sync-async``: the same stage inputs give equal drafted, accepted and spec_steps in
  both modes, verified differing by exactly the async grammar-invalid-verified drafts
  (also when the grammar rejects every draft, and along traces); admissibility is one set.
  Under vllm-0.34, whose sync trim verifies the first invalid draft, verified differs by the
  async minus the sync grammar-invalid-verified drafts.
- ``metrics:bounds``: ``metrics.metric_bounds`` and per-position rates from Inv.
- ``merge:monoid``: rfc/legacy/position merges are associative, commutative, zero identity,
  and each fold is a merge with the block's own counts.
- ``legacy:drafted>=verified`` / ``legacy:sync-async-spec-steps``: vLLM 0.32/0.33's counting,
  expected to be *refuted* (except drafted >= verified in sync, which holds).
- ``vllm-0.34:drafted>=verified``: vLLM 0.34's own drafted is never below the rfc's verified,
  in either mode.

The legacy and vLLM 0.34 properties are built in legacy.py; the registry below names them all.

Each property is built afresh when run, from the reference functions as they are at that
moment: a mutant patched into the reference changes what is proved.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, fields
from typing import Any

import z3
from spectally.reference import counters as ct
from spectally.reference import metrics as mt
from spectally.reference import step as st
from spectally.reference.counters import LegacyTotals, PositionCounts, RfcTotals
from spectally.reference.profile import VLLM_034
from spectally.reference.step import Mode

from . import events as evp
from . import model as md
from .legacy import legacy_drafted_verified, legacy_spec_steps, vllm034
from .model import AR, Context, State, fresh_tag
from .obligations import Obligation, Shown
from .z3arith import Cond, Num

MODES = md.MODES


@dataclass(frozen=True)
class Property:
    name: str
    profile: str  # rfc | vllm-legacy | vllm-0.34 | all
    mode: str  # sync | async | both
    expected: str  # proved | refuted
    build: Callable[[], list[Obligation]]
    summary: str = ""


def _conjunct_terms(conjuncts: list[tuple[str, Cond]]) -> dict[str, Cond]:
    return {f"holds: {label}": cond for label, cond in conjuncts}


# -- INV-5's lemma: Σ_{p<n} position_increment(len, p) == min(len, n), by induction on n ------


def _sum_lemma(mode: Mode, tag: str) -> list[Obligation]:
    ctx = Context.fresh(tag)
    x = md.sym_inputs(f"{tag}.x")
    n = z3.Int(f"{tag}.lemma_n")
    hyps = [*ctx.facts(), md.admissible(mode, x, ctx)]
    out: list[Obligation] = []
    for field in md.POSITION_FIELDS:
        fn = md._psum_function(mode, x, field, f"{tag}.{field}")
        total = md.block_total(mode, x, field)
        shown = Shown(inputs={"block": (mode, x)}, terms={"n": n, "len": total})
        out.append(
            Obligation(
                f"lemma {field}: base, sum over no position == min(len, 0)",
                (*hyps,),
                fn(0) == AR.min(total, AR.lit(0)),
                shown,
            )
        )
        out.append(
            Obligation(
                f"lemma {field}: step, sum_{{p<n}} == min(len, n) -> sum_{{p<n+1}} == "
                "min(len, n+1)",
                (*hyps, n >= 0, fn(n) == AR.min(total, n)),
                fn(n + 1) == AR.min(total, n + 1),
                shown,
            )
        )
    return out


# -- step:INV-n -------------------------------------------------------------------------------


def _step_inv(name: str, mode: Mode) -> Callable[[], list[Obligation]]:
    def build() -> list[Obligation]:
        tag = fresh_tag(f"step.{name}.{mode.value}")
        ctx = Context.fresh(tag)
        x = md.sym_inputs(f"{tag}.x")
        after = md.fold(State.zero(), mode, x, ctx, tag)
        hyps: list[Cond] = [*ctx.facts(), md.admissible(mode, x, ctx)]
        out: list[Obligation] = []
        if name == "INV-5":
            hyps += after.sum_facts
            out += _sum_lemma(mode, f"{tag}.lemma")
        conjuncts = md.INVARIANTS[name](after.state, ctx)
        shown = Shown(
            inputs={"block": (mode, x)},
            terms={"k": ctx.k, "i": ctx.i, "j": ctx.j, **_conjunct_terms(conjuncts)},
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


def _step_discarded(mode: Mode) -> Callable[[], list[Obligation]]:
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
                Shown(inputs={"block": (mode, x)}, terms=_conjunct_terms(discarded)),
            ),
            Obligation(
                "an applied block is not discarded",
                (*hyps, x.applied),
                z3.And(*(cond for _, cond in applied)),
                Shown(inputs={"block": (mode, x)}, terms=_conjunct_terms(applied)),
            ),
        ]

    return build


# -- trace:INV-n ------------------------------------------------------------------------------


def _trace_inv(name: str, mode: Mode) -> Callable[[], list[Obligation]]:
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
                Shown(terms={"k": ctx.k, **_conjunct_terms(zero_conj)}),
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
                    terms={"k": ctx.k, "i": ctx.i, "j": ctx.j, **_conjunct_terms(conj)},
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
                Shown(states={"a": a, "b": b}, terms={"k": ctx.k, **_conjunct_terms(merged)}),
            )
        )
        if name == "INV-5":
            out += _sum_lemma(mode, f"{tag}.lemma")
        return out

    return build


def _trace_monotone(mode: Mode) -> Callable[[], list[Obligation]]:
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
                    terms={"i": ctx.i, "j": ctx.j, **_conjunct_terms(conj)},
                ),
            )
        ]

    return build


def _totals_are_sums(mode: Mode) -> Callable[[], list[Obligation]]:
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
                    terms=_conjunct_terms(after),
                ),
            ),
        ]

    return build


# -- theorem:sync-async -----------------------------------------------------------------------


def _sync_async() -> list[Obligation]:
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
            Shown(shown.inputs, terms={**shown.terms, **_conjunct_terms(same)}),
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
            Shown(shown.inputs, terms=_conjunct_terms(same_034)),
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
            Shown(shown.inputs, terms={**shown.terms, **_conjunct_terms(all_rejected)}),
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
            Shown(shown.inputs, terms=_conjunct_terms(alternatives)),
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
                terms=_conjunct_terms(rel_next),
            ),
        )
    )
    return out


# -- metrics:bounds ---------------------------------------------------------------------------


def _metrics() -> list[Obligation]:
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


# -- merge:monoid -----------------------------------------------------------------------------


def _merge_laws() -> list[Obligation]:
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


# -- the registry -----------------------------------------------------------------------------


def all_properties() -> list[Property]:
    props: list[Property] = []
    for name in md.INVARIANTS:
        for mode in MODES:
            props.append(
                Property(
                    f"step:{name}",
                    md.INV_PROFILE[name],
                    mode.value,
                    "proved",
                    _step_inv(name, mode),
                )
            )
    for mode in MODES:
        props.append(Property("step:discarded", "rfc", mode.value, "proved", _step_discarded(mode)))
    for name in md.INVARIANTS:
        for mode in MODES:
            props.append(
                Property(
                    f"trace:{name}",
                    md.INV_PROFILE[name],
                    mode.value,
                    "proved",
                    _trace_inv(name, mode),
                )
            )
    for mode in MODES:
        props.append(Property("trace:INV-9", "all", mode.value, "proved", _trace_monotone(mode)))
    for mode in MODES:
        props.append(Property("trace:INV-10", "all", mode.value, "proved", _totals_are_sums(mode)))
    for mode in MODES:
        props.append(
            Property("event:block", "rfc", mode.value, "proved", evp.block_preserved(mode))
        )
        props.append(
            Property("event:close", "all", mode.value, "proved", evp.close_preserved(mode))
        )
        props.append(
            Property("event:discard", "rfc", mode.value, "proved", evp.discard_verified(mode))
        )
    props += [
        Property("story:sync-async", "rfc", "both", "proved", evp.story_sync_async),
        Property("theorem:sync-async", "rfc", "both", "proved", _sync_async),
        Property("metrics:bounds", "rfc", "both", "proved", _metrics),
        Property("metrics:identities", "rfc", "both", "proved", evp.metric_identities),
        Property("merge:monoid", "all", "both", "proved", _merge_laws),
        # [LX-1] legacy drafted >= verified: proved in sync, refuted in async
        Property(
            "legacy:drafted>=verified",
            "vllm-legacy",
            "sync",
            "proved",
            legacy_drafted_verified(Mode.SYNC),
        ),
        Property(
            "legacy:drafted>=verified",
            "vllm-legacy",
            "async",
            "refuted",
            legacy_drafted_verified(Mode.ASYNC),
        ),
        # [LX-2] legacy num_drafts equal under sync and async: refuted
        Property(
            "legacy:sync-async-spec-steps", "vllm-legacy", "both", "refuted", legacy_spec_steps
        ),
    ]
    for mode in MODES:
        props.append(
            Property(
                "vllm-0.34:drafted>=verified", "vllm-0.34", mode.value, "proved", vllm034(mode)
            )
        )
    return props
