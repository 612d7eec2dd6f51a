"""The byte scanner (engine_bridge/replay/columnar/scanner.py) takes a line only where the typed
decoder and the reference decoder both accept it, with their values.

Lines are canonical ``request_step`` lines (as steplog/writer.py and the generators write them, or
json.dumps with its default separators) and
near-canonical ones: one mutation of each class below, or one byte replaced, deleted or
inserted anywhere. For each, the scanner either declines the line or yields exactly what
msgspec's typed decoder (reader) and `records.parse_line` yield; a canonical line within
the scanner's bounds (integers of at most 18 digits, printable ASCII ids) must be taken, so
the property is not vacuous. Chunks of mixed lines decode to the same columns through
`reader.decode_columns` (scanner + typed decoder) as through the typed decoder alone.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import msgspec
import numpy as np
import pytest
from hypothesis import assume, given
from hypothesis import strategies as st
from spectally.engine_bridge import synth
from spectally.engine_bridge.replay.columnar import judge, reader, scanner
from spectally.engine_bridge.replay.columnar.reader import Irregular, decode_chunk, decode_columns
from spectally.engine_bridge.replay.columnar.scanner import ABSENT, COLUMNS, NULL, OUTCOMES, scan
from spectally.engine_bridge.replay.report import render_summary, result_json
from spectally.engine_bridge.steplog.records import BadInput, parse_line

NULLABLE = ("grammar_valid", "invalid", "verified", "delivered")
ORDER = (
    "record",
    "step",
    "request",
    "proposed",
    "padding",
    "grammar_valid",
    "scheduled",
    "invalid",
    "verified",
    "sampled",
    "accepted",
    "outcome",
)
ID_CHARS = st.characters(min_codepoint=0x20, max_codepoint=0x7E, exclude_characters='"\\')
SMALL = st.integers(0, 10**18 - 1)  # what the scanner reads itself
COUNT = st.one_of(st.integers(0, 12), st.integers(0, 10**9), SMALL)


def dumps(rec: dict[str, Any], spaced: bool = False) -> bytes:
    """The writers' form (steplog/writer.py, synth/): compact separators, ASCII; ``spaced``:
    json.dumps' default separators (", " and ": "), the scanner's other style."""
    return json.dumps(rec, separators=(", ", ": ") if spaced else (",", ":")).encode()


@st.composite
def canonical(draw: st.DrawFn, delivered: bool | None = None) -> dict[str, Any]:
    rec: dict[str, Any] = {"record": "request_step"}
    for name in ORDER[1:]:
        if name == "request":
            rec[name] = draw(
                st.one_of(
                    st.text(ID_CHARS, min_size=1, max_size=40),
                    st.text(ID_CHARS, min_size=1, max_size=300),
                    st.sampled_from(["cmpl-0-0", "r1", "a:b,c}{", "x" * 255, "x" * 256]),
                )
            )
        elif name == "outcome":
            rec[name] = draw(st.sampled_from(OUTCOMES))
        elif name == "record":
            continue
        elif name in NULLABLE and draw(st.booleans()):
            rec[name] = None
        else:
            rec[name] = draw(COUNT)
    with_delivered = draw(st.booleans()) if delivered is None else delivered
    if with_delivered:
        rec["delivered"] = None if draw(st.booleans()) else draw(COUNT)
    return rec


def expected(line: bytes) -> tuple[list[int], str, str] | None:
    """What both decoders give for ``line``; None where either refuses it."""
    try:
        rec = reader._DECODER.decode(line)
    except (msgspec.DecodeError, msgspec.ValidationError):
        return None
    try:
        obj = parse_line("log", 1, line, True)
    except BadInput:
        return None
    if type(rec) is not reader.RequestStep:
        return None
    values = [getattr(rec, name) for name in COLUMNS]
    for name, value in zip(COLUMNS, values, strict=True):  # the two decoders agree
        assert obj.get(name, msgspec.UNSET) == value, (name, obj, rec)
    assert (obj["request"], obj["outcome"]) == (rec.request, rec.outcome)
    codes = [NULL if v is None else ABSENT if v is msgspec.UNSET else v for v in values]
    return codes, rec.request, rec.outcome


def scanned(chunk: bytes, line: int = 0) -> tuple[list[int], str, str] | None:
    s = scan(chunk)
    if not s.taken[line]:
        assert (s.values[line] == 0).all() and s.rid[line] == s.outcome[line] == -1
        return None
    return s.values[line].tolist(), s.ids[int(s.rid[line])], OUTCOMES[int(s.outcome[line])]


def check(line: bytes) -> tuple[list[int], str, str] | None:
    """The scanner on ``line`` alone, with and without its newline and between other lines:
    declined, or the decoders' values."""
    want = expected(line)
    got = scanned(line + b"\n")
    if got is not None:
        assert got == want, line
    assert scanned(line) == got, line  # the last line of a chunk, without its newline
    other = b'{"record":"request","step":1,"request":"r","event":"finish"}'
    assert scanned(other + b"\n" + line + b"\n" + other, 1) == got, line
    return got


# -- canonical lines ----------------------------------------------------------------------------


@given(canonical(), st.booleans())
def test_canonical_lines_are_taken_with_the_decoders_values(
    rec: dict[str, Any], spaced: bool
) -> None:
    line = dumps(rec, spaced)
    got = check(line)
    within = (
        all(v is None or type(v) is str or v < 10**18 for v in rec.values())
        and len(rec["request"]) <= scanner.MAX_ID_BYTES
    )
    if within:
        assert got is not None, line  # the scanner reads what it is meant to read
        assert got == expected(line)


@pytest.mark.parametrize("size", [1, 2, scanner.MAX_ID_BYTES - 1, scanner.MAX_ID_BYTES, 256, 300])
def test_id_length_limit(size: int) -> None:
    rec = {"record": "request_step", "step": 3, "request": "x" * size, "proposed": 2,
           "padding": 0, "grammar_valid": None, "scheduled": 2, "invalid": None,
           "verified": 1, "sampled": 2, "accepted": 1, "outcome": "applied"}  # fmt: skip
    got = check(dumps(rec))
    assert (got is not None) == (size <= scanner.MAX_ID_BYTES)
    assert got is None or got[1] == "x" * size


@pytest.mark.parametrize("digits", [17, 18, 19, 20])
def test_integer_length_limit(digits: int) -> None:
    value = int("9" * digits) if digits < 19 else int("1" + "0" * (digits - 1))
    for name in ("step", "proposed", "accepted", "verified"):
        rec = {"record": "request_step", "step": 3, "request": "r", "proposed": 2, "padding": 0,
               "grammar_valid": None, "scheduled": 2, "invalid": None, "verified": 1,
               "sampled": 2, "accepted": 1, "outcome": "applied"}  # fmt: skip
        rec[name] = value
        got = check(dumps(rec))
        assert (got is not None) == (digits <= 18)
        if got is not None:
            assert got[0][COLUMNS.index(name)] == value


# -- near-canonical lines -----------------------------------------------------------------------


def _replace_value(text: str, name: str, raw: str) -> str:
    rec_start = text.index(f'"{name}":') + len(name) + 3
    rec_start += text[rec_start] == " "  # json.dumps' default separator
    end = rec_start
    if text[end] == '"':
        end = text.index('"', end + 1) + 1
    else:
        while end < len(text) and text[end] not in ",}":
            end += 1
    return text[:rec_start] + raw + text[end:]


INT_FIELDS = [name for name in ORDER if name not in ("record", "request", "outcome")]


@st.composite
def mutated(draw: st.DrawFn) -> bytes:
    rec = draw(canonical())
    spaced = draw(st.booleans())
    text = dumps(rec, spaced).decode()
    comma = 2 if spaced else 1  # back from a key's quote to the comma before it
    keys = list(rec)
    kind = draw(
        st.sampled_from(
            [
                "whitespace",
                "swap",
                "leading_zero",
                "long",
                "negative",
                "float",
                "bool",
                "escaped_id",
                "unicode_id",
                "null",
                "outcome",
                "missing",
                "extra",
                "duplicate",
                "byte",
            ]
        )
    )
    name = draw(st.sampled_from(INT_FIELDS))
    if kind == "whitespace":
        at = draw(st.integers(0, len(text)))
        text = text[:at] + draw(st.sampled_from([" ", "\t", "\r"])) + text[at:]
    elif kind == "swap":
        i = draw(st.integers(0, len(keys) - 2))
        keys[i], keys[i + 1] = keys[i + 1], keys[i]
        text = dumps({k: rec[k] for k in keys}, spaced).decode()
    elif kind == "leading_zero" and name in rec and rec[name] is not None:
        text = _replace_value(text, name, "0" + str(rec[name]))
    elif kind == "long":
        text = _replace_value(text, name, str(draw(st.integers(10**18 - 2, 2**64))))
    elif kind == "negative":
        text = _replace_value(text, name, draw(st.sampled_from(["-1", "-0", "-12"])))
    elif kind == "float":
        raw = draw(st.sampled_from(["1.0", "1e0", "1E2", "0.5", "2.", "1e-0"]))
        text = _replace_value(text, name, raw)
    elif kind == "bool":
        text = _replace_value(text, name, draw(st.sampled_from(["true", "false", "nul", '"1"'])))
    elif kind == "escaped_id":
        esc = draw(st.sampled_from(['\\"', "\\\\", "\\u0041", "\\n", "\\/", "\\u00e9"]))
        at = draw(st.integers(0, len(rec["request"])))
        text = _replace_value(text, "request", f'"{rec["request"][:at]}{esc}{rec["request"][at:]}"')
    elif kind == "unicode_id":
        char = draw(st.characters(min_codepoint=0x80, exclude_categories=["Cs"]))
        text = _replace_value(
            text, "request", json.dumps(rec["request"] + char, ensure_ascii=False)
        )
    elif kind == "null":
        text = _replace_value(text, name, "null")
    elif kind == "outcome":
        word = draw(st.sampled_from(["Applied", "applied2", "discarded", "discarded_", "", "x"]))
        text = _replace_value(text, "outcome", f'"{word}"')
    elif kind == "missing":
        del rec[draw(st.sampled_from(keys))]
        text = dumps(rec, spaced).decode()
    elif kind == "extra":
        extra = draw(st.sampled_from([',"meta":{}', ',"foo":1', ',"delivered":1', ',"":0']))
        at = draw(st.sampled_from([len(text) - 1, text.index('"outcome"') - comma]))
        text = text[:at] + extra + text[at:]
    elif kind == "duplicate":
        key = draw(st.sampled_from(keys))
        value = rec[key] if draw(st.booleans()) else draw(st.sampled_from([0, 7, "r"]))
        part = f",{json.dumps(key)}:{json.dumps(value)}"
        at = draw(st.sampled_from([len(text) - 1, text.index('"proposed"') - comma]))
        text = text[:at] + part + text[at:]
    data = text.encode()
    if kind == "byte":
        at = draw(st.integers(0, len(data) - 1))
        byte = bytes([draw(st.integers(0, 255))])
        how = draw(st.sampled_from(["replace", "delete", "insert"]))
        if how == "replace":
            data = data[:at] + byte + data[at + 1 :]
        elif how == "delete":
            data = data[:at] + data[at + 1 :]
        else:
            data = data[:at] + byte + data[at:]
    assume(b"\n" not in data)
    return data


@given(mutated())
def test_near_canonical_lines_are_declined_or_decoded_alike(line: bytes) -> None:
    check(line)


@pytest.mark.parametrize(
    "line",
    [
        b'{"record":"request_step","step":01,"request":"r","proposed":1,"padding":0,'
        b'"grammar_valid":null,"scheduled":1,"invalid":null,"verified":null,"sampled":1,'
        b'"accepted":0,"outcome":"applied"}',
        b'{"record":"request_step","step":1,"request":"r","padding":0,"proposed":1,'
        b'"grammar_valid":null,"scheduled":1,"invalid":null,"verified":null,"sampled":1,'
        b'"accepted":0,"outcome":"applied"}',
        b'{"record":"request_step","step":1,"request":"r\\"","proposed":1,"padding":0,'
        b'"grammar_valid":null,"scheduled":1,"invalid":null,"verified":null,"sampled":1,'
        b'"accepted":0,"outcome":"applied"}',
        b'{"record":"request_step","step":1,"request":"r","proposed":1,"padding":0,'
        b'"grammar_valid":null,"scheduled":1,"invalid":null,"verified":null,"sampled":1,'
        b'"accepted":0,"outcome":"applied","delivered":1,"delivered":2}',
        b'{"record":"request_step","step":1,"request":"r","proposed":1,"padding":0,'
        b'"grammar_valid":null,"scheduled":1,"invalid":null,"verified":null,"sampled":1,'
        b'"accepted":0,"outcome":"applied"} ',
        b'{"record":"request_step","step":1,"request":"r","proposed":null,"padding":0,'
        b'"grammar_valid":null,"scheduled":1,"invalid":null,"verified":null,"sampled":1,'
        b'"accepted":0,"outcome":"applied"}',
        b'{"record":"request_step","step":1,"request":"","proposed":1,"padding":0,'
        b'"grammar_valid":null,"scheduled":1,"invalid":null,"verified":null,"sampled":1,'
        b'"accepted":0,"outcome":"applied"}',
        b'{"record":"request_step","step":1,"request":"r","proposed":1,"padding":0,'
        b'"grammar_valid":null,"scheduled":1,"invalid":null,"verified":null,"sampled":1,'
        b'"accepted":0,"outcome":"applied"}}',
        b'{"record": "request_step", "step": 1,"request":"r","proposed":1,"padding":0,'
        b'"grammar_valid":null,"scheduled":1,"invalid":null,"verified":null,"sampled":1,'
        b'"accepted":0,"outcome":"applied"}',
        b'{"record": "request_step", "step": 1, "request": "r", "proposed": 1, "padding": 0, '
        b'"grammar_valid": null, "scheduled": 1, "invalid": null, "verified": null, '
        b'"sampled": 1, "accepted": 0, "outcome": "applied","delivered":1}',
    ],
    ids=[
        "leading-zero",
        "keys-swapped",
        "escape",
        "duplicate",
        "space",
        "null",
        "empty-id",
        "trailing",
        "styles-mixed",
        "styles-mixed-delivered",
    ],
)
def test_declined_examples(line: bytes) -> None:
    assert check(line) is None


def test_every_outcome_and_delivered_form() -> None:
    for outcome in OUTCOMES:
        for tail in ("", ',"delivered":null', ',"delivered":0', ',"delivered":123456789'):
            line = (
                b'{"record":"request_step","step":12345678,"request":"cmpl-1","proposed":4,'
                b'"padding":0,"grammar_valid":3,"scheduled":3,"invalid":0,"verified":2,'
                b'"sampled":3,"accepted":2,"outcome":"' + outcome.encode() + b'"' + tail.encode()
                + b"}"
            )  # fmt: skip
            assert check(line) == expected(line) is not None
            spaced = json.dumps(json.loads(line)).encode()
            assert check(spaced) == expected(spaced) == expected(line)


# -- request ids --------------------------------------------------------------------------------


def test_ids_map_to_one_str_each_even_when_every_hash_collides(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # a longer id before its prefix and after it: the sizes are compared, not only bytes
    ids = ["ab", "a", "b", "a", "ab", "b\x7e", "a", "x" * 40, "x" * 41, "x" * 40, "x" * 39]
    rec = {"record": "request_step", "step": 1, "request": "", "proposed": 1, "padding": 0,
           "grammar_valid": None, "scheduled": 1, "invalid": None, "verified": None,
           "sampled": 1, "accepted": 0, "outcome": "applied"}  # fmt: skip
    chunk = b"".join(dumps({**rec, "request": rid}) + b"\n" for rid in ids)
    for mul in (scanner.HASH_MUL, 0):  # 0: every id hashes alike
        monkeypatch.setattr(scanner, "HASH_MUL", mul)
        s = scan(chunk)
        assert s.taken.all()
        assert [s.ids[i] for i in s.rid.tolist()] == ids
        assert len(s.ids) == len(set(ids))


# -- whole chunks -------------------------------------------------------------------------------

OTHER = [
    b'{"record":"request","step":1,"request":"r","event":"add","structured":false}',
    b'{"record":"request","step":2,"request":"r","event":"finish"}',
    b'{"record":"step_stats","step":1,"num_drafts":1,"num_draft_tokens":2,'
    b'"num_accepted_tokens":1,"num_accepted_tokens_per_pos":[1,0]}',
    b'{"record":"request_step", "step":1, "request":"r", "proposed":1, "padding":0, '
    b'"grammar_valid":null, "scheduled":1, "invalid":null, "verified":null, '
    b'"sampled":1, "accepted":0, "outcome":"applied"}',
    b'{"record":"request_step","outcome":"applied","step":1,"request":"r","proposed":1,'
    b'"padding":0,"grammar_valid":null,"scheduled":1,"invalid":null,"verified":null,'
    b'"sampled":1,"accepted":0}',
]


def _struct_columns(path: str, chunk: bytes) -> Any:
    """The columns the typed decoder alone gives: kinds, values, outcomes, ids, records."""
    records, kinds = decode_chunk(path, 1, chunk)
    rows = []
    for rec in records:
        if type(rec) is reader.RequestStep:
            values = [getattr(rec, name) for name in COLUMNS]
            rows.append(
                (
                    [NULL if v is None else ABSENT if v is msgspec.UNSET else v for v in values],
                    rec.request,
                    rec.outcome,
                )
            )
        else:
            rows.append(rec)
    return kinds.tolist(), rows


def _lines_columns(lines: reader.Lines) -> Any:
    rows = []
    for i in range(len(lines)):
        if lines.kinds[i] == 0:
            rec = lines.record(i)
            values = [getattr(rec, name) for name in COLUMNS]
            row = (
                lines.values[i].tolist(),
                lines.ids[int(lines.rid[i])],
                OUTCOMES[lines.outcome[i]],
            )
            assert row == (
                [NULL if v is None else ABSENT if v is msgspec.UNSET else v for v in values],
                rec.request,
                rec.outcome,
            )
            rows.append(row)
        else:
            rows.append(lines.objs[i])
            assert lines.values[i, 0] == getattr(lines.objs[i], "step", 0)
    return lines.kinds.tolist(), rows


# Chunks of canonical, near-canonical and other lines (and whether the last has a newline)
CHUNKS = st.tuples(
    st.lists(
        st.one_of(canonical().map(dumps), mutated(), st.sampled_from(OTHER)),
        min_size=1,
        max_size=8,
    ),
    st.booleans(),
).map(lambda drawn: b"\n".join(drawn[0]) + (b"\n" if drawn[1] else b""))


def decodes_alike(chunk: bytes) -> reader.Lines | None:
    """`decode_columns` gives the typed decoder's columns for ``chunk``, or refuses it as the
    typed decoder does (None)."""
    try:
        want = _struct_columns("log", chunk)
    except Irregular:
        with pytest.raises(Irregular):
            decode_columns("log", 1, chunk)
        return None
    got = decode_columns("log", 1, chunk)
    assert _lines_columns(got) == want
    return got


@given(CHUNKS)
def test_chunks_decode_to_the_typed_decoders_columns(chunk: bytes) -> None:
    got = decodes_alike(chunk)
    if got is None:
        return
    want = _lines_columns(got)
    # cut and join: the same lines again
    half = len(got) // 2
    joined = got.cut(0, half).then(got.cut(half, len(got)))
    assert _lines_columns(joined) == want


# -- every single-byte change of a few lines, scanned as one chunk ------------------------------

BASES = [
    b'{"record":"request_step","step":7,"request":"cmpl-3f2a-0","proposed":4,"padding":1,'
    b'"grammar_valid":null,"scheduled":5,"invalid":null,"verified":3,"sampled":2,'
    b'"accepted":1,"outcome":"applied"}',
    b'{"record":"request_step","step":123456789,"request":"a","proposed":0,"padding":0,'
    b'"grammar_valid":0,"scheduled":0,"invalid":10,"verified":null,"sampled":0,'
    b'"accepted":0,"outcome":"discarded_stale","delivered":0}',
]
BYTES = b' \t\r\x10\x1f0159-+.eE"\\,:{}[]nultrfa\x00\x7f\x80\xc3\xff'


def _one_byte_changes(line: bytes) -> list[bytes]:
    out = []
    for at in range(len(line)):
        out.append(line[:at] + line[at + 1 :])
        for byte in BYTES:
            out.append(line[:at] + bytes([byte]) + line[at + 1 :])
            out.append(line[:at] + bytes([byte]) + line[at:])
    return [x for x in set(out) if b"\n" not in x]


@pytest.mark.parametrize(
    "base",
    [*BASES, *(json.dumps(json.loads(base)).encode() for base in BASES)],
    ids=["applied", "stale-delivered", "applied-spaced", "stale-delivered-spaced"],
)
def test_every_single_byte_change(base: bytes) -> None:
    lines = sorted(_one_byte_changes(base))
    s = scan(b"\n".join(lines) + b"\n")
    taken = np.flatnonzero(s.taken).tolist()
    for i in taken:
        got = (s.values[i].tolist(), s.ids[int(s.rid[i])], OUTCOMES[int(s.outcome[i])])
        assert got == expected(lines[i]), lines[i]
    # the scanner still reads what it is meant to: every change that keeps the line
    # canonical (a digit for a digit, an id character for an id character, ...) is taken
    canonical_changes = [
        i for i, line in enumerate(lines) if expected(line) is not None and _canonical(line)
    ]
    assert canonical_changes and set(canonical_changes) <= set(taken)
    # each change again as a chunk's last line without its newline: the key literals near
    # the chunk's end are compared byte by byte (never read past it)
    for i, line in enumerate(lines):
        alone = scan(line)
        got = scanned(line) if alone.taken[0] else None
        assert got == (expected(line) if i in taken else None), line


def _canonical(line: bytes) -> bool:
    """The writers' form of the line's own record, without escapes (what the scanner reads:
    the bases' integers are short)."""
    if b"\\" in line:
        return False
    try:
        rec = json.loads(line)
    except ValueError:
        return False
    return (
        type(rec) is dict
        and list(rec)[:12] == list(ORDER)
        and line in (dumps(rec), dumps(rec, True))
    )


# -- whole logs: the recorder's lines, and the columnar checker with the scanner on and off -----

ROOT = Path(__file__).parents[2]
LOGS = sorted(
    [
        *(ROOT / "tests" / "fixtures" / "vllm").glob("*.ndjson*"),
        *(ROOT / "engine_bridge" / "examples").glob("*.ndjson*"),
        *(ROOT / "tests" / "traces").glob("*/*.ndjson"),
    ]
)


def _text(path: Path) -> bytes:
    data = path.read_bytes()
    return gzip.decompress(data) if data[:2] == b"\x1f\x8b" else data


def test_the_recorders_lines_are_all_taken() -> None:
    """Every request_step line of every recorded log and trace is in the scanner's form (the
    recorder writes it: steplog/writer.py), so the scanner is not bypassed on real logs."""
    for path in LOGS:
        text = _text(path)
        assert int(scan(text).taken.sum()) == text.count(b'{"record":"request_step"'), path


def _columnar(path: Path, scanner: bool, monkeypatch: pytest.MonkeyPatch) -> Any:
    monkeypatch.setattr(reader, "SCAN", scanner)
    monkeypatch.setattr(judge, "STRICT", True)
    try:
        result = judge.Columnar(str(path), None).run(str(path), None, None)
    except Irregular:
        return None
    return render_summary(result), result_json(result), result.totals


@pytest.mark.parametrize("chunk", [reader.CHUNK_BYTES, 6000])
def test_columnar_checker_alike_with_and_without_the_scanner(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, chunk: int
) -> None:
    monkeypatch.setattr(reader, "CHUNK_BYTES", chunk)
    logs = list(LOGS)
    options: list[dict[str, Any]] = [{}, {"preempt_share": 0.2}, {"mode": "sync"}]
    for seed, kwargs in enumerate(options):
        path = tmp_path / f"gen{seed}.ndjson"
        path.write_bytes(b"".join(synth.varied.lines(3000, seed=seed, **kwargs)))
        logs.append(path)
    vouched = 0
    for path in logs:
        with_scanner = _columnar(path, True, monkeypatch)
        assert with_scanner == _columnar(path, False, monkeypatch), path
        vouched += with_scanner is not None
    assert vouched > len(logs) // 2


def test_lines_in_another_form_are_left_to_the_decoder() -> None:
    """Lines the scanner declines (a third writer's separators) mixed with canonical ones,
    in any order: each is judged on its own, and the chunk decodes as the typed decoder
    alone decodes it."""
    spaced, plain = OTHER[3], BASES[0]
    assert scan(b"\n".join([spaced] * 4 + [plain] * 3)).taken.tolist() == [0] * 4 + [1] * 3
    assert scan(b"\n".join([plain] * 4 + [spaced, plain])).taken.tolist() == [1] * 4 + [0, 1]
    for chunk in (b"\n".join([spaced] * 4 + [plain] * 3) + b"\n", b"\n".join([plain, spaced])):
        assert _lines_columns(decode_columns("log", 1, chunk)) == _struct_columns("log", chunk)


# -- the compiled kernel and its Python source ------------------------------------------------


def _kernel_outputs(chunk: bytes, compiled: bool) -> tuple[Any, ...]:
    """`scanner.scan`'s arrays from the compiled kernel, or from its Python source run as
    plain Python (every compiled function swapped for its source, `scanner.PYTHON`)."""
    data = np.frombuffer(chunk, dtype=np.uint8)
    n = chunk.count(b"\n") + int(not chunk.endswith(b"\n"))
    arrays = scanner.kernel_arrays(n)
    assert scanner.compiled()
    if compiled:
        distinct = scanner._scan_lines(data, len(data), scanner.HASH_MUL, *arrays)
    else:
        with pytest.MonkeyPatch.context() as mp, np.errstate(over="ignore"):
            for name, source in scanner.PYTHON.items():
                mp.setattr(scanner, name, source)
            distinct = scanner._scan_lines(data, len(data), scanner.HASH_MUL, *arrays)
    starts, stops, values, outcome, rid, first = (a.tolist() for a in arrays[:6])
    return int(distinct), starts, stops, values, outcome, rid, first[:distinct]


@given(
    st.lists(st.one_of(canonical().map(dumps), mutated()), min_size=1, max_size=4), st.booleans()
)
def test_the_compiled_kernel_computes_what_its_python_source_does(
    lines: list[bytes], newline: bool
) -> None:
    """numba compiles the kernel's own source; run as plain Python it gives the same arrays
    (so a compiled-only difference, say integer types that mix into floats or wrap, shows)."""
    chunk = b"\n".join(lines) + (b"\n" if newline else b"")
    assert _kernel_outputs(chunk, True) == _kernel_outputs(chunk, False)


def test_small_chunks_skip_the_scanner(monkeypatch: pytest.MonkeyPatch) -> None:
    """Below `scanner.MIN_BYTES` a chunk goes to the typed decoder alone (a small log never
    pays for loading the compiled kernel), with the same columns."""
    chunk = b"\n".join([BASES[0], OTHER[0], BASES[1]]) + b"\n"
    scanned = _lines_columns(decode_columns("log", 1, chunk))
    monkeypatch.setattr(scanner, "MIN_BYTES", len(chunk) + 1)
    monkeypatch.setattr(scanner, "scan", None)  # any call fails
    assert _lines_columns(decode_columns("log", 1, chunk)) == scanned
