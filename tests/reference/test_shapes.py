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
    for p in range(K_MAX):  # C-P1: a step adds at p only when p < K_t
        assert c.per_position[p][0] == sum(1 for s in steps if p < s.proposed)


@given(st.lists(trees(), max_size=4))
def test_a_tree_stream_keeps_every_invariant(steps: list[list[TreeLayer[int, bool]]]) -> None:
    c = StreamCounters.zero(K_MAX)
    for layers in steps:
        c = sh.fold_tree(c, layers)
    assert sh.shape_violations(c, 5, trees=True) == []
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
    assert as_tree.per_depth == as_chain.per_position[: s.proposed] == as_chain.per_depth


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
        (ChainStep(5, 0, 0, 0), {"C-A2"}),
        (ChainStep(-1, 0, 0, 0), {"C-A1", "C-A2", "C-A4"}),
        (ChainStep(2, 3, 2, 0), {"C-A4"}),
        (ChainStep(2, -1, 2, 0), {"C-A1"}),
        (ChainStep(2, 0, 3, 0), {"C-A2"}),
        (ChainStep(2, 0, 1, 2), {"C-A2"}),
        (ChainStep(2, 0, 1, -1), {"C-A1"}),
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
        ([TreeLayer(0, 0, False)], "C-A3"),
        ([TreeLayer(1, -1, False)], "C-A1"),
        ([TreeLayer(1, 2, False)], "C-A2"),
        ([TreeLayer(2, 0, True)], "C-S3"),
        ([TreeLayer(2, 2, False), TreeLayer(1, 1, True)], "C-S3"),
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
    """The C-A3 guard: a broken walk (accepted counts verified nodes) stops the fold."""
    original = sh.tree_add_layer

    def broken(w: sh.TreeWalk[int, bool], layer: TreeLayer[int, bool], ar: object) -> object:
        return replace(original(w, layer, INT_ARITH), accepted=w.accepted + layer.verified)

    monkeypatch.setattr(sh, "tree_add_layer", broken)
    with pytest.raises(InvariantViolation, match="C-A3"):
        sh.fold_tree(StreamCounters.zero(K_MAX), [TreeLayer(3, 3, True)])


GOOD = fold([ChainStep(4, 1, 3, 2), ChainStep(0, 0, 0, 0)])


@pytest.mark.parametrize(
    ("change", "rule"),
    [
        ({"verified": 5}, "C-I1"),
        ({"accepted": 4}, "C-I1"),
        ({"accepted": -1}, "C-I1"),
        ({"spec_steps": 5}, "C-S1"),
        ({"zero_draft_steps": -1}, "C-S1"),
        ({"filler": 5}, "C-I1"),
        ({"drafted": 5, "spec_steps": 1, "filler": 0}, "C-I5"),
    ],
)
def test_the_checker_sees_each_broken_total(change: dict[str, int], rule: str) -> None:
    assert sh.shape_violations(GOOD, K_MAX) == []
    bad = replace(GOOD, totals=replace(GOOD.totals, **change))
    assert rule in sh.shape_violations(bad, K_MAX)


def test_the_checker_sees_vectors_that_do_not_sum_to_the_totals() -> None:
    bad = replace(GOOD, per_position=((0, 0, 0),) * K_MAX)
    assert sh.shape_violations(bad, K_MAX) == ["C-I3"]
    assert sh.shape_violations(bad, K_MAX, trees=True) == []  # trees: positions cover chains
    bad = replace(GOOD, per_depth=())
    assert sh.shape_violations(bad, K_MAX, trees=True) == ["C-I4"]
    # with trees the chain's drafted bound is not asked, C-I5's accepted bound is
    assert sh.shape_violations(GOOD, 1) == ["C-I5"]
    assert sh.shape_violations(GOOD, 2, trees=True) == []
    assert sh.shape_violations(GOOD, 1, trees=True) == ["C-I5"]
    assert sh.shape_violations(GOOD) == []


@given(
    st.lists(st.integers(1, 4), max_size=K_MAX).flatmap(
        lambda nodes: st.tuples(
            st.just(nodes),
            st.integers(0, sum(nodes)),
            st.integers(0, len(nodes)),
            st.integers(0, sum(nodes)),
        )
    )
)
def test_a_core_tree_step_becomes_depths_that_count_it(
    case: tuple[list[int], int, int, int],
) -> None:
    nodes, verified, accepted, filler = case
    if accepted > verified:
        with pytest.raises(InadmissibleStep, match=r"\[C-A2\]"):
            sh.tree_layers(nodes, verified, accepted, K_MAX)
        return
    layers = sh.tree_layers(nodes, verified, accepted, K_MAX)
    c = sh.fold_tree(StreamCounters.zero(K_MAX), layers, filler)
    t = c.totals
    assert (t.drafted, t.verified, t.accepted, t.filler) == (sum(nodes), verified, accepted, filler)
    assert [d[0] for d in c.per_depth] == nodes
    assert [d[2] for d in c.per_depth] == [1 if d < accepted else 0 for d in range(len(nodes))]
    assert sh.shape_violations(c, K_MAX, trees=True) == []


@pytest.mark.parametrize(
    ("nodes", "verified", "accepted", "rule"),
    [
        ([2, 0], 1, 0, "C-A3"),
        ([1] * (K_MAX + 1), 1, 0, "C-A3"),
        ([2], 2, 2, "C-A3"),
        ([2, 1], 4, 0, "C-A2"),
        ([2, 1], 1, 2, "C-A2"),
    ],
)
def test_an_impossible_core_tree_step_is_refused(
    nodes: list[int], verified: int, accepted: int, rule: str
) -> None:
    with pytest.raises(InadmissibleStep, match=rf"\[{rule}\] tree step"):
        sh.tree_layers(nodes, verified, accepted, K_MAX)


def test_a_tree_with_more_filler_than_nodes_is_refused() -> None:
    with pytest.raises(InadmissibleStep, match=r"\[C-A4\]"):
        sh.fold_tree(StreamCounters.zero(K_MAX), [TreeLayer(2, 1, False)], 3)


@pytest.mark.parametrize("counts", [[1, -1], [1, "2"], [True], [1.0]])
def test_counts_that_are_not_integers_at_least_zero_are_refused(counts: list[object]) -> None:
    with pytest.raises(InadmissibleStep, match=r"\[C-A1\] chain step"):
        sh.check_counts(counts, "chain step")
    sh.check_counts([0, 3], "chain step")


def test_a_discarded_step_adds_nothing() -> None:
    before = StreamCounters.zero(K_MAX)
    after = sh.fold_chain(before, ChainStep(2, 0, 2, 1), K_MAX)
    assert sh.keep_applied(before, after, False) == before
    assert sh.keep_applied(before, after, True) == after
