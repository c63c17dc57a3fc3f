"""The run report: one self-contained HTML file from a run's trend to a step, a sequence
and its tokens (``ratioscope report``, ``timeline --html``; docs/report.md).

:func:`run_report` computes the run's :func:`~ratioscope.views.timeline.timeline` (and the
baseline's), then the drill-down data of each step (:func:`ratioscope.views.drilldown.
drilldown`); :meth:`RunReport.write_html` hands the document to
:mod:`ratioscope.render.html.page`, which only lays it out.
"""

from __future__ import annotations

import functools
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ratioscope import defaults
from ratioscope.views.drilldown import DEFAULT_METHODS, DEFAULT_TOKEN_BYTES, DEFAULT_TOP

if TYPE_CHECKING:
    from ratioscope.analysis.cache import StepCache
    from ratioscope.analysis.parallel import Runner
    from ratioscope.data.params import AnalysisParams
    from ratioscope.io.loaders import LoadOptions
    from ratioscope.judgement.verdict import Thresholds
    from ratioscope.progress import ProgressCallback
    from ratioscope.views.drilldown import Drilldown
    from ratioscope.views.timeline import Timeline

#: the report document's layout version (inside the HTML, ``report-data``)
REPORT_SCHEMA_VERSION = 1


@dataclass
class RunPage:
    """What the run page shows of one run: its name, timeline, verdict and vitals."""

    name: str
    timeline: Timeline
    verdict: dict[str, Any] | None
    bottom_line: str | None
    vitals: dict[str, Any] | None
    thresholds: dict[str, float]
    #: each vitals key the page lists (``length.mean``) -> its meaning and unit, from the
    #: report's catalog (``ratioscope metrics``)
    vitals_meanings: dict[str, str] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "timeline": self.timeline.to_dict(),
            "verdict": self.verdict,
            "bottom_line": self.bottom_line,
            "vitals": self.vitals,
            "vitals_meanings": self.vitals_meanings,
            "thresholds": self.thresholds,
        }


@dataclass
class RunReport:
    """Result of :func:`run_report`: the run (and baseline) pages and the drill-down."""

    title: str
    runs: list[RunPage]
    drilldown: Drilldown | None
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        """The report document embedded in the HTML (JSON)."""
        from ratioscope.io.documents import to_jsonable, tool_info

        return to_jsonable(
            {
                "schema_version": REPORT_SCHEMA_VERSION,
                "kind": "run_report",
                "title": self.title,
                "tool": tool_info(),
                "runs": [run.to_dict() for run in self.runs],
                "drilldown": None if self.drilldown is None else self.drilldown.to_dict(),
                "notes": self.notes,
            }
        )

    def html(self) -> str:
        """The report as one HTML document (every script and style inline)."""
        from ratioscope.render.html.page import render_html

        return render_html(self.to_dict())

    def write_html(self, path: str | Path) -> int:
        """Write the HTML atomically; returns its size in bytes."""
        from ratioscope.io.atomic import atomic_write_text

        text = self.html()
        atomic_write_text(path, text)
        return len(text.encode("utf-8"))


def run_page(name: str, result: Timeline) -> RunPage:
    """The run page of a computed (or read) timeline: its verdict, the verdict's
    thresholds by headline, and the pooled report's vitals where it has them."""
    verdict = result.verdict
    document = verdict.to_dict() if hasattr(verdict, "to_dict") else verdict
    bottom = getattr(verdict, "bottom_line", None)
    thresholds: dict[str, float] = {}
    for finding in (document or {}).get("findings") or ():
        if finding.get("threshold") is not None and finding.get("key"):
            thresholds.setdefault(finding["key"], float(finding["threshold"]))
    vitals = None
    if result.pooled is not None:
        vitals = result.pooled.to_dict().get("vitals")
    return RunPage(
        name=name,
        timeline=result,
        verdict=document,
        bottom_line=bottom() if callable(bottom) else None,
        vitals=vitals,
        thresholds=thresholds,
        vitals_meanings=vitals_meanings(vitals),
    )


#: what the run page's vitals box leaves out (report.js's SKIPPED): distributions
_NOT_LISTED = ("distribution", "quantile_bound", "quantiles")


def vitals_meanings(vitals: Mapping[str, Any] | None) -> dict[str, str]:
    """Each scalar key under ``vitals`` the run page lists (dotted, without the section)
    with its meaning and unit from the report's catalog: "mean response length (tokens)"."""
    meanings: dict[str, str] = {}

    def walk(prefix: str, value: Any) -> None:
        if prefix.rsplit(".", 1)[-1] in _NOT_LISTED:
            return
        if isinstance(value, Mapping):
            for key, item in value.items():
                walk(f"{prefix}.{key}" if prefix else str(key), item)
            return
        meaning = _vitals_meaning(prefix)
        if meaning is not None:
            meanings[prefix] = meaning

    walk("", vitals or {})
    return meanings


@functools.cache
def _vitals_meaning(key: str) -> str | None:
    """A vitals key's meaning and unit from the catalog (None: not in it). Kept: the
    catalog is fixed, and a match walks all of it (a watch's --html asks at every write)."""
    from ratioscope.report.catalog import entries_for

    entries = entries_for(f"vitals.{key}")
    if not entries:
        return None
    entry = entries[0]
    unit = f" ({entry.unit})" if entry.unit not in ("", "1", "text") else ""
    return f"{entry.meaning}{unit}"


def report_from_timeline(
    result: Timeline,
    *,
    params: AnalysisParams,
    load_options: LoadOptions,
    baseline: Timeline | None = None,
    title: str | None = None,
    tokenizer: str | Path | None = None,
    methods: Sequence[str] = DEFAULT_METHODS,
    top: int = DEFAULT_TOP,
    token_bytes: int = DEFAULT_TOKEN_BYTES,
    progress: ProgressCallback | None = None,
) -> RunReport:
    """The run report of a timeline already computed (``timeline --html``): its steps'
    dumps are read once more for the drill-down; a timeline of analyze reports (no
    per-token data) gets the run page alone."""
    from ratioscope.io.paths import is_report_path
    from ratioscope.io.tokenizer import TokenText
    from ratioscope.views.drilldown import drilldown

    token_text = None if tokenizer is None else TokenText(tokenizer)
    notes: list[str] = []
    steps = [(s.step, s.inputs) for s in result.steps]
    dumps = [s for s in steps if s[1] and not any(is_report_path(Path(p)) for p in s[1])]
    drill = None
    if dumps:
        flagged = {s.step for s in result.steps if s.flags}
        drill = drilldown(
            dumps,
            params=params,
            load_options=load_options,
            flagged=flagged,
            methods=methods,
            top=top,
            token_bytes=token_bytes,
            length_limit=params.max_length,
            token_text=token_text,
            progress=progress,
        )
        if drill.dropped:
            notes.append(
                f"the tokens of {drill.dropped} ranked sequences were left out to keep the "
                f"file within its budget ({token_bytes / 2**20:.0f} MiB of token data); "
                "their rankings remain"
            )
    else:
        notes.append("the inputs are analyze reports: no per-token data to drill into")
    runs = [run_page("run", result)]
    if baseline is not None:
        runs.append(run_page("baseline", baseline))
    return RunReport(title=title or _title(result), runs=runs, drilldown=drill, notes=notes)


def watch_report(result: Timeline, title: str | None = None) -> RunReport:
    """The run report of a run being watched (``watch --html``): its run page, without
    the drill-down (reading every step's dumps again after each step would not keep up
    with the run; ``ratioscope report`` makes it)."""
    last = result.steps[-1].step if result.steps else None
    note = (
        f"written by ratioscope watch after step {last}; the drill-down into sequences "
        "is made by ratioscope report"
    )
    return RunReport(
        title=title or _title(result), runs=[run_page("run", result)], drilldown=None, notes=[note]
    )


def _title(result: Timeline) -> str:
    """The run's folder: the one that holds every step's files (a run of a folder a step
    is named by the folder above its steps, not by its first step)."""
    import os

    inputs = [p for s in result.steps for p in s.inputs]
    if not inputs:
        return "ratioscope run report"
    try:
        common = Path(os.path.commonpath([str(Path(p).parent) for p in inputs]))
    except ValueError:  # absolute and relative paths, or other drives: the first's
        common = Path(inputs[0]).parent
    return f"ratioscope run report: {common}"


def run_report(
    paths: str | Path | Sequence[str | Path],
    *,
    baseline: str | Path | Sequence[str | Path] | None = None,
    params: AnalysisParams | None = None,
    load_options: LoadOptions | None = None,
    device: str = defaults.DEVICE,
    chunk_elements: int | None = None,
    step_from: str | None = None,
    thresholds: Thresholds | None = None,
    tokenizer: str | Path | None = None,
    methods: Sequence[str] = DEFAULT_METHODS,
    top: int = DEFAULT_TOP,
    token_bytes: int = DEFAULT_TOKEN_BYTES,
    title: str | None = None,
    progress: ProgressCallback | None = None,
    fixed_params: Collection[str] = (),
    runner: Runner | None = None,
    cache: StepCache | None = None,
) -> RunReport:
    """The run report of a run's dumps (and a baseline run's, drawn beside it).

    Args:
        paths: the run's dumps (files, directories, globs) or analyze report JSON files,
            grouped by step as :func:`ratioscope.timeline` groups them.
        baseline: another run, or a timeline JSON file, drawn beside it on the run page.
        params, load_options, device, chunk_elements, step_from, thresholds: as for
            :func:`ratioscope.timeline`.
        tokenizer: a local ``tokenizer.json`` for token text (never downloaded).
        methods: objectives whose per-token coefficients the sequence page offers.
        top: sequences kept per ranking and step.
        token_bytes: budget of the kept sequences' token data (bytes).
        title: the page title.
        progress: progress callback.
        fixed_params: as for :func:`ratioscope.timeline`.
        runner: where the timelines' steps are analysed, as for
            :func:`ratioscope.timeline` (the drill-down then reads the kept steps here).
        cache: the step cache of the timelines, as for :func:`ratioscope.timeline`.

    Returns:
        :class:`RunReport`; :meth:`RunReport.write_html` writes the file.
    """
    from ratioscope.analysis.pipeline import _split_options
    from ratioscope.io.tokenizer import TokenText
    from ratioscope.objective_family.methods import method_names
    from ratioscope.views.drilldown import check_options
    from ratioscope.views.timeline import timeline

    params, load_options = _split_options(params, load_options, {})
    methods = method_names(methods)  # an unknown name fails before any dump is read
    check_options(top, token_bytes, None)
    if tokenizer is not None:
        TokenText(tokenizer)  # a bad tokenizer fails before any dump is read
    options = {
        "params": params,
        "load_options": load_options,
        "device": device,
        "chunk_elements": chunk_elements,
        "step_from": step_from,
        "thresholds": thresholds,
        "progress": progress,
        "fixed_params": tuple(fixed_params),
        "runner": runner,
        "cache": cache,
    }
    result = timeline(paths, **options)  # type: ignore[arg-type]
    other = None
    if baseline is not None:
        other = _baseline_timeline(baseline, options)
    return report_from_timeline(
        result,
        params=params,
        load_options=load_options,
        baseline=other,
        title=title,
        tokenizer=tokenizer,
        methods=methods,
        top=top,
        token_bytes=token_bytes,
        progress=progress,
    )


def _baseline_timeline(
    baseline: str | Path | Sequence[str | Path], options: dict[str, Any]
) -> Timeline:
    """The baseline's timeline: read from a timeline JSON file, or computed."""
    from ratioscope.io.paths import is_report_path
    from ratioscope.views.timeline import Timeline, timeline

    listed = [baseline] if isinstance(baseline, (str, Path)) else list(baseline)
    if len(listed) == 1 and is_report_path(listed[0]):
        import json

        try:
            document = json.loads(Path(listed[0]).read_text())
        except (OSError, ValueError):
            document = None
        if isinstance(document, dict) and document.get("kind") == "timeline":
            return Timeline.from_dict(document, source=listed[0])
    return timeline(listed, **options)
