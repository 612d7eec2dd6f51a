"""The acceptance rate is undefined (None) when nothing was drafted; otherwise the exact ratio
(numerator, denominator), like reference/metrics.py's Ratio."""


def acceptance_rate(accepted: int, drafted: int) -> tuple[int, int] | None:
    """accepted / drafted as (numerator, denominator), None when undefined.

    pre: 0 <= accepted <= drafted
    post: (__return__ is None) == (drafted == 0)
    """
    if drafted == 0:
        return None
    return (accepted, drafted)
