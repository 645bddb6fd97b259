"""restorelens: observability and trace analysis for LLM-serving capacity restoration.

The component packages (``restorelens.gate``, ``restorelens.sim``, ``restorelens.loadgen``,
``restorelens.collector``, ``restorelens.analysis``, ``restorelens.dashboard``) live in the
repository's top-level folders; this package holds the thin shell: CLI, settings, telemetry setup
and the span contract (``restorelens.spans``).
"""

from restorelens._version import __version__

__all__ = ["__version__"]
