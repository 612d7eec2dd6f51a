"""Where users look: Prometheus rules, a Grafana dashboard, a linter for the ones they have, an
HTML replay report and AIPerf records, all written from the specification's formulas
(SPEC.md sections 6 and 7; docs/observe.md)."""
