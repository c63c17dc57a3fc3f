"""What each objective would do to this batch: per-token coefficients side by side.

:func:`objectives` reads the dumps one file (one batch) at a time, computes every
method's per-token policy-gradient coefficient on it (:mod:`ratioscope.objective_family.methods`)
and folds them into mergeable sums: counts, sums of ``|c|`` and ``c^2``, the pairwise
sums behind the correlations, and log-magnitude histograms for the top shares, the Gini
coefficient and the concentration curves. A file is the unit because the methods
normalise over a batch (token-mean, CW-GRPO's sigma, the groups of Dr. GRPO and QUATRO);
pooling several files treats them as one batch. A batch never holds part of a group: the
files of a step that share a split group are one batch, their rows of whole groups read
again and concatenated (:mod:`ratioscope.objective_family.step_join`). The advantage schemes (GRPO,
Dr. GRPO, QUATRO, the dump's) work on the groups of each training step joined by group
id across the step's files too (:mod:`ratioscope.sections.group_join`). Counts, sums,
shares, ESS, sign flips and correlations are exact; top shares, Gini and curves are read
from the histograms, within their 1.16 % relative bin width (docs/objectives.md).
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ratioscope.functional.moments import add_fields
from ratioscope.objective_family.methods import (
    METHODS,
    REFERENCE,
    MethodInputs,
    MissingInput,
    Settings,
    chosen_settings,
    looks_across_groups,
    method_names,
)
from ratioscope.objective_family.totals import MethodTotals, Totals
from ratioscope.progress import ProgressCallback, ProgressUpdate, report

if TYPE_CHECKING:
    from torch import Tensor

    from ratioscope.analysis.parallel import Runner
    from ratioscope.data.batch import TokenBatch
    from ratioscope.functional.objectives import Coefficients
    from ratioscope.io.loaders import LoadOptions, RunFiles
    from ratioscope.objective_family.step_join import StepCoefficients
    from ratioscope.sections.group_join import JoinCounts, JoinedGroups

#: ``schema_version`` of the objectives JSON
OBJECTIVES_SCHEMA_VERSION = 1
#: fractions of the tokens at which the concentration curves are read
CURVE_FRACTIONS: tuple[float, ...] = (
    1e-4, 2e-4, 5e-4, 1e-3, 2e-3, 5e-3, 0.01, 0.02, 0.05, 0.1, 0.2, 0.3, 0.4, 0.5,
    0.6, 0.7, 0.8, 0.9, 1.0,
)  # fmt: skip
#: the top fraction of the headline "top 1 %" share
TOP_FRACTION = 0.01


@dataclass(frozen=True)
class MethodSummary:
    """One row of the side-by-side table (docs/objectives.md defines every field).

    Attributes:
        label, family, source: as :class:`~ratioscope.objective_family.methods.Method`.
        settings: the hyper-parameters used.
        tokens: valid tokens it ran on; files: batches.
        zero_share: share of tokens with coefficient exactly 0 (clipped or masked away).
        top_share: share of the total ``|c|`` held by the top 1 % of tokens.
        gini: Gini coefficient of ``|c|``.
        ess: ``(sum |c|)^2 / (N sum c^2)``.
        sign_flips: among tokens where the reference's coefficient is non-zero, the
            share where this one has the opposite sign (None for the reference itself or
            when the reference did not run).
        positive_share, negative_share: shares of tokens pushed up / down.
        long_mass_share: share of ``sum |c|`` on sequences longer than their batch's
            median; long_token_share: their share of the tokens.
        flags: per rule of the method, the share of tokens on which it binds.
        mean, mean_abs: of the coefficient (up to the batch constant, see
            :class:`~ratioscope.functional.objectives.Coefficients`).
        curve: share of ``sum |c|`` held by the top fractions :data:`CURVE_FRACTIONS`.
        note: how it was computed where that varies (FPA exact or approximation).
    """

    label: str
    family: str
    source: str
    settings: dict[str, Any]
    tokens: int
    files: int
    zero_share: float
    top_share: float
    gini: float
    ess: float
    sign_flips: float | None
    positive_share: float
    negative_share: float
    long_mass_share: float
    long_token_share: float
    flags: dict[str, float]
    mean: float
    mean_abs: float
    curve: list[float]
    note: str | None = None


@dataclass(frozen=True)
class AdvantageScheme:
    """One advantage scheme on the batch's group rewards.

    Attributes:
        mean_abs: mean ``|A|`` over sequences.
        zero_share: share of sequences with ``A = 0``.
        short_mean_abs, long_mean_abs: mean ``|A|`` over sequences no longer / longer
            than their batch's median length.
    """

    mean_abs: float
    zero_share: float
    short_mean_abs: float
    long_mean_abs: float


@dataclass(frozen=True)
class AdvantageSummary:
    """Advantage schemes side by side (GRPO, Dr. GRPO, QUATRO, and the dump's own).

    Attributes:
        groups, zero_variance_groups: groups, and those whose rewards are all equal (their
            advantage is 0 in every scheme).
        sequences: sequences counted.
        schemes: per scheme.
    """

    groups: int
    zero_variance_groups: int
    sequences: int
    schemes: dict[str, AdvantageScheme]


@dataclass
class ObjectivesReport:
    """The side-by-side view of a run (``ratioscope objectives --json``)."""

    tool: dict[str, Any]
    inputs: list[dict[str, Any]]
    params: dict[str, Any]
    methods: dict[str, MethodSummary]
    correlation: dict[str, Any]
    advantages: AdvantageSummary | None
    rollout_ratio: dict[str, Any] | None
    skipped: dict[str, str]
    warnings: list[str]
    schema_version: int = OBJECTIVES_SCHEMA_VERSION
    kind: str = "objectives"

    def to_dict(self) -> dict[str, Any]:
        from ratioscope.io.documents import to_jsonable

        return {
            "schema_version": self.schema_version,
            "kind": self.kind,
            "tool": self.tool,
            "inputs": self.inputs,
            "params": self.params,
            "methods": to_jsonable(self.methods),
            "correlation": to_jsonable(self.correlation),
            "advantages": to_jsonable(self.advantages),
            "rollout_ratio": to_jsonable(self.rollout_ratio),
            "skipped": self.skipped,
            "warnings": self.warnings,
        }

    def write_json(self, path: str | Path) -> None:
        from ratioscope.io.documents import write_json

        write_json(self.to_dict(), path)


# ------------------------------------------------------------------- the batch pass
def batch_coefficients(
    batch: TokenBatch,
    names: Sequence[str],
    settings: Mapping[str, Settings],
    skipped: dict[str, str] | None = None,
    notes: dict[str, str] | None = None,
) -> dict[str, Coefficients]:
    """Every named method's coefficients on one batch; methods whose inputs are missing
    are left out, with the reason in ``skipped``."""
    inputs = MethodInputs(batch, base_settings=settings.get(REFERENCE))
    out: dict[str, Coefficients] = {}
    for name in names:
        method = METHODS[name]
        try:
            out[name] = method.compute(inputs, settings[name])
        except MissingInput as missing:
            if skipped is not None:
                skipped.setdefault(name, missing.reason)
    if notes is not None and "fpa_method" in inputs.cache:
        notes["fpa"] = f"future policy: {inputs.cache['fpa_method']}"
    return out


def long_rows(mask: Tensor) -> Tensor:
    """[B] bool: sequences longer than the batch's median valid length."""
    import torch

    lengths = mask.sum(dim=1).double()
    present = lengths > 0
    if not bool(present.any()):
        return present
    median = float(torch.quantile(lengths[present], 0.5))
    return present & (lengths > median)


def _share(part: float, whole: float) -> float:
    return part / whole if whole else math.nan


def _summary(
    name: str, totals: MethodTotals, settings: Settings, note: str | None
) -> MethodSummary:
    from ratioscope.functional.concentration import (
        concentration_curve_from_bins,
        effective_sample_size,
        gini_from_bins,
        top_share_from_bins,
    )

    method = METHODS[name]
    n = totals.tokens
    return MethodSummary(
        label=method.label,
        family=method.family,
        source=method.source,
        settings=dict(settings),
        tokens=n,
        files=totals.files,
        zero_share=_share(totals.zero, n),
        top_share=top_share_from_bins(totals.bin_counts, totals.bin_sums, TOP_FRACTION),
        gini=gini_from_bins(totals.bin_counts, totals.bin_sums),
        ess=effective_sample_size(totals.sum_abs, totals.sum_squares, n),
        sign_flips=(
            None
            if name == REFERENCE or totals.reference_nonzero == 0
            else totals.opposite / totals.reference_nonzero
        ),
        positive_share=_share(totals.positive, n),
        negative_share=_share(totals.negative, n),
        long_mass_share=_share(totals.long_abs, totals.sum_abs),
        long_token_share=_share(totals.long_tokens, n),
        flags={key: _share(count, n) for key, count in sorted(totals.flags.items())},
        mean=_share(totals.sum, n),
        mean_abs=_share(totals.sum_abs, n),
        curve=concentration_curve_from_bins(totals.bin_counts, totals.bin_sums, CURVE_FRACTIONS),
        note=note,
    )


def _correlation(totals: Totals) -> dict[str, Any]:
    names = [n for n in totals.names if n in totals.methods]
    matrix = [
        [totals.pairs[(a, b)].correlation() if (a, b) in totals.pairs else math.nan for b in names]
        for a in names
    ]
    return {"methods": names, "matrix": matrix}


def objectives(
    paths: str | Path | Sequence[str | Path] | TokenBatch,
    *,
    methods: Sequence[str] | str | None = None,
    settings: dict[str, dict[str, Any]] | None = None,
    load_options: LoadOptions | None = None,
    batch_rows: int | None = None,
    progress: ProgressCallback | None = None,
    runner: Runner | None = None,
) -> ObjectivesReport:
    """The per-token policy-gradient coefficient of each method on the dumped batches,
    compared side by side.

    Args:
        paths: dump files, directories or globs (one file = one batch, unless
            ``batch_rows``), or a :class:`~ratioscope.data.batch.TokenBatch`.
        batch_rows: cut each file into batches of this many sequences, read one at a
            time (a large file is streamed, so memory is bounded by one batch), as a
            trainer computes its loss per mini-batch; None: one file is one batch. A
            batch never cuts a group: the files of a step that share a split group are
            joined into one batch (memory: their rows), cut only between groups.
        methods: names (or a comma-separated string) from
            :data:`~ratioscope.objective_family.methods.METHODS`; default all.
        settings: ``{method: {key: value}}`` overriding the defaults.
        load_options: how files are read (format, key map, ...).
        progress: callback receiving "files" updates.
        runner: where the files are read (:class:`ratioscope.analysis.parallel.Runner`: local
            processes or Ray, one task per step's files, their sums added in file
            order; default this process).

    Returns:
        :class:`ObjectivesReport`.
    """
    from ratioscope.data.batch import TokenBatch
    from ratioscope.io.loaders import LoadOptions, expand_paths

    names = method_names(methods)
    chosen = chosen_settings(names, settings)
    options = load_options or LoadOptions()
    if batch_rows is not None and batch_rows < 1:
        from ratioscope.errors import ParameterError

        raise ParameterError("batch_rows", f"must be >= 1 sequence, got {batch_rows}")
    if isinstance(paths, TokenBatch):
        sources: list[TokenBatch | Path] = [paths]
    else:
        listed = [paths] if isinstance(paths, (str, Path)) else list(paths)
        sources = list(expand_paths(listed))
    trainer, group_size, settings_note = _trainer_clip(sources, options, chosen, settings or {})
    if runner is not None and runner.parallel and not isinstance(paths, TokenBatch):
        sums = _sums_in_tasks([p for p in sources if isinstance(p, Path)], names, chosen,
                              options, batch_rows, runner, progress, group_size)  # fmt: skip
    else:
        sums = _file_sums(
            sources, names, chosen, options, batch_rows, progress, group_size=group_size
        )
    result = _objectives_report(sums, names, chosen, batch_rows)
    if settings_note is not None:
        result.warnings.insert(0, settings_note)
    if trainer is not None:
        result.params["trainer"] = trainer
    return result


def _trainer_clip(
    sources: Sequence[TokenBatch | Path],
    options: LoadOptions,
    chosen: dict[str, dict[str, Any]],
    overrides: Mapping[str, Mapping[str, Any]],
) -> tuple[dict[str, Any] | None, int | None, str | None]:
    """The reference method's clip band from the trainer's settings
    (``options.trainer_settings``, else those recorded in the first file, or
    ``options.trainer``'s documented defaults), unless ``--set`` gave it.

    Returns:
        the report's ``params.trainer`` block (None without settings), the trainer's
        group size (None when unknown), by which the advantage schemes tell an
        incomplete group from a whole one, and a warning when files record other
        settings than those in force.
    """
    from ratioscope.data import trainer_settings
    from ratioscope.judgement.settings import differing_settings

    paths = [p for p in sources if isinstance(p, Path)]
    settings = options.trainer_settings
    note = None
    if options.trainer == "none":
        settings = None
    elif settings is None:
        settings = trainer_settings.resolve(options.trainer, paths[0] if paths else None)
        note = differing_settings(paths[1:], settings)
    if settings is None:
        return None, None, note
    applied: dict[str, str] = {}
    clip = settings.clip()
    if clip is not None and REFERENCE in chosen:
        key = f"{REFERENCE}.clip"
        if "clip" in overrides.get(REFERENCE, {}):
            applied[key] = "option"
        else:
            chosen[REFERENCE]["clip"] = clip[0]
            applied[key] = f"trainer settings ({settings.name} {clip[1]})"
    size = settings.group_size()
    if size is not None:
        applied["group_size"] = f"trainer settings ({settings.name}: {size})"
    return {**settings.to_dict(), "applied": applied}, size, note


@dataclass
class _Sums:
    """Everything :func:`objectives` adds up over files: one task's share, or the run's."""

    totals: Totals
    advantages: _AdvantageSums = field(default_factory=lambda: _AdvantageSums())
    rollout: _RolloutRatioSums = field(default_factory=lambda: _RolloutRatioSums())
    skipped: dict[str, str] = field(default_factory=dict)
    notes: dict[str, str] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    inputs: list[dict[str, Any]] = field(default_factory=list)
    #: the loader's notes about files skipped in a walk (rank copies, side tables)
    run_notes: list[str] = field(default_factory=list)
    #: FPA's method in this run ("exact" or "approximation"), the first one it used;
    #: batches that could only use the other are left out of FPA, never pooled with it
    fpa_method: str | None = None
    fpa_left_out: list[str] = field(default_factory=list)
    #: what joining the groups of each step's files did, for the coefficients and for
    #: the advantage schemes (one warning says both)
    coefficient_join: JoinTally = field(default_factory=lambda: JoinTally())
    advantage_join: JoinTally = field(default_factory=lambda: JoinTally())

    def keep_one_fpa_method(
        self, coefficients: dict[str, Coefficients], notes: dict[str, str], label: str
    ) -> None:
        """Drop FPA's coefficients of a batch whose method is not the run's (noted)."""
        note = notes.get("fpa")
        if note is not None and "fpa" in coefficients:
            method = note.rsplit(" ", 1)[-1]
            if self.fpa_method is None:
                self.fpa_method = method
            if method != self.fpa_method:
                del coefficients["fpa"]
                del notes["fpa"]
                if label not in self.fpa_left_out:
                    self.fpa_left_out.append(label)
        self.notes.update(notes)

    def merge(self, other: _Sums) -> None:
        """Add a later shard's sums (files in order)."""
        if other.fpa_method is not None and self.fpa_method is None:
            self.fpa_method = other.fpa_method
        elif other.fpa_method is not None and other.fpa_method != self.fpa_method:
            # the shard's FPA used the other method: left out, never pooled
            other.totals.methods.pop("fpa", None)
            other.totals.pairs = {k: v for k, v in other.totals.pairs.items() if "fpa" not in k}
            other.notes.pop("fpa", None)
            self.fpa_left_out.extend(str(i["path"]) for i in other.inputs)
        self.fpa_left_out.extend(other.fpa_left_out)
        self.coefficient_join.merge(other.coefficient_join)
        self.advantage_join.merge(other.advantage_join)
        self.totals.merge(other.totals)
        self.advantages.merge(other.advantages)
        self.rollout.merge(other.rollout)
        for name, reason in other.skipped.items():
            self.skipped.setdefault(name, reason)
        self.notes.update(other.notes)
        self.warnings.extend(other.warnings)
        self.inputs.extend(other.inputs)
        self.run_notes.extend(other.run_notes)


def _file_sums(
    sources: Sequence[TokenBatch | Path],
    names: tuple[str, ...],
    chosen: Mapping[str, Settings],
    options: LoadOptions,
    batch_rows: int | None,
    progress: ProgressCallback | None = None,
    check_any: bool = True,
    group_size: int | None = None,
) -> _Sums:
    """The sums of ``sources``, read one batch at a time; ``group_size``: the trainer's,
    when known (a group with fewer samples is completed from the next step or left
    out of the advantage schemes, :mod:`ratioscope.sections.group_join`)."""
    from ratioscope.analysis.steps import step_from_name
    from ratioscope.data.batch import TokenBatch
    from ratioscope.io.loaders import RunFiles
    from ratioscope.objective_family.step_join import FileGroups

    sums = _Sums(totals=Totals(names))
    run = RunFiles(len(sources), options, sums.run_notes)
    steps = _StepAdvantages(sums.advantages, own_ids=bool(options.group_size), size=group_size)
    coefficients = _step_coefficients(sums, names, chosen, options, batch_rows, group_size)
    for index, source in enumerate(sources):
        step = step_from_name(source) if isinstance(source, Path) else None
        label = source.source if isinstance(source, TokenBatch) else str(source)
        report(progress, ProgressUpdate("files", index, len(sources), Path(label).name))
        sequences = tokens = 0
        profile = None
        own = Totals(names)  # the file's own batches, until its step says they stand
        groups = FileGroups()
        for batch in _batches(source, run, options, batch_rows):
            sums.warnings.extend(batch.warnings)
            profile = batch.profile
            sequences += batch.num_sequences
            tokens += int(batch.mask.sum())
            longer = _fold_batch(sums, names, chosen, batch, own, label=str(label))
            groups.add(batch)
            steps.add(step, batch, longer)
            sums.rollout.add(batch)
        if profile is not None:
            sums.inputs.append(
                {"path": str(label), "format": profile, "sequences": sequences, "tokens": tokens}
            )
            rows = groups.sequences(index, str(label))
            coefficients.add(step, index, source, rows, own, whole=not groups.cut)
    sums.warnings.extend(coefficients.finish())
    sums.coefficient_join.add(coefficients.join.counts, len(coefficients.linked))
    steps.finish()
    sums.advantage_join.add(steps.join.counts, 0)
    report(progress, ProgressUpdate("files", len(sources), len(sources), "done"))
    if check_any:
        run.check_any(bool(sums.inputs))
    return sums


def _fold_batch(
    sums: _Sums,
    names: tuple[str, ...],
    chosen: Mapping[str, Settings],
    batch: TokenBatch,
    totals: Totals,
    label: str | None = None,
) -> Tensor:
    """Fold ``batch``'s coefficients of ``names`` into ``totals`` (FPA's method and the
    skipped methods into ``sums``); returns [B] :func:`long_rows`."""
    batch_notes: dict[str, str] = {}
    coefficients = batch_coefficients(batch, names, chosen, sums.skipped, batch_notes)
    sums.keep_one_fpa_method(coefficients, batch_notes, label or batch.source)
    longer = long_rows(batch.mask)
    totals.add(coefficients, batch.mask, longer)
    return longer


def _step_coefficients(
    sums: _Sums,
    names: tuple[str, ...],
    chosen: Mapping[str, Settings],
    options: LoadOptions,
    batch_rows: int | None,
    group_size: int | None,
) -> StepCoefficients:
    """The coefficients of each step's files on whole groups
    (:mod:`ratioscope.objective_family.step_join`): batches of a set of files are read again."""
    from ratioscope.objective_family.step_join import StepCoefficients
    from ratioscope.sections.group_join import StepGroupJoin

    across = tuple(n for n in names if looks_across_groups(n, chosen[n]))
    others = tuple(n for n in names if n not in across)

    def fold(batch: TokenBatch, totals: Totals, every_method: bool) -> None:
        _fold_batch(sums, names if every_method else others, chosen, batch, totals)

    def read(source: TokenBatch | Path) -> Iterator[TokenBatch]:
        yield from _read_again(source, options, batch_rows)

    join = StepGroupJoin(group_size, own_ids=bool(options.group_size), rewards=False)
    labels = tuple(METHODS[n].label for n in across)
    return StepCoefficients(sums.totals, join, fold, read, batch_rows, across, labels)


def _read_again(
    source: TokenBatch | Path, options: LoadOptions, batch_rows: int | None
) -> Iterator[TokenBatch]:
    """A file's rows once more, for a batch of whole groups: in chunks of ``batch_rows``
    rows streamed from the file where its type allows, else the file read whole."""
    from dataclasses import replace

    from ratioscope.data.batch import TokenBatch
    from ratioscope.io.loaders import load_file
    from ratioscope.io.streaming import open_stream

    if isinstance(source, TokenBatch):
        yield source
        return
    if batch_rows is not None:
        stream = open_stream(source, replace(options, stream_bytes=0))
        if stream is not None:
            yield from stream.chunks(batch_rows * stream.padded_width())
            return
    yield load_file(source, options)


def _shard_sums(
    shard: tuple[Path, ...],
    *,
    names: tuple[str, ...],
    chosen: Mapping[str, Settings],
    options: LoadOptions,
    batch_rows: int | None,
    group_size: int | None = None,
) -> _Sums:
    """One task of :func:`_sums_in_tasks`: a step's files (an empty shard is checked by
    the driver, over every shard)."""
    return _file_sums(
        list(shard), names, chosen, options, batch_rows, check_any=False, group_size=group_size
    )


def _sums_in_tasks(
    files: list[Path],
    names: tuple[str, ...],
    chosen: Mapping[str, Settings],
    options: LoadOptions,
    batch_rows: int | None,
    runner: Runner,
    progress: ProgressCallback | None,
    group_size: int | None = None,
) -> _Sums:
    import functools

    from ratioscope.analysis.parallel import describe_shard, file_shards, ordered_results
    from ratioscope.io.loaders import RunFiles

    shards = file_shards(files)
    work = functools.partial(
        _shard_sums, names=names, chosen=chosen, options=options, batch_rows=batch_rows,
        group_size=group_size,
    )  # fmt: skip
    sums = _Sums(totals=Totals(names))
    report(progress, ProgressUpdate("files", 0, len(shards), runner.describe()))
    for index, shard_sums in enumerate(
        ordered_results(work, shards, runner, describe=describe_shard)
    ):
        sums.merge(shard_sums)
        report(progress, ProgressUpdate("files", index + 1, len(shards), "merging"))
    RunFiles(len(files), options, []).check_any(bool(sums.inputs))
    return sums


def _objectives_report(
    sums: _Sums, names: tuple[str, ...], chosen: Mapping[str, Settings], batch_rows: int | None
) -> ObjectivesReport:
    from ratioscope.io.documents import tool_info

    warnings = [*sums.warnings, *sums.run_notes]
    across = [METHODS[n].label for n in names if looks_across_groups(n, chosen[n])]
    joined = joined_groups_note(sums.coefficient_join, sums.advantage_join, across)
    if joined is not None:
        warnings.insert(0, joined)
    if sums.fpa_left_out:
        other = "approximation" if sums.fpa_method == "exact" else "exact"
        files = "; ".join(sums.fpa_left_out[:3]) + (
            f" and {len(sums.fpa_left_out) - 3} more" if len(sums.fpa_left_out) > 3 else ""
        )
        warnings.append(
            f"FPA: its row is the {sums.fpa_method} method; {len(sums.fpa_left_out)} file(s) "
            f"allowed only the {other} and are left out of it, not pooled ({files})"
        )
    skipped = dict(sums.skipped)
    totals = sums.totals
    for name in list(skipped):
        if name in totals.methods:  # ran on some files, not on others
            warnings.append(f"{METHODS[name].label} ran on some files only: {skipped.pop(name)}")
    summaries = {
        name: _summary(name, totals.methods[name], chosen[name], sums.notes.get(name))
        for name in names
        if name in totals.methods
    }
    return ObjectivesReport(
        tool=tool_info(),
        inputs=sums.inputs,
        params={
            "methods": list(names),
            "reference": REFERENCE,
            "top_fraction": TOP_FRACTION,
            "curve_fractions": list(CURVE_FRACTIONS),
            "settings": {name: dict(value) for name, value in chosen.items()},
            "batch_rows": batch_rows,
        },
        methods=summaries,
        correlation=_correlation(totals),
        advantages=sums.advantages.summary(),
        rollout_ratio=sums.rollout.summary(),
        skipped={name: skipped[name] for name in names if name in skipped},
        warnings=warnings,
    )


def _batches(
    source: TokenBatch | Path, run: RunFiles, options: LoadOptions, batch_rows: int | None
) -> Iterator[TokenBatch]:
    """The batches of one input: the whole file, or its rows ``batch_rows`` at a time
    (streamed from the file when its type allows, else cut from the file read whole)."""
    from dataclasses import replace

    from ratioscope.data.batch import TokenBatch
    from ratioscope.errors import NotADumpError
    from ratioscope.io.streaming import open_stream

    if isinstance(source, TokenBatch):
        yield from [source] if batch_rows is None else source.iter_chunks(batch_rows)
        return
    if batch_rows is not None:
        try:
            stream = open_stream(source, replace(options, stream_bytes=0))
        except NotADumpError:
            stream = None  # RunFiles says what the file is, or skips it in a walk
        if stream is not None:
            yield from stream.chunks(batch_rows * stream.padded_width())
            return
    batch = run.load(source)
    if batch is None:  # a file of another kind, or a rank copy, that a walk found
        return
    yield from [batch] if batch_rows is None else batch.iter_chunks(batch_rows)


# ------------------------------------------------------------- advantage schemes
@dataclass
class _SchemeSums:
    count: int = 0
    abs_sum: float = 0.0
    zero: int = 0
    short_abs: float = 0.0
    short_count: int = 0
    long_abs: float = 0.0
    long_count: int = 0

    def add(self, advantages: Tensor, longer: Tensor, present: Tensor) -> None:
        values = advantages[present].abs()
        is_long = longer[present]
        self.count += int(values.numel())
        self.abs_sum += float(values.sum())
        self.zero += int((values == 0).sum())
        self.long_abs += float(values[is_long].sum())
        self.long_count += int(is_long.sum())
        self.short_abs += float(values[~is_long].sum())
        self.short_count += int((~is_long).sum())

    def merge(self, other: _SchemeSums) -> None:
        add_fields(self, other)

    def scheme(self) -> AdvantageScheme:
        return AdvantageScheme(
            mean_abs=_share(self.abs_sum, self.count),
            zero_share=_share(self.zero, self.count),
            short_mean_abs=_share(self.short_abs, self.short_count),
            long_mean_abs=_share(self.long_abs, self.long_count),
        )


@dataclass
class _AdvantageSums:
    groups: int = 0
    zero_variance: int = 0
    sequences: int = 0
    schemes: dict[str, _SchemeSums] = field(default_factory=dict)

    def add(self, groups: JoinedGroups, side: Mapping[int, _RowFacts]) -> None:
        """Fold in the whole groups of one step (:mod:`ratioscope.sections.group_join`), their
        rows' length split, presence and dump advantage taken from ``side`` (batch index
        -> :class:`_RowFacts`) by each row's batch and row."""
        import torch

        from ratioscope.functional.objectives import dr_grpo_advantages, zero_variance_groups
        from ratioscope.functional.quatro import grpo_advantages, quatro_duals

        rewards, group = groups.rewards, groups.group
        longer, present, dump = _gathered_facts(side, groups.files, groups.rows)
        zero, count = zero_variance_groups(rewards, group)
        self.groups += count
        self.zero_variance += zero
        self.sequences += int(present.sum())
        per_scheme = {
            "grpo": grpo_advantages(rewards, group),
            "dr_grpo": dr_grpo_advantages(rewards, group),
            "quatro": quatro_duals(rewards, group).adv,
        }
        for name, values in per_scheme.items():
            self.schemes.setdefault(name, _SchemeSums()).add(values, longer, present)
        has_dump = ~torch.isnan(dump)
        if bool(has_dump.any()):
            self.schemes.setdefault("dump", _SchemeSums()).add(
                dump.nan_to_num(0.0), longer, present & has_dump
            )

    def merge(self, other: _AdvantageSums) -> None:
        self.groups += other.groups
        self.zero_variance += other.zero_variance
        self.sequences += other.sequences
        for name, sums in other.schemes.items():
            self.schemes.setdefault(name, _SchemeSums()).merge(sums)

    def summary(self) -> AdvantageSummary | None:
        if not self.schemes:
            return None
        return AdvantageSummary(
            groups=self.groups,
            zero_variance_groups=self.zero_variance,
            sequences=self.sequences,
            schemes={name: sums.scheme() for name, sums in self.schemes.items()},
        )


@dataclass
class _RowFacts:
    """Per-sequence facts of one batch that the advantage schemes need besides the
    groups: ``longer`` [B] bool (:func:`long_rows`), ``present`` [B] bool (a valid
    token), ``dump`` [B] float64 (the dump's advantage, NaN without one)."""

    longer: Tensor
    present: Tensor
    dump: Tensor


def _gathered_facts(
    side: Mapping[int, _RowFacts], files: Tensor, rows: Tensor
) -> tuple[Tensor, Tensor, Tensor]:
    """[N] longer, present and dump advantage of joined rows (batch ``files``, row
    ``rows``)."""
    import torch

    n = int(files.numel())
    longer = torch.zeros(n, dtype=torch.bool)
    present = torch.zeros(n, dtype=torch.bool)
    dump = torch.full((n,), math.nan, dtype=torch.float64)
    for index in files.unique().tolist():
        take = files == index
        facts, at = side[int(index)], rows[take]
        longer[take], present[take], dump[take] = (
            facts.longer[at], facts.present[at], facts.dump[at]
        )  # fmt: skip
    return longer, present, dump


class _StepAdvantages:
    """Feeds :class:`_AdvantageSums` the groups of each step joined across its batches
    (files, rank files, ``batch_rows`` cuts) by group id, as ``analyze``'s group-level
    sections are fed (:class:`ratioscope.sections.group_join.StepGroupJoin`): a prompt's samples
    split over two rank files are one group, not two. With the trainer's group size
    (``size``) a group short of it is completed from the next step or left out and
    counted, never taken as whole."""

    def __init__(self, sums: _AdvantageSums, own_ids: bool, size: int | None = None) -> None:
        from ratioscope.sections.group_join import StepGroupJoin

        self.sums = sums
        self.join = StepGroupJoin(size, own_ids=own_ids)
        self.side: dict[int, _RowFacts] = {}
        self.batches = 0

    def add(self, step: Any, batch: TokenBatch, longer: Tensor) -> None:
        """One batch of step ``step`` (None: a step of its own)."""
        import torch

        from ratioscope.sections.group_join import FileSequences

        if batch.rewards is None or batch.group is None:
            return
        index, self.batches = self.batches, self.batches + 1
        mask = batch.mask
        dump = (
            _first_valid(batch.advantages, mask).detach().to("cpu", torch.float64)
            if batch.advantages is not None
            else torch.full((batch.num_sequences,), math.nan, dtype=torch.float64)
        )
        self.side[index] = _RowFacts(longer.cpu(), mask.any(dim=1).cpu(), dump)
        sequences = FileSequences(
            index, batch.source, batch.rewards, batch.correct, batch.group, batch.group_labels
        )
        for groups in self.join.add(step, sequences):
            self.sums.add(groups, self.side)
        oldest = self.join.oldest_open_file(default=index + 1)
        for done in [i for i in self.side if i < oldest]:
            del self.side[done]

    def finish(self) -> None:
        """Close the last step (what the join did is in ``join.counts``)."""
        for groups in self.join.finish():
            self.sums.add(groups, self.side)
        self.side = {}


@dataclass
class JoinTally:
    """What joining the groups of each step's files did, added over files and tasks.

    Attributes:
        joined: groups with samples in more than one file (batch) of their step.
        files: files made one batch with others by a split group (0: not counted).
        completed: groups completed from the next step's files.
        left_out: groups still short of the trainer's group size; samples: their rows;
            sizes: size -> such groups.
    """

    joined: int = 0
    files: int = 0
    completed: int = 0
    left_out: int = 0
    samples: int = 0
    sizes: dict[int, int] = field(default_factory=dict)

    def add(self, counts: JoinCounts, files: int) -> None:
        """A join's counts (:class:`ratioscope.sections.group_join.JoinCounts`)."""
        self.joined += counts.joined
        self.files += files
        self.completed += counts.completed
        self.left_out += counts.incomplete
        self.samples += counts.incomplete_rows
        for size, number in counts.incomplete_sizes.items():
            self.sizes[size] = self.sizes.get(size, 0) + number

    def merge(self, other: JoinTally) -> None:
        self.joined += other.joined
        self.files += other.files
        self.completed += other.completed
        self.left_out += other.left_out
        self.samples += other.samples
        for size, number in other.sizes.items():
            self.sizes[size] = self.sizes.get(size, 0) + number

    def counts(self) -> tuple[int, int, int, int]:
        return (self.joined, self.completed, self.left_out, self.samples)


def joined_groups_note(
    coefficients: JoinTally, advantages: JoinTally, labels: Sequence[str]
) -> str | None:
    """The one warning on what joining the groups of a step's files did for the
    per-token coefficients (``coefficients``; ``labels``: the chosen methods that look
    across a group) and the advantage schemes; None when it did nothing."""
    empty = (0, 0, 0, 0)
    if coefficients.counts() == empty and advantages.counts() == empty:
        return None
    both = advantages.counts() == coefficients.counts()
    main = coefficients if coefficients.counts() != empty else advantages
    what = (
        "every method's per-token coefficients and the advantage schemes"
        if both
        else ("the per-token coefficients" if main is coefficients else "the advantage schemes")
    )
    files = f" ({main.files} files)" if main.files else ""
    parts = [
        f"objectives: {main.joined} group(s) had samples in more than one file of their "
        f"step{files} and were joined by group id for {what}"
    ]
    if main.completed:
        parts.append(
            f"{main.completed} group(s) incomplete in their step were completed from the "
            "next step's files (same group id)"
        )
    if main.left_out:
        sizes = ", ".join(f"{n} of size {k}" for k, n in sorted(main.sizes.items()))
        targets = list(labels) if main is coefficients else []
        if both or main is advantages:
            targets.append("the advantage schemes")
        named = (
            ", ".join(targets[:-1]) + (" and " if len(targets) > 1 else "") + targets[-1:][0]
            if targets
            else ""
        )
        where = (
            f"are left out of {named} (the other methods take their rows)"
            if targets
            else "are kept by every chosen method (none looks across a group)"
        )
        parts.append(
            f"{main.left_out} group(s) ({main.samples} samples: {sizes}) held fewer samples "
            f"than the trainer's group size after joining the files of their step and the "
            f"next, and {where}"
        )
    if not both and main is coefficients and advantages.counts() != empty:
        parts.append(
            f"the advantage schemes, whose join also counts groups cut by --batch-rows, "
            f"joined {advantages.joined}, completed {advantages.completed} and left out "
            f"{advantages.left_out} group(s) ({advantages.samples} samples)"
        )
    return "; ".join(parts)


def _first_valid(advantages: Tensor, mask: Tensor) -> Tensor:
    """[B] the advantage at each sequence's first valid token (position 0, right-padded)."""
    return advantages[:, 0].double() if advantages.ndim == 2 else advantages.double()


# ---------------------------------------------------- rollout ratio before truncation
@dataclass
class _RolloutRatioSums:
    tokens: int = 0
    sequences: int = 0
    log_sum: float = 0.0
    minimum: float = math.inf
    maximum: float = -math.inf
    above_2: int = 0
    below_half: int = 0
    seq_log_min: float = math.inf
    seq_log_max: float = -math.inf

    def add(self, batch: TokenBatch) -> None:
        import torch

        if batch.rollout_log_probs is None or batch.old_log_probs is None:
            return
        mask = batch.mask
        log_ratio = torch.where(
            mask, batch.old_log_probs.double() - batch.rollout_log_probs.double(), 0.0
        )
        valid = log_ratio[mask]
        if valid.numel() == 0:
            return
        self.tokens += int(valid.numel())
        self.log_sum += float(valid.sum())
        self.minimum = min(self.minimum, float(valid.min()))
        self.maximum = max(self.maximum, float(valid.max()))
        self.above_2 += int((valid > math.log(2.0)).sum())
        self.below_half += int((valid < math.log(0.5)).sum())
        sums = log_ratio.sum(dim=1)[mask.any(dim=1)]
        self.sequences += int(sums.numel())
        self.seq_log_min = min(self.seq_log_min, float(sums.min()))
        self.seq_log_max = max(self.seq_log_max, float(sums.max()))

    def merge(self, other: _RolloutRatioSums) -> None:
        for name in ("tokens", "sequences", "log_sum", "above_2", "below_half"):
            setattr(self, name, getattr(self, name) + getattr(other, name))
        self.minimum = min(self.minimum, other.minimum)
        self.maximum = max(self.maximum, other.maximum)
        self.seq_log_min = min(self.seq_log_min, other.seq_log_min)
        self.seq_log_max = max(self.seq_log_max, other.seq_log_max)

    def summary(self) -> dict[str, Any] | None:
        if not self.tokens:
            return None
        return {
            "tokens": self.tokens,
            "sequences": self.sequences,
            "mean_log_ratio": self.log_sum / self.tokens,
            "min_ratio": math.exp(self.minimum),
            "max_ratio": math.exp(self.maximum),
            "share_above_2": self.above_2 / self.tokens,
            "share_below_half": self.below_half / self.tokens,
            "min_sequence_log_ratio": self.seq_log_min,
            "max_sequence_log_ratio": self.seq_log_max,
        }
