"""benchmarks/verdict_faults.py in small: two real steps, every fault, no false alarm.

The full table (every bundled step) is in docs/health.md; this runs the same code on the
first two steps of ``sample_data/verl_steps/`` and checks the injections themselves
against what each is said to do.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def bench():
    path = ROOT / "benchmarks" / "verdict_faults.py"
    spec = importlib.util.spec_from_file_location("verdict_faults", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["verdict_faults"] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def steps(bench):
    run = bench.runs(ROOT / "sample_data")[0]
    assert run.name == "verl_steps" and len(run.paths) == 16
    return run, [bench.load_step(path, run) for path in run.paths[:2]]


def test_the_injections_do_what_they_say(bench, steps):
    _, (first, second) = steps
    mask = second.mask
    context = bench.Context(seed=1, previous=first)
    noisy = bench.FAULTS["noise_0.05"](second, context)
    added = (noisy.log_probs - second.log_probs)[mask]
    assert added.std().item() == pytest.approx(0.05, rel=0.05)
    assert torch.equal(noisy.old_log_probs, second.old_log_probs)
    drift = bench.FAULTS["drift_x10"](second, context)
    torch.testing.assert_close(drift.log_ratio[mask], 10 * second.log_ratio[mask])
    collapsed = bench.FAULTS["entropy_x0.02"](second, context)
    torch.testing.assert_close(collapsed.entropy, second.entropy * 0.02)
    full = bench.FAULTS["length_limit"](second, context)
    assert bool(full.mask.all()) and full.num_tokens == mask.numel()
    # a row of length n repeats its own n values: position n holds position 0's
    row = int((second.lengths < second.max_length).nonzero()[0, 0])
    n = int(second.lengths[row])
    assert full.log_probs[row, n] == second.log_probs[row, 0]
    equal = bench.FAULTS["equal_rewards"](second, context)
    for group in equal.group.unique():
        rewards = equal.rewards[equal.group == group]
        assert bool((rewards == rewards[0]).all())
    assert bool((equal.advantages == 0).all())
    stale = bench.FAULTS["stale"](second, context)
    # the previous step's tensor, read on this step's valid tokens (same shape here)
    assert torch.equal(stale.old_log_probs[mask], first.old_log_probs[mask])
    assert bench.FAULTS["stale"](first, bench.Context(seed=0)) is None  # no earlier step
    overflow = bench.FAULTS["overflow"](second, context)
    z = (overflow.old_log_probs - overflow.rollout_log_probs)[mask]
    assert z.max().item() == pytest.approx(89.0) and int((z > 1).sum()) == 1
    shifted = bench.FAULTS["disagreement"](second, context)
    moved = (shifted.rollout_log_probs != second.rollout_log_probs) & mask
    assert 0.01 < moved.sum().item() / mask.sum().item() < 0.03  # 2 % of the tokens


def test_small_benchmark_detects_every_fault_without_false_alarm(bench, steps):
    run, _ = steps
    faults = ["noise_0.01", "drift_x10", "entropy_x0.02", "length_limit", "equal_rewards",
              "stale", "overflow", "disagreement"]  # fmt: skip
    table = bench.evaluate([run], faults, steps=2)
    for mode in bench.MODES:
        healthy = table[mode]["healthy"]["verl_steps"]
        assert (healthy.steps, healthy.flagged) == (2, 0), mode
        for fault in faults:
            cell = table[mode][fault]["verl_steps"]
            expected = 1 if fault == "stale" else 2  # the first step has no earlier one
            assert (cell.steps, cell.flagged) == (expected, expected), (mode, fault)
    alone = table["alone"]
    # trainer noise of 0.01 is caught by the first mini-batch, which must be exactly 0
    assert alone["noise_0.01"]["verl_steps"].by["staleness.minibatches.0.exact_on"] == 2
    assert alone["entropy_x0.02"]["verl_steps"].by["vitals.entropy.mean"] == 2
    assert alone["length_limit"]["verl_steps"].by["vitals.length.at_limit_share"] == 2
    assert alone["overflow"]["verl_steps"].by["mismatch.rollout.abs_diff_max"] == 2
    # drift x10 is judged at the update where it is largest: a later mini-batch's k3
    drift = alone["drift_x10"]["verl_steps"].by
    assert sum(n for key, n in drift.items() if key.startswith("staleness.minibatches.")) == 2
    # with the other step as baseline, the collapse is also a relative finding
    relative = table["baseline"]["entropy_x0.02"]["verl_steps"].by
    assert relative["relative.vitals.entropy.mean"] == 2
    text = bench.render(table, ["verl_steps"])
    assert "| noise_0.01 | 2/2 | 100 % | 2/2 | 100 % |" in text


def test_trl_capture_with_on_policy_settings_catches_noise_of_0_01(bench):
    """The TRL export's mini-batch 0 with recorded on-policy settings: every log-ratio of
    the step must be 0, so noise of 0.01 is caught with no mini-batch key."""
    run = bench.runs(ROOT / "sample_data")[-1]
    assert run.name == "trl_capture" and not run.headline
    table = bench.evaluate([run], ["noise_0.01", "drift_x10"])
    healthy, noisy = table["alone"]["healthy"][run.name], table["alone"]["noise_0.01"][run.name]
    assert "ratios.token.proportion_pooled.on" not in healthy.by  # the real rows: exactly 0
    assert (noisy.steps, noisy.flagged) == (1, 1)
    assert noisy.by["ratios.token.proportion_pooled.on"] == 1
    assert table["alone"]["drift_x10"][run.name].steps == 0  # no drift to multiply: n/a
    text = bench.render(table, [run.name], apart=[run.name])
    assert "| noise_0.01 | n/a | 1/1 |" in text  # no headline run: no total
