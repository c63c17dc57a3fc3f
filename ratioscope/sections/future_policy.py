"""The ``future_policy`` section: FPA's extrapolated policy and its sequence weights
(docs/metrics-objectives.md).

For every lambda of the sweep (plus ``fpa_lambda`` and 0, the current policy) the
sequence weight ``pi_hat^(1/|y|) = exp(mean_t log pi_hat_t)`` of every sequence, its
ratio to the current policy's weight, and how many weights fall below
``fpa_threshold``, split by correctness; and ``log pi_theta - log pi_ref`` per sequence
by correctness (FPA Fig. 2-3).

``method: "exact"`` when the dump has ``logits``, ``ref_logits`` and ``token_ids``:
``log pi_hat = log_softmax((1 + lam) h_theta - lam h_ref)[y_t]``, the current and the
reference log-probs read from the same logits. The logits are read one slice of a row
at a time (about 16M logits), on ``device``, and the pages of memory-mapped logits
(safetensors) are handed back to the kernel once read, so resident memory stays bounded
whatever the size of the dump. Otherwise ``method: "approximation"``: the unnormalised
``(1 + lam) log pi_theta - lam log pi_ref`` from the dumped log-probs, an upper bound
on the exact value (by ``log Z >= 0``), labelled as such with a warning.

Rows are independent, so this section is fed chunk by chunk; everything it keeps is
exact counts and moments, except the quantiles (fixed histograms, about 1.16 %).
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Any, cast

import torch
from torch import Tensor

from ratioscope.data.batch import TokenBatch
from ratioscope.data.params import AnalysisParams
from ratioscope.errors import InputError
from ratioscope.functional._paging import MappedPages
from ratioscope.functional.fpa import (
    ApproximateSequenceTerms,
    BelowThreshold,
    ByCorrectness,
    approximate_sequence_terms,
    future_log_probs_sweep,
    future_to_current_ratio,
    policy_log_probs_from_logits,
    sequence_log_ratio,
    sequence_weights,
)
from ratioscope.sections.base import Accumulator, listed, required
from ratioscope.sections.context import Context, HostReads
from ratioscope.sections.distribution import Distribution, coordinate_codec, distribution_of
from ratioscope.sections.state import Codec, Record, mergeable
from ratioscope.sections.summaries import Counter, Histogram, LogHistogram, add_cells

EXACT_INPUTS = ("logits", "ref_logits", "token_ids")
APPROXIMATE_INPUTS = ("log_probs", "ref_log_probs")
METHODS = ("exact", "approximation")
CLASSES = ("all", "correct", "incorrect")
#: logits of one array read per call (16M: 32 MB of bf16), then their pages are released
SLICE_ELEMENTS = 1 << 24


@dataclass(frozen=True)
class SweepRow:
    """One lambda of the sweep: mean weights, mean future/current ratio, counts below."""

    lam: float
    weight_mean: ByCorrectness[float | None]
    ratio_mean: ByCorrectness[float | None]
    below_threshold: ByCorrectness[BelowThreshold | None]


@dataclass(frozen=True)
class MethodResult:
    """The FPA statistics of the files of one method, never pooled with the other's."""

    method: str
    files: int
    sequences: int
    current_weight: ByCorrectness[Distribution | None]
    future_weight: ByCorrectness[Distribution | None]
    future_to_current: ByCorrectness[Distribution | None]
    below_threshold: dict[str, ByCorrectness[BelowThreshold | None]]
    log_ratio_ref: dict[str, ByCorrectness[Distribution | None]]
    sweep: list[SweepRow]


@dataclass(frozen=True)
class MethodComparison:
    """Exact and approximate FPA in one run: their central future/current ratio
    ``pi_hat^(1/|y|) / pi^(1/|y|)`` at ``lam`` over all sequences of each method.

    ``opposite_sides``: the two medians lie on opposite sides of 1 (one above, one
    below), so the approximation reads the direction of FPA's change the wrong way. The
    medians are read in log coordinates, whose bins never straddle 1: their side of 1 is
    exact.
    """

    exact_median: float
    approximation_median: float
    exact_mean: float
    approximation_mean: float
    opposite_sides: bool


@dataclass(frozen=True)
class FuturePolicySection:
    """The ``future_policy`` report section (keys in docs/metrics-objectives.md).

    The flat fields hold one method's numbers, named by ``method``: ``exact`` whenever a
    file had logits, else ``approximation``. When a run has both, the approximation's
    numbers are in ``approximation`` (their own files and sequences) and ``comparison``
    sets the two side by side; the methods are never pooled. ``method: "mixed"`` (pooled)
    appears only in reports written before they were kept apart.
    """

    method: str
    method_files: dict[str, int]
    lam: float
    threshold: float
    sequences: int
    current_weight: ByCorrectness[Distribution | None]
    future_weight: ByCorrectness[Distribution | None]
    future_to_current: ByCorrectness[Distribution | None]
    below_threshold: dict[str, ByCorrectness[BelowThreshold | None]]
    log_ratio_ref: dict[str, ByCorrectness[Distribution | None]]
    sweep: list[SweepRow]
    approximation: MethodResult | None = None
    comparison: MethodComparison | None = None


class _ClassHistograms(Record):
    """One histogram per correctness class, plus counts below the threshold."""

    #: log-ratios around 0: value histograms
    histograms: dict[str, Histogram | LogHistogram] = mergeable(
        lambda: {name: Histogram() for name in CLASSES},
        "merge",
        codec=coordinate_codec("histograms", "log_histograms"),
    )
    below = mergeable(lambda: dict.fromkeys(CLASSES, 0), "sum")
    totals = mergeable(lambda: dict.fromkeys(CLASSES, 0), "sum")

    def add(self, values: Tensor, selections: dict[str, Tensor], threshold: float | None) -> None:
        """Add one quantity's values ([B]) to each class's histogram (``selections``: the
        rows of each class) and count those below ``threshold``; the section adds every
        quantity at once (:func:`add_rows`), this is its row-by-row reference in the tests."""
        finite = torch.isfinite(values)
        kept = {name: finite & select for name, select in selections.items()}
        index = self._bins(values, kept)
        # count_below of each class, its finite values (kept) compared once
        below = None if threshold is None else values < threshold
        for name, keep in kept.items():
            if index is None:
                self.histograms[name].add(values[keep])
            else:
                self.histograms[name].add_binned(values[keep], index[keep])
            if below is not None:
                self.below[name] += int((keep & below).sum())
                self.totals[name] += int(keep.sum())

    def _bins(self, values: Tensor, kept: dict[str, Tensor]) -> Tensor | None:
        """[B] the bin of every value some class keeps (the others: the bin of 1, never
        read): the values are binned once for all classes (a bin is a value's own;
        binning the three classes apart cost more than a small step's tokens). None when
        the classes' histograms are not of one kind (a state restored from an older
        report)."""
        kinds = {type(self.histograms[name]) for name in kept}
        if len(kinds) != 1:
            return None
        union = functools.reduce(torch.logical_or, kept.values())
        one = torch.ones((), dtype=values.dtype, device=values.device)
        return self.histograms[next(iter(kept))].bins_of(torch.where(union, values, one))

    def distributions(
        self, quantiles: tuple[float, ...], split: bool
    ) -> ByCorrectness[Distribution | None]:
        def one(name: str) -> Distribution | None:
            if name != "all" and not split:
                return None
            return distribution_of(self.histograms[name], quantiles)

        return ByCorrectness(*(one(name) for name in CLASSES))

    def means(self, split: bool) -> ByCorrectness[float | None]:
        def one(name: str) -> float | None:
            if name != "all" and not split:
                return None
            moments = self.histograms[name].moments
            return moments.mean if moments.count else math.nan

        return ByCorrectness(*(one(name) for name in CLASSES))

    def below_threshold(self, split: bool) -> ByCorrectness[BelowThreshold | None]:
        def one(name: str) -> BelowThreshold | None:
            if name != "all" and not split:
                return None
            return BelowThreshold.of(self.below[name], self.totals[name])

        return ByCorrectness(*(one(name) for name in CLASSES))


class _LogClassHistograms(_ClassHistograms):
    """Sequence weights and future/current ratios live near 1: histograms of their log
    (a state written before holds value histograms, read as such)."""

    histograms: dict[str, Histogram | LogHistogram] = mergeable(
        lambda: {name: LogHistogram() for name in CLASSES},
        "merge",
        codec=coordinate_codec("histograms", "log_histograms"),
    )


def add_rows(
    items: list[_ClassHistograms],
    values: Tensor,
    selections: dict[str, Tensor],
    thresholds: list[float | None],
    host: HostReads | None = None,
) -> None:
    """:meth:`_ClassHistograms.add` of row k of ``values`` ([K, B]) to ``items[k]`` with
    ``thresholds[k]``, every row and class at once (:func:`add_cells`): the same counts,
    the moments within rounding. Now, or when ``host`` runs its folds (a device's)."""
    names = list(selections)
    finite = torch.isfinite(values)
    keep = finite.unsqueeze(1) & torch.stack([selections[name] for name in names]).unsqueeze(0)
    add_cells([[item.histograms[name] for name in names] for item in items], values, keep, host)
    if all(threshold is None for threshold in thresholds):
        return
    limits = [-math.inf if t is None else t for t in thresholds]
    below = values < torch.tensor(limits, dtype=values.dtype, device=values.device).unsqueeze(1)
    tallies = torch.stack([(keep & below.unsqueeze(1)).sum(-1), keep.sum(-1)])

    def fold(tallies: Tensor) -> None:
        counted = tallies.tolist()
        for k, (item, threshold) in enumerate(zip(items, thresholds, strict=True)):
            if threshold is None:
                continue
            for c, name in enumerate(names):
                item.below[name] += counted[0][k][c]
                item.totals[name] += counted[1][k][c]

    (host or HostReads()).later(fold, tallies)


def _per_lambda(state: list[dict[str, Any]]) -> list[_ClassHistograms]:
    return [cast(_ClassHistograms, _LogClassHistograms.from_state(block)) for block in state]


_PER_LAMBDA = Codec(load=_per_lambda)


class _MethodState(Record):
    """Everything FPA keeps for the files of one method (exact or approximation)."""

    #: per lambda (in the accumulator's ``lams``): the sequence weights and their ratio
    #: to the current policy's
    weights: list[_ClassHistograms] = mergeable(list, "merge", codec=_PER_LAMBDA)
    ratios: list[_ClassHistograms] = mergeable(list, "merge", codec=_PER_LAMBDA)
    log_ratio_sequence = mergeable(_ClassHistograms, "merge")
    log_ratio_token = mergeable(_ClassHistograms, "merge")
    split_files = mergeable(int, "sum")  # files with 'correct'

    def __init__(self, lams: int = 0) -> None:
        super().__init__()
        self.weights = [_LogClassHistograms() for _ in range(lams)]
        self.ratios = [_LogClassHistograms() for _ in range(lams)]
        #: restored from a report written before the methods were kept apart (pooled,
        #: value histograms); never merged with a newer state
        self.legacy = False


#: the state keys of reports written before the methods were kept apart
_POOLED_KEYS = ("weights", "ratios", "log_ratio_sequence", "log_ratio_token", "split_files")


def _dump_methods(methods: dict[str, _MethodState]) -> dict[str, Any]:
    if any(state.legacy for state in methods.values()):
        # a pooled report merged with pooled ones is written in the layout it was read in
        (state,) = methods.values()
        return {key: value for key, value in state.state().items() if key in _POOLED_KEYS}
    return {"methods": {name: state.state() for name, state in methods.items()}}


def _load_methods(block: dict[str, Any]) -> dict[str, _MethodState]:
    if "methods" in block:
        return {
            name: cast(_MethodState, _MethodState.from_state(item))
            for name, item in block["methods"].items()
        }
    if "weights" not in block:
        raise KeyError("methods")
    pooled = cast(_MethodState, _MethodState.from_state({k: block[k] for k in _POOLED_KEYS}))
    pooled.legacy = True
    files = {METHODS[int(k)] for k, v in block.get("method_files", {}).items() if v}
    name = next(iter(files)) if len(files) == 1 else "mixed"
    return {name: pooled}


def _merge_methods(
    mine: dict[str, _MethodState], theirs: dict[str, _MethodState]
) -> dict[str, _MethodState]:
    """Method by method; states written before the methods were kept apart pool as they
    did then, and never merge with newer ones."""
    if not theirs:
        return mine
    if not mine:
        return theirs
    legacy = {state.legacy for state in (*mine.values(), *theirs.values())}
    if len(legacy) > 1:
        raise ValueError(
            "one report pools exact and approximate FPA in value-coordinate histograms "
            "(written before ratioscope kept the methods apart) and the other keeps them "
            "apart in log coordinates; re-analyse the older report's inputs"
        )
    if True in legacy:
        (name, pooled), (other_name, other) = next(iter(mine.items())), next(iter(theirs.items()))
        pooled.merge(other)
        return {name if name == other_name else "mixed": pooled}
    merged = dict(mine)
    for name, state in theirs.items():
        if name in merged:
            merged[name].merge(state)
        else:
            merged[name] = state
    return merged


_METHODS_CODEC = Codec(dump=_dump_methods, load=_load_methods, flat=True)


def _exact_terms(
    future: Tensor, current: Tensor, reference: Tensor, mask: Tensor
) -> ApproximateSequenceTerms:
    """The per-sequence quantities of exact future log-probs ([L, B, T]), one lambda at a
    time (the normaliser makes them non-linear in lambda); same fields as the
    approximation's."""
    return ApproximateSequenceTerms(
        weights=torch.stack([sequence_weights(f, mask) for f in future]),
        ratios=torch.stack([future_to_current_ratio(f, current, mask) for f in future]),
        log_ratio=sequence_log_ratio(current, reference, mask),
        log_ratio_per_token=sequence_log_ratio(current, reference, mask, normalise=True),
    )


class FuturePolicyAccumulator(Accumulator):
    """FPA weights for the lambda sweep, chunk by chunk, each method on its own."""

    name = "future_policy"

    #: 0 is the current policy; every lambda of the report is computed in one pass
    lams: tuple[float, ...] = mergeable(tuple, "same")
    #: "exact" / "approximation" -> its state; never pooled
    methods: dict[str, _MethodState] = mergeable(dict, _merge_methods, codec=_METHODS_CODEC)
    method_files = mergeable(Counter, "merge")  # index into METHODS -> files
    approximated: list[str] = mergeable(list, "extend")  # files without the exact inputs, and why
    no_correct: list[str] = mergeable(list, "extend")

    def __init__(self, params: AnalysisParams) -> None:
        super().__init__(params)
        self.lams = tuple(sorted({0.0, float(params.fpa_lambda), *map(float, params.fpa_lambdas)}))

    def method(self, name: str) -> _MethodState:
        """The state of method ``name``, started on first use."""
        if name not in self.methods:
            self.methods[name] = _MethodState(len(self.lams))
        return self.methods[name]

    # ------------------------------------------------------------------ feeding
    def missing(self, batch: TokenBatch) -> list[str]:
        if _exact(batch):
            return []
        return [name for name in APPROXIMATE_INPUTS if not batch.has(name)]

    def begin_file(self, batch: TokenBatch) -> bool:
        if not super().begin_file(batch):
            return False
        exact = _exact(batch)
        self.method_files.add_tensor(torch.tensor([0 if exact else 1]))
        if not exact:
            lacking = ", ".join(n for n in EXACT_INPUTS if not batch.has(n))
            self.approximated.append(f"{batch.source} (no {lacking})")
        if batch.correct is not None:
            self.method(METHODS[0 if exact else 1]).split_files += 1
        else:
            self.no_correct.append(batch.source)
        return True

    def update(self, ctx: Context) -> dict[str, Tensor]:
        batch, mask = ctx.batch, ctx.mask
        if _exact(batch):
            state = self.method("exact")
            future, reference = exact_log_probs(batch, self.lams, mask.device)
            terms = _exact_terms(future, future[self.lams.index(0.0)], reference, mask)
        else:
            state = self.method("approximation")
            # linear in the token log-probs: every lambda from two row sums
            terms = approximate_sequence_terms(
                required(batch, "log_probs"), required(batch, "ref_log_probs"), mask, self.lams
            )

        # a row without valid tokens has no sequence weight or log-ratio: leave it out
        present = ctx.nonempty
        selections = {"all": present}
        if batch.correct is not None:
            correct = batch.correct.to(mask.device)
            selections.update(correct=correct & present, incorrect=~correct & present)

        lams = len(self.lams)
        add_rows(
            [*state.weights, *state.ratios],
            torch.cat([terms.weights, terms.ratios]),
            selections,
            [self.params.fpa_threshold] * lams + [None] * lams,
            ctx.host,
        )
        add_rows(
            [state.log_ratio_sequence, state.log_ratio_token],
            torch.stack([terms.log_ratio, terms.log_ratio_per_token]),
            selections,
            [None, None],
            ctx.host,
        )
        return {
            "fpa_weight_current": terms.weights[self.lams.index(0.0)],
            "fpa_weight_future": terms.weights[self.lams.index(float(self.params.fpa_lambda))],
            "fpa_log_ratio_ref": terms.log_ratio,
        }

    # ------------------------------------------------------------------- result
    def result(self) -> FuturePolicySection | None:
        if self.fed == 0:
            return None
        results = {
            name: self._method_result(name, state)
            for name, state in self.methods.items()
            if state.weights and state.weights[self.lams.index(0.0)].histograms["all"].count
        }
        if not results:
            return None
        primary = next(results[name] for name in (*METHODS, "mixed") if name in results)
        other = results.get("approximation") if primary.method == "exact" else None
        return FuturePolicySection(
            method=primary.method,
            method_files={METHODS[k]: v for k, v in sorted(self.method_files.counts.items())},
            lam=float(self.params.fpa_lambda),
            threshold=float(self.params.fpa_threshold),
            sequences=primary.sequences,
            current_weight=primary.current_weight,
            future_weight=primary.future_weight,
            future_to_current=primary.future_to_current,
            below_threshold=primary.below_threshold,
            log_ratio_ref=primary.log_ratio_ref,
            sweep=primary.sweep,
            approximation=other,
            comparison=None if other is None else compare_methods(primary, other),
        )

    def _method_result(self, name: str, state: _MethodState) -> MethodResult:
        split = state.split_files > 0
        quantiles = self.params.quantiles
        current = state.weights[self.lams.index(0.0)]
        index = self.lams.index(float(self.params.fpa_lambda))
        future, future_ratios = state.weights[index], state.ratios[index]
        files = {METHODS[k]: v for k, v in self.method_files.counts.items()}
        return MethodResult(
            method=name,
            files=files.get(name, sum(files.values())),
            sequences=current.histograms["all"].count,
            current_weight=current.distributions(quantiles, split),
            future_weight=future.distributions(quantiles, split),
            future_to_current=future_ratios.distributions(quantiles, split),
            below_threshold={
                "current": current.below_threshold(split),
                "future": future.below_threshold(split),
            },
            log_ratio_ref={
                "sequence": state.log_ratio_sequence.distributions(quantiles, split),
                "per_token": state.log_ratio_token.distributions(quantiles, split),
            },
            sweep=[self._row(state, float(lam), split) for lam in self.params.fpa_lambdas],
        )

    def _row(self, state: _MethodState, lam: float, split: bool) -> SweepRow:
        index = self.lams.index(lam)
        weights, ratios = state.weights[index], state.ratios[index]
        return SweepRow(
            lam=lam,
            weight_mean=weights.means(split),
            ratio_mean=ratios.means(split),
            below_threshold=weights.below_threshold(split),
        )

    def warnings(self) -> list[str]:
        messages = []
        if self.skipped:
            needs = (
                "'logits', 'ref_logits' and 'token_ids' (exact) or 'log_probs' and "
                "'ref_log_probs' (approximation)"
            )
            where = self._where()
            if self.fed == 0:
                messages.append(
                    f"future_policy: not computed; FPA needs {needs}, missing in {where}"
                )
            else:
                messages.append(f"future_policy: computed without {where}, which lack {needs}")
        if self.approximated and self.fed:
            apart = (
                "reported apart from the exact files ('approximation'), never pooled; "
                if "exact" in self.methods and "approximation" in self.methods
                else ""
            )
            messages.append(
                "future_policy: method 'approximation' for "
                f"{listed(self.approximated)}: {apart}log pi_hat is the unnormalised "
                "(1 + lam) log pi_theta - lam log pi_ref, which over-states the exact value by "
                "log Z >= 0; dump 'logits', 'ref_logits' and 'token_ids' for exact values"
            )
        section = self.result() if "exact" in self.methods else None
        comparison = section.comparison if section is not None else None
        if comparison is not None and comparison.opposite_sides:
            messages.append(
                "future_policy: the approximation's median future/current ratio at lambda = "
                f"{self.params.fpa_lambda:g} ({comparison.approximation_median:.5g}) lies on "
                f"the other side of 1 from the exact one ({comparison.exact_median:.5g}): the "
                "approximation reads the direction of FPA's change the wrong way in this run"
            )
        if self.no_correct and self.fed:
            split_files = sum(state.split_files for state in self.methods.values())
            what = "not split" if split_files == 0 else "split only over the other files"
            messages.append(
                "future_policy.*.correct/incorrect: needs 'correct' (or 'rewards'), missing in "
                f"{listed(self.no_correct)}; {what}"
            )
        return messages


def compare_methods(exact: MethodResult, approximation: MethodResult) -> MethodComparison:
    """The central future/current ratios of the two methods, and whether they straddle 1."""

    def central(result: MethodResult) -> tuple[float, float]:
        ratio = result.future_to_current.all
        if ratio is None:
            return math.nan, math.nan
        return ratio.quantiles.get("0.5", math.nan), ratio.mean

    exact_median, exact_mean = central(exact)
    approx_median, approx_mean = central(approximation)
    opposite = (exact_median - 1.0) * (approx_median - 1.0) < 0
    return MethodComparison(exact_median, approx_median, exact_mean, approx_mean, opposite)


def _exact(batch: TokenBatch) -> bool:
    return all(batch.has(name) for name in EXACT_INPUTS)


# ----------------------------------------------------------------- exact, sliced
def exact_log_probs(
    batch: TokenBatch, lams: tuple[float, ...], device: torch.device
) -> tuple[Tensor, Tensor]:
    """Exact ``log pi_hat_lam(y_t)`` for every lambda and ``log pi_ref(y_t)``, from logits.

    The logits are read in segments of at most about :data:`SLICE_ELEMENTS` values
    (:func:`segments`): every row up to its last valid token, never the padding after the
    last row of a segment; each segment is computed on ``device`` and, for memory-mapped
    logits, its pages are released once read (:class:`~ratioscope.functional._paging.MappedPages`).

    Returns:
        ``(future [L, B, T] float32, reference [B, T] float32)`` on ``device``, 0 at
        masked positions.
    """
    mask = batch.mask
    all_logits, all_ref_logits, token_ids = (required(batch, name) for name in EXACT_INPUTS)
    rows, width = mask.shape
    vocab = int(all_logits.shape[-1])
    _check_token_ids(batch, token_ids, vocab)
    span = max(1, SLICE_ELEMENTS // max(vocab, 1))
    future = torch.zeros((len(lams), rows * width), dtype=torch.float32, device=device)
    reference = torch.zeros(rows * width, dtype=torch.float32, device=device)
    positions = torch.arange(1, width + 1, device=mask.device)
    extents = torch.where(mask, positions, 0).amax(dim=1).tolist()
    # rows can only be joined where one flat view reaches across them
    joinable = all_logits.is_contiguous() and all_ref_logits.is_contiguous()
    ids, valid = token_ids.reshape(-1), mask.reshape(-1)
    pages = MappedPages(all_logits, all_ref_logits)
    for start, stop in segments(extents, width, span, join=joinable):
        logits = _flat_view(all_logits, start, stop, width)
        ref_logits = _flat_view(all_ref_logits, start, stop, width)
        future[:, start:stop] = future_log_probs_sweep(
            logits, ref_logits, ids[start:stop], lams, valid[start:stop], device=device
        )
        reference[start:stop] = policy_log_probs_from_logits(
            ref_logits, ids[start:stop], valid[start:stop], device=device
        )
        pages.release(logits, ref_logits)
    return future.reshape(len(lams), rows, width), reference.reshape(rows, width)


def segments(
    extents: list[int], width: int, span: int, join: bool = True, waste: float = 0.25
) -> list[tuple[int, int]]:
    """Ranges ``[start, stop)`` of flat token positions (row * width + column) to read.

    Together they cover every row up to its last valid token (``extents[row]``); a row
    longer than ``span`` is cut into slices of ``span``; with ``join``, consecutive rows
    share one range (padding between them included) while it stays within ``span``
    tokens and the padding it reads stays within ``waste`` of it, so that short rows
    over a small vocabulary do not cost one call each.

    >>> segments([3, 0, 2, 4], width=4, span=3)
    [(0, 3), (8, 10), (12, 15), (15, 16)]
    >>> segments([4, 3, 4], width=4, span=8)
    [(0, 7), (8, 12)]
    """
    ranges: list[tuple[int, int]] = []
    current: list[int] | None = None  # start, stop, valid-extent tokens inside
    for row, extent in enumerate(int(e) for e in extents):
        if extent == 0:
            continue
        begin = row * width
        if current is not None:
            size = begin + extent - current[0]
            if join and size <= span and size - current[2] - extent <= waste * size:
                current[1], current[2] = begin + extent, current[2] + extent
                continue
            ranges.append((current[0], current[1]))
            current = None
        if extent > span:
            ranges.extend(
                (first, min(first + span, begin + extent))
                for first in range(begin, begin + extent, span)
            )
        else:
            current = [begin, begin + extent, extent]
    if current is not None:
        ranges.append((current[0], current[1]))
    return ranges


def _flat_view(logits: Tensor, start: int, stop: int, width: int) -> Tensor:
    """``[stop - start, V]`` view of the logits at flat token positions ``start:stop``."""
    row, column = divmod(start, width)
    if stop <= (row + 1) * width:
        return logits[row, column : column + stop - start]
    return logits.reshape(-1, logits.shape[-1])[start:stop]  # contiguous: a view


def _check_token_ids(batch: TokenBatch, token_ids: Tensor, vocab: int) -> None:
    outside = batch.mask & ((token_ids < 0) | (token_ids >= vocab))
    if bool(outside.any()):
        row, column = (int(i) for i in outside.nonzero()[0])
        raise InputError(
            batch.source,
            f"'{batch.display_name('token_ids')}' has {int(outside.sum())} id(s) outside the "
            f"vocabulary [0, {vocab}) of '{batch.display_name('logits')}' on valid tokens, the "
            f"first at (row, column) = ({batch.row_offset + row}, {column})",
        )
