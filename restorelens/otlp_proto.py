"""Finished SDK spans to an OTLP ``ExportTraceServiceRequest`` in protobuf wire format, without protobuf.

The SDK's own encoder builds a protobuf message object per span, attribute and value and then
serialises them: about 50 µs per span in this project's venv, more than the gate spends on the
request it traces. This one writes the wire format directly (fields in number order, proto3
defaults left out, as protobuf serialises them), with the parts that repeat cached: the resource and
scope once per object, each attribute key's tag once, each string attribute's whole key-value once.
``tests/restorelens/test_otlp_proto.py`` checks the bytes are those the SDK's encoder produces and
that the official ``opentelemetry-proto`` definitions decode them.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.trace import SpanKind, StatusCode

__all__ = ["PAUSE_EVERY", "SpanEncoder"]

_FIXED64 = struct.Struct("<Q").pack
_DOUBLE = struct.Struct("<d").pack
_FIXED32 = struct.Struct("<I").pack
#: SpanFlags: the context's is-remote bit is known (always), and set when the parent is remote.
_HAS_IS_REMOTE = 0x100
_IS_REMOTE = 0x200
#: Cached string key-values (key, value) -> bytes; cleared when full so memory stays bounded.
_MAX_CACHED_PAIRS = 4096
_UINT64 = (1 << 64) - 1
#: Spans encoded between two calls of ``encode``'s ``pause``.
PAUSE_EVERY = 32


_SMALL = [bytes((i,)) for i in range(0x80)]


def _varint(value: int) -> bytes:
    if 0 <= value < 0x80:
        return _SMALL[value]
    value &= _UINT64  # negative int64 values are ten bytes of two's complement
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _field(tag: int, payload: bytes) -> bytes:
    """A length-delimited field: tag byte (fields 1-15), length, payload."""
    size = len(payload)
    return _SMALL[tag] + (_SMALL[size] if size < 0x80 else _varint(size)) + payload


def _string(tag: int, text: str) -> bytes:
    return _field(tag, text.encode("utf-8"))


def _any_value(value: Any) -> bytes:
    """An AnyValue message's body; a oneof member is written even when it is its type's default."""
    if isinstance(value, bool):  # before int: bool is an int
        return b"\x10\x01" if value else b"\x10\x00"
    if isinstance(value, str):
        return _string(0x0A, value)
    if isinstance(value, int):
        return b"\x18" + _varint(value)
    if isinstance(value, float):
        return b"\x21" + _DOUBLE(value)
    if value is None:
        return b""
    if isinstance(value, bytes):
        return _field(0x3A, value)
    if isinstance(value, Sequence):
        return _field(0x2A, b"".join(_field(0x0A, _any_value(item)) for item in value))
    if isinstance(value, Mapping):
        return _field(0x32, b"".join(_field(0x0A, _key_value(str(k), v)) for k, v in value.items()))
    raise TypeError(f"an attribute value of type {type(value).__name__} cannot be encoded")


def _key_value(key: str, value: Any) -> bytes:
    return _string(0x0A, key) + _field(0x12, _any_value(value))


def _span_flags(parent_is_remote: bool) -> bytes:
    return _FIXED32(_HAS_IS_REMOTE | _IS_REMOTE if parent_is_remote else _HAS_IS_REMOTE)


#: The span's last field (flags, number 16: a two-byte tag), local or remote parent.
_SPAN_FLAGS = {False: b"\x85\x01" + _span_flags(False), True: b"\x85\x01" + _span_flags(True)}
_KINDS = {kind: b"\x30" + _varint(kind.value + 1) for kind in SpanKind}
#: Enum ``.value`` is a descriptor call; a dict lookup is not.
_STATUS_CODES = {code: code.value for code in StatusCode}
#: An unset status with no message: the status field is still written (a message field has presence).
_EMPTY_STATUS = b"\x7a\x00"
#: Keys with more distinct string values than this are not cached by pair (ids, URLs with ids).
_VOLATILE_AFTER = 256


def _items(attributes: Mapping[str, Any]) -> Any:
    # The SDK's BoundedAttributes iterates through the Mapping ABC (a Python call per key) and a
    # span hands it out behind a MappingProxyType; the dict inside is read directly when present.
    inner = getattr(attributes, "_dict", None)
    return (inner if type(inner) is dict else attributes).items()


class SpanEncoder:
    """Encodes batches of spans; keeps its caches between batches (one per exporter)."""

    def __init__(self) -> None:
        self._pairs: dict[tuple[str, str | int], bytes] = {}
        self._keys: dict[str, bytes] = {}
        self._texts: dict[tuple[int, str], bytes] = {}
        self._distinct: dict[str, int] = {}
        self._volatile: set[str] = set()
        # By object identity, holding the object so its id is not reused while cached.
        self._resources: dict[int, tuple[Any, bytes]] = {}
        self._scopes: dict[int, tuple[Any, bytes]] = {}

    def encode(self, spans: Sequence[ReadableSpan], pause: Callable[[], None] | None = None) -> bytes:
        """The ``ExportTraceServiceRequest`` for ``spans``: grouped by resource, then scope, in order.

        ``pause`` is called after every ``PAUSE_EVERY`` spans: an exporter thread passes
        ``time.sleep(0)`` so that a 512-span batch (~5 ms of encoding) does not hold the GIL
        against the event loop it shares the process with.
        """
        groups: dict[int, dict[int, list[bytes]]] = {}
        for count, span in enumerate(spans, 1):
            if pause is not None and count % PAUSE_EVERY == 0:
                pause()
            resource_id, scope_id = id(span.resource), id(span.instrumentation_scope)
            if resource_id not in self._resources:
                self._resources[resource_id] = (span.resource, self._resource(span.resource))
            if scope_id not in self._scopes:
                self._scopes[scope_id] = (span.instrumentation_scope, self._scope(span.instrumentation_scope))
            groups.setdefault(resource_id, {}).setdefault(scope_id, []).append(self.span(span))
        out = []
        for resource_id, scopes in groups.items():
            scope_spans = b"".join(
                _field(0x12, _field(0x0A, self._scopes[scope_id][1]) + b"".join(encoded)
                       + self._schema(self._scopes[scope_id][0]))
                for scope_id, encoded in scopes.items()
            )
            resource, resource_bytes = self._resources[resource_id]
            schema = resource.schema_url
            body = _field(0x0A, resource_bytes) + scope_spans + (_string(0x1A, schema) if schema else b"")
            out.append(_field(0x0A, body))
        if len(self._resources) > 64 or len(self._scopes) > 256:  # short-lived providers: forget old ones
            self._resources.clear()
            self._scopes.clear()
        return b"".join(out)

    @staticmethod
    def _schema(scope: Any) -> bytes:
        schema = scope.schema_url if scope is not None else None
        return _string(0x1A, schema) if schema else b""

    def _resource(self, resource: Any) -> bytes:
        return self.attributes(resource.attributes, 0x0A)

    def _scope(self, scope: Any) -> bytes:
        if scope is None:
            return b""
        out = _string(0x0A, scope.name) if scope.name else b""
        if scope.version:
            out += _string(0x12, scope.version)
        return out + self.attributes(scope.attributes, 0x1A)

    def attributes(self, attributes: Mapping[str, Any] | None, tag: int) -> bytes:
        """Repeated KeyValue fields with ``tag``; repeated pairs and keys come from the caches."""
        if not attributes:
            return b""
        pieces = []
        keys, volatile = self._keys, self._volatile
        tag_byte = _SMALL[tag]
        for key, value in _items(attributes):
            kind = type(value)
            if (kind is str or kind is int) and key not in volatile:
                pair = self._pairs.get((key, value))  # not hoisted: _pair may replace the dict
                if pair is None:
                    pair = self._pair(key, value)
            else:
                key_bytes = keys.get(key)
                if key_bytes is None:
                    key_bytes = _string(0x0A, key)
                    if len(keys) < _MAX_CACHED_PAIRS:
                        keys[key] = key_bytes
                pair = key_bytes + _field(0x12, _any_value(value))
            size = len(pair)
            pieces.append(tag_byte)
            pieces.append(_SMALL[size] if size < 0x80 else _varint(size))
            pieces.append(pair)
        return b"".join(pieces)

    def _pair(self, key: str, value: str | int) -> bytes:
        """Encode a key-value and remember it, unless its key has shown too many values to be worth it."""
        pair = _key_value(key, value)
        seen = self._distinct.get(key, 0) + 1
        self._distinct[key] = seen
        if seen > _VOLATILE_AFTER:  # once per such key: its pairs leave the cache for good
            self._volatile.add(key)
            self._pairs = {cached: value for cached, value in self._pairs.items() if cached[0] != key}
            return pair
        if len(self._pairs) >= _MAX_CACHED_PAIRS:
            self._pairs.clear()
            self._distinct.clear()
        self._pairs[(key, value)] = pair
        return pair

    def _text(self, tag: int, text: str) -> bytes:
        """A span's or event's name field, cached: names repeat."""
        cached = self._texts.get((tag, text))
        if cached is None:
            cached = _string(tag, text)
            if len(self._texts) < _MAX_CACHED_PAIRS:
                self._texts[(tag, text)] = cached
        return cached

    def span(self, span: ReadableSpan) -> bytes:
        """One ``Span`` message as the ``spans`` field (tag and length included)."""
        context = span.context
        parent = span.parent
        out = [
            b"\x0a\x10", context.trace_id.to_bytes(16, "big"),
            b"\x12\x08", context.span_id.to_bytes(8, "big"),
        ]
        trace_state = context.trace_state
        if trace_state:
            out.append(_string(0x1A, ",".join(f"{k}={v}" for k, v in trace_state.items())))
        if parent is not None:
            out += (b"\x22\x08", parent.span_id.to_bytes(8, "big"))
        if span.name:
            out.append(self._text(0x2A, span.name))
        out += (_KINDS[span.kind], b"\x39", _FIXED64(span.start_time or 0), b"\x41", _FIXED64(span.end_time or 0))
        # the span's own BoundedAttributes rather than the read-only proxy ``attributes`` wraps it in
        out.append(self.attributes(getattr(span, "_attributes", None) or span.attributes, 0x4A))
        if span.dropped_attributes:
            out += (b"\x50", _varint(span.dropped_attributes))
        for event in span.events:
            body = b"\x09" + _FIXED64(event.timestamp)
            if event.name:
                body += self._text(0x12, event.name)
            if event.attributes:
                body += self.attributes(event.attributes, 0x1A)
            if event.dropped_attributes:
                body += b"\x20" + _varint(event.dropped_attributes)
            out.append(_field(0x5A, body))
        if span.dropped_events:
            out += (b"\x60", _varint(span.dropped_events))
        for link in span.links:
            body = b"\x0a\x10" + link.context.trace_id.to_bytes(16, "big") + b"\x12\x08" + link.context.span_id.to_bytes(8, "big")
            body += self.attributes(link.attributes, 0x22)
            if link.dropped_attributes:
                body += b"\x28" + _varint(link.dropped_attributes)
            out.append(_field(0x6A, body + b"\x35" + _span_flags(link.context.is_remote)))
        if span.dropped_links:
            out += (b"\x70", _varint(span.dropped_links))
        status = span.status
        code = _STATUS_CODES[status.status_code]
        if status.description or code:
            body = _string(0x12, status.description) if status.description else b""
            if code:
                body += b"\x18" + _varint(code)
            out.append(_field(0x7A, body))
        else:
            out.append(_EMPTY_STATUS)
        out.append(_SPAN_FLAGS[parent is not None and parent.is_remote])
        encoded = b"".join(out)
        return b"\x12" + _varint(len(encoded)) + encoded
