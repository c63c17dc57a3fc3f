"""FPA exact and approximation are never pooled (objectives) nor compared unlabelled
(compare, reports and timelines)."""

from __future__ import annotations

import copy

import torch
from safetensors.torch import save_file

import ratioscope
from ratioscope.views.compare import compare

ROWS, WIDTH, VOCAB = 4, 6, 5


def dump(path, exact: bool, seed: int) -> int:
    gen = torch.Generator().manual_seed(seed)
    tokens = torch.randint(0, VOCAB, (ROWS, WIDTH), generator=gen)
    logits = torch.randn(ROWS, WIDTH, VOCAB, generator=gen)
    ref_logits = logits + 0.1 * torch.randn(ROWS, WIDTH, VOCAB, generator=gen)
    log_probs = torch.log_softmax(logits, -1).gather(2, tokens[..., None])[..., 0]
    ref = torch.log_softmax(ref_logits, -1).gather(2, tokens[..., None])[..., 0]
    tensors = {
        "mask": torch.ones(ROWS, WIDTH, dtype=torch.bool),
        "log_probs": log_probs,
        "old_log_probs": log_probs + 0.01 * torch.randn(ROWS, WIDTH, generator=gen),
        "ref_log_probs": ref,
        "advantages": torch.randn(ROWS, generator=gen),
        "rewards": torch.tensor([1.0, 0.0, 1.0, 0.0]),
        "group": torch.tensor([0, 0, 1, 1]),
        "token_ids": tokens,
    }
    if exact:
        tensors["logits"], tensors["ref_logits"] = logits, ref_logits
    save_file(tensors, str(path))
    return ROWS * WIDTH


def test_objectives_never_pool_the_two_fpa_methods(tmp_path):
    paths = [tmp_path / "a.safetensors", tmp_path / "b.safetensors", tmp_path / "c.safetensors"]
    exact_tokens = dump(paths[0], exact=True, seed=0)
    dump(paths[1], exact=False, seed=1)
    dump(paths[2], exact=False, seed=2)
    result = ratioscope.objectives(paths, methods=["grpo", "fpa"])
    fpa = result.methods["fpa"]
    assert fpa.note == "future policy: exact"
    assert fpa.tokens == exact_tokens  # only the exact file
    assert result.methods["grpo"].tokens == 3 * exact_tokens
    left_out = [w for w in result.warnings if w.startswith("FPA:")]
    assert len(left_out) == 1 and "2 file(s)" in left_out[0] and "not pooled" in left_out[0]


def test_compare_does_not_compare_fpa_of_two_methods(tmp_path):
    dump(tmp_path / "a.safetensors", exact=False, seed=0)
    a = ratioscope.analyze(tmp_path / "a.safetensors").to_dict()
    assert a["future_policy"]["method"] == "approximation"
    b = copy.deepcopy(a)
    b["future_policy"]["method"] = "exact"
    result = compare(a, b)
    rows = [r for r in result.headlines if r.key.startswith("future_policy.")]
    assert rows and all(r.total.diff is None and not r.total.diverges for r in rows)
    assert any("FPA not compared" in n and "approximation" in n for n in result.notes)
    assert compare(a, a).notes == ()


def test_a_timeline_says_when_fpa_changes_method_between_steps(tmp_path):
    dump(tmp_path / "step_1.safetensors", exact=True, seed=0)
    dump(tmp_path / "step_2.safetensors", exact=False, seed=1)
    result = ratioscope.timeline(tmp_path)
    notes = [w for w in result.warnings if "changes method" in w]
    assert len(notes) == 1
    assert (
        "exact method in step(s) 1" in notes[0] and "approximation method in step(s) 2" in notes[0]
    )
