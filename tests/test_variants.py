"""The bundled variants of the sample run (sample_data/make_variants.py): an async run
with weight versions and a top-p step with logits, and what ratioscope reads in them."""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import sys
from pathlib import Path

import pytest
import torch

import ratioscope
from ratioscope.functional.sampling import SamplingSettings, sampling_log_probs

ROOT = Path(__file__).resolve().parents[1]
VARIANTS = ROOT / "sample_data" / "variants"


def _module(name: str):
    path = ROOT / "sample_data" / f"{name}.py"
    sys.path.insert(0, str(path.parent))
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def gen():
    return _module("make_sample_data")


@pytest.fixture(scope="module")
def variants(gen):
    return _module("make_variants")


def test_the_async_run_trains_on_halves_one_and_two_versions_old():
    files = sorted((VARIANTS / "async").glob("*.pt"))
    assert len(files) == 2
    for path in files:
        data = torch.load(path)
        step, versions = data["trainer_version"], data["min_global_steps"]
        assert step == data["step"]
        half = len(versions) // 2
        # the first half was sampled two steps before, the second one step before
        assert set(versions[:half].tolist()) == {step - 2}
        assert set(versions[half:].tolist()) == {step - 1}


def test_the_async_run_reads_as_lags_with_a_drift_split_that_adds_up():
    report = ratioscope.analyze(VARIANTS / "async", max_lag=1)
    section = report.policy_lag
    assert section.trainer_version == "file" and sorted(section.lags) == [1, 2]
    for stats in section.lags.values():
        k1 = stats.split.k1
        assert abs(k1["current/old"] + k1["old/engine"] - k1["current/engine"]) < 1e-9
    # older weights drift further from the trained ones
    assert section.lags[2].split.k3["old/engine"] > section.lags[1].split.k3["old/engine"]
    levels = {f.name: f.level for f in report.verdict().findings}
    assert levels["policy lag"] == "red"  # half the tokens are two versions old
    assert levels["mismatch grows with lag"] == "yellow"
    assert {
        f.name: f.level
        for f in ratioscope.analyze(VARIANTS / "async", max_lag=2).verdict().findings
    }["policy lag"] == "green"


def test_the_top_p_step_engine_reported_the_tempered_truncated_distribution():
    manifest = json.loads((VARIANTS / "manifest.json").read_text())
    t, p = manifest["top_p"]["temperature"], manifest["top_p"]["top_p"]
    assert (t, p) == (0.7, 0.9)
    report = ratioscope.analyze(VARIANTS / "top_p", temperature=t, top_p=p)
    cut = report.sampling.truncation
    assert cut.outside == 0.0  # every sampled token is inside the stated nucleus
    # the engine reported the stated distribution (up to its KV-cache arithmetic), not
    # the full softmax the trainer's log-probs are
    assert cut.engine_vs_sampling < 1e-4 < 1e-3 < cut.engine_vs_full
    levels = {f.name: f.level for f in report.verdict().findings}
    assert levels["outside the nucleus"] == "green"
    assert levels["sampling bias"] == "yellow"
    # from log-probs alone the truncation hides the temperature: the nucleus drops the
    # unlikely tokens that carry the line's slope (docs/sampling.md)
    assert abs(report.sampling.temperature.correlation) < 0.5
    assert levels["temperature mismatch"] == "green"


def test_the_generators_nucleus_is_ratioscopes(gen):
    torch.manual_seed(3)
    logits = torch.randn(200, 25) * 3
    tokens = torch.randint(0, 25, (200,))
    theirs = gen.nucleus_log_probs(logits.double(), 0.7, 0.9).gather(1, tokens[:, None])[:, 0]
    ours, _, _ = sampling_log_probs(logits.double(), tokens, SamplingSettings(0.7, 0.9, None))
    assert torch.equal(torch.isinf(theirs), torch.isinf(ours))
    finite = torch.isfinite(ours)
    assert torch.allclose(theirs[finite], ours[finite], atol=1e-12)


def test_the_variants_stay_within_their_budget():
    total = sum(p.stat().st_size for p in VARIANTS.rglob("*") if p.is_file())
    assert total < 3_500_000


@pytest.mark.slow
def test_the_variants_generator_is_deterministic_on_a_tiny_run(gen, variants, tmp_path):
    model = gen.ModelConfig(d_model=16, n_heads=2, n_layers=1, d_ff=32)
    config = dataclasses.replace(
        gen.RunConfig(), model=model, held_out=2, sft_steps=3, sft_batch=4,
        prompts_per_step=4, max_new_tokens=24,
    )  # fmt: skip
    first = variants.generate(tmp_path / "a", config, log=lambda _: None)
    second = variants.generate(tmp_path / "b", config, log=lambda _: None)
    first.pop("seconds"), second.pop("seconds")
    assert first == second
    for path in sorted((tmp_path / "a").rglob("*.pt")):
        one, two = torch.load(path), torch.load(tmp_path / "b" / path.relative_to(tmp_path / "a"))
        assert one.keys() == two.keys()
        for key, value in one.items():
            if isinstance(value, torch.Tensor):
                assert torch.equal(value, two[key]), key
