"""What ``ratioscope info`` reports about a dump: layout, keys, sizes, feedable sections."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from torch import Tensor

from ratioscope.data.batch import TokenBatch
from ratioscope.data.raw import Ragged, as_ragged
from ratioscope.errors import InputError, NotADumpError
from ratioscope.io.loaders import FoundPath, LoadOptions, batch_from_raw, expand_paths, refuse_json
from ratioscope.io.profiles import get_profile
from ratioscope.io.readers import read_raw
from ratioscope.sections.registry import FEATURES

if TYPE_CHECKING:  # pragma: no cover
    from ratioscope.io.streaming import StreamedFile


@dataclass(frozen=True)
class KeyInfo:
    """One key of the file: its canonical role, shape and dtype."""

    key: str
    canonical: str | None
    shape: str
    dtype: str


@dataclass(frozen=True)
class Feature:
    section: str
    what: str
    available: bool
    missing: tuple[str, ...]


@dataclass(frozen=True)
class DumpInfo:
    """Summary of one dump file."""

    path: str
    file_format: str
    profile: str
    keys: list[KeyInfo]
    padding: str
    sequences: int
    tokens: int
    max_length: int
    length_min: int
    length_mean: float
    length_max: int
    groups: int | None
    group_sizes: dict[int, int] | None
    #: how the groups were formed, or why there are none and what would give them
    group_note: str
    #: what the log-ratio compares (a key of ratioscope.data.batch.RATIO_PAIRS)
    ratio_pair: str
    features: list[Feature]
    warnings: list[str]


@dataclass(frozen=True)
class OtherFile:
    """A file that is not a per-token dump (a text log, a framework's side table): what
    it is and which command takes it."""

    path: str
    what: str


def inspect_paths(
    paths: list[str | Path], options: LoadOptions | None = None, notes: list[str] | None = None
) -> list[DumpInfo | OtherFile]:
    """One :class:`DumpInfo` per dump named by ``paths``, an :class:`OtherFile` for a file
    of another kind named on its own (a text log, a side table, a report), which ``info``
    describes instead of failing.

    A file of another kind that a directory walk or a glob found is left out, with a note
    in ``notes``: the user asked about the dumps there.

    Raises:
        InputError: every file was left out so; the first one's sentence says why.
    """
    options = options or LoadOptions()
    infos: list[DumpInfo | OtherFile] = []
    skipped: list[NotADumpError] = []
    for path in expand_paths(paths):
        try:
            infos.append(inspect_file(path, options))
        except NotADumpError as error:
            if isinstance(path, FoundPath):
                skipped.append(error)
                if notes is not None:
                    notes.append(f"skipped {error}".rstrip("."))
            else:
                infos.append(OtherFile(path=str(path), what=error.problem))
    if not infos and skipped:
        raise InputError(None, f"no input holds token data: {skipped[0]}")
    return infos


def inspect_file(path: Path, options: LoadOptions) -> DumpInfo:
    """What ``info`` says of one dump; a file that :func:`ratioscope.io.streaming.open_stream`
    streams (a large one) is read chunk by chunk, with the same result as the whole read."""
    from ratioscope.io.streaming import open_stream

    refuse_json(path)
    stream = open_stream(path, options)
    if stream is not None:
        return _inspect_stream(stream, options)
    raw = read_raw(path, unsafe_pickle=options.unsafe_pickle)
    batch = batch_from_raw(path, raw, options)
    theirs_to_canonical = {theirs: canonical for canonical, theirs in batch.key_map.items()}
    keys = [
        KeyInfo(
            key=key,
            canonical=theirs_to_canonical.get(key),
            shape=_shape(value, key in raw.ragged),
            dtype=_dtype(value),
        )
        for key, value in raw.columns.items()
    ]
    lengths = batch.lengths.double()
    nonempty = lengths[lengths > 0]
    groups = group_sizes = None
    if batch.group is not None:
        sizes = batch.group.bincount()
        groups = int(sizes.numel())
        values, counts = sizes.unique(return_counts=True)
        group_sizes = dict(zip(values.tolist(), counts.tolist(), strict=True))
    features = [
        Feature(section, what, not missing, tuple(missing))
        for section, what, needs in FEATURES
        for missing in [[n for n in needs if not batch.has(n)]]
    ]
    features = _needs_a_method(features)
    return DumpInfo(
        group_note=_group_note(batch, options),
        ratio_pair=batch.ratio_pair,
        path=str(path),
        file_format=raw.file_format,
        profile=batch.profile,
        keys=keys,
        padding=batch.padding,
        sequences=batch.num_sequences,
        tokens=batch.num_tokens,
        max_length=batch.max_length,
        length_min=int(nonempty.min()) if nonempty.numel() else 0,
        length_mean=float(nonempty.mean()) if nonempty.numel() else 0.0,
        length_max=int(nonempty.max()) if nonempty.numel() else 0,
        groups=groups,
        group_sizes=group_sizes,
        features=features,
        warnings=batch.warnings + [f"{path}: {text}" for text in raw.texts("ignored")],
    )


#: rows x padded tokens per chunk when ``info`` reads a file chunk by chunk
INFO_CHUNK_ELEMENTS = 1 << 20


def _inspect_stream(stream: StreamedFile, options: LoadOptions) -> DumpInfo:
    """:func:`inspect_file` of a file read chunk by chunk: lengths, tokens, padding and
    group sizes added up over the chunks, the keys from the file's header (or one pass
    over its rows for the types whose header does not give their shapes)."""
    lengths: list[Tensor] = []
    group_rows = torch.zeros(0, dtype=torch.long)
    first: TokenBatch | None = None
    try:
        keys = _stream_keys(stream)
        for chunk in stream.chunks(INFO_CHUNK_ELEMENTS, close=False):
            first = first or chunk
            lengths.append(chunk.lengths)
            if chunk.group is not None:
                # ids are numbered over the whole file: the rows of each group add up
                counts = chunk.group.bincount()
                if counts.numel() > group_rows.numel():
                    grown = torch.zeros(counts.numel(), dtype=torch.long)
                    grown[: group_rows.numel()] = group_rows
                    group_rows = grown
                group_rows[: counts.numel()] += counts
    finally:
        stream.close()
    assert first is not None  # a streamed file has rows
    all_lengths = torch.cat(lengths).double()
    nonempty = all_lengths[all_lengths > 0]
    groups = group_sizes = None
    if first.group is not None:
        groups = int(group_rows.numel())
        values, counts = group_rows.unique(return_counts=True)
        group_sizes = dict(zip(values.tolist(), counts.tolist(), strict=True))
    features = [
        Feature(section, what, not missing, tuple(missing))
        for section, what, needs in FEATURES
        for missing in [[n for n in needs if not first.has(n)]]
    ]
    theirs_to_canonical = {theirs: canonical for canonical, theirs in stream.key_map.items()}
    ignored = [f"{stream.path}: {text}" for text in stream.source.header.texts("ignored")]
    return DumpInfo(
        group_note=_group_note(first, options),
        ratio_pair=stream.totals.ratio_pair,
        path=str(stream.path),
        file_format=stream.file_format,
        profile=first.profile,
        keys=[
            KeyInfo(key=key, canonical=theirs_to_canonical.get(key), shape=shape, dtype=dtype)
            for key, (shape, dtype) in keys.items()
        ],
        padding=stream.totals.padding,
        sequences=stream.rows,
        tokens=stream.totals.tokens,
        max_length=first.max_length,
        length_min=int(nonempty.min()) if nonempty.numel() else 0,
        length_mean=float(nonempty.mean()) if nonempty.numel() else 0.0,
        length_max=int(nonempty.max()) if nonempty.numel() else 0,
        groups=groups,
        group_sizes=group_sizes,
        features=_needs_a_method(features),
        warnings=stream.warnings() + ignored,
    )


def _stream_keys(stream: StreamedFile) -> dict[str, tuple[str, str]]:
    """Every key of a streamed file -> (shape, dtype) as :class:`KeyInfo` writes them."""
    from ratioscope.io.chunks import NpzSource, RawDumpSource, SafetensorsSource

    source = stream.source
    if isinstance(source, SafetensorsSource):
        return {
            key: ("x".join(str(d) for d in shape) or "scalar", _dtype_name(dtype))
            for key, (dtype, shape, _) in sorted(source.entries.items())
        }
    if isinstance(source, RawDumpSource):
        raw = source.raw
        return {k: (_shape(v, k in raw.ragged), _dtype(v)) for k, v in raw.columns.items()}
    if isinstance(source, NpzSource):
        keys = {}
        for key in source.header.columns:
            shape, _, dtype = source.layouts[key]
            if dtype.kind in "US":
                keys[key] = (f"{shape[0]} labels", "str")
            else:
                numeric = torch.from_numpy(np.zeros(0, dtype=dtype)).dtype
                keys[key] = ("x".join(str(d) for d in shape) or "scalar", _dtype_name(numeric))
        return keys
    # Parquet, JSON lines: one pass over the rows of every column
    parts: dict[str, list[Any]] = {}
    for columns in source.columns_by_rows(max(1, INFO_CHUNK_ELEMENTS // stream.padded_width())):
        for key, value in columns.items():
            parts.setdefault(key, []).append(value)
    ragged = source.header.ragged
    keys = {}
    for key, values in parts.items():
        if all(isinstance(v, Tensor) for v in values):
            keys[key] = (_shape(torch.cat(values), False), _dtype(values[0]))
        elif all(isinstance(v, Ragged) for v in values):
            keys[key] = (_shape(Ragged.joined(values), True), _dtype(values[0]))
        else:
            rows = [row for value in values for row in value]
            keys[key] = (_shape(rows, key in ragged), _dtype(rows))
    return keys


def _dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).replace("torch.", "")


#: group columns that ratioscope.io.frameworks derive rather than read
DERIVED_GROUP_COLUMNS = frozenset({"prompt_prefix_group", "prompt_group", "group_index"})


def _group_note(batch: TokenBatch, options: LoadOptions) -> str:
    profile = get_profile(batch.profile)
    if batch.group is not None:
        if options.group_size and "group" not in batch.key_map:
            return f"from --group-size {options.group_size}: consecutive rows"
        key = batch.key_map.get("group", "group")
        # a column a framework reader derived (prompt tokens, boundaries, a join) is
        # described by its layout; a column of the file is named
        return profile.groups if key in DERIVED_GROUP_COLUMNS else f"from '{key}'"
    if profile.consecutive_rows:
        return (
            "no group ids: GRPO groups (QUATRO, CW-GRPO group scope) need 'group'; if the "
            "rows come in consecutive groups of N completions of one prompt, pass "
            "--group-size N"
        )
    return f"no group ids: {profile.groups}"


def _needs_a_method(features: list[Feature]) -> list[Feature]:
    """FPA's split by correctness exists only when one of its two methods does."""
    methods = [f for f in features if f.section == "future_policy" and "FPA" in f.what]
    if any(f.available for f in methods):
        return features
    needs = tuple(dict.fromkeys(n for f in methods for n in f.missing))
    return [
        Feature(f.section, f.what, False, needs)
        if f.section == "future_policy" and f.available
        else f
        for f in features
    ]


def _shape(value: Any, ragged: bool) -> str:
    if isinstance(value, Tensor):
        return "x".join(str(d) for d in value.shape) or "scalar"
    if ragged:
        lengths = as_ragged(value).lengths()
        low, high = (int(lengths.min()), int(lengths.max())) if lengths.numel() else (0, 0)
        return f"{len(lengths)} sequences x {low}..{high} tokens (ragged)"
    return f"{len(value)} labels"


def _dtype(value: Any) -> str:
    if isinstance(value, (Tensor, Ragged)):
        return str(value.dtype).replace("torch.", "")
    if isinstance(value, list) and value and isinstance(value[0], Tensor):
        return str(value[0].dtype).replace("torch.", "")
    if isinstance(value, list) and value:
        return type(value[0]).__name__
    return "-"
