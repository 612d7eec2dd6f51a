"""Drafter shapes beyond one fixed-length chain: trees, a draft length that changes per step,
filler drafts, parallel sampling (n > 1) and the three fates every shape shares.

CORE.md sections 2-5 are its rules (C-S1-C-S4, C-F1, C-P1, C-I1-C-I6, C-A1-C-A4); the ids
below are CORE's. Like ``step.py`` the rules are written over an `Arith`, so the proofs
(``proofs/shapes.py``) evaluate these very functions over Z3 terms.

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
    # [C-I6] totals of several streams are their field-wise sum
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
    # [C-S4] each sequence is its own stream of spec steps; the request sums them;
    # [C-Q5] the engine's counters are the sums over all sequences of all requests
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
        # [C-A1] every count is >= 0
        ("C-A1", "the draft length must be >= 0", ar.le(zero, s.proposed)),
        ("C-A1", "filler must be >= 0", ar.le(zero, s.filler)),
        ("C-A1", "accepted must be >= 0", ar.le(zero, s.accepted)),
        # [C-A2] a chain step has 0 <= accepted <= verified <= K_t <= k_max
        ("C-A2", "the draft length cannot exceed k_max", ar.le(s.proposed, k_max)),
        ("C-A2", "verified cannot exceed the draft length", ar.le(s.verified, s.proposed)),
        ("C-A2", "accepted cannot exceed verified", ar.le(s.accepted, s.verified)),
        # [C-A4] fillers are some of the drafted: filler <= K_t
        ("C-A4", "filler cannot exceed the draft length", ar.le(s.filler, s.proposed)),
    ]


def step_adds(drafted: N, verified: N, accepted: N, filler: N, ar: Arith[N, B]) -> ShapeTotals[N]:
    """What one step of any shape adds to its stream, from its drafts' counts."""
    has_drafts = ar.lt(ar.lit(0), drafted)
    one, zero = ar.lit(1), ar.lit(0)
    return ShapeTotals(
        # [C-Q1] drafted adds every proposed draft (cut before the target or not, fillers too)
        drafted=drafted,
        # [C-Q2] verified adds the drafts in the target's forward pass
        verified=verified,
        # [C-Q3] accepted adds the accepted drafts, never the bonus token
        accepted=accepted,
        # [C-Q4] a step with K_t >= 1 is a spec step, whatever later stages kept;
        # [C-S1] a step with K_t = 0 (an empty tree too) is no spec step; it adds one
        # zero_draft_step instead
        spec_steps=ar.ite(has_drafts, one, zero),
        zero_draft_steps=ar.ite(has_drafts, zero, one),
        filler=filler,
    )


def chain_step(s: ChainStep[N], ar: Arith[N, B]) -> ShapeTotals[N]:
    """What one chain step adds to its stream."""
    # [C-S2] fillers are drafted, verified and accepted like any draft; the filler
    # sub-count makes them visible
    return step_adds(s.proposed, s.verified, s.accepted, s.filler, ar)


def chain_position(s: ChainStep[N], position: N, ar: Arith[N, B]) -> tuple[N, N, N]:
    """(drafted, verified, accepted) the step adds at ``position`` of the per-position vectors
    (length k_max)."""
    # [C-P1] per-position counts reach only positions < K_t (and < verified, < accepted)
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
        # [C-A3] a depth exists when a node is proposed there
        ("C-A3", "a depth has at least one proposed node", ar.lt(zero, layer.proposed)),
        # [C-A1] counts are >= 0
        ("C-A1", "verified nodes must be >= 0", ar.le(zero, layer.verified)),
        # [C-A2] verified nodes are some of the proposed ones
        (
            "C-A2",
            "verified nodes cannot exceed proposed nodes",
            ar.le(layer.verified, layer.proposed),
        ),
        # [C-S3] the accepted path passes a depth only through a verified node, and only if it
        # got there (it never skips a depth)
        (
            "C-S3",
            "the accepted path passes a depth only through a verified node",
            ar.either(ar.negate(layer.reached), ar.lt(zero, layer.verified)),
        ),
        (
            "C-S3",
            "the accepted path cannot skip a depth",
            ar.either(ar.negate(layer.reached), w.on_path),
        ),
    ]


def depth_counts(layer: TreeLayer[N, B], ar: Arith[N, B]) -> tuple[N, N, N]:
    """(drafted, verified, accepted) one depth adds to the per-depth vectors at its depth."""
    # [C-S3] per depth: nodes proposed, nodes verified, 1 when the path reaches depth d + 1
    return layer.proposed, layer.verified, ar.ite(layer.reached, ar.lit(1), ar.lit(0))


def tree_add_layer(w: TreeWalk[N, B], layer: TreeLayer[N, B], ar: Arith[N, B]) -> TreeWalk[N, B]:
    """The walk after one more depth."""
    reached = ar.both(w.on_path, layer.reached)
    return TreeWalk(
        # [C-S3] drafted: nodes proposed; verified: nodes in the target's forward pass;
        # accepted: nodes on the accepted path
        drafted=ar.add(w.drafted, layer.proposed),
        verified=ar.add(w.verified, layer.verified),
        accepted=ar.add(w.accepted, ar.ite(reached, ar.lit(1), ar.lit(0))),
        depth=ar.add(w.depth, ar.lit(1)),
        on_path=reached,
    )


def tree_step(w: TreeWalk[N, B], ar: Arith[N, B], filler: N | None = None) -> ShapeTotals[N]:
    """What a whole tree step (every depth walked) adds to its stream (no fillers by default)."""
    return step_adds(w.drafted, w.verified, w.accepted, ar.lit(0) if filler is None else filler, ar)


def chain_layer(s: ChainStep[N], depth: N, ar: Arith[N, B]) -> TreeLayer[N, B]:
    """Depth ``depth`` of a chain step read as a tree."""
    # [C-S3] a linear chain is the tree with one node per depth
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
    # [C-F1] drafted = accepted + rejected + unverified
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


def check_counts(counts: Sequence[object], where: str) -> None:
    """`InadmissibleStep` unless every count of a step is an integer >= 0."""
    # [C-A1] every count is an integer >= 0
    ok = all(isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in counts)
    _refuse([("C-A1", f"every count must be an integer >= 0: {list(counts)!r}", ok)], where)


def fold_chain(c: StreamCounters, s: ChainStep[int], k_max: int) -> StreamCounters:
    """``c`` after one chain step; `InadmissibleStep` naming the rules when none could occur."""
    _refuse(chain_admissibility(s, k_max, INT_ARITH), "chain step")
    add = StreamCounters(
        chain_step(s, INT_ARITH),
        tuple(chain_position(s, p, INT_ARITH) for p in range(k_max)),
        # a chain adds to the per-depth vectors too, one node per depth
        tuple(depth_counts(chain_layer(s, d, INT_ARITH), INT_ARITH) for d in range(s.proposed)),
    )
    return c.merge(add)


def tree_layers(
    nodes: Sequence[int], verified: int, accepted: int, k_max: int
) -> list[TreeLayer[int, bool]]:
    """A tree step given as its nodes per depth and its verified and accepted nodes in total
    (CORE.md's tree step) as depths: the accepted path through the first ``accepted`` depths,
    one verified node on it at each, the other verified nodes from the shallowest depth on.
    Which nodes were verified changes no core counter, only the reference's per-depth verified.
    `InadmissibleStep` naming the rules when no tree could give these counts."""
    depth = len(nodes)
    _refuse(
        [
            # [C-A3] no depth without a node, at most k_max depths, the path no deeper than the tree
            ("C-A3", "a depth has at least one node", all(n > 0 for n in nodes)),
            ("C-A3", f"a tree has at most k_max = {k_max} depths", depth <= k_max),
            ("C-A3", "the accepted path cannot be deeper than the tree", accepted <= depth),
        ],
        "tree step",
    )
    # [C-A2] accepted <= verified <= the tree's nodes
    ok = accepted <= verified <= sum(nodes)
    _refuse([("C-A2", "need accepted <= verified <= nodes", ok)], "tree step")
    spare = verified - accepted
    layers = []
    for d, n in enumerate(nodes):
        on_path = d < accepted
        extra = min(n - on_path, spare)
        spare -= extra
        layers.append(TreeLayer(n, on_path + extra, on_path))
    return layers


def fold_tree(
    c: StreamCounters, layers: Sequence[TreeLayer[int, bool]], filler: int = 0
) -> StreamCounters:
    """``c`` after one tree step (its depths in order); `InadmissibleStep` when impossible."""
    w = tree_start(INT_ARITH)
    for d, layer in enumerate(layers):
        _refuse(layer_admissibility(w, layer, INT_ARITH), f"tree depth {d}")
        w = tree_add_layer(w, layer, INT_ARITH)
    # [C-A4] fillers are some of the tree's nodes
    _refuse([("C-A4", "filler cannot exceed the nodes", filler <= w.drafted)], "tree step")
    # [C-A3] a tree step accepts at most one node per depth, and drafts at least one
    if not w.accepted <= w.depth <= w.drafted:
        raise InvariantViolation("C-A3", f"tree step {w}")
    per_depth = tuple(depth_counts(layer, INT_ARITH) for layer in layers)
    no_positions = ((0, 0, 0),) * len(c.per_position)
    return c.merge(StreamCounters(tree_step(w, INT_ARITH, filler), no_positions, per_depth))


def keep_applied(before: StreamCounters, after: StreamCounters, applied: bool) -> StreamCounters:
    """The counters after a step that was checked: ``after`` if it was applied."""
    # [C-Q6] a discarded step, admissible or refused like any, adds to no counter
    return after if applied else before


def shape_violations(c: StreamCounters, k_max: int | None = None, trees: bool = False) -> list[str]:
    """The shape invariants ``c`` breaks (empty for every state the rules can reach).

    ``trees``: some step of ``c`` was a tree (its per-position vectors then cover only the
    chain steps, and a tree may propose more nodes than k_max)."""
    t = c.totals
    fates = three_fates(t, INT_ARITH)
    totals = [t.drafted, t.verified, t.accepted]
    by_position = [sum(v[i] for v in c.per_position) for i in range(3)]
    by_depth = [sum(v[i] for v in c.per_depth) for i in range(3)]
    chain_bound = k_max is None or trees or t.drafted <= k_max * t.spec_steps
    checks = [
        # [C-I1] drafted >= verified >= accepted >= 0, per step and in total, every shape
        ("C-I1", t.drafted >= t.verified >= t.accepted >= 0),
        # [C-I3] the per-position vectors of a chain-only scope sum to the totals
        ("C-I3", trees or by_position == totals),
        # [C-I4] the per-depth vectors sum to the totals, chains and trees alike
        ("C-I4", by_depth == totals),
        # [C-S1] a step with K_t = 0 makes no spec step: every spec step drafted something
        ("C-S1", 0 <= t.spec_steps <= t.drafted and t.zero_draft_steps >= 0),
        # [C-I2] the three fates are each >= 0 and partition drafted
        ("C-I2", min(fates.rejected, fates.unverified) >= 0),
        # [C-I1] fillers are some of the drafted
        ("C-I1", 0 <= t.filler <= t.drafted),
        # [C-I5] accepted <= k_max * spec steps (a chain drafts at most that)
        ("C-I5", k_max is None or (t.accepted <= k_max * t.spec_steps and chain_bound)),
    ]
    return [rule for rule, ok in checks if not ok]
