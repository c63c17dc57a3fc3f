"""slime's debug dumps: train data (v1 and v2) and the rollout dump it joins to.

Verified against THUDM/slime at v0.3.0 (bf14dc21f950), v0.3.1 (a6272da0d4f3) and
624b824a898a (2026-08-21):

* v1, every release up to v0.3.1 (``--save-debug-train-data``, ``slime/utils/
  train_dump_utils.py``): ``{rollout_id}_{rank}.pt`` = ``{"rollout_id", "rank",
  "rollout_data": {...}}`` written by every rank, so tensor-parallel peers write the same
  samples again (same ``sample_indices``). Per-token lists cover the response only.
  ``log_probs`` is the old policy, recomputed before the update (``actor.py``
  ``train_actor``); slime skips that recomputation when one optimizer step uses it, and
  pipeline stages other than the last hold neither it nor ``advantages``. ``rewards`` are
  group-normalised for GRPO by default (``_post_process_rewards``); ``raw_reward`` covers
  the whole rollout, indexed by rollout position, which v1 files do not record.
* v2 (``slime/observability/train_data_utils.py``): ``{"format_version": 2,
  "rollout_id", "rank", "samples": [...], "dp_shards", "raw_reward"}``, one dict per
  sample under the v1 names plus ``sample_index``, ``rollout_position`` and
  ``local_raw_reward``; per-token tensors restored to the whole response.
* The rollout dump (``--save-debug-rollout-data``): ``{"rollout_id", "samples":
  [Sample.to_dict()]}`` with ``group_index``, ``index``, ``reward``; sample j is rollout
  position j. ``--dump-details D`` puts train files in ``D/train_data/`` and rollout
  dumps in ``D/rollout_data/{rollout_id}.pt``, where this reader finds them.
"""

from __future__ import annotations

import hashlib
import pickle
import zipfile
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from ratioscope.data.raw import RawDump
from ratioscope.errors import InputError, SkippedFileError

#: derived columns
RAW_REWARDS = "raw_rewards"
GROUP_INDEX = "group_index"
RESPONSE_TOKENS = "response_tokens"


def unwrap(path: Path, obj: dict[str, Any]) -> dict[str, Any]:
    """The per-sample columns of a slime train dump; other dicts pass unchanged.

    Raises:
        SkippedFileError: ``obj`` is a rollout dump (no trainer log-probs).
    """
    if isinstance(obj.get("rollout_data"), dict):  # v1
        rest = {k: v for k, v in obj.items() if k != "rollout_data"}
        return {**rest, **obj["rollout_data"]}
    samples = obj.get("samples")
    if not (isinstance(samples, list) and samples and isinstance(samples[0], dict)):
        return obj
    if obj.get("format_version") == 2:
        keys = dict.fromkeys(k for sample in samples for k in sample)
        columns = {k: [sample.get(k) for sample in samples] for k in keys}
        # whole-rollout and layout fields are not per sample
        rest = {k: v for k, v in obj.items() if k not in ("samples", "dp_shards", "raw_reward")}
        return {**rest, **columns}
    if "group_index" in samples[0]:
        raise SkippedFileError(
            path,
            "this is a slime rollout dump (--save-debug-rollout-data): the samples' text, "
            "rewards and groups, but no trainer log-probs; ratioscope reads it beside the "
            "train dump of the same rollout (D/rollout_data/ next to D/train_data/) for "
            "groups and raw rewards, and analyses the train dump",
        )
    return obj


def prepare(path: Path, raw: RawDump) -> RawDump:
    """Check the trainer's log-probs, join the rollout dump, derive rewards and groups."""
    columns = raw.columns
    _require_trainer_log_probs(path, columns)
    _check_full_responses(path, columns)
    _response_tokens(columns, raw)
    positions = _positions(path, raw)
    rewards = _raw_rewards(raw, positions)
    if rewards is not None:
        columns[RAW_REWARDS] = rewards
    else:
        raw.warn(
            "slime: no raw rewards: 'rewards' are group-normalised (not a correctness signal) "
            "and a v1 file cannot place itself in the rollout's 'raw_reward' without the "
            "rollout dump; correctness-based sections are left out"
        )
    if GROUP_INDEX not in columns:
        raw.warn(
            "slime: no group ids without the rollout dump (--save-debug-rollout-data, read "
            "from D/rollout_data/ beside D/train_data/); group sections are left out"
        )
    if "sample_indices" in columns and "rollout_position" not in columns:
        # tensor-parallel peers write the same samples: one file of them is analysed
        raw.meta["content_key"] = _content_key(raw.meta.get("rollout_id"), columns)
    return raw


def _require_trainer_log_probs(path: Path, columns: dict[str, Any]) -> None:
    if "log_probs" in columns:
        return
    if "advantages" not in columns:
        raise SkippedFileError(
            path,
            "slime file of a pipeline stage other than the last: no trainer log-probs or "
            "advantages (the last stage's file of the same samples holds them)",
        )
    raise InputError(
        path,
        "this slime train dump holds no trainer log-probs ('log_probs'): slime skips "
        "recomputing the old policy when one optimizer step uses it or with "
        "--use-rollout-logprobs; dump with --get-mismatch-metrics or --keep-old-actor, or "
        "with slime's v2 writer, which records them",
    )


def _check_full_responses(path: Path, columns: dict[str, Any]) -> None:
    """Context-parallel ranks of v1 hold slices of each response, not whole ones."""
    expected = _flat_ints(columns.get("response_lengths"))
    log_probs = columns.get("log_probs")
    if expected is None or not isinstance(log_probs, list):
        return
    for row, (values, n) in enumerate(zip(log_probs, expected, strict=False)):
        if len(values) != n:
            raise InputError(
                path,
                f"'log_probs' of sample {row} has {len(values)} values for a response of {n} "
                "tokens: a context-parallel slice (cp_size > 1); dump with slime's v2 writer, "
                "which restores whole responses",
            )


def _response_tokens(columns: dict[str, Any], raw: RawDump) -> None:
    tokens, counts = columns.get("tokens"), _flat_ints(columns.get("response_lengths"))
    if not isinstance(tokens, list) or counts is None:
        return
    columns[RESPONSE_TOKENS] = [
        t.reshape(-1)[t.numel() - n :] for t, n in zip(tokens, counts, strict=True)
    ]
    raw.ragged.add(RESPONSE_TOKENS)


def _positions(path: Path, raw: RawDump) -> list[int | None] | None:
    """Each sample's position in the rollout (v2 records it; v1 joins on the index), and
    groups from the rollout dump when it can be found."""
    columns = raw.columns
    own = _flat_ints(columns.get("rollout_position"))
    samples = _rollout_samples(path, raw)
    if own is not None:
        positions: list[int | None] | None = list(own)
    elif samples is not None and "sample_indices" in columns:
        where = {s.get("index"): j for j, s in enumerate(samples)}
        positions = [where.get(i) for i in _flat_ints(columns["sample_indices"]) or []]
    else:
        positions = None
    if samples is not None and positions is not None and None not in positions:
        groups = [samples[j].get("group_index") for j in positions if j is not None]
        if all(isinstance(g, int) for g in groups):
            columns[GROUP_INDEX] = groups
            raw.warn(f"slime: groups from the rollout dump of rollout {raw.meta.get('rollout_id')}")
    elif samples is not None:
        raw.warn("slime: the rollout dump does not cover every sample of this file; no groups")
    return positions


def _raw_rewards(raw: RawDump, positions: list[int | None] | None) -> Tensor | None:
    columns = raw.columns
    local = columns.get("local_raw_reward")
    if isinstance(local, Tensor) and local.dim() == 1:
        return local.double()
    whole = columns.get("raw_reward")
    if positions is None or None in positions or not isinstance(whole, Tensor):
        return None
    if max(p for p in positions if p is not None) >= whole.numel():
        return None
    return whole.double()[torch.tensor(positions, dtype=torch.long)]


def _rollout_samples(path: Path, raw: RawDump) -> list[dict[str, Any]] | None:
    """The ``samples`` of the rollout dump of this file's rollout, if it is beside it."""
    rollout_id = raw.meta.get("rollout_id")
    if rollout_id is None:
        return None
    for directory in (path.parent.parent / "rollout_data", path.parent / "rollout_data"):
        candidate = directory / f"{rollout_id}.pt"
        if candidate.is_file():
            from ratioscope.io.limits import check_torch_zip

            check_torch_zip(candidate)  # its storages within the memory budget
            try:
                obj = torch.load(candidate, map_location="cpu", weights_only=True)
            except (pickle.UnpicklingError, RuntimeError, EOFError, OSError, zipfile.BadZipFile):
                raw.warn(
                    f"slime: the rollout dump {candidate} holds objects beyond tensors and "
                    "plain containers (numpy arrays, ...) and is not read"
                )
                return None
            samples = obj.get("samples") if isinstance(obj, dict) else None
            return samples if isinstance(samples, list) else None
    return None


def _flat_ints(value: Any) -> list[int] | None:
    if value is None:
        return None
    if isinstance(value, Tensor):
        return [int(v) for v in value.reshape(-1).tolist()]
    if isinstance(value, list):
        return [int(v.reshape(-1)[0]) if isinstance(v, Tensor) else int(v) for v in value]
    return None


def _content_key(rollout_id: Any, columns: dict[str, Any]) -> str:
    digest = hashlib.sha1(usedforsecurity=False)
    digest.update(repr(rollout_id).encode())
    digest.update(repr(_flat_ints(columns["sample_indices"])).encode())
    return digest.hexdigest()
