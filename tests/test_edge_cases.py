"""Edge inputs that real dumps contain: empty rows, one sequence, T = 0, holes, dtypes."""

from __future__ import annotations

import math

import pytest
import torch
from documents import assert_documents_close
from dumps import make_reference
from typer.testing import CliRunner

import ratioscope
from ratioscope.cli import app
from ratioscope.errors import EmptyDumpError

runner = CliRunner()


def canonical(ref, rows=None):
    rows = list(range(len(ref.mask))) if rows is None else rows
    return {
        "mask": torch.tensor(ref.mask[rows]),
        "log_probs": torch.tensor(ref.log_probs[rows], dtype=torch.float32),
        "old_log_probs": torch.tensor(ref.old_log_probs[rows], dtype=torch.float32),
        "ref_log_probs": torch.tensor(ref.ref_log_probs[rows], dtype=torch.float32),
        "rollout_log_probs": torch.tensor(ref.rollout_log_probs[rows], dtype=torch.float32),
        "advantages": torch.tensor(ref.advantages[rows], dtype=torch.float32),
        "entropy": torch.tensor(ref.entropy[rows], dtype=torch.float32),
        "old_entropy": torch.tensor(ref.entropy[rows][:, ::-1].copy(), dtype=torch.float32),
        "rewards": torch.tensor(ref.rewards[rows]),
        "group": torch.tensor([i // 4 for i in rows]),
    }


def sections(report):
    document = report.to_dict()
    return {k: document[k] for k in ("ratios", "mismatch", "future_policy", "tepo")}


def close(a, b):
    assert_documents_close(a, b, rel=1e-6, abs_tol=1e-9)


def test_an_all_masked_row_changes_no_number():
    ref = make_reference(seed=4, rows=8, width=30)
    with_empty = canonical(ref)
    with_empty["mask"][2] = False
    without = canonical(ref, [0, 1, 3, 4, 5, 6, 7])
    a = ratioscope.analyze(ratioscope.TokenBatch.from_tensors(with_empty))
    b = ratioscope.analyze(ratioscope.TokenBatch.from_tensors(without))
    close(sections(a), sections(b))


def test_a_single_sequence_and_a_single_token():
    ref = make_reference(seed=5, rows=4, width=12)
    one = canonical(ref, [0])
    report = ratioscope.analyze(ratioscope.TokenBatch.from_tensors(one))
    assert report.ratios["token"].distribution.count == int(ref.mask[0].sum())
    tiny = {"mask": torch.ones(1, 1, dtype=torch.bool), "log_ratio": torch.tensor([[0.25]])}
    report = ratioscope.analyze(ratioscope.TokenBatch.from_tensors(tiny))
    assert report.ratios["token"].switch_frequency == 0.0
    # one token: shorter than the spectral minimum, so counted apart and no LFR
    assert report.ratios["token"].lfr is None and report.ratios["token"].short_excluded == 1


def test_zero_width_dump_is_an_empty_dump_error(tmp_path):
    with pytest.raises(EmptyDumpError):
        ratioscope.TokenBatch.from_tensors(
            {"mask": torch.zeros(3, 0, dtype=torch.bool), "log_ratio": torch.zeros(3, 0)}
        )
    path = tmp_path / "empty.pt"
    torch.save({"mask": torch.zeros(3, 0), "log_ratio": torch.zeros(3, 0)}, path)
    result = runner.invoke(app, ["analyze", str(path), "-q"])
    assert result.exit_code == 2 and "no valid token" in result.stderr


@pytest.mark.parametrize("dtype", [torch.float64, torch.float16, torch.bfloat16])
def test_half_and_double_precision_inputs(dtype):
    ref = make_reference(seed=6, rows=8, width=20)
    tensors = canonical(ref)
    for key in ("log_probs", "old_log_probs", "ref_log_probs", "advantages"):
        tensors[key] = tensors[key].to(dtype)
    report = ratioscope.analyze(ratioscope.TokenBatch.from_tensors(tensors))
    assert report.ratios["token"].distribution.count == int(ref.mask.sum())
    assert math.isfinite(report.mismatch.policy.k3)


def test_nan_reward_with_mask_policy_does_not_crash():
    ref = make_reference(seed=7, rows=8, width=20)
    tensors = canonical(ref)
    tensors["rewards"][3] = float("nan")
    batch = ratioscope.TokenBatch.from_tensors(tensors, nonfinite="mask")
    report = ratioscope.analyze(batch)
    assert report.ratios is not None and report.trust_region is not None


def test_ratio_trace_skips_holes_inside_a_sequence(tmp_path):
    from ratioscope.figures.ratios import ratio_trace

    mask = torch.tensor([[1, 1, 0, 1, 1, 0]], dtype=torch.bool)
    z = torch.tensor([[0.1, 0.2, 9.0, 0.3, 0.4, 0.0]])
    path = tmp_path / "holes.pt"
    torch.save({"mask": mask, "log_ratio": z}, path)
    trace = ratio_trace([path], 0)
    assert [round(v, 6) for v in trace.token] == [0.1, 0.2, 0.3, 0.4]


def test_concatenated_load_warns_about_keys_some_files_lack(tmp_path):
    ref = make_reference(seed=9, rows=4, width=6)
    full = canonical(ref)
    partial = {k: v for k, v in canonical(ref).items() if k != "advantages"}
    torch.save(full, tmp_path / "a.pt")
    torch.save(partial, tmp_path / "b.pt")
    batch = ratioscope.load([tmp_path / "a.pt", tmp_path / "b.pt"])
    assert batch.advantages is None
    assert any("'advantages' is not in every file" in w for w in batch.warnings)
