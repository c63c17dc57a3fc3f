"""A training step's vital signs: token entropy, response length, reward, advantages.

The quantities every RL trainer logs next to its loss (verl's ``actor/entropy``,
``response_length/mean`` and ``response_length/clip_ratio``, ``critic/score/mean``,
``critic/advantages/*``), computed here from the dump itself so that a run without its
tracker logs still shows them, and so that they stream and merge like every other
section: each function returns sums and counts that add (:class:`TokenSums`) or the
values a fixed histogram takes, and the section turns the merged sums into means.

Definitions (valid tokens: ``mask`` True; a response's length: its valid tokens):

* token entropy: the token mean of ``entropy`` over valid tokens (pooled over rows, as
  verl's ``agg_loss(..., "token-mean")`` logs it), and the same over the rows that are
  correct / incorrect;
* within-step entropy change: the token mean of ``entropy - old_entropy`` (the current
  policy's entropy minus the behaviour policy's, on the same tokens);
* length limit: a response is at the limit when its length is >= the limit (a response
  cut by the generation limit has exactly the limit's length);
* advantages: the token mean of ``|A|``, the share of valid tokens with ``A == 0``
  exactly, and the mean over sequences of each sequence's token mean ``|A|``, for the
  sequences no longer / longer than their batch's median length (the split of
  ``ratioscope objectives``, :func:`long_rows`);
* equal-reward groups: groups whose rewards are all equal (GRPO's advantage is 0 on
  every one of their rollouts); those all correct ("solved by every rollout") and
  those all incorrect ("failed by every rollout") are counted apart.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor

from ratioscope.functional.moments import add_fields


@dataclass
class TokenSums:
    """A sum of values and how many there were; ``merge`` adds (float64 sum).

    >>> s = TokenSums(3.0, 2); s.merge(TokenSums(1.0, 2)); s.mean()
    1.0
    """

    total: float = 0.0
    count: int = 0

    def merge(self, other: TokenSums) -> None:
        add_fields(self, other)

    def mean(self) -> float | None:
        """The mean, None when there was no value."""
        return self.total / self.count if self.count else None


def masked_sums(values: Tensor, mask: Tensor) -> TokenSums:
    """Sum and count of ``values`` on the valid tokens.

    Args:
        values: [B, T] float (any value at masked positions).
        mask: [B, T] bool.
    """
    valid = values[mask].double()
    return TokenSums(float(valid.sum()), int(valid.numel()))


def entropy_by_correctness(
    entropy: Tensor, mask: Tensor, correct: Tensor
) -> tuple[TokenSums, TokenSums]:
    """Token entropy sums over the rows that are correct, and over those that are not.

    Args:
        entropy: [B, T] float; mask: [B, T] bool; correct: [B] bool.

    Returns:
        (correct rows' sums, incorrect rows' sums), each over their valid tokens.
    """
    rows = correct.to(device=mask.device, dtype=torch.bool)
    return masked_sums(entropy[rows], mask[rows]), masked_sums(entropy[~rows], mask[~rows])


def entropy_change_sums(entropy: Tensor, old_entropy: Tensor, mask: Tensor) -> TokenSums:
    """Sums of ``entropy - old_entropy`` over valid tokens (the change within the step).

    Args:
        entropy, old_entropy: [B, T] float, the current and the behaviour policy's
            entropy of each position's next-token distribution.
        mask: [B, T] bool.
    """
    return masked_sums(entropy.double() - old_entropy.double(), mask)


def at_limit(lengths: Tensor, limit: int) -> int:
    """Responses whose length reached ``limit`` (``lengths >= limit``). lengths: [B]."""
    return int((lengths >= limit).sum())


def long_rows(lengths: Tensor) -> Tensor:
    """[B] bool: rows longer than the median length of the non-empty rows.

    The split ``ratioscope objectives`` uses for its short/long columns; the median is
    ``torch.quantile``'s (linear interpolation), so an even count splits between the
    two middle lengths. lengths: [B] int.

    >>> long_rows(torch.tensor([1, 2, 3, 4, 0])).tolist()
    [False, False, True, True, False]
    """
    values = lengths.double()
    present = values > 0
    if not bool(present.any()):
        return present
    median = float(torch.quantile(values[present], 0.5))
    return present & (values > median)


@dataclass
class AdvantageVitalSums:
    """Mergeable sums of the advantage vitals (see the module docstring).

    Attributes:
        abs_sum, tokens: sum of |A| over valid tokens, and their number.
        zero: valid tokens with A == 0 exactly.
        short_sum, short_rows: the sum over sequences no longer than their batch's
            median length of each one's token mean |A|, and their number.
        long_sum, long_rows: the same over the sequences longer than the median.
    """

    abs_sum: float = 0.0
    tokens: int = 0
    zero: int = 0
    short_sum: float = 0.0
    short_rows: int = 0
    long_sum: float = 0.0
    long_rows: int = 0

    def merge(self, other: AdvantageVitalSums) -> None:
        add_fields(self, other)


def row_mean_abs(advantages: Tensor, mask: Tensor) -> tuple[Tensor, Tensor]:
    """Per row: the sum of |A| over valid tokens, and the valid tokens.

    Args:
        advantages: [B, T] float; mask: [B, T] bool.

    Returns:
        ([B] float64 sums, [B] int64 counts).
    """
    absolute = torch.where(mask, advantages.double().abs(), 0.0)
    return absolute.sum(dim=1), mask.sum(dim=1)


def advantage_vital_sums(
    row_abs: Tensor, row_tokens: Tensor, zero: int, lengths: Tensor
) -> AdvantageVitalSums:
    """The advantage sums of one batch from its rows' |A| sums.

    Args:
        row_abs: [B] float64, each row's sum of |A| over its valid tokens.
        row_tokens: [B] int, valid tokens with an advantage per row.
        zero: valid tokens with A == 0 in the batch.
        lengths: [B] int, the response lengths that set the short/long split
            (:func:`long_rows`).
    """
    present = row_tokens > 0
    means = torch.where(present, row_abs / row_tokens.clamp_min(1), 0.0)
    long = long_rows(lengths) & present
    short = present & ~long
    return AdvantageVitalSums(
        abs_sum=float(row_abs.sum()),
        tokens=int(row_tokens.sum()),
        zero=zero,
        short_sum=float(means[short].sum()),
        short_rows=int(short.sum()),
        long_sum=float(means[long].sum()),
        long_rows=int(long.sum()),
    )


@dataclass
class GroupCounts:
    """Groups of a batch, and those whose rewards are all equal (``equal``), split into
    those where every rollout is correct (``solved``) or none is (``failed``); an
    equal-reward group with mixed correctness (a reward that does not set correctness)
    is in neither."""

    groups: int = 0
    equal: int = 0
    solved: int = 0
    failed: int = 0

    def merge(self, other: GroupCounts) -> None:
        add_fields(self, other)


def equal_reward_groups(rewards: Tensor, group: Tensor, correct: Tensor | None) -> GroupCounts:
    """Count the groups whose rewards are all equal.

    Args:
        rewards: [B] float, finite (rows with a non-finite reward left out by the caller).
        group: [B] int ids (any labels; only equality matters).
        correct: [B] bool or None.

    >>> equal_reward_groups(torch.tensor([1.0, 1.0, 0.0, 1.0]), torch.tensor([0, 0, 1, 1]),
    ...                     torch.tensor([True, True, False, True]))
    GroupCounts(groups=2, equal=1, solved=1, failed=0)
    """
    if rewards.numel() == 0:
        return GroupCounts()
    _, ids = torch.unique(group, return_inverse=True)
    n = int(ids.max()) + 1
    values = rewards.double()
    low = torch.full((n,), math.inf, dtype=torch.float64).scatter_reduce(0, ids, values, "amin")
    high = torch.full((n,), -math.inf, dtype=torch.float64).scatter_reduce(0, ids, values, "amax")
    equal = low == high
    counts = GroupCounts(groups=n, equal=int(equal.sum()))
    if correct is not None:
        right = torch.zeros(n, dtype=torch.long).index_add_(0, ids, correct.long())
        size = torch.bincount(ids, minlength=n)
        counts.solved = int((equal & (right == size)).sum())
        counts.failed = int((equal & (right == 0)).sum())
    return counts


# ----------------------------------------------------------------- entropy mechanics
@dataclass
class CoMoments:
    """Count, means and co-moment ``C = sum (x - mean x)(y - mean y)`` of paired values;
    ``merge`` is Chan's pairwise update, so chunks combine into the whole batch's
    centred sum without a second pass.

    >>> a = CoMoments(); a.add(torch.tensor([1.0, 2.0]), torch.tensor([1.0, 3.0]))
    >>> b = CoMoments(); b.add(torch.tensor([3.0]), torch.tensor([2.0])); a.merge(b)
    >>> a.count, a.comoment
    (3, 1.0)
    """

    count: int = 0
    mean_x: float = 0.0
    mean_y: float = 0.0
    comoment: float = 0.0

    def add(self, x: Tensor, y: Tensor) -> None:
        """Add paired 1-D tensors of finite values."""
        n = int(x.numel())
        if n == 0:
            return
        x, y = x.double(), y.double()
        mx, my = float(x.mean()), float(y.mean())
        other = CoMoments(n, mx, my, float(((x - mx) * (y - my)).sum()))
        self.merge(other)

    def merge(self, other: CoMoments) -> None:
        if other.count == 0:
            return
        total = self.count + other.count
        dx, dy = other.mean_x - self.mean_x, other.mean_y - self.mean_y
        self.comoment += other.comoment + dx * dy * self.count * other.count / total
        self.mean_x += dx * other.count / total
        self.mean_y += dy * other.count / total
        self.count = total


def mechanics_pairs(log_probs: Tensor, advantages: Tensor, mask: Tensor) -> tuple[Tensor, ...]:
    """The token values of the entropy-change covariances of Cui et al. (2025), valid
    tokens only, row-major.

    Args:
        log_probs: [B, T] log pi_k(a|s) of the sampled tokens under the policy before the
            update (the behaviour policy, ``old_log_probs``, where the dump has it).
        advantages: [B, T] A(s, a).
        mask: [B, T] bool.

    Returns:
        (x, A, pi * A): [N] float64 each, x = log pi_k; the pairs (x, A) feed the natural
        policy gradient covariance (their Theorem 2), (x, pi * A) the vanilla policy
        gradient one (Theorem 1; both Section 3.2 of arXiv 2505.22617v1, from their
        Lemma 1 with the logit change of Proposition 1, resp. of natural policy
        gradient). Centred over a batch, (x, A) is their Eq. 10, whose expectation is
        Theorem 2's covariance.
    """
    x = log_probs[mask].double()
    a = advantages[mask].double()
    return x, a, torch.exp(x) * a


@dataclass(frozen=True)
class MechanicsFit:
    """Predicted against observed entropy change over the steps of a run.

    Attributes:
        steps: steps with both an observed change and a covariance.
        correlation: Pearson correlation of the observed change with ``-covariance``
            (scale-free: it needs no step size); None for fewer than 3 steps or a
            constant series.
        eta: the one step size that fits ``observed ~ -eta * covariance`` by least
            squares through the origin (None when every covariance is 0).
        predicted: per step (None where a value is missing), ``-eta * covariance``.
        sign_agreement: share of the steps whose observed change has the sign of
            ``-covariance`` (a change or covariance of exactly 0 agrees with neither).
    """

    steps: int
    correlation: float | None
    eta: float | None
    predicted: list[float | None]
    sign_agreement: float | None = None


def fit_entropy_mechanics(
    observed: list[float | None], covariance: list[float | None]
) -> MechanicsFit:
    """Fit one step size to a run's observed entropy changes.

    Cui et al. (2025), Theorem 2: under natural policy gradient with step size eta,
    ``H(pi_k+1 | s) - H(pi_k | s) ~ -eta Cov_{a ~ pi_k}(log pi_k(a|s), A(s, a))``. eta is
    not in a dump (an optimizer's effective step is not its learning rate), so it is fitted
    once over the run: eta = -sum(o c) / sum(c^2) over the steps with both values.

    >>> fit = fit_entropy_mechanics([-2.0, -4.0, 1.0], [1.0, 2.0, -0.5])
    >>> fit.eta, fit.correlation, fit.predicted, fit.sign_agreement
    (2.0, 1.0, [-2.0, -4.0, 1.0], 1.0)
    """
    pairs = [
        (o, c) for o, c in zip(observed, covariance, strict=True) if o is not None and c is not None
    ]
    squares = sum(c * c for _, c in pairs)
    eta = -sum(o * c for o, c in pairs) / squares if squares > 0 else None
    predicted = [None if c is None or eta is None else 0.0 - eta * c for c in covariance]
    agree = sum(1 for o, c in pairs if o * -c > 0)
    return MechanicsFit(
        steps=len(pairs),
        correlation=_pearson([o for o, _ in pairs], [-c for _, c in pairs]),
        eta=eta,
        predicted=predicted,
        sign_agreement=agree / len(pairs) if pairs else None,
    )


@dataclass(frozen=True)
class PerformanceFit:
    """The entropy-performance law of Cui et al. (2025), ``R = -a exp(H) + b``, over a run.

    Attributes:
        steps: steps with both a performance and an entropy.
        a, b: the least-squares fit over all of them (None for fewer than 3 steps or a
            constant entropy).
        ceiling: ``b - a``, the performance the law predicts at entropy 0, and
            ``ceiling_interval`` its 95 % confidence interval (the fit's standard error
            at exp(H) = 1, Student's t with steps - 2 degrees of freedom).
        head_steps: the first steps (``head_share`` of them, at least 3) whose own fit
            predicts the rest; ``head_a``, ``head_b`` that fit; ``holdout_rmse`` the
            root-mean-square error of its predictions on the remaining steps (Cui et al.
            predict final performance from the first ~15 % of training).
    """

    steps: int
    a: float | None
    b: float | None
    ceiling: float | None
    ceiling_interval: tuple[float, float] | None
    head_steps: int
    head_a: float | None
    head_b: float | None
    holdout_rmse: float | None


def fit_entropy_performance(
    entropy: list[float | None], performance: list[float | None], head_share: float = 0.15
) -> PerformanceFit:
    """Fit ``R = -a exp(H) + b`` (Cui et al. 2025, arXiv 2505.22617, Eq. 1) to a run.

    ``entropy``: the token entropy of each step (nats); ``performance``: its reward or
    correct share (None: missing). The law is linear in ``x = exp(H)``: ``R = b - a x``,
    fitted by ordinary least squares.

    >>> entropy = [0.0, 0.5, 1.0, 1.5]
    >>> fit = fit_entropy_performance(entropy, [1.4 - 0.5 * math.exp(h) for h in entropy])
    >>> round(fit.a, 6), round(fit.b, 6), round(fit.ceiling, 6)
    (0.5, 1.4, 0.9)
    """
    pairs = [
        (math.exp(h), r)
        for h, r in zip(entropy, performance, strict=True)
        if h is not None and r is not None and math.isfinite(h) and math.isfinite(r)
    ]
    whole = _law(pairs)
    head = max(3, math.ceil(head_share * len(pairs)))
    early = _law(pairs[:head]) if head < len(pairs) else None
    rmse = None
    if early is not None:
        rest = pairs[head:]
        a0, b0 = early[0], early[1]
        rmse = math.sqrt(sum((b0 - a0 * x - r) ** 2 for x, r in rest) / len(rest))
    return PerformanceFit(
        steps=len(pairs),
        a=None if whole is None else whole[0],
        b=None if whole is None else whole[1],
        ceiling=None if whole is None else whole[1] - whole[0],
        ceiling_interval=None if whole is None else whole[2],
        head_steps=min(head, len(pairs)),
        head_a=None if early is None else early[0],
        head_b=None if early is None else early[1],
        holdout_rmse=rmse,
    )


def _law(
    pairs: list[tuple[float, float]],
) -> tuple[float, float, tuple[float, float] | None] | None:
    """(a, b, the 95 % interval of b - a) of ``r = b - a x`` by least squares."""
    n = len(pairs)
    if n < 3:
        return None
    mx = sum(x for x, _ in pairs) / n
    my = sum(r for _, r in pairs) / n
    sxx = sum((x - mx) ** 2 for x, _ in pairs)
    if sxx <= 1e-12 * n * mx * mx:  # one entropy throughout (up to rounding): no slope
        return None
    slope = sum((x - mx) * (r - my) for x, r in pairs) / sxx
    intercept = my - slope * mx
    a, b = -slope, intercept
    interval = None
    if n > 2:
        # Student's t quantile; scipy.stats.t.ppf gives the same bits but its import
        # costs about 0.4 s a process (a timeline, a watch)
        from scipy.special import stdtrit

        residual = sum((r - (intercept + slope * x)) ** 2 for x, r in pairs) / (n - 2)
        se = math.sqrt(residual * (1 / n + (1 - mx) ** 2 / sxx))
        half = float(stdtrit(n - 2, 0.975)) * se
        interval = (b - a - half, b - a + half)
    return a, b, interval


def _pearson(x: list[float], y: list[float]) -> float | None:
    n = len(x)
    if n < 3:
        return None
    mx, my = sum(x) / n, sum(y) / n
    sxy = sum((a - mx) * (b - my) for a, b in zip(x, y, strict=True))
    sxx = sum((a - mx) ** 2 for a in x)
    syy = sum((b - my) ** 2 for b in y)
    if sxx <= 0 or syy <= 0:
        return None
    return sxy / math.sqrt(sxx * syy)
