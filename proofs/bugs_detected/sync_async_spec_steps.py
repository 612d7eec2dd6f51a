"""vLLM 0.32 counts a spec step when the scheduled draft list is non-empty. Sync validates
the grammar before scheduling (an all-invalid draft leaves nothing to schedule); async
schedules placeholders first. The two modes disagree when every draft is grammar-invalid."""


def spec_steps(proposed: int, grammar_valid: int) -> tuple[int, int]:
    """(sync, async) spec steps of one block.

    pre: 0 <= grammar_valid <= proposed <= 8
    post: __return__[0] == __return__[1]
    """
    sync = 1 if grammar_valid > 0 else 0
    asynchronous = 1 if proposed > 0 else 0
    return sync, asynchronous
