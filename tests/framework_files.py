"""Files in the exact structure each training framework's source writes (cited per
builder), for the reader tests. The builders the bundled examples use too come from
sample_data/frameworks/make_frameworks.py, so one function writes each layout."""

from __future__ import annotations

import importlib.util
import sys
import types
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[1] / "sample_data" / "frameworks" / "make_frameworks.py"


def _load_script() -> types.ModuleType:
    """The script that writes sample_data/frameworks/, whose builders the tests share (a
    script, not a package module: loaded by path, once)."""
    if "make_frameworks" not in sys.modules:
        spec = importlib.util.spec_from_file_location("make_frameworks", SCRIPT)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        sys.modules["make_frameworks"] = module
    return sys.modules["make_frameworks"]


make_frameworks = _load_script()
SKYRL_MODULE = make_frameworks.SKYRL_MODULE
prime_rl_line = make_frameworks.prime_rl_line
write_rollout_dump = make_frameworks.write_slime_rollout_dump
skyrl_pickle = make_frameworks.skyrl_pickle
#: row -> response columns [a, b) of tool output: the second sample of each group
SKYRL_TOOL_OUTPUT = {1: (2, 4), 3: (1, 3)}


def slime_v1_rank(rng, indices, *, lengths, rollout_id=4, rank=0, cut=None, last_stage=True):
    """A v1 train dump of one rank, ``{"rollout_id", "rank", "rollout_data"}``
    (slime/utils/train_dump_utils.py 9-22), with made-up group-normalised rewards and
    ``raw_reward`` None for the caller to set (the whole rollout's); the old and engine
    log-probs, each ``[length]``."""
    rewards = rng.normal(size=len(lengths)).tolist()
    data, old, engine = make_frameworks.slime_rollout_data(
        rng, indices, lengths, rewards, None, cut=cut, last_stage=last_stage
    )
    return {"rollout_id": rollout_id, "rank": rank, "rollout_data": data}, old, engine


def skyrl_state(rng):
    """make_frameworks.py's SkyRL batch with tool output in rows 1 and 3: the state, then
    the valid rows' loss and response masks ``[5, R]`` (bool), old and engine log-probs
    ``[6, R]`` and the sequences ``[6, T]``."""
    state, arrays = make_frameworks.skyrl_state(rng, SKYRL_TOOL_OUTPUT)
    rows = state["batch_size"] - 1  # the pad row is the last
    return (
        state,
        arrays["loss_mask"][:rows].astype(bool),
        arrays["response_mask"][:rows].astype(bool),
        arrays["action_log_probs"],
        arrays["rollout_logprobs"],
        arrays["sequences"],
    )
