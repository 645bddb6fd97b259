"""The gate's settings: flags > ``RESTORELENS_GATE_*`` environment > ``[gate]`` in a TOML file > defaults.

``GateSettings`` is a plain dataclass (tests build it directly); ``GateSettings.load`` merges the
sources and ``validate`` checks every value, raising ``SettingError`` naming the setting.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields, replace
from typing import Any
from urllib.parse import urlsplit

from restorelens.errors import SettingError
from restorelens.settings import env_name, from_env, read_toml, require_keys
from restorelens.spans import TRAFFIC_CLASSES

from .policies import DEFAULT_FLOORS, POLICIES, build_policy

__all__ = ["ANY_MODEL", "GateSettings", "parse_floors", "parse_upstreams"]

#: Upstream key for "every model not listed" (``--upstream URL`` without ``MODEL=``).
ANY_MODEL = "*"


def parse_upstreams(values: str | list[str] | tuple[str, ...], setting: str = "gate.upstreams") -> dict[str, list[str]]:
    """``["http://a", "tiny=http://b", "tiny=http://c"]`` (or one comma-separated string) -> model -> URLs."""
    if not (isinstance(values, str) or (isinstance(values, list | tuple) and all(isinstance(v, str) for v in values))):
        raise SettingError(setting, f"expected [MODEL=]URL strings or a table of MODEL = URL, got {_shown(values)}")
    items = [v for part in ([values] if isinstance(values, str) else values) for v in str(part).split(",") if v.strip()]
    upstreams: dict[str, list[str]] = {}
    for item in items:
        model, sep, url = item.strip().partition("=")
        if not sep:
            model, url = ANY_MODEL, item.strip()
        upstreams.setdefault(model.strip() or ANY_MODEL, []).append(url.strip())
    return upstreams


def parse_floors(value: str | Mapping[str, Any], setting: str = "gate.floors") -> dict[str, int]:
    """``"interactive=3,batch=1"`` (or a TOML table) -> ``{"interactive": 3, "batch": 1}``."""
    pairs: list[tuple[str, Any]]
    if isinstance(value, Mapping):
        pairs = list(value.items())
    elif not isinstance(value, str):
        raise SettingError(setting, f"expected CLASS=N,... or a table of whole numbers, got {_shown(value)}")
    else:
        pairs = []
        for item in str(value).split(","):
            name, sep, number = item.partition("=")
            if not sep:
                raise SettingError(setting, f"{item.strip()!r} is not CLASS=N (e.g. interactive=3,batch=1)")
            pairs.append((name.strip(), number.strip()))
    floors: dict[str, int] = {}
    for name, number in pairs:
        if name not in TRAFFIC_CLASSES:
            raise SettingError(setting, f"unknown traffic class {name!r}; use {', '.join(TRAFFIC_CLASSES)}")
        if isinstance(number, str):
            try:
                number = int(number)
            except ValueError:
                raise SettingError(setting, f"{name} floor {number!r} is not a whole number") from None
        if not _is_int(number):
            raise SettingError(setting, f"expected a whole number as the {name} floor, got {_shown(number)}")
        floors[name] = number
    return floors


def _bool(raw: str) -> bool:
    lowered = raw.strip().lower()
    if lowered in {"1", "true", "yes", "on"}:
        return True
    if lowered in {"0", "false", "no", "off"}:
        return False
    raise ValueError("expected true or false")


def _shown(value: Any) -> str:
    """``str 'abc'``, ``bool True``: the type and the value, for "expected …, got …" messages."""
    if value is None:
        return "null"
    text = repr(value)
    return f"{type(value).__name__} {text if len(text) <= 40 else text[:37] + '...'}"


def _is_int(value: Any) -> bool:
    # bool is an int subclass: `port = true` is a mistake, not port 1.
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _is_upstream_table(value: Any) -> bool:
    if not isinstance(value, Mapping):
        return False
    for model, urls in value.items():
        if not isinstance(model, str):
            return False
        if not (isinstance(urls, str) or (isinstance(urls, list | tuple) and all(isinstance(u, str) for u in urls))):
            return False
    return True


def _is_floor_table(value: Any) -> bool:
    return isinstance(value, Mapping) and all(isinstance(k, str) and _is_int(v) for k, v in value.items())


#: Each field's accepted Python type, as (what the message says, test). Run before any range check,
#: so a TOML, environment or admin value of the wrong type is a one-line SettingError, never a
#: TypeError deep inside a comparison.
_TYPES: dict[str, tuple[str, Callable[[Any], bool]]] = {
    "upstreams": ("a table of MODEL = URL or [URL, ...]", _is_upstream_table),
    "policy": ("a string", lambda v: isinstance(v, str)),
    "floors": ("a table of CLASS = whole number", _is_floor_table),
    "lendable_slots": ("a whole number", _is_int),
    "capacity": ("a whole number or none", lambda v: v is None or _is_int(v)),
    "default_traffic_class": ("a string", lambda v: isinstance(v, str)),
    "wait_timeout_s": ("a number of seconds", _is_number),
    "queue_limit": ("a whole number", _is_int),
    "connect_timeout_s": ("a number of seconds", _is_number),
    "upstream_timeout_s": ("a number of seconds", _is_number),
    "max_body_bytes": ("a whole number", _is_int),
    "max_connections": ("a whole number", _is_int),
    "host": ("a string", lambda v: isinstance(v, str)),
    "port": ("a whole number", _is_int),
    "admin_token": ("a string", lambda v: v is None or isinstance(v, str)),
    "tracing": ("true or false", lambda v: isinstance(v, bool)),
    "service_name": ("a string", lambda v: isinstance(v, str)),
    "modelclaim": ("a table", lambda v: v is None or isinstance(v, Mapping)),
}

_DURATIONS_S = ("wait_timeout_s", "connect_timeout_s", "upstream_timeout_s")


@dataclass(frozen=True, slots=True)
class GateSettings:
    upstreams: Mapping[str, str | list[str]] = field(default_factory=dict)
    policy: str = "lend"
    floors: Mapping[str, int] = field(default_factory=lambda: dict(DEFAULT_FLOORS))
    lendable_slots: int = 2
    #: Shared cap of the fcfs/priority policies (None: unlimited, the engine queues).
    capacity: int | None = None
    default_traffic_class: str = "interactive"
    wait_timeout_s: float = 30.0
    queue_limit: int = 256
    connect_timeout_s: float = 5.0
    upstream_timeout_s: float = 300.0
    max_body_bytes: int = 4 * 1024 * 1024
    max_connections: int = 512
    host: str = "127.0.0.1"
    port: int = 8080
    admin_token: str | None = None
    tracing: bool = True
    service_name: str = "restorelens-gate"
    #: The ``[modelclaim]`` table of the config file, handed to the lifecycle's ``build_router``.
    modelclaim: Mapping[str, Any] | None = None

    # --- derived -------------------------------------------------------------------------------

    def upstream_urls(self) -> dict[str, list[str]]:
        return {m: [u] if isinstance(u, str) else list(u) for m, u in self.upstreams.items()}

    def build_policy(self):  # -> AdmissionPolicy (import cycle-free annotation kept loose on purpose)
        return build_policy(self.policy, floors=self.floors, lendable_slots=self.lendable_slots, capacity=self.capacity)

    # --- loading -------------------------------------------------------------------------------

    @classmethod
    def load(
        cls,
        config_file: str | os.PathLike[str] | None = None,
        *,
        environ: Mapping[str, str] | None = None,
        **flags: Any,
    ) -> GateSettings:
        """Merge defaults < TOML ``[gate]`` < environment < ``flags`` (None flags are ignored); validate."""
        values: dict[str, Any] = {}
        modelclaim = None
        if config_file is not None:
            document = read_toml(config_file)
            require_keys(document, {"gate", "modelclaim"}, str(config_file))
            table = document.get("gate", {})
            if not isinstance(table, Mapping):
                raise SettingError("gate", f"expected a [gate] table, got {_shown(table)}")
            require_keys(table, _FIELD_NAMES - {"modelclaim"}, "gate")
            values.update(table)
            modelclaim = document.get("modelclaim")
            if modelclaim is not None and not isinstance(modelclaim, Mapping):
                raise SettingError("modelclaim", f"expected a [modelclaim] table, got {_shown(modelclaim)}")
        values.update(_from_environment(environ))
        values.update({k: v for k, v in flags.items() if v is not None})
        if "upstreams" in values and not isinstance(values["upstreams"], Mapping):
            values["upstreams"] = parse_upstreams(values["upstreams"])
        if "floors" in values:
            values["floors"] = parse_floors(values["floors"])
        if modelclaim is not None:
            values.setdefault("modelclaim", modelclaim)
        unknown = set(values) - _FIELD_NAMES
        if unknown:
            raise SettingError(f"gate.{sorted(unknown)[0]}", "unknown setting")
        return cls(**values).validate()

    def with_changes(self, **changes: Any) -> GateSettings:
        """A validated copy; ``floors`` may be given as ``"interactive=3,batch=1"`` or a mapping."""
        unknown = set(changes) - _FIELD_NAMES
        if unknown:
            raise SettingError(f"gate.{sorted(unknown)[0]}", "unknown setting")
        if "floors" in changes:
            changes["floors"] = parse_floors(changes["floors"])
        return replace(self, **changes).validate()

    def validate(self) -> GateSettings:
        for name, (expected, accepts) in _TYPES.items():
            value = getattr(self, name)
            if not accepts(value):
                raise SettingError(f"gate.{name}", f"expected {expected}, got {_shown(value)}")
        for name in _DURATIONS_S:
            value = getattr(self, name)
            if not math.isfinite(value) or value < 0:
                raise SettingError(f"gate.{name}", f"expected a finite number of seconds >= 0, got {value!r}")
        if not self.upstreams and self.modelclaim is None:
            raise SettingError("gate.upstreams", "no upstream engine: give --upstream URL or MODEL=URL")
        for model, urls in self.upstream_urls().items():
            if not urls:
                raise SettingError("gate.upstreams", f"model {model!r} has no URL")
            for url in urls:
                parts = urlsplit(url)
                if parts.scheme not in {"http", "https"} or not parts.netloc:
                    raise SettingError("gate.upstreams", f"{url!r} for model {model!r} is not an http(s) URL")
        if self.policy not in POLICIES:
            raise SettingError("gate.policy", f"unknown policy {self.policy!r}; choose one of {', '.join(sorted(POLICIES))}")
        if self.default_traffic_class not in TRAFFIC_CLASSES:
            raise SettingError("gate.default_traffic_class", f"{self.default_traffic_class!r}; use {', '.join(TRAFFIC_CLASSES)}")
        for name in ("queue_limit", "max_body_bytes", "max_connections"):
            if getattr(self, name) < 1:
                raise SettingError(f"gate.{name}", f"{getattr(self, name)} must be at least 1")
        if not 0 <= self.port <= 65535:
            raise SettingError("gate.port", f"{self.port} is not a TCP port")
        if self.admin_token is not None and len(self.admin_token) < 8:
            raise SettingError("gate.admin_token", "too short: use at least 8 characters")
        self.build_policy()  # floors / lendable / capacity errors name their setting
        return self


_FIELD_NAMES = {f.name for f in fields(GateSettings)}

_ENV_CASTS: dict[str, Any] = {
    "upstreams": str,
    "policy": str,
    "floors": str,
    "lendable_slots": int,
    "capacity": int,
    "default_traffic_class": str,
    "wait_timeout_s": float,
    "queue_limit": int,
    "connect_timeout_s": float,
    "upstream_timeout_s": float,
    "max_body_bytes": int,
    "max_connections": int,
    "host": str,
    "port": int,
    "admin_token": str,
    "tracing": _bool,
    "service_name": str,
}


def _from_environment(environ: Mapping[str, str] | None) -> dict[str, Any]:
    """``RESTORELENS_GATE_<FIELD>`` for each field (e.g. ``RESTORELENS_GATE_LENDABLE_SLOTS=2``)."""
    found: dict[str, Any] = {}
    for name, cast in _ENV_CASTS.items():
        value = from_env(f"gate.{name}", cast, environ)
        if value is not None:
            found[name] = value
    return found


def environment_variable(name: str) -> str:
    """The environment variable of a setting (for help texts and docs)."""
    return env_name(f"gate.{name}")
