from __future__ import annotations

import dataclasses

import pytest

from restorelens.errors import SettingError
from restorelens.sim import PRESETS, EngineConfig, get_preset


def test_the_three_presets_exist_and_are_valid() -> None:
    assert set(PRESETS) >= {"tiny-cpu", "qwen2.5-1.5b-m1", "llama-8b-h20"}
    for config in PRESETS.values():
        assert config.max_model_len <= config.kv_capacity_tokens


def test_the_moflux_preset_has_the_studys_flags() -> None:
    config = get_preset("qwen2.5-1.5b-m1")
    assert (config.max_num_seqs, config.block_size, config.num_blocks, config.max_model_len) == (4, 16, 320, 4096)
    # The long-context batch prompt: 7,100 characters were 1,607 tokens.
    assert config.estimate_prompt_tokens(7100) == 1607


def test_unknown_preset_names_the_valid_ones() -> None:
    with pytest.raises(SettingError) as caught:
        get_preset("gpt-5")
    message = str(caught.value)
    assert "gpt-5" in message and all(name in message for name in PRESETS)


def test_config_is_frozen() -> None:
    with pytest.raises(dataclasses.FrozenInstanceError):
        get_preset("tiny-cpu").max_num_seqs = 8  # type: ignore[misc]


@pytest.mark.parametrize(
    ("changes", "setting"),
    [
        ({"max_num_seqs": 0}, "max_num_seqs"),
        ({"scheduling_policy": "lifo"}, "scheduling_policy"),
        ({"num_blocks": 10, "block_size": 16, "max_model_len": 1024}, "max_model_len"),
        ({"step_overhead_s": -1.0}, "step_overhead_s"),
    ],
)
def test_invalid_settings_name_the_setting(changes: dict[str, object], setting: str) -> None:
    with pytest.raises(SettingError) as caught:
        EngineConfig(**changes)  # type: ignore[arg-type]
    assert caught.value.setting == setting


def test_replace_refuses_unknown_fields() -> None:
    with pytest.raises(SettingError, match="max_num_seq"):
        EngineConfig().replace(max_num_seq=2)


def test_time_scale_shortens_every_modelled_duration() -> None:
    config = get_preset("qwen2.5-1.5b-m1")
    fast = config.scaled(10)
    assert fast.step_time_s(prefill_tokens=100, decode_seqs=3) == pytest.approx(
        config.step_time_s(prefill_tokens=100, decode_seqs=3) / 10
    )
    for weights_discarded in (False, True):
        assert fast.wake_s(weights_discarded=weights_discarded) == pytest.approx(
            config.wake_s(weights_discarded=weights_discarded) / 10
        )
    assert fast.cold_start_s == pytest.approx(config.cold_start_s / 10)
    assert fast.max_num_seqs == config.max_num_seqs and fast.weight_bytes == config.weight_bytes
    with pytest.raises(SettingError, match="time_scale"):
        config.scaled(0)
