"""Proofs of the drafter-shape invariants (SPEC.md section 12), over ``reference/shapes.py``.

Like the chain proofs, every obligation evaluates the reference's own functions over Z3 terms
(`Z3_ARITH`): ``chain_step``, ``chain_position``, ``layer_admissibility``, ``tree_add_layer``,
``depth_counts``, ``tree_step``, ``chain_layer``, ``shape_merge``, ``request_totals`` and
``three_fates``. What is written here by hand is the claims.

- ``shape:chain-step``: one admissible chain step of length K_t <= k_max (symbolic k_max, every
  K_t, fillers included) adds drafted >= verified >= accepted >= 0, filler <= drafted, exactly
  one of a spec step and a zero-draft step (K_t = 0: no spec step, nothing drafted); per
  position, nothing at positions >= K_t, accepted_p <= verified_p <= drafted_p, and the vectors
  (length k_max) sum to the step's totals: Σ_{p<n} = min(len, n) by induction on n.
- ``shape:tree-step``: a tree of any depth, read depth by depth: by induction over the depths,
  accepted <= verified <= drafted, accepted <= depth <= drafted (one accepted node per depth at
  most), the per-depth counters sum to the totals, and the whole tree adds one spec step exactly
  when it has a depth (an empty tree is a zero-draft step).
- ``shape:chain-is-tree``: a chain step read as a tree with one node per depth (`chain_layer`)
  is an admissible tree and counts the same drafted, verified, accepted and steps, for every K.
- ``shape:totals``: over any number of steps of every shape, the totals keep drafted >=
  verified >= accepted >= 0, spec steps <= drafted, filler <= drafted, and (chain streams)
  drafted <= k_max · spec steps: initiation, consecution for a chain step and for a tree step,
  closure under merge; the three fates are each >= 0 and partition drafted.
- ``shape:parallel``: n > 1: a request's totals are the sum of its sequences' in any order or
  grouping, the engine's the sum of every sequence (merge is a commutative monoid).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import fields
from typing import Any

import z3
from spectally.reference import shapes as sh
from spectally.reference.shapes import ChainStep, ShapeTotals, TreeLayer, TreeWalk

from .model import AR, fresh_tag
from .obligations import Obligation, Shown
from .properties import Property
from .z3arith import Cond, Num


def _chain(tag: str) -> ChainStep[Num]:
    return ChainStep(*(z3.Int(f"{tag}.{f.name}") for f in fields(ChainStep)))


def _totals(tag: str) -> ShapeTotals[Num]:
    return ShapeTotals(*(z3.Int(f"{tag}.{f.name}") for f in fields(ShapeTotals)))


def _walk(tag: str) -> TreeWalk[Num, Cond]:
    n = [z3.Int(f"{tag}.{name}") for name in ("drafted", "verified", "accepted", "depth")]
    return TreeWalk(n[0], n[1], n[2], n[3], z3.Bool(f"{tag}.on_path"))


def _layer(tag: str) -> TreeLayer[Num, Cond]:
    return TreeLayer(
        z3.Int(f"{tag}.proposed"), z3.Int(f"{tag}.verified"), z3.Bool(f"{tag}.reached")
    )


def _all(conds: list[tuple[str, str, Cond]]) -> Cond:
    """The conjunction of a reference admissibility list (rule, reason, condition)."""
    return z3.And(*(c for _, _, c in conds))


def _terms(**named: Any) -> Shown:
    terms: dict[str, Num | Cond] = {}
    for name, value in named.items():
        if isinstance(value, (z3.ArithRef, z3.BoolRef)):
            terms[name] = value
        else:
            for f in fields(value):
                terms[f"{name}.{f.name}"] = getattr(value, f.name)
    return Shown(terms=terms)


def _same(u: Any, v: Any, names: tuple[str, ...] | None = None) -> Cond:
    keys = names or tuple(f.name for f in fields(u))
    return z3.And(*(getattr(u, k) == getattr(v, k) for k in keys))


# -- the claims ------------------------------------------------------------------------------


def ordered(t: ShapeTotals[Num]) -> list[tuple[str, Cond]]:
    """[SINV-1] and what every state of every shape keeps (SINV-4, SINV-7 without k_max)."""
    return [
        ("drafted >= verified", t.drafted >= t.verified),
        ("verified >= accepted", t.verified >= t.accepted),
        ("accepted >= 0", t.accepted >= 0),
        ("0 <= spec_steps <= drafted", z3.And(t.spec_steps >= 0, t.spec_steps <= t.drafted)),
        ("zero_draft_steps >= 0", t.zero_draft_steps >= 0),
        ("0 <= filler <= drafted", z3.And(t.filler >= 0, t.filler <= t.drafted)),
    ]


def chain_bound(t: ShapeTotals[Num], k_max: Num) -> list[tuple[str, Cond]]:
    """A chain stream drafts at most k_max per spec step (SINV-7)."""
    return [("drafted <= k_max * spec_steps", t.drafted <= k_max * t.spec_steps)]


def walk_claims(w: TreeWalk[Num, Cond], sums: tuple[Num, Num, Num]) -> list[tuple[str, Cond]]:
    """What a tree walk keeps at every depth (SINV-1, SINV-2, SINV-3)."""
    return [
        (
            "0 <= accepted <= verified <= drafted",
            z3.And(w.accepted >= 0, w.accepted <= w.verified, w.verified <= w.drafted),
        ),
        ("accepted <= depth <= drafted", z3.And(w.accepted <= w.depth, w.depth <= w.drafted)),
        ("on the path, accepted = depth", z3.Implies(w.on_path, w.accepted == w.depth)),
        ("depth 0 drafted nothing", z3.Implies(w.depth == 0, w.drafted == 0)),
        ("per-depth drafted sums to drafted", sums[0] == w.drafted),
        ("per-depth verified sums to verified", sums[1] == w.verified),
        ("per-depth accepted sums to accepted", sums[2] == w.accepted),
    ]


def _goal(claims: list[tuple[str, Cond]]) -> Cond:
    return z3.And(*(c for _, c in claims))


# -- shape:chain-step -----------------------------------------------------------------------


def _position_sum(s: ChainStep[Num], index: int, tag: str) -> z3.FuncDeclRef:
    """Σ_{p<n} of what `chain_position` adds at p (field ``index``), as a recursive function."""
    fn = z3.RecFunction(f"{tag}.psum{index}", z3.IntSort(), z3.IntSort())
    n = z3.Int(f"{tag}.n{index}")
    z3.RecAddDefinition(
        fn, [n], z3.If(n <= 0, z3.IntVal(0), fn(n - 1) + sh.chain_position(s, n - 1, AR)[index])
    )
    return fn


def chain_step_obligations() -> list[Obligation]:
    tag = fresh_tag("shape.chain")
    s, k_max, p = _chain(f"{tag}.s"), z3.Int(f"{tag}.k_max"), z3.Int(f"{tag}.p")
    adm = _all(sh.chain_admissibility(s, k_max, AR))
    c = sh.chain_step(s, AR)
    d, v, a = sh.chain_position(s, p, AR)
    shown = _terms(step=s, k_max=k_max, adds=c, position=p)
    out = [
        # [SINV-1] per step: drafted >= verified >= accepted >= 0 (fillers counted, FILL-1)
        Obligation(
            "a chain step is ordered", (adm,), _goal(ordered(c) + chain_bound(c, k_max)), shown
        ),
        # [SINV-4] a zero-draft step is no spec step and adds nothing but itself
        Obligation(
            "exactly one of a spec step and a zero-draft step",
            (adm,),
            z3.And(
                c.spec_steps + c.zero_draft_steps == 1, z3.Or(c.spec_steps == 0, c.spec_steps == 1)
            ),
            shown,
        ),
        Obligation(
            "K_t = 0 adds no spec step and nothing drafted",
            (adm, s.proposed == 0),
            z3.And(c.spec_steps == 0, c.zero_draft_steps == 1, c.drafted == 0, c.verified == 0),
            shown,
        ),
        Obligation(
            "per position: nothing at or past K_t, accepted <= verified <= drafted",
            (adm, p >= 0),
            z3.And(z3.Implies(p >= s.proposed, d == 0), a >= 0, a <= v, v <= d, d <= 1),
            shown,
        ),
    ]
    # [SINV-2] Σ_{p<n} = min(len, n): base and step by induction on n, then n = k_max
    n = z3.Int(f"{tag}.n")
    for i, (name, length) in enumerate(
        (("drafted", s.proposed), ("verified", s.verified), ("accepted", s.accepted))
    ):
        fn = _position_sum(s, i, f"{tag}.{name}")
        lemma = (fn(n) == AR.min(length, n), fn(n + 1) == AR.min(length, n + 1))
        out += [
            Obligation(f"per-position {name}: Σ over no position is 0", (adm,), fn(0) == 0, shown),
            Obligation(
                f"per-position {name}: Σ_(p<n) = min(len, n) carries to n + 1",
                (adm, n >= 0, lemma[0]),
                lemma[1],
                _terms(step=s, n=n),
            ),
            Obligation(
                f"per-position {name}: Σ_(p<k_max) = {name}",
                (adm, fn(k_max) == AR.min(length, k_max)),
                fn(k_max) == getattr(c, name),
                shown,
            ),
        ]
    return out


# -- shape:tree-step ------------------------------------------------------------------------


def tree_step_obligations() -> list[Obligation]:
    tag = fresh_tag("shape.tree")
    w, layer = _walk(f"{tag}.w"), _layer(f"{tag}.layer")
    sums = tuple(z3.Int(f"{tag}.sum{i}") for i in range(3))
    start = sh.tree_start(AR)
    zero = AR.lit(0)
    after = sh.tree_add_layer(w, layer, AR)
    added = sh.depth_counts(layer, AR)
    new_sums = (sums[0] + added[0], sums[1] + added[1], sums[2] + added[2])
    adm = _all(sh.layer_admissibility(w, layer, AR))
    inv = _goal(walk_claims(w, sums))
    shown = _terms(walk=w, layer=layer)
    t = sh.tree_step(w, AR)
    return [
        Obligation(
            "an empty walk keeps the claims",
            (),
            _goal(walk_claims(start, (zero, zero, zero))),
            Shown(),
        ),
        # [SINV-3] one more depth keeps accepted <= depth and the per-depth sums equal to totals
        Obligation(
            "one more admissible depth keeps the claims",
            (inv, adm),
            _goal(walk_claims(after, new_sums)),
            shown,
        ),
        Obligation(
            "a walked tree adds an ordered step, a spec step iff it has a depth",
            (inv,),
            z3.And(
                _goal(ordered(t)),
                t.spec_steps == z3.If(w.depth >= 1, 1, 0),
                t.spec_steps + t.zero_draft_steps == 1,
            ),
            shown,
        ),
    ]


# -- shape:chain-is-tree --------------------------------------------------------------------


def _chain_walk(s: ChainStep[Num], n: Num) -> TreeWalk[Num, Cond]:
    """The walk after depths 0 .. n-1 of a chain read as a tree (the claim)."""
    return TreeWalk(n, AR.min(s.verified, n), AR.min(s.accepted, n), n, n <= s.accepted)


def chain_is_tree_obligations() -> list[Obligation]:
    tag = fresh_tag("shape.chaintree")
    s, k_max, n = _chain(f"{tag}.s"), z3.Int(f"{tag}.k_max"), z3.Int(f"{tag}.n")
    adm = z3.And(_all(sh.chain_admissibility(s, k_max, AR)), s.filler == 0)
    w = _chain_walk(s, n)
    layer = sh.chain_layer(s, n, AR)
    shown = _terms(step=s, n=n)
    whole = sh.tree_step(_chain_walk(s, s.proposed), AR)
    return [
        Obligation(
            "depth 0: the empty walk",
            (adm,),
            _same(sh.tree_start(AR), _chain_walk(s, AR.lit(0))),
            shown,
        ),
        # [TREE-5] depth n of the chain is an admissible depth and advances the walk by one node
        Obligation(
            "each depth of the chain is admissible",
            (adm, n >= 0, n < s.proposed),
            _all(sh.layer_admissibility(w, layer, AR)),
            shown,
        ),
        Obligation(
            "each depth advances the walk as the chain's prefix",
            (adm, n >= 0, n < s.proposed),
            _same(sh.tree_add_layer(w, layer, AR), _chain_walk(s, n + 1)),
            shown,
        ),
        Obligation(
            "the whole chain as a tree counts what the chain step counts",
            (adm,),
            _same(whole, sh.chain_step(s, AR)),
            shown,
        ),
    ]


# -- shape:totals ---------------------------------------------------------------------------


def totals_obligations() -> list[Obligation]:
    tag = fresh_tag("shape.totals")
    t, u = _totals(f"{tag}.t"), _totals(f"{tag}.u")
    k_max = z3.Int(f"{tag}.k_max")
    s = _chain(f"{tag}.s")
    w = _walk(f"{tag}.w")
    sums = tuple(z3.Int(f"{tag}.sum{i}") for i in range(3))
    inv_t, inv_u = _goal(ordered(t)), _goal(ordered(u))
    bound_t, bound_u = _goal(chain_bound(t, k_max)), _goal(chain_bound(u, k_max))
    adm = _all(sh.chain_admissibility(s, k_max, AR))
    walked = _goal(walk_claims(w, sums))
    zero = sh.shape_zero(AR)
    f = sh.three_fates(t, AR)
    return [
        Obligation(
            "zero totals keep every claim",
            (k_max >= 0,),
            _goal(ordered(zero) + chain_bound(zero, k_max)),
            Shown(),
        ),
        # [SINV-1] in total: a chain step keeps the order and the k_max bound
        Obligation(
            "a chain step keeps the totals' claims",
            (inv_t, bound_t, adm),
            _goal(
                ordered(sh.shape_merge(t, sh.chain_step(s, AR), AR))
                + chain_bound(sh.shape_merge(t, sh.chain_step(s, AR), AR), k_max)
            ),
            _terms(totals=t, step=s, k_max=k_max),
        ),
        Obligation(
            "a tree step keeps the totals' claims",
            (inv_t, walked),
            _goal(ordered(sh.shape_merge(t, sh.tree_step(w, AR), AR))),
            _terms(totals=t, walk=w),
        ),
        Obligation(
            "merging two states keeps the claims",
            (inv_t, inv_u, bound_t, bound_u),
            _goal(ordered(sh.shape_merge(t, u, AR)) + chain_bound(sh.shape_merge(t, u, AR), k_max)),
            _terms(a=t, b=u),
        ),
        Obligation(
            "a zero-draft step changes only zero_draft_steps",
            (adm, s.proposed == 0),
            _same(
                sh.shape_merge(t, sh.chain_step(s, AR), AR),
                ShapeTotals(
                    t.drafted,
                    t.verified,
                    t.accepted,
                    t.spec_steps,
                    t.zero_draft_steps + 1,
                    t.filler,
                ),
            ),
            _terms(totals=t, step=s),
        ),
        # [SINV-6] the three fates partition drafted
        Obligation(
            "the three fates are >= 0 and partition drafted",
            (inv_t,),
            z3.And(
                f.accepted >= 0,
                f.rejected >= 0,
                f.unverified >= 0,
                f.accepted + f.rejected + f.unverified == t.drafted,
                f.accepted == t.accepted,
                f.accepted + f.rejected == t.verified,
            ),
            _terms(totals=t),
        ),
    ]


# -- shape:parallel -------------------------------------------------------------------------


def parallel_obligations() -> list[Obligation]:
    tag = fresh_tag("shape.parallel")
    a, b, c = _totals(f"{tag}.a"), _totals(f"{tag}.b"), _totals(f"{tag}.c")
    zero = sh.shape_zero(AR)
    merge = sh.shape_merge
    req = sh.request_totals
    sum_ab = ShapeTotals(*(getattr(a, f.name) + getattr(b, f.name) for f in fields(ShapeTotals)))
    shown = _terms(a=a, b=b, c=c)
    # [SINV-5] a request with sequences a, b sums them; the engine sums every sequence
    return [
        Obligation(
            "a request's totals are its sequences' sum", (), _same(req([a, b], AR), sum_ab), shown
        ),
        Obligation(
            "a request with one sequence is that sequence", (), _same(req([a], AR), a), shown
        ),
        Obligation(
            "engine totals over requests = the sum of every sequence",
            (),
            _same(req([req([a, b], AR), req([c], AR)], AR), req([a, b, c], AR)),
            shown,
        ),
        Obligation(
            "sequence order does not matter",
            (),
            _same(req([a, b, c], AR), req([c, a, b], AR)),
            shown,
        ),
        Obligation(
            "merge is associative",
            (),
            _same(merge(merge(a, b, AR), c, AR), merge(a, merge(b, c, AR), AR)),
            shown,
        ),
        Obligation("merge is commutative", (), _same(merge(a, b, AR), merge(b, a, AR)), shown),
        Obligation(
            "zero is the identity",
            (),
            z3.And(_same(merge(zero, a, AR), a), _same(merge(a, zero, AR), a)),
            shown,
        ),
    ]


SHAPE_PROPERTIES: tuple[tuple[str, Callable[[], list[Obligation]]], ...] = (
    ("shape:chain-step", chain_step_obligations),
    ("shape:tree-step", tree_step_obligations),
    ("shape:chain-is-tree", chain_is_tree_obligations),
    ("shape:totals", totals_obligations),
    ("shape:parallel", parallel_obligations),
)


def shape_properties() -> list[Property]:
    """The drafter-shape properties, built afresh at each run (so a mutant is seen)."""
    return [Property(name, "rfc", "both", "proved", build) for name, build in SHAPE_PROPERTIES]
