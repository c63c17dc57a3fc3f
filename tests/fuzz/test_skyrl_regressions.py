"""The SkyRL pickle cases of the hostile-input report, by name."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
from fuzz import files
from fuzz.harness import error_line, promise

pytestmark = pytest.mark.fuzz

NAME = "global_step_1_training_input.pkl"


def _write(tmp_path: Path, data: bytes) -> None:
    (tmp_path / NAME).write_bytes(data)


def _state_with(path: list[Any], value: Any) -> dict[str, Any]:
    state: dict[str, Any] = copy.deepcopy(files.skyrl_state())
    target = state
    for key in path[:-1]:
        target = target[key]
    if value is KeyError:
        del target[path[-1]]
    else:
        target[path[-1]] = value
    return state


def test_valid_state_reads(tmp_path: Path) -> None:
    _write(tmp_path, files.skyrl_bytes(files.pickled(files.skyrl_state())))
    promise(["analyze", NAME, "-q"], tmp_path, codes=[0])


def test_tensor_format_on_a_deep_list(tmp_path: Path) -> None:
    opcodes = files.skyrl_global(b"TensorFormat") + files.deep_list_opcodes(200_000) + b"\x85R"
    _write(tmp_path, files.skyrl_bytes(opcodes))
    assert NAME in error_line(promise(["analyze", NAME, "-q"], tmp_path))


@pytest.mark.parametrize("times", [25, 40])
def test_memo_doubling_bomb(tmp_path: Path, times: int) -> None:
    bomb = files.doubling_list_opcodes(times)
    state = b"}(X\n\x00\x00\x00batch_dict}(X\x04\x00\x00\x00mask" + bomb + b"uu"
    data = files.skyrl_bytes(state)
    assert len(data) < 600
    _write(tmp_path, data)
    line = error_line(promise(["analyze", NAME, "-q"], tmp_path, seconds=30, memory=1 << 30))
    assert ("references" in line) if times == 25 else ("nested deeper" in line)


ENCODED = ["batch_dict", "action_log_probs"]


@pytest.mark.parametrize(
    ("path", "value"),
    [
        ([*ENCODED, "dtype"], KeyError),
        ([*ENCODED, "shape"], KeyError),
        ([*ENCODED, "data"], KeyError),
        ([*ENCODED, "dtype"], "garbage"),
        ([*ENCODED, "dtype"], 7),
        ([*ENCODED, "data"], b"\0" * 7),
        ([*ENCODED, "data"], "text"),
        ([*ENCODED, "shape"], ["4", "6"]),
        ([*ENCODED, "shape"], 24),
        ([*ENCODED, "shape"], [2**62, 4]),
        ([*ENCODED, "shape"], [-4, -6]),
        (["metadata", "pad_size"], "abc"),
        (["metadata", "pad_size"], -3),
        (["metadata", "pad_size"], 99),
        (["metadata", "policy_prompt_boundaries"], [[0]]),
        (["metadata", "policy_prompt_boundaries"], [["a", 2]]),
    ],
    ids=lambda v: str(v)[:20] if not isinstance(v, list) else "",
)
def test_wrong_fields(tmp_path: Path, path: list[str], value: Any) -> None:
    _write(tmp_path, files.skyrl_bytes(files.pickled(_state_with(path, value))))
    line = error_line(promise(["analyze", NAME, "-q"], tmp_path))
    assert NAME in line and "dropped" not in line


def test_big_endian_dtype_reads(tmp_path: Path) -> None:
    state = files.skyrl_state()
    encoded = state["batch_dict"]["action_log_probs"]  # type: ignore[index]
    import numpy as np

    array = np.frombuffer(encoded["data"], dtype="<f4").astype(">f4")
    encoded.update(data=array.tobytes(), dtype=">f4")
    _write(tmp_path, files.skyrl_bytes(files.pickled(state)))
    promise(["analyze", NAME, "-q"], tmp_path, codes=[0])
