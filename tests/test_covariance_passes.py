"""CW-GRPO's covariance section in passes over a file's chunks (bounded memory).

A file streamed with a chunk of two rows, whose groups are interleaved so that every
group spans several chunks, with a group of one token, a group whose advantages are all
equal (sigma = 0, flat weights) and a masked token inside a sequence, is checked against
a plain numpy computation over the whole file; the chunked kernel is checked against the
kernel of the whole batch bit for bit, and a streamed file never hands the section the
whole file.
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
import torch

import ratioscope
from ratioscope.defaults import CHUNK_ROW_FLOOR
from ratioscope.functional.covariance import (
    CLIP_COV_RATIO,
    KERNEL_PASSES,
    KL_COV_RATIO,
    KernelPasses,
    covariance_weights,
)
from ratioscope.sections.covariance import CovarianceAccumulator

ROWS, WIDTH = 21, 6
CLIP = (0.2, 0.28)


def _arrays(seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    lengths = rng.integers(2, WIDTH + 1, size=ROWS)
    lengths[4] = 1  # group 7 below: one row of one token, a scope of one token
    mask = np.arange(WIDTH)[None, :] < lengths[:, None]
    mask[2, 1] = False  # a masked token inside a sequence
    group = np.array([i % 4 for i in range(ROWS)])  # interleaved: every group spans chunks
    group[4] = 7
    adv = rng.normal(size=ROWS)
    adv[group == 3] = 0.3  # equal advantages: c is (nearly) 0, sigma counts as 0
    old = -rng.gamma(1.0, 0.8, size=(ROWS, WIDTH))
    new = old + rng.normal(0, 0.3, size=(ROWS, WIDTH))
    # a few covariances in Clip-Cov's band (1, 5)
    new[0, :3] -= 4.0
    return {
        "mask": mask,
        "old_log_probs": old,
        "log_probs": new,
        "advantages": np.repeat(adv[:, None], WIDTH, axis=1) * mask,
        "group": group,
    }


def _write(arrays: dict[str, np.ndarray], path) -> None:
    from safetensors.torch import save_file

    save_file({k: torch.from_numpy(np.ascontiguousarray(v)) for k, v in arrays.items()}, str(path))


def _reference(arrays: dict[str, np.ndarray]) -> dict[str, float]:
    """The section's exact quantities by plain numpy over the whole file."""
    mask = arrays["mask"]
    rows = np.nonzero(mask)[0]
    lp, a = arrays["log_probs"][mask], arrays["advantages"][mask]
    scope = arrays["group"][rows]
    c = np.zeros_like(lp)
    w = np.ones_like(lp)
    w_norm = np.ones_like(lp)
    for g in np.unique(scope):
        at = scope == g
        cg = (lp[at] - lp[at].mean()) * (a[at] - a[at].mean())
        c[at] = cg
        sigma = cg.std()
        if sigma > 1e-12 * math.sqrt(np.mean(cg**2)):
            w[at] = np.exp(-(cg**2) / (2 * sigma**2))
        w_norm[at] = w[at] * at.sum() / w[at].sum()
    n = lp.size
    batch_c = (lp - lp.mean()) * (a - a.mean())
    z = (arrays["log_probs"] - arrays["old_log_probs"])[mask]
    r = np.exp(z)
    clipped = ((a > 0) & (r > 1 + CLIP[1])) | ((a < 0) & (r < 1 - CLIP[0]))
    eligible = int(((batch_c > 1) & (batch_c < 5) & ~clipped).sum())
    magnitude = np.abs(a)
    return {
        "tokens": n,
        "scopes": len(np.unique(arrays["group"])),
        "c_mean": c.mean(),
        "c_min": c.min(),
        "c_max": c.max(),
        "w_mean": w.mean(),
        "w_norm_mean": w_norm.mean(),
        "below_0.5": float((w < 0.5).mean()),
        "removed": 1 - (w * magnitude).sum() / magnitude.sum(),
        "removed_normalised": 1 - (w_norm * magnitude).sum() / magnitude.sum(),
        "eligible": eligible,
        "clip_count": min(eligible, max(1, math.floor(CLIP_COV_RATIO * n))),
        "kl_count": min(n, max(1, math.floor(KL_COV_RATIO * n))),
        "flat_scope_w": float(w[scope == 7][0]),
    }


def test_streamed_in_two_row_chunks_matches_numpy_on_the_whole_file(tmp_path):
    arrays = _arrays()
    path = tmp_path / "dump.safetensors"
    _write(arrays, path)
    expected = _reference(arrays)
    assert expected["eligible"] > 0 and expected["flat_scope_w"] == 1.0
    report = ratioscope.analyze(
        path, sections=["covariance"], stream_bytes=0, chunk_elements=2 * WIDTH, clip=CLIP
    )
    cov = report.covariance
    assert cov.tokens == expected["tokens"] and cov.scopes == expected["scopes"]
    assert cov.scope == "group"
    assert cov.c.mean == pytest.approx(expected["c_mean"], rel=1e-9, abs=1e-15)
    # c is reported in the file's dtype (float64 here)
    assert cov.c.min == pytest.approx(expected["c_min"], rel=1e-12)
    assert cov.c.max == pytest.approx(expected["c_max"], rel=1e-12)
    assert cov.weights.distribution.mean == pytest.approx(expected["w_mean"], rel=1e-9)
    assert cov.normalised_weights.mean == pytest.approx(expected["w_norm_mean"], rel=1e-9)
    assert cov.weights.fraction_below["0.5"] == pytest.approx(expected["below_0.5"])
    assert cov.advantage_mass.removed == pytest.approx(expected["removed"], rel=1e-9)
    assert cov.advantage_mass.removed_normalised == pytest.approx(
        expected["removed_normalised"], rel=1e-9, abs=1e-15
    )
    assert (cov.clip_cov.eligible, cov.clip_cov.count) == (
        expected["eligible"],
        expected["clip_count"],
    )
    assert (cov.kl_cov.count, cov.kl_cov.total) == (expected["kl_count"], expected["tokens"])


@pytest.mark.parametrize("chunk_elements", [WIDTH, 2 * WIDTH, 5 * WIDTH, 1 << 30])
def test_any_chunking_gives_the_report_of_the_file_read_whole(tmp_path, chunk_elements):
    """Bit for bit: the sums are added token by token in file order however it is cut."""
    path = tmp_path / "dump.safetensors"
    _write(_arrays(1), path)
    whole = ratioscope.analyze(path, sections=["covariance"], stream_bytes=1 << 60)
    streamed = ratioscope.analyze(
        path, sections=["covariance"], stream_bytes=0, chunk_elements=chunk_elements
    )
    whole_state = whole.to_dict()["state"]["covariance"]
    streamed_state = streamed.to_dict()["state"]["covariance"]
    # the histograms' per-bin sums and moments add chunk results: equal to rounding
    for key in ("c", "log_weights", "log_normalised", "mass"):
        whole_state.pop(key), streamed_state.pop(key)
    assert streamed_state == whole_state
    assert streamed.covariance.c.quantiles == whole.covariance.c.quantiles
    assert streamed.covariance.c.min == whole.covariance.c.min
    assert streamed.covariance.weights.distribution.quantiles == (
        whole.covariance.weights.distribution.quantiles
    )


@pytest.mark.parametrize("keep", [False, True])
@pytest.mark.parametrize("scoped", [True, False])
def test_kernel_passes_over_chunks_equal_the_whole_batch_bit_for_bit(scoped, keep):
    arrays = _arrays(2)
    logp = torch.from_numpy(arrays["log_probs"]).float()
    adv = torch.from_numpy(arrays["advantages"]).float()
    mask = torch.from_numpy(arrays["mask"])
    group = torch.from_numpy(arrays["group"]) * 1000 - 5 if scoped else None  # any integers
    expected = covariance_weights(logp, adv, mask, group)
    starts = [0, 1, 4, 5, 11, ROWS]  # uneven chunks, one of a single row
    parts = list(itertools.pairwise(starts))

    def chunk(start, stop):
        return (
            logp[start:stop],
            adv[start:stop],
            mask[start:stop],
            None if group is None else group[start:stop],
        )

    passes = KernelPasses(keep=keep)
    for index in range(KERNEL_PASSES - 1):
        for start, stop in parts:
            passes.add(index, *chunk(start, stop))
    got = [passes.weights(*chunk(start, stop)) for start, stop in parts]
    for position in range(3):
        assert torch.equal(torch.cat([g[position] for g in got]), expected[position])


def test_kernel_passes_refuse_a_skipped_pass_and_an_unseen_group():
    logp = torch.zeros(2, 3)
    mask = torch.ones(2, 3, dtype=torch.bool)
    passes = KernelPasses()
    passes.add(0, logp, logp, mask, torch.tensor([1, 2]))
    with pytest.raises(ValueError, match="pass 2 after pass 0"):
        passes.add(2, logp, logp, mask, torch.tensor([1, 2]))
    with pytest.raises(ValueError, match="group id"):
        passes.add(1, logp, logp, mask, torch.tensor([1, 3]))


def test_a_streamed_file_is_never_given_whole_to_the_section(tmp_path, monkeypatch):
    path = tmp_path / "dump.safetensors"
    _write(_arrays(3), path)
    rows_seen: list[int] = []
    original = CovarianceAccumulator.update_pass

    def spy(self, index, ctx):
        rows_seen.append(ctx.batch.num_sequences)
        return original(self, index, ctx)

    def whole(self, ctx):
        raise AssertionError("the whole file was handed to the section")

    monkeypatch.setattr(CovarianceAccumulator, "update_pass", spy)
    monkeypatch.setattr(CovarianceAccumulator, "update", whole)
    # three rows a chunk: a chunk holds chunk_elements // max(width, floor) rows
    chunk_elements = 3 * max(WIDTH, CHUNK_ROW_FLOOR)
    report = ratioscope.analyze(path, stream_bytes=0, chunk_elements=chunk_elements)
    assert report.covariance is not None
    assert max(rows_seen) == 3 and len(rows_seen) == KERNEL_PASSES * math.ceil(ROWS / 3)
