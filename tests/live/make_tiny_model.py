"""Build a tiny random-weight Qwen2 model and tokenizer in a folder, for the live vLLM suite.

Nothing is downloaded: the tokenizer is a byte-level BPE trained here on generated text, the weights
are random. head_dim is 64 because vLLM's CPU attention kernel rejects smaller heads.

Run with the live virtualenv's Python (it has torch, transformers and tokenizers):
    .venv-live/bin/python tests/live/make_tiny_model.py OUT_DIR
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

VOCAB_SIZE = 512
HIDDEN_SIZE = 128
HEADS = 2  # head_dim = HIDDEN_SIZE / HEADS = 64
LAYERS = 2
MAX_POSITIONS = 2048
CHAT_TEMPLATE = (
    "{% for message in messages %}<|{{ message['role'] }}|>{{ message['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% endif %}"
)


def _training_text() -> list[str]:
    words = "the quick brown fox jumps over lazy dog capacity restored grant drain wake sleep engine".split()
    return [" ".join(words[(i * 7 + j) % len(words)] for j in range(40)) for i in range(200)]


def build(out: Path) -> None:
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM

    out.mkdir(parents=True, exist_ok=True)
    tokenizer = Tokenizer(models.BPE(unk_token=None))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE,
        special_tokens=["<|endoftext|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tokenizer.train_from_iterator(_training_text(), trainer=trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tokenizer, eos_token="<|endoftext|>", pad_token="<|endoftext|>")
    fast.chat_template = CHAT_TEMPLATE
    fast.model_max_length = MAX_POSITIONS
    fast.save_pretrained(out)

    torch.manual_seed(0)
    config = Qwen2Config(
        vocab_size=VOCAB_SIZE,
        hidden_size=HIDDEN_SIZE,
        intermediate_size=256,
        num_hidden_layers=LAYERS,
        num_attention_heads=HEADS,
        num_key_value_heads=HEADS,
        max_position_embeddings=MAX_POSITIONS,
        eos_token_id=fast.eos_token_id,
        bos_token_id=fast.eos_token_id,
        tie_word_embeddings=True,
        torch_dtype="float32",
    )
    model = Qwen2ForCausalLM(config)
    model.save_pretrained(out, safe_serialization=True)
    (out / "restorelens-tiny.json").write_text(json.dumps({"vocab_size": VOCAB_SIZE, "head_dim": HIDDEN_SIZE // HEADS}))


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: make_tiny_model.py OUT_DIR")
    build(Path(sys.argv[1]))
    print(f"tiny model written to {sys.argv[1]}")
