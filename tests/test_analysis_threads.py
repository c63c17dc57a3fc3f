"""The threads of a file's analysis: torch on one while the compiled loops' parts run on
torch's count (``_kernels.own_threads``), one thread for a small file, torch's own for
logits and devices other than the CPU; and the same report whichever applies."""

from __future__ import annotations

import contextlib
import json

import pytest
import torch

from ratioscope.analysis.threads import analysis_threads
from ratioscope.defaults import SERIAL_ELEMENTS
from ratioscope.functional import _kernels

pytestmark = pytest.mark.skipif(not _kernels.available(), reason="compiled kernels disabled")

CPU = torch.device("cpu")


def _inside(context) -> tuple[int, int]:
    """(torch's threads, the compiled loops' threads) inside ``context``."""
    with context:
        return torch.get_num_threads(), _kernels.threads()


def test_own_threads_gives_torch_one_and_the_loops_torchs_count(two_threads):
    assert _inside(_kernels.own_threads()) == (1, 2)
    assert (torch.get_num_threads(), _kernels.threads()) == (2, 2)  # restored


def test_own_threads_restores_after_an_error(two_threads):
    with pytest.raises(RuntimeError), _kernels.own_threads():
        raise RuntimeError("in the block")
    assert (torch.get_num_threads(), _kernels.threads()) == (2, 2)


def test_own_threads_changes_nothing_without_numba(two_threads, monkeypatch):
    monkeypatch.setenv(_kernels.DISABLE_ENV, "1")
    _kernels.available.cache_clear()
    try:
        assert _inside(_kernels.own_threads()) == (2, 2)
    finally:
        monkeypatch.delenv(_kernels.DISABLE_ENV)
        _kernels.available.cache_clear()


def test_the_loops_parts_run_on_two_threads_while_torch_has_one(two_threads):
    import threading
    import time

    seen: set[int] = set()

    def part(index: int) -> int:
        time.sleep(0.002)
        seen.add(threading.get_ident())
        return index

    with _kernels.own_threads():
        assert _kernels.map_parts(part, 8) == list(range(8))
    assert len(seen) == 2


@pytest.mark.parametrize(
    ("elements", "vocab", "device", "expected"),
    [
        (SERIAL_ELEMENTS, False, CPU, (1, 1)),  # small: one thread for everything
        (SERIAL_ELEMENTS + 1, False, CPU, (1, 2)),  # the loops on two, torch on one
        (SERIAL_ELEMENTS + 1, True, CPU, (2, 2)),  # logits: torch keeps its threads
        (SERIAL_ELEMENTS + 1, False, torch.device("meta"), (2, 2)),  # not the CPU
    ],
)
def test_analysis_threads(elements, vocab, device, expected, two_threads):
    assert _inside(analysis_threads(elements, vocab, device)) == expected
    assert (torch.get_num_threads(), _kernels.threads()) == (2, 2)


def test_a_batch_gives_the_same_report_with_torch_on_one_thread_or_two(two_threads, monkeypatch):
    """A batch above the small-file bound, analysed as it now is (torch on one thread,
    the loops on two) and with torch's threads left as they are: the same bits."""
    import ratioscope
    from ratioscope.analysis import pipeline

    generator = torch.Generator().manual_seed(4)
    rows, width = 256, 160
    lengths = torch.randint(8, width + 1, (rows,), generator=generator)
    mask = torch.arange(width).unsqueeze(0) < lengths.unsqueeze(1)
    old = -torch.rand(rows, width, generator=generator) * 3
    tensors = {
        "mask": mask,
        "old_log_probs": old,
        "log_probs": old + 0.05 * torch.randn(rows, width, generator=generator),
        "ref_log_probs": old + 0.2 * torch.randn(rows, width, generator=generator),
        "advantages": torch.randn(rows, 1, generator=generator).expand(rows, width),
        "entropy": torch.rand(rows, width, generator=generator) * 2,
        "rewards": (torch.rand(rows, generator=generator) > 0.5).double(),
        "group": torch.arange(rows) // 8,
    }
    batch = ratioscope.TokenBatch.from_tensors(tensors)
    assert batch.mask.numel() > SERIAL_ELEMENTS
    used: list[tuple[int, int]] = []
    split = pipeline.analysis_threads

    def recorded(*args):
        context = split(*args)
        used.append((args[0], args[1]))
        return context

    def document() -> str:
        report = ratioscope.analyze(batch).to_dict()
        report.pop("tool", None)
        return json.dumps(report, sort_keys=True, default=str)

    monkeypatch.setattr(pipeline, "analysis_threads", recorded)
    with_split = document()
    assert used  # the batch went through it
    monkeypatch.setattr(pipeline, "analysis_threads", lambda *args: contextlib.nullcontext())
    assert document() == with_split
