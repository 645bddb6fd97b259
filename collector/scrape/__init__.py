"""Engine pressure beside the spans: an engine's Prometheus ``/metrics`` scraped into ``engine_metrics``.

The core is sans-I/O: ``exposition`` reads the Prometheus text exposition format 0.0.4 into
samples (a scrape reads only the kept metrics' lines, and at most so many), ``engine_metrics``
keeps vLLM's pressure metrics and makes the rows of one scrape. Around it, ``fetch`` GETs one URL
within a deadline and a size bound, and ``scraper`` runs one thread per target that hands the rows
to the receiver's
:class:`~restorelens.collector.writer.StoreWriter`, the one connection that writes the store
(DuckDB allows one writing process, and the receiver already is it).

Names are imported lazily (PEP 562): the parser alone does not pay for httpx and pyarrow.
"""

from __future__ import annotations

from restorelens.lazy import lazy_exports

_EXPORTS: dict[str, str] = {
    "DEFAULT_INTERVAL_S": "scraper",
    "DEFAULT_MAX_SCRAPE_BYTES": "scraper",
    "DEFAULT_MAX_SERIES_PER_SCRAPE": "scraper",
    "DEFAULT_SCRAPE_TIMEOUT_S": "scraper",
    "ENGINE_METRICS_SCHEMA": "engine_metrics",
    "KEPT_METRICS": "engine_metrics",
    "KeptRead": "exposition",
    "KeptReader": "exposition",
    "MAX_LABELS": "exposition",
    "ExpositionError": "exposition",
    "MetricsSink": "scraper",
    "Sample": "exposition",
    "ScrapeCounts": "scraper",
    "ScrapeFailed": "fetch",
    "Scraped": "fetch",
    "Scraper": "scraper",
    "kept_samples": "engine_metrics",
    "metrics_table": "engine_metrics",
    "parse_exposition": "exposition",
    "read_kept": "exposition",
    "scrape_once": "fetch",
    "target_problem": "fetch",
}

__all__, __getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
