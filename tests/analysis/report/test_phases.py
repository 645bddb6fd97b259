"""The engine's startup phases in ``restorelens report`` and limits on them in ``restorelens check``."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner
from engine_startup import VLLM_READY_S, VLLM_TREE, Startups

from restorelens import spans as sc
from restorelens.analysis import Analysis, Limit, parse_limit
from restorelens.analysis.limits import PHASE_COLUMN, PHASE_VIEW
from restorelens.analysis.report import SECTIONS, build_report, render
from restorelens.cli import cli as main
from restorelens.errors import SettingError


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Two cold starts: vLLM's startup as measured, then the same 4 s slower in warmup, whose
    engine's clock runs 1 s ahead, so its spans end 1 s after ready."""
    startups = Startups()
    with startups.wake(0.0, 67.0, wake_called_s=0.0, ready_s=VLLM_READY_S) as wake:
        startups.spans(wake, VLLM_TREE)
    slower = ((sc.SPAN_VLLM_OVERALL_LOADING, 6.0, 63.125, ((sc.SPAN_VLLM_WARMUP_CPU, 20.0, 56.0, ()),)),)
    with startups.wake(100.0, 170.0, wake_called_s=100.0, ready_s=100.0 + 63.125) as wake:
        startups.spans(wake, slower, offset_s=101.0)
    return startups.store(tmp_path_factory.mktemp("report") / "spans.duckdb")


def test_the_report_lists_each_phase_then_the_time_outside_and_the_share(store: Path) -> None:
    with Analysis.open(store) as analysis:
        report = build_report(analysis)
    assert tuple(report) == SECTIONS
    phases = {row["phase"]: row for row in report["wake_phases"].iter_rows(named=True)}
    assert list(phases)[:3] == [sc.SPAN_VLLM_OVERALL_LOADING, sc.SPAN_VLLM_ASYNC_MP_CLIENT_INIT,
                                sc.SPAN_VLLM_ENGINE_CORE_PROC_INIT]
    loading = phases[sc.SPAN_VLLM_OVERALL_LOADING]
    assert (loading["depth"], loading["count"], loading["p50"], loading["max"]) == (0, 2, 54.625, 57.125)
    assert phases[sc.SPAN_VLLM_WARMUP_CPU]["count"] == 2
    # outside: 66.25 - 52.125 and 63.125 - (63.125 - 7) ; covered: 52.125 and 56.125 (clipped at ready)
    outside = phases["outside the engine's spans"]
    assert (outside["depth"], outside["count"], outside["max"]) == (None, 2, 14.125)
    assert phases["engine spans (covered)"]["max"] == 56.125
    assert phases["share covered"]["max"] == 56.125 / 63.125
    for fmt in ("table", "markdown", "csv", "json"):
        assert sc.SPAN_VLLM_WARMUP_CPU in render(report, fmt) and "outside the engine" in render(report, fmt)


def test_a_report_without_engine_spans_has_no_phase_section(tmp_path: Path) -> None:
    startups = Startups()
    with startups.wake(0.0, 10.0, wake_called_s=0.0, ready_s=9.0):
        pass
    with Analysis.open(startups.store(tmp_path / "spans.duckdb")) as analysis:
        report = build_report(analysis)
    assert tuple(report) == tuple(name for name in SECTIONS if name != "wake_phases")
    assert "phase" not in render(report, "table").lower()


def test_a_phase_limit_names_the_span_in_brackets() -> None:
    expected = Limit(PHASE_VIEW, PHASE_COLUMN, "p95", 35.0, phase=sc.SPAN_VLLM_WARMUP_CPU)
    assert parse_limit(f"wake.phase[{sc.SPAN_VLLM_WARMUP_CPU}].p95=35") == expected
    assert parse_limit(f" phase[{sc.SPAN_VLLM_WARMUP_CPU}].p95 = 35") == expected
    assert expected.name == f"wake.phase[{sc.SPAN_VLLM_WARMUP_CPU}].p95"
    odd = parse_limit("wake.phase[a.b = c (d)].max=1")
    assert (odd.phase, odd.statistic, odd.maximum) == ("a.b = c (d)", "max", 1.0)
    assert parse_limit("wake.outside_engine_spans_s.p95=20") == Limit("wake", "outside_engine_spans_s", "p95", 20.0)


@pytest.mark.parametrize(("text", "message"), [
    ("wake.phase[].p95=1", "name a phase inside the brackets"),
    ("wake.phase[Warmup (CPU)].count=1", "statistic 'count' not one of"),
    ("wake.phase[Warmup (CPU)].p95=soon", "is not a number"),
    ("wake.phase[Warmup (CPU)].p95=inf", "not a finite number"),
])
def test_a_bad_phase_limit_is_one_line_naming_the_problem(text: str, message: str) -> None:
    with pytest.raises(SettingError, match=message):
        parse_limit(text)


def _check(store: Path, *limits: str, allow_empty: bool = False) -> tuple[int, str]:
    options = [f"--max={limit}" for limit in limits] + (["--allow-empty"] if allow_empty else [])
    result = CliRunner().invoke(main, ["check", "--db", str(store), *options])
    return result.exit_code, result.output


def test_check_holds_and_breaks_phase_limits(store: Path) -> None:
    warmup = sc.SPAN_VLLM_WARMUP_CPU
    code, output = _check(store, f"wake.phase[{warmup}].max=36", "wake.outside_engine_spans_s.max=14.125",
                          "wake.engine_spans_share.min=1")
    assert code == 0, output
    code, output = _check(store, f"wake.phase[{warmup}].max=35.5", "wake.engine_skew_s.max=0.5")
    assert code == 1
    assert f"wake.phase[{warmup}].max = 36 > 35.5 (n=2)" in output
    assert "wake.engine_skew_s.max = 1 > 0.5 (n=2)" in output


def test_check_of_a_phase_no_engine_exported_has_nothing_to_check(store: Path) -> None:
    code, output = _check(store, "wake.phase[Compile graphs].p95=5")
    assert code == 1
    assert "wake.phase[Compile graphs].p95: no values in 0 spans of that phase" in output
    code, output = _check(store, "wake.phase[Compile graphs].p95=5", allow_empty=True)
    assert code == 0, output


def test_a_malformed_phase_limit_exits_2_in_one_line(store: Path) -> None:
    code, output = _check(store, "wake.phase[].p95=5")
    assert code == 2
    assert output.strip().count("\n") == 0 and "--max" in output
