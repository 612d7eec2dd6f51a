"""Symbolic counter states and the invariants of SPEC.md section 5, stated over Z3 terms.

Nothing here restates a counting *rule*: every transition is the reference's own code
(``step.rfc_step``, ``counters.rfc_add_step``, ``counters.position_add_step``, ...) evaluated
with `Z3_ARITH`. What is written here is the *claims* (the invariant predicates of
``reference/invariants.py``, lifted from concrete vectors of length k to symbolic positions) and
the abstraction of a counter state that the inductive proofs fold blocks into:

- the rfc and legacy scalar totals (every field, symbolic);
- the per-position counters at three positions: symbolic ``i <= j < k`` and ``0``;
- the four per-position *sums* Σ_{p<k} vector[p] (for INV-5), which a fold advances by
  Σ_{p<k} (what ``position_add_step`` adds at p), a Z3 recursive function.

The reference's functions are looked up as module attributes at call time (``st.rfc_step``,
not a name bound at import), so `spectally.proofs.mutants` can swap one in and rerun the proofs.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, fields
from typing import Any

import z3
from spectally.reference import counters as ct
from spectally.reference import step as st
from spectally.reference.counters import LegacyTotals, PositionCounts, RfcTotals
from spectally.reference.step import Mode, StepInputs

from .z3arith import Z3_ARITH, Cond, Num

AR = Z3_ARITH
# Both scheduling modes, in the order every property is checked.
MODES: tuple[Mode, ...] = (Mode.SYNC, Mode.ASYNC)
SymInputs = StepInputs[Num, Cond]
POSITION_FIELDS: tuple[str, ...] = tuple(f.name for f in fields(PositionCounts))
# The numbering of `fresh_tag` inside the current `name_scope` (None outside any).
_numbering: ContextVar[Iterator[int] | None] = ContextVar("proof_name_numbering", default=None)


@contextmanager
def name_scope() -> Iterator[z3.Context]:
    """Build a property inside: its Z3 terms go to a new context of their own (z3's default
    context is swapped for it) and `fresh_tag` numbers names from 0.

    What the solver does with an obligation (and so a check's run time, though not its
    verdict, which the resource budget decides) depends on the names and on the context its
    terms are copied from: Z3 follows names in its search, and copying a term into
    `discharge`'s fresh context copies every recursive function defined in the source context
    too (shifting the copy's term ids). Built in a scope, a property's obligations are the same
    whatever the process built before; without one, a check took seconds or many minutes
    depending on the run order.
    """
    token = _numbering.set(itertools.count())
    try:
        with default_context(z3.Context()) as own:
            yield own
    finally:
        _numbering.reset(token)


@contextmanager
def default_context(ctx: z3.Context) -> Iterator[z3.Context]:
    """Make ``ctx`` z3's default context (the one ``z3.Int(name)`` and the reference's
    `Z3_ARITH` build in) inside; e.g. to build a witness from the terms of an obligation."""
    previous = z3.z3._main_ctx
    z3.z3._main_ctx = ctx  # z3 has no public setter for its default context
    try:
        if z3.main_ctx() is not ctx:
            raise RuntimeError("z3.main_ctx() cannot be swapped in this z3 version")
        yield ctx
    finally:
        z3.z3._main_ctx = previous


def fresh_tag(base: str) -> str:
    """A name prefix no other name of the same `name_scope` uses."""
    numbering = _numbering.get()
    if numbering is None:
        raise RuntimeError(f"fresh_tag({base!r}) outside a name_scope(): build in one")
    return f"{base}#{next(numbering)}"


def sym_inputs(tag: str) -> SymInputs:
    """Every stage input of one block, free (constrained only by ``step.admissible``)."""
    values: dict[str, Any] = {}
    for f in fields(StepInputs):
        name = f"{tag}.{f.name}"
        if f.name in ("structured", "applied", "legacy_reported"):
            values[f.name] = z3.Bool(name)
        else:
            values[f.name] = z3.Int(name)
    return StepInputs(**values)


@dataclass(frozen=True)
class Context:
    """What stays fixed along a trace: k and the observed positions 0 <= i <= j < k."""

    k: Num
    i: Num
    j: Num

    @classmethod
    def fresh(cls, tag: str) -> Context:
        return cls(z3.Int(f"{tag}.k"), z3.Int(f"{tag}.i"), z3.Int(f"{tag}.j"))

    def facts(self) -> list[Cond]:
        return [self.k >= 1, self.i >= 0, self.i <= self.j, self.j < self.k]


@dataclass(frozen=True)
class State:
    """A counter state, abstracted to what the invariants mention (see module docstring)."""

    rfc: RfcTotals[Num]
    legacy: LegacyTotals[Num]
    pos_i: PositionCounts[Num]
    pos_j: PositionCounts[Num]
    pos_0: PositionCounts[Num]
    sums: PositionCounts[Num]  # Σ_{p<k} of each per-position vector

    @classmethod
    def fresh(cls, tag: str) -> State:
        def group(kind: type, prefix: str) -> Any:
            return kind(*(z3.Int(f"{tag}.{prefix}.{f.name}") for f in fields(kind)))

        return cls(
            rfc=group(RfcTotals, "rfc"),
            legacy=group(LegacyTotals, "legacy"),
            pos_i=group(PositionCounts, "pos[i]"),
            pos_j=group(PositionCounts, "pos[j]"),
            pos_0=group(PositionCounts, "pos[0]"),
            sums=group(PositionCounts, "sum(pos)"),
        )

    @classmethod
    def zero(cls) -> State:
        return cls(
            rfc=ct.rfc_zero(AR),
            legacy=ct.legacy_zero(AR),
            pos_i=ct.position_zero(AR),
            pos_j=ct.position_zero(AR),
            pos_0=ct.position_zero(AR),
            sums=ct.position_zero(AR),
        )

    def terms(self) -> dict[str, Num]:
        """Every counter of the state by a readable name (for counterexamples)."""
        out: dict[str, Num] = {}
        for part in ("rfc", "legacy", "pos_i", "pos_j", "pos_0", "sums"):
            obj = getattr(self, part)
            label = {"pos_i": "pos[i]", "pos_j": "pos[j]", "pos_0": "pos[0]"}.get(part, part)
            label = "sum(pos)" if part == "sums" else label
            for f in fields(obj):
                out[f"{label}.{f.name}"] = getattr(obj, f.name)
        return out


def _psum_function(mode: Mode, x: SymInputs, field: str, tag: str) -> z3.FuncDeclRef:
    fn = z3.RecFunction(f"{tag}.psum.{field}", z3.IntSort(), z3.IntSort())
    n = z3.Int(f"{tag}.n")
    c, legacy = st.rfc_step(mode, x, AR), st.legacy_step(mode, x, AR)
    added_at = getattr(ct.position_add_step(ct.position_zero(AR), n - 1, c, legacy, AR), field)
    z3.RecAddDefinition(fn, [n], z3.If(n <= 0, z3.IntVal(0), fn(n - 1) + added_at))
    return fn


def block_total(mode: Mode, x: SymInputs, field: str) -> Num:
    """What one block adds to the total that the per-position vector ``field`` sums to."""
    if field == "legacy_accepted":
        value: Num = st.legacy_step(mode, x, AR).num_accepted_tokens
        return value
    rfc_value: Num = getattr(st.rfc_step(mode, x, AR), field)
    return rfc_value


def total_of(s: State, field: str) -> Num:
    value: Num = (
        s.legacy.num_accepted_tokens if field == "legacy_accepted" else getattr(s.rfc, field)
    )
    return value


@dataclass(frozen=True)
class Fold:
    """A state after one more block, with the facts its per-position sums rest on."""

    state: State
    sum_facts: list[Cond]  # psum_f(k) == min(total_f, k): the INV-5 lemma at n = k


def fold(s: State, mode: Mode, x: SymInputs, ctx: Context, tag: str) -> Fold:
    """Fold one block into ``s`` with the reference's own fold functions."""
    psums: dict[str, Num] = {}
    facts: list[Cond] = []
    for field in POSITION_FIELDS:
        fn = _psum_function(mode, x, field, tag)
        psums[field] = fn(ctx.k)
        facts.append(fn(ctx.k) == AR.min(block_total(mode, x, field), ctx.k))
    c, legacy = st.rfc_step(mode, x, AR), st.legacy_step(mode, x, AR)
    new = State(
        rfc=ct.rfc_add_step(s.rfc, c, AR),
        legacy=ct.legacy_add_step(s.legacy, legacy, AR),
        pos_i=ct.position_add_step(s.pos_i, ctx.i, c, legacy, AR),
        pos_j=ct.position_add_step(s.pos_j, ctx.j, c, legacy, AR),
        pos_0=ct.position_add_step(s.pos_0, AR.lit(0), c, legacy, AR),
        sums=ct.position_merge(s.sums, PositionCounts(**psums), AR),
    )
    return Fold(new, facts)


def merge(a: State, b: State) -> State:
    """Two counter states combined (engines, shards, requests) with the reference's merges."""
    return State(
        rfc=ct.rfc_merge(a.rfc, b.rfc, AR),
        legacy=ct.legacy_merge(a.legacy, b.legacy, AR),
        pos_i=ct.position_merge(a.pos_i, b.pos_i, AR),
        pos_j=ct.position_merge(a.pos_j, b.pos_j, AR),
        pos_0=ct.position_merge(a.pos_0, b.pos_0, AR),
        sums=ct.position_merge(a.sums, b.sums, AR),
    )


# -- the invariants (claims), one list of named conjuncts per INV id -------------------------


def _inv1(s: State, ctx: Context) -> list[tuple[str, Cond]]:
    r = s.rfc
    return [
        ("drafted >= verified", r.drafted >= r.verified),
        ("verified >= accepted", r.verified >= r.accepted),
        ("accepted >= 0", r.accepted >= 0),
    ]


def _inv2(s: State, ctx: Context) -> list[tuple[str, Cond]]:
    fates = s.rfc.fates().as_dict()
    out = [(f"fate {name} >= 0", value >= 0) for name, value in fates.items()]
    out.append(("fates sum to drafted", z3.Sum(*fates.values()) == s.rfc.drafted))
    return out


def _inv3(s: State, ctx: Context) -> list[tuple[str, Cond]]:
    r = s.rfc
    return [
        ("accepted fate == accepted", r.accepted_fate == r.accepted),
        (
            "verified == accepted + rejected + grammar_invalid_verified",
            r.verified == r.accepted + r.rejected + r.grammar_invalid_verified,
        ),
    ]


def _inv4(s: State, ctx: Context) -> list[tuple[str, Cond]]:
    out = [
        (f"{f}[j] <= {f}[i] for i <= j", getattr(s.pos_j, f) <= getattr(s.pos_i, f))
        for f in POSITION_FIELDS
    ]
    out += [
        (f"{f}[i] <= {f}[0]", getattr(s.pos_i, f) <= getattr(s.pos_0, f)) for f in POSITION_FIELDS
    ]
    return out


def _inv5(s: State, ctx: Context) -> list[tuple[str, Cond]]:
    return [
        (f"sum over positions of {f} == its total", getattr(s.sums, f) == total_of(s, f))
        for f in POSITION_FIELDS
    ]


def _inv6(s: State, ctx: Context) -> list[tuple[str, Cond]]:
    p = s.pos_i
    return [
        ("accepted[i] >= 0", p.accepted >= 0),
        ("legacy_accepted[i] >= 0", p.legacy_accepted >= 0),
        ("accepted[i] <= verified[i]", p.accepted <= p.verified),
        ("verified[i] <= drafted[i]", p.verified <= p.drafted),
    ]


def _inv7(s: State, ctx: Context) -> list[tuple[str, Cond]]:
    r = s.rfc
    return [
        ("drafted[0] == spec_steps", s.pos_0.drafted == r.spec_steps),
        ("accepted[0] <= spec_steps", s.pos_0.accepted <= r.spec_steps),
        ("drafted <= k * spec_steps", r.drafted <= ctx.k * r.spec_steps),
    ]


def _inv8(s: State, ctx: Context) -> list[tuple[str, Cond]]:
    lg = s.legacy
    return [
        ("legacy accepted[0] <= num_drafts", s.pos_0.legacy_accepted <= lg.num_drafts),
        ("legacy accepted <= k * num_drafts", lg.num_accepted_tokens <= ctx.k * lg.num_drafts),
    ]


INVARIANTS = {
    "INV-1": _inv1,
    "INV-2": _inv2,
    "INV-3": _inv3,
    "INV-4": _inv4,
    "INV-5": _inv5,
    "INV-6": _inv6,
    "INV-7": _inv7,
    "INV-8": _inv8,
}
"""INV id -> named conjuncts over a symbolic state (reference/invariants.py, lifted)."""

INV_PROFILE = {name: ("vllm-legacy" if name == "INV-8" else "rfc") for name in INVARIANTS}


def invariant(name: str, s: State, ctx: Context) -> Cond:
    return z3.And(*(c for _, c in INVARIANTS[name](s, ctx)))


def all_invariants(s: State, ctx: Context) -> Cond:
    """The inductive invariant: the conjunction of INV-1..8."""
    return z3.And(*(invariant(name, s, ctx) for name in INVARIANTS))


def admissible(mode: Mode, x: SymInputs, ctx: Context) -> Cond:
    """``step.admissible`` (reference code) with the block bounded by k."""
    cond: Cond = st.admissible(mode, x, AR, ctx.k)
    return cond


def cli_expressible(x: SymInputs) -> list[Cond]:
    """Inputs that ``spectally step`` flags can state: no padding, applied (and so reported)."""
    return [x.padding == 0, x.applied, x.legacy_reported]
