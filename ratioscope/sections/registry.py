"""The report sections in report order; ``info`` and ``analyze`` both read this list."""

from __future__ import annotations

from ratioscope.sections.base import Accumulator


def section_classes() -> list[type[Accumulator]]:
    from ratioscope.sections.covariance import CovarianceAccumulator
    from ratioscope.sections.future_policy import FuturePolicyAccumulator
    from ratioscope.sections.mismatch import MismatchAccumulator
    from ratioscope.sections.policy_lag import PolicyLagAccumulator
    from ratioscope.sections.ratios import RatiosAccumulator
    from ratioscope.sections.sampling import SamplingAccumulator
    from ratioscope.sections.staleness import StalenessAccumulator
    from ratioscope.sections.tepo import TepoAccumulator
    from ratioscope.sections.trust_region import TrustRegionAccumulator
    from ratioscope.sections.vitals import VitalsAccumulator

    return [
        RatiosAccumulator,
        MismatchAccumulator,
        CovarianceAccumulator,
        FuturePolicyAccumulator,
        TepoAccumulator,
        TrustRegionAccumulator,
        StalenessAccumulator,
        PolicyLagAccumulator,
        SamplingAccumulator,
        VitalsAccumulator,
    ]


#: (section, what it computes, canonical tensors it needs) — for ``ratioscope info``
FEATURES: tuple[tuple[str, str, tuple[str, ...]], ...] = (
    ("ratios", "ratio distributions, token states, Kalman filter", ()),
    ("ratios", "clip fraction and surrogate loss", ("advantages",)),
    ("mismatch", "policy: current vs behaviour", ()),
    ("mismatch", "rollout: trainer vs inference engine", ("rollout_log_probs", "old_log_probs")),
    ("covariance", "CW-GRPO covariance kernel weights", ("log_probs", "advantages")),
    ("future_policy", "FPA exact, from logits", ("logits", "ref_logits", "token_ids")),
    ("future_policy", "FPA approximation, from log-probs", ("log_probs", "ref_log_probs")),
    ("future_policy", "split by correctness", ("correct",)),
    ("tepo", "sequence likelihood weights", ()),
    ("tepo", "KL-mask quadrants", ("advantages", "entropy", "old_entropy")),
    ("trust_region", "QUATRO per-query duals", ("rewards", "group")),
    ("staleness", "off-policy statistics by mini-batch", ("minibatch",)),
    ("policy_lag", "lag histograms and statistics by policy version", ("policy_version",)),
    (
        "policy_lag",
        "drift split current/old + old/engine by lag",
        ("policy_version", "log_probs", "old_log_probs", "rollout_log_probs"),
    ),
    ("sampling", "temperature on one side only, from log-probs", ("rollout_log_probs",)),
    (
        "sampling",
        "top-p/top-k/temperature from logits (--top-p, ...)",
        ("logits", "token_ids"),
    ),
    ("vitals", "response lengths and the share at the length limit", ()),
    ("vitals", "token entropy", ("entropy",)),
    ("vitals", "entropy change within the step", ("entropy", "old_entropy")),
    ("vitals", "reward, correct share", ("rewards",)),
    ("vitals", "advantage magnitudes, A = 0 share", ("advantages",)),
    ("vitals", "groups whose rewards are all equal", ("rewards", "group")),
)
