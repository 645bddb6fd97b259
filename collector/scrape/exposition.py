"""The Prometheus text exposition format 0.0.4, read into samples (sans-I/O).

``parse_exposition`` reads every line and checks it, so a broken exposition fails whole
(``ExpositionError`` naming the line). ``read_kept`` is what a scrape reads: only the lines of the
metrics it keeps, found by a search of the text, so the lines of every other metric cost no
Python work, and at most ``max_series`` of them, so one answer's work is bounded whatever it holds.
The lines prometheus_client writes take one regular expression; any other form the format allows
(blanks, escapes, quoted names, exemplars) the full parser.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Iterator
from dataclasses import dataclass

__all__ = ["MAX_LABELS", "ExpositionError", "KeptRead", "KeptReader", "Sample", "parse_exposition", "read_kept"]

class ExpositionError(ValueError):
    """The body is not the text exposition format; names the line."""

    def __init__(self, line_no: int, problem: str) -> None:
        self.line_no = line_no
        self.problem = problem
        super().__init__(f"line {line_no}: {problem}")


@dataclass(frozen=True, slots=True)
class Sample:
    """One sample line: ``labels`` in the order written, ``timestamp_ms`` when the line has one."""

    name: str
    labels: tuple[tuple[str, str], ...]
    value: float
    timestamp_ms: int | None = None


#: Labels one sample may have: far above any exporter's (vLLM's 2-6, kube-state-metrics' tens), and a
#: bound on the work one line of an answer makes.
MAX_LABELS = 256

_METRIC_NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
_LABEL_NAME = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")
# A quoted string of the format: backslash escapes any character (only \\, \" and \n mean
# something; Prometheus keeps any other escape as written, and so does _unescape)
_QUOTED = re.compile(r'"((?:[^"\\]|\\.)*)"')
_BLANKS = re.compile(r"[ \t]*")
# After the name and labels: the value, an optional integer timestamp (ms), and an optional
# OpenMetrics exemplar ("# {...} value [ts]"), which is ignored. Blanks must part a bare name from
# its value; after a label block they are optional, as in Prometheus' own parser
_REST = r"(\S+)(?:[ \t]+([^\s#]\S*))?[ \t]*(?:#.*)?"
_VALUE_AFTER_NAME = re.compile(r"[ \t]+" + _REST)
_VALUE_AFTER_LABELS = re.compile(r"[ \t]*" + _REST)
_TIMESTAMP = re.compile(r"-?[0-9]+")
_ESCAPES = {"\\": "\\", '"': '"', "n": "\n"}
_ESCAPE = re.compile(r"\\(.)")


def _shown(text: str) -> str:
    """``text`` quoted for a message, cut: a failed scrape's reason is logged."""
    quoted = repr(text)
    return quoted if len(quoted) <= 80 else quoted[:79] + "\u2026"


def _unescape(text: str) -> str:
    if "\\" not in text:
        return text
    return _ESCAPE.sub(lambda m: _ESCAPES.get(m.group(1), m.group(0)), text)


def _parse_value(token: str) -> float:
    # float() also takes "1_000" and surrounding blanks, which the format (Go's ParseFloat) does not
    if "_" in token:
        raise ValueError(token)
    return float(token)  # "NaN", "+Inf", "-Inf", exponents


def _parse_labels(line: str, pos: int, line_no: int) -> tuple[str | None, list[tuple[str, str]], int]:
    """The label block opening at ``line[pos] == "{"``: (quoted metric name or None, labels, end)."""
    name: str | None = None
    labels: list[tuple[str, str]] = []
    seen: set[str] = set()  # a list scan per label made a line of 20k labels take seconds
    pos += 1
    while True:
        pos = _BLANKS.match(line, pos).end()  # type: ignore[union-attr]
        if line.startswith("}", pos):
            return name, labels, pos + 1
        bare = _LABEL_NAME.match(line, pos)
        quoted = None if bare else _QUOTED.match(line, pos)
        if bare is None and quoted is None:
            raise ExpositionError(line_no, f"expected a label name at column {pos + 1}")
        key = bare.group(0) if bare else _unescape(quoted.group(1))  # type: ignore[union-attr]
        pos = (bare or quoted).end()  # type: ignore[union-attr]
        pos = _BLANKS.match(line, pos).end()  # type: ignore[union-attr]
        if quoted is not None and name is None and not labels and not line.startswith("=", pos):
            name = key  # Prometheus 3's quoted form: {"metric.name", label="v"}
        else:
            if not line.startswith("=", pos):
                raise ExpositionError(line_no, f"expected '=' after label {key!r}")
            pos = _BLANKS.match(line, pos + 1).end()  # type: ignore[union-attr]
            value = _QUOTED.match(line, pos)
            if value is None:
                raise ExpositionError(line_no, f"label {key!r}: expected a quoted value")
            if key in seen:
                raise ExpositionError(line_no, f"label {_shown(key)} given twice")
            if len(labels) == MAX_LABELS:
                raise ExpositionError(line_no, f"more than {MAX_LABELS} labels")
            seen.add(key)
            labels.append((key, _unescape(value.group(1))))
            pos = _BLANKS.match(line, value.end()).end()  # type: ignore[union-attr]
        if line.startswith(",", pos):
            pos += 1
        elif not line.startswith("}", pos):
            raise ExpositionError(line_no, f"expected ',' or '}}' at column {pos + 1}")


def _parse_line(line: str, line_no: int) -> Sample:
    """One sample line, any form the format allows (blanks, escapes, quoted names, exemplars)."""
    start = _BLANKS.match(line).end()  # type: ignore[union-attr]
    found = _METRIC_NAME.match(line, start)
    name: str | None = found.group(0) if found else None
    pos = found.end() if found else start
    labels: list[tuple[str, str]] = []
    after_blanks = _BLANKS.match(line, pos).end()  # type: ignore[union-attr]
    labels_given = line.startswith("{", after_blanks)  # blanks may part a name from its labels, as in Go's parser
    if labels_given:
        quoted_name, labels, pos = _parse_labels(line, after_blanks, line_no)
        if quoted_name is not None:
            if name is not None:
                raise ExpositionError(line_no, "metric name given twice")
            name = quoted_name
    if not name:
        raise ExpositionError(line_no, "expected a metric name")
    rest = (_VALUE_AFTER_LABELS if labels_given else _VALUE_AFTER_NAME).fullmatch(line, pos)
    if rest is None:
        raise ExpositionError(line_no, f"{name}: expected blanks, a value and an optional timestamp")
    try:
        value = _parse_value(rest.group(1))
    except ValueError:
        raise ExpositionError(line_no, f"{name}: invalid value {rest.group(1)!r}") from None
    stamp = rest.group(2)
    if stamp is not None and not _TIMESTAMP.fullmatch(stamp):
        raise ExpositionError(line_no, f"{name}: invalid timestamp {stamp!r} (integer milliseconds)")
    return Sample(name, tuple(labels), value, int(stamp) if stamp is not None else None)


# The lines prometheus_client writes (bare names, no escapes, one blank, no exemplar) in one match;
# anything else takes _parse_line. Five times faster on vLLM's /metrics, mostly histogram buckets
_FAST_LABEL = r'[a-zA-Z_][a-zA-Z0-9_]*="[^"\\]*"'
_FAST_LINE = re.compile(
    rf"([a-zA-Z_:][a-zA-Z0-9_:]*)(\{{(?:{_FAST_LABEL}(?:,{_FAST_LABEL})*,?)?\}})? ([^\s_#]+)(?: (-?[0-9]+))?"
)
_FAST_LABELS = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="([^"\\]*)"')


def _sample(line: str, line_no: int) -> Sample:
    """One sample line (no comment, not blank), checked."""
    fast = _FAST_LINE.fullmatch(line)
    if fast is None:
        return _parse_line(line, line_no)
    name = fast.group(1)
    try:
        value = float(fast.group(3))
    except ValueError:
        raise ExpositionError(line_no, f"{name}: invalid value {fast.group(3)!r}") from None
    labels = tuple(_FAST_LABELS.findall(fast.group(2) or ""))
    if len(labels) > MAX_LABELS:
        raise ExpositionError(line_no, f"more than {MAX_LABELS} labels")
    if len(labels) > 1 and len({key for key, _ in labels}) != len(labels):
        keys: set[str] = set()
        twice = next(key for key, _ in labels if key in keys or keys.add(key))
        raise ExpositionError(line_no, f"label {_shown(twice)} given twice")
    stamp = fast.group(4)
    return Sample(name, labels, value, int(stamp) if stamp is not None else None)


def parse_exposition(text: str) -> list[Sample]:
    """The samples of a Prometheus text exposition (format 0.0.4), in order.

    Every line is checked, so a broken exposition fails whole (ExpositionError naming the line),
    as Prometheus fails such a scrape. Comments (``# HELP``, ``# TYPE``, any other) and blank lines
    are skipped; label values unescape ``\\\\``, ``\\"`` and ``\\n``; values may be ``NaN``,
    ``+Inf``, ``-Inf``; a timestamp (integer milliseconds) is optional; an OpenMetrics exemplar
    after the value is ignored.
    """
    samples: list[Sample] = []
    for line_no, raw in enumerate(text.split("\n"), 1):
        line = raw[:-1] if raw.endswith("\r") else raw
        stripped = line.lstrip(" \t")
        if stripped and stripped[0] != "#":
            samples.append(_sample(line, line_no))
    return samples


@dataclass(frozen=True, slots=True)
class KeptRead:
    """What ``read_kept`` read: the kept samples in order, and whether the answer held more lines
    to read than ``max_series`` (the rest neither read nor checked)."""

    samples: list[Sample]
    capped: bool


#: How far into an answer its first sample line is looked for: an answer that is not the format
#: at all (an HTML page, an error text) fails there; a real one has it within its first comments.
SNIFF_CHARS = 64 * 1024
_COMMENTS_AND_BLANKS = re.compile(r"(?:[ \t]*(?:#[^\n]*)?\r?\n)*")


def _line_at(text: str, start: int) -> str:
    end = text.find("\n", start)
    line = text[start:] if end < 0 else text[start:end]
    return line[:-1] if line.endswith("\r") else line


def _sample_at(text: str, start: int) -> Sample:
    try:
        return _sample(_line_at(text, start), 0)
    except ExpositionError as exc:  # the line's number, counted only for a line that fails
        raise ExpositionError(text.count("\n", 0, start) + 1, exc.problem) from None


#: How much of an answer is searched at a time: a scrape cut at its cap has searched only the
#: stretch its cap's lines were in, not the whole answer.
WINDOW_CHARS = 64 * 1024


def _lines_starting(text: str, prefixes: Collection[str], lo: int, hi: int) -> list[int]:
    """Where the lines of ``text`` that begin with one of ``prefixes`` start, for starts in
    ``[lo, hi)``, in order, found by ``str.find``: the text in between is skipped at C speed."""
    starts = {0} if lo == 0 and text.startswith(tuple(prefixes)) else set()
    for prefix in prefixes:
        needle = "\n" + prefix
        end = hi - 2 + len(needle)  # a needle at p starts the line at p + 1, so p < hi - 1
        at = text.find(needle, max(lo - 1, 0), end)
        while at >= 0:
            starts.add(at + 1)
            at = text.find(needle, at + len(needle), end)
    return sorted(starts)


class KeptReader:
    """``read_kept`` fed an answer a piece at a time, as it arrives (sans-I/O).

    ``feed`` each piece of text, then ``finish``. Complete lines are read as soon as they are in;
    once ``capped`` is set the reader has what it will keep, and the caller may stop receiving:
    the rest of the answer is neither read nor checked, so a flood of kept series costs the first
    ``max_series`` lines, not the answer's size. The first sample line must be complete before any
    line is read (the sniff of ``read_kept``), so up to ``SNIFF_CHARS`` are held first.
    """

    def __init__(self, keep: Collection[str], max_series: int) -> None:
        self._keep = keep
        self._prefixes = list(keep)
        self._quoted = [f'{{"{name}"' for name in keep]
        self._max_series = max_series
        self._read = 0
        self._pending: list[str] = []  # text after the last whole line
        self._pending_chars = 0
        self._lines_before = 0  # lines already read past: an error names its line in the answer
        self._sniffed = False
        self.samples: list[Sample] = []
        self.capped = False

    def feed(self, text: str) -> None:
        if self.capped or not text:
            return
        self._pending.append(text)
        self._pending_chars += len(text)
        # nothing new to read until a line ends; the sniff waits for its window (joining on every
        # small piece before it would copy the window once per piece)
        if "\n" not in text or (not self._sniffed and self._pending_chars < SNIFF_CHARS):
            return
        held = "".join(self._pending)
        if not self._sniffed and not self._sniff(held, final=False):
            self._pending = [held]
            return
        cut = held.rfind("\n") + 1
        self._pending = [held[cut:]]
        self._pending_chars = len(held) - cut
        self._read_lines(held[:cut])

    def finish(self) -> KeptRead:
        """What was read; the text not yet read (a last line without a line end) is read first."""
        if not self.capped:
            held = "".join(self._pending)
            self._pending, self._pending_chars = [], 0
            if not self._sniffed:
                self._sniff(held, final=True)
            self._read_lines(held)
        return KeptRead(self.samples, self.capped)

    def _sniff(self, text: str, *, final: bool) -> bool:
        """Whether the answer's first sample line (within ``SNIFF_CHARS``) could be checked yet;
        raises ExpositionError when it is no sample line."""
        first = _COMMENTS_AND_BLANKS.match(text, 0, SNIFF_CHARS).end()  # type: ignore[union-attr]
        if first < SNIFF_CHARS:
            if not final and text.find("\n", first) < 0:
                return False  # that line is not all in yet
            if _line_at(text, first).lstrip(" \t")[:1] not in ("", "#"):
                _sample_at(text, first)  # a comment cut by the window's end is no sample line
        self._sniffed = True
        return True

    def _read_lines(self, text: str) -> None:
        """Read the kept lines of ``text``, which begins a line and ends one (or the answer)."""
        if text[:2] == '{"' or '\n{"' in text:  # quoted names: looked for from the first piece that has some
            self._prefixes += self._quoted
            self._quoted = []
        for lo in range(0, len(text), WINDOW_CHARS):
            for start in _lines_starting(text, self._prefixes, lo, lo + WINDOW_CHARS):
                if self._read == self._max_series:
                    self.capped = True
                    self._pending, self._pending_chars = [], 0
                    return
                self._read += 1
                try:
                    sample = _sample(_line_at(text, start), 0)
                except ExpositionError as exc:  # the line's number, counted only for a line that fails
                    raise ExpositionError(self._lines_before + text.count("\n", 0, start) + 1, exc.problem) from None
                if sample.name in self._keep:
                    self.samples.append(sample)
        self._lines_before += text.count("\n")


def read_kept(text: str, keep: Collection[str], max_series: int) -> KeptRead:
    """The samples of the metrics in ``keep`` of a Prometheus text exposition, in order, reading
    at most ``max_series`` lines.

    The lines read are those that begin with a kept name, bare or quoted (``name{``, ``name ``,
    ``{"name"``), as every exporter writes them; each is checked as ``parse_exposition`` checks it,
    and counts towards ``max_series`` even when its name only begins with a kept one
    (``vllm:num_requests_waiting_by_reason``). Other lines are not read, so their number costs
    nothing but a search of the text, and a broken one does not fail the answer; an answer whose
    first sample line (within ``SNIFF_CHARS``) is not one fails, so a page that is not the format
    fails whole. A kept sample on a line indented with blanks (allowed, written by no exporter) is
    not read. :class:`KeptReader` reads the same, a piece at a time.
    """
    reader = KeptReader(keep, max_series)
    reader.feed(text)
    return reader.finish()
