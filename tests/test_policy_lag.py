"""Policy versions (async training): the policy_lag section against plain loops, the
drift split, the input checks at the file boundary, the verdict, the CLI and capture."""

from __future__ import annotations

import json
import math
import struct
from pathlib import Path

import numpy as np
import pytest
import torch
from typer.testing import CliRunner

import ratioscope
from ratioscope.cli import app
from ratioscope.data.batch import TokenBatch
from ratioscope.errors import InputError
from ratioscope.functional.policy_lag import lag_statistics, lag_sums, version_sums
from ratioscope.io.loaders import load_file

runner = CliRunner()


def async_batch(seed: int = 0, rows: int = 40, width: int = 16) -> dict[str, torch.Tensor]:
    """A batch trained at version 10 whose tokens were sampled by versions 7..10, the
    old/engine gap growing with the lag (the version gap) on top of engine noise."""
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(2, width + 1, (rows,), generator=g)
    mask = torch.arange(width)[None, :] < lengths[:, None]
    version = torch.randint(7, 11, (rows, width), generator=g)
    lag = (10 - version).double()
    engine = -torch.rand(rows, width, generator=g, dtype=torch.float64) * 2
    old = engine + 0.01 * torch.randn(rows, width, generator=g, dtype=torch.float64)
    old = old + 0.05 * lag * torch.randn(rows, width, generator=g, dtype=torch.float64)
    current = old + 0.03 * torch.randn(rows, width, generator=g, dtype=torch.float64)
    advantages = torch.randn(rows, 1, generator=g, dtype=torch.float64).expand(rows, width)
    return {
        "mask": mask,
        "log_probs": current,
        "old_log_probs": old,
        "rollout_log_probs": engine,
        "advantages": advantages.contiguous(),
        "policy_version": torch.where(mask, version, -1),  # AReaL: -1 off the response
    }


def plain_loop(tensors: dict[str, torch.Tensor], trainer: int, clip=(0.2, 0.28), c=2.0):
    """Per lag, token by token: counts, k1, k3, ESS, outside, clip fraction, and the k1
    of the three pairs; a sequence's lag from its oldest valid token."""
    mask = tensors["mask"].tolist()
    version = tensors["policy_version"].tolist()
    cur, old, eng = (
        tensors[k].tolist() for k in ("log_probs", "old_log_probs", "rollout_log_probs")
    )
    adv = tensors["advantages"].tolist()
    out: dict[int, dict[str, float]] = {}
    for i, row in enumerate(mask):
        valid = [j for j, m in enumerate(row) if m]
        if valid:
            seq_lag = trainer - min(version[i][j] for j in valid)
            out.setdefault(seq_lag, {}).setdefault("sequences", 0)
            out[seq_lag]["sequences"] += 1
        for j in valid:
            lag = trainer - version[i][j]
            d = out.setdefault(lag, {})
            z = cur[i][j] - old[i][j]
            r = math.exp(z)
            for name, value in (
                ("tokens", 1),
                ("k1", -z),
                ("k3", r - 1 - z),
                ("r", r),
                ("r2", r * r),
                ("outside", float(r < 1 / c or r > c)),
                (
                    "clipped",
                    float(
                        (adv[i][j] > 0 and r > 1 + clip[1]) or (adv[i][j] < 0 and r < 1 - clip[0])
                    ),
                ),
                ("stale", -(cur[i][j] - old[i][j])),
                ("engine", -(old[i][j] - eng[i][j])),
                ("total", -(cur[i][j] - eng[i][j])),
            ):
                d[name] = d.get(name, 0.0) + value
    return out


def clipped(advantage: float, r: float, clip: tuple[float, float]) -> bool:
    return (advantage > 0 and r > 1 + clip[1]) or (advantage < 0 and r < 1 - clip[0])


def test_lag_histograms_and_statistics_equal_a_plain_loop():
    tensors = async_batch()
    batch = TokenBatch.from_tensors({**tensors, "trainer_version": 10})
    split = {
        "current": batch.log_probs,
        "old": batch.old_log_probs,
        "engine": batch.rollout_log_probs,
    }
    sums = version_sums(
        batch.log_ratio,
        batch.mask,
        batch.policy_version,
        10,
        advantages=batch.advantages,
        split=split,
    )
    stats = {lag: lag_statistics(s) for lag, s in lag_sums(sums).items()}
    expected = plain_loop(tensors, 10)
    assert sorted(stats) == sorted(expected) == [0, 1, 2, 3]
    for lag, want in expected.items():
        got, n = stats[lag], want["tokens"]
        assert got.tokens == n
        assert got.sequences == want.get("sequences", 0)
        assert got.k1 == pytest.approx(want["k1"] / n, rel=1e-9, abs=1e-12)
        assert got.k3 == pytest.approx(want["k3"] / n, rel=1e-9)
        assert got.ess == pytest.approx(want["r"] ** 2 / (n * want["r2"]), rel=1e-9)
        assert got.outside == want["outside"] / n
        assert got.clip_fraction == want["clipped"] / n
        assert got.split is not None
        for pair, name in (
            ("current/old", "stale"),
            ("old/engine", "engine"),
            ("current/engine", "total"),
        ):
            assert got.split.k1[pair] == pytest.approx(want[name] / n, rel=1e-9, abs=1e-12)
        # the split adds up: current/engine = current/old + old/engine
        total = got.split.k1["current/old"] + got.split.k1["old/engine"]
        assert abs(total - got.split.k1["current/engine"]) < 1e-9


def test_sequence_versions_broadcast_and_lag_from_the_newest_without_a_trainer_version():
    tensors = async_batch()
    per_sequence = torch.tensor([5 + (i % 3) for i in range(40)])
    batch = TokenBatch.from_tensors({**tensors, "policy_version": per_sequence})
    assert batch.trainer_version is None
    stats = lag_sums(version_sums(batch.log_ratio, batch.mask, batch.policy_version, None))
    # newest version 7: lags 2, 1, 0 for versions 5, 6, 7; every row's tokens share its lag
    rows = {lag: int((per_sequence == 7 - lag).sum()) for lag in (0, 1, 2)}
    assert {lag: s.sequences for lag, s in stats.items()} == rows
    tokens = batch.mask.sum(dim=1)
    assert {lag: s.partials.tokens for lag, s in stats.items()} == {
        lag: int(tokens[per_sequence == 7 - lag].sum()) for lag in (0, 1, 2)
    }


def test_the_report_section_and_its_json_merge_as_the_whole(tmp_path):
    tensors = async_batch(rows=60)
    whole = tmp_path / "whole.pt"
    torch.save({**tensors, "trainer_version": 10}, whole)
    halves = []
    for index, rows in enumerate((slice(0, 25), slice(25, 60))):
        path = tmp_path / f"half{index}.pt"
        torch.save({**{k: v[rows] for k, v in tensors.items()}, "trainer_version": 10}, path)
        report = ratioscope.analyze(path)
        report.write_json(tmp_path / f"half{index}.json")
        halves.append(json.loads((tmp_path / f"half{index}.json").read_text()))
    one = ratioscope.analyze(whole).to_dict()["policy_lag"]
    merged = ratioscope.merge_reports(halves).to_dict()["policy_lag"]
    assert one["lags"].keys() == merged["lags"].keys()
    for lag, stats in one["lags"].items():
        for key in ("tokens", "sequences", "outside", "clip_fraction"):
            assert merged["lags"][lag][key] == stats[key]
        for key in ("k1", "k3", "ess"):
            assert merged["lags"][lag][key] == pytest.approx(stats[key], rel=1e-9, abs=1e-15)
    assert one["trainer_version"] == "file" and one["max_lag"] == 3


def test_lag_beyond_the_allowed_maximum_is_red_and_a_growing_mismatch_yellow(tmp_path):
    path = tmp_path / "async.pt"
    torch.save({**async_batch(), "trainer_version": 10}, path)
    verdict = ratioscope.analyze(path, max_lag=2).verdict()
    by_name = {f.name: f for f in verdict.findings}
    assert by_name["policy lag"].level == "red"
    assert "more than 2 version(s) behind" in by_name["policy lag"].text
    growth = by_name["mismatch grows with lag"]
    assert growth.level == "yellow" and growth.key == "policy_lag.lags.3.split.k3.old/engine"
    # within the allowed lag: green
    assert {f.name: f.level for f in ratioscope.analyze(path, max_lag=3).verdict().findings}[
        "policy lag"
    ] == "green"


def test_a_run_without_versions_has_no_section_and_no_lag_finding():
    report = ratioscope.analyze(Path(__file__).parents[1] / "sample_data" / "verl")
    assert report.policy_lag is None
    assert "policy_lag" not in report.to_dict()
    assert not [f for f in report.verdict().findings if f.key.startswith("policy_lag")]


def test_timeline_columns_carry_the_lag(tmp_path):
    for step in range(3):
        folder = tmp_path / f"step_{step:04d}"
        folder.mkdir()
        tensors = async_batch(seed=step)
        tensors["policy_version"] = torch.where(
            tensors["mask"], tensors["policy_version"] + step, -1
        )
        torch.save({**tensors, "trainer_version": 10 + step}, folder / "rank_0.pt")
    timeline = ratioscope.timeline(tmp_path)
    assert timeline.series("policy_lag.max_lag") == [3, 3, 3]
    report = ratioscope.analyze(tmp_path / "step_0001")
    assert timeline.series("policy_lag.mean_token_lag")[1] == report.policy_lag.mean_token_lag


@pytest.mark.parametrize(
    ("change", "problem"),
    [
        ({"policy_version": torch.full((40, 16), -2)}, "must hold versions >= 0 at valid tokens"),
        ({"policy_version": torch.full((40, 16), 11)}, "newer than the version being trained"),
        ({"policy_version": torch.full((40, 16), 1.5)}, "must hold an integer version"),
        ({"trainer_version": torch.arange(40)}, "must be the same for every sequence"),
        (
            {"log_probs": torch.zeros(40, 16, dtype=torch.int32)},
            "is stored as int32, not as floating-point",
        ),
    ],
)
def test_bad_versions_and_integer_log_probs_are_one_sentence(tmp_path, change, problem):
    path = tmp_path / "bad.pt"
    torch.save({**async_batch(), "trainer_version": 10, **change}, path)
    result = runner.invoke(app, ["analyze", str(path)])
    assert result.exit_code == 2, result.output
    assert problem in result.output and "Traceback" not in result.output
    assert str(path) in result.output.replace("\n", "")


def test_integer_log_probs_are_read_from_json_lines(tmp_path):
    # text has no dtype: 0 and 0.0 are the same number there
    path = tmp_path / "run.jsonl"
    rows = [{"mask": [1, 1], "log_probs": [0, -1], "old_log_probs": [0, -1.5]}]
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    assert ratioscope.analyze(path).ratios is not None


def safetensors_file(path: Path, header: dict, data: bytes) -> Path:
    text = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(text)) + text + data)
    return path


def test_safetensors_float_bytes_declared_int32_are_refused(tmp_path):
    values = np.array([[-0.5, -1.0]], dtype=np.float32)
    header = {
        "mask": {"dtype": "BOOL", "shape": [1, 2], "data_offsets": [0, 2]},
        "log_probs": {"dtype": "I32", "shape": [1, 2], "data_offsets": [2, 10]},
        "old_log_probs": {"dtype": "F32", "shape": [1, 2], "data_offsets": [10, 18]},
    }
    path = safetensors_file(tmp_path / "x.safetensors", header, b"\x01\x01" + values.tobytes() * 2)
    for extra in ([], ["--chunk-elements", "1"]):
        result = runner.invoke(app, ["analyze", str(path), *extra])
        assert result.exit_code == 2, result.output
        assert "'log_probs' is stored as int32" in result.output


def test_a_safetensors_dtype_that_is_not_a_string_is_one_sentence(tmp_path):
    header = {"mask": {"dtype": ["BOOL"], "shape": [1, 2], "data_offsets": [0, 2]}}
    path = safetensors_file(tmp_path / "x.safetensors", header, b"\x01\x01")
    result = runner.invoke(app, ["analyze", str(path)])
    assert result.exit_code == 2, result.output
    assert "has the unknown dtype ['BOOL']" in result.output


def test_the_capture_records_versions_and_the_step_as_the_trainer_version(tmp_path):
    from ratioscope.capture import CaptureWriter

    tensors = async_batch()
    with CaptureWriter(tmp_path / "capture") as capture:
        capture.write(
            10,
            mask=tensors["mask"],
            log_probs=tensors["log_probs"],
            old_log_probs=tensors["old_log_probs"],
            rollout_log_probs=tensors["rollout_log_probs"],
            advantages=tensors["advantages"],
            policy_version=tensors["policy_version"],
        )
    files = sorted((tmp_path / "capture").rglob("*.pt"))
    report = ratioscope.analyze(files)
    direct = ratioscope.analyze(TokenBatch.from_tensors({**tensors, "trainer_version": 10}))
    assert report.policy_lag is not None and report.policy_lag.trainer_version == "file"
    assert {lag: s.tokens for lag, s in report.policy_lag.lags.items()} == {
        lag: s.tokens for lag, s in direct.policy_lag.lags.items()
    }
    with pytest.raises(ValueError, match="policy_version must be an integer tensor"):
        CaptureWriter(tmp_path / "other").write(
            0, mask=tensors["mask"], log_probs=tensors["log_probs"],
            old_log_probs=tensors["old_log_probs"], policy_version=tensors["log_probs"],
        )  # fmt: skip


def test_info_names_the_key_and_the_lag_rows(tmp_path):
    path = tmp_path / "async.pt"
    torch.save({**async_batch(), "trainer_version": 10}, path)
    result = runner.invoke(app, ["info", str(path)])
    assert result.exit_code == 0, result.output
    lines = [line for line in result.output.splitlines() if "policy_lag" in line]
    assert len(lines) == 2 and all("yes" in line for line in lines)


def test_validation_errors_name_the_key():
    tensors = async_batch()
    with pytest.raises(InputError, match="'policy_version' must hold versions >= 0"):
        TokenBatch.from_tensors({**tensors, "policy_version": torch.full((40, 16), -3)})


def test_the_verl_layout_reads_the_oldest_weight_version_of_each_trajectory(tmp_path):
    tensors = async_batch()
    rows = tensors["mask"].shape[0]
    versions = [7 + row % 4 for row in range(rows)]
    path = tmp_path / "verl.pt"
    torch.save(
        {
            "response_mask": tensors["mask"].long(),
            "old_log_probs": tensors["old_log_probs"].float(),
            "log_probs": tensors["log_probs"].float(),
            "ref_log_prob": tensors["old_log_probs"].float(),
            "entropys": torch.ones(rows, 16),
            "token_level_scores": torch.zeros(rows, 16),
            "uid": [f"p{row // 4}" for row in range(rows)],
            "min_global_steps": versions,
            "trainer_version": 10,
        },
        path,
    )
    report = ratioscope.analyze(path)
    assert load_file(path).profile == "verl"
    lags = report.policy_lag.lags
    expected = {lag: sum(1 for v in versions if 10 - v == lag) for lag in range(4)}
    assert {lag: s.sequences for lag, s in lags.items()} == expected


def areal_batch(seed: int = 0) -> tuple[dict[str, torch.Tensor], list[list[int]]]:
    """A batch as AReaL's ppo_update receives it (inclusionAI/AReaL 4aef98d8): each
    trajectory built as areal/workflow/rlvr.py builds it (prompt positions: logprobs 0,
    loss_mask 0, versions -1; generated tokens carry the engine version of their chunk, a
    partial rollout changing version mid-generation), right-padded with 0, then
    compute_advantages' rolls of loss_mask and logprobs one position left; prox_logp and
    advantages in the rolled alignment. Returns it and each row's generated versions."""
    g = torch.Generator().manual_seed(seed)
    rows, width, prompt = 6, 20, 4
    columns = {k: torch.zeros(rows, width) for k in ("logprobs", "loss_mask", "prox_logp")}
    columns["versions"] = torch.zeros(rows, width, dtype=torch.int32)
    columns["input_ids"] = torch.zeros(rows, width, dtype=torch.int32)
    columns["attention_mask"] = torch.zeros(rows, width, dtype=torch.bool)
    generated: list[list[int]] = []
    for row in range(rows):
        length = int(torch.randint(5, width - prompt, (1,), generator=g))
        switch = int(torch.randint(1, length, (1,), generator=g))
        versions = [3] * switch + [5] * (length - switch)  # one partial rollout, two versions
        output_logprobs = (-torch.rand(length, generator=g)).tolist()
        total = prompt + length
        columns["logprobs"][row, :total] = torch.tensor([0.0] * prompt + output_logprobs)
        columns["loss_mask"][row, :total] = torch.tensor([0.0] * prompt + [1.0] * length)
        columns["versions"][row, :total] = torch.tensor([-1] * prompt + versions)
        columns["input_ids"][row, :total] = torch.randint(1, 50, (total,), generator=g)
        columns["attention_mask"][row, :total] = True
        generated.append(versions)
    # compute_advantages: loss_mask and logprobs rolled; prox_logp computed rolled
    columns["loss_mask"] = torch.roll(columns["loss_mask"], -1, dims=-1)
    columns["logprobs"] = torch.roll(columns["logprobs"], -1, dims=-1) * columns["loss_mask"]
    noise = 0.01 * torch.randn(rows, width, generator=g)
    columns["prox_logp"] = (columns["logprobs"] + noise) * columns["loss_mask"]
    columns["advantages"] = torch.randn(rows, 1, generator=g) * columns["loss_mask"]
    columns["rewards"] = torch.rand(rows, generator=g)
    return columns, generated


def test_the_areal_layout_lines_versions_up_with_the_rolled_log_probs(tmp_path):
    columns, generated = areal_batch()
    path = tmp_path / "areal.pt"
    torch.save({**columns, "trainer_version": 6}, path)
    batch = load_file(path)
    assert batch.profile == "areal" and batch.ratio_pair == "old/engine"
    # every valid token carries its own generated version: none of the prompt's -1
    for row, versions in enumerate(generated):
        kept = batch.policy_version[row][batch.mask[row]].tolist()
        assert kept == versions
    lags = ratioscope.analyze(path).policy_lag.lags
    tokens = [v for versions in generated for v in versions]
    assert {lag: s.tokens for lag, s in lags.items()} == {1: tokens.count(5), 3: tokens.count(3)}
    # a sequence's lag is its oldest token's: every row started at version 3
    assert lags[3].sequences == len(generated)
