from __future__ import annotations

import subprocess
import sys

import pytest

import restorelens.loadgen as loadgen
from restorelens.lazy import lazy_exports


def test_a_name_is_imported_on_first_use_and_then_cached() -> None:
    code = (
        "import sys, restorelens.loadgen as lg\n"
        "assert 'restorelens.loadgen.client' not in sys.modules\n"
        "cls = lg.TracedClient\n"
        "assert 'restorelens.loadgen.client' in sys.modules\n"
        "assert vars(lg)['TracedClient'] is cls\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


def test_unknown_names_raise_attribute_error() -> None:
    with pytest.raises(AttributeError, match="restorelens.loadgen.*NoSuchThing"):
        loadgen.NoSuchThing  # noqa: B018


def test_all_is_sorted_and_listed_by_dir() -> None:
    names, _, dir_ = lazy_exports("restorelens.loadgen", {"b": "x", "a": "y"})
    assert names == ["a", "b"]
    assert {"a", "b"} <= set(dir_())
    assert set(loadgen.__all__) <= set(dir(loadgen))
