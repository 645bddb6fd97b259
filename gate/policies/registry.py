"""Every admission policy by name, and every policy option: its type, default, unit, doc and check.

This table is the one place a policy or an option is declared. The gate's settings (flags, TOML,
environment), ``PUT /admin/policy``, ``restorelens run --arm`` and ``restorelens experiment``'s
arms and options, their ``--help`` and docs/gate.md's option table all read it; the policy classes
take their defaults from it and check their options with it. It names the classes of no policy
(``build.py`` builds them), so every policy module may import it.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from restorelens.errors import SettingError
from restorelens.spans import TRAFFIC_CLASSES

from ..setting_kinds import FLOOR_TABLE, SECONDS, WHOLE, WHOLE_OR_NONE, Kind, shown

__all__ = ["DEFAULTS", "DEFAULT_POLICY", "MIN_CONTROL_PERIOD_S", "OPTIONS", "POLICIES", "Option", "PolicySpec", "arm_names", "check_lendable",
           "check_option", "check_options", "named_in_prose", "options_table", "policy_named", "study_policies"]


def _seconds(value: float) -> str | None:
    return None if math.isfinite(value) and value >= 0 else f"must be a finite number of seconds >= 0, got {value}"


#: The shortest lending-controller period. A controller deciding more often than every millisecond
#: is none the gate's timers (asyncio's, at millisecond resolution) could run, and it restores the
#: floor as 0 does; shorter periods (1e-320) made the next tick's arithmetic overflow.
MIN_CONTROL_PERIOD_S = 0.001


def _control_period(value: float) -> str | None:
    if value == 0 or (math.isfinite(value) and value >= MIN_CONTROL_PERIOD_S):
        return None
    return f"must be 0 (no controller) or a finite number of seconds >= {MIN_CONTROL_PERIOD_S:g}, got {value}"


def _budget(value: float) -> str | None:
    # NaN would compare false with every loan's cost, infinity lend everything, 0 never give a loan back.
    return None if math.isfinite(value) and value > 0 else f"must be a finite number of seconds > 0, got {value}"


def _floors(value: Mapping[str, int]) -> str | None:
    for traffic_class, floor in value.items():
        if traffic_class not in TRAFFIC_CLASSES:
            return f"unknown traffic class {traffic_class!r}; use {', '.join(TRAFFIC_CLASSES)}"
        if floor < 0:
            return f"{traffic_class} floor {floor} is negative"
    return None


def _at_least(least: int, what: str = "") -> Callable[[int | None], str | None]:
    def check(value: int | None) -> str | None:
        return None if value is None or value >= least else f"must be at least {least}{what}, got {value}"

    return check


@dataclass(frozen=True, slots=True)
class Option:
    """One policy option, as every setting source, the admin endpoint and the experiments know it."""

    name: str
    kind: Kind
    default: Any
    #: What the number counts (``s`` for seconds); empty for a table.
    unit: str
    doc: str  # one line, for --help and docs/gate.md
    #: The problem with a value of the right kind, or None when it is valid.
    check: Callable[[Any], str | None]
    flag: str | None = None  # the gate's command-line flag, when it has one

    def policies(self) -> tuple[str, ...]:
        """The policies that take this option."""
        return tuple(spec.name for spec in POLICIES.values() if self.name in spec.options)

    def help(self) -> str:
        """The option's --help text: its doc, the policies that take it, its default."""
        return f"{self.doc} Policies: {', '.join(self.policies())}. Default: {self.shown_default()}."

    def shown_default(self) -> str:
        if self.default is None:
            return "none"
        if isinstance(self.default, Mapping):
            return ",".join(f"{k}={v}" for k, v in self.default.items())
        return f"{self.default:g}" if isinstance(self.default, float) else str(self.default)


OPTIONS: dict[str, Option] = {option.name: option for option in (
    Option("floors", FLOOR_TABLE, MappingProxyType({"interactive": 3, "batch": 1}), "",
           "Per-class slots, e.g. interactive=3,batch=1.", _floors, "--floors"),
    Option("lendable_slots", WHOLE, 2, "slots",
           "Protected slots lendable to batch while interactive is idle (at least one is never lent).",
           _at_least(0), "--lendable"),
    Option("capacity", WHOLE_OR_NONE, None, "requests", "Shared cap on the requests in flight (none: no cap).",
           _at_least(1), "--capacity"),
    Option("control_period_s", SECONDS, 0.0, "s",
           "Seconds between the lending controller's decisions (0, or at least 0.001); returning demand gets its "
           "floor back one period after the next decision, at once with 0.", _control_period, "--control-period-s"),
    Option("restore_budget_s", SECONDS, 1.0, "s",
           "Seconds a loan may cost to give back (its predicted drain, and the KV wait of a returning interactive "
           "request); lend-preempt aborts loans past it at restoration.", _budget, "--restore-budget-s"),
    Option("kv_blocks", WHOLE_OR_NONE, None, "blocks",
           "The engine's KV-cache blocks (vLLM logs them at start as 'GPU KV cache size'; vllm:cache_config_info's "
           "num_gpu_blocks); unset: loans are not checked for KV.", _at_least(1, " (the engine's KV blocks)"),
           "--kv-blocks"),
    Option("block_size", WHOLE, 16, "tokens", "Tokens per KV block (vLLM's --block-size).", _at_least(1, " token")),
    Option("protected_wait_s", SECONDS, 2.0, "s",
           "Seconds an interactive request may queue for its floor (in place of wait_timeout_s).", _seconds),
    Option("borrower_wait_s", SECONDS, 120.0, "s",
           "Seconds a batch request may queue for its floor or a loan (in place of wait_timeout_s).", _seconds),
    Option("extra_slots", WHOLE, 1, "requests",
           "Requests admitted past the floors, ordered by the engine's priority scheduler.", _at_least(0),
           "--extra-slots"),
)}

#: Each option's default, by name: what a policy built without the option gets.
DEFAULTS: Mapping[str, Any] = MappingProxyType({name: option.default for name, option in OPTIONS.items()})

_LENDING = ("floors", "lendable_slots", "control_period_s")
_BUDGET = (*_LENDING, "restore_budget_s", "kv_blocks", "block_size", "protected_wait_s", "borrower_wait_s")


@dataclass(frozen=True, slots=True)
class PolicySpec:
    """One admission policy: its name, other names it answers to, its options."""

    name: str
    options: tuple[str, ...]
    aliases: tuple[str, ...] = ()
    #: One of the MoFlux study's four arms (``restorelens experiment``'s default arms).
    study: bool = False
    #: Forwards requests with vLLM priorities: the engine must run ``--scheduling-policy priority``.
    engine_priority: bool = False


POLICIES: dict[str, PolicySpec] = {spec.name: spec for spec in (
    PolicySpec("fcfs", ("capacity",), study=True),
    PolicySpec("priority", ("capacity",), study=True, engine_priority=True),
    PolicySpec("static", ("floors",), study=True),
    PolicySpec("lend", _LENDING, aliases=("moflux",), study=True),
    PolicySpec("lend-budget", _BUDGET),
    PolicySpec("lend-preempt", _BUDGET),
    PolicySpec("lend-priority", (*_LENDING, "extra_slots"), engine_priority=True),
)}

DEFAULT_POLICY = "lend"

_BY_NAME = {name: spec for spec in POLICIES.values() for name in (spec.name, *spec.aliases)}


def policy_named(name: str, setting: str = "gate.policy", *, aliases: bool = True) -> PolicySpec:
    """The policy ``name`` (or, with ``aliases``, an alias of it) names; a ``SettingError`` naming
    ``setting`` for any other."""
    known = _BY_NAME if aliases else POLICIES
    spec = known.get(name) if isinstance(name, str) else None
    if spec is None:
        raise SettingError(setting, f"unknown policy {name!r}; choose one of {', '.join(known)}")
    return spec


def arm_names() -> tuple[str, ...]:
    """Every name a policy answers to, each policy's aliases right after it."""
    return tuple(name for spec in POLICIES.values() for name in (spec.name, *spec.aliases))


def study_policies() -> tuple[str, ...]:
    """The MoFlux study's four arms, in the order its table lists them."""
    return tuple(spec.name for spec in POLICIES.values() if spec.study)


def named_in_prose(names: tuple[str, ...] | list[str]) -> str:
    """``fcfs, priority and static``; each policy with its aliases: ``lend (alias moflux)``."""
    shown = [f"{name} (alias {', '.join(POLICIES[name].aliases)})" if POLICIES[name].aliases else name
             for name in names]
    return shown[0] if len(shown) == 1 else f"{', '.join(shown[:-1])} and {shown[-1]}"


def check_option(name: str, value: Any, setting: str | None = None) -> Any:
    """``value`` if it is a valid ``name``; else a one-line ``SettingError`` naming ``setting``
    (default ``gate.<name>``)."""
    option = OPTIONS.get(name)
    setting = f"gate.{name}" if setting is None else setting
    if option is None:
        raise SettingError(setting, f"unknown option; valid: {', '.join(OPTIONS)}")
    if not option.kind.accepts(value):
        raise SettingError(setting, f"expected {option.kind.expected}, got {shown(value)}")
    if (problem := option.check(value)) is not None:
        raise SettingError(setting, problem)
    return value


def check_options(options: Mapping[str, Any]) -> None:
    for name, value in options.items():
        check_option(name, value)


def check_lendable(floors: Mapping[str, int], lendable_slots: int, protected_class: str) -> None:
    """A lender may lend all of the protected floor but one slot, which is never lent."""
    protected_floor = floors.get(protected_class, 0)
    if lendable_slots < 0 or lendable_slots > protected_floor - 1:
        raise SettingError(
            "gate.lendable_slots",
            f"{lendable_slots} slots cannot be lent: must be between 0 and the {protected_class} "
            f"floor minus one ({protected_floor - 1}), since at least one protected slot is never lent",
        )


def options_table() -> str:
    """docs/gate.md's table of the policy options (a test keeps the page equal to it)."""
    rows = ["| option | flag | default | unit | policies | |", "|---|---|---|---|---|---|"]
    for option in OPTIONS.values():
        users = ", ".join(f"`{name}`" for name in option.policies())
        flag = f"`{option.flag}`" if option.flag else ""
        rows.append(f"| `{option.name}` | {flag} | {option.shown_default()} | {option.unit} | {users} | {option.doc} |")
    return "\n".join(rows) + "\n"
