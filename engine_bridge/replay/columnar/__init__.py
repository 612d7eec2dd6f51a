"""The columnar checker: the second judge of one log, over whole arrays (numpy, msgspec).

It answers the question the reference replay answers, for logs too large to replay record by
record, and hands any divergence to the reference replay to write. From the bytes up:

- ``reader``: the log in chunks of whole lines, decoded into columns; ``scanner`` takes the
  canonical ``request_step`` lines straight from the bytes (a compiled scanner, for large
  logs), ``array_scan`` the same over whole arrays (numpy, for the others), ``key_bytes``
  the byte counts that let the typed decoder stand for the reference decoder;
- ``jit``: numba, loaded once and only when a compiled kernel is first wanted;
- ``sequence``: the order of records, per request and per step;
- ``blocks``: every block against the step rules, over ``array_arith`` (the step rules'
  arithmetic over whole arrays), with ``hashing`` (the shape table's keys, compiled) and
  ``store`` (columns that grow in place);
- ``judge``: ``replay_columnar``, the judge itself.

``__all__`` below is what code outside the package imports.
"""

from __future__ import annotations

from .judge import replay_columnar

__all__ = ["replay_columnar"]
