"""vLLM's spec-decode counters (SpecDecodingProm) as prometheus_client writes them, for the
tests of the Prometheus readers: under vLLM's names or Ray Serve's sanitized ones, with or
without the verified counter, with extra labels such as Ray's ``ReplicaId``."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, generate_latest

NAMES = (
    "num_drafts",
    "num_draft_tokens",
    "num_verified_draft_tokens",
    "num_accepted_tokens",
    "num_accepted_tokens_per_pos",
)


class SpecDecodeExporter:
    """One engine's counters; `count` adds one step, `scrape` is the exposition text."""

    def __init__(
        self,
        k: int = 3,
        prefix: str = "vllm:spec_decode_",
        verified: bool = True,
        extra_labels: tuple[str, ...] = (),
    ) -> None:
        self.registry = CollectorRegistry()
        self.k = k
        labels = ["model_name", "engine", *extra_labels]
        self.c = {
            n: Counter(
                prefix + n,
                n,
                [*labels, "position"] if n.endswith("per_pos") else labels,
                registry=self.registry,
            )
            for n in NAMES
            if verified or n != "num_verified_draft_tokens"
        }

    def count(self, drafted: int, verified: int, accepted: int, **extra: str) -> None:
        lab = {"model_name": "m", "engine": "0", **extra}
        self.c["num_drafts"].labels(**lab).inc(1)
        self.c["num_draft_tokens"].labels(**lab).inc(drafted)
        if "num_verified_draft_tokens" in self.c:
            self.c["num_verified_draft_tokens"].labels(**lab).inc(verified)
        self.c["num_accepted_tokens"].labels(**lab).inc(accepted)
        for i in range(self.k):
            self.c["num_accepted_tokens_per_pos"].labels(**lab, position=str(i)).inc(i < accepted)

    def scrape(self) -> str:
        return generate_latest(self.registry).decode()
