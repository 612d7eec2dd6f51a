"""The Python reference behind the conformance kit's line protocol (spec/conformance/PROTOCOL.md):

    spectally conform python -m spectally.spec.conform_adapter

Each core step is folded by the reference's shape rules (``reference/shapes.py``: chains of any
length per step, trees, fillers, zero-draft steps, per-depth counters, admissibility C-A1-C-A4),
and, for the metrics, by the reference's counters (``Counters.add_step``, ``Counters.merge``)
whose ratios come from ``reference.metrics``: a chain step (proposed K, verified v, accepted a)
is a block of K drafts of which the target saw v (the cut before the target is the reference's
adaptive-verification cap) and accepted a; a tree step a block of as many drafts as it has
nodes. Both folds must agree on the counters they share; the adapter computes nothing itself.
"""

from __future__ import annotations

import json
import sys
from typing import Any

from spectally.reference import shapes
from spectally.reference.counters import Counters
from spectally.reference.errors import InadmissibleStep
from spectally.reference.metrics import derived_metrics
from spectally.reference.step import Mode, StepQuery

# CORE.md section 5: the first broken admissibility rule, in this order, is the one reported.
ORDER = ("C-A1", "C-A3", "C-A2", "C-A4")


class Refused(Exception):
    def __init__(self, rule: str, message: str) -> None:
        super().__init__(message)
        self.rule = rule


def _first_rule(exc: InadmissibleStep) -> str:
    broken = {r[1 : r.index("]")] for r in exc.reasons}
    return next(rule for rule in ORDER if rule in broken)


def _fold(sc: shapes.StreamCounters, s: dict[str, Any], k_max: int) -> shapes.StreamCounters:
    """``sc`` after the core step ``s``: the reference's shape rules, refusals as `Refused`."""
    tree = s.get("tree")
    filler = s.get("filler", 0)
    applied = s.get("applied", True)
    try:
        if tree is not None:
            shapes.check_counts([*tree, s["verified"], s["accepted"], filler], "tree step")
            layers = shapes.tree_layers(tree, s["verified"], s["accepted"], k_max)
            after = shapes.fold_tree(sc, layers, filler)
        else:
            counts = [s["proposed"], s["verified"], s["accepted"], filler]
            shapes.check_counts(counts, "chain step")
            step = shapes.ChainStep(s["proposed"], filler, s["verified"], s["accepted"])
            after = shapes.fold_chain(sc, step, k_max)
    except InadmissibleStep as exc:
        raise Refused(_first_rule(exc), str(exc)) from exc
    return shapes.keep_applied(sc, after, applied is True)


def _query(s: dict[str, Any]) -> StepQuery:
    """The core step as the reference pipeline's stage inputs (admissible already)."""
    tree = s.get("tree")
    return StepQuery(
        mode=Mode.SYNC,
        proposed=s["proposed"] if tree is None else sum(tree),
        accepted=s["accepted"],
        av_verify=s["verified"],
        applied=s.get("applied", True),
    )


def _view(sc: shapes.StreamCounters, c: Counters, k_max: int, chain_only: bool) -> dict[str, Any]:
    t = c.rfc
    shared = (t.drafted, t.verified, t.accepted, t.spec_steps)
    mine = (sc.totals.drafted, sc.totals.verified, sc.totals.accepted, sc.totals.spec_steps)
    if shared != mine:  # two parts of the reference disagree: a bug, never an answer
        raise AssertionError(f"shapes {mine} != counters {shared}")
    m = derived_metrics(c)
    d = sc.to_dict()
    depth: dict[str, list[int]] = d["per_depth"]  # type: ignore[assignment]
    out: dict[str, Any] = {
        **{n: d[n] for n in ("drafted", "verified", "accepted", "spec_steps")},
        "zero_draft_steps": d["zero_draft_steps"],
        "filler": d["filler"],
        "fates": d["fates"],
        "acceptance_rate": m["acceptance_rate"],
        "mean_acceptance_length": m["mean_acceptance_length"],
        "draft_quality": m["draft_quality"],
        "verification_rate": m["verification_rate"],
        # per-depth vectors of length k_max (C-A3: no tree is deeper)
        "per_depth": {n: (depth[n] + [0] * k_max)[:k_max] for n in ("drafted", "accepted")},
    }
    if chain_only:
        out["per_position"] = d["per_position"]
        rates = m["per_position_acceptance_per_step"]
        assert isinstance(rates, list)
        out["per_position_acceptance_rate"] = rates[:k_max]
    return out


def answer(request: dict[str, Any]) -> dict[str, Any]:
    """One protocol response for one request."""
    rid = request["id"]
    inp = request["input"]
    k_max = inp["k_max"]
    steps = [s for r in inp["requests"] for seq in r["sequences"] for s in seq]
    chain_only = not any("tree" in s for s in steps)
    # Trees may hold more nodes than k_max; their counters need room for every node.
    nodes = [n for s in steps if "tree" in s for n in s["tree"] if isinstance(n, int) and n > 0]
    k = k_max if chain_only else k_max + sum(nodes)
    try:
        totals = Counters.zero(k)
        totals_sc = shapes.StreamCounters.zero(k_max)
        requests: dict[str, Any] = {}
        for r in inp["requests"]:
            rc, rsc = Counters.zero(k), shapes.StreamCounters.zero(k_max)
            for seq in r["sequences"]:
                sc, ssc = Counters.zero(k), shapes.StreamCounters.zero(k_max)
                for s in seq:
                    ssc = _fold(ssc, s, k_max)
                    sc = sc.add_step(Mode.SYNC, _query(s).inputs())
                rc, rsc = rc.merge(sc), rsc.merge(ssc)
            # per position only for a scope without a tree step (CORE.md C-P1)
            r_chain = not any("tree" in s for seq in r["sequences"] for s in seq)
            requests[r["id"]] = _view(rsc, rc, k_max, r_chain)
            totals, totals_sc = totals.merge(rc), totals_sc.merge(rsc)
    except Refused as exc:
        return {"id": rid, "error": exc.rule, "message": str(exc)}
    return {"id": rid, "totals": _view(totals_sc, totals, k_max, chain_only), "requests": requests}


def main() -> int:
    for line in sys.stdin:
        if not line.strip():
            continue
        sys.stdout.write(json.dumps(answer(json.loads(line))) + "\n")
        sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
