"""The policy interface and what every policy shares: the ``Occupancy`` it decides over, the
``RequestSize`` it may read, and how the gate tells a request's size before it runs.

A policy decides over an ``Occupancy`` snapshot (counts, the time, the asking request's size) and
reads no clock, so the same policy object runs behind the live proxy and in virtual time. The
``Admission`` core does the bookkeeping (queues, grants, lending records) and tells the policy what
happened through the ``observe_*`` hooks, with explicit times: the study's policies ignore them; the
budget-aware lenders (``budget.py``) learn from them. New policies subclass ``AdmissionPolicy``, and
are named with their options in ``registry.py``; the proxy never changes.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from restorelens.spans import TRAFFIC_CLASSES

__all__ = ["BATCH", "CHARS_PER_TOKEN", "INTERACTIVE", "VLLM_PRIORITY", "AdmissionPolicy", "Occupancy", "RequestSize",
           "Slot", "request_size", "request_size_of"]

INTERACTIVE, BATCH = TRAFFIC_CLASSES
Slot = Literal["own", "borrowed"]

#: vLLM's ``priority`` request field: lower runs first (the MoFlux "vllm-priority" arm).
VLLM_PRIORITY = {INTERACTIVE: 0, BATCH: 10}
#: The gate has no tokenizer: English text runs about four characters per token in the BPE
#: vocabularies of Llama and Qwen; a loan's prediction needs its size, not its exact count.
CHARS_PER_TOKEN = 4.0


@dataclass(frozen=True, slots=True)
class RequestSize:
    """What the gate knows of a request's size before it runs: the prompt's tokens (estimated from
    its characters: the gate has no tokenizer) and ``max_tokens``. Zero: unknown."""

    prompt_tokens: int = 0
    max_tokens: int = 0


@dataclass(frozen=True, slots=True)
class Occupancy:
    """What the core holds at one instant: requests in flight (own slots), borrowed, and queued."""

    own: Mapping[str, int]
    borrowed: int
    queued: Mapping[str, int]
    #: The protected floor is still lent out: demand returned, but the lending policy's revision
    #: that restores the floor has not taken effect yet (a control period; never with period 0).
    floor_lowered: bool = False
    #: The core's time of the decision, and the size of the request asking (None: not known).
    now_s: float = 0.0
    size: RequestSize | None = None

    def in_flight(self, traffic_class: str | None = None) -> int:
        if traffic_class is None:
            return sum(self.own.values()) + self.borrowed
        return self.own.get(traffic_class, 0)

    def idle(self, traffic_class: str) -> bool:
        """No request of the class is in flight or waiting: its demand is absent."""
        return self.own.get(traffic_class, 0) == 0 and self.queued.get(traffic_class, 0) == 0


class AdmissionPolicy:
    """Base policy: admit everything on own capacity, serve queues in arrival order.

    Subclasses override ``admit``. ``protected_class`` names the class whose capacity may be lent
    (None: the policy never lends, so no lending or restoration records exist).
    """

    name = "base"
    protected_class: str | None = None
    lendable_slots = 0
    #: True: one FIFO across classes (a waiting request of any class blocks newcomers of every class).
    shared_queue = False
    #: Seconds between the lending controller's decisions; 0: it decides at every request.
    control_period_s = 0.0
    #: What a loan may cost to give back, in seconds (None: the policy keeps no budget).
    restore_budget_s: float | None = None
    #: Seconds a request of a class may wait in the gate's queue for a grant, in place of the
    #: gate's ``wait_timeout_s`` for that class (the lenders' queues); empty: the gate's timeout holds.
    class_wait_s: Mapping[str, float] = {}

    def floor_restored_at(self, returned_s: float) -> float:
        """When the protected floor is back at its nominal size, for demand returning at ``returned_s``."""
        return returned_s

    def admit(self, traffic_class: str, occupancy: Occupancy) -> Slot | None:
        return "own"

    def upstream_priority(self, traffic_class: str) -> int | None:
        """A vLLM ``priority`` to set on the forwarded body, or None to leave the body alone."""
        return None

    def describe(self) -> dict[str, Any]:
        return {"policy": self.name}

    # --- what the core tells a policy (no-ops for the study's policies) -------------------------

    def observe_arrival(self, traffic_class: str, size: RequestSize, now_s: float) -> None:
        """A request of ``traffic_class`` arrived (first, before any decision on it)."""

    def observe_return(self, now_s: float) -> None:
        """Protected demand returned (the class was idle)."""

    def observe_grant(self, grant_id: int, traffic_class: str, slot: Slot, size: RequestSize, now_s: float) -> None:
        """A request was granted a slot."""

    def observe_first_byte(self, grant_id: int, now_s: float) -> None:
        """The granted request's first response byte came back from the engine."""

    def observe_tokens(self, grant_id: int, tokens: int, now_s: float) -> None:
        """``tokens`` more output tokens of the granted request passed the gate (streamed answers)."""

    def observe_release(self, grant_id: int, occupancy: Occupancy, now_s: float, *, completed: bool = True) -> None:
        """The granted request finished (``completed`` False: it failed or was taken back)."""

    def refusal(self, traffic_class: str, occupancy: Occupancy) -> Any:
        """Why a loan the request asked for was refused (a ``budget.LoanCheck``), or None."""
        return None

    def resumed(self, now_s: float) -> Any:
        """The resume decision to record when a loan is granted after demand returned, or None."""
        return None

    def next_decision_s(self, now_s: float) -> float | None:
        """A time after ``now_s`` when the policy may admit what it refuses now with nothing else
        happening (a hold-off ending), for the core to re-decide its queues then; None: none."""
        return None

    def preemptions(self, now_s: float) -> list[Any]:
        """Loans to take back now that the protected floor is restored (``budget.Preemption``)."""
        return []


def request_size(prompt_chars: int, max_tokens: int) -> RequestSize:
    """What the gate can tell of a request's size from its body, before it runs."""
    return RequestSize(math.ceil(max(0, prompt_chars) / CHARS_PER_TOKEN), max(0, max_tokens))


def request_size_of(payload: dict[str, Any]) -> RequestSize:
    """The size the lenders predict from, as the engine will count it: the prompt (characters of
    text; token ids by their number, as 4 characters each), chat's message texts, and the output
    limit (``max_completion_tokens`` first, as vLLM reads it, then ``max_tokens``; 0 when absent),
    times the sequences asked for (``n``, ``best_of``)."""
    chars = 0
    prompt = payload.get("prompt")
    if isinstance(prompt, str):
        chars = len(prompt)
    elif isinstance(prompt, list):
        if prompt and all(isinstance(p, int) and not isinstance(p, bool) for p in prompt):
            chars = len(prompt) * int(CHARS_PER_TOKEN)  # token ids: one token each
        else:
            chars = sum(len(p) for p in prompt if isinstance(p, str))
    messages = payload.get("messages")
    if isinstance(messages, list):
        for message in messages:
            content = message.get("content") if isinstance(message, dict) else None
            if isinstance(content, str):
                chars += len(content)
            elif isinstance(content, list):
                chars += sum(len(p.get("text", "")) for p in content if isinstance(p, dict) and isinstance(p.get("text"), str))
    limit = payload.get("max_completion_tokens")
    if limit is None:
        limit = payload.get("max_tokens")
    max_tokens = limit if isinstance(limit, int) and not isinstance(limit, bool) else 0
    sequences = max((v for v in (payload.get("n"), payload.get("best_of")) if isinstance(v, int) and not isinstance(v, bool)),
                    default=1)
    size = request_size(chars, max_tokens)
    if sequences > 1:  # each sequence decodes, and holds KV, of its own
        size = RequestSize(size.prompt_tokens * sequences, size.max_tokens * sequences)
    return size
