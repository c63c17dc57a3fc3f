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
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor

from ratioscope.errors import (
    CorruptFileError,
    InputError,
    JsonLineError,
    UnknownFormatError,
    UnreadablePathError,
    UnsafePickleError,
)
from ratioscope.io.raw import Note, NoteKind, RawDump

__all__ = ["SUFFIXES", "Note", "NoteKind", "RawDump", "file_format_of", "read_raw"]

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
    kind = file_format_of(path)
    if not path.is_file():
        raise UnreadablePathError(path, "no such file")
    readers: dict[str, Callable[[Path, bool], RawDump]] = {
        "pt": _read_pt,
        "pickle": _read_pickle,
        "safetensors": lambda p, _u: _read_safetensors(p),
        "npz": _read_npz,
        "parquet": lambda p, _u: _read_parquet(p),
        "jsonl": lambda p, _u: _read_jsonl(p),
    }
    try:
        return readers[kind](path, unsafe_pickle)
    except PermissionError:
        raise UnreadablePathError(path, "permission denied") from None
    except IsADirectoryError:
        raise UnreadablePathError(path, "is a directory") from None


# ----------------------------------------------------------------------------- torch
def _read_pt(path: Path, unsafe_pickle: bool) -> RawDump:
    try:
        obj = torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as error:
        if not unsafe_pickle:
            detail = str(error).splitlines()[0] if str(error) else ""
            if "Weights only load failed" in detail or "weights_only" in str(error):
                detail = "the file holds Python objects beyond tensors and plain containers"
            raise UnsafePickleError(path, detail) from None
        obj = _unsafe_torch_load(path)
    except (RuntimeError, EOFError, OSError, ValueError, zipfile.BadZipFile) as error:
        raise CorruptFileError(path, f"not a readable torch file ({_first_line(error)})") from None
    return _from_object(path, obj, "pt")


def _unsafe_torch_load(path: Path) -> Any:
    try:
        return torch.load(path, map_location="cpu", weights_only=False)
    except Exception as error:  # any failure of arbitrary unpickling is a corrupt file
        raise CorruptFileError(path, f"not a readable torch file ({_first_line(error)})") from None


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
        dump.columns[key] = value
    elif isinstance(value, np.ndarray):
        _add_numpy(path, dump, key, value)
    elif isinstance(value, (list, tuple)):
        _add_list(path, dump, key, list(value))
    else:  # scalars and other metadata (step numbers, config) are not per-token data
        dump.ignore(key, f"ignored non-tensor key '{key}'")


def _add_numpy(path: Path, dump: RawDump, key: str, value: np.ndarray) -> None:
    if value.dtype.kind in "biuf":
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


def _add_series(path: Path, dump: RawDump, series: Any) -> None:
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
        dump.columns[series.name] = list(torch.split(values, lengths.tolist()))
        dump.ragged.add(series.name)
    elif dtype.is_numeric() or dtype == pl.Boolean:
        values = torch.from_numpy(series.cast(pl.Float64).fill_null(float("nan")).to_numpy().copy())
        # integers stay integers unless a null must be kept as NaN (never -2**63)
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
                    record = json.loads(line)
                except json.JSONDecodeError as error:
                    raise JsonLineError(path, number, f"not valid JSON ({error.msg})") from None
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
    keys: dict[str, None] = {}
    for record in records:
        keys.update(dict.fromkeys(record))
    for key in keys:
        values = [record.get(key) for record in records]
        present = [v for v in values if v is not None]
        if not present:
            continue
        if all(isinstance(v, list) for v in present):
            if any(isinstance(item, (dict, list, str)) for v in present for item in v[:1]):
                dump.ignore(key, f"ignored non-numeric per-token field '{key}'")
                continue
            absent = [n for n, v in zip(numbers, values, strict=True) if v is None]
            if absent:
                # an optional tensor on some lines only: its section is then null with a
                # warning (a required one is reported missing by the loader)
                more = f" and {len(absent) - 1} other line(s)" if len(absent) > 1 else ""
                dump.warn(
                    f"dropped per-token field '{key}': missing on line {absent[0]}{more}", key
                )
                continue
            rows = []
            # nothing is absent here, so ``present`` is ``values`` without the None
            for number, v in zip(numbers, present, strict=True):
                try:
                    rows.append(_json_row(v))
                except (TypeError, ValueError):
                    raise JsonLineError(
                        path, number, f"field '{key}' is not a list of numbers"
                    ) from None
            dump.columns[key] = rows
            dump.ragged.add(key)
        elif all(isinstance(v, int) and not isinstance(v, bool) for v in present):
            if len(present) == len(values):
                dump.columns[key] = torch.tensor(values, dtype=torch.long)
            else:
                dump.columns[key] = torch.tensor(
                    [math.nan if v is None else float(v) for v in values], dtype=torch.float64
                )
        elif all(isinstance(v, (int, float, bool)) for v in present):
            dump.columns[key] = torch.tensor(
                [math.nan if v is None else float(v) for v in values], dtype=torch.float64
            )
        elif all(isinstance(v, (str, int)) for v in present):
            dump.columns[key] = values  # None stays None: a missing label is not a label
        else:
            dump.ignore(key, f"ignored field '{key}' of mixed or nested type")
    return dump


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
