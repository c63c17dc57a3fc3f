"""Each reward function's vitals: ``reward:NAME`` keys read into ``TokenBatch``, reported per
function in the vitals, the timeline and compare, against plain loops over the dumps."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import polars as pl
import pytest
import torch
from typer.testing import CliRunner

import ratioscope
from ratioscope.analysis.pipeline import merge_reports
from ratioscope.cli import app
from ratioscope.data.batch import TokenBatch
from ratioscope.errors import InputError
from ratioscope.io.loaders import concatenate, load
from ratioscope.report.model import Report
from ratioscope.views.timeline import Timeline

runner = CliRunner()
NAN = float("nan")
ROWS, WIDTH = 8, 6


def _batch_columns(seed: int, step: int = 0) -> dict[str, torch.Tensor]:
    """A hand-made dump with two reward functions; ``accuracy`` gave no value (NaN) to
    rows 1 and 6, ``format`` is boolean."""
    rng = np.random.default_rng(seed)
    lengths = rng.integers(1, WIDTH + 1, size=ROWS)
    mask = torch.tensor(np.arange(WIDTH)[None, :] < lengths[:, None])
    old = torch.tensor(-rng.gamma(1.0, 0.5, size=(ROWS, WIDTH)), dtype=torch.float32)
    accuracy = torch.tensor(rng.integers(0, 3, size=ROWS) / 2, dtype=torch.float32)
    accuracy[[1, 6]] = NAN
    form = torch.tensor(rng.random(ROWS) < 0.6)
    return {
        "mask": mask,
        "old_log_probs": old,
        "log_probs": old + 0.01 * (step + 1),
        "advantages": torch.tensor(rng.normal(size=ROWS), dtype=torch.float32),
        "rewards": torch.nan_to_num(accuracy) + 0.5 * form.float(),
        "group": torch.arange(ROWS) // 4,
        "reward:accuracy": accuracy,
        "reward:format": form,
    }


def _plain(values: list[float]) -> tuple[int, float, float]:
    """Count, mean and population std of the values that are not NaN, as loops."""
    kept = [v for v in values if not math.isnan(v)]
    mean = sum(kept) / len(kept)
    return len(kept), mean, math.sqrt(sum((v - mean) ** 2 for v in kept) / len(kept))


def _expected(columns: list[dict[str, torch.Tensor]], key: str) -> tuple[int, float, float]:
    return _plain([float(v) for c in columns for v in c[key].tolist()])


def _run(tmp_path: Path, steps: int = 4) -> list[Path]:
    paths = []
    (tmp_path / "run").mkdir()
    for step in range(steps):
        path = tmp_path / "run" / f"step_{step:04d}.pt"
        torch.save(_batch_columns(step, step), path)
        paths.append(path)
    return paths


def test_each_reward_function_equals_a_plain_loop_over_the_scored_sequences(tmp_path):
    paths = _run(tmp_path, 2)
    columns = [torch.load(p) for p in paths]
    report = ratioscope.analyze(paths, chunk_elements=3 * WIDTH)
    functions = report.vitals.reward.per_function
    assert list(functions) == ["accuracy", "format"]
    for name in functions:
        count, mean, std = _expected(columns, f"reward:{name}")
        assert functions[name].sequences == count
        assert functions[name].mean == pytest.approx(mean, rel=1e-12)
        assert functions[name].std == pytest.approx(std, rel=1e-12)
    assert functions["accuracy"].sequences == 2 * ROWS - 4  # two NaN rows a file
    # the report's JSON reads back with them; shard reports merge to the pooled one
    document = json.loads(json.dumps(report.to_dict()))
    assert Report.from_dict(document).vitals == report.vitals
    merged = merge_reports([ratioscope.analyze(p) for p in paths]).vitals.reward
    for name, function in functions.items():
        assert merged.per_function[name].sequences == function.sequences
        assert merged.per_function[name].mean == pytest.approx(function.mean, rel=1e-12)
        assert merged.per_function[name].std == pytest.approx(function.std, rel=1e-12)


def test_an_infinite_value_is_an_error_or_masks_its_sequence(tmp_path):
    columns = _batch_columns(0)
    columns["reward:accuracy"][3] = math.inf
    path = tmp_path / "inf.pt"
    torch.save(columns, path)
    result = runner.invoke(app, ["analyze", str(path), "-q"])
    assert result.exit_code == 2
    message = result.stderr.strip()
    assert "\n" not in message and str(path) in message
    assert "'reward:accuracy' has 1 infinite value(s), the first at row 3" in message
    masked = ratioscope.analyze(path, nonfinite="mask")
    assert any("masked 1 sequence(s) with a non-finite reward" in w for w in masked.warnings)
    # the sequence left out of its token statistics, its infinite value out of the mean
    assert masked.vitals.tokens == int(columns["mask"].sum()) - int(columns["mask"][3].sum())
    kept = [v for i, v in enumerate(columns["reward:accuracy"].tolist()) if i != 3]
    count, mean, _ = _plain(kept)
    accuracy = masked.vitals.reward.per_function["accuracy"]
    assert (accuracy.sequences, accuracy.mean) == (count, pytest.approx(mean, rel=1e-12))


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        (
            torch.ones(ROWS - 1),
            "'reward:accuracy' has shape [7] but 'mask' has shape [8] (expected one value per "
            "sequence)",
        ),
        (torch.ones(ROWS, WIDTH), "'reward:accuracy' has shape [8, 6]"),
        (["good"] * ROWS, "'reward:accuracy' is not a numeric tensor"),
    ],
)
def test_a_bad_reward_function_column_is_one_sentence_and_exit_2(tmp_path, value, problem):
    columns: dict = _batch_columns(0)
    columns["reward:accuracy"] = value
    path = tmp_path / "bad.pt"
    torch.save(columns, path)
    out = tmp_path / "report.json"
    result = runner.invoke(app, ["analyze", str(path), "--json", str(out), "-q"])
    assert result.exit_code == 2, result.output
    message = result.stderr.strip()
    assert "\n" not in message and str(path) in message and problem in message
    assert "Traceback" not in result.output and not out.exists()


def test_rows_devices_and_concatenation_keep_the_functions(tmp_path):
    batch = TokenBatch.from_tensors(_batch_columns(0), source="a")
    part = batch.select_rows(2, 5)
    assert torch.equal(part.reward_functions["format"], batch.reward_functions["format"][2:5])
    assert part.reward_functions["format"].dtype == torch.float32  # booleans as 0/1
    assert batch.to("meta").reward_functions["accuracy"].device.type == "meta"
    first, second = _run(tmp_path, 2)
    both = load([first, second])
    assert both.reward_functions["accuracy"].shape == (2 * ROWS,)
    columns = _batch_columns(1)
    del columns["reward:format"]
    torch.save(columns, second)
    partial = concatenate([load(first), load(second)])
    assert list(partial.reward_functions) == ["accuracy"]
    assert any("'reward:format' is not in every file" in w for w in partial.warnings)
    with pytest.raises(InputError, match="not a reward function's values"):
        TokenBatch.from_tensors({**_batch_columns(0), "reward:": torch.ones(ROWS)}, source="x")


def test_a_function_some_files_lack_or_without_a_total_reward_is_said(tmp_path):
    first, second = _run(tmp_path, 2)
    columns = _batch_columns(1)
    del columns["reward:format"]
    torch.save(columns, second)
    report = ratioscope.analyze([first, second])
    assert report.vitals.reward.per_function["format"].sequences == ROWS
    assert "vitals: reward function format is in 1 of 2 files; its numbers are those " in (
        " ".join(report.warnings)
    )
    del columns["rewards"]
    torch.save(columns, second)
    alone = ratioscope.analyze(second)
    assert alone.vitals.reward is None
    assert any("reward functions (accuracy) are not reported" in w for w in alone.warnings)


def test_timeline_and_compare_follow_each_function_per_step(tmp_path):
    paths = _run(tmp_path)
    json_out, parquet_out = tmp_path / "timeline.json", tmp_path / "timeline.parquet"
    result = runner.invoke(
        app,
        ["timeline", str(tmp_path / "run"), "--json", str(json_out), "--parquet", str(parquet_out),
         "--columns", "reward,r:accuracy,r:format", "-q"],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert "r:accuracy" in result.stdout and "r:format" in result.stdout
    document = json.loads(json_out.read_text())
    keys = [h["key"] for h in document["headlines"]]
    at = keys.index("vitals.reward.mean")
    assert keys[at + 1 : at + 3] == [
        "vitals.reward.per_function.accuracy.mean",
        "vitals.reward.per_function.format.mean",
    ]
    frame = pl.read_parquet(parquet_out)
    for item, path, row in zip(document["steps"], paths, frame.iter_rows(named=True), strict=True):
        columns = torch.load(path)
        for name in ("accuracy", "format"):
            key = f"vitals.reward.per_function.{name}.mean"
            _, mean, _ = _plain([float(v) for v in columns[f"reward:{name}"].tolist()])
            assert item["values"][key] == pytest.approx(mean, rel=1e-12)
            assert row[key] == pytest.approx(mean, rel=1e-12)
    # read back, the short names and the columns option still work
    again = Timeline.from_dict(document)
    assert [h.short for h in again.headlines[at + 1 : at + 3]] == ["r:accuracy", "r:format"]
    # the default columns leave them out and say how to show them
    plain = runner.invoke(app, ["timeline", str(tmp_path / "run"), "-q"])
    assert "each reward function's mean: --columns r:accuracy,r:format" in plain.stdout
    compared = ratioscope.compare(paths[0], paths[-1])
    rows = {row.key: row for row in compared.headlines}
    for name in ("accuracy", "format"):
        row = rows[f"vitals.reward.per_function.{name}.mean"]
        first = _plain([float(v) for v in torch.load(paths[0])[f"reward:{name}"].tolist()])[1]
        last = _plain([float(v) for v in torch.load(paths[-1])[f"reward:{name}"].tolist()])[1]
        assert (row.total.a, row.total.b) == (pytest.approx(first), pytest.approx(last))
    timelines = ratioscope.compare(again, again)
    assert "vitals.reward.per_function.format.mean" in {r.key for r in timelines.headlines}


def test_analyze_shows_each_function_and_the_catalog_lists_it(tmp_path):
    paths = _run(tmp_path, 1)
    result = runner.invoke(app, ["analyze", str(paths[0])], env={"COLUMNS": "100"})
    assert result.exit_code == 0, result.output
    lines = [line for line in result.stdout.splitlines() if "reward: " in line]
    assert (
        len(lines) == 2 and "reward: accuracy" in lines[0] and "of 8 responses scored" in lines[0]
    )
    out = tmp_path / "r.json"
    runner.invoke(app, ["analyze", str(paths[0]), "--json", str(out), "-q"])
    listed = runner.invoke(app, ["metrics", str(out), "--search", "per_function", "--json"])
    keys = {row["key"] for row in json.loads(listed.stdout)}
    assert "vitals.reward.per_function.format.mean" in keys
