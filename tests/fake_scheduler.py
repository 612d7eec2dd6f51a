"""A small stand-in for vLLM 0.32's ``Scheduler`` / ``AsyncScheduler``, to drive the recorder's
hooks (`spectally.engine_bridge.vllm.recorder.recording.RecorderMixin`) through any interleaving of
engine events on a machine without vLLM.

It keeps only what the recorder reads and the counting it checks, written after vLLM 0.32's
source (scheduler.py ``update_from_output`` / ``make_spec_decoding_stats`` /
``_update_request_with_output`` / ``_preempt_request``; async_scheduler.py
``_update_after_schedule``): a spec step is counted per request with scheduled drafts and sampled
tokens; ``accepted = len(sampled) - 1``; tokens are appended one by one until ``max_tokens``;
an output in flight at a preemption is stale, dropped only with ``drop_stale_output``, else
delivered and counted; a request finished or aborted while its block was in flight is skipped.
The live engine tier (tests/vllm/test_engine_tier.py) checks the real thing.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

from spectally.engine_bridge.vllm.recorder.recording import RecorderMixin


@dataclass(eq=False)
class FakeRequest:
    request_id: str
    max_tokens: int
    output_token_ids: list[int] = field(default_factory=list)
    spec_token_ids: list[int] = field(default_factory=list)
    status: str = "WAITING"
    use_structured_output: bool = False
    is_prefill_chunk: bool = False
    num_in_flight_tokens: int = 0
    num_stale_output_tokens: int = 0
    drop_stale_output: bool = False
    grammar_keep: int = 0  # structured: the grammar-valid prefix of every proposal (sync)

    def is_finished(self) -> bool:
        return self.status.startswith("FINISHED")


class FakeScheduler:
    """The scheduler side of an engine step; ``spectally_async`` picks the async behaviour."""

    spectally_async = False
    spectally_engine_version = "0.32.0"
    use_v2_model_runner = False
    requires_kv_delivery = False

    def __init__(self, k: int) -> None:
        spec = SimpleNamespace(method="ngram", enable_adaptive_verification=False)
        self.vllm_config = SimpleNamespace(
            speculative_config=spec,
            model_config=SimpleNamespace(model="fake-target", max_model_len=512),
            parallel_config=SimpleNamespace(data_parallel_index=0),
            structured_outputs_config=SimpleNamespace(backend=None),
        )
        self.num_spec_tokens = k
        self.requests: dict[str, FakeRequest] = {}
        self.running: list[FakeRequest] = []
        self.structured_output_manager = SimpleNamespace(backend=None)
        self.to_preempt: list[str] = []  # preempted by the next schedule() (KV pressure)
        self.totals: list[Any] = [0, 0, 0, [0] * k]  # what the engine exported (get_metrics)

    # -- lifecycle ------------------------------------------------------------------------
    def add_request(self, request: FakeRequest) -> None:
        request.status = "RUNNING"
        self.requests[request.request_id] = request
        self.running.append(request)

    def finish_requests(self, request_ids: Any, finished_status: str) -> list[FakeRequest]:
        finished = []
        for rid in [request_ids] if isinstance(request_ids, str) else request_ids:
            request = self.requests.get(rid)
            if request is None or request.is_finished():
                continue
            self._free(request, finished_status)
            finished.append(request)
        return finished

    def _free(self, request: FakeRequest, status: str) -> None:
        request.status = status
        self.requests.pop(request.request_id, None)
        if request in self.running:
            self.running.remove(request)

    def _preempt_request(self, request: FakeRequest, drop_stale_output: bool = False) -> None:
        self.running.remove(request)
        request.status = "PREEMPTED"
        request.spec_token_ids = []
        request.drop_stale_output = drop_stale_output
        request.num_stale_output_tokens = request.num_in_flight_tokens

    # -- steps ----------------------------------------------------------------------------
    def schedule(self) -> Any:
        for rid in self.to_preempt:
            request = self.requests.get(rid)
            if request is not None and request in self.running:
                # vLLM 0.32 schedule(): drop_stale_output=self.requires_kv_delivery
                self._preempt_request(request, drop_stale_output=self.requires_kv_delivery)
        self.to_preempt = []
        for request in self.requests.values():  # preempted requests resume (recompute)
            waiting = request.status == "PREEMPTED" and request not in self.running
            if waiting and request.num_stale_output_tokens == 0:
                request.status = "RUNNING"
                self.running.append(request)
        num_scheduled: dict[str, int] = {}
        spec_tokens: dict[str, list[int]] = {}
        for request in self.running:
            spec = list(request.spec_token_ids)
            if spec:
                spec_tokens[request.request_id] = spec
            num_scheduled[request.request_id] = 1 + len(spec)
            request.num_in_flight_tokens += 1 + len(spec)
            # sync: drafts are consumed; async: placeholders for the drafts of this step
            request.spec_token_ids = [-1] * self.num_spec_tokens if self.spectally_async else []
        return SimpleNamespace(
            num_scheduled_tokens=num_scheduled,
            scheduled_spec_decode_tokens=spec_tokens,
            num_invalid_spec_tokens=None,
        )

    def make_spec_decoding_stats(
        self,
        spec_decoding_stats: Any,
        num_draft_tokens: int,
        num_accepted_tokens: int,
        num_invalid_spec_tokens: Any,
        request_id: str,
    ) -> Any:
        stats = spec_decoding_stats
        if stats is None:
            stats = SimpleNamespace(
                num_drafts=0,
                num_draft_tokens=0,
                num_accepted_tokens=0,
                num_accepted_tokens_per_pos=[0] * self.num_spec_tokens,
            )
        stats.num_drafts += 1
        stats.num_draft_tokens += num_draft_tokens
        stats.num_accepted_tokens += num_accepted_tokens
        for i in range(num_accepted_tokens):
            stats.num_accepted_tokens_per_pos[i] += 1
        return stats

    def update_from_output(self, scheduler_output: Any, model_runner_output: Any) -> Any:
        stats = None
        for rid, n in scheduler_output.num_scheduled_tokens.items():
            request = self.requests.get(rid)
            stale = False
            if request is not None:
                request.num_in_flight_tokens -= n
                if request.num_stale_output_tokens > 0:
                    stale = True
                    request.num_stale_output_tokens -= n
            if request is None or request.is_finished():
                continue
            if stale and request.drop_stale_output:
                continue
            generated = list(
                model_runner_output.sampled_token_ids[model_runner_output.req_id_to_index[rid]]
            )
            spec = scheduler_output.scheduled_spec_decode_tokens.get(rid)
            if spec and generated:
                stats = self.make_spec_decoding_stats(
                    stats,
                    num_draft_tokens=len(spec),
                    num_accepted_tokens=max(len(generated) - 1, 0),
                    num_invalid_spec_tokens=None,
                    request_id=rid,
                )
            for token in generated:
                request.output_token_ids.append(token)
                if len(request.output_token_ids) >= request.max_tokens:
                    self._free(request, "FINISHED_LENGTH_CAPPED")
                    break
        if stats is not None:
            self.totals[0] += stats.num_drafts
            self.totals[1] += stats.num_draft_tokens
            self.totals[2] += stats.num_accepted_tokens
            self.totals[3] = [
                a + b
                for a, b in zip(self.totals[3], stats.num_accepted_tokens_per_pos, strict=True)
            ]
        return stats

    def update_draft_token_ids(self, draft_token_ids: Any) -> None:
        for rid, drafts in zip(
            draft_token_ids.req_ids, draft_token_ids.draft_token_ids, strict=True
        ):
            request = self.requests.get(rid)
            if request is None or request.is_finished():
                continue
            drafts = list(drafts)
            if request.use_structured_output:  # validate_tokens: the grammar-valid prefix
                drafts = drafts[: request.grammar_keep]
            request.spec_token_ids = drafts

    def update_draft_token_ids_in_output(self, draft_token_ids: Any, scheduler_output: Any) -> None:
        """The async deferred structured-output path: not modelled by this fake (present so
        the recorder's hooks attach, as they do to every vLLM release)."""
        raise NotImplementedError("the fake scheduler has no deferred structured outputs")

    def shutdown(self) -> None:
        pass


class RecordingFake(RecorderMixin, FakeScheduler):
    """The recorder's hooks over the sync stand-in (as recorder.RecordingScheduler)."""


class RecordingAsyncFake(RecorderMixin, FakeScheduler):
    """The recorder's hooks over the async stand-in (as recorder.RecordingAsyncScheduler)."""

    spectally_async = True


class FakeEngine:
    """Drives a recording stand-in the way vLLM's EngineCore does: sync ``step`` (schedule,
    execute, update_from_output, then the drafter's proposals) or the async batch queue
    (step s+1 scheduled before the output of step s is processed). Between two steps the test
    injects what a frontend sends: arrivals, aborts (also what a matched stop string becomes),
    preemptions at the next schedule."""

    def __init__(self, sched: Any, rng: random.Random) -> None:
        self.sched = sched
        self.rng = rng
        self.k = sched.num_spec_tokens
        self.queue: list[Any] = []  # async: scheduled, output not yet processed
        self.steps = 0
        self.min_draft = 0  # 1: the drafter never misses (every request gets a proposal)

    def add(self, rid: str, max_tokens: int, grammar_keep: int | None = None) -> None:
        """``grammar_keep``: a structured request whose grammar keeps that many drafts."""
        request = FakeRequest(rid, max_tokens)
        if grammar_keep is not None:
            request.use_structured_output = True
            request.grammar_keep = grammar_keep
        self.sched.add_request(request)

    def abort(self, *rids: str) -> None:
        self.sched.finish_requests(list(rids), "FINISHED_ABORTED")

    def preempt(self, rid: str) -> None:
        """Preempted by the next schedule() (KV-cache pressure)."""
        self.sched.to_preempt.append(rid)

    def reset_preempt(self, rid: str) -> None:
        """Preempted now, in drop mode, as ``reset_prefix_cache(reset_running_requests=True)``
        does between two steps."""
        request = self.sched.requests.get(rid)
        if request is not None and request in self.sched.running:
            self.sched._preempt_request(request, drop_stale_output=True)

    def _run(self, so: Any) -> Any:
        """The model runner: per scheduled request, accept a random prefix of its drafts."""
        index: dict[str, int] = {}
        sampled: list[list[int]] = []
        for rid in so.num_scheduled_tokens:
            spec = so.scheduled_spec_decode_tokens.get(rid, [])
            index[rid] = len(sampled)
            n = 1 + self.rng.randint(0, len(spec))
            sampled.append([self.rng.randint(10, 900) for _ in range(n)])
        return SimpleNamespace(sampled_token_ids=sampled, req_id_to_index=index)

    def _propose(self, so: Any) -> None:
        """The sync drafter: proposals for every request of the batch (also for one that just
        finished: vLLM's drafter ran on the whole batch), an ngram-like miss gives []."""
        req_ids = list(so.num_scheduled_tokens)
        drafts = [
            [self.rng.randint(10, 900) for _ in range(self.rng.randint(self.min_draft, self.k))]
            for _ in req_ids
        ]
        self.sched.update_draft_token_ids(SimpleNamespace(req_ids=req_ids, draft_token_ids=drafts))

    def step(self, abort_in_flight: tuple[str, ...] = ()) -> None:
        """One ``EngineCore.step``. ``abort_in_flight``: requests aborted after the forward
        pass and before its output is processed, as vLLM 0.32's ``EngineCoreProc`` does
        (``_process_aborts_queue()`` between ``future.result()`` and ``update_from_output``)."""
        self.steps += 1
        if not self.sched.spectally_async:
            so = self.sched.schedule()
            out = self._run(so)
            if abort_in_flight:
                self.abort(*abort_in_flight)
            self.sched.update_from_output(so, out)
            self._propose(so)
            return
        if self.sched.requests:
            so = self.sched.schedule()
            self.queue.append((so, self._run(so)))
        if len(self.queue) == 2 or (self.queue and not self.sched.requests):
            if abort_in_flight:
                self.abort(*abort_in_flight)
            self.sched.update_from_output(*self.queue.pop(0))

    def drain(self) -> None:
        while self.queue:
            self.sched.update_from_output(*self.queue.pop(0))

    def busy(self) -> bool:
        return bool(self.sched.requests) or bool(self.queue)
