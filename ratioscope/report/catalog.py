"""Every rule-addressable key of an analyze report, with its meaning, unit and section.

A key is a dotted path as ``ratioscope check`` rules address it (docs/ci.md): ``*``
stands for any key of a mapping (a ratio variant, a state, a quantile), ``N`` for a list
position (``0``, ``1``, ..., or ``-1`` for the last). Only numbers are rule-addressable,
so strings, booleans and the mergeable ``state`` block are left out.

The layout comes from the typed report (:class:`ratioscope.report.model.Report` and the
section dataclasses, walked through their type hints as
:func:`ratioscope.io.documents.from_jsonable` reads them); meanings and units come from
:data:`CATALOG`, one table taken from the key tables of docs/metrics-ratios.md,
docs/metrics-objectives.md and docs/framework-metrics.md. ``tests/test_metrics.py``
fails when a report key has no entry or an entry matches no key, so the table cannot
fall behind the report.

>>> [m.key for m in metrics(search="switch frequency")]
['ratios.*.switch_frequency']
"""

from __future__ import annotations

import dataclasses
import types
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar, Union, get_args, get_origin, get_type_hints

from ratioscope.errors import ParameterError, ReportError

#: stands for any key of a mapping in a key pattern
ANY = "*"
#: stands for a list position in a key pattern (0, 1, ..., -1 for the last)
INDEX = "N"
#: report keys that are not rule-addressable: mergeable sums, text, bookkeeping
_SKIPPED = ("schema_version", "state", "warnings", "tool", "sequences")


@dataclass(frozen=True)
class Entry:
    """One row of the catalog: a key pattern, its unit and what it means."""

    pattern: str
    unit: str
    meaning: str

    @property
    def section(self) -> str:
        return self.pattern.split(".", 1)[0]


@dataclass(frozen=True)
class Metric:
    """A rule-addressable key with its catalog entry and, read from a report, its value.

    ``value`` is a number, ``None`` (null in the report: a metric that could not be
    computed, which fails a rule as ERROR), or for a key with an ``N`` the list of the
    values by position; ``has_value`` is False when no report was read.
    """

    key: str
    section: str
    unit: str
    meaning: str
    value: Any = None
    has_value: bool = False

    def to_dict(self) -> dict[str, Any]:
        row = {"key": self.key, "section": self.section, "unit": self.unit}
        row["meaning"] = self.meaning
        if self.has_value:
            row["value"] = self.value
        return row


# Shared wording of the blocks that recur under many keys.
_Q = "the q-quantile (key q, --quantiles), read from the shared fixed histogram"
_QB = "bound of every quantile of this distribution: within max(relative x |u|, absolute)"


def _distribution(prefix: str, of: str, unit: str) -> list[Entry]:
    """The entries of a Distribution block (count, moments, quantiles and their bound)."""
    return [
        Entry(f"{prefix}.count", "count", f"number of values of {of}"),
        Entry(f"{prefix}.mean", unit, f"mean of {of} (exact)"),
        Entry(f"{prefix}.std", unit, f"standard deviation (ddof 0) of {of} (exact)"),
        Entry(f"{prefix}.min", unit, f"minimum of {of} (exact)"),
        Entry(f"{prefix}.max", unit, f"maximum of {of} (exact)"),
        Entry(f"{prefix}.quantiles.*", unit, f"{_Q}, of {of}"),
        Entry(f"{prefix}.quantile_bound.relative", "fraction", f"relative {_QB} (0.0116)"),
        Entry(f"{prefix}.quantile_bound.absolute", "same as value", f"absolute {_QB} (1e-9)"),
    ]


_STATES = "per state * = up, down, on"
_CLASS = "per class * = all, correct, incorrect"


def _future_policy(prefix: str) -> list[Entry]:
    """FPA's per-method block (docs/metrics-objectives.md, FPA key table)."""
    lam = "at lam (future_policy.lam)"
    rows = [
        Entry(f"{prefix}.sequences", "count", "sequences with at least one valid token"),
        *_distribution(
            f"{prefix}.current_weight.*",
            f"the current sequence weight pi^(1/|y|), {_CLASS}",
            "weight",
        ),
        *_distribution(
            f"{prefix}.future_weight.*",
            f"the future sequence weight pi_hat^(1/|y|) {lam}, {_CLASS}",
            "weight",
        ),
        *_distribution(
            f"{prefix}.future_to_current.*",
            f"the future/current weight ratio {lam} (FPA Fig. 2 right), {_CLASS}",
            "ratio",
        ),
        Entry(
            f"{prefix}.below_threshold.*.*.count",
            "count",
            "sequences with weight < threshold (FPA Fig. 3 right); "
            "first * = current or future, second * = all, correct, incorrect",
        ),
        Entry(
            f"{prefix}.below_threshold.*.*.total",
            "count",
            "sequences with a finite weight that below_threshold counts among",
        ),
        Entry(
            f"{prefix}.below_threshold.*.*.fraction",
            "fraction",
            "share of sequences with weight < threshold (count / total)",
        ),
        *_distribution(
            f"{prefix}.log_ratio_ref.*.*",
            "log pi(y|x) - log pi_ref(y|x), first * = sequence (sum over tokens) or "
            "per_token (mean per token), second * = all, correct, incorrect",
            "nats",
        ),
        Entry(
            f"{prefix}.sweep.N.lam", "lambda", "the lambda of this sweep row (--fpa-lambda-sweep)"
        ),
        Entry(
            f"{prefix}.sweep.N.weight_mean.*",
            "weight",
            f"mean future sequence weight at the row's lambda, {_CLASS}",
        ),
        Entry(
            f"{prefix}.sweep.N.ratio_mean.*",
            "ratio",
            f"mean future/current weight ratio at the row's lambda, {_CLASS}",
        ),
        Entry(
            f"{prefix}.sweep.N.below_threshold.*.count",
            "count",
            f"sequences with future weight < threshold at the row's lambda, {_CLASS}",
        ),
        Entry(
            f"{prefix}.sweep.N.below_threshold.*.total",
            "count",
            "sequences with a finite future weight at the row's lambda",
        ),
        Entry(
            f"{prefix}.sweep.N.below_threshold.*.fraction",
            "fraction",
            "share of sequences with future weight < threshold at the row's lambda",
        ),
    ]
    return rows


_MISMATCH = (
    ("tokens", "count", "valid tokens counted"),
    ("sequences", "count", "non-empty sequences counted"),
    ("k1", "nats", "KL estimator k1: token mean of -z"),
    ("k2", "nats", "KL estimator k2: token mean of z^2/2"),
    ("k3", "nats", "KL estimator k3: token mean of exp(z) - 1 - z"),
    ("chi2_token", "1", "token chi-square divergence E_token[r^2] - 1"),
    (
        "chi2_seq",
        "1",
        "sequence chi-square divergence E_seq[(prod r)^2] - 1 (null when it overflows)",
    ),
    ("log_chi2_seq_plus_1", "nats", "log E_seq[(prod r)^2], finite where chi2_seq is not"),
    ("ess", "fraction", "effective sample size (sum r)^2 / (N sum r^2) over tokens, in (0, 1]"),
    ("ess_seq", "fraction", "effective sample size over the sequence weights prod r"),
    ("frac_outside", "fraction", "share of tokens with r outside [1/c, c], c = --is-threshold"),
    ("is_threshold", "ratio", "c of frac_outside (--is-threshold)"),
    ("abs_diff", "nats", "token mean of |z| (TRL sampling_logp_difference/mean)"),
    ("abs_diff_max", "nats", "max |z| over tokens (TRL sampling_logp_difference/max)"),
    ("abs_diff_seq_mean", "nats", "mean over sequences of the token mean of |z| (slime)"),
    ("ppl_ratio", "ratio", "mean over sequences of exp(-(token mean of z)) (verl, slime)"),
)
_PAIRS = {
    "policy": "current vs behaviour policy (or current vs engine without an old policy)",
    "rollout": "trainer (old) vs inference engine log-probs",
}

_TOUCHED = (
    ("count", "count", "tokens it would detach, summed over files"),
    ("eligible", "count", "tokens it may pick from"),
    ("total", "count", "valid tokens"),
    ("fraction", "fraction", "count / total"),
    ("ratio", "fraction", "the method's nominal ratio"),
)
_PERCENTILE = (
    ("fraction", "fraction", "the top fraction of tokens of that sign (0.01%, 1%, 20%, 40%, 100%)"),
    ("threshold", "covariance", "smallest |c| inside that top fraction"),
    ("top_mean", "covariance", "mean c of the top fraction"),
    ("band_mean", "covariance", "mean c between this fraction and the previous one"),
)
_CELL = (
    ("group_size", "count", "group size of this row"),
    ("correct", "count", "number of correct rollouts in the group"),
    ("groups", "count", "groups of that size with that many correct"),
    ("degenerate", "count", "how many of them are degenerate (advantage 0)"),
    ("lam_mean", "lambda", "mean lambda* over those groups (null when all are degenerate)"),
    ("quatro_correct", "advantage", "mean QUATRO advantage of their correct rollouts"),
    ("quatro_incorrect", "advantage", "mean QUATRO advantage of their incorrect rollouts"),
    ("grpo_correct", "advantage", "mean GRPO advantage of their correct rollouts"),
    ("grpo_incorrect", "advantage", "mean GRPO advantage of their incorrect rollouts"),
)
_DELTA = (
    ("delta", "nats", "the trust-region radius of this row (--delta-sweep)"),
    ("groups", "count", "groups solved"),
    ("degenerate", "count", "degenerate groups at this radius"),
    ("lam_mean", "lambda", "mean lambda* over non-degenerate groups (exact)"),
    ("lam_median", "lambda", "median lambda* (histogram)"),
    ("mu_mean", "reward", "mean mu* over non-degenerate groups"),
    ("abs_advantage_mean", "advantage", "mean |QUATRO advantage| over their rollouts"),
    ("advantage_correct_mean", "advantage", "mean QUATRO advantage of correct rollouts"),
    ("advantage_incorrect_mean", "advantage", "mean QUATRO advantage of incorrect rollouts"),
)

_R = "ratios.*"
_V = "per variant * = token, sequence, kalman"

#: the per-lag fields of the policy_lag section (docs/staleness.md)
_POLICY_LAG = (
    ("tokens", "tokens", "valid tokens whose own lag is *"),
    ("sequences", "count", "sequences whose oldest valid token's lag is *"),
    ("k1", "nats", "k1 KL estimate, token mean of -z"),
    ("k3", "nats", "k3 KL estimate, token mean of r - 1 - z"),
    ("ess", "fraction", "(sum r)^2 / (N sum r^2)"),
    ("outside", "fraction", "share of tokens with r outside [1/c, c]"),
    ("clip_fraction", "fraction", "PPO clip fraction at the token clip band"),
)

#: the per-index fields of the staleness section (docs/staleness.md)
_STALENESS = (
    ("rows", "count", "sequences with this mini-batch index (also those without a valid token)"),
    ("tokens", "tokens", "valid tokens of those sequences"),
    ("exact_on", "fraction", "share of the valid tokens with log-ratio z = 0 exactly"),
    ("mean_abs_z", "log-ratio", "token mean of |z|"),
    ("mean_z", "log-ratio", "token mean of z"),
    ("k3", "nats", "k3 KL estimate, token mean of r - 1 - z"),
    (
        "clip_fraction",
        "fraction",
        "PPO clip fraction at the token clip band (A > 0 and r > 1 + eps_high, or A < 0 "
        "and r < 1 - eps_low); null without advantages",
    ),
    ("ess", "fraction", "token ESS (sum r)^2 / (N sum r^2), in (0, 1]"),
)

CATALOG: tuple[Entry, ...] = (
    # --- inputs and params (docs/formats.md, docs/cli.md)
    Entry("inputs.N.sequences", "count", "sequences of the N-th input file"),
    Entry("inputs.N.tokens", "tokens", "valid tokens of the N-th input file"),
    Entry(
        "params.analysis.clip.N",
        "epsilon",
        "PPO clip band (eps_low, eps_high) of the token ratio (--clip)",
    ),
    Entry(
        "params.analysis.seq_clip.N",
        "epsilon",
        "clip band of the sequence and Kalman ratios and TEPO (--seq-clip)",
    ),
    Entry("params.analysis.is_threshold", "ratio", "c of mismatch frac_outside (--is-threshold)"),
    Entry(
        "params.analysis.on_band.N",
        "epsilon",
        "on-policy band of the Kalman-filtered ratio (--on-band)",
    ),
    Entry(
        "params.analysis.token_on_band.N",
        "epsilon",
        "on-policy band of the raw token ratio (--token-on-band)",
    ),
    Entry(
        "params.analysis.seq_on_band.N",
        "epsilon",
        "on-policy band of the sequence ratio (--seq-on-band)",
    ),
    Entry(
        "params.analysis.window", "tokens", "window length of the window-wise statistics (--window)"
    ),
    Entry(
        "params.analysis.lfr_cutoff",
        "fraction of Nyquist",
        "low-frequency cutoff of the LFR (--lfr-cutoff)",
    ),
    Entry("params.analysis.kalman_q", "1", "Kalman process noise Q (--kalman-q)"),
    Entry("params.analysis.kalman_v", "1", "Kalman observation noise V (--kalman-v)"),
    Entry("params.analysis.kalman_p0", "1", "Kalman prior variance P0"),
    Entry("params.analysis.kalman_rho0", "log-ratio", "Kalman initial state rho0"),
    Entry("params.analysis.fpa_lambda", "lambda", "FPA extrapolation lambda (--fpa-lambda)"),
    Entry("params.analysis.fpa_lambdas.N", "lambda", "FPA lambda sweep (--fpa-lambda-sweep)"),
    Entry(
        "params.analysis.fpa_threshold", "weight", "FPA below-threshold weight (--fpa-threshold)"
    ),
    Entry("params.analysis.delta", "nats", "QUATRO trust-region radius (--delta)"),
    Entry("params.analysis.deltas.N", "nats", "QUATRO delta sweep (--delta-sweep)"),
    Entry("params.analysis.quantiles.N", "probability", "the quantiles every distribution reports"),
    Entry(
        "params.analysis.max_length",
        "tokens",
        "response length limit of vitals.length (--max-length); absent: each file's padded width",
    ),
    Entry(
        "params.analysis.max_lag",
        "versions",
        "the largest policy lag the trainer allows (--max-lag); absent: not stated",
    ),
    Entry("params.analysis.temperature", "1", "the engine's temperature (--temperature)"),
    Entry("params.analysis.top_p", "probability", "the engine's top-p (--top-p)"),
    Entry("params.analysis.top_k", "count", "the engine's top-k (--top-k)"),
    Entry(
        "params.load.group_size",
        "count",
        "rows per GRPO group when the file has none (--group-size)",
    ),
    # --- ratios (docs/metrics-ratios.md, "In the report")
    *_distribution(
        f"{_R}.distribution",
        f"the log-space ratio signal over valid tokens, {_V}",
        "log-ratio (nats)",
    ),
    Entry(
        f"{_R}.clip_band.N",
        "epsilon",
        f"the clip band used (--clip for token, --seq-clip otherwise), {_V}",
    ),
    Entry(
        f"{_R}.clip_fraction",
        "fraction",
        f"share of valid tokens whose PPO term has zero gradient (null without advantages), {_V}",
    ),
    Entry(
        f"{_R}.surrogate.*.token_mean",
        "loss",
        "the loss -J, * = clipped (min(rA, clip(r)A)) or unclipped (rA), token mean",
    ),
    Entry(
        f"{_R}.surrogate.*.seq_mean_token_mean",
        "loss",
        "the loss -J, * = clipped or unclipped, mean over sequences of token means",
    ),
    Entry(f"{_R}.on_band.N", "epsilon", f"the on-policy band that set this row's states, {_V}"),
    Entry(
        f"{_R}.proportion.*",
        "fraction",
        f"state share of each sequence, averaged over sequences (KPO Table 2), {_STATES}",
    ),
    Entry(
        f"{_R}.proportion_pooled.*",
        "fraction",
        f"state share pooled over all valid tokens, {_STATES}",
    ),
    Entry(
        f"{_R}.run_length_mean.*",
        "tokens",
        f"mean run length per sequence, averaged over sequences with the state, {_STATES}",
    ),
    Entry(
        f"{_R}.run_length_histogram.*.*",
        "count",
        f"number of runs of a given length (second *), pooled, {_STATES}",
    ),
    Entry(
        f"{_R}.switch_frequency",
        "switches/token",
        f"state switch frequency: mean over sequences of the window-wise switch rate (KPO), {_V}",
    ),
    Entry(
        f"{_R}.lfr",
        "fraction",
        f"low-frequency ratio: spectral energy share below the cutoff, mean over sequences, {_V}",
    ),
    Entry(f"{_R}.lfr_excluded", "count", "sequences without energy, left out of lfr"),
    Entry(
        f"{_R}.variance.*",
        "log-ratio^2",
        "variance of the signal, mean over sequences; * = global or window_local (within windows)",
    ),
    Entry(
        f"{_R}.window_frequency.*.N",
        "fraction",
        "window-wise off-policy frequency by window index N; * = mean, var (ddof 0) over "
        "sequences, or count (sequences with that window)",
    ),
    Entry(f"{_R}.spectrum.frequency.N", "cycles/token", "bin centres of the mean periodogram"),
    Entry(
        f"{_R}.spectrum.power.N",
        "power",
        "mean periodogram power per bin over sequences with energy",
    ),
    Entry(f"{_R}.spectrum.sequences", "count", "sequences averaged in the spectrum"),
    Entry(
        f"{_R}.short_excluded",
        "count",
        "sequences shorter than spectral_min_length, left out of lfr, spectrum and windows",
    ),
    Entry(
        f"{_R}.spectral_min_length",
        "tokens",
        "fewest valid tokens for lfr, spectrum and windows: the window, at least 2 / lfr_cutoff",
    ),
    Entry(
        f"{_R}.closed_form_deviation.q",
        "1",
        "Q of the closed-form check (--kalman-impl reference only)",
    ),
    Entry(f"{_R}.closed_form_deviation.v", "1", "V of the closed-form check"),
    Entry(
        f"{_R}.closed_form_deviation.first_index",
        "token index",
        "first token where the closed-form Kalman filter leaves the exact one by more than atol",
    ),
    Entry(
        f"{_R}.closed_form_deviation.max_abs_error", "log-ratio", "largest |closed form - exact|"
    ),
    Entry(
        f"{_R}.closed_form_deviation.clamp_index",
        "token index",
        "where the closed form's clamp binds",
    ),
    Entry(
        f"{_R}.closed_form_deviation.atol", "log-ratio", "tolerance of the closed-form check (1e-4)"
    ),
    # --- mismatch (docs/framework-metrics.md)
    *(
        Entry(f"mismatch.{pair}.{name}", unit, f"{meaning}; {label}")
        for pair, label in _PAIRS.items()
        for name, unit, meaning in _MISMATCH
    ),
    # --- covariance (docs/metrics-objectives.md, CW-GRPO key table)
    Entry(
        "covariance.scope_files.*",
        "count",
        "files per scope (* = group, batch) of the means and sigma",
    ),
    Entry("covariance.scopes", "count", "number of scopes (groups or files)"),
    Entry("covariance.tokens", "tokens", "valid tokens"),
    *_distribution(
        "covariance.c", "the token covariance c of log-prob and advantage", "covariance"
    ),
    *_distribution(
        "covariance.weights.distribution", "the raw kernel weight w in [0, 1]", "weight"
    ),
    Entry(
        "covariance.weights.fraction_below.*",
        "fraction",
        "share of tokens with w below * (0.5, 0.1)",
    ),
    *_distribution(
        "covariance.normalised_weights", "the normalised weight w~ (mean 1 per scope)", "weight"
    ),
    Entry("covariance.weight_histogram.edges.N", "weight", "bin edges of w (51 on [0, 1])"),
    Entry("covariance.weight_histogram.counts.N", "count", "tokens per bin of w (50 equal bins)"),
    Entry(
        "covariance.advantage_mass.removed",
        "fraction",
        "1 - sum w|A| / sum |A|: advantage mass the raw kernel removes",
    ),
    Entry(
        "covariance.advantage_mass.removed_normalised",
        "fraction",
        "the same with w~ (can be negative)",
    ),
    Entry("covariance.advantage_mass.total", "advantage", "sum |A| over valid tokens"),
    *(
        Entry(
            f"covariance.percentiles.*.N.{name}",
            unit,
            f"Table 1 row N, * = positive or negative c: {meaning}",
        )
        for name, unit, meaning in _PERCENTILE
    ),
    Entry("covariance.percentiles.positive_count", "count", "tokens with positive c"),
    Entry("covariance.percentiles.negative_count", "count", "tokens with negative c"),
    Entry(
        "covariance.cumulative_share.*",
        "fraction",
        "share of sum |c| held by the top * of tokens ranked by |c| (Fig. 3)",
    ),
    Entry(
        "covariance.cumulative_curve.fraction.N",
        "fraction",
        "grid of top fractions of the Fig. 3 curve",
    ),
    Entry(
        "covariance.cumulative_curve.share.N",
        "fraction",
        "share of sum |c| held by that top fraction",
    ),
    *(
        Entry(f"covariance.{method}.{name}", unit, f"{label}: {meaning}")
        for method, label in (("clip_cov", "Clip-Cov"), ("kl_cov", "KL-Cov"))
        for name, unit, meaning in _TOUCHED
    ),
    Entry(
        "covariance.histogram_relative_error",
        "fraction",
        "relative error bound of the histogram quantiles (0.0116)",
    ),
    # --- future_policy (docs/metrics-objectives.md, FPA key table)
    Entry("future_policy.method_files.*", "count", "files per method (* = exact, approximation)"),
    Entry("future_policy.lam", "lambda", "the lambda of the fields below (--fpa-lambda)"),
    Entry(
        "future_policy.threshold",
        "weight",
        "the weight threshold of below_threshold (--fpa-threshold)",
    ),
    *_future_policy("future_policy"),
    Entry(
        "future_policy.approximation.files", "count", "files analysed by the log-prob approximation"
    ),
    *_future_policy("future_policy.approximation"),
    *(
        Entry(
            f"future_policy.comparison.{method}_{stat}",
            "ratio",
            f"{stat} future/current ratio (all) of the {method} method at lam",
        )
        for stat in ("median", "mean")
        for method in ("exact", "approximation")
    ),
    # --- tepo (docs/metrics-objectives.md, TEPO key table)
    Entry("tepo.sequences", "count", "sequences"),
    Entry("tepo.tokens", "tokens", "valid tokens"),
    Entry("tepo.clip_band.N", "epsilon", "TEPO clip band (eps_low, eps_high) (--seq-clip)"),
    *_distribution("tepo.weight", "the sequence weight w_i = exp(mean_t z_it)", "weight"),
    Entry(
        "tepo.outside_band",
        "fraction",
        "share of sequences with w outside [1 - eps_low, 1 + eps_high]",
    ),
    Entry(
        "tepo.clip_fraction",
        "fraction",
        "share of valid tokens whose TEPO term min(wA, clip(w)A) has zero gradient",
    ),
    Entry(
        "tepo.clip_fraction_literal",
        "fraction",
        "the same for Eq. (4) as printed, min(w, clip(w)) A",
    ),
    Entry("tepo.surrogate.token_mean", "loss", "loss -J of TEPO's policy term, token mean (TEPO)"),
    Entry("tepo.surrogate.seq_mean_token_mean", "loss", "the same, mean of token means (GSPO)"),
    Entry(
        "tepo.kl_mask.counts.*",
        "tokens",
        "tokens per KL-mask quadrant (* = pos_decreasing [the mask], pos_non_decreasing, "
        "neg_increasing, neg_non_increasing, zero_advantage)",
    ),
    Entry("tepo.kl_mask.fractions.*", "fraction", "share of valid tokens per KL-mask quadrant"),
    Entry("tepo.kl_mask.total", "tokens", "valid tokens of the quadrants"),
    # --- trust_region (docs/metrics-objectives.md, QUATRO key table)
    Entry("trust_region.delta", "nats", "the trust-region radius (--delta)"),
    Entry("trust_region.groups", "count", "groups (per file)"),
    Entry("trust_region.rollouts", "count", "rollouts with a finite reward"),
    Entry("trust_region.group_sizes.*", "count", "groups of size *"),
    Entry("trust_region.degenerate", "count", "groups without an interior optimum (advantage 0)"),
    Entry(
        "trust_region.degenerate_all_equal",
        "count",
        "degenerate groups whose rewards are all equal",
    ),
    *_distribution("trust_region.lam", "the dual lambda* over non-degenerate groups", "lambda"),
    *_distribution("trust_region.mu", "the dual mu* over non-degenerate groups", "reward"),
    *_distribution(
        "trust_region.advantage.*",
        "the advantage over all rollouts, * = quatro or grpo",
        "advantage",
    ),
    *(
        Entry(f"trust_region.by_correct.N.{n}", u, f"advantage vs #correct, row N: {m}")
        for n, u, m in _CELL
    ),
    Entry(
        "trust_region.non_binary_groups",
        "count",
        "groups left out of by_correct (non-binary rewards)",
    ),
    *(Entry(f"trust_region.sweep.N.{n}", u, f"delta sweep row N: {m}") for n, u, m in _DELTA),
    Entry(
        "trust_region.grpo.*",
        "1",
        "the GRPO convention beside QUATRO: * = eps (1e-6), std_ddof (0)",
    ),
    Entry(
        "trust_region.degenerate_share",
        "fraction",
        "degenerate / groups: the share the verdict judges (degenerate_yellow, _red)",
    ),
    # --- staleness (docs/staleness.md): present when the dumps carry 'minibatch'
    Entry(
        "staleness.clip_band.N",
        "epsilon",
        "token clip band (eps_low, eps_high) of the per-mini-batch clip_fraction (--clip)",
    ),
    *(
        Entry(f"staleness.minibatches.*.{name}", unit, f"mini-batch * (its index): {meaning}")
        for name, unit, meaning in _STALENESS
    ),
    # --- policy_lag (docs/staleness.md "Policy versions"): dumps with 'policy_version'
    Entry("policy_lag.max_lag", "versions", "the largest token lag"),
    Entry("policy_lag.mean_token_lag", "versions", "token mean of the lag"),
    Entry(
        "policy_lag.mean_sequence_lag",
        "versions",
        "sequence mean of the lag, a sequence's lag being its oldest token's",
    ),
    Entry("policy_lag.max_allowed", "versions", "the largest lag the trainer allows (--max-lag)"),
    Entry("policy_lag.beyond_allowed", "tokens", "valid tokens with a lag beyond max_allowed"),
    Entry("policy_lag.clip_band.N", "epsilon", "token clip band of clip_fraction (--clip)"),
    Entry("policy_lag.is_threshold", "ratio", "c of the share outside [1/c, c] (--is-threshold)"),
    *(
        Entry(f"policy_lag.lags.*.{name}", unit, f"lag * (versions): {meaning}")
        for name, unit, meaning in _POLICY_LAG
    ),
    *(
        Entry(
            f"policy_lag.lags.*.split.{estimate}.{pair}",
            "nats",
            f"lag *: token mean of the {estimate} estimate of the {pair} log-ratio "
            "(needs log_probs, old_log_probs and rollout_log_probs)",
        )
        for estimate in ("k1", "k3")
        for pair in ("current/old", "old/engine", "current/engine")
    ),
    # --- sampling (docs/sampling.md): the engine's log-probs, or logits and --top-p ...
    Entry("sampling.temperature.tokens", "tokens", "tokens of the trainer/engine line"),
    Entry(
        "sampling.temperature.slope",
        "1",
        "slope of the trainer/engine log-ratio on the trainer's log-prob (1 - 1/T for an "
        "engine at temperature T)",
    ),
    Entry("sampling.temperature.correlation", "1", "Pearson's r of that log-ratio and log-prob"),
    Entry(
        "sampling.temperature.implied_temperature",
        "ratio",
        "1 / (1 - slope): the engine's temperature over the trainer's that the slope implies",
    ),
    Entry("sampling.truncation.temperature", "1", "the stated temperature (--temperature)"),
    Entry("sampling.truncation.top_p", "probability", "the stated top-p (--top-p)"),
    Entry("sampling.truncation.top_k", "count", "the stated top-k (--top-k)"),
    Entry("sampling.truncation.tokens", "tokens", "valid tokens with logits and a token id"),
    Entry(
        "sampling.truncation.outside",
        "fraction",
        "share of sampled tokens outside the set the stated top-k/top-p keep",
    ),
    Entry(
        "sampling.truncation.mass_removed",
        "probability",
        "token mean of the tempered probability mass the truncation removed",
    ),
    Entry(
        "sampling.truncation.log_shift",
        "nats",
        "token mean of log q(y) - log softmax(l)_y over the tokens inside: the bias of a "
        "full-softmax behaviour log-prob",
    ),
    Entry(
        "sampling.truncation.abs_log_shift", "nats", "token mean of |log q(y) - log softmax(l)_y|"
    ),
    Entry(
        "sampling.truncation.engine_vs_sampling",
        "nats",
        "token mean of |engine log-prob - log q(y)| (needs rollout_log_probs)",
    ),
    Entry(
        "sampling.truncation.engine_vs_full",
        "nats",
        "token mean of |engine log-prob - log softmax(l)_y| (needs rollout_log_probs)",
    ),
    # --- vitals (docs/health.md "Vital signs")
    Entry("vitals.sequences", "count", "sequences counted by the vitals"),
    Entry("vitals.tokens", "tokens", "valid tokens counted by the vitals"),
    Entry("vitals.entropy.tokens", "tokens", "valid tokens with an 'entropy'"),
    Entry("vitals.entropy.mean", "nats", "token mean of the policy's entropy over valid tokens"),
    *_distribution("vitals.entropy.distribution", "token entropy", "nats"),
    Entry("vitals.entropy.correct_mean", "nats", "token mean entropy of the correct rows"),
    Entry("vitals.entropy.incorrect_mean", "nats", "token mean entropy of the incorrect rows"),
    Entry("vitals.entropy.old_mean", "nats", "token mean of 'old_entropy' (behaviour policy)"),
    Entry(
        "vitals.entropy.change_mean",
        "nats",
        "token mean of entropy - old_entropy: the entropy change within the step",
    ),
    Entry("vitals.entropy.change_tokens", "tokens", "valid tokens of change_mean"),
    Entry("vitals.length.mean", "tokens", "mean response length (valid tokens per row)"),
    *_distribution("vitals.length.distribution", "response length", "tokens"),
    Entry("vitals.length.limit", "tokens", "the length limit (largest, where files differ)"),
    Entry("vitals.length.limits.N", "tokens", "every length limit a file was measured against"),
    Entry("vitals.length.at_limit", "count", "responses whose length reached the limit"),
    Entry("vitals.length.at_limit_share", "fraction", "share of responses at the length limit"),
    Entry("vitals.reward.sequences", "count", "sequences with a finite reward"),
    Entry("vitals.reward.mean", "reward", "mean sequence reward"),
    Entry("vitals.reward.std", "reward", "standard deviation of the sequence reward (ddof 0)"),
    Entry(
        "vitals.reward.per_function.*.sequences",
        "count",
        "reward function * (a reward:NAME key): sequences it scored (NaN, no value, left out)",
    ),
    Entry("vitals.reward.per_function.*.mean", "reward", "reward function *: mean"),
    Entry("vitals.reward.per_function.*.std", "reward", "reward function *: std (ddof 0)"),
    Entry("vitals.reward.per_function.*.minimum", "reward", "reward function *: smallest value"),
    Entry("vitals.reward.per_function.*.maximum", "reward", "reward function *: largest value"),
    Entry("vitals.correct_share", "fraction", "share of sequences that are correct"),
    Entry("vitals.advantages.tokens", "tokens", "valid tokens with an advantage"),
    Entry("vitals.advantages.mean_abs", "advantage", "token mean of |A|"),
    Entry("vitals.advantages.zero_share", "fraction", "share of valid tokens with A = 0 exactly"),
    Entry(
        "vitals.advantages.short_mean_abs",
        "advantage",
        "mean over sequences no longer than their batch's median length of their mean |A|",
    ),
    Entry(
        "vitals.advantages.long_mean_abs",
        "advantage",
        "mean over sequences longer than their batch's median length of their mean |A|",
    ),
    Entry("vitals.equal_reward_groups.groups", "count", "groups (prompts) counted"),
    Entry("vitals.equal_reward_groups.equal", "count", "groups whose rewards are all equal"),
    Entry("vitals.equal_reward_groups.share", "fraction", "equal / groups"),
    Entry("vitals.equal_reward_groups.solved", "count", "equal-reward groups all correct"),
    Entry("vitals.equal_reward_groups.failed", "count", "equal-reward groups all incorrect"),
    Entry("vitals.entropy_mechanics.tokens", "tokens", "valid tokens of the covariances"),
    Entry(
        "vitals.entropy_mechanics.covariance",
        "nats",
        "Cov(log pi_k, A) over valid tokens, centred within each file (Cui et al. 2025 Thm 2)",
    ),
    Entry(
        "vitals.entropy_mechanics.pg_covariance",
        "nats",
        "Cov(log pi_k, pi_k A) over valid tokens (Cui et al. 2025 Thm 1, vanilla PG)",
    ),
    Entry(
        "vitals.entropy_mechanics.predicted_change_per_eta",
        "nats/token",
        "-covariance: the predicted entropy change per unit step size (its sign)",
    ),
)


def layout_keys() -> list[str]:
    """The rule-addressable key patterns of the analyze report layout, from its types.

    ``params`` is typed ``dict[str, Any]`` in :class:`Report`; its blocks are walked as
    the parameter classes they are written from (``analysis``: AnalysisParams, ``load``:
    the LoadOptions fields that ``io.loaders.load_params`` writes, the ones that change the
    numbers; options of memory or safety alone are not in a report).
    """
    from ratioscope.data.params import AnalysisParams
    from ratioscope.io.loaders import LoadOptions, load_params
    from ratioscope.report.model import Report, _report_hints

    hints = _report_hints()
    keys: list[str] = []
    written = set(load_params(LoadOptions()))
    for f in dataclasses.fields(Report):
        if f.name in _SKIPPED:
            continue
        if f.name == "params":
            keys.extend(_walk_type(AnalysisParams, ["params", "analysis"], {}))
            # LoadOptions names TrainerSettings for the type checker only
            from ratioscope.data.trainer_settings import TrainerSettings

            load_hints = get_type_hints(LoadOptions, localns={"TrainerSettings": TrainerSettings})
            for option in dataclasses.fields(LoadOptions):
                if option.name in written:
                    path = ["params", "load", option.name]
                    keys.extend(_walk_type(load_hints[option.name], path, {}))
        else:
            keys.extend(_walk_type(hints[f.name], [f.name], {}))
    return list(dict.fromkeys(keys))


def _walk_type(hint: Any, path: list[str], bound: dict[Any, Any]) -> Iterator[str]:
    """The numeric key patterns under a value of type ``hint`` (as report_io reads it)."""
    if isinstance(hint, TypeVar):
        hint = bound.get(hint, Any)
    origin, args = get_origin(hint), get_args(hint)
    if origin is Union or origin is types.UnionType:
        for option in args:
            if option is not type(None):
                yield from _walk_type(option, path, bound)
        return
    if hint in (int, float):
        yield ".".join(path)
        return
    target = origin or hint
    if dataclasses.is_dataclass(target) and isinstance(target, type):
        variables = getattr(target, "__parameters__", ())
        inner = {
            v: bound.get(a, a) if isinstance(a, TypeVar) else a
            for v, a in zip(variables, args, strict=False)
        }
        field_hints = get_type_hints(target)
        for f in dataclasses.fields(target):
            if f.init:
                yield from _walk_type(field_hints[f.name], [*path, f.name], inner)
    elif target in (dict, Mapping):
        value_type = args[1] if len(args) == 2 else Any
        yield from _walk_type(value_type, [*path, ANY], bound)
    elif target in (list, tuple):
        item_types = [a for a in args if a is not Ellipsis] or [Any]
        for item_type in dict.fromkeys(item_types):
            yield from _walk_type(item_type, [*path, INDEX], bound)
    # str, bool, Literal, Any: not a number a rule can bound


def report_keys(document: Mapping[str, Any]) -> dict[str, Any]:
    """The rule-addressable keys of a report document, each with its value.

    List positions become ``N`` and the key's value is then the list of its values by
    position. A null is kept where the catalog expects a number (a metric that could
    not be computed); a null object (a section or block not computed) has no keys.
    """
    return {key: value for key, (_, value) in _report_items(document).items()}


def _report_items(document: Mapping[str, Any]) -> dict[str, tuple[list[str], Any]]:
    """Key -> (its parts, value); the parts keep keys that contain dots (``"0.99"``) whole."""
    found: dict[str, tuple[list[str], Any]] = {}
    for name, value in document.items():
        if name not in _SKIPPED:
            _walk_value(value, [name], False, found)
    return found


def _walk_value(
    value: Any, parts: list[str], in_list: bool, found: dict[str, tuple[list[str], Any]]
) -> None:
    if isinstance(value, Mapping):
        for key, item in value.items():
            _walk_value(item, [*parts, str(key)], in_list, found)
    elif isinstance(value, list):
        for item in value:
            _walk_value(item, [*parts, INDEX], True, found)
    elif value is None or (isinstance(value, (int, float)) and not isinstance(value, bool)):
        if value is None and _entry(parts) is None:
            return
        key = ".".join(parts)
        if in_list:
            found.setdefault(key, (parts, []))[1].append(value)
        else:
            found[key] = (parts, value)


def _matches(pattern: list[str], parts: list[str]) -> bool:
    """Whether a catalog pattern matches a key (a concrete key or a layout pattern)."""
    if len(pattern) != len(parts):
        return False
    return all(p in (ANY, k) or k == ANY for p, k in zip(pattern, parts, strict=True))


def entries_for(key: str | list[str]) -> list[Entry]:
    """The catalog entries that match ``key`` (split on dots unless given as parts)."""
    parts = key.split(".") if isinstance(key, str) else key
    return [e for e in CATALOG if _matches(e.pattern.split("."), parts)]


def _entry(parts: list[str]) -> Entry | None:
    matched = entries_for(parts)
    return matched[0] if matched else None


def catalog_sections() -> list[str]:
    """The top-level sections of the report layout that have rule-addressable keys, in
    report order (``--section``'s choices)."""
    return list(dict.fromkeys(e.section for e in CATALOG))


def metrics(
    report: str | Path | Mapping[str, Any] | None = None,
    *,
    search: str | None = None,
    section: str | None = None,
) -> list[Metric]:
    """The rule-addressable keys of an analyze report, with meaning, unit and section.

    Args:
        report: a report JSON file or document; None lists the keys of the report
            layout (the catalog's patterns, in the order of the report).
        search: keep the keys whose key, meaning or unit contain every word of it
            (case-insensitive).
        section: keep the keys of one top-level section (``ratios``, ``mismatch``, ...).

    Raises:
        ReportError: ``report`` is not an analyze report, or has a key this ratioscope
            does not know.
        ParameterError: ``section`` is not a section of the report layout.
    """
    if report is None:
        # the catalog is written in the order of the report layout (tests/test_metrics.py
        # holds it to layout_keys()), so the layout needs no walk of the section types,
        # which import torch: listing the keys answers at once
        rows = [Metric(e.pattern, e.section, e.unit, e.meaning) for e in CATALOG]
    else:
        rows = _report_rows(report)
    if section is not None:
        if section not in catalog_sections():
            choices = ", ".join(catalog_sections())
            raise ParameterError("section", f"must be one of {choices}; got '{section}'")
        rows = [m for m in rows if m.section == section]
    if search:
        words = search.lower().split()
        rows = [m for m in rows if all(w in f"{m.key} {m.meaning} {m.unit}".lower() for w in words)]
    return rows


def _report_rows(report: str | Path | Mapping[str, Any]) -> list[Metric]:
    from ratioscope.io.documents import read_json_report
    from ratioscope.report.model import Report

    source: str | Path | None = None
    if isinstance(report, Mapping):
        document = report
    else:
        source = report
        document = read_json_report(report)
    # the typed reader names what is wrong with a document that is not an analyze report
    Report.from_dict(document, source=source)
    rows = []
    for key, (parts, value) in _report_items(document).items():
        entry = _entry(parts)
        if entry is None:
            raise ReportError(source, f"key '{key}' is not in the metrics catalog")
        rows.append(Metric(key, entry.section, entry.unit, entry.meaning, value, True))
    return rows
