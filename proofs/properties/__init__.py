"""The property suite: every claim `spectally prove` checks, as named proof obligations.

Names (SPEC.md's "proved by" column uses them verbatim):

- ``step:INV-n`` (n = 1..8): the state after one admissible block, for symbolic k and every
  admissible stage input, satisfies INV-n.
- ``step:discarded``: a discarded block counts only in discarded_*, an applied one never there.
- ``trace:INV-n`` (n = 1..9): INV-n holds after any trace of blocks of any number of requests,
  by induction: initiation (zero state), consecution (Inv ∧ admissible(x) -> INV-n after
  ``fold``) and closure under merge (sharded / per-request states combined). Inv is the
  conjunction INV-1..8. INV-9: every fold adds non-negative amounts. INV-10: the engine
  totals stay the merge of the per-request counters.
- ``theorem:sync-async``: the same stage inputs give equal drafted, accepted and spec_steps in
  both modes, verified differing by exactly the async grammar-invalid-verified drafts
  (also when the grammar rejects every draft, and along traces); admissibility is one set.
  Under vllm-0.34, whose sync trim verifies the first invalid draft, verified differs by the
  async minus the sync grammar-invalid-verified drafts.
- ``metrics:bounds``: ``metrics.metric_bounds`` and per-position rates from Inv.
- ``merge:monoid``: rfc/legacy/position merges are associative, commutative, zero identity,
  and each fold is a merge with the block's own counts.
- ``legacy:drafted>=verified`` / ``legacy:sync-async-spec-steps``: vLLM 0.32/0.33's counting,
  expected to be *refuted* (except drafted >= verified in sync, which holds).
- ``vllm-0.34:drafted>=verified``: vLLM 0.34's own drafted is never below the rfc's verified,
  in either mode.

One module per family: ``step``, ``trace``, ``sync_async``, ``metrics``, ``merge`` (with
``lemmas``, what they share); the legacy and vLLM 0.34 properties are built in legacy.py, the
events' and stories' in events.py. The registry below names them all.

Each property is built afresh when run, from the reference functions as they are at that
moment: a mutant patched into the reference changes what is proved.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from spectally.reference.step import Mode

from .. import events as evp
from .. import model as md
from ..legacy import legacy_drafted_verified, legacy_spec_steps, vllm034
from ..obligations import Obligation
from .lemmas import MODES
from .merge import merge_laws
from .metrics import metric_bounds
from .step import step_discarded, step_inv
from .sync_async import theorem_sync_async
from .trace import totals_are_sums, trace_inv, trace_monotone


@dataclass(frozen=True)
class Property:
    name: str
    profile: str  # rfc | vllm-legacy | vllm-0.34 | all
    mode: str  # sync | async | both
    expected: str  # proved | refuted
    build: Callable[[], list[Obligation]]
    summary: str = ""

    def obligations(self) -> list[Obligation]:
        """The obligations, built in their own `model.name_scope`: their Z3 names, and so the
        solver's work on them, are the same whatever was built before in the process."""
        with md.name_scope():
            return self.build()


# -- the registry -----------------------------------------------------------------------------


def all_properties() -> list[Property]:
    props: list[Property] = []
    for name in md.INVARIANTS:
        for mode in MODES:
            props.append(
                Property(
                    f"step:{name}",
                    md.INV_PROFILE[name],
                    mode.value,
                    "proved",
                    step_inv(name, mode),
                )
            )
    for mode in MODES:
        props.append(Property("step:discarded", "rfc", mode.value, "proved", step_discarded(mode)))
    for name in md.INVARIANTS:
        for mode in MODES:
            props.append(
                Property(
                    f"trace:{name}",
                    md.INV_PROFILE[name],
                    mode.value,
                    "proved",
                    trace_inv(name, mode),
                )
            )
    for mode in MODES:
        props.append(Property("trace:INV-9", "all", mode.value, "proved", trace_monotone(mode)))
    for mode in MODES:
        props.append(Property("trace:INV-10", "all", mode.value, "proved", totals_are_sums(mode)))
    for mode in MODES:
        props.append(
            Property("event:block", "rfc", mode.value, "proved", evp.block_preserved(mode))
        )
        props.append(
            Property("event:close", "all", mode.value, "proved", evp.close_preserved(mode))
        )
        props.append(
            Property("event:discard", "rfc", mode.value, "proved", evp.discard_verified(mode))
        )
    props += [
        Property("story:sync-async", "rfc", "both", "proved", evp.story_sync_async),
        Property("theorem:sync-async", "rfc", "both", "proved", theorem_sync_async),
        Property("metrics:bounds", "rfc", "both", "proved", metric_bounds),
        Property("metrics:identities", "rfc", "both", "proved", evp.metric_identities),
        Property("merge:monoid", "all", "both", "proved", merge_laws),
        # [LX-1] legacy drafted >= verified: proved in sync, refuted in async
        Property(
            "legacy:drafted>=verified",
            "vllm-legacy",
            "sync",
            "proved",
            legacy_drafted_verified(Mode.SYNC),
        ),
        Property(
            "legacy:drafted>=verified",
            "vllm-legacy",
            "async",
            "refuted",
            legacy_drafted_verified(Mode.ASYNC),
        ),
        # [LX-2] legacy num_drafts equal under sync and async: refuted
        Property(
            "legacy:sync-async-spec-steps", "vllm-legacy", "both", "refuted", legacy_spec_steps
        ),
    ]
    for mode in MODES:
        props.append(
            Property(
                "vllm-0.34:drafted>=verified", "vllm-0.34", mode.value, "proved", vllm034(mode)
            )
        )
    return props
