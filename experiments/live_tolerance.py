"""How far a live run's times may be from virtual time's: the real costs virtual time does not have."""

from __future__ import annotations

__all__ = ["LIVE_SLACK_ROUND_TRIPS", "live_tolerance_s"]

#: A live time value may be off by this many loopback round trips (real seconds, before the time
#: scale): a request crosses four hops and three event loops, and on a busy machine each of them
#: waits for a core now and then, so the tail is many times the median round trip.
LIVE_SLACK_ROUND_TRIPS = 40.0


def live_tolerance_s(slack_real_s: float, time_scale: float, round_trip_s: float = 0.0) -> float:
    """``max(slack_real_s, LIVE_SLACK_ROUND_TRIPS * round_trip_s) * time_scale``: how far (protocol
    seconds) a live run's times may be from virtual time's, on a machine whose loopback round trip
    is ``round_trip_s`` real seconds now."""
    return max(slack_real_s, LIVE_SLACK_ROUND_TRIPS * round_trip_s) * time_scale
