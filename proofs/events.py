"""Proofs over the machine's event rules (``reference/transitions.py``) and token-level stories.

The machine (``reference/machine.py``) keeps its bookkeeping (requests, blocks, stage order)
in plain Python and calls ``transitions.py`` for everything an event does to counts: the
conditions on an event's count (E5), the block's stage inputs after it, and what a closing
event (``Accept``, ``Finish``, ``Abort``, ``Preempt``) folds into the counters (E6). Those
functions are evaluated here over Z3 terms, for a symbolic open block, count and k:

- ``event:block`` — every legal stage event keeps an open block within A1-A8 (with 0 accepted);
  a fresh block is within them. So, by induction over any number of events, every open block is.
- ``event:close`` — for every open block within A1-A8 and every legal closing event: the closed
  block's own counts satisfy drafted >= verified >= accepted >= 0 (rfc and legacy), it is
  admissible (so every ``trace:INV-n`` consecution applies to it), and folding it into any state
  satisfying Inv keeps drafted >= verified >= accepted in total (INV-1) and per position (INV-6)
  and decreases no counter (INV-9). Non-closing events change no counter.
- ``event:discard`` — R6: a block discarded before ``Verify`` adds 0 to discarded_verified, one
  discarded after it adds exactly the drafts that reached the target.
- ``story:sync-async`` — a token-level story is a sequence of blocks, each with its stage inputs
  and what became of its output: delivered; delivered as stale output after a preemption;
  dropped by a preemption; lost to a finish or an abort; lost to an abort processed after the
  forward pass and before its output (sync too: vLLM EngineCoreProc, SPEC E3). Each story
  block is compiled to the events the sync engine emits and to those the async engine emits
  (where the preemption, finish or abort meets the block in flight), and run through the rules
  above: both event
  sequences are legal, and the two closed blocks add equal drafted, accepted and spec_steps,
  their verified differing by exactly the async grammar-invalid-verified drafts (DEC-2; equal
  when the grammar cuts nothing). With ``theorem:sync-async``'s fold relation this holds for
  stories of any length: the rfc totals of the sync and the async run are so related.

What is not proved here: the interleaving of several blocks' events. The rules of one block
read nothing of any other block, and folds commute (``merge:monoid``), so the order in which
blocks close does not change totals; tests/reference/test_machine_stateful.py drives interleaved
stories through the real ``Engine`` in both modes (0 mismatches is an assertion there).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, fields, replace
from typing import Any

import z3
from spectally.reference import counters as ct
from spectally.reference import step as st
from spectally.reference import transitions as tr
from spectally.reference.counters import RfcTotals
from spectally.reference.step import Mode, RfcStepCounts

from . import model as md
from .model import AR, Context, State, SymInputs, fresh_tag
from .obligations import Obligation, Shown, as_bool, as_int
from .z3arith import Cond, Num

Build = Callable[[], list[Obligation]]


def _pending(x: SymInputs) -> SymInputs:
    """The block as an open one: nothing accepted yet (what ``Engine`` reads before Accept)."""
    return replace(x, accepted=AR.lit(0), applied=AR.truth(True), legacy_reported=AR.truth(True))


def block_ok(mode: Mode, x: SymInputs, ctx: Context) -> Cond:
    """The open-block invariant: A1-A8 with nothing accepted (``step.admissible``)."""
    return md.admissible(mode, _pending(x), ctx)


def _choose(cond: Cond, then: SymInputs, other: SymInputs) -> SymInputs:
    return type(then)(
        **{f.name: z3.If(cond, getattr(then, f.name), getattr(other, f.name)) for f in fields(then)}
    )


@dataclass
class Run:
    """Events applied to one block through ``transitions.py``: the conditions they must meet
    (all of them, so the run is legal) and the events themselves, for witnesses."""

    mode: Mode
    ctx: Context
    block: SymInputs
    conditions: list[Cond] = field(default_factory=list)
    events: list[tuple[str, Num | None, Cond]] = field(default_factory=list)  # name, count, when

    def stage(self, stage: str, count: Num, when: Cond | None = None) -> None:
        conds, new, _ = tr.stage_rule(self.mode, stage, self.block, count, self.ctx.k, AR)
        guard = z3.BoolVal(True) if when is None else when
        self.conditions += [z3.Implies(guard, c) for _, c in conds]
        self.block = new if when is None else _choose(when, new, self.block)
        self.events.append((stage, count, guard))

    def to_target(self, x: SymInputs, verify: bool) -> None:
        """The stages up to the forward pass that make this block's caps those of ``x``."""
        target = st.pipeline(self.mode, x, AR)
        self.stage(tr.PROPOSE, x.proposed)
        self.stage(tr.PAD, x.padding)
        if self.mode is Mode.SYNC:
            self.stage(tr.GRAMMAR, x.proposed - x.grammar_valid, when=x.structured)
        now = st.pipeline(self.mode, self.block, AR)
        self.stage(tr.TRUNCATE, now.scheduled_slots - target.scheduled_slots)
        now = st.pipeline(self.mode, self.block, AR)
        self.stage(tr.AV, now.scheduled_drafts - target.verified)
        if verify:
            self.stage(tr.VERIFY, target.verified)

    def deferred_grammar(self, x: SymInputs) -> None:
        """Async: the grammar check of the scheduled drafts after the forward pass."""
        if self.mode is Mode.ASYNC:
            sd = st.pipeline(self.mode, self.block, AR).scheduled_drafts
            self.stage(tr.GRAMMAR, sd - AR.min(sd, x.grammar_valid), when=x.structured)

    def accept(self, accepted: Num, stale: Cond, dropped: Cond) -> SymInputs:
        conds, closed = tr.accept_rule(
            self.mode, self.block, accepted, stale, dropped, self.ctx.k, AR
        )
        self.conditions += [c for _, c in conds]
        self.events.append(("Accept", accepted, z3.BoolVal(True)))
        return closed

    def lifecycle(
        self, kind: str, verified: bool, expect_stays: bool, label: str = ""
    ) -> SymInputs:
        """A Finish/Abort/Preempt meets the block; the rule must keep it open as stale output
        exactly when ``expect_stays`` (a legality condition of the story's compilation)."""
        stays, closed = tr.lifecycle_rule(self.mode, kind, self.block, AR.truth(verified), AR)
        self.conditions.append(stays if expect_stays else z3.Not(stays))
        self.events.append((label or kind.capitalize(), None, z3.BoolVal(True)))
        return closed


# -- event:block ------------------------------------------------------------------------------


def block_preserved(mode: Mode) -> Build:
    def build() -> list[Obligation]:
        tag = fresh_tag(f"event.block.{mode.value}")
        ctx = Context.fresh(tag)
        x = md.sym_inputs(f"{tag}.x")
        count = z3.Int(f"{tag}.count")
        out: list[Obligation] = []
        fresh = tr.fresh_block(x.structured, AR)
        out.append(
            Obligation(
                "a fresh block is within A1-A8",
                tuple(ctx.facts()),
                block_ok(mode, fresh, ctx),
                Shown(terms={"k": ctx.k}),
            )
        )
        for stage in tr.COUNT_STAGES:
            # Stage order (E4): Propose and Pad only open a block or follow Propose.
            if stage == tr.PROPOSE:
                before, extra = fresh, []
            elif stage == tr.PAD:
                n = z3.Int(f"{tag}.proposed")
                _, before, _ = tr.stage_rule(mode, tr.PROPOSE, fresh, n, ctx.k, AR)
                extra = [n >= 0, n <= ctx.k]
            else:
                before, extra = x, [block_ok(mode, x, ctx)]
            conds, after, _ = tr.stage_rule(mode, stage, before, count, ctx.k, AR)
            out.append(
                Obligation(
                    f"E5 {stage}: a legal {stage} event keeps the open block within A1-A8",
                    (*ctx.facts(), *extra, *(c for _, c in conds)),
                    block_ok(mode, after, ctx),
                    Shown(inputs={"block": (None, before)}, terms={"k": ctx.k, "count": count}),
                )
            )
        return out

    return build


# -- event:close ------------------------------------------------------------------------------


def _step_ordered(mode: Mode, closed: SymInputs) -> list[tuple[str, Cond]]:
    c = st.rfc_step(mode, closed, AR)
    lg = st.legacy_step(mode, closed, AR)
    return [
        ("block: drafted >= verified", c.drafted >= c.verified),
        ("block: verified >= accepted", c.verified >= c.accepted),
        ("block: accepted >= 0", c.accepted >= 0),
        (
            "block: discarded drafted >= discarded verified",
            c.discarded_drafted >= c.discarded_verified,
        ),
        ("block: legacy accepted >= 0", lg.num_accepted_tokens >= 0),
    ]


def _close_claims(
    mode: Mode, closed: SymInputs, s: State, ctx: Context, tag: str
) -> list[tuple[str, Cond]]:
    after = md.fold(s, mode, closed, ctx, tag).state
    before_terms, after_terms = s.terms(), after.terms()
    monotone = z3.And(
        *(
            after_terms[key] >= before_terms[key]
            for key in before_terms
            if not key.startswith("sum(")
        )
    )
    return [
        *_step_ordered(mode, closed),
        ("the closed block is admissible (A1-A8)", md.admissible(mode, closed, ctx)),
        *((f"total: {label}", cond) for label, cond in md.INVARIANTS["INV-1"](after, ctx)),
        *((f"position i: {label}", cond) for label, cond in md.INVARIANTS["INV-6"](after, ctx)),
        ("INV-9: no counter decreases", monotone),
    ]


def close_preserved(mode: Mode) -> Build:
    def build() -> list[Obligation]:
        tag = fresh_tag(f"event.close.{mode.value}")
        ctx = Context.fresh(tag)
        x = md.sym_inputs(f"{tag}.x")
        s = State.fresh(f"{tag}.s")
        accepted = z3.Int(f"{tag}.accepted")
        stale, dropped = z3.Bool(f"{tag}.stale"), z3.Bool(f"{tag}.dropped")
        verified = z3.Bool(f"{tag}.verified")
        base = (*ctx.facts(), block_ok(mode, x, ctx), md.all_invariants(s, ctx))
        conds, by_accept = tr.accept_rule(mode, x, accepted, stale, dropped, ctx.k, AR)
        cases: list[tuple[str, tuple[Cond, ...], SymInputs]] = [
            ("Accept", tuple(c for _, c in conds), by_accept)
        ]
        for kind in (tr.FINISH, tr.ABORT, tr.PREEMPT):
            stays, discarded = tr.lifecycle_rule(mode, kind, x, verified, AR)
            cases.append((kind, (z3.Not(stays),), discarded))
        out: list[Obligation] = []
        for name, legal, closed in cases:
            for label, cond in _close_claims(mode, closed, s, ctx, f"{tag}.{name}"):
                out.append(
                    Obligation(
                        f"E6 {name}: {label}",
                        (*base, *legal),
                        cond,
                        Shown(
                            inputs={"open block": (None, x), "closed block": (None, closed)},
                            states={"state": s},
                            terms={"k": ctx.k, "i": ctx.i, "verified": verified},
                        ),
                    )
                )
        return out

    return build


def discard_verified(mode: Mode) -> Build:
    def build() -> list[Obligation]:
        tag = fresh_tag(f"event.discard.{mode.value}")
        ctx = Context.fresh(tag)
        x = md.sym_inputs(f"{tag}.x")
        out: list[Obligation] = []
        for kind in (tr.FINISH, tr.ABORT, tr.PREEMPT):
            for verified in (False, True):
                stays, closed = tr.lifecycle_rule(mode, kind, x, AR.truth(verified), AR)
                c = st.rfc_step(mode, closed, AR)
                reached = st.pipeline(mode, x, AR).verified if verified else AR.lit(0)
                out.append(
                    Obligation(
                        f"R6 {kind} of a block {'after' if verified else 'before'} Verify:"
                        f" discarded_verified == {'what reached the target' if verified else '0'}",
                        (*ctx.facts(), block_ok(mode, x, ctx)),
                        z3.Implies(
                            z3.Not(stays), z3.And(c.discarded_verified == reached, c.verified == 0)
                        ),
                        Shown(
                            inputs={"open block": (None, x)},
                            terms={"discarded_verified": c.discarded_verified, "k": ctx.k},
                        ),
                    )
                )
        return out

    return build


# -- story:sync-async -------------------------------------------------------------------------

EVENT_NAMES = {
    tr.PROPOSE: "Propose",
    tr.PAD: "Pad",
    tr.GRAMMAR: "GrammarReject",
    tr.TRUNCATE: "Truncate",
    tr.AV: "AVSkip",
    tr.VERIFY: "Verify",
}

# What became of a story block's output: (name, sync compilation, async compilation).
STORY_KINDS: tuple[str, ...] = (
    "delivered",
    "stale, delivered",
    "stale, dropped",
    "finished in flight",
    "aborted in flight",
    "aborted after the forward pass",
)


def compile_story_block(
    kind: str, mode: Mode, x: SymInputs, ctx: Context
) -> tuple[Run, SymInputs | None]:
    """The events ``mode``'s engine emits for one story block, run through the rules; the
    block they close (None when the engine never opened one)."""
    run = Run(mode, ctx, tr.fresh_block(x.structured, AR))
    no, yes = z3.BoolVal(False), z3.BoolVal(True)
    if mode is Mode.SYNC:
        if kind in ("delivered", "stale, delivered"):
            # Sync runs the block to completion before the scheduler can preempt the request.
            run.to_target(x, verify=True)
            return run, run.accept(x.accepted, no, no)
        if kind == "finished in flight":
            return run, None  # the request stopped before the next block was proposed
        if kind == "aborted after the forward pass":
            # vLLM EngineCoreProc processes aborts between the forward pass and its output
            # (E3): the verified block is discarded like an async block in flight.
            run.to_target(x, verify=True)
            return run, run.lifecycle(tr.ABORT, True, False)
        # Sync preemption (dropping) or abort: the proposal never reached the forward pass.
        run.to_target(x, verify=False)
        return run, run.lifecycle(
            tr.PREEMPT if kind == "stale, dropped" else tr.ABORT, False, False
        )
    run.to_target(x, verify=True)  # async: the block is in flight when the event comes
    if kind == "delivered":
        run.deferred_grammar(x)
        return run, run.accept(x.accepted, no, no)
    if kind in ("stale, delivered", "stale, dropped"):
        drop = kind == "stale, dropped"
        run.lifecycle(tr.PREEMPT, True, True, f"Preempt(drop_stale_output={drop})")
        run.deferred_grammar(x)
        return run, run.accept(x.accepted, yes, yes if drop else no)
    # finished / aborted in flight, aborted after the forward pass: the async block is in
    # flight either way
    return run, run.lifecycle(tr.FINISH if kind == "finished in flight" else tr.ABORT, True, False)


def _counts(mode: Mode, closed: SymInputs | None) -> RfcStepCounts[Num]:
    if closed is None:
        zero = AR.lit(0)
        return RfcStepCounts(
            zero,
            zero,
            zero,
            zero,
            zero,
            st.Fates(zero, zero, zero, zero, zero, zero),
            zero,
            zero,
            zero,
        )
    return st.rfc_step(mode, closed, AR)


def _giv(c: RfcStepCounts[Num] | RfcTotals[Num]) -> Num:
    if isinstance(c, RfcTotals):
        return c.grammar_invalid_verified
    return c.fates.grammar_invalid_verified


# [THM-1] sync and async give the same counts, up to grammar_invalid_verified
def related(
    cs: RfcStepCounts[Num] | RfcTotals[Num], ca: RfcStepCounts[Num] | RfcTotals[Num]
) -> list[tuple[str, Cond]]:
    """Sync and async rfc counts of the same story: what THM-1 promises."""
    giv_s, giv_a = _giv(cs), _giv(ca)
    return [
        ("spec_steps equal", cs.spec_steps == ca.spec_steps),
        ("drafted equal", cs.drafted == ca.drafted),
        ("accepted equal", cs.accepted == ca.accepted),
        ("verified differ by grammar_invalid_verified", ca.verified - cs.verified == giv_a - giv_s),
    ]


def _story_witness(
    kind: str, runs: dict[Mode, tuple[Run, SymInputs | None]], ctx: Context
) -> Callable[[z3.ModelRef], dict[str, Any]]:
    def build(model: z3.ModelRef) -> dict[str, Any]:
        out: dict[str, Any] = {"story": kind, "k": as_int(model, ctx.k)}
        for mode, (run, closed) in runs.items():
            events = []
            for name, count, when in run.events:
                if not as_bool(model, when):
                    continue
                if count is None:
                    events.append(name)
                    continue
                n = as_int(model, count)
                if n or name in (tr.PROPOSE, tr.VERIFY, "Accept"):  # a cut of 0 is no event
                    events.append(f"{EVENT_NAMES.get(name, name)}({n})")
            c = _counts(mode, closed)
            out[f"{mode.value} events"] = ", ".join(events)
            out[f"{mode.value} rfc"] = {
                n: as_int(model, getattr(c, n))
                for n in ("drafted", "verified", "accepted", "spec_steps")
            }
        return out

    return build


def story_sync_async() -> list[Obligation]:
    tag = fresh_tag("story")
    out: list[Obligation] = []
    for kind in STORY_KINDS:
        ctx = Context.fresh(f"{tag}.{kind}")
        x = md.sym_inputs(f"{tag}.{kind}.x")
        runs = {mode: compile_story_block(kind, mode, x, ctx) for mode in (Mode.SYNC, Mode.ASYNC)}
        hyps = (
            *ctx.facts(),
            md.admissible(Mode.SYNC, x, ctx),
            md.admissible(Mode.ASYNC, x, ctx),
        )
        (rs, closed_s), (ra, closed_a) = runs[Mode.SYNC], runs[Mode.ASYNC]
        claims = [
            ("the sync events are legal", z3.And(*rs.conditions)),
            ("the async events are legal", z3.And(*ra.conditions)),
            *related(_counts(Mode.SYNC, closed_s), _counts(Mode.ASYNC, closed_a)),
        ]
        shown = Shown(inputs={"story block": (None, x)}, terms=_terms(claims))
        out.append(
            Obligation(
                f"story block {kind}: both runs legal, equal spec_steps/drafted/accepted",
                hyps,
                z3.And(*(c for _, c in claims)),
                shown,
                minimize=(x.proposed, ctx.k),
                witness=_story_witness(kind, runs, ctx),
            )
        )
    # Any number of story blocks: the relation between the sync and the async totals is kept
    # by folding each block's two closings (counts from any related pair, as above).
    ss, sa = State.fresh(f"{tag}.sync"), State.fresh(f"{tag}.async")
    cs, ca = _sym_counts(f"{tag}.cs"), _sym_counts(f"{tag}.ca")
    folded = related(ct.rfc_add_step(ss.rfc, cs, AR), ct.rfc_add_step(sa.rfc, ca, AR))
    out.append(
        Obligation(
            "stories of any length: related totals stay related after one more story block",
            (*(c for _, c in related(ss.rfc, sa.rfc)), *(c for _, c in related(cs, ca))),
            z3.And(
                *(c for _, c in folded), *(c for _, c in related(ct.rfc_zero(AR), ct.rfc_zero(AR)))
            ),
            Shown(states={"sync": ss, "async": sa}, terms=_terms(folded)),
        )
    )
    return out


def _sym_counts(tag: str) -> RfcStepCounts[Num]:
    def i(name: str) -> Num:
        return z3.Int(f"{tag}.{name}")

    return RfcStepCounts(
        i("drafted"),
        i("verified"),
        i("accepted"),
        i("spec_steps"),
        i("padding"),
        st.Fates(*(i(f"fate.{n}") for n in st.FATE_NAMES)),
        i("discarded_steps"),
        i("discarded_drafted"),
        i("discarded_verified"),
    )


def _terms(claims: list[tuple[str, Cond]]) -> dict[str, Num | Cond]:
    return {f"holds: {label}": cond for label, cond in claims}


# -- metrics:identities -----------------------------------------------------------------------


def _defined(r: Any) -> Cond:
    """Whether ``Ratio.value`` gives a number (``if_zero`` None: undefined at denominator 0)."""
    if r.if_zero is None:
        return r.denominator != 0
    return z3.BoolVal(True)


def _value(r: Any) -> z3.ArithRef:
    """``Ratio.value`` over reals (an undefined ratio's value is unconstrained, never read)."""
    num, den = z3.ToReal(r.numerator), z3.ToReal(r.denominator)
    at_zero = z3.RealVal(0) if r.if_zero is None else z3.RealVal(r.if_zero)
    return z3.If(r.denominator == 0, at_zero, z3.RealVal(r.offset) + num / den)


def metric_identities() -> list[Obligation]:
    """Identities that tie the metric definitions (reference/metrics.py) to the counters and to
    each other, over any state satisfying Inv: which metrics are undefined exactly when (never
    reported as 0), M1 = M2 · M3, M1 · drafted = accepted, and Σ_i M6_i = M4 - 1 (the
    per-position sum is taken on the numerators: M6's denominator is the same at every
    position, which is a claim too)."""
    from spectally.reference import metrics as mt

    tag = fresh_tag("metrics.identities")
    ctx = Context.fresh(tag)
    s = State.fresh(f"{tag}.s")
    t = s.rfc
    m1, m2, m3 = mt.acceptance_rate(t), mt.draft_quality(t), mt.verification_rate(t)
    m4 = mt.mean_acceptance_length(t)
    m5 = mt.position_acceptance_given_verified(s.pos_i)
    m6_i, m6_j = (
        mt.position_acceptance_per_step(s.pos_i, t),
        mt.position_acceptance_per_step(s.pos_j, t),
    )
    m6_sum = mt.position_acceptance_per_step(s.sums, t)
    claims: list[tuple[str, Cond]] = [
        (
            "M1 acceptance rate is undefined exactly when nothing was drafted",
            _defined(m1) == (t.drafted > 0),
        ),
        (
            "M2 draft quality is undefined exactly when nothing was verified",
            _defined(m2) == (t.verified > 0),
        ),
        (
            "M3 verification rate is undefined exactly when nothing was drafted",
            _defined(m3) == (t.drafted > 0),
        ),
        (
            "M5 at i is undefined exactly when nothing was verified at i",
            _defined(m5) == (s.pos_i.verified > 0),
        ),
        (
            "M6 at i is undefined exactly when there was no spec step",
            _defined(m6_i) == (t.spec_steps > 0),
        ),
        (
            "M4 mean acceptance length is always defined, 1 with no spec step",
            z3.And(_defined(m4), z3.Implies(t.spec_steps == 0, _value(m4) == 1)),
        ),
        (
            "M1 * drafted == accepted",
            z3.Implies(t.drafted > 0, _value(m1) * z3.ToReal(t.drafted) == z3.ToReal(t.accepted)),
        ),
        (
            "M1 == M2 * M3 when something was verified",
            z3.Implies(t.verified > 0, _value(m1) == _value(m2) * _value(m3)),
        ),
        ("M6 has one denominator at every position", m6_i.denominator == m6_j.denominator),
        (
            "sum over positions of M6 == M4 - 1",
            z3.Implies(t.spec_steps > 0, _value(m6_sum) == _value(m4) - 1),
        ),
        (
            "M4 - 1 == accepted / spec_steps",
            z3.Implies(
                t.spec_steps > 0,
                (_value(m4) - 1) * z3.ToReal(t.spec_steps) == z3.ToReal(t.accepted),
            ),
        ),
    ]
    hyps = (*ctx.facts(), md.all_invariants(s, ctx))
    return [
        Obligation(
            f"Inv(s) -> {label}",
            hyps,
            cond,
            Shown(states={"state": s}, terms={"k": ctx.k, "i": ctx.i}),
        )
        for label, cond in claims
    ]
