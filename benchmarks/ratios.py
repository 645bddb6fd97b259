"""How every benchmark words a comparison with its anchor, so a ratio line never says "faster" of a loss.

``versus(anchor, ours)`` is the one wording: ``N.NNx faster`` when ours took less than the anchor,
N.NN being the anchor's time over ours; ``N.NNx slower`` when it took more, N.NN being our time over
the anchor's. The figure is therefore never below 1 and the word carries the direction: a line reads
``restorelens vs anchor: 2.27x slower wall``, not ``0.44x faster wall``. The tables of RESULTS.md
give the anchor's time over ours (below 1: slower); the line's figure for slower is its inverse.
"""

from __future__ import annotations

__all__ = ["versus"]


def versus(anchor: float, ours: float, *, better: str = "faster", worse: str = "slower") -> str:
    """``"N.NNx faster"`` (anchor / ours) or ``"N.NNx slower"`` (ours / anchor) for two times or
    costs; ``better`` / ``worse`` name the directions for other measures (``less`` / ``more`` CPU).
    Equal counts as ``better`` at 1.00x; "n/a" when either figure is not positive."""
    if anchor <= 0 or ours <= 0:
        return "n/a"
    if ours <= anchor:
        return f"{anchor / ours:.2f}x {better}"
    return f"{ours / anchor:.2f}x {worse}"
