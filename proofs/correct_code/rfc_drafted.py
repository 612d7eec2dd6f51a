"""The rfc rule for the same async + structured output + AV block: drafted is every proposed
draft, verified what AV sent to the target."""


def counts(proposed: int, grammar_valid: int, av_verify: int) -> tuple[int, int]:
    """(drafted, verified) of one async block, rfc profile.

    pre: 0 <= grammar_valid <= proposed <= 8
    pre: 0 <= av_verify <= proposed
    post: __return__[0] >= __return__[1] >= 0
    """
    verified = av_verify
    drafted = proposed
    return drafted, verified
