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
import math
import pickle
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ratioscope.data.raw import RawDump
from ratioscope.errors import CorruptFileError, InputError
from ratioscope.io.limits import check_view, checked_shape
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


def _text(value: Any, *rest: Any) -> str:
    """What ``TensorFormat(value)`` and ``torch.device(value)`` stand for: the string
    itself (``str`` of anything else could walk a structure of any depth or size)."""
    if not isinstance(value, (str, int)) or isinstance(value, bool) or rest:
        raise pickle.UnpicklingError("a SkyRL name that is not a string")
    return str(value)


ALLOWED: AllowList = {
    (_MODULE, "_rebuild_tensor_batch"): _rebuild,
    (_MODULE, "TrainingInputBatch"): _Batch,
    (_MODULE, "TensorFormat"): _text,
    ("torch", "device"): _text,
}

#: the most containers and items the decoded pickle may hold, counting every reference
#: (a pickle can refer to one list many times: a few hundred bytes that double 40 times)
MAX_NODES = 1_000_000
#: the deepest nesting of the decoded pickle (SkyRL's state nests four levels)
MAX_DEPTH = 32


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
    _check_size(path, obj)
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


def _check_size(path: Path, obj: Any) -> None:
    """Refuse a decoded pickle with more than :data:`MAX_NODES` references to
    containers and items, or nested deeper than :data:`MAX_DEPTH`, before anything walks
    it (walked without recursion, every reference counted, so shared lists count as
    often as they are referred to)."""
    stack: list[tuple[Any, int]] = [(obj, 1)]
    nodes = 0
    while stack:
        item, depth = stack.pop()
        if depth > MAX_DEPTH:
            raise CorruptFileError(path, f"a pickle nested deeper than {MAX_DEPTH} levels")
        children = item.values() if isinstance(item, dict) else item
        for child in children:
            nodes += 1
            if nodes > MAX_NODES:
                raise CorruptFileError(
                    path,
                    f"a pickle of more than {MAX_NODES} objects once its references are "
                    "followed (lists that refer to each other); not a SkyRL batch",
                )
            if isinstance(child, (dict, list, tuple)):
                stack.append((child, depth + 1))


#: the numpy dtypes a SkyRL tensor is decoded from (numeric, either byte order)
_NUMPY_KINDS = "biuf"


def _decode(path: Path, key: str, value: Any) -> torch.Tensor | None:
    def corrupt(problem: str) -> CorruptFileError:
        return CorruptFileError(path, f"SkyRL tensor '{key}' {problem}")

    if not isinstance(value, dict):
        raise corrupt("is not an encoded tensor")
    kind = value.get("format", "numpy")  # files before the format field were numpy
    if kind == "numpy":
        missing = [field for field in ("dtype", "shape", "data") if field not in value]
        if missing:
            raise corrupt(f"lacks its {', '.join(repr(m) for m in missing)}")
        try:
            dtype = np.dtype(value["dtype"]) if isinstance(value["dtype"], str) else None
        except (TypeError, ValueError):
            dtype = None
        if dtype is None or dtype.kind not in _NUMPY_KINDS:
            raise corrupt(f"has the dtype {str(value['dtype'])[:40]!r}, not a numeric one")
        data = value["data"]
        if not isinstance(data, (bytes, bytearray)):
            raise corrupt("holds its data as something other than bytes")
        shape = checked_shape(path, f"SkyRL tensor '{key}'", value["shape"])
        if len(data) != math.prod(shape) * dtype.itemsize:
            raise corrupt(
                f"has {len(data)} bytes for shape {list(shape)} of {dtype.str} "
                f"({math.prod(shape) * dtype.itemsize} expected)"
            )
        array = np.frombuffer(data, dtype=dtype).reshape(shape)
        return torch.from_numpy(array.astype(dtype.newbyteorder("="), copy=True))
    if kind == "torch":
        if not isinstance(value.get("data"), (bytes, bytearray)):
            raise corrupt("holds its data as something other than bytes")
        try:
            tensor = torch.load(io.BytesIO(value["data"]), map_location="cpu", weights_only=True)
        except (pickle.UnpicklingError, RuntimeError, EOFError, ValueError) as error:
            raise corrupt(f"is unreadable ({str(error).splitlines()[0][:120]})") from None
        if not isinstance(tensor, torch.Tensor):
            return None
        check_view(path, key, tensor)
        return tensor
    return None  # image lists and router replay data: not per-token ratio data


def _pad_size(path: Path, metadata: dict[str, Any], rows: int) -> int:
    """``metadata["pad_size"]``: an int from 0 to the rows of the file."""
    pad = metadata.get("pad_size") or 0
    if isinstance(pad, bool) or not isinstance(pad, int) or not 0 <= pad < max(rows, 1):
        raise CorruptFileError(
            path,
            f"SkyRL metadata 'pad_size' is {str(pad)[:40]!r}; expected a number of rows from "
            f"0 to {max(rows - 1, 0)}",
        )
    return pad


def _boundaries(path: Path, value: Any) -> list[tuple[int, int]]:
    """``metadata["policy_prompt_boundaries"]`` as (start, stop) row pairs."""
    pairs = []
    for pair in value:
        if (
            not isinstance(pair, (list, tuple))
            or len(pair) != 2
            or not all(isinstance(n, int) and not isinstance(n, bool) for n in pair)
            or not 0 <= pair[0] <= pair[1]
        ):
            raise CorruptFileError(
                path,
                f"SkyRL metadata 'policy_prompt_boundaries' holds {str(pair)[:40]}; expected "
                "[start, stop] row pairs",
            )
        pairs.append((pair[0], pair[1]))
    return pairs


def prepare(path: Path, raw: RawDump) -> RawDump:
    """Drop the data-parallel pad rows, form groups from the prompt boundaries, take the
    response's token ids, and check that the old policy's log-probs are there."""
    metadata = raw.meta.get("skyrl_metadata", {})
    columns = raw.columns
    rows = _rows(columns)
    pad = _pad_size(path, metadata, rows)
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
        for index, (start, stop) in enumerate(_boundaries(path, boundaries)):
            for row in range(start, min(stop, rows)):
                labels[row] = index
        if None not in labels:
            columns[PROMPT_GROUP] = labels
    sequences, mask = columns.get("sequences"), columns.get("loss_mask")
    if (
        isinstance(sequences, torch.Tensor)
        and isinstance(mask, torch.Tensor)
        and sequences.dim() == 2
        and mask.dim() == 2
    ):
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
    if not isinstance(mask, torch.Tensor):
        return 0
    return int(mask.shape[0]) if mask.dim() >= 1 else 0  # validation names a 0-d mask
