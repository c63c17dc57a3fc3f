"""Small hostile files, written the way an attacker (or a broken writer) would."""

from __future__ import annotations

import io
import json
import struct
import zipfile
from pathlib import Path

import numpy as np


def log_probs(rows: int, width: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Old and current log-probs [rows, width], float32, a little apart."""
    rng = np.random.default_rng(seed)
    old = rng.normal(-1.0, 0.3, (rows, width)).astype(np.float32)
    return old, (old + rng.normal(0.0, 0.05, (rows, width))).astype(np.float32)


def write_safetensors(
    path: Path,
    tensors: dict[str, tuple[str, list[int], bytes]],
    offsets: dict[str, list[int]] | None = None,
) -> None:
    """A safetensors file from (dtype name, shape, raw bytes) per key, laid end to end;
    ``offsets`` overrides a key's data_offsets."""
    header: dict[str, object] = {}
    data = b""
    for key, (dtype, shape, raw) in tensors.items():
        span = (offsets or {}).get(key, [len(data), len(data) + len(raw)])
        header[key] = {"dtype": dtype, "shape": shape, "data_offsets": span}
        data += raw
    write_safetensors_header(path, json.dumps(header).encode(), data)


def write_safetensors_header(path: Path, header: bytes, data: bytes = b"") -> None:
    path.write_bytes(struct.pack("<Q", len(header)) + header + data)


def valid_safetensors(path: Path, rows: int = 4, width: int = 8) -> None:
    old, new = log_probs(rows, width)
    write_safetensors(
        path,
        {
            "mask": ("BOOL", [rows, width], np.ones((rows, width), np.uint8).tobytes()),
            "old_log_probs": ("F32", [rows, width], old.tobytes()),
            "log_probs": ("F32", [rows, width], new.tobytes()),
        },
    )


def npy_bytes(header: dict[str, object], data: bytes) -> bytes:
    """A .npy member with a hand-written header (any shape or dtype it claims)."""
    text = repr(header).encode("latin1", "replace")
    pad = 64 - (10 + len(text) + 1) % 64
    text += b" " * pad + b"\n"
    return b"\x93NUMPY\x01\x00" + struct.pack("<H", len(text)) + text + data


def write_npz(path: Path, members: dict[str, bytes], compression: int = zipfile.ZIP_STORED) -> None:
    """An npz archive of raw members (``key`` -> the bytes of ``key.npy``)."""
    with zipfile.ZipFile(path, "w", compression=compression) as archive:
        for key, raw in members.items():
            archive.writestr(f"{key}.npy", raw)


def npy_of(array: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    np.save(buffer, array)
    return buffer.getvalue()


def valid_npz_members(rows: int = 4, width: int = 8) -> dict[str, bytes]:
    old, new = log_probs(rows, width)
    return {
        "mask": npy_of(np.ones((rows, width), dtype=bool)),
        "old_log_probs": npy_of(old),
        "log_probs": npy_of(new),
    }


def nested(depth: int, kind: str = "[") -> str:
    """A JSON text nested ``depth`` levels deep."""
    if kind == "[":
        return "[" * depth + "]" * depth
    return '{"a":' * depth + "1" + "}" * depth


# ----------------------------------------------------------------------------- SkyRL
SKYRL_MODULE = b"skyrl.backends.skyrl_train.training_batch"


def skyrl_global(name: bytes) -> bytes:
    return b"c" + SKYRL_MODULE + b"\n" + name + b"\n"


def skyrl_bytes(state_opcodes: bytes) -> bytes:
    """A SkyRL training-input pickle around the opcodes that push its state."""
    return (
        b"\x80\x03"
        + skyrl_global(b"_rebuild_tensor_batch")
        + skyrl_global(b"TrainingInputBatch")
        + state_opcodes
        + b"\x86R."
    )


def pickled(value: object) -> bytes:
    """The opcodes that push ``value`` (a pickle without its header and STOP)."""
    import pickle

    return pickle.dumps(value, protocol=3)[2:-1]


def encoded(array: np.ndarray) -> dict[str, object]:
    return {
        "format": "numpy",
        "data": array.tobytes(),
        "shape": list(array.shape),
        "dtype": array.dtype.str,
    }


def skyrl_state(rows: int = 4, width: int = 6, pad_size: object = 0) -> dict[str, object]:
    old, new = log_probs(rows, width)
    return {
        "batch_dict": {
            "loss_mask": encoded(np.ones((rows, width), np.float32)),
            "action_log_probs": encoded(old),
            "rollout_logprobs": encoded(new),
        },
        "metadata": {"pad_size": pad_size, "policy_prompt_boundaries": [[0, 2], [2, rows]]},
    }


def deep_list_opcodes(depth: int) -> bytes:
    """A list nested ``depth`` levels deep, pushed without recursion."""
    return b"]" * depth + b"a" * (depth - 1)


def doubling_list_opcodes(times: int) -> bytes:
    """A list that refers to the previous one twice, ``times`` over (memo references):
    a few bytes per level, 2**times items once followed."""
    out = b"]K\x01aq\x00"  # [1], memo 0
    for level in range(1, times + 1):
        previous = (level - 1).to_bytes(1, "little")
        # POP the previous list (it stays in the memo), push [previous, previous]
        out += b"0](h" + previous + b"h" + previous + b"eq" + level.to_bytes(1, "little")
    return out
