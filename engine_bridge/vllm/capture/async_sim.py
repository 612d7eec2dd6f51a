"""Drive the installed release's real ``AsyncScheduler`` (recording) with the simulated model
runner, on CPU: the parts of async recording that live in the scheduler, with a runner the
seed controls (real async runs on the CPU engine are the ``async-*`` fixtures, cpu_async.py).

A tiny CPU engine is built only to obtain a genuine ``VllmConfig`` / ``KVCacheConfig`` /
``StructuredOutputManager``; a second, recording ``RecordingAsyncScheduler`` is built from them
(`simulate.TinyCpuEngine`) and driven the way ``EngineCore.step_with_batch_queue`` drives it
(batch queue of 2: step s+1 is scheduled before the output of step s is processed). The runner
(`simulate.SimRunner`, one generator in call order) accepts a random prefix of each block's
placeholders; nothing is computed.

Covered: placeholders (``[-1] * k``) scheduled and counted, outputs keyed back to their
scheduled step, an abort while a step is in flight (``discarded_aborted``), with ``--so``
regex-constrained requests (deferred sampling, drafts handed back before the bitmask), and with
``--drop-preempt`` ``reset_prefix_cache(reset_running_requests=True)`` preempting every running
request in drop mode (``discarded_stale`` blocks vLLM does not count: schema v1 cannot say so,
see the preempt records' ``meta``). Not covered: adaptive verification.

The ``totals`` record sums ``scheduler_stats.spec_decoding_stats`` of the ``EngineCoreOutputs``
the scheduler returned (``source: "scheduler_stats"``), an export path independent of the
recorder's ``make_spec_decoding_stats`` hook::

    python -m spectally.engine_bridge.vllm.capture sim --scenario async --out DIR [--so]

``python -m spectally.engine_bridge.vllm.capture.async_sim --out DIR`` does the same.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from spectally.engine_bridge.vllm.capture import simulate as _sim
from spectally.engine_bridge.vllm.capture.simulate import EOS, close_log, open_log

__all__ = ["CHOICES", "EOS", "add_to_manifest", "close_log", "main", "open_log", "simulate"]

CHOICES = list(_sim.REGEX_CHOICES)


def simulate(
    out: Path, seed: int = 0, k: int = 3, drop_preempt: bool = False, so: bool = False
) -> dict[str, Any]:
    """One simulated run; ``drop_preempt`` adds the reset_prefix_cache preemption (drop mode),
    ``so`` makes requests 0 and 2 structured (regex, xgrammar, deferred path). The summary of
    its log (with the backport's counters)."""
    import dataclasses

    scenario = dataclasses.replace(_sim.async_scenario(so, drop_preempt), k=k)
    gz = _sim.simulate(out, scenario, _sim.TinyCpuEngine(k), "async", seed)
    return _sim.summary_of(gz, backport=True)


def add_to_manifest(out: Path, s: dict[str, Any], argv: list[str]) -> None:
    """Agreeing runs join ``runs``; a diverging one goes to ``known_divergences`` with why."""
    from spectally.engine_bridge.vllm.capture.manifest import manifest_numbers, merge_run

    entry = {
        "file": s["file"],
        "runner": "simulated: real RecordingAsyncScheduler, fake model runner (async_sim.py)",
        "command": "python -m spectally.engine_bridge.vllm.capture.async_sim"
        " --out tests/fixtures/vllm "
        + " ".join(a for a in argv if a not in ("--out", str(out)) and not a.startswith("/")),
        **manifest_numbers(s),
    }
    key = "runs" if s["replay"] == "agree" else "known_divergences"
    if key == "known_divergences":
        # Kept out of the top folder: every top-level log there must replay clean.
        sub = out / "known_divergences"
        sub.mkdir(exist_ok=True)
        (out / s["file"]).replace(sub / s["file"])
        entry["file"] = f"known_divergences/{s['file']}"
        entry["replay_divergence"] = s.get("replay_divergence")
        entry["why"] = (
            "vLLM 0.32 decides per preemption whether stale in-flight output is dropped "
            "(Request.drop_stale_output: requires_kv_delivery or reset_prefix_cache); schema v1 "
            "only has the header's global drop_stale_output (false here), so replay counts the "
            "3 discarded_stale blocks the engine dropped. The per-preemption value is in the "
            "preempt records' meta.drop_stale_output."
        )
    merge_run(out, entry, key)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="drive the real AsyncScheduler with a fake runner")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument(
        "--drop-preempt",
        action="store_true",
        help="preempt everything with reset_prefix_cache (stale outputs dropped per request)",
    )
    ap.add_argument("--so", action="store_true", help="structured requests (regex, deferred)")
    ap.add_argument("--manifest", action="store_true", help="merge into OUT/MANIFEST.json")
    args = ap.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    s = simulate(args.out, args.seed, drop_preempt=args.drop_preempt, so=args.so)
    if args.manifest:
        add_to_manifest(args.out, s, argv if argv is not None else sys.argv[1:])
    keys = (
        "file",
        "proposed",
        "scheduled",
        "outcomes",
        "events",
        "legacy_from_step_stats",
        "totals",
        "step_stats_equal_totals",
        "blocks_equal_step_stats",
        "schema_errors",
        "replay",
        "replay_divergence",
    )
    print(json.dumps({key: s.get(key) for key in keys}, indent=1))
    ok = s["step_stats_equal_totals"] and s["blocks_equal_step_stats"] and s["replay"] == "agree"
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
