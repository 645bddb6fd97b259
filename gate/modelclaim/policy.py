"""The pool's lifecycle policy, validated the way AIBrix validates ``poolLifecyclePolicy``.

Keys are AIBrix's JSON names (AIBrix's ``pool.aibrix.ai/policy`` annotation):

- ``sleepAfterSeconds``: an Active engine idle this long is put to sleep (level 1). 0 or absent
  means "never sleep when idle", which AIBrix only allows together with ``noWakeReserveWhileAsleep``.
- ``noWakeReserveWhileAsleep``: a sleeping engine keeps no wake reserve; its GPUs are charged only
  what the engine still holds, so a wake has to find room again.
- ``sleepToMakeRoomAfterSeconds``: a neighbour must have been idle this long before it may be slept
  to make room. Default 30 s, or ``sleepAfterSeconds`` when that is shorter.

Validation (every error is a ``SettingError`` naming the field): unknown fields make the policy
invalid (AIBrix disables the policy and raises ``InvalidPoolPolicy``; a config file should fail
loudly instead); ``sleepAfterSeconds`` > 0 unless ``noWakeReserveWhileAsleep``;
``sleepToMakeRoomAfterSeconds`` > 0 and, when given and idle sleep is on, < ``sleepAfterSeconds``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from restorelens.errors import SettingError

__all__ = [
    "DEFAULT_SLEEP_TO_MAKE_ROOM_AFTER_S",
    "POLICY_FIELDS",
    "PoolPolicy",
    "parse_pool_policy",
]

DEFAULT_SLEEP_TO_MAKE_ROOM_AFTER_S = 30.0
SLEEP_AFTER = "sleepAfterSeconds"
NO_WAKE_RESERVE = "noWakeReserveWhileAsleep"
SLEEP_TO_MAKE_ROOM_AFTER = "sleepToMakeRoomAfterSeconds"
POLICY_FIELDS = (SLEEP_AFTER, NO_WAKE_RESERVE, SLEEP_TO_MAKE_ROOM_AFTER)


@dataclass(frozen=True, slots=True)
class PoolPolicy:
    """A validated pool policy. ``sleep_after_s`` None: idle engines never sleep on their own."""

    sleep_after_s: float | None = None
    no_wake_reserve_while_asleep: bool = False
    sleep_to_make_room_after_s: float = DEFAULT_SLEEP_TO_MAKE_ROOM_AFTER_S

    def __post_init__(self) -> None:
        _validate(self.sleep_after_s, self.no_wake_reserve_while_asleep, self.sleep_to_make_room_after_s, "policy")


def _seconds(raw: Mapping[str, Any], key: str, where: str) -> float | None:
    value = raw.get(key)
    if value is None:
        return None
    # bool is an int in Python; AIBrix's int64 field would reject true/false.
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise SettingError(f"{where}.{key}", f"must be a finite number of seconds, got {value!r}")
    return float(value)


def _validate(sleep_after_s: float | None, no_reserve: bool, make_room_s: float, where: str) -> None:
    if sleep_after_s is not None and sleep_after_s < 0:
        raise SettingError(f"{where}.{SLEEP_AFTER}", f"must be > 0, got {sleep_after_s:g}")
    if not sleep_after_s and not no_reserve:
        raise SettingError(
            f"{where}.{SLEEP_AFTER}", f"must be > 0 unless {NO_WAKE_RESERVE} is true (got {sleep_after_s or 0:g})"
        )
    if make_room_s <= 0:
        raise SettingError(f"{where}.{SLEEP_TO_MAKE_ROOM_AFTER}", f"must be > 0, got {make_room_s:g}")


def parse_pool_policy(raw: Mapping[str, Any], where: str = "policy") -> PoolPolicy:
    """A ``PoolPolicy`` from AIBrix-style keys; ``where`` prefixes the field in error messages."""
    if not isinstance(raw, Mapping):
        raise SettingError(where, f"must be a table of {', '.join(POLICY_FIELDS)}")
    unknown = sorted(set(raw) - set(POLICY_FIELDS))
    if unknown:
        raise SettingError(
            f"{where}.{unknown[0]}", f"unknown field makes the pool policy invalid; valid: {', '.join(POLICY_FIELDS)}"
        )
    no_reserve = raw.get(NO_WAKE_RESERVE, False)
    if not isinstance(no_reserve, bool):
        raise SettingError(f"{where}.{NO_WAKE_RESERVE}", f"must be true or false, got {no_reserve!r}")
    sleep_after_s = _seconds(raw, SLEEP_AFTER, where)
    make_room_s = _seconds(raw, SLEEP_TO_MAKE_ROOM_AFTER, where)
    if make_room_s is not None:
        if make_room_s > 0 and sleep_after_s and make_room_s >= sleep_after_s:
            raise SettingError(
                f"{where}.{SLEEP_TO_MAKE_ROOM_AFTER}",
                f"must be < {SLEEP_AFTER} ({sleep_after_s:g}), got {make_room_s:g}",
            )
    else:
        make_room_s = DEFAULT_SLEEP_TO_MAKE_ROOM_AFTER_S
        if sleep_after_s and sleep_after_s < make_room_s:
            make_room_s = sleep_after_s
    _validate(sleep_after_s, no_reserve, make_room_s, where)
    return PoolPolicy(
        sleep_after_s=sleep_after_s or None,
        no_wake_reserve_while_asleep=no_reserve,
        sleep_to_make_room_after_s=make_room_s,
    )
