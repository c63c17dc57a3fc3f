"""``plot compare``: the figure of ``compare`` for two timelines and for two reports."""

from __future__ import annotations

import json
from pathlib import Path

from test_compare import _timeline
from typer.testing import CliRunner

from ratioscope.cli import app
from ratioscope.figures.compare import compare_figure
from ratioscope.views.compare import compare
from ratioscope.views.timeline import HEADLINES

DATA = Path(__file__).parent / "data"
REPORT_A = DATA / "report_schema1.json"
REPORT_B = DATA / "report_schema1_step24.json"
SAMPLES = Path(__file__).parents[1] / "sample_data" / "samples.jsonl"
PNG = b"\x89PNG\r\n\x1a\n"
runner = CliRunner()


def _timeline_files(tmp_path: Path) -> list[Path]:
    a = {step: 1.0 + 0.01 * step for step in range(0, 20, 2)}
    b = {step: value * 1.05 for step, value in a.items() if step != 6}
    b[12] = a[12] * 1.5  # the one diverging step
    paths = []
    for name, values in (("a", a), ("b", b)):
        paths.append(tmp_path / f"{name}.json")
        paths[-1].write_text(json.dumps(_timeline(values)))
    return paths


def test_timeline_figure_data_marks_the_diverging_step(tmp_path):
    path_a, path_b = _timeline_files(tmp_path)
    figure = compare_figure(compare(path_a, path_b))
    assert figure.kind == "timelines" and not figure.bars
    assert (figure.label_a, figure.label_b) == (f"A: {path_a}", f"B: {path_b}")
    assert len(figure.panels) == len(HEADLINES)
    panel = {p.key: p for p in figure.panels}["mismatch.policy.k3"]
    assert panel.diverging == (12,) and 6 not in panel.steps_a
    assert "1 step only in A" in figure.subtitle


def test_report_figure_data_is_the_relative_difference():
    result = compare(REPORT_A, REPORT_B)
    figure = compare_figure(result)
    assert figure.kind == "reports" and not figure.panels
    assert [bar.key for bar in figure.bars] == [h.key for h in HEADLINES]
    bars = {bar.key: bar for bar in figure.bars}
    assert bars["trust_region.degenerate_share"].rel_diff == -0.75
    assert bars["trust_region.degenerate_share"].diverges


def test_cli_writes_a_png_for_two_timelines(tmp_path):
    path_a, path_b = _timeline_files(tmp_path)
    out = tmp_path / "timelines.png"
    result = runner.invoke(app, ["plot", "compare", str(path_a), str(path_b), "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert out.read_bytes().startswith(PNG)


def test_cli_writes_a_png_for_two_reports(tmp_path):
    out = tmp_path / "reports.png"
    args = ["plot", "compare", str(REPORT_A), str(REPORT_B), "--out", str(out), "--rel", "0.1"]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    assert out.read_bytes().startswith(PNG)


def _one_line_error(args: list[str]) -> str:
    result = runner.invoke(app, args)
    assert result.exit_code == 2, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("ratioscope: error:")
    return lines[0]


def test_cli_refuses_a_bad_suffix_and_a_bad_input(tmp_path):
    out = tmp_path / "figure.txt"
    line = _one_line_error(["plot", "compare", str(REPORT_A), str(REPORT_B), "--out", str(out)])
    assert "suffix" in line and not out.exists()
    out = tmp_path / "figure.png"
    line = _one_line_error(["plot", "compare", str(SAMPLES), str(REPORT_A), "--out", str(out)])
    assert "neither an analyze report, a timeline JSON nor a dump" in line
    assert not out.exists()
