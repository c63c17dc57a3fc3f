"""FPA future policy (Eq. 4, 5, 7) and its sequence diagnostics against direct references."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from ratioscope.errors import ShapeMismatchError, UsageError
from ratioscope.functional.fpa import (
    count_below,
    future_log_normaliser,
    future_log_probs_approx,
    future_log_probs_exact,
    future_log_probs_sweep,
    future_to_current_ratio,
    mean_by_correctness,
    policy_log_probs_from_logits,
    sequence_log_ratio,
    sequence_weights,
)

B, T, V = 5, 7, 23  # B*T = 35 tokens


def _inputs(seed: int = 0):
    generator = torch.Generator().manual_seed(seed)
    logits = 3 * torch.randn(B, T, V, generator=generator)
    ref_logits = logits + torch.randn(B, T, V, generator=generator)
    token_ids = torch.randint(0, V, (B, T), generator=generator)
    mask = torch.rand(B, T, generator=generator) < 0.8
    return logits, ref_logits, token_ids, mask


def _unchunked(logits, ref_logits, token_ids, lam):
    combined = (1 + lam) * logits.double() - lam * ref_logits.double()
    return torch.log_softmax(combined, dim=-1).gather(-1, token_ids.unsqueeze(-1)).squeeze(-1)


@pytest.mark.parametrize("chunk_tokens", [1, 3, 7, 8, 35, 64, None])
@pytest.mark.parametrize("lam", [0.0, 1.0, 2.5])
def test_exact_matches_unchunked_log_softmax(chunk_tokens, lam: float) -> None:
    logits, ref_logits, token_ids, mask = _inputs()
    got = future_log_probs_exact(logits, ref_logits, token_ids, lam, mask, chunk_tokens)
    expected = _unchunked(logits, ref_logits, token_ids, lam)
    assert got.shape == (B, T) and got.dtype == torch.float32
    torch.testing.assert_close(got[mask], expected[mask].float(), rtol=1e-5, atol=1e-5)
    assert (got[~mask] == 0).all()


def test_sweep_reads_once_and_agrees_with_single_calls() -> None:
    logits, ref_logits, token_ids, mask = _inputs(1)
    lams = (0.0, 0.5, 1.0, 2.0, 5.0, 10.0)
    sweep = future_log_probs_sweep(logits, ref_logits, token_ids, lams, mask, chunk_tokens=4)
    assert sweep.shape == (len(lams), B, T)
    for index, lam in enumerate(lams):
        torch.testing.assert_close(
            sweep[index][mask], _unchunked(logits, ref_logits, token_ids, lam)[mask].float()
        )
    # lambda = 0 is the current policy
    torch.testing.assert_close(
        sweep[0], policy_log_probs_from_logits(logits, token_ids, mask, chunk_tokens=6)
    )


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_precision_logits_are_upcast(dtype) -> None:
    logits, ref_logits, token_ids, mask = _inputs(2)
    logits, ref_logits = logits.to(dtype), ref_logits.to(dtype)
    got = future_log_probs_exact(logits, ref_logits, token_ids, 1.0, mask, chunk_tokens=5)
    expected = _unchunked(logits.float(), ref_logits.float(), token_ids, 1.0)
    torch.testing.assert_close(got[mask], expected[mask].float(), rtol=1e-5, atol=1e-5)


def test_memory_mapped_numpy_logits(tmp_path) -> None:
    logits, ref_logits, token_ids, mask = _inputs(3)
    paths = (tmp_path / "logits.npy", tmp_path / "ref.npy")
    for path, array in zip(paths, (logits, ref_logits), strict=True):
        np.save(path, array.numpy().astype(np.float16))
    mapped = [np.load(path, mmap_mode="r") for path in paths]
    got = future_log_probs_exact(mapped[0], mapped[1], token_ids, 2.0, mask, chunk_tokens=6)
    expected = _unchunked(
        torch.from_numpy(np.asarray(mapped[0]).astype(np.float32)),
        torch.from_numpy(np.asarray(mapped[1]).astype(np.float32)),
        token_ids,
        2.0,
    )
    torch.testing.assert_close(got[mask], expected[mask].float(), rtol=1e-5, atol=1e-5)


def test_float32_input_is_not_modified() -> None:
    logits, ref_logits, token_ids, _ = _inputs(4)
    before = (logits.clone(), ref_logits.clone())
    future_log_probs_sweep(logits, ref_logits, token_ids, (0.0, 3.0), chunk_tokens=4)
    assert torch.equal(logits, before[0]) and torch.equal(ref_logits, before[1])


@pytest.mark.parametrize("lam", [0.5, 1.0, 2.0, 10.0])
def test_log_prob_identity_on_small_vocabulary(lam: float) -> None:
    """log pi_hat = (1+lam) log pi - lam log pi_ref - log Z, Z = sum pi^(1+lam) pi_ref^(-lam)."""
    rng = np.random.default_rng(5)
    pi = rng.dirichlet(np.ones(6), size=(3, 4))
    pi_ref = rng.dirichlet(np.ones(6), size=(3, 4))
    token_ids = torch.tensor(rng.integers(0, 6, (3, 4)))
    logits = torch.tensor(np.log(pi) + rng.normal(size=(3, 4, 1)))  # logits up to a shift
    ref_logits = torch.tensor(np.log(pi_ref) - 2.0)
    log_z_reference = np.log(np.sum(pi ** (1 + lam) * pi_ref ** (-lam), axis=-1))
    log_z = future_log_normaliser(logits, ref_logits, lam)
    np.testing.assert_allclose(log_z.numpy(), log_z_reference, rtol=1e-5, atol=1e-6)
    assert (log_z >= -1e-6).all()  # lam times a Renyi divergence
    picked = token_ids.numpy()[..., None]
    log_pi = np.take_along_axis(np.log(pi), picked, -1)[..., 0]
    log_ref = np.take_along_axis(np.log(pi_ref), picked, -1)[..., 0]
    exact = future_log_probs_exact(logits, ref_logits, token_ids, lam, chunk_tokens=5)
    np.testing.assert_allclose(
        exact.numpy(), (1 + lam) * log_pi - lam * log_ref - log_z_reference, rtol=1e-5, atol=1e-5
    )
    # the token-level approximation misses exactly log Z
    approx = future_log_probs_approx(torch.tensor(log_pi), torch.tensor(log_ref), lam)
    np.testing.assert_allclose((approx - exact.double()).numpy(), log_z_reference, atol=1e-5)


def test_masked_positions_and_bad_token_ids() -> None:
    logits, ref_logits, token_ids, mask = _inputs(6)
    token_ids = token_ids.clone()
    token_ids[~mask] = -100  # the usual ignore index on padding is fine
    got = future_log_probs_exact(logits, ref_logits, token_ids, 1.0, mask)
    assert torch.isfinite(got).all() and (got[~mask] == 0).all()
    with pytest.raises(UsageError, match="outside the vocabulary"):
        future_log_probs_exact(logits, ref_logits, token_ids, 1.0)
    with pytest.raises(ShapeMismatchError):
        future_log_probs_exact(logits, ref_logits[:, :3], token_ids, 1.0)
    with pytest.raises(UsageError):
        future_log_probs_exact(logits, ref_logits, token_ids, -1.0, mask)
    with pytest.raises(UsageError):
        future_log_probs_exact(logits, ref_logits, token_ids, 1.0, mask, chunk_tokens=0)


def test_minus_infinity_logits_stay_impossible() -> None:
    logits = torch.tensor([[[0.0, 1.0, -math.inf]]])
    ref_logits = torch.tensor([[[0.5, 0.0, -math.inf]]])
    got = future_log_probs_exact(logits, ref_logits, torch.tensor([[1]]), 1.0)
    expected = torch.log_softmax(torch.tensor([-0.5, 2.0]), 0)[1]
    assert float(got) == pytest.approx(float(expected), abs=1e-6)


def test_sequence_quantities_against_numpy() -> None:
    rng = np.random.default_rng(7)
    log_probs = np.log(rng.uniform(0.05, 1.0, (6, 9)))
    future = log_probs + rng.normal(0, 0.3, (6, 9))
    ref = log_probs + rng.normal(0, 0.3, (6, 9))
    lengths = np.array([9, 4, 1, 0, 7, 3])
    mask = np.arange(9)[None, :] < lengths[:, None]
    correct = np.array([True, False, True, False, False, True])
    lp, fut, rf, m = (torch.tensor(x) for x in (log_probs, future, ref, mask))

    weights = sequence_weights(lp, m)
    future_weights = sequence_weights(fut, m)
    for i in range(6):
        n = lengths[i]
        if n == 0:
            assert math.isnan(float(weights[i]))
            continue
        probability = np.prod(np.exp(log_probs[i, :n]))
        assert float(weights[i]) == pytest.approx(probability ** (1 / n), rel=1e-9)
        ratio = float(future_to_current_ratio(fut, lp, m)[i])
        assert ratio == pytest.approx(float(future_weights[i] / weights[i]), rel=1e-9)
        assert float(sequence_log_ratio(lp, rf, m)[i]) == pytest.approx(
            (log_probs[i, :n] - ref[i, :n]).sum()
        )
        assert float(sequence_log_ratio(lp, rf, m, normalise=True)[i]) == pytest.approx(
            (log_probs[i, :n] - ref[i, :n]).mean()
        )

    below = count_below(future_weights, 0.2, select=torch.tensor(~correct))
    finite = np.isfinite(future_weights.numpy())
    selected = finite & ~correct
    assert below.total == selected.sum()
    assert below.count == int((future_weights.numpy()[selected] < 0.2).sum())

    split = mean_by_correctness(weights, torch.tensor(correct))
    w = weights.numpy()
    assert split.correct_mean == pytest.approx(w[correct & finite].mean())
    assert split.incorrect_mean == pytest.approx(w[~correct & finite].mean())
    assert (split.correct_count, split.incorrect_count) == (3, 2)


@settings(max_examples=25, deadline=None)
@given(
    lam=st.floats(0.0, 20.0),
    seed=st.integers(0, 1000),
    chunk=st.integers(1, 40),
)
def test_future_probabilities_are_normalised(lam: float, seed: int, chunk: int) -> None:
    logits, ref_logits, _, _ = _inputs(seed)
    # summing pi_hat over every token id must give 1 at each position
    total = torch.zeros(B, T, dtype=torch.float64)
    for v in range(V):
        ids = torch.full((B, T), v)
        total += (
            future_log_probs_exact(logits, ref_logits, ids, lam, chunk_tokens=chunk).double().exp()
        )
    torch.testing.assert_close(total, torch.ones(B, T, dtype=torch.float64), rtol=1e-4, atol=1e-4)


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_from_cpu_logits_matches_cpu() -> None:
    logits, ref_logits, token_ids, mask = _inputs(8)
    cpu = future_log_probs_exact(logits, ref_logits, token_ids, 1.0, mask, chunk_tokens=6)
    gpu = future_log_probs_exact(
        logits, ref_logits, token_ids, 1.0, mask, chunk_tokens=6, device="cuda"
    )
    assert gpu.is_cuda
    torch.testing.assert_close(gpu.cpu(), cpu, rtol=1e-5, atol=1e-5)
    on_device = future_log_probs_exact(
        logits.cuda().half(), ref_logits.cuda().half(), token_ids.cuda(), 1.0, mask.cuda()
    )
    expected = _unchunked(logits.half().float(), ref_logits.half().float(), token_ids, 1.0)
    torch.testing.assert_close(on_device.cpu()[mask], expected[mask].float(), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_approximate_sequence_terms_compiled_equal_the_tensor_code(dtype, monkeypatch):
    """The two row sums from the compiled loop (CPU) and from the tensor code (the
    reference, and the path on a GPU): the same to rounding."""
    from ratioscope.functional import _kernels
    from ratioscope.functional.fpa import approximate_sequence_terms

    if not _kernels.available():
        pytest.skip("compiled kernels disabled")
    generator = torch.Generator().manual_seed(5)
    log_probs = (-torch.rand(33, 70, generator=generator) * 4).to(dtype)
    reference = log_probs + (0.3 * torch.randn(33, 70, generator=generator)).to(dtype)
    mask = torch.rand(33, 70, generator=generator) > 0.2
    mask[7] = False
    lams = (0.0, 1.0, 10.0)
    compiled = approximate_sequence_terms(log_probs, reference, mask, lams)
    monkeypatch.setattr(_kernels, "can_take", lambda *a, **k: False)
    tensors = approximate_sequence_terms(log_probs, reference, mask, lams)
    for name in ("weights", "ratios", "log_ratio", "log_ratio_per_token"):
        torch.testing.assert_close(
            getattr(compiled, name), getattr(tensors, name), rtol=1e-12, atol=1e-13,
            equal_nan=True,
        )  # fmt: skip
    assert math.isnan(float(compiled.weights[0, 7]))


def test_approximate_sequence_terms_equal_the_per_lambda_functions():
    """Every lambda from two row sums == the [B, T] approximation per lambda (float64
    inputs, where both keep float64), and a plain loop over tokens; empty rows NaN."""
    from ratioscope.functional.fpa import approximate_sequence_terms

    generator = torch.Generator().manual_seed(3)
    log_probs = -torch.rand(9, 13, generator=generator, dtype=torch.float64) * 3
    reference = log_probs + 0.2 * torch.randn(9, 13, generator=generator, dtype=torch.float64)
    mask = torch.rand(9, 13, generator=generator) > 0.3
    mask[4] = False
    lams = (0.0, 0.5, 1.0, 4.0)
    terms = approximate_sequence_terms(log_probs, reference, mask, lams)
    for index, lam in enumerate(lams):
        future = future_log_probs_approx(log_probs, reference, lam)
        torch.testing.assert_close(
            terms.weights[index], sequence_weights(future, mask), equal_nan=True
        )
        torch.testing.assert_close(
            terms.ratios[index], future_to_current_ratio(future, log_probs, mask), equal_nan=True
        )
    torch.testing.assert_close(terms.log_ratio, sequence_log_ratio(log_probs, reference, mask))
    # a plain loop, lambda 1 and the per-token log-ratio
    for row in range(9):
        picked = [t for t in range(13) if mask[row, t]]
        if not picked:
            assert math.isnan(float(terms.weights[2, row]))
            continue
        mean = sum(2 * float(log_probs[row, t]) - float(reference[row, t]) for t in picked)
        assert float(terms.weights[2, row]) == pytest.approx(math.exp(mean / len(picked)))
        d = sum(float(log_probs[row, t] - reference[row, t]) for t in picked) / len(picked)
        assert float(terms.log_ratio_per_token[row]) == pytest.approx(d)
