"""spectally.engine_bridge: real engines' step logs, read, replayed against the reference, and
recorded.

One folder per stage of a log's trip (docs/architecture.md), each importing only the stages
below it: ``steplog`` (the format both ways), ``importers`` (metrics and log lines of the
engines' own), ``replay`` (one log, judged), the drivers ``fleet``, ``synth``, ``vllm``,
``parity`` and ``version_diff``, then ``llamacpp`` and ``observe``, and ``cli``, the commands'
code. Importing this package imports none of them.
"""

__all__ = [
    "cli",
    "fleet",
    "importers",
    "llamacpp",
    "observe",
    "parity",
    "replay",
    "steplog",
    "synth",
    "version_diff",
    "vllm",
]
