"""``analyze --device cuda`` on a device emulated on the CPU (tests/device_emulation.py):
the GPU paths take no CPU tensor where a GPU would refuse one, and report what the CPU
reports. CI has no GPU; these run everywhere."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import ratioscope
from ratioscope.analysis import pipeline
from ratioscope.analysis.device import chunk_elements_for
from ratioscope.functional import token_stats
from ratioscope.functional.concentration import gini
from ratioscope.functional.corrections import second_moment_mask
from ratioscope.functional.histogram import RELATIVE_ERROR
from ratioscope.functional.host import host_tensors
from ratioscope.sections.context import HostReads
from tests.device_emulation import (
    DEVICE,
    DeviceMixError,
    OperationCount,
    resolve_device,
    second_device,
)

ROOT = Path(__file__).resolve().parents[1]
VERL_STEPS = ROOT / "sample_data" / "verl_steps"
sys.path.insert(0, str(ROOT / "benchmarks"))

from gpu_check import compare_documents  # noqa: E402
from make_synthetic import make_synthetic, write_synthetic  # noqa: E402


@pytest.fixture
def emulated_resolution(monkeypatch):
    """``analyze(device="cuda")`` runs on the emulated device."""
    monkeypatch.setattr(pipeline, "resolve_device", resolve_device)


@pytest.fixture
def emulated(emulated_resolution):
    """The test's body on the emulated device."""
    with second_device():
        yield


# ------------------------------------------------------------- the emulation itself
def test_the_emulation_refuses_what_a_gpu_refuses(emulated):
    on_device = torch.arange(6.0).to("cuda")
    assert on_device.device == DEVICE and (on_device * 2).device == DEVICE
    with pytest.raises(DeviceMixError, match="numpy"):
        on_device.numpy()
    assert on_device.cpu().numpy().tolist() == [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]
    with pytest.raises(DeviceMixError, match="mul"):
        on_device * torch.ones(6)
    assert float((on_device * torch.tensor(2.0)).sum()) == 30.0  # a 0-dim CPU tensor is fine
    with pytest.raises(DeviceMixError, match="cat"):
        torch.cat([on_device, torch.ones(1)])
    with pytest.raises(DeviceMixError, match="indexed on the device"):
        torch.ones(6)[on_device > 2]
    made = torch.zeros(3, device=on_device.device)
    assert made.device == DEVICE


def test_helpers_with_device_inputs_keep_their_work_on_the_device(emulated):
    values = torch.tensor([0.0, 0.0, 0.0, 4.0]).to("cuda")
    assert gini(values) == pytest.approx(0.75)  # its docstring's case
    log_ratio = torch.tensor([[0.1, -0.2, 0.9, 0.0]]).to("cuda")
    mask = torch.tensor([[True, True, True, False]]).to("cuda")
    weight, extra = second_moment_mask(log_ratio, mask, 0.05)
    # squares 0.01, 0.04, 0.81: running means 0.01, 0.025, 0.287 keep the first two
    assert extra["masked"].cpu().tolist() == [[False, False, True, False]]
    assert weight.device == DEVICE


# ------------------------------------------------------------------ analyze on it
def _same_documents(run) -> None:
    """``run(device)`` on the CPU and on the emulated device give the same document."""
    cpu = run("cpu").to_dict()
    with second_device():
        other = run("cuda").to_dict()
    count, differing = compare_documents(cpu, other, 1e-4, 1e-6, RELATIVE_ERROR)
    assert count > 100
    assert differing == []


def _same_reports(path: Path | list[Path], **options) -> None:
    _same_documents(lambda device: ratioscope.analyze(path, device=device, **options))


def test_a_dump_with_logits_and_stated_sampling_settings(emulated_resolution):
    # the logits stay on the CPU while the mask and tokens are on the device: the
    # sampling section's truncation sums read them a block of rows at a time
    _same_reports(ROOT / "sample_data" / "verl" / "step_0032.pt", top_p=0.9, top_k=50)


def test_the_bundled_run_and_a_synthetic_dump_with_every_extra(emulated_resolution, tmp_path):
    _same_reports(VERL_STEPS)
    path = tmp_path / "synthetic.safetensors"
    write_synthetic(make_synthetic(64, 512, extras=("all",)), path)
    _same_reports(path)


def test_chunk_after_chunk_the_host_folds_give_the_cpus_report(emulated_resolution, tmp_path):
    # on the device each chunk's host folds wait for its end (sections.context.HostReads):
    # six chunks of every section, the covariance section's second pass over them, and
    # the per-sequence table, against the CPU's folds run at once on the same chunks
    path = write_synthetic(make_synthetic(48, 256, extras=("all",)), tmp_path / "d.safetensors")
    _same_reports(path, chunk_elements=8 * 256)
    table = {}
    for device in ("cpu", "cuda"):
        with second_device() if device == "cuda" else contextlib.nullcontext():
            run = ratioscope.analyze(path, device=device, chunk_elements=8 * 256, per_sequence=True)
        assert run.sequences is not None
        table[device] = run.sequences.frame()
    assert table["cpu"].columns == table["cuda"].columns and table["cpu"].height == 48
    for name in table["cpu"].columns:
        mine, theirs = table["cuda"][name].to_list(), table["cpu"][name].to_list()
        if isinstance(theirs[0], float):
            # the device's paths (scan, tensor spectra) round apart from numba's: 1e-8
            assert mine == pytest.approx(theirs, rel=1e-6, abs=1e-9, nan_ok=True), name
        else:
            assert mine == theirs, name


@pytest.mark.slow
def test_a_kalman_sweep_and_a_timeline(emulated_resolution):
    _same_documents(lambda device: ratioscope.sweep(VERL_STEPS, qvs=[1e-4, 1e-3], device=device))
    capture = ROOT / "sample_data" / "runs" / "healthy-s1" / "capture"
    _same_documents(lambda device: ratioscope.timeline(capture, device=device, reports_dir=None))


# ------------------------------------------------------------- what a GPU is asked
def test_the_count_sorts_launches_views_reads_and_uploads():
    count = OperationCount()
    with second_device(count):
        x = torch.arange(6.0).to("cuda")  # an upload
        y = (x * 2).view(2, 3)  # a launch and a view
        total = float(y.sum())  # a launch and a read
        made = torch.zeros(3, device="cuda")  # a launch (the fill)
        gini(made + 1.0)  # attributed to the ratioscope function that asks
    assert total == 30.0
    outside = ("(outside ratioscope)", "")
    assert count.uploads == {outside: 1}
    assert count.views[outside] == 1 and count.reads[outside] == 1
    assert count.launches[outside] == 4  # mul, sum, zeros, the add
    assert not count.waits
    # bytes in and out: mul 24 + 24, sum 24 + 4, zeros 12, add 12 + 12 (float32)
    assert count.moved[outside] == 112
    with second_device(count):
        picked = x[x > 2]  # its size is the count of True: the host waits for it
        torch.nonzero(x)
    assert picked.device == DEVICE and count.waits[outside] == 2
    host = torch.zeros(6)
    with second_device(count):
        host[:] = x  # a copy back, as .cpu() is
    assert count.reads[outside] == 2
    where = ("ratioscope.functional.concentration", "ratioscope.functional.concentration:gini")
    assert count.launches[where] > 0 and set(count.launches) == {outside, where}


def test_the_count_holds_the_peak_of_live_device_memory():
    count = OperationCount()
    with second_device(count):
        a = torch.zeros(1000).to("cuda")  # 4,000 bytes on the device
        b = a * 2  # 8,000
        del b  # 4,000
        c = a.view(10, 100)  # a's storage: still 4,000
        d = torch.ones(500, device="cuda")  # 6,000
    assert count.peak_bytes == 8000 and c.shape == (10, 100) and d.shape == (500,)
    del a, c, d
    assert count._live_bytes == 0


def test_the_spectra_take_one_fft_size_on_the_device():
    gen = torch.Generator().manual_seed(11)
    x = torch.randn(9, 300, generator=gen, dtype=torch.float64)
    mask = torch.arange(300) < torch.tensor([300, 2, 1, 17, 64, 65, 150, 299, 0]).unsqueeze(1)
    cpu_lfr = token_stats.low_frequency_ratio(x, mask)
    cpu_grid, cpu_power = token_stats.periodogram(x, mask)
    buckets = token_stats._spectrum(token_stats._signal_pack(x, mask, "log")).buckets
    assert len(buckets) > 1  # the CPU goes bucket by bucket
    with second_device():
        on_device, device_mask = x.to("cuda"), mask.to("cuda")
        signal = token_stats._signal_pack(on_device, device_mask, "log")
        assert len(token_stats._spectrum(signal).buckets) == 1
        lfr = token_stats.low_frequency_ratio(on_device, device_mask).cpu()
        grid, power = token_stats.periodogram(on_device, device_mask)
        power = power.cpu()
    assert torch.equal(grid, cpu_grid)
    torch.testing.assert_close(lfr, cpu_lfr, rtol=1e-12, atol=1e-12, equal_nan=True)
    with second_device():  # no rows: no transform (an FFT of a batch of none fails)
        assert token_stats.low_frequency_ratio(on_device[:0], device_mask[:0]).shape == (0,)
    torch.testing.assert_close(power, cpu_power, rtol=1e-10, atol=1e-12, equal_nan=True)


def test_host_tensors_read_once_and_keep_shapes_and_dtypes():
    gen = torch.Generator().manual_seed(2)
    tensors = [
        torch.randn(4, 3, generator=gen, dtype=torch.float64),
        torch.arange(5),
        torch.rand(6, generator=gen) > 0.5,
        torch.randn(2, 2, 2, generator=gen, dtype=torch.float64),
        torch.zeros(0, dtype=torch.int64),
    ]
    count = OperationCount()
    with second_device(count):
        host = host_tensors(*(t.to("cuda") for t in tensors))
    assert sum(count.reads.values()) == 1  # float64, int64 and bool as bytes, one copy
    for back, tensor in zip(host, tensors, strict=True):
        assert back.dtype == tensor.dtype and back.shape == tensor.shape
        assert torch.equal(back, tensor)
    on_cpu = host_tensors(*tensors)  # the CPU's are the tensors' own memory
    assert all(a.data_ptr() == t.data_ptr() for a, t in zip(on_cpu, tensors[:4], strict=False))


def test_host_tensors_align_each_dtype_and_leave_host_tensors_where_they_are():
    # narrow dtypes first, a strided view, a 0-dim bfloat16 (which numpy lacks) and a host
    # tensor among device ones: the bytes of each come back where its dtype can read them
    gen = torch.Generator().manual_seed(3)
    matrix = torch.randn(5, 4, generator=gen, dtype=torch.float64)
    tensors = [
        torch.tensor([True, False, True]),
        torch.arange(3, dtype=torch.int32),
        matrix[:, 1],
        torch.tensor(2.5, dtype=torch.bfloat16),
        torch.randn(3, generator=gen),
        torch.arange(4),
    ]
    count = OperationCount()
    with second_device(count):
        given = [t if i == 4 else t.to("cuda") for i, t in enumerate(tensors)]
        host = host_tensors(*given)
    assert sum(count.reads.values()) == 1
    assert host[4] is not given[4] and host[4].data_ptr() == tensors[4].data_ptr()
    for back, tensor in zip(host, tensors, strict=True):
        assert back.device.type == "cpu" and back.dtype == tensor.dtype
        assert back.shape == tensor.shape and torch.equal(back, tensor)
        assert back.data_ptr() % tensor.element_size() == 0


def test_host_reads_run_their_folds_in_order_after_one_copy():
    seen: list[tuple[str, list]] = []

    def fold(name):
        return lambda *host: seen.append((name, [t.tolist() for t in host]))

    count = OperationCount()
    with second_device(count):
        reads = HostReads(deferred=True)
        a = torch.arange(3.0, dtype=torch.float64).to("cuda")
        reads.later(fold("first"), a * 2, a > 0)
        reads.later(fold("second"), a.long())
        reads.later(fold("host"), torch.ones(2))  # host tensors: at once
        assert [name for name, _ in seen] == ["host"] and reads.pending == 2
        assert not count.reads
        reads.flush()
    assert sum(count.reads.values()) == 1 and reads.pending == 0
    assert seen[1:] == [
        ("first", [[0.0, 2.0, 4.0], [False, True, True]]),
        ("second", [[0, 1, 2]]),
    ]
    with second_device(count):
        HostReads().later(fold("now"), a)  # not deferred: a read at once
    assert seen[-1] == ("now", [[0.0, 1.0, 2.0]]) and sum(count.reads.values()) == 2


# ------------------------------------------------------------ the chunk on a device
GIB = 2**30


@pytest.mark.parametrize(
    ("free", "chunk"),
    [
        (80 * GIB, 2**26),  # 2^26 x 128 B = 8 GiB <= 20 GiB: the largest
        (15 * GIB, 2**24),  # 3.75 GiB: 2^24 (2 GiB) fits, 2^25 (4 GiB) does not
        (3 * GIB, 2**22),  # 0.75 GiB: 2^22 (0.5 GiB) fits, 2^23 (1 GiB) does not
        (GIB // 8, 2**22),  # never below the CPU's
    ],
)
def test_a_gpu_takes_chunks_as_large_as_its_free_memory_allows(monkeypatch, free, chunk):
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda device=None: (free, 2 * free))
    assert chunk_elements_for(DEVICE) == chunk
    assert chunk_elements_for(DEVICE, 1000) == 1000  # asked: as asked
    assert chunk_elements_for(torch.device("cpu")) == 2**22


def test_analyze_on_a_device_chunks_by_the_devices_size(emulated_resolution, monkeypatch, tmp_path):
    from ratioscope import defaults

    # scaled down: the CPU's chunk 2^10 elements, a device's up to 2^14, 2^12 here
    monkeypatch.setattr(defaults, "CHUNK_ELEMENTS", 2**10)
    monkeypatch.setattr(defaults, "DEVICE_CHUNK_ELEMENTS_MAX", 2**14)
    budget = 2**12 * defaults.DEVICE_BYTES_PER_ELEMENT / defaults.DEVICE_MEMORY_SHARE
    path = write_synthetic(make_synthetic(64, 256), tmp_path / "d.safetensors")
    totals = []

    def progress(update):
        if update.task == "chunks":
            totals.append(update.total)

    ratioscope.analyze(path, device="cpu", progress=progress, sections=["ratios"])
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda device=None: (budget, budget))
    with second_device():
        ratioscope.analyze(path, device="cuda", progress=progress, sections=["ratios"])
    # 64 rows of 256 tokens: 4 rows a chunk on the CPU, 16 on the device
    assert set(totals) == {16, 4} and totals[0] == 16 and totals[-1] == 4


# ------------------------------------------------------- the command line on a device
def _emulated_cuda_command(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    """``ratioscope ARGS`` in a process whose CUDA device is the emulated one
    (tests/emulated_cuda/sitecustomize.py)."""
    env = {
        **os.environ,
        "RATIOSCOPE_EMULATED_CUDA": "1",
        "PYTHONPATH": os.pathsep.join([str(ROOT / "tests" / "emulated_cuda"), str(ROOT)]),
    }
    return subprocess.run(
        [sys.executable, "-m", "ratioscope", *args], cwd=cwd, env=env,
        capture_output=True, text=True, check=False, timeout=600,
    )  # fmt: skip


@pytest.mark.slow
def test_the_commands_run_on_a_device_as_a_gpu_runs_them(tmp_path):
    # each command that takes --device, as a user on a GPU machine types it
    steps = str(VERL_STEPS)
    commands = {
        "analyze.json": ("analyze", str(ROOT / "sample_data" / "verl"), "--json"),
        "timeline.json": ("timeline", steps, "--no-cache", "--json"),
        "watch.json": ("watch", steps, "--once", "--settle", "0", "--no-cache", "--json"),
        "report.html": ("report", steps, "--no-cache", "--out"),
        "spectrum.png": ("plot", "spectrum", steps, "--out"),
    }
    for name, args in commands.items():
        done = _emulated_cuda_command(*args, str(tmp_path / name), "--device", "cuda", cwd=tmp_path)
        assert done.returncode == 0, (name, done.stderr[-2000:])
        assert (tmp_path / name).stat().st_size > 0, name
    assert _emulated_cuda_command("sweep", steps, "--device", "cuda", cwd=tmp_path).returncode == 0
    # the command line's report on the device is the CPU's, within the GPU check's bounds
    cpu = ratioscope.analyze(ROOT / "sample_data" / "verl", device="cpu").to_dict()
    other = json.loads((tmp_path / "analyze.json").read_text())
    count, differing = compare_documents(cpu, other, 1e-4, 1e-6, RELATIVE_ERROR)
    assert count > 100 and differing == []


def test_a_steps_cache_key_asks_a_gpu_nothing(monkeypatch):
    # the key is worked out by a driver that may only hand steps to workers: asking for
    # a GPU's free memory there would open a CUDA context on it
    from ratioscope.analysis import device as device_module
    from ratioscope.data.params import AnalysisParams
    from ratioscope.io.loaders import LoadOptions
    from ratioscope.views.step_analysis import StepAnalysis

    def refuse(device=None):
        raise AssertionError("the GPU's memory was asked for")

    monkeypatch.setattr(device_module, "resolve_device", resolve_device)
    monkeypatch.setattr(torch.cuda, "mem_get_info", refuse)
    options = {"params": AnalysisParams(), "load_options": LoadOptions(), "sections": None}
    options.update(objectives=False, fixed_params=())
    on_gpu = StepAnalysis(device="cuda", chunk_elements=None, **options).cache_parameters()
    assert on_gpu["chunk_elements"] is None and on_gpu["device"] == "cuda"
    on_cpu = StepAnalysis(device="cpu", chunk_elements=None, **options).cache_parameters()
    assert on_cpu["chunk_elements"] == 2**22  # the key of every step cached before
    asked = StepAnalysis(device="cuda", chunk_elements=1000, **options).cache_parameters()
    assert asked["chunk_elements"] == 1000
