"""The columnar replay of requests' detailed steps (replay/detailed.py) against the reference
(`importers.requests.reference_replays`): the same result, request by request, on requests
that agree, that break a rule (a block above k, more accepted than drafted, an accepted token
after an all-invalid step) and whose sums differ from what they report; and agreeing
requests never reach the reference (else the columnar path would only cost time).
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from spectally.engine_bridge.importers import requests
from spectally.engine_bridge.importers.requests import RequestMetrics, StepReplay
from spectally.engine_bridge.replay import detailed


@pytest.fixture(autouse=True)
def every_size_columnar(monkeypatch: pytest.MonkeyPatch) -> None:
    """The columnar path at any size, in small batches and slices, so halving a refused
    batch, slicing a request (and starting the reference at a refused slice) and batches of
    several k are exercised by a few requests."""
    monkeypatch.setattr(detailed, "MIN_BLOCKS", 0)
    monkeypatch.setattr(detailed, "BATCH_BLOCKS", 4)  # a request of 5 or 6 steps is sliced


def metrics(k: int, per_step: list[tuple[int, int]], skew: tuple[int, int, int]) -> dict[str, Any]:
    """A request's metrics with detailed lists ``per_step`` of (accepted, drafted), its
    reported (steps, drafted, accepted) sums off by ``skew``."""
    accepted = [a for a, _ in per_step]
    drafted = [d for _, d in per_step]
    return {
        "num_spec_tokens": k,
        "num_spec_steps": len(per_step) + skew[0],
        "num_draft_tokens": sum(drafted) + skew[1],
        "num_accepted_draft_tokens": sum(accepted) + skew[2],
        "per_step_accepted": accepted,
        "per_step_drafted": drafted,
    }


@st.composite
def request_lists(draw: st.DrawFn) -> list[RequestMetrics]:
    """Requests of k 1..4, most of them consistent: d <= k drafted and a <= max(d, 1)
    accepted per step; some with a step over those bounds, some with a sum reported wrong."""
    out = []
    for i in range(draw(st.integers(1, 12))):
        k = draw(st.integers(1, 4))
        legal = draw(st.booleans()) or draw(st.booleans())
        top = k if legal else k + 2
        steps = draw(
            st.lists(
                st.integers(0, top).flatmap(
                    lambda d, top=top, legal=legal: st.tuples(
                        st.integers(0, max(d, 1) if legal else top), st.just(d)
                    )
                ),
                max_size=6,
            )
        )
        skew = draw(st.sampled_from([(0, 0, 0)] * 4 + [(1, 0, 0), (0, -1, 0), (0, 0, 1)]))
        out.append(RequestMetrics("f.jsonl", i + 1, f"r{i}", metrics(k, steps, skew)))
    return out


@given(request_lists())
def test_columnar_replay_is_the_references(batch: list[RequestMetrics]) -> None:
    assert detailed.replay_requests(batch) == requests.reference_replays(batch)


def test_agreeing_requests_never_reach_the_reference(monkeypatch: pytest.MonkeyPatch) -> None:
    batch = [
        RequestMetrics("f", i, f"r{i}", metrics(3, [(2, 3), (0, 3), (0, 0), (3, 3)], (0, 0, 0)))
        for i in range(20)
    ]
    called: list[tuple[str, int]] = []

    def counting(r: RequestMetrics) -> StepReplay:
        called.append((r.request, 0))
        return requests.replay_steps(r)

    def counting_from(r: RequestMetrics, first: int) -> str | None:
        called.append((r.request, first))
        return requests.first_refusal(r, first)

    monkeypatch.setattr(detailed, "replay_steps", counting)
    monkeypatch.setattr(detailed, "first_refusal", counting_from)
    monkeypatch.setattr(detailed, "BATCH_BLOCKS", 3)  # each request's 4 blocks in two slices
    assert detailed.replay_requests(batch) == [StepReplay(None)] * 20
    assert called == []
    monkeypatch.setattr(detailed, "BATCH_BLOCKS", 1 << 16)  # the 20 requests in one batch
    assert detailed.replay_requests(batch) == [StepReplay(None)] * 20
    assert called == []
    bad = metrics(3, [(2, 3), (1, 0)], (0, 0, 0))  # accepted 1 after an all-invalid step
    batch[7] = RequestMetrics("f", 7, "r7", bad)
    result = detailed.replay_requests(batch)
    assert [i for i, r in enumerate(result) if r.problem is not None] == [7]
    assert result[7].problem is not None and "detailed step 2" in result[7].problem
    assert called == [("r7", 0)]  # the refused batch was halved down to r7


def test_the_reference_starts_at_the_refused_slice(monkeypatch: pytest.MonkeyPatch) -> None:
    """A long request refused late: the reference replays from the refused slice on, and
    says what replaying it whole says."""
    steps = [(2, 3), (0, 3), (0, 0), (3, 3)] * 25
    steps[93] = (1, 0)  # accepted 1 after an all-invalid step, in the slice from block 92
    r = RequestMetrics("f", 1, "long", metrics(3, steps, (0, 0, 0)))
    starts: list[int] = []

    def counting_from(r: RequestMetrics, first: int) -> str | None:
        starts.append(first)
        return requests.first_refusal(r, first)

    monkeypatch.setattr(detailed, "first_refusal", counting_from)
    result = detailed.replay_requests([r])
    assert result == requests.reference_replays([r])
    assert result[0].problem is not None and result[0].problem.startswith("detailed step 94:")
    assert starts == [92]


def test_small_inputs_take_the_reference(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(detailed, "MIN_BLOCKS", 4096)
    batch = [RequestMetrics("f", 1, "r", metrics(2, [(1, 2)], (0, 0, 0)))]
    called: list[str] = []
    monkeypatch.setattr(
        detailed, "reference_replays", lambda rs: called.append("all") or [StepReplay(None)]
    )
    assert detailed.replay_requests(batch) == [StepReplay(None)]
    assert called == ["all"]
