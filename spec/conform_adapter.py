"""The Python reference behind the conformance kit's line protocol (spec/conformance/PROTOCOL.md):

    spectally conform python -m spectally.spec.conform_adapter

Each core step becomes the reference's own stage inputs and is folded by the reference's
counters (`Counters.add_step`, `Counters.merge`); metrics come from `reference.metrics`.
A chain step (proposed K, verified v, accepted a) is a block of K drafts of which the target
saw v (the cut before the target is the reference's adaptive-verification cap) and accepted a.
A tree step is a block of as many drafts as it has nodes. What the reference does not model,
the adapter declares ``unsupported`` rather than computing it here: the per-step shape
sub-counts (``zero_draft_steps``, ``filler``), a tree's per-depth counters and its
admissibility (C-A3), and the filler bound (C-A4).
"""

from __future__ import annotations

import json
import sys
from typing import Any

from spectally.reference.arith import INT_ARITH
from spectally.reference.counters import Counters
from spectally.reference.metrics import derived_metrics
from spectally.reference.step import Mode, StepQuery, rfc_step

# Core names the reference has no counter or rule for (see the module docstring).
UNSUPPORTED = ["zero_draft_steps", "filler", "C-A4"]
UNSUPPORTED_TREE = ["per_depth", "C-A3"]


class Refused(Exception):
    def __init__(self, rule: str, message: str) -> None:
        super().__init__(message)
        self.rule = rule


def _query(step: dict[str, Any]) -> StepQuery:
    tree = step.get("tree")
    if tree is not None:
        if not all(isinstance(n, int) and not isinstance(n, bool) for n in tree):
            raise Refused("C-A1", f"tree node counts must be ints: {tree!r}")
        proposed: Any = sum(tree)
    else:
        proposed = step["proposed"]
    return StepQuery(
        mode=Mode.SYNC,
        proposed=proposed,
        accepted=step["accepted"],
        av_verify=step["verified"],
        applied=step.get("applied", True),
    )


def _checked(q: StepQuery, verified: object, k: int | None) -> StepQuery:
    reasons = q.violations(k)
    if q.type_errors() or any("must be >= 0" in r for r in reasons):
        raise Refused("C-A1", "; ".join(reasons))
    if reasons:
        raise Refused("C-A2", "; ".join(reasons))
    # verified above the drafts: the reference's target cannot see more drafts than exist
    counts = rfc_step(Mode.SYNC, q.inputs(), INT_ARITH)
    got = counts.verified if q.applied else counts.discarded_verified
    if got != verified:
        raise Refused("C-A2", f"verified {verified} exceeds the {got} drafts that exist")
    return q


def _view(c: Counters, k_max: int, chain_only: bool) -> dict[str, Any]:
    t = c.rfc
    m = derived_metrics(c)
    out: dict[str, Any] = {
        "drafted": t.drafted,
        "verified": t.verified,
        "accepted": t.accepted,
        "spec_steps": t.spec_steps,
        "acceptance_rate": m["acceptance_rate"],
        "mean_acceptance_length": m["mean_acceptance_length"],
        "draft_quality": m["draft_quality"],
        "verification_rate": m["verification_rate"],
        "fates": {
            "accepted": t.accepted_fate,
            "rejected": t.rejected + t.grammar_invalid_verified,
            "unverified": t.grammar_invalid_unverified + t.av_skipped + t.truncated,
        },
    }
    if chain_only:
        per_pos = {n: list(c.per_position(n))[:k_max] for n in ("drafted", "verified", "accepted")}
        out["per_position"] = per_pos
        rates = m["per_position_acceptance_per_step"]
        assert isinstance(rates, list)
        out["per_position_acceptance_rate"] = rates[:k_max]
        # a chain is the tree with one node per depth (CORE.md C-S3)
        out["per_depth"] = {"drafted": per_pos["drafted"], "accepted": per_pos["accepted"]}
    return out


def answer(request: dict[str, Any]) -> dict[str, Any]:
    """One protocol response for one request."""
    rid = request["id"]
    inp = request["input"]
    k_max = inp["k_max"]
    steps = [s for r in inp["requests"] for seq in r["sequences"] for s in seq]
    chain_only = not any("tree" in s for s in steps)
    # Trees may hold more nodes than k_max; their counters need room for every node.
    k = k_max if chain_only else k_max + sum(sum(s["tree"]) for s in steps if "tree" in s)
    unsupported = UNSUPPORTED + ([] if chain_only else UNSUPPORTED_TREE)
    try:
        totals = Counters.zero(k)
        requests: dict[str, Any] = {}
        for r in inp["requests"]:
            rc = Counters.zero(k)
            for seq in r["sequences"]:
                sc = Counters.zero(k)
                for s in seq:
                    q = _checked(_query(s), s["verified"], k_max if "tree" not in s else None)
                    sc = sc.add_step(Mode.SYNC, q.inputs())
                rc = rc.merge(sc)
            # per position only for a scope without a tree step (CORE.md C-P1)
            r_chain = not any("tree" in s for seq in r["sequences"] for s in seq)
            requests[r["id"]] = _view(rc, k_max, r_chain)
            totals = totals.merge(rc)
    except Refused as exc:
        return {"id": rid, "error": exc.rule, "message": str(exc), "unsupported": unsupported}
    return {
        "id": rid,
        "totals": _view(totals, k_max, chain_only),
        "requests": requests,
        "unsupported": unsupported,
    }


def main() -> int:
    for line in sys.stdin:
        if not line.strip():
            continue
        sys.stdout.write(json.dumps(answer(json.loads(line))) + "\n")
        sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
