"""Paging of memory-mapped data (ratioscope.functional._paging): pages read are handed back.

Resident memory is measured as the code itself sees it, per mapping from
``/proc/self/smaps`` (:func:`find_mapping`), so those tests are Linux-only.
"""

from __future__ import annotations

import sys

import numpy as np
import pytest
import torch

import ratioscope
from ratioscope.functional._paging import (
    MADV_DONTNEED,
    MADV_PAGEOUT,
    PAGE,
    MappedPages,
    byte_range,
    file_mapping,
    find_mapping,
)
from ratioscope.functional.fpa import future_log_probs_exact
from ratioscope.sections.future_policy import exact_log_probs

linux_only = pytest.mark.skipif(
    not sys.platform.startswith("linux"), reason="measured with /proc/self/smaps (Linux)"
)
PAGE_KB = PAGE // 1024
#: the most one read fault maps: a folio of the page cache, at most PMD-sized (2 MiB with
#: 4 KiB pages); its pages ahead of the read stay resident until they are read and released
FOLIO_KB = PAGE_KB * (PAGE // 8)


def resident_kb(array: np.ndarray | torch.Tensor) -> int:
    """kB resident of the mapping that holds ``array``."""
    found = find_mapping(*byte_range(array))
    assert found is not None
    return found.rss_kb


def _values(rows: int, width: int) -> np.ndarray:
    return np.random.default_rng(0).standard_normal((rows, width), dtype=np.float32)


def _memmap(tmp_path, rows: int, width: int, offset: int = 0, mode: str = "r") -> np.memmap:
    """:func:`_values` in a fresh file, ``offset`` bytes in, mapped (nothing read yet)."""
    path = tmp_path / f"data_{rows}x{width}_{offset}.bin"
    path.write_bytes(b"\0" * offset + _values(rows, width).tobytes())
    return np.memmap(path, dtype=np.float32, mode=mode, offset=offset, shape=(rows, width))


# ----------------------------------------------------------------- anywhere
def test_anonymous_memory_is_left_alone():
    for array in (np.ones((64, 1024), dtype=np.float32), torch.ones(64, 1024)):
        pages = MappedPages(array)
        assert not pages.active
        pages.release(array[:32])  # a no-op
        assert float(array.sum()) == 64 * 1024
        assert file_mapping(array) is None


def test_only_a_read_only_memmap_is_taken_as_never_written(tmp_path):
    for mode in ("r+", "c"):  # writable: shared, or private copy-on-write
        assert not MappedPages(_memmap(tmp_path, 8, 1024, mode=mode)).active
    array = _memmap(tmp_path, 8, 1024)
    pages = MappedPages(array[None])  # views of it count too
    if MADV_DONTNEED is None:
        assert not pages.active  # no madvise on this system
    else:
        assert pages.active and pages.advice == MADV_DONTNEED
    assert not MappedPages(array[:, :512]).active  # not contiguous: rows cannot be paged


# ------------------------------------------------------------------ measured
@linux_only
def test_the_mapping_of_an_array_is_found_with_its_resident_memory(tmp_path):
    array = _memmap(tmp_path, 64, 1024)  # 256 KiB
    found = file_mapping(array)
    assert found is not None and found.path == str(tmp_path / "data_64x1024_0.bin")
    assert found.low <= byte_range(array)[0] and byte_range(array)[1] <= found.high
    assert found.anonymous_kb == 0
    before = found.rss_kb
    float(array.sum())  # touch every page
    assert resident_kb(array) >= 256 > before
    anonymous = find_mapping(*byte_range(np.ones(1 << 16)))
    assert anonymous is not None and anonymous.path is None
    assert find_mapping(0, PAGE) is None  # nothing is mapped at address 0


@linux_only
@pytest.mark.parametrize("offset", [0, 100])  # 100: rows straddle page boundaries
def test_pages_read_front_to_back_are_released(tmp_path, offset):
    rows, width = 4096, 1024  # 16 MiB
    size_kb = rows * width * 4 // 1024
    expected = _values(rows, width).astype(np.float64).sum(axis=1)
    array = _memmap(tmp_path, rows, width, offset)
    pages = MappedPages(array)
    assert pages.active and pages.advice == MADV_DONTNEED
    highest, sums = 0, []
    for start in range(0, rows, 37):
        view = array[start : start + 37]
        sums.append(np.array(view, dtype=np.float64).sum(axis=1))
        pages.release(view)
        highest = max(highest, resident_kb(array))
    np.testing.assert_array_equal(np.concatenate(sums), expected)
    # resident: at most what the kernel mapped ahead of the last read, not the file
    assert highest <= FOLIO_KB + PAGE_KB < size_kb
    # at the end at most the page that holds the last byte (pages are released whole)
    assert resident_kb(array) <= PAGE_KB
    # read again without a release every page stays; released ones read back unchanged
    again = np.array(array, dtype=np.float64).sum(axis=1)
    assert resident_kb(array) >= size_kb
    np.testing.assert_array_equal(again, expected)


@linux_only
def test_file_mapped_tensors_are_recognised_and_released_safely(tmp_path):
    from safetensors.torch import safe_open, save_file

    generator = torch.Generator().manual_seed(0)
    tensors = {name: torch.randn(64, 1024, generator=generator) for name in ("a", "b")}
    save_file(tensors, str(tmp_path / "t.safetensors"))
    with safe_open(str(tmp_path / "t.safetensors"), framework="pt", device="cpu") as handle:
        a, b = handle.get_tensor("a"), handle.get_tensor("b")
    assert torch.equal(a, tensors["a"])
    found = file_mapping(a)
    assert found is not None and found.anonymous_kb == 0  # file-mapped, never written
    assert not MappedPages(a.clone()).active  # a copy in anonymous memory: left alone
    assert not MappedPages(a, b.clone()).active  # both or neither
    before = resident_kb(a)
    pages = MappedPages(a, b)
    assert pages.active and pages.advice == MADV_DONTNEED
    pages.release(a, b)
    assert resident_kb(a) < before
    assert torch.equal(a, tensors["a"]) and torch.equal(b, tensors["b"])  # read back
    # a privately written page would be lost by MADV_DONTNEED: page-out instead, data kept
    a[0, 0] = 123.0
    found = file_mapping(a)
    assert found is not None and found.anonymous_kb is not None and found.anonymous_kb > 0
    pages = MappedPages(a, b)
    assert pages.active and pages.advice == MADV_PAGEOUT
    pages.release(a[:1], b[:1])
    assert float(a[0, 0]) == 123.0
    assert torch.equal(a[1:], tensors["a"][1:])


# ------------------------------------------------------- the two readers of logits
def _logits(rows: int, width: int, vocab: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    logits = (rng.standard_normal((rows, width, vocab), dtype=np.float32) * 3).astype(np.float16)
    reference = (logits + rng.standard_normal(logits.shape, dtype=np.float32)).astype(np.float16)
    return logits, reference


@linux_only
def test_fpa_releases_the_pages_of_memory_mapped_logits(tmp_path):
    logits, reference = _logits(1, 2048, 2048, seed=1)  # 8 MiB each
    np.save(tmp_path / "h.npy", logits)
    np.save(tmp_path / "h_ref.npy", reference)
    mapped = np.load(tmp_path / "h.npy", mmap_mode="r")
    ref_mapped = np.load(tmp_path / "h_ref.npy", mmap_mode="r")
    ids = torch.randint(0, 2048, (1, 2048), generator=torch.Generator().manual_seed(2))
    result = future_log_probs_exact(mapped, ref_mapped, ids, 1.0, chunk_tokens=100)
    for array in (mapped, ref_mapped):
        assert resident_kb(array) <= PAGE_KB  # of 8192 kB read: the last, partial page
    in_memory = future_log_probs_exact(
        torch.from_numpy(logits), torch.from_numpy(reference), ids, 1.0, chunk_tokens=100
    )
    assert torch.equal(result, in_memory)


@linux_only
def test_analyze_releases_the_pages_of_a_memory_mapped_dump(tmp_path, monkeypatch):
    from safetensors.torch import save_file

    rows, width, vocab = 16, 256, 2048  # logits 16 MiB each in float16
    logits, reference = _logits(rows, width, vocab, seed=3)
    rng = np.random.default_rng(4)
    mask = np.arange(width)[None, :] < rng.integers(3 * width // 4, width + 1, size=(rows, 1))
    old = -rng.gamma(1.0, 0.8, size=(rows, width)).astype(np.float32)
    arrays = {
        "mask": mask,
        "old_log_probs": old,
        "log_probs": old + 0.01,
        "token_ids": rng.integers(0, vocab, size=(rows, width)),
        "logits": logits,
        "ref_logits": reference,
    }
    save_file({k: torch.from_numpy(v) for k, v in arrays.items()}, str(tmp_path / "d.safetensors"))
    torch.save({k: torch.from_numpy(v) for k, v in arrays.items()}, tmp_path / "d.pt")
    # the section reads each row up to its last valid token (no holes in this mask)
    read_kb = 2 * int(mask.sum()) * vocab * 2 // 1024  # logits and ref_logits, float16

    def run(path):
        batch = ratioscope.load(path)
        return batch, exact_log_probs(batch, (0.0, 1.0), torch.device("cpu"))

    mapped, (future, ref) = run(tmp_path / "d.safetensors")
    # the mapping holds the whole file: what stays is the small tensors read at load and
    # at most a folio mapped ahead of each array's last read (the padding of its last row)
    assert resident_kb(mapped.logits) <= 2 * FOLIO_KB + 64 * PAGE_KB < read_kb / 4
    _, (future_in_memory, ref_in_memory) = run(tmp_path / "d.pt")
    assert torch.equal(future, future_in_memory) and torch.equal(ref, ref_in_memory)
    # the same read without the release keeps every page of the logits it read
    monkeypatch.setattr(MappedPages, "release", lambda self, *views: None)
    kept, _ = run(tmp_path / "d.safetensors")
    assert resident_kb(kept.logits) >= read_kb
