"""The tensors of one captured micro-batch: validation, storage dtypes, row selection.

:func:`validate_inputs` checks what a training framework passes to
:meth:`~ratioscope.capture.CaptureWriter.write` without copying anything but the mask
to the host; :func:`gather` then moves only the rows that are kept to the CPU in the
dtypes that are stored. A :class:`Part` is what is written (or analysed): canonical
names (docs/formats.md) mapped to CPU tensors, plus group labels.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import Tensor

from ratioscope.data.batch import REWARD_FUNCTION_PREFIX

#: per-token float tensors, [B, T]
TOKEN_FLOAT_NAMES = (
    "log_probs",
    "old_log_probs",
    "rollout_log_probs",
    "ref_log_probs",
    "entropy",
    "old_entropy",
)
#: the order in which columns are stored (fixed, so equal inputs give equal files)
COLUMN_ORDER = (
    "mask",
    *TOKEN_FLOAT_NAMES[:4],
    "advantages",
    *TOKEN_FLOAT_NAMES[4:],
    "token_ids",
    "policy_version",
    "rewards",
    "correct",
    "group",
    "trainer_version",
)
#: integer columns stored as int64 (versions count on without bound)
_VERSION_NAMES = ("policy_version", "trainer_version")
_INT32 = torch.iinfo(torch.int32)


@dataclass
class Inputs:
    """A validated micro-batch; tensors other than the mask stay where the caller has them.

    Attributes:
        mask: [B, T] bool on the CPU.
        tensors: name -> tensor on its own device: [B, T] per-token values, ``advantages``
            [B, T] or [B], ``rewards``/``correct`` [B].
        group: [B] int64 tensor, or a list of B str labels, or None.
        units: [B] int64 sampling unit of each row: its group's index in order of first
            appearance, or the row index when there are no groups.
    """

    mask: Tensor
    tensors: dict[str, Tensor]
    group: Tensor | list[str] | None
    units: np.ndarray

    @property
    def rows(self) -> int:
        return int(self.mask.shape[0])

    def units_with_valid_tokens(self) -> np.ndarray:
        """[U] bool, whether each sampling unit holds at least one valid token."""
        valid_rows = self.mask.any(dim=1).numpy()
        count = int(self.units.max()) + 1 if self.units.size else 0
        return np.bincount(self.units, weights=valid_rows, minlength=count) > 0


@dataclass
class Part:
    """The stored rows of one micro-batch: CPU tensors in storage dtypes, trimmed.

    Attributes:
        columns: canonical name -> tensor ([R, W] per token, [R] per sequence) or, for
            ``group``, a list of R str labels; ``mask`` [R, W] bool, W = the last column
            holding a valid token + 1.
        units: [R] int64 sampling unit of each row (see :class:`Inputs`).
    """

    columns: dict[str, Tensor | list[str]]
    units: np.ndarray

    @property
    def rows(self) -> int:
        return int(self.units.shape[0])

    @property
    def mask(self) -> Tensor:
        mask = self.columns["mask"]
        assert isinstance(mask, Tensor)
        return mask

    def select(self, units: np.ndarray) -> Part:
        """The rows of ``units`` (whole units, original order), trimmed again."""
        from ratioscope.capture.sampling import rows_of_units

        rows = rows_of_units(self.units, units)
        index = torch.from_numpy(rows)
        width = valid_width(self.mask.index_select(0, index))
        columns: dict[str, Tensor | list[str]] = {}
        for name, value in self.columns.items():
            if isinstance(value, list):
                columns[name] = [value[i] for i in rows.tolist()]
                continue
            value = value.index_select(0, index)
            if value.dim() == 2:
                value = value[:, :width]
            columns[name] = compact(value)
        return Part(columns=columns, units=self.units[rows])


# --------------------------------------------------------------------------- validation
#: what the name of a per-sequence value given beside the canonical tensors starts with
#: (``per_sequence`` of :meth:`CaptureWriter.write`): one reward function's values, read
#: back as ``TokenBatch.reward_functions``
SEQUENCE_PREFIX = REWARD_FUNCTION_PREFIX


def validate_inputs(
    mask: Any, tensors: Mapping[str, Any], group: Any, per_sequence: Mapping[str, Any] | None = None
) -> Inputs:
    """Check names, types and shapes of one micro-batch (cheap: no pass over the data
    except the mask, which is copied to the host to choose rows and trim padding).

    Args:
        mask: [B, T] bool, or 0/1 integers or floats; True on valid tokens.
        tensors: canonical name -> tensor or None (None entries are absent).
        group: [B] integer tensor, a sequence of B str/int labels, or None.
        per_sequence: more [B] real values by name (stored under that name, which must
            start with :data:`SEQUENCE_PREFIX`).

    Raises:
        TypeError: an argument is not a tensor (or labels for ``group``).
        ValueError: a shape, dtype or value does not fit; the message names the argument.
    """
    host_mask = _host_mask(mask)
    rows, width = host_mask.shape
    present: dict[str, Tensor] = {}
    for name, value in tensors.items():
        if value is None:
            continue
        tensor = _as_tensor(name, value)
        _check_shape(name, tensor, rows, width)
        _check_dtype(name, tensor)
        present[name] = tensor
    for name, value in (per_sequence or {}).items():
        if (
            not isinstance(name, str)
            or not name.startswith(SEQUENCE_PREFIX)
            or name == SEQUENCE_PREFIX
        ):
            raise ValueError(
                f"per_sequence names must start with {SEQUENCE_PREFIX!r} and name something, "
                f"got {name!r}"
            )
        tensor = _as_tensor(name, value)
        if list(tensor.shape) != [rows] or tensor.is_complex() or tensor.dtype == torch.bool:
            raise ValueError(
                f"{name} must be [B] = [{rows}] real values, got {list(tensor.shape)} "
                f"{tensor.dtype}"
            )
        present[name] = tensor
    missing = [name for name in ("log_probs", "old_log_probs") if name not in present]
    if missing:
        raise ValueError(
            f"{' and '.join(missing)} {'is' if len(missing) == 1 else 'are'} required: "
            "ratioscope forms the importance ratio from log_probs (current policy) and "
            "old_log_probs (behaviour policy); in an on-policy step pass "
            "old_log_probs=log_probs.detach()"
        )
    stored_group, units = _group(group, rows)
    return Inputs(mask=host_mask, tensors=present, group=stored_group, units=units)


def _as_tensor(name: str, value: Any) -> Tensor:
    if isinstance(value, Tensor):
        return value
    if isinstance(value, np.ndarray):
        return torch.from_numpy(value)
    raise TypeError(f"{name} must be a torch.Tensor, got {type(value).__name__}")


def _host_mask(mask: Any) -> Tensor:
    tensor = _as_tensor("mask", mask)
    if tensor.dim() != 2 or tensor.numel() == 0:
        raise ValueError(f"mask must be a non-empty [B, T] tensor, got shape {list(tensor.shape)}")
    if tensor.is_complex():
        raise ValueError(f"mask must be boolean, got dtype {tensor.dtype}")
    host = tensor.detach().to("cpu")
    if host.dtype == torch.bool:
        return host
    if not bool(((host == 0) | (host == 1)).all()):
        raise ValueError("mask must hold only 0/1 or True/False")
    return host != 0


def _check_shape(name: str, tensor: Tensor, rows: int, width: int) -> None:
    shape = list(tensor.shape)
    if name in ("rewards", "correct"):
        if shape != [rows]:
            raise ValueError(f"{name} must be [B] = [{rows}] (one value per row), got {shape}")
    elif name == "trainer_version":
        if shape != [rows]:
            raise ValueError(f"{name} must be one integer, got shape {shape}")
    elif name in ("advantages", "policy_version"):
        if shape not in ([rows, width], [rows]):
            raise ValueError(
                f"{name} must be [B, T] = [{rows}, {width}] like the mask, or [B] = "
                f"[{rows}], got {shape}"
            )
    elif shape != [rows, width]:
        raise ValueError(f"{name} must be [B, T] = [{rows}, {width}] like the mask, got {shape}")


def _check_dtype(name: str, tensor: Tensor) -> None:
    if name in ("token_ids", *_VERSION_NAMES):
        if tensor.is_floating_point() or tensor.is_complex() or tensor.dtype == torch.bool:
            raise ValueError(f"{name} must be an integer tensor, got dtype {tensor.dtype}")
    elif name == "correct":
        if tensor.is_complex():
            raise ValueError(f"correct must be boolean, got dtype {tensor.dtype}")
    elif name == "rewards":
        if tensor.is_complex():
            raise ValueError(f"rewards must be real, got dtype {tensor.dtype}")
    elif not tensor.is_floating_point():
        raise ValueError(f"{name} must be a floating-point tensor, got dtype {tensor.dtype}")


def _group(group: Any, rows: int) -> tuple[Tensor | list[str] | None, np.ndarray]:
    """The group as stored (int64 tensor or str labels) and the unit of each row."""
    if group is None:
        return None, np.arange(rows, dtype=np.int64)
    if isinstance(group, (Tensor, np.ndarray)):
        tensor = _as_tensor("group", group)
        if list(tensor.shape) != [rows]:
            raise ValueError(f"group must be [B] = [{rows}], got {list(tensor.shape)}")
        if tensor.is_floating_point() or tensor.is_complex():
            raise ValueError(f"group must hold integer ids, got dtype {tensor.dtype}")
        ids = tensor.detach().to("cpu", torch.int64)
        _, inverse = torch.unique(ids, return_inverse=True)
        return compact(ids), inverse.numpy().astype(np.int64)
    if isinstance(group, (str, bytes)) or not isinstance(group, Sequence):
        raise TypeError(f"group must be a tensor or a list of labels, got {type(group).__name__}")
    labels = list(group)
    if len(labels) != rows:
        raise ValueError(f"group must hold B = {rows} labels, got {len(labels)}")
    bad = [i for i, v in enumerate(labels) if not isinstance(v, (str, int)) or v == ""]
    if bad:
        raise ValueError(
            f"group labels must be non-empty str or int, row {bad[0]} holds {labels[bad[0]]!r}"
        )
    if all(isinstance(v, int) for v in labels):
        return _group(torch.tensor(labels, dtype=torch.int64), rows)
    stored = [str(v) for v in labels]
    index: dict[str, int] = {}
    units = np.array([index.setdefault(v, len(index)) for v in stored], dtype=np.int64)
    return stored, units


# ------------------------------------------------------------------------------ storage
def gather(inputs: Inputs, rows: np.ndarray) -> Part:
    """Copy ``rows`` of ``inputs`` to the CPU in storage dtypes, trimmed to the last
    column that holds a valid token.

    Storage dtypes: float32 for every float (float64 is rounded, half precision widened
    exactly), bool mask and ``correct``, int32 ``token_ids`` when every id fits (else
    int64), int64 ``group``. Rows are selected on the caller's device first, so only
    kept rows cross to the host.

    Args:
        inputs: a validated micro-batch.
        rows: [R] int64 ascending row indices, R >= 1.
    """
    every_row = len(rows) == inputs.rows
    index = None if every_row else torch.from_numpy(rows)
    mask = inputs.mask if index is None else inputs.mask.index_select(0, index)
    width = valid_width(mask)
    columns: dict[str, Tensor | list[str]] = {"mask": compact(mask[:, :width])}
    extra = sorted(name for name in inputs.tensors if name.startswith(SEQUENCE_PREFIX))
    for name in (*COLUMN_ORDER, *extra):
        tensor = inputs.tensors.get(name)
        if tensor is not None:
            columns[name] = _stored(name, tensor, index, width)
    group = inputs.group
    if isinstance(group, Tensor):
        columns["group"] = compact(group if index is None else group.index_select(0, index))
    elif group is not None:
        columns["group"] = list(group) if index is None else [group[i] for i in rows.tolist()]
    return Part(columns=columns, units=inputs.units[rows])


def _stored(name: str, tensor: Tensor, index: Tensor | None, width: int) -> Tensor:
    tensor = tensor.detach()
    if index is not None:
        tensor = tensor.index_select(0, index.to(tensor.device))
    if tensor.dim() == 2:
        tensor = tensor[:, :width]
    if name == "correct":
        return compact(tensor.to("cpu") != 0)
    if name in _VERSION_NAMES:
        return compact(tensor.to("cpu", torch.int64))
    if name == "token_ids":
        tensor = tensor.to("cpu")
        fits = tensor.numel() == 0 or (
            int(tensor.min()) >= _INT32.min and int(tensor.max()) <= _INT32.max
        )
        return compact(tensor.to(torch.int32 if fits else torch.int64))
    # float32 halves the bytes of float64 and loses nothing the analyses resolve
    return compact(tensor.to("cpu", torch.float32))


def valid_width(mask: Tensor) -> int:
    """1 + the last column of ``mask`` ([R, T] bool) holding a valid token; at least 1.

    >>> valid_width(torch.tensor([[True, False, False], [True, True, False]]))
    2
    """
    columns = mask.any(dim=0).nonzero()
    return int(columns[-1, 0]) + 1 if columns.numel() else 1


def compact(tensor: Tensor) -> Tensor:
    """``tensor`` with storage of exactly its own size: torch.save writes a view's whole
    underlying storage, so a trimmed or sliced view would store the padding it drops."""
    if (
        tensor.is_contiguous()
        and tensor.storage_offset() == 0
        and tensor.untyped_storage().nbytes() == tensor.nbytes
    ):
        return tensor
    return tensor.clone(memory_format=torch.contiguous_format)
