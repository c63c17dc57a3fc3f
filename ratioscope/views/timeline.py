"""A run step by step: the headline quantities of each training step, and where they change.

:func:`timeline` groups the input files by training step (:mod:`ratioscope.analysis.steps`),
analyses one step at a time with :func:`ratioscope.analyze` (memory is bounded as for
one analysis: one step's report is held while the next is made), reads the headline
quantities (:data:`HEADLINES`) from each step's typed report, and flags the steps where a
series departs from its own recent history (:func:`~ratioscope.functional.changepoint.
change_flags`). The step reports are folded into the pooled report with the merge that
``ratioscope merge`` applies (:class:`~ratioscope.analysis.pipeline.ReportMerge`; a step analysed
here is folded from its accumulators, without writing its state and reading it back),
so the pooled report equals ``analyze`` of all the files, and, on request, written one
file per step (``reports_dir``).

The vital signs lead (``vitals``: token entropy and its change within the step, response
length and the share at the length limit, reward, correct share, zero advantages and
equal-reward groups), then the five papers' quantities.
"""

from __future__ import annotations

import math
import shutil
import tempfile
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field, fields, is_dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ratioscope import defaults
from ratioscope.analysis.steps import StepFiles, assign_steps
from ratioscope.functional.changepoint import ChangeRule
from ratioscope.judgement.verdict import FINDING_SECTIONS
from ratioscope.progress import ProgressCallback, ProgressUpdate, report
from ratioscope.views.pooled_run import ChainBroken
from ratioscope.views.step_analysis import (
    OBJECTIVE_METHODS,
    StepAnalysis,
    StepResult,
    read_meta,
)

if TYPE_CHECKING:
    from ratioscope.analysis.cache import StepCache
    from ratioscope.analysis.parallel import Runner
    from ratioscope.data.params import AnalysisParams
    from ratioscope.functional.changepoint import ChangeTracker
    from ratioscope.functional.vitals import MechanicsFit, PerformanceFit
    from ratioscope.io.loaders import LoadOptions
    from ratioscope.judgement.run_verdict import StepVerdict
    from ratioscope.judgement.verdict import Thresholds, Verdict
    from ratioscope.report.model import Report

#: the timeline JSON layout's version (``schema_version``)
TIMELINE_SCHEMA_VERSION = 1


@dataclass(frozen=True)
class Headline:
    """One quantity a timeline follows.

    Attributes:
        key: a dotted path into ``Report.to_dict()`` (a key may itself hold dots, as
            quantile levels do: ``covariance.cumulative_share.0.01``); a share of two
            report values is named by its own key and read from ``path`` / ``per``.
        label: what it is, in plain words (plot titles, the JSON).
        short: a column header of at most 10 characters (the terminal table).
        unit: its unit.
        rise: what a rise means.
        path: where the value is read (default: ``key``).
        per: the dotted path of the denominator, for a share.
    """

    key: str
    label: str
    short: str
    unit: str
    rise: str
    path: str = ""
    per: str | None = None

    def value(self, document: Mapping[str, Any]) -> float | None:
        """The headline's value in a report document, or None where it is missing."""
        value = _number(lookup(document, self.path or self.key))
        if self.per is None or value is None:
            return value
        total = _number(lookup(document, self.per))
        return value / total if total else None


#: the sections of the pooled report that a timeline's outline computes (the run page
#: shows its vitals; the document writes its params and warnings, which come from all)
OUTLINE_SECTIONS = ("vitals",)

#: the headline quantities, declared once: the JSON, Parquet, table and plot follow it
HEADLINES: tuple[Headline, ...] = (
    Headline(
        "vitals.entropy.mean",
        "token entropy (mean over valid tokens)",
        "entropy",
        "nats/token",
        "the policy samples less deterministically (a fall toward 0: entropy collapse)",
    ),
    Headline(
        "vitals.entropy.change_mean",
        "entropy change within the step (entropy - old_entropy, token mean)",
        "dH step",
        "nats/token",
        "the step's updates raised the entropy of its own tokens",
    ),
    Headline(
        "vitals.entropy_mechanics.covariance",
        "Cov(log pi, A) over the step's tokens: entropy falls when positive (Cui et al. Thm 2)",
        "cov(lp,A)",
        "nats",
        "the advantages favour tokens the policy already likes: entropy is predicted to fall",
    ),
    Headline(
        "vitals.length.mean",
        "response length (mean)",
        "length",
        "tokens",
        "responses grow longer",
    ),
    Headline(
        "vitals.length.at_limit_share",
        "responses at the length limit (share)",
        "at limit",
        "fraction of responses",
        "more responses are cut by the length limit",
    ),
    Headline(
        "vitals.reward.mean",
        "reward (mean over sequences)",
        "reward",
        "reward",
        "the policy earns more reward",
    ),
    Headline(
        "vitals.correct_share",
        "correct responses (share)",
        "correct",
        "fraction of responses",
        "more responses are correct",
    ),
    Headline(
        "vitals.advantages.zero_share",
        "tokens with advantage A = 0 (share)",
        "A = 0",
        "fraction of tokens",
        "more tokens give no policy gradient",
    ),
    Headline(
        "vitals.equal_reward_groups.share",
        "groups whose rewards are all equal (share)",
        "eq groups",
        "share of groups",
        "more groups were all solved or all failed, and teach nothing",
    ),
    Headline(
        "mismatch.policy.k3",
        "policy mismatch k3 (current vs behaviour)",
        "pol k3",
        "nats/token",
        "the policy moved further from the one that sampled",
    ),
    Headline(
        "mismatch.policy.ess",
        "policy ESS (current vs behaviour)",
        "pol ESS",
        "fraction",
        "importance weights are more even (a fall: fewer effective samples)",
    ),
    Headline(
        "mismatch.rollout.k3",
        "train/inference mismatch k3 (old vs engine)",
        "t/i k3",
        "nats/token",
        "trainer and inference engine disagree more",
    ),
    Headline(
        "mismatch.rollout.ess",
        "train/inference ESS (old vs engine)",
        "t/i ESS",
        "fraction",
        "engine weights are more even (a fall: fewer effective samples)",
    ),
    Headline(
        "ratios.token.clip_fraction",
        "PPO clip fraction, token ratios",
        "tok clip",
        "fraction of tokens",
        "more tokens leave the clip band",
    ),
    Headline(
        "ratios.sequence.clip_fraction",
        "PPO clip fraction, sequence ratios",
        "seq clip",
        "fraction of tokens",
        "more sequences leave the clip band",
    ),
    Headline(
        "ratios.token.switch_frequency",
        "token ratio switch frequency",
        "switch",
        "switches/token",
        "token ratios flip between up, on and down more often",
    ),
    Headline(
        "ratios.token.lfr",
        "token ratio low-frequency ratio (LFR)",
        "tok LFR",
        "share of power",
        "ratio fluctuations are smoother along the sequence",
    ),
    Headline(
        "ratios.kalman.lfr",
        "Kalman-filtered ratio LFR",
        "kal LFR",
        "share of power",
        "the filtered ratio varies more slowly along the sequence",
    ),
    Headline(
        "covariance.cumulative_share.0.01",
        "share of |c| in the top 1% of tokens",
        "cov top1%",
        "share",
        "the advantage-log-prob covariance concentrates on fewer tokens",
    ),
    Headline(
        "future_policy.future_to_current.all.quantiles.0.5",
        "FPA future/current weight ratio (median)",
        "FPA f/c",
        "ratio",
        "the extrapolated future policy favours the samples more than the current",
    ),
    Headline(
        "policy_lag.mean_token_lag",
        "policy lag (token mean, versions)",
        "lag mean",
        "versions",
        "the trained tokens were sampled by older policies",
    ),
    Headline(
        "policy_lag.max_lag",
        "policy lag (largest, versions)",
        "lag max",
        "versions",
        "some tokens were sampled by a policy further behind",
    ),
    Headline(
        "trust_region.degenerate_share",
        "QUATRO degenerate groups (share)",
        "QUATRO deg",
        "share of groups",
        "more groups have no usable trust-region solution",
        path="trust_region.degenerate",
        per="trust_region.groups",
    ),
)


#: where each reward function's mean sits in a report: ``vitals.reward.per_function.NAME.mean``
REWARD_FUNCTION_KEY = "vitals.reward.per_function.{name}.mean"
_FUNCTION_PREFIX, _FUNCTION_SUFFIX = REWARD_FUNCTION_KEY.split("{name}")
#: the headline after which the reward functions' headlines follow
_REWARD_HEADLINE = "vitals.reward.mean"


def reward_function_headline(name: str, short: str | None = None) -> Headline:
    """The headline of one reward function's mean (a run's own: the names come from its
    reports, ``vitals.reward.per_function``). ``short``: its column header (default
    ``r:`` and the name's first 8 characters)."""
    return Headline(
        REWARD_FUNCTION_KEY.format(name=name),
        f"reward function {name} (mean over the sequences it scored)",
        short or f"r:{name}"[:10],
        "reward",
        f"the policy earns more of {name}'s reward",
    )


def reward_function_headlines(names: Sequence[str]) -> tuple[Headline, ...]:
    """One headline per reward function, in the order given; column headers made unique
    where two names share their first characters."""
    out: list[Headline] = []
    shorts: set[str] = set()
    for index, name in enumerate(names):
        short = f"r:{name}"[:10]
        if short in shorts:
            tag = str(index)
            short = f"r:{name}"[: 10 - len(tag)] + tag
        shorts.add(short)
        out.append(reward_function_headline(name, short))
    return tuple(out)


def reward_function_names(document: Any) -> list[str]:
    """The reward functions of a report (its JSON or its sections), in report order."""
    functions = lookup(document, "vitals.reward.per_function")
    return [str(name) for name in functions] if isinstance(functions, Mapping) else []


def function_name(key: str) -> str | None:
    """The reward function a headline key is about, or None for any other key."""
    if key.startswith(_FUNCTION_PREFIX) and key.endswith(_FUNCTION_SUFFIX):
        name = key[len(_FUNCTION_PREFIX) : len(key) - len(_FUNCTION_SUFFIX)]
        return name or None
    return None


def with_reward_functions(
    headlines: Sequence[Headline], functions: Sequence[Headline]
) -> tuple[Headline, ...]:
    """``headlines`` with the reward functions' headlines after the reward's own."""
    if not functions:
        return tuple(headlines)
    keys = [h.key for h in headlines]
    at = keys.index(_REWARD_HEADLINE) + 1 if _REWARD_HEADLINE in keys else len(keys)
    return (*headlines[:at], *functions, *headlines[at:])


#: the side-by-side view's headlines (``ratioscope objectives``), read from its per-method
#: summaries under ``objectives.<method>.<field>``; followed when ``objectives=True``
OBJECTIVE_HEADLINES: tuple[Headline, ...] = (
    Headline(
        "objectives.grpo.top_share",
        "GRPO: share of sum |coefficient| on the top 1% of tokens",
        "G top1%",
        "share",
        "GRPO's gradient is carried by fewer tokens",
    ),
    Headline(
        "objectives.grpo.zero_share",
        "GRPO: tokens with zero coefficient (clipped or zero advantage)",
        "G zero",
        "fraction of tokens",
        "more tokens give GRPO no gradient",
    ),
    Headline(
        "objectives.gspo.zero_share",
        "GSPO: tokens with zero coefficient (sequence clipped or zero advantage)",
        "GSPO zero",
        "fraction of tokens",
        "more sequences leave GSPO's band",
    ),
    Headline(
        "objectives.opsm.flags.masked",
        "DeepSeek-V3.2 off-policy sequence mask: tokens masked",
        "OPSM mask",
        "fraction of tokens",
        "more negative-advantage sequences drifted from the sampling policy",
    ),
    Headline(
        "objectives.tis.flags.truncated",
        "token TIS: tokens truncated (old/engine ratio above the cap)",
        "TIS trunc",
        "fraction of tokens",
        "the engine's ratios exceed the cap more often",
    ),
)


def headline(key: str) -> Headline:
    """The headline of ``key`` (a reward function's too)."""
    for item in (*HEADLINES, *OBJECTIVE_HEADLINES):
        if item.key == key:
            return item
    name = function_name(key)
    if name is not None:
        return reward_function_headline(name)
    from ratioscope.errors import ParameterError

    raise ParameterError(
        "columns", f"names an unknown headline '{key}'; choose from "
        f"{', '.join(h.key for h in (*HEADLINES, *OBJECTIVE_HEADLINES))}"
    )  # fmt: skip


def lookup(document: Any, path: str) -> Any:
    """The value at a dotted ``path`` of a JSON document; a key holding dots (``0.01``)
    is matched whole, the longest first. None where the path leads nowhere.

    >>> lookup({"a": {"0.5": {"b": 2}}}, "a.0.5.b"), lookup({"a": 1}, "a.c")
    (2, None)
    """
    if not path:
        return document
    if is_dataclass(document) and not isinstance(document, type):
        # a report's section as it is built (no JSON conversion): its fields by name
        document = {f.name: getattr(document, f.name) for f in fields(document)}
    if not isinstance(document, Mapping):
        return None
    parts = path.split(".")
    for cut in range(len(parts), 0, -1):
        key = ".".join(parts[:cut])
        if key in document:
            found = lookup(document[key], ".".join(parts[cut:]))
            if found is not None:
                return found
    return None


def _number(value: Any) -> float | None:
    if hasattr(value, "item") and getattr(value, "ndim", None) == 0:
        value = value.item()  # a numpy or torch scalar of a section not yet in JSON
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    value = float(value)
    return value if math.isfinite(value) else None


@dataclass(frozen=True)
class TimelineStep:
    """One training step of a timeline.

    Attributes:
        step: the step number.
        inputs: its files, as given.
        values: headline key -> value (None: missing in this step).
        flags: the keys of the headlines whose series changes at this step.
        verdict: what the verdict said after this step, from the steps so far
            (:class:`~ratioscope.judgement.run_verdict.StepVerdict`; None for a
            timeline read from a document written before it existed).
    """

    step: int
    inputs: tuple[str, ...]
    values: dict[str, float | None]
    flags: tuple[str, ...] = ()
    verdict: StepVerdict | None = None


@dataclass(frozen=True)
class Timeline:
    """Result of :func:`timeline`: one row per step, the change flags, the pooled report.

    Attributes:
        tool: name, version and creation time, as in reports.
        params: ``analysis`` (and ``load``) as in reports, ``step_from``, ``change``
            (the :class:`ChangeRule`).
        headlines: the quantities followed (:data:`HEADLINES`, with one per reward
            function of the run after the reward's own, :func:`reward_function_headline`).
        steps: one :class:`TimelineStep` per step, in step order.
        warnings: the pooled report's warnings.
        pooled: the merge of the step reports (equal to ``analyze`` of all files), not
            written to the timeline JSON; None for a timeline read from JSON.
        verdict: the health verdict of the pooled report when one was computed (its
            ``to_dict()`` is the JSON's ``verdict``).
    """

    tool: dict[str, Any]
    params: dict[str, Any]
    headlines: tuple[Headline, ...]
    steps: tuple[TimelineStep, ...]
    warnings: tuple[str, ...] = ()
    pooled: Report | None = field(default=None, repr=False, compare=False)
    verdict: Any = None
    #: predicted against observed entropy change over the steps (None: not followed)
    entropy_mechanics: MechanicsFit | None = None
    #: the entropy-performance law fitted over the steps (None: not enough steps)
    entropy_performance: EntropyPerformance | None = None

    def series(self, key: str) -> list[float | None]:
        """The values of headline ``key``, one per step."""
        return [step.values.get(key) for step in self.steps]

    def flagged(self, key: str) -> list[bool]:
        """Whether each step is flagged for headline ``key``."""
        return [key in step.flags for step in self.steps]

    def levels(self) -> list[str | None]:
        """The verdict's level after each step (None where the step has no verdict)."""
        return [None if step.verdict is None else step.verdict.level for step in self.steps]

    def to_dict(self) -> dict[str, Any]:
        """The timeline JSON document (schema version 1)."""
        from ratioscope.io.documents import to_jsonable

        verdict = self.verdict
        if verdict is not None and hasattr(verdict, "to_dict"):
            verdict = verdict.to_dict()
        return to_jsonable(
            {
                "schema_version": TIMELINE_SCHEMA_VERSION,
                "kind": "timeline",
                "tool": self.tool,
                "params": self.params,
                "headlines": [
                    {"key": h.key, "label": h.label, "unit": h.unit, "rise": h.rise}
                    for h in self.headlines
                ],
                "steps": [
                    {
                        "step": s.step,
                        "inputs": list(s.inputs),
                        "values": {h.key: s.values.get(h.key) for h in self.headlines},
                        "flags": list(s.flags),
                        **({} if s.verdict is None else {"verdict": s.verdict.to_dict()}),
                    }
                    for s in self.steps
                ],
                "verdict": verdict,
                "entropy_mechanics": self.entropy_mechanics,
                "entropy_performance": self.entropy_performance,
                "warnings": list(self.warnings),
            }
        )

    @classmethod
    def from_dict(cls, document: Mapping[str, Any], source: str | Path | None = None) -> Timeline:
        """The timeline a JSON document holds (the verdict stays its JSON).

        Raises:
            ReportError: not a timeline document, or of a schema version not read here.
        """
        from ratioscope.errors import ReportError

        if document.get("kind") != "timeline":
            raise ReportError(source, 'not a timeline (no "kind": "timeline")')
        if document.get("schema_version") != TIMELINE_SCHEMA_VERSION:
            raise ReportError(
                source, f"timeline schema version {document.get('schema_version')!r} is "
                f"not read by this ratioscope (it reads {TIMELINE_SCHEMA_VERSION})"
            )  # fmt: skip
        from ratioscope.io.documents import check_timeline_shape

        check_timeline_shape(document, source)
        try:
            declared = {h.key: h for h in (*HEADLINES, *OBJECTIVE_HEADLINES)}
            names = [function_name(item["key"]) for item in document["headlines"]]
            made = reward_function_headlines([name for name in names if name is not None])
            functions = {h.key: h for h in made}
            headlines = tuple(
                declared.get(item["key"])
                or functions.get(item["key"])
                or Headline(item["key"], item["label"], item["key"][-10:], item["unit"], "")
                for item in document["headlines"]
            )
            from ratioscope.judgement.run_verdict import StepVerdict

            steps = tuple(
                TimelineStep(
                    step=int(item["step"]),
                    inputs=tuple(item["inputs"]),
                    values={k: _number(v) for k, v in item["values"].items()},
                    flags=tuple(item["flags"]),
                    verdict=(
                        None
                        if item.get("verdict") is None
                        else StepVerdict.from_dict(int(item["step"]), item["verdict"])
                    ),
                )
                for item in document["steps"]
            )
            return cls(
                tool=dict(document["tool"]),
                params=dict(document["params"]),
                headlines=headlines,
                steps=steps,
                warnings=tuple(document.get("warnings") or ()),
                verdict=document.get("verdict"),
                entropy_mechanics=_read_mechanics(document.get("entropy_mechanics")),
                entropy_performance=_read_performance(document.get("entropy_performance")),
            )
        except (AttributeError, KeyError, TypeError, ValueError) as error:
            raise ReportError(
                source, f"malformed timeline ({type(error).__name__}: {error})"
            ) from None

    @classmethod
    def read_json(cls, path: str | Path) -> Timeline:
        """Read a timeline JSON file."""
        from ratioscope.errors import ReportError
        from ratioscope.io.jsontext import loads

        try:
            document = loads(Path(path).read_text(encoding="utf-8"))
        except (OSError, ValueError) as error:
            raise ReportError(path, f"not a readable JSON file ({error})") from None
        if not isinstance(document, dict):
            raise ReportError(path, "not a timeline (a JSON object was expected)")
        return cls.from_dict(document, source=path)

    def write_json(self, path: str | Path) -> None:
        """Write the timeline JSON atomically."""
        from ratioscope.io.documents import write_json

        write_json(self.to_dict(), path)

    def frame(self) -> Any:
        """A polars DataFrame: one row per step, one column per headline, ``flag_<key>``."""
        import polars as pl

        data: dict[str, Any] = {"step": [s.step for s in self.steps]}
        data["files"] = [len(s.inputs) for s in self.steps]
        for item in self.headlines:
            data[item.key] = pl.Series(item.key, self.series(item.key), dtype=pl.Float64)
        for item in self.headlines:
            data[f"flag_{item.key}"] = self.flagged(item.key)
        return pl.DataFrame(data)

    def write_parquet(self, path: str | Path) -> None:
        """Write :meth:`frame` as Parquet, atomically."""
        from ratioscope.io.atomic import atomic_path

        with atomic_path(path) as tmp:
            self.frame().write_parquet(tmp)


def timeline(
    paths: str | Path | Sequence[str | Path],
    *,
    params: AnalysisParams | None = None,
    load_options: LoadOptions | None = None,
    device: str = defaults.DEVICE,
    chunk_elements: int | None = None,
    sections: Sequence[str] | None = None,
    step_from: str | None = None,
    change: ChangeRule | None = None,
    reports_dir: str | Path | None = None,
    thresholds: Thresholds | None = None,
    objectives: bool = False,
    progress: ProgressCallback | None = None,
    runner: Runner | None = None,
    fixed_params: Collection[str] = (),
    cache: StepCache | None = None,
) -> Timeline:
    """The headline quantities of a run, step by step, with change flags.

    Args:
        paths: dumps (files, directories, globs) or analyze report JSON files (shard
            reports of ``CaptureWriter(mode="report")``, merged per step); not both.
        params, load_options, device, chunk_elements, sections: as for
            :func:`ratioscope.analyze`, applied to each step.
        step_from: a regular expression with one capture group giving the step from a
            file's path; it wins over names and stored steps (:mod:`ratioscope.analysis.steps`).
        change: the change rule (default :class:`ChangeRule`).
        reports_dir: write each step's report there as ``step_NNNNNN.json`` (created if
            missing; written only when the whole timeline succeeds).
        thresholds: the verdict's thresholds (default: :class:`ratioscope.judgement.verdict.
            Thresholds`).
        objectives: also follow :data:`OBJECTIVE_HEADLINES`, from
            :func:`ratioscope.objectives` of each step's files (dumps only).
        progress: callback receiving "steps" updates, and analyze's "files"/"chunks".
        runner: where the steps are analysed (:class:`ratioscope.analysis.parallel.Runner`: local
            processes or Ray, one task per step; default this process). The steps are
            folded in step order, so the result is the sequential one.
        fixed_params: as for :func:`ratioscope.analyze`: parameters the trainer's
            recorded settings leave alone.
        cache: a :class:`~ratioscope.analysis.cache.StepCache`: steps analysed before with
            the same files and parameters are read from it, the others written to it
            (default: none).

    Returns:
        :class:`Timeline`.

    Raises:
        InputError: a file without a step (naming it and the ways to give one);
        ParameterError: a bad ``step_from``; what :func:`ratioscope.analyze` raises.
    """
    from ratioscope.analysis.pipeline import _split_options
    from ratioscope.errors import InputError, UsageError
    from ratioscope.io.loaders import expand_paths
    from ratioscope.io.paths import is_report_path

    params, load_options = _split_options(params, load_options, {})
    rule = change or ChangeRule()
    listed = [paths] if isinstance(paths, (str, Path)) else list(paths)
    files = expand_paths(listed, shard_reports=True)
    reports = [is_report_path(f) for f in files]
    if any(reports) and not all(reports):
        raise UsageError("give either dumps or analyze report JSON files, not both")
    if objectives and any(reports):
        raise UsageError(
            "the objective headlines need the dumps themselves: a report holds no per-token "
            "log-probs"
        )
    unsafe_pickle = load_options.unsafe_pickle
    skipped: list[str] = []
    by_step = assign_steps(
        files,
        step_from,
        read_meta=lambda p: read_meta(p, unsafe_pickle),
        notes=skipped,
    )
    if not by_step and skipped:
        raise InputError(None, f"no input holds token data to analyse: {skipped[0]}")
    load_options, settings_note = run_settings(by_step, load_options, all(reports))
    steps = StepAnalysis(
        params=params, load_options=load_options, device=device,
        chunk_elements=chunk_elements, sections=sections,
        objectives=objectives, fixed_params=tuple(fixed_params), cache=cache,
        thresholds=thresholds,
    )  # fmt: skip
    tasks = runner if runner is not None and runner.parallel and not all(reports) else None
    with _staged(reports_dir) as staging:
        try:
            fold = _fold_run(by_step, steps, all(reports), tasks, progress, staging, rule, cache)
        except ChainBroken:  # a kept pooled report did not read back: fold without them
            fold = _fold_run(by_step, steps, all(reports), tasks, progress, staging, rule, None)
    return fold.timeline(step_from=step_from, warnings=(*skipped, *settings_note))


def _fold_run(
    by_step: Sequence[StepFiles],
    steps: StepAnalysis,
    reports: bool,
    tasks: Runner | None,
    progress: ProgressCallback | None,
    staging: Path | None,
    rule: ChangeRule,
    cache: StepCache | None,
) -> RunFold:
    """Every step of the run folded in order (``cache``: the one the fold's pooled
    verdicts are kept in; None: merge every step)."""
    fold = RunFold(thresholds=steps.thresholds, rule=rule, objectives=steps.objectives, cache=cache)
    keys = steps.keys(by_step) if not reports else {}
    fold.plan([(keys.get(group.step), group.paths) for group in by_step])
    results = steps.results(by_step, reports, tasks, progress, staging is not None)
    first = f"step {by_step[0].step}" if by_step else "no step"
    report(progress, ProgressUpdate("steps", 0, len(by_step), first))
    for index, (group, result) in enumerate(zip(by_step, results, strict=True)):
        # the step is done (in this process or a task): the next one is under way
        label = f"step {by_step[index + 1].step}" if index + 1 < len(by_step) else "pooling"
        report(progress, ProgressUpdate("steps", index + 1, len(by_step), label))
        last = index + 1 == len(by_step)
        result = fold_step(fold, steps, group, result, last, progress, staging is not None)
        if staging is not None:
            result.write_json(staging / f"step_{group.step:06d}.json")
    report(progress, ProgressUpdate("steps", len(by_step), len(by_step), "done"))
    if not by_step:
        fold.pooled = fold.pooling.result()
    return fold


def fold_step(
    fold: RunFold,
    steps: StepAnalysis,
    group: StepFiles,
    result: StepResult,
    last: bool = False,
    progress: ProgressCallback | None = None,
    state: bool = False,
) -> StepResult:
    """Fold one step into the run; a step read from the cache that does not join it
    (made with other parameters, sums of another shape: a planted or damaged entry) is
    not trusted: it is analysed again. Returns the step as folded."""
    from ratioscope.errors import MergeError

    try:
        fold.add(group.step, group.paths, result, last=last)
    except MergeError:
        if result.document is None or steps.cache is None:
            raise
        steps.cache.refuse()
        result = steps.analysed(group, result.key, progress, state)
        fold.add(group.step, group.paths, result, last=last)
    return result


class RunFold:
    """A timeline built one step at a time (:func:`timeline`, ``watch``): each step's
    headline values, its change flags and its verdict, from the steps so far, and the
    pooled report of the steps so far.

    Args:
        thresholds: the verdict's; rule: the change rule; objectives: follow the objective
            headlines too.
        view_sections: the sections of the pooled report of the steps so far (computed
            after each step for the verdict; None: every section, as ``watch`` shows it).
        cache: where the pooled report's verdict after each step is kept
            (:class:`~ratioscope.views.pooled_run.PooledRun`): a run folded again reads
            them instead of merging every step (None: nothing kept).
    """

    def __init__(
        self,
        *,
        thresholds: Thresholds | None = None,
        rule: ChangeRule | None = None,
        objectives: bool = False,
        view_sections: Sequence[str] | None = FINDING_SECTIONS,
        cache: StepCache | None = None,
    ) -> None:
        from ratioscope.views.pooled_run import PooledRun

        self.rule = rule or ChangeRule()
        self.objectives = objectives
        self.followed = (*HEADLINES, *OBJECTIVE_HEADLINES) if objectives else HEADLINES
        self.pooling = PooledRun(thresholds, view_sections, cache)
        self.judging = StepJudging(self.followed, self.rule, thresholds)
        self.rows: list[tuple[int, tuple[str, ...], dict[str, float | None]]] = []
        #: the run's reward functions, in order of first appearance (an ordered set)
        self.functions: dict[str, None] = {}
        self.fpa_steps: dict[str, list[int]] = {}
        #: the pooled report of the steps so far (with its state after the last step;
        #: None after a step whose pooled verdict the cache held)
        self.pooled: Report | None = None

    def plan(self, upcoming: Sequence[tuple[str | None, Sequence[str | Path]]]) -> None:
        """The steps about to be folded, before the first (see :meth:`PooledRun.plan`)."""
        self.pooling.plan(upcoming)

    def add(
        self, step: int, inputs: Sequence[str | Path], result: StepResult, last: bool = False
    ) -> None:
        """Fold one step in (steps in order); ``last``: the run's last step (the pooled
        report is then made whole, with its state).

        Raises:
            MergeError: the step does not join the run (the fold is left as it was);
            ChainBroken: a cache entry the fold relied on did not read back.
        """
        step_report = result.report
        # merged first: a step that does not join the run leaves the fold as it was
        so_far = self.pooling.add(step, inputs, result, last)
        self.pooled = self.pooling.pooled
        document: dict[str, Any] = (
            dict(result.document) if result.document is not None
            else _sections_document(step_report)
        )  # fmt: skip
        if result.objectives is not None:
            document["objectives"] = result.objectives
        values = {h.key: h.value(document) for h in self.followed}
        for name in reward_function_names(document):
            self.functions.setdefault(name, None)
            item = reward_function_headline(name)
            values[item.key] = item.value(document)
        method = lookup(document, "future_policy.method")
        if method:
            self.fpa_steps.setdefault(str(method), []).append(step)
        self.rows.append((step, tuple(str(p) for p in inputs), values))
        own_report = step_report if result.document is None or result.own is None else document
        self.judging.add(step, own_report, so_far, values, list(self.functions), own=result.own)

    def recent(self, count: int) -> list[TimelineStep]:
        """The last ``count`` steps folded (what a live view shows after each step,
        without building the whole timeline)."""
        start = max(0, len(self.rows) - count)
        flags, verdicts = self.judging.flags, self.judging.judge.verdicts
        return [
            TimelineStep(step, inputs, values, flags[index], verdicts[index])
            for index, (step, inputs, values) in enumerate(self.rows[start:], start)
        ]

    def timeline(
        self,
        *,
        step_from: str | None = None,
        warnings: Sequence[str] = (),
        whole: bool = True,
        state: bool = True,
        outline: bool = False,
    ) -> Timeline:
        """The timeline of the steps so far; ``whole``: with the pooled report of every
        step (made now where the last step folded did not make it whole: the cache's
        verdicts stood for it, or a watch's look; ``state`` False: made without the
        sections' state, for a caller that writes it and merges nothing); False: without
        it (``pooled`` None), for a caller that reads the steps and the verdict only, or
        with ``outline``, with its params, its warnings and its vitals only
        (:data:`OUTLINE_SECTIONS`): all that the timeline document and the run page
        write of it, the same bytes."""
        from ratioscope.io.documents import tool_info

        pooled = None
        if whole and self.rows and not self.pooling.skipping:
            pooled = self.pooling.whole_report(state)
            if self.pooling.whole:
                self.pooled = pooled
        elif outline and self.rows and not self.pooling.skipping:
            pooled = self.pooling.outline(OUTLINE_SECTIONS)
        headlines = with_reward_functions(
            self.followed, reward_function_headlines(list(self.functions))
        )
        for _, _, values in self.rows:
            for item in headlines:
                values.setdefault(item.key, None)  # a function a step's files do not have
        steps = tuple(
            TimelineStep(step=step, inputs=inputs, values=values, flags=flags, verdict=judged)
            for (step, inputs, values), flags, judged in zip(
                self.rows, self.judging.flags, self.judging.judge.verdicts, strict=True
            )
        )
        return Timeline(
            tool=tool_info(),
            params={
                **(pooled.params if pooled is not None else {}),
                "step_from": step_from,
                "change": self.rule.to_dict(),
                "objectives": list(OBJECTIVE_METHODS) if self.objectives else None,
            },
            headlines=headlines,
            steps=steps,
            warnings=(
                *warnings,
                *(pooled.warnings if pooled is not None else ()),
                *_fpa_methods_note(self.fpa_steps),
            ),
            pooled=pooled,
            verdict=self.judging.verdict(),
            entropy_mechanics=entropy_mechanics(steps),
            entropy_performance=entropy_performance(steps),
        )


class StepJudging:
    """A timeline's verdict after each step, as its steps are folded in: the change rule
    on each followed headline, one step at a time (:class:`~ratioscope.functional.
    changepoint.ChangeTracker`: the flags of the run so far are those of the whole run),
    and the run's :class:`~ratioscope.judgement.run_verdict.RunJudge`."""

    def __init__(
        self,
        followed: Sequence[Headline],
        rule: ChangeRule,
        thresholds: Thresholds | None,
    ) -> None:
        from ratioscope.functional.changepoint import ChangeTracker
        from ratioscope.judgement.run_verdict import RunJudge

        self.followed = tuple(followed)
        self.rule = rule
        self.trackers: dict[str, ChangeTracker] = {}
        self.tracker = ChangeTracker
        self.judge = RunJudge(thresholds)
        #: the flags of each step so far
        self.flags: list[tuple[str, ...]] = []

    def add(
        self,
        step: int,
        step_report: Report | Mapping[str, Any],
        pooled: Verdict | None,
        values: Mapping[str, float | None],
        functions: Sequence[str],
        own: Verdict | None = None,
    ) -> None:
        """Fold one step in: its own report (or its JSON with ``own``, its verdict), the
        pooled report so far (None for the first step), its headline values and the
        run's reward functions so far."""
        headlines = with_reward_functions(self.followed, reward_function_headlines(functions))
        flags = tuple(h.key for h in headlines if self._tracker(h.key).add(values.get(h.key)))
        self.flags.append(flags)
        self.judge.changes.labels = {h.key: h.label for h in headlines}
        self.judge.add(step, step_report, pooled=pooled, values=values, flags=flags, own=own)

    def _tracker(self, key: str) -> ChangeTracker:
        """The change rule's tracker of headline ``key``, its scale at least the floor of
        a quantity bad when it rises: moves of float rounding, or of a token or two of a
        share, are no change (:func:`~ratioscope.judgement.run_verdict.change_floor`)."""
        from ratioscope.judgement.run_verdict import change_floor

        tracker = self.trackers.get(key)
        if tracker is None:
            tracker = self.trackers[key] = self.tracker(self.rule, change_floor(key))
        return tracker

    def verdict(self) -> Verdict | None:
        """The verdict after the last step, with the first yellow and red steps."""
        from dataclasses import replace

        from ratioscope.judgement.run_verdict import first_step_at

        current = self.judge.current
        if current is None:
            return None
        verdicts = self.judge.verdicts
        return replace(
            current,
            first_yellow=first_step_at(verdicts, "yellow"),
            first_red=first_step_at(verdicts, "red"),
        )


def run_settings(
    by_step: Sequence[StepFiles], load_options: LoadOptions, reports: bool
) -> tuple[LoadOptions, tuple[str, ...]]:
    """Every step analysed with the run's trainer settings (those recorded in its first
    file, or ``--trainer``'s), not each step's own (a step recording others would give
    a report that cannot be pooled with the rest), and a warning naming the files that
    record others."""
    from dataclasses import replace

    from ratioscope.data import trainer_settings
    from ratioscope.judgement.settings import differing_settings

    if reports or load_options.trainer == "none" or load_options.trainer_settings is not None:
        return load_options, ()
    paths = [p for group in by_step for p in group.paths]
    settings = trainer_settings.resolve(load_options.trainer, paths[0] if paths else None)
    note = differing_settings(paths[1:], settings)
    if settings is None:  # none in force: a later file's must not apply to its step
        return replace(load_options, trainer="none"), (note,) if note else ()
    return replace(load_options, trainer_settings=settings), (note,) if note else ()


def _fpa_methods_note(by_method: Mapping[str, list[int]]) -> tuple[str, ...]:
    """A warning when FPA's method differs between steps: its row then changes meaning."""
    if len(by_method) < 2:
        return ()
    parts = "; ".join(
        f"the {method} method in step(s) {', '.join(map(str, steps[:6]))}"
        + (f" and {len(steps) - 6} more" if len(steps) > 6 else "")
        for method, steps in sorted(by_method.items())
    )
    return (
        f"future_policy: {parts}: the FPA row changes method between these steps, so its "
        "values are not comparable across them (exact from logits, approximation from the "
        "reference log-probs)",
    )


#: the observed and the predicted entropy change of a step (Cui et al. 2025, Theorem 2)
OBSERVED_CHANGE = "vitals.entropy.change_mean"
COVARIANCE = "vitals.entropy_mechanics.covariance"


def entropy_mechanics(steps: Sequence[TimelineStep]) -> MechanicsFit | None:
    """Observed entropy change within each step against ``-Cov(log pi, A)``: their
    correlation over the run, and one fitted step size (docs/timeline.md "Entropy
    mechanics"). None when no step has both values."""
    from ratioscope.functional.vitals import fit_entropy_mechanics

    observed = [step.values.get(OBSERVED_CHANGE) for step in steps]
    covariance = [step.values.get(COVARIANCE) for step in steps]
    fit = fit_entropy_mechanics(observed, covariance)
    return fit if fit.steps else None


@dataclass(frozen=True)
class EntropyPerformance:
    """The entropy-performance law over a run (:func:`ratioscope.functional.vitals.
    fit_entropy_performance`), with the series it was fitted to: ``performance`` is the
    headline key of R (the correct share, else the reward), ``entropy`` that of H."""

    performance: str
    entropy: str
    fit: PerformanceFit


#: the series of the entropy-performance law: R (the first one a run has), and H
PERFORMANCE_KEYS = ("vitals.correct_share", "vitals.reward.mean")
ENTROPY_KEY = "vitals.entropy.mean"


def entropy_performance(steps: Sequence[TimelineStep]) -> EntropyPerformance | None:
    """``R = -a exp(H) + b`` (Cui et al. 2025) fitted over the steps, R the correct share
    (else the mean reward) and H the token entropy; None without 3 steps having both."""
    from ratioscope.functional.vitals import fit_entropy_performance

    entropy = [step.values.get(ENTROPY_KEY) for step in steps]
    for key in PERFORMANCE_KEYS:
        performance = [step.values.get(key) for step in steps]
        fit = fit_entropy_performance(entropy, performance)
        if fit.a is not None:
            return EntropyPerformance(key, ENTROPY_KEY, fit)
    return None


def _read_performance(block: Any) -> EntropyPerformance | None:
    if block is None:
        return None
    from ratioscope.functional.vitals import PerformanceFit
    from ratioscope.io.documents import from_jsonable

    fit = from_jsonable(PerformanceFit, block["fit"], "$.entropy_performance.fit")
    return EntropyPerformance(str(block["performance"]), str(block["entropy"]), fit)


def _read_mechanics(block: Any) -> MechanicsFit | None:
    if block is None:
        return None
    from ratioscope.functional.vitals import MechanicsFit
    from ratioscope.io.documents import from_jsonable

    return from_jsonable(MechanicsFit, block, "$.entropy_mechanics")


def _sections_document(step_report: Report) -> dict[str, Any]:
    """The report's sections, what the headlines read (:func:`lookup` walks the section
    objects as it walks their JSON): converting the whole report to JSON, ``state``
    included, was most of a small step's time."""
    from ratioscope.report.model import OPTIONAL_SECTION_KEYS, SECTION_KEYS

    return {key: getattr(step_report, key) for key in (*SECTION_KEYS, *OPTIONAL_SECTION_KEYS)}


def timeline_verdict(
    pooled: Report,
    steps: Sequence[TimelineStep],
    thresholds: Thresholds | None = None,
    headlines: Sequence[Headline] = HEADLINES,
    relative_rows: Sequence[tuple[int, Mapping[str, float | None]]] = (),
) -> Verdict:
    """The health verdict of the pooled report, then one finding per headline whose
    series changes (:class:`~ratioscope.judgement.run_verdict.ChangeFindings`), then the
    later steps against the run's first steps (``relative_rows``: (step,
    :func:`relative_values`) in step order): the verdict of a timeline whose step reports
    are gone. :func:`timeline` judges every step as it folds it (:class:`StepJudging`)."""
    from ratioscope.judgement.run_verdict import FIRST_STEPS_QUANTITIES, ChangeFindings
    from ratioscope.judgement.verdict import Verdict, first_steps_findings, verdict

    judged = verdict(pooled, thresholds)
    changes = ChangeFindings({h.key: h.label for h in headlines})
    for step in steps:
        changes.add(step.step, step.values, step.flags)
    relative = first_steps_findings(relative_rows, thresholds, quantities=FIRST_STEPS_QUANTITIES)
    return Verdict(
        judged.findings + tuple(changes.findings()) + tuple(relative),
        judged.overridden,
        judged.notes,
    )


def relative_values(document: Mapping[str, Any]) -> dict[str, float | None]:
    """The numbers of a step's report JSON that the verdict judges against the run's
    first steps (:data:`ratioscope.judgement.verdict.RELATIVE`), by dotted path."""
    from ratioscope.judgement.verdict import RELATIVE, report_value

    return {item.path: report_value(document, item.path) for item in RELATIVE}


def _short(value: float | None) -> str:
    return "—" if value is None else f"{value:.3g}"


class _staged:
    """A staging directory beside ``reports_dir`` whose files move there on success
    (so a failed timeline leaves no partial set of step reports)."""

    def __init__(self, reports_dir: str | Path | None) -> None:
        self.target = None if reports_dir is None else Path(reports_dir)
        self.staging: Path | None = None

    def __enter__(self) -> Path | None:
        if self.target is None:
            return None
        from ratioscope.errors import UsageError

        if self.target.exists() and not self.target.is_dir():
            raise UsageError(f"cannot write step reports to {self.target}: not a directory")
        parent = self.target.parent
        if not parent.is_dir():
            raise UsageError(f"cannot write step reports to {self.target}: {parent} does not exist")
        self.staging = Path(tempfile.mkdtemp(prefix=f".{self.target.name}.", dir=parent))
        return self.staging

    def __exit__(self, kind: Any, error: Any, trace: Any) -> None:
        if self.staging is None or self.target is None:
            return
        try:
            if kind is None:
                self.target.mkdir(exist_ok=True)
                for file in sorted(self.staging.iterdir()):
                    file.replace(self.target / file.name)
        finally:
            shutil.rmtree(self.staging, ignore_errors=True)
