"""SGLang's speculative-decoding figures, checked against SGLang 0.5.23's own definitions.

SGLang reports acceptance three ways (engine_bridge/engines.py ``SGLANG`` cites each line):

* the decode-batch log line, ``f"accept len: {spec_accept_length:.2f}, accept rate:
  {spec_accept_rate:.2f}, "`` (srt/managers/scheduler_components/metrics_reporter.py:1005),
  over one logging interval: accept len = accepted tokens (drafts + the bonus) / (requests x
  verify passes) (:973), accept rate = correct drafts / (requests x verify passes x d)
  (:975-982), d = ``speculative_num_draft_tokens`` - 1, the *configured* draft length; so in
  0.5.23 ``accept len - 1 = accept rate x d``. Earlier releases print ``accept len`` alone
  (sgl-project/sglang#6081) or with a rate whose denominator differs (#16974), so that identity
  is checked only when ``--draft-tokens d`` says the run's d (a note names the implied d
  otherwise);
* the Prometheus gauges ``sglang:spec_accept_length`` and ``sglang:spec_accept_rate``
  (srt/observability/metrics_collector.py:511-522, set at :1674-1675): the last interval's
  values, reset each interval: they cannot be summed, differenced or ``rate()``-d;
* per request, ``meta_info`` (srt/managers/tokenizer_manager.py:3138-3172):
  ``spec_verify_ct``, ``spec_num_correct_drafts``, ``spec_num_proposed_drafts`` = verify_ct x
  d, ``spec_accept_rate`` = correct / proposed, ``spec_accept_length`` = completion_tokens /
  verify_ct, and ``spec_correct_drafts_histogram`` (steps by correct drafts); earlier releases
  name the counts ``spec_accept_token_num`` / ``spec_draft_token_num`` (sgl-project/sglang#13754).
  These identities are exact (the JSON carries Python's float repr), and each is checked; a
  ratio or histogram of the wrong type is bad input, and so is a file in which no response
  has ``spec_verify_ct`` (nothing to check).

`SOURCE_PIN` hashes the text of the functions that compute these figures in the released
wheel (`pin_mismatches` says which moved or changed); tests/importers/test_sglang.py executes
that text on given steps (not an import: the module's import chain needs a GPU stack, see
docs/engines.md), so this reading is pinned to SGLang's own code.
"""

from __future__ import annotations

import ast
import hashlib
import math
import re
import textwrap
import zipfile
from dataclasses import dataclass
from typing import Any

from ..steplog.limits import MAX_INT
from ..steplog.source import BadInput, iter_text_lines, json_values
from .findings import NOTE, OK, VIOLATION, Finding
from .prometheus import samples_of_line

VERSION = "0.5.23"
HALF_ULP = 0.005  # :.2f
EPS = 1e-9
EXACT = 1e-12  # meta_info: Python floats of integer ratios, compared as such

LOG_RE = re.compile(
    r"Decode batch[.,].*?accept len: (?P<len>-?\d+(?:\.\d+)?|nan|inf)"
    r"(?:, accept rate: (?P<rate>-?\d+(?:\.\d+)?|nan|inf))?"
)
JSON_START = re.compile(r"\s*(?:\{|\[\s*(?:\{|\]|$))")  # an object or a list of them
PER_POSITION = (
    "sglang:spec_accept_rate_per_position",
    "sglang:spec_total_accept_rate_per_position",
)
GAUGES = ("sglang:spec_accept_length", "sglang:spec_accept_rate")

# path in the wheel, qualified name, first line in 0.5.23, sha256 of its dedented text.
SOURCE_PIN: tuple[tuple[str, str, int, str], ...] = (
    (
        "sglang/srt/managers/scheduler_components/metrics_reporter.py",
        "SchedulerMetricsReporter.update_spec_metrics",
        543,
        "ddf3dbe14e217193d1843f68fd6c4ae57f531fd3da1446460228c505f7352d15",
    ),
    (
        "sglang/srt/managers/scheduler_components/metrics_reporter.py",
        "SchedulerMetricsReporter.report_decode_stats",
        901,
        "f8abd2780e7e65066acbae963e8a22857824acb748ff3d5c9c7a96108c7879a9",
    ),
    (
        "sglang/srt/managers/tokenizer_manager.py",
        "TokenizerManager._calculate_spec_decoding_metrics",
        3138,
        "f73d4ab9d09dcfb42d6884c34e7f3ebaba8ade66e04d62c5170ee8f5858b90f0",
    ),
    (
        "sglang/srt/managers/utils.py",
        "GenerationBatchResult.get_num_generated_tokens",
        164,
        "2e6cfbc6c63c61c8ed9da5022410e4272a99f31d0d0f9f525c8648fef8908d73",
    ),
)


@dataclass(frozen=True)
class LogLine:
    path: str
    line: int
    length: float
    rate: float | None


def _num(path: str, no: int, col: int, text: str, what: str, hi: float | None) -> float:
    value = float(text)
    if math.isnan(value) or value < 0 or (hi is not None and value > hi) or math.isinf(value):
        bound = f"[0, {hi:g}]" if hi is not None else ">= 0"
        raise BadInput(path, no, col, f"{what} {text} is outside {bound}: SGLang cannot print it")
    return value


Lines = list[tuple[int, str]]


def read_log(path: str, lines: Lines) -> list[LogLine]:
    out = []
    for no, text in lines:
        if "accept len: " not in text:
            continue
        m = LOG_RE.search(text)
        if m is None:
            raise BadInput(path, no, text.index("accept len") + 1, "unrecognised 'accept len'")
        length = _num(path, no, m.start("len") + 1, m.group("len"), "accept len", None)
        rate = (
            _num(path, no, m.start("rate") + 1, m.group("rate"), "accept rate", 1.0)
            if m.group("rate") is not None
            else None
        )
        out.append(LogLine(path, no, length, rate))
    return out


def _interval(
    path: str, line: int, length: float, rate: float | None, d: int | None, what: str
) -> list[Finding]:
    """One interval's accept length and rate (a log line or a pair of gauges)."""
    if length == 0 and not rate:
        return [Finding(path, line, NOTE, f"{what}: no interval", "0 and 0: no verify pass yet")]
    if length < 1 - HALF_ULP - EPS:
        return [
            Finding(
                path,
                line,
                VIOLATION,
                f"{what}: accept len >= 1",
                f"accept len {length:.2f}: every verify pass emits its bonus token, so the"
                " tokens per request and pass are at least 1",
            )
        ]
    if rate is None:
        return [Finding(path, line, OK, what, f"accept len {length:.2f} >= 1 (no rate printed)")]
    if d is not None:
        implied = 1 + rate * d
        tol = HALF_ULP + d * HALF_ULP + EPS
        if abs(length - implied) > tol:
            return [
                Finding(
                    path,
                    line,
                    VIOLATION,
                    f"{what}: accept len vs accept rate",
                    f"accept len {length:.2f} but 1 + rate {rate:.2f} x d {d} = {implied:.3f};"
                    f" off by more than ±{tol:.3f} (SGLang {VERSION}: both over the same verify"
                    " passes, metrics_reporter.py:973-982)",
                )
            ]
        return [
            Finding(
                path,
                line,
                OK,
                what,
                f"accept len {length:.2f} = 1 + accept rate {rate:.2f} x d {d} within rounding",
            )
        ]
    if rate == 0:
        return [Finding(path, line, OK, what, f"accept len {length:.2f}, rate 0")]
    implied_d = (length - 1) / rate
    return [
        Finding(
            path,
            line,
            NOTE,
            f"{what}: draft length not given",
            f"accept len {length:.2f}, rate {rate:.2f}: under SGLang {VERSION}'s definitions d ="
            f" (len - 1) / rate = {implied_d:.2f}; give --draft-tokens (speculative_num_draft_"
            "tokens - 1) to check it, and note the rate divides by the configured draft slots,"
            " not by proposed drafts",
        )
    ]


def check_log(path: str, d: int | None, lines: Lines) -> list[Finding]:
    parsed = read_log(path, lines)
    if not parsed:
        raise BadInput(path, 1, 1, "no SGLang 'Decode batch ... accept len:' line")
    out: list[Finding] = []
    for x in parsed:
        out.extend(_interval(path, x.line, x.length, x.rate, d, "sglang decode-batch line"))
    return out


def check_prometheus(path: str, d: int | None, lines: Lines) -> list[Finding]:
    """Per label set and scrape: the two interval gauges, as one interval. Each sample line is
    parsed by the bridge's one Prometheus reader (`prometheus.samples_of_line`)."""
    found: dict[tuple[int, tuple[tuple[str, str], ...]], dict[str, tuple[float, int]]] = {}
    per_position: list[int] = []
    scrape = 0
    seen: set[str] = set()
    for no, text in lines:
        if text.startswith("# TYPE "):
            name = text.split()[2] if len(text.split()) > 2 else ""
            if name in seen:
                scrape, seen = scrape + 1, set()
            seen.add(name)
            continue
        if not text.startswith(("sglang:spec_accept_", "sglang:spec_total_accept_")):
            continue
        for s in samples_of_line(path, no, text):
            if s.name in GAUGES:
                labels = tuple(sorted(s.labels.items()))
                found.setdefault((scrape, labels), {})[s.name] = (s.value, no)
            elif s.name.startswith(PER_POSITION):
                if not (math.isfinite(s.value) and 0 <= s.value <= 1):
                    raise BadInput(path, no, 1, f"{s.name} {s.value} is outside [0, 1]")
                per_position.append(no)
    if not found and not per_position:
        raise BadInput(path, 1, 1, "no sglang:spec_accept_length / _rate sample")
    out: list[Finding] = []
    if per_position:
        out.append(
            Finding(
                path,
                per_position[0],
                NOTE,
                "sglang per-position series",
                f"{len(per_position)} sglang:spec_*accept_rate_per_position samples, each in"
                " [0, 1]: conditional rates of a release newer than"
                f" {VERSION} (sgl-project/sglang#31750: positions outside the current draft"
                " budget are unobserved), not checkable against the interval gauges",
            )
        )
    for (_, labels), series in sorted(
        found.items(), key=lambda kv: min(v[1] for v in kv[1].values())
    ):
        for name, (value, at) in series.items():
            if not (math.isfinite(value) and value >= 0) or (name == GAUGES[1] and value > 1):
                raise BadInput(path, at, 1, f"{name} reads {value}: SGLang cannot export it")
        if GAUGES[0] not in series:
            line = series[GAUGES[1]][1]
            out.append(Finding(path, line, NOTE, "sglang gauges", "accept rate without length"))
            continue
        length, line = series[GAUGES[0]]
        rate = series.get(GAUGES[1], (None, line))[0]
        where = ",".join(f"{k}={v}" for k, v in labels) or "no labels"
        out.extend(_interval(path, line, length, rate, d, f"sglang gauges ({where})"))
    out.append(
        Finding(
            path,
            min(f.line for f in out),
            NOTE,
            "sglang gauges are interval values",
            "sglang:spec_accept_length / _rate hold the last logging interval's ratios"
            f" (Gauge, metrics_collector.py:511-522 in {VERSION}): summing them over instances or"
            " time, differencing or rate() gives no acceptance figure",
        )
    )
    return out


NAMES = {  # 0.5.23 name: earlier name (sgl-project/sglang#13754)
    "spec_num_correct_drafts": "spec_accept_token_num",
    "spec_num_proposed_drafts": "spec_draft_token_num",
}


def _field(meta: dict[str, Any], name: str) -> Any:
    return meta.get(name, meta.get(NAMES.get(name, "")))


def _meta_items(path: str, text_lines: Lines) -> list[tuple[int, dict[str, Any]]]:
    """(line, meta_info) of each response of a JSON list or NDJSON, at the line it starts on."""
    whole = "".join(t + "\n" for _, t in text_lines)
    items = json_values(path, whole, allow_nan=False)
    out = []
    for no, obj in items:
        meta = obj.get("meta_info", obj) if isinstance(obj, dict) else None
        if not isinstance(meta, dict):
            raise BadInput(path, no, 1, "a response without a meta_info object")
        out.append((no, meta))
    return out


def _int_field(path: str, no: int, meta: dict[str, Any], name: str) -> int | None:
    value = _field(meta, name)
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value <= MAX_INT:
        raise BadInput(path, no, 1, f"{name} {value!r} is not a count")
    return value


RATIOS = ("spec_accept_rate", "spec_accept_length")


def _float_field(path: str, no: int, meta: dict[str, Any], name: str) -> float | None:
    """A ratio field: None where absent; a number that is no float (a string, a bool) is bad
    input, not a field left unchecked."""
    value = meta.get(name)
    if value is None:
        return None
    if type(value) not in (int, float) or not math.isfinite(value):
        raise BadInput(path, no, 1, f"{name} {value!r} is not a number")
    return float(value)


def _counts(value: Any) -> bool:
    """A list of ints >= 0 within the count limit (bool is no count here)."""
    return isinstance(value, list) and all(type(h) is int and 0 <= h <= MAX_INT for h in value)


def _ratio(
    bad: list[tuple[str, str]],
    said: list[str],
    name: str,
    formula: str,
    value: float,
    num: int,
    den: int,
) -> None:
    """One exact ratio of meta_info: a violation if it is not num / den, else said."""
    if abs(value - num / den) > EXACT:
        bad.append((f"{name} = {formula}", f"{value!r} but {num}/{den} = {num / den!r}"))
    else:
        said.append(f"{name} = {num}/{den}")


def check_meta(path: str, d: int | None, lines: Lines) -> list[Finding]:
    """Every per-request identity of tokenizer_manager.py:3138-3172."""
    out: list[Finding] = []
    items = _meta_items(path, lines)
    if not items:
        raise BadInput(path, 1, 1, "empty input: no response to check")
    if not any(_field(meta, "spec_verify_ct") is not None for _, meta in items):
        raise BadInput(
            path,
            1,
            1,
            f"no response with spec_verify_ct in {len(items)}: nothing to check (SGLang adds"
            " it to meta_info with speculative decoding on; vLLM's per-request metrics are"
            " `spectally import requests`, llama-server's timings `import llamacpp --responses`)",
        )
    for no, meta in items:
        verify = _int_field(path, no, meta, "spec_verify_ct")
        if verify is None:
            out.append(Finding(path, no, NOTE, "sglang meta_info", "no spec_verify_ct"))
            continue
        correct = _int_field(path, no, meta, "spec_num_correct_drafts")
        proposed = _int_field(path, no, meta, "spec_num_proposed_drafts")
        completion = _int_field(path, no, meta, "completion_tokens")
        rate, length = (_float_field(path, no, meta, n) for n in RATIOS)
        rid = meta.get("id", f"response at line {no}")
        bad: list[tuple[str, str]] = []
        said: list[str] = []
        if proposed is not None and verify > 0:
            if proposed % verify:
                bad.append(
                    (
                        "proposed = verify_ct x d",
                        f"{proposed} proposed is no multiple of {verify} verify passes",
                    )
                )
            else:
                run_d = proposed // verify
                if d is not None and run_d != d:
                    bad.append(("proposed = verify_ct x d", f"d {run_d} here, --draft-tokens {d}"))
                said.append(f"proposed {proposed} = {verify} x d {run_d}")
        if correct is not None and proposed is not None:
            if correct > proposed:
                bad.append(("correct <= proposed", f"{correct} correct > {proposed} proposed"))
            if rate is not None and proposed:
                _ratio(bad, said, "spec_accept_rate", "correct / proposed", rate, correct, proposed)
        if length is not None and completion is not None and verify:
            what = "completion_tokens / verify_ct"
            _ratio(bad, said, "spec_accept_length", what, length, completion, verify)
        hist = meta.get("spec_correct_drafts_histogram")
        if hist is not None and not _counts(hist):
            raise BadInput(
                path, no, 1, f"spec_correct_drafts_histogram {str(hist)[:60]} is no list of counts"
            )
        if hist is not None:
            if sum(hist) != verify:
                bad.append(("histogram sums to verify_ct", f"Σ {sum(hist)} != {verify}"))
            weighted = sum(i * h for i, h in enumerate(hist))
            if correct is not None and weighted != correct:
                bad.append(("histogram weights to correct", f"Σ i·h[i] {weighted} != {correct}"))
            said.append(f"histogram of {len(hist)} buckets agrees")
        out += [Finding(path, no, VIOLATION, c, f"{rid}: {m}") for c, m in bad]
        if not bad:
            out.append(Finding(path, no, OK, "sglang meta_info", f"{rid}: " + "; ".join(said)))
    return out


def check_files(paths: list[str], d: int | None = None) -> list[Finding]:
    """Each file by what it holds: meta_info JSON, a Prometheus scrape or a server log."""
    out: list[Finding] = []
    for path in paths:
        lines = list(iter_text_lines(path))  # read once: a pipe or - gives its bytes once
        first = next((t for _, t in lines if t.strip()), "")
        if JSON_START.match(first):
            out.extend(check_meta(path, d, lines))
        elif first.startswith("#") or first.startswith("sglang:"):
            out.extend(check_prometheus(path, d, lines))
        else:
            out.extend(check_log(path, d, lines))
    return out


# -- SGLang's own code, from the released wheel --------------------------------------------------


def function_text(wheel: str, member: str, qualname: str) -> tuple[int, str]:
    """(first line, dedented source) of ``qualname`` in ``member`` of the wheel."""
    with zipfile.ZipFile(wheel) as z:
        source = z.read(member).decode("utf-8")
    tree = ast.parse(source)
    cls_name, fn_name = qualname.split(".")
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name == cls_name:
            for item in node.body:
                if isinstance(item, ast.FunctionDef) and item.name == fn_name:
                    start = item.decorator_list[0].lineno if item.decorator_list else item.lineno
                    lines = source.splitlines()[start - 1 : item.end_lineno]
                    return start, textwrap.dedent("\n".join(lines)) + "\n"
    raise KeyError(f"{qualname} not in {member}")


def pin_digest(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def pin_mismatches(
    wheel: str, pin: tuple[tuple[str, str, int, str], ...] = SOURCE_PIN
) -> list[str]:
    """Which pinned functions of the wheel moved or changed (empty: the reading holds)."""
    out = []
    for member, qualname, line, digest in pin:
        start, text = function_text(wheel, member, qualname)
        if start != line or pin_digest(text) != digest:
            out.append(f"{member}:{start} {qualname} (pinned at :{line}, {digest[:12]})")
    return out
