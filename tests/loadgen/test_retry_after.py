from __future__ import annotations

import calendar

import pytest

from restorelens.loadgen.retry_after import (
    DELAY_SECONDS_SATURATION,
    RetryAfter,
    parse_http_date,
    parse_retry_after,
)

NOW_S = float(calendar.timegm((2026, 1, 1, 0, 0, 0, 0, 0, 0)))


def test_delay_seconds() -> None:
    assert parse_retry_after("10", NOW_S) == RetryAfter(10.0, "10")
    assert parse_retry_after(" 0 ", NOW_S) == RetryAfter(0.0, "0")


def test_absent_header_is_no_hint() -> None:
    assert parse_retry_after(None, NOW_S).present is False
    assert parse_retry_after([], NOW_S).seconds is None


@pytest.mark.parametrize(
    "text",
    [
        "Thu, 01 Jan 2026 00:00:30 GMT",  # IMF-fixdate
        "Thursday, 01-Jan-26 00:00:30 GMT",  # obsolete rfc850-date, two-digit year
        "Thu Jan  1 00:00:30 2026",  # obsolete asctime-date
    ],
)
def test_http_date_forms_relative_to_client_clock(text: str) -> None:
    assert parse_retry_after(text, NOW_S) == RetryAfter(30.0, text)


def test_http_date_is_relative_to_response_date_header() -> None:
    # The client's clock is 100 s fast; the server's Date says the hint is 12 s away.
    hint = parse_retry_after("Thu, 01 Jan 2026 00:00:12 GMT", NOW_S + 100, date_header="Thu, 01 Jan 2026 00:00:00 GMT")
    assert hint.seconds == 12.0 and hint.invalid is None


def test_invalid_date_header_falls_back_to_client_clock() -> None:
    hint = parse_retry_after("Thu, 01 Jan 2026 00:00:12 GMT", NOW_S, date_header="yesterday")
    assert hint.seconds == 12.0


def test_date_in_the_past_means_now() -> None:
    assert parse_retry_after("Wed, 31 Dec 2025 23:00:00 GMT", NOW_S).seconds == 0.0


@pytest.mark.parametrize(
    ("text", "reason"),
    [("-5", "negative"), ("soon", "unparseable"), ("1.5", "unparseable"), ("", "unparseable"),
     ("Thu, 32 Jan 2026 00:00:00 GMT", "unparseable"), ("Thu, 01 Jan 2026 00:00:00 UTC", "unparseable")],
)
def test_invalid_values_are_ignored_and_reported(text: str, reason: str) -> None:
    hint = parse_retry_after(text, NOW_S)
    assert hint.seconds is None and hint.raw == text and hint.invalid == reason


def test_absurdly_large_saturates_and_is_flagged() -> None:
    hint = parse_retry_after("9" * 400, NOW_S)
    assert hint.seconds == float(DELAY_SECONDS_SATURATION) and hint.invalid == "too-large"
    assert parse_retry_after("100000", NOW_S).invalid == "too-large"


def test_differing_field_lines_are_invalid_but_identical_ones_are_fine() -> None:
    assert parse_retry_after(["10", "20"], NOW_S).invalid == "several-values"
    assert parse_retry_after(["10", "10"], NOW_S).seconds == 10.0


def test_rfc850_year_more_than_50_years_ahead_is_in_the_past() -> None:
    # RFC 9110 5.6.7: "99" read in 2026 is 1999, not 2099.
    assert parse_http_date("Friday, 31-Dec-99 23:59:59 GMT", NOW_S) == float(calendar.timegm((1999, 12, 31, 23, 59, 59, 0, 0, 0)))
