"""Sample files for evaluation (DESIGN 2.2): JSON lines in a flat or a grouped layout.

Flat: one sample a line, e.g.
``{"problem_id": 7, "response": "...", "correct": true, "method": "grpo", "sample_index": 3}``.
Grouped: one problem a line with parallel lists, e.g. the Qwen2.5-Math evaluation output
``{"idx": 7, "code": ["...", ...], "score": [true, ...]}``.

Layout detection, per file, from its first non-blank line: if the response field holds a
list the file is grouped, if it holds a string the file is flat; every later line must
agree. Field names are looked up per file in the first line too: an explicit name is
used as given; otherwise the first candidate present wins (problem: ``problem_id``,
``idx``; response: ``response``, ``code``; correctness: ``correct``, ``score``).

Correctness values: JSON true/false, the integers 0 and 1, the floats 0.0 and 1.0, and
the strings "true"/"false" (any case). Anything else (2, 0.5, "yes", null) is an error,
because guessing would silently change Pass@k.

Methods: the method field of a line when present (a string), else the file name stem,
so ``base.jsonl grpo.jsonl`` compare two systems side by side. Samples of one method
may be spread over several files; problems keep the order of their first appearance.
The method and dataset fields are optional under their default names; a name given
explicitly must appear on at least one line of each file, since a mistyped name would
otherwise silently fall back to the file stem (or to no dataset).

Files that are not samples are recognised from their first line and named as such: a
ratioscope report (a JSON document with ``schema_version``), any other JSON document
spread over several lines, a binary file or a text file whose first line is not JSON.

Sample indices: the ``sample_index`` field in the flat layout (optional, all or none of
a problem's samples), the list position in the grouped layout. A repeated index within
one problem of one method is an error.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ratioscope.errors import JsonLineError, SampleError, UnreadablePathError, UsageError

PROBLEM_CANDIDATES = ("problem_id", "idx")
RESPONSE_CANDIDATES = ("response", "code")
CORRECT_CANDIDATES = ("correct", "score")

_TRUE_STRINGS = {"true"}
_FALSE_STRINGS = {"false"}


DEFAULT_METHOD_FIELD = "method"
DEFAULT_DATASET_FIELD = "dataset"


@dataclass(frozen=True)
class SampleFields:
    """Field names of a sample file.

    None means the default: the first candidate present for the problem, response and
    correctness fields, the optional ``method`` and ``dataset`` fields for the others.
    A method or dataset name given explicitly must be on some line of every file.
    """

    problem: str | None = None
    response: str | None = None
    correct: str | None = None
    method: str | None = None
    dataset: str | None = None
    sample_index: str = "sample_index"
    #: an empty response is usually a broken export; keep it only when asked to
    allow_empty: bool = False

    def optional_names(self) -> dict[str, str | None]:
        """{role: name given} of the optional fields (method, dataset)."""
        return {"method": self.method, "dataset": self.dataset}


@dataclass(frozen=True)
class SampleFile:
    """What was read from one input file (the ``inputs`` block of an eval report)."""

    path: str
    format: str
    layout: str
    sha256: str
    problems: int
    samples: int
    methods: tuple[str, ...]
    fields: dict[str, str]


@dataclass(frozen=True)
class ProblemSamples:
    """All samples of one problem under one method.

    Attributes:
        problem_id: the id as written in the file (int or str).
        responses: n responses, in sample-index order when indices exist.
        correct: [n] bool.
        sample_index: [n] int64, or None when the file gives no indices.
        dataset: the dataset name, or None.
        source: (file, line) where the problem first appears, for error messages.
    """

    problem_id: int | str
    responses: tuple[str, ...]
    correct: np.ndarray
    sample_index: np.ndarray | None
    dataset: str | None
    source: tuple[str, int]

    @property
    def n(self) -> int:
        return len(self.responses)

    @property
    def c(self) -> int:
        return int(self.correct.sum())


@dataclass(frozen=True)
class MethodSamples:
    """The problems of one method, in order of first appearance."""

    method: str
    problems: tuple[ProblemSamples, ...]

    @property
    def samples(self) -> int:
        return sum(p.n for p in self.problems)

    def counts(self) -> tuple[np.ndarray, np.ndarray]:
        """([P] n, [P] c) as int64 arrays."""
        n = np.fromiter((p.n for p in self.problems), dtype=np.int64, count=len(self.problems))
        c = np.fromiter((p.c for p in self.problems), dtype=np.int64, count=len(self.problems))
        return n, c


@dataclass(frozen=True)
class SampleSet:
    """Samples of one or more methods, read from one or more files."""

    methods: dict[str, MethodSamples]
    files: tuple[SampleFile, ...]

    def method(self, name: str) -> MethodSamples:
        if name not in self.methods:
            raise UsageError(
                f"no method '{name}' in the samples; methods found: {', '.join(self.methods)}"
            )
        return self.methods[name]


@dataclass
class _ProblemBuilder:
    problem_id: int | str
    source: tuple[str, int]
    dataset: str | None
    responses: list[str] = field(default_factory=list)
    correct: list[bool] = field(default_factory=list)
    indices: list[int | None] = field(default_factory=list)
    lines: list[tuple[str, int]] = field(default_factory=list)
    grouped: bool = False


def load_samples(
    paths: Sequence[str | Path] | str | Path, fields: SampleFields | None = None
) -> SampleSet:
    """Read sample files (flat or grouped JSON lines) into a :class:`SampleSet`.

    Raises:
        UnreadablePathError: a path cannot be read.
        JsonLineError: a line is not a JSON object or lacks a field.
        SampleError: a value is of the wrong kind, or samples conflict (duplicated
            sample index, a problem repeated in a grouped file, no samples at all).
    """
    if isinstance(paths, (str, Path)):
        paths = [paths]
    fields = fields or SampleFields()
    builders: dict[str, dict[Any, _ProblemBuilder]] = {}
    files = [_read_file(Path(path), fields, builders) for path in paths]
    methods = {
        name: MethodSamples(name, tuple(_finish(b) for b in problems.values()))
        for name, problems in builders.items()
    }
    return SampleSet(methods=methods, files=tuple(files))


def _lines(path: Path, digest: Any) -> Iterator[tuple[int, str]]:
    try:
        handle = path.open("rb")
    except OSError as error:
        raise UnreadablePathError(
            path, f"cannot read the samples file ({error.strerror or error})"
        ) from None
    first = True
    with handle:
        for number, raw in enumerate(handle, start=1):
            digest.update(raw)
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError:
                if first:  # a dump, an archive or a Parquet file given by mistake
                    raise _not_samples(path, "binary data, not UTF-8 text") from None
                raise JsonLineError(path, number, "not valid UTF-8 text") from None
            if text.strip():
                first = False
                yield number, text


_REPORT = "this is a ratioscope report, not a samples JSONL file"


def _not_samples(path: Path, why: str) -> SampleError:
    return SampleError(path, f"not a JSON-lines samples file ({why})")


def _is_report(record: Any) -> bool:
    """A ratioscope report document (analyze, eval, merge), not a sample."""
    if not isinstance(record, dict) or "schema_version" not in record:
        return False
    tool = record.get("tool")
    from_us = isinstance(tool, dict) and tool.get("name") == "ratioscope"
    return from_us or "by_method" in record or "ratios" in record


def _first_record(path: Path, number: int, text: str) -> dict[str, Any]:
    """The first line as a JSON object, or an error saying what the file is instead."""
    stripped = text.strip()
    if stripped in ("{", "["):
        raise _whole_document_error(path)
    try:
        record = json.loads(text)
    except json.JSONDecodeError as error:
        if stripped.startswith("{"):  # a sample line, broken: say where
            raise JsonLineError(
                path, number, f"not valid JSON ({error.msg} at column {error.colno})"
            ) from None
        raise _not_samples(path, f"line {number} is not JSON: {error.msg}") from None
    if _is_report(record):
        raise SampleError(path, _REPORT)
    if not isinstance(record, dict):
        raise JsonLineError(path, number, f"expected a JSON object, got {_kind(record)}")
    return record


def _whole_document_error(path: Path) -> SampleError:
    """The file opens a JSON document over several lines: a report, or another JSON file."""
    try:
        document = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        document = None
    if _is_report(document):
        return SampleError(path, _REPORT)
    why = "one JSON document over several lines; a samples file has one JSON object a line"
    return _not_samples(path, why)


def _parse(path: Path, number: int, text: str) -> dict[str, Any]:
    try:
        record = json.loads(text)
    except json.JSONDecodeError as error:
        raise JsonLineError(
            path, number, f"not valid JSON ({error.msg} at column {error.colno})"
        ) from None
    if not isinstance(record, dict):
        raise JsonLineError(path, number, f"expected a JSON object, got {_kind(record)}")
    return record


def _resolve(
    path: Path,
    number: int,
    record: dict[str, Any],
    given: str | None,
    candidates: tuple,
    role: str,
) -> str:
    options = (given,) if given else candidates
    for name in options:
        if name in record:
            return name
    found = ", ".join(sorted(record)) or "none"
    if given:
        problem = f"line {number} has no {role} field '{given}' (--{role}-field)"
        raise SampleError(path, f"{problem}; fields found: {found}")
    wanted = " or ".join(f"'{name}'" for name in options)
    hint = "; name it with the matching --*-field option"
    raise JsonLineError(path, number, f"missing field {wanted} (fields found: {found}){hint}")


def _read_file(
    path: Path, fields: SampleFields, builders: dict[str, dict[Any, _ProblemBuilder]]
) -> SampleFile:
    if path.is_dir():
        raise UnreadablePathError(path, "is a directory, not a samples file")
    digest = hashlib.sha256()
    names: dict[str, str] | None = None
    layout = ""
    problems: set[Any] = set()  # distinct problem ids, whichever methods answered them
    samples = 0
    file_methods: dict[str, None] = {}
    # explicitly named optional fields not seen on any line yet: role -> field name
    unseen = {role: name for role, name in fields.optional_names().items() if name}
    first_keys: list[str] = []
    lines = _lines(path, digest)
    try:
        for number, text in lines:
            if names is None:
                record = _first_record(path, number, text)
                first_keys = sorted(record)
                names = _field_names(path, number, record, fields)
                layout = _detect_layout(path, number, record[names["response"]], names["response"])
            else:
                record = _parse(path, number, text)
            if unseen:
                unseen = {role: name for role, name in unseen.items() if name not in record}
            method = _method(path, number, record, fields.method or DEFAULT_METHOD_FIELD)
            file_methods.setdefault(method)
            add = _add_grouped if layout == "grouped" else _add_flat
            key, count = add(path, number, record, names, fields, builders.setdefault(method, {}))
            problems.add(key)
            samples += count
    except (SampleError, JsonLineError):
        # a mistyped method field makes two methods' samples collide; name the real cause
        if unseen and not _seen_later(lines, unseen):
            raise _unseen_field(path, unseen, first_keys) from None
        raise
    if names is None:
        raise SampleError(path, "contains no samples (the file is empty)")
    if unseen:
        raise _unseen_field(path, unseen, first_keys)
    return SampleFile(
        path=str(path),
        format="jsonl",
        layout=layout,
        sha256=digest.hexdigest(),
        problems=len(problems),
        samples=samples,
        methods=tuple(file_methods),
        fields=names,
    )


def _field_names(
    path: Path, number: int, record: dict[str, Any], fields: SampleFields
) -> dict[str, str]:
    return {
        "problem": _resolve(path, number, record, fields.problem, PROBLEM_CANDIDATES, "problem"),
        "response": _resolve(
            path, number, record, fields.response, RESPONSE_CANDIDATES, "response"
        ),
        "correct": _resolve(path, number, record, fields.correct, CORRECT_CANDIDATES, "correct"),
    }


def _seen_later(lines: Iterator[tuple[int, str]], unseen: dict[str, str]) -> bool:
    """Whether the rest of the file has every field of ``unseen`` on some line."""
    missing = set(unseen.values())
    for _, text in lines:
        try:
            record = json.loads(text)
        except json.JSONDecodeError:
            continue
        if isinstance(record, dict):
            missing.difference_update(record)
        if not missing:
            return True
    return False


def _unseen_field(path: Path, unseen: dict[str, str], first_keys: list[str]) -> SampleError:
    role, name = next(iter(unseen.items()))
    found = ", ".join(first_keys) or "none"
    problem = f"no line has the {role} field '{name}' named by --{role}-field"
    return SampleError(path, f"{problem}; fields on the first line: {found}")


def _detect_layout(path: Path, number: int, value: Any, name: str) -> str:
    if isinstance(value, list):
        return "grouped"
    if isinstance(value, str):
        return "flat"
    raise SampleError(
        path,
        f"line {number}: field '{name}' is {_kind(value)}; expected a string (flat layout, "
        "one sample a line) or a list of strings (grouped layout, one problem a line)",
    )


def _method(path: Path, number: int, record: dict[str, Any], name: str) -> str:
    value = record.get(name)
    if value is None:
        return path.stem
    if not isinstance(value, str) or not value:
        raise SampleError(
            path, f"line {number}: field '{name}' must be a non-empty string, got {value!r}"
        )
    return value


def _problem_key(path: Path, number: int, record: dict[str, Any], name: str) -> Any:
    value = record[name]
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise SampleError(
            path, f"line {number}: field '{name}' must be a string or an integer, got {value!r}"
        )
    return value


def _dataset(path: Path, number: int, record: dict[str, Any], name: str) -> str | None:
    value = record.get(name)
    if value is None or isinstance(value, str):
        return value
    raise SampleError(path, f"line {number}: field '{name}' must be a string, got {value!r}")


def parse_correct(value: Any) -> bool | None:
    """A correctness value as a bool, or None when it is not one of the accepted forms.

    >>> [parse_correct(v) for v in (True, 0, 1.0, "False", 2, "yes", None)]
    [True, False, True, False, None, None, None]
    """
    if isinstance(value, bool):
        return value
    if isinstance(value, int):
        return bool(value) if value in (0, 1) else None
    if isinstance(value, float):
        return bool(value) if value in (0.0, 1.0) and math.isfinite(value) else None
    if isinstance(value, str):
        lowered = value.strip().lower()
        if lowered in _TRUE_STRINGS:
            return True
        if lowered in _FALSE_STRINGS:
            return False
    return None


def _correct(path: Path, number: int, value: Any, name: str) -> bool:
    parsed = parse_correct(value)
    if parsed is None:
        raise SampleError(
            path,
            f'line {number}: field \'{name}\' must be true/false, 0/1 or "true"/"false", '
            f"got {value!r}",
        )
    return parsed


def _response(path: Path, number: int, value: Any, name: str, allow_empty: bool) -> str:
    if not isinstance(value, str):
        raise SampleError(
            path, f"line {number}: field '{name}' must be a string, got {_kind(value)}"
        )
    if not value.strip() and not allow_empty:
        raise SampleError(
            path,
            f"line {number}: field '{name}' is an empty response; fix the export, or pass "
            "--allow-empty-responses if the model really generated nothing",
        )
    return value


def _sample_index(path: Path, number: int, value: Any, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise SampleError(
            path, f"line {number}: field '{name}' must be a non-negative integer, got {value!r}"
        )
    return value


def _builder(
    path: Path,
    number: int,
    record: dict[str, Any],
    names: dict[str, str],
    fields: SampleFields,
    problems: dict[Any, _ProblemBuilder],
) -> tuple[Any, _ProblemBuilder]:
    key = _problem_key(path, number, record, names["problem"])
    dataset = _dataset(path, number, record, fields.dataset or DEFAULT_DATASET_FIELD)
    builder = problems.get(key)
    if builder is None:
        builder = _ProblemBuilder(key, (str(path), number), dataset)
        problems[key] = builder
    elif dataset is not None and builder.dataset is not None and dataset != builder.dataset:
        raise SampleError(
            path,
            f"line {number}: problem {key!r} has dataset '{dataset}' here but "
            f"'{builder.dataset}' at {builder.source[0]} line {builder.source[1]}",
        )
    elif builder.dataset is None:
        builder.dataset = dataset
    return key, builder


def _require(path: Path, number: int, record: dict[str, Any], names: dict[str, str]) -> None:
    for name in names.values():
        if name not in record:
            found = ", ".join(sorted(record)) or "none"
            raise JsonLineError(path, number, f"missing field '{name}' (fields found: {found})")


def _add_flat(path, number, record, names, fields, problems) -> tuple[Any, int]:
    _require(path, number, record, names)
    response = record[names["response"]]
    if isinstance(response, list):
        raise SampleError(
            path,
            f"line {number}: field '{names['response']}' is a list, but the first line of "
            "the file made it a flat file (one sample a line)",
        )
    key, builder = _builder(path, number, record, names, fields, problems)
    if builder.grouped:
        raise SampleError(path, f"line {number}: problem {key!r} also appears in a grouped file")
    index = record.get(fields.sample_index)
    builder.responses.append(
        _response(path, number, response, names["response"], fields.allow_empty)
    )
    builder.correct.append(_correct(path, number, record[names["correct"]], names["correct"]))
    builder.indices.append(
        None if index is None else _sample_index(path, number, index, fields.sample_index)
    )
    builder.lines.append((str(path), number))
    return key, 1


def _add_grouped(path, number, record, names, fields, problems) -> tuple[Any, int]:
    _require(path, number, record, names)
    responses, correct = record[names["response"]], record[names["correct"]]
    for name, value in ((names["response"], responses), (names["correct"], correct)):
        if not isinstance(value, list):
            raise SampleError(
                path,
                f"line {number}: field '{name}' is {_kind(value)}, but the first line of the "
                "file made it a grouped file (lists of samples)",
            )
    if not responses:
        raise SampleError(path, f"line {number}: field '{names['response']}' is an empty list")
    if len(correct) != len(responses):
        raise SampleError(
            path,
            f"line {number}: field '{names['correct']}' has {len(correct)} values but "
            f"'{names['response']}' has {len(responses)} responses",
        )
    before = len(problems)
    key, builder = _builder(path, number, record, names, fields, problems)
    if len(problems) == before:
        first = builder.source
        raise SampleError(
            path,
            f"line {number}: problem {key!r} was already given at {first[0]} line {first[1]}; "
            "a grouped file needs one line per problem and method",
        )
    builder.grouped = True
    indices = record.get(fields.sample_index)
    if indices is None:
        indices = list(range(len(responses)))
    elif not isinstance(indices, list) or len(indices) != len(responses):
        raise SampleError(
            path,
            f"line {number}: field '{fields.sample_index}' must be a list as long as "
            f"'{names['response']}'",
        )
    for response, value, index in zip(responses, correct, indices, strict=True):
        builder.responses.append(
            _response(path, number, response, names["response"], fields.allow_empty)
        )
        builder.correct.append(_correct(path, number, value, names["correct"]))
        builder.indices.append(_sample_index(path, number, index, fields.sample_index))
        builder.lines.append((str(path), number))
    return key, len(responses)


def _finish(builder: _ProblemBuilder) -> ProblemSamples:
    indices = builder.indices
    given = [i for i in indices if i is not None]
    correct = np.asarray(builder.correct, dtype=bool)
    responses = tuple(builder.responses)
    sample_index = None
    if given:
        if len(given) != len(indices):
            missing = builder.lines[indices.index(None)]
            raise SampleError(
                missing[0],
                f"line {missing[1]}: this sample of problem {builder.problem_id!r} has no "
                "sample index but others do; give all of a problem's samples an index or none",
            )
        sample_index = np.asarray(given, dtype=np.int64)
        order = np.argsort(sample_index, kind="stable")
        sample_index = sample_index[order]
        repeated = np.flatnonzero(np.diff(sample_index) == 0)
        if repeated.size:
            first, second = order[repeated[0]], order[repeated[0] + 1]
            where_first, where_second = builder.lines[first], builder.lines[second]
            raise SampleError(
                where_second[0],
                f"line {where_second[1]}: sample index {int(sample_index[repeated[0]])} of "
                f"problem {builder.problem_id!r} repeats the one at line {where_first[1]}",
            )
        correct = correct[order]
        responses = tuple(responses[i] for i in order.tolist())
    return ProblemSamples(
        problem_id=builder.problem_id,
        responses=responses,
        correct=correct,
        sample_index=sample_index,
        dataset=builder.dataset,
        source=builder.source,
    )


def _kind(value: Any) -> str:
    if value is None:
        return "null"
    return {
        bool: "a boolean",
        int: "a number",
        float: "a number",
        str: "a string",
        list: "a list",
        dict: "an object",
    }.get(type(value), type(value).__name__)
