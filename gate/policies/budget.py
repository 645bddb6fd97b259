"""The lenders that know what a loan will cost to give back: ``lend-budget`` and ``lend-preempt``.

``lend`` (``floors.LendPolicy``) is the MoFlux study's lender and stays as the study had it. The
lenders here answer a question the study left open (docs/gate.md, "Budget-aware lending"):

- ``lend-budget`` lends only what can be given back within ``restore_budget_s``: the gate predicts
  each loan's remaining engine time from the request's size (prompt tokens estimated from its
  characters, ``max_tokens``) and engine rates it learns from completed requests (``learning.py``),
  and the KV blocks every request in flight holds; a loan that would push the predicted drain, or
  the wait of a returning protected request for KV, past the budget is refused. After demand
  returns, lending resumes only once the earlier loans drained and the protected class stayed idle
  for a hold-off learnt from its inter-arrival times.
- ``lend-preempt`` lends as ``lend-budget`` accounts, but gives loans back by preemption: when the
  floor is restored, every loan predicted to run past the budget is aborted (its client gets a
  retryable answer and its retry waits in the gate's queue), so a restoration is bounded by design
  and a loan need not be refused for being long.

Everything is sans-I/O: the ``Admission`` core tells a policy what happened (``observe_*``) with
explicit times, and asks it to decide over an ``Occupancy`` snapshot that carries the time and the
asking request's size. The same objects run behind the live proxy and in virtual time.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from restorelens.errors import SettingError

from .floors import LendPolicy
from .interface import Occupancy, RequestSize, Slot
from .learning import EngineRates, HoldOff, quantile
from .registry import DEFAULTS, check_option

__all__ = ["BudgetLendPolicy", "LoanCheck", "PreemptLendPolicy", "Preemption"]

# Refusal and resume reasons, as recorded on spans (docs/spans.md).
REASON_DRAIN = "drain_over_budget"
REASON_KV_WAIT = "kv_wait_over_budget"
REASON_NOT_DRAINED = "loans_not_drained"
REASON_HOLD_OFF = "hold_off"
REASON_RESUMED = "drained_and_idle"

#: The longest Retry-After a preemption gives, in seconds.
MAX_RETRY_AFTER_S = 60.0
#: A request's own pace counts once it streamed this many tokens: the first two may come in one
#: breath (a chat stream's first events), which would make its pace look like zero.
MIN_PACE_TOKENS = 4


@dataclass(frozen=True, slots=True)
class LoanCheck:
    """A loan's verdict: ``reason`` None admits; otherwise why not and the prediction that decided."""

    reason: str | None
    predicted_s: float | None = None
    #: What the prediction was held against: the budget, or the learnt hold-off.
    limit_s: float | None = None


@dataclass(frozen=True, slots=True)
class Preemption:
    """A loan taken back at restoration: what it was predicted to need still, what is lost."""

    grant_id: int
    remaining_s: float
    lost_tokens: int
    retry_after_ms: int


@dataclass(slots=True)
class _Book:
    """What the lender knows of one granted request."""

    traffic_class: str
    slot: Slot
    size: RequestSize
    granted_s: float
    first_byte_s: float | None = None
    tokens_seen: int = 0
    last_token_s: float | None = None


class BudgetLendPolicy(LendPolicy):
    """``lend-budget``: lend only what the engine can give back within ``restore_budget_s``."""

    name = "lend-budget"
    #: True: loans long past the budget are taken back by preemption, not refused (lend-preempt).
    preempts = False

    def __init__(
        self,
        floors: Mapping[str, int] | None = None,
        lendable_slots: int = DEFAULTS["lendable_slots"],
        *,
        control_period_s: float = DEFAULTS["control_period_s"],
        restore_budget_s: float = DEFAULTS["restore_budget_s"],
        kv_blocks: int | None = DEFAULTS["kv_blocks"],
        block_size: int = DEFAULTS["block_size"],
        prefill_s_per_token: float = 0.002,
        decode_s_per_token: float = 0.05,
        hold_off_quantile: float = 0.9,
        hold_off_prior_s: float = 5.0,
        returning_tokens_prior: int = 512,
        protected_wait_s: float = DEFAULTS["protected_wait_s"],
        borrower_wait_s: float = DEFAULTS["borrower_wait_s"],
    ) -> None:
        super().__init__(floors, lendable_slots, control_period_s=control_period_s)
        for name, value in (("restore_budget_s", restore_budget_s), ("kv_blocks", kv_blocks),
                            ("block_size", block_size), ("protected_wait_s", protected_wait_s),
                            ("borrower_wait_s", borrower_wait_s)):
            check_option(name, value)
        if not 0 < hold_off_quantile <= 1:
            raise SettingError("gate.hold_off_quantile", f"must be in (0, 1], got {hold_off_quantile}")
        self.restore_budget_s = restore_budget_s
        # A short queue for the protected class (a wait past its latency target is as bad as a 429)
        # and a long one for the borrower, which waits for its floor or a loan instead of a 429.
        self.class_wait_s = {self.protected_class: protected_wait_s, self.borrower_class: borrower_wait_s}
        self.kv_blocks = kv_blocks
        self.block_size = block_size
        self.rates = EngineRates(prefill_s_per_token, decode_s_per_token)
        self.hold_off = HoldOff(hold_off_prior_s, hold_off_quantile)
        self._returning_tokens: deque[int] = deque([returning_tokens_prior], maxlen=256)
        self._book: dict[int, _Book] = {}
        #: Loans granted before the last return that have not finished yet (the resume rule waits for them).
        self._undrained: set[int] = set()
        #: When the protected class last went idle (None: it is busy, or was never seen).
        self._protected_idle_since_s: float | None = 0.0
        self._returned = False  # demand has returned at least once: the resume rule applies

    # --- what the core tells the policy ---------------------------------------------------------

    def observe_arrival(self, traffic_class: str, size: RequestSize, now_s: float) -> None:
        if traffic_class == self.protected_class:
            self.hold_off.observe_arrival(now_s)
            self._returning_tokens.append(size.prompt_tokens + size.max_tokens)

    def observe_return(self, now_s: float) -> None:
        self._returned = True
        self._protected_idle_since_s = None
        self._undrained = {gid for gid, book in self._book.items() if book.slot == "borrowed"}

    def observe_grant(self, grant_id: int, traffic_class: str, slot: Slot, size: RequestSize, now_s: float) -> None:
        self._book[grant_id] = _Book(traffic_class, slot, size, now_s)
        if traffic_class == self.protected_class:
            self._protected_idle_since_s = None

    def observe_first_byte(self, grant_id: int, now_s: float) -> None:
        book = self._book.get(grant_id)
        if book is not None and book.first_byte_s is None:
            book.first_byte_s = now_s

    def observe_tokens(self, grant_id: int, tokens: int, now_s: float) -> None:
        book = self._book.get(grant_id)
        if book is not None:
            book.tokens_seen += tokens
            book.last_token_s = now_s

    def observe_release(self, grant_id: int, occupancy: Occupancy, now_s: float, *, completed: bool = True) -> None:
        book = self._book.pop(grant_id, None)
        self._undrained.discard(grant_id)
        # Only a streamed answer that ran to its end tells prefill from decode: a whole answer in
        # one body puts all its time before its first byte, an error or a disconnect none.
        if book is not None and completed and book.first_byte_s is not None and book.tokens_seen > 0:
            self.rates.observe(book.size, book.first_byte_s - book.granted_s, now_s - book.first_byte_s)
        if occupancy.idle(self.protected_class) and self._protected_idle_since_s is None:
            self._protected_idle_since_s = now_s

    # --- predictions ----------------------------------------------------------------------------

    def blocks(self, size: RequestSize) -> int:
        return math.ceil((size.prompt_tokens + size.max_tokens) / self.block_size)

    def remaining_s(self, book: _Book, now_s: float) -> float:
        """A granted request's remaining engine time, from the progress the gate has seen.

        Before its first byte: what is left of the predicted prefill, then every output token. After
        it: the tokens not yet streamed, at the request's own pace so far when it has streamed
        two or more (its pace under the engine's present load), else at the learnt rate. A request
        past its prediction is never predicted done: its output tokens still have to come.
        """
        size = book.size
        if size.max_tokens <= 0:
            return math.inf  # no output limit the gate knows: it may run as long as the context allows
        if book.first_byte_s is None:
            prefill_left_s = max(0.0, book.granted_s + size.prompt_tokens * self.rates.prefill_s_per_token - now_s)
            return prefill_left_s + size.max_tokens * self.rates.decode_s_per_token
        if book.tokens_seen >= MIN_PACE_TOKENS and book.last_token_s is not None:
            pace_s = (book.last_token_s - book.first_byte_s) / (book.tokens_seen - 1)
            return max(0, size.max_tokens - book.tokens_seen) * pace_s
        if book.tokens_seen:
            return max(0, size.max_tokens - book.tokens_seen) * self.rates.decode_s_per_token
        # Not streamed (or nothing counted): only time tells.
        return max(0.0, book.first_byte_s + size.max_tokens * self.rates.decode_s_per_token - now_s)

    @property
    def returning_blocks(self) -> int:
        """KV a returning protected request needs: the p90 of the protected requests' sizes seen."""
        return math.ceil(quantile([float(t) for t in self._returning_tokens], 0.9) / self.block_size)

    def kv_wait_s(self, extra: RequestSize | None, now_s: float) -> float:
        """How long a protected request arriving now would wait for KV, were ``extra`` lent too."""
        if self.kv_blocks is None:
            return 0.0
        held = [(self.remaining_s(book, now_s), self.blocks(book.size)) for book in self._book.values()]
        if extra is not None:
            held.append((self.rates.service_s(extra), self.blocks(extra)))
        free = self.kv_blocks - sum(blocks for _, blocks in held)
        need = self.returning_blocks
        if free >= need:
            return 0.0
        for remaining, blocks in sorted(held):
            free += blocks
            if free >= need:
                return remaining
        return math.inf  # it would not fit even in an empty engine: no loan changes that

    # --- decisions ------------------------------------------------------------------------------

    def loan_check(self, occupancy: Occupancy) -> LoanCheck:
        """May the asking request (``occupancy.size``) borrow now? The resume rule, then the budget."""
        now_s = occupancy.now_s
        budget = self.restore_budget_s
        if self._returned:
            if self._undrained:
                return LoanCheck(REASON_NOT_DRAINED, None, budget)
            idle_since = self._protected_idle_since_s
            hold_off = self.hold_off.hold_off_s
            if idle_since is None or now_s - idle_since < hold_off:
                idle_s = 0.0 if idle_since is None else now_s - idle_since
                return LoanCheck(REASON_HOLD_OFF, hold_off - idle_s, hold_off)
        if self.preempts:
            return LoanCheck(None)  # anything over budget is taken back at restoration
        size = occupancy.size or RequestSize()
        if size.max_tokens <= 0:
            # No max_tokens: its length is unbounded as far as the gate knows (vLLM's chat default
            # is the model's whole context), so it cannot be promised back within any budget.
            return LoanCheck(REASON_DRAIN, math.inf, budget)
        # The KV rule first: when the loan's own blocks are what a returning request would wait
        # for, that is the more telling reason. It refuses only what the loan makes worse: KV held
        # by own-slot work is not the loan's doing, and refusing the loan would not free it.
        kv_wait_s = self.kv_wait_s(size, now_s)
        if kv_wait_s > budget and kv_wait_s > self.kv_wait_s(None, now_s):
            return LoanCheck(REASON_KV_WAIT, kv_wait_s, budget)
        loans = [self.remaining_s(b, now_s) for b in self._book.values() if b.slot == "borrowed"]
        drain_s = max([*loans, self.rates.service_s(size)])
        if drain_s > budget:
            return LoanCheck(REASON_DRAIN, drain_s, budget)
        return LoanCheck(None)

    def admit(self, traffic_class: str, occupancy: Occupancy) -> Slot | None:
        slot = super().admit(traffic_class, occupancy)
        if slot == "borrowed" and self.loan_check(occupancy).reason is not None:
            return None
        return slot

    def refusal(self, traffic_class: str, occupancy: Occupancy) -> LoanCheck | None:
        """Why a request that ``lend`` would have lent to was refused (None: no loan was refused)."""
        if super().admit(traffic_class, occupancy) != "borrowed":
            return None
        check = self.loan_check(occupancy)
        return check if check.reason is not None else None

    def next_decision_s(self, now_s: float) -> float | None:
        """When a loan refused for the hold-off may be granted: the hold-off's end (None: not waiting on it)."""
        idle_since = self._protected_idle_since_s
        if not self._returned or self._undrained or idle_since is None:
            return None
        end_s = idle_since + self.hold_off.hold_off_s
        return end_s if end_s > now_s else None

    def resumed(self, now_s: float) -> LoanCheck | None:
        """Called when a loan is granted: the resume decision to record, once per return."""
        if not self._returned:
            return None
        self._returned = False
        idle_since = self._protected_idle_since_s
        return LoanCheck(REASON_RESUMED, None if idle_since is None else now_s - idle_since, self.hold_off.hold_off_s)

    def preemptions(self, now_s: float) -> list[Preemption]:
        """Loans to take back now that the floor is restored (none unless ``preempts``)."""
        if not self.preempts:
            return []
        taken: list[Preemption] = []
        own_batch = [self.remaining_s(b, now_s) for b in self._book.values()
                     if b.slot == "own" and b.traffic_class == self.borrower_class]
        # The hint: when batch's own slot is predicted to free (its retry waits in the queue for it
        # anyway); work of unknown length on it gives no figure, so the longest hint is given.
        retry_after_s = min(min(own_batch, default=0.0), MAX_RETRY_AFTER_S)
        for grant_id, book in sorted(self._book.items()):
            if book.slot != "borrowed" or book.granted_s > now_s:
                continue  # lent after the restoration it would be taken back for: not this one's loan
            remaining_s = self.remaining_s(book, now_s)
            if remaining_s <= self.restore_budget_s:
                continue
            # What the engine computed for it is lost: its prompt (all of it once the first byte
            # came; before, the part the predicted prefill rate covers), then the tokens streamed.
            if book.first_byte_s is not None:
                lost = book.size.prompt_tokens + book.tokens_seen
            else:
                rate = max(self.rates.prefill_s_per_token, 1e-9)
                lost = min(book.size.prompt_tokens, max(0, int((now_s - book.granted_s) / rate)))
            taken.append(Preemption(grant_id, remaining_s, lost, max(1, math.ceil(retry_after_s * 1000))))
        return taken

    def describe(self) -> dict[str, Any]:
        described = super().describe()
        described.update(policy=self.name, restore_budget_s=self.restore_budget_s, kv_blocks=self.kv_blocks,
                         block_size=self.block_size, hold_off_s=self.hold_off.hold_off_s,
                         prefill_s_per_token=self.rates.prefill_s_per_token,
                         decode_s_per_token=self.rates.decode_s_per_token)
        return described


class PreemptLendPolicy(BudgetLendPolicy):
    """``lend-preempt``: ``lend-budget``'s accounting and resume rule; loans past the budget are
    aborted when the floor is restored instead of being refused when they start."""

    name = "lend-preempt"
    preempts = True
