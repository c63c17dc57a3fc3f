"""Sample files for evaluation (docs/evaluation.md): JSON lines in a flat or a grouped layout.

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

Training logs: the text logs of verl, AReaL and ROLL (JSON lines) and of TRL (Parquet)
are recognised from their keys (:mod:`ratioscope.io.textlogs`). Their samples are grouped
by prompt text within a step, each step is a method ("step 40"), and a reward counts as
correct when it is >= the correctness threshold. A directory stands for the ``.jsonl``
and ``.parquet`` files under it, in natural order.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import math
import re
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

from ratioscope import defaults
from ratioscope.errors import (
    JsonLineError,
    ParameterError,
    SampleError,
    UnreadablePathError,
    UsageError,
)
from ratioscope.io import textlogs
from ratioscope.io.jsontext import loads
from ratioscope.io.jsontext import problem as json_problem
from ratioscope.io.paths import refuse_empty_path

PROBLEM_CANDIDATES = ("problem_id", "idx")
RESPONSE_CANDIDATES = ("response", "code")
CORRECT_CANDIDATES = ("correct", "score")

_TRUE_STRINGS = {"true"}
_FALSE_STRINGS = {"false"}


DEFAULT_METHOD_FIELD = defaults.METHOD_FIELD
DEFAULT_DATASET_FIELD = defaults.DATASET_FIELD


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
    #: a numeric correctness value counts as correct when >= this; None means the
    #: default: textlogs.DEFAULT_CORRECT_THRESHOLD for training logs, and no numbers
    #: other than 0/1 in the samples layouts
    correct_threshold: float | None = None

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
    def where(self) -> str:
        """Where the problem first appears: "line 7", or "row 7" of a Parquet file."""
        unit = "row" if self.source[0].lower().endswith(".parquet") else "line"
        return f"{unit} {self.source[1]}"

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
    #: the threshold numbers were compared with, None when no input was thresholded
    correct_threshold: float | None = None
    #: the rule in words, e.g. "score >= 0.5", one clause per correctness field
    correct_rule: str | None = None

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


class _StepMethod(NamedTuple):
    """A method of a training log before it is named: one step of one run.

    Named "step 40" (the file stem when the log has no step), prefixed with the run
    directory when the inputs hold several runs, so that two runs never pool their
    samples of a step.
    """

    run: str
    word: str
    step: int | None
    stem: str

    def label(self, with_run: bool) -> str:
        label = self.stem if self.step is None else f"{self.word} {self.step}"
        return f"{self.run} {label}" if with_run else label


SAMPLE_SUFFIXES = (".jsonl", ".parquet")


def load_samples(
    paths: Sequence[str | Path] | str | Path, fields: SampleFields | None = None
) -> SampleSet:
    """Read sample files into a :class:`SampleSet`: flat or grouped JSON lines, and the
    text logs of verl, TRL, AReaL and ROLL. A directory stands for its sample files.

    Raises:
        UnreadablePathError: a path cannot be read.
        CorruptFileError: a Parquet file cannot be read.
        JsonLineError: a line is not a JSON object or lacks a field.
        SampleError: a value is of the wrong kind, or samples conflict (duplicated
            sample index, a problem repeated in a grouped file, no samples at all).
        ParameterError: the correctness threshold is not a finite number.
    """
    if isinstance(paths, (str, Path)):
        paths = [paths]
    fields = fields or SampleFields()
    threshold = fields.correct_threshold
    if threshold is not None and not math.isfinite(threshold):
        raise ParameterError(
            "fields.correct_threshold", f"must be a finite number, got {threshold}"
        )
    builders: dict[Any, dict[Any, _ProblemBuilder]] = {}
    files = [_read_file(path, fields, builders) for path in sample_paths(paths)]
    names = _method_names(list(builders))
    order = sorted(builders, key=lambda key: _method_order(key, list(builders)))
    methods = {
        names[key]: MethodSamples(names[key], tuple(_finish(b) for b in builders[key].values()))
        for key in order
    }
    files = [replace(f, methods=tuple(names[key] for key in f.methods)) for f in files]
    rule, used = _correct_rule(files, fields)
    return SampleSet(methods=methods, files=tuple(files), correct_threshold=used, correct_rule=rule)


def sample_paths(paths: Iterable[str | Path]) -> list[Path]:
    """Files as given; a directory as the .jsonl and .parquet files under it (not hidden),
    in natural order, so that a run's steps come out as 1, 2, ..., 10."""
    files: list[Path] = []
    for raw in paths:
        refuse_empty_path(raw)
        path = Path(raw)
        if not path.is_dir():
            files.append(path)
            continue
        found = [
            p
            for p in path.rglob("*")
            if p.suffix.lower() in SAMPLE_SUFFIXES
            and p.is_file()
            and not any(part.startswith(".") for part in p.relative_to(path).parts)
        ]
        if not found:
            raise UnreadablePathError(
                path, "is a directory without .jsonl or .parquet sample files"
            )
        files.extend(sorted(found, key=_natural_key))
    return list(dict.fromkeys(files))


def _natural_key(path: Path) -> list[Any]:
    return [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", str(path))]


def _method_names(keys: list[Any]) -> dict[Any, str]:
    """Display names of all methods; training-log steps get their run's directory
    when the inputs hold more than one run."""
    runs = {key.run for key in keys if isinstance(key, _StepMethod)}
    names = {key: key.label(len(runs) > 1) if isinstance(key, _StepMethod) else key for key in keys}
    seen: dict[str, Any] = {}
    for key, name in names.items():
        if name in seen:
            raise SampleError(
                None,
                f"two different inputs would both be the method '{name}'; name the methods "
                "with `fields.method` or rename a file",
            )
        seen[name] = key
    return names


def _method_order(key: Any, keys: list[Any]) -> tuple:
    """Samples-layout methods first, in order of appearance; then training-log steps by
    run (in order of appearance) and step number, whatever order the files came in."""
    if not isinstance(key, _StepMethod):
        return (0, keys.index(key))
    first_of_run = next(i for i, k in enumerate(keys) if getattr(k, "run", None) == key.run)
    step = math.inf if key.step is None else key.step
    return (1, first_of_run, step, key.stem)


def _correct_rule(files: list[SampleFile], fields: SampleFields) -> tuple[str | None, float | None]:
    """The correctness rule for the report's params, and the threshold it used."""
    thresholded = [
        f
        for f in files
        if f.layout not in ("flat", "grouped") or fields.correct_threshold is not None
    ]
    if not thresholded:
        return None, None
    threshold = _threshold(fields)
    clauses = dict.fromkeys(f"{f.fields['correct']} >= {threshold:g}" for f in thresholded)
    return ", ".join(clauses), threshold


def _threshold(fields: SampleFields) -> float:
    """The threshold in force on a training log: the user's, else the default."""
    if fields.correct_threshold is not None:
        return fields.correct_threshold
    return textlogs.DEFAULT_CORRECT_THRESHOLD


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
        record = loads(text.rstrip("\r\n"))
    except json.JSONDecodeError as error:
        if stripped.startswith("{"):  # a sample line, broken: say where
            raise JsonLineError(path, number, f"not valid JSON ({json_problem(error)})") from None
        raise _not_samples(path, f"line {number} is not JSON: {error.msg}") from None
    if _is_report(record):
        raise SampleError(path, _REPORT)
    if not isinstance(record, dict):
        raise JsonLineError(path, number, f"expected a JSON object, got {_kind(record)}")
    return record


def _whole_document_error(path: Path) -> SampleError:
    """The file opens a JSON document over several lines: a report, or another JSON file."""
    try:
        document = loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        document = None
    if _is_report(document):
        return SampleError(path, _REPORT)
    why = "one JSON document over several lines; a samples file has one JSON object a line"
    return _not_samples(path, why)


def _parse(path: Path, number: int, text: str) -> dict[str, Any]:
    try:
        record = loads(text.rstrip("\r\n"))
    except json.JSONDecodeError as error:
        raise JsonLineError(path, number, f"not valid JSON ({json_problem(error)})") from None
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
    path: Path, fields: SampleFields, builders: dict[Any, dict[Any, _ProblemBuilder]]
) -> SampleFile:
    if path.suffix.lower() == ".parquet":
        return _read_parquet(path, fields, builders)
    digest = hashlib.sha256()
    lines = _lines(path, digest)
    first = next(lines, None)
    if first is not None:
        record = _first_record(path, *first)
        log_layout = textlogs.detect_jsonl_layout(record)
        if log_layout is not None:
            log_names = textlogs.resolve_fields(path, log_layout, record, fields)
            records = _jsonl_records(path, first[0], record, lines, log_layout, log_names.columns())
            return _read_textlog(
                path, "jsonl", log_layout, log_names, records, digest, fields, builders
            )
        lines = itertools.chain([first], lines)
    names: dict[str, str] | None = None
    layout = ""
    problems: set[Any] = set()  # distinct problem ids, whichever methods answered them
    samples = 0
    file_methods: dict[str, None] = {}
    # explicitly named optional fields not seen on any line yet: role -> field name
    unseen = {role: name for role, name in fields.optional_names().items() if name}
    first_keys: list[str] = []
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


# ---- training logs (verl, TRL, AReaL, ROLL) -----------------------------------------


def _jsonl_records(
    path: Path,
    number: int,
    record: dict[str, Any],
    lines: Iterator[tuple[int, str]],
    layout: textlogs.TextLogLayout,
    used: list[str],
) -> Iterator[tuple[int, dict[str, Any]]]:
    """(line, sample record) of a training log; a ROLL line holds a whole batch."""
    parsed = itertools.chain([(number, record)], ((n, _parse(path, n, t)) for n, t in lines))
    for line, item in parsed:
        if layout.columnar:
            for sample in textlogs.expand_columnar(path, line, item, layout, used):
                yield line, sample
        else:
            yield line, item


def _read_parquet(
    path: Path, fields: SampleFields, builders: dict[Any, dict[Any, _ProblemBuilder]]
) -> SampleFile:
    """A Parquet samples file: TRL's completions table (prompt, completion, rewards)."""
    if not path.is_file():
        raise UnreadablePathError(path, "cannot read the samples file (no such file)")
    schema = textlogs.parquet_schema(path)
    layout = textlogs.TRL
    found = ", ".join(schema) or "none"
    wanted = (fields.problem or "prompt", fields.response or "completion")
    missing = [name for name in wanted if name not in schema]
    if missing:
        what = textlogs.describe_table(schema)
        if what is not None:
            raise SampleError(path, f"this is {what}")
        columns = " and ".join(f"'{name}'" for name in missing)
        raise SampleError(
            path,
            f"has no {columns} column{'s' if len(missing) > 1 else ''}, so it is not a TRL "
            "completions table (`fields.problem` and `fields.response` name others); columns "
            f"found: {found}",
        )
    names = textlogs.resolve_fields(path, layout, schema, fields, textlogs.reward_columns(schema))
    dtype = schema[names.correct]
    if not textlogs.is_numeric(dtype):
        raise SampleError(
            path,
            f"column '{names.correct}' holds {dtype} values, not numbers; "
            "`fields.correct` must name a numeric reward column",
        )
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    records = textlogs.parquet_rows(path, names.columns())
    return _read_textlog(path, "parquet", layout, names, records, digest, fields, builders)


def _read_textlog(
    path: Path,
    file_format: str,
    layout: textlogs.TextLogLayout,
    names: textlogs.TextLogFields,
    records: Iterator[tuple[int, dict[str, Any]]],
    digest: Any,
    fields: SampleFields,
    builders: dict[Any, dict[Any, _ProblemBuilder]],
) -> SampleFile:
    """Group a training log's samples by (step, prompt); correct = reward >= threshold.

    Samples get their position within the problem as index, so Pass@1 ± SE exists when
    every problem has as many samples. Empty completions are kept: the framework wrote
    what the model generated, which is no broken export.
    """
    unit = "row" if file_format == "parquet" else "line"
    threshold = _threshold(fields)
    run = textlogs.run_directory(path, layout)
    problems: set[Any] = set()
    file_methods: dict[Any, None] = {}
    samples = 0
    for number, record in records:
        where = f"{unit} {number}"
        method = _textlog_method(path, where, record, names, layout, run)
        key, response, correct, dataset = _textlog_sample(path, where, record, names, threshold)
        builder = builders.setdefault(method, {}).get(key)
        if builder is None:
            builder = builders[method][key] = _ProblemBuilder(key, (str(path), number), dataset)
        elif dataset is not None and builder.dataset not in (None, dataset):
            raise SampleError(
                path,
                f"{where}: prompt {key!r} has dataset '{dataset}' here but "
                f"'{builder.dataset}' at {builder.source[0]} {unit} {builder.source[1]}",
            )
        builder.dataset = builder.dataset or dataset
        builder.indices.append(len(builder.responses))
        builder.responses.append(response)
        builder.correct.append(correct)
        builder.lines.append((str(path), number))
        problems.add(key)
        file_methods.setdefault(method)
        samples += 1
    if not samples:
        raise SampleError(path, "contains no samples (the file is empty)")
    return SampleFile(
        path=str(path),
        format=file_format,
        layout=layout.name,
        sha256=digest.hexdigest(),
        problems=len(problems),
        samples=samples,
        methods=tuple(file_methods),
        fields=names.used(),
    )


def _textlog_sample(
    path: Path,
    where: str,
    record: dict[str, Any],
    names: textlogs.TextLogFields,
    threshold: float,
) -> tuple[Any, str, bool, str | None]:
    """(problem id, response, correct, dataset) of one training-log record, checked."""
    for name in names.columns():
        if name not in record:
            found = ", ".join(sorted(record)) or "none"
            raise SampleError(path, f"{where}: missing field '{name}' (fields found: {found})")
    key = textlogs.problem_id(record[names.problem], names.hashed)
    if key is None:
        wanted = "the prompt text" if names.hashed else "a string or an integer"
        value = record[names.problem]
        raise SampleError(path, f"{where}: field '{names.problem}' must be {wanted}, got {value!r}")
    response = textlogs.message_text(record[names.response])
    if not isinstance(response, str):
        raise SampleError(
            path, f"{where}: field '{names.response}' must be text, got {_kind(response)}"
        )
    correct = textlogs.correct_from_score(record[names.correct], threshold)
    if correct is None:
        raise SampleError(path, _bad_score(where, names.correct, record[names.correct]))
    dataset = None if names.dataset is None else record[names.dataset]
    if dataset is not None and not isinstance(dataset, str):
        raise SampleError(
            path, f"{where}: field '{names.dataset}' must be a string, got {dataset!r}"
        )
    return key, response, correct, dataset


def _textlog_method(
    path: Path,
    where: str,
    record: dict[str, Any],
    names: textlogs.TextLogFields,
    layout: textlogs.TextLogLayout,
    run: str,
) -> Any:
    """The method of one training-log sample: the explicit method field's value, else
    the step it was generated at (the file stem for a log without steps)."""
    if names.method is not None:
        value = record[names.method]
        if isinstance(value, bool) or not isinstance(value, (str, int)) or value == "":
            raise SampleError(
                path,
                f"{where}: field '{names.method}' must be a non-empty string or an integer, "
                f"got {value!r}",
            )
        return str(value)
    if names.step is None:
        return _StepMethod(run, layout.step_word, None, path.stem)
    step = textlogs.step_number(record[names.step])
    if step is None:
        raise SampleError(
            path, f"{where}: field '{names.step}' must be an integer, got {record[names.step]!r}"
        )
    return _StepMethod(run, layout.step_word, step, "")  # every file of the step alike


def _bad_score(where: str, name: str, value: Any) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        # TRL logs NaN (null in Parquet) where a reward function returned None
        return (
            f"{where}: reward '{name}' is missing (NaN or null: no reward for this sample); "
            "choose a reward that scores every sample with `fields.correct`"
        )
    return f"{where}: field '{name}' must be a finite number or true/false, got {value!r}"


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
            record = loads(text)
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


def _correct(path: Path, number: int, value: Any, name: str, threshold: float | None) -> bool:
    """A correctness value; with a threshold given, any number counts as value >= it."""
    is_number = isinstance(value, (int, float)) and not isinstance(value, bool)
    if threshold is not None and is_number and math.isfinite(value):
        return value >= threshold
    parsed = parse_correct(value)
    if parsed is None:
        hint = (
            "; set `fields.correct_threshold` to a threshold T to count numbers >= T as correct"
            if is_number
            else ""
        )
        raise SampleError(
            path,
            f'line {number}: field \'{name}\' must be true/false, 0/1 or "true"/"false", '
            f"got {value!r}{hint}",
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
            f"line {number}: field '{name}' is an empty response; fix the export, or set "
            "`fields.allow_empty` if the model really generated nothing",
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
    builder.correct.append(
        _correct(path, number, record[names["correct"]], names["correct"], fields.correct_threshold)
    )
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
        builder.correct.append(
            _correct(path, number, value, names["correct"], fields.correct_threshold)
        )
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
