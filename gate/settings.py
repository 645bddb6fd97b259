"""The gate's settings: flags > ``RESTORELENS_GATE_*`` environment > ``[gate]`` in a TOML file > defaults.

``GateSettings`` is a plain dataclass (tests build it directly); ``GateSettings.load`` merges the
sources and ``validate`` checks every value, raising ``SettingError`` naming the setting. Each
setting is declared once, on its field (``setting(...)``); ``SETTINGS`` lists the declarations, from
which the environment variables, the ``[gate]`` keys, the type checks and the CLI flags all follow.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields, replace
from typing import Any

from restorelens.errors import SettingError
from restorelens.settings import (
    DEFAULT_DRAIN_TIMEOUT_S, DEFAULT_HEAD_TIMEOUT_S, env_name, from_env, http_url_problem, read_toml, require_keys,
)
from restorelens.spans import TRAFFIC_CLASSES

from .policies.build import build_policy
from .policies.interface import AdmissionPolicy
from .policies.registry import DEFAULT_POLICY, OPTIONS, POLICIES, policy_named
from .routing import ANY_MODEL
from .setting_kinds import (
    SECONDS, SWITCH, TEXT, TEXT_OR_NONE, UPSTREAM_TABLE, WHOLE, WHOLE_OR_NONE, Kind, is_int, shown,
)

__all__ = ["SETTINGS", "GateSettings", "Setting", "parse_floors", "parse_upstreams"]


def parse_upstreams(values: str | list[str] | tuple[str, ...], setting: str = "gate.upstreams") -> dict[str, list[str]]:
    """``["http://a", "tiny=http://b", "tiny=http://c"]`` (or one comma-separated string) -> model -> URLs."""
    if not (isinstance(values, str) or (isinstance(values, list | tuple) and all(isinstance(v, str) for v in values))):
        raise SettingError(setting, f"expected [MODEL=]URL strings or a table of MODEL = URL, got {shown(values)}")
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
        raise SettingError(setting, f"expected CLASS=N,... or a table of whole numbers, got {shown(value)}")
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
        if name in floors:
            # "batch=1,batch=9" must not silently mean batch=9: which one was meant is not known.
            raise SettingError(setting, f"{name} is given twice; give each class once")
        if isinstance(number, str):
            try:
                number = int(number)
            except ValueError:
                raise SettingError(setting, f"{name} floor {number!r} is not a whole number") from None
        if not is_int(number):
            raise SettingError(setting, f"expected a whole number as the {name} floor, got {shown(number)}")
        floors[name] = number
    return floors


@dataclass(frozen=True, slots=True)
class Setting:
    """One gate setting, as declared on its ``GateSettings`` field (see ``SETTINGS``)."""

    name: str
    kind: Kind
    help: str  # of the flag in --help when there is one
    flag: str | None = None
    old_flag: str | None = None  # an earlier name of the flag, still accepted, hidden from --help
    metavar: str | None = None
    choices: tuple[str, ...] = ()
    repeatable: bool = False
    flag_value: Any = None  # set: the flag takes no value and gives the setting this one

    @property
    def env(self) -> str:  # RESTORELENS_GATE_<NAME>
        return env_name(f"gate.{self.name}")


def setting(kind: Kind, default: Any = None, *, factory: Callable[[], Any] | None = None, **declared: Any) -> Any:
    """A ``GateSettings`` field that is a setting; ``declared`` are ``Setting``'s other fields."""
    metadata = {"setting": {"kind": kind, **declared}}
    return field(default=default, metadata=metadata) if factory is None else field(default_factory=factory, metadata=metadata)


def policy_option(name: str, **declared: Any) -> Any:
    """A ``GateSettings`` field for the policy option ``name``, as ``policies.registry`` declares it."""
    option = OPTIONS[name]
    default = option.default
    factory = (lambda: dict(default)) if isinstance(default, Mapping) else None
    return setting(option.kind, None if factory else default, factory=factory, flag=option.flag, help=option.help(),
                   **declared)


@dataclass(frozen=True, slots=True)
class GateSettings:
    upstreams: Mapping[str, str | list[str]] = setting(
        UPSTREAM_TABLE, factory=dict, flag="--upstream", metavar="[MODEL=]URL", repeatable=True,
        help="Engine base URL; MODEL=URL routes one model (repeat for several models or replicas).")
    policy: str = setting(TEXT, DEFAULT_POLICY, flag="--policy", choices=tuple(POLICIES),
                          help=f"Admission policy (default {DEFAULT_POLICY}).")
    floors: Mapping[str, int] = policy_option("floors", metavar="CLASS=N,...")
    lendable_slots: int = policy_option("lendable_slots")
    capacity: int | None = policy_option("capacity")
    default_traffic_class: str = setting(TEXT, "interactive", flag="--default-class", choices=TRAFFIC_CLASSES,
        help="Traffic class of requests without an x-traffic-class header.")
    wait_timeout_s: float = setting(SECONDS, 30.0, flag="--wait-timeout-s", old_flag="--wait-timeout",
        help="Seconds a request may queue for a grant before 429 (default 30).")
    control_period_s: float = policy_option("control_period_s")
    restore_budget_s: float = policy_option("restore_budget_s")
    kv_blocks: int | None = policy_option("kv_blocks")
    block_size: int = policy_option("block_size")
    protected_wait_s: float = policy_option("protected_wait_s")
    borrower_wait_s: float = policy_option("borrower_wait_s")
    extra_slots: int = policy_option("extra_slots")
    queue_limit: int = setting(WHOLE, 256, help="Requests that may queue per traffic class; one more is a 429.")
    connect_timeout_s: float = setting(SECONDS, 5.0, help="Seconds to connect to an engine (504 beyond); also bounds /v1/models.")
    upstream_timeout_s: float = setting(SECONDS, 300.0, help="Seconds an engine may stay silent before 504.")
    max_body_bytes: int = setting(WHOLE, 4 * 1024 * 1024, help="Largest request body; a larger one is a 413.")
    max_header_bytes: int = setting(WHOLE, 64 * 1024, help="Largest request line plus headers; a larger one is a 431 at once.")
    max_json_depth: int = setting(WHOLE, 64, help="Deepest nesting of a request body's JSON; a deeper one is a 400.")
    max_retained_episodes: int = setting(WHOLE, 10_000,
        help="Closed lending periods and restoration episodes kept for /admin/state (oldest dropped first).")
    max_connections: int = setting(WHOLE, 512, help="Connections to the engines open at once, at most.")
    head_timeout_s: float = setting(SECONDS, DEFAULT_HEAD_TIMEOUT_S,
        help="Seconds a client may take to send a request head, from its connection's opening or the head's "
             "first byte to its end (408 and closed beyond).")
    max_client_connections: int | None = setting(WHOLE_OR_NONE, None,
        help="Client connections open at once; past it the one waiting longest for its head is closed, never one "
             "being served. Unset: half of what the open-file limit leaves after 64.")
    drain_timeout_s: float = setting(SECONDS, DEFAULT_DRAIN_TIMEOUT_S,
        help="At SIGTERM or SIGINT, seconds the requests being served may take to finish before their connections "
             "are cut (default 25), within Kubernetes' 30-s grace period.")
    host: str = setting(TEXT, "127.0.0.1", flag="--host", help="Bind address (default 127.0.0.1).")
    port: int = setting(WHOLE, 8080, flag="--port", help="Port (default 8080).")
    admin_token: str | None = setting(TEXT_OR_NONE, None, help="Bearer token of /admin/* (8 characters or more); unset: 403.")
    tracing: bool = setting(SWITCH, True, flag="--no-tracing", flag_value=False, help="Emit no spans at all.")
    service_name: str = setting(TEXT, "restorelens-gate", help="service.name of the gate's spans.")
    #: The ``[modelclaim]`` table of the config file, handed to the lifecycle's ``build_router``; not
    #: a setting of ``[gate]`` (no environment variable, no flag).
    modelclaim: Mapping[str, Any] | None = None

    # --- derived -------------------------------------------------------------------------------

    def upstream_urls(self) -> dict[str, list[str]]:
        return {m: [u] if isinstance(u, str) else list(u) for m, u in self.upstreams.items()}

    def policy_options(self) -> dict[str, Any]:
        """Every policy option's value, by name (``policies.registry.OPTIONS``)."""
        return {name: getattr(self, name) for name in OPTIONS}

    def build_policy(self) -> AdmissionPolicy:
        return build_policy(self.policy, **self.policy_options())

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
            # [analysis] belongs to `report`, `check` and the dashboard: one file can hold a deployment
            require_keys(document, {"gate", "modelclaim", "analysis"}, str(config_file))
            table = document.get("gate", {})
            if not isinstance(table, Mapping):
                raise SettingError("gate", f"expected a [gate] table, got {shown(table)}")
            require_keys(table, _SETTING_NAMES, "gate")
            values.update(table)
            modelclaim = document.get("modelclaim")
            if modelclaim is not None and not isinstance(modelclaim, Mapping):
                raise SettingError("modelclaim", f"expected a [modelclaim] table, got {shown(modelclaim)}")
        values.update(_from_environment(environ))
        values.update({k: v for k, v in flags.items() if v is not None})
        if "upstreams" in values and not isinstance(values["upstreams"], Mapping):
            values["upstreams"] = parse_upstreams(values["upstreams"])
        if "floors" in values:
            values["floors"] = parse_floors(values["floors"])
        if modelclaim is not None:
            values.setdefault("modelclaim", modelclaim)
        _refuse_unknown(values)
        return cls(**values).validate()

    def with_changes(self, **changes: Any) -> GateSettings:
        """A validated copy; ``floors`` may be given as ``"interactive=3,batch=1"`` or a mapping."""
        _refuse_unknown(changes)
        if "floors" in changes:
            changes["floors"] = parse_floors(changes["floors"])
        return replace(self, **changes).validate()

    def validate(self) -> GateSettings:
        for each in SETTINGS:
            value = getattr(self, each.name)
            if not each.kind.accepts(value):
                raise SettingError(f"gate.{each.name}", f"expected {each.kind.expected}, got {shown(value)}")
        if self.modelclaim is not None and not isinstance(self.modelclaim, Mapping):
            raise SettingError("gate.modelclaim", f"expected a table, got {shown(self.modelclaim)}")
        for each in SETTINGS:
            value = getattr(self, each.name)
            if each.kind is SECONDS and (not math.isfinite(value) or value < 0):
                raise SettingError(f"gate.{each.name}", f"expected a finite number of seconds >= 0, got {value!r}")
        if not self.upstreams and self.modelclaim is None:
            raise SettingError("gate.upstreams", "no upstream engine: give --upstream URL or MODEL=URL")
        for model, urls in self.upstream_urls().items():
            if not urls:
                raise SettingError("gate.upstreams", f"model {model!r} has no URL")
            for url in urls:
                if (problem := http_url_problem(url)) is not None:
                    raise SettingError("gate.upstreams", f"{problem} (for model {model!r})")
        for name in ("connect_timeout_s", "upstream_timeout_s", "head_timeout_s"):
            # 0 s is no time at all: every connection, or every answer, would time out (408/502/504).
            if getattr(self, name) == 0:
                raise SettingError(f"gate.{name}", "must be more than 0 seconds: every request would time out")
        policy_named(self.policy, aliases=False)
        if self.default_traffic_class not in TRAFFIC_CLASSES:
            raise SettingError("gate.default_traffic_class", f"{self.default_traffic_class!r}; use {', '.join(TRAFFIC_CLASSES)}")
        for name in ("queue_limit", "max_body_bytes", "max_header_bytes", "max_json_depth", "max_retained_episodes",
                     "max_connections"):
            if getattr(self, name) < 1:
                raise SettingError(f"gate.{name}", f"{getattr(self, name)} must be at least 1")
        if self.max_client_connections is not None and self.max_client_connections < 1:
            raise SettingError("gate.max_client_connections", f"{self.max_client_connections} must be at least 1")
        if not 0 <= self.port <= 65535:
            raise SettingError("gate.port", f"{self.port} is not a TCP port")
        if self.admin_token is not None:
            if len(self.admin_token) < 8:
                raise SettingError("gate.admin_token", "too short: use at least 8 characters")
            # It is compared with an Authorization header, which carries visible ASCII only (headers
            # are stripped, and decoded as Latin-1): another token could never match, every call 401.
            if not all("!" <= c <= "~" for c in self.admin_token):
                raise SettingError("gate.admin_token", "use visible ASCII characters only, no spaces: it is sent "
                                                       "in an Authorization header")
        missing = [name for name in TRAFFIC_CLASSES if name not in self.floors]
        if missing:
            # A class left out would get floor 0: its requests would queue and 429 without saying why.
            raise SettingError("gate.floors", f"no {missing[0]} floor; give every class "
                                              f"({', '.join(TRAFFIC_CLASSES)}), 0 to admit none on its own slots")
        self.build_policy()  # the policy options' checks (policies.registry) name their setting
        return self


#: Every gate setting in declaration order (the order of --help and of the type checks).
SETTINGS = tuple(Setting(name=f.name, **f.metadata["setting"]) for f in fields(GateSettings) if "setting" in f.metadata)

_SETTING_NAMES = {each.name for each in SETTINGS}
_FIELD_NAMES = {f.name for f in fields(GateSettings)}


def _refuse_unknown(values: Mapping[str, Any]) -> None:
    unknown = set(values) - _FIELD_NAMES
    if unknown:
        raise SettingError(f"gate.{sorted(unknown)[0]}", "unknown setting")


def _from_environment(environ: Mapping[str, str] | None) -> dict[str, Any]:
    """``RESTORELENS_GATE_<NAME>`` for each setting (e.g. ``RESTORELENS_GATE_LENDABLE_SLOTS=2``)."""
    found = {each.name: from_env(f"gate.{each.name}", each.kind.from_text, environ) for each in SETTINGS}
    return {name: value for name, value in found.items() if value is not None}
