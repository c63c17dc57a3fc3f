"""benchmarks/gpu_check.py: the key-by-key comparison of two reports, and the script's
clean skip without a GPU."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

import gpu_check  # noqa: E402
from gpu_check import (  # noqa: E402
    compare_documents,
    cuda_test_files,
    flat_numbers,
    guarded,
    main,
    missing_modules,
)


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


def test_the_cuda_tests_are_collected_from_their_own_files_only():
    files = {path.name for path in cuda_test_files()}
    # an independent count: the files that mark a test cuda, by their text
    marking = {
        path.name for path in (ROOT / "tests").glob("test_*.py")
        if "pytest.mark.cuda" in path.read_text()
    }  # fmt: skip
    assert files == marking
    assert "test_kalman.py" in files
    # a file with an optional import and no cuda test stays out of the run
    assert "test_diversity.py" not in files


def test_missing_modules_names_what_cannot_be_imported():
    assert missing_modules(("json", "torch")) == []
    assert missing_modules(("json", "no_such_module_for_ratioscope")) == [
        "no_such_module_for_ratioscope"
    ]


def test_a_step_that_raises_is_one_failed_row_and_the_next_step_runs(capsys):
    def broken() -> list:
        raise RuntimeError("CUDA error: an illegal memory access\nmore lines")

    rows = guarded("Kalman scan", broken)
    detail = "raised RuntimeError: CUDA error: an illegal memory access"
    assert rows == [("Kalman scan", detail, False)]
    captured = capsys.readouterr()
    assert captured.out.startswith("FAIL  Kalman scan")
    assert "Traceback" in captured.err and "more lines" in captured.err
    assert guarded("fine", lambda: [("fine", "1 GB/s", True)]) == [("fine", "1 GB/s", True)]
    assert capsys.readouterr().out.startswith("ok    fine")


def test_a_comparison_that_raises_leaves_the_others_and_the_summary(monkeypatch, capsys):
    calls = []

    def compare(path, device, rtol, atol, quantile_rtol, **options):
        calls.append((path, options))
        if len(calls) == 1:
            raise RuntimeError("Expected all tensors to be on the same device")
        return 12, [], 0.5, 0.25

    monkeypatch.setattr(gpu_check, "compare_devices", compare)
    monkeypatch.setattr(gpu_check, "synthetic_dump", lambda folder, gib: folder / "dump")
    assert main(["--device", "cpu"]) == 1
    out = capsys.readouterr().out
    assert len(calls) == 3  # the others ran after the first raised
    assert calls[1] == (gpu_check.LOGITS_STEP, {"top_p": 0.9, "top_k": 50})
    summary = out.split("summary", 1)[1].strip().splitlines()
    assert summary[0].startswith("FAIL  cpu vs cpu: bundled run")
    assert "raised RuntimeError: Expected all tensors" in summary[0]
    assert summary[1].startswith("ok    cpu vs cpu: logits, top-p 0.9, top-k 50")
    assert summary[2].startswith("ok    cpu vs cpu: synthetic 1 GiB")
    assert "12 numbers, 0 differ" in summary[2]


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


def test_the_chunk_size_row_times_each_size(monkeypatch, tmp_path):
    from make_synthetic import make_synthetic, write_synthetic

    path = tmp_path / "small.safetensors"
    write_synthetic(make_synthetic(16, 64, extras=("all",)), path)
    monkeypatch.setattr(gpu_check, "CHUNK_POWERS", (8, 10))
    sizes = []
    import ratioscope

    real = ratioscope.analyze

    def analyze(path, device, chunk_elements):
        sizes.append(chunk_elements)
        return real(path, device=device, chunk_elements=chunk_elements)

    monkeypatch.setattr(ratioscope, "analyze", analyze)
    [(label, detail, passed)] = gpu_check.chunk_rows(path, "cpu")
    assert label == "cpu analyze by chunk size" and passed
    assert sizes == [256, 256, 1024, 1024]  # each size twice, best of two
    assert detail.startswith("2^8 ") and ", 2^10 " in detail
    assert detail.endswith(" s; the default here: 2^22")  # the CPU's


#: the rows of a GPU session's table, and whether each is a speed goal (a share of the
#: bandwidth, which the emulated device's times say nothing about)
ROWS = {
    "copy bandwidth (floor)": False,
    "pytest -m cuda": False,
    "Kalman kernel 1024x4096": False,  # skipped: a CPU build of torch, no interpreter
    "Kalman scan 1024x4096": True,
    "Kalman kernel 64x32768": False,
    "Kalman scan 64x32768": True,
    "bench_analyze --device cuda": True,
    "cpu vs cuda: bundled run": False,
    "cpu vs cuda: logits, top-p 0.9, top-k 50": False,
    "cpu vs cuda: synthetic 0.02 GiB": False,
    "cuda analyze by chunk size": False,
}


@pytest.mark.slow
def test_a_rehearsal_on_the_emulated_device_runs_every_step():
    # every process of the check (its tests and benchmarks too) sees a CUDA device, the
    # one emulated on the CPU (tests/emulated_cuda/sitecustomize.py): each step must run
    env = {
        **os.environ,
        "RATIOSCOPE_EMULATED_CUDA": "1",
        "PYTHONPATH": str(ROOT / "tests" / "emulated_cuda"),
        "PYTHON": sys.executable,  # the script's python: this one, not the first on PATH
    }
    done = subprocess.run(
        ["bash", str(ROOT / "benchmarks" / "gpu_check.sh"), "--gib", "0.02"],
        capture_output=True, text=True, check=False, env=env, timeout=1200,
    )  # fmt: skip
    assert done.returncode in (0, 1), done.stderr[-3000:]  # 1: a speed goal not met
    head, _, summary = done.stdout.partition("gpu_check on emulated CUDA device (the CPU): summary")
    assert head.startswith("gpu_check on emulated CUDA device (the CPU)")
    lines = summary.strip().splitlines()
    assert len(lines) == len(ROWS), summary
    for line, (label, speed) in zip(lines, ROWS.items(), strict=True):
        status, rest = line[:4].strip(), line[6:]  # print_row: "ok  " or "FAIL", 2 spaces
        assert rest.startswith(label), line
        detail = rest.removeprefix(label).strip()
        assert not detail.startswith(("raised", "failed")), line
        assert speed or status == "ok", line
    assert " passed" in lines[1] and "failed" not in lines[1]
    assert "skipped: Triton cannot run here" in lines[2]
