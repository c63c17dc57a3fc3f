"""benchmarks/gpu_check.py: the key-by-key comparison of two reports, and the script's
clean skip without a GPU."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

from gpu_check import compare_documents, flat_numbers, main  # noqa: E402


def test_flat_numbers_keys_every_number_by_its_path_and_leaves_out_run_details():
    document = {
        "tool": {"created": 1.0},
        "ratios": {"token": {"mean": 1.5, "ok": True, "band": [0.2, 0.3], "name": "x"}},
        "vitals": None,
    }
    assert dict(flat_numbers(document)) == {
        "ratios.token.mean": 1.5, "ratios.token.band.0": 0.2, "ratios.token.band.1": 0.3,
        "vitals": None,
    }  # fmt: skip


def test_compare_documents_holds_numbers_and_quantiles_to_their_tolerances():
    a = {"x": {"mean": 1.0, "quantiles": {"0.5": 2.0}}, "n": 10, "gone": None}
    # 1 + 5e-5: within rtol 1e-4; the quantile 1 % off: within the histogram's 1.2 %
    close = {"x": {"mean": 1.00005, "quantiles": {"0.5": 2.02}}, "n": 10, "gone": None}
    assert compare_documents(a, close, 1e-4, 0.0, 0.012) == (4, [])
    far = {"x": {"mean": 1.001, "quantiles": {"0.5": 2.1}}, "n": 11, "gone": 0.0}
    count, differing = compare_documents(a, far, 1e-4, 0.0, 0.012)
    assert count == 4
    assert [line.split(":")[0] for line in differing] == [
        "gone", "n", "x.mean", "x.quantiles.0.5"
    ]  # fmt: skip
    _, missing = compare_documents(a, {**a, "extra": 1.0}, 1e-4, 0.0, 0.012)
    assert missing == ["extra: only in one report"]


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the skip without a GPU")
def test_the_script_skips_in_one_line_without_a_gpu():
    done = subprocess.run(
        ["bash", str(ROOT / "benchmarks" / "gpu_check.sh")],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert done.returncode == 0
    assert done.stdout.strip().splitlines() == [
        "gpu_check: no CUDA device (torch.cuda.is_available() is False): skipped"
    ]


@pytest.mark.slow
def test_the_comparison_of_the_cpu_with_itself_finds_no_difference(capsys):
    assert main(["--device", "cpu", "--gib", "0.01"]) == 0
    out = capsys.readouterr().out
    assert "ok    cpu vs cpu: bundled run" in out and "0 differ" in out
