"""The Collector's doubles spelt column-wise as the lenient decoder spells them, one by one."""

from __future__ import annotations

import pyarrow as pa


def test_random_doubles_of_every_magnitude_are_formatted_like_the_lenient_decoder() -> None:
    import math
    import random
    import struct

    from restorelens.collector.fast_jsonl.columns import double_strings
    from restorelens.collector.rows import double_to_str

    rng = random.Random(23)
    bits = [struct.unpack("<d", struct.pack("<Q", rng.getrandbits(64)))[0] for _ in range(20_000)]
    scaled = [rng.random() * 10.0 ** rng.randint(-30, 30) for _ in range(20_000)]
    edges = [0.0, -0.0, 1e16, 1e15, 9999999999999998.0, 1e-4, 1e-5, 5e-324, 1.7976931348623157e308,
             math.nan, math.inf, -math.inf]
    doubles = edges + bits + scaled + [None]
    got = double_strings(pa.array(doubles, pa.float64())).to_pylist()
    assert got == [None if d is None else double_to_str(d) for d in doubles]
