"""``eval-passk`` and ``eval-ucc`` on the text logs of verl, TRL, AReaL and ROLL.

The files are written here with the structure each framework writes (the source is
cited beside each writer). Expected numbers are recomputed from the raw rows: counts by
grouping the rows by prompt, Pass@k and UCC@k with the unbiased formula written out
with ``math.comb``, and cluster sizes from the texts themselves: every correct
completion is one of a few "solutions" with disjoint vocabularies, so identical texts
(TF-IDF cosine 1) form a cluster and different ones (cosine 0) never join.
"""

from __future__ import annotations

import hashlib
import json
import math
import random
from collections import Counter, defaultdict
from pathlib import Path

import polars as pl
import pytest
from typer.testing import CliRunner

from ratioscope.cli import app
from ratioscope.io.textlogs import DEFAULT_CORRECT_THRESHOLD

runner = CliRunner()
TOL = 1e-12


def run(*args: object):
    return runner.invoke(app, [str(a) for a in args])


def report_of(tmp_path: Path, *args: object) -> dict:
    out = tmp_path / "report.json"
    result = run(*args, "--json", out, "-q")
    assert result.exit_code == 0, result.stderr
    return json.loads(out.read_text(encoding="utf-8"))


def fails(*args: object) -> str:
    """The one stderr line of a command that must fail with exit 2."""
    result = run(*args, "-q")
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    return lines[0]


# ---- the independent reference ---------------------------------------------------------


def pass_at_k(n: int, c: int, k: int) -> float:
    """Chen et al. (2021): 1 - C(n-c, k) / C(n, k)."""
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


def ucc_at_k(n: int, sizes: list[int], k: int) -> float:
    """QUATRO Eq. 20: sum over correct clusters j of 1 - C(n - s_j, k) / C(n, k)."""
    return sum(1.0 - math.comb(n - s, k) / math.comb(n, k) for s in sizes)


def expected(rows: list[tuple[str, str, bool]], ks: list[int]) -> dict:
    """Problems, samples, mean Pass@k and UCC@k of (prompt, completion, correct) rows."""
    groups: dict[str, list[tuple[str, bool]]] = defaultdict(list)
    for prompt, completion, correct in rows:
        groups[prompt].append((completion, correct))
    passes = {k: [] for k in ks}
    uccs = {k: [] for k in ks}
    for samples in groups.values():
        n = len(samples)
        c = sum(ok for _, ok in samples)
        sizes = list(Counter(text for text, ok in samples if ok).values())
        for k in ks:
            passes[k].append(pass_at_k(n, c, k))
            uccs[k].append(ucc_at_k(n, sizes, k))
    return {
        "problems": len(groups),
        "samples": len(rows),
        "pass_at_k": {str(k): sum(v) / len(v) for k, v in passes.items()},
        "ucc_at_k": {str(k): sum(v) / len(v) for k, v in uccs.items()},
        "ids": {hashlib.sha256(p.encode("utf-8")).hexdigest()[:12] for p in groups},
    }


def assert_block(block: dict, want: dict, ucc: bool = True) -> None:
    assert block["problems"] == want["problems"]
    assert block["samples"] == want["samples"]
    for k, value in want["pass_at_k"].items():
        assert block["pass_at_k"][k] == pytest.approx(value, abs=TOL), k
    if ucc:
        for k, value in want["ucc_at_k"].items():
            assert block["ucc_at_k"][k] == pytest.approx(value, abs=TOL), k
        listed = {p["problem"] for p in block["clusters"]["per_problem"]}
        assert listed == want["ids"]  # one problem per prompt, named by sha256(prompt)


# ---- synthetic rollouts ------------------------------------------------------------------

PROMPTS = [
    f"system\nPlease reason step by step.\nuser\nWhat is {a} + {b}?\nassistant\n"
    for a, b in ((3, 5), (12, 30), (7, 7), (100, 1), (2, 9))
]


def solution(prompt: int, which: int) -> str:
    """A correct completion; different ``which`` share no token, so never a cluster."""
    return " ".join(f"p{prompt}s{which}w{i}" for i in range(6))


def rollouts(seed: int, n: int) -> list[tuple[int, str, float]]:
    """(prompt index, completion, reward) for n samples of every prompt.

    Rewards follow math_dapo (1.0 right, -1.0 wrong) with a few 0.1s, the "formatted but
    wrong" score of some verl rewards, which the default threshold counts as wrong.
    The second prompt is always solved; the first never is when the seed is odd.
    """
    rng = random.Random(seed)
    rows = []
    for p in range(len(PROMPTS)):
        for j in range(n):
            right = p == 1 or (not (p == 0 and seed % 2) and rng.random() < 0.45)
            if right:
                rows.append((p, solution(p, rng.randrange(3)), 1.0))
            else:
                wrong = f"guess {rng.randrange(1000)} for {p} attempt {j}"
                rows.append((p, wrong, rng.choice([-1.0, -1.0, 0.1])))
    rng.shuffle(rows)  # verl's balance_batch reorders the batch: no grouping by position
    return rows


def write_verl(directory: Path, step: int, rows: list[tuple[int, str, float]]) -> Path:
    """What verl's RayPPOTrainer._dump_generations writes for one step.

    Source: volcengine/verl b178a3cd56f58b2d502255daba591e92833930a7,
    verl/trainer/ppo/ray_trainer.py, ``_dump_generations``: ``{dump_path}/{global_steps}.jsonl``,
    keys input, output, gts, score, step, then every reward extra-info list of the batch
    length (math_dapo returns score, acc, pred), ``json.dumps(ensure_ascii=False)`` joined
    by newlines with a final newline.
    """
    directory.mkdir(parents=True, exist_ok=True)
    lines = []
    for prompt, completion, score in rows:
        entry = {
            "input": PROMPTS[prompt],
            "output": completion,
            "gts": str(prompt),
            "score": score,
            "step": step,
            "acc": score == 1.0,
            "pred": completion[-4:],
        }
        lines.append(json.dumps(entry, ensure_ascii=False))
    path = directory / f"{step}.jsonl"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def raw_verl(path: Path, threshold: float = 0.5) -> list[tuple[str, str, bool]]:
    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
    return [(r["input"], r["output"], r["score"] >= threshold) for r in rows]


KS = [1, 2, 4, 8]


# ---- verl ----------------------------------------------------------------------------------


@pytest.fixture
def verl_run(tmp_path: Path) -> Path:
    directory = tmp_path / "rollout_data"
    for step, seed in ((1, 11), (2, 12), (10, 13)):
        write_verl(directory, step, rollouts(seed, n=8))
    return directory


def test_verl_run_directory_one_method_per_step(tmp_path, verl_run):
    report = report_of(tmp_path, "eval-ucc", verl_run, "--k", "1,2,4,8")
    # natural order of the steps (a shell glob would give 1, 10, 2)
    assert list(report["by_method"]) == ["step 1", "step 2", "step 10"]
    assert [Path(i["path"]).name for i in report["inputs"]] == ["1.jsonl", "2.jsonl", "10.jsonl"]
    for info in report["inputs"]:
        assert (info["format"], info["layout"]) == ("jsonl", "verl")
        assert info["fields"]["problem"] == "input" and info["fields"]["correct"] == "score"
        assert info["methods"] == [f"step {Path(info['path']).stem}"]
    assert report["params"]["correct_rule"] == "score >= 0.5"
    assert report["params"]["correct_threshold"] == DEFAULT_CORRECT_THRESHOLD == 0.5
    for step in (1, 2, 10):
        want = expected(raw_verl(verl_run / f"{step}.jsonl"), KS)
        assert_block(report["by_method"][f"step {step}"], want)
        assert report["by_method"][f"step {step}"]["pass1_se"] is not None  # n = 8 everywhere


def test_verl_passk_threshold_and_flip_rate(tmp_path, verl_run):
    report = report_of(tmp_path, "eval-passk", verl_run, "--base", "step 1")
    assert report["params"]["k"] == KS  # powers of two up to n = 8
    for step in (1, 2, 10):
        want = expected(raw_verl(verl_run / f"{step}.jsonl"), KS)
        assert_block(report["by_method"][f"step {step}"], want, ucc=False)
    # the same prompts at every step, so the flip rate matches them by their hash
    solved = {step: Counter() for step in (1, 2, 10)}
    for step, counts in solved.items():
        for prompt, _, ok in raw_verl(verl_run / f"{step}.jsonl"):
            counts[prompt] += ok
    for step in (2, 10):
        flips = report["flip_rate"]["by_method"][f"step {step}"]
        assert flips["problems"] == len(PROMPTS)
        newly = sum(1 for p in PROMPTS if solved[1][p] == 0 and solved[step][p] > 0)
        assert sum(b["unsolved_to_solved"] for b in flips["buckets"]) == newly
    assert solved[1][PROMPTS[0]] == 0 and solved[2][PROMPTS[0]] > 0  # the case can fail

    # at 0.1 the "formatted" scores count as correct (score >= threshold): numbers move
    low = report_of(tmp_path, "eval-passk", verl_run / "2.jsonl", "--correct-threshold", "0.1")
    want = expected(raw_verl(verl_run / "2.jsonl", threshold=0.1), KS)
    assert_block(low["by_method"]["step 2"], want, ucc=False)
    assert low["params"]["correct_rule"] == "score >= 0.1"
    default = expected(raw_verl(verl_run / "2.jsonl"), KS)
    assert want["pass_at_k"]["1"] > default["pass_at_k"]["1"]  # the case can fail


def test_verl_explicit_correct_field(tmp_path, verl_run):
    """math_dapo's boolean ``acc`` extra-info key instead of the score."""
    path = verl_run / "2.jsonl"
    report = report_of(tmp_path, "eval-passk", path, "--correct-field", "acc")
    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
    want = expected([(r["input"], r["output"], r["acc"]) for r in rows], KS)
    assert_block(report["by_method"]["step 2"], want, ucc=False)
    assert report["inputs"][0]["fields"]["correct"] == "acc"


def test_two_runs_keep_their_samples_apart(tmp_path):
    first = write_verl(tmp_path / "runA" / "val", 5, rollouts(1, n=4))
    second = write_verl(tmp_path / "runB" / "val", 5, rollouts(2, n=4))
    report = report_of(tmp_path, "eval-passk", first, second)
    names = list(report["by_method"])
    assert len(names) == 2 and all(name.endswith("val step 5") for name in names)
    assert "runA" in names[0] and "runB" in names[1]
    for name, path in zip(names, (first, second), strict=True):
        assert_block(report["by_method"][name], expected(raw_verl(path), [1, 2, 4]), ucc=False)


# ---- TRL -----------------------------------------------------------------------------------


def write_trl(directory: Path, step: int, rows: list[tuple[int, str, float]], **extra) -> Path:
    """What TRL's GRPOTrainer.log writes with ``log_completions=True``.

    Source: huggingface/trl f2cd57710ae345ea6428ae95363267fcf38a3dc8,
    trl/trainer/grpo_trainer.py, ``log``: a DataFrame of step, prompt (decoded text),
    completion, one float column per reward function (here trl.rewards'
    ``accuracy_reward`` and ``think_format_reward``; NaN where a function returned
    None), the log_extra columns and advantage, written by ``df.to_parquet`` to
    ``{output_dir}/completions/completions_{global_step:05d}.parquet``. polars writes the
    same schema here (pandas keeps its RangeIndex in metadata, not as a column).
    """
    directory.mkdir(parents=True, exist_ok=True)
    table = {
        "step": [step] * len(rows),
        "prompt": [PROMPTS[p] for p, _, _ in rows],
        "completion": [c for _, c, _ in rows],
        "accuracy_reward": [1.0 if r == 1.0 else 0.0 for _, _, r in rows],
        "think_format_reward": [1.0 if r != -1.0 else 0.0 for _, _, r in rows],
        **extra,
        "advantage": [0.25 * (i % 3 - 1) for i in range(len(rows))],
    }
    path = directory / f"completions_{step:05d}.parquet"
    pl.DataFrame(table).write_parquet(path)
    return path


def raw_trl(path: Path, column: str) -> list[tuple[str, str, bool]]:
    frame = pl.read_parquet(path)
    return [(r["prompt"], r["completion"], r[column] >= 0.5) for r in frame.iter_rows(named=True)]


def test_trl_completions_directory(tmp_path):
    completions = tmp_path / "out" / "completions"
    for step, seed in ((10, 3), (20, 4)):
        write_trl(completions, step, rollouts(seed, n=4))
    error = fails("eval-passk", completions)  # two rewards: which one decides?
    assert "has 2 reward columns (accuracy_reward, think_format_reward)" in error
    assert "--correct-field" in error

    report = report_of(tmp_path, "eval-ucc", completions, "--correct-field", "accuracy_reward")
    assert list(report["by_method"]) == ["step 10", "step 20"]
    for step in (10, 20):
        path = completions / f"completions_{step:05d}.parquet"
        assert_block(
            report["by_method"][f"step {step}"],
            expected(raw_trl(path, "accuracy_reward"), [1, 2, 4]),
        )
    info = report["inputs"][0]
    assert (info["format"], info["layout"]) == ("parquet", "trl")
    assert info["fields"]["correct"] == "accuracy_reward"
    assert report["params"]["correct_rule"] == "accuracy_reward >= 0.5"


def test_trl_single_reward_is_chosen(tmp_path):
    path = write_trl(tmp_path, 7, rollouts(5, n=4))
    single = pl.read_parquet(path).drop("think_format_reward")
    single.write_parquet(path)
    report = report_of(tmp_path, "eval-passk", path)
    assert report["inputs"][0]["fields"]["correct"] == "accuracy_reward"
    assert_block(
        report["by_method"]["step 7"],
        expected(raw_trl(path, "accuracy_reward"), [1, 2, 4]),
        ucc=False,
    )


def test_trl_errors_are_one_sentence(tmp_path):
    rows = rollouts(6, n=2)
    base = pl.read_parquet(write_trl(tmp_path, 1, rows))

    no_prompt = tmp_path / "no_prompt.parquet"
    base.drop("prompt").write_parquet(no_prompt)
    assert "has no 'prompt' column, so it is not a TRL" in fails("eval-passk", no_prompt)
    dump = tmp_path / "dump.parquet"  # a token dump given to the wrong command
    pl.DataFrame(
        {"old_per_token_logps": [[-0.5, -1.0]], "completion_mask": [[1, 1]]}
    ).write_parquet(dump)
    assert "has no 'prompt' and 'completion' columns" in fails("eval-ucc", dump)

    no_reward = tmp_path / "no_reward.parquet"
    base.select("step", "prompt", "completion", "advantage").write_parquet(no_reward)
    assert "has no numeric reward column" in fails("eval-ucc", no_reward)

    text_reward = tmp_path / "judge.parquet"
    base.select("step", "prompt", "completion", "advantage").with_columns(
        judge=pl.lit("good")
    ).write_parquet(text_reward)
    assert "(judge: not numeric)" in fails("eval-passk", text_reward)
    error = fails("eval-passk", text_reward, "--correct-field", "judge")
    assert "column 'judge' holds String values, not numbers" in error

    missing = tmp_path / "none.parquet"
    values = base.get_column("accuracy_reward").to_list()
    values[3] = None  # accuracy_reward returned None (unparseable gold)
    base.with_columns(accuracy_reward=pl.Series(values)).write_parquet(missing)
    error = fails("eval-passk", missing, "--correct-field", "accuracy_reward")
    assert "row 4: reward 'accuracy_reward' is missing" in error

    broken = tmp_path / "broken.parquet"
    broken.write_bytes(b"PAR1" + b"\x00" * 40)
    assert "not a readable Parquet file" in fails("eval-passk", broken)


# ---- AReaL and ROLL --------------------------------------------------------------------------


def write_areal(root: Path, version: int, rows: list[tuple[int, str, float]]) -> list[Path]:
    """What AReaL's WorkflowExecutor._dump_trajectory writes with dump_to_file=True.

    Source: inclusionAI/AReaL 4aef98d8d818af55b43621aaadba047ae10f4e77,
    areal/infra/workflow_executor.py, ``_dump_trajectory``: one file per task,
    ``{log_path}/rollout/{tail_version}/{task_id}.jsonl``, one sample a line with
    task_id, sample_idx, seqlen, prompt_len, head_version, tail_version, reward, prompt,
    completion (decoded with special tokens kept).
    """
    by_prompt: dict[int, list[tuple[str, float]]] = defaultdict(list)
    for prompt, completion, reward in rows:
        by_prompt[prompt].append((completion, reward))
    paths = []
    for task_id, (prompt, samples) in enumerate(sorted(by_prompt.items())):
        path = root / "rollout" / str(version) / f"{task_id}.jsonl"
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("a") as handle:
            for i, (completion, reward) in enumerate(samples):
                record = {
                    "task_id": task_id,
                    "sample_idx": i,
                    "seqlen": 40,
                    "prompt_len": 25,
                    "head_version": version - 1,
                    "tail_version": version,
                    "reward": reward,
                    "prompt": "<|im_start|>user\n" + PROMPTS[prompt] + "<|im_end|>",
                    "completion": completion + "<|im_end|>",
                }
                handle.write(json.dumps(record) + "\n")
        paths.append(path)
    return paths


def test_areal_versions(tmp_path):
    rows = {3: rollouts(7, n=4), 4: rollouts(8, n=4)}
    for version, samples in rows.items():
        write_areal(tmp_path / "trial", version, samples)
    report = report_of(tmp_path, "eval-ucc", tmp_path / "trial" / "rollout", "--k", "1,2,4")
    assert list(report["by_method"]) == ["version 3", "version 4"]
    assert {i["layout"] for i in report["inputs"]} == {"areal"}
    for version, samples in rows.items():
        raw = [
            ("<|im_start|>user\n" + PROMPTS[p] + "<|im_end|>", c + "<|im_end|>", r >= 0.5)
            for p, c, r in samples
        ]
        assert_block(report["by_method"][f"version {version}"], expected(raw, [1, 2, 4]))


def test_roll_batch_lines(tmp_path):
    """ROLL's dump_rollout_to_specific_path: one line holds a whole step as lists.

    Source: alibaba/ROLL 8eb27cc2dc34c4d1310b169d9b86d339004d811a,
    roll/pipeline/rlvr/utils.py, ``write_to_json_process``:
    ``rollout_dump_data.step_{global_step}.jsonl`` with the COLUMMNS_CONFIG columns of
    the batch (global_step, id, prompt, ground_truth, tag, domain, responses, scores,
    sampling_params, ...), each a list as long as the batch.
    """
    samples = rollouts(9, n=4)
    record = {
        "id": [str(p) for p, _, _ in samples],
        "prompt": [PROMPTS[p] for p, _, _ in samples],
        "ground_truth": [str(p) for p, _, _ in samples],
        "tag": ["gsm8k"] * len(samples),
        "domain": ["math_rule"] * len(samples),
        "responses": [c for _, c, _ in samples],
        "scores": [1.0 if r == 1.0 else 0.0 for _, _, r in samples],
        "sampling_params": [json.dumps({"temperature": 1.0})] * len(samples),
        "global_step": [30] * len(samples),
    }
    path = tmp_path / "rollout_dump_data.step_30.jsonl"
    path.write_text(json.dumps(record, ensure_ascii=False) + "\n", encoding="utf-8")
    report = report_of(tmp_path, "eval-ucc", path, "--k", "1,2,4", "--dataset-field", "domain")
    raw = list(
        zip(
            record["prompt"], record["responses"], [s >= 0.5 for s in record["scores"]], strict=True
        )
    )
    block = report["by_method"]["step 30"]
    assert_block(block, expected(raw, [1, 2, 4]))
    assert list(block["by_dataset"]) == ["math_rule"]
    assert report["inputs"][0]["layout"] == "roll"


# ---- the samples layouts keep their rule; the option is documented ---------------------------


def test_samples_layout_scores_need_an_explicit_threshold(tmp_path):
    path = tmp_path / "s.jsonl"
    lines = [
        {"problem_id": p, "response": f"r{j}", "correct": [0.2, 0.7, 1.0, 0.0][(p + j) % 4]}
        for p in range(3)
        for j in range(4)
    ]
    path.write_text("\n".join(json.dumps(line) for line in lines) + "\n", encoding="utf-8")
    error = fails("eval-passk", path)
    assert "line 1: field 'correct' must be true/false" in error
    assert "--correct-threshold" in error
    report = report_of(tmp_path, "eval-passk", path, "--correct-threshold", "0.7")
    raw = [(str(r["problem_id"]), r["response"], r["correct"] >= 0.7) for r in lines]
    want = expected(raw, [1, 2, 4])
    assert_block(report["by_method"]["s"], want, ucc=False)
    assert report["params"]["correct_rule"] == "correct >= 0.7"
    error = fails("eval-passk", path, "--correct-threshold", "nan")
    assert "--correct-threshold must be a finite number" in error


def test_help_states_the_default_threshold():
    for command in ("eval-passk", "eval-ucc"):
        result = runner.invoke(app, [command, "--help"], env={"COLUMNS": "200"})
        assert f"default: {DEFAULT_CORRECT_THRESHOLD} for training logs" in result.stdout


def test_trl_conversational_completions_are_message_lists(tmp_path):
    """trl 1.16.0 (the PyPI wheel; ``log`` in trl/trainer/grpo_trainer.py) keeps
    conversational prompts and completions as lists of {role, content} messages."""
    rows = rollouts(5, n=4)
    completions = tmp_path / "completions"
    completions.mkdir()
    table = {
        "step": [3] * len(rows),
        "prompt": [[{"role": "user", "content": PROMPTS[p]}] for p, _, _ in rows],
        "completion": [[{"role": "assistant", "content": c}] for _, c, _ in rows],
        "accuracy_reward": [1.0 if r == 1.0 else 0.0 for _, _, r in rows],
        "advantage": [0.0] * len(rows),
    }
    pl.DataFrame(table).write_parquet(completions / "completions_00003.parquet")
    report = report_of(tmp_path, "eval-ucc", completions)
    # a message list is named by the hash of its canonical JSON
    chats = [json.dumps(m, sort_keys=True) for m in table["prompt"]]
    plain = [(chat, c, r == 1.0) for chat, (_, c, r) in zip(chats, rows, strict=True)]
    assert_block(report["by_method"]["step 3"], expected(plain, [1, 2, 4]))
