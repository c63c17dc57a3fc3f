"""TokenBatch: the canonical, validated tensors of one dump (docs/formats.md).

Every loader ends in :meth:`TokenBatch.from_tensors`, which checks shapes, the mask,
finiteness on valid tokens, shifts left-padded rows to the right, derives ``log_ratio``
and broadcasts ``[B]`` advantages, so every analysis can rely on the same invariants:

* per-token tensors are ``[B, T]``, right-padded, ``mask`` True on valid tokens and
  position 0 of every row holding its first valid token;
* float tensors are float32 or float64 (half precision is upcast), logits keep their
  dtype (they can be large and are upcast chunk by chunk where they are used);
* ``group`` is ``[B]`` int64 with ids 0..G-1 in order of first appearance;
* ``minibatch`` is ``[B]`` int64, the file's own non-negative indices, kept as they are
  (they are ordinal: mini-batch 0 is the first update of its step).
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from ratioscope.data.raw import check_bool_bytes
from ratioscope.errors import (
    DumpKeyError,
    EmptyDumpError,
    InputError,
    MaskError,
    NonFiniteError,
    ShapeMismatchError,
)
from ratioscope.functional import _kernels

#: per-token float tensors [B, T]
TOKEN_FLOAT_KEYS = (
    "log_probs",
    "old_log_probs",
    "log_ratio",
    "ref_log_probs",
    "rollout_log_probs",
    "advantages",
    "entropy",
    "old_entropy",
)
#: per-sequence tensors [B]
SEQUENCE_KEYS = ("rewards", "correct", "group", "minibatch")
#: next-token logits [B, T, V]
VOCAB_KEYS = ("logits", "ref_logits")
#: per-token integers [B, T]: the sampled token, and the version of the policy that sampled
#: it (``policy_version`` may also be per sequence, [B], broadcast over the row)
TOKEN_INT_KEYS = ("token_ids", "policy_version")
CANONICAL_KEYS = ("mask", *TOKEN_FLOAT_KEYS, *TOKEN_INT_KEYS, *SEQUENCE_KEYS, *VOCAB_KEYS)
#: one integer per file: the version of the policy being trained (``policy_version``'s lag
#: is counted from it); a scalar, or a per-sequence column holding one value
SCALAR_KEYS = ("trainer_version",)
#: what the key of one reward function's per-sequence values starts with: ``reward:NAME``
#: (written by ratioscope's captures, e.g. one per TRL reward function); its values are
#: ``TokenBatch.reward_functions[NAME]``
REWARD_FUNCTION_PREFIX = "reward:"

NONFINITE_POLICIES = ("error", "mask")

#: file formats whose columns carry a declared dtype: there a per-token float key stored
#: as integers or booleans is refused (JSON lines write 0 and 0.0 alike, so not there)
TYPED_FORMATS = frozenset({"pt", "pickle", "safetensors", "npz", "parquet"})

#: What the log-ratio z of a batch compares, numerator / denominator (docs/formats.md and
#: docs/formats.md "Which ratio"): the current policy against the trainer's behaviour
#: policy (PPO's ratio), the current policy against the inference engine that sampled
#: (prime-rl: no separate old policy), or the trainer's old policy against the engine
#: (slime, SkyRL, NeMo-RL dumps: the train/inference mismatch alone, no update yet).
RATIO_PAIRS = {
    "current/old": "current policy / behaviour (old) policy",
    "current/engine": "current policy (trainer) / inference engine",
    "old/engine": "old policy (trainer) / inference engine: train/inference mismatch",
}


@dataclass
class TokenBatch:
    """Canonical tensors of one dump (or a chunk of its rows).

    Attributes:
        mask: [B, T] bool, valid tokens, right-padded.
        log_ratio: [B, T] float, log pi_theta - log pi_old (0 where masked).
        log_probs, old_log_probs, ref_log_probs, rollout_log_probs: [B, T] float or None.
        advantages: [B, T] float or None (a [B] input is broadcast over tokens).
        entropy, old_entropy: [B, T] float or None.
        token_ids: [B, T] int64 or None.
        rewards: [B] float or None; correct: [B] bool or None (default rewards > 0).
        reward_functions: reward function name -> [B] float, each function's own values
            where the input keeps them (``reward:NAME`` keys); NaN where the function gave
            no value (TRL's ``None``); empty otherwise.
        group: [B] int64 or None, ids 0..G-1; ``group_labels[g]`` is the original label.
        minibatch: [B] int64 or None, the index of the optimizer update (mini-batch, and
            PPO epoch) of its step that used the row; 0 is the first, on-policy one.
        policy_version: [B, T] int64 or None, the version of the policy that sampled each
            token (async training; a per-sequence input is broadcast over its row).
        trainer_version: the version of the policy being trained, or None (not given).
        logits, ref_logits: [B, T, V] or None.
        source: the file the batch came from; ``profile`` the key layout it was read as;
        ``key_map`` canonical name -> the name in the file; ``padding`` "right" or "left"
        (as found in the file); ``row_offset`` the index of row 0 in the file (chunks);
        ``warnings`` notes produced while loading; ``ratio_pair`` what ``log_ratio``
        compares (a key of :data:`RATIO_PAIRS`).
    """

    mask: Tensor
    log_ratio: Tensor
    log_probs: Tensor | None = None
    old_log_probs: Tensor | None = None
    ref_log_probs: Tensor | None = None
    rollout_log_probs: Tensor | None = None
    advantages: Tensor | None = None
    entropy: Tensor | None = None
    old_entropy: Tensor | None = None
    token_ids: Tensor | None = None
    rewards: Tensor | None = None
    correct: Tensor | None = None
    group: Tensor | None = None
    minibatch: Tensor | None = None
    policy_version: Tensor | None = None
    logits: Tensor | None = None
    ref_logits: Tensor | None = None
    reward_functions: dict[str, Tensor] = field(default_factory=dict)
    group_labels: list[Any] | None = None
    source: str = "<memory>"
    profile: str = "canonical"
    file_format: str = "tensors"
    key_map: dict[str, str] = field(default_factory=dict)
    ignored_keys: list[str] = field(default_factory=list)
    padding: str = "right"
    row_offset: int = 0
    warnings: list[str] = field(default_factory=list)
    ratio_pair: str = "current/old"
    trainer_version: int | None = None
    #: files with equal keys hold the same samples (a framework's rank copies)
    content_key: str | None = None

    # ------------------------------------------------------------------ queries
    @property
    def num_sequences(self) -> int:
        return int(self.mask.shape[0])

    @property
    def max_length(self) -> int:
        return int(self.mask.shape[1])

    @property
    def lengths(self) -> Tensor:
        """[B] int64, number of valid tokens per row."""
        return _kernels.row_lengths(self.mask)

    @property
    def num_tokens(self) -> int:
        return int(_kernels.row_lengths(self.mask).sum())

    @property
    def device(self) -> torch.device:
        return self.mask.device

    def has(self, name: str) -> bool:
        return getattr(self, name, None) is not None

    def available(self) -> list[str]:
        """Canonical names present in this batch."""
        return [name for name in CANONICAL_KEYS if self.has(name)]

    def display_name(self, canonical: str) -> str:
        """The key as the user's file calls it, for messages."""
        theirs = self.key_map.get(canonical, canonical)
        return canonical if theirs == canonical else f"{theirs}' ('{canonical}"

    # ------------------------------------------------------------- transforms
    def _tensor_fields(self) -> Iterator[tuple[str, Tensor]]:
        for name in CANONICAL_KEYS:
            value = getattr(self, name)
            if value is not None:
                yield name, value

    def select_rows(self, start: int, stop: int) -> TokenBatch:
        """Rows ``start:stop`` as a new batch sharing storage (views)."""
        # Any: mypy cannot match the canonical names to the dataclass fields
        updates: dict[str, Any] = {name: value[start:stop] for name, value in self._tensor_fields()}
        functions = {name: value[start:stop] for name, value in self.reward_functions.items()}
        return replace(
            self,
            **updates,
            reward_functions=functions,
            row_offset=self.row_offset + start,
            warnings=[],
        )

    def iter_chunks(self, rows: int) -> Iterator[TokenBatch]:
        """Consecutive row chunks of at most ``rows`` rows."""
        rows = max(1, int(rows))
        for start in range(0, self.num_sequences, rows):
            yield self.select_rows(start, min(start + rows, self.num_sequences))

    def to(self, device: torch.device | str) -> TokenBatch:
        """Move every tensor to ``device`` (no copy when already there)."""
        device = torch.device(device)
        if self.device == device:
            return self
        # non-blocking only towards the GPU: a copy back to the host could be read early
        non_blocking = device.type == "cuda"
        updates: dict[str, Any] = {
            name: value.to(device, non_blocking=non_blocking)
            for name, value in self._tensor_fields()
        }
        functions = {
            name: value.to(device, non_blocking=non_blocking)
            for name, value in self.reward_functions.items()
        }
        return replace(self, **updates, reward_functions=functions)

    # ------------------------------------------------------------ construction
    @classmethod
    def from_tensors(
        cls,
        tensors: Mapping[str, Any],
        *,
        source: str | Path = "<memory>",
        profile: str = "canonical",
        file_format: str = "tensors",
        key_map: Mapping[str, str] | None = None,
        ignored_keys: Sequence[str] = (),
        nonfinite: str = "error",
        expected_names: Mapping[str, str] | None = None,
        file_keys: Sequence[str] | None = None,
        default_correct: bool = True,
    ) -> TokenBatch:
        """Validate canonical tensors and build a batch.

        Args:
            tensors: canonical name -> tensor (``group`` may also be a list of str/int);
                ``reward:NAME`` -> [B] values of one reward function.
            source: file name used in error messages.
            key_map: canonical -> name in the file, so errors name the user's key.
            nonfinite: "error" raises on NaN/inf at valid tokens; "mask" masks them and
                records a warning.
            expected_names: canonical -> the name the file's layout would use, for
                messages about keys that are missing.
            file_keys: every key of the file, listed when a required one is missing.
            default_correct: without ``correct``, decide it (``rewards > 0``, or the 0/1
                function of several: :func:`correctness_function`); False where the
                caller decided it for a whole file (the loaders: a chunk of a streamed
                file must not decide alone).

        Raises:
            DumpKeyError, ShapeMismatchError, MaskError, NonFiniteError, EmptyDumpError.
        """
        builder = _Builder(tensors, str(source), dict(key_map or {}), nonfinite)
        builder.default_correct = default_correct
        builder.expected = dict(expected_names or {})
        builder.file_keys = list(file_keys) if file_keys is not None else None
        return builder.build(
            profile=profile, file_format=file_format, ignored_keys=list(ignored_keys)
        )


class _Builder:
    """The validation steps of :meth:`TokenBatch.from_tensors`, one method each."""

    def __init__(
        self, tensors: Mapping[str, Any], source: str, key_map: dict[str, str], nonfinite: str
    ) -> None:
        if nonfinite not in NONFINITE_POLICIES:
            raise ValueError(f"nonfinite must be one of {NONFINITE_POLICIES}")
        self.raw = {k: v for k, v in tensors.items() if v is not None}
        # the readers check their columns; tensors handed in directly are checked here
        check_bool_bytes(source, self.raw)
        self.source = source
        self.key_map = key_map
        self.nonfinite = nonfinite
        self.warnings: list[str] = []
        self.default_correct = True
        self.expected: dict[str, str] = {}
        self.file_keys: list[str] | None = None
        self.typed = False

    def name(self, canonical: str) -> str:
        return self.key_map.get(canonical, self.expected.get(canonical, canonical))

    def found(self) -> list[str]:
        if self.file_keys is not None:
            return self.file_keys
        return [self.name(k) for k in self.raw]

    # --- steps -------------------------------------------------------------
    def build(self, profile: str, file_format: str, ignored_keys: list[str]) -> TokenBatch:
        self.typed = file_format in TYPED_FORMATS
        mask = self.mask()
        pair = self.ratio_pair()
        values = self.token_tensors(mask.shape)
        sequence_values, labels = self.sequence_tensors(mask.shape[0])
        functions = self.reward_function_tensors(mask.shape[0])
        vocab = self.vocab_tensors(mask.shape)
        self.check_token_range(mask, values, vocab)
        mask = self.check_vocab_finite(mask, vocab)
        padding = "right"
        offsets = _leading_invalid(mask)
        checked = self.derive_checked(mask, values, pair, offsets)
        if checked is not None:  # right-padded, every valid value finite
            values = checked
            mask = self.check_sequences_finite(mask, sequence_values, functions, values)
        else:
            # Finiteness is checked before any shift so that reported positions are the
            # file's.
            mask = self.check_finite(mask, values, sequence_values, functions)
            offsets = _leading_invalid(mask)
            if bool((offsets > 0).any()):
                padding = "left"
                mask, values, vocab = _shift_left(mask, offsets, values, vocab)
            values = self.derive(mask, values, pair)
        rewards = sequence_values.get("rewards")
        if sequence_values.get("correct") is None and rewards is not None and self.default_correct:
            if len(functions) < 2:
                sequence_values["correct"] = rewards > 0
            else:
                chosen, note = correctness_function(functions)
                self.warnings.append(note)
                if chosen is not None:
                    sequence_values["correct"] = functions[chosen] == 1
        if not _kernels.any_true(mask):
            raise EmptyDumpError(self.source, "the mask marks no valid token")
        trainer_version = self.trainer_version(mask.shape[0])
        self.check_lags(mask, values.get("policy_version"), trainer_version)
        # the three key sets are disjoint; Any because mypy cannot match names to fields
        tensors: dict[str, Any] = {**values, **sequence_values, **vocab}
        return TokenBatch(
            mask=mask,
            **tensors,
            reward_functions=functions,
            group_labels=labels,
            source=self.source,
            profile=profile,
            file_format=file_format,
            key_map=dict(self.key_map),
            ignored_keys=ignored_keys,
            padding=padding,
            warnings=self.warnings,
            ratio_pair=pair,
            trainer_version=trainer_version,
        )

    def require(self, canonical: str, hint: str = "") -> Any:
        if canonical not in self.raw:
            theirs = self.name(canonical)
            if theirs != canonical:
                hint = f"canonical '{canonical}'" + (f"; {hint}" if hint else "")
            raise DumpKeyError(self.source, theirs, self.found(), hint)
        return self.raw[canonical]

    def as_tensor(self, canonical: str, value: Any) -> Tensor:
        if isinstance(value, Tensor):
            return value
        try:
            return torch.as_tensor(value)
        except (TypeError, ValueError, RuntimeError):
            raise InputError(
                self.source, f"'{self.name(canonical)}' is not a numeric tensor"
            ) from None

    def mask(self) -> Tensor:
        mask = self.as_tensor("mask", self.require("mask"))
        if mask.dim() != 2:
            raise InputError(
                self.source,
                f"'{self.name('mask')}' must be 2-D [sequences, tokens], got shape "
                f"{list(mask.shape)}",
            )
        if mask.numel() == 0:
            raise EmptyDumpError(
                self.source,
                f"the mask marks no valid token (its shape is {list(mask.shape)})",
            )
        if mask.dtype == torch.bool:
            return mask
        if mask.is_complex():
            raise MaskError(self.source, f"'{self.name('mask')}' has dtype {mask.dtype}")
        bad = ~((mask == 0) | (mask == 1))
        if bool(bad.any()):
            index = tuple(int(i) for i in bad.nonzero()[0])
            value = mask[index].item()
            raise MaskError(
                self.source,
                f"'{self.name('mask')}' is not boolean-like: it holds {value!r} at "
                f"(row, column) = {index}, expected only 0/1 or True/False",
            )
        return mask != 0

    def ratio_pair(self) -> str:
        """Which two log-probs form z (see :data:`RATIO_PAIRS`), from what is present."""
        present = {k for k in ("log_probs", "old_log_probs", "rollout_log_probs") if k in self.raw}
        if "log_ratio" in self.raw or {"log_probs", "old_log_probs"} <= present:
            return "current/old"
        if {"log_probs", "rollout_log_probs"} <= present:
            return "current/engine"
        if {"old_log_probs", "rollout_log_probs"} <= present:
            return "old/engine"
        missing = "old_log_probs" if "log_probs" in present else "log_probs"
        self.require(
            missing,
            "the importance ratio needs two of 'log_probs', 'old_log_probs' and "
            "'rollout_log_probs', or 'log_ratio'",
        )
        raise AssertionError("unreachable: require raised")

    def token_tensors(self, shape: torch.Size) -> dict[str, Tensor]:
        values: dict[str, Tensor] = {}
        for key in TOKEN_FLOAT_KEYS:
            if key not in self.raw:
                continue
            tensor = self.as_tensor(key, self.raw[key])
            self.check_floating(key, tensor)
            if key == "advantages" and tensor.dim() == 1 and tensor.shape[0] == shape[0]:
                tensor = tensor[:, None].expand(shape)
            expected = "[sequences, tokens] like the mask"
            if key == "advantages":
                expected += ", or [sequences]"
            self.check_shape(key, tensor, shape, expected)
            values[key] = _as_float(tensor)
        if "token_ids" in self.raw:
            ids = self.as_tensor("token_ids", self.raw["token_ids"])
            self.check_shape("token_ids", ids, shape, "[sequences, tokens] like the mask")
            if ids.is_floating_point() and not bool(
                (torch.where(_raw_mask(self.raw, ids), ids, 0.0).frac() == 0).all()
            ):
                raise InputError(self.source, f"'{self.name('token_ids')}' must hold integers")
            values["token_ids"] = ids.long()
        if "policy_version" in self.raw:
            values["policy_version"] = self.versions(self.raw["policy_version"], shape)
        return values

    def versions(self, raw: Any, shape: torch.Size) -> Tensor:
        """[B, T] int64 policy versions: integers >= 0 at valid tokens, per token or per
        sequence (broadcast); prompt and padding positions may hold anything (AReaL
        writes -1 and 0 there)."""
        name = self.name("policy_version")
        tensor = self.as_tensor("policy_version", raw)
        if tensor.dim() == 1 and tensor.shape[0] == shape[0]:
            tensor = tensor[:, None].expand(shape)
        self.check_shape(
            "policy_version", tensor, shape, "[sequences, tokens] like the mask, or [sequences]"
        )
        if tensor.dtype == torch.bool or tensor.is_complex():
            raise InputError(
                self.source, f"'{name}' must hold integer versions, not {tensor.dtype}"
            )
        valid = _raw_mask(self.raw, tensor)
        if tensor.is_floating_point():
            # parquet/jsonl columns with nulls arrive as floats: whole numbers, no NaN
            bad = valid & ~(torch.isfinite(tensor) & (tensor.frac() == 0))
            if bool(bad.any()):
                first = tuple(int(i) for i in bad.nonzero()[0])
                raise InputError(
                    self.source,
                    f"'{name}' must hold an integer version at every valid token; it holds "
                    f"{tensor[first].item()!r} at (row, column) = {first}",
                )
            tensor = torch.where(valid, tensor, 0.0)
        versions = tensor.long()
        negative = valid & (versions < 0)
        if bool(negative.any()):
            first = tuple(int(i) for i in negative.nonzero()[0])
            raise InputError(
                self.source,
                f"'{name}' must hold versions >= 0 at valid tokens; it holds "
                f"{int(versions[first])} at (row, column) = {first}",
            )
        return versions

    def trainer_version(self, rows: int) -> int | None:
        """The file's ``trainer_version``: a number, a one-element tensor, or a
        per-sequence column whose rows all hold the same integer >= 0."""
        if "trainer_version" not in self.raw:
            return None
        name = self.name("trainer_version")
        tensor = self.as_tensor("trainer_version", self.raw["trainer_version"]).flatten()
        if tensor.numel() != 1 and tensor.numel() != rows:
            raise InputError(
                self.source,
                f"'{name}' must be one number, or one per sequence, not {tensor.numel()} "
                f"values for {rows} sequences",
            )
        values = {float(v) for v in tensor.double().unique().tolist()}
        if len(values) != 1:
            shown = ", ".join(f"{v:g}" for v in sorted(values)[:3])
            raise InputError(
                self.source, f"'{name}' must be the same for every sequence; it holds {shown}"
            )
        (value,) = values
        whole = math.isfinite(value) and value == int(value)
        if tensor.dtype == torch.bool or not whole or value < 0:
            raise InputError(
                self.source, f"'{name}' must be an integer version >= 0, not {value:g}"
            )
        return int(value)

    def check_lags(self, mask: Tensor, versions: Tensor | None, trainer: int | None) -> None:
        """No valid token was sampled by a policy newer than the one being trained."""
        if versions is None or trainer is None:
            return
        newer = mask & (versions > trainer)
        if bool(newer.any()):
            first = tuple(int(i) for i in newer.nonzero()[0])
            raise InputError(
                self.source,
                f"'{self.name('policy_version')}' holds version {int(versions[first])} at "
                f"(row, column) = {first}, newer than the version being trained "
                f"('{self.name('trainer_version')}' = {trainer})",
            )

    def check_floating(self, key: str, tensor: Tensor) -> None:
        """A typed file's log-probs, advantages and entropies are floating point: an
        integer dtype means the writer cast them, or the header names the wrong dtype
        for float bytes, and their numbers would be read as something else."""
        if self.typed and not tensor.is_floating_point():
            kind = str(tensor.dtype).removeprefix("torch.")
            raise InputError(
                self.source,
                f"'{self.name(key)}' is stored as {kind}, not as floating-point numbers: "
                "log-probs, log-ratios, advantages and entropies must be float16, bfloat16, "
                "float32 or float64",
            )

    def check_shape(self, key: str, tensor: Tensor, shape: Sequence[int], expected: str) -> None:
        if tuple(tensor.shape) != tuple(shape):
            raise ShapeMismatchError(
                self.source, self.name(key), tensor.shape, self.name("mask"), shape, expected
            )

    def sequence_tensors(self, rows: int) -> tuple[dict[str, Tensor], list[Any] | None]:
        values: dict[str, Tensor] = {}
        labels = None
        for key in ("rewards", "correct"):
            if key in self.raw:
                tensor = self.as_tensor(key, self.raw[key])
                self.check_shape(key, tensor, (rows,), "one value per sequence")
                values[key] = tensor.bool() if key == "correct" else _as_float(tensor)
        if "group" in self.raw:
            ids, labels = self.group_ids(self.raw["group"])
            self.check_shape("group", ids, (rows,), "one id per sequence")
            values["group"] = ids
        if "minibatch" in self.raw:
            values["minibatch"] = self.minibatch_indices(self.raw["minibatch"], rows)
        return values, labels

    def reward_function_tensors(self, rows: int) -> dict[str, Tensor]:
        """``reward:NAME`` -> [B] float: one number per sequence each (booleans as 0/1);
        NaN means the function gave no value (checked with the other sequence values in
        :meth:`check_finite`, where an infinite one is refused)."""
        functions: dict[str, Tensor] = {}
        for key in sorted(k for k in self.raw if k.startswith(REWARD_FUNCTION_PREFIX)):
            name = key[len(REWARD_FUNCTION_PREFIX) :]
            tensor = self.as_tensor(key, self.raw[key])
            if not name or tensor.is_complex():
                raise InputError(
                    self.source,
                    f"'{self.name(key)}' is not a reward function's values: a key "
                    f"'{REWARD_FUNCTION_PREFIX}NAME' holds one real number per sequence",
                )
            self.check_shape(key, tensor, (rows,), "one value per sequence")
            functions[name] = _as_float(tensor)
        return functions

    def group_ids(self, raw: Any) -> tuple[Tensor, list[Any]]:
        """Map any labels (ints, strings) to ids 0..G-1 in order of first appearance."""
        if isinstance(raw, Tensor):
            if raw.is_floating_point():
                raw = self.integral_ids(raw)
            items = raw.reshape(-1).tolist() if raw.dim() == 1 else None
            if items is None:
                raise ShapeMismatchError(
                    self.source,
                    self.name("group"),
                    raw.shape,
                    self.name("mask"),
                    self.raw["mask"].shape,
                    "one id per sequence",
                )
        else:
            items = list(raw)
            missing = [i for i, item in enumerate(items) if item is None or item == ""]
            if missing:
                raise InputError(
                    self.source,
                    f"'{self.name('group')}' has no id for {len(missing)} sequence(s), the "
                    f"first at row {missing[0]}",
                )
        index: dict[Any, int] = {}
        ids = [index.setdefault(item, len(index)) for item in items]
        return torch.tensor(ids, dtype=torch.long), list(index)

    def integral_ids(self, raw: Tensor) -> Tensor:
        """Group ids stored as floats (parquet/jsonl with nulls): whole numbers, no NaN."""
        missing = torch.isnan(raw).nonzero()
        if missing.numel():
            raise InputError(
                self.source,
                f"'{self.name('group')}' has no id for {missing.shape[0]} sequence(s), the "
                f"first at row {int(missing[0, 0])}",
            )
        if not bool((raw.frac() == 0).all()):
            raise InputError(self.source, f"'{self.name('group')}' must hold integer ids")
        return raw.long()

    def minibatch_indices(self, raw: Any, rows: int) -> Tensor:
        """[B] int64 mini-batch indices: integers >= 0, one per sequence, as in the file.

        Unlike group ids they are not renumbered: their order is the order of the
        updates (staleness), which the ``staleness`` section reports by index.
        """
        name = self.name("minibatch")
        tensor = self.as_tensor("minibatch", raw)
        self.check_shape("minibatch", tensor, (rows,), "one index per sequence")
        if tensor.dtype == torch.bool or tensor.is_complex():
            raise InputError(self.source, f"'{name}' must hold integer indices, not {tensor.dtype}")
        if tensor.is_floating_point():
            # parquet/jsonl columns with nulls arrive as floats: whole numbers, no NaN
            missing = torch.isnan(tensor).nonzero()
            if missing.numel():
                raise InputError(
                    self.source,
                    f"'{name}' has no index for {missing.shape[0]} sequence(s), the first at "
                    f"row {int(missing[0, 0])}",
                )
            if not bool((tensor.frac() == 0).all()):
                raise InputError(self.source, f"'{name}' must hold integer indices")
        indices = tensor.long()
        negative = (indices < 0).nonzero()
        if negative.numel():
            row = int(negative[0, 0])
            raise InputError(
                self.source,
                f"'{name}' must hold indices >= 0; it holds {int(indices[row])} at row {row}",
            )
        return indices

    def vocab_tensors(self, shape: torch.Size) -> dict[str, Tensor]:
        values = {}
        for key in VOCAB_KEYS:
            if key not in self.raw:
                continue
            tensor = self.as_tensor(key, self.raw[key])
            if tensor.dim() != 3 or tuple(tensor.shape[:2]) != tuple(shape):
                raise ShapeMismatchError(
                    self.source,
                    self.name(key),
                    tensor.shape,
                    self.name("mask"),
                    shape,
                    "[sequences, tokens, vocabulary]",
                )
            if not tensor.is_floating_point():
                raise InputError(self.source, f"'{self.name(key)}' must hold floats")
            values[key] = tensor
        if values and "token_ids" not in self.raw:
            self.warnings.append(
                f"{self.source}: logits are present but 'token_ids' is not, so the exact "
                "future-policy log-probs cannot be read out of them"
            )
        return values

    def check_token_range(
        self, mask: Tensor, values: dict[str, Tensor], vocab: dict[str, Tensor]
    ) -> None:
        """Token ids on valid tokens index the logits' vocabulary: 0 <= id < V (they are
        gathered from the logits by index, where an id past the end is a wild read)."""
        ids = values.get("token_ids")
        if ids is None or not vocab:
            return
        size = next(iter(vocab.values())).shape[-1]
        bad = mask & ((ids < 0) | (ids >= size))
        if bool(bad.any()):
            first = tuple(int(i) for i in bad.nonzero()[0])
            raise InputError(
                self.source,
                f"'{self.name('token_ids')}' holds {int(ids[first])} at (row, column) = "
                f"{first}, outside the logits' vocabulary of {size}",
            )

    def check_vocab_finite(self, mask: Tensor, vocab: Mapping[str, Tensor]) -> Tensor:
        """Logits [B, T, V] at valid tokens whose softmax is defined: no NaN, no +inf, not
        every entry -inf (a -inf entry alone is a token ruled out, as top-k sampling
        leaves it). A bad token is refused, or masked with ``nonfinite="mask"``.

        Returns:
            [B, T] the mask, less the masked tokens.
        """
        for key, logits in vocab.items():
            if bool(torch.isfinite(logits.sum())):
                continue  # the usual case: every entry finite, from one sum
            # row by row: a [T, V] bool at a time, not the whole [B, T, V]
            bad = torch.stack(
                [(row.isnan().any(-1) | (row == math.inf).any(-1) | (row == -math.inf).all(-1))
                 for row in logits]
            ) & mask  # fmt: skip
            mask = self.refuse_or_mask(mask, bad, key, "NaN, +inf or all -inf; ")
        return mask

    def refuse_or_mask(self, mask: Tensor, bad: Tensor, key: str, what: str = "") -> Tensor:
        """The valid tokens ``bad`` [B, T] of ``key`` that are not finite: refused with
        ``nonfinite="error"`` (the count and the first position), else masked and told.

        Returns:
            [B, T] the mask, less ``bad``.
        """
        count = int(bad.sum())
        if count == 0:
            return mask
        first = tuple(int(i) for i in bad.nonzero()[0])
        if self.nonfinite == "error":
            raise NonFiniteError(self.source, self.name(key), count, first)
        self.warnings.append(
            f"{self.source}: masked {count} token(s) with non-finite '{self.name(key)}' "
            f"({what}first at (row, column) = {first})"
        )
        return mask & ~bad

    def check_finite(
        self,
        mask: Tensor,
        values: dict[str, Tensor],
        sequence_values: dict[str, Tensor],
        functions: Mapping[str, Tensor] | None = None,
    ) -> Tensor:
        for key, tensor in values.items():
            if key in TOKEN_INT_KEYS:
                continue
            # the usual case, everything finite, from one sum (inf and NaN propagate; a
            # finite sum rules them out); a sum that overflows takes the full check
            if bool(torch.isfinite(tensor.sum())):
                continue
            mask = self.refuse_or_mask(mask, ~torch.isfinite(tensor) & mask, key)
        return self.check_sequences_finite(mask, sequence_values, functions)

    def check_sequences_finite(
        self,
        mask: Tensor,
        sequence_values: dict[str, Tensor],
        functions: Mapping[str, Tensor] | None = None,
        derived: dict[str, Tensor] | None = None,
    ) -> Tensor:
        """:meth:`check_finite`'s check of the rewards and reward functions: ``mask`` with
        the rows of a non-finite reward masked (or the error naming them). ``derived``
        (already zeroed on ``mask``): zeroed again, in place, on rows masked here."""
        rewards = sequence_values.get("rewards")
        used = _kernels.row_lengths(mask) > 0
        bad_rows = torch.zeros_like(used)
        if rewards is not None:
            bad_rows = ~torch.isfinite(rewards) & used
            self.refuse_nonfinite("rewards", bad_rows, "non-finite")
        for name, function in (functions or {}).items():
            # NaN is a function's missing value (TRL: it returned None); inf is an error
            infinite = torch.isinf(function) & used
            self.refuse_nonfinite(f"{REWARD_FUNCTION_PREFIX}{name}", infinite, "infinite")
            bad_rows = bad_rows | infinite
        count = int(bad_rows.sum())
        if count:
            first_row = int(bad_rows.nonzero()[0, 0])
            mask = mask & ~bad_rows[:, None]
            self.warnings.append(
                f"{self.source}: masked {count} sequence(s) with a non-finite reward "
                f"(first at row {first_row})"
            )
            if derived is not None:
                for key in list(derived):
                    derived[key] = _masked_zero(derived[key], mask)
        return mask

    def refuse_nonfinite(self, key: str, bad_rows: Tensor, what: str) -> None:
        """With ``nonfinite="error"``, the sentence naming the rows of ``key`` that hold a
        ``what`` value (the "mask" policy masks those rows instead)."""
        count = int(bad_rows.sum())
        if count and self.nonfinite == "error":
            first_row = int(bad_rows.nonzero()[0, 0])
            raise InputError(
                self.source,
                f"'{self.name(key)}' has {count} {what} value(s), the first at row "
                f"{first_row}; fix the dump or set `nonfinite` to 'mask'",
            )

    def derive(self, mask: Tensor, values: dict[str, Tensor], pair: str) -> dict[str, Tensor]:
        _add_log_ratio(values, pair)
        # Masked positions may hold padding garbage (even NaN); zero them once here so
        # every downstream reduction can multiply by the mask safely.
        return {key: _masked_zero(tensor, mask) for key, tensor in values.items()}

    def derive_checked(
        self, mask: Tensor, values: dict[str, Tensor], pair: str, offsets: Tensor
    ) -> dict[str, Tensor] | None:
        """:meth:`derive`'s tensors, the finiteness of every valid value counted in the
        same compiled read, where that decides everything: rows that start at a valid
        token (``offsets`` [B], :func:`_leading_invalid`, all 0) and CPU tensors the
        kernel takes. None where it does not, or where a valid value is inf or NaN: the
        caller then checks, shifts and derives step by step (the usual case, a finite
        right-padded dump, reads each tensor once instead of twice)."""
        dtypes = (*_kernels.FLOAT_DTYPES, torch.int64)
        if bool((offsets > 0).any()) or not _kernels.can_take(
            *values.values(), mask=mask, dtypes=dtypes
        ):
            return None
        derived = dict(values)
        flags = mask.numpy()
        made: dict[str, Tensor] = {}
        if "log_ratio" not in derived:
            numerator, denominator = _RATIO_OPERANDS[pair]
            if derived[numerator].dtype != derived[denominator].dtype:
                _add_log_ratio(derived, pair)  # torch promotes one to the other's dtype
            else:  # made, zeroed and checked in one compiled read
                ratio, nonfinite = _kernels.masked_difference_counting(
                    derived[numerator].numpy(), derived[denominator].numpy(), flags
                )
                if nonfinite:
                    return None
                made["log_ratio"] = torch.from_numpy(ratio)
        if "log_ratio" in derived and not _kernels.can_take(derived["log_ratio"], mask=mask):
            return None
        out: dict[str, Tensor] = {}
        for key, tensor in derived.items():
            if key in TOKEN_INT_KEYS or tensor.dtype == torch.int64:
                out[key] = torch.from_numpy(_kernels.masked_zero(tensor.numpy(), flags))
                continue
            zeroed, nonfinite = _kernels.masked_zero_counting(tensor.numpy(), flags)
            if nonfinite:
                return None
            out[key] = torch.from_numpy(zeroed)
        return {**out, **made}


def _add_log_ratio(values: dict[str, Tensor], pair: str) -> None:
    """The log-ratio of ``pair``'s two log-probs into ``values``, unless the dump has
    one."""
    if "log_ratio" not in values:
        numerator, denominator = _RATIO_OPERANDS[pair]
        values["log_ratio"] = values[numerator] - values[denominator]


#: the two log-probs whose difference is the log-ratio of each ratio pair
_RATIO_OPERANDS = {
    "current/old": ("log_probs", "old_log_probs"),
    "current/engine": ("log_probs", "rollout_log_probs"),
    "old/engine": ("old_log_probs", "rollout_log_probs"),
}


def _masked_zero(tensor: Tensor, mask: Tensor) -> Tensor:
    """``tensor`` where ``mask``, else 0, as a new tensor: one compiled loop for [B, T]
    CPU tensors of the common dtypes (``torch.where`` costs about 6 ns an element)."""
    dtypes = (*_kernels.FLOAT_DTYPES, torch.int64)
    if not _kernels.can_take(tensor, mask=mask, dtypes=dtypes):
        return torch.where(mask, tensor, torch.zeros((), dtype=tensor.dtype))
    return torch.from_numpy(_kernels.masked_zero(tensor.numpy(), mask.numpy()))


def _raw_mask(raw: Mapping[str, Any], like: Tensor) -> Tensor:
    """The raw mask as bool (for checks that run before validation finishes)."""
    mask = raw.get("mask")
    if isinstance(mask, Tensor) and mask.shape == like.shape:
        return mask != 0
    return torch.ones_like(like, dtype=torch.bool)


def _as_float(tensor: Tensor) -> Tensor:
    if tensor.dtype in (torch.float32, torch.float64):
        return tensor
    return tensor.float()


def correctness_function(functions: Mapping[str, Tensor]) -> tuple[str | None, str]:
    """Of several reward functions (name -> [B] values, NaN: none), the one that decides
    ``correct`` when nothing else does, and the warning that says so.

    ``rewards > 0`` counts every rollout a shaping reward (a format bonus, a length
    reward) pays as a success, so the function that scores 0 or 1 decides (its value 1
    is correct); of several such, the one named like a verifier (``correct``,
    ``accura``: TRL's examples name theirs ``accuracy_reward``, ``correctness_reward_func``).
    None, with the warning naming ``correct_field``, where none or more than one is left.

    >>> import torch
    >>> correctness_function({"accuracy": torch.tensor([1.0, 0.0]),
    ...                       "length": torch.tensor([0.5, 0.25])})[0]
    'accuracy'
    """
    binary = [name for name, values in functions.items() if _is_binary(values)]
    if len(binary) > 1:
        binary = [name for name in binary if _names_a_verifier(name)]
    names = ", ".join(f"'{name}'" for name in functions)
    if len(binary) != 1:
        return None, (
            f"correct: the dumps keep several reward functions ({names}) and no 'correct', "
            f"and {'none' if not binary else 'more than one'} of them scores 0 or 1 alone: "
            "no correct share; `correct_field` names the function that decides correctness"
        )
    return binary[0], (
        f"correct: the dumps keep several reward functions ({names}) and no 'correct': a "
        f"sequence is correct when the 0/1 function '{binary[0]}' gives it 1 (rewards > 0 "
        "would count the others' rewards as success); `correct_field` names another"
    )


def _is_binary(values: Tensor) -> bool:
    """Whether a reward function gives at least one value and every value it gives
    (NaN: none) is exactly 0 or 1."""
    given = values[~torch.isnan(values)]
    return bool(given.numel()) and bool(((given == 0) | (given == 1)).all())


#: words in a reward function's name that mark it as the verifier's (TRL's examples name
#: theirs ``accuracy_reward``, ``correctness_reward_func``)
_VERIFIER_WORDS = ("correct", "accura")


def _names_a_verifier(name: str) -> bool:
    return any(word in name.lower() for word in _VERIFIER_WORDS)


def _leading_invalid(mask: Tensor) -> Tensor:
    """[B] number of masked positions before the first valid token (0 for empty rows)."""
    return _kernels.first_valid(mask)


def _shift_left(
    mask: Tensor, offsets: Tensor, values: dict[str, Tensor], vocab: dict[str, Tensor]
) -> tuple[Tensor, dict[str, Tensor], dict[str, Tensor]]:
    """Move each row left by its leading padding, so position 0 is the first valid token.

    Causal filters index tokens from the first valid one; left padding (or an untrained
    prompt) would otherwise feed them spurious zero observations.
    """
    rows, width = mask.shape
    positions = torch.arange(width, device=mask.device)[None, :] + offsets[:, None]
    inside = positions < width
    index = positions.clamp(max=width - 1)
    new_mask = torch.gather(mask, 1, index) & inside
    shifted = {key: torch.gather(t.contiguous(), 1, index) for key, t in values.items()}
    shifted_vocab = {
        key: torch.gather(t, 1, index[:, :, None].expand(rows, width, t.shape[2]))
        for key, t in vocab.items()
    }
    return new_mask, shifted, shifted_vocab
