"""TRL loss-input files read as the loss reads them: ``completion_mask * tool_mask``."""

from __future__ import annotations

import pytest
import torch
from safetensors.torch import load_file, save_file

import ratioscope
from ratioscope.errors import InputError


def trl_file(path, rows: int = 6, width: int = 10, tools: bool = True):
    """A TRL GRPOTrainer input dict as saved by hand; ``tool_mask`` zeroes tokens 2-4
    of every other row (tool output inside the completion)."""
    gen = torch.Generator().manual_seed(0)
    lengths = torch.tensor([10, 7, 9, 5, 8, 6])[:rows]
    completion_mask = (torch.arange(width)[None, :] < lengths[:, None]).long()
    tool_mask = torch.ones(rows, width, dtype=torch.long)
    tool_mask[::2, 2:5] = 0
    old = -torch.rand(rows, width, generator=gen)
    tensors = {
        "completion_mask": completion_mask,
        "per_token_logps": old + 0.05 * torch.randn(rows, width, generator=gen),
        "old_per_token_logps": old,
        "ref_per_token_logps": old - 0.1,
        "completion_ids": torch.randint(0, 50, (rows, width), generator=gen),
        "advantages": torch.randn(rows, generator=gen),
    }
    if tools:
        tensors["tool_mask"] = tool_mask
    save_file(tensors, str(path))
    return completion_mask, tool_mask


@pytest.mark.parametrize("stream_bytes", [1 << 60, 0])
def test_the_tool_mask_leaves_tool_output_out(tmp_path, stream_bytes):
    path = tmp_path / "trl.safetensors"
    completion_mask, tool_mask = trl_file(path)
    expected = int((completion_mask * tool_mask).sum())  # what TRL's loss averages over
    assert expected < int(completion_mask.sum())
    report = ratioscope.analyze(path, stream_bytes=stream_bytes).to_dict()
    assert report["mismatch"]["policy"]["tokens"] == expected
    batch = ratioscope.load(path)
    assert torch.equal(batch.mask, (completion_mask * tool_mask).bool())
    assert "tool_mask" not in batch.ignored_keys


def test_a_file_without_tools_keeps_the_completion_mask(tmp_path):
    path = tmp_path / "trl.safetensors"
    completion_mask, _ = trl_file(path, tools=False)
    assert ratioscope.load(path).mask.sum() == completion_mask.sum()


def test_a_tool_mask_of_another_shape_is_named(tmp_path):
    path = tmp_path / "trl.safetensors"
    trl_file(path)
    tensors = load_file(str(path))
    tensors["tool_mask"] = tensors["tool_mask"][:, :4].contiguous()
    save_file(tensors, str(path))
    with pytest.raises(InputError, match="tool_mask"):
        ratioscope.load(path)
