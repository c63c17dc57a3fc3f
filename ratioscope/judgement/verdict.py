"""The health verdict: a report's headline numbers read against named thresholds.

:func:`verdict` turns a report (:class:`JudgedReport`: the sections of a
:class:`~ratioscope.report.model.Report`) into a few
:class:`Finding`\\ s, each a sentence with the number behind it, the threshold it was
judged by and where that threshold comes from, graded green / yellow / red. Every
threshold is a field of :class:`Thresholds` with its source in the field's metadata
(a paper, a framework's default, or ratioscope's own choice, stated as such); a TOML
``[thresholds]`` table overrides them (:func:`load_thresholds`), in the same file as
``check``'s ``[[rule]]`` tables. docs/health.md lists them all.

No verdict without its number: a section the report does not have gives no finding,
except the train/inference mismatch, whose absence is itself worth a line (it needs the
inference engine's log-probs, which many dumps lack).
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Protocol, TypeGuard

from ratioscope.errors import RulesError

if TYPE_CHECKING:
    from ratioscope.sections.covariance import CovarianceSection
    from ratioscope.sections.future_policy import FuturePolicySection
    from ratioscope.sections.mismatch import MismatchSection, MismatchStats
    from ratioscope.sections.policy_lag import PolicyLagSection
    from ratioscope.sections.ratios import VariantStats
    from ratioscope.sections.sampling import SamplingSection
    from ratioscope.sections.staleness import StalenessSection
    from ratioscope.sections.trust_region import TrustRegionSection
    from ratioscope.sections.vitals import VitalsSection


#: the report sections the verdict's findings read (``future_policy`` feeds a note only)
FINDING_SECTIONS = (
    "ratios", "mismatch", "covariance", "trust_region", "staleness", "policy_lag",
    "sampling", "vitals",
)  # fmt: skip


class JudgedReport(Protocol):
    """What the verdict reads of a report: its parameters and sections.

    :class:`ratioscope.report.model.Report` has them; the verdict is written against
    this shape so that the report model, one layer up, can offer
    :meth:`~ratioscope.report.model.Report.verdict` without the two importing each
    other.
    """

    @property
    def params(self) -> dict[str, Any]: ...
    @property
    def ratios(self) -> dict[str, VariantStats] | None: ...
    @property
    def mismatch(self) -> MismatchSection | None: ...
    @property
    def covariance(self) -> CovarianceSection | None: ...
    @property
    def future_policy(self) -> FuturePolicySection | None: ...
    @property
    def trust_region(self) -> TrustRegionSection | None: ...
    @property
    def staleness(self) -> StalenessSection | None: ...
    @property
    def policy_lag(self) -> PolicyLagSection | None: ...
    @property
    def sampling(self) -> SamplingSection | None: ...
    @property
    def vitals(self) -> VitalsSection | None: ...


Level = Literal["green", "yellow", "red"]
LEVELS: tuple[Level, ...] = ("green", "yellow", "red")

# sources, written once: docs/health.md quotes them
_VERL_DOCS = (
    "verl, docs/advance/rollout_is.md (rollout importance-sampling metrics: "
    "'rollout_is_eff_sample_size' ideal > 0.5, warning < 0.3; 'mismatch_kl' warning > 0.1; "
    "'rollout_is_ratio_fraction_high' ideal < 0.1)"
)
_TIS_CAP = (
    "verl rollout correction: rollout_is_threshold = 2.0 "
    "(verl/trainer/ppo/rollout_corr_helper.py); TRL GRPOConfig.vllm_importance_sampling_cap "
    "= 2.0 (3.0 in later releases): truncated IS (TIS) with C = 2"
)
_SPINNING_UP = (
    "OpenAI Spinning Up PPO: target_kl = 0.01, early stop of the policy epochs when the "
    "approximate KL exceeds 1.5 x target_kl (spinup/algos/pytorch/ppo/ppo.py)"
)
_OURS = "ratioscope's own choice"
_TRL_ON_POLICY = (
    "TRL GRPOTrainer (huggingface/trl f2cd5771, trl/trainer/grpo_trainer.py): "
    "_generate_and_score_completions sets old_per_token_logps to None when "
    "gradient_accumulation_steps % (steps_per_generation x num_iterations) == 0 (unless vLLM "
    "importance sampling makes it recompute them) and _compute_loss then uses "
    "per_token_logps.detach(): every log-ratio of the step is 0 by definition, and a "
    "non-zero one is recomputation noise"
)
_VERL_ON_POLICY = (
    "verl (volcengine/verl b178a3cd): update_policy splits each rank's "
    "train_batch_size x rollout.n / dp sequences into mini-batches of ppo_mini_batch_size "
    "x rollout.n / dp (workers/fsdp_workers.py 241-242, workers/actor/dp_actor.py 541; the "
    "new engine: trainer/ppo/ray_trainer.py 1246-1256, workers/engine_workers.py 217); with "
    "one mini-batch and ppo_epochs 1 (dp_actor.py 543) no update precedes the loss, which "
    "uses log_prob.detach() (dp_actor.py 591-592) or the recomputed old_log_probs of the "
    "same policy (workers/utils/losses.py 125): every log-ratio of the step is 0 by "
    "definition, and a non-zero one is recomputation noise"
)
_ON_POLICY_SOURCES = {"trl": _TRL_ON_POLICY, "verl": _VERL_ON_POLICY}
_PRIME_RL_CLAMP = (
    "prime-rl clamps the log importance ratio to [-20, 20] (exp(20) = 4.9e8) before exp: "
    "PR #1329, and MISMATCH_KL_LOG_RATIO_LIMIT in PR #2973 (src/prime_rl/trainer/rl/loss.py)"
)
_FLOAT32_OVERFLOW = (
    "exp(z) overflows float32 (and bfloat16) for z > log(3.4e38) = 88.72: the ratio is inf "
    "and the loss or its gradient non-finite (prime-rl issue #2972)"
)
_RELATIVE_MEASURED = (
    f"{_OURS}, measured on the bundled runs (sample_data/verl_steps/, verl/): every "
    "quantity judged against a baseline moves at most 4.1x its bad way from the run's first step"
)


def _threshold(default: float, source: str, doc: str) -> Any:
    """A :class:`Thresholds` field: its default, where it comes from and what it bounds."""
    return field(default=default, metadata={"source": source, "doc": doc})


@dataclass(frozen=True)
class Thresholds:
    """Every threshold the verdict judges by; ``*_yellow`` / ``*_red`` start each level.

    A value beyond ``*_yellow`` is yellow and beyond ``*_red`` red ("beyond" is "above"
    for quantities that are bad when large, "below" for ESS). Each field's source is in
    ``Thresholds.source(name)``; docs/health.md is the table.
    """

    rollout_k3_yellow: float = _threshold(
        1e-3,
        f"{_OURS}: the order of train/inference KL (nats per token) at which truncated IS "
        "is usually recommended; no framework fixes a k3 bound",
        "train/inference mismatch: k3 per token, old (trainer) vs inference engine",
    )
    rollout_k3_red: float = _threshold(
        0.1, _VERL_DOCS, "train/inference mismatch: k3 per token where training is at risk"
    )
    rollout_ess_yellow: float = _threshold(
        0.5, _VERL_DOCS, "train/inference mismatch: token ESS below this is yellow"
    )
    rollout_ess_red: float = _threshold(
        0.3, _VERL_DOCS, "train/inference mismatch: token ESS below this is red"
    )
    rollout_outside_yellow: float = _threshold(
        0.01,
        f"{_OURS}: one token in a hundred would be truncated; the band is the report's "
        f"[1/C, C], C = is_threshold, default 2 ({_TIS_CAP})",
        "share of tokens whose train/inference ratio lies outside [1/C, C]",
    )
    rollout_outside_red: float = _threshold(
        0.1, _VERL_DOCS, "share of tokens outside [1/C, C] where red starts"
    )
    drift_k3_yellow: float = _threshold(
        0.01, _SPINNING_UP, "policy drift: k3 per token between the current and old policy"
    )
    drift_k3_red: float = _threshold(
        0.015, _SPINNING_UP, "policy drift: k3 beyond which Spinning Up stops the epoch"
    )
    clip_fraction_yellow: float = _threshold(
        0.1,
        f"{_OURS}: PPO implementations log the clip fraction (clipfrac) without a bound; a "
        "tenth of the tokens losing the gradient of the clipped side is worth a look "
        "(the sample run: 0.04 %)",
        "PPO clip fraction of the raw token ratios (the report's clip band)",
    )
    clip_fraction_red: float = _threshold(0.3, _OURS, "PPO clip fraction where red starts")
    switch_frequency_reference: float = _threshold(
        0.43,
        "KPO, Table 2: switch frequency of raw token ratios on the paper's run "
        "(about 0.41 in Fig. 1)",
        "informational: the raw token ratios' switch frequency is compared with it",
    )
    covariance_top1_yellow: float = _threshold(
        0.8,
        f"{_OURS}, measured on the bundled run's 19 healthy steps (49 % to 65 % of sum |c| "
        "in the top 1 % of the tokens): a few tokens holding most of the covariance is the "
        "normal state of a GRPO update (CW-GRPO Fig. 3); four fifths is beyond it",
        "share of sum |c| held by the top 1 % of tokens ranked by |c|",
    )
    degenerate_yellow: float = _threshold(
        0.5,
        f"{_OURS}: half of the groups give no gradient (the sample run: 22 %); DAPO's "
        "dynamic sampling drops such groups",
        "share of QUATRO groups that are degenerate (all rewards equal, or delta >= log(N/m))",
    )
    degenerate_red: float = _threshold(0.8, _OURS, "share of degenerate groups where red starts")
    on_policy_nonzero_yellow: float = _threshold(
        0.0,
        "definition of the PPO/GRPO step: the first optimizer update (mini-batch 0 of the "
        "first epoch) runs before any update, so the current policy is the behaviour "
        "policy and every log-ratio is exactly 0; a non-zero one means the log-probs were "
        "recomputed non-deterministically (docs/staleness.md)",
        "share of the first mini-batch's tokens whose log-ratio is not exactly 0 "
        "(needs the 'minibatch' key); of the whole step's where the trainer's recorded "
        "settings make every update the first after sampling (TRL)",
    )
    lag_beyond_red: float = _threshold(
        0.0,
        "prime-rl drops episodes whose oldest version lags beyond max_off_policy_steps, "
        "AReaL admits no sample beyond max_head_offpolicyness: a token beyond the stated "
        "maximum means that guard failed (prime-rl #1901 logged such lags)",
        "share of tokens whose policy lag exceeds the maximum the trainer allows "
        "(--max-lag; needs 'policy_version')",
    )
    lag_mismatch_growth_yellow: float = _threshold(
        2.0,
        f"{_OURS}: the old/engine k3 at the largest lag against the smallest lag's; a ratio "
        "of 2 says the version gap, not the engine, dominates the mismatch of the stale "
        "tokens",
        "k3 of the largest lag over k3 of the smallest (old/engine where the three "
        "log-probs are present, else the dump's ratio pair; needs 'policy_version' with "
        "two lags or more, and that k3 above the train/inference yellow bound)",
    )
    temperature_slope_yellow: float = _threshold(
        0.05,
        f"{_OURS}: the slope of the trainer/engine log-ratio on the trainer's log-prob is "
        "about 1 - 1/T for an engine at temperature T against a trainer at 1 (0.05: T "
        "off by 5 %; the sample run's bf16 engine: 0.004); judged only where the line "
        "explains the log-ratio (|correlation| >= 0.5), which engine noise does not",
        "|slope| of the trainer/engine log-ratio on the trainer's log-prob (needs "
        "'rollout_log_probs')",
    )
    temperature_slope_red: float = _threshold(
        0.2,
        f"{_OURS}: an implied temperature below 0.83 or above 1.25: every ratio is biased "
        "by a log-ratio that moves with its own token (NeMo-RL #1288, TRL #6789)",
        "|slope| where red starts",
    )
    outside_nucleus_yellow: float = _threshold(
        0.0,
        "definition of top-p/top-k sampling: a token outside the kept set has probability "
        "0 under the stated settings, so any such token says the engine sampled with "
        "other settings (or other weights) than stated",
        "share of sampled tokens outside the set the stated --top-p/--top-k keep of the "
        "trainer's tempered logits (needs logits and token ids)",
    )
    outside_nucleus_red: float = _threshold(
        0.01,
        f"{_OURS}: one token in a hundred impossible under the stated settings",
        "share outside the kept set where red starts",
    )
    sampling_shift_yellow: float = _threshold(
        1e-3,
        f"{_OURS}: the train/inference k3 bound (rollout_k3_yellow) in nats per token: a "
        "behaviour log-prob that is the full softmax at T = 1 when the engine sampled a "
        "tempered, truncated distribution is off by this much on average",
        "token mean of |log q(y) - log softmax(l)_y| under the stated --temperature/"
        "--top-p/--top-k (needs logits and token ids)",
    )
    sampling_shift_red: float = _threshold(
        0.05,
        f"{_OURS}: a ratio off by 5 % on the average token",
        "that mean where red starts",
    )
    log_ratio_max_yellow: float = _threshold(
        20.0, _PRIME_RL_CLAMP, "largest |log-ratio| of any token, either ratio pair"
    )
    log_ratio_max_red: float = _threshold(
        88.72, _FLOAT32_OVERFLOW, "largest |log-ratio| where exp overflows float32"
    )
    entropy_yellow: float = _threshold(
        1e-3,
        f"{_OURS}, measured on the bundled run (healthy steps 0.015 to 0.024 nats per "
        "token, a near-deterministic arithmetic task); runs that collapsed end near 0.05 "
        "nats on MATH (QUATRO Table 2: GSPO, CISPO), so an absolute floor only catches an "
        "entropy that is gone: a baseline or the run's first steps catch a collapse from "
        "a higher level",
        "token entropy: mean over valid tokens (nats) below this is yellow",
    )
    entropy_red: float = _threshold(
        1e-4, _OURS, "token entropy: mean below this is red (near-deterministic sampling)"
    )
    length_limit_yellow: float = _threshold(
        0.15,
        f"{_OURS}, measured on the bundled run (2 % to 21 % of its responses reach the "
        "152-token limit, a task whose answers are up to 146 tokens long) and on the corpus "
        "of real runs (benchmarks/runs: healthy runs at most 14 %); verl logs the share as "
        "response_length/clip_ratio with no bound",
        "share of responses that reach the length limit",
    )
    length_limit_red: float = _threshold(
        0.3,
        f"{_OURS}, measured on the corpus of real runs (benchmarks/runs: healthy runs at "
        "most 14 % of their responses at the limit on any step; runs that hacked a length "
        "reward or a lenient verifier passed 30 % 0 to 16 steps before their accuracy "
        "halved): a third of the responses truncated is a length blow-up",
        "share of responses at the length limit where red starts",
    )
    equal_groups_yellow: float = _threshold(
        0.4,
        f"{_OURS}, measured on the bundled run (0 to 25 % of the groups on 19 of its 20 "
        "steps, 50 % on its last); such groups give every rollout A = 0, no gradient, and "
        "DAPO's dynamic sampling drops them",
        "share of groups whose rewards are all equal",
    )
    equal_groups_red: float = _threshold(
        0.9,
        f"{_OURS}, measured on the corpus of real runs (benchmarks/runs: a healthy run "
        "with 4 samples a prompt that solves 85 % of them has 80 % of its groups all "
        "correct on some steps): nine in ten groups teach nothing",
        "share of equal-reward groups where red starts",
    )
    zero_advantage_yellow: float = _threshold(
        0.4,
        f"{_OURS}, measured on the bundled run (0 to 26 % of the tokens on 19 of its 20 "
        "steps, 50 % on its last): tokens with A = 0 exactly contribute no policy gradient "
        "(prime-rl logs this share, PR #584)",
        "share of valid tokens with advantage exactly 0",
    )
    zero_advantage_red: float = _threshold(
        0.9,
        f"{_OURS}, measured on the corpus of real runs (a healthy run reaches 83 % on "
        "some steps, as its groups become all correct)",
        "share of zero-advantage tokens where red starts",
    )
    trend_steps: float = _threshold(
        3,
        f"{_OURS}: the fewest steps in a row that make a trend (one step rises or falls "
        "half of the time by chance, three in a row one time in eight)",
        "steps over which the trend rules look: rises or falls on each of them",
    )
    entropy_rise_yellow: float = _threshold(
        1.5,
        f"{_OURS}, measured on the corpus of real runs (benchmarks/runs: healthy runs stay "
        "within 0.41x to 1.43x of their first steps' token entropy; a learning rate too "
        "high, too many updates per batch and stale samples raise it 1.5x to 4.4x before "
        "their accuracy falls)",
        "token entropy this many times the first steps' is yellow (the policy loses its sharpness)",
    )
    entropy_rise_red: float = _threshold(
        1.5,
        f"{_OURS}, measured on the corpus: no healthy step reaches 1.5x; held on three "
        "steps it made the learning-rate and shaping-reward runs red 7 to 12 steps before "
        "their labels",
        "token entropy this many times the first steps' on each of the last trend_steps "
        "steps is red (one step above it is yellow)",
    )  # fmt: skip
    entropy_fall_yellow: float = _threshold(
        0.5,
        "Microsoft's Post-Training Toolkit and rlwatch flag an entropy drop of 50 % or "
        "more; healthy runs of the corpus fell to 0.41x as they learned",
        "token entropy at or below this share of the first steps' is yellow (collapse)",
    )
    entropy_fall_red: float = _threshold(
        0.2,
        f"{_OURS}: a fifth of the first steps' entropy; the TRL run that hacked its shaping "
        "reward fell to 0.028x (docs/health.md)",
        "token entropy at or below this share of the first steps' is red",
    )
    entropy_drop_yellow: float = _threshold(
        0.3,
        "Cui et al. 2025 (arXiv 2505.22617), Theorem 2: a step changes the entropy by about "
        "-eta * Cov(log pi, A), so a positive covariance says a fall goes on; the share "
        f"is {_OURS}",
        "a fall of this share of the token entropy within trend_steps steps, with "
        "Cov(log pi, A) > 0 on each, is yellow",
    )
    length_climb_yellow: float = _threshold(
        0.15,
        f"{_OURS}: Zhang et al. (arXiv 2602.01826) name a surge of the response length as "
        "the early sign of a collapse; healthy runs of the corpus stay at or below 14 % at "
        "the limit",
        "share at the length limit that, rising on each of trend_steps steps, is yellow",
    )
    length_held_red: float = _threshold(
        0.2,
        f"{_OURS}, measured on the corpus of real runs (benchmarks/runs: healthy runs at "
        "most 7 % at the limit held over three steps, 14 % on one step; the lenient-verifier "
        "runs held 20 % 7 and 17 steps before their accuracy halved); the bundled run "
        "reaches 21 % on one step, at most 7 % held",
        "share at the length limit that, held on each of trend_steps steps, is red",
    )
    rise_factor_yellow: float = _threshold(
        3.0,
        "Precision-RL (arXiv 2510.26788): the train/inference KL leaves its level some "
        f"200 to 300 steps before a BF16 run collapses; the factor is {_OURS}",
        "k3 (drift, train/inference) rising on each of trend_steps steps by this factor "
        "in all is yellow",
    )
    ess_fall_yellow: float = _threshold(
        0.05, _OURS, "ESS falling on each of trend_steps steps by this much in all is yellow"
    )
    hack_rise_yellow: float = _threshold(
        0.1,
        f"{_OURS}: a reward function 10 % above its first steps (or within 10 % of its "
        "maximum) while correctness falls",
        "a reward function's rise (share of its first steps' mean) that, with correctness "
        "falling, makes a reward-hacking finding",
    )
    hack_fall_yellow: float = _threshold(
        0.2,
        f"{_OURS}, measured on the corpus of real runs (a shaping reward for length beside "
        "the verifier: the correct share fell 20 % below its first steps' by step 7 or 8, "
        "below half its best by step 17 or 18)",
        "correct share fallen by this share of its first steps' while a reward function "
        "rises: yellow",
    )
    hack_fall_red: float = _threshold(
        0.4, f"{_OURS}, measured on the corpus (as hack_fall_yellow)",
        "correct share fallen by this share while a reward function rises: red",
    )  # fmt: skip
    relative_yellow: float = _threshold(
        10.0,
        _RELATIVE_MEASURED,
        "against a baseline: a quantity this many times the baseline's (or this many "
        "times smaller, for one that is bad when small) is yellow",
    )
    relative_red: float = _threshold(
        100.0, _RELATIVE_MEASURED, "against a baseline: this many times is red"
    )

    @classmethod
    def source(cls, name: str) -> str:
        """Where the default of field ``name`` comes from."""
        return str(_field(name).metadata["source"])

    @classmethod
    def doc(cls, name: str) -> str:
        """What field ``name`` bounds."""
        return str(_field(name).metadata["doc"])

    @classmethod
    def names(cls) -> tuple[str, ...]:
        return tuple(f.name for f in fields(cls))

    def overridden(self) -> tuple[str, ...]:
        """The fields whose value differs from the default."""
        default = Thresholds()
        return tuple(n for n in self.names() if getattr(self, n) != getattr(default, n))


@functools.cache
def _field(name: str) -> Any:
    # read for the source of every finding, and a timeline judges each step twice
    for item in fields(Thresholds):
        if item.name == name:
            return item
    raise KeyError(name)


@dataclass(frozen=True)
class Finding:
    """One line of the verdict: what was judged, the number, the threshold and the level.

    ``value`` is the number judged (None only for a "not computed" line); ``threshold``
    the bound it was judged against (the one crossed, or the first it stays within);
    ``source`` where that threshold comes from; ``key`` the dotted report path of the
    number (or a derived name such as ``trust_region.degenerate_share``).
    """

    key: str
    level: Level
    value: float | None
    threshold: float | None
    text: str
    source: str
    name: str = ""

    @property
    def short_name(self) -> str:
        """What the finding is about in a few words (the bottom line lists these): ``name``,
        else the text up to its first ``:`` or ``=``."""
        if self.name:
            return self.name
        return re.split(r"[:=]", self.text, maxsplit=1)[0].strip()


@dataclass(frozen=True)
class Note:
    """A line about the analysis itself, not about the run: an estimate of ratioscope's
    that may mislead (FPA approximated), a check the dump gives no input for.

    A note has no level: it never makes a run yellow, and the verdict's counts and
    bottom line leave it out. ``value`` is the number behind it, if any.
    """

    key: str
    value: float | None
    text: str
    source: str


_PROBLEM_ORDER: tuple[Level, ...] = ("red", "yellow")


@dataclass(frozen=True)
class Verdict:
    """The findings of one report, in a fixed order; ``level`` is the worst of them.

    ``notes`` are about the analysis, not the run: they are kept apart and never count.
    """

    findings: tuple[Finding, ...]
    overridden: tuple[str, ...] = ()
    notes: tuple[Note, ...] = ()
    #: a run's verdict (``timeline``): the first steps whose per-step verdict was yellow
    #: (or worse) and red; None for a single report
    first_yellow: int | None = None
    first_red: int | None = None

    @property
    def level(self) -> Level:
        if not self.findings:
            return "green"
        return max((f.level for f in self.findings), key=LEVELS.index)

    def count(self, level: Level) -> int:
        return sum(1 for finding in self.findings if finding.level == level)

    def __iter__(self) -> Iterator[Finding]:
        return iter(self.findings)

    def problems(self) -> tuple[str, ...]:
        """The short names of the red, then the yellow findings, each name once."""
        names: list[str] = []
        for level in _PROBLEM_ORDER:
            for finding in self.findings:
                if finding.level == level and finding.short_name not in names:
                    names.append(finding.short_name)
        return tuple(names)

    def bottom_line(self) -> str:
        """``healthy: nothing to do``, or ``2 problems: policy drift, PPO clip fraction``
        (red before yellow; notes never count).

        >>> green = Finding("a", "green", 0.0, 1.0, "a = 0, at or below 1", "s")
        >>> Verdict((green,)).bottom_line()
        'healthy: nothing to do'
        >>> red = Finding("b", "red", 2.0, 1.0, "b = 2, above 1", "s", name="b")
        >>> Verdict((green, red)).bottom_line()
        '1 problem: b'
        """
        names = self.problems()
        firsts = [
            f"first {level} at step {step}"
            for level, step in (("yellow", self.first_yellow), ("red", self.first_red))
            if step is not None
        ]
        when = f"; {', '.join(firsts)}" if firsts else ""
        if not names:
            return "healthy: nothing to do" + when
        return f"{len(names)} problem{'s' if len(names) > 1 else ''}: {', '.join(names)}{when}"

    def to_dict(self) -> dict[str, Any]:
        """The JSON document (``--verdict-json``): level, counts, bottom line, every
        finding, and the notes about the analysis apart from them."""
        from ratioscope.io.documents import to_jsonable

        document: dict[str, Any] = {
            "kind": "verdict",
            "level": self.level,
            "counts": {level: self.count(level) for level in LEVELS},
            "bottom_line": self.bottom_line(),
        }
        if self.first_yellow is not None or self.first_red is not None:
            document["first_yellow"], document["first_red"] = self.first_yellow, self.first_red
        document |= {
            "findings": self.findings,
            "notes": self.notes,
            "overridden_thresholds": self.overridden,
        }
        return to_jsonable(document)

    def write_json(self, path: str | Path) -> None:
        from ratioscope.io.documents import write_json

        write_json(self.to_dict(), path)

    @classmethod
    def from_dict(cls, document: Mapping[str, Any]) -> Verdict:
        """The verdict a :meth:`to_dict` document holds (a cached step's, a timeline's).

        Raises:
            ValueError: a finding or note without its fields, or of an unknown level.
        """
        from ratioscope.io.documents import from_jsonable

        findings = tuple(
            from_jsonable(Finding, item, "$.findings") for item in document.get("findings") or ()
        )
        if any(f.level not in LEVELS for f in findings):
            raise ValueError("a finding of an unknown level")
        notes = tuple(from_jsonable(Note, item, "$.notes") for item in document.get("notes") or ())
        overridden = tuple(str(name) for name in document.get("overridden_thresholds") or ())
        return cls(
            findings,
            overridden,
            notes,
            first_yellow=document.get("first_yellow"),
            first_red=document.get("first_red"),
        )


# --------------------------------------------------------------------------- judging


def _num(value: float) -> str:
    """A number as the verdict prints it: 3 significant digits, 1.3e-4 for small ones.

    >>> _num(0.00013196), _num(0.001), _num(0.4006), _num(1.211e-13), _num(0.01)
    ('1.3e-4', '1e-3', '0.401', '1.2e-13', '0.01')
    """
    if value == 0:
        return "0"
    if abs(value) < 1e-2 or abs(value) >= 1e5:
        mantissa, exponent = f"{value:.1e}".split("e")
        return f"{mantissa.removesuffix('.0')}e{int(exponent)}"
    return f"{value:.3g}"


def _pct(value: float) -> str:
    return f"{100 * value:.2g} %" if 0 < abs(value) < 0.01 else f"{100 * value:.3g} %"


def _above(
    key: str, value: float, yellow: str, red: str | None, t: Thresholds, what: str,
    show: Any = _num, unit: str = "", advice: str = "", name: str = "",
) -> Finding:  # fmt: skip
    """A finding for a quantity that is bad when large: "what = value unit, above y"."""
    y = getattr(t, yellow)
    r = None if red is None else getattr(t, red)
    if red is not None and r is not None and value > r:
        level: Level = "red"
        bound, field_name, relation = r, red, f"above {show(r)}"
    elif value > y:
        level, bound, field_name, relation = "yellow", y, yellow, f"above {show(y)}"
    else:
        level, bound, field_name, relation = "green", y, yellow, f"at or below {show(y)}"
    text = f"{what} = {show(value)}{unit}, {relation}" + (advice if level != "green" else "")
    return Finding(key, level, value, bound, text, Thresholds.source(field_name), name)


def _below(
    key: str, value: float, yellow: str, red: str, t: Thresholds, what: str, advice: str = "",
    name: str = "",
) -> Finding:  # fmt: skip
    """A finding for a quantity that is bad when small: "what = value, below y"."""
    y, r = getattr(t, yellow), getattr(t, red)
    if value < r:
        level: Level = "red"
        bound, field_name, relation = r, red, f"below {_num(r)}"
    elif value < y:
        level, bound, field_name, relation = "yellow", y, yellow, f"below {_num(y)}"
    else:
        level, bound, field_name, relation = "green", y, yellow, f"at or above {_num(y)}"
    shown = f"{value:.4g}" if value > 0.999 else _num(value)  # 0.99997 is not 1
    text = f"{what} = {shown}, {relation}" + (advice if level != "green" else "")
    return Finding(key, level, value, bound, text, Thresholds.source(field_name), name)


def _finite(value: Any) -> TypeGuard[float]:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _train_inference(stats: MismatchStats, key: str, label: str, t: Thresholds) -> list[Finding]:
    findings = []
    if _finite(stats.k3):
        findings.append(
            _above(
                f"{key}.k3", stats.k3, "rollout_k3_yellow", "rollout_k3_red", t,
                f"{label}: k3", unit=" per token",
                advice=", where truncated IS is usually recommended", name=label,
            )
        )  # fmt: skip
    if _finite(stats.ess):
        findings.append(
            _below(
                f"{key}.ess", stats.ess, "rollout_ess_yellow", "rollout_ess_red", t,
                f"{label}: token ESS",
                advice=": the engine's samples are worth fewer tokens than they count",
                name=label,
            )
        )  # fmt: skip
    if _finite(stats.frac_outside):
        c = stats.is_threshold
        findings.append(
            _above(
                f"{key}.frac_outside", stats.frac_outside, "rollout_outside_yellow",
                "rollout_outside_red", t,
                f"{label}: tokens with r outside [1/{c:g}, {c:g}]", show=_pct,
                advice=f", which truncated IS at C = {c:g} would cut", name=label,
            )
        )  # fmt: skip
    return findings


def verdict(
    report: JudgedReport,
    thresholds: Thresholds | None = None,
    baseline: JudgedReport | None = None,
) -> Verdict:
    """Grade the report's headline numbers against ``thresholds`` (defaults: docs/health.md).

    Findings, in this order, each only when the report has its number: train/inference
    mismatch (k3, token ESS, share outside the truncation band), policy drift (k3 of the
    policy row), the largest log-ratio (overflow of exp), the exactly-on-policy first
    mini-batch (with a ``minibatch`` key), PPO clip fraction, switch frequency of the raw
    ratios (informational, always green), covariance concentration (top 1 %) and QUATRO
    degenerate groups; then, with a ``baseline`` report, one finding per quantity of
    :data:`RELATIVE` that both reports have ("policy drift k3 = 1.5e-2, 97x the
    baseline's").

    Notes, about the analysis rather than the run (never counted): a report without the
    train/inference row gets a "not computed" note naming what it needs, and the FPA
    section's approximation is compared with its exact value where both exist.
    """
    t = thresholds or Thresholds()
    findings: list[Finding] = []
    notes: list[Note] = []
    mismatch = report.mismatch
    policy_pair = (mismatch.pairs.get("policy") or "") if mismatch is not None else ""
    # with current/engine the policy row is itself the trainer/engine comparison
    policy_is_engine = "engine" in policy_pair and "old" not in policy_pair
    if mismatch is not None and mismatch.rollout is not None:
        findings += _train_inference(
            mismatch.rollout, "mismatch.rollout", "train/inference mismatch", t
        )
    elif mismatch is not None and mismatch.policy is not None and policy_is_engine:
        findings += _train_inference(
            mismatch.policy, "mismatch.policy", "trainer/engine mismatch", t
        )
    else:
        notes.append(
            Note(
                "mismatch.rollout",
                None,
                "train/inference mismatch: not computed: needs the inference engine's "
                "log-probs ('rollout_log_probs') beside 'old_log_probs' in the dumps",
                "a check the dump gives no input for (docs/health.md)",
            )
        )
    drift = None if mismatch is None or policy_is_engine else mismatch.policy
    if drift is not None and _finite(drift.k3):
        findings.append(_drift_finding(report, drift, t))
    findings += _overflow_findings(report, t)
    findings += _on_policy_findings(report, t)
    findings += _lag_findings(report, t)
    findings += _sampling_findings(report, t)
    findings += _ratio_findings(report, t)
    findings += _objective_findings(report, t)
    findings += _vitals_findings(report, t)
    if baseline is not None:
        findings += relative_findings(report, baseline, t)
        notes += _baseline_notes(report, baseline)
    notes += _analysis_notes(report)
    return Verdict(tuple(findings), t.overridden(), tuple(notes))


def _overflow_findings(report: JudgedReport, t: Thresholds) -> list[Finding]:
    """The largest |log-ratio| over both pairs: exp of it overflows float32 above 88.72."""
    mismatch = report.mismatch
    if mismatch is None:
        return []
    rows = [(name, getattr(mismatch, name)) for name in ("policy", "rollout")]
    found = [(s.abs_diff_max, name) for name, s in rows if s is not None]
    found = [(value, name) for value, name in found if _finite(value)]
    if not found:
        return []
    value, name = max(found)
    pair = mismatch.pairs.get(name) or name
    return [
        _above(
            f"mismatch.{name}.abs_diff_max", value, "log_ratio_max_yellow", "log_ratio_max_red",
            t, f"largest |log-ratio| ({pair})",
            advice=(": exp of it overflows float32, the ratio is inf and the loss non-finite"
                    if value > t.log_ratio_max_red
                    else ": beyond the [-20, 20] that prime-rl clamps it to"),
            name="ratio overflow" if value > t.log_ratio_max_red else "extreme log-ratio",
        )
    ]  # fmt: skip


def _drift_finding(report: JudgedReport, pooled: MismatchStats, t: Thresholds) -> Finding:
    """Policy drift: k3 between the current and the old policy, judged where it is largest.

    Spinning Up checks the KL after every update of the policy epochs and stops once it
    passes 1.5 x target_kl: what it bounds is the KL each update reaches, not its mean
    over the updates. With the ``minibatch`` key, the k3 of mini-batch m is the KL the
    policy had reached after m updates (on that mini-batch's tokens), so the largest of
    them is judged; the step's pooled k3, which averages in the on-policy mini-batch 0,
    is named beside it. Without the key, the pooled k3 is all there is.
    """
    key, value, where = "mismatch.policy.k3", pooled.k3, ""
    staleness, pairs = report.staleness, (report.mismatch.pairs if report.mismatch else {})
    if staleness is not None and pairs.get("policy") == "current/old":
        for index, stats in staleness.minibatches.items():
            if stats.tokens > 0 and _finite(stats.k3) and stats.k3 > value:
                key, value = f"staleness.minibatches.{index}.k3", stats.k3
                where = (
                    f" in mini-batch {index} (after {index} update{'s' * (index != 1)}; "
                    f"pooled {_num(pooled.k3)})"
                )
    return _above(
        key, value, "drift_k3_yellow", "drift_k3_red", t,
        "policy drift (current vs old): k3", unit=f" per token{where}",
        advice=": the policy moved far within one batch", name="policy drift",
    )  # fmt: skip


def _on_policy_findings(report: JudgedReport, t: Thresholds) -> list[Finding]:
    """Log-ratios that must be exactly 0 (PPO ratio only: current vs old): those of the
    whole step where the trainer's recorded settings make every update of it the first
    after sampling (:func:`_whole_step_on_policy`), else those of the first mini-batch of
    the first epoch (needs the ``minibatch`` key and mini-batch 0 in the dumps)."""
    staleness, mismatch = report.staleness, report.mismatch
    if mismatch is None or mismatch.pairs.get("policy") != "current/old":
        return []
    whole = _whole_step_on_policy(report, t)
    if whole is not None:
        return [whole]
    if staleness is None:
        return []
    first = staleness.minibatches.get(0)
    if first is None or first.tokens == 0 or not _finite(first.exact_on):
        return []
    nonzero = 1.0 - first.exact_on
    mean_z = f", mean |z| {_num(first.mean_abs_z)}" if nonzero > 0 else ""
    finding = _above(
        "staleness.minibatches.0.exact_on", nonzero, "on_policy_nonzero_yellow", None, t,
        "first mini-batch (must be exactly on-policy): tokens with log-ratio != 0",
        show=_pct, unit=f" of {first.tokens:,}{mean_z}",
        advice=": the log-probs were not recomputed bit for bit (trainer noise)",
        name="trainer noise",
    )  # fmt: skip
    return [finding]


def _lag_findings(report: JudgedReport, t: Thresholds) -> list[Finding]:
    """Async training (``policy_version`` in the dumps): tokens sampled further behind
    than the trainer allows (with ``--max-lag``), and a mismatch that grows with the lag
    (the k3 of the largest lag against the smallest lag's, where that k3 matters)."""
    section = report.policy_lag
    if section is None:
        return []
    findings = []
    tokens = sum(s.tokens for s in section.lags.values())
    if section.max_allowed is not None and tokens:
        share = section.beyond_allowed / tokens
        findings.append(
            _above(
                "policy_lag.beyond_allowed", share, "lag_beyond_red", "lag_beyond_red", t,
                f"tokens sampled more than {section.max_allowed} version(s) behind",
                show=_pct, unit=f" (largest lag {section.max_lag})",
                advice=": the trainer's staleness guard let them through",
                name="policy lag",
            )
        )  # fmt: skip
    growth = _lag_growth(section)
    if growth is not None:
        key, ratio, least, lag, k3 = growth
        if k3 > t.rollout_k3_yellow:
            findings.append(
                _above(
                    key, ratio, "lag_mismatch_growth_yellow", None, t,
                    f"mismatch at lag {lag} over lag {least} (k3 {_num(k3)})", show=_num,
                    unit="x",
                    advice=": stale samples drift further; bound the lag or correct by IS",
                    name="mismatch grows with lag",
                )
            )  # fmt: skip
    return findings


def _sampling_findings(report: JudgedReport, t: Thresholds) -> list[Finding]:
    """The engine's sampling distribution (the ``sampling`` section): a temperature on
    one side only (the log-ratio's slope on the log-prob, where the line explains it),
    and sampled tokens outside the stated top-p/top-k set."""
    section = report.sampling
    if section is None:
        return []
    findings = []
    check = section.temperature
    if check is not None and _finite(check.slope) and _finite(check.correlation):
        if abs(check.correlation) < 0.5:  # engine noise, no line: nothing to grade
            text = (
                f"slope of the {check.pair} log-ratio on the log-prob = {_num(check.slope)} "
                f"(r = {check.correlation:.2f}): no temperature on one side"
            )
            source = Thresholds.source("temperature_slope_yellow")
            findings.append(
                Finding(
                    "sampling.temperature.slope", "green", abs(check.slope),
                    t.temperature_slope_yellow, text, source, "temperature mismatch",
                )
            )  # fmt: skip
        else:
            findings.append(
                _above(
                    "sampling.temperature.slope", abs(check.slope), "temperature_slope_yellow",
                    "temperature_slope_red", t,
                    f"slope of the {check.pair} log-ratio on the log-prob (|slope|)",
                    unit=f", an engine at {check.implied_temperature:.3g} x the trainer's "
                    f"temperature (r = {check.correlation:.2f})",
                    advice=": a temperature applied on one side only; divide the trainer's "
                    "logits by the engine's temperature",
                    name="temperature mismatch",
                )
            )  # fmt: skip
    cut = section.truncation
    if cut is not None and cut.tokens:
        findings.append(
            _above(
                "sampling.truncation.outside", cut.outside, "outside_nucleus_yellow",
                "outside_nucleus_red", t, "sampled tokens outside the stated top-p/top-k set",
                show=_pct, unit=f" of {cut.tokens:,}",
                advice=": the engine sampled with other settings than stated",
                name="outside the nucleus",
            )
        )  # fmt: skip
        if _finite(cut.abs_log_shift):
            engine = ""
            if cut.engine_vs_sampling is not None and cut.engine_vs_full is not None:
                closer = "stated" if cut.engine_vs_sampling < cut.engine_vs_full else "full"
                engine = f"; the engine's log-probs are closer to the {closer} distribution"
            findings.append(
                _above(
                    "sampling.truncation.abs_log_shift", cut.abs_log_shift,
                    "sampling_shift_yellow", "sampling_shift_red", t,
                    "full softmax vs the stated sampling distribution: mean |log q - log p|",
                    unit=f" nats per token{engine}",
                    advice=": a ratio whose behaviour side is the full softmax at T = 1 is "
                    "biased; compute it from the tempered, truncated log-probs",
                    name="sampling bias",
                )
            )  # fmt: skip
    return findings


def _lag_growth(section: PolicyLagSection) -> tuple[str, float, int, int, float] | None:
    """(key, k3 of the largest lag / k3 of the smallest, the two lags, the largest's
    k3), on old/engine where the split exists, or None with fewer than two lags."""
    present = {lag: s for lag, s in section.lags.items() if s.tokens}
    if len(present) < 2:
        return None
    lag, least = max(present), min(present)
    first, last = present[least], present[lag]
    if first.split is not None and last.split is not None:
        key = f"policy_lag.lags.{lag}.split.k3.old/engine"
        base, k3 = first.split.k3["old/engine"], last.split.k3["old/engine"]
    else:
        key, base, k3 = f"policy_lag.lags.{lag}.k3", first.k3, last.k3
    if not (_finite(base) and _finite(k3)) or base <= 0:
        return None
    return key, k3 / base, least, lag, k3


def _whole_step_on_policy(report: JudgedReport, t: Thresholds) -> Finding | None:
    """Every log-ratio of the step must be exactly 0 when the settings the trainer's
    capture recorded say so (TRL, verl: :meth:`~ratioscope.data.trainer_settings.
    TrainerSettings.whole_step_on_policy`); judged on the share of tokens outside the
    exact band of the ratios section (``token_on_band`` at its default, r = 1 up to
    float32 rounding)."""
    from ratioscope.data.trainer_settings import TrainerSettings
    from ratioscope.functional.token_stats import EXACT_ON_BAND

    block = (report.params or {}).get("trainer")
    if not isinstance(block, Mapping) or not isinstance(block.get("settings"), Mapping):
        return None
    settings = TrainerSettings(
        framework=str(block.get("framework")), settings=block["settings"],
        source=str(block.get("source") or ""),
    )  # fmt: skip
    reason = settings.whole_step_on_policy() if settings.recorded else None
    band = ((report.params or {}).get("analysis") or {}).get("token_on_band")
    token = (report.ratios or {}).get("token")
    pooled = None if token is None else token.proportion_pooled
    if reason is None or pooled is None or not _finite(pooled.get("on")):
        return None
    if band is not None and tuple(band) != EXACT_ON_BAND:
        return None  # another band: "on" is no longer "exactly 1"
    finding = _above(
        "ratios.token.proportion_pooled.on", 1.0 - float(pooled["on"]),
        "on_policy_nonzero_yellow", None, t,
        "whole step on-policy by the trainer's settings: tokens with log-ratio != 0",
        show=_pct, advice=": the log-probs were not recomputed bit for bit (trainer noise)",
        name="trainer noise",
    )  # fmt: skip
    cited = _ON_POLICY_SOURCES.get(settings.framework, "")
    return replace(finding, source=f"{reason} ({settings.source}); {cited}")


@dataclass(frozen=True)
class Relative:
    """A quantity judged against a baseline.

    ``path`` is its dotted report path, ``label`` its words, ``direction`` "up" when it
    is bad when large, "down" when bad when small; ``floor`` the least value ("up") or
    baseline value ("down") judged at all (below it a ratio of two roundings says
    nothing); ``share`` prints it as a percentage.
    """

    path: str
    label: str
    direction: Literal["up", "down"]
    floor: float
    share: bool = False


#: the quantities judged against a baseline (``analyze --baseline``, ``timeline``)
RELATIVE: tuple[Relative, ...] = (
    Relative("mismatch.policy.k3", "policy drift k3", "up", 1e-6),
    Relative("mismatch.rollout.k3", "train/inference k3", "up", 1e-6),
    Relative("ratios.token.clip_fraction", "PPO clip fraction", "up", 1e-3, share=True),
    Relative(
        "ratios.token.proportion_pooled.on", "exactly on-policy tokens", "down", 0.01, share=True
    ),
    Relative("vitals.entropy.mean", "token entropy", "down", 1e-6),
    Relative(
        "vitals.length.at_limit_share", "responses at the length limit", "up", 0.01, share=True
    ),
    Relative("vitals.advantages.zero_share", "zero-advantage tokens", "up", 0.01, share=True),
)


def report_value(report: JudgedReport | Mapping[str, Any], path: str) -> float | None:
    """The number at a dotted path of a report (a typed one, its JSON, or a flat mapping
    of dotted paths to numbers), or None."""
    if isinstance(report, Mapping) and path in report:
        flat = report[path]
        return float(flat) if _finite(flat) else None
    node: Any = report
    for part in path.split("."):
        if node is None:
            return None
        node = node.get(part) if isinstance(node, Mapping) else getattr(node, part, None)
    return float(node) if _finite(node) else None


def relative_findings(
    report: JudgedReport | Mapping[str, Any],
    baseline: JudgedReport | Mapping[str, Any],
    t: Thresholds,
    what: str = "the baseline's",
    quantities: tuple[Relative, ...] = RELATIVE,
) -> list[Finding]:
    """One finding per quantity both reports have: ``value / baseline`` (``baseline /
    value`` for those bad when small) against ``relative_yellow`` / ``relative_red``.

    ``what`` names the baseline in the text ("the baseline's", "steps 2-6's"); the
    finding's key is ``relative.<path>``.
    """
    findings = []
    for item in quantities:
        value, base = report_value(report, item.path), report_value(baseline, item.path)
        if value is None or base is None:
            continue
        if item.direction == "up":
            if value <= item.floor:
                continue  # too small to judge: a ratio of two roundings says nothing
            factor = value / max(base, item.floor)
        else:
            if base < item.floor:
                continue
            factor = math.inf if value <= 0 else base / value
        findings.append(_relative(item, value, base, factor, t, what))
    return findings


def _relative(
    item: Relative, value: float, base: float, factor: float, t: Thresholds, what: str
) -> Finding:
    """ "policy drift k3 = 1.5e-2, 97x the baseline's 1.5e-4: above 10x"."""
    y, r = t.relative_yellow, t.relative_red
    level: Level = "red" if factor > r else "yellow" if factor > y else "green"
    bound, field_name = (r, "relative_red") if level == "red" else (y, "relative_yellow")
    show = _pct if item.share else _num
    times = f"{_num(value / base)}x {what} {show(base)}" if base > 0 else f"{what} {show(base)}"
    if item.direction == "up":
        limit = f"{'above' if level != 'green' else 'within'} {_num(bound)}x"
    else:
        limit = f"{'below' if level != 'green' else 'within'} 1/{_num(bound)}"
    text = f"{item.label} = {show(value)}, {times}: {limit}"
    return Finding(
        f"relative.{item.path}", level, value, bound, text, Thresholds.source(field_name),
        f"{item.label} vs baseline",
    )  # fmt: skip


#: how many of a run's first steps form the baseline its later steps are judged against
FIRST_STEPS = 3


def first_steps_findings(
    steps: Sequence[tuple[int, Mapping[str, Any]]],
    t: Thresholds | None = None,
    first: int = FIRST_STEPS,
    quantities: tuple[Relative, ...] = RELATIVE,
) -> list[Finding]:
    """A run's later steps judged against its own first steps (``timeline``).

    ``steps``: (step, report or flat ``{path: value}``) in step order. The baseline of
    each quantity is the median over the first ``first`` steps (the first step alone for
    runs of up to three steps); each later step is judged as by :func:`relative_findings`.
    One finding per quantity with a yellow or red step, naming the steps and the worst;
    one green line when every later step stays within the bounds; nothing for a run of
    one step. :class:`FirstSteps` gives the same one step at a time.
    """
    judge = FirstSteps(t, first, quantities)
    for step, document in steps:
        judge.add(step, document)
    return judge.findings()


#: the steps a sentence names in full; past them, the first three and the last two
NAMED_STEPS = 6


def named_steps(first: Sequence[int], last: Sequence[int], count: int) -> str:
    """``3, 7, 12``; past :data:`NAMED_STEPS`, ``3, 7, 12, ..., 880, 903 (41 steps)``: a
    long run's sentence stays short (it is kept after every step). ``first``: the first
    steps (all of them up to :data:`NAMED_STEPS`), ``last``: the last two."""
    if count <= NAMED_STEPS:
        return ", ".join(str(step) for step in first[:count])
    head = ", ".join(str(step) for step in first[:3])
    tail = ", ".join(str(step) for step in last[-2:])
    return f"{head}, ..., {tail} ({count} steps)"


@dataclass
class Beyond:
    """The later steps of a run beyond one quantity's bound, kept in constant memory:
    the worst (its level first, then its multiple of the baseline: the largest for a
    quantity that goes wrong upwards, the smallest otherwise; the earliest of equals),
    how many, and the first and last of them by number."""

    worst: Finding | None = None
    worst_step: int = 0
    count: int = 0
    first: list[int] = field(default_factory=list)
    last: list[int] = field(default_factory=list)
    _rank: tuple[int, float] = (-1, -math.inf)

    def add(self, step: int, finding: Finding, direction: str) -> None:
        sign = 1.0 if direction == "up" else -1.0
        rank = (LEVELS.index(finding.level), sign * (finding.value or 0.0))
        if self.worst is None or rank > self._rank:
            self.worst, self.worst_step, self._rank = finding, step, rank
        self.count += 1
        if len(self.first) < NAMED_STEPS:
            self.first.append(step)
        self.last = [*self.last[-1:], step]

    def named(self) -> str:
        return named_steps(self.first, self.last, self.count)


class FirstSteps:
    """:func:`first_steps_findings` of a run that grows one step at a time: after each
    :meth:`add`, :meth:`findings` is what :func:`first_steps_findings` of the steps so
    far gives, at a cost per step that does not grow with the run."""

    def __init__(
        self,
        t: Thresholds | None = None,
        first: int = FIRST_STEPS,
        quantities: tuple[Relative, ...] = RELATIVE,
    ) -> None:
        self.t = t or Thresholds()
        self.first = first
        self.quantities = quantities
        #: (step, values) of the steps up to ``first`` (until the baseline is fixed)
        self.head: list[tuple[int, dict[str, float | None]]] = []
        self.steps = 0
        #: path -> baseline value, fixed once the run has more than ``first`` steps
        self.baseline: dict[str, float] | None = None
        self.what = ""
        #: path -> the later steps beyond its bound (the worst, the count, which)
        self.bad: dict[str, Beyond] = {}
        self.judged_any = False

    def add(self, step: int, document: Any) -> None:
        """The next step's report (typed, its JSON, or a flat ``{path: value}``)."""
        self.steps += 1
        values = {item.path: report_value(document, item.path) for item in self.quantities}
        if self.baseline is None:
            self.head.append((step, values))
            if self.steps <= self.first:
                return
            # the run outgrew its first steps: their medians are the baseline from now on
            base = self.head[: self.first]
            self.baseline = {}
            for item in self.quantities:
                present = sorted(v for _, row in base if (v := row[item.path]) is not None)
                if present:
                    self.baseline[item.path] = _median(present)
            self.what = self._what(base)
            self.bad, self.judged_any = {}, False
            self.head = []
        self._judge(step, values, self.baseline, self.what)

    def findings(self) -> list[Finding]:
        """The findings of the steps so far (see :func:`first_steps_findings`)."""
        if self.baseline is not None:
            return self._built(self.bad, self.judged_any, self.what)
        if len(self.head) < 2:
            return []
        # up to ``first`` steps: the first step alone is the baseline of the others
        bad: dict[str, Beyond] = {}
        judged_any = False
        first_step, first_values = self.head[0]
        reference = {k: v for k, v in first_values.items() if v is not None}
        what = self._what(self.head[:1])
        for step, values in self.head[1:]:
            judged_any = self._judge(step, values, reference, what, bad) or judged_any
        del first_step
        return self._built(bad, judged_any, what)

    @staticmethod
    def _what(base: Sequence[tuple[int, Any]]) -> str:
        names = ", ".join(str(step) for step, _ in base)
        return f"step {names}'s" if len(base) == 1 else f"the median of steps {names},"

    def _judge(
        self,
        step: int,
        values: Mapping[str, float | None],
        reference: Mapping[str, float],
        what: str,
        bad: dict[str, Beyond] | None = None,
    ) -> bool:
        """Judge one later step; records into ``bad`` (default: the run's own)."""
        into = self.bad if bad is None else bad
        judged = False
        for item in self.quantities:
            if item.path not in reference:
                continue
            found = relative_findings(values, reference, self.t, what, (item,))
            judged = judged or bool(found)
            for finding in found:
                if finding.level != "green":
                    into.setdefault(item.path, Beyond()).add(step, finding, item.direction)
        if bad is None:
            self.judged_any = self.judged_any or judged
        return judged

    def _built(self, bad: Mapping[str, Beyond], judged_any: bool, what: str) -> list[Finding]:
        findings: list[Finding] = []
        for item in self.quantities:
            beyond = bad.get(item.path)
            if beyond is None or beyond.worst is None:
                continue
            worst = beyond.worst
            findings.append(
                Finding(
                    f"relative.{item.path}", worst.level, worst.value, worst.threshold,
                    f"{worst.text} at step {beyond.worst_step} (beyond the bound at step"
                    f"{'s' if beyond.count > 1 else ''} {beyond.named()})",
                    worst.source, f"{item.label} vs first steps",
                )
            )  # fmt: skip
        if judged_any and not findings:
            labels = ", ".join(item.label for item in self.quantities)
            names = _WHAT_STEPS.sub(r"\1", what)
            findings.append(
                Finding(
                    "relative", "green", None, self.t.relative_yellow,
                    f"against its first steps ({names}): every later step within "
                    f"{_num(self.t.relative_yellow)}x on {labels}",
                    Thresholds.source("relative_yellow"), "first steps",
                )
            )  # fmt: skip
        return findings


#: the steps a baseline's words name ("the median of steps 1, 2, 3," / "step 1's")
_WHAT_STEPS = re.compile(r"^(?:the median of steps |step )(.*?)(?:,|'s)$")


def _median(sorted_values: Sequence[float]) -> float:
    middle = len(sorted_values) // 2
    if len(sorted_values) % 2:
        return sorted_values[middle]
    return 0.5 * (sorted_values[middle - 1] + sorted_values[middle])


def _ratio_findings(report: JudgedReport, t: Thresholds) -> list[Finding]:
    findings: list[Finding] = []
    token = (report.ratios or {}).get("token")
    if token is None:
        return findings
    if _finite(token.clip_fraction):
        low, high = token.clip_band
        findings.append(
            _above(
                "ratios.token.clip_fraction", token.clip_fraction, "clip_fraction_yellow",
                "clip_fraction_red", t, f"PPO clip fraction (band 1 - {low:g}, 1 + {high:g})",
                show=_pct, advice=": these tokens get no gradient from the clipped side",
                name="PPO clip fraction",
            )
        )  # fmt: skip
    sf = token.switch_frequency
    if _finite(sf):
        ref = t.switch_frequency_reference
        side = "above" if sf > ref else "at or below"
        findings.append(
            Finding(
                "ratios.token.switch_frequency",
                "green",
                sf,
                ref,
                f"noise of raw ratios: switch frequency = {_num(sf)}, {side} the {_num(ref)} "
                "of KPO Table 2 (informational; the Kalman-filtered row is the one to read)",
                Thresholds.source("switch_frequency_reference"),
                "raw ratio noise",
            )
        )
    return findings


def _objective_findings(report: JudgedReport, t: Thresholds) -> list[Finding]:
    findings: list[Finding] = []
    cov = report.covariance
    share = None if cov is None else cov.cumulative_share.get("0.01")
    if share is not None and _finite(share):
        findings.append(
            _above(
                "covariance.cumulative_share.0.01", share, "covariance_top1_yellow", None, t,
                "covariance concentration: share of sum |c| in the top 1 % of tokens",
                show=_pct, advice=": a few tokens dominate the update (what CW-GRPO reweights)",
                name="covariance concentration",
            )
        )  # fmt: skip
    tr = report.trust_region
    if tr is not None and tr.groups > 0:
        degenerate = tr.degenerate / tr.groups
        findings.append(
            _above(
                "trust_region.degenerate_share", degenerate, "degenerate_yellow",
                "degenerate_red", t, "QUATRO degenerate groups", show=_pct,
                unit=f" ({tr.degenerate} of {tr.groups}; {tr.degenerate_all_equal} with all "
                "rewards equal)",
                advice=": these groups give no gradient", name="degenerate groups",
            )
        )  # fmt: skip
    return findings


def _vitals_findings(report: JudgedReport, t: Thresholds) -> list[Finding]:
    """Entropy level, responses at the length limit, equal-reward groups and
    zero-advantage tokens, from the ``vitals`` section."""
    vitals = getattr(report, "vitals", None)
    if vitals is None:
        return []
    findings: list[Finding] = []
    entropy = vitals.entropy
    if entropy is not None and _finite(entropy.mean):
        findings.append(
            _below(
                "vitals.entropy.mean", entropy.mean, "entropy_yellow", "entropy_red", t,
                "token entropy: mean (nats)",
                advice=": the policy samples almost deterministically (entropy collapse)",
                name="entropy collapse",
            )
        )  # fmt: skip
    length = vitals.length
    if length is not None and _finite(length.at_limit_share):
        findings.append(
            _above(
                "vitals.length.at_limit_share", length.at_limit_share, "length_limit_yellow",
                "length_limit_red", t, "responses at the length limit", show=_pct,
                unit=f" ({length.at_limit:,} of {vitals.sequences:,} at {length.limit} tokens, "
                f"{length.limit_source})",
                advice=": truncated responses (loops, rambling) get a reward for an "
                "unfinished answer", name="length limit",
            )
        )  # fmt: skip
    groups = vitals.equal_reward_groups
    if groups is not None and groups.groups > 0:
        findings.append(
            _above(
                "vitals.equal_reward_groups.share", groups.share, "equal_groups_yellow",
                "equal_groups_red", t, "groups with all rewards equal", show=_pct,
                unit=f" ({groups.equal} of {groups.groups}: {groups.solved} all correct, "
                f"{groups.failed} all wrong)",
                advice=": their rollouts get A = 0 and teach nothing", name="equal-reward groups",
            )
        )  # fmt: skip
    advantages = vitals.advantages
    if advantages is not None and _finite(advantages.zero_share):
        findings.append(
            _above(
                "vitals.advantages.zero_share", advantages.zero_share, "zero_advantage_yellow",
                "zero_advantage_red", t, "tokens with advantage exactly 0", show=_pct,
                advice=": they contribute no policy gradient", name="zero-advantage tokens",
            )
        )  # fmt: skip
    return findings


#: analysis parameters that change what a quantity judged against a baseline measures
_COMPARED_PARAMS = ("clip", "token_on_band", "max_length")


def _baseline_notes(report: JudgedReport, baseline: JudgedReport) -> list[Note]:
    """A note when the baseline was analysed with other parameters that change what a
    relative finding compares (the clip band, the on-policy band, the length limit)."""
    mine = (report.params or {}).get("analysis") or {}
    theirs = (baseline.params or {}).get("analysis") or {}
    differ = [k for k in _COMPARED_PARAMS if k in mine and k in theirs and mine[k] != theirs[k]]
    if not differ:
        return []
    shown = "; ".join(f"{k} {theirs[k]} there, {mine[k]} here" for k in differ)
    return [
        Note(
            "relative.params", None,
            f"baseline analysed with other parameters ({shown}): the findings against it "
            "compare different things; analyse both alike",
            "the report's params.analysis",
        )
    ]  # fmt: skip


def _analysis_notes(report: JudgedReport) -> list[Note]:
    """Notes on ratioscope's own estimates: where the FPA approximation and the exact
    value (from dumped logits) disagree on the direction of the change."""
    notes: list[Note] = []
    fp = report.future_policy
    comparison = None if fp is None else fp.comparison
    if comparison is not None:
        exact, approx = comparison.exact_median, comparison.approximation_median
        if comparison.opposite_sides:
            text = (
                f"FPA approximation: median future/current = {approx:.5g} vs {exact:.5g} "
                "exact, on opposite sides of 1: it reads FPA's direction the wrong way "
                "(dump logits)"
            )
        else:
            text = (
                f"FPA approximation: median future/current = {approx:.5g} vs {exact:.5g} "
                "exact, on the same side of 1"
            )
        notes.append(
            Note(
                "future_policy.comparison.opposite_sides",
                approx,
                text,
                "FPA: the approximation over-states log pi_hat by log Z >= 0 "
                "(docs/metrics-objectives.md); 1 separates the directions of change",
            )
        )
    return notes


# --------------------------------------------------------------------------- TOML


def thresholds_from_table(table: Any, source: str | Path) -> Thresholds:
    """:class:`Thresholds` with the values of a ``[thresholds]`` table over the defaults."""
    from ratioscope.judgement.tomlfile import number, suggest

    source = str(source)
    if not isinstance(table, Mapping):
        raise RulesError(source, "'thresholds' must be a table; write [thresholds]")
    names = Thresholds.names()
    values: dict[str, float] = {}
    for key, value in table.items():
        if key not in names:
            raise RulesError(
                source,
                f"[thresholds]: unknown threshold '{key}'{suggest(key, names)}; "
                "docs/health.md lists them",
            )
        values[key] = number(value, "[thresholds]", key, source)
        if not 0 <= values[key] < math.inf:  # shares, k3s, factors, nats: none below 0
            raise RulesError(
                source, f"[thresholds]: '{key}' must be a finite number >= 0, got {value!r}"
            )
    result = Thresholds(**values)
    for name in names:
        if name.endswith("_yellow"):
            red = name[: -len("_yellow")] + "_red"
            if red not in names:
                continue
            y, r = getattr(result, name), getattr(result, red)
            # thresholds of a quantity bad when small: red at or below yellow
            below = name.startswith(("rollout_ess", "entropy")) and name != "entropy_rise_yellow"
            if (r > y) if below else (r < y):
                raise RulesError(
                    source,
                    f"[thresholds]: '{red}' ({r:g}) must be {'at most' if below else 'at least'} "
                    f"'{name}' ({y:g})",
                )
    return result


def load_thresholds(path: str | Path) -> Thresholds:
    """The ``[thresholds]`` table of a TOML file (a ``check`` rules file or its own);
    the defaults when the file has none."""
    from ratioscope.judgement.tomlfile import read_toml

    document = read_toml(path)
    table = document.get("thresholds")
    return Thresholds() if table is None else thresholds_from_table(table, path)
