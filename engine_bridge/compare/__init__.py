"""spectally.engine_bridge.compare: replayed logs side by side.

- ``parity``: a sync run and an async run of the same workload, request by request (the RFC's
  promise that spec steps do not depend on the scheduling mode);
- ``version_diff``: one log counted under every release's counting profile (what an upgrade
  does to the engine's own counters);
- ``engines``: two engines' (or releases') acceptance figures, comparable as reported or not,
  in the RFC's terms.

Each replays its logs first (``replay``) and reads them with ``steplog``; the commands that
print them are in ``spectally.commands``. Importing this package imports none of them.
"""

__all__ = ["engines", "parity", "version_diff"]
