"""Async acceptance capped by the grammar: only verified and grammar-valid drafts are eligible."""


def eligible(proposed: int, grammar_valid: int, verified: int) -> int:
    """Drafts the target may accept in async mode.

    pre: 0 <= grammar_valid <= proposed <= 8
    pre: 0 <= verified <= proposed
    post: __return__ <= grammar_valid
    post: __return__ <= verified
    """
    return min(verified, grammar_valid)
