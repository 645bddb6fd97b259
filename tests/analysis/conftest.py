"""Fixtures for the analysis tests: the hand-built span builder on a path importable as a module."""

from __future__ import annotations

import sys
from pathlib import Path

# builders.py sits next to the tests; --import-mode=importlib does not put this folder on sys.path.
sys.path.insert(0, str(Path(__file__).resolve().parent))
