"""ratioscope.capture: files a training loop writes and ``ratioscope analyze``/``merge`` read.

Every check compares against what the test itself passed in (numpy on the input
tensors, group labels counted by hand, file sizes on disk) or against the analysis of
the written files by the CLI, never against the writer's own bookkeeping alone.
"""

from __future__ import annotations

import json
import math
from collections import Counter
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

import ratioscope
from ratioscope.capture import CaptureWriter, part_path, read_capture_metadata, report_path
from ratioscope.cli import app

runner = CliRunner()


def micro_batch(
    seed: int, rows: int = 16, width: int = 40, group_size: int = 4, longest: int = 30
) -> dict:
    """Canonical tensors as a trainer holds them: float64, trailing all-padding columns
    (no row is longer than ``longest``), garbage in the padding, str group labels."""
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(2, longest + 1, (rows,), generator=g)
    lengths[0] = longest
    mask = torch.arange(width)[None, :] < lengths[:, None]
    old = -torch.rand(rows, width, generator=g, dtype=torch.float64) * 2
    new = old + 0.2 * torch.randn(rows, width, generator=g, dtype=torch.float64)
    rewards = torch.randint(0, 2, (rows,), generator=g).double()
    labels = [f"s{seed}-q{i // group_size}" for i in range(rows)]
    values = {
        "mask": mask,
        "log_probs": new.masked_fill(~mask, 7.0).requires_grad_(),
        "old_log_probs": old.masked_fill(~mask, float("nan")),
        "rollout_log_probs": old + 0.01 * torch.randn(rows, width, generator=g).double(),
        "ref_log_probs": old + 0.3 * torch.randn(rows, width, generator=g).double(),
        "advantages": torch.randn(rows, generator=g),
        "entropy": torch.rand(rows, width, generator=g),
        "old_entropy": torch.rand(rows, width, generator=g),
        "rewards": rewards,
        "token_ids": torch.randint(0, 50_000, (rows, width), generator=g),
        "group": labels,
    }
    return values


def files_under(directory: Path) -> list[Path]:
    return sorted(p for p in directory.rglob("*") if p.is_file())


def strip(document: dict) -> dict:
    return {k: v for k, v in document.items() if k not in ("tool", "inputs", "state", "warnings")}


def close(a, b, rel: float, where: str = "") -> None:
    """Recursive comparison: floats to ``rel``, everything else exactly."""
    if isinstance(a, dict):
        assert a.keys() == b.keys(), where
        for key in a:
            close(a[key], b[key], rel, f"{where}.{key}")
    elif isinstance(a, list):
        assert len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            close(x, y, rel, f"{where}[{i}]")
    elif isinstance(a, float) or isinstance(b, float):
        assert math.isclose(a, b, rel_tol=rel, abs_tol=1e-12), (where, a, b)
    else:
        assert a == b, (where, a, b)


def get(document: dict, path: str):
    for key in path.split("."):
        document = document[key]
    return document


# ------------------------------------------------------------------------ tensors mode
def test_part_file_holds_float32_rows_trimmed_and_analyze_reads_it(tmp_path):
    data = micro_batch(0)
    writer = CaptureWriter(tmp_path, rank=2)
    path = writer.write(7, **data)
    assert (
        path == tmp_path / "step_000007" / "rank_00002_part_0000.pt" == part_path(tmp_path, 7, 2, 0)
    )
    stored = torch.load(path, map_location="cpu", weights_only=True)
    mask = data["mask"][:, :30]  # the 10 trailing all-padding columns are trimmed
    assert stored["mask"].dtype == torch.bool and torch.equal(stored["mask"], mask)
    for name in ("log_probs", "old_log_probs", "ref_log_probs", "entropy"):
        assert stored[name].dtype == torch.float32, name
        expected = data[name].detach()[:, :30].float()
        assert torch.equal(stored[name][mask], expected[mask]), name
    assert stored["advantages"].shape == (16,)  # [B] stays [B]: the loader broadcasts it
    assert stored["token_ids"].dtype == torch.int32
    assert torch.equal(stored["token_ids"].long(), data["token_ids"][:, :30])
    assert stored["group"] == data["group"]
    assert read_capture_metadata(path) == {
        "version": 1,
        "step": 7,
        "rank": 2,
        "part": 0,
        "seed": 0,
        "sample_fraction": 1.0,
        "rows_total": 16,
        "rows_sampled": 16,
        "rows_kept": 16,
        "groups_total": 4,
        "groups_sampled": 4,
        "groups_kept": 4,
    }
    # independent reference: numpy on the float32 values the trainer's tensors round to
    m = data["mask"].numpy()
    z = (
        data["log_probs"].detach().float().double().numpy()
        - data["old_log_probs"].float().double().numpy()
    )[m]
    report = ratioscope.analyze(tmp_path).to_dict()
    policy = report["mismatch"]["policy"]
    assert policy["tokens"] == int(m.sum()) and policy["sequences"] == 16
    assert math.isclose(policy["k1"], -z.mean(), rel_tol=1e-5)
    assert math.isclose(policy["k2"], (z**2 / 2).mean(), rel_tol=1e-5)
    assert report["trust_region"]["groups"] == 4
    assert not any("ratioscope_capture" in w for w in report["warnings"])


def test_cli_analyze_and_info_read_a_capture_directory_without_notes(tmp_path):
    run = tmp_path / "run"
    with CaptureWriter(run, rank=0) as writer:
        for step in range(2):
            for micro in range(2):
                writer.write(step, **micro_batch(10 * step + micro, rows=8))
    parts = files_under(run)
    assert [p.relative_to(run).as_posix() for p in parts] == [
        f"step_00000{s}/rank_00000_part_000{k}.pt" for s in range(2) for k in range(2)
    ]
    out = tmp_path / "report.json"
    result = runner.invoke(app, ["analyze", str(run), "--json", str(out), "-q"])
    assert result.exit_code == 0, result.output
    document = json.loads(out.read_text())
    assert len(document["inputs"]) == 4
    expected_tokens = sum(int(micro_batch(s, rows=8)["mask"].sum()) for s in (0, 1, 10, 11))
    assert document["mismatch"]["policy"]["tokens"] == expected_tokens
    assert "ratioscope_capture" not in result.output
    assert not any("ratioscope_capture" in w for w in document["warnings"])
    info = runner.invoke(app, ["info", str(parts[0])])
    assert info.exit_code == 0, info.output
    assert "note:" not in info.output  # the metadata keys are listed, not warned about
    assert "ratioscope_capture.rows_kept" in info.output


def test_files_load_with_weights_only_and_are_byte_identical_for_the_same_seed(tmp_path):
    data = micro_batch(1, rows=40, group_size=4)
    paths = []
    for name, seed in (("a", 5), ("b", 5), ("c", 6)):
        writer = CaptureWriter(tmp_path / name, sample_fraction=0.3, seed=seed)
        paths.append(writer.write(3, **data))
    first, same, other = (p.read_bytes() for p in paths)
    assert first == same
    assert first != other
    chosen = [set(torch.load(p, weights_only=True)["group"]) for p in paths]
    assert chosen[0] == chosen[1] != chosen[2]


# ---------------------------------------------------------------------------- sampling
def test_sampling_keeps_whole_groups_in_the_requested_share(tmp_path):
    data = micro_batch(2, rows=40, group_size=4)
    sizes = Counter(data["group"])
    writer = CaptureWriter(tmp_path, sample_fraction=0.3, seed=11)
    kept_sets = []
    for _ in range(4):  # the same inputs in four calls: each part samples afresh
        path = writer.write(0, **data)
        stored = torch.load(path, weights_only=True)
        kept = Counter(stored["group"])
        assert len(kept) == 3  # round(0.3 * 10 groups)
        assert all(kept[label] == sizes[label] for label in kept)  # groups are whole
        rows = [i for i, label in enumerate(data["group"]) if label in kept]
        mask = data["mask"][rows]
        width = stored["mask"].shape[1]
        assert torch.equal(stored["mask"], mask[:, :width]) and not mask[:, width:].any()
        old = data["old_log_probs"][rows][:, :width].float()
        assert torch.equal(stored["old_log_probs"][stored["mask"]], old[stored["mask"]])
        kept_sets.append(frozenset(kept))
        meta = read_capture_metadata(path)
        assert (meta["rows_total"], meta["rows_kept"], meta["groups_kept"]) == (40, 12, 3)
    assert len(set(kept_sets)) > 1
    summary = writer.summary()
    assert (summary.parts_written, summary.rows_total, summary.rows_kept) == (4, 160, 48)


def test_sampling_rows_without_groups_and_always_one_unit_with_tokens(tmp_path):
    data = micro_batch(3, rows=16)
    del data["group"]
    path = CaptureWriter(tmp_path / "rows", sample_fraction=0.25).write(0, **data)
    stored = torch.load(path, weights_only=True)
    assert stored["mask"].shape[0] == 4 and "group" not in stored
    # only the group "q2" holds valid tokens: a tiny fraction must keep it, in every part
    data = micro_batch(4, rows=16, group_size=4)
    data["mask"] = data["mask"].clone()
    data["mask"][[i for i, g in enumerate(data["group"]) if not g.endswith("q2")]] = False
    writer = CaptureWriter(tmp_path / "tiny", sample_fraction=1e-6)
    for _ in range(5):
        stored = torch.load(writer.write(0, **data), weights_only=True)
        assert stored["group"] == ["s4-q2"] * 4
    # a call without any valid token writes nothing, and its part number stays used
    empty = dict(data, mask=torch.zeros_like(data["mask"]))
    assert writer.write(0, **empty) is None
    assert writer.write(0, **data) == part_path(tmp_path / "tiny", 0, 0, 6)
    assert writer.summary().parts_empty == 1


# -------------------------------------------------------------------------- byte bound
def test_byte_bound_samples_down_by_whole_groups_then_skips(tmp_path):
    data = micro_batch(5, rows=40, group_size=4)
    full = CaptureWriter(tmp_path / "full").write(0, **data).stat().st_size
    bound = int(1.6 * full)
    run = tmp_path / "bounded"
    writer = CaptureWriter(run, max_bytes_per_step=bound, seed=3)
    written = [writer.write(0, **data) for _ in range(4)]
    assert written[0] is not None and written[0].stat().st_size == full
    assert written[1] is not None  # sampled down to what was left
    reduced = torch.load(written[1], weights_only=True)
    kept = Counter(reduced["group"])
    sizes = Counter(data["group"])
    assert 0 < len(kept) < 10 and all(kept[g] == sizes[g] for g in kept)
    meta = read_capture_metadata(written[1])
    assert meta["rows_sampled"] == 40 and meta["rows_kept"] == 4 * len(kept)
    # a prefix bigger by one group would not have fitted: the bound is used, not wasted
    step_files = [p for p in written if p is not None]
    on_disk = sum(p.stat().st_size for p in step_files)
    assert on_disk <= bound
    assert bound - on_disk < full / 10 * 1.5
    assert None in written  # once even one group does not fit, the call is skipped
    skipped = [k for k, p in enumerate(written) if p is None]
    assert all(not part_path(run, 0, 0, k).exists() for k in skipped)
    summary = writer.summary()
    assert summary.parts_skipped == len(skipped) and summary.bytes_written == on_disk
    assert summary.rows_dropped_by_bytes == 40 * len(skipped) + (40 - meta["rows_kept"]) + sum(
        40 - read_capture_metadata(p)["rows_kept"] for p in step_files[2:]
    )
    # every step has its own budget
    assert writer.write(1, **data).stat().st_size == full
    # one byte short of the full file: the tensors fit, the file does not; the file
    # that is written instead is on disk alone (the oversized attempt is removed)
    near = CaptureWriter(tmp_path / "near", max_bytes_per_step=full - 1)
    path = near.write(0, **data)
    assert files_under(tmp_path / "near") == [path]
    assert path.stat().st_size <= full - 1 and read_capture_metadata(path)["rows_kept"] == 36
    # a bound below one group skips everything and leaves nothing behind
    tiny = CaptureWriter(tmp_path / "tiny", max_bytes_per_step=full // 50)
    assert tiny.write(0, **data) is None
    assert files_under(tmp_path / "tiny") == []
    assert tiny.summary().parts_skipped == 1
    assert ratioscope.analyze(run).mismatch is not None


# ------------------------------------------------------------------------------ atomic
def test_writes_are_atomic_and_a_failed_save_leaves_no_file(tmp_path, monkeypatch):
    data = micro_batch(6, rows=8)
    writer = CaptureWriter(tmp_path)
    writer.write(0, **data)
    assert [p.name for p in files_under(tmp_path)] == ["rank_00000_part_0000.pt"]

    def broken_save(obj, f, *args, **kwargs):
        f.write(b"half a file")
        raise RuntimeError("disk full")

    monkeypatch.setattr(torch, "save", broken_save)
    with pytest.raises(RuntimeError, match="disk full"):
        writer.write(0, **data)
    assert not part_path(tmp_path, 0, 0, 1).exists()
    assert [p.name for p in files_under(tmp_path)] == ["rank_00000_part_0000.pt"]


# -------------------------------------------------------------------------- validation
@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"sample_fraction": 0.0}, "sample_fraction"),
        ({"sample_fraction": 1.5}, "sample_fraction"),
        ({"sample_fraction": float("nan")}, "sample_fraction"),
        ({"max_bytes_per_step": 0}, "max_bytes_per_step"),
        ({"max_bytes_per_step": 100, "mode": "report"}, "max_bytes_per_step"),
        ({"mode": "pickle"}, "mode"),
        ({"seed": -1}, "seed"),
        ({"rank": -2}, "rank"),
        ({"analysis_options": {"window": 8}}, "mode 'report'"),
        ({"mode": "report", "analysis_options": {"windo": 8}}, "windo"),
        ({"mode": "report", "analysis_options": {"window": 1}}, "window"),
        ({"mode": "report", "analysis_options": {"sections": ["ratio"]}}, "ratio"),
    ],
)
def test_constructor_options_are_checked(tmp_path, options, message):
    with pytest.raises(ValueError, match=message):
        CaptureWriter(tmp_path, **options)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"log_probs": torch.zeros(16, 39)}, r"log_probs must be \[B, T\] = \[16, 40\]"),
        ({"advantages": torch.zeros(17)}, "advantages must be"),
        ({"rewards": torch.zeros(16, 2)}, "rewards must be"),
        ({"group": ["a"] * 15}, "group must hold B = 16"),
        ({"group": torch.zeros(16, 1, dtype=torch.long)}, "group must be"),
        ({"mask": torch.ones(16)}, "mask must be"),
        ({"mask": torch.full((16, 40), 2)}, "mask must hold only 0/1"),
        ({"entropy": torch.zeros(16, 40, dtype=torch.long)}, "entropy must be a floating"),
        ({"old_log_probs": None}, "old_log_probs is required"),
    ],
)
def test_write_names_the_argument_that_does_not_fit(tmp_path, change, message):
    writer = CaptureWriter(tmp_path)
    with pytest.raises(ValueError, match=message):
        writer.write(0, **{**micro_batch(7), **change})
    with pytest.raises(ValueError, match="step"):
        writer.write(-1, **micro_batch(7))
    assert files_under(tmp_path) == []


def test_rank_comes_from_the_environment_unless_given(tmp_path, monkeypatch):
    monkeypatch.setenv("RANK", "3")
    assert CaptureWriter(tmp_path).rank == 3
    assert CaptureWriter(tmp_path, rank=1).rank == 1
    monkeypatch.setenv("RANK", "three")
    with pytest.raises(ValueError, match="RANK"):
        CaptureWriter(tmp_path)
    monkeypatch.delenv("RANK")
    assert CaptureWriter(tmp_path).rank == 0


# ------------------------------------------------------------------------- report mode
ANALYSIS = {"window": 8, "cov_scope": "group"}
COMPARED = (
    "mismatch.policy.k3",
    "mismatch.policy.chi2_seq",
    "mismatch.rollout.k1",
    "ratios.token.switch_frequency",
    "ratios.kalman.lfr",
    "covariance.c.std",
    "covariance.weights.distribution.mean",
    "tepo.surrogate.token_mean",
    "trust_region.lam.mean",
)


def capture_run(directory: Path, mode: str, ranks=(0,), steps=(0, 1), parts=2) -> None:
    """The same micro-batches through writers of ``mode``; steps in descending order."""
    options = {"analysis_options": ANALYSIS} if mode == "report" else {}
    for rank in ranks:
        with CaptureWriter(
            directory, rank=rank, mode=mode, sample_fraction=0.75, seed=9, **options
        ) as writer:
            for step in sorted(steps, reverse=True):
                for part in range(parts):
                    seed = 100 * step + 10 * rank + part
                    writer.write(step, **micro_batch(seed, rows=24, width=48, longest=40))


def analyze_cli(paths: list[Path], out: Path) -> dict:
    options = ["--window", "8", "--cov-scope", "group", "-q", "--json", str(out)]
    result = runner.invoke(app, ["analyze", *map(str, paths), *options])
    assert result.exit_code == 0, result.output
    return json.loads(out.read_text())


def test_report_mode_equals_analyze_over_the_tensor_files(tmp_path):
    capture_run(tmp_path / "tensors", "tensors")
    capture_run(tmp_path / "reports", "report")
    assert [p.name for p in files_under(tmp_path / "reports")] == ["rank_00000.json"] * 2
    for step in (0, 1):
        from_files = analyze_cli([tmp_path / "tensors" / f"step_00000{step}"], tmp_path / "a.json")
        in_process = json.loads(report_path(tmp_path / "reports", step, 0).read_text())
        for path in COMPARED:
            assert get(in_process, path) is not None, path
            assert math.isclose(get(in_process, path), get(from_files, path), rel_tol=1e-9), path
        close(strip(in_process), strip(from_files), 1e-9)
        assert len(in_process["inputs"]) == 2  # one entry per micro-batch


def test_merge_of_rank_and_step_reports_equals_analyze_of_every_file(tmp_path):
    capture_run(tmp_path / "tensors", "tensors", ranks=(0, 1))
    capture_run(tmp_path / "reports", "report", ranks=(0, 1))
    shards = files_under(tmp_path / "reports")
    assert [p.relative_to(tmp_path / "reports").as_posix() for p in shards] == [
        f"step_00000{s}/rank_0000{r}.json" for s in range(2) for r in range(2)
    ]
    merged_path = tmp_path / "merged.json"
    result = runner.invoke(app, ["merge", *map(str, shards), "--out", str(merged_path), "-q"])
    assert result.exit_code == 0, result.output
    merged = json.loads(merged_path.read_text())
    whole = analyze_cli([tmp_path / "tensors"], tmp_path / "whole.json")
    assert len(whole["inputs"]) == len(merged["inputs"]) == 8
    for path in COMPARED:
        assert math.isclose(get(merged, path), get(whole, path), rel_tol=1e-9), path
    close(strip(merged), strip(whole), 1e-9)


def test_report_mode_lifecycle_and_summary(tmp_path):
    writer = CaptureWriter(tmp_path, mode="report")
    assert writer.write(5, **micro_batch(8, rows=8)) is None
    writer.write(2, **micro_batch(9, rows=8))  # an earlier step after a later one
    assert files_under(tmp_path) == []  # nothing is written before a step ends
    assert writer.end_step(2) == report_path(tmp_path, 2, 0)
    with pytest.raises(ValueError, match="step 2 was ended"):
        writer.write(2, **micro_batch(9, rows=8))
    assert writer.end_step(2) is None and writer.end_step(99) is None
    writer.close()
    assert report_path(tmp_path, 5, 0).exists()
    with pytest.raises(ValueError, match="closed"):
        writer.write(6, **micro_batch(8, rows=8))
    summary = writer.summary()
    on_disk = sum(p.stat().st_size for p in files_under(tmp_path))
    assert (summary.parts_written, summary.reports_written) == (2, 2)
    assert (summary.rows_total, summary.rows_kept, summary.bytes_written) == (16, 16, on_disk)


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_bfloat16_inputs_give_the_file_of_their_float32_values(tmp_path):
    data = micro_batch(12)
    on_gpu = {
        k: v.detach().to("cuda", torch.bfloat16) if torch.is_tensor(v) and v.is_floating_point()
        else v.to("cuda") if torch.is_tensor(v) else v
        for k, v in data.items()
    }  # fmt: skip
    on_cpu = {
        k: v.detach().to(torch.bfloat16) if torch.is_tensor(v) and v.is_floating_point() else v
        for k, v in data.items()
    }
    gpu_file = CaptureWriter(tmp_path / "gpu", sample_fraction=0.5).write(0, **on_gpu)
    cpu_file = CaptureWriter(tmp_path / "cpu", sample_fraction=0.5).write(0, **on_cpu)
    assert gpu_file.read_bytes() == cpu_file.read_bytes()
    assert torch.load(gpu_file, weights_only=True)["log_probs"].dtype == torch.float32


def test_the_example_in_the_docs_runs_and_analyze_reads_its_output(tmp_path, monkeypatch):
    import re

    text = (Path(__file__).resolve().parents[1] / "docs" / "capture.md").read_text()
    example = re.search(r"```python\n(.*?)```", text, re.S).group(1)
    monkeypatch.chdir(tmp_path)
    exec(compile(example, "docs/capture.md", "exec"), {"print": lambda *args: None})
    assert len(files_under(tmp_path / "captures")) == 3
    assert ratioscope.analyze(tmp_path / "captures").mismatch is not None


def test_report_mode_analyses_with_the_trainer_settings(tmp_path):
    """Mode "report" takes the clip band, the length limit and the group size from the
    trainer's settings, as analyze takes them from the part files' recorded settings."""
    from ratioscope.data.trainer_settings import TrainerSettings

    settings = TrainerSettings(
        "trl",
        {"epsilon": 0.1, "epsilon_high": 0.15, "max_completion_length": 30, "num_generations": 4},
    )
    batch = micro_batch(5, rows=24, width=48, longest=40)
    with CaptureWriter(tmp_path / "reports", mode="report", trainer_settings=settings) as writer:
        writer.write(0, **batch)
    with CaptureWriter(tmp_path / "tensors") as writer:  # no settings recorded
        writer.write(0, **batch)
    report = json.loads(report_path(tmp_path / "reports", 0, 0).read_text())
    analysis = report["params"]["analysis"]
    assert analysis["clip"] == [0.1, 0.15] and analysis["max_length"] == 30
    applied = report["params"]["trainer"]["applied"]
    assert applied["clip"].startswith("trainer settings") and "group_size" in applied
    # the same rows analysed with the trainer's values given as options
    given = ratioscope.analyze(tmp_path / "tensors", clip=(0.1, 0.15), max_length=30).to_dict()
    for path in ("ratios.token.clip_fraction", "vitals.length.at_limit"):
        assert get(report, path) == get(given, path), path
    # an analysis option wins over the trainer's
    with CaptureWriter(
        tmp_path / "chosen", mode="report", trainer_settings=settings,
        analysis_options={"clip": (0.2, 0.28)},
    ) as writer:  # fmt: skip
        writer.write(0, **batch)
    chosen = json.loads(report_path(tmp_path / "chosen", 0, 0).read_text())
    assert chosen["params"]["analysis"]["clip"] == [0.2, 0.28]
    assert chosen["params"]["trainer"]["applied"]["clip"] == "option"
