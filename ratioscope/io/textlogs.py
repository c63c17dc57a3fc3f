"""Text logs of RL training frameworks, read as samples (docs/evaluation.md).

verl, TRL, AReaL and ROLL write the prompts, completions and rewards of their rollouts
as text. This module recognises those layouts from the keys of a file's first record (a
Parquet file's columns) and says how their fields map onto samples: a problem is a
prompt, a method is a training step, and a sample is correct when its reward reaches a
threshold. The grouping itself is done by :mod:`ratioscope.io.samples`.

Formats, as read in each project's source (repository, commit, file):

- verl (volcengine/verl b178a3cd56f58b2d502255daba591e92833930a7,
  verl/trainer/ppo/ray_trainer.py ``_dump_generations``): ``trainer.rollout_data_dir``
  (and ``trainer.validation_data_dir``) receive ``{global_step}.jsonl``, one sample a
  line with ``input``, ``output``, ``gts``, ``score``, ``step`` and the reward's
  extra-info keys. ``score`` is the summed token-level score; no prompt id is written,
  so the samples of one prompt are those with the same ``input`` text.
- TRL (huggingface/trl f2cd57710ae345ea6428ae95363267fcf38a3dc8,
  trl/trainer/grpo_trainer.py ``log``): ``GRPOConfig(log_completions=True)`` writes
  ``{output_dir}/completions/completions_{step:05d}.parquet`` with columns ``step``,
  ``prompt`` and ``completion`` (decoded text), one float column per reward function
  (NaN where the function returned None), the ``log_extra`` columns and ``advantage``.
- AReaL (inclusionAI/AReaL 4aef98d8d818af55b43621aaadba047ae10f4e77,
  areal/infra/workflow_executor.py ``_dump_trajectory``): ``dump_to_file=True`` writes
  ``{log_path}/rollout/{tail_version}/{task_id}.jsonl`` (``eval-rollout/`` for
  evaluation), one sample a line with ``task_id``, ``sample_idx``, ``seqlen``,
  ``prompt_len``, ``head_version``, ``tail_version``, ``reward``, ``prompt``,
  ``completion``.
- ROLL (alibaba/ROLL 8eb27cc2dc34c4d1310b169d9b86d339004d811a,
  roll/pipeline/rlvr/utils.py ``dump_rollout_to_specific_path``): ``rollout_dump_dir``
  receives ``rollout_dump_data.step_{global_step}.jsonl``, one line holding the whole
  batch as parallel lists: ``global_step``, ``id``, ``prompt``/``messages``, ``tag``,
  ``domain``, ..., ``responses``, ``scores``, ``sampling_params``.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ratioscope.errors import CorruptFileError, SampleError

DEFAULT_CORRECT_THRESHOLD = 0.5
"""A sample of a training log is correct when its reward is >= this value.

Halfway between the usual wrong and right rewards (0 and 1, or -1 and 1), and between
the 0.1 and 0.9 that verl's geo3k reward gives a well-formatted wrong answer and a
correct badly formatted one."""

PROBLEM_ID_DIGITS = 12
"""Hex digits of sha256(prompt) that name a prompt: short enough to type, and two of
the 10,000 prompts of a step collide with a chance of about 2e-7 (n^2 / 2^49)."""


@dataclass(frozen=True)
class TextLogLayout:
    """Where one framework writes each part of a sample.

    Attributes:
        name: the layout name recorded in the report's ``inputs[].layout``.
        signature: keys (columns) whose presence identifies the layout.
        prompt: candidate prompt fields, first present wins; their text is hashed
            into the problem id.
        response: the completion field.
        correct: the reward field; None when it is chosen among reward columns (TRL).
        step: the field that numbers the training step (the method label).
        step_word: how the step is named in labels ("step 40", "version 40").
        columnar: one line holds a whole batch as parallel lists (ROLL).
        run_levels: directories from a file up to the run's directory: 1 when the
            files of all steps share a directory, 2 when each step has its own.
    """

    name: str
    signature: frozenset[str]
    prompt: tuple[str, ...]
    response: str
    correct: str | None
    step: str
    step_word: str = "step"
    columnar: bool = False
    run_levels: int = 1


VERL = TextLogLayout(
    name="verl",
    signature=frozenset({"input", "output", "gts", "score", "step"}),
    prompt=("input",),
    response="output",
    correct="score",
    step="step",
)
AREAL = TextLogLayout(
    name="areal",
    signature=frozenset({"task_id", "tail_version", "prompt", "completion", "reward"}),
    prompt=("prompt",),
    response="completion",
    correct="reward",
    step="tail_version",
    step_word="version",
    run_levels=2,
)
ROLL = TextLogLayout(
    name="roll",
    signature=frozenset({"global_step", "responses", "scores"}),
    prompt=("prompt", "messages"),
    response="responses",
    correct="scores",
    step="global_step",
    columnar=True,
)
TRL = TextLogLayout(
    name="trl",
    signature=frozenset({"prompt", "completion"}),
    prompt=("prompt",),
    response="completion",
    correct=None,
    step="step",
)
JSONL_LAYOUTS = (VERL, AREAL, ROLL)

#: TRL columns that are not rewards; every other numeric column may be one
TRL_NOT_REWARDS = frozenset({"step", "prompt", "completion", "advantage", "image", "images"})


@dataclass(frozen=True)
class TextLogFields:
    """The field names of one text-log file, resolved against its first record.

    ``hashed``: the problem field holds prompt text and ids are its hash; an id field
    named explicitly (``--problem-field``) is used as written. ``method``: an explicit
    method field, else None and methods are the steps of field ``step`` (the file name
    when the file has no step field).
    """

    problem: str
    hashed: bool
    response: str
    correct: str
    step: str | None
    method: str | None
    dataset: str | None

    def used(self) -> dict[str, str]:
        """The ``inputs[].fields`` block: role -> field name, for the roles in use."""
        roles = {"problem": self.problem, "response": self.response, "correct": self.correct}
        extra = {"step": self.step, "method": self.method, "dataset": self.dataset}
        return roles | {role: name for role, name in extra.items() if name is not None}

    def columns(self) -> list[str]:
        """Every field read from a record, without repeats."""
        names = (self.problem, self.response, self.correct, self.step, self.method, self.dataset)
        return list(dict.fromkeys(n for n in names if n is not None))


def detect_jsonl_layout(record: Mapping[str, Any]) -> TextLogLayout | None:
    """The framework layout of a JSON-lines file from its first record, or None.

    >>> detect_jsonl_layout({"input": "q", "output": "a", "gts": "1", "score": 1.0, "step": 3}).name
    'verl'
    >>> detect_jsonl_layout({"problem_id": 1, "response": "a", "correct": True}) is None
    True
    """
    for layout in JSONL_LAYOUTS:
        if layout.signature <= record.keys():
            if layout.columnar and not isinstance(record.get(layout.response), list):
                continue  # a flat sample that happens to use the same names
            return layout
    return None


def resolve_fields(
    path: Path,
    layout: TextLogLayout,
    keys: Iterable[str],
    given: Any,
    rewards: list[str] | None = None,
) -> TextLogFields:
    """Field names of one file: an explicit name (``given``, a SampleFields) wins over
    the layout's. ``rewards`` lists the numeric candidate columns of a TRL table.

    Raises:
        SampleError: a named field is absent, or the reward column is ambiguous or missing.
    """
    keys = list(keys)
    present = set(keys)
    found = ", ".join(keys) or "none"

    def named(role: str, name: str | None) -> str | None:
        if name is not None and name not in present:
            raise SampleError(
                path, f"has no {role} field '{name}' (--{role}-field); fields found: {found}"
            )
        return name

    problem = named("problem", given.problem)
    hashed = problem is None
    if problem is None:
        problem = next((name for name in layout.prompt if name in present), None)
        if problem is None:
            wanted = " or ".join(f"'{name}'" for name in layout.prompt)
            raise SampleError(path, f"has no prompt field {wanted}; fields found: {found}")
    response = named("response", given.response) or layout.response
    if response not in present:
        raise SampleError(path, f"has no completion field '{response}'; fields found: {found}")
    correct = named("correct", given.correct) or layout.correct
    if correct is None:
        correct = _single_reward(path, rewards or [], keys, found)
    elif correct not in present:
        raise SampleError(
            path,
            f"has no reward field '{correct}'; name the correctness field with "
            f"`fields.correct` (fields found: {found})",
        )
    method = named("method", given.method)
    dataset = named("dataset", given.dataset)
    if dataset is None and "dataset" in present:
        dataset = "dataset"  # optional under its default name, as in the samples layouts
    step = layout.step if method is None and layout.step in present else None
    return TextLogFields(problem, hashed, response, correct, step, method, dataset)


def _single_reward(path: Path, rewards: list[str], keys: list[str], found: str) -> str:
    """TRL's reward column when there is exactly one; the sum is never taken, since
    adding a format reward to an accuracy reward would count well-formatted wrong
    answers as correct."""
    if len(rewards) == 1:
        return rewards[0]
    if not rewards:
        others = [k for k in keys if k not in TRL_NOT_REWARDS]
        why = f" ({', '.join(others)}: not numeric)" if others else ""
        raise SampleError(
            path,
            f"has no numeric reward column{why}; TRL writes one per reward function beside "
            f"step, prompt, completion and advantage (columns found: {found})",
        )
    raise SampleError(
        path,
        f"has {len(rewards)} reward columns ({', '.join(rewards)}); name the one that "
        f"decides correctness with `fields.correct` (e.g. {rewards[0]})",
    )


def message_text(value: Any) -> Any:
    """A completion as text: TRL's conversational logs (trl 1.16, ``log()`` in
    trl/trainer/grpo_trainer.py) store ``[{"role", "content"}, ...]``; the contents are
    joined. Anything else is returned unchanged (and checked by the caller)."""
    if (
        isinstance(value, list)
        and value
        and all(isinstance(m, dict) and isinstance(m.get("content"), str) for m in value)
    ):
        return "\n".join(m["content"] for m in value)
    return value


def problem_id(value: Any, hashed: bool) -> int | str | None:
    """The problem id of a record: the first digits of sha256 of the prompt text when
    ``hashed`` (a chat given as a list of messages is hashed as canonical JSON), else
    the value itself; None when the value cannot be an id.

    >>> problem_id("What is 2 + 2?", hashed=True)
    '38d46ad36188'
    >>> problem_id(17, hashed=False)
    17
    """
    if not hashed:
        if isinstance(value, bool) or not isinstance(value, (int, str)):
            return None
        return value
    if value is None:
        return None
    text = value if isinstance(value, str) else json.dumps(value, sort_keys=True, default=str)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:PROBLEM_ID_DIGITS]


def correct_from_score(value: Any, threshold: float) -> bool | None:
    """Correctness of a reward: ``value >= threshold``; a boolean as it is; None for
    anything else (a string, null, NaN or infinity).

    >>> [correct_from_score(v, 0.5) for v in (1.0, 0.5, 0.1, -1, True, float("nan"), "1")]
    [True, True, False, False, True, None, None]
    """
    if isinstance(value, bool):
        return value
    if isinstance(value, (int, float)) and math.isfinite(value):
        return value >= threshold
    return None


def step_number(value: Any) -> int | None:
    """A step value as an int (JSON may write 40 as 40.0), or None when it is not one."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return None


def run_directory(path: Path, layout: TextLogLayout) -> str:
    """The directory of the run a file belongs to, as the user wrote it."""
    directory = path.parent
    for _ in range(layout.run_levels - 1):
        directory = directory.parent
    return os.path.normpath(str(directory))


def expand_columnar(
    path: Path, number: int, record: dict[str, Any], layout: TextLogLayout, used: list[str]
) -> Iterator[dict[str, Any]]:
    """The samples of one ROLL line: element i of every list as length as the responses.

    Raises:
        SampleError: the response field is not a list, or a used field is a list of
            another length.
    """
    responses = record.get(layout.response)
    if not isinstance(responses, list):
        raise SampleError(
            path,
            f"line {number}: field '{layout.response}' must be a list (one ROLL batch a "
            f"line), got {type(responses).__name__}",
        )
    size = len(responses)
    for name in used:
        value = record.get(name)
        if isinstance(value, list) and len(value) != size:
            raise SampleError(
                path,
                f"line {number}: field '{name}' has {len(value)} values but "
                f"'{layout.response}' has {size}",
            )
    lists = {k: v for k, v in record.items() if isinstance(v, list) and len(v) == size}
    constants = {k: v for k, v in record.items() if k not in lists}
    for index in range(size):
        yield constants | {key: values[index] for key, values in lists.items()}


# ---- Parquet (TRL) ------------------------------------------------------------------


def parquet_schema(path: Path) -> dict[str, Any]:
    """{column: polars dtype} of a Parquet file.

    Raises:
        CorruptFileError: the file is not a readable Parquet file.
    """
    import polars as pl

    try:
        return dict(pl.read_parquet_schema(path))
    except Exception as error:  # polars raises several error types for bad files
        raise CorruptFileError(
            path, f"not a readable Parquet file ({_first_line(error)})"
        ) from None


def is_numeric(dtype: Any) -> bool:
    """Whether a polars dtype holds numbers (booleans included)."""
    import polars as pl

    return dtype == pl.Boolean or dtype.is_numeric()


def reward_columns(schema: Mapping[str, Any]) -> list[str]:
    """The numeric columns of a TRL table that may be rewards, in file order."""
    return [
        name
        for name, dtype in schema.items()
        if name not in TRL_NOT_REWARDS
        and not name.startswith("__index_level_")  # a pandas index written as a column
        and is_numeric(dtype)
    ]


def parquet_rows(path: Path, columns: list[str]) -> Iterator[tuple[int, dict[str, Any]]]:
    """(row number from 1, {column: value}) for the chosen columns.

    Raises:
        CorruptFileError: the data pages cannot be read.
    """
    import polars as pl

    try:
        frame = pl.read_parquet(path, columns=columns)
    except Exception as error:
        raise CorruptFileError(
            path, f"not a readable Parquet file ({_first_line(error)})"
        ) from None
    yield from enumerate(frame.iter_rows(named=True), start=1)


def describe_table(schema: Mapping[str, Any]) -> str | None:
    """What a Parquet file that is not a completions table is, when ratioscope knows."""
    names = set(schema)
    if {"method", "problem", "samples"} <= names and any(n.startswith("pass_at_") for n in names):
        return "a ratioscope per-problem table (eval-ucc --per-problem), not samples"
    return None


def _first_line(error: BaseException, limit: int = 160) -> str:
    lines = str(error).strip().splitlines()
    text = lines[0] if lines else type(error).__name__
    return text[:limit].rstrip(". ")
