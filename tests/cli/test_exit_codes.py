"""The exit-code contract (spectally.exit_codes): each code distinct, severity order total."""

from __future__ import annotations

from spectally.exit_codes import SEVERITY, ExitCode, combine


def test_codes_are_distinct_and_ordered() -> None:
    assert len({int(c) for c in ExitCode}) == len(ExitCode)
    assert set(SEVERITY) == set(ExitCode)


def test_combine_keeps_the_most_severe() -> None:
    assert combine([]) is ExitCode.OK
    assert combine([ExitCode.OK, ExitCode.INCOMPLETE]) is ExitCode.INCOMPLETE
    assert combine([ExitCode.INCOMPLETE, ExitCode.DIVERGENCE]) is ExitCode.DIVERGENCE
    assert combine([ExitCode.DIVERGENCE, ExitCode.BAD_INPUT, ExitCode.OK]) is ExitCode.BAD_INPUT
    assert combine([ExitCode.BAD_INPUT, ExitCode.INTERRUPTED]) is ExitCode.INTERRUPTED
    assert combine([ExitCode.INTERRUPTED, ExitCode.INTERNAL_ERROR]) is ExitCode.INTERNAL_ERROR
