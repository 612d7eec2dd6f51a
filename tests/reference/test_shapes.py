"""reference/shapes.py over ints: trees, per-step draft lengths, fillers, n > 1, three fates.

Every admissible stream the strategies draw keeps the shape invariants; every inadmissible step
is refused naming its rule; a chain read as a tree counts what the chain counts; and the
invariant checker itself sees each broken state it is meant to see."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given
from hypothesis import strategies as st
from spectally.reference import shapes as sh
from spectally.reference.arith import INT_ARITH
from spectally.reference.errors import InadmissibleStep, InvariantViolation
from spectally.reference.shapes import ChainStep, StreamCounters, TreeLayer

K_MAX = 4


@st.composite
def chain_steps(draw: st.DrawFn, k_max: int = K_MAX) -> ChainStep[int]:
    k = draw(st.integers(0, k_max))
    v = draw(st.integers(0, k))
    return ChainStep(
        proposed=k,
        filler=draw(st.integers(0, k)),
        verified=v,
        accepted=draw(st.integers(0, v)),
    )


@st.composite
def trees(draw: st.DrawFn) -> list[TreeLayer[int, bool]]:
    depth = draw(st.integers(0, 5))
    path = draw(st.integers(0, depth))
    layers = []
    for d in range(depth):
        proposed = draw(st.integers(1, 4))
        verified = draw(st.integers(1 if d < path else 0, proposed))
        layers.append(TreeLayer(proposed, verified, d < path))
    return layers


def fold(steps: list[ChainStep[int]]) -> StreamCounters:
    c = StreamCounters.zero(K_MAX)
    for s in steps:
        c = sh.fold_chain(c, s, K_MAX)
    return c


@given(st.lists(chain_steps(), max_size=6))
def test_a_chain_stream_keeps_every_invariant(steps: list[ChainStep[int]]) -> None:
    c = fold(steps)
    assert sh.shape_violations(c, K_MAX) == []
    t = c.totals
    assert t.drafted == sum(s.proposed for s in steps)
    assert t.spec_steps == sum(1 for s in steps if s.proposed)
    assert t.zero_draft_steps == sum(1 for s in steps if not s.proposed)
    assert t.filler == sum(s.filler for s in steps)
    for p in range(K_MAX):  # VK-3: a step adds at p only when p < K_t
        assert c.per_position[p][0] == sum(1 for s in steps if p < s.proposed)


@given(st.lists(trees(), max_size=4))
def test_a_tree_stream_keeps_every_invariant(steps: list[list[TreeLayer[int, bool]]]) -> None:
    c = StreamCounters.zero(K_MAX)
    for layers in steps:
        c = sh.fold_tree(c, layers)
    assert sh.shape_violations(c) == []
    t = c.totals
    assert t.drafted == sum(layer.proposed for layers in steps for layer in layers)
    assert t.accepted == sum(layer.reached for layers in steps for layer in layers)
    assert t.zero_draft_steps == sum(1 for layers in steps if not layers)
    assert c.per_position == ((0, 0, 0),) * K_MAX


@given(chain_steps())
def test_a_chain_is_the_tree_with_one_node_per_depth(s: ChainStep[int]) -> None:
    s = replace(s, filler=0)
    layers = [sh.chain_layer(s, d, INT_ARITH) for d in range(s.proposed)]
    as_tree = sh.fold_tree(StreamCounters.zero(K_MAX), layers)
    as_chain = fold([s])
    assert as_tree.totals == as_chain.totals
    assert as_tree.per_depth == as_chain.per_position[: s.proposed]


@given(st.lists(st.lists(chain_steps(), max_size=3), min_size=1, max_size=3))
def test_a_request_with_n_sequences_sums_them(sequences: list[list[ChainStep[int]]]) -> None:
    streams = [fold(steps) for steps in sequences]
    request = sh.request_totals([c.totals for c in streams], INT_ARITH)
    merged = StreamCounters.zero(K_MAX)
    for c in streams:
        merged = merged.merge(c)
    assert request == merged.totals
    assert request.drafted == sum(c.totals.drafted for c in streams)
    assert sh.request_totals([], INT_ARITH) == sh.shape_zero(INT_ARITH)


def test_three_fates_partition_drafted() -> None:
    c = fold([ChainStep(4, 0, 2, 1)])
    assert c.to_dict()["fates"] == {"accepted": 1, "rejected": 1, "unverified": 2}


def test_counters_of_unequal_depth_merge_padded() -> None:
    deep = sh.fold_tree(StreamCounters.zero(2), [TreeLayer(2, 1, True), TreeLayer(1, 1, False)])
    shallow = sh.fold_tree(StreamCounters.zero(2), [TreeLayer(3, 3, False)])
    assert deep.merge(shallow).per_depth == ((5, 4, 1), (1, 1, 0))
    assert shallow.merge(deep).per_depth == ((5, 4, 1), (1, 1, 0))
    assert deep.merge(shallow).to_dict()["per_depth"] == {
        "drafted": [5, 1],
        "verified": [4, 1],
        "accepted": [1, 0],
    }


@pytest.mark.parametrize(
    ("step", "rules"),
    [
        (ChainStep(5, 0, 0, 0), {"VK-1"}),
        (ChainStep(-1, 0, 0, 0), {"VK-1", "FILL-2", "VK-4"}),
        (ChainStep(2, 3, 2, 0), {"FILL-2"}),
        (ChainStep(2, -1, 2, 0), {"FILL-2"}),
        (ChainStep(2, 0, 3, 0), {"VK-4"}),
        (ChainStep(2, 0, 1, 2), {"VK-4"}),
        (ChainStep(2, 0, 1, -1), {"VK-4"}),
    ],
)
def test_an_impossible_chain_step_is_refused_naming_its_rule(
    step: ChainStep[int], rules: set[str]
) -> None:
    with pytest.raises(InadmissibleStep) as caught:
        sh.fold_chain(StreamCounters.zero(K_MAX), step, K_MAX)
    assert {r[1 : r.index("]")] for r in caught.value.reasons} == rules


@pytest.mark.parametrize(
    ("layers", "rule"),
    [
        ([TreeLayer(0, 0, False)], "TREE-1"),
        ([TreeLayer(1, -1, False)], "TREE-1"),
        ([TreeLayer(1, 2, False)], "TREE-1"),
        ([TreeLayer(2, 0, True)], "TREE-2"),
        ([TreeLayer(2, 2, False), TreeLayer(1, 1, True)], "TREE-2"),
    ],
)
def test_an_impossible_tree_is_refused_naming_its_rule(
    layers: list[TreeLayer[int, bool]], rule: str
) -> None:
    with pytest.raises(InadmissibleStep, match=rf"\[{rule}\] tree depth {len(layers) - 1}"):
        sh.fold_tree(StreamCounters.zero(K_MAX), layers)


def test_a_tree_step_that_accepts_past_its_depth_is_caught(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The SINV-3 guard: a broken walk (accepted counts verified nodes) stops the fold."""
    original = sh.tree_add_layer

    def broken(w: sh.TreeWalk[int, bool], layer: TreeLayer[int, bool], ar: object) -> object:
        return replace(original(w, layer, INT_ARITH), accepted=w.accepted + layer.verified)

    monkeypatch.setattr(sh, "tree_add_layer", broken)
    with pytest.raises(InvariantViolation, match="SINV-3"):
        sh.fold_tree(StreamCounters.zero(K_MAX), [TreeLayer(3, 3, True)])


GOOD = fold([ChainStep(4, 1, 3, 2), ChainStep(0, 0, 0, 0)])


@pytest.mark.parametrize(
    ("change", "rule"),
    [
        ({"verified": 5}, "SINV-1"),
        ({"accepted": 4}, "SINV-1"),
        ({"accepted": -1}, "SINV-1"),
        ({"spec_steps": 5}, "SINV-4"),
        ({"zero_draft_steps": -1}, "SINV-4"),
        ({"filler": 5}, "SINV-7"),
        ({"drafted": 5, "spec_steps": 1, "filler": 0}, "SINV-7"),
    ],
)
def test_the_checker_sees_each_broken_total(change: dict[str, int], rule: str) -> None:
    assert sh.shape_violations(GOOD, K_MAX) == []
    bad = replace(GOOD, totals=replace(GOOD.totals, **change))
    assert rule in sh.shape_violations(bad, K_MAX)


def test_the_checker_sees_vectors_that_do_not_sum_to_the_totals() -> None:
    bad = replace(GOOD, per_position=((0, 0, 0),) * K_MAX)
    assert sh.shape_violations(bad, K_MAX) == ["SINV-2"]
    # without k_max (trees present) the chain bound is not asked
    assert sh.shape_violations(GOOD, 1) == ["SINV-7"]
    assert sh.shape_violations(GOOD) == []
