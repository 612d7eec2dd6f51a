"""Rules files of the wrong and of the right shape for Prometheus's loader (model/rulefmt),
shared by the lint tests (tests/observe/test_observe_lint.py) and the promtool tier, which
checks that promtool reads each of them as lint does (tests/observe/test_observe_rules.py)."""

from __future__ import annotations

RULE = "groups:\n- name: g\n  rules:\n  - record: r\n    expr: up\n"
# Files Prometheus's loader refuses, each of which lint used to pass unread ("0 findings"),
# and where lint names the trouble (line:column, words of the message).
MISSHAPEN_RULES = {
    "misspelt-key": (RULE + "    exp: rate(x[5m])\n", "6:5", "unknown key 'exp'"),
    "no-expr": ("groups:\n- name: g\n  rules:\n  - record: r\n", "4:5", "'expr' must be set"),
    "empty-expr": (RULE.replace("expr: up", 'expr: ""'), "4:5", "'expr' must be set"),
    "expr-a-list": (RULE.replace("expr: up", "expr: [up]"), "5:11", "expr is not one value"),
    "rules-a-mapping": (
        "groups:\n- name: g\n  rules: {record: r, expr: up}\n",
        "3:10",
        "rules is not a list",
    ),
    "group-misspelt": (
        "groups:\n- name: g\n  rule:\n  - record: r\n    expr: up\n",
        "3:3",
        "unknown key 'rule'",
    ),
    "label-a-list": (RULE + "    labels: {a: [1, 2]}\n", "6:13", "labels maps a name"),
    "labels-a-list": (RULE + "    labels: [a]\n", "6:13", "labels is not a mapping"),
    "record-and-alert": (RULE + "    alert: a\n", "4:5", "one of 'record' and 'alert'"),
    "neither": ("groups:\n- name: g\n  rules:\n  - expr: up\n", "4:5", "one of 'record'"),
    "for-in-a-recording-rule": (RULE + "    for: 5m\n", "6:10", "'for' belongs to alerts"),
    "bad-duration": (
        "groups:\n- name: g\n  rules:\n  - alert: a\n    expr: up\n    for: 5x\n",
        "6:10",
        "'5x' is not a Prometheus duration",
    ),
    "bad-interval": (RULE.replace("- name: g\n", "- name: g\n  interval: -1m\n"), "3:13", "'-1m'"),
    "bad-limit": (RULE + "  limit: x\n", "6:10", "limit is not an integer"),
    "no-group-name": ("groups:\n- rules:\n  - record: r\n    expr: up\n", "2:3", "no name"),
    "group-twice": (RULE + RULE.replace("groups:\n", ""), "6:3", "group name 'g' appears twice"),
    "groups-a-mapping": ("groups: {}\n", "1:9", "groups is not a list"),
    "group-a-list": ("groups:\n- [name, g]\n", "2:3", "group 1 is not a mapping"),
    "rule-a-list": ("groups:\n- name: g\n  rules:\n  - [record, r]\n", "4:5", "is not a mapping"),
}
# Files the loader reads, lint too: what a rule may leave out or leave empty, a label value
# YAML reads as a number, the fields of later Prometheus versions (query_offset, group labels).
WELL_SHAPED_RULES = {
    "plain": RULE,
    "empty-group": "groups:\n- name: g\n",
    "empty-rules": "groups:\n- name: g\n  rules:\n",
    "empty-rule-item": "groups:\n- name: g\n  rules:\n  - null\n",
    "label-values": RULE + "    labels: {a: 5, b: null}\n",
    "alert-fields": "groups:\n- name: g\n  rules:\n  - alert: a\n    expr: up\n    for: 0s\n"
    "    keep_firing_for:\n    labels: {severity: page}\n    annotations: {summary: x}\n",
    "expr-a-number": RULE.replace("expr: up", "expr: 5"),
    "group-fields": RULE.replace("- name: g\n", "- name: g\n  interval: 1m\n  limit: 10\n"),
}
NEWER_FIELDS = RULE.replace("- name: g\n", "- name: g\n  query_offset: 1m\n  labels: {a: b}\n")
# Group fields of other rulers (Thanos, Mimir, Loki), which promtool refuses and lint reads.
OTHER_RULERS = RULE.replace(
    "- name: g\n",
    "- name: g\n  partial_response_strategy: warn\n  source_tenants: [a, b]\n"
    "  evaluation_delay: 1m\n  align_evaluation_time_on_interval: true\n",
)
