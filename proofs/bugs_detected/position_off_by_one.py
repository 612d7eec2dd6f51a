"""A per-position counter that credits position i when i <= length (off by one): the
per-position counts no longer sum to the total."""


def per_position(length: int, k: int) -> list[int]:
    """What one block of ``length`` drafts adds at positions 0..k-1.

    pre: 1 <= k <= 4
    pre: 0 <= length <= k
    post: sum(__return__) == length
    """
    return [1 if i <= length else 0 for i in range(k)]
