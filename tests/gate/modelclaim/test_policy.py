"""Pool policy validation, as AIBrix validates poolLifecyclePolicy; errors name the field."""

from __future__ import annotations

import pytest

from restorelens.errors import SettingError
from restorelens.gate.modelclaim.policy import PoolPolicy, parse_pool_policy


def test_defaults_make_room_after_30_s_or_sleep_after_when_shorter() -> None:
    assert parse_pool_policy({"sleepAfterSeconds": 60}) == PoolPolicy(60.0, False, 30.0)
    assert parse_pool_policy({"sleepAfterSeconds": 20}).sleep_to_make_room_after_s == 20.0
    no_reserve = parse_pool_policy({"noWakeReserveWhileAsleep": True})
    assert (no_reserve.sleep_after_s, no_reserve.sleep_to_make_room_after_s) == (None, 30.0)
    explicit = parse_pool_policy({"sleepAfterSeconds": 120, "sleepToMakeRoomAfterSeconds": 45})
    assert explicit.sleep_to_make_room_after_s == 45.0


@pytest.mark.parametrize(
    ("raw", "field", "problem"),
    [
        ({"sleepAfterSeconds": 60, "sleepAfter": 5}, "pool.sleepAfter", "unknown field"),
        ({}, "pool.sleepAfterSeconds", "must be > 0 unless noWakeReserveWhileAsleep"),
        ({"sleepAfterSeconds": 0}, "pool.sleepAfterSeconds", "must be > 0 unless"),
        ({"sleepAfterSeconds": -5, "noWakeReserveWhileAsleep": True}, "pool.sleepAfterSeconds", "must be > 0"),
        ({"sleepAfterSeconds": 60, "sleepToMakeRoomAfterSeconds": 0}, "pool.sleepToMakeRoomAfterSeconds", "> 0"),
        ({"sleepAfterSeconds": 60, "sleepToMakeRoomAfterSeconds": 60}, "pool.sleepToMakeRoomAfterSeconds", "< sleepAfter"),
        ({"sleepAfterSeconds": "60"}, "pool.sleepAfterSeconds", "number of seconds"),
        ({"sleepAfterSeconds": True}, "pool.sleepAfterSeconds", "number of seconds"),
        ({"sleepAfterSeconds": 60, "noWakeReserveWhileAsleep": "yes"}, "pool.noWakeReserveWhileAsleep", "true or false"),
    ],
)
def test_invalid_policies_name_the_field(raw: dict, field: str, problem: str) -> None:
    with pytest.raises(SettingError) as info:
        parse_pool_policy(raw, where="pool")
    assert info.value.setting == field
    assert problem in info.value.problem


def test_the_dataclass_validates_too() -> None:
    with pytest.raises(SettingError, match="policy.sleepAfterSeconds"):
        PoolPolicy()
