"""The counting the RFC replaces, checked against the same claims: vLLM <= 0.33's legacy
counters and vLLM 0.34's own.

- ``legacy:drafted>=verified``: holds in sync, refuted in async (the grammar-invalid drafts
  async verifies are not drafted);
- ``legacy:sync-async-spec-steps``: refuted (the same stage inputs give different num_drafts);
- ``vllm-0.34:drafted>=verified``: proved.

A refutation comes with a concrete witness (`witness.replay` turns it into a `spectally step`
command). The registry in properties/__init__.py names these properties.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import z3
from spectally.reference import step as st
from spectally.reference.profile import VLLM_034
from spectally.reference.step import Mode

from . import model as md
from .model import AR, Context, SymInputs, fresh_tag
from .obligations import Obligation, Shown, as_int, concrete_inputs
from .witness import command_for, query_from, replay


def _legacy_witness(
    modes: tuple[Mode, ...], x: SymInputs, ctx: Context, scenario: str
) -> Callable[[z3.ModelRef], dict[str, Any]]:
    def build(model: z3.ModelRef) -> dict[str, Any]:
        values = concrete_inputs(model, x)
        k = as_int(model, ctx.k)
        out: dict[str, Any] = {"scenario": scenario, "k": k}
        for mode in modes:
            r = st.rfc_step(mode, x, AR)
            lg = st.legacy_step(mode, x, AR)
            solver = {
                "rfc": {
                    "drafted": as_int(model, r.drafted),
                    "verified": as_int(model, r.verified),
                    "accepted": as_int(model, r.accepted),
                    "spec_steps": as_int(model, r.spec_steps),
                },
                "vllm-legacy": {
                    "drafted": as_int(model, lg.num_draft_tokens),
                    "accepted": as_int(model, lg.num_accepted_tokens),
                    "spec_steps": as_int(model, lg.num_drafts),
                },
            }
            q = query_from(mode, values)
            out[mode.value] = {
                "command": command_for(q),
                "counts": solver,
                "replay": replay(q, k, solver),
            }
        return out

    return build


def legacy_drafted_verified(mode: Mode) -> Callable[[], list[Obligation]]:
    def build() -> list[Obligation]:
        tag = fresh_tag(f"legacy.dv.{mode.value}")
        ctx = Context.fresh(tag)
        x = md.sym_inputs(f"{tag}.x")
        adm = md.admissible(mode, x, ctx)
        claim = st.legacy_step(mode, x, AR).num_draft_tokens >= st.rfc_step(mode, x, AR).verified
        if mode is Mode.SYNC:  # holds: sync validates the grammar before scheduling
            return [
                Obligation(
                    "sync: legacy drafted >= verified for every admissible block",
                    (*ctx.facts(), adm),
                    claim,
                    Shown(inputs={"block": (mode, x)}),
                )
            ]
        uncut = x.proposed + x.padding
        common = (*ctx.facts(), adm, *md.cli_expressible(x), x.schedule_cap == uncut)
        small = (x.proposed, x.av_cap, x.accepted, ctx.k)
        scenarios = [
            ("async + structured output, AV off", (x.av_cap == uncut,)),
            (
                "async + structured output + AV (AV skips a draft)",
                (x.av_cap < x.proposed,),
            ),
            (
                "the RFC row: k = 4, grammar rejects the last 2 drafts, AV on",
                (
                    ctx.k == 4,
                    x.proposed == 4,
                    x.structured,
                    x.grammar_valid == 2,
                    x.av_cap < x.proposed,
                ),
            ),
        ]
        return [
            Obligation(
                f"legacy drafted >= verified: {label}",
                (*common, *extra),
                claim,
                Shown(inputs={"block": (mode, x)}),
                minimize=small,
                witness=_legacy_witness((mode,), x, ctx, label),
            )
            for label, extra in scenarios
        ]

    return build


def legacy_spec_steps() -> list[Obligation]:
    tag = fresh_tag("legacy.steps")
    ctx = Context.fresh(tag)
    x = md.sym_inputs(f"{tag}.x")
    claim = (
        st.legacy_step(Mode.SYNC, x, AR).num_drafts == st.legacy_step(Mode.ASYNC, x, AR).num_drafts
    )
    label = "legacy num_drafts equal in sync and async for the same block"
    return [
        Obligation(
            label,
            (
                *ctx.facts(),
                md.admissible(Mode.SYNC, x, ctx),
                md.admissible(Mode.ASYNC, x, ctx),
                *md.cli_expressible(x),
                # no schedule cut, AV off: the mismatch needs neither
                x.schedule_cap == x.proposed + x.padding,
                x.av_cap == x.proposed + x.padding,
            ),
            claim,
            Shown(inputs={"block": (Mode.SYNC, x)}),
            minimize=(x.proposed, x.grammar_valid, ctx.k),
            witness=_legacy_witness(md.MODES, x, ctx, label),
        )
    ]


def vllm034(mode: Mode) -> Callable[[], list[Obligation]]:
    """vLLM 0.34 (reference/profile.py VLLM_034) over every admissible block: its own drafted
    is never below the rfc's verified, in either mode (0.33's async shortfall, the RFC row, is
    gone: no grammar-invalid slot is subtracted); the rfc's verified is never below what it is
    under vllm-legacy (0.34 only adds the first invalid draft); drafted, accepted and spec steps
    of the rfc do not depend on the release."""

    def build() -> list[Obligation]:
        tag = fresh_tag(f"vllm034.{mode.value}")
        ctx = Context.fresh(tag)
        x = md.sym_inputs(f"{tag}.x")
        adm = md.admissible(mode, x, ctx)
        new, old = st.rfc_step(mode, x, AR, VLLM_034), st.rfc_step(mode, x, AR)
        drafted = st.legacy_step(mode, x, AR, VLLM_034).num_draft_tokens
        facts = (*ctx.facts(), adm)
        shown = Shown(inputs={"block": (mode, x)})
        same = z3.And(
            new.drafted == old.drafted,
            new.accepted == old.accepted,
            new.spec_steps == old.spec_steps,
        )
        return [
            Obligation("0.34: vLLM drafted >= rfc verified", facts, drafted >= new.verified, shown),
            Obligation(
                "0.34 verifies at least what 0.33 did", facts, new.verified >= old.verified, shown
            ),
            Obligation(
                "rfc drafted, accepted, spec steps do not depend on the release", facts, same, shown
            ),
        ]

    return build
