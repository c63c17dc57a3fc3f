"""The covariance, future_policy, tepo and trust_region sections of analyze, end to end.

Independent references: the exact functional on all tokens of all files at once (groups
made unique per file), plain numpy for the formulas that are short to write, and the
closed-form binary QUATRO table; streaming values read from histograms are checked
within the histogram's stated relative error.
"""

from __future__ import annotations

import json
import math

import numpy as np
import polars as pl
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

import ratioscope
from ratioscope.analysis.pipeline import merge_reports
from ratioscope.cli import app
from ratioscope.data.params import AnalysisParams
from ratioscope.functional.covariance import (
    covariance_percentiles,
    covariance_weights,
    cumulative_covariance_share,
)
from ratioscope.functional.fpa import future_log_probs_approx
from ratioscope.functional.histogram import RELATIVE_ERROR
from ratioscope.functional.quatro import (
    binary_advantage_table,
    grpo_advantages,
    quatro_delta_sweep,
)
from ratioscope.functional.tepo import (
    kl_mask_quadrants,
    sequence_clip_fraction,
    tepo_surrogate,
)
from ratioscope.io.documents import to_jsonable
from ratioscope.sections import covariance as covariance_section
from ratioscope.sections import future_policy
from ratioscope.sections.registry import section_classes
from ratioscope.sections.summaries import Histogram

runner = CliRunner()
TOL = RELATIVE_ERROR + 1e-9  # histogram readings: same bin as the exact value
SECTIONS = ("covariance", "future_policy", "tepo", "trust_region")


# ------------------------------------------------------------------------ fixtures
def make_arrays(
    seed: int, rows: int = 32, width: int = 24, group_size: int = 8, vocab: int = 0
) -> dict[str, np.ndarray]:
    """Canonical float64 arrays of a GRPO-like batch: binary rewards, groups of 8 (one of
    them with all rewards equal), entropies, and logits when ``vocab`` > 0."""
    rng = np.random.default_rng(seed)
    lengths = rng.integers(3, width + 1, size=rows)
    lengths[0] = width
    mask = np.arange(width)[None, :] < lengths[:, None]
    mask[1, 1] = False  # a masked token inside a sequence
    group = np.repeat(np.arange(rows // group_size), group_size)
    rewards = rng.integers(0, 2, size=rows).astype(np.float64)
    rewards[:group_size] = 1.0  # a degenerate group
    adv = np.zeros(rows)
    for g in np.unique(group):
        r = rewards[group == g]
        adv[group == g] = (r - r.mean()) / (r.std() + 1e-6)
    arrays = {
        "mask": mask,
        "old_log_probs": -rng.gamma(1.0, 0.8, size=(rows, width)),
        "advantages": np.repeat(adv[:, None], width, axis=1) + rng.normal(0, 0.05, (rows, width)),
        "entropy": rng.uniform(0.1, 2.0, size=(rows, width)),
        "rewards": rewards,
        "group": group,
        "token_ids": rng.integers(0, vocab or 50, size=(rows, width)),
    }
    arrays["old_entropy"] = arrays["entropy"] + rng.normal(0, 0.2, (rows, width))
    arrays["log_probs"] = arrays["old_log_probs"] + rng.normal(0, 0.1, (rows, width))
    arrays["ref_log_probs"] = arrays["old_log_probs"] + rng.normal(0, 0.3, (rows, width))
    if vocab:
        logits = rng.normal(0, 2.0, size=(rows, width, vocab)).astype(np.float32)
        arrays["logits"] = logits
        arrays["ref_logits"] = (logits + rng.normal(0, 0.5, logits.shape)).astype(np.float32)
    return arrays


def write(arrays: dict[str, np.ndarray], path, drop: tuple[str, ...] = ()) -> str:
    tensors = {
        k: torch.from_numpy(np.ascontiguousarray(v)) for k, v in arrays.items() if k not in drop
    }
    if str(path).endswith(".safetensors"):
        from safetensors.torch import save_file

        save_file(tensors, str(path))
    else:
        torch.save(tensors, path)
    return str(path)


def concatenated(parts: list[dict[str, np.ndarray]]) -> dict[str, np.ndarray]:
    """All files as one batch, group ids made unique per file (groups never span files)."""
    joined = {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}
    offsets, start = [], 0
    for part in parts:
        offsets.append(part["group"] + start)
        start += int(part["group"].max()) + 1
    joined["group"] = np.concatenate(offsets)
    return joined


def t(array: np.ndarray) -> torch.Tensor:
    return torch.from_numpy(np.ascontiguousarray(array))


def valid(array: np.ndarray, mask: np.ndarray) -> np.ndarray:
    return array[mask]


def close(value: float, exact: float, rel: float = 1e-9, abs_: float = 1e-12) -> bool:
    return abs(value - exact) <= rel * abs(exact) + abs_


@pytest.fixture
def three_files(tmp_path):
    parts = [make_arrays(seed) for seed in (1, 2, 3)]
    paths = [write(p, tmp_path / f"step_{i}.pt") for i, p in enumerate(parts)]
    return parts, paths


# ---------------------------------------------------------------------- covariance
@pytest.mark.parametrize("scope", ["group", "batch"])
def test_covariance_matches_the_functional_on_all_tokens(three_files, scope):
    parts, paths = three_files
    section = ratioscope.analyze(paths, cov_scope=scope).covariance
    joined = concatenated(parts)
    mask = joined["mask"]
    if scope == "group":
        c, w, w_norm = (
            x.numpy()
            for x in covariance_weights(
                t(joined["log_probs"]), t(joined["advantages"]), t(mask), t(joined["group"])
            )
        )
    else:  # one scope per file (one training batch)
        pieces = [
            covariance_weights(t(p["log_probs"]), t(p["advantages"]), t(p["mask"]), None)
            for p in parts
        ]
        c, w, w_norm = (np.concatenate([piece[i].numpy() for piece in pieces]) for i in range(3))
    assert section.scope == scope and section.scope_files == {scope: 3}
    assert section.scopes == (12 if scope == "group" else 3)
    cv, wv, wnv, av = c[mask], w[mask], w_norm[mask], joined["advantages"][mask]
    assert section.tokens == mask.sum()
    assert close(section.c.mean, cv.mean(), 1e-9, 1e-12)
    assert close(section.c.std, cv.std(), 1e-9)
    assert close(section.weights.distribution.mean, wv.mean(), 1e-12)
    assert section.weights.fraction_below == {"0.5": np.mean(wv < 0.5), "0.1": np.mean(wv < 0.1)}
    assert close(section.normalised_weights.mean, 1.0, 1e-12)
    # w lives near 1: its quantiles are read in log w, within the bound they state
    for distribution, values in (
        (section.weights.distribution, wv),
        (section.normalised_weights, wnv),
    ):
        assert distribution.quantile_bound.coordinate == "log"
        for q, value in distribution.quantiles.items():
            exact = float(np.quantile(values, float(q), method="inverted_cdf"))
            assert distribution.quantile_bound.holds(value, exact), q
    counts, _ = np.histogram(wv, bins=50, range=(0.0, 1.0))
    assert section.weight_histogram.counts == counts.tolist()
    # advantage mass, written out from docs/metrics-objectives.md
    assert close(section.advantage_mass.removed, 1 - np.sum(wv * abs(av)) / np.sum(abs(av)), 1e-9)
    assert close(
        section.advantage_mass.removed_normalised,
        1 - np.sum(wnv * abs(av)) / np.sum(abs(av)),
        1e-9,
        1e-12,
    )
    # Table 1 and Fig. 3 from histograms, against the exact functional
    exact = covariance_percentiles(t(cv))
    table = section.percentiles
    assert (table.positive_count, table.negative_count) == (
        exact.positive_count,
        exact.negative_count,
    )
    for i, row in enumerate(table.positive):
        assert close(row.threshold, exact.positive_threshold[i], TOL)
        assert close(row.top_mean, exact.positive_mean[i], TOL)
        assert close(row.band_mean, exact.positive_band_mean[i], TOL)
    for i, row in enumerate(table.negative):
        assert close(row.threshold, exact.negative_threshold[i], TOL)
        assert close(row.top_mean, exact.negative_mean[i], TOL)
        assert close(row.band_mean, exact.negative_band_mean[i], TOL)
    fractions = section.cumulative_curve.fraction
    shares = cumulative_covariance_share(t(cv), None, fractions)
    for got, want in zip(section.cumulative_curve.share, shares, strict=True):
        assert close(got, want, TOL)
    assert section.cumulative_curve.share[-1] == pytest.approx(1.0, abs=1e-12)


def test_clip_cov_and_kl_cov_count_per_batch_in_numpy(three_files):
    parts, paths = three_files
    section = ratioscope.analyze(paths).covariance
    clip_count = clip_eligible = kl_count = total = 0
    for p in parts:
        mask = p["mask"]
        lp, a = p["log_probs"][mask], p["advantages"][mask]
        c = (lp - lp.mean()) * (a - a.mean())  # over the whole batch, as Clip-Cov does
        r = np.exp((p["log_probs"] - p["old_log_probs"])[mask])
        ppo_clipped = ((a > 0) & (r > 1.28)) | ((a < 0) & (r < 0.8))
        eligible = int(np.sum((c > 1) & (c < 5) & ~ppo_clipped))
        n = int(mask.sum())
        clip_count += min(eligible, max(1, math.floor(2e-4 * n)))
        clip_eligible += eligible
        kl_count += max(1, math.floor(2e-3 * n))
        total += n
    assert (section.clip_cov.count, section.clip_cov.eligible) == (clip_count, clip_eligible)
    assert section.clip_cov.total == section.kl_cov.total == total
    assert section.kl_cov.count == kl_count
    assert section.kl_cov.fraction == kl_count / total


def test_covariance_tiny_hand_computed_case():
    # the functional's doctest batch: c = [[0.625, -0.375], [-1.125, 1.375]]
    batch = ratioscope.TokenBatch.from_tensors(
        {
            "mask": torch.ones(2, 2, dtype=torch.bool),
            "log_probs": torch.tensor([[-1.0, -2.0], [-0.5, -3.0]], dtype=torch.float64),
            "old_log_probs": torch.zeros(2, 2, dtype=torch.float64),
            "advantages": torch.tensor([[1.0, 1.0], [-1.0, -1.0]], dtype=torch.float64),
        }
    )
    section = ratioscope.analyze(batch).covariance
    assert section.scope == "batch"
    top = {row.fraction: row for row in section.percentiles.positive}
    bottom = {row.fraction: row for row in section.percentiles.negative}
    assert top[1.0].top_mean == pytest.approx(1.0, rel=TOL)
    assert top[1.0].threshold == pytest.approx(0.625, rel=TOL)
    assert top[0.01].top_mean == pytest.approx(1.375, rel=TOL)
    assert bottom[1.0].top_mean == pytest.approx(-0.75, rel=TOL)
    assert bottom[0.01].threshold == pytest.approx(-1.125, rel=TOL)
    # |c| = 1.375, 1.125, 0.625, 0.375 of total 3.5: the top token holds 1.375 / 3.5
    assert section.cumulative_share["0.0001"] == pytest.approx(1.375 / 3.5, rel=TOL)


@settings(max_examples=40, deadline=None)
@given(
    st.lists(
        st.floats(1e-6, 1e3).flatmap(lambda m: st.sampled_from([m, -m, 0.0])),
        min_size=1,
        max_size=300,
    )
)
def test_histogram_table_is_within_the_stated_error_of_the_exact_table(values):
    c = torch.tensor(values, dtype=torch.float64)
    histogram = Histogram.with_sums()
    histogram.add(c)
    fractions = (1e-4, 0.01, 0.2, 0.4, 1.0)
    exact = covariance_percentiles(c, None, fractions)
    table = covariance_section.percentile_table(histogram, fractions)
    for sign, rows in (("positive", table.positive), ("negative", table.negative)):
        for i, row in enumerate(rows):
            for field, key in (
                ("threshold", "threshold"),
                ("top_mean", "mean"),
                ("band_mean", "band_mean"),
            ):
                want = getattr(exact, f"{sign}_{key}")[i]
                got = getattr(row, field)
                assert (math.isnan(got) and math.isnan(want)) or close(got, want, TOL, 1e-12)
    shares = covariance_section.cumulative_share(histogram, (1e-3, 0.1, 0.5, 1.0))
    for got, want in zip(
        shares, cumulative_covariance_share(c, None, (1e-3, 0.1, 0.5, 1.0)), strict=True
    ):
        assert (math.isnan(got) and math.isnan(want)) or close(got, want, TOL, 1e-12)


# --------------------------------------------------------------------------- FPA
def _weights_by_class(log_pi: np.ndarray, mask: np.ndarray, correct: np.ndarray):
    w = np.exp(np.array([log_pi[i][mask[i]].mean() for i in range(len(mask))]))
    return {"all": w, "correct": w[correct], "incorrect": w[~correct]}


def test_future_policy_approximation_against_numpy(three_files):
    parts, paths = three_files
    params = AnalysisParams(fpa_lambda=2.0, fpa_threshold=0.3)
    report = ratioscope.analyze(paths, params=params)
    section = report.future_policy
    joined = concatenated(parts)
    mask, correct = joined["mask"], joined["rewards"] > 0
    lp, ref = joined["log_probs"], joined["ref_log_probs"]
    assert section.method == "approximation" and section.method_files == {"approximation": 3}
    assert any(w.startswith("future_policy: method 'approximation'") for w in report.warnings)
    current = _weights_by_class(lp, mask, correct)
    future = _weights_by_class(3.0 * lp - 2.0 * ref, mask, correct)
    for name in ("all", "correct", "incorrect"):
        assert close(getattr(section.current_weight, name).mean, current[name].mean(), 1e-12)
        assert close(getattr(section.future_weight, name).mean, future[name].mean(), 1e-12)
        ratio = future[name] / current[name]
        assert close(getattr(section.future_to_current, name).mean, ratio.mean(), 1e-12)
        below = getattr(section.below_threshold["future"], name)
        assert (below.count, below.total) == (int(np.sum(future[name] < 0.3)), future[name].size)
        below = getattr(section.below_threshold["current"], name)
        assert below.count == int(np.sum(current[name] < 0.3))
    sums = np.array([(lp - ref)[i][mask[i]].sum() for i in range(len(mask))])
    assert close(section.log_ratio_ref["sequence"].incorrect.mean, sums[~correct].mean(), 1e-12)
    per_token = np.array([(lp - ref)[i][mask[i]].mean() for i in range(len(mask))])
    assert close(section.log_ratio_ref["per_token"].correct.mean, per_token[correct].mean(), 1e-12)
    # the sweep: one row per --fpa-lambda-sweep value, through the functional
    assert [row.lam for row in section.sweep] == list(params.fpa_lambdas)
    for row in section.sweep:
        approx = future_log_probs_approx(t(lp), t(ref), row.lam).numpy()
        weights = _weights_by_class(approx, mask, correct)
        assert close(row.weight_mean.incorrect, weights["incorrect"].mean(), 1e-12)
        assert row.below_threshold.all.count == int(np.sum(weights["all"] < 0.3))


def _log_softmax(x: np.ndarray) -> np.ndarray:
    top = x.max(axis=-1, keepdims=True)
    return x - top - np.log(np.exp(x - top).sum(axis=-1, keepdims=True))


@pytest.mark.parametrize(
    ("suffix", "span"), [(".pt", 3), (".safetensors", 3), (".safetensors", 25), (".pt", None)]
)
def test_future_policy_exact_from_logits_against_numpy(tmp_path, monkeypatch, suffix, span):
    vocab = 13
    parts = [make_arrays(seed, rows=16, width=10, vocab=vocab) for seed in (4, 5)]
    paths = [write(p, tmp_path / f"logits_{i}{suffix}") for i, p in enumerate(parts)]
    # 3 tokens: rows in several slices, across masked holes; 25: rows joined in pairs;
    # None: the default, whole chunks at once
    if span is not None:
        monkeypatch.setattr(future_policy, "SLICE_ELEMENTS", span * vocab)
    section = ratioscope.analyze(paths, chunk_elements=40).future_policy
    assert section.method == "exact"
    joined = concatenated(parts)
    mask, correct, ids = joined["mask"], joined["rewards"] > 0, joined["token_ids"]
    h, h_ref = joined["logits"].astype(np.float64), joined["ref_logits"].astype(np.float64)

    def picked(logits):
        return np.take_along_axis(_log_softmax(logits), ids[..., None], axis=-1)[..., 0]

    current = _weights_by_class(picked(h), mask, correct)
    for row in section.sweep:
        lam = row.lam
        future = _weights_by_class(picked((1 + lam) * h - lam * h_ref), mask, correct)
        for name in ("all", "correct", "incorrect"):
            assert close(getattr(row.weight_mean, name), future[name].mean(), 1e-5)
            ratio = (future[name] / current[name]).mean()
            assert close(getattr(row.ratio_mean, name), ratio, 1e-5)
    assert close(section.current_weight.all.mean, current["all"].mean(), 1e-5)
    log_ratio = picked(h) - picked(h_ref)
    sums = np.array([log_ratio[i][mask[i]].sum() for i in range(len(mask))])
    assert close(section.log_ratio_ref["sequence"].all.mean, sums.mean(), 1e-5, 1e-6)


@settings(max_examples=60, deadline=None)
@given(
    st.integers(1, 12).flatmap(
        lambda width: st.tuples(
            st.just(width),
            st.lists(st.integers(0, width), min_size=1, max_size=12),
            st.integers(1, 30),
            st.booleans(),
        )
    )
)
def test_segments_cover_every_row_within_the_span(case):
    width, extents, span, join = case
    ranges = future_policy.segments(extents, width, span, join=join)
    covered = set()
    for start, stop in ranges:
        assert 0 <= start < stop <= len(extents) * width
        assert stop - start <= span
        covered.update(range(start, stop))
    needed = {row * width + col for row, extent in enumerate(extents) for col in range(extent)}
    assert needed <= covered
    read = sum(stop - start for start, stop in ranges)
    assert read - len(needed) <= 0.25 * read + 1e-9  # padding read stays within 25 %
    if not join:
        assert all((stop - 1) // width == start // width for start, stop in ranges)


# -------------------------------------------------------------------------- TEPO
def test_tepo_against_the_functional_and_numpy(three_files):
    parts, paths = three_files
    section = ratioscope.analyze(paths).tepo
    joined = concatenated(parts)
    mask = joined["mask"]
    z = joined["log_probs"] - joined["old_log_probs"]
    adv = joined["advantages"]
    weights = np.exp(np.array([z[i][mask[i]].mean() for i in range(len(mask))]))
    assert section.sequences == len(weights) and section.tokens == mask.sum()
    assert close(section.weight.mean, weights.mean(), 1e-12)
    assert close(section.weight.std, weights.std(), 1e-9)
    for q, value in section.weight.quantiles.items():
        exact = np.quantile(weights, float(q), method="inverted_cdf")
        assert abs(math.log(value) - math.log(exact)) <= TOL * abs(math.log(exact)) + 1e-12
    low, high = section.clip_band
    assert section.outside_band == np.mean((weights > 1 + high) | (weights < 1 - low))
    band = (low, high)
    args = (t(z), t(adv), t(mask), band)
    assert section.clip_fraction == pytest.approx(sequence_clip_fraction(*args), abs=1e-15)
    literal = sequence_clip_fraction(*args, form="literal")
    assert section.clip_fraction_literal == pytest.approx(literal, abs=1e-15)
    exact = tepo_surrogate(*args)
    assert close(section.surrogate.token_mean, -exact.token_mean, 1e-9, 1e-12)
    assert close(section.surrogate.seq_mean_token_mean, -exact.seq_mean_token_mean, 1e-9, 1e-12)
    quadrants = kl_mask_quadrants(t(adv), t(joined["entropy"]), t(joined["old_entropy"]), t(mask))
    dh = (joined["entropy"] - joined["old_entropy"])[mask]
    a = adv[mask]
    assert (
        section.kl_mask.counts["pos_decreasing"]
        == quadrants.pos_decreasing
        == np.sum((a > 0) & (dh < 0))
    )
    assert section.kl_mask.counts["neg_increasing"] == np.sum((a < 0) & (dh > 0))
    assert section.kl_mask.counts["neg_non_increasing"] == np.sum((a < 0) & (dh <= 0))
    assert sum(section.kl_mask.counts.values()) == section.kl_mask.total == mask.sum()


# ------------------------------------------------------------------------ QUATRO
def test_trust_region_against_the_functional_and_the_binary_table(tmp_path, three_files):
    parts, paths = three_files
    params = AnalysisParams(delta=0.05, deltas=(0.1, 0.05, 0.001))
    report = ratioscope.analyze(paths, params=params, per_sequence=True)
    section = report.trust_region
    joined = concatenated(parts)
    rewards, group = t(joined["rewards"]), t(joined["group"])
    sweep = quatro_delta_sweep(rewards, group, (0.05, 0.1, 0.001))
    lam, mu, adv, degenerate = sweep.single(0)
    assert section.delta == 0.05
    assert section.groups == 12 and section.rollouts == 96
    assert section.degenerate == int(degenerate.sum()) >= 3
    assert section.degenerate_all_equal >= 3
    assert close(section.lam.mean, float(lam[~degenerate].mean()), 1e-12)
    assert section.lam.count == int((~degenerate).sum())
    assert close(
        section.lam.quantiles["0.5"],
        float(np.quantile(lam[~degenerate].numpy(), 0.5, method="inverted_cdf")),
        TOL,
    )
    assert close(section.mu.mean, float(mu[~degenerate].mean()), 1e-12)
    grpo = grpo_advantages(rewards, group)
    assert close(section.advantage["grpo"].std, float(grpo.std(unbiased=False)), 1e-9)
    assert close(section.advantage["quatro"].mean, float(adv.mean()), 1e-9, 1e-12)
    # per-sequence columns, and exp(A) averaging 1 within every non-degenerate group
    table = report.sequences.frame()
    np.testing.assert_allclose(table["quatro_advantage"].to_numpy(), adv.numpy(), atol=1e-12)
    np.testing.assert_allclose(table["grpo_advantage"].to_numpy(), grpo.numpy(), atol=1e-12)
    for g in range(12):
        if not degenerate[g]:
            assert np.exp(adv.numpy()[joined["group"] == g]).mean() == pytest.approx(1.0, abs=1e-9)
    # the table by number of correct rollouts: binary rewards, against the closed form
    assert section.non_binary_groups == 0
    for cell in section.by_correct:
        exact = binary_advantage_table(cell.group_size, delta=0.05)
        c = cell.correct
        if c > 0:
            assert close(cell.quatro_correct, float(exact.quatro_correct[c]), 1e-9, 1e-12)
            assert close(cell.grpo_correct, float(exact.grpo_correct[c]), 1e-9)
        else:
            assert cell.quatro_correct is None
        if c < cell.group_size:
            assert close(cell.quatro_incorrect, float(exact.quatro_incorrect[c]), 1e-9, 1e-12)
        if not exact.degenerate[c]:
            assert close(cell.lam_mean, float(exact.lam[c]), 1e-9)
        assert cell.degenerate == (cell.groups if exact.degenerate[c] else 0)
    assert sum(cell.groups for cell in section.by_correct) == 12
    # the sweep rows, in --delta-sweep order
    assert [row.delta for row in section.sweep] == [0.1, 0.05, 0.001]
    for row in section.sweep:
        index = (0.05, 0.1, 0.001).index(row.delta)
        lam_d, _, adv_d, deg_d = sweep.single(index)
        assert row.degenerate == int(deg_d.sum())
        assert close(row.lam_mean, float(lam_d[~deg_d].mean()), 1e-12)
        live = ~deg_d[group]
        assert close(row.abs_advantage_mean, float(adv_d[live].abs().mean()), 1e-12)


def test_trust_region_table_skips_groups_with_more_than_two_reward_values(tmp_path):
    arrays = make_arrays(8)
    arrays["rewards"][8:16] = np.linspace(0, 1, 8)  # one group of graded rewards
    section = ratioscope.analyze(write(arrays, tmp_path / "graded.pt")).trust_region
    assert section.non_binary_groups == 1
    assert sum(cell.groups for cell in section.by_correct) == 3


# ------------------------------------------------------- merging and state round trip
def _close_documents(a, b, rel=1e-12):
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_close_documents(a[k], b[k], rel) for k in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(
            _close_documents(x, y, rel) for x, y in zip(a, b, strict=True)
        )
    if isinstance(a, float) and isinstance(b, float):
        return math.isclose(a, b, rel_tol=rel, abs_tol=1e-12)
    return a == b


def test_merged_reports_equal_the_analysis_of_all_files(tmp_path):
    parts = [make_arrays(9, vocab=5), make_arrays(10), make_arrays(11)]
    paths = [
        write(parts[0], tmp_path / "a.safetensors"),  # exact FPA
        write(parts[1], tmp_path / "b.pt", drop=("group",)),  # batch scope, no QUATRO
        write(parts[2], tmp_path / "c.pt", drop=("old_entropy",)),
    ]
    together = ratioscope.analyze(paths).to_dict()
    merged = merge_reports([ratioscope.analyze(p).to_dict() for p in paths]).to_dict()
    for key in SECTIONS:
        assert _close_documents(together[key], merged[key]), key
    assert together["covariance"]["scope"] == "mixed"
    assert together["covariance"]["scope_files"] == {"group": 2, "batch": 1}
    # the exact file and the approximate ones are reported apart, never pooled
    fpa = together["future_policy"]
    assert fpa["method"] == "exact" and fpa["approximation"]["method"] == "approximation"
    assert fpa["method_files"] == {"exact": 1, "approximation": 2}
    assert fpa["approximation"]["files"] == 2
    assert fpa["sequences"] + fpa["approximation"]["sequences"] == 96
    assert together["trust_region"]["groups"] == 8
    assert together["warnings"] == merged["warnings"]


@pytest.mark.parametrize("drop", [(), ("rewards",), ("entropy", "group")])
def test_state_round_trips_through_json(tmp_path, drop):
    arrays = make_arrays(12)
    arrays["rewards"][:] = 0.0  # no correct sequence: empty histograms (inf extremes)
    path = write(arrays, tmp_path / "d.pt", drop=drop)
    report = ratioscope.analyze(path)
    params = AnalysisParams()
    for cls in section_classes():
        if cls.name not in SECTIONS:
            continue
        state = json.loads(json.dumps(to_jsonable(report.state[cls.name])))
        restored = cls.from_state(params, state)
        assert json.loads(json.dumps(to_jsonable(restored.state()))) == state, cls.name
        assert to_jsonable(restored.result()) == to_jsonable(getattr(report, cls.name)), cls.name


# ------------------------------------------------------ missing inputs: null + warning
def _warnings(report, prefix):
    return [w for w in report.warnings if w.startswith(prefix)]


def test_missing_inputs_give_null_sections_with_warnings_naming_the_tensor(tmp_path):
    arrays = make_arrays(13)
    no_group = ratioscope.analyze(write(arrays, tmp_path / "a.pt", drop=("group",)))
    assert no_group.trust_region is None
    assert "'group'" in _warnings(no_group, "trust_region")[0]
    assert no_group.covariance.scope == "batch"  # auto falls back to the batch scope

    strict = ratioscope.analyze(tmp_path / "a.pt", cov_scope="group")
    assert strict.covariance is None and "'group'" in _warnings(strict, "covariance")[0]

    no_entropy = ratioscope.analyze(write(arrays, tmp_path / "b.pt", drop=("old_entropy",)))
    assert no_entropy.tepo.kl_mask is None and no_entropy.tepo.clip_fraction is not None
    assert "old_entropy" in _warnings(no_entropy, "tepo.kl_mask")[0]

    no_rewards = ratioscope.analyze(write(arrays, tmp_path / "c.pt", drop=("rewards",)))
    assert (
        no_rewards.trust_region is None and "'rewards'" in _warnings(no_rewards, "trust_region")[0]
    )
    fpa = no_rewards.future_policy
    assert fpa.current_weight.correct is None and fpa.sweep[0].below_threshold.incorrect is None
    assert "'correct'" in _warnings(no_rewards, "future_policy.*.correct")[0]

    no_ref = ratioscope.analyze(write(arrays, tmp_path / "d.pt", drop=("ref_log_probs",)))
    assert no_ref.future_policy is None and "ref_log_probs" in _warnings(no_ref, "future_policy")[0]

    no_adv = ratioscope.analyze(write(arrays, tmp_path / "e.pt", drop=("advantages",)))
    assert no_adv.covariance is None and "'advantages'" in _warnings(no_adv, "covariance")[0]
    assert no_adv.tepo.surrogate is None and no_adv.tepo.weight.count == 32
    assert "'advantages'" in _warnings(no_adv, "tepo.clip_fraction")[0]


# ---------------------------------------------------------------------------- CLI
def test_cli_options_change_the_numbers_as_expected(tmp_path, three_files):
    _, paths = three_files
    out = tmp_path / "r.json"
    options = ["--cov-scope", "batch", "--fpa-lambda", "5", "--fpa-lambda-sweep", "0,5",
               "--fpa-threshold", "0.35", "--delta", "0.1", "--delta-sweep", "0.1,0.02",
               "--seq-clip", "0.02,0.03"]  # fmt: skip
    result = runner.invoke(app, ["analyze", *paths, "-q", "--detail", "--json", str(out), *options])
    assert result.exit_code == 0, result.stderr
    document = json.loads(out.read_text())
    expected = ratioscope.analyze(
        paths, cov_scope="batch", fpa_lambda=5.0, fpa_lambdas=(0.0, 5.0), fpa_threshold=0.35,
        delta=0.1, deltas=(0.1, 0.02), seq_clip=(0.02, 0.03),
    ).to_dict()  # fmt: skip
    default = ratioscope.analyze(paths).to_dict()
    for key in SECTIONS:
        assert _close_documents(document[key], expected[key]), key
        assert document[key] != default[key], key
    assert document["covariance"]["scope"] == "batch"
    fpa = document["future_policy"]
    assert fpa["lam"] == 5.0 and fpa["threshold"] == 0.35
    assert [row["lam"] for row in fpa["sweep"]] == [0.0, 5.0]
    assert fpa["future_weight"]["all"]["mean"] == fpa["sweep"][1]["weight_mean"]["all"]
    trust = document["trust_region"]
    assert trust["delta"] == 0.1 and [row["delta"] for row in trust["sweep"]] == [0.1, 0.02]
    assert trust["lam"]["mean"] == trust["sweep"][0]["lam_mean"]
    assert document["tepo"]["clip_band"] == [0.02, 0.03]
    for title in ("CW-GRPO Table 1", "FPA future policy", "TEPO sequence-likelihood", "QUATRO"):
        assert title in result.stdout


@pytest.mark.parametrize(
    "option", [["--cov-scope", "prompt"], ["--fpa-lambda-sweep", "1,x"], ["--delta", "0"]]
)
def test_cli_rejects_bad_objective_options(three_files, option):
    _, paths = three_files
    result = runner.invoke(app, ["analyze", paths[0], "-q", *option])
    assert result.exit_code == 2
    assert result.stderr.startswith("ratioscope: error:")


def _is_png(path) -> bool:
    return path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_plot_covariance_from_a_dump_and_from_a_report(tmp_path, three_files):
    _, paths = three_files
    figure = tmp_path / "from_dump.png"
    result = runner.invoke(app, ["plot", "covariance", *paths, "--out", str(figure), "-q"])
    assert result.exit_code == 0, result.stderr
    assert _is_png(figure)
    report = tmp_path / "report.json"
    ratioscope.analyze(paths).write_json(report)
    figure = tmp_path / "from_report.png"
    result = runner.invoke(app, ["plot", "covariance", str(report), "--out", str(figure)])
    assert result.exit_code == 0, result.stderr
    assert _is_png(figure)


def test_plot_covariance_bad_input_exits_2_and_writes_nothing(tmp_path, three_files):
    _, paths = three_files
    no_adv = write(make_arrays(14), tmp_path / "no_adv.pt", drop=("advantages",))
    null_report = tmp_path / "null.json"
    ratioscope.analyze(no_adv).write_json(null_report)
    not_report = tmp_path / "other.json"
    not_report.write_text('{"hello": 1}')
    cases = [
        ([str(tmp_path / "missing.pt")], "no such file"),
        ([no_adv], "advantages"),
        ([str(null_report)], "advantages"),
        ([str(not_report)], "schema_version"),
        ([paths[0], str(null_report)], "not both"),
    ]
    for inputs, message in cases:
        figure = tmp_path / "figure.png"
        result = runner.invoke(app, ["plot", "covariance", *inputs, "--out", str(figure), "-q"])
        assert result.exit_code == 2, (inputs, result.stderr)
        assert message in result.stderr, (inputs, result.stderr)
        assert not figure.exists()
    result = runner.invoke(app, ["plot", "covariance", paths[0], "--out", str(tmp_path / "f.txt")])
    assert result.exit_code == 2 and not (tmp_path / "f.txt").exists()
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []


def test_parquet_has_the_objective_columns(tmp_path, three_files):
    _, paths = three_files
    out = tmp_path / "seqs.parquet"
    result = runner.invoke(app, ["analyze", *paths, "-q", "--parquet", str(out)])
    assert result.exit_code == 0, result.stderr
    table = pl.read_parquet(out)
    for column in ("cov_weight_mean", "cov_weight_norm_mean", "fpa_weight_current",
                   "fpa_weight_future", "fpa_log_ratio_ref", "tepo_clip_fraction",
                   "tepo_kl_mask_fraction", "quatro_advantage", "grpo_advantage"):  # fmt: skip
        assert column in table.columns, column
    assert table.height == 96


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_gives_the_cpu_numbers(tmp_path):
    parts = [make_arrays(15, vocab=9), make_arrays(16)]
    paths = [write(parts[0], tmp_path / "a.safetensors"), write(parts[1], tmp_path / "b.pt")]
    cpu = ratioscope.analyze(paths, device="cpu").to_dict()
    cuda = ratioscope.analyze(paths, device="cuda").to_dict()
    # sums in another order can move a value across a histogram bin edge: quantiles may
    # then differ by one bin (the stated error), everything else by rounding only
    for key in SECTIONS:
        assert _close_documents(cpu[key], cuda[key], rel=2 * TOL), key
    assert cpu["future_policy"]["method"] == cuda["future_policy"]["method"] == "mixed"
