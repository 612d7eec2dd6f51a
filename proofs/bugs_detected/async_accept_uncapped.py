"""Async acceptance that forgets the grammar: drafts the target verified but the grammar
rejected are still eligible, so more drafts can be accepted than are grammar-valid."""


def eligible(proposed: int, grammar_valid: int, verified: int) -> int:
    """Drafts the target may accept in async mode.

    pre: 0 <= grammar_valid <= proposed <= 8
    pre: 0 <= verified <= proposed
    post: __return__ <= grammar_valid
    post: __return__ <= verified
    """
    return verified
