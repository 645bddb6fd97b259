"""What goes into and comes out of the engine core: requests, per-request records and events."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = [
    "EngineNotReadyError",
    "EngineStateEvent",
    "FinishedEvent",
    "FirstTokenEvent",
    "RequestRecord",
    "RequestRejectedError",
    "SimRequest",
    "TokenEvent",
]

FINISH_LENGTH = "length"
FINISH_STOP = "stop"
FINISH_ABORT = "abort"


class RequestRejectedError(ValueError):
    """The request can never be served as asked (too long, bad priority); the shell answers 400."""

    def __init__(self, message: str, *, param: str | None = None) -> None:
        super().__init__(message)
        self.param = param


class EngineNotReadyError(RuntimeError):
    """The engine is loading, asleep, waking or draining for sleep; the shell answers 503."""

    def __init__(self, state: str, message: str) -> None:
        super().__init__(message)
        self.state = state


@dataclass(frozen=True, slots=True)
class SimRequest:
    """One inference request as the engine sees it (token counts only, never text).

    ``output_tokens`` is how many tokens the model "wants" to generate before its end-of-sequence
    token; None means it keeps going until ``max_tokens`` (finish_reason "length").
    ``priority``: lower values are served first under the "priority" policy, as in vLLM.
    ``emit_tokens`` asks for a ``TokenEvent`` per generated token (streaming responses).
    """

    request_id: str
    prompt_tokens: int
    max_tokens: int
    priority: int = 0
    output_tokens: int | None = None
    emit_tokens: bool = False


@dataclass(frozen=True, slots=True)
class RequestRecord:
    """A finished (or aborted) request's timeline, in the engine's clock (seconds since the epoch).

    The derived times follow vLLM's V1 definitions: queue = scheduled - queued (first scheduling),
    prefill = first token - scheduled, decode = last token - first token,
    inference = last token - scheduled.
    """

    request_id: str
    arrival_s: float
    scheduled_s: float | None
    first_token_s: float | None
    last_token_s: float | None
    finished_s: float
    prompt_tokens: int
    completion_tokens: int
    max_tokens: int
    priority: int
    finish_reason: str
    num_preemptions: int

    @property
    def queue_time_s(self) -> float:
        return (self.scheduled_s if self.scheduled_s is not None else self.finished_s) - self.arrival_s

    @property
    def ttft_s(self) -> float | None:
        return None if self.first_token_s is None else self.first_token_s - self.arrival_s

    @property
    def e2e_s(self) -> float:
        return self.finished_s - self.arrival_s

    @property
    def prefill_time_s(self) -> float:
        if self.first_token_s is None or self.scheduled_s is None:
            return 0.0
        return self.first_token_s - self.scheduled_s

    @property
    def decode_time_s(self) -> float:
        if self.first_token_s is None or self.last_token_s is None:
            return 0.0
        return self.last_token_s - self.first_token_s

    @property
    def inference_time_s(self) -> float:
        if self.scheduled_s is None or self.last_token_s is None:
            return 0.0
        return self.last_token_s - self.scheduled_s


@dataclass(frozen=True, slots=True)
class FirstTokenEvent:
    request_id: str
    at_s: float


@dataclass(frozen=True, slots=True)
class TokenEvent:
    """Token number ``index`` (0-based) of a request that asked for ``emit_tokens``."""

    request_id: str
    index: int
    at_s: float


@dataclass(frozen=True, slots=True)
class FinishedEvent:
    record: RequestRecord

    @property
    def request_id(self) -> str:
        return self.record.request_id

    @property
    def at_s(self) -> float:
        return self.record.finished_s


@dataclass(frozen=True, slots=True)
class EngineStateEvent:
    """The engine reached a lifecycle state: "ready" (after cold start or wake-up) or "asleep"."""

    state: str
    at_s: float


Event = FirstTokenEvent | TokenEvent | FinishedEvent | EngineStateEvent
