"""Who sent a request, from its headers: the credential hashed, else the peer; the request key; the SDK's retry count."""

from __future__ import annotations

import hashlib

import pytest

from restorelens.gate.client_identity import client_facts, parse_retry_count


def key_of(credential: str) -> str:
    return "key:" + hashlib.sha256(credential.encode()).hexdigest()[:16]


def test_the_bearer_token_then_an_api_key_then_the_peer_say_who_it_is() -> None:
    assert client_facts(peer="10.0.0.2", authorization="Bearer sk-1", api_key="sk-2").identity == key_of("sk-1")
    assert client_facts(peer="10.0.0.2", authorization="bearer  sk-1 ").identity == key_of("sk-1")
    assert client_facts(peer="10.0.0.2", api_key="sk-2").identity == key_of("sk-2")
    assert client_facts(peer="10.0.0.2", authorization="Bearer ", api_key="sk-2").identity == key_of("sk-2")
    assert client_facts(peer="10.0.0.2", authorization="Basic dTpw").identity == key_of("Basic dTpw")
    assert client_facts(peer="10.0.0.2").identity == "peer:10.0.0.2"
    assert client_facts(peer=None).identity == "peer:unknown"


def test_the_request_key_prefers_x_request_id_and_is_cut() -> None:
    assert client_facts(peer=None, request_id="r1", idempotency_key="i1").request_key == "x-request-id:r1"
    assert client_facts(peer=None, idempotency_key="i" * 300).request_key == "idempotency-key:" + "i" * 128
    assert client_facts(peer=None, request_id="").request_key is None


@pytest.mark.parametrize(("text", "count"), [("0", 0), ("2", 2), (" 7 ", 7), ("100", 100), ("101", None),
                                              ("-1", None), ("1.0", None), ("²", None), ("", None), (None, None)])
def test_the_retry_count_is_a_small_whole_number_or_nothing(text: str | None, count: int | None) -> None:
    assert parse_retry_count(text) == count
