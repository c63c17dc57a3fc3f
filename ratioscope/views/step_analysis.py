"""One step of a run, analysed or read from the step cache: what :func:`~ratioscope.views.
timeline.timeline` and ``watch`` fold into a run, step by step.

:class:`StepAnalysis` holds how each step is analysed (the options of ``timeline``) and
the :class:`~ratioscope.analysis.cache.StepCache` it reads and fills: a step whose files
and parameters have an entry is read from it (its report's state checked as it is
restored, its own verdict kept beside it); any other is analysed and written there.
:class:`StepResult` is one step as the fold takes it.
"""

from __future__ import annotations

import functools
from collections.abc import Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ratioscope.analysis.steps import StepFiles
from ratioscope.progress import ProgressCallback

if TYPE_CHECKING:
    from ratioscope.analysis.cache import StepCache
    from ratioscope.analysis.parallel import Runner
    from ratioscope.data.params import AnalysisParams
    from ratioscope.io.loaders import LoadOptions
    from ratioscope.judgement.verdict import Thresholds, Verdict
    from ratioscope.report.model import Report
    from ratioscope.sections.base import Accumulator

#: the methods the objective headlines need
OBJECTIVE_METHODS = ("grpo", "gspo", "tis", "opsm")


@dataclass
class StepResult:
    """One step as the timeline folds it.

    Attributes:
        report: its report: typed, or, read from the cache, without its sections (it is
            merged from its ``state``, and read through ``document``).
        objectives: its objective summaries (``timeline(objectives=True)``).
        totals: the accumulators it was built from, when analysed in this process.
        document: the report's JSON document, for a step read from the cache.
        own: the step's own verdict, where the cache holds it or it was judged for it.
        key: the step's cache key (None without a cache).
    """

    report: Report
    objectives: dict[str, Any] | None = None
    totals: list[Accumulator] | None = None
    document: dict[str, Any] | None = None
    own: Verdict | None = None
    key: str | None = None

    def write_json(self, path: Path) -> None:
        """The step's report file (``--reports-dir``), as analysed."""
        from ratioscope.io.documents import write_json

        if self.document is not None:
            write_json(self.document, path)
        else:
            self.report.write_json(path)


@dataclass
class StepAnalysis:
    """How each step of a run is analysed (the options of :func:`timeline`), and the step
    cache it reads and fills."""

    params: AnalysisParams
    load_options: LoadOptions
    device: str
    #: None: the device's (:func:`ratioscope.analysis.device.chunk_elements_for`)
    chunk_elements: int | None
    sections: Sequence[str] | None
    objectives: bool
    fixed_params: tuple[str, ...]
    cache: StepCache | None = None
    #: the verdict's thresholds (a cached step keeps its own verdict by them)
    thresholds: Thresholds | None = None
    _parameters: dict[str, Any] | None = field(default=None, init=False, repr=False)
    _keys: dict[tuple[tuple[str, int, int], ...], str] = field(
        default_factory=dict, init=False, repr=False
    )

    def cache_parameters(self) -> dict[str, Any]:
        """Every parameter that changes a number of a step's report (the cache's key;
        worked out once: the options do not change)."""
        if self._parameters is None:
            self._parameters = self._worked_out_parameters()
        return self._parameters

    def _worked_out_parameters(self) -> dict[str, Any]:
        from ratioscope.analysis.device import chunk_elements_for, resolve_device
        from ratioscope.io.loaders import load_params

        settings = self.load_options.trainer_settings
        device = resolve_device(self.device)
        return {
            "analysis": self.params.to_dict(),
            "load": load_params(self.load_options),
            "stream_bytes": self.load_options.stream_bytes,
            "trainer": self.load_options.trainer,
            "trainer_settings": None
            if settings is None
            else [settings.framework, dict(settings.settings), list(settings.reward_functions)],
            "device": str(device).split(":")[0],
            # on a GPU the chunk follows its free memory (None: the device's), and asking
            # for it here would open a CUDA context in a driver that only hands out tasks;
            # a GPU's sums are not bit-reproducible anyway (atomic adds)
            "chunk_elements": self.chunk_elements
            if device.type == "cuda"
            else chunk_elements_for(device, self.chunk_elements),
            "sections": None if self.sections is None else sorted(self.sections),
            "objectives": list(OBJECTIVE_METHODS) if self.objectives else None,
            "fixed_params": sorted(self.fixed_params),
        }

    def results(
        self,
        by_step: Sequence[StepFiles],
        reports: bool,
        tasks: Runner | None,
        progress: ProgressCallback | None,
        state: bool,
    ) -> Iterator[StepResult]:
        """Each step, in order: read from the cache, or analysed (here, with the
        accumulators its report was built from, folded into the pooled report as they are;
        or in ``tasks``); its state is written only where asked for, or for the cache."""
        if reports:
            from ratioscope.analysis.pipeline import merge_reports

            for group in by_step:
                merged = merge_reports(
                    (read_report(p) for p in group.paths), names=[str(p) for p in group.paths]
                )
                yield StepResult(merged)
            return
        keys = self.keys(by_step)
        if tasks is not None:
            yield from self._in_tasks(by_step, keys, tasks, progress, state)
            return
        for group in by_step:
            # read one step at a time: a long run's entries are never all in memory
            found = self.cached(group, keys[group.step])
            yield (
                found
                if found is not None
                else self.analysed(group, keys[group.step], progress, state)
            )

    def step(
        self, group: StepFiles, reports: bool, progress: ProgressCallback | None = None
    ) -> StepResult:
        """One step (``watch``): its shard reports merged (``reports``), or read from the
        cache, or analysed here."""
        if reports:
            return next(self.results([group], True, None, progress, False))
        key = self.keys([group])[group.step]
        found = self.cached(group, key)
        return found if found is not None else self.analysed(group, key, progress, False)

    def analysed(
        self, group: StepFiles, key: str | None, progress: ProgressCallback | None, state: bool
    ) -> StepResult:
        """The step analysed in this process (and written to the cache)."""
        step_report, totals = analyze_step_totals(
            group, self.params, self.load_options, self.device, self.chunk_elements,
            self.sections, progress, self.fixed_params,
            state=state or self.cache is not None,
        )  # fmt: skip
        step_objectives = _step_objectives(group, self.load_options) if self.objectives else None
        own = self.store(key, step_report, step_objectives)
        return StepResult(step_report, step_objectives, totals, own=own, key=key)

    def keys(self, by_step: Sequence[StepFiles]) -> dict[int, str | None]:
        """Each step's cache key (None without a cache): its files' content and every
        parameter that changes a number."""
        if self.cache is None:
            return {group.step: None for group in by_step}
        return {group.step: self._key(group.paths) for group in by_step}

    def _key(self, paths: Sequence[Path]) -> str:
        """A step's cache key, hashed once while its files keep their size and time."""
        import os

        assert self.cache is not None
        seen = tuple((str(p), os.stat(p).st_size, os.stat(p).st_mtime_ns) for p in paths)
        key = self._keys.get(seen)
        if key is None:
            key = self.cache.key(paths, self.cache_parameters())
            self._keys[seen] = key
        return key

    def _in_tasks(
        self,
        by_step: Sequence[StepFiles],
        keys: Mapping[int, str | None],
        tasks: Runner,
        progress: ProgressCallback | None,
        state: bool,
    ) -> Iterator[StepResult]:
        from ratioscope.analysis.parallel import ordered_results
        from ratioscope.report.model import Report

        work = functools.partial(
            _step_result, params=self.params, load_options=self.load_options,
            device=self.device, chunk_elements=self.chunk_elements, sections=self.sections,
            objectives=self.objectives, fixed_params=self.fixed_params,
        )  # fmt: skip
        cache = self.cache
        held = {
            group.step: cache is not None
            and (key := keys[group.step]) is not None
            and cache.has(key)
            for group in by_step
        }
        missing = [group for group in by_step if not held[group.step]]
        computed = iter(ordered_results(work, missing, tasks, describe=_describe_step))
        for group in by_step:
            if held[group.step]:
                found = self.cached(group, keys[group.step])
                # an entry that does not read back is analysed here, after all
                yield (
                    found
                    if found is not None
                    else self.analysed(group, keys[group.step], progress, state)
                )
                continue
            document, step_objectives = next(computed)
            step_report = Report.from_dict(document)
            key = keys[group.step]
            own = self.store(key, step_report, step_objectives, document)
            yield StepResult(step_report, step_objectives, own=own, key=key)

    def cached(self, group: StepFiles, key: str | None) -> StepResult | None:
        """The step from the cache, where an entry of its files and parameters reads back
        as a report of those files (its sections as JSON, merged from its state)."""
        if self.cache is None or key is None:
            return None
        from ratioscope.errors import RatioscopeError
        from ratioscope.judgement.verdict import Verdict
        from ratioscope.report.model import Report

        entry = self.cache.get(key)
        if entry is None:
            return None
        try:
            document = entry["report"]
            step_report = Report.from_dict(document, sections=False)
            if not step_report.state:
                raise ValueError("the entry has no state to merge")
            # its state is read back where it is merged: one that does not is analysed
            # again then (timeline.fold_step)
            step_report, document = _relocated(step_report, document, group)
            step_objectives = entry.get("objectives")
            if self.objectives and not isinstance(step_objectives, dict):
                raise ValueError("the entry has no objective summaries")
            own = None
            judged = entry.get("verdict")
            if isinstance(judged, dict) and judged.get("thresholds") == thresholds_key(
                self.thresholds
            ):
                own = Verdict.from_dict(judged["verdict"])
            else:  # judged by other thresholds: the step's sections are read to judge it
                step_report = Report.from_dict(document)
        except (RatioscopeError, ValueError, TypeError, KeyError):
            self.cache.refuse()
            return None
        return StepResult(step_report, step_objectives, None, document, own, key)

    def store(
        self,
        key: str | None,
        step_report: Report,
        step_objectives: dict[str, Any] | None,
        document: dict[str, Any] | None = None,
    ) -> Verdict | None:
        """Write the step to the cache (its report with its state, its objective summaries
        and its own verdict by these thresholds); that verdict (None without a cache)."""
        if self.cache is None or key is None:
            return None
        from ratioscope.judgement.verdict import verdict

        own = verdict(step_report, self.thresholds)
        self.cache.put(
            key,
            {
                "report": document if document is not None else step_report.to_dict(),
                "objectives": step_objectives,
                "verdict": {
                    "thresholds": thresholds_key(self.thresholds),
                    "verdict": own.to_dict(),
                },
            },
        )
        return own


def _relocated(
    step_report: Report, document: dict[str, Any], group: StepFiles
) -> tuple[Report, dict[str, Any]]:
    """A cached report of the step's files where they are now: the key names the files
    by name and content, so a run moved or copied elsewhere reads its entries; the
    report then names the files' current paths (its inputs, and every sentence and
    state entry that names one).

    Raises:
        ValueError: the entry is not a report of these files.
    """
    from ratioscope.report.model import Report

    inputs = [info.path for info in step_report.inputs]
    current = [str(p) for p in group.paths]
    if sorted(inputs) == sorted(current):
        return step_report, document
    by_name = {Path(p).name: p for p in current}
    if len(by_name) != len(current) or sorted(Path(p).name for p in inputs) != sorted(by_name):
        raise ValueError("the entry is not a report of these files")
    # longest first: a path that begins another is replaced after it
    moves = sorted(((p, by_name[Path(p).name]) for p in inputs), key=lambda m: -len(m[0]))
    moved = _replace_text(document, moves)
    return Report.from_dict(moved, sections=False), moved


def _replace_text(node: Any, moves: Sequence[tuple[str, str]]) -> Any:
    """``node`` with every string's old paths replaced by the new ones."""
    if isinstance(node, str):
        for old, new in moves:
            node = node.replace(old, new)
        return node
    if isinstance(node, dict):
        return {key: _replace_text(value, moves) for key, value in node.items()}
    if isinstance(node, list):
        return [_replace_text(value, moves) for value in node]
    return node


def thresholds_key(thresholds: Thresholds | None) -> str:
    """The verdict's thresholds as text: a cached verdict stands only for these."""
    import json
    from dataclasses import asdict

    from ratioscope.judgement.verdict import Thresholds

    return json.dumps(asdict(thresholds or Thresholds()), sort_keys=True)


def _step_result(
    group: StepFiles,
    *,
    params: AnalysisParams,
    load_options: LoadOptions,
    device: str,
    chunk_elements: int | None,
    sections: Sequence[str] | None,
    objectives: bool,
    fixed_params: Collection[str] = (),
) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """One step as a task: its report document and, on request, its objective summaries."""
    document = _analyze_step(
        group, params, load_options, device, chunk_elements, sections, None, fixed_params
    ).to_dict()
    return document, (_step_objectives(group, load_options) if objectives else None)


def _describe_step(group: StepFiles) -> str:
    first = group.paths[0] if group.paths else "no file"
    more = f" and {len(group.paths) - 1} more" if len(group.paths) > 1 else ""
    return f"step {group.step} ({first}{more})"


def _step_objectives(group: StepFiles, load_options: LoadOptions) -> dict[str, Any]:
    """The per-method summaries of one step's side-by-side view, as JSON."""
    from ratioscope.objective_family.side_by_side import objectives

    result = objectives(list(group.paths), methods=OBJECTIVE_METHODS, load_options=load_options)
    return dict(result.to_dict()["methods"])


def _analyze_step(
    group: StepFiles,
    params: AnalysisParams,
    load_options: LoadOptions,
    device: str,
    chunk_elements: int | None,
    sections: Sequence[str] | None,
    progress: ProgressCallback | None,
    fixed_params: Collection[str] = (),
) -> Report:
    report, _ = analyze_step_totals(
        group, params, load_options, device, chunk_elements, sections, progress, fixed_params
    )
    return report


def analyze_step_totals(
    group: StepFiles,
    params: AnalysisParams,
    load_options: LoadOptions,
    device: str,
    chunk_elements: int | None,
    sections: Sequence[str] | None,
    progress: ProgressCallback | None,
    fixed_params: Collection[str] = (),
    state: bool = True,
) -> tuple[Report, list[Accumulator]]:
    """The step's report and the accumulators it was built from
    (:func:`ratioscope.analysis.pipeline.analyze_totals`)."""
    from ratioscope.analysis.pipeline import analyze_totals

    return analyze_totals(
        list(group.paths),
        params=params,
        load_options=load_options,
        device=device,
        chunk_elements=chunk_elements,
        sections=sections,
        progress=progress,
        fixed_params=fixed_params,
        state=state,
    )


def read_meta(path: Path, unsafe_pickle: bool) -> dict[str, Any]:
    from ratioscope.analysis.steps import read_step_meta

    return read_step_meta(path, unsafe_pickle=unsafe_pickle)


def read_report(path: Path) -> dict[str, Any]:
    from ratioscope.io.documents import read_json_report

    return read_json_report(path)
