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
from restorelens.settings import env_name, from_env, http_url_problem, read_toml, require_keys
from restorelens.spans import TRAFFIC_CLASSES

from .policies import DEFAULT_FLOORS, POLICIES, build_policy

__all__ = ["ANY_MODEL", "SETTINGS", "GateSettings", "Kind", "Setting", "parse_floors", "parse_upstreams"]

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
        if name in floors:
            # "batch=1,batch=9" must not silently mean batch=9: which one was meant is not known.
            raise SettingError(setting, f"{name} is given twice; give each class once")
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


@dataclass(frozen=True, slots=True)
class Kind:
    """What a setting accepts, checked before any range check: a TOML, environment or admin value of
    the wrong type is a one-line SettingError, never a TypeError deep inside a comparison."""

    expected: str  # the "expected …" of the error
    accepts: Callable[[Any], bool]
    from_text: Callable[[str], Any]  # the cast of the environment variable (and of the flag)


TEXT = Kind("a string", lambda v: isinstance(v, str), str)
TEXT_OR_NONE = Kind("a string", lambda v: v is None or isinstance(v, str), str)
WHOLE = Kind("a whole number", _is_int, int)
WHOLE_OR_NONE = Kind("a whole number or none", lambda v: v is None or _is_int(v), int)
SECONDS = Kind("a number of seconds", _is_number, float)
SWITCH = Kind("true or false", lambda v: isinstance(v, bool), _bool)
UPSTREAM_TABLE = Kind("a table of MODEL = URL or [URL, ...]", _is_upstream_table, str)
FLOOR_TABLE = Kind("a table of CLASS = whole number", _is_floor_table, str)


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


@dataclass(frozen=True, slots=True)
class GateSettings:
    upstreams: Mapping[str, str | list[str]] = setting(
        UPSTREAM_TABLE, factory=dict, flag="--upstream", metavar="[MODEL=]URL", repeatable=True,
        help="Engine base URL; MODEL=URL routes one model (repeat for several models or replicas).")
    policy: str = setting(TEXT, "lend", flag="--policy", choices=tuple(POLICIES), help="Admission policy (default lend).")
    floors: Mapping[str, int] = setting(
        FLOOR_TABLE, factory=lambda: dict(DEFAULT_FLOORS), flag="--floors", metavar="CLASS=N,...",
        help="Per-class slots, e.g. interactive=3,batch=1.")
    lendable_slots: int = setting(WHOLE, 2, flag="--lendable",
        help="Protected slots lendable to batch while interactive is idle (at least one is never lent).")
    capacity: int | None = setting(WHOLE_OR_NONE, None, flag="--capacity",
        help="Shared cap of the fcfs/priority policies (default: none).")
    default_traffic_class: str = setting(TEXT, "interactive", flag="--default-class", choices=TRAFFIC_CLASSES,
        help="Traffic class of requests without an x-traffic-class header.")
    wait_timeout_s: float = setting(SECONDS, 30.0, flag="--wait-timeout-s", old_flag="--wait-timeout",
        help="Seconds a request may queue for a grant before 429 (default 30).")
    control_period_s: float = setting(SECONDS, 0.0, flag="--control-period-s",
        help="Lend policy: seconds between the lending controller's decisions; returning demand gets its "
             "floor back one period after the next decision, at once with 0 (default 0).")
    restore_budget_s: float = setting(SECONDS, 1.0, flag="--restore-budget-s",
        help="lend-budget and lend-preempt: seconds a loan may cost to give back (its predicted drain, and the "
             "KV wait of a returning interactive request); lend-preempt aborts loans past it at restoration (default 1).")
    kv_blocks: int | None = setting(WHOLE_OR_NONE, None, flag="--kv-blocks",
        help="lend-budget and lend-preempt: the engine's KV-cache blocks (vLLM logs them at start as 'GPU KV cache "
             "size'; vllm:cache_config_info's num_gpu_blocks); unset: loans are not checked for KV.")
    block_size: int = setting(WHOLE, 16, help="lend-budget and lend-preempt: tokens per KV block (vLLM's --block-size).")
    protected_wait_s: float = setting(SECONDS, 2.0,
        help="lend-budget and lend-preempt: seconds an interactive request may queue for its floor (in place of "
             "wait_timeout_s).")
    borrower_wait_s: float = setting(SECONDS, 120.0,
        help="lend-budget and lend-preempt: seconds a batch request may queue for its floor or a loan (in place of "
             "wait_timeout_s).")
    extra_slots: int = setting(WHOLE, 1, flag="--extra-slots",
        help="lend-priority: requests admitted past the floors, ordered by the engine's priority scheduler (default 1).")
    queue_limit: int = setting(WHOLE, 256, help="Requests that may queue per traffic class; one more is a 429.")
    connect_timeout_s: float = setting(SECONDS, 5.0, help="Seconds to connect to an engine (504 beyond); also bounds /v1/models.")
    upstream_timeout_s: float = setting(SECONDS, 300.0, help="Seconds an engine may stay silent before 504.")
    max_body_bytes: int = setting(WHOLE, 4 * 1024 * 1024, help="Largest request body; a larger one is a 413.")
    max_header_bytes: int = setting(WHOLE, 64 * 1024, help="Largest request line plus headers; a larger one is a 431 at once.")
    max_json_depth: int = setting(WHOLE, 64, help="Deepest nesting of a request body's JSON; a deeper one is a 400.")
    max_retained_episodes: int = setting(WHOLE, 10_000,
        help="Closed lending periods and restoration episodes kept for /admin/state (oldest dropped first).")
    max_connections: int = setting(WHOLE, 512, help="Connections to the engines open at once, at most.")
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

    def build_policy(self):  # -> AdmissionPolicy (import cycle-free annotation kept loose on purpose)
        return build_policy(self.policy, floors=self.floors, lendable_slots=self.lendable_slots, capacity=self.capacity,
                            control_period_s=self.control_period_s, restore_budget_s=self.restore_budget_s,
                            kv_blocks=self.kv_blocks, block_size=self.block_size, extra_slots=self.extra_slots,
                            protected_wait_s=self.protected_wait_s, borrower_wait_s=self.borrower_wait_s)

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
                raise SettingError("gate", f"expected a [gate] table, got {_shown(table)}")
            require_keys(table, _SETTING_NAMES, "gate")
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
                raise SettingError(f"gate.{each.name}", f"expected {each.kind.expected}, got {_shown(value)}")
        if self.modelclaim is not None and not isinstance(self.modelclaim, Mapping):
            raise SettingError("gate.modelclaim", f"expected a table, got {_shown(self.modelclaim)}")
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
        for name in ("connect_timeout_s", "upstream_timeout_s"):
            # 0 s is no time at all: every connection, or every answer, would time out (502/504).
            if getattr(self, name) == 0:
                raise SettingError(f"gate.{name}", "must be more than 0 seconds: every request would time out")
        if self.policy not in POLICIES:
            raise SettingError("gate.policy", f"unknown policy {self.policy!r}; choose one of {', '.join(sorted(POLICIES))}")
        if self.default_traffic_class not in TRAFFIC_CLASSES:
            raise SettingError("gate.default_traffic_class", f"{self.default_traffic_class!r}; use {', '.join(TRAFFIC_CLASSES)}")
        if self.restore_budget_s == 0:
            raise SettingError("gate.restore_budget_s", "must be more than 0 seconds: no loan could ever be given back")
        if self.kv_blocks is not None and self.kv_blocks < 1:
            raise SettingError("gate.kv_blocks", f"{self.kv_blocks} must be at least 1 (the engine's KV blocks)")
        if self.extra_slots < 0:
            raise SettingError("gate.extra_slots", f"{self.extra_slots} must be 0 or more")
        for name in ("block_size", "queue_limit", "max_body_bytes", "max_header_bytes", "max_json_depth", "max_retained_episodes",
                     "max_connections"):
            if getattr(self, name) < 1:
                raise SettingError(f"gate.{name}", f"{getattr(self, name)} must be at least 1")
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
        self.build_policy()  # floors / lendable / capacity errors name their setting
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
