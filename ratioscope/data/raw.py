"""The raw columns of one file, as a reader returns them and a framework's reader
completes them (a module of its own, so that ``readers`` and ``frameworks`` both depend
on it and not on each other).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from itertools import pairwise
from typing import TYPE_CHECKING, Any, Literal, TypeGuard, overload

if TYPE_CHECKING:
    import torch
    from torch import Tensor

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


@dataclass(frozen=True, eq=False)
class Ragged:
    """Per-sequence rows of different lengths, stored flat as Arrow's list layout is:
    every row's values one after another, and where each row starts.

    A reader of a Parquet or JSON-lines file returns its per-token columns so: one tensor
    per column rather than one per row, whose Python objects (several hundred bytes each)
    outweighed 200,000 two-token rows many times over. Rows can still be taken one at a
    time (``len``, an index, iteration) where a framework's reader needs them.

    Attributes:
        values: [N] the values of row 0, then of row 1, and so on.
        offsets: [B + 1] int64; row i is ``values[offsets[i]:offsets[i + 1]]``
            (``offsets[0] == 0``, ``offsets[-1] == N``, never decreasing).
    """

    values: Tensor
    offsets: Tensor

    @classmethod
    def from_lengths(cls, values: Tensor, lengths: Tensor | Sequence[int]) -> Ragged:
        """Rows of ``lengths`` [B] (summing to N) over ``values`` [N]."""
        import torch

        counts = torch.as_tensor(lengths, dtype=torch.long).reshape(-1)
        offsets = torch.zeros(counts.numel() + 1, dtype=torch.long)
        torch.cumsum(counts, dim=0, out=offsets[1:])
        if int(offsets[-1]) != values.numel():
            raise ValueError(f"rows of {int(offsets[-1])} values in all over {values.numel()}")
        return cls(values.reshape(-1), offsets)

    @classmethod
    def from_rows(cls, rows: Sequence[Tensor], dtype: torch.dtype | None = None) -> Ragged:
        """The rows (1-D tensors) as one flat column, in ``dtype`` (default: the dtype the
        rows pad to, :func:`padded_dtype`)."""
        import torch

        dtype = padded_dtype(rows) if dtype is None else dtype
        lengths = [int(row.numel()) for row in rows]
        values = (
            torch.cat([row.reshape(-1).to(dtype) for row in rows])
            if rows
            else torch.zeros(0, dtype=dtype)
        )
        return cls.from_lengths(values, lengths)

    @classmethod
    def joined(cls, parts: Sequence[Ragged]) -> Ragged:
        """The rows of ``parts`` one after another (consecutive ranges of one file)."""
        import torch

        if len(parts) == 1:
            return parts[0]
        lengths = torch.cat([part.lengths() for part in parts])
        return cls.from_lengths(torch.cat([part.values for part in parts]), lengths)

    @property
    def dtype(self) -> torch.dtype:
        """The dtype of the values."""
        return self.values.dtype

    def lengths(self) -> Tensor:
        """[B] int64: the length of each row."""
        return self.offsets[1:] - self.offsets[:-1]

    def longest(self) -> int:
        """The length of the longest row (0 when there is none)."""
        return int(self.lengths().max()) if len(self) else 0

    def to(self, dtype: torch.dtype) -> Ragged:
        """The same rows with values of ``dtype``."""
        return self if dtype == self.dtype else Ragged(self.values.to(dtype), self.offsets)

    def with_values(self, values: Tensor) -> Ragged:
        """Rows of the same lengths holding ``values`` [N] (e.g. a mask combined with
        another column of the same rows)."""
        if values.shape != self.values.shape:
            raise ValueError(f"{values.numel()} values for rows of {self.values.numel()}")
        return Ragged(values, self.offsets)

    def padded(
        self, width: int, dtype: torch.dtype | None = None, present: Tensor | None = None
    ) -> Tensor:
        """[B, width] the rows right-padded with zeros, in one vectorised step (the
        values fill, in order, the places where the column is below each row's length).

        Args:
            width: T, at least :meth:`longest`.
            dtype: of the result (default: the values').
            present: [B, T] bool, the places of the values, when already at hand
                (columns of the same rows share it).
        """
        import torch

        if present is None:
            present = torch.arange(width)[None, :] < self.lengths()[:, None]
        out = torch.zeros((len(self), width), dtype=dtype or self.dtype)
        out.masked_scatter_(present, self.values.to(out.dtype))
        return out

    def __len__(self) -> int:
        return int(self.offsets.numel()) - 1

    @overload
    def __getitem__(self, index: int) -> Tensor: ...
    @overload
    def __getitem__(self, index: slice) -> Ragged: ...
    def __getitem__(self, index: int | slice) -> Tensor | Ragged:
        """Row ``index`` as a 1-D view, or rows ``start:stop`` (step 1) as a Ragged."""
        rows = len(self)
        if isinstance(index, slice):
            start, stop, step = index.indices(rows)
            if step != 1:
                raise ValueError("rows of a Ragged column are sliced with step 1")
            stop = max(start, stop)
            offsets = self.offsets[start : stop + 1]
            first, last = int(offsets[0]), int(offsets[-1])
            return Ragged(self.values[first:last], offsets - first)
        if index < 0:
            index += rows
        if not 0 <= index < rows:
            raise IndexError(f"row {index} of {rows}")
        return self.values[int(self.offsets[index]) : int(self.offsets[index + 1])]

    def __iter__(self) -> Iterator[Tensor]:
        bounds = self.offsets.tolist()
        for start, stop in pairwise(bounds):
            yield self.values[start:stop]


def padded_dtype(rows: Sequence[Tensor] | Ragged) -> torch.dtype:
    """The dtype per-sequence rows are padded in: float64 when any row is floating,
    bool when every row is bool, int64 otherwise."""
    import torch

    dtypes = {rows.dtype} if isinstance(rows, Ragged) else {row.dtype for row in rows}
    if any(dtype.is_floating_point for dtype in dtypes):
        return torch.float64
    return torch.bool if dtypes <= {torch.bool} else torch.long  # no row: bool


def as_ragged(rows: Sequence[Tensor] | Ragged) -> Ragged:
    """Per-sequence rows as a :class:`Ragged` column (a list of tensors is joined)."""
    return rows if isinstance(rows, Ragged) else Ragged.from_rows(rows)


def is_rows(value: Any) -> TypeGuard[list[Any] | Ragged]:
    """Whether ``value`` holds per-sequence rows or labels: a list or a :class:`Ragged`."""
    return isinstance(value, (list, Ragged))


@dataclass
class RawDump:
    """Columns of one file, keyed as in the file.

    Attributes:
        columns: key -> tensor, ragged rows (a :class:`Ragged`, or a list of 1-D
            tensors) or list of labels.
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
        columns: key -> tensor, ragged rows (:class:`Ragged` or a list of 1-D tensors)
            or labels.

    Raises:
        CorruptFileError: a bool tensor holds a byte other than 0 or 1.
    """
    import torch

    from ratioscope.errors import CorruptFileError

    for key, value in columns.items():
        if isinstance(value, Ragged):
            _check_ragged_bool_bytes(path, key, value)
            continue
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


def _check_ragged_bool_bytes(path: Any, key: str, rows: Ragged) -> None:
    """:func:`check_bool_bytes` of a flat column: one pass over its values, and the
    first bad byte named by row and token."""
    import torch

    from ratioscope.errors import CorruptFileError

    if rows.dtype != torch.bool or not rows.values.numel():
        return
    data = rows.values.view(torch.uint8)
    if int(data.max()) <= 1:
        return
    at = int((data > 1).nonzero()[0, 0])
    row = int(torch.searchsorted(rows.offsets, at, right=True)) - 1
    raise CorruptFileError(
        path,
        f"bool tensor '{key}' holds the byte {int(data[at])} at index "
        f"{[row, at - int(rows.offsets[row])]}; a bool is stored as 0 or 1, so the file is "
        "corrupt",
    )
