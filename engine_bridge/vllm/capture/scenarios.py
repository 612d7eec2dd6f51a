"""How a capture run drives the engine (``RunConfig.scenario``), and the async CPU matrix.

Scenarios (each is a function ``(llm, cfg, params) -> None``; ``params(i)`` gives request i's
``SamplingParams``):

``plain``       ``LLM.generate`` over the prompts.
``abort``       stepped by hand: request 1 aborted mid-flight, a late request added and aborted.
``interleave``  stepped by hand: a short request finishes by length
                and another is aborted right after that step; a request is added and another
                aborted between the same two steps; a burst of arrivals and aborts.
``stop``        stop strings: vLLM's output processor matches them on detokenized text and turns
                each match into an abort of the engine request between two steps (what a
                client's stop string does in serving).
``reset``       stepped by hand; ``reset_prefix_cache(reset_running_requests=True)`` between two
                steps preempts every running request in drop mode: under async the output in
                flight is stale and dropped (``discarded_stale``).
``preempt``     ``plain`` with a KV cache small enough to force preemptions (see
                ``capture._llm_kwargs``); under async, blocks in flight at a preemption are stale
                and delivered.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

Params = Callable[[int], Any]
T = TypeVar("T")

PROMPTS = [
    "def fibonacci(n):\n    ",
    "import os\nimport sys\n\nclass Config:\n",
    "The quick brown fox jumps over the lazy dog. The quick brown",
    "for i in range(10):\n    print(i)\nfor j in range(",
    "SELECT name, value FROM settings WHERE",
    "# Licensed under the Apache License, Version 2.0 (the",
]


def _prompts(n: int) -> list[str]:
    return [PROMPTS[i % len(PROMPTS)] for i in range(n)]


def drive_plain(llm: Any, cfg: Any, params: Params) -> None:
    prompts = _prompts(cfg.num_requests)
    llm.generate(prompts, [params(i) for i in range(cfg.num_requests)], use_tqdm=False)


def _step_until_done(engine: Any, hook: Callable[[int], None], limit: int = 600) -> None:
    steps = 0
    while engine.has_unfinished_requests():
        engine.step()
        steps += 1
        hook(steps)
        if steps > limit:
            raise RuntimeError("scenario did not finish")


def drive_abort(llm: Any, cfg: Any, params: Params) -> None:
    """Abort request 1 mid-flight and a late request right after it was added."""
    engine = llm.llm_engine
    for i, prompt in enumerate(_prompts(cfg.num_requests)):
        engine.add_request(f"r{i}", prompt, params(i))

    def hook(step: int) -> None:
        if step == 3:
            engine.abort_request(["r1"])
        if step == 6:
            engine.add_request("r-late", _prompts(1)[0], params(0))
        if step == 7:
            engine.abort_request(["r-late"])

    _step_until_done(engine, hook)


def drive_interleave(llm: Any, cfg: Any, params: Params) -> None:
    """Aborts and finishes between steps on the real engine (offline, stepped by hand)."""
    engine = llm.llm_engine
    prompts = _prompts(cfg.num_requests + 4)
    short = params(0)
    short.max_tokens = 6
    engine.add_request("short", prompts[0], short)
    for i in range(1, cfg.num_requests):
        engine.add_request(f"r{i}", prompts[i], params(i))
    state = {"short_done": False, "late": 0}

    def hook(step: int) -> None:
        # internal request ids carry a suffix ("short-1a2b3c4d")
        unfinished = {rid.rsplit("-", 1)[0] for rid in engine.output_processor.request_states}
        if not state["short_done"] and "short" not in unfinished:
            # the step that finished "short" by length has just been processed: abort another
            state["short_done"] = True
            engine.abort_request(["r1"])
        if step == 5:  # an arrival and an abort between the same two steps
            engine.add_request("late0", prompts[1], params(1))
            engine.abort_request(["r2"])
        if step == 9:  # a burst: two arrivals, one of them aborted at once, one more abort
            engine.add_request("late1", prompts[2], params(2))
            engine.add_request("late2", prompts[3], params(3))
            engine.abort_request(["late1", "late0"])

    _step_until_done(engine, hook)


def drive_stop(llm: Any, cfg: Any, params: Params) -> None:
    """Every other request has stop strings (common characters of the tiny models' text)."""
    prompts = _prompts(cfg.num_requests)
    all_params = []
    for i in range(cfg.num_requests):
        p = params(i)
        if i % 2 == 0:
            p.stop = ["e", "a"] if i % 4 == 0 else ["o", "t"]
            p.include_stop_str_in_output = i % 4 == 0
        all_params.append(p)
    llm.generate(prompts, all_params, use_tqdm=False)


def drive_reset(llm: Any, cfg: Any, params: Params) -> None:
    """Preempt every running request in drop mode between two steps, twice."""
    engine = llm.llm_engine
    for i, prompt in enumerate(_prompts(cfg.num_requests)):
        engine.add_request(f"r{i}", prompt, params(i))

    def hook(step: int) -> None:
        if step in (4, 11):
            engine.reset_prefix_cache(reset_running_requests=True)

    _step_until_done(engine, hook)


SCENARIOS: dict[str, Callable[[Any, Any, Params], None]] = {
    "plain": drive_plain,
    "preempt": drive_plain,
    "abort": drive_abort,
    "interleave": drive_interleave,
    "stop": drive_stop,
    "reset": drive_reset,
}


def scheduling_matrix(run_config: Callable[..., T]) -> list[T]:
    """Sync/async pairs of the same workloads, with the real AsyncScheduler on the CPU engine
    (cpu_async.py): SO (xgrammar) + draft_model k=3, preemption with blocks in flight, drop mode,
    aborts and stop strings between steps."""
    runs = []
    for sched in ("sync", "async"):
        tag = f"{sched}-draft-noise05-k3"
        runs += [
            run_config(
                f"{tag}-so-json-xgrammar",
                "draft_model",
                3,
                "draft-noise05",
                so="json",
                so_backend="xgrammar",
                scheduling=sched,
                num_requests=8,
                quick=True,
            ),
            run_config(
                f"{tag}-preempt",
                "draft_model",
                3,
                "draft-noise05",
                scenario="preempt",
                scheduling=sched,
                num_requests=6,
            ),
            run_config(
                f"{tag}-interleave",
                "draft_model",
                3,
                "draft-noise05",
                scenario="interleave",
                scheduling=sched,
                num_requests=5,
                quick=True,
            ),
            run_config(
                f"{tag}-stop",
                "draft_model",
                3,
                "draft-noise05",
                scenario="stop",
                scheduling=sched,
                num_requests=6,
                quick=sched == "async",
            ),
        ]
    runs.append(
        run_config(
            "async-draft-noise05-k3-reset-drop",
            "draft_model",
            3,
            "draft-noise05",
            scenario="reset",
            scheduling="async",
            num_requests=4,
        )
    )
    return runs
