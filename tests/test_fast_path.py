"""The replay fast path is the plain engine, faster: `BlockFolder.apply_block` / `try_block` /
`try_open` and the lazy `CounterSum` against `Engine.apply` event by event, and the replay's
shape memo against its slow path, on random traces and logs (legal and illegal)."""

from __future__ import annotations

import gzip
import json
import random
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from spectally.engine_bridge import synth
from spectally.engine_bridge.records import parse_line
from spectally.engine_bridge.replay import Replayer, replay_file, result_json
from spectally.reference import counters as ct
from spectally.reference import fastpath as fp
from spectally.reference import machine as mc
from spectally.reference import step as stp
from spectally.reference.counters import Counters, CounterSum, Fold
from spectally.reference.errors import IllegalEvent
from spectally.reference.events import (
    Abort,
    Accept,
    AddRequest,
    Event,
    Finish,
    Preempt,
    Propose,
    StepBegin,
    Verify,
)
from spectally.reference.fastpath import BlockFolder
from spectally.reference.machine import BLOCK_EVENT_TYPES, Engine, EngineConfig
from spectally.reference.step import Mode
from strategies import event_traces

Outcome = tuple[str, Any]
FIXTURES = Path(__file__).parent / "fixtures" / "vllm"


def _state(engine: Engine) -> Any:
    return (
        engine.current_step,
        engine.totals,
        {rid: (s.status, s.blocks, s.counters) for rid, s in engine.requests.items()},
    )


def _blocks(events: list[Event]) -> Iterator[list[Event]]:
    """Runs of block events of one (request, step) from a Propose up to the next Accept, and
    every other event alone."""
    run: list[Event] = []
    for event in events:
        if run:
            same = isinstance(event, BLOCK_EVENT_TYPES) and (event.request, event.step) == (
                run[0].request,  # type: ignore[union-attr]
                run[0].step,  # type: ignore[union-attr]
            )
            if same and not isinstance(event, Propose):
                run.append(event)
                if isinstance(event, Accept):
                    yield run
                    run = []
                continue
            yield run
            run = []
        if isinstance(event, Propose):
            run = [event]
        else:
            yield [event]
    if run:
        yield run


def _counts(block: list[Event]) -> mc.BlockCounts:
    return tuple(
        (type(e), e.num_slots if hasattr(e, "num_slots") else e.num_tokens)  # type: ignore[union-attr]
        for e in block
    )


def _plain(engine: Engine, group: list[Event]) -> Outcome:
    closed: list[Any] = []
    try:
        for event in group:
            closed.extend(engine.apply(event))
    except IllegalEvent as exc:
        return ("illegal", str(exc))
    return ("ok", closed)


def _fast(folder: BlockFolder, group: list[Event]) -> Outcome:
    try:
        if len(group) > 1 or isinstance(group[0], Propose):
            e = group[0]
            closed = folder.apply_block(e.request, e.step, _counts(group))  # type: ignore[union-attr]
        else:
            ended = folder.try_end(group[0])
            closed = folder.engine.apply(group[0]) if ended is None else ended
    except IllegalEvent as exc:
        return ("illegal", str(exc))
    return ("ok", closed)


def _differential(config: EngineConfig, events: list[Event]) -> None:
    plain, fast = Engine(config, check=False), Engine(config, check=False)
    checked = Engine(config, check=True)
    fast_folder, checked_folder = BlockFolder(fast), BlockFolder(checked)
    for group in _blocks(events):
        expected = _plain(plain, group)
        assert _fast(fast_folder, group) == expected, group
        assert _fast(checked_folder, group) == expected, group
        assert _state(fast) == _state(plain) == _state(checked)
    assert fast.totals.to_dict() == plain.totals.to_dict()


@given(event_traces())
def test_apply_block_is_apply_event_by_event(case: tuple[EngineConfig, list[Event]]) -> None:
    _differential(*case)


@given(event_traces(), st.randoms(use_true_random=False))
def test_apply_block_illegal_blocks(case: tuple[EngineConfig, list[Event]], rng: Any) -> None:
    """Blocks with counts nudged off by -1..+2 (mostly illegal), and whole events dropped:
    the same `IllegalEvent` text, the same legal prefix applied, the same state after."""
    config, events = case
    broken: list[Event] = []
    for event in events:
        if isinstance(event, BLOCK_EVENT_TYPES) and rng.random() < 0.25:
            if rng.random() < 0.3:
                continue
            name = "num_slots" if hasattr(event, "num_slots") else "num_tokens"
            value = getattr(event, name) + rng.choice([-1, 1, 2])
            event = replace(event, **{name: value})  # type: ignore[type-var]
        broken.append(event)
    _differential(config, broken)


def _steps(mode: Mode, k: int) -> list[Event]:
    return [StepBegin(0), AddRequest("a", 0, structured=False)]


def test_try_block_preconditions() -> None:
    config = EngineConfig(Mode.SYNC, 4)
    e = Engine(config, check=False)
    f = BlockFolder(e)
    block = ((Propose, 2), (Verify, 2), (Accept, 1))
    assert f.try_block("a", 0, block) is None  # no such request
    e.run(_steps(Mode.SYNC, 4))
    assert f.try_block("a", True, block) is None  # type: ignore[arg-type]  # bool step
    assert f.try_block("a", 0, ((Propose, True), (Verify, 1), (Accept, 1))) is None
    assert f.try_open("a", 0, ((Propose, True), (Verify, 1))) is None
    assert f._memo == {}  # a bool count is never memoised
    assert f.try_block("a", 0, ((Propose, 2), (Verify, 2))) is None  # does not close
    assert f.try_block("a", 0, ((Propose, 2), (Finish, 0))) is None  # not a block event
    assert f.try_block("a", 0, ((Propose, 5), (Verify, 5), (Accept, 1))) is None  # illegal
    assert f.try_open("a", 0, block) is None  # closes: not an open block
    assert f.try_open("a", 0, ((Propose, 5),)) is None  # illegal
    assert f.try_open("a", 0, ()) is None  # opens nothing
    x = f.try_block("a", 0, block)
    assert x is not None and x.accepted == 1
    # E3: a second block for the same request in the same step is illegal, so the fast path
    # declines it and `apply_block` reports it event by event.
    assert f.try_block("a", 0, block) is None
    assert f.try_open("a", 0, ((Propose, 2),)) is None
    with pytest.raises(IllegalEvent, match="at most one draft block per step"):
        f.apply_block("a", 0, block)
    e.apply(StepBegin(1))
    # Memoised as int counts: the same shape with bool counts still goes event by event.
    assert f.try_block("a", 1, ((Propose, 1), (Verify, 1), (Accept, 1))) is not None
    e.apply(StepBegin(2))
    assert f.try_block("a", 2, ((Propose, True), (Verify, 1), (Accept, 1))) is None
    with pytest.raises(IllegalEvent, match="count must be an int"):
        f.apply_block("a", 2, ((Propose, True), (Verify, 1), (Accept, 1)))
    assert f.try_block("a", 2, block) == x
    e.apply(StepBegin(3))
    e.apply(Propose("a", 3, 1))
    assert f.try_block("a", 3, block) is None  # an open block
    assert f.try_open("a", 3, ((Propose, 1),)) is None
    assert f.prepare(e.requests["a"], 3, block) is None
    e.apply(Finish("a", 1))
    assert f.try_block("a", 1, block) is None  # finished
    assert f.try_open("a", 1, ((Propose, 1),)) is None
    checked = Engine(config, check=True)
    checked.run(_steps(Mode.SYNC, 4))
    assert BlockFolder(checked).try_block("a", 0, block) is None  # runtime checks on
    assert BlockFolder(checked).try_open("a", 0, ((Propose, 1),)) is None
    assert f.try_block("a", 0, block) is None  # not the current step


def test_prepared_blocks_fold_only_where_prepared() -> None:
    """A prepared block applies only through its own folder, to a request with the same
    structured flag, and only as what it is (a closing block folds, an open block opens)."""
    config = EngineConfig(Mode.SYNC, 4)
    e = Engine(config, check=False)
    f = BlockFolder(e)
    e.run([StepBegin(0), AddRequest("u", 0), AddRequest("s", 0, structured=True)])
    closing = f.prepare(e.requests["u"], 0, ((Propose, 2), (Verify, 2), (Accept, 1)))
    opening = f.prepare(e.requests["u"], 0, ((Propose, 2),))
    assert closing is not None and closing.fold is not None and closing.opened is None
    assert opening is not None and opening.opened is not None and opening.fold is None
    before = _state(e)
    other = BlockFolder(e)
    assert other.fold("u", 0, closing) is None  # another folder's block
    assert other.open("u", 0, opening) is None
    assert f.fold("s", 0, closing) is None  # prepared for an unstructured request
    assert f.open("s", 0, opening) is None
    assert f.open("u", 0, closing) is None  # closes: not an open block
    assert f.fold("u", 0, opening) is None  # stays open: nothing to fold
    assert _state(e) == before
    assert f.fold("u", 0, closing) is not None


def test_fold_and_open_guards() -> None:
    """Every precondition of `fold`, `open` and `prepare`, one at a time, with a block that
    would otherwise apply: each declines and changes nothing."""
    config = EngineConfig(Mode.ASYNC, 4)
    e = Engine(config, check=False)
    f = BlockFolder(e)
    e.run([StepBegin(0), *(AddRequest(rid, 0) for rid in ("a", "done", "once")), StepBegin(1)])
    closing = f.prepare(e.requests["a"], 1, ((Propose, 2), (Verify, 2), (Accept, 1)))
    opening = f.prepare(e.requests["a"], 1, ((Propose, 2),))
    assert closing is not None and opening is not None
    e.apply(Finish("done", 1))
    assert f.fold("once", 1, closing) is not None  # "once" has had its block in step 1 (E3)
    before = _state(e)
    for apply_, prepared in ((f.fold, closing), (f.open, opening)):
        assert apply_("nobody", 1, prepared) is None  # unknown request
        assert apply_("done", 1, prepared) is None  # finished
        assert apply_("once", 1, prepared) is None  # a second block in the step
        assert apply_("a", True, prepared) is None  # type: ignore[arg-type]  # True == 1
        assert apply_("a", 0, prepared) is None  # not the current step
        assert apply_("a", 2, prepared) is None  # a step that has not begun
        assert _state(e) == before
    assert f.prepare(e.requests["done"], 1, ((Propose, 2),)) is None
    assert f.prepare(e.requests["once"], 1, ((Propose, 2),)) is None
    assert f.prepare(e.requests["a"], 2, ((Propose, 2),)) is None
    assert f.open("a", 1, opening) is not None and f.fold("a", 1, closing) is None
    e.apply(StepBegin(2))
    assert f.prepare(e.requests["a"], 2, ((Propose, 2),)) is None  # a block still open


def test_try_open_leaves_the_block_open_at_its_step() -> None:
    """An open block memoised at one step is re-stepped when the same events open another;
    the state equals the plain engine's, and a later event continues it."""
    config = EngineConfig(Mode.ASYNC, 4)
    e, plain = Engine(config, check=False), Engine(config, check=False)
    f = BlockFolder(e)
    opening = ((Propose, 3), (Verify, 3))
    for step, rid in enumerate("abc"):
        for eng in (e, plain):
            eng.run([StepBegin(step), AddRequest(rid, step, structured=True)])
        block = f.try_open(rid, step, opening)
        assert block is not None and block.step == step
        plain.run([Propose(rid, step, 3), Verify(rid, step, 3)])
        assert e.requests[rid] == plain.requests[rid]
        assert f.try_block(rid, step, ((Propose, 1), (Verify, 1), (Accept, 0))) is None
    for eng in (e, plain):
        eng.apply(Finish("b", 2))
    assert e.requests == plain.requests and e.totals == plain.totals


def test_try_end_preconditions() -> None:
    """`try_end` takes a legal Finish or Abort only, and changes nothing when it declines;
    what it does is `Engine.apply`'s."""
    config = EngineConfig(Mode.ASYNC, 4)
    e, plain = Engine(config, check=False), Engine(config, check=False)
    f = BlockFolder(e)
    setup = [StepBegin(0), AddRequest("a", 0, structured=True), Propose("a", 0, 3)]
    setup += [Verify("a", 0, 3), StepBegin(1), Propose("a", 1, 2), StepBegin(2)]
    for eng in (e, plain):
        eng.run(setup)
    before = _state(e)
    for event in [
        Finish("b", 2),  # unknown request
        Finish("a", 3),  # a step that has not begun
        Finish("a", -1),  # not a count
        Finish("a", True),  # type: ignore[arg-type]  # a bool step
        Finish(1, 2),  # type: ignore[arg-type]  # not a request id
        Preempt("a", 2),  # not Finish or Abort
    ]:
        assert f.try_end(event) is None
        assert _state(e) == before
    checked = Engine(config, check=True)
    checked.run([StepBegin(0), AddRequest("a", 0)])
    assert BlockFolder(checked).try_end(Finish("a", 0)) is None  # runtime checks on
    closed = f.try_end(Abort("a", 1))
    assert closed == plain.apply(Abort("a", 1))
    assert closed is not None and [c.step for c in closed] == [0, 1]
    assert _state(e) == _state(plain)
    assert f.try_end(Finish("a", 2)) is None  # already ended: `apply` says why
    with pytest.raises(IllegalEvent, match="aborted"):
        e.apply(Finish("a", 2))


def test_memo_is_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(fp, "MAX_MEMO", 2)
    e = Engine(EngineConfig(Mode.ASYNC, 4), check=False)
    f = BlockFolder(e)
    plain = Engine(EngineConfig(Mode.ASYNC, 4), check=False)
    for step in range(6):
        for eng in (e, plain):
            eng.apply(StepBegin(step))
            eng.apply(AddRequest(f"r{step}", step))
        n = step % 4
        f.apply_block(f"r{step}", step, ((Propose, n), (Verify, n), (Accept, 0)))
        rid = f"r{step}"
        plain.run([Propose(rid, step, n), Verify(rid, step, n), Accept(rid, step, 0)])
        assert len(f._memo) <= 2
    for step, rid in enumerate(["r0", "r1", "r2", "r3", "r4", "r5"], start=6):
        for eng in (e, plain):
            eng.run([StepBegin(step), Propose(rid, step, step % 4)])
        assert f.try_end(Finish(rid, step)) == plain.apply(Finish(rid, step))
        assert len(f._discards) <= 2
    assert e.totals == plain.totals


def _inputs(rng: random.Random) -> stp.StepInputs[int, bool]:
    return stp.StepQuery(Mode.ASYNC, 3, rng.randint(0, 3), applied=rng.random() < 0.8).inputs()


def test_counter_sum_is_the_fold(monkeypatch: pytest.MonkeyPatch) -> None:
    rng = random.Random(5)
    monkeypatch.setattr(CounterSum, "MAX_PENDING", 3)
    s, folds = CounterSum.zero(4), {}
    expected = Counters.zero(4)
    for _ in range(200):
        x = _inputs(rng)
        expected = expected.add_step(Mode.ASYNC, x)
        if rng.random() < 0.5:
            s.add(Mode.ASYNC, x)
        else:
            s.add_fold(folds.setdefault(x, Fold(Mode.ASYNC, x)))
        if rng.random() < 0.1:
            assert s.value() == expected
            assert s.value() is s.value()  # one object until the next fold
    assert s.value() == expected
    other = CounterSum(expected)
    assert s == other and hash(s) == hash(other) and repr(s) == f"CounterSum({expected!r})"
    assert s != expected  # not a Counters
    s.set(Counters.zero(4))
    assert s.value() == Counters.zero(4)


def test_patched_rules_fold_block_by_block(monkeypatch: pytest.MonkeyPatch) -> None:
    """A patched rule (a mutant) reaches the sum: pending blocks and later ones are folded with
    `Counters.add_step` one by one, under the patched rule."""
    x = stp.StepQuery(Mode.SYNC, 2, 1).inputs()
    s = CounterSum.zero(2)
    s.add(Mode.SYNC, x)  # pending, folded under the patch below
    original = stp.rfc_step

    def doubled(mode: Mode, y: Any, ar: Any) -> Any:
        c = original(mode, y, ar)
        return replace(c, padding=ar.add(c.padding, ar.lit(1)))

    for module in (stp, ct, mc):
        monkeypatch.setattr(module, "rfc_step", doubled)
    assert not ct.rules_intact() and not fp.rules_intact()
    s.add(Mode.SYNC, x)
    assert s.value().rfc.padding == 2  # both blocks under the patched rule
    e = Engine(EngineConfig(Mode.SYNC, 2), check=False)
    f = BlockFolder(e)
    e.run([StepBegin(0), AddRequest("a", 0)])
    block = ((Propose, 2), (Verify, 2), (Accept, 1))
    assert f.try_block("a", 0, block) is None  # the fast path is off under a patch
    f.apply_block("a", 0, block)
    assert e.totals.rfc.padding == 1 == e.request_counters("a").rfc.padding
    e.apply(StepBegin(1))
    assert f.try_open("a", 1, ((Propose, 2),)) is None
    f.apply_block("a", 1, ((Propose, 2),))
    assert f.try_end(Finish("a", 1)) is None
    e.apply(Finish("a", 1))
    assert e.totals.rfc.padding == 2  # the discarded block too, under the patched rule


# -- the replay's fast path against its slow path ---------------------------------------------


def _replay(lines: list[bytes], fast: bool, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    with monkeypatch.context() as m:
        if not fast:
            m.setattr(Replayer, "_fast_request_step", lambda *a: False)
            m.setattr(Replayer, "_fast_discarded", lambda *a: False)
            m.setattr(BlockFolder, "try_end", lambda *a: None)
        out = replay_file(
            "log",
            progress=False,
            max_divergences=50,
            lines=((n, raw.rstrip(b"\n"), True) for n, raw in enumerate(lines, start=1)),
        )
    return result_json(out)


_OUTCOMES = ["discarded_finished", "discarded_aborted", "discarded_preempted", "discarded_stale"]


def _corrupt(lines: list[bytes], rng: random.Random) -> list[bytes]:
    """Nudge a few request_step counts and outcomes, turn a few finishes into aborts or
    preemptions, and repeat a few discarded blocks steps later, when their request has ended
    (divergences, illegal blocks, every lifecycle path)."""
    out: list[bytes] = []
    ended: list[dict[str, Any]] = []
    for raw in lines:
        rec = json.loads(raw)
        if rec["record"] == "request_step" and rec["outcome"] != "applied":
            ended.append(dict(rec))
        if rec["record"] == "request_step" and ended and rng.random() < 0.01:
            late = ended.pop(0)
            if late["step"] + 2 <= rec["step"]:
                late["step"] = rec["step"]
                out.append(json.dumps(late, separators=(",", ":")).encode() + b"\n")
        if rec["record"] == "request_step" and rng.random() < 0.03:
            name = rng.choice(["proposed", "scheduled", "accepted", "sampled", "grammar_valid"])
            if rec.get(name) is not None:
                rec[name] = max(0, rec[name] + rng.choice([-1, 1, 2]))
            if rng.random() < 0.3:
                rec["outcome"] = rng.choice(_OUTCOMES)
        elif rec["record"] == "request" and rec["event"] == "finish" and rng.random() < 0.2:
            del rec["reason"]
            rec["event"] = rng.choice(["abort", "preempt"])
        out.append(json.dumps(rec, separators=(",", ":")).encode() + b"\n")
    return out


@pytest.mark.parametrize("seed", range(6))
def test_replay_fast_path_is_the_slow_path(seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    rng = random.Random(seed)
    lines = list(
        synth.lines(
            1200,
            mode=rng.choice(["sync", "async"]),
            av=rng.random() < 0.5,
            k=rng.randint(1, 5),
            batch=rng.randint(2, 12),
            mean_steps=rng.randint(2, 20),
            seed=seed,
        )
    )
    for log in (lines, _corrupt(lines, rng)):
        assert _replay(log, True, monkeypatch) == _replay(log, False, monkeypatch)


@pytest.mark.parametrize(
    "path", sorted(FIXTURES.glob("*.ndjson.gz")), ids=lambda p: p.name.split(".")[0]
)
def test_replay_fast_path_is_the_slow_path_on_vllm_logs(
    path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every recorded vLLM log (aborts, preemptions, stale outputs included) replays to the
    same report with and without the fast paths."""
    with gzip.open(path) as f:
        lines = f.read().splitlines(keepends=True)
    fast = _replay(lines, True, monkeypatch)
    assert fast["status"] == "agree"
    assert fast == _replay(lines, False, monkeypatch)


def test_replay_fast_path_memo_is_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    from spectally.engine_bridge import replay as rp

    monkeypatch.setattr(rp, "FAST_MEMO", 4)
    replayer = Replayer("synthetic")
    for n, raw in enumerate(synth.lines(800, seed=3), start=1):
        replayer.feed(n, parse_line("synthetic", n, raw[:-1], True))
        assert len(replayer.fast) <= 4
    replayer.finish()
    assert not replayer.divergences


# -- the replay's inlined hot loop (Replayer.feed_lines) against parse_line + feed -------------


def _per_record(lines: list[bytes]) -> dict[str, Any]:
    """The plain path: parse_line + feed for every line (no inlined validation)."""
    from spectally.engine_bridge.records import BadInput
    from spectally.engine_bridge.replay import ReplayResult, StopReplay

    replayer = Replayer("log", max_divergences=50)
    bad: BadInput | None = None
    try:
        for n, raw in enumerate(lines, start=1):
            replayer.feed(n, parse_line("log", n, raw.rstrip(b"\n"), True))
        replayer.finish()
    except StopReplay:
        pass
    except BadInput as exc:
        bad = exc
    status = "bad_input" if bad else ("diverge" if replayer.divergences else "agree")
    summary = replayer.summary() if replayer.header is not None and bad is None else {}
    return result_json(
        ReplayResult("log", status, replayer.divergences, bad, summary, replayer.notes)
    )


_BAD_VALUES: list[Any] = [-1, 1.0, 2.0, True, False, None, "1", "", [], {}, 0, 7]


def _mistype(lines: list[bytes], rng: random.Random) -> list[bytes]:
    """Give one request_step record a wrong value, a missing or an extra field."""
    out = list(lines)
    picks = [i for i, raw in enumerate(out) if b'"request_step"' in raw]
    i = rng.choice(picks)
    rec = json.loads(out[i])
    roll = rng.random()
    if roll < 0.7:
        rec[rng.choice(list(rec))] = rng.choice(_BAD_VALUES)
    elif roll < 0.85:
        del rec[rng.choice(list(rec))]
    else:
        rec[rng.choice(["meta", "extra", "num_drafts"])] = rng.choice([{}, 1])
    out[i] = json.dumps(rec, separators=(",", ":")).encode() + b"\n"
    return out


@pytest.mark.parametrize("seed", range(40))
def test_feed_lines_validates_as_parse_line(seed: int) -> None:
    """Every wrong type, missing or extra field in a request_step record gives the same
    BadInput (or the same replay) through the inlined loop as through parse_line + feed."""
    from spectally.engine_bridge.records import request_step_inline_ok

    assert request_step_inline_ok()  # the inline check matches the schema's request_step
    rng = random.Random(seed)
    lines = list(synth.lines(600, mode=rng.choice(["sync", "async"]), batch=4, seed=seed))
    log = _mistype(lines, rng) if seed else lines
    hot = result_json(
        replay_file(
            "log",
            progress=False,
            max_divergences=50,
            lines=((n, raw.rstrip(b"\n"), True) for n, raw in enumerate(log, start=1)),
        )
    )
    assert hot == _per_record(log)


def test_ended_ids_matches_a_bounded_fifo() -> None:
    """EndedIds (fixed preallocated storage) answers as an OrderedDict cut to its capacity."""
    import random
    from collections import OrderedDict

    from spectally.engine_bridge.replay import EndedIds

    rng = random.Random(7)
    for _ in range(200):
        cap = rng.choice([1, 2, 3, 5, 8, 17])
        ended = EndedIds(cap, width=rng.choice([0, 3, 8]))
        ref: OrderedDict[str, tuple[str, int]] = OrderedDict()
        pool = [
            f"r{i}" if rng.random() < 0.7 else "é" * rng.randint(0, 9) + str(i) for i in range(40)
        ]
        for _ in range(200):
            rid = rng.choice(pool)
            status, line = rng.choice(["finished", "aborted"]), rng.randint(0, 10**12)
            ended.put(rid, status, line)
            if rid not in ref and len(ref) == cap:
                ref.popitem(last=False)
            ref[rid] = (status, line)
            for r in pool:
                assert ended.get(r) == ref.get(r)
                assert (r in ended) == (r in ref)
            assert len(ended) == len(ref)
    assert 1 not in EndedIds(3)


def test_counters_zero_is_shared_and_bounded() -> None:
    """Counters.zero(k) is one shared immutable state per k (the cache stays bounded)."""
    from spectally.reference import counters as ct

    assert ct.Counters.zero(3) is ct.Counters.zero(3)
    assert ct.Counters.zero(3) == ct.Counters(
        3,
        ct.rfc_zero(ct.INT_ARITH),
        ct.legacy_zero(ct.INT_ARITH),
        tuple(ct.position_zero(ct.INT_ARITH) for _ in range(3)),
    )
    for k in range(1, 200):
        assert ct.Counters.zero(k).k == k
    assert len(ct._ZEROS) <= 64


def test_try_block_checks_counts_of_an_equal_events_tuple() -> None:
    """A memoised shape passed as another (equal) events tuple has its counts type-checked."""
    e = Engine(EngineConfig(Mode.SYNC, 4), check=False)
    f = BlockFolder(e)
    e.run(_steps(Mode.SYNC, 4))
    first = ((Propose, 2), (Verify, 2), (Accept, 1))
    x = f.try_block("a", 0, first)
    e.apply(StepBegin(1))
    again = tuple(list(first))  # equal, not the same object
    assert again is not first
    assert f.try_block("a", 1, again) == x
    e.apply(StepBegin(2))
    assert f.try_block("a", 2, ((Propose, 2), (Verify, 2), (Accept, True))) is None
    assert f.try_block("a", 2, first) == x


def test_try_block_pending_sums_are_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    """`try_block` folds into the request's and the engine's sums with `CounterSum`'s bound:
    past MAX_PENDING distinct blocks both are folded into their base, and agree with apply."""
    monkeypatch.setattr(CounterSum, "MAX_PENDING", 1)
    e = Engine(EngineConfig(Mode.ASYNC, 4), check=False)
    f = BlockFolder(e)
    plain = Engine(EngineConfig(Mode.ASYNC, 4), check=False)
    for eng in (e, plain):
        eng.run([StepBegin(0), AddRequest("a", 0)])
    for step, n in enumerate([1, 2, 3, 1, 2], start=1):
        block = ((Propose, n), (Verify, n), (Accept, n - 1))
        for eng in (e, plain):
            eng.apply(StepBegin(step))
        assert f.try_block("a", step, block) is not None
        plain.run([Propose("a", step, n), Verify("a", step, n), Accept("a", step, n - 1)])
        assert len(e.requests["a"].sums._pending) <= 1 and len(e._totals._pending) <= 1
    assert e.totals == plain.totals
    assert e.request_counters("a") == plain.request_counters("a")
    assert e.requests["a"] == plain.requests["a"]


def _hot(log: list[bytes]) -> dict[str, Any]:
    return result_json(
        replay_file(
            "log",
            progress=False,
            max_divergences=50,
            lines=((n, raw.rstrip(b"\n"), True) for n, raw in enumerate(log, start=1)),
        )
    )


@pytest.mark.parametrize(
    "field", ["proposed", "padding", "scheduled", "invalid", "verified", "accepted", "sampled"]
)
def test_feed_lines_counts_equal_to_a_memoised_shape(field: str) -> None:
    """The inlined loop leaves ">= 0" to the shape memo (its keys are ints >= 0): a count that
    is negative, or a float or bool equal to a memoised int, goes the per-record way."""
    lines = list(synth.lines(800, mode="async", batch=4, seed=3))
    picks = [
        i
        for i, raw in enumerate(lines)
        if b'"applied"' in raw and json.loads(raw).get(field) is not None
    ][-5:]
    for value in (-1, float, bool):
        log = list(lines)
        for i in picks:
            rec = json.loads(log[i])
            rec[field] = value if value == -1 else value(rec[field])  # type: ignore[operator]
            log[i] = json.dumps(rec, separators=(",", ":")).encode() + b"\n"
        assert _hot(log) == _per_record(log)


def test_feed_lines_trailing_text() -> None:
    """A record followed by whitespace parses as json.loads parses it; extra data after it is
    json.loads's error, with its column."""
    lines = list(synth.lines(300, mode="async", batch=4, seed=4))
    i = max(n for n, raw in enumerate(lines) if b'"applied"' in raw)
    spaced = list(lines)
    spaced[i] = lines[i].rstrip(b"\n") + b" \t \r\n"
    assert _hot(spaced) == _per_record(spaced)
    assert _hot(spaced) == _hot(lines)
    extra = list(lines)
    extra[i] = lines[i].rstrip(b"\n") + b" {}\n"
    out = _hot(extra)
    assert out == _per_record(extra) and out["status"] == "bad_input"
    assert "Extra data" in json.dumps(out)


def test_fast_shape_is_learnt_only_from_valid_counts() -> None:
    """A record fed without validation (`Replayer.feed` takes what it is given) with a negative
    count is not memoised as a fast shape, so the inlined loop never skips ">= 0" for it."""
    import contextlib

    lines = list(synth.lines(60, mode="async", batch=2, seed=5))
    replayer = Replayer("log")
    for n, raw in enumerate(lines, start=1):
        rec = parse_line("log", n, raw.rstrip(b"\n"), True)
        if rec["record"] == "request_step" and rec["outcome"] == "applied":
            with contextlib.suppress(Exception):  # whatever the slow path makes of it
                replayer.feed(n, dict(rec, padding=-1))
            learnt = [v for k, v in replayer.fast.items() if k[2] == -1]
            assert learnt == [None]
            return
        replayer.feed(n, rec)
    raise AssertionError("no applied request_step in the log")


def test_inline_loop_takes_the_common_records(monkeypatch: pytest.MonkeyPatch) -> None:
    """The inlined loop finds the shapes the slow path memoised (the two build the same key):
    on a long synthetic log all but a few records bypass `feed` (a speed property, measured
    here as the share of records `feed` sees, not as time)."""
    seen = {"feed": 0}
    feed = Replayer.feed

    def counting_feed(self: Replayer, line: int, rec: Any) -> None:
        seen["feed"] += 1
        feed(self, line, rec)

    monkeypatch.setattr(Replayer, "feed", counting_feed)
    lines = list(synth.lines(20_000, seed=4))
    result = replay_file(
        "log",
        progress=False,
        lines=((n, raw.rstrip(b"\n"), True) for n, raw in enumerate(lines, start=1)),
    )
    assert result.status == "agree"
    applied = sum(b'"outcome":"applied"' in raw for raw in lines)
    assert seen["feed"] < len(lines) - 0.9 * applied  # >= 90 % of applied blocks inline
