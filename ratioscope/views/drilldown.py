"""The drill-down data of the run report: each step's sequences ranked, and the tokens of
the top ones (docs/report.md).

:func:`drilldown` reads each step's dumps once more after the timeline, scores every
sequence (:mod:`ratioscope.functional.drilldown`, on per-token values the rest of the
library computes: the batch's log-ratios, the Kalman filter and token states of the
analysis (:class:`ratioscope.sections.context.Context`), each objective's per-token
coefficients (:func:`ratioscope.objective_family.side_by_side.batch_coefficients`)),
keeps the ``top`` sequences of each ranking, and keeps all the tokens of those sequences
within a byte budget (:class:`TokenBudget`): every ranking's first sequence before any second one,
flagged steps before the others, the rest of the steps spread evenly over the run.
Memory stays bounded by one step's batch plus the budget.
"""

from __future__ import annotations

import base64
import heapq
import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ratioscope.progress import ProgressCallback, ProgressUpdate, report

if TYPE_CHECKING:
    from torch import Tensor

    from ratioscope.data.batch import TokenBatch
    from ratioscope.data.params import AnalysisParams
    from ratioscope.io.loaders import LoadOptions
    from ratioscope.io.tokenizer import TokenText
    from ratioscope.objective_family.step_join import FileCoefficients

#: methods whose per-token coefficient the sequence page offers (those that run on any
#: dump with log-probs and advantages; the others need rewards, groups or a reference)
DEFAULT_METHODS: tuple[str, ...] = (
    "grpo",
    "gspo",
    "gmpo",
    "cispo",
    "sapo",
    "kpo",
    "tepo",
    "tis",
    "icepop",
    "opsm",
)
#: sequences kept per ranking and step
DEFAULT_TOP = 5
#: bytes of token data the report may hold (base64 text in the HTML)
DEFAULT_TOKEN_BYTES = 8 * 2**20


@dataclass(frozen=True)
class Ranking:
    """One way to rank a step's sequences: ``key``, a ``label`` and the score's unit."""

    key: str
    label: str
    unit: str


RANKINGS: tuple[Ranking, ...] = (
    Ranking("policy_k3", "largest policy mismatch (mean k3, current vs behaviour)", "nats/token"),
    Ranking(
        "rollout_k3", "largest train/inference mismatch (mean k3, old vs engine)", "nats/token"
    ),
    Ranking("clipped", "most clipped (share of tokens GRPO's clip binds on)", "share of tokens"),
    Ranking("gradient_share", "largest share of the step's sum |GRPO coefficient|", "share"),
    Ranking(
        "entropy_drop",
        "largest entropy drop (mean behaviour - current policy entropy)",
        "nats/token",
    ),
    Ranking("longest", "longest", "tokens"),
    Ranking("length_limited", "length-limited (at the generation limit)", "tokens"),
)


@dataclass(frozen=True)
class SeriesInfo:
    """One per-token quantity of the sequence page: ``kind`` sets its colour scale
    ("diverging" around 0, "state" for -1/0/1, "sequential" from 0)."""

    key: str
    label: str
    kind: str


@dataclass
class SequenceTokens:
    """The tokens of one kept sequence: ids ([L] int32 or None) and named [L] float32
    series (numpy arrays)."""

    ids: Any
    series: dict[str, Any]

    def to_dict(self) -> dict[str, Any]:
        return {
            "ids": None if self.ids is None else _b64(self.ids, "i"),
            "series": {key: _b64(values, "f") for key, values in self.series.items()},
        }


@dataclass
class StepDrill:
    """One step's sequences: ``rows`` (file index, row, length, reward, correct, scores)
    of every ranked sequence, ``rankings`` key -> sequence ids, best first."""

    step: int
    files: list[str]
    sequences: int
    tokens: int
    rows: dict[str, dict[str, Any]] = field(default_factory=dict)
    rankings: dict[str, list[str]] = field(default_factory=dict)
    summary: dict[str, float | None] = field(default_factory=dict)
    length_limit: int | None = None
    notes: list[str] = field(default_factory=list)


@dataclass
class Drilldown:
    """Result of :func:`drilldown`: per-step rankings and the kept sequences' tokens."""

    steps: list[StepDrill]
    tokens: dict[str, SequenceTokens]
    series: list[SeriesInfo]
    rankings: tuple[Ranking, ...] = RANKINGS
    vocab: dict[int, str] | None = None
    top: int = DEFAULT_TOP
    token_bytes: int = DEFAULT_TOKEN_BYTES
    dropped: int = 0

    def to_dict(self) -> dict[str, Any]:
        from ratioscope.io.documents import to_jsonable

        return to_jsonable(
            {
                "top": self.top,
                "token_bytes": self.token_bytes,
                "dropped_sequences": self.dropped,
                "rankings": [r.__dict__ for r in self.rankings],
                "series": [s.__dict__ for s in self.series],
                "steps": [
                    {
                        "step": s.step,
                        "files": s.files,
                        "sequences": s.sequences,
                        "tokens": s.tokens,
                        "summary": s.summary,
                        "length_limit": s.length_limit,
                        "rows": s.rows,
                        "rankings": s.rankings,
                        "notes": s.notes,
                    }
                    for s in self.steps
                ],
                "tokens": {key: value.to_dict() for key, value in self.tokens.items()},
                "vocab": None
                if self.vocab is None
                else {str(k): v for k, v in sorted(self.vocab.items())},
            }
        )


def _b64(values: Any, kind: str) -> str:
    """Little-endian float32 ("f") or int32 ("i") values as base64 (the page decodes them
    into typed arrays)."""
    import numpy as np

    dtype = "<f4" if kind == "f" else "<i4"
    return base64.b64encode(np.asarray(values, dtype=dtype).tobytes()).decode("ascii")


# ------------------------------------------------------------------ per-token values
def token_series(
    batch: TokenBatch,
    params: AnalysisParams,
    methods: Sequence[str],
    coefficients: dict[str, Any] | None = None,
) -> tuple[dict[str, Tensor], dict[str, Any]]:
    """Every per-token quantity of the sequence page on one batch ([B, T] each), and the
    methods' coefficients, from the library's own computations; ``coefficients``: the
    methods' coefficients of the batch's rows computed on whole groups
    (:class:`ratioscope.objective_family.step_join.FileCoefficientJoin`; NaN rows: left out), else
    computed on the batch alone."""
    import torch

    from ratioscope.functional.token_stats import token_states
    from ratioscope.objective_family.methods import chosen_settings
    from ratioscope.objective_family.side_by_side import batch_coefficients
    from ratioscope.sections.context import Context

    ctx = Context(batch, params)
    series: dict[str, Tensor] = {}
    z_policy, z_rollout = _mismatch_pairs(batch)
    if z_policy is not None:
        series["log_ratio"] = z_policy
        kalman = ctx.signal("kalman")
        series["kalman"] = kalman
        series["state"] = token_states(kalman, batch.mask, params.state_band("kalman")).to(
            torch.float32
        )
    if z_rollout is not None:
        series["rollout_log_ratio"] = z_rollout
    if batch.entropy is not None:
        series["entropy"] = batch.entropy
    if batch.entropy is not None and batch.old_entropy is not None:
        series["entropy_drop"] = batch.old_entropy - batch.entropy
    if batch.advantages is not None:
        series["advantage"] = batch.advantages
    names = tuple(dict.fromkeys(methods))
    if coefficients is None:
        coefficients = batch_coefficients(batch, names, chosen_settings(names, None), {})
    for name in methods:
        if name in coefficients:
            series[f"coef_{name}"] = coefficients[name].values
    return series, coefficients


def ranking_inputs(
    batch: TokenBatch, coefficients: dict[str, Any] | None = None
) -> tuple[dict[str, Tensor], dict[str, Any]]:
    """What the rankings need of one batch: the two log-ratio pairs ([B, T]) and the
    reference method's (GRPO's) coefficients (``coefficients`` when given, as for
    :func:`token_series`), without the other series."""
    from ratioscope.objective_family.methods import REFERENCE, chosen_settings
    from ratioscope.objective_family.side_by_side import batch_coefficients

    series: dict[str, Tensor] = {}
    z_policy, z_rollout = _mismatch_pairs(batch)
    if z_policy is not None:
        series["log_ratio"] = z_policy
    if z_rollout is not None:
        series["rollout_log_ratio"] = z_rollout
    if coefficients is not None:
        return series, coefficients
    names = (REFERENCE,)
    return series, batch_coefficients(batch, names, chosen_settings(names, None), {})


def _mismatch_pairs(batch: TokenBatch) -> tuple[Tensor | None, Tensor | None]:
    """(policy z, rollout z) as the mismatch section pairs them (ratioscope.sections.
    mismatch): a dump of old vs engine alone fills the rollout pair."""
    if batch.ratio_pair == "old/engine":
        return None, batch.log_ratio
    rollout = None
    if batch.rollout_log_probs is not None and batch.old_log_probs is not None:
        rollout = batch.old_log_probs - batch.rollout_log_probs
    return batch.log_ratio, rollout


def series_info(methods: Sequence[str]) -> list[SeriesInfo]:
    """The quantities the sequence page can colour tokens by, in menu order."""
    from ratioscope.objective_family.methods import METHODS

    base = [
        SeriesInfo("log_ratio", "log-ratio z = log pi_theta - log pi_old", "diverging"),
        SeriesInfo("kalman", "Kalman-filtered log-ratio (KPO)", "diverging"),
        SeriesInfo("state", "token state of the filtered ratio (up 1, on 0, down -1)", "state"),
        SeriesInfo("rollout_log_ratio", "train/inference log-ratio (old - engine)", "diverging"),
        SeriesInfo("entropy", "entropy (current policy)", "sequential"),
        SeriesInfo("entropy_drop", "entropy drop (behaviour - current)", "diverging"),
        SeriesInfo("advantage", "advantage", "diverging"),
    ]
    coefs = [
        SeriesInfo(f"coef_{m}", f"{METHODS[m].label}: gradient coefficient", "diverging")
        for m in methods
    ]
    return base + coefs


# ------------------------------------------------------------------ the rankings
def sequence_scores(
    batch: TokenBatch,
    series: dict[str, Tensor],
    coefficients: dict[str, Any],
    length_limit: int | None,
) -> dict[str, Tensor]:
    """[B] score of every ranking of :data:`RANKINGS` that this batch can give."""
    import torch

    from ratioscope.functional import drilldown as f
    from ratioscope.objective_family.methods import REFERENCE

    mask = batch.mask
    lengths = mask.sum(dim=1).double()
    scores: dict[str, Tensor] = {}
    if "log_ratio" in series:
        scores["policy_k3"] = f.sequence_k3(series["log_ratio"], mask)
    if "rollout_log_ratio" in series:
        scores["rollout_k3"] = f.sequence_k3(series["rollout_log_ratio"], mask)
    reference = coefficients.get(REFERENCE)
    if reference is not None:
        clipped = torch.zeros_like(mask)
        for name in ("clip_low", "clip_high"):
            if name in reference.flags:
                clipped = clipped | reference.flags[name]
        scores["clipped"] = f.sequence_flag_share(clipped, mask)
        # the sequence's sum here: a share of the step's sum once every file of the step
        # is in (_StepRows.rank), as rank files each hold a part of the step
        scores["gradient_share"] = f.sequence_abs_sum(reference.values, mask)
    if batch.entropy is not None and batch.old_entropy is not None:
        scores["entropy_drop"] = f.sequence_mean_drop(batch.old_entropy, batch.entropy, mask)
    scores["longest"] = torch.where(lengths > 0, lengths, math.nan)
    if length_limit is not None:
        scores["length_limited"] = torch.where(lengths >= length_limit, lengths, math.nan)
    return scores


# ------------------------------------------------------------------ the budget
def spread_order(count: int) -> list[int]:
    """0..count-1 in an order whose every prefix is spread evenly over the range (the
    bit-reversed order of the van der Corput sequence).

    >>> spread_order(5)
    [0, 4, 2, 1, 3]
    """
    if count <= 0:
        return []
    bits = max(1, (count - 1).bit_length())
    order = []
    for i in range(1 << bits):
        j = int(f"{i:0{bits}b}"[::-1], 2)
        if j < count:
            order.append(j)
    return order


class TokenBudget:
    """The kept sequences' tokens under a byte budget, by priority (lower first): every
    ranking's r-th sequence before any (r+1)-th, flagged steps before the others, the
    others in :func:`spread_order`. A sequence that several rankings name takes its best
    priority. When the budget is exceeded, the lowest-priority sequences are dropped."""

    def __init__(self, limit: int, step_priority: dict[int, int]) -> None:
        self.limit = limit
        self.step_priority = step_priority
        self.kept: dict[str, tuple[tuple[int, int, int], int]] = {}
        self.heap: list[tuple[tuple[int, int, int], str]] = []  # max-heap by negation
        self.used = 0
        self.dropped = 0
        self.offered = 0

    def priority(self, step: int, rank: int) -> tuple[int, int, int]:
        """(rank in its ranking, the step's place, the order offered): distinct for
        every sequence offered."""
        self.offered += 1
        return (rank, self.step_priority.get(step, 0), self.offered)

    def offer(self, key: str, priority: tuple[int, int, int], size: int) -> None:
        """Keep ``key`` (``size`` bytes) if the budget allows, dropping lower priorities."""
        self.kept[key] = (priority, size)
        self.used += size
        heapq.heappush(self.heap, (_negate(priority), key))
        while self.used > self.limit and self.heap:
            _, worst = heapq.heappop(self.heap)
            _, dropped = self.kept.pop(worst)
            self.used -= dropped
            self.dropped += 1


def token_data_bytes(length: int, series: int, ids: bool) -> int:
    """Bytes of one sequence's per-token data in the report: ``series`` float32 values
    and, with ``ids``, one int32 per token, as base64 (4/3), plus its JSON keys.

    Three tokens, one series and ids: 2 x 3 x 4 = 24 bytes, 32 in base64, + 2 x 40:

    >>> token_data_bytes(3, 1, True)
    112
    """
    count = series + ids
    return math.ceil(count * length * 4 * 4 / 3) + 40 * count


def _negate(priority: tuple[int, int, int]) -> tuple[int, int, int]:
    return (-priority[0], -priority[1], -priority[2])


def step_priorities(steps: Sequence[int], flagged: set[int]) -> dict[int, int]:
    """Step -> its place in the budget's order: flagged steps first (in step order), then
    the others in :func:`spread_order`."""
    first = [s for s in steps if s in flagged]
    rest = [s for s in steps if s not in flagged]
    ordered = first + [rest[i] for i in spread_order(len(rest))]
    return {step: index for index, step in enumerate(ordered)}


# ------------------------------------------------------------------ the pass
def check_options(top: int, token_bytes: int, length_limit: int | None) -> None:
    """Refuse drill-down options that cannot be used (before any file is read)."""
    from ratioscope.errors import ParameterError

    if top < 1:
        raise ParameterError("top", f"must be >= 1 sequence, got {top}")
    if token_bytes < 0:
        raise ParameterError("token_bytes", f"must be >= 0 bytes, got {token_bytes}")
    if length_limit is not None and length_limit < 1:
        raise ParameterError("length_limit", f"must be >= 1 token, got {length_limit}")


def drilldown(
    steps: Sequence[tuple[int, Sequence[str | Path]]],
    *,
    params: AnalysisParams,
    load_options: LoadOptions,
    flagged: set[int] | None = None,
    methods: Sequence[str] = DEFAULT_METHODS,
    top: int = DEFAULT_TOP,
    token_bytes: int = DEFAULT_TOKEN_BYTES,
    length_limit: int | None = None,
    token_text: TokenText | None = None,
    progress: ProgressCallback | None = None,
) -> Drilldown:
    """Rank every step's sequences and keep the tokens of the top ones.

    Two passes over the dumps: the first scores every sequence (GRPO's coefficients and
    the log-ratios only) and decides, by :class:`TokenBudget`, which sequences keep their
    tokens (a sequence's size is known from its length); the second reads again only the
    steps that keep some, and computes every per-token series there.

    Args:
        steps: (step, its dump files) in step order, as the timeline grouped them.
        params, load_options: as for the timeline (the Kalman filter, the bands).
        flagged: steps the timeline flags (their sequences' tokens are kept first).
        methods: objectives whose per-token coefficient the sequence page offers.
        top: sequences kept per ranking and step.
        token_bytes: the budget of the kept tokens' data (bytes of base64 text).
        length_limit: the generation limit in tokens; None: each file's padded width.
        token_text: turns token ids into text (``--tokenizer``); checked on every id.
        progress: "steps" updates (both passes).

    Returns:
        :class:`Drilldown`.
    """
    check_options(top, token_bytes, length_limit)
    chosen = tuple(dict.fromkeys(methods))
    series_count = len(series_info(chosen))  # an upper bound: what a file lacks is left out
    budget = TokenBudget(token_bytes, step_priorities([s for s, _ in steps], flagged or set()))
    drills: list[StepDrill] = []
    total = 2 * len(steps)
    group_size = _group_size(steps, load_options)
    for index, (step, paths) in enumerate(steps):
        report(progress, ProgressUpdate("steps", index, total, f"ranking step {step}"))
        rows = _StepRows(StepDrill(step=step, files=[str(p) for p in paths], sequences=0, tokens=0))
        for done in _step_coefficients(
            paths, load_options, rows.drill.notes, ("grpo",), group_size, step
        ):
            rows.add_file(
                done.batch, done.index, params, length_limit, token_text, done.coefficients
            )
        for key, rank in rows.rank(top).items():
            facts = rows.drill.rows[key]
            size = token_data_bytes(facts["length"], series_count, facts.pop("_ids"))
            budget.offer(key, budget.priority(step, rank), size)
        for facts in rows.drill.rows.values():
            facts.pop("_ids", None)
        drills.append(rows.drill)
    kept = _kept_tokens(
        drills, set(budget.kept), params, load_options, chosen, progress, group_size
    )
    report(progress, ProgressUpdate("steps", total, total, "done"))
    vocab = None
    if token_text is not None:
        used = {int(i) for t in kept.values() if t.ids is not None for i in t.ids.tolist()}
        vocab = token_text.texts(sorted(used))
    present = {name for tokens in kept.values() for name in tokens.series}
    return Drilldown(
        steps=drills,
        tokens=kept,
        series=[s for s in series_info(chosen) if s.key in present],
        vocab=vocab,
        top=top,
        token_bytes=token_bytes,
        dropped=budget.dropped,
    )


def _batches(
    paths: Sequence[str | Path], load_options: LoadOptions, notes: list[str]
) -> Iterator[tuple[int, TokenBatch]]:
    """(file index, batch) of one step's dumps (side tables and rank copies skipped)."""
    from ratioscope.io.loaders import RunFiles

    files = [Path(p) for p in paths]
    run = RunFiles(len(files), load_options, notes)
    for file_index, path in enumerate(files):
        batch = run.load(path)
        if batch is not None:
            yield file_index, batch


def _group_size(
    steps: Sequence[tuple[int, Sequence[str | Path]]], load_options: LoadOptions
) -> int | None:
    """The trainer's group size (recorded in the first file, or ``--trainer``'s
    defaults), by which a group short of it is told from a whole one; None: unknown."""
    from ratioscope.objective_family.side_by_side import _trainer_clip

    first = [Path(p) for _, paths in steps[:1] for p in paths]
    return _trainer_clip(first, load_options, {}, {})[1]


def _step_coefficients(
    paths: Sequence[str | Path],
    load_options: LoadOptions,
    notes: list[str],
    methods: Sequence[str],
    group_size: int | None,
    step: int,
) -> Iterator[FileCoefficients]:
    """Each file of one step with the coefficients of ``methods`` of its rows, on the
    batches ``objectives`` gives them: its groups joined across the step's files
    (:class:`ratioscope.objective_family.step_join.FileCoefficientJoin`; a group short of the
    trainer's group size after joining is left out of the methods that look across a
    group, NaN there, and counted in ``notes``)."""
    from ratioscope.objective_family.methods import (
        METHODS,
        chosen_settings,
        looks_across_groups,
    )
    from ratioscope.objective_family.side_by_side import batch_coefficients
    from ratioscope.objective_family.step_join import FileCoefficientJoin

    names = tuple(dict.fromkeys(methods))
    chosen = chosen_settings(names, None)
    across = [n for n in names if looks_across_groups(n, chosen[n])]
    others = tuple(n for n in names if n not in across)

    def compute(batch: TokenBatch, every_method: bool) -> dict[str, Any]:
        return batch_coefficients(batch, names if every_method else others, chosen, {})

    labels = [METHODS[n].label for n in across]
    join = FileCoefficientJoin(compute, group_size, bool(load_options.group_size), labels)
    for file_index, batch in _batches(paths, load_options, notes):
        yield from join.add(step, file_index, batch)
    yield from join.finish()
    notes.extend(join.notes("coefficients"))


def _kept_tokens(
    drills: list[StepDrill],
    kept: set[str],
    params: AnalysisParams,
    load_options: LoadOptions,
    methods: tuple[str, ...],
    progress: ProgressCallback | None,
    group_size: int | None = None,
) -> dict[str, SequenceTokens]:
    """The second pass: every per-token series of the kept sequences, step by step."""
    out: dict[str, SequenceTokens] = {}
    total = 2 * len(drills)
    for index, drill in enumerate(drills):
        report(
            progress,
            ProgressUpdate("steps", len(drills) + index, total, f"tokens of step {drill.step}"),
        )
        wanted: dict[int, dict[int, str]] = {}
        for key, facts in drill.rows.items():
            if key in kept:
                wanted.setdefault(facts["file"], {})[facts["row"]] = key
        if not wanted:
            continue
        files = _step_coefficients(drill.files, load_options, [], methods, group_size, drill.step)
        for done in files:
            rows = wanted.get(done.index)
            if not rows:
                continue
            batch = done.batch
            series, _ = token_series(batch, params, methods, done.coefficients)
            for number, key in rows.items():
                row = number - batch.row_offset
                valid = batch.mask[row]
                ids = None
                if batch.token_ids is not None:
                    ids = batch.token_ids[row][valid].numpy().astype("<i4")
                out[key] = SequenceTokens(
                    ids=ids,
                    series={  # a method that left the row out (a short group) has none
                        name: values[row][valid].numpy().astype("<f4")
                        for name, values in series.items()
                        if not bool(values[row].isnan().all())
                    },
                )
    return out


#: a candidate sequence: (id, scores, facts)
_Candidate = tuple[str, dict[str, float], dict[str, Any]]


class _StepRows:
    """The sequences of one step while its files are read: every row's scores and facts."""

    def __init__(self, drill: StepDrill) -> None:
        self.drill = drill
        self.candidates: list[_Candidate] = []

    def add_file(
        self,
        batch: TokenBatch,
        file_index: int,
        params: AnalysisParams,
        length_limit: int | None,
        token_text: TokenText | None,
        coefficients: dict[str, Any] | None = None,
    ) -> None:
        drill = self.drill
        if token_text is not None and batch.token_ids is not None:
            token_text.check(batch.token_ids[batch.mask], batch.source)
        limit = length_limit if length_limit is not None else _assumed_limit(batch)
        drill.length_limit = max(drill.length_limit or 0, limit)
        scores = sequence_scores(batch, *ranking_inputs(batch, coefficients), limit)
        lengths = batch.mask.sum(dim=1).tolist()
        rewards = None if batch.rewards is None else batch.rewards.double().tolist()
        correct = None if batch.correct is None else batch.correct.tolist()
        group = None if batch.group is None else batch.group.tolist()
        columns = {k: v.tolist() for k, v in scores.items()}
        drill.sequences += batch.num_sequences
        drill.tokens += int(sum(lengths))
        for row in range(batch.num_sequences):
            number = row + batch.row_offset
            facts: dict[str, Any] = {
                "file": file_index,
                "row": number,
                "length": int(lengths[row]),
                "reward": None if rewards is None else rewards[row],
                "correct": None if correct is None else bool(correct[row]),
                "group": None if group is None else _label(batch, int(group[row])),
                "_ids": batch.token_ids is not None,
            }
            row_scores = {k: v[row] for k, v in columns.items()}
            self.candidates.append((f"s{drill.step}_f{file_index}_r{number}", row_scores, facts))
        drill.summary = _summary(self.candidates)

    def rank(self, top: int) -> dict[str, int]:
        """Fill the step's rankings; sequence id -> its best rank in any of them."""
        import torch

        from ratioscope.functional.drilldown import top_rows

        self._shares_of_step("gradient_share")
        best: dict[str, int] = {}
        for ranking in RANKINGS:
            values = [c[1].get(ranking.key, math.nan) for c in self.candidates]
            if not any(math.isfinite(v) for v in values):
                continue
            rows = top_rows(torch.tensor(values, dtype=torch.float64), top)
            self.drill.rankings[ranking.key] = [self.candidates[r][0] for r in rows]
            for rank, r in enumerate(rows):
                key, scores, facts = self.candidates[r]
                self.drill.rows.setdefault(key, {**facts, "scores": _rounded(scores)})
                best[key] = min(best.get(key, rank), rank)
        return best

    def _shares_of_step(self, key: str) -> None:
        """Turn every candidate's ``key`` from its own sum into its share of the step's
        total (NaN for all when the total is 0 or not finite)."""
        values = [c[1][key] for c in self.candidates if key in c[1]]
        total = math.fsum(v for v in values if math.isfinite(v))
        usable = total > 0 and math.isfinite(total)
        for _, scores, _ in self.candidates:
            if key in scores:
                scores[key] = scores[key] / total if usable else math.nan


def _label(batch: TokenBatch, group: int) -> str:
    labels = batch.group_labels or []
    return str(labels[group]) if group < len(labels) else str(group)


def _summary(candidates: list[_Candidate]) -> dict[str, float | None]:
    """The step's plain facts: mean length, mean reward, share correct."""
    rewards = [c[2]["reward"] for c in candidates if c[2]["reward"] is not None]
    correct = [c[2]["correct"] for c in candidates if c[2]["correct"] is not None]
    lengths = [c[2]["length"] for c in candidates]
    return {
        "mean_length": sum(lengths) / len(lengths) if lengths else None,
        "mean_reward": sum(rewards) / len(rewards) if rewards else None,
        "correct_share": sum(correct) / len(correct) if correct else None,
    }


def _rounded(scores: dict[str, float]) -> dict[str, float]:
    """The finite scores at 6 significant digits (the page shows 4)."""
    return {k: float(f"{v:.6g}") for k, v in scores.items() if math.isfinite(v)}


def _assumed_limit(batch: TokenBatch) -> int:
    """The length limit of a file no limit was given for: its padded width, or where its
    rows hold the prompt too (the width is prompt and response) its longest response, so
    that the responses cut at the trainer's limit, if any reached it, are the
    length-limited ones (the vitals call that limit unknown and say so)."""
    from ratioscope.sections.vitals import prompt_in_rows

    if prompt_in_rows(batch.profile) and batch.num_sequences:
        return int(batch.lengths.max())
    return batch.max_length
