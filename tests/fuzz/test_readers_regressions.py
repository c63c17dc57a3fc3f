"""The reader cases of the hostile-input report, by name (memory from tiny files, sizes
taken on trust, headers that overflow, tensors of kinds the analysis cannot use)."""

from __future__ import annotations

import zipfile
from pathlib import Path

import numpy as np
import pytest
import torch
from fuzz import files
from fuzz.harness import error_line, promise

pytestmark = pytest.mark.fuzz

STREAMED = {"RATIOSCOPE_STREAM_BYTES": "1"}


def _both(path: Path, tmp_path: Path, command: str = "analyze") -> list[str]:
    """The error line of the whole read and of the streamed read (they must agree)."""
    lines = []
    for env in ({}, STREAMED):
        args = [command, path.name] + (["-q"] if command == "analyze" else [])
        lines.append(error_line(promise(args, tmp_path, env=env)))
    return lines


def _pt(path: Path, **tensors: object) -> None:
    mask = torch.ones(4, 8, dtype=torch.bool)
    old = torch.randn(4, 8) - 2
    torch.save({"mask": mask, "old_log_probs": old, "log_probs": old + 0.01, **tensors}, path)


# ----------------------------------------------------------- memory from tiny files
def test_pt_stride_zero_expanded(tmp_path: Path) -> None:
    mask = torch.ones(1, 1, dtype=torch.bool).expand(8192, 16384)
    old = torch.zeros(1, 1).expand(8192, 16384)
    torch.save({"mask": mask, "old_log_probs": old, "log_probs": old}, tmp_path / "e.pt")
    assert (tmp_path / "e.pt").stat().st_size < 4096
    line = error_line(promise(["analyze", "e.pt", "-q"], tmp_path, seconds=30))
    assert "stride 0" in line and "contiguous" in line


def test_pt_rebuild_huge_size_stride_zero(tmp_path: Path) -> None:
    old = torch.zeros(1).expand(2**17 * 2**16).view(2**17, 2**16)
    torch.save(
        {"mask": torch.ones(1, 1).expand(2**17, 2**16), "old_log_probs": old}, tmp_path / "h.pt"
    )
    for command in (["analyze", "h.pt", "-q"], ["info", "h.pt"]):
        line = error_line(promise(command, tmp_path, seconds=30))
        assert "h.pt" in line and "storage" in line


def test_pt_deflated_storages(tmp_path: Path) -> None:
    _pt(tmp_path / "plain.pt", big=torch.zeros(4 << 20))
    with (
        zipfile.ZipFile(tmp_path / "plain.pt") as source,
        zipfile.ZipFile(tmp_path / "d.pt", "w", compression=zipfile.ZIP_DEFLATED) as target,
    ):
        for info in source.infolist():
            target.writestr(info.filename, source.read(info))
    (tmp_path / "plain.pt").unlink()
    assert (tmp_path / "d.pt").stat().st_size < 200_000
    line = error_line(
        promise(["analyze", "d.pt", "-q"], tmp_path, env={"RATIOSCOPE_MAX_BYTES": "8M"})
    )
    assert "RATIOSCOPE_MAX_BYTES" in line


def _legacy_pt(path: Path, numel: int | None = None, **tensors: torch.Tensor) -> None:
    """A dump in torch's legacy (non-zip) format; ``numel``: the element count the
    pickle declares for the storage of ``old_log_probs`` (3 x 100 floats), edited in
    place of the true 300 (a protocol-2 pickle has no offsets to keep right)."""
    old = torch.full((3, 100), -1.0)
    torch.save(
        {"mask": torch.ones(3, 100, dtype=torch.bool), "old_log_probs": old,
         "log_probs": old + 0.01, **tensors},
        path,
        _use_new_zipfile_serialization=False,
    )  # fmt: skip
    if numel is not None:
        data = path.read_bytes()
        declared = b"M" + (300).to_bytes(2, "little")  # BININT2 300: the storage's count
        assert data.count(declared) == 3  # the storages of mask, old_log_probs, log_probs
        at = data.index(declared, data.index(declared) + 1)
        count = numel.to_bytes((numel.bit_length() + 8) // 8, "little")
        long1 = b"\x8a" + bytes([len(count)]) + count  # LONG1 numel
        path.write_bytes(data[:at] + long1 + data[at + len(declared) :])


@pytest.mark.parametrize("numel", [2**28, 2**37, 2**61], ids=["1GiB", "512GiB", "2^61"])
def test_pt_legacy_declared_storage_sizes(tmp_path: Path, numel: int) -> None:
    """A 1 KB legacy ``.pt`` whose pickle declares a storage of gigabytes: torch would
    allocate it before reading a byte of it; refused on what the file holds."""
    _legacy_pt(tmp_path / "l.pt", numel)
    assert (tmp_path / "l.pt").stat().st_size < 4096
    for line in _both(tmp_path / "l.pt", tmp_path):
        assert "l.pt" in line and "storages declare" in line and "the file holds" in line


def test_pt_legacy_over_the_budget(tmp_path: Path) -> None:
    _legacy_pt(tmp_path / "b.pt", big=torch.zeros(1 << 20))
    line = error_line(
        promise(["analyze", "b.pt", "-q"], tmp_path, env={"RATIOSCOPE_MAX_BYTES": "2M"})
    )
    assert "b.pt" in line and "memory budget" in line


def test_pt_legacy_read_as_the_zip_format(tmp_path: Path) -> None:
    """A sound legacy file passes the check and reads as the zip format does."""
    from ratioscope.io.readers import read_raw

    _legacy_pt(tmp_path / "l.pt")
    old = torch.full((3, 100), -1.0)
    torch.save(
        {"mask": torch.ones(3, 100, dtype=torch.bool), "old_log_probs": old,
         "log_probs": old + 0.01},
        tmp_path / "z.pt",
    )  # fmt: skip
    legacy, zipped = read_raw(tmp_path / "l.pt"), read_raw(tmp_path / "z.pt")
    assert set(legacy.columns) == {"mask", "old_log_probs", "log_probs"}
    for key, value in zipped.columns.items():
        assert torch.equal(legacy.columns[key], value), key
    assert torch.equal(legacy.columns["log_probs"], torch.full((3, 100), -0.99))


def test_npz_inflating_past_the_budget(tmp_path: Path) -> None:
    members = files.valid_npz_members()
    members["big"] = files.npy_of(np.zeros(16 << 20, dtype=np.int8))
    files.write_npz(tmp_path / "i.npz", members, zipfile.ZIP_DEFLATED)
    budget = {"RATIOSCOPE_MAX_BYTES": "4M"}
    line = error_line(promise(["analyze", "i.npz", "-q"], tmp_path, env=budget))
    assert "memory budget" in line and "i.npz" in line


def test_npz_inflating_past_the_memory_left(tmp_path: Path) -> None:
    """Within the budget but past the memory the process has (its address space, here):
    one line saying the memory ran out and exit 2, whichever allocation fails (numpy's
    MemoryError, torch's "can't allocate memory"), and never libgomp's "Thread creation
    failed" with exit 1 (the 3 MB npz of the report inflated to 3 GiB did that)."""
    members = files.valid_npz_members()
    for key in ("old_log_probs", "log_probs"):
        members[key] = files.npy_of(np.full((4096, 4096), -1.0, dtype=np.float32))
    members["mask"] = files.npy_of(np.ones((4096, 4096), dtype=bool))
    files.write_npz(tmp_path / "m.npz", members, zipfile.ZIP_DEFLATED)
    assert (tmp_path / "m.npz").stat().st_size < 1 << 20  # 144 MiB once read
    outcome = promise(["analyze", "m.npz", "-q"], tmp_path, memory=96 << 20)
    assert "out of memory" in error_line(outcome) and "libgomp" not in outcome.stderr


_THREADS_THEN_NO_MEMORY = """
import resource, sys
import torch
torch.set_num_threads(2)
if sys.argv[1] == "started":
    from ratioscope.io.limits import start_thread_pool
    start_thread_pool()
with open("/proc/self/status") as status:
    mapped = next(int(line.split()[1]) * 1024 for line in status if line.startswith("VmSize:"))
resource.setrlimit(resource.RLIMIT_AS, (mapped + (64 << 20),) * 2)
hog = []
try:
    while True:
        hog.append(bytearray(1 << 20))
except MemoryError:
    del hog[-4:]  # a few MB left: less than a thread's stack
torch.ones(1 << 17).sum()  # a parallel reduction: the whole thread team
print("done")
"""


def test_thread_pool_started_before_memory_runs_out() -> None:
    """libgomp creates torch's threads at the first parallel operation and ends the
    process (exit 1, "Thread creation failed") when it cannot; the readers start them
    first (ratioscope.io.limits.start_thread_pool), so a parallel operation with the
    memory spent still runs."""
    import subprocess
    import sys

    def run(mode: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-c", _THREADS_THEN_NO_MEMORY, mode],
            capture_output=True,
            text=True,
            timeout=120,
        )

    started = run("started")
    assert started.returncode == 0 and "done" in started.stdout, started.stderr[-1000:]
    if "OpenMP" in torch.__config__.parallel_info():
        cold = run("cold")  # the failure the start avoids, where torch runs on libgomp
        assert cold.returncode != 0 and "Thread creation failed" in cold.stderr


@pytest.mark.parametrize(
    "header",
    [
        {"descr": "<f4", "fortran_order": False, "shape": (10**12,)},
        {"descr": "<U100000000", "fortran_order": False, "shape": (2,)},
        {"descr": "<f4", "fortran_order": False, "shape": (-3, 4)},
    ],
    ids=["shape-1e12", "U100000000", "negative"],
)
def test_npz_declared_sizes(tmp_path: Path, header: dict[str, object]) -> None:
    members = files.valid_npz_members()
    members["mask"] = files.npy_bytes(header, b"\0" * 64)
    files.write_npz(tmp_path / "s.npz", members)
    for line in _both(tmp_path / "s.npz", tmp_path):
        assert "s.npz" in line and "'mask'" in line


def test_safetensors_shared_data_offsets(tmp_path: Path) -> None:
    old, _ = files.log_probs(4, 8)
    files.write_safetensors(
        tmp_path / "o.safetensors",
        {
            "mask": ("BOOL", [4, 8], np.ones((4, 8), np.uint8).tobytes()),
            "old_log_probs": ("F32", [4, 8], old.tobytes()),
            "log_probs": ("F32", [4, 8], old.tobytes()),
        },
        offsets={"log_probs": [32, 32 + 128]},
    )
    for line in _both(tmp_path / "o.safetensors", tmp_path):
        assert "share bytes" in line


# ----------------------------------------------- many short rows from a tiny file
def _two_token_rows(path: Path, rows: int) -> None:
    """A Parquet file of ``rows`` two-token rows in one row group (a few KB: the values
    repeat, so they compress to nothing)."""
    import polars as pl

    def column(*row: float) -> np.ndarray:
        return np.tile(np.array(row), (rows, 1))

    pl.DataFrame(
        {
            "old_log_probs": column(-1.0, -2.0),
            "log_probs": column(-1.01, -2.02),
            "mask": column(1.0, 1.0).astype(bool),
        }
    ).select(pl.all().arr.to_list()).write_parquet(path, row_group_size=rows)


def test_parquet_many_two_token_rows_read_flat(tmp_path: Path) -> None:
    """The 79 KB file of 200,000 two-token rows that peaked at 2.4 GB: its per-token
    columns are read as one flat column each, never one tensor per row."""
    from ratioscope.data.raw import Ragged
    from ratioscope.io.readers import read_raw

    _two_token_rows(tmp_path / "r.parquet", 200_000)
    assert (tmp_path / "r.parquet").stat().st_size < 100_000
    raw = read_raw(tmp_path / "r.parquet")
    for key in ("old_log_probs", "log_probs", "mask"):
        column = raw.columns[key]
        assert isinstance(column, Ragged), type(column)
        assert column.values.shape == (400_000,) and len(column) == 200_000
    assert raw.columns["log_probs"][199_999].tolist() == [-1.01, -2.02]


@pytest.mark.slow
def test_parquet_many_two_token_rows_peak_memory(tmp_path: Path) -> None:
    """``analyze`` of the file above stays well below the 2.4 GB it took: its peak
    resident memory above that of a 1,000-row file is under 800 MB (about 250 MB now:
    the rows are read flat and a chunk counts each row as 256 tokens, the points of its
    spectrum)."""
    import subprocess
    import sys

    peaks = []
    for rows in (1_000, 200_000):
        path = tmp_path / f"r{rows}.parquet"
        _two_token_rows(path, rows)
        script = (
            "import resource, subprocess, sys\n"
            "subprocess.run([sys.executable, '-m', 'ratioscope', 'analyze', sys.argv[1], '-q'],"
            " check=True, stdout=subprocess.DEVNULL)\n"
            "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)"
        )
        done = subprocess.run(
            [sys.executable, "-c", script, str(path)],
            capture_output=True,
            text=True,
            check=True,
            timeout=600,
        )
        peaks.append(int(done.stdout.split()[-1]) * 1024)  # ru_maxrss is in KiB
    assert peaks[1] - peaks[0] < 800 << 20, f"peaks {peaks[0] >> 20} and {peaks[1] >> 20} MiB"


def test_parquet_padding_past_the_budget(tmp_path: Path) -> None:
    """Short rows and one long one: padded to [B, longest] the few KB would be 3 x 64 GB;
    refused by the memory budget on the padded size, before anything is allocated."""
    import polars as pl

    rows = [[-1.0]] * 40_000 + [[-1.0] * 200_000]
    pl.DataFrame(
        {"old_log_probs": rows, "log_probs": rows, "mask": [[1] * len(r) for r in rows]}
    ).write_parquet(tmp_path / "p.parquet")
    line = error_line(promise(["analyze", "p.parquet", "-q"], tmp_path, seconds=60))
    assert "p.parquet" in line and "40001 x 200000" in line and "RATIOSCOPE_MAX_BYTES" in line


# ------------------------------------------------------------ sizes taken on trust
@pytest.mark.parametrize(
    "header",
    [
        files.nested(100_000).encode(),
        b'{"mask": {"dtype": "BOOL", "shape": [1e400, 2], "data_offsets": [0, 2]}}',
        b'{"mask": {"dtype": "BOOL", "shape": [4611686018427387904, 4], "data_offsets": [0, 0]}}',
        b'{"mask": {"dtype": "BOOL", "shape": "ab", "data_offsets": [0, 2]}}',
        b'{"mask": {"dtype": "BOOL", "shape": [2], "data_offsets": [2, 0]}}',
        b'{"mask": 3}',
    ],
    ids=["nested", "1e400", "wraps-to-0", "string-shape", "backwards", "not-an-entry"],
)
def test_safetensors_headers(tmp_path: Path, header: bytes) -> None:
    files.write_safetensors_header(tmp_path / "h.safetensors", header, b"\1\1")
    for line in _both(tmp_path / "h.safetensors", tmp_path):
        assert "h.safetensors" in line


def test_safetensors_header_over_100mb_streamed(tmp_path: Path) -> None:
    path = tmp_path / "big.safetensors"
    with path.open("wb") as handle:
        handle.write((150_000_000).to_bytes(8, "little"))
        handle.truncate(150_000_100)  # sparse: no disk is used
    for line in _both(path, tmp_path):
        assert "100 MB" in line


def test_npz_big_endian_member_read_alike(tmp_path: Path) -> None:
    old, new = files.log_probs(4, 8)
    np.savez(
        tmp_path / "be.npz",
        mask=np.ones((4, 8), bool),
        old_log_probs=old.astype(">f4"),
        log_probs=new.astype(">f4"),
    )
    reports = []
    for env, name in (({}, "a.json"), (STREAMED, "b.json")):
        promise(["analyze", "be.npz", "-q", "--json", name], tmp_path, env=env, written=[name])
        reports.append((tmp_path / name).read_text())
    z = (new.astype(np.float64) - old).mean()
    assert abs(_mean_z(reports[0]) - z) < 1e-6 and _mean_z(reports[0]) == _mean_z(reports[1])


def _mean_z(text: str) -> float:
    import json

    return float(json.loads(text)["ratios"]["token"]["distribution"]["mean"])


def test_npy_named_npz(tmp_path: Path) -> None:
    np.save(tmp_path / "x.npy", np.ones(3))
    (tmp_path / "x.npy").rename(tmp_path / "x.npz")
    for line in _both(tmp_path / "x.npz", tmp_path):
        assert "single .npy array" in line


def test_npz_member_bad_magic(tmp_path: Path) -> None:
    members = files.valid_npz_members()
    members["mask"] = b"NOTNUMPY" + members["mask"][8:]
    files.write_npz(tmp_path / "m.npz", members)
    for line in _both(tmp_path / "m.npz", tmp_path):
        assert "'mask.npy' is not a .npy array" in line


# ----------------------------------------------------------- tensors of other kinds
def test_sparse_log_probs(tmp_path: Path) -> None:
    _pt(tmp_path / "s.pt", log_probs=(torch.randn(4, 8) - 2).to_sparse())
    assert "sparse" in error_line(promise(["analyze", "s.pt", "-q"], tmp_path))


@pytest.mark.filterwarnings("ignore:torch.quantize_per_tensor:UserWarning")
def test_quantized_advantages(tmp_path: Path) -> None:
    advantages = torch.quantize_per_tensor(torch.randn(4), 0.1, 10, torch.quint8)
    _pt(tmp_path / "q.pt", advantages=advantages)
    assert "quantized" in error_line(promise(["analyze", "q.pt", "-q"], tmp_path))


def test_list_of_2d_tensors(tmp_path: Path) -> None:
    rows = [torch.randn(2, 3) - 2 for _ in range(4)]
    torch.save(
        {"mask": [torch.ones(6, dtype=torch.bool)] * 4, "old_log_probs": rows, "log_probs": rows},
        tmp_path / "l.pt",
    )
    assert "2-D tensors" in error_line(promise(["analyze", "l.pt", "-q"], tmp_path))


def test_safetensors_read_whole_past_the_budget(tmp_path: Path) -> None:
    files.valid_safetensors(tmp_path / "b.safetensors", rows=64, width=64)
    budget = {"RATIOSCOPE_MAX_BYTES": "10K"}
    line = error_line(promise(["analyze", "b.safetensors", "-q"], tmp_path, env=budget))
    assert "memory budget" in line


def test_token_ids_outside_the_vocabulary(tmp_path: Path) -> None:
    ids = torch.zeros(4, 8, dtype=torch.long)
    ids[1, 2] = 50_000
    _pt(
        tmp_path / "t.pt",
        token_ids=ids,
        logits=torch.randn(4, 8, 16),
        ref_logits=torch.randn(4, 8, 16),
    )
    line = error_line(promise(["analyze", "t.pt", "-q"], tmp_path))
    assert "50000" in line and "vocabulary of 16" in line
