"""Parse a ``Retry-After`` response header into seconds, per RFC 9110 section 10.2.3.

``Retry-After = HTTP-date / delay-seconds``. ``delay-seconds`` is ``1*DIGIT``; an ``HTTP-date`` is
the preferred IMF-fixdate or one of the two obsolete forms a recipient MUST still accept
(rfc850-date, asctime-date; RFC 9110 section 5.6.7). A date hint is measured against the response's
own ``Date`` header when it has a valid one, so a skewed client clock does not distort the hint, and
against the client's clock otherwise.

Nothing here raises on bad input: a value that is not valid is reported back (``invalid``) with the
raw text so the caller can record it on its span and fall back to its own backoff, which is what
RFC 9110 asks of a recipient of an invalid field value (ignore it).
"""

from __future__ import annotations

import calendar
import re
from collections.abc import Sequence
from dataclasses import dataclass

__all__ = ["DELAY_SECONDS_SATURATION", "SANE_RETRY_AFTER_S", "RetryAfter", "parse_http_date", "parse_retry_after"]

#: RFC 9111 section 1.2.2: a delta-seconds value too large to represent is taken as 2^31.
DELAY_SECONDS_SATURATION = 2**31
#: A hint beyond a day is flagged as implausible (still honoured, but clamped by the deadline).
SANE_RETRY_AFTER_S = 86_400.0

_MONTHS = {m: i for i, m in enumerate(("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec"), 1)}
_DAY = r"(?:mon|tue|wed|thu|fri|sat|sun)"
_LONG_DAY = r"(?:monday|tuesday|wednesday|thursday|friday|saturday|sunday)"
_TIME = r"(\d{2}):(\d{2}):(\d{2})"
_MONTH = r"(jan|feb|mar|apr|may|jun|jul|aug|sep|oct|nov|dec)"
_IMF_FIXDATE = re.compile(rf"{_DAY}, (\d{{2}}) {_MONTH} (\d{{4}}) {_TIME} gmt", re.IGNORECASE)
_RFC850 = re.compile(rf"{_LONG_DAY}, (\d{{2}})-{_MONTH}-(\d{{2}}) {_TIME} gmt", re.IGNORECASE)
_ASCTIME = re.compile(rf"{_DAY} {_MONTH} ([ \d]\d) {_TIME} (\d{{4}})", re.IGNORECASE)
_DIGITS = re.compile(r"\d+")


@dataclass(frozen=True, slots=True)
class RetryAfter:
    """The hint a response carried.

    ``seconds`` is the usable wait (None when there was no usable hint); ``raw`` the header text
    (None when absent); ``invalid`` says why ``raw`` could not be used as sent (``None`` when valid).
    A hint can be both usable and flagged: an implausibly large value is kept (clamped later) and
    marked ``"too-large"``.
    """

    seconds: float | None
    raw: str | None = None
    invalid: str | None = None

    @property
    def present(self) -> bool:
        return self.raw is not None


NO_HINT = RetryAfter(None)


def _epoch_s(year: int, month: int, day: int, hh: int, mm: int, ss: int) -> float | None:
    if not (1 <= day <= 31 and hh <= 23 and mm <= 59 and ss <= 60):
        return None
    try:
        return float(calendar.timegm((year, month, day, hh, mm, min(ss, 59), 0, 0, 0)))
    except (OverflowError, ValueError):
        return None


def parse_http_date(text: str, now_s: float | None = None) -> float | None:
    """An HTTP-date -> seconds since the epoch; None when it is not one of the three forms.

    ``now_s`` resolves rfc850's two-digit year: a date more than 50 years ahead means the most
    recent past year with those digits (RFC 9110 section 5.6.7).
    """
    text = text.strip()
    if m := _IMF_FIXDATE.fullmatch(text):
        day, mon, year, hh, mm, ss = m.groups()
        return _epoch_s(int(year), _MONTHS[mon.lower()], int(day), int(hh), int(mm), int(ss))
    if m := _ASCTIME.fullmatch(text):
        mon, day, hh, mm, ss, year = m.groups()
        return _epoch_s(int(year), _MONTHS[mon.lower()], int(day), int(hh), int(mm), int(ss))
    if m := _RFC850.fullmatch(text):
        day, mon, yy, hh, mm, ss = m.groups()
        reference_year = 1970 + int((now_s or 0.0) // 31_556_952)
        year = (reference_year // 100) * 100 + int(yy)
        if year > reference_year + 50:
            year -= 100
        elif year < reference_year - 50:
            year += 100
        return _epoch_s(year, _MONTHS[mon.lower()], int(day), int(hh), int(mm), int(ss))
    return None


def parse_retry_after(values: Sequence[str] | str | None, now_s: float, date_header: str | None = None) -> RetryAfter:
    """The ``Retry-After`` value(s) of one response -> a ``RetryAfter``.

    ``values`` are the header's field lines (httpx ``headers.get_list("retry-after")``); several
    differing lines make the singleton field invalid. ``now_s`` is when the response arrived, used
    for an HTTP-date when ``date_header`` (the response's ``Date``) is absent or invalid.
    """
    if values is None:
        return NO_HINT
    if isinstance(values, str):
        values = [values]
    lines = [v.strip() for v in values]
    if not lines:
        return NO_HINT
    raw = ", ".join(lines) if len(set(lines)) > 1 else lines[0]
    if len(set(lines)) > 1:
        return RetryAfter(None, raw, "several-values")
    text = lines[0]
    if _DIGITS.fullmatch(text):
        seconds = float(min(int(text), DELAY_SECONDS_SATURATION)) if len(text) < 40 else float(DELAY_SECONDS_SATURATION)
        return _checked(seconds, raw)
    if text.startswith("-") and _DIGITS.fullmatch(text[1:]):
        return RetryAfter(None, raw, "negative")
    when_s = parse_http_date(text, now_s)
    if when_s is None:
        return RetryAfter(None, raw, "unparseable")
    reference_s = parse_http_date(date_header, now_s) if date_header else None
    # A date in the past means "now": the wait cannot be negative.
    return _checked(max(0.0, when_s - (now_s if reference_s is None else reference_s)), raw)


def _checked(seconds: float, raw: str) -> RetryAfter:
    if seconds > SANE_RETRY_AFTER_S:
        return RetryAfter(seconds, raw, "too-large")
    return RetryAfter(seconds, raw)
