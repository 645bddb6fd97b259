"""A benchmark process's own peak memory.

``getrusage``'s ``ru_maxrss`` is no good for a child started from a large parent: Linux carries the
peak of the memory a process had before ``exec`` into it, so every child of ``make bench`` reported
the 5 GiB that ``bench_analysis`` had left the runner with. ``VmHWM`` belongs to the current address
space, which starts afresh at ``exec``.
"""

from __future__ import annotations

import resource
from pathlib import Path

__all__ = ["peak_rss_bytes"]


def peak_rss_bytes() -> int:
    """This process's peak resident set since it started its program, in bytes."""
    try:
        for row in Path("/proc/self/status").read_text().splitlines():
            if row.startswith("VmHWM:"):
                return int(row.split()[1]) * 1024  # kB -> bytes
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # KiB on Linux -> bytes
