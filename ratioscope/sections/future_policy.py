"""The ``future_policy`` section: FPA's extrapolated policy and its sequence weights (DESIGN 3.5).

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

import math
from dataclasses import dataclass

import torch
from torch import Tensor

from ratioscope.batch import TokenBatch
from ratioscope.errors import InputError
from ratioscope.functional.fpa import (
    BelowThreshold,
    ByCorrectness,
    count_below,
    future_log_probs_approx,
    future_log_probs_sweep,
    future_to_current_ratio,
    policy_log_probs_from_logits,
    sequence_log_ratio,
    sequence_weights,
)
from ratioscope.io.paging import MappedPages
from ratioscope.params import AnalysisParams
from ratioscope.sections.base import Accumulator, listed, required
from ratioscope.sections.context import Context
from ratioscope.sections.ratios import Distribution, distribution_of
from ratioscope.sections.state import Record, mergeable
from ratioscope.stats import Counter, Histogram

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
class FuturePolicySection:
    """The ``future_policy`` report section (keys in docs/metrics-objectives.md)."""

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


class _ClassHistograms(Record):
    """One histogram per correctness class, plus counts below the threshold."""

    histograms = mergeable(lambda: {name: Histogram() for name in CLASSES}, "merge")
    below = mergeable(lambda: dict.fromkeys(CLASSES, 0), "sum")
    totals = mergeable(lambda: dict.fromkeys(CLASSES, 0), "sum")

    def add(self, values: Tensor, selections: dict[str, Tensor], threshold: float | None) -> None:
        finite = torch.isfinite(values)
        for name, select in selections.items():
            self.histograms[name].add(values[finite & select])
            if threshold is not None:
                below = count_below(values, threshold, select)
                self.below[name] += below.count
                self.totals[name] += below.total

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


class FuturePolicyAccumulator(Accumulator):
    """FPA weights for the lambda sweep, chunk by chunk."""

    name = "future_policy"

    #: 0 is the current policy; every lambda of the report is computed in one pass
    lams: tuple[float, ...] = mergeable(tuple, "same")
    #: per lambda (in the order of ``lams``): the sequence weights and their ratio to
    #: the current policy's
    weights: list[_ClassHistograms] = mergeable(list, "merge")
    ratios: list[_ClassHistograms] = mergeable(list, "merge")
    log_ratio_sequence = mergeable(_ClassHistograms, "merge")
    log_ratio_token = mergeable(_ClassHistograms, "merge")
    method_files = mergeable(Counter, "merge")  # index into METHODS -> files
    approximated: list[str] = mergeable(list, "extend")  # files without the exact inputs, and why
    no_correct: list[str] = mergeable(list, "extend")
    split_files = mergeable(int, "sum")

    def __init__(self, params: AnalysisParams) -> None:
        super().__init__(params)
        self.lams = tuple(sorted({0.0, float(params.fpa_lambda), *map(float, params.fpa_lambdas)}))
        self.weights = [_ClassHistograms() for _ in self.lams]
        self.ratios = [_ClassHistograms() for _ in self.lams]

    def at(self, lam: float) -> tuple[_ClassHistograms, _ClassHistograms]:
        """The weights and the ratios of ``lam``."""
        index = self.lams.index(lam)
        return self.weights[index], self.ratios[index]

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
            self.split_files += 1
        else:
            self.no_correct.append(batch.source)
        return True

    def update(self, ctx: Context) -> dict[str, Tensor]:
        batch, mask = ctx.batch, ctx.mask
        if _exact(batch):
            future, reference = exact_log_probs(batch, self.lams, mask.device)
        else:
            log_probs = required(batch, "log_probs")
            reference = required(batch, "ref_log_probs")
            future = torch.stack(
                [future_log_probs_approx(log_probs, reference, lam) for lam in self.lams]
            )
        current = future[self.lams.index(0.0)]

        # a row without valid tokens has no sequence weight or log-ratio: leave it out
        present = ctx.nonempty
        selections = {"all": present}
        if batch.correct is not None:
            correct = batch.correct.to(mask.device)
            selections.update(correct=correct & present, incorrect=~correct & present)

        threshold = self.params.fpa_threshold
        columns: dict[str, Tensor] = {}
        for index, lam in enumerate(self.lams):
            weights = sequence_weights(future[index], mask)
            self.weights[index].add(weights, selections, threshold)
            self.ratios[index].add(
                future_to_current_ratio(future[index], current, mask), selections, None
            )
            if lam == 0.0:
                columns["fpa_weight_current"] = weights
            if lam == self.params.fpa_lambda:
                columns["fpa_weight_future"] = weights
        log_ratio = sequence_log_ratio(current, reference, mask)
        self.log_ratio_sequence.add(log_ratio, selections, None)
        per_token = sequence_log_ratio(current, reference, mask, normalise=True)
        self.log_ratio_token.add(per_token, selections, None)
        columns["fpa_log_ratio_ref"] = log_ratio
        return columns

    # ------------------------------------------------------------------- result
    def result(self) -> FuturePolicySection | None:
        current = self.at(0.0)[0]
        sequences = current.histograms["all"].count
        if self.fed == 0 or sequences == 0:
            return None
        files = {METHODS[k]: v for k, v in sorted(self.method_files.counts.items())}
        method = next(iter(files)) if len(files) == 1 else "mixed"
        split = self.split_files > 0
        quantiles = self.params.quantiles
        lam = float(self.params.fpa_lambda)
        future, future_ratios = self.at(lam)
        return FuturePolicySection(
            method=method,
            method_files=files,
            lam=lam,
            threshold=float(self.params.fpa_threshold),
            sequences=sequences,
            current_weight=current.distributions(quantiles, split),
            future_weight=future.distributions(quantiles, split),
            future_to_current=future_ratios.distributions(quantiles, split),
            below_threshold={
                "current": current.below_threshold(split),
                "future": future.below_threshold(split),
            },
            log_ratio_ref={
                "sequence": self.log_ratio_sequence.distributions(quantiles, split),
                "per_token": self.log_ratio_token.distributions(quantiles, split),
            },
            sweep=[self._row(float(sweep_lam), split) for sweep_lam in self.params.fpa_lambdas],
        )

    def _row(self, lam: float, split: bool) -> SweepRow:
        weights, ratios = self.at(lam)
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
            messages.append(
                "future_policy: method 'approximation' for "
                f"{listed(self.approximated)}: log pi_hat is the unnormalised "
                "(1 + lam) log pi_theta - lam log pi_ref, which over-states the exact value by "
                "log Z >= 0; dump 'logits', 'ref_logits' and 'token_ids' for exact values"
            )
        if self.no_correct and self.fed:
            what = "not split" if self.split_files == 0 else "split only over the other files"
            messages.append(
                "future_policy.*.correct/incorrect: needs 'correct' (or 'rewards'), missing in "
                f"{listed(self.no_correct)}; {what}"
            )
        return messages


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
    logits, its pages are released once read (:class:`~ratioscope.io.paging.MappedPages`).

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
