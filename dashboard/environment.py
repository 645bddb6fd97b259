"""What ``restorelens dashboard`` hands the Streamlit process through its environment: the store
(``DB_ENV``), the limits, the label mapping, the window it is read for and the upload limit.

No Streamlit and no DuckDB here: the CLI writes these before ``--help`` could wait for either. The
app checks each value again as the CLI checked it: the environment is the app's input too.
"""

from __future__ import annotations

import json
import os

from restorelens.analysis import Window
from restorelens.errors import SettingError

__all__ = [
    "DB_ENV",
    "DEFAULT_MAX_UPLOAD_BYTES",
    "LABELS_ENV",
    "LIMITS_ENV",
    "MAX_LABELS_ENV_CHARS",
    "MAX_UPLOAD_ENV",
    "MAX_WINDOW_ENV_CHARS",
    "WINDOW_ENV",
    "configured_labels",
    "configured_limits",
    "configured_max_upload_bytes",
    "configured_window",
    "labels_env_value",
    "store_window",
    "window_env_value",
]

#: The span store the CLI's ``--db`` names (an absolute path).
DB_ENV = "RESTORELENS_DASHBOARD_DB"
#: Limits (``view.metric.stat=N``, separated by ``;``) the CLI's ``--max`` options name.
LIMITS_ENV = "RESTORELENS_DASHBOARD_LIMITS"
#: The label mapping (``--label``, ``--config``'s ``[analysis.labels]``) as one JSON object of
#: label -> attribute name: data for ``json.loads``, never code or SQL.
LABELS_ENV = "RESTORELENS_DASHBOARD_LABELS"
#: The mapping's longest JSON text: six labels of 256-character names fit many times over, and the
#: app reads no more than this from its environment before parsing it.
MAX_LABELS_ENV_CHARS = 16 * 1024
#: The window (``--since``, ``--until``, ``--run``) as one JSON object ``{"since_ns": int | null,
#: "until_ns": int | null, "runs": [str, ...]}``: data for ``json.loads``, never code or SQL. It
#: applies to the ``DB_ENV`` store only.
WINDOW_ENV = "RESTORELENS_DASHBOARD_WINDOW"
#: The window's longest JSON text: thousands of run ids, and well inside what Linux lets one
#: environment string hold (128 KiB); the app reads no more than this before parsing it.
MAX_WINDOW_ENV_CHARS = 64 * 1024
#: The largest upload in bytes, as sent and once decompressed (the CLI's ``--max-upload-bytes``).
MAX_UPLOAD_ENV = "RESTORELENS_DASHBOARD_MAX_UPLOAD_BYTES"
#: 256 MiB: the collector's own bound on one JSON document, and hundreds of times a recorded run.
DEFAULT_MAX_UPLOAD_BYTES = 256 * 1024 * 1024


def configured_limits() -> tuple[str, ...] | None:
    text = os.environ.get(LIMITS_ENV)
    if text is None:
        return None
    return tuple(part.strip() for part in text.split(";") if part.strip())


def labels_env_value(labels: dict[str, str]) -> str:
    """The mapping as ``LABELS_ENV`` carries it (checked by the CLI before it gets here)."""
    text = json.dumps(labels, ensure_ascii=True, sort_keys=True)
    if len(text) > MAX_LABELS_ENV_CHARS:
        raise SettingError("--label", f"the label mapping is longer than {MAX_LABELS_ENV_CHARS} characters")
    return text


def configured_labels() -> dict[str, str]:
    """The label mapping the CLI set (``LABELS_ENV``), checked again as the analysis checks it:
    the environment is the app's input too. None set: no mapping."""
    from restorelens.analysis import checked_labels

    text = os.environ.get(LABELS_ENV)
    if not text:
        return {}
    if len(text) > MAX_LABELS_ENV_CHARS:
        raise SettingError(LABELS_ENV, f"longer than {MAX_LABELS_ENV_CHARS} characters")
    try:
        value = json.loads(text)
    except (ValueError, RecursionError):  # RecursionError: a deeply nested array
        raise SettingError(LABELS_ENV, "not a JSON object of label -> attribute name") from None
    if not isinstance(value, dict) or not all(isinstance(v, str) for v in value.values()):
        raise SettingError(LABELS_ENV, "not a JSON object of label -> attribute name")
    return checked_labels(LABELS_ENV, value)


def window_env_value(window: Window) -> str:
    """The window as ``WINDOW_ENV`` carries it (checked by the CLI before it gets here); runs longer
    than ``MAX_WINDOW_ENV_CHARS`` together are a ``SettingError`` naming ``--run``."""
    text = json.dumps({"since_ns": window.since_ns, "until_ns": window.until_ns, "runs": list(window.runs)},
                      ensure_ascii=True, sort_keys=True)
    if len(text) > MAX_WINDOW_ENV_CHARS:
        raise SettingError("--run", f"the run ids take more than {MAX_WINDOW_ENV_CHARS} characters together "
                                    "(as JSON): name fewer runs, or a time window instead")
    return text


def configured_window() -> Window:
    """The window the CLI set (``WINDOW_ENV``), checked again as the CLI checks it: the environment
    is the app's input too. None set: every span."""
    from restorelens.analysis import checked_window

    text = os.environ.get(WINDOW_ENV)
    if not text:
        return Window()
    if len(text) > MAX_WINDOW_ENV_CHARS:
        raise SettingError(WINDOW_ENV, f"longer than {MAX_WINDOW_ENV_CHARS} characters")
    shape = 'not a JSON object {"since_ns": int | null, "until_ns": int | null, "runs": [str, ...]}'
    try:
        value = json.loads(text)
    except (ValueError, RecursionError):  # RecursionError: a deeply nested array
        raise SettingError(WINDOW_ENV, shape) from None
    if (not isinstance(value, dict) or not set(value) <= {"since_ns", "until_ns", "runs"}
            or not isinstance(value.get("runs", []), list)):
        raise SettingError(WINDOW_ENV, shape)
    window = Window(since_ns=value.get("since_ns"), until_ns=value.get("until_ns"), runs=tuple(value.get("runs", [])))
    return checked_window(window, since=f"{WINDOW_ENV} since_ns", until=f"{WINDOW_ENV} until_ns",
                          run=f"{WINDOW_ENV} runs")


def store_window(path: str | os.PathLike[str]) -> Window:
    """The window ``path`` is read for: the CLI's (``configured_window``) for the store the CLI
    named (``DB_ENV``), every span of any other (the sample traces, an upload)."""
    return configured_window() if str(path) == os.environ.get(DB_ENV) else Window()


def configured_max_upload_bytes() -> int:
    """The upload limit the CLI set (``MAX_UPLOAD_ENV``), or ``DEFAULT_MAX_UPLOAD_BYTES``."""
    text = os.environ.get(MAX_UPLOAD_ENV)
    if text is None:
        return DEFAULT_MAX_UPLOAD_BYTES
    try:
        value = int(text)
    except ValueError:
        raise SettingError(MAX_UPLOAD_ENV, f"{text!r} is not a whole number of bytes") from None
    if value < 1:
        raise SettingError(MAX_UPLOAD_ENV, f"{value} is not a positive number of bytes")
    return value
