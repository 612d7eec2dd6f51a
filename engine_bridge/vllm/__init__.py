"""spectally.engine_bridge.vllm: record step logs from real vLLM engines.

Two worlds, one package each:

- ``recorder/``: the code that runs inside vLLM (the recording scheduler, the worker hook,
  the RFC-counter backport, the CPU plugins);
- ``capture/``: the code that drives vLLM from outside (building its environment, fetching
  its sources, running captures, servers, soaks and simulated model runners, and checking the
  committed fixtures).

Only some submodules import vLLM / torch; importing this package or its two packages does not.
"""

__all__ = ["capture", "recorder"]
