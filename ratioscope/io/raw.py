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


def check_bool_bytes(path: Any, columns: dict[str, Any]) -> None:
    """Refuse a bool tensor whose bytes are not all 0 or 1.

    A file stores a bool as one byte, and safetensors, npz and torch take the bytes as
    they are; torch and the compiled kernels count a byte of 2 or 255 as one, two or 255
    "true"s depending on the operation, so such a mask makes row lengths disagree with
    the rows and a kernel write past its buffers. Every reader's columns (whole files and
    row ranges alike) pass here before anything else uses them.

    Args:
        path: the file, named in the message.
        columns: key -> tensor, list of 1-D tensors (ragged rows) or labels.

    Raises:
        CorruptFileError: a bool tensor holds a byte other than 0 or 1.
    """
    import torch

    from ratioscope.errors import CorruptFileError

    for key, value in columns.items():
        rows = value if isinstance(value, list) else [value]
        for number, row in enumerate(rows):
            if not isinstance(row, torch.Tensor) or row.dtype != torch.bool or not row.numel():
                continue
            data = row.view(torch.uint8)  # same item size: a view of any layout
            if int(data.max()) <= 1:  # one pass, no temporary: the usual case
                continue
            index = tuple(int(i) for i in (data > 1).nonzero()[0])
            where = (number, *index) if isinstance(value, list) else index
            raise CorruptFileError(
                path,
                f"bool tensor '{key}' holds the byte {int(data[index])} at index "
                f"{list(where)}; a bool is stored as 0 or 1, so the file is corrupt",
            )
