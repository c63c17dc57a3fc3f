"""One large dump file analysed chunk by chunk, straight from the file.

:func:`open_stream` decides whether a file is streamed (its size reaches
``LoadOptions.stream_bytes``, its type can be read by row ranges, and its layout needs
no framework hook that reads the whole file) and gives a :class:`StreamedFile`, whose
:meth:`StreamedFile.chunks` are the batches ``load_file(path).iter_chunks(rows)`` would
give: the same rows, padded to the file's width, with the file's dtypes and its group ids
(labels numbered in order of first appearance over the whole file), validated by the same
:meth:`TokenBatch.from_tensors`. So the numbers of a streamed file are those of the file
read whole; only the memory differs: one chunk instead of the file several times over.

What the whole file decides is carried from chunk to chunk: the group labels seen so
far, the padding found, the valid tokens, and the warnings of ``nonfinite="mask"``
(counts added up, the first position kept in file rows). Errors raised for a chunk name
the file's rows, not the chunk's (a count in such a message is the chunk's).
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Collection, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from ratioscope import defaults
from ratioscope.data.batch import TOKEN_FLOAT_KEYS, TokenBatch
from ratioscope.errors import EmptyDumpError, InputError, NonFiniteError, ParameterError
from ratioscope.io.chunks import (
    ChunkSource,
    JsonLinesSource,
    NpzSource,
    ParquetSource,
    SafetensorsSource,
    open_pt,
)
from ratioscope.io.loaders import (
    LoadOptions,
    _canonical_columns,
    _consecutive_groups,
    _refuse_text_log,
    bind_correct_field,
    bind_default_correct,
)
from ratioscope.io.profiles import Profile, detect_profile, get_profile, resolve_keys
from ratioscope.io.readers import file_format_of

#: files from this size on are streamed unless ``stream_bytes`` or the variable says
DEFAULT_STREAM_BYTES = 128 << 20
STREAM_BYTES_VARIABLE = "RATIOSCOPE_STREAM_BYTES"


def stream_threshold(options: LoadOptions) -> int:
    """The file size from which files are streamed (``LoadOptions.stream_bytes``, else
    ``RATIOSCOPE_STREAM_BYTES``, else 128 MiB)."""
    if options.stream_bytes is not None:
        return options.stream_bytes
    value = os.environ.get(STREAM_BYTES_VARIABLE, "").strip()
    if value:
        try:
            return int(float(value))
        except ValueError:
            raise ParameterError(
                "stream_bytes", f"is '{value}' in {STREAM_BYTES_VARIABLE}, not a number of bytes"
            ) from None
    return DEFAULT_STREAM_BYTES


def open_stream(path: Path, options: LoadOptions) -> StreamedFile | None:
    """The file as a stream of chunks, or None when it is read whole (too small, a type
    or layout that needs the whole file, or rows that cannot be read apart).

    Raises:
        InputError: the file is unreadable, or lacks its mask (as reading it whole would).
        NotADumpError: the file is a samples file or a text log.
    """
    from ratioscope.io.limits import start_thread_pool

    if path.stat().st_size < stream_threshold(options):
        return None
    start_thread_pool()  # while memory is plentiful (see there)
    source = _open_source(path, file_format_of(path))
    if source is None:
        return None
    try:
        stream = _bind(path, source, options)
    except BaseException:
        source.close()
        raise
    if stream is None:
        source.close()
    return stream


def _open_source(path: Path, kind: str) -> ChunkSource | None:
    if kind == "safetensors":
        return SafetensorsSource(path)
    if kind == "npz":
        return NpzSource(path)
    if kind == "parquet":
        return ParquetSource(path)
    if kind == "pt":
        return open_pt(path)
    if kind == "jsonl":
        from ratioscope.io.frameworks import nemo_rl

        source = JsonLinesSource(path)
        if source.first is not None and all(k in source.first for k in nemo_rl.SIGNATURE):
            source.close()  # NeMo-RL's lines are unwrapped and prepared whole
            return None
        return source
    return None  # pickles: SkyRL's is decoded whole


def _bind(path: Path, source: ChunkSource, options: LoadOptions) -> StreamedFile | None:
    header = source.header
    profile = (
        detect_profile(header.columns, header.meta.get("ratioscope_profile"))
        if options.format == "auto"
        else get_profile(options.format)
    )
    if options.format == "auto" and profile.name == "canonical":
        _refuse_text_log(path, header)
    if profile.native or any(key in header.columns for key in profile.mask_factors):
        return None  # a framework hook (or a mask factor) reads the whole file
    key_map = resolve_keys(profile, header.columns, options.mapping)
    key_map = bind_correct_field(path, profile, list(header.columns), key_map, options)
    # correctness of several reward functions is decided over the whole file, before its
    # chunks (each read alone could decide otherwise): their columns, one value a row
    key_map, threshold, correct_note = bind_default_correct(
        list(header.columns), key_map, options,
        lambda keys: _whole_columns(source, key_map.get("mask", "mask"), keys),
    )  # fmt: skip
    names = {c: names[0] for c, names in profile.keys.items()}
    if key_map.get("mask") not in header.columns:
        # the same sentence as reading the file whole, without reading it
        TokenBatch.from_tensors(
            {}, source=str(path), key_map=key_map, expected_names=names,
            file_keys=list(header.columns),
        )  # fmt: skip
    if not source.bind(key_map):
        return None
    if source.rows == 0:
        return None  # the whole read says what is wrong with an empty file
    if options.group_size and not profile.consecutive_rows:
        raise ParameterError(
            "group_size",
            f"assumes consecutive groups, but this is a {profile.name} file: {profile.groups}",
            path=path,
        )
    groups = None
    if options.group_size and "group" not in key_map:
        groups = _consecutive_groups(path, source.rows, options.group_size)
    stream = StreamedFile(path, source, options, profile, key_map, names, groups)
    stream.correct_threshold, stream.correct_note = threshold, correct_note
    if correct_note is not None:
        stream.totals.warnings.setdefault(correct_note, None)
    return stream


def _whole_columns(source: ChunkSource, mask: str, keys: list[str]) -> dict[str, Any]:
    """Every row of ``keys`` (per-sequence columns: small), read before the chunks, a
    few thousand rows at a time (with the mask, which a source reads rows by)."""
    if not source.bind({"mask": mask, **{key: key for key in keys}}):
        return {key: [] for key in keys}
    parts: dict[str, list[Any]] = {key: [] for key in keys}
    for start in range(0, source.rows, _FUNCTION_ROWS):
        columns = source.read(start, min(start + _FUNCTION_ROWS, source.rows))
        for key in keys:
            value = columns[key]
            parts[key].extend(value.reshape(-1).tolist() if isinstance(value, Tensor) else value)
    return parts


#: rows of the reward functions read at a time before the chunks
_FUNCTION_ROWS = 4096


@dataclass
class FileTotals:
    """What the chunks of a file add up to; complete once every chunk was read."""

    tokens: int = 0
    padding: str = "right"
    ratio_pair: str = "current/old"
    group_index: dict[Any, int] = field(default_factory=dict)
    #: other warnings of the chunks, first occurrence kept
    warnings: dict[str, None] = field(default_factory=dict)
    #: ("token", name) or ("reward", "") -> [count, first row, first column]
    masked: dict[tuple[str, str], list[int]] = field(default_factory=dict)


class StreamedFile:
    """A file read and validated one chunk of rows at a time (see the module docstring).

    Attributes:
        path: the file; ``rows`` its sequences; ``width`` its padded length T.
        totals: what the chunks read so far add up to (:class:`FileTotals`).
    """

    def __init__(
        self,
        path: Path,
        source: ChunkSource,
        options: LoadOptions,
        profile: Profile,
        key_map: dict[str, str],
        names: dict[str, str],
        groups: Tensor | None,
    ) -> None:
        self.path = path
        self.source = source
        self.options = options
        self.profile = profile
        self.key_map = key_map
        self.names = names
        self.groups = groups
        self.rows = source.rows
        ragged_width = source.width()
        self.width = max(ragged_width, 1) if ragged_width is not None else None
        self.totals = FileTotals()
        #: the threshold that makes ``correct`` (the rule's, or 0.5 of a 0/1 reward
        #: function chosen for the whole file) and the warning of that choice
        rule = options.correct_rule()
        self.correct_threshold: float | None = rule and rule[1]
        self.correct_note: str | None = None
        #: the keys the source reads now (a later pass may read fewer)
        self.read_map = key_map
        used = set(key_map.values())
        self.file_keys = list(source.header.columns)
        self.ignored = sorted(k for k in self.file_keys if k not in used)

    @property
    def file_format(self) -> str:
        return self.source.header.file_format

    def chunks(
        self,
        chunk_elements: int,
        *,
        again: bool = False,
        close: bool = True,
        only: Collection[str] | None = None,
    ) -> Iterator[TokenBatch]:
        """The file's chunks in order: ``chunk_rows(chunk_elements, T)`` rows each
        (:func:`ratioscope.defaults.chunk_rows`), T the padded length of the whole file
        (as for a file read whole).

        Args:
            chunk_elements: rows x T per chunk.
            again: a later pass over a file whose chunks were all read once: the same
                batches (group ids numbered as the first pass numbered them), read and
                validated again, with nothing added to :attr:`totals`.
            close: release the file after the last chunk (or an error); without it the
                file stays open for another pass, until :meth:`close`.
            only: with ``again``, the canonical tensors the pass reads; the others are
                not read (the mask, the ratio's log-probs and the group always are). It
                applies with ``nonfinite="error"``, where no other tensor can change the
                mask (the first pass would have stopped); with ``"mask"`` every tensor
                is read again.

        Raises:
            InputError: a chunk is invalid (rows named as in the file), or no row of the
                file holds a valid token.
        """
        rows = defaults.chunk_rows(chunk_elements, self.padded_width())
        self._read_only(only if again and self.options.nonfinite == "error" else None)
        try:
            for start in range(0, self.rows, rows):
                stop = min(start + rows, self.rows)
                batch = self._chunk(start, stop, again)
                yield batch
                self.source.done(start, stop)
        except BaseException:
            self.close()
            raise
        if close:
            self.close()
        if self.totals.tokens == 0:
            raise EmptyDumpError(self.path, "the mask marks no valid token")

    def close(self) -> None:
        """Release the file (no further pass)."""
        self.source.close()

    def _read_only(self, only: Collection[str] | None) -> None:
        """Bind the source to the keys of ``only`` (and those every chunk needs), or to
        every key for None."""
        if only is None:
            read = self.key_map
        else:
            wanted = set(only) | _ALWAYS_READ
            read = {c: k for c, k in self.key_map.items() if c in wanted}
        if read != self.read_map:
            if not self.source.bind(read):
                raise AssertionError("a subset of the bound keys could not be bound")
            self.read_map = read

    def padded_width(self) -> int:
        """T: the longest row of a ragged file, the mask's second dimension otherwise."""
        if self.width is not None:
            return self.width
        mask = self.source.read(0, 1).get(self.key_map["mask"])
        self.width = int(mask.shape[1]) if isinstance(mask, Tensor) and mask.dim() == 2 else 1
        return self.width

    def warnings(self) -> list[str]:
        """The file's loading warnings, in the order a whole read gives them."""
        notes = [f"{self.path}: {text}" for text in self.source.header.texts("warning")]
        masked = []
        order = [self.key_map.get(c, self.names.get(c, c)) for c in TOKEN_FLOAT_KEYS]
        for (kind, name), (count, row, column) in sorted(
            self.totals.masked.items(),
            key=lambda item: (item[0][0] == "reward", _rank(order, item[0][1])),
        ):
            if kind == "token":
                masked.append(
                    f"{self.path}: masked {count} token(s) with non-finite '{name}' "
                    f"(first at (row, column) = ({row}, {column}))"
                )
            else:
                masked.append(
                    f"{self.path}: masked {count} sequence(s) with a non-finite reward "
                    f"(first at row {row})"
                )
        return notes + list(self.totals.warnings) + masked

    @property
    def group_labels(self) -> list[Any] | None:
        return list(self.totals.group_index) if self.totals.group_index else None

    # ----------------------------------------------------------------- one chunk
    def canonical(self, start: int, stop: int) -> dict[str, Any]:
        """Rows ``[start, stop)`` as canonical columns before validation (group labels
        as ids numbered over the whole file), for :func:`convert_to_safetensors`."""
        try:
            columns = self._columns(start, stop)
        except InputError as error:
            raise _in_file_rows(error, start) from None
        group = columns.get("group")
        if isinstance(group, list):
            index = self.totals.group_index
            columns["group"] = torch.tensor(
                [index.setdefault(label, len(index)) for label in group], dtype=torch.long
            )
        return columns

    def _columns(self, start: int, stop: int) -> dict[str, Any]:
        from ratioscope.data.raw import RawDump

        raw_columns = self.source.read(start, stop)
        raw = RawDump(
            columns=raw_columns,
            file_format=self.file_format,
            ragged={k for k in raw_columns if k in self.source.header.ragged},
            meta=self.source.header.meta,
        )
        canonical = _canonical_columns(
            self.path, raw, self.profile, self.read_map, self.width, self.correct_threshold
        )
        if self.groups is not None:
            canonical["group"] = self.groups[start:stop]
        return canonical

    def _chunk(self, start: int, stop: int, again: bool = False) -> TokenBatch:
        try:
            batch = self._validated(self._columns(start, stop))
        except InputError as error:
            raise _in_file_rows(error, start) from None
        return self._take(batch, start, again)

    def _validated(self, canonical: dict[str, Any]) -> TokenBatch:
        """``TokenBatch.from_tensors`` of the chunk; a chunk without a valid token is
        validated with one extra valid row and returned without it (the whole file is
        refused only if no chunk holds a valid token)."""
        try:
            return self._from_tensors(canonical)
        except EmptyDumpError:
            mask = canonical["mask"]
            if not isinstance(mask, Tensor) or mask.dim() != 2 or mask.shape[1] == 0:
                raise  # no token at all: the file is empty, whatever the other chunks
            rows = int(mask.shape[0])
            batch = self._from_tensors(_with_valid_row(canonical, rows))
            warnings = batch.warnings
            return replace(batch.select_rows(0, rows), warnings=warnings)

    def _from_tensors(self, canonical: dict[str, Any]) -> TokenBatch:
        return TokenBatch.from_tensors(
            canonical,
            source=str(self.path),
            profile=self.profile.name,
            file_format=self.file_format,
            key_map=self.key_map,
            ignored_keys=self.ignored,
            nonfinite=self.options.nonfinite,
            expected_names=self.names,
            file_keys=self.file_keys,
            default_correct=self.correct_note is None,
        )

    def _take(self, batch: TokenBatch, start: int, again: bool = False) -> TokenBatch:
        """File-wide facts from a chunk (not ``again``: a later pass adds nothing); its
        group ids renumbered over the whole file."""
        totals = self.totals
        if not again:
            totals.tokens += batch.num_tokens
            totals.ratio_pair = batch.ratio_pair
            if batch.padding == "left":
                totals.padding = "left"
            for text in batch.warnings:
                self._note(text, start)
        group = batch.group
        if group is not None and batch.group_labels is not None:
            index = totals.group_index
            lookup = torch.tensor(
                [index.setdefault(label, len(index)) for label in batch.group_labels],
                dtype=torch.long,
            )
            group = lookup[group] if group.numel() else group
        return replace(
            batch,
            group=group,
            group_labels=list(totals.group_index) if group is not None else None,
            row_offset=start,
            warnings=[],
        )

    def _note(self, text: str, start: int) -> None:
        token = _MASKED_TOKENS.match(text)
        reward = _MASKED_REWARDS.match(text)
        if token is not None:
            key = ("token", token["key"])
            first = [int(token["row"]) + start, int(token["column"])]
        elif reward is not None:
            key, first = ("reward", ""), [int(reward["row"]) + start, 0]
        else:
            self.totals.warnings.setdefault(text, None)
            return
        count = int((token or reward)["count"])  # type: ignore[index]
        if key in self.totals.masked:
            self.totals.masked[key][0] += count
        else:
            self.totals.masked[key] = [count, *first]


#: what a chunk needs whatever a pass reads: its mask, the log-probs its ratio compares
#: (which also decide the ratio pair) and its groups
_ALWAYS_READ = frozenset(
    {"mask", "log_ratio", "log_probs", "old_log_probs", "rollout_log_probs", "group"}
)

#: the warnings of ``nonfinite="mask"`` (ratioscope/data/batch.py), added up over chunks
_MASKED_TOKENS = re.compile(
    r".*: masked (?P<count>\d+) token\(s\) with non-finite '(?P<key>.*)' "
    r"\(first at \(row, column\) = \((?P<row>\d+), (?P<column>\d+)\)\)$"
)
_MASKED_REWARDS = re.compile(
    r".*: masked (?P<count>\d+) sequence\(s\) with a non-finite reward "
    r"\(first at row (?P<row>\d+)\)$"
)


def _rank(order: list[str], name: str) -> int:
    return order.index(name) if name in order else len(order)


def _with_valid_row(canonical: dict[str, Any], rows: int) -> dict[str, Any]:
    """The chunk and one more row whose first token is valid and every value 0 (or the
    chunk's first label), so that validation runs although the chunk has no valid token."""
    out: dict[str, Any] = {}
    for name, value in canonical.items():
        if isinstance(value, Tensor) and value.dim() >= 1 and value.shape[0] == rows:
            extra = torch.zeros((1, *value.shape[1:]), dtype=value.dtype)
            if name == "group":
                extra = value[:1].clone()  # an id of the chunk: no new label
            elif name == "mask":
                extra.view(1, -1)[0, 0] = 1
            out[name] = torch.cat([value, extra])
        elif isinstance(value, list) and len(value) == rows and rows:
            out[name] = [*value, value[0]]
        else:
            out[name] = value
    return out


_ROW_PATTERNS = (
    re.compile(r"(\(row, column\) = \()(\d+)"),
    re.compile(r"(at row )(\d+)"),
    re.compile(r"(\w\[)(\d+)(?=\])"),
)


def _in_file_rows(error: InputError, start: int) -> InputError:
    """``error`` of a chunk starting at file row ``start``, its rows counted in the file."""
    if start == 0:
        return error
    problem = error.problem
    for pattern in _ROW_PATTERNS:
        problem = pattern.sub(lambda m: f"{m[1]}{int(m[2]) + start}", problem)
    error.problem = problem
    error.args = (f"{error.path}: {problem}." if error.path is not None else f"{problem}.",)
    if isinstance(error, NonFiniteError) and error.first:
        error.first = (error.first[0] + start, *error.first[1:])
    return error


# --------------------------------------------------------------------------- convert
def convert_to_safetensors(path: Path, target: Path, options: LoadOptions | None = None) -> int:
    """Write the canonical columns of a dump to a safetensors file, chunk by chunk.

    The columns are those the loader validates (ragged rows padded on the right, group
    labels numbered in order of first appearance, per-token rewards reduced), before
    validation: left padding, masked garbage and non-finite values are kept, so the new
    file analyses as the old one did. A file that cannot be read by row ranges (a legacy
    ``.pt``, a framework layout read whole) is read whole once. Nothing is written on
    error.

    Returns:
        the number of sequences written.

    Raises:
        InputError: the input is unreadable or lacks its mask.
    """
    import json
    import struct

    from ratioscope.errors import UnreadablePathError
    from ratioscope.io.atomic import atomic_path

    if not path.is_file():
        what = "a directory: convert takes one dump file" if path.is_dir() else "no such file"
        raise UnreadablePathError(path, what)
    options = replace(options or LoadOptions(), stream_bytes=0)
    stream = open_stream(path, options) or _whole_as_stream(path, options)
    rows = max(1, (1 << 20) // max(1, stream.padded_width()))
    starts = range(0, stream.rows, rows)
    first = stream.canonical(0, min(rows, stream.rows))
    # a ``correct`` the file does not hold but its reward functions decide by default is
    # left to the reader of the new file, which decides it (and says so) as this one did
    skipped = {"correct"} if stream.correct_note is not None else set()
    layout = {
        k: (v.dtype, list(v.shape[1:]))
        for k, v in first.items()
        if isinstance(v, Tensor) and k not in skipped
    }
    header: dict[str, Any] = {"__metadata__": {"converted_by": "ratioscope convert"}}
    offsets: dict[str, int] = {}
    offset = 0
    for key, (dtype, tail) in layout.items():
        size = stream.rows * math.prod(tail) * torch.empty((), dtype=dtype).element_size()
        header[key] = {
            "dtype": _SAFETENSORS_NAMES[dtype],
            "shape": [stream.rows, *tail],
            "data_offsets": [offset, offset + size],
        }
        offsets[key] = offset
        offset += size
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    base = 8 + len(text)
    with atomic_path(target) as temporary, temporary.open("wb") as out:
        out.write(struct.pack("<Q", len(text)) + text)
        for start in starts:
            stop = min(start + rows, stream.rows)
            columns = first if start == 0 else stream.canonical(start, stop)
            for key, (dtype, tail) in layout.items():
                value = columns[key].to(dtype).contiguous()
                row_bytes = math.prod(tail) * value.element_size()
                out.seek(base + offsets[key] + start * row_bytes)
                out.write(value.reshape(-1).view(torch.uint8).numpy().tobytes())
            stream.source.done(start, stop)
        out.truncate(base + offset)
    stream.source.close()
    return stream.rows


_SAFETENSORS_NAMES = {
    torch.float64: "F64",
    torch.float32: "F32",
    torch.float16: "F16",
    torch.bfloat16: "BF16",
    torch.int64: "I64",
    torch.int32: "I32",
    torch.int16: "I16",
    torch.int8: "I8",
    torch.uint8: "U8",
    torch.bool: "BOOL",
}


def _whole_as_stream(path: Path, options: LoadOptions) -> StreamedFile:
    """A file read whole (and prepared by its framework's hook) as a stream of chunks."""
    from importlib import import_module

    from ratioscope.io.chunks import RawDumpSource
    from ratioscope.io.readers import read_raw

    raw = read_raw(path, unsafe_pickle=options.unsafe_pickle)
    profile = (
        detect_profile(raw.columns, raw.meta.get("ratioscope_profile"))
        if options.format == "auto"
        else get_profile(options.format)
    )
    if profile.native:
        raw = import_module(f"ratioscope.io.frameworks.{profile.native}").prepare(path, raw)
    source = RawDumpSource(path, raw)
    key_map = resolve_keys(profile, raw.columns, options.mapping)
    names = {c: names[0] for c, names in profile.keys.items()}
    if key_map.get("mask") not in raw.columns or not source.bind(key_map):
        # the loader's own sentence for what is wrong with the file
        from ratioscope.io.loaders import batch_from_raw

        batch_from_raw(path, raw, options)
        raise InputError(path, "its columns do not come one row per sequence")
    return StreamedFile(path, source, options, profile, key_map, names, None)
