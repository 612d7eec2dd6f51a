"""Replay a step log against the reference (TLA+-style trace validation): the entry point.

`replay_file` runs the columnar checker (columnar.py: typed decoding in chunks, the step
rules of reference/step.py evaluated over whole arrays) and, whenever it cannot vouch for a
log (a divergence, bad input, an event pattern it does not handle), the plain replay through
the reference machine (reference_replay.py), which then produces the report. Verdicts, exit
codes, totals and reports are the reference's in both cases; ``reference=True`` runs the plain
path only.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Iterator, Sequence
from contextlib import ExitStack
from typing import TYPE_CHECKING, Any, BinaryIO, cast

from spectally.exit_codes import Verdict

from ..steplog.profiles import check_profile
from ..steplog.records import BadInput, iter_lines
from ..steplog.source import copy_checked, log_bytes, rereadable
from .options import ReplayOptions
from .report import (
    Divergence,
    ReplayResult,
    explain_shift,
    make_summary,
    render_summary,
    result_json,
)

if TYPE_CHECKING:
    from .reference_replay import Replayer

__all__ = [
    "Divergence",
    "ReplayResult",
    "Replayer",
    "explain_shift",
    "render_summary",
    "replay_file",
    "result_json",
]


def __getattr__(name: str) -> Any:
    """``Replayer``, imported when first asked for: the reference machine it runs loads only
    for a log the columnar checker does not settle (PEP 562)."""
    if name == "Replayer":
        from .reference_replay import Replayer

        return Replayer
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


Lines = Iterable[tuple[int, bytes, bool]]

# A log of fewer (decompressed) bytes goes to the reference replay directly: importing the
# columnar checker (numpy, msgspec, its modules: ~0.11 s of CPU) costs more than the reference
# replay of ~600 records (~6k records/s, benchmarks/bench_replay.py). The verdict and the
# report are the reference's either way. The tests set it to 0 (tests/conftest.py), so their
# small logs still run through the columnar checker.
REFERENCE_MAX_BYTES = 64 << 10


def _counted(lines: Lines, bar: Any) -> Iterator[tuple[int, bytes, bool]]:
    n = 0
    for n, line in enumerate(lines, start=1):
        yield line
        if n % 4096 == 0:
            bar.update(4096)
    bar.update(n % 4096)  # the last partial batch: the bar ends at the record count


def _progress_bar(path: str, progress: bool | None) -> Any:
    if progress is None:
        progress = sys.stderr.isatty()
    if not progress:
        return None
    from tqdm import tqdm

    return tqdm(desc=path, unit=" records", unit_scale=True, file=sys.stderr, mininterval=0.5)


def replay_file(
    path: str,
    options: ReplayOptions | None = None,
    *,
    progress: bool | None = None,
    lines: Lines | None = None,
    **option: Any,
) -> ReplayResult:
    """Replay one log (``-`` = stdin) under ``options`` (`ReplayOptions`; any of its fields may
    also be given by name, ``replay_file(path, reference=True)``, and then overrides it).
    ``lines`` overrides reading ``path`` (tests, benchmarks). ``reference`` (or
    ``check_invariants``, which checks every event) runs the plain reference replay only;
    otherwise the columnar checker runs first and hands any log it cannot vouch for to the
    reference replay, which then writes the report. ``force_profile`` counts the log under that
    profile whatever its header's engine version (``--force-profile``; the report says so);
    ValueError if it names no profile, TypeError for a name that is no option."""
    opts = ReplayOptions.of(options, option)
    if opts.force_profile is not None:
        check_profile(opts.force_profile)
    if (
        opts.reference
        or opts.check_invariants
        or not (lines is None or isinstance(lines, Sequence))
        or (lines is None and _small(path))
    ):
        return replay_reference(path, opts, progress=progress, lines=lines)
    from .columnar.judge import replay_columnar

    with ExitStack() as stack:
        source = path
        if lines is None and not rereadable(path):  # read twice at most: keep it in a file
            try:
                source = _spool(path, stack)
            except BadInput as exc:
                return ReplayResult(path, Verdict.BAD_INPUT, [], exc, {}, [], None)
        bar = _progress_bar(path, progress)
        if bar is not None:
            stack.callback(bar.close)
        result = replay_columnar(
            path,
            source=source,
            metrics=opts.metrics,
            lines=lines,
            bar=bar,
            force_profile=opts.force_profile,
            run_bytes=opts.run_bytes,
        )
        if result is not None:
            return result
        if bar is not None:
            bar.reset()
            bar.set_description(f"{path} (reference)")
        return replay_reference(
            path,
            opts,
            progress=False,
            lines=lines if lines is not None else _renamed(iter_lines(source), source, path),
            bar=bar,
        )


def _small(path: str) -> bool:
    """Whether ``path`` is a file under `REFERENCE_MAX_BYTES` (decompressed)."""
    size = log_bytes(path)
    return size is not None and size < REFERENCE_MAX_BYTES


def _spool(path: str, stack: ExitStack) -> str:
    """A temporary copy of a stream the columnar checker and then the reference replay may
    both read (stdin, a pipe, a FIFO, process substitution's ``/dev/fd/N``): read once,
    decompressed, 1 MiB at a time, under the line limit (`source.copy_checked`, so an endless
    stream ends with exit 2); removed when ``stack`` closes. A stream that cannot be opened is
    `BadInput` (exit 2) as every reader reports it."""
    import tempfile  # here, for stdin and pipes: a replay of a file skips its import

    spool = stack.enter_context(tempfile.NamedTemporaryFile(prefix="spectally-"))  # noqa: SIM115
    try:
        copy_checked(path, cast(BinaryIO, spool))
    except OSError as exc:
        raise BadInput(path, 1, 1, f"cannot read: {exc.strerror or exc}") from None
    spool.flush()
    return spool.name


def _renamed(lines: Lines, source: str, path: str) -> Iterator[tuple[int, bytes, bool]]:
    """``lines`` of the spooled copy, with its stream errors naming the original ``path``."""
    try:
        yield from lines
    except BadInput as exc:
        if exc.path != source:
            raise
        raise BadInput(path, exc.line, exc.column, exc.reason) from None


def replay_reference(
    path: str,
    options: ReplayOptions | None = None,
    *,
    progress: bool | None = None,
    lines: Lines | None = None,
    bar: Any = None,
    **option: Any,
) -> ReplayResult:
    """The plain replay: every record through the reference machine, one event at a time
    (``options`` and ``option`` as `replay_file` takes them; ``reference`` changes nothing)."""
    from .reference_replay import Replayer, StopReplay

    opts = ReplayOptions.of(options, option)
    replayer = Replayer(
        path,
        max_divergences=opts.max_divergences,
        check_invariants=opts.check_invariants,
        metrics=opts.metrics,
        force_profile=opts.force_profile,
    )
    bad: BadInput | None = None
    source: Lines = iter_lines(path) if lines is None else lines
    own_bar = bar is None
    if own_bar:
        bar = _progress_bar(path, progress)
    if bar is not None:
        source = _counted(source, bar)
    try:
        try:
            replayer.feed_lines(source)
            replayer.finish()
        except StopReplay:
            # A divergence verdict is trusted only once the whole stream reads back intact
            # (a corrupt gzip member must be bad input, not a divergence).
            for _ in source:
                pass
    except BadInput as exc:
        bad = exc
    except OSError as exc:
        bad = BadInput(path, max(replayer.line, 1), 1, f"cannot read: {exc.strerror or exc}")
    finally:
        if bar is not None and own_bar:
            bar.close()
    if bad is not None:
        status = Verdict.BAD_INPUT
    elif replayer.divergences:
        status = Verdict.DIVERGE
    elif replayer.totals_record is None:
        status = Verdict.INCOMPLETE
    else:
        status = Verdict.AGREE
    summary: dict[str, Any] = {}
    totals = None
    if replayer.header is not None and replayer.engine is not None and bad is None:
        totals = replayer.engine.totals
        summary = make_summary(path, replayer.header, replayer.tally, totals, opts.force_profile)
    return ReplayResult(path, status, replayer.divergences, bad, summary, replayer.notes, totals)
