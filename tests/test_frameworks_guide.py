"""Every recipe of docs/frameworks.md runs as written, on files in the structure each
framework's source writes (tests/framework_files.py cites the sources)."""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

import numpy as np
import polars as pl
import pytest
import torch
from framework_files import (
    prime_rl_line,
    skyrl_pickle,
    skyrl_state,
    slime_v1_rank,
    write_rollout_dump,
)
from typer.testing import CliRunner

from ratioscope.cli import app

GUIDE = Path(__file__).resolve().parents[1] / "docs" / "frameworks.md"
RECIPES = ("verl", "trl", "prime-rl", "slime", "skyrl", "nemo-rl", "areal")


def recipe(name: str) -> list[list[str]]:
    """The commands of the bash block that follows ``<!-- recipe: name -->``."""
    text = GUIDE.read_text()
    match = re.search(rf"<!-- recipe: {re.escape(name)} -->\n```bash\n(.*?)```", text, re.S)
    assert match, f"docs/frameworks.md has no recipe '{name}'"
    commands = [shlex.split(line) for line in match.group(1).splitlines() if line.strip()]
    assert all(c[0] == "ratioscope" for c in commands)
    return [c[1:] for c in commands]


def _jsonl(path: Path, records: list[dict]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in records))


def build_verl(root: Path, rng, monkeypatch) -> None:
    # verl/trainer/ppo/ray_trainer.py _dump_generations (volcengine/verl b178a3cd56f5)
    for step in (1, 2):
        records = [
            {"input": f"What is {p} + {p}?", "output": f"{2 * p + (i % 2)}", "gts": str(2 * p),
             "score": float(i % 2 == 0), "step": step}
            for p in range(3) for i in range(4)
        ]  # fmt: skip
        rng.shuffle(records)  # _balance_batch reorders the batch before the dump
        _jsonl(root / "rollouts" / f"{step}.jsonl", records)


def build_trl(root: Path, rng, monkeypatch) -> None:
    # trl 1.16.0 GRPOTrainer.log with log_completions=True
    out = root / "out" / "completions"
    out.mkdir(parents=True)
    prompts = [p for p in ("1+1?", "2+2?") for _ in range(4)]
    pl.DataFrame(
        {
            "step": [1] * 8,
            "prompt": prompts,
            "completion": [str(i) for i in range(8)],
            "accuracy_reward": [float(i % 3 == 0) for i in range(8)],
            "format_reward": [1.0] * 8,
            "advantage": [0.0] * 8,
        }
    ).write_parquet(out / "completions_00001.parquet")


def build_prime_rl(root: Path, rng, monkeypatch) -> None:
    lines = [
        prime_rl_line(rng, step=5, micro_sequence_idx=i, prompt=[1, 2, 3 + i % 2],
                      completion_len=4 + i, export_idx=i)
        for i in range(6)
    ]  # fmt: skip
    _jsonl(root / "outputs" / "token_exports" / "step_5" / "rank_0.jsonl", lines)
    (root / "outputs" / "token_exports" / "step_5" / "STABLE").touch()


def build_slime(root: Path, rng, monkeypatch) -> None:
    indices = [10, 11, 12, 13]
    write_rollout_dump(
        root / "dump" / "rollout_data", 4, [0, 0, 1, 1], [1.0, 0.0, 1.0, 1.0], indices
    )
    obj, _, _ = slime_v1_rank(rng, indices, lengths=[4, 5, 6, 7])
    obj["rollout_data"]["raw_reward"] = [1.0, 0.0, 1.0, 1.0]
    (root / "dump" / "train_data").mkdir(parents=True)
    for rank in (0, 1):  # tensor-parallel peers
        obj["rank"] = rank
        torch.save(obj, root / "dump" / "train_data" / f"4_{rank}.pt")


def build_skyrl(root: Path, rng, monkeypatch) -> None:
    state, *_ = skyrl_state(rng)
    path = root / "exports" / "dumped_data" / "global_step_3_training_input.pkl"
    path.parent.mkdir(parents=True)
    path.write_bytes(skyrl_pickle(monkeypatch, state, enum_formats=True))


def build_nemo_rl(root: Path, rng, monkeypatch) -> None:
    # nemo_rl/algorithms/grpo.py 3630-3655 (NVIDIA-NeMo/RL 7ea279abfbeb)
    records = []
    for row in range(4):
        prompt, completion = [5, 6, 7 + row // 2], rng.integers(10, 50, size=5).tolist()
        n, width = 3 + 5, 10
        prev = np.zeros(width)
        prev[1:n] = -rng.gamma(1.0, 0.5, size=n - 1)
        gen = np.zeros(width)
        gen[3:n] = prev[3:n] + rng.normal(0, 0.05, size=5)
        records.append(
            {
                "content": [["q", "a"]], "rewards": [float(row % 2)], "input_lengths": [n],
                "token_ids": [prompt + completion + [0, 0]],
                "token_loss_mask": [[0, 0, 0, 1, 1, 1, 1, 1, 0, 0]],
                "sample_loss_mask": [1.0], "advantages": [[0.5] * width],
                "generation_logprobs": [gen.tolist()], "prev_logprobs": [prev.tolist()],
                "idx": row,
            }
        )  # fmt: skip
    _jsonl(root / "logs" / "exp_001" / "train_data_step4.jsonl", records)
    # the log directory holds other JSON lines, which the quoted glob leaves out
    _jsonl(root / "logs" / "exp_001" / "val_data_step4.jsonl", [{"content": ["q"], "idx": 0}])


def build_areal(root: Path, rng, monkeypatch) -> None:
    # areal/infra/workflow_executor.py (inclusionAI/AReaL 4aef98d8d818)
    for task in ("t1", "t2"):
        _jsonl(
            root / "areal" / "rollout" / "3" / f"{task}.jsonl",
            [
                {"task_id": task, "sample_idx": i, "seqlen": 9, "prompt_len": 3,
                 "head_version": 3, "tail_version": 3, "reward": float(i % 2),
                 "prompt": f"question {task}", "completion": f"answer {i}"}
                for i in range(4)
            ],
        )  # fmt: skip


BUILDERS = {
    "verl": build_verl,
    "trl": build_trl,
    "prime-rl": build_prime_rl,
    "slime": build_slime,
    "skyrl": build_skyrl,
    "nemo-rl": build_nemo_rl,
    "areal": build_areal,
}


@pytest.mark.parametrize("name", RECIPES)
def test_recipe_runs_as_written(name, tmp_path, monkeypatch):
    BUILDERS[name](tmp_path, np.random.default_rng(0), monkeypatch)
    monkeypatch.chdir(tmp_path)
    runner = CliRunner()
    for args in recipe(name):
        result = runner.invoke(app, args)
        assert result.exit_code == 0, f"{args}: {result.stderr}"
        if "--json" in args:
            document = json.loads(Path(args[args.index("--json") + 1]).read_text())
            # read as the framework's layout: a dump's profile, a text log's layout
            kinds = {i.get("profile", i.get("layout")) for i in document["inputs"]}
            assert kinds == {name}, args
            if name == "slime":  # the tensor-parallel copy is skipped
                assert len(document["inputs"]) == 1


def test_every_section_of_the_guide_has_its_recipe_tested():
    named = re.findall(r"<!-- recipe: ([\w-]+) -->", GUIDE.read_text())
    assert sorted(named) == sorted(RECIPES)
