"""The scale-out examples: Ray task functions (with a stand-in for Ray) and Slurm scripts.

A sharded analysis (one analyze per shard of files, then merge) must give the report of
one analyze over all the files; the token count and log-ratio moments are also checked
against numpy on the raw arrays.
"""

from __future__ import annotations

import importlib.util
import json
import math
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from dumps import make_reference

import ratioscope

pytestmark = pytest.mark.slow  # the scale examples in fresh processes: the slow tier

ROOT = Path(__file__).resolve().parents[1]
SLURM = ROOT / "examples" / "slurm"


def load_example():
    spec = importlib.util.spec_from_file_location("ray_analyze", ROOT / "examples/ray_analyze.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


ray_analyze = load_example()


def write_shards(directory: Path, count: int) -> tuple[list[Path], list]:
    """``count`` small canonical .pt dumps, one GRPO batch each, and their references."""
    paths, refs = [], []
    for index in range(count):
        ref = make_reference(seed=index, rows=8, width=24, group_size=4)
        path = directory / f"step_{index}.pt"
        torch.save(
            {
                "mask": torch.tensor(ref.mask),
                "log_probs": torch.tensor(ref.log_probs, dtype=torch.float32),
                "old_log_probs": torch.tensor(ref.old_log_probs, dtype=torch.float32),
                "ref_log_probs": torch.tensor(ref.ref_log_probs, dtype=torch.float32),
                "advantages": torch.tensor(ref.advantages, dtype=torch.float32),
                "entropy": torch.tensor(ref.entropy, dtype=torch.float32),
                "old_entropy": torch.tensor(ref.entropy[:, ::-1].copy(), dtype=torch.float32),
                "rewards": torch.tensor(ref.rewards),
                "group": ref.group,
            },
            path,
        )
        paths.append(path)
        refs.append(ref)
    return paths, refs


class StandInRemoteFunction:
    """What ``ray.remote(f)`` returns, run in this process: ``.remote`` calls ``f`` now."""

    def __init__(self, function):
        self.function = function
        self.calls = 0

    def remote(self, *args):
        self.calls += 1
        return self.function(*args)


def stand_in_get(results: list) -> list:
    # Ray serialises what a task returns; a JSON round trip proves the report travels
    return [json.loads(json.dumps(result, allow_nan=True)) for result in results]


def assert_same_report(left, right, path=""):
    """Equal structure and non-float values; floats to 1e-9 relative (summation order)."""
    if isinstance(left, dict):
        assert isinstance(right, dict) and left.keys() == right.keys(), path
        for key in left:
            assert_same_report(left[key], right[key], f"{path}.{key}")
    elif isinstance(left, list):
        assert isinstance(right, list) and len(left) == len(right), path
        for index, (a, b) in enumerate(zip(left, right, strict=True)):
            assert_same_report(a, b, f"{path}.{index}")
    elif isinstance(left, float) and isinstance(right, float):
        if math.isnan(left):
            assert math.isnan(right), path
        else:
            assert math.isclose(left, right, rel_tol=1e-9, abs_tol=1e-15), (path, left, right)
    else:
        assert left == right, (path, left, right)


def without_tool(document: dict) -> dict:
    return {key: value for key, value in document.items() if key != "tool"}


def check_against_numpy(document: dict, refs: list) -> None:
    """Token count and log-ratio moments from the raw arrays (as stored: float32)."""
    z = np.concatenate(
        [
            (
                ref.log_probs.astype(np.float32).astype(np.float64)
                - ref.old_log_probs.astype(np.float32).astype(np.float64)
            )[ref.mask]
            for ref in refs
        ]
    )
    distribution = document["ratios"]["token"]["distribution"]
    assert distribution["count"] == z.size
    assert sum(item["tokens"] for item in document["inputs"]) == z.size
    assert distribution["mean"] == pytest.approx(z.mean(), abs=1e-6)
    assert distribution["std"] == pytest.approx(z.std(), rel=1e-5)
    assert document["mismatch"]["policy"]["k1"] == pytest.approx(-z.mean(), abs=1e-6)


@pytest.mark.parametrize(
    ("count", "per_task", "expected"),
    [(5, 2, [[0, 1], [2, 3], [4]]), (3, 3, [[0, 1, 2]]), (2, 5, [[0, 1]]), (3, 1, [[0], [1], [2]])],
)
def test_split_files_consecutive_runs(count, per_task, expected):
    files = [f"f{i}.pt" for i in range(count)]
    assert ray_analyze.split_files(files, per_task) == [[f"f{i}.pt" for i in s] for s in expected]


def test_split_files_refuses_zero_per_task():
    with pytest.raises(ValueError):
        ray_analyze.split_files(["a.pt"], 0)


def test_sharded_tasks_with_a_stand_in_for_ray_equal_one_analyze(tmp_path):
    paths, refs = write_shards(tmp_path, 5)
    shards = ray_analyze.split_files(paths, 2)  # 2 + 2 + 1 files
    wrapped = []

    def remote(function):
        wrapped.append(StandInRemoteFunction(function))
        return wrapped[0]

    options = {"kalman_q": 1e-4, "window": 8}
    # merge_batch=2: the third report is merged into the merge of the first two
    merged = ray_analyze.analyze_sharded(
        shards, options, remote=remote, get=stand_in_get, merge_batch=2
    )
    assert len(wrapped) == 1 and wrapped[0].calls == 3
    direct = ratioscope.analyze([str(p) for p in paths], **options).to_dict()
    assert_same_report(without_tool(merged), without_tool(direct))
    assert merged["params"]["analysis"]["kalman_q"] == 1e-4
    check_against_numpy(merged, refs)


def test_shard_function_returns_a_mergeable_report(tmp_path):
    paths, _ = write_shards(tmp_path, 2)
    documents = [ray_analyze.analyze_shard([str(p)], {}) for p in paths]
    for document in documents:
        assert "state" in document and len(document["inputs"]) == 1
    merged = ray_analyze.merge_documents(documents, ["a", "b"])
    direct = ratioscope.analyze([str(p) for p in paths]).to_dict()
    assert_same_report(without_tool(merged), without_tool(direct))


@pytest.mark.parametrize("script", ["analyze_array.sbatch", "merge.sbatch"])
def test_sbatch_scripts_parse(script):
    result = subprocess.run(["bash", "-n", str(SLURM / script)], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr


def run_script(script: str, *args: str, cwd: Path, **env: str) -> subprocess.CompletedProcess:
    # the ratioscope entry point of the running interpreter's environment comes first
    path = f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"
    environment = {**os.environ, "PATH": path, **env}
    return subprocess.run(
        ["bash", str(SLURM / script), *args],
        cwd=cwd,
        env=environment,
        capture_output=True,
        text=True,
    )


def test_slurm_array_then_merge_equals_one_analyze(tmp_path):
    if shutil.which("ratioscope", path=str(Path(sys.executable).parent)) is None:
        pytest.skip("no ratioscope entry point beside the interpreter")
    paths, refs = write_shards(tmp_path, 3)
    shard_list = tmp_path / "shards.txt"
    shard_list.write_text(f"{paths[0]} {paths[1]}\n{paths[2]}\n")
    # task 1 runs the script (line 2 of the list); task 0's report is written in-process
    # the way the script would write it, which saves a second interpreter start-up
    done = run_script(
        "analyze_array.sbatch", str(shard_list), "reports", cwd=tmp_path,
        SLURM_ARRAY_TASK_ID="1", RATIOSCOPE_OPTIONS="--window 8 --device cpu",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    task_one = json.loads((tmp_path / "reports" / "shard_00001.json").read_text())
    assert [item["path"] for item in task_one["inputs"]] == [str(paths[2])]
    assert task_one["params"]["analysis"]["window"] == 8
    ratioscope.analyze([str(p) for p in paths[:2]], window=8).write_json(
        tmp_path / "reports" / "shard_00000.json"
    )
    rules = tmp_path / "rules.toml"
    rules.write_text('[[rule]]\npath = "ratios.token.distribution.count"\nmin = 1\n')
    merged = run_script(
        "merge.sbatch", "reports", "run.json", cwd=tmp_path, RULES=str(rules),
        EXPECTED_SHARDS="2",
    )  # fmt: skip
    assert merged.returncode == 0, merged.stderr
    assert "PASS: the rule holds" in merged.stdout
    document = json.loads((tmp_path / "run.json").read_text())
    direct = ratioscope.analyze([str(p) for p in paths], window=8).to_dict()
    assert_same_report(without_tool(document), without_tool(direct))
    check_against_numpy(document, refs)


def test_slurm_scripts_refuse_a_missing_line_or_shard(tmp_path):
    shard_list = tmp_path / "shards.txt"
    shard_list.write_text("a.pt\n")
    missing = run_script(
        "analyze_array.sbatch", str(shard_list), cwd=tmp_path, SLURM_ARRAY_TASK_ID="3"
    )
    assert missing.returncode == 2 and "line 4" in missing.stderr
    (tmp_path / "reports").mkdir()
    (tmp_path / "reports" / "shard_00000.json").write_text("{}")
    short = run_script("merge.sbatch", cwd=tmp_path, EXPECTED_SHARDS="2")
    assert short.returncode == 2 and "expected 2" in short.stderr
