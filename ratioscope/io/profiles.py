"""Framework profiles: how verl, TRL, prime-rl and slime name the canonical tensors.

A profile maps canonical names (docs/formats.md) to the keys a framework writes, and says
how to reduce a per-token column to the per-sequence value ratioscope wants (verl
stores the reward on the last response token of ``token_level_scores``). Profiles are
detected from the keys; canonical names are accepted in every profile.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from ratioscope.errors import ParameterError


@dataclass(frozen=True)
class Profile:
    """A framework's key layout.

    Attributes:
        name: profile name used by ``--format``.
        keys: canonical name -> candidate keys in this framework, first match wins.
        signature: keys whose presence identifies the framework.
        reducers: canonical per-sequence name -> "sum" or "last", applied when the file
            stores that quantity per token (e.g. verl's ``token_level_scores``).
        description: one line for ``info`` and the docs.
        native: module of :mod:`ratioscope.io.frameworks` whose ``prepare`` reads what
            the framework means by its columns (groups, trained tokens), or None.
        groups: how this layout's GRPO groups are formed, or why there are none (for
            ``info`` and the docs).
        consecutive_rows: whether a file's rows can be consecutive groups, so that
            ``--group-size`` means something (TRL shuffles its loss inputs).
        shadowed: canonical names that this framework uses for something else (slime's
            group-normalised ``rewards``), never read as the canonical quantity.
        mask_factors: keys that, when the file has them, multiply the mask (TRL's
            ``tool_mask``: the loss is ``completion_mask * tool_mask``).
        prompt_in_rows: whether a row holds the prompt before the response, so that its
            padded width is prompt and response (no response length limit).
    """

    name: str
    keys: Mapping[str, tuple[str, ...]]
    signature: tuple[str, ...]
    reducers: Mapping[str, str] = field(default_factory=dict)
    description: str = ""
    native: str | None = None
    groups: str = ""
    consecutive_rows: bool = True
    shadowed: tuple[str, ...] = ()
    mask_factors: tuple[str, ...] = ()
    prompt_in_rows: bool = False


CANONICAL = Profile(
    name="canonical",
    keys={},
    signature=(),
    # per-token rewards: the value at the last valid token (a constant row gives that
    # constant; a reward placed on the last token gives that reward)
    reducers={"rewards": "last", "correct": "last"},
    description="ratioscope's own names",
    groups="from 'group'",
)

VERL = Profile(
    name="verl",
    keys={
        "mask": ("response_mask",),
        "old_log_probs": ("old_log_probs",),
        "log_probs": ("log_probs",),
        "ref_log_probs": ("ref_log_prob",),
        "rollout_log_probs": ("rollout_log_probs",),
        "advantages": ("advantages",),
        "entropy": ("entropys",),
        "rewards": ("token_level_scores", "token_level_rewards"),
        "group": ("uid",),
        "token_ids": ("responses",),
        # the fully-async trainer's per-sequence weight versions, the oldest of each
        # trajectory (verl-project/verl 1dda039b; older: param_version_start)
        "policy_version": ("min_global_steps", "param_version_start"),
    },
    signature=("response_mask", "ref_log_prob", "entropys", "token_level_scores", "uid"),
    reducers={"rewards": "sum"},
    description="verl actor batch (DataProto of the update step)",
    groups="from 'uid' (verl's per-prompt id)",
)

TRL = Profile(
    name="trl",
    keys={
        "mask": ("completion_mask",),
        "old_log_probs": ("old_per_token_logps",),
        "log_probs": ("per_token_logps",),
        "ref_log_probs": ("ref_per_token_logps",),
        "rollout_log_probs": ("sampling_per_token_logps",),
        "advantages": ("advantages",),
        "token_ids": ("completion_ids",),
    },
    signature=(
        "completion_mask",
        "per_token_logps",
        "old_per_token_logps",
        "ref_per_token_logps",
        "completion_ids",
        "tool_mask",
    ),
    description="TRL GRPOTrainer inputs",
    groups=(
        "TRL's loss inputs carry no prompt id and are shuffled (shuffle_sequence_dict), so "
        "consecutive rows are not a prompt's completions; capture with "
        "ratioscope.capture.trl to record prompt ids before the shuffle"
    ),
    consecutive_rows=False,
    # trl/trainer/grpo_trainer.py, _compute_loss: mask = completion_mask * tool_mask when
    # tools are used (0 on tool-output tokens, which the policy did not generate)
    mask_factors=("tool_mask",),
)

PRIME_RL = Profile(
    name="prime-rl",
    keys={
        "mask": ("loss_mask",),
        # prime-rl keeps no separate old policy: the engine's log-probs are the behaviour
        # policy, so z = trainer - inference is both off-policyness and mismatch
        "rollout_log_probs": ("inference_logprobs",),
        "log_probs": ("trainer_logprobs",),
        "advantages": ("advantages",),
        "rewards": ("rewards", "reward"),
        "entropy": ("entropy",),
        "token_ids": ("token_ids",),
        "group": ("example_id", "problem_id", "prompt_prefix_group"),
    },
    signature=("inference_logprobs", "trainer_logprobs", "loss_mask", "log_importance_ratio"),
    reducers={"rewards": "last"},
    description="prime-rl token export (token_exports/step_N/rank_R.jsonl)",
    native="prime_rl",
    groups=(
        "from identical prompt tokens (the tokens before the first trained one), as prime-rl "
        "writes no example id"
    ),
    consecutive_rows=False,
    prompt_in_rows=True,
)

SLIME = Profile(
    name="slime",
    keys={
        "mask": ("loss_masks",),
        # slime's `log_probs` are the old policy, recomputed by the trainer before the
        # update; with the engine's log-probs they give the train/inference mismatch
        "old_log_probs": ("log_probs",),
        "rollout_log_probs": ("rollout_log_probs",),
        "ref_log_probs": ("ref_log_probs",),
        "advantages": ("advantages",),
        "entropy": ("entropy",),
        # slime's `rewards` are group-normalised: raw ones come from `raw_reward`
        "rewards": ("raw_rewards",),
        "group": ("group_index",),
        "token_ids": ("response_tokens",),
    },
    # canonical names never identify a framework: a canonical dump with
    # rollout_log_probs must not be read as slime
    signature=(
        "loss_masks",
        "response_lengths",
        "total_lengths",
        "sample_indices",
        "rollout_position",
        "local_raw_reward",
    ),
    description="slime train data (--save-debug-train-data, v1 and v2 files)",
    native="slime",
    groups="from the rollout dump's group_index (D/rollout_data/ beside D/train_data/)",
    consecutive_rows=False,
    shadowed=("rewards",),
)

SKYRL = Profile(
    name="skyrl",
    keys={
        # loss_mask, not response_mask: the latter includes tool output
        "mask": ("loss_mask",),
        "old_log_probs": ("action_log_probs",),
        "rollout_log_probs": ("rollout_logprobs",),
        "ref_log_probs": ("base_action_log_probs",),
        "advantages": ("advantages",),
        "group": ("prompt_group",),
        "token_ids": ("response_ids",),
    },
    signature=("action_log_probs", "base_action_log_probs", "rollout_logprobs", "loss_mask"),
    description="SkyRL training input (dumped_data/global_step_N_training_input.pkl)",
    native="skyrl",
    groups="from the batch's policy_prompt_boundaries",
    consecutive_rows=False,
)

NEMO_RL = Profile(
    name="nemo-rl",
    keys={
        "mask": ("token_loss_mask",),
        "old_log_probs": ("prev_logprobs",),
        "rollout_log_probs": ("generation_logprobs",),
        "advantages": ("advantages",),
        "rewards": ("rewards",),
        "token_ids": ("token_ids",),
        "group": ("prompt_prefix_group",),
    },
    signature=("token_loss_mask", "prev_logprobs", "generation_logprobs", "sample_loss_mask"),
    description="NeMo-RL GRPO train data (train_data_step{N}.jsonl)",
    native="nemo_rl",
    groups="from identical prompt tokens (NeMo-RL writes no prompt id)",
    consecutive_rows=True,
    prompt_in_rows=True,
)

OPENRLHF = Profile(
    name="openrlhf",
    keys={
        # Experience fields (openrlhf/trainer/ppo_utils/experience.py): [B, T-1] action
        # tensors, right-padded, aligned with sequences[:, 1:]
        "mask": ("action_mask",),
        "old_log_probs": ("action_log_probs",),
        "rollout_log_probs": ("rollout_log_probs",),
        "ref_log_probs": ("base_action_log_probs",),
        "advantages": ("advantages",),
        "rewards": ("scores", "rewards"),
        "group": ("prompts",),
    },
    signature=("action_mask", "action_log_probs", "base_action_log_probs"),
    description="OpenRLHF Experience fields (saved by hand; OpenRLHF writes none)",
    groups="from identical prompt text ('prompts')",
    consecutive_rows=False,
)

AREAL = Profile(
    name="areal",
    keys={
        # areal/trainer/ppo/actor.py at 4aef98d8: the batch ppo_update receives, after
        # compute_advantages rolled loss_mask and logprobs (frameworks/areal.py)
        "mask": ("loss_mask",),
        "old_log_probs": ("prox_logp",),
        "rollout_log_probs": ("logprobs",),
        "advantages": ("advantages",),
        "rewards": ("rewards",),
        "token_ids": ("input_ids",),
        "policy_version": ("versions",),
    },
    signature=("prox_logp", "versions", "logprobs", "loss_mask", "attention_mask"),
    description="AReaL PPO batch (decoupled PPO; saved by hand at ppo_update)",
    native="areal",
    groups="none recorded: a prompt's samples are consecutive rows (--group-size)",
)

PROFILES: dict[str, Profile] = {
    p.name: p for p in (CANONICAL, VERL, TRL, PRIME_RL, SLIME, SKYRL, NEMO_RL, OPENRLHF, AREAL)
}
FORMAT_CHOICES = ("auto", *PROFILES)


def get_profile(name: str) -> Profile:
    """The profile called ``name`` (the ``format`` of ``load``), or an error listing the
    choices."""
    try:
        return PROFILES[name]
    except KeyError:
        raise ParameterError(
            "format", f"must be one of {', '.join(FORMAT_CHOICES)}, got '{name}'"
        ) from None


def detect_profile(keys: Iterable[str], named: str | None = None) -> Profile:
    """The profile whose signature keys are most present; canonical when none is.
    ``named``: a profile the reader recognised from the file's structure, which wins."""
    if named in PROFILES:
        return PROFILES[named]
    present = set(keys)
    best, best_score = CANONICAL, 0
    for profile in PROFILES.values():
        score = sum(key in present for key in profile.signature)
        if score > best_score:
            best, best_score = profile, score
    return best


def resolve_keys(
    profile: Profile, keys: Iterable[str], mapping: Mapping[str, str] | None = None
) -> dict[str, str]:
    """canonical name -> key in the file, each file key used at most once.

    Order of precedence: the user's ``--map``, the profile's names, the canonical name.
    Each ``reward:NAME`` key (one reward function's values) maps to itself.
    """
    from ratioscope.data.batch import CANONICAL_KEYS, REWARD_FUNCTION_PREFIX, SCALAR_KEYS

    known = (*CANONICAL_KEYS, *SCALAR_KEYS)
    present = list(keys)
    mapping = dict(mapping or {})
    resolved: dict[str, str] = {}
    claimed: set[str] = set()
    for canonical, theirs in mapping.items():
        if canonical not in known:
            raise ParameterError(
                "mapping",
                f"names '{canonical}', which is not a canonical key; canonical keys "
                f"are {', '.join(known)}",
            )
        resolved[canonical] = theirs
        claimed.add(theirs)
    for canonical, candidates in profile.keys.items():
        if canonical in resolved:
            continue
        for key in candidates:
            if key in present and key not in claimed:
                resolved[canonical] = key
                claimed.add(key)
                break
    for canonical in known:
        if canonical in profile.shadowed:
            continue
        if canonical not in resolved and canonical in present and canonical not in claimed:
            resolved[canonical] = canonical
            claimed.add(canonical)
    for key in present:
        if key.startswith(REWARD_FUNCTION_PREFIX) and key != REWARD_FUNCTION_PREFIX:
            resolved[key] = key
    return resolved
