"""spectally.engine_bridge: real engines' step logs, read, replayed against the reference, and
recorded.

One folder per stage of a log's trip (docs/architecture.md), each importing only the stages
below it: ``steplog`` (the format both ways), ``importers`` (metrics and log lines of the
engines' own), ``replay`` (one log, judged), the drivers ``fleet``, ``synth`` and ``vllm``,
then ``llamacpp`` and ``observe``, and ``compare`` (replayed logs side by side: parity,
version diff, engines). The commands that call them are ``spectally.commands``. Importing this
package imports none of them.
"""

__all__ = [
    "compare",
    "fleet",
    "importers",
    "llamacpp",
    "observe",
    "replay",
    "steplog",
    "synth",
    "vllm",
]
