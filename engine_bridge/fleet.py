"""Fleet replay: many step logs (one per engine core, data-parallel rank, replica or day) replayed
on every local core, or on a Ray cluster (`fleet_ray`), with one merged report.

Each log is independent, so the unit of work is one whole file: a worker runs exactly the
sequential `replay_file` on it and turns the `ReplayResult` into plain data (`FileOutcome`: the
rendered report, the JSON view, the reference `Counters`, the header's engine and config). The
parent only orders and merges; it never replays. So a file's verdict, report and exit code are
those of a sequential run by construction, and results come back in input order whatever the
scheduling.

Totals of the logs that agree are merged with the reference's own ``Counters.merge`` (rfc_merge,
legacy_merge, position_merge: the monoid whose laws the proofs check), for the fleet and per
engine. Logs with different k merge at the largest k: a log with k drafts per step has nothing
at positions >= k, so its per-position counters are padded with ``position_zero``.

Local workers: the standard library's `concurrent.futures.ProcessPoolExecutor` (why, rather than
multiprocessing.Pool, joblib or xargs -P: docs/fleet.md). Workers are started once per run from a
fork server that has already imported the replay modules, then reused for every file, so the
~1 s interpreter + import start-up is paid once per worker, not once per file.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import stat
import tempfile
import traceback
from collections.abc import Callable, Generator, Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from dataclasses import dataclass, field
from typing import Any, cast

from spectally.exit_codes import ExitCode, combine
from spectally.reference.arith import INT_ARITH
from spectally.reference.counters import Counters, position_zero
from spectally.reference.metrics import derived_metrics, legacy_metrics

from .replay import SHIFT_TERMS, Shift, explain_shift, render_summary, replay_file, result_json

# Modules every worker needs; the fork server imports them once, workers inherit them.
PRELOAD = ["spectally.engine_bridge.fleet", "spectally.engine_bridge.replay"]
STATUS_WORDS = {
    "agree": "AGREE",
    "diverge": "DIVERGE",
    "bad_input": "BAD INPUT",
    "incomplete": "INCOMPLETE",
    "internal_error": "INTERNAL ERROR",
}


def usable_cores() -> int:
    """The cores this process may run on (CPU affinity / cgroup cpusets), not the machine's."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - no sched_getaffinity (macOS, Windows)
        return os.cpu_count() or 1


@dataclass(frozen=True)
class ReplayOptions:
    """`replay_file`'s options, the same for every file of a fleet."""

    max_divergences: int = 1
    metrics: str | None = None
    check_invariants: bool = False


@dataclass(frozen=True)
class EngineInfo:
    """What the header says about the engine that wrote a log: the per-engine breakdown's key."""

    engine_index: int | None
    engine: str
    profile: str | None
    scheduling: str
    k: int
    spec_method: str
    structured_outputs_backend: str | None
    adaptive_verification: bool
    drop_stale_output: bool

    def label(self) -> str:
        index = "engine ?" if self.engine_index is None else f"engine {self.engine_index}"
        return (
            f"{index}: {self.engine}, {self.profile or 'no'} profile, {self.scheduling},"
            f" k={self.k}, {self.spec_method}, SO {self.structured_outputs_backend or 'off'},"
            f" AV {'on' if self.adaptive_verification else 'off'},"
            f" drop_stale_output {str(self.drop_stale_output).lower()}"
        )

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass(frozen=True)
class FileOutcome:
    """One replayed file as plain, picklable data (a `ReplayResult` holds a `BadInput`, whose
    pickled form does not rebuild, so nothing but this crosses a process boundary)."""

    path: str
    status: str
    exit_code: int
    report: str  # render_summary(result): exactly what a sequential run prints for this file
    report_to_stderr: bool  # bad input goes to stderr, like the sequential command
    result: dict[str, Any]  # result_json(result)
    totals: Counters | None
    shift_terms: dict[str, int] | None
    engine: EngineInfo | None
    first_divergence: str | None  # first line of the first divergence / the bad-input message


def regular_file(path: str) -> bool:
    """A path that can be opened twice and by another process: not stdin, a pipe or a device."""
    if path == "-":
        return False
    try:
        return stat.S_ISREG(os.stat(path).st_mode)
    except OSError:
        return True  # missing or unreadable: any worker reports it the same way


def read_engine_info(path: str) -> EngineInfo | None:
    """The header of a regular file (read again: `ReplayResult` does not carry it); None when
    the first line is not a valid header (the replay itself reports why)."""
    from .records import BadInput, iter_lines, parse_line
    from .translate import Header

    if not regular_file(path):
        return None
    try:
        # iter_lines is a generator: close it now, so the file is not left open until collected
        lines = cast("Generator[tuple[int, bytes, bool], None, None]", iter_lines(path))
        try:
            first = next(lines, None)
        finally:
            lines.close()
        if first is None:
            return None
        rec = parse_line(path, *first)
        if rec.get("record") != "header":
            return None
        h = Header.from_record(rec)
    except (BadInput, OSError, ValueError, KeyError, TypeError):
        return None
    return EngineInfo(
        engine_index=h.engine_index,
        engine=f"{h.engine} {h.engine_version}",
        profile=h.profile,
        scheduling=h.mode.value,
        k=h.k,
        spec_method=h.spec_method,
        structured_outputs_backend=h.structured_outputs_backend,
        adaptive_verification=h.adaptive_verification,
        drop_stale_output=h.drop_stale_output,
    )


def internal_error(path: str, exc: Exception) -> FileOutcome:
    """A bug while replaying one file: one line naming the full report; the other files go on."""
    fd, report_path = tempfile.mkstemp(prefix="spectally-internal-", suffix=".txt")
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(f"spectally replay {path}\n")
        f.write("".join(traceback.format_exception(exc)))
    line = (
        f"{path}: internal error: {type(exc).__name__}: {exc}"
        f" (full report: {report_path}; please report it)"
    )
    return FileOutcome(
        path=path,
        status="internal_error",
        exit_code=int(ExitCode.INTERNAL_ERROR),
        report=line,
        report_to_stderr=True,
        result={
            "path": path,
            "status": "internal_error",
            "exit_code": int(ExitCode.INTERNAL_ERROR),
            "internal_error": line,
            "report": report_path,
        },
        totals=None,
        shift_terms=None,
        engine=None,
        first_divergence=line,
    )


def replay_one(path: str, options: ReplayOptions, progress: bool | None = False) -> FileOutcome:
    """Replay one file exactly as the sequential command does; the unit of work of every backend
    (in-process, local worker process, Ray task)."""
    try:
        engine = read_engine_info(path)
        result = replay_file(
            path,
            max_divergences=options.max_divergences,
            metrics=options.metrics,
            check_invariants=options.check_invariants,
            progress=progress,
        )
        first: str | None = None
        if result.bad_input is not None:
            first = str(result.bad_input)
        elif result.divergences:
            first = result.divergences[0].render().split("\n", 1)[0]
        shift = result.summary.get("shift")
        return FileOutcome(
            path=path,
            status=result.status,
            exit_code=result.exit_code,
            report=render_summary(result),
            report_to_stderr=result.bad_input is not None,
            result=result_json(result),
            totals=result.totals,
            shift_terms=dict(shift["terms"]) if shift else None,
            engine=engine,
            first_divergence=first,
        )
    except Exception as exc:  # a bug, not an input problem: this file's verdict is "internal"
        return internal_error(path, exc)


# -- local backend -------------------------------------------------------------------------------


def _ignore_sigint() -> None:
    """Worker initializer: Ctrl-C is the parent's to handle (it stops the workers itself), so a
    worker never dies half-way through a report with its own KeyboardInterrupt traceback."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def mp_context() -> multiprocessing.context.BaseContext:
    """A fork server where the platform has one (safe with threads in the parent, and its
    workers fork from a process that already imported the replay), else spawn."""
    if "forkserver" in multiprocessing.get_all_start_methods():
        ctx = multiprocessing.get_context("forkserver")
        ctx.set_forkserver_preload(PRELOAD)
        return ctx
    return multiprocessing.get_context("spawn")  # pragma: no cover - no fork server (Windows)


def _largest_first(paths: Sequence[str], indices: list[int]) -> list[int]:
    """Submission order: the biggest files first, so no worker starts a long file last while
    the others sit idle (the report order is the input order regardless)."""

    def size(i: int) -> int:
        try:
            return os.stat(paths[i]).st_size
        except OSError:
            return 0

    return sorted(indices, key=lambda i: (-size(i), i))


def _in_order(n: int, ready: Iterator[tuple[int, FileOutcome]]) -> Iterator[FileOutcome]:
    """Yield outcomes in input order as soon as each one and all before it are done."""
    held: dict[int, FileOutcome] = {}
    nxt = 0
    for i, outcome in ready:
        held[i] = outcome
        while nxt in held:
            yield held.pop(nxt)
            nxt += 1
    assert nxt == n, f"{n - nxt} outcomes missing"


def _stop(pool: ProcessPoolExecutor) -> None:
    """Cancel what has not started and end the running workers (Ctrl-C, or an error here)."""
    pool.shutdown(wait=False, cancel_futures=True)
    processes = getattr(pool, "_processes", None) or {}
    for proc in list(processes.values()):
        if proc.is_alive():
            proc.terminate()


def replay_local(
    paths: Sequence[str],
    options: ReplayOptions,
    jobs: int,
    progress: bool | None = None,
) -> Iterator[FileOutcome]:
    """Every file's outcome, in input order, replayed by up to ``jobs`` worker processes.

    ``jobs <= 1`` (or a single file) replays in this process, one file after another: the
    sequential command. Stdin and other non-regular files (pipes) can be read once and only by
    this process, so they are always replayed here, while the workers run.
    """
    shippable = [i for i, p in enumerate(paths) if regular_file(p)]
    if jobs <= 1 or len(shippable) <= 1:
        for path in paths:
            yield replay_one(path, options, progress)
        return
    shipped = set(shippable)
    here = [i for i in range(len(paths)) if i not in shipped]
    yield from _in_order(len(paths), _pooled(paths, shippable, here, options, jobs))


def _pooled(
    paths: Sequence[str], shippable: list[int], here: list[int], options: ReplayOptions, jobs: int
) -> Iterator[tuple[int, FileOutcome]]:
    pool = ProcessPoolExecutor(
        max_workers=min(jobs, len(shippable)), mp_context=mp_context(), initializer=_ignore_sigint
    )
    try:
        futures: dict[Future[FileOutcome], int] = {
            pool.submit(replay_one, paths[i], options): i for i in _largest_first(paths, shippable)
        }
        for i in here:
            yield i, replay_one(paths[i], options, False)
        pending = set(futures)
        while pending:
            done, pending = wait(pending, return_when=FIRST_COMPLETED)
            for fut in done:
                i = futures[fut]
                try:
                    yield i, fut.result()
                except Exception as exc:  # the worker process died (killed, out of memory)
                    yield i, internal_error(paths[i], exc)
    except BaseException:  # Ctrl-C, or the consumer stopped early: leave no worker behind
        _stop(pool)
        raise
    pool.shutdown(wait=True)


# -- the fleet summary ---------------------------------------------------------------------------


def widen(c: Counters, k: int) -> Counters:
    """``c`` at a larger k: positions >= c.k are zero (no draft of a k-token proposal is there)."""
    if c.k == k:
        return c
    pad = tuple(position_zero(INT_ARITH) for _ in range(k - c.k))
    return Counters(k=k, rfc=c.rfc, legacy=c.legacy, positions=(*c.positions, *pad))


def merge_totals(parts: Sequence[Counters]) -> Counters | None:
    """The reference's merge over ``parts`` (at the largest k), or None for no parts."""
    if not parts:
        return None
    k = max(c.k for c in parts)
    total = Counters.zero(k)
    for c in parts:
        total = total.merge(widen(c, k))
    return total


def merge_shift(terms: Sequence[dict[str, int]]) -> Shift:
    s = Shift()
    for t in terms:
        s.add(tuple(t[name] for name in SHIFT_TERMS))
    return s


def _counts(outcomes: Sequence[FileOutcome]) -> dict[str, int]:
    out: dict[str, int] = {}
    for o in outcomes:
        out[o.status] = out.get(o.status, 0) + 1
    return out


def _totals_view(totals: Counters | None, merged_files: int) -> dict[str, Any] | None:
    if totals is None:
        return None
    d = totals.to_dict()
    return {
        "merged_logs": merged_files,
        "k": totals.k,
        "totals": {"vllm-legacy": d["vllm-legacy"], "rfc": d["rfc"]},
        "metrics": {"vllm-legacy": legacy_metrics(totals), "rfc": derived_metrics(totals)},
    }


def _engine_sort_key(info: EngineInfo | None) -> tuple[int, int, str]:
    if info is None:
        return (2, 0, "")
    if info.engine_index is None:
        return (1, 0, info.label())
    return (0, info.engine_index, info.label())


@dataclass
class _Group:
    info: EngineInfo | None
    files: list[FileOutcome] = field(default_factory=list)


def check_scrape(
    outcomes: Sequence[FileOutcome], merged: Counters | None, metrics: str
) -> dict[str, Any]:
    """The merged vllm-legacy totals against the last scrape summed over all its ``engine``
    label sets: every engine the scrape counted must be covered by the logs (each log was
    already checked against its own engine's series by its replay). Only judged when every
    log agrees; otherwise the merged totals miss the failing logs' counts."""
    from .importers.prometheus import read_scrapes, spec_totals

    if merged is None or any(o.status != "agree" for o in outcomes):
        return {"scrape": metrics, "checked": False, "why": "not every log agrees"}
    scrapes = read_scrapes([metrics])
    if not scrapes:
        return {"scrape": metrics, "checked": False, "why": "no Prometheus samples found"}
    last = scrapes[-1]
    scraped = spec_totals(last, merged.k)
    expected = (
        merged.legacy.num_drafts,
        merged.legacy.num_draft_tokens,
        merged.legacy.num_accepted_tokens,
        list(merged.per_position("legacy_accepted")),
    )
    engines = sorted({dict(labels).get("engine", "") for labels in last.series})
    names = ("num_drafts", "num_draft_tokens", "num_accepted_tokens", "num_accepted_tokens_per_pos")
    return {
        "scrape": f"{last.path}:{last.line}",
        "checked": True,
        "agree": tuple(scraped) == expected,
        "scrape_engines": engines,
        "log_engines": sorted(
            {str(o.engine.engine_index) for o in outcomes if o.engine is not None}
        ),
        "counters": [
            {"name": n, "merged_logs": e, "scrape_all_engines": a}
            for n, e, a in zip(names, expected, scraped, strict=True)
        ],
    }


def fleet_summary(outcomes: Sequence[FileOutcome], metrics: str | None = None) -> dict[str, Any]:
    """The fleet report as JSON-ready data: per-file verdicts, merged totals (both profiles),
    the per-engine breakdown, each failing file's first divergence, the fleet's legacy -> rfc
    shift, and with ``metrics`` the merged totals against the scrape's engines summed. Built
    from the outcomes in input order only, so it does not depend on scheduling."""
    agreeing = [o for o in outcomes if o.status == "agree" and o.totals is not None]
    merged = merge_totals([o.totals for o in agreeing if o.totals is not None])
    groups: dict[EngineInfo | None, _Group] = {}
    for o in outcomes:
        groups.setdefault(o.engine, _Group(o.engine)).files.append(o)
    engines = []
    for info in sorted(groups, key=_engine_sort_key):
        g = groups[info]
        ok = [o.totals for o in g.files if o.status == "agree" and o.totals is not None]
        engines.append(
            {
                "engine": None if info is None else info.to_dict(),
                "label": "no valid header" if info is None else info.label(),
                "logs": [o.path for o in g.files],
                "statuses": _counts(g.files),
                "merged": _totals_view(merge_totals(ok), len(ok)),
            }
        )
    shift = None
    if merged is not None:
        shift = explain_shift(
            merged, merge_shift([o.shift_terms for o in agreeing if o.shift_terms is not None])
        )
    codes = [ExitCode(o.exit_code) for o in outcomes]
    scrape = None
    if metrics is not None:
        scrape = check_scrape(outcomes, merged, metrics)
        if scrape["checked"] and not scrape["agree"]:
            codes.append(ExitCode.DIVERGENCE)
    return {
        "logs": len(outcomes),
        "agree": sum(1 for o in outcomes if o.status == "agree"),
        "statuses": _counts(outcomes),
        "exit_code": int(combine(codes)),
        "files": [
            {
                "path": o.path,
                "status": o.status,
                "exit_code": o.exit_code,
                "engine_index": None if o.engine is None else o.engine.engine_index,
                "first_divergence": o.first_divergence,
            }
            for o in outcomes
        ],
        "merged": _totals_view(merged, len(agreeing)),
        "excluded_from_totals": [o.path for o in outcomes if o.status != "agree"],
        "engines": engines,
        "shift": shift,
        "metrics": scrape,
    }


def _logs(n: int) -> str:
    return f"{n} log" if n == 1 else f"{n} logs"


def _num(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.3f}"


def _totals_lines(view: dict[str, Any], indent: str) -> list[str]:
    lg, rfc = view["totals"]["vllm-legacy"], view["totals"]["rfc"]
    mlg, mrfc = view["metrics"]["vllm-legacy"], view["metrics"]["rfc"]
    return [
        f"{indent}                       vllm-legacy          rfc",
        f"{indent}spec steps           {lg['spec_steps']:>13}  {rfc['spec_steps']:>11}",
        f"{indent}drafted              {lg['drafted']:>13}  {rfc['drafted']:>11}",
        f"{indent}verified             {'-':>13}  {rfc['verified']:>11}",
        f"{indent}accepted             {lg['accepted']:>13}  {rfc['accepted']:>11}",
        f"{indent}acceptance rate      {_num(mlg['acceptance_rate']):>13}"
        f"  {_num(mrfc['acceptance_rate']):>11}",
        f"{indent}mean accept. length  {_num(mlg['mean_acceptance_length']):>13}"
        f"  {_num(mrfc['mean_acceptance_length']):>11}",
        f"{indent}accepted per pos     {lg['per_position']['accepted']}"
        f"  {rfc['per_position']['accepted']}",
    ]


def _scrape_lines(scrape: dict[str, Any]) -> list[str]:
    if not scrape["checked"]:
        return [f"fleet metrics ({scrape['scrape']}): not checked: {scrape['why']}"]
    verdict = "AGREE" if scrape["agree"] else "DIVERGE"
    out = [
        f"fleet metrics: {verdict}: merged vllm-legacy totals of the logs (engines"
        f" {', '.join(scrape['log_engines']) or '-'}) vs the last scrape summed over its engine"
        f" labels ({', '.join(scrape['scrape_engines']) or '-'}) at {scrape['scrape']}"
    ]
    for c in scrape["counters"]:
        mark = "" if c["merged_logs"] == c["scrape_all_engines"] else "   <-- differs"
        out.append(f"  {c['name']:<28} {c['merged_logs']!s:<16} {c['scrape_all_engines']!s}{mark}")
    return out


def render_fleet(summary: dict[str, Any]) -> str:
    """The fleet report printed after the per-file reports (text form of `fleet_summary`)."""
    out = [f"fleet: {_logs(summary['logs'])}"]
    width = max(len(f["path"]) for f in summary["files"])
    for f in summary["files"]:
        engine = "engine ?" if f["engine_index"] is None else f"engine {f['engine_index']}"
        out.append(f"  {f['path'].ljust(width)}  {STATUS_WORDS[f['status']]:<14} {engine}")
        if f["first_divergence"] is not None and f["status"] != "agree":
            out.append(f"    first: {f['first_divergence']}")
    out.append("per engine (header engine_index and config):")
    for e in summary["engines"]:
        statuses = ", ".join(f"{n} {s.replace('_', ' ')}" for s, n in e["statuses"].items())
        out.append(f"  {e['label']}: {_logs(len(e['logs']))} ({statuses})")
        if e["merged"] is not None:
            out.extend(_totals_lines(e["merged"], "    "))
    merged = summary["merged"]
    if merged is None:
        out.append("fleet totals: no log agrees, nothing to merge")
    else:
        out.append(
            f"fleet totals of the {merged['merged_logs']} agreeing logs (the reference's"
            f" Counters.merge, k={merged['k']}):"
        )
        out.extend(_totals_lines(merged, "  "))
        if summary["excluded_from_totals"]:
            n = len(summary["excluded_from_totals"])
            out.append(f"  not merged: {_logs(n)} without a verdict of agreement")
        out.append("fleet shift legacy → rfc:")
        shift = summary["shift"]
        for key in ("acceptance_rate", "mean_acceptance_length"):
            out.append(f"  {shift[key]['why']}")
        for key in ("drafted", "spec_steps"):
            item = shift[key]
            out.append(f"  {key} {item['vllm-legacy']} → {item['rfc']}: {item['why']}")
    scrape = summary["metrics"]
    if scrape is not None:
        out.extend(_scrape_lines(scrape))
    out.append(f"{summary['agree']} of {summary['logs']} logs agree with the reference")
    return "\n".join(out)


def run_fleet(
    paths: Sequence[str],
    options: ReplayOptions,
    *,
    jobs: int,
    ray_address: str | None = None,
    progress: bool | None = None,
    on_outcome: Callable[[FileOutcome], None] | None = None,
) -> list[FileOutcome]:
    """Replay ``paths`` locally (``jobs`` processes) or as Ray tasks (``ray_address``); every
    outcome in input order, each passed to ``on_outcome`` as soon as it and those before it are
    done (so reports stream like a sequential run's)."""
    if ray_address is not None:
        from .fleet_ray import replay_ray

        source: Iterator[FileOutcome] = replay_ray(paths, options, ray_address)
    else:
        source = replay_local(paths, options, jobs, progress)
    outcomes: list[FileOutcome] = []
    for outcome in source:
        outcomes.append(outcome)
        if on_outcome is not None:
            on_outcome(outcome)
    return outcomes
