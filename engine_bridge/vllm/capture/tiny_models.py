"""Tiny random-weight Llama models (plus drafters of controlled similarity), built locally.

No model hub: a byte-level BPE tokenizer is trained on local text (this Python's standard
library sources), a 2-layer Llama with head size 64 gets random weights from a fixed seed, and
drafters are derived from it:

========================  ==========================================================
``target``                the model under test
``draft-same``            an exact copy (greedy acceptance 1.0)
``draft-noise02/05/10``   copies with Gaussian weight noise of 2 / 5 / 10 % of each
                          tensor's standard deviation (acceptance falls with the noise)
``draft-unrelated``       an independent random model with the same tokenizer
========================  ==========================================================

Build (seconds; idempotent)::

    python -m spectally.engine_bridge.vllm.capture.tiny_models \\
        --cache ~/.cache/spectally/tiny-models
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import sysconfig
from pathlib import Path

BUILD_VERSION = 1  # bump to rebuild caches when the recipe changes
VOCAB_SIZE = 1024
SEED = 1234
DRAFTERS: dict[str, float | None] = {
    "draft-same": 0.0,
    "draft-noise02": 0.02,
    "draft-noise05": 0.05,
    "draft-noise10": 0.10,
    "draft-unrelated": None,  # independent random init
}
SPECIAL_TOKENS = ["<unk>", "<s>", "</s>", "<pad>"]


def default_cache() -> Path:
    env = os.environ.get("SPECTALLY_TINY_MODELS")
    if env:
        return Path(env).expanduser()
    return Path.home() / ".cache" / "spectally" / "tiny-models"


def _corpus_files(limit: int = 120) -> list[str]:
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    files = sorted(str(p) for p in stdlib.glob("*.py"))
    return files[:limit]


def _build_tokenizer(out: Path) -> None:
    from tokenizers import ByteLevelBPETokenizer
    from transformers import PreTrainedTokenizerFast

    bpe = ByteLevelBPETokenizer()
    bpe.train(
        _corpus_files(),
        vocab_size=VOCAB_SIZE,
        min_frequency=2,
        special_tokens=SPECIAL_TOKENS,
        show_progress=False,
    )
    tok = PreTrainedTokenizerFast(
        tokenizer_object=bpe._tokenizer,
        unk_token="<unk>",
        bos_token="<s>",
        eos_token="</s>",
        pad_token="<pad>",
    )
    tok.model_max_length = 2048
    tok.save_pretrained(str(out))


def _config(vocab_size: int) -> object:
    from transformers import LlamaConfig

    return LlamaConfig(
        vocab_size=vocab_size,
        hidden_size=128,
        intermediate_size=256,
        num_hidden_layers=2,
        num_attention_heads=2,  # head size 64 (what the CPU attention backend supports)
        num_key_value_heads=2,
        max_position_embeddings=1024,
        bos_token_id=1,
        eos_token_id=2,
        pad_token_id=3,
        tie_word_embeddings=False,
        torch_dtype="float32",
    )


def _random_model(vocab_size: int, seed: int) -> object:
    import torch
    from transformers import LlamaForCausalLM

    torch.manual_seed(seed)
    model = LlamaForCausalLM(_config(vocab_size))
    # Default init (std 0.02) gives nearly flat logits; scale the output head up so greedy
    # and sampled generations are peaked enough to be deterministic-ish and to repeat.
    with torch.no_grad():
        model.lm_head.weight.mul_(8.0)
    return model.eval()


def _noisy_copy(model: object, scale: float, seed: int) -> object:
    import copy

    import torch

    clone = copy.deepcopy(model)
    if scale == 0.0:
        return clone
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in clone.parameters():  # type: ignore[attr-defined]
            std = float(p.float().std()) if p.numel() > 1 else 0.0
            if std == 0.0:  # e.g. RMSNorm weights (all ones): perturb relative to 1
                std = float(p.abs().mean()) or 1.0
            p.add_(torch.randn(p.shape, generator=gen, dtype=p.dtype) * (scale * std))
    return clone


def build(cache: Path | None = None, force: bool = False) -> dict[str, Path]:
    """Build every model under ``cache``; return {name: directory}."""
    cache = cache or default_cache()
    names = ["target", *DRAFTERS]
    paths = {name: cache / name for name in names}
    stamp = cache / "BUILD.json"
    want = {"version": BUILD_VERSION, "vocab_size": VOCAB_SIZE, "seed": SEED}
    fresh = stamp.exists() and json.loads(stamp.read_text()) == want
    if not force and fresh and all((p / "config.json").exists() for p in paths.values()):
        return paths
    cache.mkdir(parents=True, exist_ok=True)
    tok_dir = cache / "_tokenizer"
    _build_tokenizer(tok_dir)
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(tok_dir))
    vocab = len(tok)
    target = _random_model(vocab, SEED)
    models = {"target": target}
    for i, (name, noise) in enumerate(DRAFTERS.items()):
        if noise is None:
            models[name] = _random_model(vocab, SEED + 1000)
        else:
            models[name] = _noisy_copy(target, noise, SEED + 1 + i)
    for name, model in models.items():
        model.save_pretrained(str(paths[name]), safe_serialization=True)  # type: ignore[attr-defined]
        tok.save_pretrained(str(paths[name]))
    stamp.write_text(json.dumps(want))
    return paths


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="build the tiny local test models")
    ap.add_argument("--cache", type=Path, default=None)
    ap.add_argument("--force", action="store_true")
    args = ap.parse_args(argv)
    for name, path in build(args.cache, args.force).items():
        print(f"{name}\t{path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
