"""The trace explorer's waterfall and span links (pure: a trace's spans in, a figure or frame out).

``spans`` is one trace as ``Analysis.trace`` gives it (``analysis/sql/trace_spans.sql``): in tree
order (``waterfall_row``), each with its ``depth``, offsets and duration in seconds, the raw
attribute map, its events and its span links.

One row per span: a request's attempts (several ``POST`` spans, each with its ``gate.request``)
stay apart. A span the server answered 503 (a sleeping model) or 429 is drawn in the palette's
status colour, the rest in their service's colour. However short, a bar is at least
``MIN_BAR_SHARE`` of the trace's extent wide, so a 0.05 s attempt stays visible on a 60 s axis;
the hover text gives its true duration. Text from the spans goes through ``literal`` (see
``figures.py``): a span named ``<b>x</b>`` shows as written.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Mapping
from http import HTTPStatus
from typing import Any

import plotly.graph_objects as go
import polars as pl

from restorelens.dashboard import palette
from restorelens.dashboard.figures import literal, literals
from restorelens.spans import ATTR_HTTP_STATUS_CODE, ATTR_HTTP_STATUS_CODE_OLD, SPAN_GATE_RESTORE, SPAN_MODELCLAIM_WAKE

__all__ = ["LINKING_SPANS", "MAX_WATERFALL_SPANS", "MIN_BAR_SHARE", "explorer_link", "http_status", "linked", "status_name", "waterfall",
           "with_status"]

#: The narrowest bar, as a share of the trace's extent (its first span's start to its last end).
MIN_BAR_SHARE = 0.005
#: The most spans a waterfall draws (the first, in tree order): its height and size stay bounded
#: whatever a trace holds; the page says how many it left out.
MAX_WATERFALL_SPANS = 300
#: The spans whose links name the request they serve: a restoration and a model's wake.
LINKING_SPANS = (SPAN_GATE_RESTORE, SPAN_MODELCLAIM_WAKE)
#: The narrowest bar when every span of the trace is instantaneous (the extent is zero).
_MIN_BAR_S = 1e-3
#: A trace id as OTLP has it: 16 bytes in lower-case hex.
_TRACE_ID = re.compile(r"[0-9a-f]{32}")
#: Indentation per tree level in a row's label (non-breaking: Plotly drops leading spaces).
_INDENT = "\u00a0" * 3
#: A row's label: the span name's longest, and the left margin that holds the labels (pixels).
_LABEL_CHARS, _LABEL_CHAR_PX, _LABEL_PAD_PX, _LABEL_MAX_PX = 48, 7, 24, 420


def http_status(attributes: Mapping[str, Any] | None) -> int | None:
    """The HTTP status a span records (``http.response.status_code``, else the pre-stable
    ``http.status_code``), or None when it has none that reads as a number."""
    if not attributes:
        return None
    for key in (ATTR_HTTP_STATUS_CODE, ATTR_HTTP_STATUS_CODE_OLD):
        value = attributes.get(key)
        if value is None or value == "":
            continue
        try:
            return int(float(value))
        except (TypeError, ValueError, OverflowError):  # OverflowError: "inf", "1e400"
            continue
    return None


def _attribute_map(value: Any) -> Mapping[str, Any] | None:
    """A span's attributes as a mapping, whether the frame holds them as a map or as key/value pairs."""
    if value is None or isinstance(value, Mapping):
        return value
    return {pair["key"]: pair["value"] for pair in value}


def with_status(spans: pl.DataFrame) -> pl.DataFrame:
    """``spans`` with ``http_status``: each span's HTTP status from its attributes (null if none)."""
    statuses = [http_status(_attribute_map(a)) for a in spans["attributes"].to_list()]
    return spans.with_columns(pl.Series("http_status", statuses, dtype=pl.Int64))


def status_name(status: int) -> str:
    """``503 Service Unavailable``: the status with its reason phrase (the number alone if unknown)."""
    try:
        return f"{status} {HTTPStatus(status).phrase}"
    except ValueError:
        return str(status)


def _extent(spans: pl.DataFrame) -> float:
    """Seconds from the trace's first span start to its last span end or event."""
    ends = [o + d for o, d in zip(spans["offset_s"].to_list(), spans["duration_s"].to_list(), strict=True)
            if o is not None and d is not None]
    events = [e for offsets in spans["event_offsets_s"].to_list() for e in offsets or [] if e is not None]
    starts = [o for o in spans["offset_s"].to_list() if o is not None]
    if not starts:
        return 0.0
    return max([*ends, *events, *starts]) - min(starts)


def waterfall(spans: pl.DataFrame) -> go.Figure:
    """One bar per span of a trace (``Analysis.trace``), one row each in tree order and indented by
    depth; 503 and 429 answers in their status colour (legend) with the status in the row's label;
    bars at least ``MIN_BAR_SHARE`` of the trace wide; events as ticks on their span's row."""
    figure = go.Figure()
    if spans.is_empty():
        return figure
    if "waterfall_row" in spans.columns:
        spans = spans.sort("waterfall_row")
    spans = with_status(spans)
    rows = list(range(spans.height))
    depths = spans["depth"].to_list() if "depth" in spans.columns else [0] * spans.height
    names, services = spans["name"].to_list(), spans["service_name"].to_list()
    statuses = spans["http_status"].to_list()
    durations = spans["duration_s"].to_list()
    extent = _extent(spans)
    narrowest = MIN_BAR_SHARE * extent if extent > 0 else _MIN_BAR_S

    labels = [_INDENT * (depth or 0) + literal(_shortened(name)) + (f" · {status}" if status is not None else "")
              for depth, name, status in zip(depths, names, statuses, strict=True)]
    colours = [palette.STATUS[status] if status in palette.STATUS else palette.colour(service, palette.SERVICES)
               for service, status in zip(services, statuses, strict=True)]
    shown = [f"HTTP {status_name(status)}" if status is not None else "no HTTP status" for status in statuses]
    figure.add_trace(go.Bar(
        base=spans["offset_s"].to_list(), x=[max(d or 0.0, narrowest) for d in durations], y=rows,
        orientation="h", marker={"color": colours}, name="spans", showlegend=False,
        customdata=list(zip(literals(names), literals(services), durations, shown, literals(spans["span_id"]),
                            strict=True)),
        hovertemplate="%{customdata[0]} · %{customdata[1]}<br>start +%{base:.3f} s<br>"
                      "duration %{customdata[2]:.3f} s<br>%{customdata[3]}<br>span %{customdata[4]}<extra></extra>",
    ))
    _add_events(figure, spans, rows)
    _add_legend(figure, services, statuses)
    # the rows' labels left-aligned in the left margin, so that a child's indent shows (Plotly's
    # tick labels are right-aligned against the axis)
    margin = min(_LABEL_PAD_PX + _LABEL_CHAR_PX * max(len(label) for label in labels), _LABEL_MAX_PX)
    notes = [{"x": 0, "xref": "paper", "xanchor": "left", "xshift": _LABEL_PAD_PX // 2 - margin, "y": row, "yref": "y",
              "text": label, "showarrow": False, "align": "left", "font": {"size": 12}}
             for row, label in zip(rows, labels, strict=True)]
    figure.update_yaxes(tickmode="array", tickvals=rows, showticklabels=False, autorange="reversed", showgrid=False,
                        zeroline=False)
    figure.update_layout(template=palette.TEMPLATE, barmode="overlay", height=160 + 26 * spans.height,
                         title="Trace waterfall (one row per span)", xaxis_title="seconds from the trace's first span",
                         legend={"orientation": "h", "yanchor": "bottom", "y": 1.0, "x": 0.0},
                         margin={"l": margin}, annotations=notes)
    return figure


def _shortened(name: object) -> str:
    """A span name for a row's label: at most ``_LABEL_CHARS`` characters (the hover has it whole)."""
    text = str(name)
    return text if len(text) <= _LABEL_CHARS else text[:_LABEL_CHARS - 1] + "…"


def _add_events(figure: go.Figure, spans: pl.DataFrame, rows: list[int]) -> None:
    """Each span event as a tick on its span's row."""
    event_x, event_y, event_text = [], [], []
    for row, names, offsets in zip(rows, spans["event_names"].to_list(), spans["event_offsets_s"].to_list(),
                                   strict=True):
        for name, offset in zip(names or [], offsets or [], strict=False):
            event_x.append(offset)
            event_y.append(row)
            event_text.append(name)
    if event_x:
        figure.add_trace(go.Scatter(x=event_x, y=event_y, mode="markers", text=literals(event_text), name="events",
                                    marker={"symbol": "line-ns-open", "size": 16, "color": "#000"},
                                    hovertemplate="%{text} at +%{x:.3f} s<extra></extra>"))


def _add_legend(figure: go.Figure, services: list[Any], statuses: list[int | None]) -> None:
    """Legend entries for what the bar colours mean: each service, then each highlighted status
    some span was answered with (entries only: they draw nothing)."""
    entries = [(literal(service), palette.colour(service, palette.SERVICES)) for service in dict.fromkeys(services)]
    entries += [(f"answered {status_name(status)}", palette.STATUS[status])
                for status in sorted(set(statuses) & set(palette.STATUS))]
    for name, colour in entries:
        figure.add_trace(go.Scatter(x=[None], y=[None], mode="markers", name=name, hoverinfo="skip",
                                    marker={"symbol": "square", "size": 12, "color": colour}))


def linked(spans: pl.DataFrame, names: Collection[str] | None = LINKING_SPANS) -> pl.DataFrame:
    """The span links of a trace's spans named in ``names`` (every span's with None): one row per
    link, with the linking span (``span_id``, ``name``) and the ``linked_trace_id`` and
    ``linked_span_id`` it points to, in the trace's order."""
    links = spans.select("span_id", "name", linked_trace_id="link_trace_ids", linked_span_id="link_span_ids")
    if names is not None:
        links = links.filter(pl.col("name").is_in(list(names)))
    return (links.filter(pl.col("linked_trace_id").list.len() > 0)
            .explode("linked_trace_id", "linked_span_id")
            .filter(pl.col("linked_trace_id").is_not_null()))


def explorer_link(trace_id: object) -> str | None:
    """The trace explorer's relative URL for ``trace_id`` (``traces?trace=<id>``), or None when the
    id is not a trace id (32 hex digits): only such an id becomes a link."""
    text = str(trace_id or "").lower()
    return f"traces?trace={text}" if _TRACE_ID.fullmatch(text) else None
