"""The raw columns of one file, as a reader returns them and a framework's reader
completes them (a module of its own, so that ``readers`` and ``frameworks`` both depend
on it and not on each other).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

#: what a :class:`Note` is: "ignored" a key that holds no numeric data (text, nested
#: objects), which every file of some layouts has and ``info`` alone lists; "warning"
#: anything that changes what is analysed (a field dropped, rows left out), shown on
#: every load
NoteKind = Literal["ignored", "warning"]


@dataclass(frozen=True)
class Note:
    """A non-fatal observation about one file.

    Attributes:
        kind: "ignored" or "warning" (see :data:`NoteKind`).
        text: one sentence for the user, without the file's path.
        key: the file's key the note is about, when it is about one.
    """

    kind: NoteKind
    text: str
    key: str | None = None


@dataclass
class RawDump:
    """Columns of one file, keyed as in the file.

    Attributes:
        columns: key -> tensor, list of 1-D tensors (ragged) or list of labels.
        file_format: "pt", "safetensors", "npz", "parquet", "jsonl" or "pickle".
        ragged: keys whose values are per-sequence lists of different lengths.
        notes: non-fatal observations, in the order they were made (see :class:`Note`).
        meta: scalar values of the file's top level (a step, a rank, a format version),
            which frameworks' readers use to join and name files.
    """

    columns: dict[str, Any]
    file_format: str
    ragged: set[str] = field(default_factory=set)
    notes: list[Note] = field(default_factory=list)
    meta: dict[str, Any] = field(default_factory=dict)

    def ignore(self, key: str, text: str) -> None:
        """Note that ``key`` was passed over because it holds no numeric data."""
        self.notes.append(Note("ignored", text, key))

    def warn(self, text: str, key: str | None = None) -> None:
        """Note something that changes what is analysed (about ``key``, if given)."""
        self.notes.append(Note("warning", text, key))

    def texts(self, kind: NoteKind) -> list[str]:
        """The texts of the notes of ``kind``, in order."""
        return [note.text for note in self.notes if note.kind == kind]

    @property
    def passed_over(self) -> set[str]:
        """Keys of the file that are not in ``columns`` because a note set them aside."""
        return {note.key for note in self.notes if note.key is not None}
