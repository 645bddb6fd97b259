"""The wheel's data files: every one the product reads at run time is in package-data, and
setuptools guesses none (``include-package-data``), so it takes no data folder for a package left
out of the list and prints no "Package would be ignored" banner at ``make install``."""

from __future__ import annotations

import fnmatch
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SETUPTOOLS = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]


def _package_folders() -> dict[str, Path]:
    roots = {name: ROOT / folder for name, folder in SETUPTOOLS["package-dir"].items()}
    return {package: roots[".".join(package.split(".")[:2])].joinpath(*package.split(".")[2:])
            for package in SETUPTOOLS["packages"]}


def _data_files() -> dict[str, list[str]]:
    """Per package, the files in its folder that are not its modules and belong to no subpackage:
    SQL, Streamlit's pages (scripts, not modules), relative to the package's folder."""
    folders = _package_folders()
    subpackages = {folder.resolve() for folder in folders.values()}
    found: dict[str, list[str]] = {}
    for package, folder in folders.items():
        for path in sorted(folder.rglob("*")):
            if not path.is_file() or "__pycache__" in path.parts or path.suffix in {".so", ".c", ".pyc"}:
                continue
            owner = next(parent for parent in path.parents if parent.resolve() in subpackages)
            if owner.resolve() != folder.resolve() or (path.parent == folder and path.suffix == ".py"):
                continue
            found.setdefault(package, []).append(path.relative_to(folder).as_posix())
    return found


def _matches(name: str, pattern: str) -> bool:
    """setuptools' glob: a ``*`` stays within one folder."""
    parts, wanted = name.split("/"), pattern.split("/")
    return len(parts) == len(wanted) and all(fnmatch.fnmatchcase(p, w) for p, w in zip(parts, wanted))


def test_setuptools_guesses_no_data_files() -> None:
    # True (the pyproject default) makes setuptools scan the source tree and warn, once per data
    # folder, that it looks like a package missing from `packages`.
    assert SETUPTOOLS.get("include-package-data") is False


def test_every_data_file_is_in_package_data() -> None:
    patterns = SETUPTOOLS["package-data"]
    data = _data_files()
    assert {"restorelens.analysis", "restorelens.dashboard", "restorelens.experiments.replay",
            "restorelens.store"} <= set(data)
    assert "pages/overview.py" in data["restorelens.dashboard"]
    assert "sql/clickhouse/rl_span_key.sql" in data["restorelens.analysis"]
    missing = [f"{package}: {name}" for package, names in data.items() for name in names
               if not any(_matches(name, pattern) for pattern in patterns.get(package, ()))]
    assert missing == []
