"""One logical request and its retry loop, as plain data and a sans-I/O state machine.

``RetryLoop`` is driven by whoever does the I/O: the live client (``client.TracedClient``) feeds it
real answers, the virtual-time runner feeds it simulated ones. Both get the same decisions from the
same policy, so a request retries the same way in either shell.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from restorelens.loadgen.retry import HeaderPairs, RetryDecision, RetryPolicy
from restorelens.loadgen.retry_after import NO_HINT, RetryAfter
from restorelens.spans import TRAFFIC_CLASSES

__all__ = ["AttemptRecord", "ClientRequest", "RequestResult", "RetryLoop", "RunLabels", "outcome_of"]

DEFAULT_PATH = "/v1/completions"


@dataclass(frozen=True, slots=True)
class RunLabels:
    """What a request belongs to; put on every ``client.request`` span of a run."""

    scenario: str = ""
    workload: str = ""
    seed: int | None = None
    run_id: str = ""
    #: The experiment's arm (``fcfs``, ``priority``, ``static``, ``lend``, …): keeps arms that talk
    #: to the engine directly apart, where no gate labels the request.
    policy: str = ""


@dataclass(frozen=True, slots=True)
class ClientRequest:
    """One OpenAI-compatible completion request. ``prompt`` never reaches a span or a log."""

    request_id: str
    model: str
    prompt: str
    max_tokens: int
    traffic_class: str = "interactive"
    stream: bool = False
    arrival_phase: str = ""
    #: The arrival phase's window, ``[start_s, start_s + window_s)`` in protocol seconds from the
    #: run's start: what a study divides its goodput by (None: the phase has no window).
    arrival_phase_start_s: float | None = None
    arrival_phase_window_s: float | None = None
    #: vLLM's request ``priority`` (lower runs first) when the client sets it itself (no gate does).
    priority: int | None = None
    path: str = DEFAULT_PATH
    labels: RunLabels = field(default_factory=RunLabels)

    def __post_init__(self) -> None:
        if self.traffic_class not in TRAFFIC_CLASSES:
            raise ValueError(f"traffic_class must be one of {TRAFFIC_CLASSES}, got {self.traffic_class!r}")
        if self.max_tokens < 1:
            raise ValueError(f"max_tokens must be >= 1, got {self.max_tokens}")

    def body(self) -> dict[str, Any]:
        body: dict[str, Any] = {"model": self.model, "prompt": self.prompt, "max_tokens": self.max_tokens}
        if self.stream:
            body["stream"] = True
        if self.priority is not None:
            body["priority"] = self.priority
        return body

    def headers(self) -> dict[str, str]:
        return {"x-traffic-class": self.traffic_class, "x-request-id": self.request_id}


@dataclass(frozen=True, slots=True)
class AttemptRecord:
    """One attempt: when it started and ended, its status (None: transport failure) and hint."""

    number: int
    start_s: float
    end_s: float
    status: int | None
    retry_after: RetryAfter = NO_HINT
    error_type: str | None = None


@dataclass(frozen=True, slots=True)
class RequestResult:
    """How a logical request ended. Times are the driving clock's seconds."""

    request_id: str
    traffic_class: str
    outcome: str
    start_s: float
    end_s: float
    attempts: tuple[AttemptRecord, ...]
    first_chunk_s: float | None = None
    waits_s: tuple[float, ...] = ()

    @property
    def statuses(self) -> tuple[int | None, ...]:
        return tuple(a.status for a in self.attempts)

    @property
    def ttft_s(self) -> float | None:
        return None if self.first_chunk_s is None else self.first_chunk_s - self.start_s

    @property
    def e2e_s(self) -> float:
        return self.end_s - self.start_s

    def meets_slo(self, ttft_slo_s: float, e2e_slo_s: float) -> bool:
        ttft = self.ttft_s
        return self.outcome == "ok" and ttft is not None and ttft <= ttft_slo_s and self.e2e_s <= e2e_slo_s


def outcome_of(status: int | None, decision: RetryDecision) -> str:
    """The ``restore.outcome`` of a request whose last answer was ``status`` and that stopped."""
    if status is not None and 200 <= status < 300:
        return "ok"
    if decision.stop_reason in ("max-attempts", "deadline"):
        return "gave_up"
    if status is not None and 400 <= status < 500:
        return "rejected"
    return "error"


class RetryLoop:
    """Attempts of one request under one policy: begin, answer (or fail), wait, until done."""

    def __init__(self, request: ClientRequest, policy: RetryPolicy, start_s: float) -> None:
        self.request = request
        self.policy = policy
        self.start_s = start_s
        self.attempts: list[AttemptRecord] = []
        self.waits_s: list[float] = []
        self.first_chunk_s: float | None = None
        self.outcome: str | None = None
        self.last_decision: RetryDecision | None = None
        #: Attempts the server accepted and then took back (preempted): they do not spend the
        #: policy's attempts, since the client was not refused.
        self.preemptions = 0
        self._attempt_start_s: float | None = None

    @property
    def attempt_count(self) -> int:
        return len(self.attempts) + (self._attempt_start_s is not None)

    def begin_attempt(self, now_s: float) -> int:
        """Start the next attempt; returns its number (1-based; resend count is number - 1)."""
        if self.outcome is not None or self._attempt_start_s is not None:
            raise RuntimeError("begin_attempt after the request ended or while an attempt is open")
        self._attempt_start_s = now_s
        return len(self.attempts) + 1

    def answered(self, status: int | None, headers: HeaderPairs | None, now_s: float, error_type: str | None = None,
                 *, preempted: bool = False) -> RetryDecision:
        """The open attempt got ``status`` (None with ``error_type``: it failed without an answer).

        ``preempted``: the server says it took the request back (a 503 of type ``preempted``), which
        does not spend an attempt of the policy's, as ``preempted()`` for a stream cut short.
        """
        if self._attempt_start_s is None:
            raise RuntimeError("answered() without an open attempt")
        if preempted:
            self.preemptions += 1
            error_type = error_type or "preempted"
        number = len(self.attempts) + 1
        decision = self.policy.decide(status, headers, number - self.preemptions, now_s, self.start_s,
                                      self.request.request_id)
        self.attempts.append(AttemptRecord(number, self._attempt_start_s, now_s, status, decision.retry_after, error_type))
        self._attempt_start_s = None
        self.last_decision = decision
        success = status is not None and 200 <= status < 300
        if success or not decision.retry:
            self.outcome = outcome_of(status, decision)
        else:
            self.waits_s.append(decision.wait_s)
        return decision

    def first_chunk(self, now_s: float) -> None:
        if self.first_chunk_s is None:
            self.first_chunk_s = now_s

    def preempted(self, now_s: float, headers: HeaderPairs | None) -> RetryDecision:
        """The server took back the accepted request: its stream ended with a retryable preemption
        carrying a retry hint (``headers``). The policy decides as for a 503 with that hint; what
        the stream had delivered is discarded, so the request's first chunk is the retry's."""
        if self.outcome is None or not self.attempts:
            raise RuntimeError("preempted() without an accepted attempt")
        last = self.attempts[-1]
        self.preemptions += 1
        decision = self.policy.decide(503, headers, len(self.attempts) - self.preemptions, now_s, self.start_s,
                                      self.request.request_id)
        self.attempts[-1] = AttemptRecord(last.number, last.start_s, now_s, last.status, decision.retry_after,
                                          "preempted")
        self.first_chunk_s = None
        self.last_decision = decision
        if decision.retry:
            self.outcome = None
            self.waits_s.append(decision.wait_s)
        else:
            self.outcome = outcome_of(503, decision)
        return decision

    def body_failed(self) -> None:
        """The successful answer's body broke off: the request did not complete."""
        self.outcome = "error"

    def abort(self, now_s: float, error_type: str) -> None:
        """The request was abandoned (cancelled, or the shell failed): close it as an error."""
        if self._attempt_start_s is not None:
            self.attempts.append(AttemptRecord(len(self.attempts) + 1, self._attempt_start_s, now_s, None, NO_HINT, error_type))
            self._attempt_start_s = None
        self.outcome = "error"

    @property
    def done(self) -> bool:
        return self.outcome is not None

    def result(self, end_s: float) -> RequestResult:
        if self.outcome is None:
            raise RuntimeError("result() before the request ended")
        return RequestResult(
            self.request.request_id,
            self.request.traffic_class,
            self.outcome,
            self.start_s,
            end_s,
            tuple(self.attempts),
            self.first_chunk_s,
            tuple(self.waits_s),
        )
