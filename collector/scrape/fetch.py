"""One scrape of one URL: whether a URL may be scraped at all, and the GET that reads its samples
within a deadline and a size bound."""

from __future__ import annotations

import asyncio
import codecs
import time
from collections.abc import Callable
from typing import NamedTuple
from urllib.parse import urlsplit

import httpx

from restorelens.collector.http_body import BodyTooLarge, CorruptBody, UnsupportedEncoding, body_decoder
from restorelens.collector.scrape.engine_metrics import KEPT_METRICS, kept_samples
from restorelens.collector.scrape.exposition import ExpositionError, KeptReader, Sample

__all__ = ["Scraped", "ScrapeFailed", "scrape_once", "target_problem"]

#: What a host name may hold (RFC 3986 reg-name without percent-encoding; letters may be non-ASCII).
_HOST_PUNCTUATION = frozenset("-._~")


def target_problem(url: str) -> str | None:
    """Why ``url`` cannot be scraped (for a one-line setting error), or None.

    The checks of ``restorelens.settings.http_url_problem`` for the gate's URLs, with a path and a
    query allowed (a /metrics URL has them). Credentials are refused: the URL is shown unauthenticated
    on the collector's GET /metrics, in its ready line and logs, and stored in ``engine_metrics``.
    """
    if url != url.strip() or any(c.isspace() or not c.isprintable() for c in url):
        return f"{url!r} holds spaces or control characters"
    try:
        parts = urlsplit(url)
        port = parts.port  # raises on a port that is no number or out of range
    except ValueError as exc:
        return f"{url!r} is not a URL ({exc})"
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return f"{url!r} is not an http:// or https:// URL with a host (e.g. http://127.0.0.1:8000/metrics)"
    if parts.username is not None or parts.password is not None:
        # not echoed: the point is that they show nowhere
        shown = parts._replace(netloc="***@" + parts.netloc.rpartition("@")[2]).geturl()
        return (f"{shown!r} holds credentials, which would show on the collector's unauthenticated GET /metrics, "
                "its ready line and logs, and in engine_metrics; scrape a URL without them")
    host = parts.hostname
    if "[" not in parts.netloc and not all(c.isalnum() or c in _HOST_PUNCTUATION for c in host):
        return f"{url!r}: {host!r} is not a host name"
    if port == 0:
        return f"{url!r}: port 0 cannot be connected to (give 1-65535, or none for the scheme's default)"
    if parts.fragment or url.endswith("#"):
        return f"{url!r} has a fragment, which is never sent"
    try:
        httpx.URL(url)
    except httpx.InvalidURL as exc:
        return f"{url!r} is not a URL httpx can request ({exc})"
    return None


class ScrapeFailed(Exception):
    """One scrape failed; the message says why in a few words."""


class Scraped(NamedTuple):
    """One scrape's answer: when it arrived, its kept samples, and whether it held more series to
    read than ``max_series`` (the rest not read)."""

    answered_ns: int
    samples: list[Sample]
    capped: bool


# text/plain 0.0.4 first: prometheus_client answers OpenMetrics only when asked for it. identity:
# compression buys nothing on the loopback and costs the engine CPU (whatever comes is decoded
# within max_scrape_bytes anyway)
_REQUEST_HEADERS = {"Accept": "text/plain;version=0.0.4;q=1.0, */*;q=0.1", "Accept-Encoding": "identity"}


class _AnswerReader:
    """An answer's bytes, as they arrive, read into kept samples: UTF-8, then ``KeptReader``.
    Raises ScrapeFailed naming the byte or line that is wrong."""

    def __init__(self, max_series: int) -> None:
        self._text = codecs.getincrementaldecoder("utf-8")()
        self._kept = KeptReader(KEPT_METRICS, max_series)
        self._fed_bytes = 0

    @property
    def capped(self) -> bool:
        return self._kept.capped

    def feed(self, data: bytes, *, final: bool = False) -> None:
        held = len(self._text.getstate()[0])  # a character cut by the previous piece's end
        try:
            text = self._text.decode(data, final)
        except UnicodeDecodeError as exc:
            raise ScrapeFailed(f"answer is not UTF-8 (byte {self._fed_bytes - held + exc.start})") from None
        self._fed_bytes += len(data)
        try:
            self._kept.feed(text)
            if final:
                self._kept.finish()
        except ExpositionError as exc:
            raise ScrapeFailed(f"not the Prometheus text format: {exc}") from None

    def samples(self) -> list[Sample]:
        return self._kept.samples


async def scrape_once(
    client: httpx.AsyncClient,
    url: str,
    *,
    timeout_s: float,
    max_scrape_bytes: int,
    max_series: int,
    clock_ns: Callable[[], int] = time.time_ns,
) -> Scraped:
    """GET ``url`` once: when its answer arrived (on ``clock_ns``), and its kept samples, of at most
    ``max_series`` series read (``read_kept``).

    The answer is read as it arrives, and the exchange ends once ``max_series`` series are read:
    the rest of a flood is not received. Raises ScrapeFailed for anything but a 200 with a body
    that parses up to there, of at most ``max_scrape_bytes`` (decompressed) received, within
    ``timeout_s``, counted over the whole exchange.
    """
    answered_ns: int | None = None
    reader = _AnswerReader(max_series)
    try:
        # httpx's timeouts bound each read, so a head trickling in a byte at a time would never
        # time out; cancelling the whole exchange at the deadline does not depend on the reads
        async with asyncio.timeout(timeout_s):
            async with client.stream("GET", url, headers=_REQUEST_HEADERS, timeout=timeout_s) as answer:
                # The engine reads its gauges, renders, then sends: the head's arrival is the closest
                # bound on when the values held, and a busy engine delays the render, not the answer
                answered_ns = clock_ns()
                if answer.status_code != 200:
                    raise ScrapeFailed(f"HTTP {answer.status_code}")
                declared = answer.headers.get("content-length", "")
                if declared.isdigit() and int(declared) > max_scrape_bytes:
                    raise ScrapeFailed(f"answer of {declared} bytes exceeds --max-scrape-bytes {max_scrape_bytes}")
                decoder = body_decoder(answer.headers.get("content-encoding", ""), max_scrape_bytes)
                async for chunk in answer.aiter_raw():
                    decoder.feed(chunk)
                    reader.feed(decoder.take())
                    if reader.capped:
                        break  # leaving the block closes the connection, the rest unread
                else:
                    reader.feed(decoder.finish(), final=True)
    except (TimeoutError, httpx.TimeoutException):
        what = "no answer" if answered_ns is None else "answer not complete"
        raise ScrapeFailed(f"{what} within {timeout_s:g} s") from None
    except (httpx.HTTPError, httpx.InvalidURL) as exc:  # InvalidURL is no HTTPError, and is this URL's failure
        raise ScrapeFailed(f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__) from None
    except BodyTooLarge:
        raise ScrapeFailed(f"answer exceeds --max-scrape-bytes {max_scrape_bytes}") from None
    except (UnsupportedEncoding, CorruptBody) as exc:
        raise ScrapeFailed(str(exc)) from None
    assert answered_ns is not None
    return Scraped(answered_ns, kept_samples(reader.samples()), reader.capped)
