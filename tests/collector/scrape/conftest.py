"""The scrape tests' fake engines (metrics_servers.py) sit next to them."""

from __future__ import annotations

import sys
from pathlib import Path

# --import-mode=importlib does not put this folder on sys.path.
sys.path.insert(0, str(Path(__file__).resolve().parent))
