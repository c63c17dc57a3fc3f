"""Each method's per-token coefficient against the loss function of a framework that ships it.

ratioscope computes ``dJ / d log pi_theta`` for every token in closed form
(:mod:`ratioscope.functional.objectives`, :mod:`ratioscope.functional.corrections`,
:mod:`ratioscope.objective_family.methods`). Here the same tensors go through the framework's own
loss, ``loss = -J``, and autograd of that loss with respect to the current log-probs on a
CPU tensor must equal ``-(values * scale)`` token by token:

* verl (``verl.trainer.ppo.core_algos``: the ``vanilla``, ``gspo``, ``geo_mean``, ``cispo``
  and ``sapo`` policy losses, ``agg_loss``, ``compute_grpo_outcome_advantage``;
  ``verl.trainer.ppo.rollout_corr_helper``: the rollout-correction weights and rejection
  masks), checked with verl 0.9.1;
* TRL (``GRPOTrainer._compute_loss``, called with a stand-in for the trainer because TRL has
  no loss function of its own, and the static ``GRPOTrainer.get_off_policy_mask``), checked
  with TRL 1.16.

Each framework's tests skip, with the reason, when it cannot be imported (verl needs more
than the test extras install; .ci/run adds it) or when the TRL internals the stand-in relies
on have moved. The batch has right-padded rows of different lengths with garbage (finite,
far off-policy) values in the padding, ratios on both sides of every clip band, negative,
positive and zero advantages.
"""

from __future__ import annotations

import importlib
import math
from collections import defaultdict
from types import SimpleNamespace
from typing import Any

import pytest
import torch

from ratioscope.data.batch import TokenBatch
from ratioscope.functional import corrections as C
from ratioscope.functional import objectives as F
from ratioscope.objective_family.methods import METHODS, MethodInputs

pytestmark = pytest.mark.slow  # the frameworks' own losses (verl, TRL imported): the slow tier

DOUBLE = torch.float64

# ----------------------------------------------------------------------- the batch
#: per sequence: the advantage and the ratios pi_theta / pi_old of its valid tokens
#: (row lengths 6, 3, 5, 2, 4; the width is 6). Positive rows have ratios below 0.8, inside
#: the band, between 1.2 and 1.28 (clipped by GRPO's 0.2, not by DAPO's 0.28), above 1.28
#: and above e^0.4 (GMPO's log-space band); negative rows below 0.8 and e^-0.4 and above
#: 1.2 (where a negative advantage is not clipped); row 2's advantage is 0. Every ratio is
#: below 3, verl's dual-clip bound for negative advantages (see the dual-clip test).
ROWS: tuple[tuple[float, tuple[float, ...]], ...] = (
    (1.0, (0.7, 0.95, 1.1, 1.24, 1.35, 2.5)),
    (-0.8, (0.6, 0.9, 1.5)),
    (0.0, (0.5, 1.3, 1.0, 0.85, 1.6)),
    (-1.3, (0.79, 1.25)),
    (0.6, (1.21, 0.75, 1.05, 1.3)),
)
#: GSPO's band (3e-4, 4e-4) needs tiny log-ratios: the mean log-ratio of each row is
#: 5e-4 (A > 0: clipped high), -5e-4 (A < 0: clipped low), 0 (A = 0), 1e-4 (A < 0: inside)
#: and -2e-4 (A > 0: inside); the tokens spread around it.
GSPO_MEANS = (5e-4, -5e-4, 0.0, 1e-4, -2e-4)
GSPO_SPREAD = (-3e-4, 2e-4, 4e-4, -1e-4, 1e-4, -3e-4)
#: rewards and prompt groups for the Dr. GRPO advantage (R - group mean)
REWARDS = (1.0, 0.0, 1.0, 0.0, 0.5)
GROUPS = (0, 0, 1, 1, 1)
WIDTH = 6
#: relative tolerance: verl's seq-mean-token-mean divides by (|o_i| + 1e-8)
TOLERANCE = 1e-7


def _mask() -> torch.Tensor:
    lengths = torch.tensor([len(ratios) for _, ratios in ROWS])
    return torch.arange(WIDTH).unsqueeze(0) < lengths.unsqueeze(1)


def _pad(rows: list[list[float]], fill: float) -> torch.Tensor:
    return torch.tensor([row + [fill] * (WIDTH - len(row)) for row in rows], dtype=DOUBLE)


def _old_log_probs() -> torch.Tensor:
    # distinct log-probs in (-4.05, -0.05]; the padding is -1.0
    grid = -0.2 - 0.35 * torch.arange(len(ROWS) * WIDTH, dtype=DOUBLE).reshape(len(ROWS), WIDTH)
    return torch.where(_mask(), grid.remainder(4.0) * -1.0 - 0.05, -1.0)


def _advantages() -> torch.Tensor:
    return torch.tensor([adv for adv, _ in ROWS], dtype=DOUBLE)


def _log_probs(log_ratios: torch.Tensor) -> torch.Tensor:
    """Current log-probs from per-token log-ratios; the padding is 2 nats above old (a
    ratio of e^2, far outside every band, so a masking mistake shows)."""
    old = _old_log_probs()
    return torch.where(_mask(), old + log_ratios, old + 2.0)


def _main_log_ratios() -> torch.Tensor:
    return _pad([[math.log(r) for r in ratios] for _, ratios in ROWS], 0.0)


def _gspo_log_ratios() -> torch.Tensor:
    rows = []
    for (_, ratios), mean in zip(ROWS, GSPO_MEANS, strict=True):
        spread = list(GSPO_SPREAD[: len(ratios)])
        centre = sum(spread) / len(spread)
        rows.append([mean + s - centre for s in spread])
    return _pad(rows, 0.0)


def _token_batch(log_probs: torch.Tensor, rollout: torch.Tensor | None = None) -> TokenBatch:
    tensors: dict[str, Any] = {
        "mask": _mask(),
        "log_probs": log_probs,
        "old_log_probs": _old_log_probs(),
        "advantages": _advantages(),
        "rewards": torch.tensor(REWARDS, dtype=DOUBLE),
        "group": torch.tensor(GROUPS),
    }
    if rollout is not None:
        tensors["rollout_log_probs"] = rollout
    return TokenBatch.from_tensors(tensors)


def _method(name: str, batch: TokenBatch, **settings: Any) -> F.Coefficients:
    method = METHODS[name]
    return method.compute(MethodInputs(batch), method.settings(settings))


def _exact(coef: F.Coefficients) -> torch.Tensor:
    return coef.values * coef.scale


def _objective_gradient(loss_of, log_probs: torch.Tensor) -> torch.Tensor:
    """``dJ / d log pi_theta`` with J = -loss, by autograd on a CPU leaf tensor."""
    leaf = log_probs.clone().requires_grad_(True)
    loss = loss_of(leaf)
    loss.backward()
    assert leaf.grad is not None
    return -leaf.grad


def _assert_same(framework: torch.Tensor, coef: F.Coefficients) -> None:
    mask = _mask()
    # the framework's gradient is exactly 0 in the padding, as ratioscope's coefficient
    assert bool((framework[~mask] == 0).all())
    torch.testing.assert_close(framework, _exact(coef), rtol=TOLERANCE, atol=1e-10)


# --------------------------------------------------------------------------- verl
@pytest.fixture(scope="module")
def verl() -> SimpleNamespace:
    """verl's loss modules, or a skip naming why they cannot be imported (verl is not in
    the test extras; its import chain also checks the versions of transformers & co)."""
    try:
        core_algos = importlib.import_module("verl.trainer.ppo.core_algos")
        rollout_corr = importlib.import_module("verl.trainer.ppo.rollout_corr_helper")
        config = importlib.import_module("verl.workers.config")
        actor_config = config.ActorConfig
    except Exception as error:  # any import-time failure means "not here"
        pytest.skip(f"verl is not importable: {type(error).__name__}: {error}")
    return SimpleNamespace(
        core_algos=core_algos, rollout_corr=rollout_corr, ActorConfig=actor_config
    )


def _verl_config(verl: SimpleNamespace, **fields: Any) -> Any:
    try:
        return verl.ActorConfig(
            strategy="fsdp", rollout_n=1, ppo_micro_batch_size_per_gpu=1, **fields
        )
    except (TypeError, ValueError, AssertionError) as error:
        pytest.skip(f"verl's ActorConfig does not take {sorted(fields)} any more: {error}")


def _verl_loss(
    verl: SimpleNamespace,
    name: str,
    aggregation: str,
    config: Any,
    advantages: torch.Tensor | None = None,
    mask: torch.Tensor | None = None,
    rollout_is_weights: torch.Tensor | None = None,
):
    """``log_probs -> loss`` of verl's registered policy loss ``name`` on the batch."""
    loss_fn = verl.core_algos.get_policy_loss_fn(name)
    response_mask = (_mask() if mask is None else mask).to(DOUBLE)
    if advantages is None:
        # verl's advantages are [B, T]; the padding keeps the row's value, as garbage
        advantages = _advantages().unsqueeze(1).expand(-1, WIDTH)

    def loss(log_probs: torch.Tensor) -> torch.Tensor:
        value, _ = loss_fn(
            old_log_prob=_old_log_probs(),
            log_prob=log_probs,
            advantages=advantages,
            response_mask=response_mask,
            loss_agg_mode=aggregation,
            config=config,
            rollout_is_weights=rollout_is_weights,
        )
        return value

    return loss


@pytest.mark.parametrize(
    ("method", "clip", "aggregation"),
    [
        # DAPO: clip-higher and token-mean
        ("dapo", (0.2, 0.28), "token-mean"),
        # GRPO: symmetric clip, mean over each sequence, then over sequences
        ("grpo", (0.2, 0.2), "seq-mean-token-mean"),
    ],
)
def test_verl_vanilla_clip_equals_the_method(verl, method, clip, aggregation):
    config = _verl_config(verl, clip_ratio=clip[0], clip_ratio_low=clip[0], clip_ratio_high=clip[1])
    log_probs = _log_probs(_main_log_ratios())
    gradient = _objective_gradient(_verl_loss(verl, "vanilla", aggregation, config), log_probs)
    # the method's defaults are verl's recipe for it
    assert METHODS[method].settings() == {"clip": clip, "aggregation": aggregation}
    coef = _method(method, _token_batch(log_probs))
    _assert_same(gradient, coef)
    assert bool(coef.flags["clip_high"].any()) and bool(coef.flags["clip_low"].any())


def test_verl_seq_mean_token_sum_norm_is_token_sum_over_the_padded_width(verl):
    """Dr. GRPO's aggregation: verl divides the per-sequence sums by the sequences and by
    ``loss_scale_factor``, which defaults to the padded width, as ratioscope's token-sum."""
    config = _verl_config(verl, clip_ratio=0.2, clip_ratio_low=0.2, clip_ratio_high=0.2)
    assert config.loss_scale_factor is None
    log_probs = _log_probs(_main_log_ratios())
    loss = _verl_loss(verl, "vanilla", "seq-mean-token-sum-norm", config)
    coef = F.ppo_clip_coefficients(
        _main_log_ratios(), _advantages(), _mask(), (0.2, 0.2), "token-sum"
    )
    _assert_same(_objective_gradient(loss, log_probs), coef)
    assert coef.scale == pytest.approx(1 / (len(ROWS) * WIDTH))


def test_verl_dr_grpo_advantage_and_loss_equal_the_method(verl):
    """The whole Dr. GRPO method: verl's GRPO advantage without the std division
    (``norm_adv_by_std_in_grpo=False``) on the outcome rewards, then the vanilla loss with
    ``seq-mean-token-sum-norm``."""
    import numpy as np

    mask = _mask()
    last = mask.sum(1) - 1
    token_rewards = torch.zeros(len(ROWS), WIDTH, dtype=DOUBLE)
    token_rewards[torch.arange(len(ROWS)), last] = torch.tensor(REWARDS, dtype=DOUBLE)
    advantages, _ = verl.core_algos.compute_grpo_outcome_advantage(
        token_level_rewards=token_rewards,
        response_mask=mask.to(DOUBLE),
        index=np.array([f"prompt-{g}" for g in GROUPS], dtype=object),
        norm_adv_by_std_in_grpo=False,
    )
    expected = F.dr_grpo_advantages(torch.tensor(REWARDS, dtype=DOUBLE), torch.tensor(GROUPS))
    torch.testing.assert_close(advantages, torch.where(mask, expected.unsqueeze(1), 0.0))

    config = _verl_config(verl, clip_ratio=0.2, clip_ratio_low=0.2, clip_ratio_high=0.2)
    log_probs = _log_probs(_main_log_ratios())
    loss = _verl_loss(verl, "vanilla", "seq-mean-token-sum-norm", config, advantages=advantages)
    _assert_same(_objective_gradient(loss, log_probs), _method("dr_grpo", _token_batch(log_probs)))


def test_verl_dual_clip_is_not_in_ratioscope_grpo(verl):
    """verl's vanilla loss caps a negative-advantage token's loss at ``-A c`` (dual-clip,
    ``clip_ratio_c`` 3 by default): above r = 3 such a token has no gradient there, while
    GRPO as written (and ratioscope) keeps ``r A``. Everywhere else they agree, and with
    the bound out of reach they agree everywhere."""
    log_ratios = _main_log_ratios()
    log_ratios[1, 2] = math.log(3.5)  # row 1: A = -0.8
    log_probs = _log_probs(log_ratios)
    coef = _method("grpo", _token_batch(log_probs))
    dual = _verl_config(verl, clip_ratio=0.2, clip_ratio_low=0.2, clip_ratio_high=0.2)
    assert dual.clip_ratio_c == 3.0
    gradient = _objective_gradient(
        _verl_loss(verl, "vanilla", "seq-mean-token-mean", dual), log_probs
    )
    assert float(gradient[1, 2]) == 0.0
    assert float(_exact(coef)[1, 2]) == pytest.approx(3.5 * -0.8 / 3 / len(ROWS))
    others = torch.ones_like(_mask())
    others[1, 2] = False
    torch.testing.assert_close(gradient[others], _exact(coef)[others], rtol=TOLERANCE, atol=1e-10)

    wide = _verl_config(
        verl, clip_ratio=0.2, clip_ratio_low=0.2, clip_ratio_high=0.2, clip_ratio_c=1e6
    )
    loss = _verl_loss(verl, "vanilla", "seq-mean-token-mean", wide)
    _assert_same(_objective_gradient(loss, log_probs), coef)


def test_verl_gspo_equals_the_method(verl):
    config = _verl_config(verl, clip_ratio=3e-4, clip_ratio_low=3e-4, clip_ratio_high=4e-4)
    log_probs = _log_probs(_gspo_log_ratios())
    loss = _verl_loss(verl, "gspo", "seq-mean-token-mean", config)
    coef = _method("gspo", _token_batch(log_probs))
    assert METHODS["gspo"].settings() == {"clip": (3e-4, 4e-4)}
    _assert_same(_objective_gradient(loss, log_probs), coef)
    # row 0 is clipped high, row 1 low; rows 3 and 4 (A != 0) are inside the band
    assert bool(coef.flags["clip_high"][0].all()) and bool(coef.flags["clip_low"][1, :3].all())
    assert bool((coef.values[3:][_mask()[3:]] != 0).all())


def test_verl_geo_mean_equals_gmpo(verl):
    config = _verl_config(verl, clip_ratio=0.4, clip_ratio_low=0.4, clip_ratio_high=0.4)
    log_probs = _log_probs(_main_log_ratios())
    # geo_mean ignores loss_agg_mode: a mean of the sequence terms over the rows
    loss = _verl_loss(verl, "geo_mean", "token-mean", config)
    coef = _method("gmpo", _token_batch(log_probs))
    assert METHODS["gmpo"].settings() == {"clip": (0.4, 0.4)}
    _assert_same(_objective_gradient(loss, log_probs), coef)
    # 2.5 > e^0.4 with A > 0 and 0.6 < e^-0.4 with A < 0 are cut; 1.5 > e^0.4 with A < 0 is not
    assert bool(coef.flags["clip_high"][0, 5]) and bool(coef.flags["clip_low"][1, 0])
    assert not bool(coef.flags["clip_high"][1, 2]) and float(coef.values[1, 2]) != 0.0


def test_verl_cispo_low_10_high_02_is_ratioscope_clip_1_02(verl):
    """verl's example clamps r to [1 - 10, 1 + 0.2] = [-9, 1.2]; ratioscope's (1.0, 0.2)
    leaves the lower side open (1 - 1.0 = 0): both weigh ``min(r, 1.2)``."""
    config = _verl_config(verl, clip_ratio=0.2, clip_ratio_low=10.0, clip_ratio_high=0.2)
    log_probs = _log_probs(_main_log_ratios())
    loss = _verl_loss(verl, "cispo", "token-mean", config)
    coef = _method("cispo", _token_batch(log_probs), clip=(1.0, 0.2))
    _assert_same(_objective_gradient(loss, log_probs), coef)
    assert bool(coef.flags["truncated_high"].any()) and not bool(coef.flags["truncated_low"].any())
    ratios = torch.exp(_main_log_ratios())
    weight = ratios.clamp(max=1.2)
    expected = torch.where(_mask(), weight * _advantages().unsqueeze(1), 0.0) / int(_mask().sum())
    torch.testing.assert_close(_exact(coef), expected)


def test_verl_sapo_equals_the_method(verl):
    config = _verl_config(verl, tau_pos=1.0, tau_neg=1.05)
    log_probs = _log_probs(_main_log_ratios())
    # verl's SAPO always aggregates seq-mean-token-mean, whatever is passed
    loss = _verl_loss(verl, "sapo", "token-mean", config)
    assert METHODS["sapo"].settings() == {"tau_pos": 1.0, "tau_neg": 1.05}
    _assert_same(_objective_gradient(loss, log_probs), _method("sapo", _token_batch(log_probs)))


# ------------------------------------------------------- verl rollout corrections
#: per row, log(pi_old / pi_rollout) of its valid tokens, one design per correction
WIDE_RHO = (  # token TIS (cap 2), IcePop [0.5, 5], sequence IS (cap 2)
    (0.3, 6.0, 0.4, 1.0, 2.5, 0.9),  # product 1.62: under the sequence cap
    (1.5, 1.8, 1.2),  # product 3.24: truncated to 2
    (0.45, 2.2, 1.0, 7.0, 1.1),
    (0.9, 0.8),
    (1.3, 4.5, 0.49, 1.01),
)
#: Geo-RS [0.999, 1.001] keeps rows 0, 2 and 4 and drops rows 1 and 3
GEO_MEANS = (1.0005, 1.003, 0.9995, 0.997, 1.0)
K3_RHO = (  # mean k3 = rho - 1 - log rho per row: 0.0008, 0.023, 0, 0.035, 0.004
    (1.04, 0.96, 1.03, 0.97, 1.05, 0.95),
    (1.25, 0.8, 1.2),
    (1.0, 1.0, 1.0, 1.0, 1.0),
    (0.75, 1.28),
    (1.1, 0.9, 1.08, 0.93),
)


def _log_rho(design: str) -> torch.Tensor:
    if design == "wide":
        return _pad([[math.log(r) for r in row] for row in WIDE_RHO], 0.0)
    if design == "k3":
        return _pad([[math.log(r) for r in row] for row in K3_RHO], 0.0)
    rows = []
    for (_, ratios), geo in zip(ROWS, GEO_MEANS, strict=True):
        spread = [0.02 * ((-1) ** t) * (t + 1) for t in range(len(ratios))]
        centre = sum(spread) / len(spread)
        rows.append([math.log(geo) + s - centre for s in spread])
    return _pad(rows, 0.0)


def _rollout(log_rho: torch.Tensor) -> torch.Tensor:
    """Rollout log-probs with ``old - rollout = log_rho`` on valid tokens; the padding is
    an arbitrary finite value."""
    return torch.where(_mask(), _old_log_probs() - log_rho, -7.0)


CORRECTIONS = [
    # (method, ratioscope settings, verl's rollout_correction keys, design)
    ("tis", {"cap": 2.0}, {"rollout_is": "token", "rollout_is_threshold": 2.0}, "wide"),
    (
        "icepop",
        {"bounds": (0.5, 5.0)},
        {"rollout_is": "token", "rollout_is_threshold": "0.5_5.0"},
        "wide",
    ),
    ("seq_tis", {"cap": 2.0}, {"rollout_is": "sequence", "rollout_is_threshold": 2.0}, "wide"),
    (
        "geo_rs",
        {"bounds": (0.999, 1.001)},
        {"rollout_is": None, "rollout_rs": "seq_mean_k1", "rollout_rs_threshold": "0.999_1.001"},
        "geo",
    ),
    (
        "k_rs",
        {"divergence": "k3", "reduce": "mean", "threshold": 0.01},
        {"rollout_is": None, "rollout_rs": "seq_mean_k3", "rollout_rs_threshold": 0.01},
        "k3",
    ),
]


def _verl_correction(verl: SimpleNamespace, log_rho: torch.Tensor, keys: dict[str, Any]):
    """verl's IS weights (or None) and rejection-modified response mask."""
    weights, response_mask, _ = verl.rollout_corr.compute_rollout_correction_and_rejection_mask(
        old_log_prob=_old_log_probs(),
        rollout_log_prob=_rollout(log_rho),
        response_mask=_mask().to(DOUBLE),
        **keys,
    )
    is_weights = None if weights is None else weights.batch["rollout_is_weights"]
    return is_weights, response_mask


@pytest.mark.parametrize(
    ("method", "settings", "keys", "design"), CORRECTIONS, ids=[c[0] for c in CORRECTIONS]
)
def test_verl_rollout_correction_equals_the_method(verl, method, settings, keys, design):
    """verl's weights times its rejection mask are ratioscope's correction weight, and
    verl's GRPO loss with them (IS weights on the per-token loss after clipping, rejected
    tokens out of the mask) has ratioscope's corrected coefficient as its gradient."""
    log_rho = _log_rho(design)
    is_weights, response_mask = _verl_correction(verl, log_rho, keys)
    verl_weight = response_mask if is_weights is None else is_weights * response_mask

    log_probs = _log_probs(_main_log_ratios())
    batch = _token_batch(log_probs, rollout=_rollout(log_rho))
    coef = _method(method, batch, **settings)
    base = _method("grpo", batch)
    mask = _mask()
    # the correction's weight: where the base coefficient is not 0, coef = weight * base
    nonzero = mask & (base.values != 0)
    torch.testing.assert_close(coef.values[nonzero] / base.values[nonzero], verl_weight[nonzero])
    # the correction binds on some valid tokens, not on all
    (changed,) = (flag for key, flag in coef.flags.items() if key not in base.flags)
    assert bool(changed[mask].any()) and not bool(changed[mask].all())

    # verl's trainer normalises seq-mean-token-mean by the mini-batch's sequences
    # (global_batch_size), rejected ones included
    config = _verl_config(verl, clip_ratio=0.2, clip_ratio_low=0.2, clip_ratio_high=0.2)
    config.global_batch_info["global_batch_size"] = len(ROWS)
    loss = _verl_loss(
        verl,
        "vanilla",
        "seq-mean-token-mean",
        config,
        mask=response_mask,
        rollout_is_weights=is_weights,
    )
    _assert_same(_objective_gradient(loss, log_probs), coef)


def test_verl_rejection_outside_the_trainer_counts_only_kept_sequences(verl):
    """Called alone (no ``global_batch_info``), verl's seq-mean-token-mean divides by the
    sequences left in the rejection-modified mask: the coefficient of the kept tokens is
    ratioscope's times G / G_kept, a batch constant."""
    log_rho = _log_rho("geo")
    _, response_mask = _verl_correction(
        verl,
        log_rho,
        {"rollout_is": None, "rollout_rs": "seq_mean_k1", "rollout_rs_threshold": "0.999_1.001"},
    )
    kept = int((response_mask.sum(1) > 0).sum())
    assert kept == 3
    config = _verl_config(verl, clip_ratio=0.2, clip_ratio_low=0.2, clip_ratio_high=0.2)
    log_probs = _log_probs(_main_log_ratios())
    loss = _verl_loss(verl, "vanilla", "seq-mean-token-mean", config, mask=response_mask)
    coef = _method("geo_rs", _token_batch(log_probs, rollout=_rollout(log_rho)))
    expected = _exact(coef) * len(ROWS) / kept
    torch.testing.assert_close(
        _objective_gradient(loss, log_probs), expected, rtol=TOLERANCE, atol=1e-10
    )


def test_verl_k1_bounds_apply_to_the_reciprocal_ratio(verl):
    """verl's ``seq_mean_k1`` keeps ``log lo <= mean(-log rho) <= log hi``, i.e. the
    geometric mean of rho in [1/hi, 1/lo]; ratioscope's Geo-RS keeps it in [lo, hi]. The two
    are the same for reciprocal bounds (verl's presets 0.999_1.001 up to 1e-6, 0.5_2.0
    exactly) and otherwise ratioscope's (1/hi, 1/lo) is verl's lo_hi."""
    geo = (1.42, 0.705, 1.0, 1.2, 0.5)
    mask = _mask()
    log_rho = torch.where(mask, torch.log(torch.tensor(geo, dtype=DOUBLE)).unsqueeze(1), 0.0)

    def verl_keep(spec: str) -> torch.Tensor:
        kept, _ = verl.rollout_corr.compute_rollout_rejection_mask(
            log_rho, mask.to(DOUBLE), "seq_mean_k1", spec
        )
        return kept[:, 0] > 0

    def ratioscope_keep(bounds: tuple[float, float]) -> torch.Tensor:
        weight, _ = C.geometric_rejection(log_rho, mask, bounds)
        return weight[:, 0] > 0

    assert verl_keep("0.7_1.4").tolist() == [True, False, True, True, False]
    assert torch.equal(verl_keep("0.7_1.4"), ratioscope_keep((1 / 1.4, 1 / 0.7)))
    assert ratioscope_keep((0.7, 1.4)).tolist() == [False, True, True, True, False]
    assert torch.equal(verl_keep("0.5_2.0"), ratioscope_keep((0.5, 2.0)))


# ---------------------------------------------------------------------------- TRL
@pytest.fixture(scope="module")
def grpo_trainer() -> Any:
    try:
        module = importlib.import_module("trl.trainer.grpo_trainer")
        return module.GRPOTrainer
    except Exception as error:  # any import-time failure means "not here"
        pytest.skip(f"TRL is not importable: {type(error).__name__}: {error}")


def _trl_trainer(grpo_trainer: Any, log_probs: torch.Tensor, **overrides: Any) -> SimpleNamespace:
    """A stand-in for ``self`` of ``GRPOTrainer._compute_loss`` (TRL 1.16's attribute names):
    one process, no gradient accumulation, no KL term, no entropy bonus; the model's
    per-token log-probs are ``log_probs``."""
    args = SimpleNamespace(
        delta=None,
        sapo_temperature_pos=1.0,
        sapo_temperature_neg=1.05,
        use_bias_correction_kl=True,
        steps_per_generation=1,
    )
    accelerator = SimpleNamespace(
        num_processes=1,
        sync_gradients=True,
        reduce=lambda tensor, reduction="sum": tensor,
        gather=lambda tensor: tensor,
        gather_for_metrics=lambda tensor: tensor,
    )
    trainer = SimpleNamespace(
        loss_type="grpo",
        epsilon_low=0.2,
        epsilon_high=0.2,
        beta=0.0,
        importance_sampling_level="token",
        off_policy_mask_threshold=None,
        top_entropy_quantile=1.0,
        use_vllm=False,
        vllm_importance_sampling_correction=False,
        max_completion_length=WIDTH,
        current_gradient_accumulation_steps=1,
        model=SimpleNamespace(training=True),
        accelerator=accelerator,
        args=args,
        aux_loss_enabled=False,
        _entropy_bonus_enabled=False,
        _metrics={"train": defaultdict(list), "eval": defaultdict(list)},
        get_off_policy_mask=grpo_trainer.get_off_policy_mask,
        get_high_entropy_mask=None,
        _get_per_token_logps_and_entropies=lambda *a, **k: (
            log_probs,
            torch.zeros_like(log_probs),
            None,
        ),
    )
    for key, value in overrides.items():
        setattr(trainer, key, value)
    return trainer


def _trl_inputs(advantages: torch.Tensor | None = None, **extra: Any) -> dict[str, Any]:
    mask = _mask()
    rows = len(ROWS)
    return {
        "prompt_ids": torch.zeros(rows, 1, dtype=torch.long),
        "prompt_mask": torch.ones(rows, 1, dtype=torch.long),
        "completion_ids": torch.zeros(rows, WIDTH, dtype=torch.long),
        "completion_mask": mask.to(DOUBLE),
        "advantages": _advantages() if advantages is None else advantages,
        "old_per_token_logps": _old_log_probs(),
        "num_items_in_batch": mask.sum().to(DOUBLE),
        **extra,
    }


def _trl_gradient(
    grpo_trainer: Any, log_probs: torch.Tensor, inputs: dict, **overrides
) -> torch.Tensor:
    def loss(leaf: torch.Tensor) -> torch.Tensor:
        trainer = _trl_trainer(grpo_trainer, leaf, **overrides)
        try:
            return grpo_trainer._compute_loss(trainer, None, inputs)
        except (AttributeError, TypeError, KeyError) as error:
            pytest.skip(f"TRL's GRPOTrainer._compute_loss internals changed: {error!r}")

    return _objective_gradient(loss, log_probs)


@pytest.mark.parametrize(
    ("loss_type", "epsilons", "method"),
    [("dapo", (0.2, 0.28), "dapo"), ("grpo", (0.2, 0.2), "grpo")],
)
def test_trl_clip_losses_equal_the_method(grpo_trainer, loss_type, epsilons, method):
    log_probs = _log_probs(_main_log_ratios())
    gradient = _trl_gradient(
        grpo_trainer,
        log_probs,
        _trl_inputs(),
        loss_type=loss_type,
        epsilon_low=epsilons[0],
        epsilon_high=epsilons[1],
    )
    _assert_same(gradient, _method(method, _token_batch(log_probs)))


def test_trl_sequence_level_grpo_equals_gspo(grpo_trainer):
    log_probs = _log_probs(_gspo_log_ratios())
    gradient = _trl_gradient(
        grpo_trainer,
        log_probs,
        _trl_inputs(),
        loss_type="grpo",
        importance_sampling_level="sequence",
        epsilon_low=3e-4,
        epsilon_high=4e-4,
    )
    _assert_same(gradient, _method("gspo", _token_batch(log_probs)))


def test_trl_sapo_equals_the_method(grpo_trainer):
    log_probs = _log_probs(_main_log_ratios())
    gradient = _trl_gradient(grpo_trainer, log_probs, _trl_inputs(), loss_type="sapo")
    _assert_same(gradient, _method("sapo", _token_batch(log_probs)))


def test_trl_cispo_absolute_cap_12_is_ratioscope_clip_1_02(grpo_trainer):
    """TRL's ``epsilon_high`` is the cap itself (``clamp(r, max=epsilon_high)``), no lower
    bound: 1.2 is ratioscope's (1.0, 0.2)."""
    log_probs = _log_probs(_main_log_ratios())
    gradient = _trl_gradient(
        grpo_trainer, log_probs, _trl_inputs(), loss_type="cispo", epsilon_high=1.2
    )
    _assert_same(gradient, _method("cispo", _token_batch(log_probs), clip=(1.0, 0.2)))


def test_trl_dr_grpo_equals_the_method(grpo_trainer):
    """``loss_type="dr_grpo"`` with ``scale_rewards="none"`` (advantage R - group mean)
    divides by rows x ``max_completion_length``: the padded width here."""
    log_probs = _log_probs(_main_log_ratios())
    advantages = F.dr_grpo_advantages(torch.tensor(REWARDS, dtype=DOUBLE), torch.tensor(GROUPS))
    gradient = _trl_gradient(
        grpo_trainer,
        log_probs,
        _trl_inputs(advantages=advantages),
        loss_type="dr_grpo",
        max_completion_length=WIDTH,
    )
    _assert_same(gradient, _method("dr_grpo", _token_batch(log_probs)))


#: mean log(pi_sampling / pi_theta) per row for the off-policy sequence mask at delta 0.05:
#: row 1 (A < 0) above it (dropped), row 3 (A < 0) below, rows 0 and 4 (A > 0) above (kept)
OPSM_DRIFT = (0.2, 0.08, 0.3, 0.03, 0.06)


def _opsm_rollout(log_probs: torch.Tensor) -> torch.Tensor:
    drift = torch.tensor(OPSM_DRIFT, dtype=DOUBLE).unsqueeze(1)
    wiggle = 0.01 * torch.tensor([1.0, -1.0, 2.0, -2.0, 0.5, -0.5], dtype=DOUBLE)
    rows = []
    for row, (_, ratios) in enumerate(ROWS):
        part = wiggle[: len(ratios)] - wiggle[: len(ratios)].mean()
        rows.append((drift[row] + part).tolist())
    return torch.where(_mask(), log_probs + _pad(rows, 0.0), -7.0)


def test_trl_off_policy_mask_equals_ratioscope(grpo_trainer):
    delta = 0.05
    log_probs = _log_probs(_main_log_ratios())
    sampling = _opsm_rollout(log_probs)
    mask = _mask()
    try:
        trl_mask = grpo_trainer.get_off_policy_mask(
            advantages=_advantages().unsqueeze(1),
            per_token_logps=log_probs,
            sampling_per_token_logps=sampling,
            mask=mask.to(DOUBLE),
            off_policy_threshold=delta,
        )
    except (AttributeError, TypeError) as error:
        pytest.skip(f"TRL's GRPOTrainer.get_off_policy_mask changed: {error!r}")
    weight, flags = C.off_policy_sequence_mask(
        torch.where(mask, sampling - log_probs, 0.0),
        F.token_advantages(_advantages(), mask),
        mask,
        delta,
    )
    torch.testing.assert_close(
        torch.where(mask, trl_mask.expand(-1, WIDTH), 0.0), weight.to(DOUBLE)
    )
    assert [bool(flags["masked"][row, 0]) for row in range(len(ROWS))] == [
        False,
        True,
        False,
        False,
        False,
    ]

    gradient = _trl_gradient(
        grpo_trainer,
        log_probs,
        _trl_inputs(sampling_per_token_logps=sampling),
        loss_type="grpo",
        off_policy_mask_threshold=delta,
    )
    batch = _token_batch(log_probs, rollout=sampling)
    _assert_same(gradient, _method("opsm", batch, delta=delta))


def _trl_vllm_ratio(log_rho: torch.Tensor, mode: str, clip_min, clip_max) -> torch.Tensor:
    """TRL's vLLM importance-sampling ratio as ``GRPOTrainer._generate_and_score_completions``
    builds it (inline there, so not callable on its own): ``exp((old - sampling) * mask)``
    per token, or of its row sum for ``sequence_*`` ([B, 1]); ``*_truncate`` clamps to
    [clip_min, clip_max], ``*_mask`` zeroes what lies outside."""
    diff = log_rho * _mask()
    if mode.startswith("sequence"):
        diff = diff.sum(dim=-1, keepdim=True)
    ratio = torch.exp(diff)
    if mode.endswith("truncate"):
        return torch.clamp(ratio, min=clip_min, max=clip_max)
    low = -math.inf if clip_min is None else clip_min
    high = math.inf if clip_max is None else clip_max
    return ratio.masked_fill((ratio < low) | (ratio > high), 0.0)


@pytest.mark.parametrize(
    ("mode", "clip_min", "clip_max", "method", "settings"),
    [
        ("token_truncate", None, 2.0, "tis", {"cap": 2.0}),
        ("token_mask", 0.5, 5.0, "icepop", {"bounds": (0.5, 5.0)}),
        ("sequence_truncate", None, 2.0, "seq_tis", {"cap": 2.0}),
    ],
)
def test_trl_vllm_importance_sampling_equals_the_correction(
    grpo_trainer, mode, clip_min, clip_max, method, settings
):
    log_rho = _log_rho("wide")
    log_probs = _log_probs(_main_log_ratios())
    ratio = _trl_vllm_ratio(log_rho, mode, clip_min, clip_max)
    gradient = _trl_gradient(
        grpo_trainer,
        log_probs,
        _trl_inputs(importance_sampling_ratio=ratio),
        loss_type="grpo",
        use_vllm=True,
        vllm_importance_sampling_correction=True,
    )
    batch = _token_batch(log_probs, rollout=_rollout(log_rho))
    _assert_same(gradient, _method(method, batch, **settings))
