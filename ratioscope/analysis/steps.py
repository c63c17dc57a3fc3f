"""Training steps of input files: which step each dump (or shard report) belongs to.

A file's step comes from, in this order:

1. ``step_from``, a regular expression with one capture group searched in the file's
   path (as given, forward slashes), when it is given: it wins over everything else;
2. the framework's own naming (:data:`NAME_RULES`): verl-style ``step_0032.pt``,
   prime-rl's ``token_exports/step_N/rank_R.jsonl``, ratioscope capture's
   ``step_000032/rank_00000_part_0000.pt`` and shard reports ``step_000032/rank_00000.json``,
   slime's ``{rollout_id}_{rank}.pt`` (train dumps) and ``rollout_data/{rollout_id}.pt``;
3. a ``step`` scalar in the file (``RawDump.meta`` or a 0-d tensor): ``step``,
   ``global_step``, slime's ``rollout_id``, capture's ``ratioscope_capture.step``.

TRL's ``completions_{step:05d}.parquet`` is a text log of completions (no per-token
log-probs) and has no rule here: it is not a dump a timeline analyses.

Several files of one step (ranks, micro-batches, parts) form one :class:`StepFiles`.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from ratioscope.errors import InputError, NotADumpError, ParameterError

#: how a file's step was found
StepSource = Literal["step_from", "name", "meta"]

#: (description, pattern searched in the path with forward slashes); the first that
#: matches gives the step (group "step")
NAME_RULES: tuple[tuple[str, re.Pattern[str]], ...] = (
    # ratioscope capture: step_000032/rank_00000_part_0000.pt, step_000032/rank_00000.json
    # prime-rl: token_exports/step_32/rank_0.jsonl
    ("a step_N directory", re.compile(r"(?:^|/)step_(?P<step>\d+)/rank_\d+[^/]*$")),
    # verl-style dumps: step_0032.pt, global_step_32.pt, step-32.parquet
    (
        "a step_N file name",
        re.compile(r"(?:^|/)(?:global_)?step[_-]?(?P<step>\d+)(?:[_-][^/]*)?\.[^/.]+$"),
    ),
    # NeMo-RL GRPO: LOG_DIR/train_data_step{N}.jsonl
    (
        "NeMo-RL's train_data_step{N}.jsonl",
        re.compile(r"(?:^|/)train_data_step(?P<step>\d+)\.jsonl$"),
    ),
    # slime --save-debug-train-data: {rollout_id}_{rank}.pt
    ("slime's {rollout_id}_{rank}.pt", re.compile(r"(?:^|/)(?P<step>\d+)_\d+\.pt$")),
    # slime --save-debug-rollout-data: rollout_data/{rollout_id}.pt (read beside train dumps)
    ("slime's rollout_data/{rollout_id}.pt", re.compile(r"(?:^|/)rollout_data/(?P<step>\d+)\.pt$")),
)

#: scalar keys of a file that hold its step, in order of preference
META_KEYS = ("step", "global_step", "ratioscope_capture.step", "rollout_id")

#: the three ways to give a file its step, for error messages
WAYS = (
    "name it like step_0032.pt or step_32/rank_0.jsonl, store a 'step' scalar in the "
    "file, or give `step_from`, a regular expression with one capture group for the step "
    "in the path"
)


@dataclass(frozen=True)
class StepFiles:
    """The input files of one training step.

    Attributes:
        step: the step number.
        paths: its files, in input order.
        source: how the step was found (the first file's way).
    """

    step: int
    paths: tuple[Path, ...]
    source: StepSource


def compile_step_from(step_from: str | None) -> re.Pattern[str] | None:
    """The ``step_from`` pattern, checked: it compiles and has exactly one capture group.

    >>> compile_step_from(r"iter(\\d+)").groups
    1
    """
    if step_from is None:
        return None
    try:
        pattern = re.compile(step_from)
    except re.error as error:
        raise ParameterError(
            "step_from", f"is not a regular expression ({error}): '{step_from}'"
        ) from None
    if pattern.groups != 1:
        raise ParameterError(
            "step_from",
            f"must have exactly one capture group for the step, '{step_from}' has {pattern.groups}",
        )
    return pattern


def step_from_name(path: str | Path) -> int | None:
    """The step a framework's file naming gives ``path``, or None.

    >>> step_from_name("run/step_0032.pt"), step_from_name("token_exports/step_7/rank_0.jsonl")
    (32, 7)
    >>> step_from_name("debug/train_data/12_3.pt"), step_from_name("dump.pt")
    (12, None)
    """
    text = Path(path).as_posix()
    for _, pattern in NAME_RULES:
        match = pattern.search(text)
        if match:
            return int(match.group("step"))
    return None


def step_from_meta(meta: dict[str, Any]) -> int | None:
    """The step a file's scalar values name (:data:`META_KEYS`), or None.

    >>> step_from_meta({"step": 5, "rank": 0}), step_from_meta({"rank": 1})
    (5, None)
    """
    for key in META_KEYS:
        value: Any = meta.get(key)
        if _is_scalar_tensor(value):
            value = value.item()
        if isinstance(value, bool) or value is None:
            continue
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        if isinstance(value, int) and value >= 0:
            return value
    return None


def read_step_meta(path: Path, unsafe_pickle: bool = False) -> dict[str, Any]:
    """A dump's scalar values and its 0-d tensors (where a ``step`` may be stored)."""
    from ratioscope.io.loaders import refuse_other_kinds
    from ratioscope.io.paths import is_report_path
    from ratioscope.io.readers import read_raw

    if is_report_path(path):
        _require_analyze_report(path)
        return {}
    raw = read_raw(path, unsafe_pickle=unsafe_pickle)
    refuse_other_kinds(path, raw)  # a samples file or text log has no step: say what it is
    meta = dict(raw.meta)
    for key in META_KEYS:
        value = raw.columns.get(key)
        if key not in meta and _is_scalar_tensor(value):
            meta[key] = value
    return meta


def _require_analyze_report(path: Path) -> None:
    """A JSON input whose name gives no step must be an analyze report (whose step the
    caller then asks for): a file that does not read, or a document of another kind (a
    timeline, an evaluation report), is said to be so, not to lack a step."""
    from ratioscope.errors import ReportError
    from ratioscope.io.documents import document_kind, read_json_report

    kind = document_kind(read_json_report(path))
    if kind != "an analyze report":
        raise ReportError(path, f"this is {kind}, not an analyze report of a training step")


def _is_scalar_tensor(value: Any) -> bool:
    """A 0-d tensor (checked without importing torch)."""
    return hasattr(value, "dim") and value.dim() == 0


def assign_steps(
    files: Sequence[Path],
    step_from: str | None = None,
    *,
    read_meta: Callable[[Path], dict[str, Any]] | None = None,
    notes: list[str] | None = None,
) -> list[StepFiles]:
    """Group ``files`` by training step (see the module docstring for the rules).

    Args:
        files: input files (already expanded).
        step_from: a regular expression with one capture group, searched in each path;
            when given it is the only rule.
        read_meta: reads a file's scalars when its name gives no step (default:
            :func:`read_step_meta`); tests pass their own.
        notes: where given, a file found by walking a folder that is of another kind (a
            samples file, a text log: :class:`~ratioscope.errors.NotADumpError`) is left
            out with a note here, as ``analyze`` leaves it out; else it raises.

    Returns:
        one :class:`StepFiles` per step, in increasing step order.

    Raises:
        ParameterError: ``step_from`` is not a pattern with one group, or does not match
            a file; InputError: a file has no step by any rule.
    """
    from ratioscope.io.loaders import FoundPath

    pattern = compile_step_from(step_from)
    read = read_meta or read_step_meta
    found: dict[int, tuple[list[Path], StepSource]] = {}
    for path in files:
        try:
            step, source = step_of(Path(path), pattern, step_from, read)
        except NotADumpError as error:
            if notes is None or not isinstance(path, FoundPath):
                raise
            notes.append(f"skipped {error}".rstrip("."))
            continue
        found.setdefault(step, ([], source))[0].append(Path(path))
    return [
        StepFiles(step=step, paths=tuple(paths), source=source)
        for step, (paths, source) in sorted(found.items())
    ]


def step_of(
    path: Path,
    pattern: re.Pattern[str] | None,
    step_from: str | None,
    read: Callable[[Path], dict[str, Any]],
) -> tuple[int, StepSource]:
    """The step of one file and how it was found (``pattern``: ``step_from`` compiled).

    Raises:
        ParameterError: ``step_from`` does not match the path; InputError: no step.
    """
    if pattern is not None:
        match = pattern.search(path.as_posix())
        if match is None or match.group(1) is None:
            raise ParameterError("step_from", f"'{step_from}' does not match this path", path=path)
        try:
            return int(match.group(1)), "step_from"
        except ValueError:
            raise ParameterError(
                "step_from",
                f"'{step_from}' captures '{match.group(1)}', not a whole number",
                path=path,
            ) from None
    step = step_from_name(path)
    if step is not None:
        return step, "name"
    step = step_from_meta(read(path))
    if step is not None:
        return step, "meta"
    raise InputError(path, f"no training step found for this file; {WAYS}")
