"""SkyRL's training-input pickle (``trainer.dump_data_batch=true``), decoded safely.

Verified against NovaSky-AI/SkyRL at a9564572eb8e (2026-08-21) and the skyrl 0.3.0 and
0.4.0 wheels, ``skyrl/backends/skyrl_train/training_batch.py`` and
``skyrl/train/trainer.py``:

* ``{export_path}/dumped_data/global_step_{N}_training_input.pkl``, a plain
  ``pickle.dump`` of a ``TrainingInputBatch`` whose ``__reduce__`` is
  ``(_rebuild_tensor_batch, (TrainingInputBatch, state))``; the other globals are
  ``torch.device`` and, from 0.4.0, the string enum ``TensorFormat``.
* ``state["batch_dict"]`` maps keys to encoded tensors: ``{"format": "numpy", "data":
  bytes, "shape", "dtype"}``, or ``{"format": "torch", "data": <torch.save bytes>}`` for
  dtypes numpy lacks (bf16).
* Response-width tensors ``[B, R]``: ``loss_mask`` (trained tokens; tool output, padding
  and pad rows are 0), ``response_mask`` (includes tool output: not the loss mask),
  ``action_log_probs`` (the old policy, before the update), ``rollout_logprobs`` (the
  inference engine), ``base_action_log_probs`` (reference), ``advantages``. Rows are
  left-padded. ``sequences`` is ``[B, T]``; column j of the response is
  ``sequences[:, T - R + j]``.
* The last ``metadata["pad_size"]`` rows are copies of row 0 added for data-parallel
  divisibility; ``metadata["policy_prompt_boundaries"]`` lists each prompt's rows.
  Rewards and uids are removed before the dump.

Only these names are resolved; anything else in the pickle is refused before import.
"""

from __future__ import annotations

import io
import pickle
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ratioscope.errors import CorruptFileError, InputError, UnsafePickleError
from ratioscope.io.raw import RawDump
from ratioscope.io.safe_pickle import AllowList, load_allowed

_MODULE = "skyrl.backends.skyrl_train.training_batch"
#: derived columns
PROMPT_GROUP = "prompt_group"
RESPONSE_IDS = "response_ids"


class _Batch:
    """What ``TrainingInputBatch`` stands for in the file: a marker, never called."""


def _rebuild(cls: Any, state: Any) -> dict[str, Any]:
    if cls is not _Batch or not isinstance(state, dict):
        raise pickle.UnpicklingError("not a SkyRL training batch")
    return {"skyrl_state": state}


ALLOWED: AllowList = {
    (_MODULE, "_rebuild_tensor_batch"): _rebuild,
    (_MODULE, "TrainingInputBatch"): _Batch,
    (_MODULE, "TensorFormat"): str,
    ("torch", "device"): str,
}


def looks_like_skyrl(path: Path) -> bool:
    """The file's first bytes name SkyRL's training-batch module."""
    try:
        with path.open("rb") as handle:
            head = handle.read(256)
    except OSError:
        return False
    return _MODULE.encode() in head or b"skyrl_train.training_batch" in head


def read(path: Path) -> RawDump:
    """The columns of a SkyRL training-input pickle, decoded without running it."""
    obj = load_allowed(path, ALLOWED)
    if not isinstance(obj, dict) or "skyrl_state" not in obj:
        raise CorruptFileError(path, "a pickle, but not of a SkyRL TrainingInputBatch")
    state = obj["skyrl_state"]
    encoded = state.get("batch_dict")
    if not isinstance(encoded, dict):
        raise CorruptFileError(path, "a SkyRL batch without its 'batch_dict'")
    dump = RawDump(columns={}, file_format="pickle")
    for key, value in encoded.items():
        if value is None:
            continue
        tensor = _decode(path, str(key), value)
        if tensor is None:
            dump.ignore(str(key), f"ignored key '{key}' ({value.get('format')} encoding)")
        else:
            dump.columns[str(key)] = tensor
    metadata = state.get("metadata")
    dump.meta["ratioscope_profile"] = "skyrl"
    dump.meta["skyrl_metadata"] = metadata if isinstance(metadata, dict) else {}
    return dump


def _decode(path: Path, key: str, value: Any) -> torch.Tensor | None:
    if not isinstance(value, dict):
        raise CorruptFileError(path, f"SkyRL tensor '{key}' is not an encoded tensor")
    kind = value.get("format", "numpy")  # files before the format field were numpy
    if kind == "numpy":
        dtype = np.dtype(str(value["dtype"]))
        if dtype.kind not in "biuf":
            raise UnsafePickleError(path, f"SkyRL tensor '{key}' has dtype {dtype}")
        shape = tuple(int(n) for n in value["shape"])
        array = np.frombuffer(value["data"], dtype=dtype)
        if array.size != int(np.prod(shape, dtype=np.int64)):
            raise CorruptFileError(path, f"SkyRL tensor '{key}' has the wrong number of bytes")
        return torch.from_numpy(array.reshape(shape).copy())
    if kind == "torch":
        try:
            tensor = torch.load(io.BytesIO(value["data"]), map_location="cpu", weights_only=True)
        except (pickle.UnpicklingError, RuntimeError, EOFError) as error:
            raise CorruptFileError(path, f"SkyRL tensor '{key}' is unreadable ({error})") from None
        return tensor if isinstance(tensor, torch.Tensor) else None
    return None  # image lists and router replay data: not per-token ratio data


def prepare(path: Path, raw: RawDump) -> RawDump:
    """Drop the data-parallel pad rows, form groups from the prompt boundaries, take the
    response's token ids, and check that the old policy's log-probs are there."""
    metadata = raw.meta.get("skyrl_metadata", {})
    columns = raw.columns
    rows = _rows(columns)
    pad = int(metadata.get("pad_size") or 0)
    if pad:
        keep = rows - pad
        for key, value in list(columns.items()):
            if isinstance(value, torch.Tensor) and value.dim() >= 1 and value.shape[0] == rows:
                columns[key] = value[:keep]
        raw.warn(
            f"SkyRL: dropped {pad} pad row(s) (copies of row 0 added for the data-parallel split)"
        )
        rows = keep
    boundaries = metadata.get("policy_prompt_boundaries")
    if isinstance(boundaries, (list, tuple)) and boundaries:
        labels: list[Any] = [None] * rows
        for index, (start, stop) in enumerate(boundaries):
            for row in range(int(start), min(int(stop), rows)):
                labels[row] = index
        if None not in labels:
            columns[PROMPT_GROUP] = labels
    sequences, mask = columns.get("sequences"), columns.get("loss_mask")
    if isinstance(sequences, torch.Tensor) and isinstance(mask, torch.Tensor):
        columns[RESPONSE_IDS] = sequences[:, sequences.shape[1] - mask.shape[1] :]
    if "action_log_probs" not in columns:
        raise InputError(
            path,
            "this SkyRL batch holds no 'action_log_probs': SkyRL skips the old policy's "
            "forward pass for losses that do not use it, so only the engine's log-probs are "
            "there and no ratio can be formed",
        )
    raw.warn("SkyRL: no rewards in the file (SkyRL removes them before the dump)")
    return raw


def _rows(columns: dict[str, Any]) -> int:
    mask = columns.get("loss_mask")
    return int(mask.shape[0]) if isinstance(mask, torch.Tensor) else 0
