"""Scale-out: the tasks of --workers/--ray (in this process) and the Slurm scripts.

A sharded analysis (one analyze per shard of files, then merge) must give the report of
one analyze over all the files; the token count and log-ratio moments are also checked
against numpy on the raw arrays.
"""

from __future__ import annotations

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


def test_sharded_tasks_equal_one_analyze(tmp_path):
    """The tasks --workers/--ray run (one analyze per step, merged in order), here in
    this process: the report of one analyze, and numpy's numbers on the raw arrays."""
    from ratioscope.analysis.parallel import Runner, analyze_in_tasks, file_shards
    from ratioscope.data.params import AnalysisParams

    paths, refs = write_shards(tmp_path, 5)
    assert len(file_shards(paths)) == 5  # one step a file
    params = AnalysisParams(kalman_q=1e-4, window=8)
    merged = analyze_in_tasks([str(p) for p in paths], Runner(), params=params).to_dict()
    direct = ratioscope.analyze([str(p) for p in paths], kalman_q=1e-4, window=8).to_dict()
    assert_same_report(without_tool(merged), without_tool(direct))
    assert merged["params"]["analysis"]["kalman_q"] == 1e-4
    check_against_numpy(merged, refs)


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
