"""Spans recorded as plain data and handed to the SDK's span processors as one ``ReadableSpan`` at the end.

An SDK span is built for any caller on any thread: a lock, bounded and validated attribute maps,
bounded event and link lists, and a second ``ReadableSpan`` copy at ``end()``. For the gate's two
spans per request that was ~30 µs each and a dozen container objects for the garbage collector to
walk while the spans waited for export. ``FastTracer`` keeps the parts of the SDK's ``start_span``
that decide what a span is (the provider's sampler, id generator, resource, instrumentation scope
and span processors, the random-trace-id flag) and records the rest in a dict and a list, on the
one thread that owns the span.

What it does not do, on purpose: span limits (its callers write fixed, bounded attribute sets),
``SpanProcessor.on_start`` (restorelens's processors do nothing there) and locking (a span is used
by one task). A provider that is not the SDK's (the no-op one, another implementation) gets its
own tracer's spans instead.
"""

from __future__ import annotations

import time
import traceback
from collections.abc import Mapping, Sequence
from typing import Any

from opentelemetry import trace as trace_api
from opentelemetry.context import Context
from opentelemetry.sdk.trace import Event, ReadableSpan
from opentelemetry.sdk.trace import Tracer as SdkTracer
from opentelemetry.semconv.attributes.exception_attributes import (
    EXCEPTION_MESSAGE,
    EXCEPTION_STACKTRACE,
    EXCEPTION_TYPE,
)
from opentelemetry.trace import Link, SpanContext, SpanKind, Status, StatusCode, TraceFlags

__all__ = ["FastSpan", "FastTracer"]

#: ``exception.escaped``: deprecated in the conventions, still written by the SDK's record_exception.
_EXCEPTION_ESCAPED = "exception.escaped"
_UNSET = Status(StatusCode.UNSET)


class FastSpan(trace_api.Span):
    """A recording span of one task: attributes, events and status kept as plain data until ``end``."""

    __slots__ = ("_attributes", "_context", "_end_time", "_events", "_kind", "_links", "_name", "_parent",
                 "_start_time", "_status", "_tracer")

    def __init__(self, tracer: FastTracer, name: str, context: SpanContext, parent: SpanContext | None,
                 kind: SpanKind, attributes: dict[str, Any], links: Sequence[Link], start_time: int) -> None:
        self._tracer = tracer
        self._name = name
        self._context = context
        self._parent = parent
        self._kind = kind
        self._attributes = attributes
        self._links = links
        self._start_time = start_time
        self._events: list[Event] = []
        self._status = _UNSET
        self._end_time: int | None = None

    def get_span_context(self) -> SpanContext:
        return self._context

    def is_recording(self) -> bool:
        return self._end_time is None

    def set_attribute(self, key: str, value: Any) -> None:
        if self._end_time is None and value is not None:
            self._attributes[key] = tuple(value) if isinstance(value, list) else value

    def set_attributes(self, attributes: Mapping[str, Any]) -> None:
        if self._end_time is not None:
            return
        recorded = self._attributes
        for key, value in attributes.items():
            if value is not None:
                recorded[key] = tuple(value) if isinstance(value, list) else value

    def add_event(self, name: str, attributes: Mapping[str, Any] | None = None, timestamp: int | None = None) -> None:
        if self._end_time is None:
            self._events.append(Event(name, attributes, time.time_ns() if timestamp is None else timestamp))

    def update_name(self, name: str) -> None:
        if self._end_time is None:
            self._name = name

    def set_status(self, status: Status | StatusCode, description: str | None = None) -> None:
        # the SDK's rule: OK is final; a description only goes with an error
        if self._end_time is not None or self._status.status_code is StatusCode.OK:
            return
        self._status = status if isinstance(status, Status) else Status(status, description)

    def record_exception(self, exception: BaseException, attributes: Mapping[str, Any] | None = None,
                         timestamp: int | None = None, escaped: bool = False) -> None:
        """The ``exception`` event with the attributes the SDK's spans give it."""
        module, qualname = type(exception).__module__, type(exception).__qualname__
        event: dict[str, Any] = {
            EXCEPTION_TYPE: f"{module}.{qualname}" if module and module != "builtins" else qualname,
            EXCEPTION_MESSAGE: str(exception),
            EXCEPTION_STACKTRACE: "".join(traceback.format_exception(exception)),
            _EXCEPTION_ESCAPED: str(escaped),
        }
        if attributes:
            event.update(attributes)
        self.add_event("exception", event, timestamp)

    def end(self, end_time: int | None = None) -> None:
        if self._end_time is not None:
            return
        self._end_time = time.time_ns() if end_time is None else end_time
        tracer = self._tracer
        tracer.processor.on_end(ReadableSpan(
            name=self._name, context=self._context, parent=self._parent, resource=tracer.resource,
            attributes=self._attributes, events=self._events, links=self._links, kind=self._kind,
            status=self._status, start_time=self._start_time, end_time=self._end_time,
            instrumentation_scope=tracer.scope,
        ))


class FastTracer:
    """``start_span`` for ``FastSpan``s of an SDK tracer's provider, scope and sampler."""

    def __init__(self, tracer: trace_api.Tracer) -> None:
        self.sdk = tracer if isinstance(tracer, SdkTracer) else None
        self._fallback = tracer
        if self.sdk is not None:
            self.sampler = self.sdk.sampler
            self.ids = self.sdk.id_generator
            self.resource = self.sdk.resource
            self.processor = self.sdk.span_processor
            self.scope = self.sdk._instrumentation_scope  # the SDK tracer's own: one scope group on export

    def start_span(self, name: str, context: Context | None = None, kind: SpanKind = SpanKind.INTERNAL,
                   attributes: Mapping[str, Any] | None = None, links: Sequence[Link] | None = None,
                   start_time: int | None = None) -> trace_api.Span:
        if self.sdk is None or not self.sdk._is_enabled():
            return self._fallback.start_span(name, context=context, kind=kind, attributes=attributes,
                                             links=links, start_time=start_time)
        links = links or ()
        parent = trace_api.get_current_span(context).get_span_context()
        if parent is None or not parent.is_valid:
            parent = None
            trace_id = self.ids.generate_trace_id()
            random_id = self.ids.is_trace_id_random()
        else:
            trace_id = parent.trace_id
            random_id = parent.trace_flags.random_trace_id
        sampling = self.sampler.should_sample(context, trace_id, name, kind, attributes, links)
        flags = TraceFlags.SAMPLED if sampling.decision.is_sampled() else TraceFlags.DEFAULT
        if random_id:
            flags |= TraceFlags.RANDOM_TRACE_ID
        span_context = SpanContext(trace_id, self.ids.generate_span_id(), is_remote=False,
                                   trace_flags=TraceFlags(flags), trace_state=sampling.trace_state)
        if not sampling.decision.is_recording():
            return trace_api.NonRecordingSpan(span_context)
        recorded = dict(sampling.attributes or {})
        if attributes:
            recorded.update(attributes)
            for key, value in recorded.items():
                if isinstance(value, list):  # as the SDK stores them: immutable
                    recorded[key] = tuple(value)
        return FastSpan(self, name, span_context, parent, kind, recorded, tuple(links),
                        time.time_ns() if start_time is None else start_time)
