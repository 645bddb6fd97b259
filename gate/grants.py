"""What admission answers: a ``Grant`` (a slot, to release exactly once), a ``Waiter`` (queued) or a
``Rejection`` (429), and the counts the core keeps of them."""

from __future__ import annotations

from dataclasses import dataclass, field

from restorelens.spans import TRAFFIC_CLASSES

from .policies.interface import RequestSize, Slot

__all__ = ["REJECT_CONCURRENCY", "REJECT_DRAINING", "REJECT_QUEUE_LIMIT", "REJECT_TIMEOUT", "REJECT_WITHDRAWN",
           "Decision", "Grant", "GrantError", "Rejection", "Waiter"]

REJECT_QUEUE_LIMIT = "queue_limit"
REJECT_TIMEOUT = "timeout"
REJECT_CONCURRENCY = "concurrency_limit"
REJECT_WITHDRAWN = "withdrawn"
#: The gate shuts down: nobody waits for a grant any more (``Admission.drain``).
REJECT_DRAINING = "draining"

class GrantError(RuntimeError):
    """A grant was released twice, or a grant of another core was released here."""


@dataclass(eq=False, slots=True)
class Grant:
    grant_id: int
    request_id: str
    traffic_class: str
    slot: Slot
    requested_at_s: float
    granted_at_s: float
    released_at_s: float | None = None

    @property
    def wait_s(self) -> float:
        return self.granted_at_s - self.requested_at_s


@dataclass(eq=False, slots=True)
class Waiter:
    """A queued request. ``grant`` is set when a release (or policy change) admits it."""

    seq: int
    request_id: str
    traffic_class: str
    requested_at_s: float
    deadline_s: float
    grant: Grant | None = None
    rejection: Rejection | None = None
    size: RequestSize = field(default_factory=RequestSize)


@dataclass(frozen=True, slots=True)
class Rejection:
    request_id: str
    traffic_class: str
    reason: str
    requested_at_s: float
    rejected_at_s: float
    retry_after_ms: int | None = None

    @property
    def wait_s(self) -> float:
        return self.rejected_at_s - self.requested_at_s


Decision = Grant | Waiter | Rejection


@dataclass(slots=True)
class Counters:
    admitted: dict[str, int] = field(default_factory=lambda: dict.fromkeys(TRAFFIC_CLASSES, 0))
    rejected: dict[str, int] = field(default_factory=lambda: dict.fromkeys(TRAFFIC_CLASSES, 0))
    #: Queued requests whose client left before a grant or a 429: nobody was refused.
    withdrawn: dict[str, int] = field(default_factory=lambda: dict.fromkeys(TRAFFIC_CLASSES, 0))
    released: int = 0
