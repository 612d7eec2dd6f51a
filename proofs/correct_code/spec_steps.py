"""The rfc rule: a block is one spec step when the drafter proposed at least one draft, in
either mode, whatever the grammar does to it."""


def spec_steps(proposed: int, grammar_valid: int) -> tuple[int, int]:
    """(sync, async) spec steps of one block.

    pre: 0 <= grammar_valid <= proposed <= 8
    post: __return__[0] == __return__[1]
    """
    sync = 1 if proposed > 0 else 0
    asynchronous = 1 if proposed > 0 else 0
    return sync, asynchronous
