"""The package's public surface: a sorted ``__all__`` whose names all exist."""

from __future__ import annotations

import restorelens.analysis


def test_all_is_sorted_and_exported() -> None:
    names = restorelens.analysis.__all__
    assert names == sorted(names)
    for name in names:
        assert hasattr(restorelens.analysis, name), name
