"""vLLM 0.32, async + structured output + adaptive verification: drafted is the scheduled
drafts minus the grammar-invalid ones, although AV sent the invalid ones to the target.
The RFC's own row: it breaks drafted >= verified."""


def counts(proposed: int, grammar_valid: int, av_verify: int) -> tuple[int, int]:
    """(drafted, verified) of one async block, as vLLM 0.32 counts drafted.

    pre: 0 <= grammar_valid <= proposed <= 8
    pre: 0 <= av_verify <= proposed
    post: __return__[0] >= __return__[1]
    """
    verified = av_verify  # AV decides before the grammar runs
    invalid = proposed - grammar_valid  # num_invalid_spec_tokens
    drafted = proposed - invalid
    return drafted, verified
