"""ratioscope's mismatch keys against the metrics RL frameworks log online.

Each framework metric is recomputed here the way the framework's source computes it
(written from the source, cited by repository, commit or wheel, file and lines), on
random log-probs with ragged masks, and compared with ``ratioscope.analyze`` on the same
tensors. Where a framework clamps or truncates, the inputs stay inside the region where
the two agree, and one more case outside it asserts the documented difference.
docs/framework-metrics.md is the prose version of this file.

Sources (line numbers refer to these versions):

* verl mirror: volcengine/verl@b178a3cd56f58b2d502255daba591e92833930a7 (0.8.0.dev);
  verl wheel: PyPI verl 0.9.1 (sha256 db6e6f2a8d9d5808...50f49bfdd14).
* OpenRLHF mirror: OpenRLHF/OpenRLHF@3c3be6234e0cb353e76bb8019947db9dfe99fca7 (0.11.0);
  OpenRLHF wheel: PyPI openrlhf 0.11.2.
* TRL mirror: huggingface/trl@f2cd57710ae345ea6428ae95363267fcf38a3dc8 (1.10.0.dev0);
  TRL wheel: PyPI trl 1.16.0.
* prime-rl: PrimeIntellect-ai/prime-rl@559b44772e471d1538537b8805cc77f3824a5e64.
* slime: THUDM/slime@624b824a898ab0ec1fcb4d373004c7f3852bf515 (HEAD) and
  a6272da0d4f3d0a08520c99a2f3b4f6c887960dc (v0.3.1).
"""

from __future__ import annotations

import inspect
import itertools
import math

import pytest
import torch

import ratioscope
from ratioscope.data.batch import TokenBatch

# Same formula in float64, summed in another order.
EXACT = {"rel": 1e-9, "abs": 1e-12}
# verl's masked_mean divides by (count + 1e-8) (verl/utils/torch_functional.py, mirror
# L287-301, wheel L294-308), a relative change of about 1e-8 / count.
VERL = {"rel": 1e-7, "abs": 1e-9}


# ---------------------------------------------------------------------------- inputs
def _logprobs(
    seed: int,
    rows: int = 12,
    width: int = 20,
    scale: float = 0.05,
    lengths: list[int] | None = None,
) -> dict[str, torch.Tensor]:
    """Right-padded [rows, width] float64 log-probs of engine, old and current policy.

    old = engine + scale * N(0, 1) and current = old + scale * N(0, 1); padded positions
    hold values too, so every reference below has to mask them.
    """
    g = torch.Generator().manual_seed(seed)
    if lengths is None:
        drawn = torch.randint(1, width + 1, (rows,), generator=g)
        drawn[0] = width
        lengths = drawn.tolist()
    mask = torch.arange(width) < torch.tensor(lengths)[:, None]
    engine = -0.5 - 5.5 * torch.rand(rows, width, generator=g, dtype=torch.float64)
    old = engine + scale * torch.randn(rows, width, generator=g, dtype=torch.float64)
    current = old + scale * torch.randn(rows, width, generator=g, dtype=torch.float64)
    return {"mask": mask, "log_probs": current, "old_log_probs": old, "rollout_log_probs": engine}


def _report(t: dict[str, torch.Tensor], *names: str, per_sequence: bool = False):
    """ratioscope's report on the mask and the named log-probs (which fix ratio_pair)."""
    batch = TokenBatch.from_tensors({"mask": t["mask"], **{n: t[n] for n in names}})
    return ratioscope.analyze(batch, sections=["mismatch"], per_sequence=per_sequence)


def _micro_batches(t: dict[str, torch.Tensor], bounds: list[int]) -> list[dict]:
    return [{k: v[a:b] for k, v in t.items()} for a, b in itertools.pairwise(bounds)]


# ------------------------------------------------------------------- verl reference
def _verl_masked_sum(x, mask, axis=None):
    # verl_F.masked_sum: values at masked positions are replaced by 0 before the sum
    # (mirror verl/utils/torch_functional.py L283-284, wheel L290-291)
    return (torch.where(mask, x, 0.0) * mask).sum(dim=axis)


def _verl_masked_mean(x, mask, axis=None):
    # verl_F.masked_mean (mirror L300-301, wheel L307-308)
    return _verl_masked_sum(x, mask, axis) / (mask.sum(dim=axis) + 1e-8)


def verl_offpolicy_metrics(train, rollout, mask) -> dict[str, float]:
    """``compute_offpolicy_metrics`` (verl/trainer/ppo/rollout_corr_helper.py, mirror
    L834-940, wheel L904-1010; the body is the same in both), rollout part."""
    log_ratio = train - rollout  # mirror L894
    seq_train = _verl_masked_mean(train, mask, axis=-1)  # L877
    seq_rollout = _verl_masked_mean(rollout, mask, axis=-1)  # L899
    d = seq_rollout - seq_train  # L909
    safe = log_ratio.clamp(-20.0, 20.0)  # SAFETY_BOUND = 20.0 (L75 in both)
    seq_sum = _verl_masked_sum(log_ratio, mask, axis=-1).clamp(-20.0, 20.0)  # L934-935
    metrics = {
        "kl": _verl_masked_mean(rollout - train, mask),  # L889
        "k3_kl": _verl_masked_mean(torch.exp(log_ratio) - log_ratio - 1, mask),  # L895-896
        "log_ppl_diff": d.mean(),  # L910
        "log_ppl_abs_diff": d.abs().mean(),  # L911
        "log_ppl_diff_max": d.max(),  # L912
        "log_ppl_diff_min": d.min(),  # L913
        "ppl_ratio": torch.exp(d).mean(),  # L920
        "chi2_token": _verl_masked_mean(torch.exp(safe).square(), mask) - 1.0,  # L927-930
        "chi2_seq": torch.exp(2.0 * seq_sum).mean() - 1.0,  # L936-937
    }
    return {k: float(v) for k, v in metrics.items()}


def verl_is_metrics(
    log_ratio, mask, level: str = "token", threshold: float = 2.0, version: str = "0.9.1"
) -> dict[str, float]:
    """``compute_rollout_correction_weights`` + ``compute_is_metrics`` with TIS (a single
    float threshold), for the mirror (0.8.0.dev: mirror L481-598 and L601-713) or the
    0.9.1 wheel (L522-658 and L660-784)."""
    lower = 1.0 / threshold
    if level == "token":  # mirror L530-534, wheel L572-576
        for_metrics = log_ratio
        raw = torch.exp(log_ratio.clamp(-20.0, 20.0))
    else:  # sequence: one weight per row, broadcast to its tokens (mirror L536-544)
        for_metrics = _verl_masked_sum(log_ratio, mask, axis=-1).unsqueeze(-1)
        raw = torch.exp(for_metrics.clamp(-20.0, 20.0)).expand_as(log_ratio)
    raw = raw * mask  # mirror L550, wheel L592
    if version == "0.9.1":
        applied = raw.clamp(max=threshold)  # wheel L596: truncated before the metrics
        for_spread = applied.clamp(min=0.0, max=threshold)  # wheel L744, L754
    else:
        applied = raw  # mirror L552-562: metrics first, truncation after
        for_spread = raw.clamp(min=lower, max=threshold)  # mirror L677-679, L689
    metrics = {"rollout_is_mean": _verl_masked_mean(applied, mask)}  # mirror L657, wheel L723
    if level == "token":
        # mirror L660-667 (weights before truncation), wheel L726-733 (raw weights)
        metrics["rollout_is_ratio_fraction_high"] = _verl_masked_mean(
            (raw > threshold).double(), mask
        )
        metrics["rollout_is_ratio_fraction_low"] = _verl_masked_mean((raw < lower).double(), mask)
    else:  # fractions of rows, empty rows included (mirror L650-653, wheel L715-718)
        metrics["rollout_is_ratio_fraction_high"] = (
            (for_metrics > math.log(threshold)).double().mean()
        )
        metrics["rollout_is_ratio_fraction_low"] = (for_metrics < math.log(lower)).double().mean()
    mean = _verl_masked_mean(for_spread, mask)  # mirror L680-684, wheel L745-749
    variance = _verl_masked_mean(for_spread.square(), mask) - mean.square()
    metrics["rollout_is_std"] = torch.sqrt(variance.clamp(min=0.0))
    normalised = for_spread / (mean + 1e-8)  # mirror L690-694, wheel L755-759
    metrics["rollout_is_eff_sample_size"] = 1.0 / _verl_masked_mean(normalised.square(), mask)
    return {k: float(v) for k, v in metrics.items()}


def verl_ppo_kl(log_prob, old_log_prob, mask) -> float:
    """``actor/ppo_kl`` of one micro-batch: compute_policy_loss_vanilla
    (verl/trainer/ppo/core_algos.py, mirror L1210-1214, wheel L1336-1340)."""
    negative_approx_kl = (log_prob - old_log_prob).clamp(-20.0, 20.0)
    return float(_verl_masked_mean(-negative_approx_kl, mask))


# ----------------------------------------------------------------------------- verl
def test_verl_rollout_corr_metrics_are_the_rollout_row():
    # verl 0.9.1 computes rollout_corr/* once per step in the trainer from old_log_probs
    # and rollout_log_probs (wheel verl/trainer/ppo/ray_trainer.py L1650-1660;
    # rollout_corr_helper.py L1013-1067): ratioscope's old/engine row.
    t = _logprobs(seed=1)
    report = _report(t, "log_probs", "old_log_probs", "rollout_log_probs")
    assert report.mismatch.pairs == {"policy": "current/old", "rollout": "old/engine"}
    row = report.mismatch.rollout
    verl = verl_offpolicy_metrics(t["old_log_probs"], t["rollout_log_probs"], t["mask"])
    assert verl["kl"] == pytest.approx(row.k1, **VERL)
    assert verl["k3_kl"] == pytest.approx(row.k3, **VERL)
    assert verl["chi2_token"] == pytest.approx(row.chi2_token, **VERL)
    assert verl["chi2_seq"] == pytest.approx(row.chi2_seq, **VERL)
    assert verl["ppl_ratio"] == pytest.approx(row.ppl_ratio, **VERL)


def test_verl_log_ppl_metrics_are_sequence_means_not_abs_diff():
    t = _logprobs(seed=2, scale=0.2)
    report = _report(t, "old_log_probs", "rollout_log_probs", per_sequence=True)
    row = report.mismatch.rollout
    seq = report.sequences.frame()["rollout_log_ratio_mean"].to_torch().double()
    verl = verl_offpolicy_metrics(t["old_log_probs"], t["rollout_log_probs"], t["mask"])
    # d_i = mean_t(rollout) - mean_t(old) = -mean_t z: the per-sequence column, negated
    assert verl["log_ppl_diff"] == pytest.approx(float(-seq.mean()), **VERL)
    assert verl["log_ppl_abs_diff"] == pytest.approx(float(seq.abs().mean()), **VERL)
    assert verl["log_ppl_diff_max"] == pytest.approx(float(-seq.min()), **VERL)
    assert verl["log_ppl_diff_min"] == pytest.approx(float(-seq.max()), **VERL)
    # |mean_t z| <= mean_t |z|: log_ppl_abs_diff is not slime's abs diff
    assert verl["log_ppl_abs_diff"] < 0.5 * row.abs_diff_seq_mean
    # a mean over sequences, not over tokens: with ragged lengths it is not k1
    assert abs(verl["log_ppl_diff"] - row.k1) > 1e-3


def test_verl_actor_side_metrics_in_the_mirror_are_current_against_engine():
    # verl 0.8.0.dev's legacy actor recomputes rollout_corr/* per micro-batch with the
    # current log-probs (mirror verl/workers/actor/dp_actor.py L619-631 ->
    # rollout_corr_helper.py L1000-1036); the driver's metrics.update of the actor output
    # (mirror ray_trainer.py L1613-1614) overwrites the trainer's same-named keys (L1579).
    t = _logprobs(seed=3)
    report = _report(t, "log_probs", "rollout_log_probs")
    assert report.mismatch.pairs["policy"] == "current/engine"
    row = report.mismatch.policy
    verl = verl_offpolicy_metrics(t["log_probs"], t["rollout_log_probs"], t["mask"])
    assert verl["kl"] == pytest.approx(row.k1, **VERL)
    assert verl["k3_kl"] == pytest.approx(row.k3, **VERL)
    assert verl["chi2_token"] == pytest.approx(row.chi2_token, **VERL)
    assert verl["ppl_ratio"] == pytest.approx(row.ppl_ratio, **VERL)


def test_verl_chi2_clamps_at_20_and_k3_kl_does_not():
    t = _logprobs(seed=4)
    # one token with old - engine = 25: exp(2 * 25) is past verl's exp(2 * 20)
    t["rollout_log_probs"][2, 0] = -30.0
    t["old_log_probs"][2, 0] = -5.0
    row = _report(t, "old_log_probs", "rollout_log_probs").mismatch.rollout
    verl = verl_offpolicy_metrics(t["old_log_probs"], t["rollout_log_probs"], t["mask"])
    z = (t["old_log_probs"] - t["rollout_log_probs"])[t["mask"]]
    assert row.chi2_token == pytest.approx(float(torch.exp(2 * z).mean() - 1), **EXACT)
    assert verl["chi2_token"] < 1e-3 * row.chi2_token
    assert verl["chi2_seq"] < 1e-3 * row.chi2_seq
    # k1 and k3 have no clamp in verl (mirror L889, L894-896)
    assert verl["kl"] == pytest.approx(row.k1, **VERL)
    assert verl["k3_kl"] == pytest.approx(row.k3, **VERL)


def test_verl_counts_empty_responses_in_sequence_means():
    t = _logprobs(seed=5, rows=6, lengths=[20, 0, 7, 3, 0, 11])
    row = _report(t, "old_log_probs", "rollout_log_probs").mismatch.rollout
    verl = verl_offpolicy_metrics(t["old_log_probs"], t["rollout_log_probs"], t["mask"])
    # an empty row has d = 0 and sum log rho = 0, so it adds 1 to both means; ratioscope
    # leaves it out (row.sequences == 4 of 6)
    b, rows = row.sequences, 6
    assert b == 4
    assert verl["ppl_ratio"] == pytest.approx((b * row.ppl_ratio + rows - b) / rows, **VERL)
    assert verl["chi2_seq"] == pytest.approx(b * row.chi2_seq / rows, **VERL)


@pytest.mark.parametrize("version", ["0.8.0.dev", "0.9.1"])
def test_verl_token_is_metrics_inside_the_threshold(version):
    # scale 0.05: every rho = pi_old / pi_engine lies in [1/2, 2], nothing is truncated
    t = _logprobs(seed=6)
    row = _report(t, "old_log_probs", "rollout_log_probs").mismatch.rollout
    z = t["old_log_probs"] - t["rollout_log_probs"]
    assert bool((z[t["mask"]].abs() < math.log(2.0)).all())
    verl = verl_is_metrics(z, t["mask"], "token", threshold=2.0, version=version)
    assert verl["rollout_is_eff_sample_size"] == pytest.approx(row.ess, **VERL)
    # E[rho] = 1 + E[exp(z) - 1 - z] + E[z] = 1 + k3 - k1
    is_mean = 1.0 + row.k3 - row.k1
    assert verl["rollout_is_mean"] == pytest.approx(is_mean, **VERL)
    is_std = math.sqrt(1.0 + row.chi2_token - is_mean**2)
    assert verl["rollout_is_std"] == pytest.approx(is_std, **VERL)


@pytest.mark.parametrize("version", ["0.8.0.dev", "0.9.1"])
def test_verl_is_fractions_add_up_to_frac_outside(version):
    # both versions count the fractions on weights before truncation
    t = _logprobs(seed=7, scale=0.6)
    row = _report(t, "old_log_probs", "rollout_log_probs").mismatch.rollout
    z = t["old_log_probs"] - t["rollout_log_probs"]
    verl = verl_is_metrics(z, t["mask"], "token", threshold=2.0, version=version)
    both = verl["rollout_is_ratio_fraction_high"] + verl["rollout_is_ratio_fraction_low"]
    assert row.is_threshold == 2.0  # verl's default rollout_is_threshold
    assert 0.2 < row.frac_outside < 0.9
    assert both == pytest.approx(row.frac_outside, **VERL)


def test_verl_ess_is_after_truncation_ratioscope_before():
    t = _logprobs(seed=8, scale=0.6)
    row = _report(t, "old_log_probs", "rollout_log_probs").mismatch.rollout
    z = t["old_log_probs"] - t["rollout_log_probs"]
    r = torch.exp(z[t["mask"]])
    assert row.ess == pytest.approx(float(r.sum() ** 2 / (r.numel() * r.square().sum())), **EXACT)
    for version in ("0.8.0.dev", "0.9.1"):
        verl = verl_is_metrics(z, t["mask"], "token", threshold=2.0, version=version)
        # truncation removes the spread above 2 (and, in the mirror, below 1/2)
        assert verl["rollout_is_eff_sample_size"] > row.ess + 0.05

    # weights below 1/2 only: 0.9.1 keeps them (clamp(min=0)), the mirror lifts them to 1/2
    t["rollout_log_probs"] = t["old_log_probs"] + (t["log_probs"] - t["old_log_probs"]).abs()
    row = _report(t, "old_log_probs", "rollout_log_probs").mismatch.rollout
    z = t["old_log_probs"] - t["rollout_log_probs"]
    assert bool((z[t["mask"]] <= 0).all()) and row.frac_outside > 0.1
    new = verl_is_metrics(z, t["mask"], "token", threshold=2.0, version="0.9.1")
    old = verl_is_metrics(z, t["mask"], "token", threshold=2.0, version="0.8.0.dev")
    assert new["rollout_is_eff_sample_size"] == pytest.approx(row.ess, **VERL)
    assert old["rollout_is_eff_sample_size"] > row.ess + 0.01


def test_verl_sequence_is_ess_counts_each_sequence_once_per_token():
    # rollout_is="sequence": prod rho is broadcast to every token, and the ESS is taken
    # over tokens, so a sequence weighs as much as its length; ratioscope's ess_seq
    # weighs each sequence once. The two agree when all lengths are equal.
    full = _logprobs(seed=9, scale=0.02, lengths=[20] * 12)
    ragged = _logprobs(seed=9, scale=0.02)
    for t, equal in ((full, True), (ragged, False)):
        row = _report(t, "old_log_probs", "rollout_log_probs").mismatch.rollout
        z = t["old_log_probs"] - t["rollout_log_probs"]
        verl = verl_is_metrics(z, t["mask"], "sequence", threshold=2.0)
        if equal:
            assert verl["rollout_is_eff_sample_size"] == pytest.approx(row.ess_seq, **VERL)
        else:
            assert abs(verl["rollout_is_eff_sample_size"] - row.ess_seq) > 1e-4


def test_verl_ppo_kl_is_policy_k1_per_micro_batch():
    t = _logprobs(seed=10, scale=0.1)
    parts = _micro_batches(t, [0, 3, 12])
    values = []
    for part in parts:
        row = _report(part, "log_probs", "old_log_probs").mismatch.policy
        value = verl_ppo_kl(part["log_probs"], part["old_log_probs"], part["mask"])
        assert value == pytest.approx(row.k1, **VERL)
        values.append(value)
    # the step's actor/ppo_kl is np.mean over micro-batches (mirror
    # verl/utils/metric/utils.py L49-57; wheel verl/workers/utils/losses.py L116,
    # AggregationType.MEAN), not weighted by tokens: it is not the pooled k1
    pooled = _report(t, "log_probs", "old_log_probs").mismatch.policy
    assert abs(sum(values) / len(values) - pooled.k1) > 1e-4


def test_verl_ppo_kl_clamps_the_log_ratio_at_20():
    t = _logprobs(seed=11)
    t["log_probs"][0, 5] = t["old_log_probs"][0, 5] + 25.0
    row = _report(t, "log_probs", "old_log_probs").mismatch.policy
    verl = verl_ppo_kl(t["log_probs"], t["old_log_probs"], t["mask"])
    # k1 = mean(-z); verl's mean(-clamp(z, -20, 20)) misses (25 - 20) on one token
    assert row.k1 - verl == pytest.approx(-5.0 / row.tokens, rel=1e-6)


# ------------------------------------------------------------------------- OpenRLHF
def _openrlhf_masked_mean(x, mask):
    # openrlhf/models/utils.py masked_mean, dim=None (mirror L166-169, wheel L199-202)
    return (x * mask).sum() / mask.sum()


def openrlhf_step_kls(parts: list[dict]) -> dict[str, float]:
    """``ppo_kl`` and ``vllm_kl`` of PolicyLoss.forward per micro-batch (openrlhf/models/
    loss.py, mirror L166 and L218-229, wheel L185 and L247-258), reduced over the step as
    PPOActor.ppo_train does for 0-d tensors: weighted by action tokens (openrlhf/trainer/
    ray/ppo_actor.py, mirror L202-221, L245-258 and L385-388)."""
    sums = {"ppo_kl": 0.0, "vllm_kl": 0.0}
    tokens = 0.0
    for p in parts:
        m = p["mask"]
        ppo_kl = _openrlhf_masked_mean(-(p["log_probs"] - p["old_log_probs"]), m)
        vllm_kl = _openrlhf_masked_mean(p["rollout_log_probs"] - p["old_log_probs"], m)
        n = float(m.sum())
        sums["ppo_kl"] += float(ppo_kl) * n
        sums["vllm_kl"] += float(vllm_kl) * n
        tokens += n
    return {k: v / tokens for k, v in sums.items()}


def test_openrlhf_ppo_kl_and_vllm_kl_are_k1_of_both_rows():
    t = _logprobs(seed=12, scale=0.1)
    # OpenRLHF's ppo_kl is unclamped (only the ratio is clamped, wheel L187): equal even
    # for a log-ratio of 25
    t["log_probs"][4, 0] = t["old_log_probs"][4, 0] + 25.0
    report = _report(t, "log_probs", "old_log_probs", "rollout_log_probs")
    kls = openrlhf_step_kls(_micro_batches(t, [0, 2, 7, 12]))
    assert kls["ppo_kl"] == pytest.approx(report.mismatch.policy.k1, **EXACT)
    assert kls["vllm_kl"] == pytest.approx(report.mismatch.rollout.k1, **EXACT)


def test_openrlhf_policy_loss_itself():
    # Needs the whole openrlhf import chain (peft, transformers, deepspeed, flash_attn,
    # pylatexenc): skipped unless openrlhf is installed with its dependencies.
    loss = pytest.importorskip("openrlhf.models.loss")
    t = _logprobs(seed=13, scale=0.1)
    params = inspect.signature(loss.PolicyLoss).parameters
    if "is_correction_level" in params:  # 0.11.2
        policy_loss = loss.PolicyLoss(
            is_correction_level="token",
            is_correction_mode="clip",
            is_correction_threshold=(0.5, 5.0),
        )
    else:  # 0.11.0
        policy_loss = loss.PolicyLoss(
            enable_vllm_is_correction=True, vllm_is_truncated_threshold=[0.5, 5.0]
        )
    advantages = torch.randn(t["mask"].shape, dtype=torch.float64)
    out = policy_loss(
        t["log_probs"],
        t["old_log_probs"],
        advantages,
        action_mask=t["mask"],
        rollout_log_probs=t["rollout_log_probs"],
    )
    report = _report(t, "log_probs", "old_log_probs", "rollout_log_probs")
    assert float(out[2]) == pytest.approx(report.mismatch.policy.k1, **EXACT)
    assert float(out[3]) == pytest.approx(report.mismatch.rollout.k1, **EXACT)


# ------------------------------------------------------------------------------ TRL
def trl_sampling_metrics(
    old, sampling, mask, mode: str = "sequence_mask", clip_min=None, clip_max=3.0
) -> dict[str, float]:
    """The ``sampling/*`` metrics of one process and one generation batch:
    GRPOTrainer._generate_and_score_completions (trl/trainer/grpo_trainer.py, wheel
    1.16.0 L2660-2708 and L2860-2896; mirror L2579-2623 and L2779-2813)."""
    diff = torch.nan_to_num((old - sampling) * mask, nan=0.0)  # wheel L2662-2665
    sequence_level = mode in ("sequence_mask", "sequence_truncate")
    ratio = torch.exp(diff.sum(-1, keepdim=True) if sequence_level else diff)
    if mode.endswith("_truncate"):
        ratio = torch.clamp(ratio, min=clip_min, max=clip_max)
    else:
        low = -math.inf if clip_min is None else clip_min
        high = math.inf if clip_max is None else clip_max
        ratio = ratio.masked_fill((ratio < low) | (ratio > high), 0.0)
    delta = torch.abs(old - sampling)
    delta = delta[mask & ~torch.isnan(delta)]
    flat = ratio.flatten() if sequence_level else ratio[mask]
    return {
        "sampling/sampling_logp_difference/mean": float(delta.mean()),
        "sampling/sampling_logp_difference/max": float(delta.max()),
        "sampling/importance_sampling_ratio/mean": float(flat.mean()),
    }


def test_trl_sampling_logp_difference_is_rollout_abs_diff():
    # old_per_token_logps vs vLLM's sampling_per_token_logps: ratioscope's TRL profile
    # reads them as old_log_probs and rollout_log_probs, the old/engine row
    t = _logprobs(seed=14, scale=0.3)
    report = _report(t, "old_log_probs", "rollout_log_probs")
    assert report.mismatch.pairs["rollout"] == "old/engine"
    row = report.mismatch.rollout
    trl = trl_sampling_metrics(t["old_log_probs"], t["rollout_log_probs"], t["mask"])
    assert trl["sampling/sampling_logp_difference/mean"] == pytest.approx(row.abs_diff, **EXACT)
    assert trl["sampling/sampling_logp_difference/max"] == pytest.approx(row.abs_diff_max, **EXACT)


def test_trl_token_importance_sampling_ratio_mean_before_truncation():
    t = _logprobs(seed=15, scale=0.1)
    row = _report(t, "old_log_probs", "rollout_log_probs").mismatch.rollout
    assert math.exp(row.abs_diff_max) < 3.0  # nothing reaches clip_max
    for mode in ("token_truncate", "token_mask"):
        trl = trl_sampling_metrics(t["old_log_probs"], t["rollout_log_probs"], t["mask"], mode=mode)
        is_mean = 1.0 + row.k3 - row.k1
        assert trl["sampling/importance_sampling_ratio/mean"] == pytest.approx(is_mean, **EXACT)


def test_trl_sequence_mask_drops_sequences_above_clip_max():
    # the default mode: prod rho per sequence, zeroed above vllm_importance_sampling_clip_max
    t = _logprobs(seed=16, scale=0.05)
    row = _report(t, "old_log_probs", "rollout_log_probs").mismatch.rollout
    # mean over sequences of prod rho, from ess_seq = (E w)^2 / E w^2 and chi2_seq = E w^2 - 1
    mean_w = math.sqrt(row.ess_seq * (1.0 + row.chi2_seq))
    trl = trl_sampling_metrics(t["old_log_probs"], t["rollout_log_probs"], t["mask"])
    assert trl["sampling/importance_sampling_ratio/mean"] == pytest.approx(mean_w, rel=1e-9)

    t["old_log_probs"][3, 0] += 2.0  # prod rho of row 3 goes past 3
    row = _report(t, "old_log_probs", "rollout_log_probs").mismatch.rollout
    z = t["old_log_probs"] - t["rollout_log_probs"]
    w3 = math.exp(float(torch.where(t["mask"], z, 0.0)[3].sum()))
    assert w3 > 3.0
    mean_w = math.sqrt(row.ess_seq * (1.0 + row.chi2_seq))
    trl = trl_sampling_metrics(t["old_log_probs"], t["rollout_log_probs"], t["mask"])
    rows = t["mask"].shape[0]
    expected = mean_w - w3 / rows
    assert trl["sampling/importance_sampling_ratio/mean"] == pytest.approx(expected, rel=1e-9)


# ------------------------------------------------------------------------- prime-rl
def prime_rl_mismatch_kl(parts: list[dict]) -> float:
    """``mismatch_kl/all/mean``: compute_importance_ratio_and_mismatch_kl per token
    (src/prime_rl/trainer/rl/loss.py L100-106), kept on the loss mask per micro-batch
    (src/prime_rl/trainer/rl/train.py L496-512; no rl/ref_kl weights), concatenated over
    micro-batches and ranks and averaged (src/prime_rl/trainer/utils.py L245-281)."""
    kept = []
    for p in parts:
        log_ratio = p["log_probs"] - p["rollout_log_probs"]  # trainer - inference
        ratio = torch.exp(log_ratio)
        kept.append((ratio - log_ratio - 1)[p["mask"]])
    return float(torch.cat(kept).mean())


def test_prime_rl_mismatch_kl_is_policy_k3():
    # prime-rl dumps trainer and inference log-probs only: the current/engine policy row
    t = _logprobs(seed=17, scale=0.2)
    report = _report(t, "log_probs", "rollout_log_probs")
    assert report.mismatch.pairs["policy"] == "current/engine"
    value = prime_rl_mismatch_kl(_micro_batches(t, [0, 5, 6, 12]))
    assert value == pytest.approx(report.mismatch.policy.k3, **EXACT)


# ---------------------------------------------------------------------------- slime
def slime_step_metric(x, mask, per_token: bool = False) -> float:
    """A slime per-step training metric of a per-token value x: sum_of_sample_mean
    (slime/backends/megatron_utils/cp_utils.py L47-124, CP = 1, default denominators =
    each sample's own mask sum) summed over micro-batches and DP ranks and divided by
    the step's sample count, or with --calculate-per-token-loss the masked token sum
    over sum(clamp_min(mask.sum(), 1)) (slime/observability/train_metric_utils.py
    L18-59; loss.py L1317; v0.3.1 cp_utils.py L47-81 and L127-168)."""
    # each padded row is one sample's response; its mask row is the sample's loss mask
    rows, width = mask.shape
    pieces = x.reshape(-1).split([width] * rows)  # slime concatenates the samples
    samples = list(zip(pieces, [row.double() for row in mask], strict=True))
    if per_token:
        total = sum(float((p * m).sum()) for p, m in samples)
        return total / sum(max(float(m.sum()), 1.0) for _, m in samples)
    total = sum(float((p * m).sum()) / max(float(m.sum()), 1.0) for p, m in samples)
    return total / rows


def test_slime_train_rollout_logprob_abs_diff_is_rollout_abs_diff_seq_mean():
    # |old_log_probs - rollout_log_probs| (slime/backends/megatron_utils/loss.py HEAD
    # L1136-1140, v0.3.1 L1073-1077); slime's `log_probs` are the recomputed old policy,
    # read by ratioscope as old_log_probs: the old/engine row
    t = _logprobs(seed=18, scale=0.3)
    row = _report(t, "old_log_probs", "rollout_log_probs").mismatch.rollout
    abs_diff = (t["old_log_probs"] - t["rollout_log_probs"]).abs()
    per_sample = slime_step_metric(abs_diff, t["mask"])
    per_token = slime_step_metric(abs_diff, t["mask"], per_token=True)
    assert per_sample == pytest.approx(row.abs_diff_seq_mean, **EXACT)
    assert per_token == pytest.approx(row.abs_diff, **EXACT)


def test_slime_counts_samples_without_loss_tokens():
    # a removed sample (all-zero loss mask) still counts in the step's sample count
    t = _logprobs(seed=19, rows=5, lengths=[9, 0, 20, 4, 13], scale=0.3)
    row = _report(t, "old_log_probs", "rollout_log_probs").mismatch.rollout
    abs_diff = (t["old_log_probs"] - t["rollout_log_probs"]).abs()
    value = slime_step_metric(abs_diff, t["mask"])
    assert value == pytest.approx(row.abs_diff_seq_mean * row.sequences / 5, **EXACT)


def test_slime_ppo_kl_is_a_sequence_mean_of_minus_z():
    # ppo_kl = old_log_probs - log_probs per token (loss.py HEAD L1033), reduced by
    # sum_of_sample_mean (L1107): -(mean over samples of the per-sample mean of z)
    t = _logprobs(seed=20, scale=0.2)
    report = _report(t, "log_probs", "old_log_probs", per_sequence=True)
    row = report.mismatch.policy
    seq = report.sequences.frame()["policy_log_ratio_mean"].to_torch().double()
    ppo_kl = t["old_log_probs"] - t["log_probs"]
    per_sample = slime_step_metric(ppo_kl, t["mask"])
    assert per_sample == pytest.approx(float(-seq.mean()), **EXACT)
    assert abs(per_sample - row.k1) > 1e-4
    assert slime_step_metric(ppo_kl, t["mask"], per_token=True) == pytest.approx(row.k1, **EXACT)
