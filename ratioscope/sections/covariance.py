"""The ``covariance`` section: CW-GRPO token covariance and Gaussian-kernel weights
(docs/metrics-objectives.md).

Per training batch the exact :class:`~ratioscope.functional.covariance.KernelPasses`
gives the token covariance ``c``, the kernel weight ``w`` and its normalised form
``w~``, in passes over the batch's chunks (means, sigma and sum w per scope are
batch-wide sums; the values are those of
:func:`~ratioscope.functional.covariance.covariance_weights` on the whole batch, bit for
bit), so that memory holds one chunk however large the batch. A batch is a file that
holds whole groups, or the files of a step linked by groups they split, joined by id
(:mod:`ratioscope.sections.scope_join`: the file's own result is then replaced by passes over
those files, on the rows of whole groups). What is kept across batches
is mergeable: exact counts and sums (advantage mass, tokens below a weight, Clip-Cov and
KL-Cov counts, linear weight-histogram counts) and fixed log-magnitude histograms with
per-bin sums (:mod:`ratioscope.functional.histogram`), from which the Table 1
percentiles, the Fig. 3 cumulative share and the quantiles are read. Those histogram
readings are within 10^(1/200) - 1 (about 1.16 %) relative of the exact values over all
tokens whenever the magnitudes lie in [1e-9, 1e4); the weights ``w`` and ``w~``, which
live near 1, are binned in ``log w``, so that their quantiles keep 1.16 % of ``|log w|``
(about 1.16 % of the distance from 1), each distribution stating its
``quantile_bound``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor

from ratioscope.data.batch import TokenBatch
from ratioscope.functional import covariance_device
from ratioscope.functional import histogram as bins
from ratioscope.functional.covariance import (
    CLIP_COV_BOUNDS,
    CLIP_COV_RATIO,
    KERNEL_PASSES,
    KL_COV_RATIO,
    PERCENTILE_FRACTIONS,
    KernelPasses,
    clip_cov_count,
    clip_cov_touched,
    covariance_percentiles_from_bins,
    cumulative_covariance_share_from_bins,
    kl_cov_count,
)
from ratioscope.functional.covariance_device import DeviceKernelPasses
from ratioscope.functional.covariance_fused import FusedKernelPasses, usable
from ratioscope.functional.surrogate import ppo_clip_mask, sequence_means
from ratioscope.sections.base import Accumulator, required
from ratioscope.sections.context import Context
from ratioscope.sections.distribution import Distribution, coordinate_codec, distribution_of
from ratioscope.sections.state import mergeable
from ratioscope.sections.summaries import Counter, Histogram, LogHistogram, Moments

#: raw kernel weights below these are counted (docs/metrics-objectives.md)
WEIGHT_THRESHOLDS: tuple[float, ...] = (0.5, 0.1)
#: linear bins of the raw kernel weight on [0, 1] (exact counts, for the plot)
WEIGHT_BINS = 50
#: fractions of tokens whose share of sum |c| the terminal table shows (Fig. 3)
SHARE_FRACTIONS: tuple[float, ...] = (1e-4, 1e-3, 1e-2, 0.1, 0.2, 0.5)
#: the Fig. 3 curve: ten points a decade from 1e-5 to 1, plus the table's fractions
CURVE_FRACTIONS: tuple[float, ...] = tuple(
    sorted({round(10 ** (k / 10), 12) for k in range(-50, 1)} | {0.2, 0.4, 0.5})
)
SCOPE_NAMES = ("group", "batch")
#: the per-sequence columns of the section (its last pass)
SEQUENCE_COLUMNS = ("cov_c_mean", "cov_weight_mean", "cov_weight_norm_mean")


@dataclass(frozen=True)
class KernelWeights:
    """Raw kernel weights ``w = exp(-c^2 / (2 sigma^2))`` in [0, 1] over valid tokens."""

    distribution: Distribution
    fraction_below: dict[str, float]


@dataclass(frozen=True)
class WeightHistogram:
    """Exact counts of the raw kernel weight in equal bins of [0, 1] (last bin closed)."""

    edges: list[float]
    counts: list[int]


@dataclass(frozen=True)
class AdvantageMassShare:
    """``removed = 1 - sum w|A| / sum|A|``; ``removed_normalised`` uses ``w~`` instead."""

    removed: float
    removed_normalised: float
    total: float


@dataclass(frozen=True)
class PercentileRow:
    """One row of CW-GRPO Table 1 for one sign of ``c``.

    ``threshold``: the c above which the top ``fraction`` (of the tokens of that sign,
    ranked by |c|) lies; ``top_mean``: the mean c of that top fraction; ``band_mean``:
    the mean c of the tokens between the previous fraction and this one.
    """

    fraction: float
    threshold: float
    top_mean: float
    band_mean: float


@dataclass(frozen=True)
class PercentileTable:
    """CW-GRPO Table 1: positive and negative covariance separately (c == 0 in neither)."""

    positive: list[PercentileRow]
    negative: list[PercentileRow]
    positive_count: int
    negative_count: int


@dataclass(frozen=True)
class CumulativeShare:
    """CW-GRPO Fig. 3: share of the total |c| held by the top ``fraction`` of tokens."""

    fraction: list[float]
    share: list[float]


@dataclass(frozen=True)
class Touched:
    """Tokens a covariance-based intervention would act on, summed over batches (files)."""

    count: int
    eligible: int
    total: int
    fraction: float
    ratio: float


@dataclass(frozen=True)
class CovarianceSection:
    """The ``covariance`` report section (keys in docs/metrics-objectives.md)."""

    scope: str
    scope_files: dict[str, int]
    scopes: int
    tokens: int
    c: Distribution
    weights: KernelWeights
    normalised_weights: Distribution
    weight_histogram: WeightHistogram
    advantage_mass: AdvantageMassShare
    percentiles: PercentileTable
    cumulative_share: dict[str, float]
    cumulative_curve: CumulativeShare
    clip_cov: Touched
    kl_cov: Touched
    histogram_relative_error: float


@dataclass
class _FileKernel:
    """One file's passes: the kernel over its scopes, c over the whole batch for
    Clip-Cov (the kernel itself when its scope is the batch), and Clip-Cov's counts;
    or, where the compiled passes (numba on the CPU, Triton on a GPU) can run
    (``fused``), all of it in those."""

    scope: str
    kernel: KernelPasses = field(default_factory=KernelPasses)
    batch: KernelPasses | None = None
    eligible: int = 0
    tokens: int = 0
    fused: FusedKernelPasses | DeviceKernelPasses | None = None
    #: whether the first chunk decided the path (the compiled ones need float values)
    decided: bool = False


class CovarianceAccumulator(Accumulator):
    """CW-GRPO kernel statistics, one file (training batch) at a time, in passes over its
    chunks."""

    name = "covariance"
    per_file = True
    passes = KERNEL_PASSES
    centres_on_groups = True
    requires = ("log_probs", "advantages")
    #: Clip-Cov's PPO clip mask needs the log-ratio; the rest the kernel's inputs
    pass_inputs = ("log_probs", "advantages", "group", "log_ratio")

    c = mergeable(Histogram.with_sums, "merge")
    #: w and w~ live near 1: their quantiles are read in log w (reports written before
    #: hold value histograms under "weights" / "normalised", and still load)
    weights = mergeable(LogHistogram, "merge", codec=coordinate_codec("weights", "log_weights"))
    normalised = mergeable(
        LogHistogram, "merge", codec=coordinate_codec("normalised", "log_normalised")
    )
    below = mergeable(lambda: torch.zeros(len(WEIGHT_THRESHOLDS), dtype=torch.long), "sum")
    weight_counts = mergeable(lambda: torch.zeros(WEIGHT_BINS, dtype=torch.long), "sum")
    #: sum|A|, sum w|A|, sum w~|A|
    mass = mergeable(lambda: torch.zeros(3, dtype=torch.float64), "sum")
    scope_files = mergeable(Counter, "merge")  # index into SCOPE_NAMES -> files
    scopes = mergeable(int, "sum")
    clip_cov = mergeable(lambda: torch.zeros(3, dtype=torch.long), "sum")  # count, eligible, total
    kl_cov = mergeable(lambda: torch.zeros(2, dtype=torch.long), "sum")  # count, total
    #: groups completed from the next step, and left out short of the trainer's group
    #: size (size -> groups), by the step join of the group scopes (ratioscope.sections.scope_join)
    groups_completed = mergeable(int, "sum", optional=True)
    groups_incomplete: dict[str, int] = mergeable(dict, "sum", optional=True)

    _file: _FileKernel | None = None

    # ------------------------------------------------------------------ feeding
    def grouped(self) -> bool:
        """Whether the files fed so far were centred on their groups (not the batch)."""
        return self.scope_files.counts.get(SCOPE_NAMES.index("group"), 0) > 0

    def joined_files(self, files: int) -> None:
        """Passes made over the rows of ``files`` new files joined (one batch counted
        as those files; 0 when each was counted with an earlier batch)."""
        self.fed = files
        self.scope_files.counts = {SCOPE_NAMES.index("group"): files} if files else {}

    def record_join(self, counts: Any) -> None:
        self.groups_completed += counts.completed
        for size, n in counts.incomplete_sizes.items():
            self.groups_incomplete[str(size)] = self.groups_incomplete.get(str(size), 0) + n

    def scope_of(self, batch: TokenBatch) -> str:
        """The scope of the means and sigma for this file (``params.cov_scope``)."""
        if self.params.cov_scope == "auto":
            return "group" if batch.group is not None else "batch"
        return self.params.cov_scope

    def missing(self, batch: TokenBatch) -> list[str]:
        names = super().missing(batch)
        if self.params.cov_scope == "group" and batch.group is None:
            names.append("group")
        return names

    def begin_file(self, batch: TokenBatch) -> bool:
        accepted = super().begin_file(batch)
        if accepted:
            self._start(batch)
        return accepted

    def _start(self, batch: TokenBatch) -> None:
        scope = self.scope_of(batch)
        self._file = _FileKernel(scope, batch=KernelPasses() if scope == "group" else None)

    def begin_passes(self, in_memory: bool) -> None:
        file = self._file
        if in_memory and file is not None:
            # the kernels keep each chunk's tokens and c instead of gathering them again
            file.kernel.keep = True
            if file.batch is not None:
                file.batch.keep = True

    def update(self, ctx: Context) -> dict[str, Tensor]:
        """The whole file at once: every pass over this one context."""
        self._start(ctx.batch)
        self.begin_passes(True)
        columns: dict[str, Tensor] = {}
        for index in range(self.passes):
            columns = self.update_pass(index, ctx)
            self.end_pass(index)
        return columns

    def update_pass(self, index: int, ctx: Context) -> dict[str, Tensor]:
        file = self._file
        assert file is not None, "update_pass of a file not given to begin_file"
        batch, mask = ctx.batch, ctx.mask
        log_probs = required(batch, "log_probs")
        advantages = required(batch, "advantages")
        group = required(batch, "group") if file.scope == "group" else None
        if not file.decided:
            file.decided = True
            settings = (self.params.clip, CLIP_COV_BOUNDS, WEIGHT_THRESHOLDS, WEIGHT_BINS)
            if usable(log_probs, advantages, ctx.z):
                file.fused = FusedKernelPasses(*settings)
            elif covariance_device.usable(log_probs, advantages, ctx.z, mask=mask):
                file.fused = DeviceKernelPasses(*settings, keep=file.kernel.keep)
        if file.fused is not None:
            return self._fused_pass(file.fused, index, ctx, log_probs, advantages, group)
        inputs = (log_probs, advantages, mask)
        if index < KERNEL_PASSES - 1:
            c = file.kernel.add(index, *inputs, group)
            if index == 0:
                file.tokens += int(mask.sum())
                if file.batch is not None:
                    file.batch.add(0, *inputs, None)
            elif index == 1:
                assert c is not None
                if file.batch is not None:  # c over the batch, not the groups
                    c = file.batch.covariance(*inputs, None)
                self._count_clip_cov(file, ctx, advantages, c)
            return {}
        c, w, w_norm = file.kernel.weights(*inputs, group)
        self.c.add(c[mask])
        valid_w = w[mask]
        self.weights.add(valid_w)
        self.normalised.add(w_norm[mask])
        for position, threshold in enumerate(WEIGHT_THRESHOLDS):
            self.below[position] += int((valid_w < threshold).sum())
        counts = torch.histc(valid_w.double().cpu(), bins=WEIGHT_BINS, min=0.0, max=1.0)
        self.weight_counts += counts.long()
        magnitude = advantages[mask].double().abs()
        self.mass += torch.stack(
            [
                magnitude.sum(),
                (valid_w.double() * magnitude).sum(),
                (w_norm[mask].double() * magnitude).sum(),
            ]
        ).cpu()
        return {
            "cov_c_mean": sequence_means(c.double(), mask),
            "cov_weight_mean": sequence_means(w.double(), mask),
            "cov_weight_norm_mean": sequence_means(w_norm.double(), mask),
        }

    def _fused_pass(
        self,
        fused: FusedKernelPasses | DeviceKernelPasses,
        index: int,
        ctx: Context,
        log_probs: Tensor,
        advantages: Tensor,
        group: Tensor | None,
    ) -> dict[str, Tensor]:
        """A pass of the compiled path; its totals reach the section in end_pass."""
        row_sums = fused.add(index, log_probs, advantages, ctx.mask, group, ctx.z)
        if row_sums is None:
            return {}
        means = row_sums / ctx.lengths[:, None]  # 0 / 0: NaN for empty rows
        return {
            "cov_c_mean": means[:, 0],
            "cov_weight_mean": means[:, 1],
            "cov_weight_norm_mean": means[:, 2],
        }

    def _fold(self, fused: FusedKernelPasses | DeviceKernelPasses) -> None:
        """A file's compiled totals into the section's mergeable state."""
        totals, tokens = fused.totals, fused.tokens
        self.c.counts += torch.from_numpy(totals.c_counts)
        assert self.c.sums is not None
        self.c.sums += torch.from_numpy(totals.c_sums)
        for q, histogram, counts in (
            (0, self.c, None),
            (1, self.weights, totals.w_counts),
            (2, self.normalised, totals.normalised_counts),
        ):
            if counts is not None:
                histogram.counts += torch.from_numpy(counts)
            histogram.moments.merge(Moments(*totals.moment(q, tokens)))
        self.below += torch.from_numpy(totals.below)
        self.weight_counts += torch.from_numpy(totals.weight_counts)
        self.mass += torch.from_numpy(totals.mass)

    def _count_clip_cov(
        self, file: _FileKernel, ctx: Context, advantages: Tensor, batch_c: Tensor
    ) -> None:
        """Clip-Cov's eligible tokens of a chunk; it computes c over the whole batch (this
        file, ``batch_c``: [B, T]), known once pass 0 went through it."""
        mask = ctx.mask
        # Clip-Cov's reference implementation never picks tokens PPO clipping already zeroed
        clipped = ppo_clip_mask(ctx.z, advantages, mask, self.params.clip)
        touched = clip_cov_touched(batch_c, mask, CLIP_COV_RATIO, CLIP_COV_BOUNDS, clipped)
        file.eligible += touched.eligible

    def end_pass(self, index: int) -> None:
        file = self._file
        if index < KERNEL_PASSES - 1 or file is None:
            return
        self.scope_files.add_tensor(torch.tensor([SCOPE_NAMES.index(file.scope)]))
        if file.fused is not None:
            self._fold(file.fused)
            self.scopes += len(file.fused.scopes)
            eligible, total = file.fused.eligible, file.fused.tokens
        else:
            self.scopes += len(file.kernel.scopes)
            eligible, total = file.eligible, file.tokens
        count = clip_cov_count(eligible, total, CLIP_COV_RATIO)
        self.clip_cov += torch.tensor([count, eligible, total])
        self.kl_cov += torch.tensor([kl_cov_count(total, KL_COV_RATIO), total])
        self._file = None

    # ------------------------------------------------------------------- result
    def result(self) -> CovarianceSection | None:
        return self._section(brief=False)

    def brief_result(self) -> CovarianceSection | None:
        """The section without the Table 1 percentiles and the Fig. 3 curve (empty),
        which no finding reads and which cost most of the section's reading."""
        return self._section(brief=True)

    def _section(self, brief: bool) -> CovarianceSection | None:
        tokens = self.c.count
        if tokens == 0:
            return None
        files = {SCOPE_NAMES[k]: v for k, v in sorted(self.scope_files.counts.items())}
        scope = next(iter(files)) if len(files) == 1 else "mixed"
        total, kept, kept_normalised = self.mass.tolist()
        quantiles = self.params.quantiles
        # the table's fractions and the curve's read from one ranking of the bins
        curve_fractions = () if brief else CURVE_FRACTIONS
        shares = cumulative_share(self.c, SHARE_FRACTIONS + curve_fractions)
        table_shares, curve = shares[: len(SHARE_FRACTIONS)], shares[len(SHARE_FRACTIONS) :]
        kl_count, kl_total = self.kl_cov.tolist()
        return CovarianceSection(
            scope=scope,
            scope_files=files,
            scopes=self.scopes,
            tokens=tokens,
            c=distribution_of(self.c, quantiles),
            weights=KernelWeights(
                distribution=distribution_of(self.weights, quantiles),
                fraction_below={
                    f"{t:g}": int(n) / tokens
                    for t, n in zip(WEIGHT_THRESHOLDS, self.below.tolist(), strict=True)
                },
            ),
            normalised_weights=distribution_of(self.normalised, quantiles),
            weight_histogram=WeightHistogram(
                edges=[i / WEIGHT_BINS for i in range(WEIGHT_BINS + 1)],
                counts=self.weight_counts.tolist(),
            ),
            advantage_mass=AdvantageMassShare(
                removed=1.0 - kept / total if total > 0 else math.nan,
                removed_normalised=1.0 - kept_normalised / total if total > 0 else math.nan,
                total=total,
            ),
            percentiles=(
                PercentileTable([], [], 0, 0)
                if brief
                else percentile_table(self.c, PERCENTILE_FRACTIONS)
            ),
            cumulative_share={
                f"{x:g}": share for x, share in zip(SHARE_FRACTIONS, table_shares, strict=True)
            },
            cumulative_curve=CumulativeShare(fraction=list(curve_fractions), share=curve),
            clip_cov=_touched_result(self.clip_cov.tolist(), CLIP_COV_RATIO),
            kl_cov=_touched_result([kl_count, kl_total, kl_total], KL_COV_RATIO),
            histogram_relative_error=bins.RELATIVE_ERROR,
        )

    def warnings(self) -> list[str]:
        from ratioscope.sections.group_join import join_notes

        incomplete = sum(self.groups_incomplete.values())
        notes = join_notes(self.name, 0, self.groups_completed, incomplete, self.groups_incomplete)
        return self._input_warnings() + notes

    def _input_warnings(self) -> list[str]:
        if not self.skipped:
            return []
        needs = "'log_probs' and 'advantages'"
        if self.params.cov_scope == "group":
            needs += ", and 'group' for cov_scope='group'"
        where = self._where()
        if self.fed == 0:
            return [f"covariance: not computed; CW-GRPO needs {needs}, missing in {where}"]
        return [f"covariance: computed without {where}, which lack {needs}"]


def _touched_result(values: list[int], ratio: float) -> Touched:
    count, eligible, total = values
    return Touched(count, eligible, total, count / total if total else math.nan, ratio)


# ------------------------------------------------------------- histogram readings
def _bins(histogram: Histogram) -> tuple[Tensor, Tensor]:
    sums = (
        histogram.sums
        if histogram.sums is not None
        else torch.zeros(bins.NUM_BINS, dtype=torch.float64)
    )
    return histogram.counts, sums


def percentile_table(histogram: Histogram, fractions: Sequence[float]) -> PercentileTable:
    """CW-GRPO Table 1 in the report's layout, read from a signed histogram of c with
    per-bin sums by :func:`~ratioscope.functional.covariance.covariance_percentiles_from_bins`.
    """
    moments = histogram.moments
    table = covariance_percentiles_from_bins(
        *_bins(histogram), moments.minimum, moments.maximum, fractions
    )

    def rows(*columns: tuple[float, ...]) -> list[PercentileRow]:
        return [PercentileRow(*row) for row in zip(table.fractions, *columns, strict=True)]

    return PercentileTable(
        positive=rows(table.positive_threshold, table.positive_mean, table.positive_band_mean),
        negative=rows(table.negative_threshold, table.negative_mean, table.negative_band_mean),
        positive_count=table.positive_count,
        negative_count=table.negative_count,
    )


def cumulative_share(histogram: Histogram, fractions: Sequence[float]) -> list[float]:
    """CW-GRPO Fig. 3 read from a signed histogram of c with per-bin sums by
    :func:`~ratioscope.functional.covariance.cumulative_covariance_share_from_bins`."""
    return list(cumulative_covariance_share_from_bins(*_bins(histogram), fractions))
