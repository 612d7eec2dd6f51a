"""spectally: the specification and executable reference of speculative-decoding counters."""

__version__ = "0.1.0"
