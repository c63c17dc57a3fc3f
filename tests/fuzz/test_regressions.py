"""Every case of the hostile-input report, by name: each must end in exit 0 or 2 with
one line, no traceback, in bounded time and memory, and leave no stray file."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import numpy as np
import pytest
from fuzz.harness import error_line, promise

pytestmark = pytest.mark.fuzz

B, T = 64, 512


def _log_probs(rows: int = B, width: int = T) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    old = rng.normal(-1.0, 0.3, (rows, width)).astype(np.float32)
    return old, (old + rng.normal(0.0, 0.05, (rows, width))).astype(np.float32)


def write_safetensors(path: Path, tensors: dict[str, tuple[str, list[int], bytes]]) -> None:
    """A safetensors file from (dtype name, shape, raw bytes) per key, laid end to end."""
    header: dict[str, object] = {}
    data = b""
    for key, (dtype, shape, raw) in tensors.items():
        offsets = [len(data), len(data) + len(raw)]
        header[key] = {"dtype": dtype, "shape": shape, "data_offsets": offsets}
        data += raw
    text = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(text)) + text + data)


def _bad_mask() -> np.ndarray:
    rng = np.random.default_rng(1)
    return rng.choice(np.array([0, 1, 2, 255], dtype=np.uint8), (B, T))


# ----------------------------------------------------------------- native crash
@pytest.mark.parametrize("streamed", [False, True], ids=["whole", "streamed"])
def test_bool_mask_bytes_npz(tmp_path: Path, streamed: bool) -> None:
    old, new = _log_probs()
    mask = _bad_mask().view(np.bool_)
    np.savez(tmp_path / "bad.npz", mask=mask, old_log_probs=old, log_probs=new)
    env = {"RATIOSCOPE_STREAM_BYTES": "1"} if streamed else {}
    line = error_line(promise(["analyze", "bad.npz", "-q"], tmp_path, env=env))
    assert "bad.npz" in line and "'mask'" in line and "0 or 1" in line


@pytest.mark.parametrize("streamed", [False, True], ids=["whole", "streamed"])
def test_bool_mask_bytes_safetensors(tmp_path: Path, streamed: bool) -> None:
    old, new = _log_probs()
    write_safetensors(
        tmp_path / "bad.safetensors",
        {
            "mask": ("BOOL", [B, T], _bad_mask().tobytes()),
            "old_log_probs": ("F32", [B, T], old.tobytes()),
            "log_probs": ("F32", [B, T], new.tobytes()),
        },
    )
    env = {"RATIOSCOPE_STREAM_BYTES": "1"} if streamed else {}
    line = error_line(promise(["analyze", "bad.safetensors", "-q"], tmp_path, env=env))
    assert "bad.safetensors" in line and "'mask'" in line


def test_bool_mask_bytes_info(tmp_path: Path) -> None:
    old, new = _log_probs(4, 8)
    mask = np.ones((4, 8), dtype=np.uint8)
    mask[2, 3] = 2
    np.savez(tmp_path / "bad.npz", mask=mask.view(np.bool_), old_log_probs=old, log_probs=new)
    line = error_line(promise(["info", "bad.npz"], tmp_path))
    assert "[2, 3]" in line
