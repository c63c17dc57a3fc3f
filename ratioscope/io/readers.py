"""Readers: one function per file type, each returning the raw columns of a dump.

A reader returns a ``RawDump``: key -> value exactly as named in the file, where a value
is a tensor (``[B]``, ``[B, T]`` or ``[B, T, V]``), a list of per-sequence 1-D tensors
(ragged sequences), or a list of strings/ints (per-sequence labels such as verl's
``uid``). :func:`ratioscope.io.loaders.load` then maps the keys to canonical names and
pads ragged columns. No reader ever unpickles arbitrary objects unless asked to.
"""

from __future__ import annotations

import json
import math
import pickle
import warnings
import zipfile
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor

from ratioscope.data.raw import Note, NoteKind, Ragged, RawDump, check_bool_bytes
from ratioscope.errors import (
    CorruptFileError,
    InputError,
    JsonLineError,
    UnknownFormatError,
    UnreadablePathError,
    UnsafePickleError,
)
from ratioscope.io.jsontext import loads
from ratioscope.io.jsontext import problem as json_problem
from ratioscope.io.limits import (
    check_budget,
    check_safetensors,
    check_torch_legacy,
    check_torch_zip,
    check_view,
    npz_layouts_of,
)

__all__ = ["SUFFIXES", "Note", "NoteKind", "Ragged", "RawDump", "file_format_of", "read_raw"]

SUFFIXES = {
    ".pt": "pt",
    ".pth": "pt",
    ".safetensors": "safetensors",
    ".npz": "npz",
    ".parquet": "parquet",
    ".jsonl": "jsonl",
    ".pkl": "pickle",
    ".pickle": "pickle",
}


def file_format_of(path: Path) -> str:
    """The file type from the suffix; unknown suffixes are an error naming what is read."""
    kind = SUFFIXES.get(path.suffix.lower())
    if kind is None:
        known = ", ".join(sorted(s for s in SUFFIXES if s not in (".pkl", ".pickle")))
        raise UnknownFormatError(
            path, f"unknown file type '{path.suffix or '(no suffix)'}'; ratioscope reads {known}"
        )
    return kind


def read_raw(path: Path, unsafe_pickle: bool = False) -> RawDump:
    """Read one dump file into raw columns (see :class:`RawDump`)."""
    from ratioscope.io.limits import start_thread_pool

    kind = file_format_of(path)
    if not path.is_file():
        raise UnreadablePathError(path, "no such file")
    start_thread_pool()  # while memory is plentiful (see there)
    readers: dict[str, Callable[[Path, bool], RawDump]] = {
        "pt": _read_pt,
        "pickle": _read_pickle,
        "safetensors": lambda p, _u: _read_safetensors(p),
        "npz": _read_npz,
        "parquet": lambda p, _u: _read_parquet(p),
        "jsonl": lambda p, _u: _read_jsonl(p),
    }
    try:
        dump = readers[kind](path, unsafe_pickle)
    except PermissionError:
        raise UnreadablePathError(path, "permission denied") from None
    except IsADirectoryError:
        raise UnreadablePathError(path, "is a directory") from None
    check_bool_bytes(path, dump.columns)
    return dump


# ----------------------------------------------------------------------------- torch
def _read_pt(path: Path, unsafe_pickle: bool) -> RawDump:
    check_torch_zip(path)
    check_torch_legacy(path)
    try:
        with warnings.catch_warnings():
            # torch's own notes on an unusual pickle ("Detected pickle protocol 4"): the
            # refusal below says what matters in one sentence
            warnings.simplefilter("ignore", UserWarning)
            obj = torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as error:
        damaged = _damaged_member(path)
        if damaged is not None:  # corrupt bytes read as a pickle: not a question of trust
            raise CorruptFileError(
                path, f"not a readable torch file: its member '{damaged}' fails its checksum "
                "(the file is damaged)",
            ) from None  # fmt: skip
        if not unsafe_pickle:
            detail = str(error).splitlines()[0] if str(error) else ""
            if "Weights only load failed" in detail or "weights_only" in str(error):
                detail = "the file holds Python objects beyond tensors and plain containers"
            raise UnsafePickleError(path, detail) from None
        obj = _unsafe_torch_load(path)
    except InputError:
        raise
    except Exception as error:  # weights_only runs nothing: any other failure is corruption
        raise CorruptFileError(path, _torch_load_problem(path, error)) from None
    return _from_object(path, obj, "pt")


#: a zip archive starts with a local file header and ends with the end-of-central-directory
#: record, within its last 22 + 65535 (comment) bytes
_ZIP_START, _ZIP_END, _ZIP_TAIL = b"PK\x03\x04", b"PK\x05\x06", 22 + 65535


def _zip_cut_short(tail: bytes, size: int) -> bool:
    """Whether a zip archive whose last bytes are ``tail`` (of ``size`` bytes in all) lacks
    a whole end record, or its end record places the central directory past the end."""
    at = tail.rfind(_ZIP_END)
    if at < 0 or len(tail) - at < 22:
        return True
    directory_size = int.from_bytes(tail[at + 12 : at + 16], "little")
    directory_offset = int.from_bytes(tail[at + 16 : at + 20], "little")
    if directory_offset == 0xFFFFFFFF:  # zip64: the offset is in another record
        return False
    return directory_offset + directory_size > size - (len(tail) - at)


def _damaged_member(path: Path) -> str | None:
    """The first member of a zip-based ``.pt`` whose bytes fail their CRC (None: none,
    or not a zip). Asked only once a load has failed: it reads the whole file."""
    try:
        with zipfile.ZipFile(path) as archive:
            return archive.testzip()
    except (zipfile.BadZipFile, OSError, EOFError, ValueError, RuntimeError):
        return None
    except Exception:  # zlib errors of a damaged member
        return "?"


def _torch_load_problem(path: Path, error: BaseException) -> str:
    """What is wrong with a ``.pt`` file torch cannot load: a file cut short (an
    interrupted copy or write, a full disk) is named truncated, whatever torch's own
    words ("failed finding central directory", "[Errno 22] Invalid argument")."""
    try:
        with path.open("rb") as handle:
            head = handle.read(len(_ZIP_START))
            size = handle.seek(0, 2)
            handle.seek(max(0, size - _ZIP_TAIL))
            tail = handle.read()
    except OSError:
        head, tail = b"", b""
    if head == _ZIP_START and _zip_cut_short(tail, size):
        return "not a readable torch file: truncated (the zip archive has no whole end record)"
    if isinstance(error, EOFError) or "unexpected EOF" in str(error):
        return "not a readable torch file: truncated (the data ends before the pickle does)"
    if head != _ZIP_START and not head.startswith(b"\x80"):
        return "not a torch file: neither a zip archive nor a pickle (another format named .pt?)"
    damaged = _damaged_member(path)
    if damaged is not None:
        return f"not a readable torch file: its member '{damaged}' fails its checksum (damaged)"
    return f"not a readable torch file ({_first_line(error)})"


def _unsafe_torch_load(path: Path) -> Any:
    try:
        return torch.load(path, map_location="cpu", weights_only=False)
    except Exception as error:  # any failure of arbitrary unpickling is a corrupt file
        raise CorruptFileError(path, _torch_load_problem(path, error)) from None


def _read_pickle(path: Path, unsafe_pickle: bool) -> RawDump:
    from ratioscope.io.frameworks import skyrl

    if skyrl.looks_like_skyrl(path):
        # decoded by an allow-list unpickler that runs nothing of the file
        return skyrl.read(path)
    if not unsafe_pickle:
        raise UnsafePickleError(path, "a .pkl file is a raw pickle")
    try:
        with path.open("rb") as handle:
            obj = pickle.load(handle)  # only reached with --unsafe-pickle
    except Exception as error:
        raise CorruptFileError(path, f"not a readable pickle ({_first_line(error)})") from None
    return _from_object(path, obj, "pickle")


def _from_object(path: Path, obj: Any, kind: str) -> RawDump:
    """Turn a loaded dict into columns; slime's train and rollout dumps are unwrapped."""
    from ratioscope.io.frameworks import slime

    meta: dict[str, Any] = {}
    if isinstance(obj, dict):
        meta = {str(k): v for k, v in obj.items() if isinstance(v, (int, float, str, bool))}
        obj = slime.unwrap(path, obj)
    if not isinstance(obj, dict):
        raise CorruptFileError(
            path, f"expected a dict of tensors at the top level, found {type(obj).__name__}"
        )
    dump = RawDump(columns={}, file_format=kind, meta=meta)
    for key, value in obj.items():
        if key in meta:
            continue
        _add_column(path, dump, str(key), value)
    return dump


def _add_column(path: Path, dump: RawDump, key: str, value: Any) -> None:
    if isinstance(value, Tensor):
        check_view(path, key, value)
        dump.columns[key] = value
    elif isinstance(value, np.ndarray):
        _add_numpy(path, dump, key, value)
    elif isinstance(value, (list, tuple)):
        _add_list(path, dump, key, list(value))
    else:  # scalars and other metadata (step numbers, config) are not per-token data
        dump.ignore(key, f"ignored non-tensor key '{key}'")


def _add_numpy(path: Path, dump: RawDump, key: str, value: np.ndarray) -> None:
    if value.dtype.kind in "biuf":
        if not value.dtype.isnative:  # big-endian: the machine's order, same numbers
            value = value.astype(value.dtype.newbyteorder("="))
        dump.columns[key] = torch.from_numpy(np.ascontiguousarray(value))
    elif value.dtype.kind in "US" and value.ndim == 1:
        dump.columns[key] = [str(v) for v in value.tolist()]
    else:
        dump.ignore(key, f"ignored key '{key}' of dtype {value.dtype}")


def _add_list(path: Path, dump: RawDump, key: str, items: list[Any]) -> None:
    if not items:
        dump.columns[key] = torch.zeros(0)
    elif all(isinstance(v, (str, bool, int)) and not isinstance(v, float) for v in items):
        dump.columns[key] = items  # labels such as verl's uid, or ints per sequence
    elif all(isinstance(v, (Tensor, np.ndarray, list, tuple)) for v in items):
        rows = []
        for v in items:
            if isinstance(v, Tensor):
                check_view(path, key, v)
                if v.dim() > 1:
                    raise InputError(
                        path,
                        f"'{key}' is a list of {v.dim()}-D tensors; a list holds one 1-D "
                        "tensor per sequence",
                    )
                rows.append(v.reshape(-1))
            else:
                rows.append(_numeric_row(path, key, v))
        dump.columns[key] = rows
        dump.ragged.add(key)
    elif all(isinstance(v, (int, float)) or v is None for v in items):
        dump.columns[key] = torch.tensor([math.nan if v is None else v for v in items])
    else:
        dump.ignore(key, f"ignored key '{key}' (a list of {type(items[0]).__name__})")


def _numeric_row(path: Path, key: str, row: Any) -> Tensor:
    try:
        array = np.asarray(row, dtype=np.float64 if _has_float_or_none(row) else None)
    except (TypeError, ValueError):
        raise InputError(path, f"'{key}' holds a row that is not a list of numbers") from None
    if array.dtype == object:
        raise InputError(path, f"'{key}' holds a row that is not a list of numbers")
    return torch.from_numpy(array.reshape(-1))


def _has_float_or_none(row: Any) -> bool:
    return any(v is None or isinstance(v, float) for v in row)


# ----------------------------------------------------------------------- safetensors
def _read_safetensors(path: Path) -> RawDump:
    from safetensors import SafetensorError
    from safetensors.torch import safe_open

    check_safetensors(path)
    columns: dict[str, Any] = {}
    try:
        # safe_open maps the file: only the tensors that are touched are read.
        with safe_open(str(path), framework="pt", device="cpu") as handle:
            for key in handle.keys():  # noqa: SIM118 - safe_open is not a mapping
                columns[key] = handle.get_tensor(key)
    except (SafetensorError, OSError, ValueError, RuntimeError) as error:
        raise CorruptFileError(
            path, f"not a readable safetensors file ({_first_line(error)})"
        ) from None
    return RawDump(columns=columns, file_format="safetensors")


# ------------------------------------------------------------------------------- npz
def _read_npz(path: Path, unsafe_pickle: bool) -> RawDump:
    dump = RawDump(columns={}, file_format="npz")
    layouts = npz_layouts_of(path)
    check_budget(
        path,
        "its arrays",
        sum(math.prod(shape) * dtype.itemsize for shape, _, dtype in layouts.values()),
    )
    try:
        with np.load(path, allow_pickle=unsafe_pickle) as archive:
            for key in archive.files:
                try:
                    value = archive[key]
                except ValueError as error:
                    if "allow_pickle" in str(error):
                        raise InputError(
                            path,
                            f"array '{key}' is an object array, stored as a pickle that can "
                            "run arbitrary code; save numeric or string arrays instead, or "
                            "allow it with `unsafe_pickle` if you trust the file",
                        ) from None
                    raise
                if not isinstance(value, np.ndarray):  # a member that is not .npy: bytes
                    raise CorruptFileError(
                        path,
                        f"not an .npz archive of numpy arrays: its member '{key}' is not a "
                        ".npy array (a zip of other files, or another format renamed .npz?)",
                    )
                if value.dtype == object and unsafe_pickle:
                    _add_list(path, dump, key, list(value))
                else:
                    _add_numpy(path, dump, key, value)
    except (UnsafePickleError, InputError):
        raise
    except (ValueError, OSError, EOFError, zipfile.BadZipFile) as error:
        raise CorruptFileError(
            path, f"not a readable .npz archive ({_first_line(error)})"
        ) from None
    return dump


# --------------------------------------------------------------------------- parquet
def _read_parquet(path: Path) -> RawDump:
    import polars as pl

    try:
        frame = pl.read_parquet(path)
    except Exception as error:  # polars raises several error types for bad files
        raise CorruptFileError(
            path, f"not a readable parquet file ({_first_line(error)})"
        ) from None
    dump = RawDump(columns={}, file_format="parquet")
    for name in frame.columns:
        _add_series(path, dump, frame.get_column(name))
    return dump


def _add_series(path: Path, dump: RawDump, series: Any, exact: bool | None = None) -> None:
    """One column of a frame. ``exact``: whether an integer column is read as integers
    (it holds no null), when the frame is a slice of the file and the file decided it."""
    import polars as pl

    dtype = series.dtype
    if isinstance(dtype, (pl.List, pl.Array)):
        inner = dtype.inner
        if not (inner.is_numeric() or inner == pl.Boolean):
            dump.ignore(series.name, f"ignored list column '{series.name}' of {inner}")
            return
        lengths = series.list.len().fill_null(0).to_numpy()
        flat = (
            series.explode(empty_as_null=False, keep_nulls=False)
            .cast(pl.Float64)
            .fill_null(float("nan"))
            .to_numpy()
        )
        if flat.size != int(lengths.sum()):
            raise CorruptFileError(path, f"list column '{series.name}' could not be read")
        values = torch.from_numpy(np.array(flat, dtype=np.float64))
        # flat, as the file holds it: one tensor per row would cost far more than its
        # values (a 79 KB file of 200,000 two-token rows took 2.4 GB so)
        counts = torch.tensor(lengths, dtype=torch.long)
        dump.columns[series.name] = Ragged.from_lengths(values, counts)
        dump.ragged.add(series.name)
    elif dtype.is_numeric() or dtype == pl.Boolean:
        values = torch.from_numpy(series.cast(pl.Float64).fill_null(float("nan")).to_numpy().copy())
        # integers stay integers unless a null must be kept as NaN (never -2**63)
        if exact is None:
            exact = (dtype.is_integer() or dtype == pl.Boolean) and series.null_count() == 0
        dump.columns[series.name] = values.long() if exact else values
    elif dtype == pl.String:
        dump.columns[series.name] = series.to_list()
    else:
        dump.ignore(series.name, f"ignored column '{series.name}' of type {dtype}")


# ----------------------------------------------------------------------------- jsonl
def _read_jsonl(path: Path) -> RawDump:
    records: list[dict[str, Any]] = []
    numbers: list[int] = []  # the file line of each record (blank lines are skipped)
    try:
        with path.open("r", encoding="utf-8") as handle:
            for number, line in enumerate(handle, start=1):
                if not line.strip():
                    continue
                try:
                    record = loads(line.rstrip("\r\n"))
                except json.JSONDecodeError as error:
                    raise JsonLineError(
                        path, number, f"not valid JSON ({json_problem(error)})"
                    ) from None
                if not isinstance(record, dict):
                    raise JsonLineError(path, number, "expected a JSON object (one sequence)")
                records.append(record)
                numbers.append(number)
    except UnicodeDecodeError:
        raise CorruptFileError(path, "not a UTF-8 text file") from None
    if not records:
        raise CorruptFileError(path, "the file holds no JSON line")
    from ratioscope.io.frameworks import nemo_rl

    return _columns_from_records(path, nemo_rl.unwrap(records), numbers)


def _columns_from_records(path: Path, records: list[dict[str, Any]], numbers: list[int]) -> RawDump:
    """One sequence per record: list fields are per-token, scalars are per-sequence."""
    dump = RawDump(columns={}, file_format="jsonl")
    fields = JsonFields()
    for number, record in zip(numbers, records, strict=True):
        fields.add(number, record)
    kinds = fields.decide(dump)
    dump.columns.update(json_columns(path, records, numbers, kinds))
    dump.ragged.update(key for key, kind in kinds.items() if kind.what == "tokens")
    return dump


@dataclass(frozen=True)
class JsonKind:
    """What a field of a JSON-lines file becomes, decided over all of the file's lines.

    Attributes:
        what: "tokens" (per-token lists), "long" or "float" (a number per sequence),
            "labels" (strings or ints per sequence), or "none" (not a column).
        dtype: for "tokens", the dtype the padded [B, T] column takes (float64 when any
            line has a float or a null, bool when every line is all booleans, else int64).
    """

    what: str
    dtype: torch.dtype | None = None


@dataclass
class _FieldTally:
    """Running facts about one field over the lines seen so far."""

    present: int = 0
    absent: int = 0
    first_absent: int = 0
    lists: bool = True
    nonnumeric: bool = False  # some list starts with a dict, list or string
    ints: bool = True  # every value an int (not a bool)
    numbers: bool = True  # every value an int, float or bool
    labels: bool = True  # every value a str or an int
    float_rows: bool = False  # some list has a float or a null
    bool_rows: bool = True  # every list holds booleans only
    longest: int = 0


class JsonFields:
    """The kinds of the fields of a JSON-lines file, from its lines one at a time, so that
    a file read in line batches gives every batch the columns the whole file would have.
    """

    def __init__(self) -> None:
        self.tallies: dict[str, _FieldTally] = {}
        self.lines = 0
        self._first_number = 0  # the file line of the first record

    def add(self, number: int, record: dict[str, Any]) -> None:
        """Take one record (file line ``number``) into account."""
        for key in record:
            if key not in self.tallies:
                # absent on every earlier line
                tally = _FieldTally(absent=self.lines, first_absent=self._first_number)
                self.tallies[key] = tally
        for key, tally in self.tallies.items():
            value = record.get(key)
            if value is None:
                if tally.absent == 0:
                    tally.first_absent = number
                tally.absent += 1
                continue
            tally.present += 1
            if isinstance(value, list):
                tally.longest = max(tally.longest, len(value))
                if value[:1] and isinstance(value[0], (dict, list, str)):
                    tally.nonnumeric = True
                if not all(isinstance(x, bool) for x in value):
                    tally.bool_rows = False
                    if not all(isinstance(x, int) for x in value):
                        tally.float_rows = True
            else:
                tally.lists = False
            tally.ints &= isinstance(value, int) and not isinstance(value, bool)
            tally.numbers &= isinstance(value, (int, float, bool))
            tally.labels &= isinstance(value, (str, int))
        if self.lines == 0:
            self._first_number = number
        self.lines += 1

    def decide(self, dump: RawDump) -> dict[str, JsonKind]:
        """Each field's kind; fields that are no column get their note in ``dump``."""
        kinds: dict[str, JsonKind] = {}
        for key, tally in self.tallies.items():
            kinds[key] = JsonKind("none")
            if not tally.present:
                continue
            if tally.lists:
                if tally.nonnumeric:
                    dump.ignore(key, f"ignored non-numeric per-token field '{key}'")
                    continue
                if tally.absent:
                    # an optional tensor on some lines only: its section is then null with
                    # a warning (a required one is reported missing by the loader)
                    more = f" and {tally.absent - 1} other line(s)" if tally.absent > 1 else ""
                    dump.warn(
                        f"dropped per-token field '{key}': missing on line "
                        f"{tally.first_absent}{more}",
                        key,
                    )
                    continue
                dtype = (
                    torch.float64
                    if tally.float_rows
                    else torch.bool
                    if tally.bool_rows
                    else torch.long
                )
                kinds[key] = JsonKind("tokens", dtype)
            elif tally.ints:
                kinds[key] = JsonKind("float" if tally.absent else "long")
            elif tally.numbers:
                kinds[key] = JsonKind("float")
            elif tally.labels:
                kinds[key] = JsonKind("labels")
            else:
                dump.ignore(key, f"ignored field '{key}' of mixed or nested type")
        return kinds

    def width(self, keys: Iterable[str]) -> int:
        """The longest per-token list of ``keys`` (0 when there is none)."""
        return max((self.tallies[k].longest for k in keys if k in self.tallies), default=0)


def json_columns(
    path: Path,
    records: list[dict[str, Any]],
    numbers: list[int],
    kinds: dict[str, JsonKind],
) -> dict[str, Any]:
    """The columns of ``records`` (file lines ``numbers``) as ``kinds`` say; per-token
    lists become one :class:`Ragged` column each, of the dtype the whole file decided,
    so that line batches of a file join into the columns of the whole read."""
    columns: dict[str, Any] = {}
    for key, kind in kinds.items():
        values = [record.get(key) for record in records]
        if kind.what == "tokens":
            columns[key] = _json_tokens(path, key, values, numbers, kind)
        elif kind.what == "long":
            columns[key] = torch.tensor(values, dtype=torch.long)
        elif kind.what == "float":
            columns[key] = torch.tensor(
                [math.nan if v is None else float(v) for v in values], dtype=torch.float64
            )
        elif kind.what == "labels":
            columns[key] = values  # None stays None: a missing label is not a label
    return columns


def _json_tokens(
    path: Path, key: str, values: list[Any], numbers: list[int], kind: JsonKind
) -> Ragged:
    """The per-token lists of one field (one per record) as one flat column of the
    dtype the file decided (``kind.dtype``: what padding the rows would give), built in
    one step; a line that is no list of numbers is named by reading the lines one by one.
    """
    dtype = kind.dtype or torch.float64
    lengths = [len(v) for v in values]
    try:
        if dtype == torch.float64:
            flat = [math.nan if x is None else x for v in values for x in v]
        else:
            flat = [x for v in values for x in v]
        return Ragged.from_lengths(torch.tensor(flat, dtype=dtype), lengths)
    except (TypeError, ValueError, RuntimeError, OverflowError):
        pass  # the rows one by one: the first faulty line is named
    rows = []
    for number, v in zip(numbers, values, strict=True):
        try:
            rows.append(_json_row(v).to(dtype))
        except (TypeError, ValueError):
            raise JsonLineError(path, number, f"field '{key}' is not a list of numbers") from None
    return Ragged.from_rows(rows, dtype)


def _json_row(values: list[Any]) -> Tensor:
    """A per-token JSON list as a tensor: integers stay integers, null becomes NaN."""
    if all(isinstance(x, bool) for x in values):
        return torch.tensor(values, dtype=torch.bool)
    if all(isinstance(x, int) for x in values):
        return torch.tensor(values, dtype=torch.long)
    return torch.tensor([math.nan if x is None else x for x in values], dtype=torch.float64)


def _first_line(error: BaseException, limit: int = 160) -> str:
    """The first line of a library's message, cut at a sentence end when it is long."""
    lines = str(error).strip().splitlines()
    if not lines:
        return type(error).__name__
    text = lines[0]
    if len(text) <= limit:
        return text.rstrip(". ")
    cut = text.rfind(". ", 0, limit)
    return text[:cut] if cut > 40 else text[:limit].rstrip() + "..."
