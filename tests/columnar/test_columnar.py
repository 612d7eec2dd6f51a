"""The columnar checker against the plain reference replay: the same result on every log.

`replay_file` runs the columnar checker and hands every log it cannot vouch for to the
reference machine; ``reference=True`` runs the reference machine only. Both must give the same
status, exit code, report, JSON and totals on every recorded fixture, bundled example, golden
trace, bad-input case and generated log (valid, one engine number tampered, one line
corrupted; sync and async, structured outputs, AV, preemptions, aborts).
"""

from __future__ import annotations

import gzip
import json
import random
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st
from spectally.engine_bridge import synth
from spectally.engine_bridge.cli import replay
from spectally.engine_bridge.replay.columnar import blocks, judge
from spectally.engine_bridge.replay.columnar.array_arith import ARRAY_ARITH
from spectally.engine_bridge.replay.columnar.reader import Irregular
from spectally.engine_bridge.replay.dispatch import render_summary, replay_file, result_json
from spectally.reference.arith import INT_ARITH
from spectally.reference.step import Mode, StepQuery, legacy_step, pipeline, rfc_step

ROOT = Path(__file__).parents[2]
LOGS = sorted(
    [
        *(ROOT / "tests" / "fixtures" / "vllm").glob("*.ndjson*"),
        *(ROOT / "engine_bridge" / "examples").glob("*.ndjson*"),
        *(ROOT / "tests" / "traces").glob("*/*.ndjson"),
    ]
)


@pytest.fixture(autouse=True)
def strict_columnar(monkeypatch: pytest.MonkeyPatch) -> None:
    """A fault of the columnar code fails these tests instead of falling back silently."""
    monkeypatch.setattr(judge, "STRICT", True)


def same(path: Path | str, **kw: Any) -> tuple[Any, Any]:
    """Replay both ways; assert every visible part of the result is the same."""
    fast = replay_file(str(path), progress=False, **kw)
    plain = replay_file(str(path), progress=False, reference=True, **kw)
    assert fast.status == plain.status
    assert fast.exit_code == plain.exit_code
    assert render_summary(fast) == render_summary(plain)
    assert result_json(fast) == result_json(plain)
    assert fast.totals == plain.totals
    return fast, plain


def columnar_agrees(path: Path | str) -> bool:
    """Whether the columnar checker vouched for the log on its own."""
    try:
        judge.Columnar(str(path), None).run(str(path), None, None)
    except Irregular:
        return False
    return True


@pytest.mark.parametrize("path", LOGS, ids=lambda p: p.name)
def test_every_recorded_log_and_trace(path: Path) -> None:
    same(path)
    same(path, max_divergences=5)


def test_the_columnar_path_judges_most_real_logs() -> None:
    """Not a fallback everywhere: every agreeing recorded log and trace, preemptions and
    stale output included, is judged by the columnar checker itself (and
    `test_every_recorded_log_and_trace` shows it judged them as the reference does)."""
    vouched = [p.name for p in LOGS if columnar_agrees(p)]
    assert len(vouched) >= 45, vouched
    lifecycle = [p for p in LOGS if "preempt" in p.name or "stale" in p.name]
    agreeing = [p for p in lifecycle if replay_file(str(p), progress=False).status == "agree"]
    assert len(agreeing) >= 5
    for path in agreeing:
        assert replay_file(str(path), progress=False).checker == "columnar", path.name
    assert not any(columnar_agrees(p) for p in (ROOT / "tests" / "traces" / "diverge").iterdir())


# -- bad input -----------------------------------------------------------------------------------


def _base(mode: str = "async") -> list[bytes]:
    return list(synth.varied.lines(300, mode=mode, min_batch=8, max_batch=16, seed=5))


def _mutate(lines: list[bytes], at: int, new: bytes | None) -> bytes:
    out = list(lines)
    if new is None:
        del out[at]
    else:
        out[at] = new
    return b"".join(out)


def _step_line(lines: list[bytes]) -> int:
    return next(i for i, raw in enumerate(lines) if b'"request_step"' in raw and i > 40)


MUTATIONS: dict[str, Any] = {
    "bad json": lambda r: r[:-3] + b"\n",
    "duplicate key": lambda r: r.replace(b'"step":', b'"step":1,"step":', 1),
    "duplicate key with spaces": lambda r: r.replace(b'"step":', b'"step" :1, "step":', 1),
    "bom": lambda r: b"\xef\xbb\xbf" + r,
    "huge int": lambda r: r.replace(b'"padding":0', b'"padding":' + b"9" * 30, 1),
    "int above 2**63": lambda r: r.replace(b'"padding":0', b'"padding":9223372036854775808', 1),
    "deep nesting": lambda r: r[:-2] + b',"meta":' + b'{"a":' * 100 + b"1" + b"}" * 100 + b"}\n",
    "meta object": lambda r: r[:-2] + b',"meta":{"x":[1,2]}}\n',
    "unknown field": lambda r: r[:-2] + b',"surprise":1}\n',
    "delivered ok": lambda r: r[:-2] + b',"delivered":1}\n',
    "delivered null": lambda r: r[:-2] + b',"delivered":null}\n',
    "bool count": lambda r: r.replace(b'"padding":0', b'"padding":false', 1),
    "float count": lambda r: r.replace(b'"padding":0', b'"padding":0.0', 1),
    "negative count": lambda r: r.replace(b'"padding":0', b'"padding":-1', 1),
    "string count": lambda r: r.replace(b'"padding":0', b'"padding":"0"', 1),
    "bad enum": lambda r: r.replace(b'"applied"', b'"aplied"', 1),
    "lone surrogate": lambda r: r.replace(b'"request":"', b'"request":"\\ud800', 1),
    "invalid utf-8": lambda r: r.replace(b'"request":"', b'"request":"\xff', 1),
    "crlf": lambda r: r[:-1] + b"\r\n",
    "trailing space": lambda r: r[:-1] + b" \n",
    "empty line": lambda r: b"\n",
    "not an object": lambda r: b"[1,2]\n",
    "record missing": lambda r: r.replace(b'"record":"request_step",', b"", 1),
    "unknown kind": lambda r: r.replace(b'"request_step"', b'"request_stepp"', 1),
    "empty id": lambda r: r.replace(b'"request":"', b'"request":"",      "x":"', 1),
    "escaped id": lambda r: r.replace(b'"request":"c', b'"request":"\\u0063', 1),
    "removed": lambda r: None,
}


REQUEST_MUTATIONS: dict[str, Any] = {
    "drop_stale_output on a finish": lambda r: r[:-2] + b',"drop_stale_output":true}\n',
    "structured on a finish": lambda r: r[:-2] + b',"structured":true}\n',
    "reason not a string": lambda r: r[:-2] + b',"reason":1}\n',
    "unknown event": lambda r: r.replace(b'"finish"', b'"finnish"', 1),
    "finish twice": lambda r: r + r,
    "finish becomes abort": lambda r: r.replace(b'"finish"', b'"abort"', 1),
    "removed": lambda r: None,
}


@pytest.mark.parametrize("mode", ["sync", "async"])
@pytest.mark.parametrize("name", sorted(REQUEST_MUTATIONS))
def test_bad_lifecycle_records(tmp_path: Path, name: str, mode: str) -> None:
    lines = _base(mode)
    at = next(i for i, raw in enumerate(lines) if b'"finish"' in raw and i > 20)
    path = tmp_path / "log.ndjson"
    path.write_bytes(_mutate(lines, at, REQUEST_MUTATIONS[name](lines[at])))
    same(path)
    same(path, max_divergences=3)


@pytest.mark.parametrize("mode", ["sync", "async"])
@pytest.mark.parametrize("name", sorted(MUTATIONS))
def test_bad_input_is_reported_as_the_reference_reports_it(
    tmp_path: Path, name: str, mode: str
) -> None:
    lines = _base(mode)
    at = _step_line(lines)
    path = tmp_path / "log.ndjson"
    path.write_bytes(_mutate(lines, at, MUTATIONS[name](lines[at])))
    fast, _ = same(path)
    if name in ("crlf", "trailing space", "meta object", "escaped id"):
        assert fast.status == "agree"  # accepted by the reference decoder: the same verdict


@pytest.mark.parametrize(
    "edit",
    ["header not first", "second header", "empty", "no newline", "cut line", "after totals"],
)
def test_placement_errors(tmp_path: Path, edit: str) -> None:
    lines = _base()
    data = {
        "header not first": b"".join([lines[1], lines[0], *lines[2:]]),
        "second header": b"".join([*lines[:5], lines[0], *lines[5:]]),
        "empty": b"",
        "no newline": b"".join(lines)[:-1],
        "cut line": b"".join(lines[:-1]) + lines[-1][:30],
        "after totals": b"".join([*lines, lines[3]]),
    }[edit]
    path = tmp_path / "log.ndjson"
    path.write_bytes(data)
    same(path)


# -- generated logs ------------------------------------------------------------------------------


def _tamper(rng: random.Random, lines: list[bytes]) -> list[bytes]:
    """One engine number off by one (a request_step, step_stats or totals count)."""
    candidates = [i for i, raw in enumerate(lines) if b'"request"' not in raw or b"_step" in raw]
    i = rng.choice(candidates[1:])
    rec = json.loads(lines[i])
    fields = [k for k, v in rec.items() if type(v) is int and k != "step"]
    if "num_accepted_tokens_per_pos" in rec:
        fields.append("num_accepted_tokens_per_pos")
    name = rng.choice(fields)
    if name == "num_accepted_tokens_per_pos":
        rec[name][rng.randrange(len(rec[name]))] += 1
    else:
        rec[name] += rng.choice((-1, 1))
    out = list(lines)
    out[i] = (json.dumps(rec, separators=(",", ":")) + "\n").encode()
    return out


def _corrupt(rng: random.Random, lines: list[bytes]) -> list[bytes]:
    """One line broken: a byte changed, the line cut, duplicated, swapped or dropped, or
    joined to the next with a blank line after them (as many lines, one holding two records:
    msgspec's decode_lines would read them as two lines)."""
    out = list(lines)
    i = rng.randrange(1, len(out))
    how = rng.randrange(7)
    if how == 0:
        raw = bytearray(out[i])
        raw[rng.randrange(len(raw) - 1)] = rng.randrange(256)
        out[i] = bytes(raw)
    elif how == 1:
        out[i] = out[i][: rng.randrange(len(out[i]))] + b"\n"
    elif how == 2:
        out.insert(i, out[i])
    elif how == 3 and i + 1 < len(out):
        out[i], out[i + 1] = out[i + 1], out[i]
    elif how == 4:
        del out[i]
    elif how == 5 and i + 1 < len(out):
        out[i : i + 2] = [out[i][:-1] + out[i + 1], rng.choice((b"\n", b" \n"))]
    elif how == 5:
        out[i] = b"\n"
        out = out[:i]  # cut at a record boundary: an incomplete log
    return out


def _spaced(rng: random.Random, lines: list[bytes], repeated: bool) -> list[bytes]:
    """Every line as json.dumps writes it by default (", " and ": "; the scanner reads none of
    them); if ``repeated``, the step key twice in one line, maybe with whitespace before a
    colon (bad input for the reference)."""
    out = [(json.dumps(json.loads(line)) + "\n").encode() for line in lines]
    if repeated:
        i = rng.choice([i for i, line in enumerate(out) if b'"step":' in line])
        twice = rng.choice((b'"step": 0, "step":', b'"step" :0, "step":', b'"step":\t0,"step" :'))
        out[i] = out[i].replace(b'"step":', twice, 1)
    return out


def _preempt(rng: random.Random, lines: list[bytes]) -> list[bytes]:
    """A preemption of a running request, with its in-flight block's record as vLLM writes it
    (stale in async, a dropped proposal in sync) or alone."""
    out = list(lines)
    i = rng.randrange(10, len(out) - 1)
    rec = json.loads(out[i])
    if rec["record"] != "request_step":
        return out
    preempt = {"record": "request", "step": rec["step"], "request": rec["request"]}
    preempt["event"] = "preempt"
    out.insert(i + 1, (json.dumps(preempt, separators=(",", ":")) + "\n").encode())
    return out


@settings(max_examples=40)
@given(
    seed=st.integers(0, 10_000),
    mode=st.sampled_from(["sync", "async"]),
    varied=st.booleans(),
    av=st.booleans(),
    change=st.sampled_from(["none", "tamper", "corrupt", "preempt", "spaced"]),
)
def test_generated_logs(
    tmp_path_factory: pytest.TempPathFactory,
    seed: int,
    mode: str,
    varied: bool,
    av: bool,
    change: str,
) -> None:
    rng = random.Random(seed)
    repeated = False
    if varied:
        gen = synth.varied.lines(
            rng.randrange(150, 500),
            mode=mode,
            av=av,
            min_batch=4,
            max_batch=24,
            seed=seed,
            k=rng.choice((2, 4, 8)),
        )
    else:
        gen = synth.lines(rng.randrange(150, 500), mode=mode, av=av, batch=8, seed=seed)
    lines = list(gen)
    if change == "tamper":
        lines = _tamper(rng, lines)
    elif change == "corrupt":
        lines = _corrupt(rng, lines)
    elif change == "preempt":
        lines = _preempt(rng, lines)
    elif change == "spaced":
        repeated = rng.random() < 0.5
        lines = _spaced(rng, lines, repeated)
    path = tmp_path_factory.mktemp("gen") / "log.ndjson.gz"
    path.write_bytes(gzip.compress(b"".join(lines)))
    fast, _ = same(path)
    if change == "spaced" and repeated:
        assert fast.status == "bad_input"
    elif change in ("none", "spaced"):
        assert fast.status == "agree"
        assert columnar_agrees(path)


@pytest.mark.parametrize("blank", [b"\n", b" \n"])
@pytest.mark.parametrize("spaced", [False, True])
def test_two_records_on_one_line_are_bad_input_on_both_paths(
    tmp_path: Path, spaced: bool, blank: bytes
) -> None:
    """Two request_step records on one line, and a blank line after it: as many lines as
    records, which msgspec's decode_lines reads as if the records were on lines of their
    own. The reference refuses the line (extra data); so must the columnar path, in a
    compact log (the joined line left to the typed decoder by the scanner) and in a spaced
    one (every line decoded by it)."""
    lines = _base()
    if spaced:
        lines = [(json.dumps(json.loads(line)) + "\n").encode() for line in lines]
    i = next(
        i
        for i in range(5, len(lines) - 1)
        if b"request_step" in lines[i] and b"request_step" in lines[i + 1]
    )
    lines[i : i + 2] = [lines[i][:-1] + lines[i + 1], blank]
    path = tmp_path / "log.ndjson"
    path.write_bytes(b"".join(lines))
    fast, _ = same(path)
    assert fast.status == "bad_input"
    assert f":{i + 1}:" in render_summary(fast)


def test_lines_argument_and_stdin(tmp_path: Path) -> None:
    data = b"".join(_base())
    listed = [(n, raw[:-1], True) for n, raw in enumerate(data.splitlines(True), start=1)]
    fast = replay_file("mem", lines=listed, progress=False)
    plain = replay_file("mem", lines=listed, progress=False, reference=True)
    assert fast.status == plain.status == "agree"
    assert render_summary(fast) == render_summary(plain)
    for payload in (data, gzip.compress(data), data[: len(data) // 2]):
        a = CliRunner().invoke(replay, ["-", "--json"], input=payload)
        b = CliRunner().invoke(replay, ["-", "--json", "--reference"], input=payload)
        assert a.exit_code == b.exit_code and a.output == b.output


# -- the array arithmetic and the translation ----------------------------------------------------


@given(
    st.lists(
        st.tuples(
            st.sampled_from([Mode.SYNC, Mode.ASYNC]),
            st.integers(0, 6),
            st.integers(0, 3),
            st.integers(0, 6),
            st.integers(0, 9),
            st.integers(0, 9),
            st.integers(0, 6),
            st.booleans(),
        ),
        min_size=1,
        max_size=30,
    )
)
def test_array_arith_evaluates_the_rules_like_int_arith(rows: list[tuple[Any, ...]]) -> None:
    """`ArrayArith` gives, element by element, what `IntArith` gives for each block."""
    for mode in (Mode.SYNC, Mode.ASYNC):
        xs = [
            StepQuery(
                mode,
                n,
                min(a, n),
                grammar_valid=min(g, n),
                scheduled=s,
                av_verify=v,
                padding=p,
                applied=ap,
            ).inputs()
            for _, n, p, g, s, v, a, ap in rows
        ]
        arrays = type(xs[0])(
            *(np.array([getattr(x, f) for x in xs]) for f in xs[0].__dataclass_fields__)
        )
        for rule in (pipeline, rfc_step, legacy_step):
            got = rule(mode, arrays, ARRAY_ARITH)
            for i, x in enumerate(xs):
                want = rule(mode, x, INT_ARITH)
                for f in want.__dataclass_fields__:
                    value = getattr(got, f)
                    if hasattr(value, "__dataclass_fields__"):
                        for g in value.__dataclass_fields__:
                            v = np.broadcast_to(getattr(value, g), (len(xs),))[i]
                            assert v == getattr(getattr(want, f), g)
                    else:
                        assert np.broadcast_to(value, (len(xs),))[i] == getattr(want, f)


MUTANTS = {
    "av cap ignored": lambda x: x.__class__(**{**x.__dict__, "av_cap": x.schedule_cap}),
    "grammar cut ignored": lambda x: x.__class__(**{**x.__dict__, "grammar_valid": x.proposed}),
    "padding dropped": lambda x: x.__class__(**{**x.__dict__, "padding": x.padding * 0}),
    "schedule cap off by one": lambda x: x.__class__(
        **{**x.__dict__, "schedule_cap": x.schedule_cap + 1}
    ),
}


@pytest.mark.parametrize("mutant", sorted(MUTANTS))
def test_a_wrong_translation_falls_back(monkeypatch: pytest.MonkeyPatch, mutant: str) -> None:
    """A columnar translation that builds the wrong stage inputs is caught by the columnar
    checks themselves (it stops vouching for real logs), and the reference still writes the
    same reports."""
    vouched = sum(columnar_agrees(p) for p in LOGS)
    original = blocks.block_inputs

    def wrong(mode: Mode, c: Any) -> Any:
        x, *rest = original(mode, c)
        return (MUTANTS[mutant](x), *rest)

    monkeypatch.setattr(blocks, "block_inputs", wrong)
    assert sum(columnar_agrees(p) for p in LOGS) < vouched
    for path in LOGS[::12]:
        same(path)


def test_a_wrong_fold_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    """The differential comparison has teeth: rfc counters folded wrongly by the columnar path
    (AV forgotten: no engine number shows it, so no columnar check can) differ from the
    reference's on a real log."""
    original = blocks.fold_counters

    def wrong(mode: Mode, k: int, x: Any, *weights: Any) -> Any:
        wrong_x = x.__class__(**{**x.__dict__, "av_cap": x.schedule_cap})
        return original(mode, k, wrong_x, *weights)

    monkeypatch.setattr(blocks, "fold_counters", wrong)
    with pytest.raises(AssertionError):
        same(ROOT / "tests" / "traces" / "agree" / "async_av_rfc_row.ndjson")


def _columns(**kw: Any) -> blocks.BlockColumns:
    base: dict[str, Any] = dict(
        proposed=[3, 3],
        padding=[0, 0],
        grammar_valid=[-1, -1],
        scheduled=[3, 3],
        invalid=[-1, -1],
        verified=[-1, -1],
        accepted=[1, 0],
        sampled=[2, 0],
        delivered=[-1, -1],
        applied=[True, False],
        structured=[False, False],
        stale=[False, False],
    )
    base.update(kw)
    return blocks.BlockColumns(**{name: np.array(v) for name, v in base.items()})


@pytest.mark.parametrize(
    ("delivered", "ok"),
    [
        ([-1, -1], True),  # not recorded
        ([1, 0], True),
        ([2, 0], True),  # 1 <= delivered <= sampled for an applied block
        ([0, 0], False),  # applied, nothing delivered
        ([3, 0], False),  # more than sampled
        ([1, 1], False),  # a discarded block delivered something
    ],
)
def test_delivered_rule(delivered: list[int], ok: bool) -> None:
    """BRIEF interface 3: applied needs 1 <= delivered <= sampled, discarded needs 0."""
    columns = _columns(delivered=delivered)
    if ok:
        blocks.check_blocks(Mode.SYNC, 3, columns)
    else:
        with pytest.raises(Irregular):
            blocks.check_blocks(Mode.SYNC, 3, columns)


def test_counts_far_above_k_are_checked_unpacked() -> None:
    """A count that does not fit the shape key takes the unpacked path (and is refused)."""
    with pytest.raises(Irregular):
        blocks.check_blocks(Mode.SYNC, 3, _columns(sampled=[2, 10**12]))
    result = blocks.check_blocks(Mode.SYNC, 3, _columns(invalid=[-1, 10**12], scheduled=[3, 0]))
    assert result.counters.rfc.discarded_steps == 1


def test_a_line_over_the_limit_is_left_to_the_reference_decoder(tmp_path: Path) -> None:
    lines = _base()
    at = _step_line(lines)
    rid = json.loads(lines[at])["request"]
    long_id = "x" * (1 << 20)
    lines = [raw.replace(rid.encode(), long_id.encode()) for raw in lines]
    path = tmp_path / "log.ndjson"
    path.write_bytes(b"".join(lines))
    same(path)


def test_a_log_with_no_steps(tmp_path: Path) -> None:
    lines = _base()
    path = tmp_path / "log.ndjson"
    zero = {"record": "totals", "source": "t", "num_drafts": 0, "num_draft_tokens": 0}
    zero.update(num_accepted_tokens=0, num_accepted_tokens_per_pos=[0] * 8)
    path.write_bytes(lines[0] + json.dumps(zero).encode() + b"\n")
    fast, _ = same(path)
    assert fast.status == "agree" and columnar_agrees(path)


# -- the collector ---------------------------------------------------------------------------


def _cyclic_garbage_of(run: Any) -> int:
    """Objects in reference cycles that a second ``run()`` left unreachable (what the cyclic
    collector would have had to free). The first run is not counted: what a process does once
    (a lazy import, a cache filled) may make cycles that live as long as the process."""
    import gc

    run()
    enabled = gc.isenabled()
    gc.disable()
    gc.freeze()  # what exists now is not looked at: the count costs the run's objects only
    try:
        run()
        return gc.collect()
    finally:
        gc.unfreeze()
        if enabled:
            gc.enable()


def test_the_checker_leaves_no_cycles_for_the_collector(tmp_path: Path) -> None:
    """`judge.collector_paused` is only safe because the checker frees everything by
    reference counts: every recorded log and trace, a generated log, and logs the checker
    hands to the reference (a tampered count, a corrupted line) leave no cyclic garbage."""
    base = _base()
    at = _step_line(base)
    tampered = tmp_path / "tampered.ndjson"
    tampered.write_bytes(_mutate(base, at, base[at].replace(b'"padding":0', b'"padding":1', 1)))
    corrupt = tmp_path / "corrupt.ndjson"
    corrupt.write_bytes(_mutate(base, at, base[at][:-3] + b"\n"))
    varied = tmp_path / "varied.ndjson"
    varied.write_bytes(b"".join(synth.varied.lines(3000, seed=2, preempt_share=0.05)))
    for path in [*LOGS, tampered, corrupt, varied]:
        garbage = _cyclic_garbage_of(
            lambda p=path: judge.replay_columnar(str(p), bar=None)  # type: ignore[misc]
        )
        assert garbage == 0, path.name


def test_a_cycle_would_be_seen(monkeypatch: pytest.MonkeyPatch) -> None:
    """The check above can fail: a checker that leaves one cycle per chunk is caught."""
    real = judge.Columnar._steps

    def leaky(self: Any, *args: Any, **kw: Any) -> Any:
        loop: list[Any] = []
        loop.append(loop)
        return real(self, *args, **kw)

    monkeypatch.setattr(judge.Columnar, "_steps", leaky)
    path = ROOT / "engine_bridge" / "examples"
    log = sorted(path.glob("*.ndjson*"))[0]
    assert _cyclic_garbage_of(lambda: judge.replay_columnar(str(log), bar=None)) > 0


@pytest.mark.parametrize("enabled", [True, False])
def test_the_collector_is_left_as_it_was(enabled: bool) -> None:
    import gc

    was = gc.isenabled()
    try:
        gc.enable() if enabled else gc.disable()
        with pytest.raises(RuntimeError), judge.collector_paused():
            assert not gc.isenabled()
            raise RuntimeError
        assert gc.isenabled() is enabled
        judge.replay_columnar(str(LOGS[0]), bar=None)
        assert gc.isenabled() is enabled
    finally:
        gc.enable() if was else gc.disable()
