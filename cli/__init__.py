"""spectally: the specification and executable reference of speculative-decoding counters."""

from spectally import moved

__version__ = "0.1.0"

moved.install()  # every module path that moved keeps importing (spectally.moved)
