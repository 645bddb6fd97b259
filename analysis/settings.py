"""The analysis' settings: label mapping from ``[analysis.labels]`` in a TOML file and ``--label``.

    [analysis.labels]
    traffic_class = "app.tier"          # a span attribute of the user's client span
    workload = "deployment.environment" # or a resource attribute

A ``--label LABEL=ATTR`` flag wins over the file's entry for the same label. The other tables of
the file (``[gate]``, ``[modelclaim]``) belong to other commands and are not read here, so one
file can configure a whole deployment.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from typing import Any

from restorelens.analysis.views import checked_labels
from restorelens.errors import SettingError
from restorelens.settings import read_toml, require_keys

__all__ = ["label_mapping", "parse_label"]


def parse_label(text: str, setting: str = "--label") -> tuple[str, str]:
    """``"traffic_class=app.tier"`` -> ``("traffic_class", "app.tier")``; else a ``SettingError``."""
    label, sep, attribute = text.partition("=")
    if not sep or not label.strip() or not attribute.strip():
        raise SettingError(setting, f"{text!r} is not LABEL=ATTRIBUTE (e.g. traffic_class=app.tier)")
    return label.strip(), attribute.strip()


def label_mapping(config_file: str | os.PathLike[str] | None, labels: Iterable[str] = ()) -> dict[str, str]:
    """The label mapping of ``config_file``'s ``[analysis.labels]``, overridden by ``labels`` flags."""
    mapping: dict[str, str] = {}
    if config_file is not None:
        document = read_toml(config_file)
        table: Any = document.get("analysis", {})
        if not isinstance(table, dict):
            raise SettingError(f"{config_file}: analysis", "must be a table ([analysis])")
        require_keys(table, {"labels"}, f"{config_file}: analysis")
        entries = table.get("labels", {})
        if not isinstance(entries, dict):
            raise SettingError(f"{config_file}: analysis.labels", "must be a table ([analysis.labels])")
        mapping.update(checked_labels(f"{config_file}: analysis.labels", entries))
    for text in labels:
        label, attribute = parse_label(text)
        mapping.update(checked_labels("--label", {label: attribute}))
    return mapping
