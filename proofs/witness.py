"""Witnesses as scenarios a user can rerun, and their replay through the integer reference.

A witness found by Z3 is turned into a `StepQuery` (the ``spectally step`` flags), then replayed
three ways, which must all give the numbers the solver computed:

1. ``StepQuery.inputs()`` -> ``step.rfc_step`` / ``step.legacy_step`` over ints;
2. the same block as engine events (``Propose``, ``GrammarReject``, ``Truncate``, ``AVSkip``,
   ``Verify``, ``Accept``) through ``machine.Engine``, reading its totals;
3. (tests) the ``spectally step --json`` command line itself.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from spectally.reference import events as ev
from spectally.reference import machine as mc
from spectally.reference import step as st
from spectally.reference.arith import INT_ARITH
from spectally.reference.step import Mode, StepQuery

COUNT_NAMES = ("drafted", "verified", "accepted", "spec_steps")
LEGACY_NAMES = ("drafted", "accepted", "spec_steps")


def query_from(mode: Mode, values: dict[str, int | bool]) -> StepQuery:
    """The `StepQuery` stating concrete stage inputs (a cap at or above the block is "off")."""
    n, p = int(values["proposed"]), int(values["padding"])
    uncut = n + p
    structured = bool(values["structured"])
    applied = bool(values["applied"])
    reported = bool(values["legacy_reported"])
    s, v = int(values["schedule_cap"]), int(values["av_cap"])
    return StepQuery(
        mode=mode,
        proposed=n,
        accepted=int(values["accepted"]),
        grammar_valid=int(values["grammar_valid"]) if structured else None,
        scheduled=None if s >= uncut else s,
        av_verify=None if v >= uncut else v,
        padding=p,
        applied=applied,
        legacy_reported=None if reported == applied else reported,
    )


def cli_expressible(q: StepQuery) -> bool:
    return q.padding == 0 and q.applied and q.legacy_reported in (None, True)


def command_for(q: StepQuery) -> str:
    """The ``spectally step`` command line of a query (or its Python form if no flags say it)."""
    if not cli_expressible(q):
        return repr(q)
    return " ".join(cli_args(q, prefix=True))


def cli_args(q: StepQuery, prefix: bool = False) -> list[str]:
    args = ["spectally", "step"] if prefix else ["step"]
    args += ["--mode", q.mode.value, "--proposed", str(q.proposed)]
    if q.grammar_valid is not None:
        args += ["--grammar-valid", str(q.grammar_valid)]
    if q.scheduled is not None:
        args += ["--scheduled", str(q.scheduled)]
    if q.av_verify is not None:
        args += ["--av-verify", str(q.av_verify)]
    args += ["--accepted", str(q.accepted)]
    return args


def reference_counts(q: StepQuery) -> dict[str, dict[str, int]]:
    """Both profiles' counts of the query, over ints."""
    x = q.inputs()
    r = st.rfc_step(q.mode, x, INT_ARITH)
    lg = st.legacy_step(q.mode, x, INT_ARITH)
    return {
        "rfc": {n: int(getattr(r, n)) for n in COUNT_NAMES},
        "vllm-legacy": {
            "drafted": int(lg.num_draft_tokens),
            "accepted": int(lg.num_accepted_tokens),
            "spec_steps": int(lg.num_drafts),
        },
    }


def engine_events(q: StepQuery, request: str = "r0") -> list[Any]:
    """The query's block as the events an engine would emit, in its mode's stage order."""
    if not cli_expressible(q):
        raise ValueError("only applied blocks without padding replay as events")
    x = q.inputs()
    mode = q.mode
    p = st.pipeline(mode, x, INT_ARITH)
    uncut_slots = st.pipeline(
        mode,
        replace(x, schedule_cap=x.proposed + x.padding, av_cap=x.proposed + x.padding),
        INT_ARITH,
    ).scheduled_slots
    structured = q.grammar_valid is not None
    out: list[Any] = [
        ev.StepBegin(0),
        ev.AddRequest(request, 0, structured=structured),
        ev.Propose(request, 0, q.proposed),
    ]
    truncate = uncut_slots - p.scheduled_slots
    av_skip = p.scheduled_drafts - p.verified
    cut_stages: list[Any] = []
    if truncate > 0:
        cut_stages.append(ev.Truncate(request, 0, truncate))
    if av_skip > 0:
        cut_stages.append(ev.AVSkip(request, 0, av_skip))
    if mode is Mode.SYNC:
        invalid = q.proposed - x.grammar_valid if structured else 0
        if invalid > 0:
            out.append(ev.GrammarReject(request, 0, invalid))
        out += [*cut_stages, ev.Verify(request, 0, p.verified)]
    else:
        out += [*cut_stages, ev.Verify(request, 0, p.verified)]
        invalid = p.scheduled_drafts - min(p.scheduled_drafts, x.grammar_valid)
        if structured and invalid > 0:
            out.append(ev.GrammarReject(request, 0, invalid))
    out.append(ev.Accept(request, 0, q.accepted))
    return out


def _int(value: object) -> int:
    assert isinstance(value, int), value
    return value


def engine_counts(q: StepQuery, k: int) -> dict[str, dict[str, int]]:
    """Run the query's events through the engine state machine and read its totals."""
    engine = mc.Engine(mc.EngineConfig(mode=q.mode, k=max(k, q.proposed + q.padding, 1)))
    engine.run(engine_events(q))
    d = engine.totals.to_dict()
    rfc, legacy = d["rfc"], d["vllm-legacy"]
    assert isinstance(rfc, dict) and isinstance(legacy, dict)
    return {
        "rfc": {n: _int(rfc[n]) for n in COUNT_NAMES},
        "vllm-legacy": {n: _int(legacy[n]) for n in LEGACY_NAMES},
    }


def replay(q: StepQuery, k: int, solver: dict[str, dict[str, int]]) -> str:
    """ "ok" when the reference and the engine give the solver's numbers, else the mismatch."""
    problems: list[str] = []
    try:
        got = {"reference": reference_counts(q), "engine": engine_counts(q, k)}
    except Exception as exc:  # an illegal event, an invariant violation: a failed replay
        return f"replay failed: {type(exc).__name__}: {exc}"
    for source, counts in got.items():
        for profile, values in solver.items():
            for name, value in values.items():
                if counts[profile][name] != value:
                    problems.append(
                        f"{source} {profile}.{name}={counts[profile][name]}, solver {value}"
                    )
    return "ok" if not problems else "mismatch: " + "; ".join(problems)
