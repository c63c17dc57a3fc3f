"""What ``plot objectives`` draws: one sequence's coefficients per method, and the run's
concentration curves (:mod:`ratioscope.objectives`)."""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from torch import Tensor

    from ratioscope.data.batch import TokenBatch
    from ratioscope.functional.objectives import Coefficients
    from ratioscope.io.loaders import LoadOptions
    from ratioscope.objective_family.step_join import FileCoefficientJoin, FileCoefficients

CHOSEN_BECAUSE = (
    "chosen: the first file's sequence on which the most methods move its tokens and "
    "differ from each other, then on which their rules bind on the most tokens"
)
#: two methods whose coefficients along a sequence differ by less than this share of the
#: larger |coefficient| are the same there (drawn as one line)
SAME_TRACE = 1e-3


@dataclass(frozen=True)
class CoefficientTrace:
    """One sequence's per-token coefficient under each method.

    Attributes:
        source: the file; row: the row in it; index: counted over all files.
        chosen_because: why this sequence ("" when it was asked for).
        advantage: the sequence's advantage at its first token (None without one).
        correct: its correctness (None when unknown).
        values: per method, the exact coefficient ``dJ/d log pi`` on this batch at each
            valid token (the batch constant applied).
        bound: per method, whether one of its rules binds at each valid token.
        labels: per method, its label (a method that left the sequence out, its group
            short of the trainer's group size, is not among them).
        notes: what joining the groups of a step's files did, as ``objectives`` says it.
        left_out: the labels of the methods that left this sequence out (its group
            short of the trainer's group size after joining).
    """

    source: str
    row: int
    index: int
    chosen_because: str
    advantage: float | None
    correct: bool | None
    values: dict[str, list[float]]
    bound: dict[str, list[bool]]
    labels: dict[str, str]
    notes: list[str] = field(default_factory=list)
    left_out: list[str] = field(default_factory=list)


def informative_row(coefficients: dict[str, Coefficients], mask: Tensor) -> int:
    """The row on which the most methods have a non-zero coefficient (a method that is 0
    on every token shows nothing to compare), then the most distinct traces (methods
    the same within :data:`SAME_TRACE` count once), then on which the rules of the most
    of those methods bind somewhere, then on the most tokens, ties to the longer row,
    then the first; 0 for no rows.

    Args:
        coefficients: per method, its coefficients on the batch ([B, T] values and flags).
        mask: [B, T] valid tokens.
    """
    import torch

    rows = mask.shape[0]
    if rows == 0:
        return 0
    moving = torch.zeros(rows, dtype=torch.long)
    binding = torch.zeros(rows, dtype=torch.long)
    bound = torch.zeros(rows, dtype=torch.long)
    for coef in coefficients.values():
        any_flag = torch.zeros(mask.shape, dtype=torch.bool)
        for flag in coef.flags.values():
            any_flag |= flag
        nonzero = (coef.values != 0).any(dim=1)
        moving += nonzero.long()
        # a rule that zeroes the whole row is counted by ``moving``, not here
        tokens = (any_flag & mask).sum(dim=1) * nonzero.long()
        binding += (tokens > 0).long()
        bound += tokens
    distinct = _distinct_traces(coefficients, mask)
    lengths = mask.sum(dim=1)
    return max(
        range(rows),
        key=lambda r: (
            int(moving[r]), int(distinct[r]), int(binding[r]), int(bound[r]), int(lengths[r]),
            -r,
        ),
    )  # fmt: skip


def _distinct_traces(coefficients: dict[str, Coefficients], mask: Tensor) -> Tensor:
    """Per row, how many of the methods' traces differ from every earlier method's (by
    more than :data:`SAME_TRACE` of the larger magnitude somewhere): [B] int64."""
    import torch

    traces = [(coef.values * coef.scale).masked_fill(~mask, 0.0) for coef in coefficients.values()]
    magnitudes = [trace.abs().amax(dim=1) for trace in traces]
    distinct = torch.zeros(mask.shape[0], dtype=torch.long)
    for i, trace in enumerate(traces):
        repeated = torch.zeros(mask.shape[0], dtype=torch.bool)
        for j in range(i):
            gap = (trace - traces[j]).abs().amax(dim=1)
            repeated |= gap <= SAME_TRACE * torch.maximum(magnitudes[i], magnitudes[j])
        distinct += (~repeated).long()
    return distinct


def coefficient_trace(
    paths: Iterable[str | Path],
    index: int | None = None,
    methods: Sequence[str] | str | None = None,
    settings: dict[str, dict[str, Any]] | None = None,
    load_options: LoadOptions | None = None,
) -> CoefficientTrace:
    """The coefficients of sequence ``index`` (counted over all files in order), or of
    the first file's :func:`informative_row`, each computed on the batch that
    :func:`ratioscope.objectives` gives the sequence (its file, or the files of its
    step that hold its group whole: :class:`ratioscope.objective_family.step_join.
    FileCoefficientJoin`), with the trainer's clip band as there.

    Raises:
        ParameterError: ``index`` is past the last sequence.
    """
    from ratioscope.analysis.steps import step_from_name
    from ratioscope.errors import ParameterError
    from ratioscope.io.loaders import LoadOptions, RunFiles, expand_paths
    from ratioscope.objective_family.methods import METHODS, looks_across_groups, method_names
    from ratioscope.objective_family.side_by_side import _trainer_clip, batch_coefficients
    from ratioscope.objective_family.step_join import FileCoefficientJoin

    names = method_names(
        methods if methods is None or isinstance(methods, str) else ",".join(methods)
    )
    chosen = {name: METHODS[name].settings((settings or {}).get(name)) for name in names}
    files = expand_paths(list(paths))
    options = load_options or LoadOptions()
    _, group_size, _ = _trainer_clip(files, options, chosen, settings or {})
    across = [n for n in names if looks_across_groups(n, chosen[n])]
    others = tuple(n for n in names if n not in across)

    def compute(batch: TokenBatch, every_method: bool) -> dict[str, Coefficients]:
        return batch_coefficients(batch, names if every_method else others, chosen)

    join = FileCoefficientJoin(
        compute, group_size, bool(options.group_size), [METHODS[n].label for n in across]
    )
    run = RunFiles(len(files), options)
    seen = 0

    def final(number: int, path: Path) -> Iterator[tuple[Path, FileCoefficients]]:
        batch = run.load(path)
        if batch is not None:
            for done in join.add(step_from_name(path), number, batch):
                yield files[done.index], done

    read = (pair for number, path in enumerate(files) for pair in final(number, path))
    for path, done in itertools.chain(read, ((files[d.index], d) for d in _finish(join))):
        batch = done.batch
        if index is not None and index >= seen + batch.num_sequences:
            seen += batch.num_sequences
            continue
        coefficients = done.scaled()
        if index is None:
            shown = {k: _zero_nan(c) for k, c in coefficients.items()}
            row = informative_row(shown, batch.mask)
        else:
            row = index - seen
        valid = batch.mask[row]
        kept = {k: c for k, c in coefficients.items() if not bool(c.values[row].isnan().any())}
        advantage = None if batch.advantages is None else float(batch.advantages[row, 0])
        correct = None if batch.correct is None else bool(batch.correct[row])
        return CoefficientTrace(
            source=str(path),
            row=row,
            index=seen + row,
            chosen_because=CHOSEN_BECAUSE if index is None else "",
            advantage=advantage,
            correct=correct,
            values={name: coef.values[row][valid].tolist() for name, coef in kept.items()},
            bound={name: _bound(coef, row, valid) for name, coef in kept.items()},
            labels={name: METHODS[name].label for name in kept},
            notes=join.notes("plot objectives' coefficients"),
            left_out=[METHODS[k].label for k in coefficients if k not in kept],
        )
    run.check_any(seen > 0)
    raise ParameterError("sequence", f"{index} is out of range: the input has {seen} sequences")


def _finish(join: FileCoefficientJoin) -> Iterator[FileCoefficients]:
    """The files still held once every file was read (lazily: only when asked)."""
    yield from join.finish()


def _zero_nan(coef: Coefficients) -> Coefficients:
    """``coef`` with the rows a method left out as 0 (no movement), for the choice."""
    from ratioscope.functional.objectives import Coefficients

    return Coefficients(coef.values.nan_to_num(0.0), coef.scale, coef.flags)


def _bound(coef: Coefficients, row: int, valid: Tensor) -> list[bool]:
    import torch

    flags = torch.zeros(valid.shape, dtype=torch.bool)
    for flag in coef.flags.values():
        flags |= flag[row]
    return flags[valid].tolist()
