"""``objectives``' per-token coefficients on the whole groups of a training step.

Dr. GRPO's and QUATRO's advantages and CW-GRPO's kernel weights (scope ``group``) look
across the rows of a prompt's group, and every method normalises over its batch. A file
that holds whole groups (every sample of each of its groups, none short of the trainer's
group size, and, with ``batch_rows``, no group cut by two of its batches) keeps the
coefficients computed as it was read. The other files wait for their step to close
(:class:`ratioscope.sections.group_join.StepGroupJoin`, on the group ids alone): then each
smallest set of files that holds their groups whole (files linked by a group with samples
in each) is one batch: the rows of those groups, read again from each file of the set
(streamed in ``batch_rows`` chunks where the file type allows), concatenated in the
order of the files, with the groups joined by id. Memory then holds the rows of that set
(a slime step split over its ranks is the whole step). With ``batch_rows`` the set is
cut into batches only between groups (groups in order of their first row; a group larger
than ``batch_rows`` is a batch of its own), so no group is split.

A group short of the trainer's group size is completed from the next step's files, as
the other group-level numbers complete it, or left out of the methods that look across
a group (:func:`ratioscope.objective_family.methods.looks_across_groups`) and counted in a
note; the other methods take its rows, file by file.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor

from ratioscope.data.batch import TokenBatch
from ratioscope.sections.group_join import FileSequences, JoinedGroups, StepGroupJoin
from ratioscope.sections.scope_join import linked_files, whole_group_rows

if TYPE_CHECKING:
    from ratioscope.functional.objectives import Coefficients
    from ratioscope.objective_family.totals import Totals

#: ``(batch, totals, every_method)``: fold the batch's coefficients into ``totals``;
#: ``every_method`` False leaves out the methods that look across a group
Fold = Callable[[TokenBatch, "Totals", bool], None]
#: a source's chunks in file order, read anew on every call (their ``row_offset`` set)
ChunkReader = Callable[[TokenBatch | Path], Iterable[TokenBatch]]


class FileGroups:
    """The group ids and rewards of one file, gathered from its batches as it is read,
    and whether two of its batches cut a group."""

    def __init__(self) -> None:
        self.group: list[Tensor] = []
        self.rewards: list[Tensor] = []
        self.labels: list[Any] | None = None
        self.rows = 0
        self.missing = False
        self.cut = False
        self._seen: set[int] = set()

    def add(self, batch: TokenBatch) -> None:
        """One batch of the file (its rows follow the previous batch's)."""
        self.rows += batch.num_sequences
        if batch.group is None:
            self.missing = True
            return
        ids = batch.group.detach().to("cpu", torch.int64)
        self.group.append(ids)
        if batch.rewards is not None:
            self.rewards.append(batch.rewards.detach().to("cpu", torch.float64))
        self.labels = batch.group_labels
        here = set(ids.unique().tolist())
        self.cut = self.cut or bool(here & self._seen)
        self._seen |= here

    def sequences(self, index: int, source: str) -> FileSequences | None:
        """The file's rows for the join, or None when a batch had no group ids."""
        if self.missing or not self.group:
            return None
        rewards = torch.cat(self.rewards) if len(self.rewards) == len(self.group) else None
        return FileSequences(index, source, rewards, None, torch.cat(self.group), self.labels)


@dataclass
class _Held:
    """A file's own coefficients, until its step says whether its groups are whole.

    Attributes:
        totals: the sums of the file's batches (None once its rows went elsewhere).
        source: the file (or batch) to read again; rows: its sequences; whole: its own
            batches cut no group; placed: [rows] bool, the rows taken into a joined batch.
    """

    totals: Totals | None
    source: TokenBatch | Path
    rows: int
    whole: bool
    placed: Tensor


class StepCoefficients:
    """Feeds the run's totals each file's own coefficients or, for the files whose
    groups they do not hold whole, those of the joined batches (see the module
    docstring).

    Args:
        total: the run's sums.
        join: the step join on group ids (``rewards=False``).
        fold: computes a batch's coefficients into a totals object.
        read: a source's chunks, read again.
        batch_rows: the batch size in sequences, or None (a set is one batch).
        across: the chosen methods that look across a group (names; their labels
            ``labels`` for the notes).
    """

    def __init__(
        self,
        total: Totals,
        join: StepGroupJoin,
        fold: Fold,
        read: ChunkReader,
        batch_rows: int | None,
        across: Sequence[str],
        labels: Sequence[str] = (),
    ) -> None:
        self.total = total
        self.join = join
        self.fold = fold
        self.read = read
        self.batch_rows = batch_rows
        self.across = tuple(across)
        self.labels = tuple(labels) or self.across
        self.notes: list[str] = []
        #: files whose split groups made them one batch with other files
        self.linked: set[int] = set()
        self._held: dict[int, _Held] = {}

    def add(
        self,
        step: Any,
        index: int,
        source: TokenBatch | Path,
        rows: FileSequences | None,
        totals: Totals,
        whole: bool,
    ) -> None:
        """File ``index`` of step ``step`` (None: a step of its own), its coefficients
        ``totals`` computed on its own batches; ``rows``: its group ids (None: it has
        none, and its coefficients stand); ``whole``: its batches cut no group."""
        if rows is None or rows.group is None:
            self.total.merge(totals)
            return
        count = int(rows.group.shape[0])
        placed = torch.zeros(count, dtype=torch.bool)
        self._held[index] = _Held(totals, source, count, whole, placed)
        for groups in self.join.add(step, rows):
            self._resolve(groups)
        self._release(self.join.oldest_open_file(default=index + 1))

    def finish(self) -> list[str]:
        """Close the last step; the notes of the joined batches (what the join did is
        in ``join.counts`` and :attr:`linked`)."""
        for groups in self.join.finish():
            self._resolve(groups)
        self._release(None)
        return list(dict.fromkeys(self.notes))

    # ------------------------------------------------------------------ internals
    def _resolve(self, groups: JoinedGroups) -> None:
        """The whole groups of a closed step: each smallest set of files that holds
        them whole is one batch (or several, cut between groups)."""
        for files in linked_files(groups.files, groups.group):
            first = self._held[files[0]]
            rows = int((groups.files == files[0]).sum())
            # one file, every row of it in whole groups, none cut by its own batches
            alone = len(files) == 1 and first.whole and rows == first.rows
            if alone and first.totals is not None:
                self.total.merge(first.totals)
                first.totals = None
                first.placed[:] = True
                continue
            if len(files) > 1:
                self.linked.update(files)
            for index in files:
                self._held[index].totals = None
            for batch in _cut_between_groups(self._joined(files, groups), self.batch_rows):
                self.fold(batch, self.total, True)

    def _joined(self, files: list[int], groups: JoinedGroups) -> TokenBatch:
        """The rows of ``groups`` in ``files``, in file order, as one batch whose
        ``group`` holds the joined ids."""
        parts: list[TokenBatch] = []
        for index in files:
            held = self._held[index]
            ids = torch.full((held.rows,), -1, dtype=torch.int64)
            take = groups.files == index
            ids[groups.rows[take]] = groups.group[take]
            held.placed[groups.rows[take]] = True
            parts.append(self._rows_of(held.source, ids))
        batch = self._concatenated(parts)
        assert batch.group is not None
        return replace(batch, group=_compact(batch.group))

    def _rows_of(self, source: TokenBatch | Path, ids: Tensor) -> TokenBatch:
        """The rows of ``source`` whose ``ids`` ([file rows], -1: not taken) are >= 0,
        read again chunk by chunk, as one batch whose ``group`` holds those ids."""
        parts = []
        for chunk in self.read(source):
            part = whole_group_rows(chunk, ids)
            if part is not None:
                parts.append(replace(part[1], warnings=[], row_offset=0))
        return self._concatenated(parts)

    def _concatenated(self, parts: list[TokenBatch]) -> TokenBatch:
        """``parts`` as one batch (:func:`_concatenated`), their notes kept."""
        merged, notes = _concatenated(parts)
        self.notes.extend(notes)
        return merged

    def _release(self, before: int | None) -> None:
        """Files before ``before`` (None: all) are final: their rows in no whole group
        go to the methods that do not look across a group."""
        for index in sorted(self._held):
            if before is not None and index >= before:
                break
            held = self._held.pop(index)
            if held.totals is not None:  # none of its rows is in a whole group
                self._drop_across(held.totals)
                self.total.merge(held.totals)
                continue
            left = ~held.placed
            if not bool(left.any()):
                continue
            # the left-out rows of the file (few) gathered, then cut anywhere
            batch = self._rows_of(held.source, torch.where(left, 0, -1))
            batch = replace(batch, group=None, group_labels=None)
            for piece in _cut_between_groups(batch, self.batch_rows):
                self.fold(piece, self.total, False)

    def _drop_across(self, totals: Totals) -> None:
        """``totals`` without the methods that look across a group (its rows were in no
        whole group)."""
        for name in self.across:
            totals.methods.pop(name, None)
        totals.pairs = {k: v for k, v in totals.pairs.items() if not set(k) & set(self.across)}


#: ``(batch, every_method)``: the chosen methods' coefficients on ``batch``;
#: ``every_method`` False leaves out the methods that look across a group
Compute = Callable[[TokenBatch, bool], "dict[str, Coefficients]"]


@dataclass
class FileCoefficients:
    """One file's per-token coefficients, each row's computed on the batch that
    ``objectives`` gives it (:class:`FileCoefficientJoin`).

    Attributes:
        index: the file's index as fed; batch: the file as read ([B, T]).
        coefficients: per method, [B, T] float64 values and flags of the file's rows,
            each row's values up to its own batch constant; NaN on the rows the method
            left out (its group short of the trainer's group size) or could not compute.
        scales: per method, [B] float64: each row's batch constant (NaN where left out).
    """

    index: int
    batch: TokenBatch
    coefficients: dict[str, Coefficients]
    scales: dict[str, Tensor]

    def scaled(self) -> dict[str, Coefficients]:
        """The exact coefficients (``values`` times each row's constant, ``scale`` 1)."""
        from ratioscope.functional.objectives import Coefficients

        return {
            name: Coefficients(coef.values * self.scales[name].unsqueeze(1), 1.0, coef.flags)
            for name, coef in self.coefficients.items()
        }


@dataclass
class _HeldFile:
    """A file read, until its step says on which batches its rows' coefficients are:
    ``placed`` [B] bool, rows already in a batch; ``pieces``: (file rows, the batch's
    coefficients, those rows' rows in that batch)."""

    batch: TokenBatch
    placed: Tensor
    pieces: list[tuple[Tensor, dict[str, Coefficients], Tensor]]


class FileCoefficientJoin:
    """Each file's per-token coefficients on the batches :func:`ratioscope.objectives`
    folds (see the module docstring), for views of single sequences (``plot
    objectives``, the run report's sequence pages): a file holding whole groups is its
    own batch; the files of a step linked by a split group are one batch of their rows
    of whole groups in file order; the rows of groups still short of the trainer's group
    size get the methods that do not look across a group, on a batch of those rows.

    Feed :meth:`add` each file read whole, in run order, then :meth:`finish`; each
    returns the files that became final, in order. Memory holds the files of the open
    step (and of the step before, while a group waits for the next step).

    Args:
        compute: a batch's coefficients.
        group_size: the trainer's group size, or None when unknown.
        own_ids: the group ids are each file's own (``--group-size``), never joined.
        labels: the labels of the chosen methods that look across a group, for the note.
    """

    def __init__(
        self,
        compute: Compute,
        group_size: int | None,
        own_ids: bool = False,
        labels: Sequence[str] = (),
    ) -> None:
        self.compute = compute
        self.join = StepGroupJoin(group_size, own_ids=own_ids, rewards=False)
        self.labels = tuple(labels)
        self.linked: set[int] = set()  # files in a batch with other files
        self.messages: list[str] = []
        self._held: dict[int, _HeldFile] = {}

    def add(self, step: Any, index: int, batch: TokenBatch) -> list[FileCoefficients]:
        """File ``index`` (greater than the last one's) of step ``step`` (None: a step
        of its own), read whole; the files now final."""
        held = _HeldFile(batch, torch.zeros(batch.num_sequences, dtype=torch.bool), [])
        self._held[index] = held
        groups = FileGroups()
        groups.add(batch)
        rows = groups.sequences(index, batch.source)
        if rows is None:  # no group ids: a batch of its own
            self._place(held, torch.arange(batch.num_sequences), batch, every_method=True)
        else:
            for joined in self.join.add(step, rows):
                self._resolve(joined)
        return self._release(self.join.oldest_open_file(default=index + 1))

    def finish(self) -> list[FileCoefficients]:
        """Close the last step: the files still held."""
        for joined in self.join.finish():
            self._resolve(joined)
        return self._release(None)

    def notes(self, name: str) -> list[str]:
        """What the join did so far, in one sentence naming ``name`` (none when it did
        nothing), and the notes of the joined batches."""
        counts = self.join.counts
        parts = []
        if counts.joined:
            parts.append(
                f"{name}: {counts.joined} group(s) with samples in more than one file of "
                f"their step were joined by group id ({len(self.linked)} files)"
            )
        if counts.completed:
            parts.append(f"{counts.completed} group(s) completed from the next step's files")
        if counts.incomplete:
            where = (
                f"left out of {', '.join(self.labels)} (the other methods take their rows)"
                if self.labels
                else "kept by every chosen method (none looks across a group)"
            )
            parts.append(
                f"{counts.incomplete} group(s) ({counts.incomplete_rows} samples) still short "
                f"of the trainer's group size, {where}"
            )
        if parts and not counts.joined:
            parts[0] = f"{name}: {parts[0]}"
        return ["; ".join(parts)] * bool(parts) + list(dict.fromkeys(self.messages))

    # ------------------------------------------------------------------ internals
    def _resolve(self, groups: JoinedGroups) -> None:
        for files in linked_files(groups.files, groups.group):
            parts: list[tuple[int, Tensor, TokenBatch]] = []
            for index in files:
                held = self._held[index]
                ids = torch.full((held.batch.num_sequences,), -1, dtype=torch.int64)
                take = groups.files == index
                ids[groups.rows[take]] = groups.group[take]
                part = whole_group_rows(replace(held.batch, row_offset=0), ids)
                if part is not None:
                    parts.append((index, part[0], replace(part[1], warnings=[], row_offset=0)))
            if not parts:
                continue
            if len(files) > 1:
                self.linked.update(files)
            batch, notes = _concatenated([p for _, _, p in parts])
            self.messages.extend(notes)
            assert batch.group is not None
            coefficients = self.compute(replace(batch, group=_compact(batch.group)), True)
            start = 0
            for index, rows, taken in parts:
                at = torch.arange(start, start + taken.num_sequences)
                self._held[index].pieces.append((rows, coefficients, at))
                self._held[index].placed[rows] = True
                start += taken.num_sequences

    def _place(self, held: _HeldFile, rows: Tensor, batch: TokenBatch, every_method: bool) -> None:
        """``rows`` of the file are the rows of ``batch``, in order."""
        coefficients = self.compute(batch, every_method)
        held.pieces.append((rows, coefficients, torch.arange(batch.num_sequences)))
        held.placed[rows] = True

    def _release(self, before: int | None) -> list[FileCoefficients]:
        """Files before ``before`` (None: all) are final; as ``objectives`` folds them,
        a file none of whose rows is in a whole group keeps its own batch for the
        methods that do not look across a group, else its other rows are one batch."""
        out = []
        for index in sorted(self._held):
            if before is not None and index >= before:
                break
            held = self._held.pop(index)
            left = ~held.placed
            if not bool(held.placed.any()):
                self._place(held, torch.arange(held.batch.num_sequences), held.batch, False)
            elif bool(left.any()):
                ids = torch.where(left, 0, -1)
                part = whole_group_rows(replace(held.batch, row_offset=0), ids)
                assert part is not None
                rows, batch = part
                batch = replace(batch, group=None, group_labels=None, row_offset=0, warnings=[])
                self._place(held, rows, batch, False)
            out.append(_gathered(index, held))
        return out


def _gathered(index: int, held: _HeldFile) -> FileCoefficients:
    """The file's rows' coefficients gathered from the batches that computed them."""
    from ratioscope.functional.objectives import Coefficients

    rows, width = held.batch.num_sequences, held.batch.max_length
    names = list(dict.fromkeys(name for _, coefs, _ in held.pieces for name in coefs))
    coefficients: dict[str, Coefficients] = {}
    scales: dict[str, Tensor] = {}
    for name in names:
        values = torch.full((rows, width), float("nan"), dtype=torch.float64)
        scale = torch.full((rows,), float("nan"), dtype=torch.float64)
        flags: dict[str, Tensor] = {}
        for at_file, coefs, at in held.pieces:
            coef = coefs.get(name)
            if coef is None:
                continue
            values[at_file] = coef.values[at, :width].to("cpu", torch.float64)
            scale[at_file] = float(coef.scale)
            for flag, on in coef.flags.items():
                mine = flags.setdefault(flag, torch.zeros((rows, width), dtype=torch.bool))
                mine[at_file] = on[at, :width].cpu()
        coefficients[name] = Coefficients(values, 1.0, flags)
        scales[name] = scale
    return FileCoefficients(index, held.batch, coefficients, scales)


def _concatenated(parts: list[TokenBatch]) -> tuple[TokenBatch, list[str]]:
    """``parts`` as one batch, their ``group`` ids kept as they are (one numbering for
    all, not made distinct per part as :func:`~ratioscope.io.loaders.concatenate` makes
    them), and the notes of the concatenation."""
    from ratioscope.io.loaders import concatenate

    group = torch.cat([p.group for p in parts if p.group is not None])
    merged = concatenate(parts) if len(parts) > 1 else parts[0]
    batch = replace(merged, group=group, group_labels=None, row_offset=0, warnings=[])
    return batch, list(merged.warnings)


def _compact(group: Tensor) -> Tensor:
    """[N] ``group`` renumbered 0..G-1 in order of each group's first row."""
    unique, inverse = torch.unique(group, return_inverse=True)
    first = torch.full((int(unique.numel()),), int(group.numel()), dtype=torch.int64)
    first.scatter_reduce_(0, inverse, torch.arange(int(group.numel())), "amin")
    rank = torch.empty_like(first)
    rank[torch.argsort(first)] = torch.arange(int(first.numel()))
    return rank[inverse]


def _cut_between_groups(batch: TokenBatch, rows: int | None) -> list[TokenBatch]:
    """``batch`` whole (``rows`` None), or in batches of at most ``rows`` sequences cut
    only between groups (groups in order of their first row, each batch's rows in the
    order of ``batch``; a group larger than ``rows`` is a batch of its own; rows without
    groups are cut anywhere)."""
    if rows is None or batch.num_sequences <= rows:
        return [batch]
    if batch.group is None:
        return list(batch.iter_chunks(rows))
    group = _compact(batch.group.detach().to("cpu", torch.int64))
    sizes = torch.bincount(group).tolist()
    which: list[int] = []  # group -> its batch
    batch_of, filled = 0, 0
    for size in sizes:
        if filled and filled + size > rows:
            batch_of, filled = batch_of + 1, 0
        which.append(batch_of)
        filled += size
    of_row = torch.tensor(which, dtype=torch.int64)[group]
    start = replace(batch, row_offset=0)
    out = []
    for number in range(batch_of + 1):
        ids = torch.where(of_row == number, group, -1)
        part = whole_group_rows(start, ids)
        assert part is not None  # every batch holds a group
        ids_of_part = part[1].group
        assert ids_of_part is not None
        out.append(replace(part[1], group=_compact(ids_of_part), warnings=[]))
    return out
