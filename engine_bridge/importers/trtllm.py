"""TensorRT-LLM's per-iteration ``specDecodingStats``, checked against its own definitions.

Read in source, not run (engine_bridge/engines.py ``TRTLLM``): the PyTorch executor
(``tensorrt_llm/_torch/pyexecutor/py_executor.py`` ``PyExecutor._update_iter_stats``) sums,
over the iteration's generation requests with a draft, ``numDraftTokens`` (each request's draft
length; when ``num_draft_tokens`` is 0 the count of non-zero ``py_draft_tokens``, token id 0
being padding), ``numAcceptedTokens`` (accepted drafts, no bonus) and
``numRequestsWithDraftTokens``, and sets ``acceptanceLength = (accepted + requests) / requests``
(0.0 with no request there; the n-gram drafter's own stats write 1.0). The records come from
``trtllm-serve``'s ``/metrics`` JSON or ``LLM.get_stats()``: a JSON list or NDJSON of iteration
stats, each with ``iter`` and ``specDecodingStats``.

Checks per iteration: 0 <= accepted <= drafted, requests <= drafted (a request counts only with
at least one draft token), requests > 0 when anything was drafted, acceptanceLength equal to
(accepted + requests) / requests (doubles: within 1e-9 relative); over the file, the totals and
the RFC figures they give (accepted / drafted; 1 + accepted / requests per step). A record that
repeats an earlier one exactly (a dump appended to itself) is bad input: its iterations would
enter the totals twice.
"""

from __future__ import annotations

import json
import math
from collections.abc import Hashable
from typing import Any

from ..steplog.limits import MAX_INT
from ..steplog.source import BadInput, json_values, read_text, strict_loads
from .findings import NOTE, OK, VIOLATION, Finding
from .inputs import refuse_second

FIELDS = ("numDraftTokens", "numAcceptedTokens", "numRequestsWithDraftTokens")


def _records(path: str) -> list[tuple[int, Any]]:
    """(line, record) of a JSON list or NDJSON, each record at the line it starts on (a
    pretty-printed list spans many), read as `source.json_values` reads per-request JSON."""
    text = read_text(path)
    if not text.strip():
        raise BadInput(path, 1, 1, "empty input: no iteration stats")
    return json_values(path, text, allow_nan=False)  # NaN: no count, no acceptanceLength


def _count(path: str, no: int, spec: dict[str, Any], name: str) -> int:
    value = spec.get(name)
    if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value <= MAX_INT:
        raise BadInput(path, no, 1, f"specDecodingStats.{name} {value!r} is not a count")
    return value


def _refuse_copy(copies: dict[Hashable, int], path: str, no: int, rec: dict[str, Any]) -> None:
    """`BadInput` at a record identical to an earlier one of the file, its ``iter`` included:
    a dump appended to itself, whose iterations would enter the totals twice (after a restart
    ``iter`` counts again, but the stats of a real iteration are never all the same)."""
    if "iter" not in rec:
        return
    refuse_second(
        copies,
        json.dumps(rec, sort_keys=True),
        path,
        no,
        lambda first: (
            f"iteration {rec['iter']!r} appears twice, the same record both times (first at"
            f" line {first}): counted twice in the totals. A dump appended to itself? Keep one"
            " copy"
        ),
    )


def check_files(paths: list[str]) -> list[Finding]:
    out: list[Finding] = []
    for path in paths:
        totals = [0, 0, 0]
        seen = 0
        copies: dict[Hashable, int] = {}  # each iteration record (as JSON) and its first line
        for no, rec in _records(path):
            if isinstance(rec, str):  # trtllm-serve may return each record JSON-encoded
                rec = strict_loads(path, no, rec)
            if not isinstance(rec, dict):
                raise BadInput(path, no, 1, "an iteration record that is not a JSON object")
            _refuse_copy(copies, path, no, rec)
            spec = rec.get("specDecodingStats")
            if spec is None:
                continue
            if not isinstance(spec, dict):
                raise BadInput(path, no, 1, "specDecodingStats is not an object")
            drafted, accepted, requests = (_count(path, no, spec, n) for n in FIELDS)
            length = spec.get("acceptanceLength")
            if not isinstance(length, float | int) or not math.isfinite(length):
                raise BadInput(path, no, 1, f"acceptanceLength {length!r} is not a number")
            seen += 1
            it = f"iteration {rec.get('iter', '?')}"
            bad: list[tuple[str, str]] = []
            if accepted > drafted:
                bad.append(("accepted <= drafted", f"{accepted} accepted > {drafted} drafted"))
            if requests > drafted:
                bad.append(
                    (
                        "requests <= drafted",
                        f"{requests} requests with drafts but {drafted} draft tokens",
                    )
                )
            if drafted and not requests:
                bad.append(("requests > 0", f"{drafted} draft tokens from 0 requests"))
            if requests:
                exact = (accepted + requests) / requests
                if abs(length - exact) > 1e-9 * exact:
                    bad.append(
                        (
                            "acceptanceLength = (accepted + requests) / requests",
                            f"{length!r} but ({accepted} + {requests}) / {requests} = {exact!r}",
                        )
                    )
            elif length not in (0.0, 1.0):
                bad.append(
                    (
                        "acceptanceLength with no request",
                        f"{length!r}: the executor writes 0.0 (the n-gram drafter 1.0)",
                    )
                )
            out += [Finding(path, no, VIOLATION, c, f"{it}: {m}") for c, m in bad]
            if not bad:
                out.append(
                    Finding(
                        path,
                        no,
                        OK,
                        "trtllm specDecodingStats",
                        f"{it}: {accepted} accepted / {drafted} drafted by {requests} requests,"
                        f" acceptanceLength {length:g}",
                    )
                )
            totals = [totals[0] + drafted, totals[1] + accepted, totals[2] + requests]
        if not seen:
            raise BadInput(path, 1, 1, "no iteration with specDecodingStats")
        drafted, accepted, steps = totals
        if drafted:
            out.append(
                Finding(
                    path,
                    1,
                    NOTE,
                    "trtllm totals",
                    f"{seen} iterations: drafted {drafted}, accepted {accepted}, request-steps"
                    f" {steps}: acceptance rate {accepted / drafted:.4f}, mean acceptance length"
                    f" {1 + accepted / steps:.4f} (RFC terms, if no draft token was id 0: such a"
                    " token is taken for padding when num_draft_tokens is 0)",
                )
            )
    return out
