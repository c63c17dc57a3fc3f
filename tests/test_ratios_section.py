"""The ratios section: KPO statistics aggregated as the paper does, sweep, reference check."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from dumps import make_reference, write_layout
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

import ratioscope
from ratioscope.analysis.sweep import sweep
from ratioscope.cli import app
from ratioscope.functional.kalman import kalman_filter_loop
from ratioscope.functional.token_stats import DEFAULT_ON_BAND, EXACT_ON_BAND, signal_statistics

runner = CliRunner()


@pytest.fixture
def long_batch():
    """AR(1) log-ratios with ragged lengths (long enough for several windows)."""
    rng = np.random.default_rng(5)
    rows, width = 12, 400
    z = np.zeros((rows, width))
    for t in range(1, width):
        z[:, t] = 0.8 * z[:, t - 1] + rng.normal(0, 0.01, size=rows)
    z[:, ::7] = 0.0  # exact zeros: "on" tokens
    lengths = rng.integers(30, width + 1, size=rows)
    mask = np.arange(width)[None, :] < lengths[:, None]
    return ratioscope.TokenBatch.from_tensors(
        {"mask": torch.tensor(mask), "log_ratio": torch.tensor(z)}
    )


def expected_fields(signal, mask, on_band):
    """The paper's aggregation, computed directly from the per-sequence functional."""
    stats = signal_statistics(signal, mask, on_band=on_band)
    lfr = stats.low_frequency_ratio
    counts = stats.state_counts.double()
    shares = (counts / counts.sum(1, keepdim=True)).mean(0)  # averaged over samples
    pooled = counts.sum(0) / counts.sum()
    return {
        "proportion": {"up": float(shares[2]), "down": float(shares[0]), "on": float(shares[1])},
        "proportion_pooled": {
            "up": float(pooled[2]),
            "down": float(pooled[0]),
            "on": float(pooled[1]),
        },
        "run_up": float(torch.nanmean(stats.runs.mean_per_sequence[:, 2])),
        "switch_frequency": float(stats.switch_frequency.mean()),
        "lfr": float(lfr[~torch.isnan(lfr)].mean()),
        "var_global": float(stats.global_variance.mean()),
        "var_window": float(stats.local_variance.mean()),
    }


def test_token_and_kalman_rows_aggregate_the_per_sequence_statistics(long_batch):
    report = ratioscope.analyze(long_batch, chunk_elements=1000)  # several chunks
    mask = long_batch.mask
    rho = kalman_filter_loop(long_batch.log_ratio, mask, 1e-6, 1.0)
    bands = {"token": EXACT_ON_BAND, "kalman": DEFAULT_ON_BAND}  # the defaults per row
    for variant, signal in (("token", long_batch.log_ratio), ("kalman", rho)):
        got = report.ratios[variant]
        assert got.on_band == bands[variant]
        want = expected_fields(torch.where(mask, signal, 0.0), mask, bands[variant])
        for state in ("up", "down", "on"):
            for key in ("proportion", "proportion_pooled"):
                assert getattr(got, key)[state] == pytest.approx(want[key][state], abs=1e-12)
        if math.isnan(want["run_up"]):
            assert got.run_length_mean["up"] is None
        else:
            assert got.run_length_mean["up"] == pytest.approx(want["run_up"], rel=1e-9)
        assert got.switch_frequency == pytest.approx(want["switch_frequency"], rel=1e-9)
        assert got.lfr == pytest.approx(want["lfr"], rel=1e-6)
        assert got.variance["global"] == pytest.approx(want["var_global"], rel=1e-6)
        assert got.variance["window_local"] == pytest.approx(want["var_window"], rel=1e-6)


def test_window_frequency_curve_is_mean_and_population_variance_per_window(long_batch):
    report = ratioscope.analyze(long_batch, chunk_elements=1000)
    curve = report.ratios["token"].window_frequency
    lengths = long_batch.lengths.tolist()
    z = long_batch.log_ratio.numpy()
    tol = EXACT_ON_BAND[0]  # the raw row's default: on iff r = 1 up to float32 rounding
    off = (z > math.log1p(tol)) | (z < math.log1p(-tol))
    for w in range(len(curve["count"])):
        values = [
            off[i, w * 50 : (w + 1) * 50].mean()
            for i in range(len(lengths))
            if lengths[i] >= (w + 1) * 50
        ]
        assert curve["count"][w] == len(values)
        assert curve["mean"][w] == pytest.approx(np.mean(values), rel=1e-12)
        assert curve["var"][w] == pytest.approx(np.var(values), abs=1e-12)


def test_sequence_variant_is_constant_within_sequences(long_batch):
    seq = ratioscope.analyze(long_batch).ratios["sequence"]
    assert seq.switch_frequency == 0.0
    assert seq.lfr is None and seq.lfr_excluded == long_batch.num_sequences
    assert seq.variance["global"] == pytest.approx(0.0, abs=1e-18)


def test_sweep_rows_equal_analyze_at_each_q(long_batch):
    result = sweep(long_batch, [1e-4, 1e-2])
    for qv in (1e-4, 1e-2):
        direct = ratioscope.analyze(long_batch, kalman_q=qv).ratios["kalman"]
        row = result.kalman[f"{qv:g}"]
        assert row.switch_frequency == pytest.approx(direct.switch_frequency, rel=1e-12)
        assert row.lfr == pytest.approx(direct.lfr, rel=1e-12)
        assert row.proportion == direct.proportion
    assert result.token.switch_frequency == pytest.approx(
        ratioscope.analyze(long_batch).ratios["token"].switch_frequency, rel=1e-12
    )


def test_reference_closed_form_is_flagged_where_it_breaks():
    rng = np.random.default_rng(0)
    z = torch.tensor(rng.normal(0, 0.05, size=(3, 1500)), dtype=torch.float32)
    batch = ratioscope.TokenBatch.from_tensors({"mask": torch.ones(3, 1500), "log_ratio": z})
    report = ratioscope.analyze(batch, kalman_impl="reference", kalman_q=1e-2)
    deviation = report.ratios["kalman"].closed_form_deviation
    assert deviation is not None and deviation.first_index is not None
    assert 600 < deviation.first_index < 800  # wrong from token 697 at Q/V = 1e-2
    assert deviation.max_abs_error > deviation.atol == 1e-4
    assert (deviation.q, deviation.v) == (1e-2, 1.0)
    assert report.ratios["token"].closed_form_deviation is None
    flagged = [w for w in report.warnings if "kalman_impl='reference'" in w]
    assert len(flagged) == 1 and f"from token {deviation.first_index} on" in flagged[0]
    exact = ratioscope.analyze(batch, kalman_q=1e-2)
    assert exact.ratios["kalman"].closed_form_deviation is None
    assert not any("kalman_impl='reference'" in w for w in exact.warnings)


def test_sweep_cli_writes_json_with_one_row_per_qv(tmp_path):
    path = write_layout(make_reference(seed=3, rows=8, width=80), "verl", tmp_path)
    out = tmp_path / "sweep.json"
    result = runner.invoke(app, ["sweep", str(path), "--qv", "1e-6,1e-3", "--json", str(out), "-q"])
    assert result.exit_code == 0, result.stderr
    assert "kalman Q/V=0.001" in result.stdout
    import json

    document = json.loads(out.read_text())
    assert list(document["sweep"]["kalman"]) == ["1e-06", "0.001"]
    assert math.isfinite(document["sweep"]["token"]["switch_frequency"])
    bad = runner.invoke(app, ["sweep", str(path), "--qv", "-1"])
    assert bad.exit_code == 2 and "--qv" in bad.stderr


@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 10_000), rows=st.integers(1, 12), width=st.integers(1, 180))
def test_constant_signal_shortcut_equals_the_general_statistics(seed, rows, width):
    from ratioscope.functional.token_stats import constant_signal_statistics

    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(0, width + 1, (rows,), generator=g)
    lengths[0] = width
    values = torch.randn(rows, generator=g, dtype=torch.float64) * 5e-4
    values[torch.rand(rows, generator=g) < 0.3] = 0.0
    mask = torch.arange(width)[None, :] < lengths[:, None]
    signal = torch.where(mask, values[:, None].expand(rows, width), 0.0)
    general = signal_statistics(signal, mask, window=7)
    shortcut = constant_signal_statistics(values, lengths, window=7)

    def same(a, b):
        return torch.equal(
            torch.nan_to_num(a.double(), nan=-1.0), torch.nan_to_num(b.double(), nan=-1.0)
        )

    for name in ("state_counts", "switch_frequency", "window_frequency", "low_frequency_ratio",
                 "periodogram"):  # fmt: skip
        assert same(getattr(general, name), getattr(shortcut, name)), name
    # the general path computes a constant's variance with rounding (~1e-40), not exactly 0
    for name in ("global_variance", "local_variance"):
        torch.testing.assert_close(
            getattr(general, name), getattr(shortcut, name), atol=1e-30, rtol=0, equal_nan=True
        )
    for name in ("run_count", "mean_per_sequence", "histogram"):
        assert same(getattr(general.runs, name), getattr(shortcut.runs, name)), name
