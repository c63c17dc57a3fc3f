"""The covariance section's group scopes on whole groups of a training step.

CW-GRPO centres log pi and A on each prompt's group and takes sigma and sum w there
(``--cov-scope group``). A file that holds whole groups (every sample of each of its
groups, and no group short of the trainer's group size) keeps the result of its own
passes, made with the other sections as the file was read. The other files are analysed
again once their step is closed (:class:`ratioscope.sections.group_join.StepGroupJoin`, here on
the group ids alone), in the smallest sets of files that hold their groups whole (files
linked by a group with samples in each): the section's passes go over a set's files
one after another, each file read again for each pass (streamed where its type allows),
on the rows of those groups only, with the groups joined by id. The means, sigma and
sum w of each group, Clip-Cov's batch c and the Clip-Cov and KL-Cov token budgets are
then those of those rows together, as if one file held them in the order of the files.
Memory holds a chunk (or one file read whole) and a few sums per group, never the step's
tokens.

A group short of the trainer's group size is completed from the next step's files as
the other group-level sections complete it, or left out of the section (its tokens in
no statistic, its per-sequence columns NaN) and counted in a note.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from ratioscope.data.batch import CANONICAL_KEYS, TokenBatch
from ratioscope.sections.context import Context
from ratioscope.sections.covariance import SEQUENCE_COLUMNS, CovarianceAccumulator
from ratioscope.sections.group_join import FileSequences, JoinedGroups, StepGroupJoin

#: a source's chunks in file order, read anew on every call (its rows' row_offset set)
ChunkReader = Callable[[TokenBatch | Path], Iterable[TokenBatch]]


@dataclass
class _Held:
    """A file's own result, until its step says whether its groups are whole.

    Attributes:
        acc: the section fed the file alone (None once its rows went elsewhere).
        source: the file (or batch) to read again; rows: its sequences.
    """

    acc: CovarianceAccumulator | None
    source: TokenBatch | Path
    rows: int


class StepScopes:
    """Feeds ``total`` (the covariance section) file results or, for the files of a
    step whose groups they do not hold whole, the passes over those files joined.

    Args:
        total: the run's accumulator of the section.
        join: the step join on group ids (``rewards=False``).
        read: a source's chunks (on the CPU), read again for each pass.
        context: a chunk as the section is fed it (moved to the analysis device).
        frames: file index -> (rows, per-sequence columns) of the per-sequence table, or
            None without one; the columns of files analysed again are replaced.
    """

    def __init__(
        self,
        total: CovarianceAccumulator,
        join: StepGroupJoin,
        read: ChunkReader,
        context: Callable[[TokenBatch], Context],
        frames: dict[int, tuple[Any, dict[str, Tensor]]] | None,
    ) -> None:
        self.total = total
        self.join = join
        self.read = read
        self.context = context
        self.frames = frames
        self._held: dict[int, _Held] = {}

    def add(
        self,
        step: Any,
        index: int,
        source: TokenBatch | Path,
        rows: FileSequences,
        acc: CovarianceAccumulator,
    ) -> None:
        """The section's result for file ``index`` of step ``step`` (None: a step of its
        own), fed that file alone; ``rows``: its per-sequence values (group ids)."""
        if not acc.grouped() or rows.group is None:
            self.total.merge(acc)  # one scope per file, or the file lacked an input
            return
        self._held[index] = _Held(acc, source, int(rows.group.shape[0]))
        for groups in self.join.add(step, rows):
            self._resolve(groups)
        self._release(self.join.oldest_open_file(default=index + 1))

    def finish(self) -> None:
        """Close the last step; the join's counts go to the section's notes."""
        for groups in self.join.finish():
            self._resolve(groups)
        self._release(None)
        self.total.record_join(self.join.counts)

    def oldest_open_file(self, default: int) -> int:
        """The first file whose per-sequence columns may still change."""
        return min([*self._held, self.join.oldest_open_file(default)], default=default)

    # ------------------------------------------------------------------ internals
    def _resolve(self, groups: JoinedGroups) -> None:
        """The whole groups of a closed step: each smallest set of files that holds
        them whole is one batch."""
        for files in linked_files(groups.files, groups.group):
            held = self._held.get(files[0])
            rows = int((groups.files == files[0]).sum())
            # one file, every row of it: the file's groups, all whole, and its own result
            if len(files) == 1 and held is not None and held.acc is not None and rows == held.rows:
                self.total.merge(held.acc)
                del self._held[files[0]]
                continue
            fresh = sum(self._forget(index) for index in files)
            acc = self._passes(files, groups)
            acc.joined_files(fresh)
            self.total.merge(acc)

    def _forget(self, index: int) -> bool:
        """Drop file ``index``'s own result (its rows are analysed with other files, or
        left out): whether it had one, i.e. the file is new to the joined passes."""
        held = self._held[index]
        if held.acc is None:
            return False
        held.acc = None
        if self.frames is not None and index in self.frames:
            columns = self.frames[index][1]
            for key in [k for k in columns if k in SEQUENCE_COLUMNS]:
                columns[key] = torch.full_like(columns[key], math.nan, dtype=torch.float64)
        return True

    def _release(self, before: int | None) -> None:
        """Files before ``before`` (None: all) are final: one whose result was never
        taken holds only groups left out."""
        for index in sorted(self._held):
            if before is not None and index >= before:
                break
            self._forget(index)
            del self._held[index]

    def _passes(self, files: list[int], groups: JoinedGroups) -> CovarianceAccumulator:
        """A fresh section fed, pass after pass, the rows of ``groups`` of every file of
        ``files`` in order, with the joined group ids."""
        ids = {index: self._ids(index, groups) for index in files}
        acc = CovarianceAccumulator(self.total.params)
        begun = False
        for number in range(acc.passes):
            for index in files:
                for chunk in self.read(self._held[index].source):
                    part = whole_group_rows(chunk, ids[index])
                    if part is None:
                        continue
                    rows, batch = part
                    if not begun:
                        begun = acc.begin_file(batch)
                        acc.begin_passes(in_memory=False)
                    columns = acc.update_pass(number, self.context(batch))
                    if columns:
                        self._write(index, rows, columns)
            acc.end_pass(number)
        return acc

    def _ids(self, index: int, groups: JoinedGroups) -> Tensor:
        """[rows] the joined group id of each row of file ``index``; -1 outside
        ``groups``."""
        ids = torch.full((self._held[index].rows,), -1, dtype=torch.int64)
        take = groups.files == index
        ids[groups.rows[take]] = groups.group[take]
        return ids

    def _write(self, index: int, rows: Tensor, columns: dict[str, Tensor]) -> None:
        if self.frames is None or index not in self.frames:
            return
        file_rows, table = self.frames[index]
        for key, values in columns.items():
            column = table.get(key)
            if column is None:
                column = torch.full((file_rows.sequences,), math.nan, dtype=torch.float64)
                table[key] = column
            column[rows] = values.detach().to("cpu", torch.float64)


def linked_files(files: Tensor, group: Tensor) -> list[list[int]]:
    """The files of joined rows (``files``, ``group``: [N]) in the smallest sets that
    hold their groups whole (files linked by a group with rows in both), each set in
    file order, the sets in order of their first file."""
    parent: dict[int, int] = {}

    def root(index: int) -> int:
        while parent.setdefault(index, index) != index:
            index = parent[index]
        return index

    first: dict[int, int] = {}  # group -> a file holding some of its rows
    for index, gid in zip(files.tolist(), group.tolist(), strict=True):
        other = first.setdefault(gid, index)
        parent[root(index)] = root(other)
    sets: dict[int, list[int]] = {}
    for index in sorted(parent):
        sets.setdefault(root(index), []).append(index)
    return sorted(sets.values())


def whole_group_rows(chunk: TokenBatch, ids: Tensor) -> tuple[Tensor, TokenBatch] | None:
    """The rows of ``chunk`` in ``ids``' groups (ids [file rows], -1: left out) as a
    batch whose ``group`` holds the joined ids, with their file rows; None when none."""
    start = chunk.row_offset
    mine = ids[start : start + chunk.num_sequences]
    keep = mine >= 0
    if not bool(keep.any()):
        return None
    where = keep.nonzero().squeeze(1)
    group = mine[where]
    if int(where.numel()) == chunk.num_sequences:
        return start + where, replace(chunk, group=group, group_labels=None)
    updates: dict[str, Any] = {}
    for name in CANONICAL_KEYS:
        value = getattr(chunk, name)
        if value is not None:
            updates[name] = value.index_select(0, where.to(value.device))
    updates["group"] = group
    functions = {name: v.index_select(0, where) for name, v in chunk.reward_functions.items()}
    return start + where, replace(
        chunk, **updates, reward_functions=functions, group_labels=None, row_offset=0, warnings=[]
    )
