"""``ratioscope timeline`` and ``ratioscope plot timeline``: outputs, errors, the figure."""

from __future__ import annotations

import json
from pathlib import Path

import torch
from timeline_run import write_run
from typer.testing import CliRunner

from ratioscope.cli import app

runner = CliRunner()
SAMPLE = Path(__file__).resolve().parents[1] / "sample_data" / "verl"


def test_timeline_prints_the_verdict_and_the_table_and_writes_json(tmp_path):
    out = tmp_path / "timeline.json"
    result = runner.invoke(app, ["timeline", str(SAMPLE), "--json", str(out), "-q"])
    assert result.exit_code == 0, result.output
    assert result.stdout.startswith("health:")
    assert "Timeline: 4 steps" in result.stdout and "change:" in result.stdout
    document = json.loads(out.read_text())
    assert document["kind"] == "timeline" and [s["step"] for s in document["steps"]] == [
        8, 16, 24, 32
    ]  # fmt: skip
    assert document["verdict"]["kind"] == "verdict"
    # step 32 judged against the first three steps: all within 10x (docs/health.md)
    (relative,) = [f for f in document["verdict"]["findings"] if f["key"] == "relative"]
    assert relative["level"] == "green"
    assert relative["text"].startswith("against its first steps (8, 16, 24): every later step")


def test_timeline_leads_with_the_answer_and_detail_prints_every_finding(tmp_path):
    out = tmp_path / "timeline.json"
    brief = runner.invoke(app, ["timeline", str(SAMPLE), "--json", str(out), "-q"])
    assert brief.exit_code == 0, brief.output
    document = json.loads(out.read_text())
    verdict = document["verdict"]
    block = brief.stdout.split("Timeline: ")[0].splitlines()
    # the bottom line with the first yellow step (step 8: 21 % of its responses at the
    # length limit), the problems of the last step judged on its own (8 of its 16 groups
    # with equal rewards) and the entropy's fall over the last three steps; the green
    # checks by name on one line, the notes by name on one; the pooled report is green
    assert block[0].startswith(
        "health: 3 problems: equal-reward groups, zero-advantage tokens, entropy falling; "
        "first yellow at step 8"
    ), block
    problems = [f for f in verdict["findings"] if f["level"] != "green"]
    assert all(
        f["text"].startswith("step 32 alone: ") or f["key"] == "trend.entropy_falling"
        for f in problems
    ), problems
    assert not any("at or below" in line for line in block)
    assert "note    FPA approximation (about the analysis, not the run; in full: --detail)" in (
        brief.stdout
    )
    detail = runner.invoke(app, ["timeline", str(SAMPLE), "--detail", "-q"])
    assert detail.exit_code == 0, detail.output
    full = " ".join(detail.stdout.split("Timeline: ")[0].split())
    for item in [*verdict["findings"], *verdict["notes"]]:
        assert " ".join(item["text"].split()) in full


def test_timeline_reports_dir_is_accepted_by_merge(tmp_path):
    reports = tmp_path / "steps"
    result = runner.invoke(app, ["timeline", str(SAMPLE), "--reports-dir", str(reports), "-q"])
    assert result.exit_code == 0, result.output
    files = sorted(str(p) for p in reports.iterdir())
    assert len(files) == 4
    merged = runner.invoke(app, ["merge", *files, "--out", str(tmp_path / "all.json"), "-q"])
    assert merged.exit_code == 0, merged.output


def test_a_file_without_a_step_is_one_line_exit_2_and_no_output(tmp_path):
    path = tmp_path / "dump.pt"
    torch.save({"mask": torch.ones(2, 3)}, path)
    out = tmp_path / "t.json"
    result = runner.invoke(app, ["timeline", str(path), "--json", str(out)])
    assert result.exit_code == 2
    line = result.stderr.strip()
    assert "\n" not in line and str(path) in line and "--step-from" in line
    assert not out.exists()


def test_a_bad_step_from_is_one_line_exit_2(tmp_path):
    result = runner.invoke(app, ["timeline", str(SAMPLE), "--step-from", "step_("])
    assert result.exit_code == 2
    assert result.stderr.startswith("ratioscope: error: --step-from is not a regular expression")
    result = runner.invoke(app, ["timeline", str(SAMPLE), "--step-from", r"step_\d+"])
    assert result.exit_code == 2 and "exactly one capture group" in result.stderr


def test_no_files_is_exit_2(tmp_path):
    result = runner.invoke(app, ["timeline", str(tmp_path)])
    assert result.exit_code == 2 and "holds no dump file" in result.stderr
    result = runner.invoke(app, ["timeline", str(tmp_path / "missing")])
    assert result.exit_code == 2 and "no such file" in result.stderr


def test_plot_timeline_from_json_and_from_dumps_writes_a_png(tmp_path):
    write_run(tmp_path / "run", steps=7, jump_at=6)
    out = tmp_path / "t.json"
    assert (
        runner.invoke(app, ["timeline", str(tmp_path / "run"), "--json", str(out)]).exit_code == 0
    )
    for source in (out, tmp_path / "run"):
        png = tmp_path / f"{source.name}.png"
        result = runner.invoke(app, ["plot", "timeline", str(source), "--out", str(png), "-q"])
        assert result.exit_code == 0, result.output
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_timeline_figure_marks_the_flagged_steps(tmp_path):
    import ratioscope
    from ratioscope.figures.timeline import timeline_figure

    write_run(tmp_path, steps=7, jump_at=6)
    figure = timeline_figure(ratioscope.timeline(tmp_path))
    k3 = next(p for p in figure.panels if p.key == "mismatch.policy.k3")
    assert k3.steps == tuple(range(7)) and k3.flagged == (6,)


def test_a_samples_file_in_the_run_folder_is_skipped_with_a_warning(tmp_path):
    """analyze skips a file of another kind found in a folder, with a note; timeline
    stopped at it: "no training step found"."""
    import shutil

    root = Path(__file__).resolve().parents[1] / "sample_data"
    run = tmp_path / "run"
    run.mkdir()
    for dump in sorted((root / "verl_steps").glob("step_*.pt"))[:2]:
        shutil.copy(dump, run / dump.name)
    shutil.copy(root / "samples.jsonl", run / "samples.jsonl")
    out = tmp_path / "timeline.json"
    result = runner.invoke(app, ["timeline", str(run), "--json", str(out), "--no-cache"])
    assert result.exit_code == 0, result.output
    assert "warning: skipped" in result.stderr and "samples.jsonl: this is a samples file" in (
        result.stderr
    )
    document = json.loads(out.read_text())
    assert len(document["steps"]) == 2
    assert any("samples.jsonl" in w for w in document["warnings"])
    for dump in run.glob("*.pt"):
        dump.unlink()
    alone = runner.invoke(app, ["timeline", str(run), "--no-cache"])
    assert alone.exit_code == 2
    assert "no input holds token data to analyse" in alone.stderr
    named = runner.invoke(app, ["timeline", str(run / "samples.jsonl"), "--no-cache"])
    assert named.exit_code == 2 and "this is a samples file" in named.stderr
