"""Orchestration: dumps -> chunks -> section accumulators -> :class:`Report`.

Files are processed one after another and each file in chunks of rows, so memory is
bounded by the largest file plus one chunk's temporaries, whatever the number of files.
Each file gets fresh accumulators that are then merged into the running totals: the
same merge that ``ratioscope merge`` applies to shard reports, so analysing files
together and merging their separate reports give the same numbers.
"""

from __future__ import annotations

import functools
import hashlib
import math
import os
import threading
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import wait as wait_for
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor

from ratioscope import defaults
from ratioscope.analysis.device import chunk_elements_for, resolve_device
from ratioscope.analysis.steps import step_from_name
from ratioscope.analysis.threads import analysis_threads, one_thread, serial_if_small
from ratioscope.data.batch import TokenBatch
from ratioscope.data.params import AnalysisParams
from ratioscope.errors import MergeError, ReportError
from ratioscope.io.documents import check_schema_version, document_kind, tool_info
from ratioscope.io.loaders import (
    LoadOptions,
    RunFiles,
    expand_paths,
    load_file,
    load_params,
    refuse_json,
)
from ratioscope.io.streaming import StreamedFile, open_stream
from ratioscope.progress import ProgressCallback, ProgressUpdate, report
from ratioscope.report.model import SECTION_KEYS, InputInfo, Report, SequenceTable
from ratioscope.sections.base import Accumulator
from ratioscope.sections.context import Context, HostReads
from ratioscope.sections.registry import section_classes

if TYPE_CHECKING:
    from ratioscope.data.trainer_settings import TrainerSettings

#: elements ([rows x tokens]) per chunk: 8 MB per float64 temporary, small enough for the
#: allocator to reuse freed blocks (see ratioscope.analysis.allocator) and for caches to help
DEFAULT_CHUNK_ELEMENTS = defaults.CHUNK_ELEMENTS
_LOAD_OPTION_NAMES = {f.name for f in fields(LoadOptions)}
_PARAM_NAMES = {f.name for f in fields(AnalysisParams)}


def analyze(
    batch_or_paths: TokenBatch | str | Path | Sequence[str | Path],
    *,
    params: AnalysisParams | None = None,
    load_options: LoadOptions | None = None,
    device: str = defaults.DEVICE,
    chunk_elements: int | None = None,
    per_sequence: bool = False,
    progress: ProgressCallback | None = None,
    sections: Sequence[str] | None = None,
    fixed_params: Collection[str] = (),
    **options: Any,
) -> Report:
    """Analyse one or more dumps.

    Args:
        batch_or_paths: a :class:`TokenBatch`, a path (file, directory or glob) or a
            list of paths.
        params: analysis parameters; keyword ``options`` named like
            :class:`AnalysisParams` fields (``clip=(0.2, 0.28)``, ``window=50``, ...)
            or like :class:`LoadOptions` fields (``format="verl"``, ``nonfinite="mask"``)
            override single values.
        device: "auto", "cpu" or "cuda"; each chunk is moved there.
        chunk_elements: rows x tokens per chunk; None: the device's
            (:func:`ratioscope.analysis.device.chunk_elements_for`).
        per_sequence: also build the per-sequence table (``report.write_parquet``).
        progress: callback receiving :class:`ProgressUpdate` per file and chunk.
        sections: report sections to compute (default: all); the others are null.
        fixed_params: names of parameters the caller chose, which the trainer's
            settings leave alone (``load_options.trainer``; those in ``options``, and
            those of ``params`` that differ from the defaults, count as chosen too). The
            settings are ``load_options.trainer_settings`` when given, else those
            recorded in the first file, with a warning naming the files that record
            others.

    Returns:
        :class:`Report`; ``params["trainer"]`` holds the trainer's settings in force and
        where each value taken from them came from.
    """
    report, _ = analyze_totals(
        batch_or_paths, params=params, load_options=load_options, device=device,
        chunk_elements=chunk_elements, per_sequence=per_sequence, progress=progress,
        sections=sections, fixed_params=fixed_params, **options,
    )  # fmt: skip
    return report


def analyze_totals(
    batch_or_paths: TokenBatch | str | Path | Sequence[str | Path],
    *,
    params: AnalysisParams | None = None,
    load_options: LoadOptions | None = None,
    device: str = defaults.DEVICE,
    chunk_elements: int | None = None,
    per_sequence: bool = False,
    progress: ProgressCallback | None = None,
    sections: Sequence[str] | None = None,
    fixed_params: Collection[str] = (),
    state: bool = True,
    **options: Any,
) -> tuple[Report, list[Accumulator]]:
    """:func:`analyze`, and the section accumulators its report was built from, which
    :class:`ReportMerge` folds as they are (a timeline's steps: writing each step's
    ``state`` and reading it back to merge cost more than a small step's tokens).

    Args:
        state: write the report's ``state`` block (False: it holds the loader warnings
            only, and the report cannot be merged from its JSON; the accumulators can).
    """
    chosen = _chosen_params(params, options, fixed_params)
    params, load_options = _split_options(params, load_options, options)
    params, trainer = _trainer_defaults(batch_or_paths, params, load_options, chosen)
    classes = _chosen_sections(sections)
    run = run_accumulators(
        batch_or_paths,
        lambda: [cls(params) for cls in classes],
        params=params,
        load_options=load_options,
        device=device,
        chunk_elements=chunk_elements,
        per_sequence=per_sequence,
        progress=progress,
        group_size=trainer.settings.group_size() if trainer.settings else None,
    )
    if load_options.trainer_settings is None and load_options.trainer != "none":
        note = _settings_note(batch_or_paths, trainer.settings)
        if note is not None:
            run.warnings.insert(0, note)
    report = _build_report(
        run.inputs, params, load_options, run.totals, run.warnings, run.sequences, state=state
    )
    block = trainer.params_block()
    if block is not None:
        report.params["trainer"] = block
    return report, run.totals


def _chosen_params(
    params: AnalysisParams | None, options: Mapping[str, Any], fixed: Collection[str]
) -> set[str]:
    """The parameters the caller chose (see ``fixed_params`` of :func:`analyze`)."""
    chosen = set(fixed) | (set(options) & _PARAM_NAMES)
    if params is not None:
        default = AnalysisParams()
        chosen |= {n for n in _PARAM_NAMES if getattr(params, n) != getattr(default, n)}
    return chosen


def _trainer_defaults(
    batch_or_paths: Any,
    params: AnalysisParams,
    load_options: LoadOptions,
    chosen: set[str],
) -> tuple[AnalysisParams, Any]:
    """``params`` with the trainer's settings where the caller chose nothing, and what
    was applied (:class:`ratioscope.data.trainer_settings.Applied`)."""
    from ratioscope.data import trainer_settings

    settings = load_options.trainer_settings
    if load_options.trainer == "none":
        settings = None
    elif settings is None:
        first = next((s for s in _sources(batch_or_paths) if isinstance(s, Path)), None)
        settings = trainer_settings.resolve(load_options.trainer, first)
    return trainer_settings.apply(params, settings, chosen)


def _settings_note(batch_or_paths: Any, used: TrainerSettings | None) -> str | None:
    """A warning when files of the run record other settings than ``used``."""
    from ratioscope.judgement.settings import differing_settings

    paths = [s for s in _sources(batch_or_paths) if isinstance(s, Path)]
    return differing_settings(paths[1:], used) if len(paths) > 1 else None


@dataclass
class Run:
    """What one streaming pass over the inputs produced."""

    inputs: list[InputInfo]
    warnings: list[str]
    totals: list[Accumulator]
    sequences: SequenceTable | None


@torch.inference_mode()
def run_accumulators(
    batch_or_paths: TokenBatch | str | Path | Sequence[str | Path],
    make: Callable[[], list[Accumulator]],
    *,
    params: AnalysisParams,
    load_options: LoadOptions,
    device: str = defaults.DEVICE,
    chunk_elements: int | None = None,
    per_sequence: bool = False,
    progress: ProgressCallback | None = None,
    group_size: int | None = None,
) -> Run:
    """One streaming pass: every file gets fresh accumulators from ``make()``, fed chunk
    by chunk, then merged into the totals (the merge ``ratioscope merge`` uses). The
    sections that work on whole groups (``joins_groups``) are fed once per training step
    instead, and those that take groups besides (``takes_groups``) get their groups
    there, with the groups joined across the step's files
    (:mod:`ratioscope.sections.group_join`; ``group_size``: the trainer's, when known).
    """
    from ratioscope.sections.group_join import StepGroupJoin

    target = resolve_device(device)
    chunk_elements = chunk_elements_for(target, chunk_elements)
    sources = _sources(batch_or_paths)
    totals = make()
    # one file (a timeline's step): its accumulators are the totals themselves, where
    # nothing waits for a step or is fed whole steps; merging them into fresh ones
    # copied every histogram once more, about a tenth of a small step's CPU
    first = make() if len(sources) == 1 else None
    if first is not None:
        totals = [
            acc if _adoptable(acc) else total for total, acc in zip(totals, first, strict=True)
        ]
    run = Run(inputs=[], warnings=[], totals=totals, sequences=None)
    if per_sequence:
        run.sequences = SequenceTable()
    files = RunFiles(len(sources), load_options, notes=run.warnings)
    joins = _JoinedSections(
        StepGroupJoin(group_size, own_ids=bool(load_options.group_size)),
        totals, params, run.sequences,
    )  # fmt: skip
    joins.scope_groups(group_size, load_options, _chunk_reader(load_options, chunk_elements),
                       lambda chunk: Context(_to_device(chunk, target), params))  # fmt: skip
    # each file's SHA-256 is read on a second thread while the file is read and analysed
    # (hashlib and file reads release the GIL): the hash no longer adds to the time
    hasher = _hash_thread()
    stops: list[threading.Event] = []  # one a file: its hash stops at its next block
    digests: list[Future[str]] = []
    try:
        for index, source in enumerate(sources):
            name = source.source if isinstance(source, TokenBatch) else str(source)
            report(progress, ProgressUpdate("files", index, len(sources), name))
            digest = None
            if isinstance(source, Path):  # hashed while the file is read, too
                stops.append(threading.Event())
                digest = hasher.submit(_sha256, source, stops[-1])
                digests.append(digest)
            opened = files.open(source, _open_file) if isinstance(source, Path) else source
            if opened is None:  # a side table or a rank copy, noted in run.warnings
                if digest is not None:
                    stops[-1].set()
                    digest.cancel()
                continue
            fresh = first if first is not None else make()
            accumulators = [acc for acc in fresh if not acc.joins_groups]
            if isinstance(opened, StreamedFile):
                vocab = bool({"logits", "ref_logits"} & set(opened.key_map))
                with analysis_threads(chunk_elements, vocab, target):
                    rows, columns = _analyse_stream(
                        opened, accumulators, params, target, chunk_elements, progress
                    )
                warnings = opened.warnings()
            else:
                rows = _rows_of(opened)
                warnings = opened.warnings
                with analysis_threads(_largest_tensor(opened), _has_vocab(opened), target):
                    columns = _analyse_file(
                        opened, accumulators, params, target, chunk_elements, progress
                    )
            run.inputs.append(_input_info(rows, digest))
            run.warnings.extend(warnings)
            for total, acc in zip(joins.per_file_totals, accumulators, strict=True):
                if total is not acc and not acc.centres_on_groups:  # held: scope_join
                    total.merge(acc)
            step = step_from_name(source) if isinstance(source, Path) else None
            held = [acc for acc in accumulators if acc.centres_on_groups]
            joins.add(step, len(run.inputs) - 1, rows, columns, source, held)
        joins.finish()
    finally:
        for stop in stops:  # an error: the hash being read stops at its next block
            stop.set()
        for digest in digests:  # the thread is the process's: leave it with no work
            digest.cancel()
        wait_for(digests)
    report(progress, ProgressUpdate("files", len(sources), len(sources), "done"))
    files.check_any(bool(run.inputs))
    return run


def _adoptable(acc: Accumulator) -> bool:
    """Whether a file's accumulator may be the run's total when the run is that one
    file: not fed whole steps, nor held until its step says (those keep their own)."""
    return not acc.joins_groups and not acc.centres_on_groups


class _JoinedSections:
    """The sections fed whole groups joined across a step's files, and the per-sequence
    table, whose rows wait until the groups they belong to are fed."""

    def __init__(
        self,
        join: Any,
        totals: list[Accumulator],
        params: AnalysisParams,
        table: SequenceTable | None,
    ) -> None:
        self.join = join
        self.params = params
        self.table = table
        self.per_file_totals = [acc for acc in totals if not acc.joins_groups]
        self.joined_totals = [acc for acc in totals if acc.joins_groups]
        #: per-file sections whose group-level numbers take the joined groups too
        self.group_takers = [acc for acc in self.per_file_totals if acc.takes_groups]
        #: file index -> its rows and per-sequence columns, until they are final
        self._frames: dict[int, tuple[_FileRows, dict[str, Tensor]]] = {}
        self.scopes: Any = None  # ratioscope.sections.scope_join.StepScopes, with such a section

    def scope_groups(
        self,
        group_size: int | None,
        load_options: LoadOptions,
        read: Callable[[TokenBatch | Path], Iterable[TokenBatch]],
        context: Callable[[TokenBatch], Context],
    ) -> None:
        """Centre the ``centres_on_groups`` section (covariance) on whole groups of each
        step (:mod:`ratioscope.sections.scope_join`); ``read``: a file's chunks, read again."""
        from ratioscope.sections.group_join import StepGroupJoin
        from ratioscope.sections.scope_join import StepScopes

        total = next((acc for acc in self.per_file_totals if acc.centres_on_groups), None)
        if total is None:
            return
        join = StepGroupJoin(group_size, own_ids=bool(load_options.group_size), rewards=False)
        frames = self._frames if self.table is not None else None
        self.scopes = StepScopes(total, join, read, context, frames)  # type: ignore[arg-type]

    def add(
        self,
        step: Any,
        index: int,
        rows: _FileRows,
        columns: dict[str, Tensor],
        source: TokenBatch | Path | None = None,
        held: Sequence[Accumulator] = (),
    ) -> None:
        from ratioscope.sections.group_join import FileSequences

        if self.table is not None:
            self._frames[index] = (rows, dict(columns))
        sequences = FileSequences(
            index, rows.source, rows.rewards, rows.correct, rows.group, rows.group_labels
        )
        if self.scopes is not None:
            assert source is not None
            for acc in held:
                self.scopes.add(step, index, source, sequences, acc)
        if not self.joined_totals and not self.group_takers:
            self._flush(self._oldest(index + 1))
            return
        for groups in self.join.add(step, sequences):
            self._feed(groups)
        self._flush(self._oldest(self.join.oldest_open_file(default=index)))

    def _oldest(self, default: int) -> int:
        """The first file whose per-sequence columns may still change."""
        if self.scopes is None:
            return default
        return min(default, self.scopes.oldest_open_file(default))

    def finish(self) -> None:
        for groups in self.join.finish():
            self._feed(groups)
        if self.scopes is not None:
            self.scopes.finish()
        self._flush(None)
        for total in self.joined_totals:  # files without rewards or groups
            total.skipped.extend(
                f"{name} (no rewards or group)" for name in self.join.counts.without
            )
            total.record_join(self.join.counts)

    def _feed(self, groups: Any) -> None:
        for taker in self.group_takers:
            taker.update_groups(groups)
        batch = TokenBatch(
            mask=torch.ones(groups.rewards.shape[0], 1, dtype=torch.bool),
            log_ratio=torch.zeros(groups.rewards.shape[0], 1),
            rewards=groups.rewards,
            correct=groups.correct,
            group=groups.group,
            source=", ".join(groups.sources),
        )
        ctx = Context(batch, self.params)
        # a fresh accumulator of each joined section only (Accumulator's constructor takes
        # the params alone), not every section of the run
        accumulators = [type(total)(self.params) for total in self.joined_totals]
        with serial_if_small(batch.num_sequences):
            for acc in accumulators:
                if not acc.begin_file(batch):
                    continue
                for key, values in acc.update(ctx).items():
                    self._scatter(key, values, groups.files, groups.rows)
        for total, acc in zip(self.joined_totals, accumulators, strict=True):
            total.merge(acc)

    def _scatter(self, key: str, values: Tensor, files: Tensor, rows: Tensor) -> None:
        """Per-sequence ``values`` of joined rows back into their files' columns."""
        for index, (file_rows, columns) in self._frames.items():
            take = files == index
            if not bool(take.any()):
                continue
            column = columns.get(key)
            if column is None:
                column = torch.full((file_rows.sequences,), math.nan, dtype=torch.float64)
                columns[key] = column
            column[rows[take]] = values[take].detach().to("cpu", torch.float64)

    def _flush(self, before: int | None) -> None:
        """Write the table rows of the files before ``before`` (None: every file)."""
        if self.table is None:
            return
        for index in sorted(self._frames):
            if before is not None and index >= before:
                break
            rows, columns = self._frames.pop(index)
            self.table.append(_sequence_frame(rows, columns))


def report_or_analysis(
    paths: Sequence[str | Path],
    *,
    params: AnalysisParams | None = None,
    load_options: LoadOptions | None = None,
    device: str = defaults.DEVICE,
    progress: ProgressCallback | None = None,
    sections: Sequence[str] | None = None,
) -> tuple[Report, str]:
    """An analyze report from report JSON files (used as stored, several are merged) or
    from dumps (analysed, only ``sections`` when given); plots use it so they never
    recompute a report.

    Returns:
        ``(report, source)``: the report and a short description of the inputs.
    """
    from ratioscope.errors import UsageError
    from ratioscope.io.documents import read_json_report
    from ratioscope.io.paths import is_report_path

    reports = [Path(p) for p in paths if is_report_path(p)]
    if reports and len(reports) != len(paths):
        raise UsageError("give either analyze report JSON files or dumps, not both")
    if reports:
        documents = [read_json_report(path) for path in reports]
        for path, document in zip(reports, documents, strict=True):
            if "ratios" not in document:
                raise MergeError(path, f"{document_kind(document)}, not an analyze report")
        if len(documents) == 1:
            return Report.from_dict(documents[0], source=reports[0]), reports[0].name
        merged = merge_reports(documents, names=[str(p) for p in reports])
        return merged, f"{len(reports)} reports"
    files = expand_paths(list(paths))
    report = analyze(
        files,
        params=params,
        load_options=load_options,
        device=device,
        progress=progress,
        sections=sections,
    )
    source = files[0].name if len(files) == 1 else f"{len(files)} files in {files[0].parent}"
    return report, source


def section_or_analysis(
    paths: Sequence[str | Path],
    section: str,
    *,
    params: AnalysisParams | None = None,
    load_options: LoadOptions | None = None,
    device: str = defaults.DEVICE,
    progress: ProgressCallback | None = None,
) -> tuple[Report, str]:
    """A report whose ``section`` is computed, from report JSON files or from dumps (for
    plots).

    Report files (``.json``) are used as stored (several are merged from their state);
    dumps are analysed for this section only; see :func:`report_or_analysis`.

    Returns:
        ``(report, source)``: the report (``getattr(report, section)`` is not None) and a
        short description of the inputs.

    Raises:
        UsageError: report files and dumps mixed; ReportError/InputError: the section
        cannot be had from them (the reason is in the message).
    """
    report, source = report_or_analysis(
        paths,
        params=params,
        load_options=load_options,
        device=device,
        progress=progress,
        sections=[section],
    )
    if getattr(report, section) is None:
        reasons = [w for w in report.warnings if w.startswith(section)]
        message = reasons[0] if reasons else f"{section}: not computed"
        raise ReportError(Path(str(paths[0])), message)
    return report, source


def merge_reports(
    reports: Iterable[Report | Mapping[str, Any]], names: Sequence[str] = ()
) -> Report:
    """Merge analyze reports of shards of one run into the report of the whole.

    ``reports`` are :class:`Report` objects or their JSON documents (read with
    :meth:`Report.from_dict`). They are folded in one at a time, so ``reports`` may be
    a generator that reads them lazily: memory then holds one report and the running
    totals, however many shards there are. The sections are recomputed from the merged
    ``state`` sums, never averaged from the shards' sections.

    Raises:
        MergeError: different parameters or sections, or a document that is not an
            analyze report; ReportError: a schema version this ratioscope does not read.
    """
    names = list(names)
    merge = ReportMerge()
    for index, item in enumerate(reports):
        merge.add(item, names[index] if index < len(names) else f"report {index + 1}")
    return merge.result()


class ReportMerge:
    """The running merge of :func:`merge_reports`: reports are folded in one at a time
    (their ``state`` restored), or with the accumulators they were built from
    (:func:`analyze_totals`), which are folded as they are: the same sums, without
    writing the state and reading it back.
    """

    def __init__(self) -> None:
        self.totals: dict[str, Accumulator] = {}
        self.first: _FirstReport | None = None
        self.inputs: list[InputInfo] = []
        #: (path, sha256) of the inputs so far, to refuse a shard merged twice
        self._seen: set[tuple[str, str]] = set()
        self.loader_warnings: list[str] = []
        self.classes = {cls.name: cls for cls in section_classes()}

    def add(
        self,
        item: Report | Mapping[str, Any],
        name: str,
        accumulators: Sequence[Accumulator] | None = None,
    ) -> None:
        """Fold one report in; ``accumulators``: those ``item`` (a :class:`Report`) was
        built from, folded instead of its state, and not to be used after.

        Raises:
            MergeError: see :func:`merge_reports`.
        """
        shard = _as_report(item, name, needs_state=accumulators is None)
        live = None if accumulators is None else {acc.name: acc for acc in accumulators}
        present = [key for key in self.classes if key in (shard.state if live is None else live)]
        if self.first is None:
            self.first = _FirstReport(name, shard.params, _params_of(shard, name))
            if live is not None:
                self.totals = {key: live[key] for key in present}
            else:
                with one_thread():  # a report's state is small (histograms of 5,205 bins)
                    self.totals = {
                        key: _restore(self.classes[key], self.first.params, shard, name)
                        for key in present
                    }
        else:
            _check_same_run(name, shard, self.first, list(self.totals), present)
            with one_thread():
                # every section restored before any is folded: a state that does not
                # read back leaves the merge as it was
                others = {
                    key: live[key]
                    if live is not None
                    else _restore(self.classes[key], self.first.params, shard, name)
                    for key in present
                }
                for key, other in others.items():
                    if key in self.totals:
                        _fold(self.totals[key], other, name)
                    else:  # an optional section that earlier shards had no data for
                        self.totals[key] = other
        for entry in shard.inputs:
            if entry.sha256 and (entry.path, entry.sha256) in self._seen:
                raise MergeError(
                    name, f"covers {entry.path} again (same path and sha256 as an earlier "
                    "report); merging a shard twice would count it twice"
                )  # fmt: skip
            if entry.sha256:
                self._seen.add((entry.path, entry.sha256))
            self.inputs.append(entry)
        self.loader_warnings.extend(shard.state.get("loader_warnings", []))

    def result(
        self,
        state: bool = True,
        sections: Collection[str] | None = None,
        brief: bool = False,
        computed: Collection[str] | None = None,
    ) -> Report:
        """The merged report (its sections recomputed from the merged sums); ``state``:
        with each section's mergeable state (False: the report of the sums so far, to be
        read, not merged: a timeline's verdict after each step); ``sections``: only those
        sections (the others null; None: all); ``brief``: each section as the verdict
        reads it (:meth:`~ratioscope.sections.base.Accumulator.brief_result`: a report to
        judge, never to show; with ``state`` False only); ``computed``: only these of the
        sections computed, the others' warnings still gathered (:meth:`outline`). The
        sums are left as they are, so more reports may be added after.

        Raises:
            MergeError: nothing was added.
        """
        first = self.first
        if first is None:
            raise MergeError(None, "no report to merge")
        if brief and state:
            raise ValueError("a brief report has no state: it is judged, not merged")
        load_options = LoadOptions(**_load_kwargs(first.params_block.get("load", {})))
        merged = _build_report(
            list(self.inputs), first.params, load_options,
            [acc for name, acc in self.totals.items() if sections is None or name in sections],
            list(self.loader_warnings), None, state, brief, computed,
        )  # fmt: skip
        if "trainer" in first.params_block:  # equal in every shard (_check_same_run)
            merged.params["trainer"] = first.params_block["trainer"]
        return merged

    def outline(self, sections: Collection[str]) -> Report:
        """The merged report's params and warnings (every section's, in the order of the
        whole report) with only ``sections`` computed, without state: what a timeline
        document and a watch's page write of the pooled report, at a fraction of
        :meth:`result`'s cost.

        Raises:
            MergeError: nothing was added.
        """
        return self.result(state=False, computed=sections)


def _as_report(item: Report | Mapping[str, Any], name: str, needs_state: bool = True) -> Report:
    """A shard as a Report; a document is checked to be a mergeable analyze report first
    (``needs_state``: a report merged from its state, not from its accumulators)."""
    if isinstance(item, Report):
        shard = item
    else:
        check_schema_version(item, name)
        if document_kind(item) != "an analyze report":
            raise MergeError(name, f"{document_kind(item)}, not an analyze report")
        if "state" not in item or "analysis" not in (item.get("params") or {}):
            raise MergeError(name, "not an analyze report (no 'state' block to merge)")
        try:
            # merged from its state: the sections are recomputed from the merged sums
            shard = Report.from_dict(item, source=name, sections=False)
        except ReportError as error:
            raise MergeError(name, error.problem) from None
    if (needs_state and not shard.state) or "analysis" not in shard.params:
        raise MergeError(name, "not an analyze report (no 'state' block to merge)")
    return shard


@dataclass(frozen=True)
class _FirstReport:
    """The report every other one of a merge is checked against."""

    name: str
    params_block: dict[str, Any]  # its ``params``, which the others must equal
    params: AnalysisParams


_MALFORMED = (KeyError, TypeError, ValueError, IndexError, RuntimeError)


def report_totals(report: Report, name: str) -> list[Accumulator]:
    """The accumulators a report's ``state`` holds, to be folded as they are
    (:meth:`ReportMerge.add`): a report read back (the step cache's) whose state is
    checked before it joins a merge.

    Raises:
        MergeError: a damaged state, or parameters that do not read back.
    """
    params = _params_of(report, name)
    with one_thread():
        return [
            _restore(cls, params, report, name)
            for cls in section_classes()
            if cls.name in report.state
        ]


def _params_of(report: Report, name: str) -> AnalysisParams:
    try:
        return AnalysisParams.from_dict(report.params["analysis"])
    except _MALFORMED as error:
        raise MergeError(name, f"malformed 'params' block ({error})") from None


def _restore(
    cls: type[Accumulator], params: AnalysisParams, report: Report, name: str
) -> Accumulator:
    """An accumulator from a report's state; a damaged state is the report's fault."""
    from ratioscope.sections.state import StateError

    try:
        return cls.from_state(params, report.state[cls.name])
    except StateError as error:
        # a damaged or tampered shard: name the field, so it can be found
        where = ".".join(["state", cls.name, *error.path])
        raise MergeError(name, f"'{where}' {error.problem}; the shard's state is damaged") from None
    except _MALFORMED as error:
        raise MergeError(
            name, f"malformed state of the '{cls.name}' section ({type(error).__name__}: {error})"
        ) from None


def _fold(total: Accumulator, other: Accumulator, name: str) -> None:
    try:
        total.merge(other)
    except _MALFORMED as error:
        raise MergeError(
            name, f"state of the '{total.name}' section does not fit the others ({error})"
        ) from None


def _check_same_run(
    name: str, report: Report, first: _FirstReport, sections: list[str], present: list[str]
) -> None:
    """``report`` (whose sections are ``present``) is of the run of ``first``."""
    first_name, first_params = first.name, first.params_block
    if report.params != first_params:
        differing = _differing_keys(first_params, report.params)
        raise MergeError(
            name,
            f"made with different parameters than {first_name} ({', '.join(differing)}); "
            "only reports of the same analysis settings can be merged",
        )
    from ratioscope.report.model import OPTIONAL_SECTION_KEYS

    for key in sections:
        if key not in present and key not in OPTIONAL_SECTION_KEYS:
            raise MergeError(
                name, f"has no '{key}' section while {first_name} has; analyse every shard "
                "with the same sections"
            )  # fmt: skip
    for cls in section_classes():
        if (
            cls.name in present
            and cls.name not in sections
            and cls.name not in OPTIONAL_SECTION_KEYS
        ):
            raise MergeError(
                name, f"has a '{cls.name}' section that {first_name} lacks; analyse every "
                "shard with the same sections"
            )  # fmt: skip


# --------------------------------------------------------------------------- internals
def _chosen_sections(names: Sequence[str] | None) -> list[type[Accumulator]]:
    from ratioscope.errors import UsageError

    classes = section_classes()
    if names is None:
        return classes
    known = [cls.name for cls in classes]
    unknown = [name for name in names if name not in known]
    if unknown:
        raise UsageError(f"unknown section(s) {', '.join(unknown)}; choose from {', '.join(known)}")
    return [cls for cls in classes if cls.name in names]


def _split_options(
    params: AnalysisParams | None, load_options: LoadOptions | None, options: dict[str, Any]
) -> tuple[AnalysisParams, LoadOptions]:
    unknown = set(options) - _PARAM_NAMES - _LOAD_OPTION_NAMES
    if unknown:
        raise TypeError(f"analyze() got unknown options: {', '.join(sorted(unknown))}")
    param_values = {k: v for k, v in options.items() if k in _PARAM_NAMES}
    load_values = {k: v for k, v in options.items() if k in _LOAD_OPTION_NAMES}
    base = params or AnalysisParams()
    if param_values:
        base = AnalysisParams.from_dict({**base.to_dict(), **param_values})
    loads = load_options or LoadOptions()
    if load_values:
        loads = LoadOptions(**{**vars(loads), **load_values})
    return base, loads


def _sources(batch_or_paths: Any) -> list[TokenBatch | Path]:
    if isinstance(batch_or_paths, TokenBatch):
        return [batch_or_paths]
    if isinstance(batch_or_paths, (str, Path)):
        return list(expand_paths([batch_or_paths]))
    return list(expand_paths(list(batch_or_paths)))


def _has_vocab(batch: TokenBatch) -> bool:
    """Whether the batch holds logits ([B, T, V] tensors)."""
    return batch.logits is not None or batch.ref_logits is not None


def _largest_tensor(batch: TokenBatch) -> int:
    """Elements of the batch's largest tensor (logits when present, else [B, T])."""
    vocab = [t.numel() for t in (batch.logits, batch.ref_logits) if t is not None]
    return max([batch.mask.numel(), *vocab])


def _analyse_file(
    batch: TokenBatch,
    accumulators: list[Accumulator],
    params: AnalysisParams,
    device: torch.device,
    chunk_elements: int,
    progress: ProgressCallback | None,
) -> dict[str, Tensor]:
    active = [acc for acc in accumulators if acc.begin_file(batch)]
    # a batch may be rows of a file (row_offset > 0): the columns are the batch's rows
    columns = _RowColumns(batch.num_sequences, first_row=batch.row_offset)
    per_chunk = [a for a in active if not a.per_file]
    passing = [a for a in active if a.per_file and a.passes]
    per_file = [a for a in active if a.per_file and not a.passes]
    for acc in passing:
        acc.begin_passes(in_memory=True)
    rows = defaults.chunk_rows(chunk_elements, batch.max_length)
    chunks = max(1, -(-batch.num_sequences // rows))
    name = Path(batch.source).name
    for index, chunk in enumerate(batch.iter_chunks(rows)):
        report(progress, ProgressUpdate("chunks", index, chunks, name))
        ctx = Context(_to_device(chunk, device), params, deferred_reads=True)
        for acc in per_chunk:
            columns.add(acc.update(ctx), chunk.row_offset, ctx.host)
        _feed_pass(passing, 0, ctx, columns)
        ctx.flush()
    report(progress, ProgressUpdate("chunks", chunks, chunks, name))
    # the sections that make passes get the chunks the others got, so that a file read
    # whole and the same file streamed give the same numbers, bit for bit
    _later_passes(
        passing, lambda: batch.iter_chunks(rows), params, device, (name, chunks), progress,
        columns,
    )  # fmt: skip
    if per_file:
        ctx = Context(_to_device(batch, device), params, deferred_reads=True)
        for acc in per_file:
            columns.add(acc.update(ctx), batch.row_offset, ctx.host)
        ctx.flush()
    return columns.tensors()


class _RowColumns:
    """Per-sequence tensors of one file ([rows, ...] each), filled chunk by chunk.

    Each is one buffer of the file's rows, allocated at its first chunk and written a
    slice at a time. Gathering them as lists of chunk parts made a streamed file's peak
    memory grow with the file: twenty small tensors kept a chunk, between the chunk's
    large temporaries, left holes in the heap that the allocator could not give back
    (docs/scale.md). A column that did not get every row (a section that returned it
    for some chunks only) is left out, as a list of parts that fell short of the file's
    rows was.
    """

    def __init__(self, rows: int, first_row: int = 0) -> None:
        self.rows = rows
        #: the file row of buffer row 0
        self.first_row = first_row
        self._buffers: dict[str, Tensor] = {}
        self._filled: dict[str, int] = {}

    def add(
        self,
        values: Mapping[str, Tensor | None],
        row_offset: int,
        host: HostReads | None = None,
    ) -> None:
        """Write ``values`` ([b, ...] each, None skipped) of file rows
        ``row_offset:row_offset + b`` (a chunk's :attr:`TokenBatch.row_offset`); with
        ``host``, when it runs its folds (a device's columns: in the chunk's one read)."""
        given = {key: value for key, value in values.items() if value is not None}
        if host is None:
            self._write(list(given), list(given.values()), row_offset)
            return
        keys = list(given)
        host.later(lambda *read: self._write(keys, list(read), row_offset), *given.values())

    def _write(self, keys: list[str], values: list[Tensor], row_offset: int) -> None:
        offset = row_offset - self.first_row
        for key, value in zip(keys, values, strict=True):
            buffer = self._buffers.get(key)
            if buffer is None:
                shape = (self.rows, *value.shape[1:])
                buffer = torch.empty(shape, dtype=value.dtype, device="cpu")
                self._buffers[key] = buffer
                self._filled[key] = 0
            stop = offset + int(value.shape[0])
            if offset < 0 or stop > self.rows or buffer.shape[1:] != value.shape[1:]:
                raise ValueError(
                    f"column {key!r}: {tuple(value.shape)} at row {offset} does not fit "
                    f"the file's {tuple(buffer.shape)}"
                )
            buffer[offset:stop] = value.detach()
            self._filled[key] += stop - offset

    def get(self, key: str) -> Tensor | None:
        """Column ``key`` if it got every row, else None."""
        return self.tensors().get(key)

    def tensors(self) -> dict[str, Tensor]:
        """The columns that got every row (each row is written once)."""
        return {key: v for key, v in self._buffers.items() if self._filled[key] == self.rows}


def _feed_pass(
    passing: list[Accumulator],
    index: int,
    ctx: Context,
    columns: _RowColumns,
) -> None:
    """A chunk through pass ``index`` of the sections that make that many passes; the
    per-sequence columns of a section's last pass are kept."""
    for acc in passing:
        if index < acc.passes:
            columns.add(acc.update_pass(index, ctx), ctx.batch.row_offset, ctx.host)


def _later_passes(
    passing: list[Accumulator],
    chunks: Callable[[], Iterable[TokenBatch]],
    params: AnalysisParams,
    device: torch.device,
    where: tuple[str, int],
    progress: ProgressCallback | None,
    columns: _RowColumns,
) -> None:
    """Pass 0 is done (with the other sections' chunks); passes 1.. over ``chunks()``."""
    name, total = where
    for acc in passing:
        acc.end_pass(0)
    passes = max((acc.passes for acc in passing), default=0)
    for index in range(1, passes):
        label = f"{name}, pass {index + 1} of {passes}"
        current = [acc for acc in passing if index < acc.passes]
        for number, chunk in enumerate(chunks()):
            report(progress, ProgressUpdate("chunks", number, total, label))
            ctx = Context(_to_device(chunk, device), params, deferred_reads=True)
            _feed_pass(current, index, ctx, columns)
            ctx.flush()
        report(progress, ProgressUpdate("chunks", total, total, label))
        for acc in current:
            acc.end_pass(index)


def _chunk_reader(
    options: LoadOptions, chunk_elements: int
) -> Callable[[TokenBatch | Path], Iterable[TokenBatch]]:
    """Reads a source's chunks again (the files of a step whose groups the covariance
    section joins): a large file streamed, any other read whole and cut."""

    def chunks(source: TokenBatch | Path) -> Iterable[TokenBatch]:
        opened = source if isinstance(source, TokenBatch) else _open_file(source, options)
        if isinstance(opened, StreamedFile):
            yield from opened.chunks(chunk_elements)
            return
        base = opened.row_offset  # a batch of rows of a file: rows counted from its first
        for chunk in opened.iter_chunks(max(1, chunk_elements // max(1, opened.max_length))):
            yield replace(chunk, row_offset=chunk.row_offset - base) if base else chunk

    return chunks


def _open_file(path: Path, options: LoadOptions) -> TokenBatch | StreamedFile:
    """A large file as a stream of chunks (:mod:`ratioscope.io.streaming`), any other
    read whole."""
    refuse_json(path)
    return open_stream(path, options) or load_file(path, options)


#: the tensors each section fed whole files reads, kept over a streamed file's chunks;
#: a section not listed keeps every tensor (sections that make passes keep none)
_PER_FILE_INPUTS = {
    # per sequence only: its mask and log-ratio are [B, 1] stand-ins it never reads
    "trust_region": ("rewards", "correct", "group"),
}


def _analyse_stream(
    stream: StreamedFile,
    accumulators: list[Accumulator],
    params: AnalysisParams,
    device: torch.device,
    chunk_elements: int,
    progress: ProgressCallback | None,
) -> tuple[_FileRows, dict[str, Tensor]]:
    """:func:`_analyse_file` of a file read chunk by chunk: the same chunks, so the same
    numbers. Sections that make passes read the file again for each pass after the
    first; sections fed whole files get the file's tensors they read, gathered from the
    chunks (only those: their memory grows with the file, the others' does not)."""
    name = stream.path.name
    columns = _RowColumns(stream.rows)
    # the file's per-sequence facts, and the tensors of the sections fed the whole file
    sequences = _RowColumns(stream.rows)
    kept = _RowColumns(stream.rows)
    per_chunk: list[Accumulator] = []
    passing: list[Accumulator] = []
    per_file: list[Accumulator] = []
    first: TokenBatch | None = None
    rows = defaults.chunk_rows(chunk_elements, stream.padded_width())
    chunks = max(1, -(-stream.rows // rows))
    try:
        # the file stays open for the passes of the sections that make them
        for index, chunk in enumerate(stream.chunks(chunk_elements, close=False)):
            if first is None:
                first = _metadata(chunk)
                active = [acc for acc in accumulators if acc.begin_file(chunk)]
                per_chunk = [a for a in active if not a.per_file]
                passing = [a for a in active if a.per_file and a.passes]
                per_file = [a for a in active if a.per_file and not a.passes]
                for acc in passing:
                    acc.begin_passes(in_memory=False)
                wanted = _kept_names(per_file)
            report(progress, ProgressUpdate("chunks", index, chunks, name))
            ctx = Context(_to_device(chunk, device), params, deferred_reads=True)
            for acc in per_chunk:
                columns.add(acc.update(ctx), chunk.row_offset, ctx.host)
            _feed_pass(passing, 0, ctx, columns)
            ctx.flush()
            _keep(chunk, sequences, kept, wanted, bool(per_file))
            del ctx, chunk  # before the next chunk is read
        report(progress, ProgressUpdate("chunks", chunks, chunks, name))
        only = _pass_inputs(passing)
        _later_passes(
            passing, lambda: stream.chunks(chunk_elements, again=True, close=False, only=only),
            params, device, (name, chunks), progress, columns,
        )  # fmt: skip
    finally:
        stream.close()
    assert first is not None  # a streamed file has rows
    labels = stream.group_labels
    if per_file:
        whole = _gathered(first, kept.tensors(), labels)
        del kept
        ctx = Context(_to_device(whole, device), params, deferred_reads=True)
        for acc in per_file:
            columns.add(acc.update(ctx), 0, ctx.host)
        ctx.flush()
    totals = stream.totals
    lengths = sequences.get("lengths")
    assert lengths is not None
    file_rows = _FileRows(
        source=first.source,
        file_format=first.file_format,
        profile=first.profile,
        sequences=stream.rows,
        tokens=totals.tokens,
        padding=totals.padding,
        ratio_pair=totals.ratio_pair,
        lengths=lengths,
        rewards=sequences.get("rewards"),
        correct=sequences.get("correct"),
        group=sequences.get("group"),
        group_labels=labels,
    )
    return file_rows, columns.tensors()


def _metadata(chunk: TokenBatch) -> TokenBatch:
    """``chunk`` without its rows: what a streamed file keeps of its first chunk (the
    chunk itself would hold a chunk of tensors for the whole file)."""
    empty: dict[str, Any] = {key: getattr(chunk, key)[:0].clone() for key in chunk.available()}
    functions = {name: value[:0].clone() for name, value in chunk.reward_functions.items()}
    return replace(chunk, **empty, reward_functions=functions, warnings=[])


def _pass_inputs(passing: list[Accumulator]) -> set[str] | None:
    """What the passes after the first read of a file: None for every tensor."""
    names: set[str] = set()
    for acc in passing:
        if acc.pass_inputs is None:
            return None
        names.update(acc.pass_inputs)
    return names


def _keep(
    chunk: TokenBatch,
    sequences: _RowColumns,
    kept: _RowColumns,
    wanted: list[str],
    per_file: bool,
) -> None:
    """What a streamed file keeps of a chunk: its per-sequence facts, and the tensors
    (``wanted``) of the sections fed the whole file."""
    lengths = chunk.lengths
    facts = {key: getattr(chunk, key) for key in ("rewards", "correct", "group")}
    sequences.add({**facts, "lengths": lengths}, chunk.row_offset)
    tensors = {key: getattr(chunk, key) for key in wanted}
    if per_file and "mask" not in wanted:
        tensors["lengths"] = lengths
    kept.add(tensors, chunk.row_offset)


def _kept_names(per_file: list[Accumulator]) -> list[str]:
    from ratioscope.data.batch import CANONICAL_KEYS

    names: dict[str, None] = {}
    for acc in per_file:
        names.update(dict.fromkeys(_PER_FILE_INPUTS.get(acc.name, CANONICAL_KEYS)))
    return list(names)


def _gathered(first: TokenBatch, kept: dict[str, Tensor], labels: list[Any] | None) -> TokenBatch:
    """The whole file as a batch of the tensors in ``kept`` (the others None)."""
    from ratioscope.data.batch import CANONICAL_KEYS

    values: dict[str, Any] = dict.fromkeys(n for n in CANONICAL_KEYS if n not in kept)
    values.update(kept)
    if values["mask"] is None:
        lengths = kept["lengths"]
        values["mask"] = (lengths > 0)[:, None]
        values["log_ratio"] = torch.zeros(lengths.shape[0], 1, dtype=first.log_ratio.dtype)
    values.pop("lengths", None)
    # no section fed whole files reads the reward functions (_PER_FILE_INPUTS)
    return replace(
        first, **values, reward_functions={}, group_labels=labels, row_offset=0, warnings=[]
    )


def _to_device(batch: TokenBatch, device: torch.device) -> TokenBatch:
    """Move a batch to ``device`` except its [B, T, V] logits, which can be far larger than
    memory: the sections that use them read them a slice at a time onto the device."""
    if batch.logits is None and batch.ref_logits is None:
        return batch.to(device)
    moved = replace(batch, logits=None, ref_logits=None).to(device)
    return replace(moved, logits=batch.logits, ref_logits=batch.ref_logits)


@dataclass
class _FileRows:
    """What the report and the per-sequence table say of one file's rows.

    Attributes:
        lengths: [B] valid tokens per row; rewards, correct, group: [B] or None;
        group_labels: the label of each group id.
    """

    source: str
    file_format: str
    profile: str
    sequences: int
    tokens: int
    padding: str
    ratio_pair: str
    lengths: Tensor
    rewards: Tensor | None
    correct: Tensor | None
    group: Tensor | None
    group_labels: list[Any] | None


def _rows_of(batch: TokenBatch) -> _FileRows:
    return _FileRows(
        source=batch.source,
        file_format=batch.file_format,
        profile=batch.profile,
        sequences=batch.num_sequences,
        tokens=batch.num_tokens,
        padding=batch.padding,
        ratio_pair=batch.ratio_pair,
        lengths=batch.lengths,
        rewards=batch.rewards,
        correct=batch.correct,
        group=batch.group,
        group_labels=batch.group_labels,
    )


def _sequence_frame(rows: _FileRows, columns: dict[str, Tensor]) -> Any:
    import polars as pl

    data: dict[str, Any] = {
        "file": [rows.source] * rows.sequences,
        "row": torch.arange(rows.sequences).numpy(),
        "length": rows.lengths.cpu().numpy(),
    }
    if rows.rewards is not None:
        data["reward"] = rows.rewards.double().cpu().numpy()
    if rows.correct is not None:
        data["correct"] = rows.correct.cpu().numpy()
    if rows.group is not None:
        labels = rows.group_labels or []
        data["group"] = [str(labels[g]) if g < len(labels) else str(g) for g in rows.group.tolist()]
    for key, values in columns.items():
        data[key] = values.double().numpy()
    return pl.DataFrame(data)


@functools.cache
def _hash_thread() -> ThreadPoolExecutor:
    """The thread that reads the inputs' SHA-256, one per process (starting and joining
    a thread for every analysis cost milliseconds per step of a timeline)."""
    return ThreadPoolExecutor(max_workers=1, thread_name_prefix="ratioscope-sha256")


# a forked child has none of the parent's threads: it makes its own
os.register_at_fork(after_in_child=_hash_thread.cache_clear)


def _sha256(path: Path, stop: threading.Event | None = None) -> str:
    """Hex SHA-256 of a file, read in 4 MiB blocks; "" once ``stop`` is set."""
    digest = hashlib.sha256()
    # one buffer read into again and again: a new 4 MiB bytes object a block cost about
    # a tenth of the hash's CPU (page faults and copies)
    block = bytearray(1 << 22)
    view = memoryview(block)
    with path.open("rb", buffering=0) as handle:
        while size := handle.readinto(block):
            if stop is not None and stop.is_set():
                return ""
            digest.update(view[:size])
    return digest.hexdigest()


def _input_info(rows: _FileRows, digest: Future[str] | None) -> InputInfo:
    """The report's entry of a file; ``digest``: its SHA-256 being read (None for a
    batch given in memory)."""
    sha = digest.result() if digest is not None else ""
    return InputInfo(
        path=rows.source,
        format=rows.file_format,
        profile=rows.profile,
        sha256=sha,
        sequences=rows.sequences,
        tokens=rows.tokens,
        padding=rows.padding,
        ratio_pair=rows.ratio_pair,
    )


def _load_kwargs(state: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in state.items() if k in _LOAD_OPTION_NAMES}


def _differing_keys(a: dict[str, Any], b: dict[str, Any], prefix: str = "") -> list[str]:
    keys = []
    for key in sorted(set(a) | set(b)):
        left, right = a.get(key), b.get(key)
        if isinstance(left, dict) and isinstance(right, dict):
            keys.extend(_differing_keys(left, right, f"{prefix}{key}."))
        elif left != right:
            keys.append(f"{prefix}{key}")
    return keys


@torch.inference_mode()
def _build_report(
    inputs: list[InputInfo],
    params: AnalysisParams,
    load_options: LoadOptions,
    totals: Iterable[Accumulator],
    loader_warnings: list[str],
    table: SequenceTable | None,
    state: bool = True,
    brief: bool = False,
    computed: Collection[str] | None = None,
) -> Report:
    """The report of ``totals``; ``state``: with each section's state (False: the loader
    warnings only; see :func:`analyze_totals`); ``brief``: each section as the verdict
    reads it (:meth:`ReportMerge.result`); ``computed``: only these sections' results
    (the others null, their warnings still gathered; None: all)."""
    sections: dict[str, Any] = dict.fromkeys(SECTION_KEYS)
    warnings = list(dict.fromkeys(loader_warnings))
    states: dict[str, Any] = {"loader_warnings": list(dict.fromkeys(loader_warnings))}
    with one_thread():  # sections and state are read from the small merged sums
        for acc in totals:
            if computed is None or acc.name in computed:
                sections[acc.name] = acc.brief_result() if brief else acc.result()
            warnings.extend(acc.warnings())
            if state:
                states[acc.name] = acc.state()
    # sections left out with --sections stay null without a warning: the user asked
    return Report(
        tool=tool_info(),
        inputs=inputs,
        params={
            "analysis": params.to_dict(),
            "load": load_params(load_options),
        },
        warnings=warnings,
        state=states,
        sequences=table,
        **sections,
    )
