"""What a load did: per file what it was read as, and the counts and errors of the whole load
(``loader.load_paths`` returns a :class:`LoadSummary`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from restorelens.collector.phases import Phases
from restorelens.collector.rows import MAX_ERRORS

__all__ = ["MAX_MESSAGE_CHARS", "FileRead", "LoadSummary"]

#: Longest message kept (the file, the position, and a reason whose values are already cut).
MAX_MESSAGE_CHARS = 1000


@dataclass(frozen=True)
class FileRead:
    """What one file was read as: its format(s) (a JSON-lines file may mix them), the spans decoded
    from it (stored or already stored; rejected spans are not counted) and notes (e.g. Tempo's
    partial trace)."""

    path: Path
    formats: tuple[str, ...]
    spans: int
    notes: tuple[str, ...] = ()

    def describe(self) -> str:
        spans = f"{self.spans} span" + ("" if self.spans == 1 else "s")
        text = f"{self.path}: {' + '.join(self.formats) or 'no traces'}, {spans}"
        return f"{text} ({'; '.join(self.notes)})" if self.notes else text


@dataclass
class LoadSummary:
    files: int = 0
    loaded: int = 0
    duplicate: int = 0
    rejected: int = 0
    malformed: int = 0  # lines, messages or whole files that were not traces at all
    errors: list[str] = field(default_factory=list)
    #: One per file, in the order read.
    inputs: list[FileRead] = field(default_factory=list)
    #: Seconds per step of the load (``phases.py``).
    phases: Phases = field(default_factory=Phases)

    def add_error(self, message: str) -> None:
        if len(self.errors) < MAX_ERRORS:
            # each is one line on stderr: a decoder quoting a huge value must not make it a page
            if len(message) > MAX_MESSAGE_CHARS:
                message = message[: MAX_MESSAGE_CHARS - 1] + "\u2026"
            self.errors.append(message)

    def describe(self) -> str:
        return (
            f"{self.files} file(s): {self.loaded} spans loaded, {self.duplicate} duplicate, "
            f"{self.rejected} rejected, {self.malformed} malformed line(s)"
        )
