"""The engine's lifecycle: cold start, sleep levels 0-2, wake-up by tags. A pure state machine.

States::

    loading --(cold_start_s)--> ready --sleep(mode=wait)--> draining --(no work left)--+
                                  |                                                   v
                                  +--sleep(mode=abort)--> falling_asleep --(offload)--> asleep
    asleep --wake_up(tags)--> waking --(wake time)--> ready   (or asleep, if tags remain)

Level 0 only pauses scheduling; level 1 copies the weights to host RAM and discards the KV cache;
level 2 discards both. ``is_sleeping`` stays true until every tag is restored, as vLLM's does.
Transitions that take time complete when the core is advanced past ``transition_at_s``.
"""

from __future__ import annotations

from restorelens.sim.config import EngineConfig
from restorelens.sim.records import EngineNotReadyError

__all__ = ["SLEEP_LEVELS", "WAKE_TAGS", "Lifecycle"]

SLEEP_LEVELS = (0, 1, 2)
WAKE_TAGS = ("weights", "kv_cache")

LOADING, READY, DRAINING, FALLING_ASLEEP, ASLEEP, WAKING = (
    "loading",
    "ready",
    "draining",
    "falling_asleep",
    "asleep",
    "waking",
)
RESIDENT, OFFLOADED, DISCARDED = "resident", "offloaded", "discarded"


class Lifecycle:
    def __init__(self, config: EngineConfig) -> None:
        self.config = config
        self.state = READY
        self.sleep_level: int | None = None
        self.weights = RESIDENT
        self.kv_cache = RESIDENT
        self.transition_at_s: float | None = None
        self._restoring: tuple[str, ...] = ()

    # --- queries ------------------------------------------------------------------------------

    @property
    def accepts_requests(self) -> bool:
        return self.state == READY

    @property
    def holds_requests(self) -> bool:
        """A request arriving now can wait for the wake: the process is up and serving HTTP (vLLM
        queues it), unlike during a cold start, when nothing listens yet."""
        return self.state in (DRAINING, FALLING_ASLEEP, ASLEEP, WAKING)

    @property
    def schedules(self) -> bool:
        return self.state in (READY, DRAINING)

    @property
    def is_sleeping(self) -> bool:
        return self.state in (FALLING_ASLEEP, ASLEEP, WAKING)

    @property
    def host_ram_bytes(self) -> int:
        return self.config.weight_bytes if self.weights == OFFLOADED else 0

    @property
    def device_weight_bytes(self) -> int:
        return self.config.weight_bytes if self.weights == RESIDENT else 0

    def ready_at_s(self) -> float | None:
        """When the transition in progress ends in READY; None if none will."""
        if self.state == LOADING:
            return self.transition_at_s
        if self.state == WAKING and all(tag in self._restoring or not self._needs(tag) for tag in WAKE_TAGS):
            return self.transition_at_s
        return None

    def refusal(self) -> EngineNotReadyError:
        """Why a request cannot be accepted now."""
        messages = {
            LOADING: "the engine is still loading (cold start); check GET /health",
            DRAINING: "the engine is draining in-flight requests before it sleeps",
            FALLING_ASLEEP: f"the engine is going to sleep (level {self.sleep_level})",
            ASLEEP: f"the engine is sleeping (level {self.sleep_level}); call POST /wake_up first",
            WAKING: "the engine is waking up; retry when GET /is_sleeping is false",
        }
        return EngineNotReadyError(self.state, messages.get(self.state, f"the engine is {self.state}"))

    # --- transitions --------------------------------------------------------------------------

    def cold_start(self, now_s: float) -> float:
        self.state, self.sleep_level = LOADING, None
        self.weights, self.kv_cache = RESIDENT, RESIDENT
        self.transition_at_s = now_s + self.config.cold_start_s
        return self.transition_at_s

    def request_sleep(self, level: int, now_s: float, *, has_work: bool) -> float | None:
        """Start sleeping at ``level``; None while in-flight work must drain first (mode "wait")."""
        if level not in SLEEP_LEVELS:
            raise ValueError(f"sleep level must be one of {SLEEP_LEVELS}, got {level!r}")
        if self.state in (LOADING, WAKING, FALLING_ASLEEP):
            raise self.refusal()
        if self.state == ASLEEP:
            if level > (self.sleep_level or 0):
                self._apply_level(level)
            return now_s
        self.sleep_level = level
        if has_work:
            self.state = DRAINING
            self.transition_at_s = None
            return None
        return self._fall_asleep(now_s)

    def drained(self, now_s: float) -> None:
        """The scheduler has no work left; a pending mode-"wait" sleep proceeds."""
        if self.state == DRAINING:
            self._fall_asleep(now_s)

    def _fall_asleep(self, now_s: float) -> float:
        offload_s = self.config.level1_offload_s() if self.sleep_level == 1 else 0.0
        self._apply_level(self.sleep_level or 0)
        self.state = FALLING_ASLEEP
        self.transition_at_s = now_s + offload_s
        return self.transition_at_s

    def _apply_level(self, level: int) -> None:
        self.sleep_level = level
        if level >= 1:
            self.kv_cache = DISCARDED
            self.weights = OFFLOADED if level == 1 else DISCARDED

    def wake_up(self, now_s: float, tags: tuple[str, ...] | None = None) -> float:
        """Begin restoring ``tags`` (all when None); returns when the wake-up completes."""
        wanted = WAKE_TAGS if not tags else tags
        for tag in wanted:
            if tag not in WAKE_TAGS:
                raise ValueError(f"unknown wake_up tag {tag!r}; valid tags: {', '.join(WAKE_TAGS)}")
        if self.state == LOADING:
            assert self.transition_at_s is not None
            return self.transition_at_s
        if self.state in (READY, DRAINING):
            self.state, self.sleep_level = READY, None
            return now_s
        start_s = now_s
        if self.state in (FALLING_ASLEEP, WAKING) and self.transition_at_s is not None:
            start_s = max(now_s, self.transition_at_s)
        restoring = tuple(dict.fromkeys(self._restoring + tuple(t for t in wanted if self._needs(t))))
        duration_s = 0.0
        if "weights" in restoring and "weights" not in self._restoring:
            duration_s += self.config.wake_s(weights_discarded=self.weights == DISCARDED)
        if "kv_cache" in restoring and "kv_cache" not in self._restoring:
            duration_s += self.config.kv_cache_realloc_s
        self._restoring = restoring
        self.state = WAKING
        self.transition_at_s = start_s + duration_s
        return self.transition_at_s

    def _needs(self, tag: str) -> bool:
        return (self.weights if tag == "weights" else self.kv_cache) != RESIDENT

    def complete_transition(self) -> str | None:
        """Finish the timed transition that is due; returns the state reached when it is announced."""
        self.transition_at_s = None
        if self.state == LOADING:
            self.state = READY
            return READY
        if self.state == FALLING_ASLEEP:
            self.state = ASLEEP
            return ASLEEP
        if self.state == WAKING:
            for tag in self._restoring:
                if tag == "weights":
                    self.weights = RESIDENT
                else:
                    self.kv_cache = RESIDENT
            self._restoring = ()
            if self.weights == RESIDENT and self.kv_cache == RESIDENT:
                self.state, self.sleep_level = READY, None
                return READY
            self.state = ASLEEP
        return None
