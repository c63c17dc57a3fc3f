"""The engine's sampling distribution: the truncation against Hugging Face's logits
warpers and hand-computed cases, the temperature line, the verdict and the CLI."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

import ratioscope
from ratioscope.cli import app
from ratioscope.functional.sampling import (
    SamplingSettings,
    kept_set,
    sampling_log_probs,
    slope_sums,
    temperature_fit,
)
from ratioscope.io.loaders import load_file

ROOT = Path(__file__).resolve().parents[1]
LOGITS_STEP = ROOT / "sample_data" / "verl" / "step_0032.pt"  # the bundled file with logits
runner = CliRunner()


def test_a_hand_computed_nucleus():
    # probabilities 0.5, 0.3, 0.15, 0.05: top-p 0.8 keeps the first two (mass before the
    # third is 0.8, not below 0.8), top-p 0.81 the first three; top-k 1 the first
    probs = torch.tensor([[0.5, 0.3, 0.15, 0.05]], dtype=torch.float64)
    log_probs = probs.log()
    assert kept_set(log_probs, SamplingSettings(top_p=0.8)).tolist() == [[True, True, False, False]]
    assert kept_set(log_probs, SamplingSettings(top_p=0.81)).tolist() == [[True, True, True, False]]
    assert kept_set(log_probs, SamplingSettings(top_k=1)).tolist() == [[True, False, False, False]]
    # top-k 3 then top-p 0.9 of the renormalised 0.5/0.95, 0.3/0.95, 0.15/0.95: the
    # mass before the third is 0.842 < 0.9, so all three stay
    assert kept_set(log_probs, SamplingSettings(top_p=0.9, top_k=3)).tolist() == [
        [True, True, True, False]
    ]
    # the sampled token's log-prob is renormalised over the kept mass (0.8)
    log_q, full, kept = sampling_log_probs(
        log_probs, torch.tensor([1]), SamplingSettings(top_p=0.8)
    )
    assert log_q.item() == pytest.approx(math.log(0.3 / 0.8))
    assert full.item() == pytest.approx(math.log(0.3))
    assert kept.item() == pytest.approx(0.8)
    outside, _, _ = sampling_log_probs(log_probs, torch.tensor([3]), SamplingSettings(top_p=0.8))
    assert outside.item() == -math.inf


def test_tied_tokens_at_the_nucleus_boundary_are_kept_by_their_index():
    # four equal tokens, 0.25 each, top-p 0.5: two are kept (the mass before the third
    # is 0.5), the two of lowest index, whatever the tie order of the sort on a device;
    # a tied pair behind a larger token, top-p 0.5: the larger and the lower index
    uniform = torch.full((1, 4), 0.25, dtype=torch.float64).log()
    assert kept_set(uniform, SamplingSettings(top_p=0.5)).tolist() == [[True, True, False, False]]
    ties = torch.tensor([[0.2, 0.2, 0.4, 0.2]], dtype=torch.float64).log()
    assert kept_set(ties, SamplingSettings(top_p=0.5)).tolist() == [[True, False, True, False]]
    wide = torch.zeros(3, 4096, dtype=torch.float64)  # long rows: a vectorised sort's case
    kept = kept_set(torch.log_softmax(wide, dim=-1), SamplingSettings(top_p=0.25))
    assert kept.sum(dim=-1).tolist() == [1024] * 3
    assert kept[:, :1024].all() and not kept[:, 1024:].any()


@pytest.mark.parametrize(
    "settings",
    [
        SamplingSettings(temperature=0.7),
        SamplingSettings(top_p=0.9),
        SamplingSettings(top_k=5),
        SamplingSettings(temperature=0.7, top_p=0.9, top_k=10),
        SamplingSettings(temperature=1.3, top_p=0.5),
    ],
)
def test_the_kept_set_is_that_of_hugging_face_warpers(settings):
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    logits = torch.randn(64, 40, dtype=torch.float64) * 3
    warped = logits.clone()
    if settings.temperature is not None:
        warped = transformers.TemperatureLogitsWarper(settings.temperature)(None, warped)
    if settings.top_k is not None:
        warped = transformers.TopKLogitsWarper(settings.top_k)(None, warped)
    if settings.top_p is not None:
        warped = transformers.TopPLogitsWarper(settings.top_p)(None, warped)
    expected = torch.isfinite(warped)
    tempered = torch.log_softmax(logits / (settings.temperature or 1.0), dim=-1)
    assert torch.equal(kept_set(tempered, settings), expected)
    # and the sampled token's log-prob is the warped distribution's own
    tokens = torch.randint(0, 40, (64,))
    log_q, _, _ = sampling_log_probs(logits, tokens, settings)
    reference = torch.log_softmax(warped, dim=-1).gather(1, tokens[:, None])[:, 0]
    assert torch.allclose(log_q, reference, atol=1e-12, equal_nan=True)
    assert torch.equal(torch.isinf(log_q), torch.isinf(reference))


def direct_truncation(path: Path, temperature: float, top_p: float) -> dict[str, float]:
    """Token by token with a sort in plain Python: the share outside the nucleus and the
    mean removed mass."""
    batch = load_file(path)
    logits, tokens = batch.logits[batch.mask].double(), batch.token_ids[batch.mask]
    outside, removed = 0, 0.0
    for row, token in zip(logits.tolist(), tokens.tolist(), strict=True):
        peak = max(row)
        weights = [math.exp((v - peak) / temperature) for v in row]
        total = sum(weights)
        probs = sorted(((w / total, i) for i, w in enumerate(weights)), reverse=True)
        kept, before = set(), 0.0
        for p, i in probs:
            if before < top_p or not kept:
                kept.add(i)
            before += p
        outside += token not in kept
        removed += sum(p for p, i in probs if i not in kept)
    return {
        "tokens": len(tokens),
        "outside": outside / len(tokens),
        "removed": removed / len(tokens),
    }


def test_the_top_p_share_equals_a_direct_computation(tmp_path):
    out = tmp_path / "r.json"
    result = runner.invoke(
        app,
        [
            "analyze",
            str(LOGITS_STEP),
            "--top-p",
            "0.9",
            "--temperature",
            "0.7",
            "--json",
            str(out),
            "-q",
        ],
    )
    assert result.exit_code == 0, result.output
    truncation = json.loads(out.read_text())["sampling"]["truncation"]
    direct = direct_truncation(LOGITS_STEP, 0.7, 0.9)
    assert truncation["tokens"] == direct["tokens"]
    assert truncation["outside"] == pytest.approx(direct["outside"], abs=1e-12)
    assert truncation["mass_removed"] == pytest.approx(direct["removed"], rel=1e-9)
    assert truncation["outside"] > 0  # the bundled engine sampled the full softmax at T = 1
    assert truncation["top_p"] == 0.9 and truncation["temperature"] == 0.7


def tempered_engine(tmp_path: Path, temperature: float) -> Path:
    """The bundled step with logits, its engine log-probs replaced by those of an engine
    sampling at ``temperature`` (the trainer's at 1)."""
    data = torch.load(LOGITS_STEP)
    logits, tokens = data["logits"].double(), data["responses"]
    tempered = torch.log_softmax(logits / temperature, dim=-1).gather(-1, tokens[..., None])
    data["rollout_log_probs"] = tempered[..., 0].float()
    path = tmp_path / f"engine_t{temperature}.pt"
    torch.save(data, path)
    return path


def test_the_temperature_finding_fires_at_0_7_and_stays_quiet_on_the_bundled_run(tmp_path):
    bundled = ratioscope.analyze(ROOT / "sample_data" / "verl")
    quiet = {f.name: f for f in bundled.verdict().findings}["temperature mismatch"]
    assert quiet.level == "green"
    assert abs(bundled.sampling.temperature.slope) < 0.05

    report = ratioscope.analyze(tempered_engine(tmp_path, 0.7))
    check = report.sampling.temperature
    assert check.implied_temperature == pytest.approx(0.7, abs=0.02)
    finding = {f.name: f for f in report.verdict().findings}["temperature mismatch"]
    assert finding.level == "red" and "0.7" in finding.text
    # a milder 0.95 is yellow
    mild = ratioscope.analyze(tempered_engine(tmp_path, 0.95)).verdict()
    assert {f.name: f.level for f in mild.findings}["temperature mismatch"] == "yellow"


def test_the_line_against_a_plain_least_squares_fit():
    torch.manual_seed(1)
    x = -torch.rand(5, 7, dtype=torch.float64) * 4
    z = 0.3 * x + 0.1 * torch.randn(5, 7, dtype=torch.float64)
    mask = torch.rand(5, 7) < 0.8
    xs, zs = x[mask].tolist(), z[mask].tolist()
    n = len(xs)
    mx, mz = sum(xs) / n, sum(zs) / n
    sxx = sum((a - mx) ** 2 for a in xs)
    sxz = sum((a - mx) * (b - mz) for a, b in zip(xs, zs, strict=True))
    szz = sum((b - mz) ** 2 for b in zs)
    fit = temperature_fit(slope_sums(z, x, mask))
    assert fit.tokens == n
    assert fit.slope == pytest.approx(sxz / sxx, rel=1e-10)
    assert fit.correlation == pytest.approx(sxz / math.sqrt(sxx * szz), rel=1e-10)
    assert fit.implied_temperature == pytest.approx(1 / (1 - sxz / sxx), rel=1e-10)


def test_the_engine_matches_the_tempered_log_probs_not_the_full_softmax(tmp_path):
    report = ratioscope.analyze(tempered_engine(tmp_path, 0.7), temperature=0.7)
    cut = report.sampling.truncation
    assert cut.outside == 0.0 and cut.mass_removed == 0.0
    assert cut.engine_vs_sampling < 1e-6 < cut.engine_vs_full


@pytest.mark.parametrize(
    ("option", "value"),
    [("--top-p", "1.5"), ("--top-p", "0"), ("--temperature", "0"), ("--top-k", "0")],
)
def test_bad_settings_are_one_sentence(option, value):
    result = runner.invoke(app, ["analyze", str(LOGITS_STEP), option, value])
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output


def test_settings_without_logits_leave_the_truncation_out():
    report = ratioscope.analyze(ROOT / "sample_data" / "verl" / "step_0008.pt", top_p=0.9)
    assert report.sampling is not None and report.sampling.truncation is None
    (warning,) = [w for w in report.warnings if w.startswith("sampling")]
    assert "need 'logits' and 'token_ids', missing in" in warning and "step_0008.pt" in warning
    # without stated settings a file without logits is no news
    quiet = ratioscope.analyze(ROOT / "sample_data" / "verl" / "step_0008.pt")
    assert not [w for w in quiet.warnings if w.startswith("sampling")]


def test_logits_read_a_block_of_rows_at_a_time_give_the_same_numbers(monkeypatch):
    import ratioscope.functional.sampling as functional
    import ratioscope.sections.sampling as section

    whole = ratioscope.analyze(LOGITS_STEP, temperature=0.7, top_p=0.9).sampling.truncation
    # blocks of one row, and of a few tokens inside sampling_log_probs
    monkeypatch.setattr(section, "CHUNK_ELEMENTS", 1)
    monkeypatch.setattr(functional, "CHUNK_ELEMENTS", 100)
    blocks = ratioscope.analyze(LOGITS_STEP, temperature=0.7, top_p=0.9).sampling.truncation
    assert blocks.tokens == whole.tokens and blocks.outside == whole.outside
    for name in ("mass_removed", "log_shift", "abs_log_shift", "engine_vs_full"):
        assert getattr(blocks, name) == pytest.approx(getattr(whole, name), rel=1e-12)
