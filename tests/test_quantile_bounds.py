"""Every quantile a report states is within its stated bound of the exact order statistic.

The per-token and per-sequence values are recomputed from the dumps through the formula
functions (``functional/``) and the per-token readers, never through the sections'
histograms; the exact q-quantile is numpy's ``inverted_cdf`` order statistic x_(k),
k = ceil(q n), and each reported quantile must satisfy its ``quantile_bound`` in the
coordinate it names (``log``: the distance from 1 of weights and ratios).
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
import torch
from test_sections_objectives import make_arrays, write

import ratioscope
from ratioscope.functional.covariance import covariance_weights
from ratioscope.functional.fpa import (
    future_log_probs_approx,
    future_to_current_ratio,
    sequence_log_ratio,
    sequence_weights,
)
from ratioscope.functional.kalman import kalman_filter_loop
from ratioscope.functional.quatro import quatro_delta_sweep
from ratioscope.functional.tepo import sequence_likelihood_weights
from ratioscope.io.loaders import expand_paths, load_file
from ratioscope.sections.future_policy import exact_log_probs
from ratioscope.sections.summaries import LOG_BOUND, VALUE_BOUND, QuantileBound

SAMPLE = Path(__file__).resolve().parents[1] / "sample_data" / "verl"


def _exact(values: list[np.ndarray], q: float) -> float:
    return float(np.quantile(np.concatenate(values), q, method="inverted_cdf"))


def _check(distribution, values: list[np.ndarray], coordinate: str, what: str) -> int:
    """Asserts every quantile of ``distribution`` against ``values``; returns how many."""
    bound: QuantileBound = distribution.quantile_bound
    assert bound.coordinate == coordinate, what
    assert distribution.count == sum(v.size for v in values), what
    for key, estimate in distribution.quantiles.items():
        exact = _exact(values, float(key))
        assert bound.holds(estimate, exact), f"{what} q={key}: {estimate!r} vs {exact!r}"
        if coordinate == "log" and exact > 0:
            # the distance from 1 keeps the bound's share of |log x|, and its sign
            assert (estimate - 1) * (exact - 1) >= 0, what
    return len(distribution.quantiles)


def _np(t: torch.Tensor) -> np.ndarray:
    return t.detach().double().cpu().numpy()


def _raw(paths: list[Path], lam: float, lams: tuple[float, ...]) -> dict[str, list[np.ndarray]]:
    raw: dict[str, list[np.ndarray]] = {}

    def put(key: str, value: torch.Tensor) -> None:
        raw.setdefault(key, []).append(_np(value))

    for path in paths:
        batch = load_file(path)
        mask = batch.mask
        group = batch.group
        z = batch.log_ratio.double()
        put("ratios.token", z[mask])
        # the sequence row counts each valid token with its sequence's mean log-ratio
        means = (z * mask).sum(dim=1) / mask.sum(dim=1).clamp_min(1)
        put("ratios.sequence", means[:, None].expand_as(z)[mask])
        put("ratios.kalman", kalman_filter_loop(z, mask, 1e-6, 1.0)[mask])
        c, w, w_norm = covariance_weights(batch.log_probs, batch.advantages, mask, group)
        put("c", c[mask])
        put("w", w[mask])
        put("w_norm", w_norm[mask])
        put("tepo", sequence_likelihood_weights(batch.log_ratio, mask)[mask.any(dim=1)])
        exact = all(batch.has(n) for n in ("logits", "ref_logits", "token_ids"))
        method = "exact" if exact else "approximation"
        if exact:
            future, reference = exact_log_probs(batch, lams, torch.device("cpu"))
            current, ahead = future[lams.index(0.0)], future[lams.index(lam)]
        else:
            reference = batch.ref_log_probs
            current = future_log_probs_approx(batch.log_probs, reference, 0.0)
            ahead = future_log_probs_approx(batch.log_probs, reference, lam)
        present = mask.any(dim=1)
        correct = batch.correct
        for name, select in (("all", present), ("correct", present & correct),
                             ("incorrect", present & ~correct)):  # fmt: skip
            put(f"{method}.current.{name}", sequence_weights(current, mask)[select])
            put(f"{method}.future.{name}", sequence_weights(ahead, mask)[select])
            ratio = future_to_current_ratio(ahead, current, mask)
            put(f"{method}.ratio.{name}", ratio[select])
            put(f"{method}.seq.{name}", sequence_log_ratio(current, reference, mask)[select])
            per_token = sequence_log_ratio(current, reference, mask, normalise=True)
            put(f"{method}.tok.{name}", per_token[select])
        rewards = batch.rewards.double()
        _, groups = torch.unique(batch.group, return_inverse=True)
        sweep = quatro_delta_sweep(rewards, groups, (0.01,))
        lam_star, mu, adv, degenerate = sweep.single(0)
        put("lam", lam_star[~degenerate])
        put("mu", mu[~degenerate])
        put("quatro", adv)
    return raw


def _check_report(report, raw: dict[str, list[np.ndarray]]) -> int:
    checked = 0
    for variant in ("token", "sequence", "kalman"):
        d = report.ratios[variant].distribution
        checked += _check(d, raw[f"ratios.{variant}"], "value", f"ratios.{variant}")
    cov = report.covariance
    checked += _check(cov.c, raw["c"], "value", "covariance.c")
    checked += _check(cov.weights.distribution, raw["w"], "log", "covariance.w")
    checked += _check(cov.normalised_weights, raw["w_norm"], "log", "covariance.w~")
    checked += _check(report.tepo.weight, raw["tepo"], "log", "tepo.weight")
    fpa = report.future_policy
    results = [fpa] + ([fpa.approximation] if fpa.approximation is not None else [])
    for result in results:
        m = result.method
        for field, key, coordinate in (
            ("current_weight", "current", "log"),
            ("future_weight", "future", "log"),
            ("future_to_current", "ratio", "log"),
        ):
            for name in ("all", "correct", "incorrect"):
                d = getattr(getattr(result, field), name)
                checked += _check(d, raw[f"{m}.{key}.{name}"], coordinate, f"{m}.{field}.{name}")
        for field, key in (("sequence", "seq"), ("per_token", "tok")):
            for name in ("all", "correct", "incorrect"):
                d = getattr(result.log_ratio_ref[field], name)
                checked += _check(d, raw[f"{m}.{key}.{name}"], "value", f"{m}.{field}.{name}")
    tr = report.trust_region
    checked += _check(tr.lam, raw["lam"], "value", "trust_region.lam")
    checked += _check(tr.mu, raw["mu"], "value", "trust_region.mu")
    checked += _check(tr.advantage["quatro"], raw["quatro"], "value", "trust_region.quatro")
    return checked


def test_sample_run_quantiles_within_their_bounds() -> None:
    paths = expand_paths([SAMPLE])
    report = ratioscope.analyze(paths)
    assert report.future_policy.method == "exact"
    assert report.future_policy.approximation.method == "approximation"
    raw = _raw(paths, report.future_policy.lam, (0.0, 0.5, 1.0, 2.0, 5.0, 10.0))
    assert _check_report(report, raw) > 300


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_random_runs_quantiles_within_their_bounds(tmp_path: Path, seed: int) -> None:
    exact = write(make_arrays(seed, rows=48, vocab=40), tmp_path / "a.pt")
    approx = write(make_arrays(seed + 10, rows=40), tmp_path / "b.pt", drop=("logits",))
    paths = [Path(exact), Path(approx)]
    report = ratioscope.analyze(paths, fpa_lambda=2.0)
    raw = _raw(paths, 2.0, (0.0, 0.5, 1.0, 2.0, 5.0, 10.0))
    assert _check_report(report, raw) > 300


def test_value_and_log_bounds_are_the_documented_ones() -> None:
    assert VALUE_BOUND.coordinate == "value" and LOG_BOUND.coordinate == "log"
    assert math.isclose(LOG_BOUND.relative, 10 ** (1 / 200) - 1)
    assert LOG_BOUND.absolute == 1e-9


# ----------------------------------------------------------- reports written before
DATA = Path(__file__).resolve().parent / "data"


def _old(name: str) -> dict:
    import json

    return json.loads((DATA / name).read_text())


def test_reports_written_before_state_the_value_bound_and_merge_among_themselves() -> None:
    from ratioscope.data.params import AnalysisParams
    from ratioscope.report.model import Report
    from ratioscope.sections.covariance import CovarianceAccumulator
    from ratioscope.sections.future_policy import FuturePolicyAccumulator

    first, second = _old("report_schema1.json"), _old("report_schema1_step24.json")
    report = Report.from_dict(first, source="old.json")
    assert report.covariance.weights.distribution.quantile_bound == VALUE_BOUND
    assert report.future_policy.current_weight.all.quantile_bound == VALUE_BOUND
    assert report.tepo.weight.quantile_bound == LOG_BOUND  # TEPO always read log w
    assert report.future_policy.approximation is None
    params = AnalysisParams.from_dict(first["params"]["analysis"])
    for cls in (CovarianceAccumulator, FuturePolicyAccumulator):
        total = cls.from_state(params, first["state"][cls.name])
        total.merge(cls.from_state(params, second["state"][cls.name]))
        merged = total.result()
        again = cls.from_state(params, total.state()).result()
        assert merged == again
    # step 32 is exact, step 24 approximate: pooled as such reports always were
    assert merged.method == "mixed" and merged.approximation is None
    assert merged.current_weight.all.quantile_bound == VALUE_BOUND


def test_an_old_state_never_merges_with_a_new_one() -> None:
    from ratioscope.data.params import AnalysisParams
    from ratioscope.sections.covariance import CovarianceAccumulator
    from ratioscope.sections.future_policy import FuturePolicyAccumulator

    old = _old("report_schema1.json")
    params = AnalysisParams.from_dict(old["params"]["analysis"])
    fresh = ratioscope.analyze(SAMPLE / "step_0032.pt", params=params)
    for cls, words in (
        (CovarianceAccumulator, "log coordinate and the other in the value coordinate"),
        (FuturePolicyAccumulator, "written before ratioscope kept the methods apart"),
    ):
        new = cls.from_state(params, fresh.state[cls.name])
        with pytest.raises(ValueError, match=words):
            new.merge(cls.from_state(params, old["state"][cls.name]))
