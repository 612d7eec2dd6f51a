"""Drafter shapes beyond one fixed-length chain: trees, a draft length that changes per step,
filler drafts, parallel sampling (n > 1) and the three fates every shape shares.

SPEC.md section 12 ("Drafter shapes") is its prose. Like ``step.py`` the rules are written over
an `Arith`, so the proofs (``proofs/shapes.py``) evaluate these very functions over Z3 terms.

A *stream* is the spec steps of one sampled sequence: a request with ``n = 1`` is one stream, a
request with ``n > 1`` is ``n`` streams. Each step of a stream is either a chain (``ChainStep``:
``K_t`` drafts, one per position) or a tree (a list of ``TreeLayer``, one per depth). Both add a
``ShapeTotals`` to the stream's totals; a request's totals, and the engine's, are sums.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, fields
from typing import Generic

from .arith import INT_ARITH, Arith, B, N
from .errors import InadmissibleStep, InvariantViolation
from .step import position_increment


@dataclass(frozen=True)
class ShapeTotals(Generic[N]):
    """What a step adds, and what a stream, a request or an engine has counted."""

    drafted: N  # drafts proposed: chain slots or tree nodes, fillers included
    verified: N  # of them, in the target's forward pass
    accepted: N  # of them, accepted (bonus token excluded)
    spec_steps: N  # steps with at least one draft
    zero_draft_steps: N  # steps whose draft length was 0: no spec step, but visible
    filler: N  # of the drafted, filler slots (a drafter's miss filled with a sampled token)


def shape_zero(ar: Arith[N, B]) -> ShapeTotals[N]:
    zero = ar.lit(0)
    return ShapeTotals(zero, zero, zero, zero, zero, zero)


def shape_merge(a: ShapeTotals[N], b: ShapeTotals[N], ar: Arith[N, B]) -> ShapeTotals[N]:
    """Field-wise sum: two streams, requests or engines counted together."""
    # [PAR-1] totals of several streams are their field-wise sum
    return ShapeTotals(
        drafted=ar.add(a.drafted, b.drafted),
        verified=ar.add(a.verified, b.verified),
        accepted=ar.add(a.accepted, b.accepted),
        spec_steps=ar.add(a.spec_steps, b.spec_steps),
        zero_draft_steps=ar.add(a.zero_draft_steps, b.zero_draft_steps),
        filler=ar.add(a.filler, b.filler),
    )


def request_totals(streams: Sequence[ShapeTotals[N]], ar: Arith[N, B]) -> ShapeTotals[N]:
    """A request's totals from its sequences' (n > 1: one stream per sequence)."""
    # [PAR-2] each sequence is its own stream of spec steps; the request sums them
    total = shape_zero(ar)
    for stream in streams:
        total = shape_merge(total, stream, ar)
    return total


# -- a chain whose length changes per step ---------------------------------------------------


@dataclass(frozen=True)
class ChainStep(Generic[N]):
    """One step of a linear drafter: ``proposed`` (K_t) drafts at positions 0 .. K_t-1."""

    proposed: N  # K_t, fillers included
    filler: N  # of them, filler slots (always the tail: the drafter ran out of matches)
    verified: N  # drafts in the target's forward pass
    accepted: N  # drafts accepted


def chain_admissibility(s: ChainStep[N], k_max: N, ar: Arith[N, B]) -> list[tuple[str, str, B]]:
    """(rule, reason, condition) for each thing a producible chain step satisfies."""
    zero = ar.lit(0)
    return [
        # [VK-1] each step has 0 <= K_t <= k_max
        ("VK-1", "the draft length must be >= 0", ar.le(zero, s.proposed)),
        ("VK-1", "the draft length cannot exceed k_max", ar.le(s.proposed, k_max)),
        # [FILL-2] fillers are some of the drafted: 0 <= filler <= K_t
        ("FILL-2", "filler must be >= 0", ar.le(zero, s.filler)),
        ("FILL-2", "filler cannot exceed the draft length", ar.le(s.filler, s.proposed)),
        # [VK-4] 0 <= accepted <= verified <= K_t
        ("VK-4", "verified cannot exceed the draft length", ar.le(s.verified, s.proposed)),
        ("VK-4", "accepted must be >= 0", ar.le(zero, s.accepted)),
        ("VK-4", "accepted cannot exceed verified", ar.le(s.accepted, s.verified)),
    ]


def step_adds(drafted: N, verified: N, accepted: N, filler: N, ar: Arith[N, B]) -> ShapeTotals[N]:
    """What one step of any shape adds to its stream, from its drafts' counts."""
    has_drafts = ar.lt(ar.lit(0), drafted)
    one, zero = ar.lit(1), ar.lit(0)
    return ShapeTotals(
        drafted=drafted,
        verified=verified,
        accepted=accepted,
        # [VK-2] a step with K_t = 0 (an empty tree too) is no spec step; it adds one
        # zero_draft_step instead
        spec_steps=ar.ite(has_drafts, one, zero),
        zero_draft_steps=ar.ite(has_drafts, zero, one),
        filler=filler,
    )


def chain_step(s: ChainStep[N], ar: Arith[N, B]) -> ShapeTotals[N]:
    """What one chain step adds to its stream."""
    # [FILL-1] fillers are drafted, verified and accepted like any draft;
    # [FILL-3] the filler sub-count makes them visible
    return step_adds(s.proposed, s.verified, s.accepted, s.filler, ar)


def chain_position(s: ChainStep[N], position: N, ar: Arith[N, B]) -> tuple[N, N, N]:
    """(drafted, verified, accepted) the step adds at ``position`` of the per-position vectors
    (length k_max)."""
    # [VK-3] per-position counts reach only positions < K_t (and < verified, < accepted)
    return (
        position_increment(s.proposed, position, ar),
        position_increment(s.verified, position, ar),
        position_increment(s.accepted, position, ar),
    )


# -- trees -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class TreeLayer(Generic[N, B]):
    """One depth of a draft tree (depth 0: the nodes right after the last sampled token)."""

    proposed: N  # nodes proposed at this depth
    verified: N  # of them, nodes in the target's forward pass
    reached: B  # the accepted path reaches past this depth: its node here was accepted


@dataclass(frozen=True)
class TreeWalk(Generic[N, B]):
    """A tree step read depth by depth: what the depths so far add."""

    drafted: N
    verified: N
    accepted: N
    depth: N  # depths read so far
    on_path: B  # the accepted path reached every depth so far


def tree_start(ar: Arith[N, B]) -> TreeWalk[N, B]:
    zero = ar.lit(0)
    return TreeWalk(zero, zero, zero, zero, ar.truth(True))


def layer_admissibility(
    w: TreeWalk[N, B], layer: TreeLayer[N, B], ar: Arith[N, B]
) -> list[tuple[str, str, B]]:
    """(rule, reason, condition) for a depth that follows ``w``'s depths in a producible tree."""
    zero = ar.lit(0)
    return [
        # [TREE-1] a depth exists when a node is proposed there; verified nodes are proposed ones
        ("TREE-1", "a depth has at least one proposed node", ar.lt(zero, layer.proposed)),
        ("TREE-1", "verified nodes must be >= 0", ar.le(zero, layer.verified)),
        (
            "TREE-1",
            "verified nodes cannot exceed proposed nodes",
            ar.le(layer.verified, layer.proposed),
        ),
        # [TREE-2] the path passes a depth only through a verified node, and only if it got there
        (
            "TREE-2",
            "the accepted path passes a depth only through a verified node",
            ar.either(ar.negate(layer.reached), ar.lt(zero, layer.verified)),
        ),
        (
            "TREE-2",
            "the accepted path cannot skip a depth",
            ar.either(ar.negate(layer.reached), w.on_path),
        ),
    ]


def depth_counts(layer: TreeLayer[N, B], ar: Arith[N, B]) -> tuple[N, N, N]:
    """(drafted, verified, accepted) one depth adds to the per-depth vectors at its depth."""
    # [TREE-4] per depth: nodes proposed, nodes verified, 1 when the path reaches depth d + 1
    return layer.proposed, layer.verified, ar.ite(layer.reached, ar.lit(1), ar.lit(0))


def tree_add_layer(w: TreeWalk[N, B], layer: TreeLayer[N, B], ar: Arith[N, B]) -> TreeWalk[N, B]:
    """The walk after one more depth."""
    reached = ar.both(w.on_path, layer.reached)
    return TreeWalk(
        # [TREE-3] drafted: nodes proposed; verified: nodes in the target's forward pass;
        # accepted: nodes on the accepted path
        drafted=ar.add(w.drafted, layer.proposed),
        verified=ar.add(w.verified, layer.verified),
        accepted=ar.add(w.accepted, ar.ite(reached, ar.lit(1), ar.lit(0))),
        depth=ar.add(w.depth, ar.lit(1)),
        on_path=reached,
    )


def tree_step(w: TreeWalk[N, B], ar: Arith[N, B]) -> ShapeTotals[N]:
    """What a whole tree step (every depth walked) adds to its stream: no fillers."""
    return step_adds(w.drafted, w.verified, w.accepted, ar.lit(0), ar)


def chain_layer(s: ChainStep[N], depth: N, ar: Arith[N, B]) -> TreeLayer[N, B]:
    """Depth ``depth`` of a chain step read as a tree."""
    # [TREE-5] a linear chain is the tree with one node per depth
    return TreeLayer(
        proposed=ar.lit(1),
        verified=ar.ite(ar.lt(depth, s.verified), ar.lit(1), ar.lit(0)),
        reached=ar.lt(depth, s.accepted),
    )


# -- the three fates -------------------------------------------------------------------------


@dataclass(frozen=True)
class ThreeFates(Generic[N]):
    accepted: N
    rejected: N  # verified, refused by the target
    unverified: N  # never in the forward pass (LM Studio's "ignored")


def three_fates(t: ShapeTotals[N], ar: Arith[N, B]) -> ThreeFates[N]:
    """Every shape's drafts split by fate."""
    # [FATE-1] drafted = accepted + rejected + unverified
    return ThreeFates(
        accepted=t.accepted,
        rejected=ar.sub(t.verified, t.accepted),
        unverified=ar.sub(t.drafted, t.verified),
    )


# -- over ints: a stream folded with its vectors, and the invariants checked -----------------


@dataclass(frozen=True)
class StreamCounters:
    """A stream's (or a request's, or an engine's) counters over ints."""

    totals: ShapeTotals[int]
    per_position: tuple[tuple[int, int, int], ...]  # (drafted, verified, accepted), length k_max
    per_depth: tuple[tuple[int, int, int], ...]  # (drafted, verified, accepted), deepest tree

    @staticmethod
    def zero(k_max: int) -> StreamCounters:
        return StreamCounters(shape_zero(INT_ARITH), ((0, 0, 0),) * k_max, ())

    def merge(self, other: StreamCounters) -> StreamCounters:
        depth = max(len(self.per_depth), len(other.per_depth))
        pad = (0, 0, 0)
        a = self.per_depth + (pad,) * (depth - len(self.per_depth))
        b = other.per_depth + (pad,) * (depth - len(other.per_depth))
        return StreamCounters(
            shape_merge(self.totals, other.totals, INT_ARITH),
            _add_vectors(self.per_position, other.per_position),
            _add_vectors(a, b),
        )

    def to_dict(self) -> dict[str, object]:
        out: dict[str, object] = {f.name: getattr(self.totals, f.name) for f in fields(self.totals)}
        fates = three_fates(self.totals, INT_ARITH)
        out["fates"] = {f.name: getattr(fates, f.name) for f in fields(fates)}
        for name, vectors in (("per_position", self.per_position), ("per_depth", self.per_depth)):
            out[name] = {
                key: [v[i] for v in vectors]
                for i, key in enumerate(("drafted", "verified", "accepted"))
            }
        return out


def _add_vectors(
    a: tuple[tuple[int, int, int], ...], b: tuple[tuple[int, int, int], ...]
) -> tuple[tuple[int, int, int], ...]:
    return tuple((x[0] + y[0], x[1] + y[1], x[2] + y[2]) for x, y in zip(a, b, strict=True))


def _refuse(checks: list[tuple[str, str, bool]], where: str) -> None:
    failed = [f"[{rule}] {where}: {reason}" for rule, reason, ok in checks if not ok]
    if failed:
        raise InadmissibleStep(failed)


def fold_chain(c: StreamCounters, s: ChainStep[int], k_max: int) -> StreamCounters:
    """``c`` after one chain step; `InadmissibleStep` naming the rules when none could occur."""
    _refuse(chain_admissibility(s, k_max, INT_ARITH), "chain step")
    add = StreamCounters(
        chain_step(s, INT_ARITH),
        tuple(chain_position(s, p, INT_ARITH) for p in range(k_max)),
        (),
    )
    return c.merge(add)


def fold_tree(c: StreamCounters, layers: Sequence[TreeLayer[int, bool]]) -> StreamCounters:
    """``c`` after one tree step (its depths in order); `InadmissibleStep` when impossible."""
    w = tree_start(INT_ARITH)
    for d, layer in enumerate(layers):
        _refuse(layer_admissibility(w, layer, INT_ARITH), f"tree depth {d}")
        w = tree_add_layer(w, layer, INT_ARITH)
    # [SINV-3] a tree step accepts at most one node per depth, and drafts at least one
    if not w.accepted <= w.depth <= w.drafted:
        raise InvariantViolation("SINV-3", f"tree step {w}")
    per_depth = tuple(depth_counts(layer, INT_ARITH) for layer in layers)
    no_positions = ((0, 0, 0),) * len(c.per_position)
    return c.merge(StreamCounters(tree_step(w, INT_ARITH), no_positions, per_depth))


def shape_violations(c: StreamCounters, k_max: int | None = None) -> list[str]:
    """The shape invariants ``c`` breaks (empty for every state the rules can reach).

    ``k_max`` is given for chain-only counters: a tree may propose more nodes than k_max."""
    t = c.totals
    fates = three_fates(t, INT_ARITH)
    sums = [sum(v[i] for v in c.per_position + c.per_depth) for i in range(3)]
    checks = [
        # [SINV-1] drafted >= verified >= accepted >= 0, per step and in total, every shape
        ("SINV-1", t.drafted >= t.verified >= t.accepted >= 0),
        # [SINV-2] the per-position (chains) and per-depth (trees) vectors sum to the totals
        ("SINV-2", sums == [t.drafted, t.verified, t.accepted]),
        # [SINV-4] a step with K_t = 0 makes no spec step: every spec step drafted something
        ("SINV-4", 0 <= t.spec_steps <= t.drafted and t.zero_draft_steps >= 0),
        # [SINV-6] the three fates are each >= 0 and partition drafted
        ("SINV-6", min(fates.rejected, fates.unverified) >= 0),
        # [SINV-7] fillers are some of the drafted; a chain drafts at most k_max per spec step
        ("SINV-7", 0 <= t.filler <= t.drafted),
        ("SINV-7", k_max is None or t.drafted <= k_max * t.spec_steps),
    ]
    return [rule for rule, ok in checks if not ok]
