"""What the property families share: the modes, an obligation's shown conjuncts, and INV-5's
lemma on per-position sums."""

from __future__ import annotations

import z3
from spectally.reference.step import Mode

from .. import model as md
from ..model import AR, Context
from ..obligations import Obligation, Shown
from ..z3arith import Cond

MODES = md.MODES


def conjunct_terms(conjuncts: list[tuple[str, Cond]]) -> dict[str, Cond]:
    return {f"holds: {label}": cond for label, cond in conjuncts}


# -- INV-5's lemma: Σ_{p<n} position_increment(len, p) == min(len, n), by induction on n ------


def sum_lemma(mode: Mode, tag: str) -> list[Obligation]:
    ctx = Context.fresh(tag)
    x = md.sym_inputs(f"{tag}.x")
    n = z3.Int(f"{tag}.lemma_n")
    hyps = [*ctx.facts(), md.admissible(mode, x, ctx)]
    out: list[Obligation] = []
    for field in md.POSITION_FIELDS:
        fn = md._psum_function(mode, x, field, f"{tag}.{field}")
        total = md.block_total(mode, x, field)
        shown = Shown(inputs={"block": (mode, x)}, terms={"n": n, "len": total})
        out.append(
            Obligation(
                f"lemma {field}: base, sum over no position == min(len, 0)",
                (*hyps,),
                fn(0) == AR.min(total, AR.lit(0)),
                shown,
            )
        )
        out.append(
            Obligation(
                f"lemma {field}: step, sum_{{p<n}} == min(len, n) -> sum_{{p<n+1}} == "
                "min(len, n+1)",
                (*hyps, n >= 0, fn(n) == AR.min(total, n)),
                fn(n + 1) == AR.min(total, n + 1),
                shown,
            )
        )
    return out
