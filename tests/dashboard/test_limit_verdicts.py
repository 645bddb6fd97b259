"""The overview's limit box and `restorelens check` give one verdict per limit, from one
evaluation (``analysis.limits.evaluate``): broken, nothing to check, or holds."""

from __future__ import annotations

from pathlib import Path

import pytest
import streamlit as st
from click.testing import CliRunner
from rendered import seen
from streamlit.testing.v1 import AppTest

from restorelens.cli import cli
from restorelens.dashboard import environment

PAGE = Path(__file__).resolve().parents[2] / "dashboard" / "pages" / "overview.py"
TIMEOUT_S = 60  # DuckDB loads on a shared 2-core machine; a bound, not a speed claim


@pytest.fixture(autouse=True)
def fresh_caches() -> None:
    st.cache_data.clear()
    st.cache_resource.clear()


def _listed(stderr: str, heading: str, end: str) -> set[str]:
    """The limit names `check` lists, one per indented line, under the line saying ``heading``."""
    _, _, after = stderr.partition(heading)
    names = set()
    for line in after.splitlines()[1:]:
        if not line.startswith("  "):
            break
        names.add(line.strip().split(end)[0])
    return names


def check_verdicts(store: Path, limits: list[str]) -> tuple[int, set[str], set[str]]:
    """`restorelens check`'s exit code, the limits it says are exceeded and those with nothing to check."""
    result = CliRunner().invoke(cli, ["check", "--db", str(store), *(f"--max={limit}" for limit in limits)])
    assert result.exit_code in (0, 1), result.output
    return (result.exit_code, _listed(result.stderr, "limits exceeded", " = "),
            _listed(result.stderr, "had nothing to check", ":"))


def page_verdicts(store: Path, limits: list[str], monkeypatch: pytest.MonkeyPatch) -> tuple[list[str], list[str], list[str]]:
    """The overview's broken limits, the limits it says have nothing to check, and its success lines."""
    monkeypatch.setenv(environment.DB_ENV, str(store))
    monkeypatch.setenv(environment.LIMITS_ENV, ";".join(limits))
    monkeypatch.delenv(environment.LABELS_ENV, raising=False)
    app = AppTest.from_file(str(PAGE), default_timeout=TIMEOUT_S).run()
    assert not app.exception, [e.value for e in app.exception]
    assert "Limits" in [s.value for s in app.subheader]
    broken = [seen(e.value).removeprefix("Limit broken: ").split(" = ")[0] for e in app.error]
    unchecked = [seen(w.value).removeprefix("Nothing to check: ").split("=")[0] for w in app.warning]
    return broken, unchecked, [seen(s.value) for s in app.success]


@pytest.mark.parametrize(("store", "limits", "nothing"), [
    # an empty store: no wake, so nothing to check (the box used to say it held)
    ("empty", ["wake.overshoot_s.p95=1"], {"wake.overshoot_s.p95"}),
    ("empty", ["wake.overshoot_s.p95=1", "lending.ttft_s.p95=5"], {"wake.overshoot_s.p95", "lending.ttft_s.p95"}),
    # three wakes: their overshoot is checked; a startup phase no engine exported is not
    ("wakes", ["wake.overshoot_s.p95=100"], set()),
    ("wakes", ["wake.overshoot_s.p95=100", "wake.phase[Compile graphs].p95=1"], {"wake.phase[Compile graphs].p95"}),
    # overshoots 6.0625, 7.75 and 0.5 s: broken, beside a limit with nothing to check
    ("wakes", ["wake.overshoot_s.p95=1", "wake.phase[Compile graphs].p95=1"], {"wake.phase[Compile graphs].p95"}),
])
def test_the_box_says_nothing_to_check_exactly_when_check_does(store: str, limits: list[str], nothing: set[str],
                                                                empty_store_path: Path, store_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    path = empty_store_path if store == "empty" else store_path
    exit_code, exceeded, unchecked = check_verdicts(path, limits)
    page_broken, page_unchecked, success = page_verdicts(path, limits, monkeypatch)
    assert unchecked == set(page_unchecked) == nothing
    assert exceeded == set(page_broken) and len(page_broken) == len(exceeded)
    assert len(page_unchecked) == len(nothing)  # one line per limit
    # the box says every limit holds exactly when check exits 0
    assert any(line.startswith("Every limit holds") for line in success) is (exit_code == 0)
