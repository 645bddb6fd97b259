"""Who sent a request, as the gate records it on ``gate.request``: what links a client's retry to
the answer that caused it when the client records no spans of its own.

Sans-I/O. The proxy collects the few headers in its one pass over them and the peer address from
the ASGI scope; the virtual runners build the same facts for their virtual client. The analysis
links attempts by, in order: the trace (``traced``), the client's own request key, else the
identity and the model within the hint's window.

- ``identity``: ``key:`` and the first 16 hex digits of the SHA-256 of the credential (the bearer
  token of ``Authorization``, else an ``api-key`` header, else any other ``Authorization`` value),
  else ``peer:`` and the peer's address without its port. A credential is never recorded: 64 bits
  of its hash tell a deployment's clients apart and cannot be turned back into the key.
- ``request_key``: ``x-request-id:VALUE``, else ``idempotency-key:VALUE``; the value cut to
  ``MAX_REQUEST_KEY_CHARS``.
- ``retry_count``: ``x-stainless-retry-count`` (the OpenAI SDKs' retries taken so far) when it is
  a whole number in 0..``MAX_RETRY_COUNT``; such a client has a retry budget of its own.
- ``traced``: the request came with a ``traceparent``.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from restorelens import spans as S

__all__ = ["MAX_REQUEST_KEY_CHARS", "MAX_RETRY_COUNT", "ClientFacts", "client_facts", "parse_retry_count"]

#: A request key is an id, not a payload: longer values are cut (span attributes stay small).
MAX_REQUEST_KEY_CHARS = 128
#: No SDK retries more than this; a larger count is not one (and is not recorded).
MAX_RETRY_COUNT = 100
#: Hex digits of the credential's SHA-256 kept: 64 bits, enough to tell clients apart.
_HASH_HEX_CHARS = 16
_BEARER = "bearer "


@dataclass(frozen=True, slots=True)
class ClientFacts:
    identity: str
    request_key: str | None = None
    retry_count: int | None = None
    traced: bool = False

    def attributes(self) -> dict[str, str | int | bool]:
        attributes: dict[str, str | int | bool] = {S.ATTR_GATE_CLIENT_IDENTITY: self.identity,
                                                   S.ATTR_GATE_CLIENT_TRACED: self.traced}
        if self.request_key is not None:
            attributes[S.ATTR_GATE_CLIENT_REQUEST_KEY] = self.request_key
        if self.retry_count is not None:
            attributes[S.ATTR_GATE_CLIENT_RETRY_COUNT] = self.retry_count
        return attributes


def parse_retry_count(text: str | None) -> int | None:
    """``x-stainless-retry-count`` as an int in 0..MAX_RETRY_COUNT, else None."""
    if text is None:
        return None
    text = text.strip()
    if not (text.isascii() and text.isdigit()) or len(text) > 3:
        return None
    count = int(text)
    return count if count <= MAX_RETRY_COUNT else None


def _credential(authorization: str | None, api_key: str | None) -> str | None:
    auth = (authorization or "").strip()
    if auth[: len(_BEARER)].lower() == _BEARER and auth[len(_BEARER):].strip():
        return auth[len(_BEARER):].strip()
    if api_key is not None and api_key.strip():
        return api_key.strip()
    return auth or None


def _raw(text: str) -> bytes:
    """The header's bytes again (the proxy decodes them as latin-1), so the hash is the credential's."""
    try:
        return text.encode("latin-1")
    except UnicodeEncodeError:
        return text.encode("utf-8", "surrogatepass")


def client_facts(
    *,
    peer: str | None,
    authorization: str | None = None,
    api_key: str | None = None,
    request_id: str | None = None,
    idempotency_key: str | None = None,
    retry_count: str | None = None,
    traced: bool = False,
) -> ClientFacts:
    """The facts of one request from its headers' values (None: the header was absent)."""
    credential = _credential(authorization, api_key)
    if credential is not None:
        identity = "key:" + hashlib.sha256(_raw(credential)).hexdigest()[:_HASH_HEX_CHARS]
    else:
        identity = "peer:" + (peer or "unknown")
    request_key = None
    if request_id:
        request_key = "x-request-id:" + request_id[:MAX_REQUEST_KEY_CHARS]
    elif idempotency_key:
        request_key = "idempotency-key:" + idempotency_key[:MAX_REQUEST_KEY_CHARS]
    return ClientFacts(identity, request_key, parse_retry_count(retry_count), traced)
