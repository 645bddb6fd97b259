"""A continuous-batching scheduler with a paged KV cache, shaped like vLLM V1's.

Each step (one model forward) is planned by ``plan_step`` and applied by ``finish_step``:

1. Running requests first, in order: each needs its uncomputed tokens (one for a decode, the rest of
   its prompt for a chunked prefill) within the step's token budget, and KV blocks for them. When
   blocks run out a running request is preempted (recompute: its blocks are freed, it returns to
   the waiting queue and later prefills prompt + generated tokens again). The victim is the last
   running request (FCFS) or the lowest-priority, latest-arrived one (priority policy), even one
   this step had planned already, which is then taken out of the step, as in vLLM.
2. Then, if nothing was preempted, waiting requests in queue order (arrival, or (priority,
   arrival)) while fewer than ``max_num_seqs`` run and the head's blocks are free. A head that does
   not fit blocks everything behind it, as in vLLM.

A request whose computed tokens catch up with its tokens samples one new token at the step's end.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field

from restorelens.sim.config import EngineConfig
from restorelens.sim.records import SimRequest

__all__ = ["Scheduler", "StepPlan", "TrackedRequest"]


class TrackedRequest:
    """Mutable per-request state inside the scheduler."""

    __slots__ = (
                "arrival_s",
        "blocks",
        "first_token_s",
        "last_token_s",
        "num_computed",
        "num_output",
        "num_preemptions",
        "order",
        "removed",
        "request",
        "scheduled_s",
        "target_output",
    )

    def __init__(self, request: SimRequest, arrival_s: float, order: int) -> None:
        self.request = request
        self.arrival_s = arrival_s
        self.order = order
        self.num_computed = 0
        self.num_output = 0
        self.blocks = 0
        self.num_preemptions = 0
        self.scheduled_s: float | None = None
        self.first_token_s: float | None = None
        self.last_token_s: float | None = None
        self.removed = False
        wanted = request.max_tokens if request.output_tokens is None else request.output_tokens
        self.target_output = max(1, min(wanted, request.max_tokens))

    @property
    def num_tokens(self) -> int:
        return self.request.prompt_tokens + self.num_output


@dataclass(slots=True)
class StepPlan:
    """One planned step: which requests compute how many tokens, and what it costs."""

    batch: list[tuple[TrackedRequest, int]] = field(default_factory=list)
    prefill_tokens: int = 0
    decode_seqs: int = 0
    decode_context_tokens: int = 0
    preempted: list[TrackedRequest] = field(default_factory=list)


class Scheduler:
    def __init__(self, config: EngineConfig) -> None:
        self.config = config
        self.free_blocks = config.num_blocks
        self.running: list[TrackedRequest] = []
        self._waiting: list[tuple[int, float, int, TrackedRequest]] = []
        self._num_waiting = 0
        #: Requests that arrived while the engine slept, in arrival order: waiting, but not
        #: schedulable until ``release_held`` (the wake).
        self.held: list[TrackedRequest] = []
        self._order = 0
        self._by_priority = config.scheduling_policy == "priority"
        self.num_preemptions_total = 0

    # --- queue --------------------------------------------------------------------------------

    @property
    def num_waiting(self) -> int:
        return self._num_waiting + len(self.held)

    @property
    def num_running(self) -> int:
        return len(self.running)

    @property
    def has_work(self) -> bool:
        """Work a step could do now (held requests wait for the wake and do not count)."""
        return bool(self.running) or self._num_waiting > 0

    @property
    def kv_usage(self) -> float:
        return 1.0 - self.free_blocks / self.config.num_blocks

    def add(self, request: SimRequest, arrival_s: float, *, hold: bool = False) -> TrackedRequest:
        tracked = TrackedRequest(request, arrival_s, self._order)
        self._order += 1
        if hold:
            self.held.append(tracked)
        else:
            self._push_waiting(tracked)
        return tracked

    def release_held(self) -> None:
        """The engine woke: held requests join the waiting queue with their arrival times, so
        FCFS or priority order treats them as if they had queued from the start."""
        for tracked in self.held:
            self._push_waiting(tracked)
        self.held.clear()

    def _push_waiting(self, tracked: TrackedRequest) -> None:
        priority = tracked.request.priority if self._by_priority else 0
        # Re-queued (preempted) requests keep their arrival, so under FCFS they return to the front.
        heapq.heappush(self._waiting, (priority, tracked.arrival_s, tracked.order, tracked))
        self._num_waiting += 1

    def _peek_waiting(self) -> TrackedRequest | None:
        while self._waiting and self._waiting[0][3].removed:
            heapq.heappop(self._waiting)
        return self._waiting[0][3] if self._waiting else None

    def waiting_requests(self) -> list[TrackedRequest]:
        return [entry[3] for entry in sorted(self._waiting) if not entry[3].removed]

    def remove(self, tracked: TrackedRequest) -> None:
        """Drop a request (finished or aborted) and free its blocks."""
        if tracked in self.running:
            self.running.remove(tracked)
        elif tracked in self.held:
            self.held.remove(tracked)
        elif not tracked.removed:
            self._num_waiting -= 1  # lazily popped from the heap later
        tracked.removed = True
        self.free_blocks += tracked.blocks
        tracked.blocks = 0

    # --- one step -----------------------------------------------------------------------------

    def plan_step(self, now_s: float) -> StepPlan:
        config = self.config
        plan = StepPlan()
        budget = config.max_num_batched_tokens
        index = 0
        while index < len(self.running) and budget > 0:
            tracked = self.running[index]
            num_new = min(tracked.num_tokens - tracked.num_computed, budget)
            need = config.blocks_for(tracked.num_computed + num_new) - tracked.blocks
            preempted_itself = False
            while need > self.free_blocks:
                victim = self._pick_victim()
                victim_index = self.running.index(victim)
                if victim_index < index:
                    # Planned earlier in this step (priority policy): undone, as vLLM undoes it.
                    budget += self._unplan(plan, victim)
                    index -= 1
                self._preempt(victim)
                plan.preempted.append(victim)
                if victim is tracked:
                    preempted_itself = True
                    break
            if preempted_itself:
                continue  # the list shifted under index; the next request now sits there
            self.free_blocks -= need
            tracked.blocks += need
            self._add_to_plan(plan, tracked, num_new)
            budget -= num_new
            index += 1
        if plan.preempted:
            return plan
        while budget > 0 and len(self.running) < config.max_num_seqs:
            tracked = self._peek_waiting()
            if tracked is None:
                break
            num_new = tracked.num_tokens - tracked.num_computed
            if num_new > budget:
                num_new = budget
            need = config.blocks_for(tracked.num_computed + num_new) - tracked.blocks
            if need > self.free_blocks:
                break  # head-of-line blocking: nothing behind it may jump the queue
            heapq.heappop(self._waiting)
            self._num_waiting -= 1
            self.running.append(tracked)
            self.free_blocks -= need
            tracked.blocks += need
            if tracked.scheduled_s is None:
                tracked.scheduled_s = now_s
            self._add_to_plan(plan, tracked, num_new)
            budget -= num_new
        return plan

    @staticmethod
    def _add_to_plan(plan: StepPlan, tracked: TrackedRequest, num_new: int) -> None:
        plan.batch.append((tracked, num_new))
        if tracked.num_output > 0 and num_new == 1 and tracked.num_computed == tracked.num_tokens - 1:
            plan.decode_seqs += 1
            plan.decode_context_tokens += tracked.num_computed
        else:
            plan.prefill_tokens += num_new

    def _pick_victim(self) -> TrackedRequest:
        if not self._by_priority:
            return self.running[-1]
        # vLLM's priority policy: the lowest-priority, latest-arrived running request, whether or
        # not this step planned it already (vllm/v1/core/sched/scheduler.py).
        return max(self.running, key=lambda r: (r.request.priority, r.arrival_s, r.order))

    @staticmethod
    def _unplan(plan: StepPlan, tracked: TrackedRequest) -> int:
        """Take ``tracked`` out of this step's plan; returns the tokens it had of the budget."""
        for position, (planned, num_new) in enumerate(plan.batch):
            if planned is tracked:
                del plan.batch[position]
                if tracked.num_output > 0 and num_new == 1 and tracked.num_computed == tracked.num_tokens - 1:
                    plan.decode_seqs -= 1
                    plan.decode_context_tokens -= tracked.num_computed
                else:
                    plan.prefill_tokens -= num_new
                return num_new
        return 0

    def _preempt(self, tracked: TrackedRequest) -> None:
        self.running.remove(tracked)
        self.free_blocks += tracked.blocks
        tracked.blocks = 0
        tracked.num_computed = 0
        tracked.num_preemptions += 1
        self.num_preemptions_total += 1
        self._push_waiting(tracked)

    def finish_step(self, plan: StepPlan, end_s: float) -> tuple[list[TrackedRequest], list[TrackedRequest]]:
        """Apply a step's results; returns (requests that sampled a token, requests now finished)."""
        sampled: list[TrackedRequest] = []
        finished: list[TrackedRequest] = []
        for tracked, num_new in plan.batch:
            if tracked.removed:
                continue
            tracked.num_computed += num_new
            if tracked.num_computed < tracked.num_tokens:
                continue  # a prefill chunk; more of the prompt remains
            tracked.num_output += 1
            tracked.last_token_s = end_s
            if tracked.first_token_s is None:
                tracked.first_token_s = end_s
            sampled.append(tracked)
            if tracked.num_output >= tracked.target_output:
                self.remove(tracked)
                finished.append(tracked)
        return sampled, finished
