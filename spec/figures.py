"""SPEC.md's figures and worked example, computed from the reference and the vectors.

Every number and every stage order printed here comes from ``spectally.reference.step``
(`pipeline`, `token_fates`, `rfc_step`, `legacy_step`) evaluated on the inputs of the vectors
that pin the RFC's row, so the pictures cannot drift from the rules: `render.py` writes them
into SPEC.md between GENERATED markers and ``--check`` (run by the tests) fails when they are
stale. The prose around the numbers (which vLLM process knows what) is fixed text here; its
vLLM facts are those of docs/vllm-source-notes.md.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from spectally.reference.arith import INT_ARITH
from spectally.reference.step import (
    Mode,
    StepInputs,
    legacy_step,
    pipeline,
    rfc_step,
    token_fates,
)
from spectally.spec import svg
from spectally.spec.vectors import step_query

# The vectors the worked example (APPENDIX.md) and the timelines (SPEC.md 2.5) follow.
RFC_ROW_VECTORS: dict[Mode, str] = {
    Mode.SYNC: "rfc-row-sync-counterpart",
    Mode.ASYNC: "rfc-row-async-av-grammar",
}
RFC_ROW_TRACE = "trace-rfc-row"

# The stage that gives each fate (a draft's fate is the first stage that cut it).
STAGE_OF_FATE: dict[str, str] = {
    "grammar_invalid_unverified": "grammar",
    "truncated": "schedule",
    "av_skipped": "AV",
    "grammar_invalid_verified": "grammar",
    "rejected": "accept",
}
_PROBE: dict[Mode, StepInputs[int, bool]] = {
    # One block in which every stage cuts exactly one draft, so that the order of the fates of
    # its tokens, read from the tail, is the order of the stages (the reference decides it).
    Mode.SYNC: StepInputs(5, 0, True, 4, 3, 2, 1, True, True),
    Mode.ASYNC: StepInputs(5, 0, True, 2, 4, 3, 1, True, True),
}


def stage_order(mode: Mode) -> list[str]:
    """The stages of ``mode`` in pipeline order, read off the reference's `token_fates`.

    The forward pass sits where the probe's verified prefix ends: the stages that cut drafts
    before it are before the forward pass, the others after it.
    """
    probe = _PROBE[mode]
    fates = token_fates(mode, probe)
    verified = pipeline(mode, probe, INT_ARITH).verified
    stages = ["propose"]
    for index in range(len(fates) - 1, -1, -1):
        fate = fates[index]
        if fate == "accepted":
            continue
        if index < verified and "target forward pass" not in stages:
            stages.append("target forward pass")
        stages.append(STAGE_OF_FATE[fate])
    if "target forward pass" not in stages:  # the probe verifies at least one draft
        raise AssertionError(f"{mode.value}: the probe found no forward pass")
    return stages


def pipeline_lanes() -> list[tuple[str, list[str]]]:
    """The two lanes of the stage diagram (SPEC.md section 2.1), from the reference."""
    lanes = []
    for mode, rule in ((Mode.SYNC, "PIPE-1"), (Mode.ASYNC, "PIPE-2")):
        stages = [
            "target forward pass: verified" if s == "target forward pass" else s
            for s in stage_order(mode)
        ]
        lanes.append((f"{mode.value} ({rule})", stages))
    return lanes


def pipeline_svg() -> str:
    return svg.lanes_svg(
        "Stage order of a draft block, sync and async", pipeline_lanes(), "target forward pass"
    )


def pipeline_text() -> str:
    """SPEC.md's generated section: the picture and the same order in words."""
    lines = ["![Stage order, sync and async](figures/pipeline.svg)", ""]
    for name, stages in pipeline_lanes():
        lines.append(f"- {name}: " + " → ".join(stages))
    return "\n".join(lines)


@dataclass(frozen=True)
class StageRow:
    """One row of the worked example: what is kept after a stage and what is known then."""

    stage: str
    kept: int
    marks: tuple[str, ...]  # per draft: "kept", a fate name (cut here), or "" (cut earlier)
    known: tuple[str, ...]  # drafted, verified, accepted once determined, else "—"


def rfc_row_inputs(doc: dict[str, Any], mode: Mode) -> StepInputs[int, bool]:
    """The stage inputs of the vector that pins the RFC row in ``mode``."""
    vec = next(v for v in doc["vectors"] if v["name"] == RFC_ROW_VECTORS[mode])
    query, _ = step_query(vec["input"])
    if query.mode is not mode:  # guards an edited vectors.json
        raise ValueError(f"{vec['name']} is not a {mode.value} vector")
    return query.checked_inputs()


def walk(mode: Mode, x: StepInputs[int, bool]) -> list[StageRow]:
    """The block stage by stage: kept prefix lengths from `pipeline`, fates from `token_fates`."""
    p = pipeline(mode, x, INT_ARITH)
    fates = token_fates(mode, x)
    counts = rfc_step(mode, x, INT_ARITH)
    kept_after = {
        "propose": x.proposed,
        "grammar": p.after_grammar_sync if mode is Mode.SYNC else p.eligible,
        "schedule": p.scheduled_drafts,
        "AV": p.verified,
        "target forward pass": p.verified,
        "accept": x.accepted,
    }
    # The stage after which each count of the block is determined (and by then known).
    known_from = {
        "drafted": ("propose", counts.drafted),
        "verified": ("target forward pass", counts.verified),
        "accepted": ("accept", counts.accepted),
    }
    rows: list[StageRow] = []
    alive = x.proposed
    seen: set[str] = set()
    for stage in stage_order(mode):
        seen.add(stage)
        kept = kept_after[stage]
        marks = []
        for i in range(x.proposed):
            if i < kept:
                marks.append("kept")
            elif i < alive:
                marks.append(fates[i])  # cut by this very stage: its fate
            else:
                marks.append("")
        known = tuple(str(value) if at in seen else "—" for at, value in known_from.values())
        rows.append(StageRow(stage, kept, tuple(marks), known))
        alive = kept
    return rows


_WHO: dict[Mode, dict[str, str]] = {
    Mode.SYNC: {
        "propose": "scheduler (`update_draft_token_ids`, before `validate_tokens`)",
        "grammar": "scheduler (`validate_tokens`)",
        "schedule": "scheduler (`schedule`)",
        "AV": "worker (on the device)",
        "target forward pass": "worker",
        "accept": "worker samples; scheduler counts (`update_from_output`)",
    },
    Mode.ASYNC: {
        "propose": "worker (drafts stay on the device; the scheduler holds `-1` placeholders)",
        "schedule": "scheduler (`schedule`, on placeholders)",
        "AV": "worker (on the device)",
        "target forward pass": "worker",
        "grammar": "scheduler (`update_draft_token_ids_in_output`, after the launch)",
        "accept": "worker samples; scheduler counts (`update_from_output`, during step t+1)",
    },
}


def worked_example(doc: dict[str, Any], mode: Mode) -> str:
    """The RFC row followed token by token through ``mode`` (APPENDIX.md)."""
    x = rfc_row_inputs(doc, mode)
    rows = walk(mode, x)
    rfc = rfc_step(mode, x, INT_ARITH)
    legacy = legacy_step(mode, x, INT_ARITH)
    heads = " | ".join(f"d{i + 1}" for i in range(x.proposed))
    lines = [
        f"Vector `{RFC_ROW_VECTORS[mode]}`: {mode.value}, N = {x.proposed}, "
        f"G = {x.grammar_valid}, V = {x.av_cap}, A = {x.accepted}. "
        "`kept`: the draft is still in the block; a fate name: this stage cut it; empty: an "
        "earlier stage did. drafted / verified / accepted: the block's counts once the stage "
        "that determines them has run (— before).",
        "",
        f"| stage | {heads} | kept | drafted | verified | accepted | which process knows |",
        "|---|" + "---|" * x.proposed + "---|---|---|---|---|",
    ]
    for row in rows:
        marks = " | ".join(m if m in ("kept", "") else f"`{m}`" for m in row.marks)
        known = " | ".join(row.known)
        lines.append(f"| {row.stage} | {marks} | {row.kept} | {known} | {_WHO[mode][row.stage]} |")
    f = rfc.fates.as_dict()
    fate_text = ", ".join(f"{name} {n}" for name, n in f.items() if n)
    lines += [
        "",
        f"Block applied: **drafted {rfc.drafted}, verified {rfc.verified}, accepted "
        f"{rfc.accepted}, spec steps {rfc.spec_steps}**, padding {rfc.padding}; fates "
        f"{fate_text}. vLLM 0.32.0 and 0.33.0 report drafted {legacy.num_draft_tokens}, accepted "
        f"{legacy.num_accepted_tokens}, steps {legacy.num_drafts} (section 8).",
    ]
    return "\n".join(lines)


def timeline_items(doc: dict[str, Any], mode: Mode) -> list[svg.SeqItem]:
    """Steps t and t+1 of one request: who knows what, when, with the counts of the vector
    that pins the RFC row in ``mode``. The worker reports, with the output of the block it ran,
    that block's drafts N and verified drafts v (the data path of the vLLM patch)."""
    x = rfc_row_inputs(doc, mode)
    p = pipeline(mode, x, INT_ARITH)
    c = rfc_step(mode, x, INT_ARITH)
    sampled = x.accepted + 1  # the accepted drafts and the bonus token
    item, note, msg = svg.SeqItem, "note", "msg"
    counted = f"+{c.drafted} / +{c.verified} / +{c.accepted}, spec step +{c.spec_steps}"
    report = (
        f"ModelRunnerOutput of step t: {sampled} sampled tokens,\n"
        f"num_draft_tokens = {c.drafted}, num_verified_draft_tokens = {c.verified} (new)"
    )
    if mode is Mode.SYNC:
        return [
            item("divider", "end of step t-1"),
            item(msg, f"{x.proposed} drafts for r1 (take_draft_token_ids)", "W", "S"),
            item(
                note,
                f"update_draft_token_ids: grammar keeps {p.after_grammar_sync}\n"
                "(0.32/0.33 validate_tokens: the valid prefix)",
                "S",
            ),
            item("divider", "step t"),
            item(msg, f"schedule(): {p.scheduled_slots} draft slots for r1", "S", "W"),
            item(
                note,
                f"the worker proposed the block: drafted = {c.drafted} known\n"
                f"AV keeps {p.verified} of {p.scheduled_drafts}, forward pass:"
                f" verified = {c.verified} known",
                "W",
            ),
            item(msg, report, "W", "S"),
            item(note, f"update_from_output: accepted = {c.accepted} known\n{counted}", "S"),
            item("divider", "step t+1 is scheduled only now"),
        ]
    return [
        item("divider", "step t"),
        item(msg, f"schedule(): {p.scheduled_slots} placeholder slots (-1) for r1", "S", "W"),
        item(
            note,
            f"drafted = {c.drafted} known (real drafts on the device)\n"
            f"AV keeps {p.verified}, forward pass launched: verified = {c.verified} known",
            "W",
        ),
        item(
            note,
            f"update_draft_token_ids_in_output: grammar keeps {p.eligible} of"
            f" {p.scheduled_drafts}\n(0.32/0.33 deferred check)",
            "S",
        ),
        item(note, f"sampling: accepted = {c.accepted} (invalid drafts cannot be accepted)", "W"),
        item("divider", "step t+1 is scheduled before step t's output is processed"),
        item(msg, "schedule() of step t+1", "S", "W"),
        item(msg, report, "W", "S"),
        item(
            note,
            f"update_from_output during step t+1, keyed by step t (ATTR-1):\n{counted}",
            "S",
        ),
    ]


PARTICIPANTS = (("S", "Scheduler (engine-core process)"), ("W", "Worker (model runner)"))


def timeline_svg(doc: dict[str, Any], mode: Mode) -> str:
    return svg.sequence_svg(
        f"Who knows what, when: {mode.value} scheduling",
        PARTICIPANTS,
        timeline_items(doc, mode),
    )


def timeline_text(doc: dict[str, Any], mode: Mode) -> str:
    """SPEC.md's generated section: the picture and the same sequence in words."""
    who = dict(PARTICIPANTS)
    lines = [f"![{mode.value} timeline](figures/timeline-{mode.value}.svg)", ""]
    for it in timeline_items(doc, mode):
        text = it.text.replace(",\n", ", ").replace(":\n", ": ").replace("\n", "; ")
        if it.kind == "divider":
            lines.append(f"- *{text}*")
        elif it.kind == "note":
            lines.append(f"  - {who[it.src].split(' ')[0]}: {text}")
        else:
            lines.append(f"  - {who[it.src].split(' ')[0]} → {who[it.dst].split(' ')[0]}: {text}")
    return "\n".join(lines)


# The SVG files render.py writes beside SPEC.md: name -> renderer.
SVG_FIGURES: dict[str, Callable[[dict[str, Any]], str]] = {
    "pipeline.svg": lambda doc: pipeline_svg(),
    "timeline-sync.svg": lambda doc: timeline_svg(doc, Mode.SYNC),
    "timeline-async.svg": lambda doc: timeline_svg(doc, Mode.ASYNC),
}
