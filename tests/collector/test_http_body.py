"""Bounded body decoding under any compression ratio, encoding and chunking (property tests).

A compression bomb is a body whose decompressed size is many times its compressed size. Whatever
the ratio (incompressible noise to a run of zeros shrinking over 1000x), the decoder must return
the original exactly when it fits the limit and refuse it otherwise, having produced no more than
the limit plus one read of output: memory is bounded by the limit, not by what the body expands to.
"""

from __future__ import annotations

import gzip
import random
import zlib

import pytest
import zstandard
from hypothesis import given, settings
from hypothesis import strategies as st

from restorelens.collector.http_body import BodyTooLarge, CorruptBody, body_decoder

LIMIT = 64 * 1024

ENCODERS = {
    "identity": lambda data: data,
    "gzip": lambda data: gzip.compress(data, mtime=0),
    "deflate": zlib.compress,  # the zlib format, as RFC 9110 means by "deflate"
    "raw-deflate": lambda data: (lambda c: c.compress(data) + c.flush())(zlib.compressobj(wbits=-15)),
    "zstd": lambda data: zstandard.ZstdCompressor().compress(data),
}
HEADER = {"raw-deflate": "deflate"}


def _payload(size: int, noise_fraction: float, seed: int) -> bytes:
    """``size`` bytes that compress by a ratio set by how much of them is random."""
    rng = random.Random(seed)
    noisy = int(size * noise_fraction)
    return rng.randbytes(noisy) + bytes(size - noisy)


def _decode(encoding: str, body: bytes, chunk: int, *, taking: bool = False) -> bytes:
    """``body`` decoded ``chunk`` bytes at a time; ``taking``: what is decoded taken after each, as
    a scrape reads its answer while it arrives."""
    decoder = body_decoder(HEADER.get(encoding, encoding), LIMIT)
    taken = []
    for start in range(0, len(body), chunk):
        decoder.feed(body[start:start + chunk])
        if taking:
            taken.append(decoder.take())
    return b"".join(taken) + decoder.finish()


@settings(max_examples=200, deadline=None, database=None)
@given(
    encoding=st.sampled_from(sorted(ENCODERS)),
    size=st.integers(0, 4 * LIMIT),
    noise_fraction=st.sampled_from([0.0, 0.001, 0.1, 0.5, 1.0]),
    seed=st.integers(0, 2**32 - 1),
    chunk=st.sampled_from([1, 7, 512, 65536, 10**7]),
    taking=st.booleans(),
)
def test_any_ratio_is_decoded_exactly_within_the_limit_and_refused_beyond(
    encoding: str, size: int, noise_fraction: float, seed: int, chunk: int, taking: bool
) -> None:
    original = _payload(size, noise_fraction, seed)
    body = ENCODERS[encoding](original)
    if chunk == 1 and len(body) > 20_000:
        chunk = 4096  # byte-by-byte feeding is covered by the small bodies; keeps the run short
    if len(body) > LIMIT or len(original) > LIMIT:
        with pytest.raises(BodyTooLarge):
            _decode(encoding, body, chunk, taking=taking)
    else:
        assert _decode(encoding, body, chunk, taking=taking) == original


@pytest.mark.parametrize("encoding", ["gzip", "deflate", "zstd"])
def test_a_bomb_over_a_thousand_to_one_stops_at_the_limit(encoding: str) -> None:
    bomb = ENCODERS[encoding](bytes(512 * 1024 * 1024))  # 512 MiB of zeros in well under a MiB
    assert len(bomb) * 1000 < 512 * 1024 * 1024
    decoder = body_decoder(encoding, LIMIT)
    with pytest.raises(BodyTooLarge):
        for start in range(0, len(bomb), 65536):
            decoder.feed(bomb[start:start + 65536])
        decoder.finish()
    if encoding != "zstd":  # zstd inflates in finish(), through a read bounded to LIMIT + 1
        assert decoder._produced <= LIMIT + 1  # what was inflated before the refusal


@settings(max_examples=100, deadline=None, database=None)
@given(encoding=st.sampled_from(["gzip", "deflate", "zstd"]), cut=st.floats(0.0, 0.99), flip=st.integers(0, 2**16))
def test_truncated_or_corrupted_streams_are_refused_not_crashed(encoding: str, cut: float, flip: int) -> None:
    original = _payload(10_000, 0.1, flip)
    # gzip and zlib carry a checksum; zstd only when the sender asks for one (without it no decoder
    # can tell a flipped literal byte), so the flip case sends one.
    encode = (lambda data: zstandard.ZstdCompressor(write_checksum=True).compress(data)) if encoding == "zstd" else ENCODERS[encoding]
    body = bytearray(encode(original))
    truncated = bytes(body[: int(len(body) * cut)])
    if truncated:  # an empty body is an empty request, not a truncated one
        with pytest.raises(CorruptBody):
            _decode(encoding, truncated, 997)  # a cut stream once decoded to what it held: a 200 for lost spans
    body[flip % len(body)] ^= 0xFF
    try:
        decoded = _decode(encoding, bytes(body), 997)
    except (CorruptBody, BodyTooLarge):
        return  # refused with a reason: a 400 or 413 at the receiver
    assert decoded == original  # never different data without a word
