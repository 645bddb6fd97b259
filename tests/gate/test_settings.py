"""Gate settings: precedence flags > env > TOML > defaults, errors naming the setting."""

from __future__ import annotations

import pytest

from restorelens.errors import InputError, SettingError
from restorelens.gate.settings import GateSettings, parse_floors, parse_upstreams


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
