"""EngineConfig.startup_phases: the presets nest inside their cold start; bad phases name the field."""

from __future__ import annotations

import pytest

from restorelens.errors import SettingError
from restorelens.sim import PRESETS, EngineConfig, get_preset

TWO = (("Overall Loading", "", 1.0, 8.0), ("Prepare model", "Overall Loading", 2.0, 5.0))


@pytest.mark.parametrize("preset", sorted(PRESETS))
def test_every_preset_describes_its_cold_start_under_overall_loading(preset: str) -> None:
    config = get_preset(preset)
    names = [phase[0] for phase in config.startup_phases]
    assert names[0] == "Overall Loading" and "Prepare model" in names
    assert all(parent in names for _, parent, _, _ in config.startup_phases if parent)
    end_s = max(offset_s + duration_s for _, _, offset_s, duration_s in config.startup_phases)
    assert end_s <= config.cold_start_s


def test_tiny_cpu_is_the_recorded_vllm_cold_start(tmp_path) -> None:  # noqa: ANN001
    """Every offset and duration of the preset is what real vLLM exported (the recorded fixture), to
    the millisecond; the inner ``Worker init`` (same name as its parent) is the one span left out."""
    import json

    from restorelens.collector import load_paths
    from tests.analysis.vllm_cold_start import FIXTURE, NOTES, start_up_spans

    store = tmp_path / "vllm.duckdb"
    load_paths([FIXTURE], store)
    notes = json.loads(NOTES.read_text())
    spawned_ns = notes["spawned_unix_ns"]
    recorded = {(s["name"], round((s["start_ns"] - spawned_ns) / 1e9, 3), round(s["duration_ns"] / 1e9, 3))
                for s in start_up_spans(store) if s["scope"] != "vllm.v1.worker.worker_base"}
    config = get_preset("tiny-cpu")
    preset = {(name, offset_s, duration_s) for name, _, offset_s, duration_s in config.startup_phases}
    # Load model is cut 1 ms short of its recorded 1.174 s, to lie inside its 1.174-s parent in
    # the preset's millisecond figures.
    assert preset ^ recorded == {("Load model", 43.785, 1.173), ("Load model", 43.785, 1.174)}
    assert config.cold_start_s == round((notes["first_health_200_unix_ns"] - spawned_ns) / 1e9, 1)


def test_time_scale_divides_offsets_and_durations() -> None:
    fast = EngineConfig(cold_start_s=10.0, startup_phases=TWO).scaled(10)
    assert fast.startup_phases == (("Overall Loading", "", 0.1, 0.8), ("Prepare model", "Overall Loading", 0.2, 0.5))


def test_an_engine_files_lists_become_tuples() -> None:
    config = EngineConfig(cold_start_s=10.0, startup_phases=[list(phase) for phase in TWO])  # type: ignore[arg-type]
    assert config.startup_phases == TWO
    hash(config)


@pytest.mark.parametrize(
    ("phases", "problem"),
    [
        ((("Overall Loading", "", 1.0, 20.0),), "after the engine is ready"),
        ((("Child", "Overall Loading", 1.0, 1.0), ("Overall Loading", "", 0.0, 5.0)), "not a phase listed before it"),
        ((("Overall Loading", "", 1.0, 5.0), ("Child", "Overall Loading", 0.5, 1.0)), "does not lie inside"),
        ((("Overall Loading", "", 1.0, 5.0), ("Child", "Overall Loading", 5.0, 2.0)), "does not lie inside"),
        ((("Overall Loading", "", -1.0, 5.0),), "offset_s must be"),
        ((("Overall Loading", "", 1.0, float("nan")),), "duration_s must be"),
        ((("Overall Loading", "", 1.0),), "must be (name, parent, offset_s, duration_s)"),
        ((("", "", 1.0, 1.0),), "non-empty"),
        ((("A", "", 1.0, 1.0), ("A", "", 2.0, 1.0)), "appears twice"),
        ("Overall Loading", "must be a sequence"),
    ],
)
def test_bad_phases_are_a_setting_error_naming_the_field(phases: object, problem: str) -> None:
    with pytest.raises(SettingError, match="startup_phases") as caught:
        EngineConfig(cold_start_s=10.0, startup_phases=phases)  # type: ignore[arg-type]
    assert problem in str(caught.value) and "\n" not in str(caught.value)


def test_shortening_a_presets_cold_start_below_its_phases_is_refused() -> None:
    with pytest.raises(SettingError, match="startup_phases"):
        get_preset("tiny-cpu").replace(cold_start_s=5.0)
    assert get_preset("tiny-cpu").replace(cold_start_s=5.0, startup_phases=()).cold_start_s == 5.0
