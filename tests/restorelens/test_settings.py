from __future__ import annotations

from pathlib import Path

import pytest

from restorelens.errors import InputError, SettingError
from restorelens.settings import env_name, from_env, read_toml, require_keys


def test_env_name() -> None:
    assert env_name("gate.port") == "RESTORELENS_GATE_PORT"


def test_from_env_casts_and_names_the_variable_on_error() -> None:
    assert from_env("gate.port", int, {"RESTORELENS_GATE_PORT": "8080"}) == 8080
    assert from_env("gate.port", int, {}) is None
    with pytest.raises(SettingError, match="RESTORELENS_GATE_PORT: value 'x' is not a valid int"):
        from_env("gate.port", int, {"RESTORELENS_GATE_PORT": "x"})


def test_read_toml_names_the_file(tmp_path: Path) -> None:
    good = tmp_path / "ok.toml"
    good.write_text('[gate]\npolicy = "lend"\n')
    assert read_toml(good) == {"gate": {"policy": "lend"}}
    bad = tmp_path / "bad.toml"
    bad.write_text("[gate]\npolicy = \n")
    with pytest.raises(InputError, match=r"bad\.toml.*invalid TOML"):
        read_toml(bad)
    with pytest.raises(InputError, match=r"missing\.toml: cannot read"):
        read_toml(tmp_path / "missing.toml")


def test_unknown_keys_are_rejected_by_name() -> None:
    require_keys({"policy": 1}, {"policy", "port"}, "gate")
    with pytest.raises(SettingError, match=r"setting gate\.polcy: unknown setting; valid ones: policy, port"):
        require_keys({"polcy": 1}, {"policy", "port"}, "gate")
