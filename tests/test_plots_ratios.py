"""plot spectrum|windows|runlengths|ratios: from a dump and from a report JSON."""

from __future__ import annotations

import pytest
from dumps import make_reference, write_layout
from typer.testing import CliRunner

from ratioscope.cli import app

runner = CliRunner()
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def dump_and_report(tmp_path_factory):
    directory = tmp_path_factory.mktemp("plots")
    dump = write_layout(make_reference(seed=9, rows=8, width=160), "verl", directory)
    report = directory / "report.json"
    result = runner.invoke(app, ["analyze", str(dump), "--json", str(report), "-q"])
    assert result.exit_code == 0, result.stderr
    return dump, report


@pytest.mark.parametrize("kind", ["spectrum", "windows", "runlengths"])
@pytest.mark.parametrize("source", ["dump", "report"])
def test_kinds_draw_from_a_dump_and_from_a_report(tmp_path, dump_and_report, kind, source):
    dump, report = dump_and_report
    out = tmp_path / f"{kind}.png"
    path = dump if source == "dump" else report
    result = runner.invoke(app, ["plot", kind, str(path), "--out", str(out), "-q"])
    assert result.exit_code == 0, result.stderr
    assert out.read_bytes().startswith(PNG_MAGIC)


def test_svg_and_pdf_by_suffix(tmp_path, dump_and_report):
    _, report = dump_and_report
    for suffix, magic in ((".svg", b"<?xml"), (".pdf", b"%PDF")):
        out = tmp_path / f"spectrum{suffix}"
        result = runner.invoke(app, ["plot", "spectrum", str(report), "--out", str(out)])
        assert result.exit_code == 0, result.stderr
        assert out.read_bytes().startswith(magic)


def test_ratio_trace_of_one_sequence(tmp_path, dump_and_report):
    dump, report = dump_and_report
    out = tmp_path / "trace.png"
    result = runner.invoke(app, ["plot", "ratios", str(dump), "--sequence", "3", "--out", str(out)])
    assert result.exit_code == 0, result.stderr
    assert out.read_bytes().startswith(PNG_MAGIC)
    for args, fragment in (
        ([str(dump), "--sequence", "99"], "out of range: the input has 8 sequences"),
        ([str(report)], "needs a dump"),
    ):
        out = tmp_path / "bad.png"
        result = runner.invoke(app, ["plot", "ratios", *args, "--out", str(out)])
        assert result.exit_code == 2 and fragment in result.stderr
        assert not out.exists()


def test_bad_suffix_and_bad_report_write_nothing(tmp_path, dump_and_report):
    dump, _ = dump_and_report
    out = tmp_path / "figure.txt"
    result = runner.invoke(app, ["plot", "spectrum", str(dump), "--out", str(out)])
    assert result.exit_code == 2 and "suffix" in result.stderr
    not_a_report = tmp_path / "other.json"
    not_a_report.write_text('{"schema_version": 1, "by_method": {}}')
    out = tmp_path / "spectrum.png"
    result = runner.invoke(app, ["plot", "spectrum", str(not_a_report), "--out", str(out)])
    assert result.exit_code == 2 and "not an analyze report" in result.stderr
    assert not out.exists()


# ---- options, outputs and what the figures say -------------------------------------


@pytest.mark.parametrize(
    ("kind", "args", "message"),
    [
        ("spectrum", ["--window", "100"], "--window applies only to dump input; the report "
         "report.json was made with window 50"),
        ("windows", ["--on-band", "1e-3"], "was made with on band 0.0003,0.0004"),
        ("runlengths", ["--kalman-q", "1e-4"], "was made with kalman q 1e-06"),
        ("covariance", ["--cov-scope", "batch"], "--cov-scope applies only to dump input"),
    ],
)  # fmt: skip
def test_report_input_refuses_analysis_options_it_was_not_made_with(
    tmp_path, dump_and_report, kind, args, message
):
    _, report = dump_and_report
    out = tmp_path / "f.png"
    result = runner.invoke(app, ["plot", kind, str(report), *args, "-o", str(out)])
    assert result.exit_code == 2 and message in result.stderr
    assert not out.exists()
    same = {"--window": "50", "--on-band": "3e-4,4e-4", "--kalman-q": "1e-6"}.get(args[0])
    if same is not None:  # the report's own value is fine
        result = runner.invoke(app, ["plot", kind, str(report), args[0], same, "-o", str(out)])
        assert result.exit_code == 0, result.stderr


@pytest.mark.parametrize("kind", ["spectrum", "windows", "runlengths", "covariance", "ratios"])
def test_every_kind_takes_o_and_names_the_file_it_wrote(tmp_path, dump_and_report, kind):
    dump, _ = dump_and_report
    out = tmp_path / f"{kind}.png"
    result = runner.invoke(app, ["plot", kind, str(dump), "-o", str(out)])
    assert result.exit_code == 0, result.stderr
    assert result.stderr.endswith(f"wrote {out}\n") and out.read_bytes().startswith(PNG_MAGIC)
    result = runner.invoke(app, ["plot", kind, str(dump), "-o", str(out), "--quiet"])
    assert result.exit_code == 0 and "wrote" not in result.stderr
    result = runner.invoke(app, ["plot", kind, str(dump), "-o", str(tmp_path / "no" / "x.png")])
    assert result.exit_code == 2 and "does not exist" in result.stderr


def test_ratios_help_does_not_offer_reports():
    result = runner.invoke(app, ["plot", "ratios", "--help"])
    assert result.exit_code == 0
    text = " ".join(result.stdout.replace("│", " ").split())  # rich boxes and wraps the help
    assert "a report JSON holds no per-token ratios" in text and "--quiet" in text
    assert "plotted as stored" not in text and "--device" not in text


@pytest.fixture
def captured(monkeypatch):
    """The figures the ratio plots would save, kept open for inspection."""
    from ratioscope.render.png import ratios as ratio_plots

    figures = []
    monkeypatch.setattr(ratio_plots, "save_figure", lambda figure, out: figures.append(figure))
    yield figures
    import matplotlib.pyplot as plt

    for figure in figures:
        plt.close(figure)


def _texts(figure) -> list[str]:
    return [text.get_text() for text in figure.findobj(lambda a: hasattr(a, "get_text"))]


def _report(window_counts, histograms):
    """A minimal report: one variant per histogram entry, 100 sequences analysed."""
    import math

    from ratioscope.report.model import InputInfo, Report
    from ratioscope.sections.distribution import Distribution
    from ratioscope.sections.ratios import VariantStats

    empty = Distribution(count=0, mean=math.nan, std=0.0, min=math.nan, max=math.nan, quantiles={})
    ratios = {}
    for variant, histogram in histograms.items():
        ratios[variant] = VariantStats(
            distribution=empty,
            clip_band=(0.2, 0.28),
            clip_fraction=None,
            surrogate=None,
            run_length_histogram=histogram,
            run_length_mean={s: None for s in histogram},
            window_frequency={
                "mean": [0.2] * len(window_counts),
                "var": [0.01] * len(window_counts),
                "count": window_counts,
            },
        )
    info = InputInfo("d.pt", "pt", "verl", "", sequences=100, tokens=0, padding="right")
    return Report(tool={}, inputs=[info], params={"analysis": {"window": 50}}, ratios=ratios)


def test_runlengths_use_markers_only_define_states_and_leave_out_the_sequence_row(
    tmp_path, captured
):
    from ratioscope.render.png.ratios import plot_runlengths

    token = {"up": {"1": 20, "2": 20, "3": 1, "9": 1}, "down": {"1": 5}, "on": {"4": 20}}
    kalman = {"up": {}, "down": {}, "on": {"100": 3}}
    sequence = {"up": {"128": 4}, "down": {}, "on": {"128": 2}}
    report = _report([], {"token": token, "sequence": sequence, "kalman": kalman})
    report.params["analysis"].update(on_band=[3e-4, 4e-4], token_on_band=[2**-24, 2**-24])
    plot_runlengths(report, tmp_path / "r.png")
    (figure,) = captured
    texts = _texts(figure)
    assert "Kalman-filtered (KPO): no up runs" in texts
    assert "Kalman-filtered (KPO): no down runs" in texts
    assert not any("no on runs" in t for t in texts)
    # the sequence row is not drawn, and the caption says why
    assert not any(t.startswith("sequence ratio") for t in texts)
    caption = " ".join(texts)
    assert "sequence ratio (GSPO/GMPO) is left out" in caption
    assert "raw rows r = 1" in caption and "Kalman rows r in [1 - 0.0003, 1 + 0.0004]" in caption
    up = figure.axes[0]
    # markers for all four lengths, and no line anywhere: one style for every row
    assert sum(len(c.get_offsets()) for c in up.collections) == 4
    assert all(not axes.get_lines() for axes in figure.axes)


def test_windows_fade_rarely_reached_windows_and_use_integer_ticks(tmp_path, captured):
    from ratioscope.render.png.ratios import plot_windows, window_reach

    counts = [100, 60, 10, 9, 2]  # 10% of the 100 sequences: the last two are faded
    assert window_reach(counts, 100) == [True, True, True, False, False]
    plot_windows(_report(counts, {"token": {}}), tmp_path / "w.png")
    (figure,) = captured
    main, count_axes = figure.axes
    figure.canvas.draw()
    ticks = [t for t in count_axes.get_xticks() if -0.5 <= t <= 4.5]
    assert ticks and all(float(t).is_integer() for t in ticks)
    assert [bar.get_height() for bar in count_axes.patches] == counts
    solid, faded = main.get_lines()[:2]
    assert [y == y for y in solid.get_ydata()] == [True, True, True, False, False]
    assert list(faded.get_xdata()) == [2, 3, 4] and faded.get_alpha() < 1
    assert any("faded: window reached by < 10%" in t for t in _texts(figure))
    assert any("10% of the sequences (10): windows under this line" in t for t in _texts(figure))


def test_windows_draw_the_sequence_row_without_a_band(tmp_path, captured):
    from ratioscope.render.png.ratios import plot_windows

    plot_windows(_report([100, 90], {"token": {}, "sequence": {}}), tmp_path / "w.png")
    (figure,) = captured
    main = figure.axes[0]
    assert len(main.collections) == 1  # the token band only
    assert any("sequence ratio (GSPO/GMPO): mean only (no band" in t for t in _texts(figure))


def test_trace_zoom_shows_the_band_and_the_smooth_signals(tmp_path, captured):
    import math

    from ratioscope.figures.ratios import RatioTrace
    from ratioscope.render.png.ratios import plot_trace

    token = [0.0, -0.1, 0.002, 0.3, 0.0]
    kalman = [0.0, -2e-5, -1e-5, 5e-5, 4e-5]
    trace = RatioTrace(
        source="d.pt", row=0, token=token, sequence=[0.04] * 5, kalman=kalman,
        on_band=(3e-4, 4e-4), qv=1e-6,
    )  # fmt: skip
    plot_trace(trace, tmp_path / "t.png")
    (figure,) = captured
    full, zoom = figure.axes
    low, high = zoom.get_ylim()
    assert high >= 0.04 and low <= math.log1p(-3e-4)  # sequence level and band inside
    assert high < 0.3 / 2  # far tighter than the raw spikes of the upper panel
    assert full.get_ylim()[1] >= 0.3
    # -0.1 and 0.3 lie beyond the zoom (at most ~0.05 here), 0.002 and the zeros within
    assert any("2 of 5 lie outside this range" in t for t in _texts(figure))


@pytest.mark.parametrize("kind", ["spectrum", "windows", "runlengths"])
def test_legends_sit_outside_every_panel(kind, dump_and_report, captured, tmp_path):
    import json

    from ratioscope.render.png import ratios as ratio_plots
    from ratioscope.report.model import Report

    _, report = dump_and_report
    document = Report.from_dict(json.loads(report.read_text()))
    getattr(ratio_plots, f"plot_{kind}")(document, tmp_path / "f.png")
    (figure,) = captured
    renderer = figure.canvas.get_renderer()
    figure.canvas.draw()
    legends = [axes.get_legend() for axes in figure.axes if axes.get_legend() is not None]
    assert legends
    for legend in legends:
        box = legend.get_window_extent(renderer)
        for axes in figure.axes:
            assert not box.overlaps(axes.get_window_extent(renderer)), (kind, axes.get_title())
