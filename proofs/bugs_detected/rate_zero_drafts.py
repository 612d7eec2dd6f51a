"""An acceptance rate that reports 0 when nothing was drafted, so "no drafts" looks like
"nothing accepted" (SPEC.md: the rate is undefined, reported as null). The rate is returned as
an exact ratio (numerator, denominator), like reference/metrics.py's Ratio."""


def acceptance_rate(accepted: int, drafted: int) -> tuple[int, int] | None:
    """accepted / drafted as (numerator, denominator), None when undefined.

    pre: 0 <= accepted <= drafted
    post: (__return__ is None) == (drafted == 0)
    """
    if drafted == 0:
        return (0, 1)
    return (accepted, drafted)
