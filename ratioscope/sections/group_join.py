"""Whole GRPO groups across the files of a training step.

A framework that writes one file per data-parallel rank (slime's ``{rollout_id}_{rank}.pt``)
or a capture that writes one file per loss micro-batch (TRL's ``granularity=
"micro_batch"``) spreads a prompt's samples over several files; TRL with
``steps_per_generation > gradient_accumulation_steps`` even spreads them over two
optimizer steps. The sections that work on whole groups (``Accumulator.joins_groups``:
QUATRO's duals, the GRPO advantages and equal-reward groups of ``trust_region``; the
equal-reward groups of ``vitals`` through ``Accumulator.takes_groups``) are
therefore fed once per *step*, with the per-sequence values of every file of the step
joined by group label, never once per file.

Only per-sequence values are kept (rewards, correct, the group label, the file and row
of each sequence): memory grows with the sequences of one step, not with its tokens,
which the other sections still stream file by file.

A group is incomplete when the trainer's group size is known (recorded settings or
``--trainer``: TRL's ``num_generations``, verl's ``rollout.n``, OpenRLHF's
``n_samples_per_prompt``) and the step holds fewer of its samples. Such a group waits
for the next step: when that step holds the rest (same label, sizes adding up to at
most the group size) the group is completed from it; otherwise it is left out of the
group-level numbers and counted in a note. Without a known group size a joined group is
taken as whole.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor


@dataclass
class FileSequences:
    """The per-sequence values of one file (``_FileRows`` of the analysis).

    Attributes:
        index: the file's position in the run (its rows' ``file`` below).
        source: the file's name, for notes.
        rewards, correct: [B] or None; group: [B] int ids or None; labels: the label of
        each id (None: the ids are the file's own, never joined with another file's).
    """

    index: int
    source: str
    rewards: Tensor | None
    correct: Tensor | None
    group: Tensor | None
    labels: list[Any] | None


@dataclass
class _Rows:
    """Rows of one group: their files, row numbers, rewards and correctness."""

    files: list[int] = field(default_factory=list)
    rows: list[int] = field(default_factory=list)
    rewards: list[float] = field(default_factory=list)
    correct: list[bool] = field(default_factory=list)

    def extend(self, other: _Rows) -> None:
        self.files += other.files
        self.rows += other.rows
        self.rewards += other.rewards
        self.correct += other.correct

    def __len__(self) -> int:
        return len(self.rows)


@dataclass
class JoinedGroups:
    """The whole groups of a step, ready for a group-level section.

    Attributes:
        rewards, correct: [N] float64 and bool; group: [N] int64 ids 0..G-1;
        files, rows: [N] int64, where each sequence came from (for per-sequence columns).
        sources: the names of the files the rows came from.
    """

    rewards: Tensor
    correct: Tensor
    group: Tensor
    files: Tensor
    rows: Tensor
    sources: list[str]


@dataclass
class JoinCounts:
    """What the join did over the run, for the notes."""

    joined: int = 0  # groups with rows in more than one file of their step
    completed: int = 0  # groups completed from the next step
    incomplete: int = 0  # groups left out: still fewer rows than the group size
    incomplete_rows: int = 0
    incomplete_sizes: dict[int, int] = field(default_factory=dict)
    without: list[str] = field(default_factory=list)  # files lacking rewards or groups


class StepGroupJoin:
    """Joins the files of each step by group label (see the module docstring).

    Feed it :meth:`add` for each file in run order with the file's step key (None: the
    file is a step of its own), then :meth:`finish`; each returns the joined groups of
    the steps it closed.
    """

    def __init__(
        self, group_size: int | None = None, own_ids: bool = False, rewards: bool = True
    ) -> None:
        #: the trainer's group size, or None when unknown
        self.group_size = group_size if group_size and group_size > 1 else None
        #: True: labels are the files' own consecutive ids (--group-size), never joined
        self.own_ids = own_ids
        #: False: files without rewards are joined too (NaN rewards; the covariance
        #: section's scopes need the group ids only)
        self.rewards = rewards
        self.counts = JoinCounts()
        self._step: Any = object()
        self._groups: dict[Any, _Rows] = {}
        self._label_files: dict[Any, set[int]] = {}
        self._sources: dict[int, str] = {}
        self._pending: dict[Any, _Rows] = {}  # incomplete groups of the previous step
        self._open_files: set[int] = set()  # files of the open step

    def add(self, step: Any, file: FileSequences) -> list[JoinedGroups]:
        """Take ``file`` (of step ``step``); the joined groups of a step it closed."""
        closed = []
        if step is None or step != self._step:
            closed = self._close()
            self._step = object() if step is None else step
        self._sources[file.index] = file.source
        self._open_files.add(file.index)
        if file.group is None or (file.rewards is None and self.rewards):
            self.counts.without.append(file.source)
            return closed
        if file.rewards is not None:
            rewards = file.rewards.detach().to("cpu", torch.float64).tolist()
        else:
            rewards = [math.nan] * int(file.group.shape[0])
        correct = (
            file.correct.detach().to("cpu").bool().tolist()
            if file.correct is not None
            else [r > 0 for r in rewards]
        )
        ids = file.group.detach().to("cpu").tolist()
        for row, (gid, reward, right) in enumerate(zip(ids, rewards, correct, strict=True)):
            label = self._label(file, int(gid))
            rows = self._groups.setdefault(label, _Rows())
            rows.files.append(file.index)
            rows.rows.append(row)
            rows.rewards.append(reward)
            rows.correct.append(bool(right))
            self._label_files.setdefault(label, set()).add(file.index)
        return closed

    def finish(self) -> list[JoinedGroups]:
        """Close the last step; groups still waiting for a next step are left out."""
        closed = self._close()
        self._drop(self._pending)
        self._pending = {}
        return closed

    def oldest_open_file(self, default: int) -> int:
        """The first file whose rows may still be fed (in the open step, or waiting
        for the next one); ``default`` when none is."""
        files = [f for rows in self._groups.values() for f in rows.files]
        files += [f for rows in self._pending.values() for f in rows.files]
        files += list(self._open_files)
        return min(files, default=default)

    # ------------------------------------------------------------------ internals
    def _label(self, file: FileSequences, gid: int) -> Any:
        if self.own_ids or file.labels is None or gid >= len(file.labels):
            return ("file", file.index, gid)
        return ("label", file.labels[gid])

    def _close(self) -> list[JoinedGroups]:
        groups, self._groups = self._groups, {}
        files, self._label_files = self._label_files, {}
        self._open_files = set()
        self.counts.joined += sum(len(f) > 1 for f in files.values())
        pending, self._pending = self._pending, {}
        size = self.group_size
        for label, rows in pending.items():
            here = groups.get(label)
            if here is not None and size is not None and len(here) + len(rows) <= size:
                rows.extend(here)
                groups[label] = rows
                self.counts.completed += 1
            else:
                self._drop({label: rows})
        whole: dict[Any, _Rows] = {}
        for label, rows in groups.items():
            if size is not None and len(rows) < size:
                self._pending[label] = rows  # the next step may hold the rest
            else:
                whole[label] = rows
        if not whole:
            return []
        return [self._joined(whole)]

    def _drop(self, groups: dict[Any, _Rows]) -> None:
        for rows in groups.values():
            self.counts.incomplete += 1
            self.counts.incomplete_rows += len(rows)
            sizes = self.counts.incomplete_sizes
            sizes[len(rows)] = sizes.get(len(rows), 0) + 1

    def _joined(self, groups: dict[Any, _Rows]) -> JoinedGroups:
        ids: list[int] = []
        merged = _Rows()
        for gid, rows in enumerate(groups.values()):
            merged.extend(rows)
            ids += [gid] * len(rows)
        used = sorted(set(merged.files))
        return JoinedGroups(
            rewards=torch.tensor(merged.rewards, dtype=torch.float64),
            correct=torch.tensor(merged.correct, dtype=torch.bool),
            group=torch.tensor(ids, dtype=torch.int64),
            files=torch.tensor(merged.files, dtype=torch.int64),
            rows=torch.tensor(merged.rows, dtype=torch.int64),
            sources=[self._sources[i] for i in used],
        )


def join_notes(
    name: str, joined: int, completed: int, incomplete: int, incomplete_sizes: dict[str, int]
) -> list[str]:
    """The notes of a group-level section on what the join did (none when it did nothing).

    ``incomplete_sizes``: size -> groups left out with that many samples.
    """
    notes = []
    if joined:
        notes.append(
            f"{name}: {joined} group(s) had samples in more than one file of their step and "
            "were joined by group id before the group-level numbers"
        )
    if completed:
        notes.append(
            f"{name}: {completed} group(s) incomplete in their step were completed from the "
            "next step's files (same group id)"
        )
    if incomplete:
        rows = sum(int(size) * n for size, n in incomplete_sizes.items())
        sizes = ", ".join(
            f"{n} of size {size}" for size, n in sorted(incomplete_sizes.items(), key=_size)
        )
        notes.append(
            f"{name}: {incomplete} group(s) ({rows} samples) held fewer samples than the "
            f"trainer's group size after joining the files of their step and the next "
            f"({sizes}) and are left out of the group-level numbers"
        )
    return notes


def _size(item: tuple[str, int]) -> int:
    return int(item[0])
