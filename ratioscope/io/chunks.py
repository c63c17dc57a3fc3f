"""Row ranges of one dump file, read from the file itself: the readers of streaming.

A :class:`ChunkSource` knows a file's keys without reading its data, and reads the rows
``[start, stop)`` of the columns asked for, as :func:`ratioscope.io.readers.read_raw`
would have returned them for those rows. Whatever the whole file decides (the dtype a
ragged column is padded in, whether an integer column holds a null, the longest row) is
decided once when the source is opened, so every range gets the columns the whole file
would have. Memory is bounded by the rows read, never by the file:

* ``.safetensors``: the header is parsed here and each range is read with plain file
  reads at its byte offsets (no mapping whose pages would stay resident); tensors of
  three or more dimensions (logits) stay memory-mapped, sliced as views.
* ``.npz``: each member is read front to back through :mod:`zipfile` (stored or
  deflated alike), one range after another.
* ``.pt``: ``torch.load(mmap=True, weights_only=True)`` maps the tensors of a file saved
  in torch's zip format; the pages of a range are handed back once it is read
  (:mod:`ratioscope.functional._paging`).
* ``.parquet``: a range is a row slice of a lazy scan (polars reads the row groups that
  hold it); the longest list and the null counts come from one streaming pass first.
* ``.jsonl``: one pass parses every line to decide the fields' kinds and remembers where
  each line starts; a range is then read and parsed again from its first line, a few
  lines at a time (their Python objects are several times the range's tensors).
"""

from __future__ import annotations

import io
import json
import math
import zipfile
from abc import ABC, abstractmethod
from array import array
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import IO, Any

import numpy as np
import torch
from torch import Tensor

from ratioscope.data.raw import Ragged, RawDump, check_bool_bytes, padded_dtype
from ratioscope.errors import CorruptFileError, JsonLineError
from ratioscope.io.jsontext import loads
from ratioscope.io.jsontext import problem as json_problem
from ratioscope.io.limits import not_a_zip, npz_layouts

#: safetensors dtype names -> torch dtypes
_SAFETENSORS_DTYPES = {
    "F64": torch.float64,
    "F32": torch.float32,
    "F16": torch.float16,
    "BF16": torch.bfloat16,
    "I64": torch.int64,
    "I32": torch.int32,
    "I16": torch.int16,
    "I8": torch.int8,
    "U8": torch.uint8,
    "BOOL": torch.bool,
}


class ChunkSource(ABC):
    """One file, read a range of rows at a time.

    Attributes:
        path: the file.
        header: its keys as :func:`read_raw` would list them (``columns`` hold no data),
            with the notes and top-level metadata the whole read would give.
        rows: the number of sequences, known after :meth:`bind`.
    """

    def __init__(self, path: Path, header: RawDump) -> None:
        self.path = path
        self.header = header
        self.rows = 0
        #: canonical name -> key of the file, of the keys :meth:`read` returns
        self.keys: dict[str, str] = {}

    @abstractmethod
    def bind(self, keys: Mapping[str, str]) -> bool:
        """Get ready to read the file keys ``keys`` (canonical -> key); False when they do
        not come in rows that can be read apart (the whole file must be read instead)."""

    def read(self, start: int, stop: int) -> dict[str, Any]:
        """The bound keys' values for rows ``[start, stop)``, as :class:`RawDump` columns,
        their bool tensors checked (:func:`ratioscope.data.raw.check_bool_bytes`)."""
        columns = self.read_rows(start, stop)
        check_bool_bytes(self.path, columns)
        return columns

    @abstractmethod
    def read_rows(self, start: int, stop: int) -> dict[str, Any]:
        """The bound keys' values for rows ``[start, stop)``, as the file holds them."""

    def width(self) -> int | None:
        """The longest row of the bound ragged keys; None when no bound key is ragged."""
        return None

    def done(self, start: int, stop: int) -> None:  # noqa: B027 - optional hook
        """Rows ``[start, stop)`` are processed: a source may hand their memory back."""

    def columns_by_rows(self, rows: int) -> Iterator[dict[str, Any]]:
        """Every key of :attr:`header` (bound or not), ``rows`` rows at a time, as
        :meth:`read` gives them; for ``ratioscope info``, which lists every key."""
        bound = self.keys
        self.keys = {key: key for key in self.header.columns}
        try:
            for start in range(0, self.rows, max(1, rows)):
                yield self.read(start, min(start + rows, self.rows))
        finally:
            self.keys = bound

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release the file."""


# ----------------------------------------------------------------------- safetensors
class SafetensorsSource(ChunkSource):
    """A safetensors file read by byte ranges: ``[8-byte header size][JSON header][data]``."""

    def __init__(self, path: Path) -> None:
        self.handle: io.BufferedReader = path.open("rb")
        try:
            self.entries, self.base = _safetensors_header(path, self.handle)
        except BaseException:
            self.handle.close()
            raise
        header = RawDump(columns=dict.fromkeys(sorted(self.entries)), file_format="safetensors")
        super().__init__(path, header)
        self.keys: dict[str, str] = {}
        self.mapped: dict[str, Tensor] = {}

    def bind(self, keys: Mapping[str, str]) -> bool:
        wanted = {c: k for c, k in keys.items() if k in self.entries}
        mask = wanted.get("mask")
        if mask is None or len(self.entries[mask][1]) != 2:
            return False
        self.rows = self.entries[mask][1][0]
        for key in wanted.values():
            shape = self.entries[key][1]
            if not shape or shape[0] != self.rows:
                return False
        self.keys = wanted
        big = [k for k in wanted.values() if len(self.entries[k][1]) >= 3]
        if big:
            self.mapped = _mapped_safetensors(self.path, big)
        return True

    def read_rows(self, start: int, stop: int) -> dict[str, Any]:
        columns: dict[str, Any] = {}
        for key in self.keys.values():
            if key in self.mapped:
                columns[key] = self.mapped[key][start:stop]  # a view of the mapping
                continue
            dtype, shape, offset = self.entries[key]
            row_bytes = math.prod(shape[1:]) * _itemsize(dtype)
            out = torch.empty((stop - start, *shape[1:]), dtype=dtype)
            self.handle.seek(self.base + offset + start * row_bytes)
            view = out.reshape(-1).view(torch.uint8).numpy()
            if self.handle.readinto(view.data) != view.nbytes:
                raise CorruptFileError(self.path, f"the file ends inside tensor '{key}'")
            columns[key] = out
        return columns

    def close(self) -> None:
        self.handle.close()
        self.mapped = {}


def _itemsize(dtype: torch.dtype) -> int:
    return torch.empty((), dtype=dtype).element_size()


def _safetensors_header(
    path: Path, handle: IO[bytes]
) -> tuple[dict[str, tuple[torch.dtype, list[int], int]], int]:
    """key -> (dtype, shape, data offset), and where the data starts, checked as the
    whole read checks them (:func:`ratioscope.io.limits.safetensors_header`)."""
    from ratioscope.io.limits import safetensors_header

    header, base = safetensors_header(path, handle)
    entries: dict[str, tuple[torch.dtype, list[int], int]] = {}
    for key, (name, shape, begin) in header.items():
        dtype = _SAFETENSORS_DTYPES.get(name)
        if dtype is None:
            raise CorruptFileError(
                path,
                f"not a readable safetensors file (tensor '{key}' has a dtype this reader "
                "does not stream)",
            )
        entries[key] = (dtype, list(shape), begin)
    return entries, base


def _mapped_safetensors(path: Path, keys: list[str]) -> dict[str, Tensor]:
    """``keys`` as memory-mapped tensors (logits are sliced, never read whole)."""
    from safetensors import SafetensorError
    from safetensors.torch import safe_open

    try:
        with safe_open(str(path), framework="pt", device="cpu") as handle:
            return {key: handle.get_tensor(key) for key in keys}
    except (SafetensorError, OSError, ValueError, RuntimeError) as error:
        raise CorruptFileError(path, f"not a readable safetensors file ({error})") from None


# ----------------------------------------------------------------- in-memory / mapped
class RawDumpSource(ChunkSource):
    """Row slices of columns already at hand: a ``.pt`` file mapped with ``mmap=True``
    (its tensors are views of the file, so only the rows sliced are read)."""

    def __init__(self, path: Path, raw: RawDump) -> None:
        header = RawDump(
            columns=dict.fromkeys(raw.columns),
            file_format=raw.file_format,
            ragged=set(raw.ragged),
            notes=list(raw.notes),
            meta=dict(raw.meta),
        )
        super().__init__(path, header)
        self.raw = raw
        self.keys: dict[str, str] = {}
        self.dtypes: dict[str, torch.dtype] = {}
        self.pages: Any = None

    def bind(self, keys: Mapping[str, str]) -> bool:
        from ratioscope.functional._paging import MappedPages

        wanted = {c: k for c, k in keys.items() if k in self.raw.columns}
        mask = wanted.get("mask")
        if mask is None:
            return False
        self.rows = len(self.raw.columns[mask])
        for key in wanted.values():
            value = self.raw.columns[key]
            if not isinstance(value, (Tensor, list)):
                return False
            if isinstance(value, Tensor) and value.dim() == 0:
                return False
            if len(value) != self.rows:
                return False
            if key in self.raw.ragged and isinstance(value, (list, Ragged)):
                self.dtypes[key] = padded_dtype(value)
        self.keys = wanted
        tensors = [
            self.raw.columns[k]
            for k in wanted.values()
            if isinstance(self.raw.columns[k], Tensor) and self.raw.columns[k].is_contiguous()
        ]
        self.pages = MappedPages(*tensors) if tensors else None
        self._tensors = tensors
        return True

    def read_rows(self, start: int, stop: int) -> dict[str, Any]:
        columns: dict[str, Any] = {}
        for key in self.keys.values():
            value = self.raw.columns[key]
            if isinstance(value, Ragged):
                columns[key] = value[start:stop].to(self.dtypes[key])
            elif key in self.dtypes:
                columns[key] = [row.to(self.dtypes[key]) for row in value[start:stop]]
            else:
                columns[key] = value[start:stop]
        return columns

    def width(self) -> int | None:
        if not self.dtypes:
            return None
        return max((_longest(self.raw.columns[key]) for key in self.dtypes), default=0)

    def done(self, start: int, stop: int) -> None:
        if self.pages is not None and self.pages.active:
            self.pages.release(*(t[:stop] for t in self._tensors))


def _longest(rows: list[Tensor] | Ragged) -> int:
    """The length of the longest of per-sequence rows."""
    if isinstance(rows, Ragged):
        return rows.longest()
    return max((len(row) for row in rows), default=0)


def open_pt(path: Path) -> RawDumpSource | None:
    """A ``.pt`` file mapped into memory; None when it cannot be (a file saved in torch's
    legacy format, or one that holds more than tensors: the whole read says why)."""
    from ratioscope.io.readers import _from_object

    try:
        obj = torch.load(path, map_location="cpu", weights_only=True, mmap=True)
    except Exception:  # the whole read says what is wrong with the file
        return None
    return RawDumpSource(path, _from_object(path, obj, "pt"))


# ------------------------------------------------------------------------------- npz
class NpzSource(ChunkSource):
    """An ``.npz`` archive whose numeric members are read front to back, row range after
    row range, stored or deflated alike; string members (labels) are read whole."""

    def __init__(self, path: Path) -> None:
        try:
            self.archive = zipfile.ZipFile(path)
            self.members = {
                name[: -len(".npy")]: name
                for name in self.archive.namelist()
                if name.endswith(".npy")
            }
            self.layouts = npz_layouts(path, self.archive)
        except CorruptFileError:
            raise
        except zipfile.BadZipFile:
            raise not_a_zip(path) from None
        except (OSError, ValueError, EOFError) as error:
            raise CorruptFileError(path, f"not a readable .npz archive ({error})") from None
        header = RawDump(columns={}, file_format="npz")
        for key, (shape, _, dtype) in self.layouts.items():
            if dtype.kind in "biuf" or dtype.hasobject or (dtype.kind in "US" and len(shape) == 1):
                header.columns[key] = None
            else:  # as the whole read notes it
                header.ignore(key, f"ignored key '{key}' of dtype {dtype}")
        super().__init__(path, header)
        self.keys: dict[str, str] = {}
        self.streams: dict[str, tuple[IO[bytes], int]] = {}
        self.labels: dict[str, list[str]] = {}

    def bind(self, keys: Mapping[str, str]) -> bool:
        if any(dtype.hasobject for _, _, dtype in self.layouts.values()):
            return False  # refused (or read with unsafe_pickle) by the whole read
        wanted = {c: k for c, k in keys.items() if k in self.header.columns}
        mask = wanted.get("mask")
        if mask is None:
            return False
        self.rows = self.layouts[mask][0][0] if self.layouts[mask][0] else -1
        for key in wanted.values():
            shape, fortran, dtype = self.layouts[key]
            if not shape or shape[0] != self.rows or dtype.hasobject:
                return False
            if fortran and len(shape) > 1:
                return False
            if dtype.kind in "US":
                if len(shape) != 1:
                    return False
                with self.archive.open(self.members[key]) as member:
                    self.labels[key] = [str(v) for v in np.lib.format.read_array(member).tolist()]
            elif dtype.kind not in "biuf":
                return False
        self.keys = wanted
        return True

    def read_rows(self, start: int, stop: int) -> dict[str, Any]:
        columns: dict[str, Any] = {}
        for key in self.keys.values():
            if key in self.labels:
                columns[key] = self.labels[key][start:stop]
                continue
            shape, _, dtype = self.layouts[key]
            row_bytes = math.prod(shape[1:]) * dtype.itemsize
            stream = self._stream_at(key, start, row_bytes)
            data = stream.read((stop - start) * row_bytes)
            if len(data) != (stop - start) * row_bytes:
                raise CorruptFileError(self.path, f"array '{key}' ends before its last row")
            self.streams[key] = (stream, stop)
            values = np.frombuffer(data, dtype=dtype).reshape((stop - start, *shape[1:]))
            # a big-endian member is read in the machine's order, as the whole read does
            columns[key] = torch.from_numpy(values.astype(dtype.newbyteorder("="), copy=True))
        return columns

    def _stream_at(self, key: str, row: int, row_bytes: int) -> IO[bytes]:
        """The member's stream positioned at ``row`` (reopened when asked to go back)."""
        stream, position = self.streams.get(key, (None, -1))
        if stream is None or position > row:
            if stream is not None:
                stream.close()
            stream = self.archive.open(self.members[key])
            version = np.lib.format.read_magic(stream)
            if version == (1, 0):
                np.lib.format.read_array_header_1_0(stream)
            else:
                np.lib.format.read_array_header_2_0(stream)
            position = 0
        skip = (row - position) * row_bytes
        while skip > 0:  # deflated members cannot seek: read past the rows before
            skipped = len(stream.read(min(skip, 1 << 24)))
            if skipped == 0:
                raise CorruptFileError(self.path, f"array '{key}' ends before row {row}")
            skip -= skipped
        return stream

    def close(self) -> None:
        for stream, _ in self.streams.values():
            stream.close()
        self.archive.close()


# --------------------------------------------------------------------------- parquet
class ParquetSource(ChunkSource):
    """A Parquet file read by row slices of a lazy scan."""

    def __init__(self, path: Path) -> None:
        import polars as pl

        try:
            self.schema = dict(pl.read_parquet_schema(path))
        except Exception as error:  # polars raises several error types for bad files
            raise CorruptFileError(path, f"not a readable parquet file ({error})") from None
        header = RawDump(columns={}, file_format="parquet")
        for name, dtype in self.schema.items():
            kind = _parquet_kind(dtype)
            if kind is None:
                header.ignore(name, _parquet_note(name, dtype))
            else:
                header.columns[name] = None
                if kind == "tokens":
                    header.ragged.add(name)
        super().__init__(path, header)
        self.keys: dict[str, str] = {}
        self.exact: dict[str, bool] = {}
        self.longest = 0

    def bind(self, keys: Mapping[str, str]) -> bool:
        import polars as pl

        wanted = {c: k for c, k in keys.items() if k in self.header.columns}
        if "mask" not in wanted or wanted["mask"] not in self.header.ragged:
            return False
        # one file key may stand for two names (``correct`` read from a reward function)
        unique = list(dict.fromkeys(wanted.values()))
        scalars = [k for k in unique if k not in self.header.ragged]
        ragged = [k for k in unique if k in self.header.ragged]
        query = pl.scan_parquet(self.path).select(
            pl.len().alias("__rows"),
            *(pl.col(k).list.len().max().alias(f"__len_{k}") for k in ragged),
            *(pl.col(k).null_count().alias(f"__nulls_{k}") for k in scalars),
        )
        try:
            facts = query.collect(engine="streaming").row(0, named=True)
        except Exception as error:  # polars raises several error types for bad files
            raise CorruptFileError(self.path, f"not a readable parquet file ({error})") from None
        self.rows = int(facts["__rows"])
        self.longest = max((int(facts[f"__len_{k}"] or 0) for k in ragged), default=0)
        for key in scalars:
            dtype = self.schema[key]
            self.exact[key] = (dtype.is_integer() or dtype == pl.Boolean) and not facts[
                f"__nulls_{key}"
            ]
        self.keys = wanted
        return True

    def read_rows(self, start: int, stop: int) -> dict[str, Any]:
        import polars as pl

        from ratioscope.io.readers import _add_series

        try:
            frame = (
                pl.scan_parquet(self.path)
                .slice(start, stop - start)
                .select(list(dict.fromkeys(self.keys.values())))
                .collect()
            )
        except Exception as error:  # polars raises several error types for bad files
            raise CorruptFileError(self.path, f"not a readable parquet file ({error})") from None
        dump = RawDump(columns={}, file_format="parquet")
        for name in frame.columns:
            _add_series(self.path, dump, frame.get_column(name), self.exact.get(name))
        return dump.columns

    def width(self) -> int | None:
        return self.longest if any(k in self.header.ragged for k in self.keys.values()) else None


def _parquet_kind(dtype: Any) -> str | None:
    """What :func:`ratioscope.io.readers._add_series` makes of a column of ``dtype``."""
    import polars as pl

    if isinstance(dtype, (pl.List, pl.Array)):
        inner = dtype.inner
        return "tokens" if inner.is_numeric() or inner == pl.Boolean else None
    if dtype.is_numeric() or dtype == pl.Boolean:
        return "numbers"
    return "labels" if dtype == pl.String else None


def _parquet_note(name: str, dtype: Any) -> str:
    import polars as pl

    if isinstance(dtype, (pl.List, pl.Array)):
        return f"ignored list column '{name}' of {dtype.inner}"
    return f"ignored column '{name}' of type {dtype}"


# ----------------------------------------------------------------------------- jsonl
#: lines of a range parsed and converted together (see :meth:`JsonLinesSource.read`)
JSON_LINES_AT_ONCE = 16


class JsonLinesSource(ChunkSource):
    """A JSON-lines file: one pass decides the fields' kinds and indexes the lines."""

    def __init__(self, path: Path) -> None:
        from ratioscope.io.readers import JsonFields

        self.fields = JsonFields()
        self.offsets = array("q")  # byte offset of each record's line
        self.numbers = array("q")  # and its line number
        self.first: dict[str, Any] | None = None
        self.handle: IO[bytes] = path.open("rb")
        try:
            self._index(path)
        except BaseException:
            self.handle.close()
            raise
        header = RawDump(columns={}, file_format="jsonl")
        self.kinds = self.fields.decide(header)
        header.columns = {k: None for k, kind in self.kinds.items() if kind.what != "none"}
        header.ragged = {k for k, kind in self.kinds.items() if kind.what == "tokens"}
        super().__init__(path, header)
        self.rows = len(self.offsets)
        self.keys: dict[str, str] = {}

    def _index(self, path: Path) -> None:
        offset = 0
        for number, line in enumerate(self.handle, start=1):
            start, offset = offset, offset + len(line)
            record = _parse_line(path, number, line)
            if record is None:
                continue
            if self.first is None:
                self.first = record
            self.fields.add(number, record)
            self.offsets.append(start)
            self.numbers.append(number)
        if self.first is None:
            raise CorruptFileError(path, "the file holds no JSON line")

    def bind(self, keys: Mapping[str, str]) -> bool:
        self.keys = {c: k for c, k in keys.items() if k in self.header.columns}
        return "mask" in self.keys

    def read_rows(self, start: int, stop: int) -> dict[str, Any]:
        """The rows' columns, parsed and converted ``JSON_LINES_AT_ONCE`` lines at a time:
        a parsed line holds a Python float (about 32 bytes) for each value, several times
        its tensors, so a whole range parsed at once held about 130 MB for 512 lines of
        2,048 tokens before a tensor was made. The columns are those of the whole range
        converted at once, value for value; of several faulty lines, the first one of the
        first batch of lines that holds one is named."""
        from ratioscope.io.readers import json_columns

        self.handle.seek(self.offsets[start])
        wanted = {k: self.kinds[k] for k in dict.fromkeys(self.keys.values())}
        numbers = list(self.numbers[start:stop])
        parts: list[dict[str, Any]] = []
        for first in range(0, len(numbers), JSON_LINES_AT_ONCE):
            batch = numbers[first : first + JSON_LINES_AT_ONCE]
            records = [self._record(number) for number in batch]
            parts.append(json_columns(self.path, records, batch, wanted))
        if not parts:
            return json_columns(self.path, [], [], wanted)
        return _joined(parts)

    def _record(self, number: int) -> dict[str, Any]:
        """The record of file line ``number``, the next non-blank line of the handle."""
        line = self.handle.readline()
        while not line.strip():  # blank lines between records
            line = self.handle.readline()
        record = _parse_line(self.path, number, line)
        assert record is not None
        return record

    def width(self) -> int | None:
        ragged = [k for k in self.keys.values() if k in self.header.ragged]
        return self.fields.width(ragged) if ragged else None

    def close(self) -> None:
        self.handle.close()


def _joined(parts: list[dict[str, Any]]) -> dict[str, Any]:
    """The columns of consecutive line batches as one range: per-token rows
    (:class:`Ragged`) and labels (lists) one after another, per-sequence tensors
    concatenated."""
    if len(parts) == 1:
        return parts[0]
    joined: dict[str, Any] = {}
    for key, value in parts[0].items():
        values = [part[key] for part in parts]
        if isinstance(value, Tensor):
            joined[key] = torch.cat(values)
        elif isinstance(value, Ragged):
            joined[key] = Ragged.joined(values)
        else:
            joined[key] = [item for items in values for item in items]
    return joined


def _parse_line(path: Path, number: int, line: bytes) -> dict[str, Any] | None:
    """One record; None for a blank line. Errors name the line, as the whole read does."""
    try:
        text = line.decode("utf-8")
    except UnicodeDecodeError:
        raise CorruptFileError(path, "not a UTF-8 text file") from None
    if not text.strip():
        return None
    try:
        record = loads(text.rstrip("\r\n"))
    except json.JSONDecodeError as error:
        raise JsonLineError(path, number, f"not valid JSON ({json_problem(error)})") from None
    if not isinstance(record, dict):
        raise JsonLineError(path, number, "expected a JSON object (one sequence)")
    return record
