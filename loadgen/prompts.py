"""Synthetic prompts: filler text of an exact length, reproducible from (seed, request id).

No real data is ever sent. The text only has to have the right size so the engine (simulated or
real) does the right amount of prefill work; ``approx_tokens`` gives the token count a
Qwen2.5-style tokenizer yields for it, from the MoFlux long-context profile's own figures.
"""

from __future__ import annotations

import hashlib

__all__ = ["CHARS_PER_TOKEN", "approx_tokens", "filler_prompt"]

#: metal-long-context-v1: 7,100-character prompts are 1,607 prompt tokens (the MoFlux long-context profile).
CHARS_PER_TOKEN = 7_100 / 1_607

_WORDS = (
    "amber", "basalt", "cedar", "delta", "ember", "fjord", "granite", "harbor", "island", "juniper",
    "kelp", "lagoon", "meadow", "nimbus", "orchard", "prairie", "quartz", "river", "summit", "tundra",
    "upland", "valley", "willow", "xenon", "yarrow", "zephyr",
)  # fmt: skip
_CYCLE = " ".join(_WORDS) + " "


def filler_prompt(chars: int, seed: int = 0, request_id: str = "") -> str:
    """``chars`` characters of word-like filler; the start point varies with seed and id."""
    if chars <= 0:
        return ""
    digest = hashlib.blake2b(f"{seed}\x00{request_id}".encode(), digest_size=4).digest()
    offset = int.from_bytes(digest, "big") % len(_CYCLE)
    repeats = (offset + chars) // len(_CYCLE) + 1
    return (_CYCLE * repeats)[offset : offset + chars]


def approx_tokens(chars: int) -> int:
    return max(1, round(chars / CHARS_PER_TOKEN))
