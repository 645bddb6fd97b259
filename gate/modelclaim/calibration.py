"""What the lifecycle learns from its own wakes: how long each model takes to serve again, per wake path.

Sans-I/O. ``WakeCalibration`` is a lifecycle listener: every wake that ends ready adds its
duration — from the moment its wake path began (``path_started_s``: the start or wake called, or
the first neighbour's sleep for make-room) to the moment the lifecycle began routing
(``observed_s``) — to a window of the last ``window`` wakes of that model and wake path. Routing,
not the engine's own ready instant, is what a returning client meets, so that is the time a hint
must cover. Time before the path began (waiting for room, a restart's backoff, an attach) is no
part of the path's duration: it varies with the deployment, not with the wake.

``predict_s`` is a high quantile (nearest rank, ``quantile``) of that window once ``min_wakes`` were
seen, else None (the caller falls back to its prior, the fixed Retry-After table).

``to_json`` / ``load_json`` carry it across restarts; ``calibration_file`` reads and writes the file
(``[modelclaim] calibration_path``), this module only turns it into text and back. Gates may share
one file: each writes the models it saw a wake of since it read the file (``observed_wakes``) over
what the file holds then (``merged_json``), so one gate's writes keep the others' models.
"""

from __future__ import annotations

import json
import math
from collections import deque
from collections.abc import Callable, Mapping
from typing import Any

from restorelens.errors import SettingError
from restorelens.gate.modelclaim.actions import StateInterval, WakeRecord

__all__ = ["DEFAULT_QUANTILE", "DEFAULT_WINDOW", "FORMAT_VERSION", "MAX_FILE_BYTES", "WakeCalibration", "Wakes",
           "merged_json", "parse_wakes"]

DEFAULT_QUANTILE = 0.9
DEFAULT_WINDOW = 20
FORMAT_VERSION = 1
#: A calibration file is a few numbers per model and path: anything larger is not one.
MAX_FILE_BYTES = 1 << 20

#: Wake durations as the file holds them: model -> wake path -> seconds, oldest first.
Wakes = dict[str, dict[str, list[float]]]


class WakeCalibration:
    """Observed wake durations per (model, wake path); a listener of ``ModelClaimCore``."""

    def __init__(self, *, quantile: float = DEFAULT_QUANTILE, window: int = DEFAULT_WINDOW, min_wakes: int = 1) -> None:
        if not 0 < quantile <= 1:
            raise SettingError("calibration.quantile", f"must be in (0, 1], got {quantile}")
        if window < 1 or min_wakes < 1 or min_wakes > window:
            raise SettingError("calibration.window", f"need 1 <= min_wakes <= window, got {min_wakes} and {window}")
        self.quantile, self.window, self.min_wakes = quantile, window, min_wakes
        self._wakes: dict[tuple[str, str], deque[float]] = {}
        #: Models with a wake observed since the history was read: the ones this calibration writes.
        self._observed: set[str] = set()
        #: Bumped at every observation, so a persisting shell writes only when something changed.
        self.version = 0

    def observe(self, model: str, path: str, duration_s: float) -> None:
        if not (duration_s >= 0 and math.isfinite(duration_s)):
            return
        self._wakes.setdefault((model, path), deque(maxlen=self.window)).append(duration_s)
        self._observed.add(model)
        self.version += 1

    def seen(self, model: str, path: str) -> int:
        return len(self._wakes.get((model, path), ()))

    def predict_s(self, model: str, path: str) -> float | None:
        """The ``quantile`` of the model's recent wakes on ``path`` (seconds from wanted to routed)."""
        wakes = self._wakes.get((model, path))
        if wakes is None or len(wakes) < self.min_wakes:
            return None
        ordered = sorted(wakes)
        return ordered[max(0, math.ceil(self.quantile * len(ordered)) - 1)]

    # --- listener ------------------------------------------------------------------------------

    def on_state_interval(self, interval: StateInterval) -> None:
        pass

    def on_wake_finished(self, record: WakeRecord) -> None:
        if record.outcome == "ready" and record.observed_s is not None and record.path_started_s is not None:
            self.observe(record.model, record.path, record.observed_s - record.path_started_s)

    # --- persistence as text -------------------------------------------------------------------

    def to_json(self) -> str:
        return _dump(self._as_wakes(lambda model: True))

    def observed_wakes(self) -> Wakes:
        """The whole history of every model with a wake observed since ``load_json`` (a copy)."""
        return self._as_wakes(self._observed.__contains__)

    def load_json(self, text: str, where: str) -> None:
        """Take in what ``to_json`` wrote; ``SettingError`` naming ``where`` (and the line) when it is not that."""
        self._wakes = {(model, path): deque(durations, maxlen=self.window)
                       for model, paths in parse_wakes(text, where).items() for path, durations in paths.items()}
        self._observed = set()
        self.version += 1

    def _as_wakes(self, keep: Callable[[str], bool]) -> Wakes:
        wakes: Wakes = {}
        for (model, path), durations in sorted(self._wakes.items()):
            if keep(model):
                wakes.setdefault(model, {})[path] = [round(d, 6) for d in durations]
        return wakes


def merged_json(ours: Mapping[str, Mapping[str, list[float]]], on_disk: str | None, where: str) -> str:
    """The file's text after a write of ``ours`` over ``on_disk`` (its text now; None or blank: no
    history): each model of ``ours`` as ours has it, every other model as the file has it (another
    gate's). ``SettingError`` naming ``where`` when ``on_disk`` is no calibration file: the write
    must not destroy what it cannot read."""
    wakes = parse_wakes(on_disk, where) if on_disk is not None and on_disk.strip() else {}
    wakes.update({model: {path: list(durations) for path, durations in paths.items()} for model, paths in ours.items()})
    return _dump(wakes)


def _dump(wakes: Mapping[str, Mapping[str, list[float]]]) -> str:
    return json.dumps({"version": FORMAT_VERSION, "wakes": wakes}, indent=1, sort_keys=True) + "\n"


def parse_wakes(text: str, where: str) -> Wakes:
    """A calibration file's text -> model -> wake path -> seconds; ``SettingError`` naming ``where``."""
    try:
        data = json.loads(text)
    except RecursionError:
        raise SettingError(where, "is not a calibration file (JSON nested too deep)") from None
    except ValueError as exc:
        line = getattr(exc, "lineno", 1)
        raise SettingError(f"{where}:{line}", f"is not a calibration file (invalid JSON: {exc})") from None
    if not isinstance(data, Mapping) or data.get("version") != FORMAT_VERSION:
        raise SettingError(where, f"is not a version-{FORMAT_VERSION} calibration file")
    wakes = data.get("wakes")
    if not isinstance(wakes, Mapping):
        raise SettingError(f"{where}: wakes", "must be an object of model -> wake path -> durations")
    parsed: Wakes = {}
    for model, paths in wakes.items():
        if not isinstance(paths, Mapping):
            raise SettingError(f"{where}: wakes.{model}", "must be an object of wake path -> durations")
        parsed[model] = {path: _durations(durations, f"{where}: wakes.{model}.{path}")
                         for path, durations in paths.items()}
    return parsed


def _durations(value: Any, where: str) -> list[float]:
    if not isinstance(value, list) or not all(
        isinstance(d, int | float) and not isinstance(d, bool) and math.isfinite(d) and d >= 0 for d in value
    ):
        raise SettingError(where, "must be a list of non-negative seconds")
    return [float(d) for d in value]
