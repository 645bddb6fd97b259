"""Replay recorded traffic: a workload built from a span store, so a policy is tried on real load.

``restorelens experiment --replay DB`` reads every request the store shows arriving
(``experiments/replay/sql/replay_requests.sql``: the restorelens client's ``client.request`` spans, or,
for traces of another client, vLLM's ``llm_request`` spans), makes one ``Workload`` per recorded
run and plays it under each arm in virtual time, as the named MoFlux scenarios are played.

``workload.replay_workload`` is the sans-I/O part: rows (``RecordedRequest``) in, a ``Replay``
(the workload and what had to be made up for it) out; ``store`` reads the rows and names the
runs; ``scenario_json`` carries a replayed scenario to a worker process. What a replay keeps, and the choices it makes
where a recording says nothing (docs/experiments.md, "Replaying recorded traffic"):

- arrivals: each run's recorded offsets from its first arrival, to the microsecond (as the
  MoFlux workloads round theirs);
- traffic class: the recorded one (a mapped label first); a value that is neither interactive
  nor batch is translated by ``class_map`` (``--replay-class gold=interactive``), else played as
  interactive, as the gate treats a request without ``x-traffic-class``;
- tokens: the engine's prompt tokens (else the client span's), made into a prompt the chosen
  engine counts as that many tokens; the engine's completion tokens as the output length. The
  simulator generates exactly ``max_tokens``, so that length is the replayed ``max_tokens``
  (the recorded ``max_tokens`` stands in when no completion was recorded). A request no engine
  served has no token counts: it takes its class's nearest-rank median in its run;
- windows: a run whose requests carry ``restore.arrival_phase`` keeps those phases and their
  recorded windows (a restorelens recording is scored as it was); a run without any is one
  window from its first arrival to its last, interactive requests scored as the contention
  window and batch requests as the borrow window (docs/analysis.md, "Policy summary").
"""
