"""Reading step logs: lines from files, gzip or stdin, and record validation.

Every malformed line becomes a `BadInput` whose text is ``file:line:column: reason``; nothing is
skipped silently. The many records (``request``, ``request_step``, ``step_stats``) have a
hand-checked fast path (exact key set, ``int`` counts, enum values), the header and totals
records (once per log) checks compiled from their schema's few keywords (`_plain_checks`); the
JSON Schema validator (spec/step_log.schema.json) judges and explains any record a fast path
did not accept, so the error text is always the schema's, and a valid log never imports
jsonschema (~0.05 s of a replay's start-up).
"""

from __future__ import annotations

import json
import pkgutil
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import cache, lru_cache
from typing import TYPE_CHECKING, Any

from .limits import k_error, version_error
from .schema import EVENTS, RECORD_KINDS, REQUEST_FIELDS, SCHEMA_VERSION
from .schema import Record as Record
from .source import GZIP_MAGIC, BadInput, check_line, iter_lines, needs_strict, strict_loads

if TYPE_CHECKING:  # jsonschema is imported where a record fails the fast checks (start-up)
    from jsonschema import Draft202012Validator

__all__ = ["GZIP_MAGIC", "BadInput", "check_record", "iter_lines", "parse_line", "validate"]


@lru_cache(maxsize=1)
def load_schema() -> dict[str, Any]:
    """The step-log JSON Schema shipped with the spec package. (Read through its loader:
    importlib.resources would import tempfile, shutil, zipfile and more into every replay.)"""
    data = pkgutil.get_data("spectally.spec", "step_log.schema.json")
    assert data is not None  # a package's loader reads files (the spec package is one)
    schema: dict[str, Any] = json.loads(data)
    return schema


@lru_cache(maxsize=1)
def schema_validator() -> Draft202012Validator:
    """The whole-schema validator, compiled once."""
    from jsonschema import Draft202012Validator

    schema = load_schema()
    Draft202012Validator.check_schema(schema)
    return Draft202012Validator(schema)


@cache
def kind_validator(kind: str) -> Draft202012Validator:
    """A validator for one record kind (so errors name that kind's fields), compiled once."""
    from jsonschema import Draft202012Validator

    schema = load_schema()
    return Draft202012Validator({"$defs": schema["$defs"], "$ref": f"#/$defs/{kind}"})


# -- fast path -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class _KindSpec:
    required: frozenset[str]
    allowed: frozenset[str]
    counts: tuple[str, ...]
    nullable_counts: tuple[str, ...]
    enums: tuple[tuple[str, frozenset[str]], ...]


def _spec(kind: str) -> _KindSpec:
    d = load_schema()["$defs"][kind]
    props: dict[str, Any] = d["properties"]
    counts: list[str] = []
    nullable: list[str] = []
    enums: list[tuple[str, frozenset[str]]] = []
    for name, p in props.items():
        ref = p.get("$ref", "")
        if ref in ("#/$defs/count", "#/$defs/step"):
            counts.append(name)
        elif p.get("type") == ["integer", "null"] and p.get("minimum") == 0:
            nullable.append(name)
        elif "enum" in p:
            enums.append((name, frozenset(p["enum"])))
    return _KindSpec(
        frozenset(d["required"]), frozenset(props), tuple(counts), tuple(nullable), tuple(enums)
    )


@lru_cache(maxsize=1)
def _fast_specs() -> dict[str, _KindSpec]:
    return {"request_step": _spec("request_step"), "step_stats": _spec("step_stats")}


def _fast_ok(obj: Record, spec: _KindSpec) -> bool:
    keys = obj.keys()
    if not (spec.required <= keys <= spec.allowed):
        return False
    for name in spec.counts:
        v = obj[name]
        if type(v) is not int or v < 0:
            return False
    for name in spec.nullable_counts:
        v = obj.get(name)  # an optional nullable count (delivered) may be absent
        if v is not None and (type(v) is not int or v < 0):
            return False
    for name, values in spec.enums:
        v = obj[name]
        if type(v) is not str or v not in values:
            return False
    request = obj.get("request")
    if "request" in spec.allowed and (type(request) is not str or not request):
        return False
    if "meta" in obj and type(obj["meta"]) is not dict:
        return False
    if "num_accepted_tokens_per_pos" in spec.required:
        per_pos = obj["num_accepted_tokens_per_pos"]
        if type(per_pos) is not list or not per_pos:
            return False
        for v in per_pos:
            if type(v) is not int or v < 0:
                return False
    return True


# The header's and the totals' properties use a few keywords of JSON Schema; each compiles to a
# test of the exact Python type json.loads gives (stricter where the two differ: 1.0 is not an
# integer here, a minimum or length applies only to its own type), so a record these checks
# accept is one the kind's schema accepts. A keyword outside this list leaves the kind to the
# validator.
_TYPES: dict[str, type] = {
    "integer": int,
    "string": str,
    "boolean": bool,
    "null": type(None),
    "object": dict,
    "array": list,
}
_SCALARS = (int, str, bool, type(None))
_NOTES = frozenset(("description", "title", "$comment"))
Check = Callable[[Any], bool]


def _all(checks: list[Check]) -> Check:
    return lambda value: all(check(value) for check in checks)


def _keyword_check(key: str, arg: Any, defs: dict[str, Any]) -> Check | None:
    """One keyword of a property's schema as a test of a decoded value; None: not one of the
    keywords compiled here."""
    if key == "$ref" and isinstance(arg, str) and arg.startswith("#/$defs/"):
        target = defs.get(arg.removeprefix("#/$defs/"))
        return _property_check(target, defs) if isinstance(target, dict) else None
    if key == "type":
        names = [arg] if isinstance(arg, str) else arg
        if not isinstance(names, list) or not all(name in _TYPES for name in names):
            return None
        types = frozenset(_TYPES[name] for name in names)
        return lambda value: type(value) in types
    if key in ("const", "enum"):
        values = [arg] if key == "const" else arg
        if not isinstance(values, list) or not all(type(v) in _SCALARS for v in values):
            return None
        allowed = frozenset((type(v), v) for v in values)  # True is not 1 here
        return lambda value: type(value) in _SCALARS and (type(value), value) in allowed
    if key == "minimum" and type(arg) is int:
        return lambda value: type(value) is int and value >= arg
    if key == "minLength" and type(arg) is int:
        return lambda value: type(value) is str and len(value) >= arg
    if key == "minItems" and type(arg) is int:
        return lambda value: type(value) is list and len(value) >= arg
    if key == "items" and isinstance(arg, dict):
        item = _property_check(arg, defs)
        if item is None:
            return None
        return lambda value: type(value) is list and all(map(item, value))
    return None


def _property_check(schema: dict[str, Any], defs: dict[str, Any]) -> Check | None:
    """A property's schema as a test of a decoded value (every keyword holds); None when it
    uses a keyword not compiled here."""
    checks: list[Check] = []
    for key, arg in schema.items():
        if key in _NOTES:
            continue
        check = _keyword_check(key, arg, defs)
        if check is None:
            return None
        checks.append(check)
    return _all(checks)


def _kind_check(kind: str) -> Check | None:
    """A record kind's schema (an object of listed properties, no others) as a test of a
    decoded record; None when it uses a keyword not compiled here."""
    defs: dict[str, Any] = load_schema()["$defs"]
    d = defs[kind]
    if set(d) - _NOTES != {"type", "additionalProperties", "required", "properties"}:
        return None
    if d["type"] != "object" or d["additionalProperties"] is not False:
        return None
    props = {name: _property_check(p, defs) for name, p in d["properties"].items()}
    checks = {name: check for name, check in props.items() if check is not None}
    if len(checks) < len(props):
        return None
    required, allowed = frozenset(d["required"]), frozenset(checks)

    def check(obj: Any) -> bool:
        keys = obj.keys()
        if not required <= keys <= allowed:
            return False
        return all(checks[name](value) for name, value in obj.items())

    return check


@lru_cache(maxsize=1)
def _plain_checks() -> dict[str, Check]:
    """The compiled checks of the header and totals records (those that compile)."""
    checks = {kind: _kind_check(kind) for kind in ("header", "totals")}
    return {kind: check for kind, check in checks.items() if check is not None}


def _plain_ok(kind: str, obj: Record) -> bool:
    """Whether a header or totals record is valid by its compiled check, and holds no float
    where validation wants an integer (`_floats`, as after the schema)."""
    check = _plain_checks().get(kind)
    return check is not None and check(obj) and _floats(obj, []) is None


def _column_of(raw: str, path: list[str | int]) -> int:
    """1-based column of the JSON key named by the error path's first element (1 if unknown)."""
    for element in path:
        if isinstance(element, str):
            at = raw.find(json.dumps(element) + ":")
            if at < 0:
                at = raw.find(json.dumps(element))
            if at >= 0:
                return at + 1
            break
    return 1


def _floats(obj: Any, path: list[str | int]) -> tuple[list[str | int], float] | None:
    """A float where the schema wants an integer (JSON Schema admits 1.0 as an integer)."""
    if isinstance(obj, float):
        return path, obj
    if isinstance(obj, dict):
        for key, value in obj.items():
            if key in ("config", "meta"):
                continue
            found = _floats(value, [*path, key])
            if found is not None:
                return found
    if isinstance(obj, list):
        for i, value in enumerate(obj):
            found = _floats(value, [*path, i])
            if found is not None:
                return found
    return None


def _path_text(path: list[str | int]) -> str:
    out = ""
    for element in path:
        out += f"[{element}]" if isinstance(element, int) else (f".{element}" if out else element)
    return out


_REQUEST_KEYS = frozenset(REQUEST_FIELDS)
_REQUEST_EVENTS = frozenset(EVENTS)


def _fast_request_ok(obj: Record) -> bool:
    if not obj.keys() <= _REQUEST_KEYS:
        return False
    step, rid, event = obj.get("step"), obj.get("request"), obj.get("event")
    if type(step) is not int or step < 0 or type(rid) is not str or not rid:
        return False
    if type(event) is not str or event not in _REQUEST_EVENTS:
        return False
    structured = obj.get("structured")
    if structured is None:
        if event == "add" or "structured" in obj:
            return False
    elif type(structured) is not bool:
        return False
    if "reason" in obj and type(obj["reason"]) is not str:
        return False
    if "drop_stale_output" in obj and (
        event != "preempt" or type(obj["drop_stale_output"]) is not bool
    ):
        return False
    return "meta" not in obj or type(obj["meta"]) is dict


def validate(obj: Any, raw: str) -> tuple[int, str] | None:
    """None if ``obj`` is a valid record, else (column, reason)."""
    if type(obj) is dict:
        kind = obj.get("record")
        if kind == "request":
            if _fast_request_ok(obj):
                return None
        elif type(kind) is str:
            spec = _fast_specs().get(kind)
            if spec is not None and _fast_ok(obj, spec):
                return None
            if kind in ("header", "totals") and _plain_ok(kind, obj):
                return None
    if not isinstance(obj, dict):
        return 1, f"a record must be a JSON object, got {type(obj).__name__}"
    kind = obj.get("record")
    version = obj.get("schema_version", SCHEMA_VERSION)
    if kind == "header" and version != SCHEMA_VERSION:
        return _column_of(raw, ["schema_version"]), (
            f"unsupported schema_version {version!r} (this replay reads version {SCHEMA_VERSION})"
        )
    if "record" not in obj:
        return 1, "missing field 'record'"
    if type(kind) is not str or kind not in RECORD_KINDS:
        return _column_of(raw, ["record"]), (
            f"unknown record kind {kind!r} (expected one of {', '.join(RECORD_KINDS)})"
        )
    if kind == "request" and "drop_stale_output" in obj and obj.get("event") != "preempt":
        return _column_of(raw, ["drop_stale_output"]), (
            f"drop_stale_output is only for preempt records, not {obj.get('event')!r}"
        )
    from jsonschema.exceptions import best_match

    error = best_match(kind_validator(str(kind)).iter_errors(obj))
    if error is not None:
        path = list(error.absolute_path)
        where = _path_text(path)
        if error.validator == "additionalProperties":
            extra = sorted(set(obj) - set(load_schema()["$defs"][kind]["properties"]))
            return _column_of(raw, [extra[0]]), f"unknown field {extra[0]!r} in a {kind} record"
        if error.validator == "required":
            missing = [name for name in error.validator_value if name not in error.instance]
            return 1, f"missing field {missing[0]!r} in a {kind} record"
        reason = f"{where}: {error.message}" if where else error.message
        return _column_of(raw, path), reason
    found = _floats(obj, [])
    if found is not None:
        path, value = found
        return _column_of(raw, path), f"{_path_text(path)}: {value!r} is not an integer"
    return None


# -- reading -------------------------------------------------------------------------------------


# Lines come from `source.iter_lines` (re-exported here: replay reads through it): path or
# stdin, gzip, bounded line length, strict bytes (no stray BOM, no surrogates), bounded nesting.


def exported_counters(rec: Mapping[str, Any]) -> tuple[Any, Any, Any, Any]:
    """A step_stats or totals record's four exported counters (drafts, draft tokens, accepted
    tokens, accepted per position), in the order both checkers compare them."""
    return (
        rec["num_drafts"],
        rec["num_draft_tokens"],
        rec["num_accepted_tokens"],
        rec["num_accepted_tokens_per_pos"],
    )


def parse_line(path: str, lineno: int, line: bytes, has_newline: bool) -> Record:
    """Decode and validate one line; raise `BadInput` with file:line:column otherwise.

    Strict: UTF-8 without surrogates, no duplicate keys, no NaN/Infinity, integers and nesting
    within docs/limits.md. Plain ``json.loads`` decodes first (its C scanner is the fast path);
    only a line `source.needs_strict` flags is decoded again with the strict hooks."""
    check_line(path, lineno, line)
    try:
        text = line.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise BadInput(path, lineno, exc.start + 1, "line is not valid UTF-8") from None
    try:
        obj = json.loads(text)
    except json.JSONDecodeError as exc:
        if not has_newline:
            raise BadInput(
                path, lineno, exc.colno, f"truncated final line (no newline at end): {exc.msg}"
            ) from None
        if not line.strip():
            raise BadInput(path, lineno, 1, "empty line") from None
        raise BadInput(path, lineno, exc.colno, f"bad JSON: {exc.msg}") from None
    except (ValueError, RecursionError):  # an int beyond Python's digit limit, too deep
        strict_loads(path, lineno, text)  # raises the BadInput with its column
        raise  # pragma: no cover - strict_loads rejects whatever plain json rejects
    return check_record(path, lineno, line, obj)


def check_record(path: str, lineno: int, line: bytes, obj: Any) -> Record:
    """Validate a decoded line (``obj``, parsed from ``line`` by plain json); raise `BadInput`
    otherwise (including what only a strict decode sees: duplicate keys, huge integers, NaN)."""
    if needs_strict(line, obj):
        strict_loads(path, lineno, line.decode("utf-8", "replace"))
    if type(obj) is dict:  # the fast path first: the line's text is needed only for errors
        kind = obj.get("record")
        if kind == "request":
            if _fast_request_ok(obj):
                return obj
        elif type(kind) is str:
            spec = _fast_specs().get(kind)
            if spec is not None and _fast_ok(obj, spec):
                return obj
    raw = line.decode("utf-8", "replace")
    error = validate(obj, raw)
    if error is not None:
        raise BadInput(path, lineno, error[0], error[1])
    record: Record = obj
    if record["record"] == "header":
        k = record["num_speculative_tokens"]
        why = k_error("num_speculative_tokens", k)
        if why is not None:  # before replay builds per-position lists of length k
            raise BadInput(path, lineno, _column_of(raw, ["num_speculative_tokens"]), why)
        long_part = version_error("engine_version", record["engine_version"])
        if long_part is not None:  # before the profile lookup reads its parts as integers
            raise BadInput(path, lineno, _column_of(raw, ["engine_version"]), long_part)
    return record
