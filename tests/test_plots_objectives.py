"""plot covariance: where its labels sit."""

from __future__ import annotations

import pytest
from dumps import make_reference, write_layout
from typer.testing import CliRunner

from ratioscope.cli import app

runner = CliRunner()


@pytest.fixture
def captured(monkeypatch):
    """The figures plot_covariance would save, kept open for inspection."""
    from ratioscope.render.png import covariance as objective_plots

    figures = []
    monkeypatch.setattr(objective_plots, "save_figure", lambda figure, out: figures.append(figure))
    yield figures
    import matplotlib.pyplot as plt

    for figure in figures:
        plt.close(figure)


def test_each_top_share_label_points_at_its_own_point(tmp_path, captured):
    dump = write_layout(make_reference(seed=9, rows=8, width=160), "verl", tmp_path)
    report = tmp_path / "report.json"
    result = runner.invoke(app, ["analyze", str(dump), "--json", str(report), "-q"])
    assert result.exit_code == 0, result.stderr
    result = runner.invoke(app, ["plot", "covariance", str(report), "-o", str(tmp_path / "c.png")])
    assert result.exit_code == 0, result.stderr
    (figure,) = captured
    left = figure.axes[0]
    notes = [a for a in left.texts if a.get_text().startswith("top ")]
    assert notes
    for note in notes:
        x = float(note.get_text().split("%")[0].removeprefix("top "))
        share = float(note.get_text().split("hold ")[1].rstrip("%"))
        # the arrow ends at the label's own (x, share), not somewhere along the axis
        assert note.xy[0] == pytest.approx(x)
        assert note.xy[1] == pytest.approx(share, abs=0.05)
        assert note.arrow_patch is not None
