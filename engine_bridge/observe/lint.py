"""`spectally lint`: the known spec-decode mistakes in Prometheus rules and Grafana dashboards.

Every expression is parsed by promql-parser (a complete PromQL parser, compatible with
Prometheus 2.45; Rust, typed Python bindings), then its syntax tree is checked for:

- ``per-position-into-total``: a per-position series added to its total, or one selector
  whose name regex matches both (every token counted twice; SPEC INV-5: Σ_i accepted_i =
  accepted already);
- ``rate-of-gauge``: rate()/irate()/increase() over a gauge (vLLM V0's ratios, SGLang's
  last-interval gauges) or over anything not named as a counter (``_total``);
- ``ratio-windows`` / ``ratio-labels``: a ratio whose numerator and denominator take their
  rates over different windows, different label selectors, or sum to different labels
  (SPEC section 6: a ratio of ONE window's counter deltas);
- ``acceptance-vs-k``: accepted divided by spec steps times a configured k (drafts are cut by
  the schedule, the grammar and padding: divide by drafted, M1);
- ``mean-length-plus-one``: accepted / spec steps shown without ``1 +`` (M4 counts the bonus
  token);
- ``mixed-versions``: names of different exporter generations in one expression (vLLM V0,
  vLLM 0.32-0.34, REP-1, the backport), or of different engines, whose counters mean different
  things. Each branch of an ``or`` is checked on its own, so a fallback across versions is
  allowed;
- ``configured-denominator``: a rate whose drafted count is the configured draft length times
  the steps (LMDeploy's vLLM-shaped ``lmdeploy:spec_decode_num_draft_tokens_total``, SGLang's
  and LMDeploy's acceptance gauges) used as if it divided by the drafts proposed: accepted over
  such a count, or such a rate beside a proposed-denominator one (families.py).

The names of every family (families.py) are known: vLLM's, the same served through Ray Serve
(``ray_vllm_``, read as the vLLM name), llama.cpp's, LMDeploy's and SGLang's.

Grafana variables are replaced before parsing: in a range ``[...]`` by a distinct duration per
variable (so windows still compare), in a label value they are text already, elsewhere by 1.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import promql_parser as pp
import yaml

from ..steplog.limits import MAX_DEPTH
from ..steplog.records import BadInput
from ..steplog.source import line_col, read_text, too_deep
from . import families as fam
from .rules import duration_error
from .schemes import (
    ACCEPTED_NAMES,
    GAUGES,
    GENERATIONS,
    SCHEMES,
    STEP_NAMES,
    V0_COUNTERS,
)

# Bounds checked before parsing: promql-parser recurses natively (a deep enough expression
# overflows its stack: tens of thousands of nested parentheses, or of operators); real
# dashboard queries are a few hundred characters and nest a few levels.
MAX_EXPR_CHARS = 4096
MAX_NESTING = 64
MAX_NODES = 500  # the checks compare subtrees pairwise: quadratic in the nodes
RATE_FUNCS = frozenset({"rate", "irate", "increase"})
COUNTER_SUFFIXES = ("_total", "_count", "_sum", "_bucket")
KNOWN_NAMES = sorted({*GENERATIONS, *GAUGES, *V0_COUNTERS, *fam.SERIES})
# The per-position counter of each total (a total and its per-position series).
TOTAL_OF_POS = {
    pos: total
    for s in (*SCHEMES.values(), *fam.FAMILY_SCHEMES.values())
    for pos, total in (
        (s.accepted_pos, s.accepted),
        (s.drafted_pos, s.drafted),
        (s.verified_pos, s.verified),
    )
    if pos is not None and total is not None
}
STEPS_ALL = STEP_NAMES | {"vllm:spec_decode_num_drafts_total"} | fam.STEPS_ANY
ACCEPTED_ALL = ACCEPTED_NAMES | fam.ACCEPTED_ANY


@dataclass(frozen=True)
class Finding:
    path: str
    where: str  # "rule 'X' (group G)" or "panel 'T' query A"
    line: int | None
    check: str
    message: str
    fix: str
    expr: str

    def render(self) -> str:
        at = f"{self.path}:{self.line}" if self.line is not None else self.path
        return f"{at}: {self.where}: {self.check}: {self.message}\n  fix: {self.fix}"

    def to_dict(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "where": self.where,
            "line": self.line,
            "check": self.check,
            "message": self.message,
            "fix": self.fix,
            "expr": self.expr,
        }


@dataclass(frozen=True)
class Query:
    where: str
    line: int | None
    expr: str


# -- reading the files -------------------------------------------------------------------------


def queries(path: str) -> list[Query]:
    """Every PromQL expression of a rules file (YAML ``groups``) or a Grafana dashboard (JSON,
    bare or as the API's ``{"dashboard": ...}``). Anything else raises `BadInput`."""
    text = read_text(path)
    if path.endswith(".json") or text.lstrip().startswith("{"):
        deep = too_deep(text)
        if deep is not None:
            line, col = line_col(text, deep)
            raise BadInput(path, line, col, f"JSON nested deeper than the limit {MAX_DEPTH}")
        try:
            doc = json.loads(text)
        except json.JSONDecodeError as exc:
            if not path.endswith(".json"):  # a YAML flow mapping starts with { too
                return _rule_queries(path, text)
            raise BadInput(path, exc.lineno, exc.colno, f"not JSON: {exc.msg}") from None
        if isinstance(doc, dict) and isinstance(doc.get("dashboard"), dict):
            doc = doc["dashboard"]
        if isinstance(doc, dict) and isinstance(doc.get("panels"), list):
            return list(_panel_queries(path, doc["panels"]))
        if not (isinstance(doc, dict) and "groups" in doc):
            raise BadInput(
                path, 1, 1, "neither a Grafana dashboard (no panels) nor rules (no groups)"
            )
    return _rule_queries(path, text)


def _panel_queries(path: str, panels: list[Any], row: str = "") -> Iterator[Query]:
    """Every query of ``panels`` (a collapsed row's own panels included); `BadInput` for a
    panel, a target list or a query of a shape Grafana does not save, which would otherwise
    pass unread. A target without an expression (another data source's, or an empty new
    query) has nothing to check."""
    inside = f" (row '{row}')" if row else ""
    for n, panel in enumerate(panels, start=1):
        if not isinstance(panel, dict):
            raise BadInput(path, 1, 1, f"panel {n}{inside} is not an object")
        title = str(panel.get("title", "")) or f"id {panel.get('id')}"
        nested, targets = panel.get("panels") or [], panel.get("targets") or []
        for key, value in (("panels", nested), ("targets", targets)):
            if not isinstance(value, list):
                raise BadInput(path, 1, 1, f"panel '{title}'{inside}: {key} is not a list")
        yield from _panel_queries(path, nested, title)  # a collapsed row
        for i, target in enumerate(targets):
            ref = (target.get("refId") if isinstance(target, dict) else None) or chr(ord("A") + i)
            where = f"panel '{title}'{inside} query {ref}"
            if not isinstance(target, dict):
                raise BadInput(path, 1, 1, f"{where} is not an object")
            expr = target.get("expr")
            if expr is not None and not isinstance(expr, str):
                raise BadInput(path, 1, 1, f"{where}: expr is not text")
            if expr:
                yield Query(where, None, expr)


# YAML read before composing, one event at a time: nesting (PyYAML composes recursively) and
# the rules an alias-laden file expands to (an 18 KB file of aliases can name 9 million rules).
MAX_YAML_DEPTH = 64
MAX_RULES = 100_000


def _yaml_prescan(path: str, text: str) -> None:
    """`BadInput` for YAML nested deeper than MAX_YAML_DEPTH (before composing recurses)."""
    depth = 0
    try:
        for event in yaml.parse(text):
            if isinstance(event, (yaml.MappingStartEvent, yaml.SequenceStartEvent)):
                depth += 1
                if depth > MAX_YAML_DEPTH:
                    mark = event.start_mark
                    line, col = (mark.line + 1, mark.column + 1) if mark is not None else (1, 1)
                    raise BadInput(
                        path, line, col, f"YAML nested deeper than the limit {MAX_YAML_DEPTH}"
                    )
            elif isinstance(event, (yaml.MappingEndEvent, yaml.SequenceEndEvent)):
                depth -= 1
    except yaml.YAMLError as exc:
        raise _not_yaml(path, exc) from None


def _not_yaml(path: str, exc: yaml.YAMLError) -> BadInput:
    mark = getattr(exc, "problem_mark", None)
    line, col = (mark.line + 1, mark.column + 1) if mark is not None else (1, 1)
    return BadInput(path, line, col, f"not YAML: {getattr(exc, 'problem', exc)}")


# Prometheus's rule file as its loader reads it (model/rulefmt, unknown keys refused): each
# key of a group and of a rule, and the shape of its value. lint refuses what the loader
# refuses where it would otherwise pass a file unread: a misspelt key (``exp:`` holds no
# expression), a value of the wrong shape, a rule without its expression.
GROUP_KEYS = {
    "name": "text",
    "interval": "duration",
    "query_offset": "duration",
    "limit": "integer",
    "rules": "list",
    "labels": "labels",
    # Other rulers' group fields, which hold no expression: Thanos (and prometheus-operator's
    # PrometheusRule), then Mimir and Loki.
    "partial_response_strategy": "text",
    "source_tenants": "list",
    "evaluation_delay": "duration",
    "align_evaluation_time_on_interval": "text",
}
RULE_KEYS = {
    "record": "text",
    "alert": "text",
    "expr": "text",
    "for": "duration",
    "keep_firing_for": "duration",
    "labels": "labels",
    "annotations": "labels",
}
ALERT_ONLY = ("for", "keep_firing_for", "annotations")  # refused in a recording rule
_NULL = "tag:yaml.org,2002:null"


def _at(path: str, node: yaml.Node, why: str) -> BadInput:
    return BadInput(path, node.start_mark.line + 1, node.start_mark.column + 1, why)


def _is_null(node: yaml.Node) -> bool:
    return isinstance(node, yaml.ScalarNode) and node.tag == _NULL


def _shape_error(node: yaml.Node, shape: str) -> str | None:
    """Why ``node`` is not of ``shape`` (a value of `GROUP_KEYS` / `RULE_KEYS`); None if it is."""
    if shape in ("list", "labels", "duration") and _is_null(node):
        return None  # the loader reads an empty value as none
    if shape == "list":
        return None if isinstance(node, yaml.SequenceNode) else "is not a list"
    if shape == "labels":
        if not isinstance(node, yaml.MappingNode):
            return "is not a mapping of names to values"
        for k, v in node.value:
            if not (isinstance(k, yaml.ScalarNode) and isinstance(v, yaml.ScalarNode)):
                return "maps a name to something other than one value"
        return None
    if not isinstance(node, yaml.ScalarNode):
        return "is not one value"
    if shape == "duration":
        return duration_error(str(node.value))
    if shape == "integer" and re.fullmatch(r"[+-]?\d{1,18}", str(node.value)) is None:
        return "is not an integer"
    return None


def _fields(path: str, node: yaml.Node, keys: dict[str, str], what: str) -> dict[str, yaml.Node]:
    """The fields of a group or a rule (``node``), each known to the loader, named once and of
    its shape; `BadInput` at the first that is not."""
    if not isinstance(node, yaml.MappingNode):
        raise _at(path, node, f"{what} is not a mapping")
    fields: dict[str, yaml.Node] = {}
    for k, v in node.value:
        key = str(k.value) if isinstance(k, yaml.ScalarNode) else None
        if key is None or key not in keys:
            known = ", ".join(keys)
            raise _at(path, k, f"{what}: unknown key {key or '?'!r} (known keys: {known})")
        if key in fields:  # YAML's "last key wins" would hide the first (a second expr:)
            raise _at(path, k, f"{what}: key {key!r} appears twice")
        why = _shape_error(v, keys[key])
        if why is not None:
            raise _at(path, v, f"{what}: {key} {why}")
        fields[key] = v
    return fields


def _text(fields: dict[str, yaml.Node], key: str) -> str:
    node = fields.get(key)
    return "" if node is None or _is_null(node) else str(node.value)


def _rule_query(path: str, rule: yaml.Node, number: int, group: str) -> Query | None:
    """One rule's expression, its structure checked as the loader checks it; None for an empty
    list item (the loader skips it too)."""
    if _is_null(rule):
        return None
    fields = _fields(path, rule, RULE_KEYS, f"group '{group}', rule {number}")
    record, alert = _text(fields, "record"), _text(fields, "alert")
    where = f"group '{group}', rule {number} ('{record or alert}')"
    if bool(record) == bool(alert):
        raise _at(path, rule, f"{where}: one of 'record' and 'alert' must be set, not both")
    expr = fields.get("expr")
    if expr is None or not _text(fields, "expr"):
        raise _at(path, rule, f"{where}: 'expr' must be set")
    for key in ALERT_ONLY if record else ():
        if key in fields:
            raise _at(path, fields[key], f"{where}: '{key}' belongs to alerts, not recording rules")
    kind = "rule" if record else "alert"
    return Query(
        f"{kind} '{record or alert}' (group '{group}')",
        expr.start_mark.line + 1,
        _text(fields, "expr"),
    )


def _rule_queries(path: str, text: str) -> list[Query]:
    _yaml_prescan(path, text)
    try:
        root = yaml.compose(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line, col = (mark.line + 1, mark.column + 1) if mark is not None else (1, 1)
        raise BadInput(path, line, col, f"not YAML: {getattr(exc, 'problem', exc)}") from None
    # A bare rules file, or prometheus-operator's PrometheusRule (the groups under spec).
    groups = _get(root, "groups") or _get(_get(root, "spec"), "groups")
    if groups is None or _is_null(groups):
        raise BadInput(path, 1, 1, "neither a Grafana dashboard (no panels) nor rules (no groups)")
    if not isinstance(groups, yaml.SequenceNode):
        raise _at(path, groups, "groups is not a list")
    out: list[Query] = []
    seen = 0
    names: set[str] = set()
    for n, group in enumerate(groups.value, start=1):
        said = _get(group, "name")
        label = f"group {n}" + (f" ('{said.value}')" if isinstance(said, yaml.ScalarNode) else "")
        fields = _fields(path, group, GROUP_KEYS, label)
        name = _text(fields, "name")
        if not name:
            raise _at(path, group, f"{label}: no name (Prometheus requires one)")
        if name in names:
            raise _at(path, group, f"group name {name!r} appears twice")
        names.add(name)
        rules = fields.get("rules")
        for number, rule in enumerate(
            rules.value if rules is not None and not _is_null(rules) else [], 1
        ):
            seen += 1
            if seen > MAX_RULES:
                raise BadInput(
                    path,
                    1,
                    1,
                    f"more than {MAX_RULES} rules (YAML aliases expand to each use):"
                    " refused as no rules file a Prometheus runs",
                )
            query = _rule_query(path, rule, number, name)
            if query is not None:
                out.append(query)
    return out


def _get(node: yaml.Node | None, key: str) -> yaml.Node | None:
    if isinstance(node, yaml.MappingNode):
        for k, v in node.value:
            if isinstance(k, yaml.ScalarNode) and k.value == key:
                return v  # type: ignore[no-any-return]
    return None


# -- Grafana variables -------------------------------------------------------------------------

_RANGE_VAR = re.compile(r"\[\s*(\$\{?\w+(?::\w+)?\}?|\[\[\w+\]\])\s*(?::[^\]]*)?\]")
_VAR = re.compile(r"\$\{?\w+(?::\w+)?\}?|\[\[\w+\]\]")
_STRING = re.compile(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'|`[^`]*`')


def substitute(expr: str) -> tuple[str, dict[timedelta, str]]:
    """``expr`` with Grafana's variables replaced (module docstring); the fake durations map
    back to the variables' names for messages."""
    names: dict[str, int] = {}

    def range_var(m: re.Match[str]) -> str:
        seconds = 86_400_000 + names.setdefault(m.group(1), len(names) + 1)
        return m.group(0).replace(m.group(1), f"{seconds}s", 1)

    out, pos = [], 0
    for s in _STRING.finditer(expr):
        out.append(_VAR.sub("1", _RANGE_VAR.sub(range_var, expr[pos : s.start()])))
        out.append(s.group(0))
        pos = s.end()
    out.append(_VAR.sub("1", _RANGE_VAR.sub(range_var, expr[pos:])))
    back = {timedelta(seconds=86_400_000 + i): n for n, i in names.items()}
    return "".join(out), back


# -- the tree ----------------------------------------------------------------------------------


def children(node: pp.Expr) -> list[pp.Expr]:
    if isinstance(node, pp.BinaryExpr):
        return [node.lhs, node.rhs]
    if isinstance(node, (pp.AggregateExpr, pp.ParenExpr, pp.UnaryExpr, pp.SubqueryExpr)):
        kids = [node.expr]
        if isinstance(node, pp.AggregateExpr) and isinstance(node.param, pp.Expr):
            kids.append(node.param)
        return kids
    if isinstance(node, pp.Call):
        return [a for a in node.args if isinstance(a, pp.Expr)]
    if isinstance(node, pp.MatrixSelector):
        return [node.vector_selector]
    return []


def walk(node: pp.Expr) -> Iterator[tuple[pp.Expr, tuple[pp.Expr, ...]]]:
    """Every node with its ancestors, depth first; iterative, so a long operator chain (up to
    MAX_EXPR_CHARS) cannot exhaust Python's recursion limit."""
    stack: list[tuple[pp.Expr, tuple[pp.Expr, ...]]] = [(node, ())]
    while stack:
        current, parents = stack.pop()
        yield current, parents
        inner = (*parents, current)
        stack.extend((child, inner) for child in reversed(children(current)))


def selectors(node: pp.Expr) -> list[pp.VectorSelector]:
    return [n for n, _ in walk(node) if isinstance(n, pp.VectorSelector)]


def names_of(sel: pp.VectorSelector) -> set[str]:
    """The metric names a selector can match: its name, or the known names its __name__
    matchers accept."""
    if sel.name:
        return {fam.canonical(sel.name)}
    matched = set(KNOWN_NAMES)
    for m in sel.matchers.matchers:
        if m.name != "__name__":
            continue
        if m.op == pp.MatchOp.Equal:
            matched &= {m.value}
        elif m.op == pp.MatchOp.NotEqual:
            matched -= {m.value}
        else:
            hit = prom_regex_matches(m.value, matched)
            matched = hit if m.op == pp.MatchOp.Re else matched - hit
    return {fam.canonical(n) for n in matched}


class RegexError(ValueError):
    """A label matcher's regex that RE2 (Prometheus's regex syntax) does not compile."""


def prom_regex_matches(pattern: str, names: set[str]) -> set[str]:
    """The names a matcher's regex accepts, as Prometheus matches it: RE2 syntax (Go's
    regexp), anchored at both ends, ``.`` matching a newline (Prometheus compiles
    ``^(?s:PATTERN)$``). RE2 runs in time linear in the input, so no pattern backtracks
    (Python's ``re`` takes exponential time on ``(.|.)*X`` and rejects RE2's ``\\z``);
    google-re2 is Google's own binding of the engine. `RegexError` for bad syntax."""
    import re2

    options = re2.Options()
    options.log_errors = False
    options.dot_nl = True
    try:
        compiled = re2.compile(pattern, options)
    except re2.error as exc:
        raise RegexError(f"regex {pattern!r} does not compile: {exc}") from None
    return {n for n in names if compiled.fullmatch(n) is not None}


def names_in(node: pp.Expr) -> set[str]:
    return set().union(*(names_of(s) for s in selectors(node)))


def _op(node: pp.Expr) -> str:
    return str(node.op) if isinstance(node, (pp.BinaryExpr, pp.AggregateExpr)) else ""


def _unparen(node: pp.Expr) -> pp.Expr:
    while isinstance(node, pp.ParenExpr):
        node = node.expr
    return node


# -- the checks --------------------------------------------------------------------------------

Hit = tuple[str, str, str]  # check, message, fix


def check_expr(expr: pp.Expr, back: dict[timedelta, str]) -> list[Hit]:
    hits: list[Hit] = []
    for node, parents in walk(expr):
        if isinstance(node, pp.VectorSelector):
            hits.extend(_double_count_selector(node))
        elif isinstance(node, pp.Call) and node.func.name in RATE_FUNCS:
            hits.extend(_rate_of_gauge(node))
        elif isinstance(node, pp.BinaryExpr):
            if _op(node) == "+":
                hits.extend(_pos_plus_total(node))
            if _op(node) == "/":
                hits.extend(_ratio(node, back))
                hits.extend(_versus_k(node))
                hits.extend(_plus_one(node, parents))
    hits.extend(_mixed(expr))
    hits.extend(_family_checks(expr))
    return list(dict.fromkeys(hits))


def _double_count_selector(sel: pp.VectorSelector) -> list[Hit]:
    names = names_of(sel)
    if sel.name:
        return []
    both = sorted(t for p, t in TOTAL_OF_POS.items() if p in names and t in names)
    if not both:
        return []
    return [
        (
            "per-position-into-total",
            f"the selector {sel} matches both {both[0]} and its per-position series: a sum over"
            " it counts every token twice",
            f"select {both[0]} by name, or the per-position series alone, never a regex over both",
        )
    ]


def _pos_plus_total(node: pp.BinaryExpr) -> list[Hit]:
    lhs, rhs = names_in(node.lhs), names_in(node.rhs)
    for pos, total in TOTAL_OF_POS.items():
        if (pos in lhs and total in rhs) or (pos in rhs and total in lhs):
            return [
                (
                    "per-position-into-total",
                    f"adds the per-position series {pos} to its total {total}: the per-position"
                    " counts already sum to the total (SPEC INV-5), so every token counts twice",
                    f"use {total} alone for the total; per-position series only by position",
                )
            ]
    return []


def _rate_of_gauge(call: pp.Call) -> list[Hit]:
    out: list[Hit] = []
    for arg in call.args:
        if not isinstance(arg, pp.MatrixSelector):
            continue
        for name in sorted(names_of(arg.vector_selector)):
            if name in fam.GAUGE_NAMES:
                why = _gauge_why(name)
            elif not name.endswith(COUNTER_SUFFIXES):
                why = "not a counter by its name (counters end in _total)"
            else:
                continue
            out.append(
                (
                    "rate-of-gauge",
                    f"{call.func.name}() over {name}, {why}: its rate means nothing",
                    "take rate() of the counters and divide (acceptance = rate(accepted_total) /"
                    " rate(draft_tokens_total)), or plot the gauge itself (avg_over_time)",
                )
            )
    return out


def _windows(node: pp.Expr) -> set[timedelta]:
    return {
        n.args[0].range
        for n, _ in walk(node)
        if isinstance(n, pp.Call)
        and n.func.name in RATE_FUNCS
        and n.args
        and isinstance(n.args[0], pp.MatrixSelector)
    }


def _label_matchers(node: pp.Expr) -> set[frozenset[str]]:
    return {
        frozenset(str(m) for m in s.matchers.matchers if m.name not in ("__name__", "position"))
        for s in selectors(node)
    }


def _groupings(node: pp.Expr) -> set[tuple[str, frozenset[str]]]:
    """The label sets the outermost aggregations of a side sum to."""
    out: set[tuple[str, frozenset[str]]] = set()
    for n, parents in walk(node):
        if isinstance(n, pp.AggregateExpr) and not any(
            isinstance(p, pp.AggregateExpr) for p in parents
        ):
            mod = n.modifier
            kind = "" if mod is None else str(mod.type).rsplit(".", 1)[-1]
            out.add((kind, frozenset(mod.labels if mod else ())))
    return out


def _show(windows: set[timedelta], back: dict[timedelta, str]) -> str:
    return ", ".join(sorted(back.get(w, pp.display_duration(w)) for w in windows))


def _ratio(node: pp.BinaryExpr, back: dict[timedelta, str]) -> list[Hit]:
    out: list[Hit] = []
    lw, rw = _windows(node.lhs), _windows(node.rhs)
    if lw and rw and lw != rw:
        out.append(
            (
                "ratio-windows",
                f"a ratio of rates over different windows: [{_show(lw, back)}] over"
                f" [{_show(rw, back)}]",
                "one window for numerator and denominator (SPEC section 6: a ratio of one"
                " window's counter deltas)",
            )
        )
    if not (lw and rw):
        return out
    lm, rm = _label_matchers(node.lhs), _label_matchers(node.rhs)
    if lm != rm:
        show = " vs ".join(
            " / ".join("{" + ",".join(sorted(ms)) + "}" for ms in sorted(m, key=sorted))
            for m in (lm, rm)
        )
        out.append(
            (
                "ratio-labels",
                f"numerator and denominator select different series ({show}): the ratio"
                " divides counts of different engines or models",
                "put the same label matchers on both sides",
            )
        )
    modifier = node.modifier
    explicit = modifier is not None and modifier.matching is not None
    lg, rg = _groupings(node.lhs), _groupings(node.rhs)
    if not explicit and lg and rg and lg != rg:
        out.append(
            (
                "ratio-labels",
                "numerator and denominator are summed to different labels"
                f" ({_groups(lg)} vs {_groups(rg)}): series pair up wrongly or not at all",
                "sum both sides by the same labels (e.g. by (model_name, engine)), or say"
                " on(...) group_left for a per-position numerator",
            )
        )
    return out


def _groups(g: set[tuple[str, frozenset[str]]]) -> str:
    return "; ".join(f"{k.lower() or 'all'} ({', '.join(sorted(ls))})" for k, ls in sorted(g))


def _is_steps_times_number(node: pp.Expr) -> bool:
    for n, _ in walk(node):
        if isinstance(n, pp.BinaryExpr) and _op(n) == "*":
            sides = [_unparen(n.lhs), _unparen(n.rhs)]
            if any(isinstance(s, pp.NumberLiteral) for s in sides) and names_in(n) & STEPS_ALL:
                return True
    return False


def _versus_k(node: pp.BinaryExpr) -> list[Hit]:
    if not names_in(node.lhs) & (ACCEPTED_ALL | set(TOTAL_OF_POS)):
        return []
    if not _is_steps_times_number(node.rhs):
        return []
    return [
        (
            "acceptance-vs-k",
            "accepted divided by spec steps times a configured k: the schedule, the grammar and"
            " padding cut drafts, so k x steps is not what was drafted",
            "divide by the drafted counter: rate(vllm:spec_decode_num_draft_tokens_total) (M1)",
        )
    ]


def _plus_one(node: pp.BinaryExpr, parents: tuple[pp.Expr, ...]) -> list[Hit]:
    lhs, rhs = names_in(node.lhs), names_in(node.rhs)
    if not (lhs & ACCEPTED_ALL) or lhs & set(TOTAL_OF_POS) or not (rhs & STEPS_ALL):
        return []
    if _is_steps_times_number(node.rhs):
        return []  # acceptance-vs-k says what is wrong
    for p in reversed(parents):
        if isinstance(p, pp.BinaryExpr) and _op(p) == "+":
            sides = [_unparen(p.lhs), _unparen(p.rhs)]
            if any(isinstance(s, pp.NumberLiteral) and s.val == 1 for s in sides):
                return []
    return [
        (
            "mean-length-plus-one",
            "accepted / spec steps without 1 +: the mean acceptance length counts the bonus"
            " token (SPEC M4 = 1 + accepted / spec_steps)",
            "1 + rate(accepted) / rate(spec steps); or title it 'accepted per step'",
        )
    ]


def _or_branches(node: pp.Expr) -> Iterator[pp.Expr]:
    stack = [node]
    while stack:
        current = _unparen(stack.pop())
        if isinstance(current, pp.BinaryExpr) and _op(current) == "or":
            stack.extend((current.rhs, current.lhs))
        else:
            yield current


def _mixed(expr: pp.Expr) -> list[Hit]:
    out: list[Hit] = []
    for branch in _or_branches(expr):
        known = sorted(n for n in names_in(branch) if n in GENERATIONS)
        if len(known) < 2:
            continue
        common = frozenset.intersection(*(GENERATIONS[n] for n in known))
        if not common:
            gens = ", ".join(f"{n} ({'/'.join(sorted(GENERATIONS[n]))})" for n in known)
            out.append(
                (
                    "mixed-versions",
                    f"metric names of different exporter versions in one expression: {gens}",
                    "take every counter of one ratio from one version's names (spectally rules"
                    " --scheme vllm|rfc|backport); join versions with `or` between whole ratios",
                )
            )
    return out


# -- exporter families (families.py) ------------------------------------------------------------


def _gauge_why(name: str) -> str:
    family = fam.family_of(name)
    if family is not None and family.denominator == fam.CONFIGURED:
        configured = ", over the configured draft length" if name in fam.CONFIGURED_RATES else ""
        return (
            f"a gauge {family.engine} sets to its value over the last logging interval"
            f"{configured}, not a count"
        )
    return "a gauge (a ratio or last-interval value computed by the exporter)"


def _family_checks(expr: pp.Expr) -> list[Hit]:
    """configured-denominator and the engines mixed in one ratio (module docstring)."""
    out: list[Hit] = []
    for node, _ in walk(expr):
        if isinstance(node, pp.BinaryExpr) and _op(node) == "/":
            out.extend(_over_configured(node))
    names = names_in(expr)
    configured = sorted(names & (fam.CONFIGURED_RATES | fam.CONFIGURED_DRAFTED))
    proposed = sorted(names & fam.PROPOSED_DRAFTED)
    if configured and proposed:
        out.append(
            (
                "configured-denominator",
                f"{configured[0]} divides by the configured draft length times the steps,"
                f" {proposed[0]} counts the drafts proposed: one expression puts rates of"
                " different denominators side by side as if they were the same",
                "compare engines by mean acceptance length (1 + accepted / spec steps), which"
                " needs no drafted count, or by accepted / proposed where an engine exports it",
            )
        )
    for branch in _or_branches(expr) if not (configured and proposed) else ():
        engines = sorted(
            {f.name for n in names_in(branch) if (f := fam.family_of(n)) is not None}
            - {"ray-vllm"}  # Ray's names are read as vLLM's
        )
        if len(engines) > 1:
            out.append(
                (
                    "mixed-versions",
                    f"metric names of different engines in one expression: {', '.join(engines)}",
                    "take every counter of one ratio from one engine; join engines with `or`"
                    " between whole ratios",
                )
            )
    return out


def _over_configured(node: pp.BinaryExpr) -> list[Hit]:
    over = sorted(names_in(node.rhs) & fam.CONFIGURED_DRAFTED)
    if not over or not names_in(node.lhs) & (ACCEPTED_ALL | set(TOTAL_OF_POS)):
        return []
    return [
        (
            "configured-denominator",
            f"accepted divided by {over[0]}, which counts the configured draft length times the"
            " steps, not the drafts proposed (vLLM-shaped name, configured meaning): the ratio"
            " falls as the draft budget rises and ranks budgets wrongly; it is not the"
            " acceptance rate M1",
            "compare draft budgets by the mean acceptance length, 1 + rate(accepted) /"
            " rate(lmdeploy:spec_decode_num_drafts_total); keep this ratio only titled"
            " 'accepted per configured draft slot'",
        )
    ]


# -- entry -------------------------------------------------------------------------------------


def _count_nodes(tree: pp.Expr) -> int:
    count, stack = 0, [tree]
    while stack and count <= MAX_NODES:
        count += 1
        stack.extend(children(stack.pop()))
    return count


def _check_size(path: str, q: Query) -> None:
    why = None
    if len(q.expr) > MAX_EXPR_CHARS:
        why = f"{len(q.expr)} characters, more than the limit {MAX_EXPR_CHARS}"
    else:
        depth = deepest = 0
        for ch in _STRING.sub('""', q.expr):
            depth += ch in "([{"
            depth -= ch in ")]}"
            deepest = max(deepest, depth)
        if deepest > MAX_NESTING:
            why = f"brackets nested {deepest} deep, more than the limit {MAX_NESTING}"
    if why is not None:
        raise BadInput(path, q.line or 1, 1, f"{q.where}: expression refused: {why}")


def lint_file(path: str) -> list[Finding]:
    """Every finding of one file; `BadInput` for a file that is not rules or a dashboard, or
    an expression that does not parse."""
    findings: list[Finding] = []
    for q in queries(path):
        _check_size(path, q)
        text, back = substitute(q.expr)
        try:
            tree = pp.parse(text)
        except ValueError as exc:
            raise BadInput(
                path, q.line or 1, 1, f"{q.where}: PromQL does not parse: {exc}"
            ) from None
        nodes = _count_nodes(tree)
        if nodes > MAX_NODES:
            raise BadInput(
                path,
                q.line or 1,
                1,
                f"{q.where}: expression refused: more than {MAX_NODES} syntax nodes",
            )
        try:
            hits = check_expr(tree, back)
        except RegexError as exc:
            raise BadInput(path, q.line or 1, 1, f"{q.where}: {exc}") from None
        for check, message, fix in hits:
            findings.append(Finding(path, q.where, q.line, check, message, fix, q.expr))
    return findings
