"""``decide``: the gate's one decision, from where a request routes and what admission said."""

from __future__ import annotations

import pytest

from restorelens.gate import Grant, Rejection, build_policy
from restorelens.gate.decision import Admit, Forward, Hold, Respond, decide, draining, static_route
from restorelens.gate.policies.interface import VLLM_PRIORITY
from restorelens.gate.routing import NotReady, Routed, UnknownModel

LEND = build_policy("lend")


def _decide(route, admitted=None, *, policy=LEND, lifecycle=False, traffic_class="interactive", may_hold=False):
    return decide(route, admitted, model="m", traffic_class=traffic_class, policy=policy, lifecycle=lifecycle,
                  may_hold=may_hold)


def _rejection(retry_after_ms: int | None) -> Rejection:
    return Rejection("r1", "batch", "timeout", 1.0, 31.0, retry_after_ms=retry_after_ms)


def test_a_not_ready_model_is_answered_with_its_status_and_retry_after_in_seconds() -> None:
    answer = _decide(NotReady("Sleeping", "EngineSleeping", 10, message="model m is sleeping"), lifecycle=True)
    assert answer == Respond(503, "model m is sleeping", "not_ready", (("retry-after", "10"), ("x-should-retry", "true")))


def test_a_not_ready_model_without_a_hint_gets_no_retry_after_and_a_message_naming_its_state() -> None:
    # Retrying cannot help (only an operator or a new declaration can): the SDKs are told not to.
    answer = _decide(NotReady("Failed", "InvalidPerGPU", None), lifecycle=True)
    assert answer == Respond(503, "model 'm' is not ready (Failed/InvalidPerGPU)", "not_ready",
                             (("x-should-retry", "false"),))


@pytest.mark.parametrize(("lifecycle", "status"), [(True, 400), (False, 404)])
def test_an_unknown_model_is_400_behind_a_lifecycle_and_404_from_a_plain_proxy(lifecycle: bool, status: int) -> None:
    answer = _decide(UnknownModel("m"), lifecycle=lifecycle)
    assert isinstance(answer, Respond) and (answer.status, answer.error_type) == (status, "model_not_found")


def test_a_routed_request_asks_admission_first_and_is_forwarded_once_granted() -> None:
    route = Routed("http://engine:8000/")
    assert _decide(route) == Admit("http://engine:8000")
    grant = Grant(1, "r1", "interactive", "own", 1.0, 1.0)
    assert _decide(route, grant) == Forward("http://engine:8000", None)


def test_the_priority_policy_forwards_vllms_priority_for_the_class() -> None:
    grant = Grant(1, "r1", "batch", "own", 1.0, 1.0)
    answer = _decide(Routed("http://e"), grant, policy=build_policy("priority"), traffic_class="batch")
    assert answer == Forward("http://e", VLLM_PRIORITY["batch"])


@pytest.mark.parametrize(
    ("retry_after_ms", "headers"),
    [
        (None, (("x-should-retry", "true"),)),
        (400, (("x-restorelens-retry-after-ms", "400"), ("retry-after-ms", "400"), ("x-should-retry", "true"))),
        (1000, (("x-restorelens-retry-after-ms", "1000"), ("retry-after-ms", "1000"), ("retry-after", "1"),
                ("x-should-retry", "true"))),
        (2001, (("x-restorelens-retry-after-ms", "2001"), ("retry-after-ms", "2001"), ("retry-after", "3"),
                ("x-should-retry", "true"))),
    ],
)
def test_a_rejection_is_429_with_the_estimate_and_retry_after_only_from_a_second(retry_after_ms, headers) -> None:
    answer = _decide(Routed("http://e"), _rejection(retry_after_ms), traffic_class="batch")
    assert answer == Respond(429, "batch request not admitted (timeout)", "admission_rejected", headers)


def test_a_static_table_routes_to_the_url_it_picked_or_to_no_model() -> None:
    assert static_route("http://e", "m") == Routed("http://e")
    assert static_route(None, "m") == UnknownModel("m")


def test_a_holdable_answer_is_held_once_then_answered_with_both_hints() -> None:
    route = NotReady("Activating", "EngineSleeping", 5, retry_after_ms=4192, hold_until_s=130.0)
    assert _decide(route, lifecycle=True, may_hold=True) == Hold(130.0)
    answer = _decide(route, lifecycle=True)  # held already, or no room to hold: the 503 now
    assert isinstance(answer, Respond) and answer.status == 503
    assert answer.headers == (("x-restorelens-retry-after-ms", "4192"), ("retry-after-ms", "4192"),
                              ("retry-after", "5"), ("x-should-retry", "true"))


@pytest.mark.parametrize(("retry_after_ms", "headers"), [
    (None, (("retry-after", "1"), ("x-should-retry", "true"))),
    (2500, (("x-restorelens-retry-after-ms", "2500"), ("retry-after-ms", "2500"), ("retry-after", "3"),
            ("x-should-retry", "true"))),
])
def test_a_request_drained_from_the_queue_is_503_with_a_retry_after_of_at_least_a_second(retry_after_ms, headers) -> None:
    rejection = Rejection("r", "batch", "draining", 0.0, 1.0, retry_after_ms)
    answer = decide(Routed("http://e"), rejection, model="m", traffic_class="batch", policy=build_policy("static"),
                    lifecycle=False)
    assert answer == draining(retry_after_ms)
    assert (answer.status, answer.error_type, answer.headers) == (503, "shutting_down", headers)
