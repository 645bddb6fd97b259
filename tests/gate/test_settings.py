"""Gate settings: precedence flags > env > TOML > defaults, errors naming the setting."""

from __future__ import annotations

import dataclasses
import json
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from restorelens.errors import InputError, SettingError
from restorelens.gate.settings import SETTINGS, GateSettings, parse_floors, parse_upstreams


def test_upstream_and_floor_parsing() -> None:
    assert parse_upstreams(["http://a:1", "tiny=http://b:2", "tiny=http://c:3"]) == {
        "*": ["http://a:1"], "tiny": ["http://b:2", "http://c:3"]}
    assert parse_floors("interactive=3, batch=1") == {"interactive": 3, "batch": 1}
    with pytest.raises(SettingError, match="gate.floors.*not CLASS=N"):
        parse_floors("interactive:3")
    with pytest.raises(SettingError, match="gate.floors.*unknown traffic class 'vip'"):
        parse_floors("vip=1")


def test_precedence_flag_over_env_over_toml(tmp_path) -> None:
    config = tmp_path / "gate.toml"
    config.write_text('[gate]\nupstreams = {tiny = "http://127.0.0.1:9"}\npolicy = "static"\nport = 9001\nlendable_slots = 1\n')
    env = {"RESTORELENS_GATE_PORT": "9002", "RESTORELENS_GATE_FLOORS": "interactive=4,batch=2"}
    settings = GateSettings.load(config, environ=env, port=9003)
    assert settings.port == 9003 and settings.policy == "static" and settings.lendable_slots == 1
    assert settings.floors == {"interactive": 4, "batch": 2}
    assert settings.upstream_urls() == {"tiny": ["http://127.0.0.1:9"]}
    assert GateSettings.load(config, environ=env).port == 9002
    assert GateSettings.load(config, environ={}).port == 9001


def test_one_file_configures_the_gate_and_the_analysis(tmp_path) -> None:
    from restorelens.analysis.settings import label_mapping

    config = tmp_path / "deployment.toml"
    config.write_text('[gate]\nupstreams = {tiny = "http://127.0.0.1:9"}\n\n[analysis.labels]\ntraffic_class = "app.tier"\n')
    assert GateSettings.load(config, environ={}).upstream_urls() == {"tiny": ["http://127.0.0.1:9"]}
    assert label_mapping(config) == {"traffic_class": "app.tier"}
    config.write_text('[gate]\nupstreams = {tiny = "http://127.0.0.1:9"}\n\n[anlysis]\n')
    with pytest.raises(SettingError, match="anlysis"):
        GateSettings.load(config, environ={})


def test_errors_name_the_setting(tmp_path) -> None:
    with pytest.raises(SettingError, match="gate.upstreams"):
        GateSettings.load(environ={})
    with pytest.raises(SettingError, match="gate.upstreams.*not an http"):
        GateSettings.load(environ={}, upstreams=["ftp://x"])
    with pytest.raises(SettingError, match="RESTORELENS_GATE_PORT"):
        GateSettings.load(environ={"RESTORELENS_GATE_PORT": "eighty"}, upstreams=["http://x"])
    with pytest.raises(SettingError, match="gate.lendable"):
        GateSettings.load(environ={}, upstreams=["http://x"], lendable_slots=3)
    with pytest.raises(SettingError, match="gate.policy"):
        GateSettings(upstreams={"*": "http://x"}, policy="magic").validate()
    typo = tmp_path / "typo.toml"
    typo.write_text('[gate]\npolicyy = "lend"\n')
    with pytest.raises(SettingError, match="gate.policyy"):
        GateSettings.load(typo, environ={})
    broken = tmp_path / "broken.toml"
    broken.write_text("[gate\n")
    with pytest.raises(InputError, match=r"broken.toml.*line 1"):
        GateSettings.load(broken, environ={})


def test_modelclaim_table_is_kept_for_the_lifecycle(tmp_path) -> None:
    config = tmp_path / "gate.toml"
    config.write_text('[gate]\npolicy = "lend"\n[modelclaim]\nmodels = ["a"]\n')
    settings = GateSettings.load(config, environ={})  # no static upstream needed with a lifecycle
    assert settings.modelclaim == {"models": ["a"]}


# The review's list: each wrong type used to be a raw TypeError deep in validation, or was accepted.
WRONG_TYPES = [
    ("port", '"abc"', "whole number"),
    ("wait_timeout_s", '"x"', "number of seconds"),
    ("max_body_bytes", '"big"', "whole number"),
    ("admin_token", "5", "string"),
    ("policy", '["lend"]', "string"),
    ("capacity", '"3"', "whole number"),
    ("lendable_slots", '"1"', "whole number"),
    ("tracing", '"yes"', "true or false"),
    ("connect_timeout_s", "true", "number of seconds"),
    ("queue_limit", "2.5", "whole number"),
    ("host", "5", "string"),
    ("service_name", "3", "string"),
    ("floors", "{interactive = true}", "whole number"),
    ("floors", "5", "CLASS=N"),
    ("upstreams", "5", "URL"),
    ("upstreams", "{tiny = 5}", "URL"),
]


@pytest.mark.parametrize(("key", "toml_value", "expected"), WRONG_TYPES)
def test_toml_value_of_the_wrong_type_is_a_setting_error(tmp_path, key, toml_value, expected) -> None:
    config = tmp_path / "gate.toml"
    upstream = "" if key == "upstreams" else 'upstreams = {tiny = "http://127.0.0.1:9"}\n'
    config.write_text(f"[gate]\n{upstream}{key} = {toml_value}\n")
    with pytest.raises(SettingError, match=rf"^setting gate\.{key}: expected .*{expected}.*, got ") as caught:
        GateSettings.load(config, environ={})
    assert "\n" not in str(caught.value)


@pytest.mark.parametrize("raw", ["nan", "inf", "-inf", "-1"])
def test_durations_must_be_finite_and_not_negative(raw) -> None:
    env = {"RESTORELENS_GATE_WAIT_TIMEOUT_S": raw}
    with pytest.raises(SettingError, match=r"gate\.wait_timeout_s: expected a finite number of seconds >= 0"):
        GateSettings.load(environ=env, upstreams=["http://x"])
    with pytest.raises(SettingError, match=r"gate\.connect_timeout_s"):
        GateSettings.load(environ={}, upstreams=["http://x"], connect_timeout_s=float(raw))


JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers(-10, 10) | st.floats() | st.text(max_size=12),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.sampled_from(["interactive", "batch", "x"]), inner, max_size=3),
    max_leaves=6,
)


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(st.sampled_from(["policy", "floors", "lendable_slots", "capacity"]), JSON_VALUES, max_size=4))
def test_any_admin_change_is_applied_or_a_setting_error(change) -> None:
    """What ``POST /admin/policy`` hands over: any JSON either validates or names its field."""
    base = GateSettings(upstreams={"*": "http://x"})
    try:
        new = base.with_changes(**change)
    except SettingError as exc:
        assert exc.setting.removeprefix("gate.") in change or exc.setting == "gate.lendable_slots"
        return
    new.build_policy()


def test_lendable_error_names_the_real_setting() -> None:
    with pytest.raises(SettingError, match=r"^setting gate\.lendable_slots: "):
        GateSettings.load(environ={}, upstreams=["http://x"], lendable_slots=3)


def test_every_setting_is_declared_with_an_env_name_and_help() -> None:
    fields_ = [f.name for f in dataclasses.fields(GateSettings)]
    assert [s.name for s in SETTINGS] == [name for name in fields_ if name != "modelclaim"]  # [modelclaim] is its own table
    for each in SETTINGS:
        assert each.env == "RESTORELENS_GATE_" + each.name.upper()
        assert each.help.endswith(".") and each.kind.expected
        assert each.kind.accepts(getattr(GateSettings(), each.name)), each.name


def test_a_help_that_states_the_default_states_the_declared_one() -> None:
    stated = {s.name: m.group(1) for s in SETTINGS
              if (m := re.search(r"\(default:? ([^)]+)\)", s.help) or re.search(r"Default: (.+)\.$", s.help))}
    assert set(stated) >= {"policy", "capacity", "wait_timeout_s", "restore_budget_s", "floors", "host", "port"}
    for name, text in stated.items():
        default = getattr(GateSettings(), name)
        if isinstance(default, dict):
            default = ",".join(f"{k}={v}" for k, v in default.items())
        assert text == ("none" if default is None else f"{default:g}" if isinstance(default, float) else str(default)), name


#: Per setting, a valid value other than the default: as its environment variable gives it, as loaded.
CHANGED = {
    "upstreams": ("m=http://127.0.0.1:9", {"m": ["http://127.0.0.1:9"]}),
    "policy": ("static", "static"),
    "floors": ("interactive=4,batch=2", {"interactive": 4, "batch": 2}),
    "lendable_slots": ("1", 1),
    "capacity": ("3", 3),
    "default_traffic_class": ("batch", "batch"),
    "wait_timeout_s": ("2.5", 2.5),
    "control_period_s": ("0.25", 0.25),
    "restore_budget_s": ("2.5", 2.5),
    "kv_blocks": ("320", 320),
    "block_size": ("32", 32),
    "protected_wait_s": ("0.5", 0.5),
    "borrower_wait_s": ("30", 30.0),
    "extra_slots": ("2", 2),
    "queue_limit": ("9", 9),
    "connect_timeout_s": ("1.5", 1.5),
    "upstream_timeout_s": ("60", 60.0),
    "max_body_bytes": ("1000", 1000),
    "max_header_bytes": ("2048", 2048),
    "max_json_depth": ("8", 8),
    "max_retained_episodes": ("100", 100),
    "max_connections": ("8", 8),
    "head_timeout_s": ("2.5", 2.5),
    "max_client_connections": ("100", 100),
    "drain_timeout_s": ("10", 10.0),
    "host": ("0.0.0.0", "0.0.0.0"),
    "port": ("0", 0),
    "admin_token": ("a-long-token", "a-long-token"),
    "tracing": ("off", False),
    "service_name": ("svc", "svc"),
}


def test_every_setting_is_read_from_its_environment_variable_and_the_gate_table(tmp_path) -> None:
    assert set(CHANGED) == {s.name for s in SETTINGS}
    for each in SETTINGS:
        text, expected = CHANGED[each.name]
        upstream = {} if each.name == "upstreams" else {"upstreams": "http://x"}
        from_env = GateSettings.load(environ={each.env: text}, **upstream)
        toml_value = json.dumps(text) if isinstance(expected, str | dict) else str(expected).lower()
        config = tmp_path / f"{each.name}.toml"
        config.write_text(f"[gate]\n{each.name} = {toml_value}\n")
        from_toml = GateSettings.load(config, environ={}, **upstream)
        assert getattr(from_env, each.name) == getattr(from_toml, each.name) == expected != getattr(GateSettings(), each.name), each.name


# Values that type-check but would only fail once the gate serves: refused when the settings load
# (which `restorelens gate --check` runs), naming the setting and the problem (issue #17).
def test_a_floor_given_twice_is_refused_not_the_last_one_kept() -> None:
    for given_as in ({"RESTORELENS_GATE_FLOORS": "batch=1,batch=9,interactive=3"}, {}):
        flags = {} if given_as else {"floors": "interactive=3, batch=1, batch=9"}
        with pytest.raises(SettingError, match=r"^setting gate\.floors: batch is given twice") as caught:
            GateSettings.load(environ=given_as, upstreams=["http://x"], **flags)
        assert "\n" not in str(caught.value)
    with pytest.raises(SettingError, match=r"gate\.floors: interactive is given twice"):
        GateSettings(upstreams={"*": "http://x"}).with_changes(floors="interactive=2,interactive=4,batch=1")


def test_a_traffic_class_left_out_of_the_floors_is_refused() -> None:
    # It used to get floor 0 silently: under static every batch request queued, then got a 429.
    with pytest.raises(SettingError, match=r"^setting gate\.floors: no batch floor"):
        GateSettings.load(environ={}, upstreams=["http://x"], policy="static", floors="interactive=4")
    assert GateSettings.load(environ={}, upstreams=["http://x"], policy="static",
                             floors="interactive=4,batch=0").floors == {"interactive": 4, "batch": 0}


@pytest.mark.parametrize(("url", "problem"), [
    ("not a url at all", "not an http(s) URL"),
    ("localhost:8000", "not an http(s) URL"),
    ("http://:8000", "no host"),
    ("http://not a host", "not a host name"),
    ("http://127.0.0.1:99999", "1-65535"),
    ("http://127.0.0.1:80a", "1-65535"),
    ("http://127.0.0.1:0", "port 0"),
    ("http://[::zz]:80", "1-65535"),
    ("http://user:secret@127.0.0.1:8000", "credentials"),
    ("http://127.0.0.1:8000?key=1", "query or fragment"),
])
def test_an_upstream_that_is_not_a_base_url_is_refused(url: str, problem: str) -> None:
    with pytest.raises(SettingError, match=r"^setting gate\.upstreams: ") as caught:
        GateSettings.load(environ={}, upstreams=[f"tiny={url}"])
    assert problem in caught.value.problem and "'tiny'" in caught.value.problem


def test_good_upstream_urls_are_kept() -> None:
    urls = ["http://127.0.0.1:8000", "https://engine.example/v1-prefix/", "http://[::1]:8000", "http://engine:65535"]
    assert GateSettings.load(environ={}, upstreams=urls).upstream_urls() == {"*": urls}


@pytest.mark.parametrize("name", ["connect_timeout_s", "upstream_timeout_s", "head_timeout_s"])
def test_a_zero_timeout_is_refused(name: str) -> None:
    # 0 s: every connection (or answer, or head) times out, so every request would be a 408/502/504.
    with pytest.raises(SettingError, match=rf"^setting gate\.{name}: must be more than 0 seconds"):
        GateSettings.load(environ={}, upstreams=["http://x"], **{name: 0.0})


def test_no_client_connection_at_all_is_refused() -> None:
    with pytest.raises(SettingError, match=r"^setting gate\.max_client_connections: 0 must be at least 1"):
        GateSettings.load(environ={"RESTORELENS_GATE_MAX_CLIENT_CONNECTIONS": "0"}, upstreams=["http://x"])


@pytest.mark.parametrize("token", ["with a space", "tab\tinside", "non-ascii-é-token", " leading-space", "new\nline-token"])
def test_an_admin_token_no_authorization_header_can_carry_is_refused(token: str) -> None:
    # Compared with the header's value (stripped, Latin-1): such a token could never match, every call 401.
    with pytest.raises(SettingError, match=r"^setting gate\.admin_token: use visible ASCII"):
        GateSettings.load(environ={}, upstreams=["http://x"], admin_token=token)
