"""Virtual-time spans: the same gate.request / gate.lend / gate.restore spans with virtual timestamps."""

from __future__ import annotations

from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from restorelens import spans as S
from restorelens.clock import VirtualClock, to_ns
from restorelens.gate.admission import Admission
from restorelens.gate.grants import Grant
from restorelens.gate.gate_spans import GateSpans
from restorelens.gate.policies.floors import LendPolicy


def test_virtual_run_emits_linked_restore_span(tracer_provider, span_exporter: InMemorySpanExporter) -> None:
    clock = VirtualClock()
    emitter = GateSpans(tracer_provider, policy_name="lend")
    admission = Admission(LendPolicy({"interactive": 3, "batch": 1}, lendable_slots=2), listeners=[emitter])
    live: dict[str, tuple[object, Grant]] = {}

    def arrive(name: str, traffic_class: str, t: float) -> None:
        clock.advance_to(clock.start_s + t)
        span = emitter.start_request(name, traffic_class, clock.now_s(), model="tiny")
        grant = admission.request(name, traffic_class, clock.now_s())
        assert isinstance(grant, Grant)
        emitter.granted(span, grant)
        live[name] = (span, grant)

    def finish(name: str, t: float) -> None:
        clock.advance_to(clock.start_s + t)
        span, grant = live.pop(name)
        admission.release(grant, clock.now_s())
        emitter.end_request(span, name, clock.now_s(), 200)

    arrive("b1", "batch", 0)
    arrive("b2", "batch", 1)
    arrive("i1", "interactive", 5)
    finish("i1", 6)
    finish("b1", 7)
    finish("b2", 9)

    by_name: dict[str, list] = {}
    for span in span_exporter.get_finished_spans():
        by_name.setdefault(span.name, []).append(span)
    [restore] = by_name[S.SPAN_GATE_RESTORE]
    [lend] = by_name[S.SPAN_GATE_LEND]
    requests = {s.attributes[S.ATTR_REQUEST_ID]: s for s in by_name[S.SPAN_GATE_REQUEST]}

    start = clock.start_s
    assert restore.start_time == to_ns(start + 5) and restore.end_time == to_ns(start + 9)
    assert [(e.name, e.timestamp) for e in restore.events] == [
        (S.EVENT_GRANT_RESTORED, to_ns(start + 5)),
        (S.EVENT_BORROWED_DRAINED, to_ns(start + 9)),
    ]
    assert restore.attributes[S.ATTR_GATE_BORROWED_AT_RETURN] == 1
    [link] = restore.links
    assert link.context == requests["i1"].context
    assert restore.parent is None and restore.context.trace_id != requests["i1"].context.trace_id

    assert lend.start_time == to_ns(start + 1)
    assert [(e.name, e.timestamp) for e in lend.events] == [
        (S.EVENT_LEND_STOPPED, to_ns(start + 5)),
        (S.EVENT_BORROWED_DRAINED, to_ns(start + 9)),
    ]
    assert lend.attributes[S.ATTR_GATE_BORROWED_PEAK] == 1

    b2 = requests["b2"]
    assert b2.attributes[S.ATTR_GATE_SLOT] == "borrowed" and b2.attributes[S.ATTR_GATE_DECISION] == "admitted"
    assert [e.name for e in b2.events] == [S.EVENT_GRANT_ACQUIRED]
    assert (b2.start_time, b2.end_time) == (to_ns(start + 1), to_ns(start + 9))


def test_flush_ends_open_records_at_the_run_end(tracer_provider, span_exporter: InMemorySpanExporter) -> None:
    emitter = GateSpans(tracer_provider, policy_name="lend")
    admission = Admission(LendPolicy({"interactive": 3, "batch": 1}, lendable_slots=2), listeners=[emitter])
    admission.request("b1", "batch", 100.0)
    admission.request("b2", "batch", 101.0)
    admission.request("i1", "interactive", 102.0)  # episode opens; b2 never finishes in this run
    admission.close(110.0)
    emitter.flush(admission.periods, admission.episodes, 110.0)
    names = sorted(s.name for s in span_exporter.get_finished_spans())
    assert names == [S.SPAN_GATE_LEND, S.SPAN_GATE_RESTORE]
    restore = next(s for s in span_exporter.get_finished_spans() if s.name == S.SPAN_GATE_RESTORE)
    assert [e.name for e in restore.events] == [S.EVENT_GRANT_RESTORED]
    assert restore.end_time == to_ns(110.0)
    lend = next(s for s in span_exporter.get_finished_spans() if s.name == S.SPAN_GATE_LEND)
    assert [e.name for e in lend.events] == [S.EVENT_LEND_STOPPED] and lend.end_time == to_ns(110.0)
