"""The gate's upstream call as a CLIENT span, written natively: what opentelemetry-instrumentation-httpx
writes for the same call, at a fraction of its cost.

Around the gate's call to an engine the instrumentation parsed the URL again, built request and
response attribute sets from scratch, normalised headers, recorded metrics nobody read and made httpx
request and response objects: most of the gate's tracing cost. This module writes the same span
(name, kind, attributes in the semantic-convention mode ``OTEL_SEMCONV_STABILITY_OPT_IN`` selects,
status, ``error.type``, the exception event, the traceparent sent on) from attribute sets built once
per upstream URL. ``tests/gate/test_upstream_spans.py`` checks it attribute for attribute against the
instrumentation on the same calls. The instrumentation stays where users use it: the traced client
in loadgen and their own apps.

Differences, on purpose: the span's instrumentation scope is ``restorelens.gate`` (the gate wrote it,
not the library), its times come from the gate's clock like the gate's other spans, and no header is
captured (the instrumentation's header-capture variables are not read: the gate records no request
content).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from enum import Enum

import httpx
from opentelemetry import baggage, propagate
from opentelemetry.baggage.propagation import W3CBaggagePropagator
from opentelemetry.propagators.composite import CompositePropagator
from opentelemetry.trace import Span, SpanKind, Status, StatusCode, Tracer, set_span_in_context
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator
from opentelemetry.util.http import redact_url, sanitize_method

from restorelens import spans as S
from restorelens.clock import to_ns
from restorelens.fast_spans import FastTracer

__all__ = ["SemconvMode", "UpstreamSpans", "semconv_mode"]

#: The environment variable OpenTelemetry's instrumentations read to choose attribute names.
SEMCONV_OPT_IN_ENV = "OTEL_SEMCONV_STABILITY_OPT_IN"
_TARGET_CACHE_SIZE = 256
_TRACEPARENT = "traceparent"
_TRACESTATE = "tracestate"


class SemconvMode(Enum):
    """Which HTTP attribute names a CLIENT span carries, as the instrumentations decide it."""

    OLD = "default"  # http.method, http.url, http.status_code: what the instrumentation writes unless told
    STABLE = "http"
    BOTH = "http/dup"

    @property
    def old(self) -> bool:
        return self is not SemconvMode.STABLE

    @property
    def stable(self) -> bool:
        return self is not SemconvMode.OLD


def semconv_mode(environ: Mapping[str, str] = os.environ) -> SemconvMode:
    """The HTTP mode of ``OTEL_SEMCONV_STABILITY_OPT_IN`` (a comma list): ``http/dup`` wins over ``http``."""
    opted = {item.strip().lower() for item in environ.get(SEMCONV_OPT_IN_ENV, "").split(",")}
    if SemconvMode.BOTH.value in opted:
        return SemconvMode.BOTH
    if SemconvMode.STABLE.value in opted:
        return SemconvMode.STABLE
    return SemconvMode.OLD


def _is_w3c_default(textmap: object) -> bool:
    """The SDK's default propagation: W3C trace context, then W3C baggage, nothing else."""
    inner = getattr(textmap, "_propagators", None)
    return (isinstance(textmap, CompositePropagator) and isinstance(inner, list | tuple)
            and [type(p) for p in inner] == [TraceContextTextMapPropagator, W3CBaggagePropagator])


def _status_of(status_code: int) -> StatusCode:
    """A client's view of an HTTP status: 4xx and 5xx (and nonsense) are errors, the rest unset."""
    return StatusCode.UNSET if 100 <= status_code < 400 else StatusCode.ERROR


class UpstreamSpans:
    """Starts and ends the CLIENT span of each upstream call, and names the headers that carry it on."""

    def __init__(self, tracer: Tracer | FastTracer, mode: SemconvMode | None = None) -> None:
        self._tracer = tracer
        self.mode = semconv_mode() if mode is None else mode
        self._request_attributes: dict[tuple[str, str], dict[str, str | int]] = {}
        self._names: dict[str, str] = {}
        self._textmap: object = None
        self._w3c_only = False

    def request_attributes(self, method: str, url: str) -> dict[str, str | int]:
        """The span's attributes known before the call, built once per (method, URL)."""
        key = (method, url)
        attributes = self._request_attributes.get(key)
        if attributes is None:
            attributes = self._build_request_attributes(method, url)
            if len(self._request_attributes) < _TARGET_CACHE_SIZE:
                self._request_attributes[key] = attributes
        return attributes

    def _build_request_attributes(self, method: str, url: str) -> dict[str, str | int]:
        sanitized = sanitize_method(method) or method
        parsed = httpx.URL(url)
        shown = redact_url(str(parsed))
        attributes: dict[str, str | int] = {}
        if self.mode.old:
            attributes[S.ATTR_HTTP_METHOD_OLD] = sanitized
            attributes[S.ATTR_HTTP_URL_OLD] = shown
        if self.mode.stable:
            attributes[S.ATTR_HTTP_REQUEST_METHOD] = sanitized
            if sanitized != method:
                attributes[S.ATTR_HTTP_REQUEST_METHOD_ORIGINAL] = method
            attributes[S.ATTR_URL_FULL] = shown
            # Only when the stable names are on, and then in their pre-stable spelling too when
            # both are asked for: the instrumentation's rule.
            if parsed.host:
                if self.mode.old:
                    attributes[S.ATTR_HTTP_HOST_OLD] = parsed.host
                attributes[S.ATTR_SERVER_ADDRESS] = parsed.host
                attributes[S.ATTR_NETWORK_PEER_ADDRESS] = parsed.host
            if parsed.port:  # httpx leaves it unset for the scheme's default port, so does the span
                if self.mode.old:
                    attributes[S.ATTR_NET_PEER_PORT_OLD] = parsed.port
                attributes[S.ATTR_SERVER_PORT] = parsed.port
                attributes[S.ATTR_NETWORK_PEER_PORT] = parsed.port
        return attributes

    def start(self, parent: Span, method: str, url: str, now_s: float) -> tuple[Span, dict[str, str]]:
        """Start the call's span under ``parent``; (the span, the headers that carry it to the engine)."""
        name = self._names.get(method)
        if name is None:
            sanitized = sanitize_method(method)
            name = self._names[method] = "HTTP" if sanitized == "_OTHER" else (sanitized or method)
        span = self._tracer.start_span(
            name,
            context=set_span_in_context(parent),
            kind=SpanKind.CLIENT,
            attributes=self.request_attributes(method, url),
            start_time=to_ns(now_s),
        )
        context = set_span_in_context(span)
        textmap = propagate.get_global_textmap()
        if textmap is not self._textmap:
            self._textmap, self._w3c_only = textmap, _is_w3c_default(textmap)
        if self._w3c_only and not baggage.get_all(context):
            # What the default propagators write for a context without baggage, without their
            # setter and getter calls per field.
            span_context = span.get_span_context()
            carrier = {_TRACEPARENT: f"00-{span_context.trace_id:032x}-{span_context.span_id:016x}-"
                                     f"{span_context.trace_flags:02x}"}
            if span_context.trace_state:
                carrier[_TRACESTATE] = span_context.trace_state.to_header()
            return span, carrier
        carrier = {}
        propagate.inject(carrier, context=context)
        return span, carrier

    def answered(self, span: Span, status_code: int, http_version: str, now_s: float) -> None:
        """The engine's status line and headers arrived: the call's span ends there, as the library's does."""
        status = _status_of(status_code)
        attributes: dict[str, str | int] = {}
        if self.mode.old:
            attributes[S.ATTR_HTTP_STATUS_CODE_OLD] = status_code
        if self.mode.stable:
            attributes[S.ATTR_HTTP_STATUS_CODE] = status_code
            if status is StatusCode.ERROR:
                attributes[S.ATTR_ERROR_TYPE] = str(status_code)
            version = http_version.removeprefix("HTTP/")
            if self.mode.old:
                attributes[S.ATTR_HTTP_FLAVOR_OLD] = version
            attributes[S.ATTR_NETWORK_PROTOCOL_VERSION] = version
        span.set_attributes(attributes)
        span.set_status(Status(status))
        span.end(end_time=to_ns(now_s))

    def failed(self, span: Span, exc: BaseException, now_s: float) -> None:
        """The call raised before any answer: the exception event, the error status and ``error.type``."""
        if self.mode.stable:
            span.set_attribute(S.ATTR_ERROR_TYPE, type(exc).__qualname__)
        span.record_exception(exc, timestamp=to_ns(now_s))
        span.set_status(Status(StatusCode.ERROR, f"{type(exc).__name__}: {exc}"))
        span.end(end_time=to_ns(now_s))
