"""Replays read from a span store: every recorded run's requests (``sql/replay_requests.sql``), one ``Replay`` each."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from importlib import resources
from pathlib import Path

from restorelens.errors import InputError, SettingError
from restorelens.experiments.replay.workload import RecordedRequest, Replay, replay_workload

__all__ = ["DEFAULT_REPLAY_ENGINE", "read_recorded_requests", "replays_from_store"]

#: The engine a replay runs against unless ``--replay-engine`` says otherwise: the MoFlux study's
#: (docs/sim.md), as its preset defines it.
DEFAULT_REPLAY_ENGINE = "qwen2.5-1.5b-m1"
#: The name of a replayed run's scenario (and workload label): this, then its recorded run id.
REPLAY_PREFIX = "replay"
#: A run id is cut to this many characters in a scenario name (it names the run's span files).
MAX_RUN_NAME_CHARS = 80


def read_recorded_requests(db_path: str | Path, *, labels: Mapping[str, str] | None = None) -> list[RecordedRequest]:
    """Every replayable request in the store at ``db_path`` (read-only), labels mapped by ``labels``."""
    import duckdb

    from restorelens.analysis import Analysis, Slo
    from restorelens.errors import first_line

    sql = resources.files(__package__).joinpath("sql", "replay_requests.sql").read_text(encoding="utf-8")
    with Analysis.open(db_path, materialize=True, labels=labels) as analysis:
        try:
            cursor = analysis.con.execute(sql, {"excluded_phases": list(Slo().excluded_phases)})
            columns = [column[0] for column in cursor.description or ()]
            rows = cursor.fetchall()
        except duckdb.Error as exc:
            raise InputError(str(db_path), f"cannot read its requests: {first_line(exc)}") from None
    return [RecordedRequest(**dict(zip(columns, row, strict=True))) for row in rows]


def replays_from_store(db_path: str | Path, *, runs: Sequence[str] = (), engine_preset: str = DEFAULT_REPLAY_ENGINE,
                       labels: Mapping[str, str] | None = None, class_map: Mapping[str, str] | None = None,
                       ) -> list[Replay]:
    """One ``Replay`` per recorded run of the store (``runs``: only those run ids), in the order of
    their first arrivals. Nothing replayable, or a run id not recorded, is a ``SettingError``."""
    from restorelens.sim import PRESETS

    engine = PRESETS.get(engine_preset)
    if engine is None:
        raise SettingError("--replay-engine", f"unknown preset {engine_preset!r}; choose one of {', '.join(PRESETS)}")
    by_run: dict[str | None, list[RecordedRequest]] = {}
    for request in sorted(read_recorded_requests(db_path, labels=labels), key=lambda r: r.arrival_ns):
        by_run.setdefault(request.run_id, []).append(request)
    if not by_run:
        raise SettingError("--replay", f"{db_path}: nothing to replay: no client.request span, nor an llm_request "
                                       "span with vLLM's latencies (ModelClaim wake requests are left out)")
    if runs:
        missing = [run for run in runs if run not in by_run]
        if missing:
            recorded = ", ".join(r for r in by_run if r is not None) or "none with a run id"
            raise SettingError("--replay-run", f"{db_path} records no run {missing[0]!r}; its runs: {recorded}")
        by_run = {run: by_run[run] for run in dict.fromkeys(runs)}
    names: set[str] = set()
    replays = []
    for run_id, requests in by_run.items():
        name = _unique(_replay_name(run_id), names)
        replays.append(replay_workload(requests, engine, name=name, engine_preset=engine_preset, class_map=class_map))
    return replays


def _replay_name(run_id: str | None) -> str:
    if not run_id:
        return REPLAY_PREFIX
    # the name becomes a file name (SCENARIO-ARM-sSEED.jsonl): only portable characters
    safe = re.sub(r"[^A-Za-z0-9._-]+", "_", run_id)[:MAX_RUN_NAME_CHARS].strip("._-") or "run"
    return f"{REPLAY_PREFIX}-{safe}"


def _unique(name: str, taken: set[str]) -> str:
    candidate, n = name, 1
    while candidate in taken:
        n += 1
        candidate = f"{name}-{n}"
    taken.add(candidate)
    return candidate
