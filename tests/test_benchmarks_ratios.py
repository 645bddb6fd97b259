"""`benchmarks/ratios.py`: a ratio line says "faster" or "slower" as the figure is, in every benchmark."""

from __future__ import annotations

import ast
import importlib
import re
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[1]
BENCHES = sorted((ROOT / "benchmarks").glob("bench_*.py"))
#: A formatted figure followed by a direction word: the wording ``versus`` alone may write.
_WORDED = re.compile(r"^x? ?(faster|slower|less|more)\b")


@pytest.fixture
def ratios(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    # `benchmarks` is a folder run with `python -m benchmarks` from the checkout, not an installed package
    monkeypatch.syspath_prepend(str(ROOT))
    return importlib.import_module("benchmarks.ratios")


@pytest.mark.parametrize(("anchor", "ours", "line"), [
    (3.0, 1.5, "2.00x faster"),
    (1.5, 3.0, "2.00x slower"),  # the old lines printed "0.50x faster" for this
    (0.44, 1.0, "2.27x slower"),
    (2.0, 2.0, "1.00x faster"),
    (1.0, 0.0, "n/a"),
    (0.0, 1.0, "n/a"),
])
def test_the_figure_is_never_below_one_and_the_word_says_which_way(ratios: ModuleType, anchor: float, ours: float,
                                                                    line: str) -> None:
    assert ratios.versus(anchor, ours) == line


def test_other_measures_name_their_own_directions(ratios: ModuleType) -> None:
    assert ratios.versus(2.0, 1.0, better="less", worse="more") == "2.00x less"
    assert ratios.versus(1.0, 4.0, better="less", worse="more") == "4.00x more"


@pytest.mark.parametrize("bench", BENCHES, ids=lambda path: path.stem)
def test_no_benchmark_words_a_ratio_itself(bench: Path) -> None:
    tree = ast.parse(bench.read_text(encoding="utf-8"))
    worded = []
    for node in ast.walk(tree):
        if isinstance(node, ast.JoinedStr):
            for before, after in zip(node.values, node.values[1:], strict=False):
                if (isinstance(before, ast.FormattedValue) and isinstance(after, ast.Constant)
                        and isinstance(after.value, str) and _WORDED.match(after.value)
                        and not _is_versus(before.value)):
                    worded.append(f"line {node.lineno}: {ast.unparse(before.value)} -> {after.value!r}")
    assert worded == [], "word ratios through benchmarks.ratios.versus"


def _is_versus(value: ast.expr) -> bool:
    return isinstance(value, ast.Call) and isinstance(value.func, ast.Name) and value.func.id == "versus"


def test_the_experiment_bench_says_slower_when_the_target_took_longer(monkeypatch: pytest.MonkeyPatch,
                                                                      capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.syspath_prepend(str(ROOT))
    bench = importlib.import_module("benchmarks.bench_experiment")
    monkeypatch.setattr(bench, "_target", lambda folder: 10.0)
    monkeypatch.setattr(bench, "_anchor", lambda folder: 4.0)
    bench.main()
    assert "restorelens vs anchor: 2.50x slower wall" in capsys.readouterr().out.splitlines()
