"""benchmarks/device_ops.py counts what ``analyze --device cuda`` asks of a GPU, on the
device emulated on the CPU: its table adds up, and its bound is the stated formula."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

import device_ops  # noqa: E402
from make_synthetic import make_synthetic, write_synthetic  # noqa: E402


def test_the_table_adds_up_and_the_bounds_are_the_formulas(tmp_path, capsys):
    path = write_synthetic(make_synthetic(64, 1024, extras=("all",)), tmp_path / "d.safetensors")
    device_ops.main([str(path), "--top", "5", "--launch-us", "4", "--bandwidth", "2e12"])
    out = capsys.readouterr().out
    rows = {}
    for line in out.splitlines():
        parts = line.split()
        if len(parts) == 7 and all(re.fullmatch(r"[\d,]+", p) for p in parts[1:]):
            rows[parts[0]] = [int(p.replace(",", "")) for p in parts[1:]]
    total = rows.pop("total")
    assert "sections.ratios" in rows and "sections.summaries" in rows
    counts = [sum(row[i] for row in rows.values()) for i in range(5)]
    assert total[:5] == counts  # launches, views, reads, waits, uploads: exact
    assert abs(total[5] - sum(row[5] for row in rows.values())) <= len(rows)  # MB, rounded
    assert total[0] > 100 and total[2] > 0 and total[5] > 0  # waits: none left
    assert len(re.findall(r"^\s+[\d,]+  \S+ / \S+$", out, flags=re.M)) == 5
    # the two bounds, written out from the bytes and the launches the script printed
    tensor_bytes, _ = device_ops.per_token_bytes(path)
    moved = float(re.search(r"The launches move ([\d,.]+) MB", out).group(1).replace(",", ""))
    floor = tensor_bytes / 2e12
    free = float(re.search(r"at most ([\d.]+)% of the bandwidth were", out).group(1))
    # the MB printed to 0.1: the share from them is good to that fraction of itself
    rounding = 0.006 + free * 0.05 / moved
    assert free == pytest.approx(100 * floor / (moved * 1e6 / 2e12), abs=rounding)
    both = float(re.search(r"besides: at most ([\d.]+)%", out).group(1))
    assert both == pytest.approx(100 * floor / (moved * 1e6 / 2e12 + total[0] * 4e-6), abs=rounding)


def test_a_chunk_on_a_device_holds_no_more_than_the_bytes_its_size_is_chosen_by(tmp_path):
    # analysis.device.chunk_elements_for sizes a GPU's chunk at DEVICE_BYTES_PER_ELEMENT
    # a chunk element: the analysis' peak on the emulated device must stay within it
    from ratioscope import defaults

    rows, tokens = 256, 1024
    path = write_synthetic(
        make_synthetic(rows, tokens, extras=("all",)), tmp_path / "d.safetensors"
    )
    count, _, chunk = device_ops.count_operations(path, rows * tokens)  # one chunk
    assert chunk == rows * tokens
    per_element = count.peak_bytes / chunk
    assert (
        0.5 * defaults.DEVICE_BYTES_PER_ELEMENT < per_element <= defaults.DEVICE_BYTES_PER_ELEMENT
    )


def test_the_triton_kernels_are_counted_as_one_launch_each(tmp_path):
    # on a GPU the Kalman filter and the ratio rows are Triton kernels: the stand-ins
    # count one launch a kernel where the scan and the histogram's tensor code were many
    path = write_synthetic(make_synthetic(64, 1024, extras=("all",)), tmp_path / "d.safetensors")
    fused, fused_report, _ = device_ops.count_operations(path, kernels=True)
    eager, _, _ = device_ops.count_operations(path, kernels=False)

    def launches(count, function: str) -> int:
        return sum(n for (_, name), n in count.launches.items() if name.endswith(function))

    assert launches(fused, "_triton_kernels:kalman") == 1  # one chunk, rows enough
    assert launches(fused, "kalman:_chunked_recurrence") == 0
    assert launches(eager, "kalman:_chunked_recurrence") > 10
    # the kernel for the token and the Kalman variants, each after a fill of its buffer
    assert launches(fused, "_triton_kernels:ratio_rows") == 2
    # the summaries' histograms filled on the device (none in this dump: TEPO's weights
    # and the vitals' [B] columns are summarised on the host, after the chunk's read)
    histograms = launches(fused, "_triton_kernels:histogram_moments")
    assert launches(fused, "_triton_kernels:_summary_buffer") == 2 + histograms
    # the covariance section's five passes over the file's one chunk, a kernel each
    assert launches(fused, "_triton_kernels:covariance_rows") == 4
    assert launches(fused, "_triton_kernels:covariance_statistics") == 2  # and its fill
    # the LFR's band of the token and the Kalman variants, one launch each
    assert launches(fused, "_triton_kernels:lfr_band") == 2
    assert launches(fused, "token_stats:_band_torch") == 0 < launches(eager, "_band_torch")
    # and their centring and variances
    assert launches(fused, "_triton_kernels:centre_rows") == 2
    assert launches(fused, "token_stats:_local_variance") == 0 < launches(eager, "_local_variance")
    # the advantage sums (context) and FPA's row sums, one launch each
    assert launches(fused, "_triton_kernels:advantage_rows") == 1
    assert launches(fused, "_triton_kernels:difference_rows") == 1
    # the states' counts of the token and the Kalman variants
    # each: the fill of its tallies, the kernel, the lengths summed from its counts
    assert launches(fused, "_triton_kernels:state_runs") == 2 * 3
    assert launches(fused, "token_stats:_run_lengths") == 0 < launches(eager, "_run_lengths")
    # TEPO's quadrants: a fill of their counts and the kernel
    assert launches(fused, "_triton_kernels:entropy_quadrants") == 2
    assert launches(eager, "_triton_kernels:") == 0
    assert sum(fused.launches.values()) < sum(eager.launches.values())
    assert sum(fused.moved.values()) < sum(eager.moved.values())
    # the stand-ins compute with the CPU's loops (over all rows at once, where the CPU
    # merges parts of rows): the ratio rows are the CPU's, to the last bits
    from gpu_check import compare_documents

    import ratioscope

    cpu_report = ratioscope.analyze(path).to_dict()
    cpu, fused_ratios = cpu_report["ratios"], fused_report.to_dict()["ratios"]
    for variant in ("token", "kalman"):
        for key in (
            "distribution",
            "clip_fraction",
            "surrogate",
            "lfr",
            "variance",
            "spectrum",
            "run_length_mean",
            "run_length_histogram",
            "switch_frequency",
            "window_frequency",
            "proportion",
        ):
            count, differing = compare_documents(
                fused_ratios[variant][key], cpu[variant][key], 1e-12, 1e-15, 0.0
            )
            assert count > 0 and not differing, (variant, key, differing)
    # the covariance passes' stand-ins take a scope a row, so their sums are added in
    # another order than the CPU's: the section within rounding
    count, differing = compare_documents(
        fused_report.to_dict()["covariance"], cpu_report["covariance"], 1e-9, 1e-12, 0.0
    )
    assert count > 50 and not differing, differing[:5]


def test_every_kernel_has_a_stand_in_and_compiled_variants():
    # a kernel added to _triton_source without a stand-in would fail the counts only
    # where the analysis reaches it, and one without variants in triton_compile would
    # never have its GPU code checked
    import importlib.util

    if importlib.util.find_spec("triton") is None:
        pytest.skip("needs Triton installed")
    import triton_compile

    from ratioscope.functional import _triton_source

    kernels = {
        name
        for name, value in vars(_triton_source).items()
        if not name.startswith("_") and type(value).__name__.endswith("Function")
    }
    assert len(kernels) >= 15
    assert kernels == set(device_ops.stand_ins())
    assert kernels == {name for name, *_ in triton_compile.variants()}


def test_the_sections_fold_a_chunk_into_their_sums_after_one_read(tmp_path):
    # the [B]-sized results the sections fold into host sums wait for the chunk's end
    # (sections.context.HostReads) and come back in one copy, the columns with them
    path = write_synthetic(make_synthetic(64, 1024, extras=("all",)), tmp_path / "d.safetensors")
    count, _, _ = device_ops.count_operations(path, kernels=True)  # one chunk, two passes

    def by_function(counter, function: str) -> int:
        return sum(n for (_, name), n in counter.items() if name.endswith(function))

    flushes = ("ratioscope.sections.context", "ratioscope.functional.host:host_tensors")
    assert count.reads[flushes] == 2  # the chunk's pass 0 and the covariance's pass 1
    deferred = (
        "ratios:_add_constant_rows", "surrogate:ppo_aggregation_terms", "ratios:update",
        "tepo:update", "vitals:update_pass", "future_policy:add_rows",
        "summaries:add_cells", "moments:masked_moment_table", "histogram:class_counts",
        "pipeline:_write", "ratio_rows:_ratio_rows_triton", "tepo:kl_mask_quadrant_counts",
    )  # fmt: skip
    for function in deferred:
        assert by_function(count.reads, function) == 0, function
    # no result's size waits for a count (a boolean index, bincount, nonzero)
    assert not count.waits
    # what is left reads inside functions that need a value to go on (the packed rows'
    # lengths, a covariance pass's totals) or return host numbers: eight, where 75 were
    assert sum(count.reads.values()) <= 8
