"""The policy registry is the one table of policies and options: the classes, the gate's settings,
``PUT /admin/policy``'s fields and docs/gate.md agree with it."""

from __future__ import annotations

import dataclasses
import math
import re
from pathlib import Path

import pytest

from restorelens.errors import SettingError
from restorelens.gate.policies.build import POLICY_CLASSES, build_policy
from restorelens.gate.policies.registry import (
    DEFAULT_POLICY, DEFAULTS, OPTIONS, POLICIES, arm_names, check_option, named_in_prose, options_table, policy_named,
    study_policies,
)
from restorelens.gate.settings import SETTINGS, GateSettings

DOCS = Path(__file__).resolve().parents[3] / "docs" / "gate.md"


def _option_value(policy, name: str):
    """What a built policy holds of option ``name`` (the queues' waits live in ``class_wait_s``)."""
    if name == "protected_wait_s":
        return policy.class_wait_s[policy.protected_class]
    if name == "borrower_wait_s":
        return policy.class_wait_s[policy.borrower_class]
    return getattr(policy, name)


def test_every_policy_of_the_registry_has_its_class_and_nothing_else_does() -> None:
    assert list(POLICY_CLASSES) == list(POLICIES)
    for name, cls in POLICY_CLASSES.items():
        assert isinstance(build_policy(name), cls) and cls.name == name
    assert DEFAULT_POLICY in POLICIES and set(study_policies()) <= set(POLICIES)


@pytest.mark.parametrize("name", list(POLICIES))
def test_a_policy_built_without_options_holds_the_registrys_defaults(name: str) -> None:
    policy = build_policy(name)
    for option in POLICIES[name].options:
        held = _option_value(policy, option)
        assert (dict(held) if isinstance(held, dict) else held) == (
            dict(DEFAULTS[option]) if option == "floors" else DEFAULTS[option]), (name, option)


@pytest.mark.parametrize("name", list(POLICIES))
def test_a_policy_takes_each_of_its_options_and_is_marked_as_the_engine_sees_it(name: str) -> None:
    changed = {"floors": {"interactive": 4, "batch": 2}, "lendable_slots": 1, "capacity": 7, "control_period_s": 0.5,
               "restore_budget_s": 2.5, "kv_blocks": 99, "block_size": 32, "protected_wait_s": 0.5,
               "borrower_wait_s": 30.0, "extra_slots": 3}
    assert set(changed) == set(OPTIONS)
    policy = build_policy(name, **changed)
    for option in POLICIES[name].options:
        assert _option_value(policy, option) == changed[option], (name, option)
    assert (policy.upstream_priority("batch") is not None) == POLICIES[name].engine_priority


def test_aliases_name_their_policy_for_the_arms_but_not_for_the_gate() -> None:
    assert policy_named("moflux").name == "lend" and build_policy("moflux").name == "lend"
    assert arm_names() == ("fcfs", "priority", "static", "lend", "moflux", "lend-budget", "lend-preempt",
                           "lend-priority")
    with pytest.raises(SettingError, match=r"^setting gate\.policy: unknown policy 'moflux'"):
        GateSettings(upstreams={"*": "http://127.0.0.1:9"}, policy="moflux").validate()
    with pytest.raises(SettingError, match=r"^setting --arm: unknown policy 'nope'; choose one of fcfs, "):
        policy_named("nope", "--arm")
    assert named_in_prose(["static", "lend"]) == "static and lend (alias moflux)"


def test_the_gate_settings_declare_every_option_as_the_registry_does() -> None:
    declared = {each.name: each for each in SETTINGS}
    defaults = GateSettings()
    for name, option in OPTIONS.items():
        assert declared[name].kind is option.kind and declared[name].flag == option.flag
        assert declared[name].help == option.help()
        assert getattr(defaults, name) == (dict(option.default) if name == "floors" else option.default)
    assert defaults.policy == DEFAULT_POLICY
    fields = {f.name for f in dataclasses.fields(GateSettings)}
    assert set(OPTIONS) <= fields


@pytest.mark.parametrize(("name", "bad"), [
    ("restore_budget_s", 0.0), ("restore_budget_s", -1.0), ("restore_budget_s", math.nan), ("restore_budget_s", math.inf),
    ("restore_budget_s", True), ("restore_budget_s", "1"), ("control_period_s", -0.1), ("control_period_s", 1e-320),
    ("control_period_s", 0.0009), ("control_period_s", math.inf), ("control_period_s", math.nan), ("kv_blocks", 0),
    ("block_size", 0), ("capacity", 0), ("extra_slots", -1), ("lendable_slots", -1), ("borrower_wait_s", math.inf),
    ("floors", {"gold": 1}), ("floors", {"batch": -1}),
])
def test_one_check_per_option_answers_every_source_naming_that_sources_setting(name: str, bad: object) -> None:
    with pytest.raises(SettingError) as caught:
        check_option(name, bad, "--restore-budget-s")
    assert caught.value.setting == "--restore-budget-s" and "\n" not in str(caught.value)
    with pytest.raises(SettingError) as caught:
        GateSettings(upstreams={"*": "http://127.0.0.1:9"}, **{name: bad}).validate()
    assert caught.value.setting == f"gate.{name}"


def test_docs_gate_md_carries_the_registrys_option_table_and_names_every_policy() -> None:
    text = DOCS.read_text()
    assert options_table() in text
    section = text[text.index("## Policies"):text.index("A policy decides over")]
    documented = re.findall(r"^\| `([a-z-]+)` \|", section, re.MULTILINE)
    assert documented == list(POLICIES)


@pytest.mark.parametrize("period_s", [0.0, 0.001, 0.25, 1e308])
def test_the_control_period_is_0_or_at_least_a_millisecond(period_s: float) -> None:
    assert check_option("control_period_s", period_s) == period_s
