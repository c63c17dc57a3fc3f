"""What z compares follows from the log-probs a dump holds, and every output says so."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from dumps import make_reference
from typer.testing import CliRunner

import ratioscope
from ratioscope.cli import app
from ratioscope.data.batch import TokenBatch


def _k3(z: np.ndarray) -> float:
    return float(np.mean(np.exp(z) - 1.0 - z))


def _tensors(ref, *names: str) -> dict:
    out = {"mask": torch.tensor(ref.mask), "advantages": torch.tensor(ref.advantages)}
    for name in names:
        out[name] = torch.tensor(getattr(ref, name))
    return out


def test_old_and_engine_alone_are_the_train_inference_mismatch():
    ref = make_reference(seed=3)
    batch = TokenBatch.from_tensors(_tensors(ref, "old_log_probs", "rollout_log_probs"))
    assert batch.ratio_pair == "old/engine"
    report = ratioscope.analyze(batch)
    z = (ref.old_log_probs - ref.rollout_log_probs)[ref.mask]
    assert report.mismatch.policy is None
    assert report.mismatch.pairs == {"policy": None, "rollout": "old/engine"}
    assert report.mismatch.rollout.k3 == pytest.approx(_k3(z), rel=1e-9)
    assert report.mismatch.rollout.tokens == int(ref.mask.sum())
    # PPO clipping acts on the policy ratio only
    assert report.ratios["token"].clip_fraction is None
    assert report.ratios["token"].surrogate is None
    assert any("train/inference mismatch" in w for w in report.warnings)
    assert report.inputs[0].ratio_pair == "old/engine"


def test_current_against_engine_fills_the_policy_row_and_says_so():
    ref = make_reference(seed=4)
    batch = TokenBatch.from_tensors(_tensors(ref, "log_probs", "rollout_log_probs"))
    assert batch.ratio_pair == "current/engine"
    report = ratioscope.analyze(batch)
    z = (ref.log_probs - ref.rollout_log_probs)[ref.mask]
    assert report.mismatch.policy.k3 == pytest.approx(_k3(z), rel=1e-9)
    assert report.mismatch.rollout is None
    assert report.mismatch.pairs["policy"] == "current/engine"
    assert report.ratios["token"].clip_fraction is not None
    # the engine comparison is in the policy row: no warning asks for a rollout row
    assert not any("mismatch.rollout" in w for w in report.warnings)


def test_all_three_give_both_rows():
    ref = make_reference(seed=5)
    names = ("log_probs", "old_log_probs", "rollout_log_probs")
    report = ratioscope.analyze(TokenBatch.from_tensors(_tensors(ref, *names)))
    m = ref.mask
    assert report.mismatch.policy.k3 == pytest.approx(_k3((ref.log_probs - ref.old_log_probs)[m]))
    rollout = (ref.old_log_probs - ref.rollout_log_probs)[m]
    assert report.mismatch.rollout.k3 == pytest.approx(_k3(rollout), rel=1e-9)
    assert report.mismatch.pairs == {"policy": "current/old", "rollout": "old/engine"}


def test_one_log_prob_alone_names_what_is_missing():
    from ratioscope.errors import DumpKeyError

    ref = make_reference(seed=6)
    with pytest.raises(DumpKeyError, match="two of 'log_probs', 'old_log_probs'"):
        TokenBatch.from_tensors(_tensors(ref, "old_log_probs"))


def test_terminal_and_json_label_the_pair(tmp_path):
    ref = make_reference(seed=7)
    path = tmp_path / "dump.pt"
    torch.save(_tensors(ref, "old_log_probs", "rollout_log_probs"), path)
    out = tmp_path / "r.json"
    result = CliRunner().invoke(app, ["analyze", str(path), "--json", str(out), "--detail"])
    assert result.exit_code == 0, result.output
    assert "old policy (trainer) / inference engine" in result.stdout
    assert "rollout: old / engine" in result.stdout
    document = json.loads(out.read_text())
    assert document["inputs"][0]["ratio_pair"] == "old/engine"
    assert document["mismatch"]["policy"] is None


@pytest.mark.parametrize(
    ("line", "what"),
    [
        ({"input": "q", "output": "a", "gts": "1", "score": 1.0, "step": 3}, "verl rollout log"),
        ({"problem_id": 1, "response": "a", "correct": True}, "samples file"),
    ],
)
def test_text_logs_given_to_analyze_are_named_with_the_command_that_reads_them(
    tmp_path, line, what
):
    path = tmp_path / "3.jsonl"
    path.write_text(json.dumps(line) + "\n")
    result = CliRunner().invoke(app, ["analyze", str(path)])
    assert result.exit_code == 2
    assert what in result.stderr and "eval-ucc" in result.stderr
    assert "Traceback" not in result.output


def test_the_ratio_trace_plot_names_the_train_inference_ratio(tmp_path, monkeypatch):
    from ratioscope.figures.ratios import ratio_trace
    from ratioscope.render.png import ratios as ratio_plots

    ref = make_reference(seed=8)
    path = tmp_path / "dump.pt"
    torch.save(_tensors(ref, "old_log_probs", "rollout_log_probs"), path)
    trace = ratio_trace([path], 0)
    assert trace.ratio_pair == "old/engine"
    seen = {}
    monkeypatch.setattr(ratio_plots, "save_figure", lambda figure, out: seen.update(f=figure))
    ratio_plots.plot_trace(trace, tmp_path / "t.png")
    labels = [axes.get_ylabel() for axes in seen["f"].axes if axes.get_ylabel()]
    assert labels and all("pi_old / pi_engine" in label for label in labels)
