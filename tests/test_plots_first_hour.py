"""Issue 28, the figures a newcomer looks at: a quantity at float noise drawn against its
floor, readable tick labels, values beside relative bars, the objectives figure grouped by
scale on a sequence where the methods differ, labels inside the figure, and a dropped
variant that says why."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch
from dumps import make_reference, write_layout
from test_compare import _timeline

from ratioscope.figures.compare import compare_figure
from ratioscope.figures.timeline import (
    FLOAT32_LOG_RATIO_NOISE,
    TimelineFigure,
    TimelinePanel,
    near_one,
    noise_floor,
)
from ratioscope.views.compare import compare

DATA = Path(__file__).parent / "data"
SAMPLES = Path(__file__).parents[1] / "sample_data" / "samples.jsonl"


@pytest.fixture
def captured(monkeypatch):
    """The figures the renderers would save, kept open for inspection (and drawn)."""
    from ratioscope.render.png import compare as compare_plots
    from ratioscope.render.png import evaluation as eval_plots
    from ratioscope.render.png import objectives as objectives_plots
    from ratioscope.render.png import ratios as ratio_plots
    from ratioscope.render.png import timeline as timeline_plots

    figures = []

    def keep(figure, out):
        figure.canvas.draw()
        figures.append(figure)

    for module in (compare_plots, eval_plots, objectives_plots, ratio_plots, timeline_plots):
        monkeypatch.setattr(module, "save_figure", keep)
    yield figures
    import matplotlib.pyplot as plt

    for figure in figures:
        plt.close(figure)


def _axes_titled(figure, words: str):
    found = [ax for ax in figure.axes if words in ax.get_title(loc="left").replace("\n", " ")]
    assert len(found) == 1, [ax.get_title(loc="left") for ax in figure.axes]
    return found[0]


# ---- float noise ---------------------------------------------------------------------


def test_noise_floors_follow_from_float32_rounding_of_log_probs():
    z = FLOAT32_LOG_RATIO_NOISE
    # k3 = E[r - 1 - log r] = z^2/2 + O(z^3) for one log-ratio z; 1 - ESS ~ Var(r) ~ z^2
    assert noise_floor("mismatch.rollout.k3", False) == pytest.approx(math.expm1(z) - z, rel=1e-5)
    assert noise_floor("mismatch.rollout.ess", True) == pytest.approx(z**2)
    assert noise_floor("mismatch.rollout.ess", False) is None  # an ESS far from 1: no floor
    assert noise_floor("ratios.token.lfr", False) is None
    assert near_one("fraction", [0.9999999999998, 1.0]) and not near_one("ratio", [1.0])


def test_a_panel_at_float_noise_says_so_and_is_drawn_against_its_floor(tmp_path, captured):
    from ratioscope.render.png.timeline import plot_timeline

    floor = noise_floor("mismatch.rollout.k3", False)
    assert floor is not None
    steps = (2, 4, 6, 8)
    noise = (1.3e-13, 2.5e-13, 0.8e-13, 1.7e-13)  # the sample run's train/inference k3
    real = (2.9e-4, 1.5e-4, 1.1e-4, 0.5e-4)
    figure = TimelineFigure(
        panels=(
            TimelinePanel("mismatch.rollout.k3", "train/inference k3", "nats/token", steps,
                          noise, (), floor),
            TimelinePanel("mismatch.policy.k3", "policy k3", "nats/token", steps, real, (),
                          floor),
        ),
        subtitle="",
    )  # fmt: skip
    plot_timeline(figure, tmp_path / "t.png")
    (drawn,) = captured
    at_noise = _axes_titled(drawn, "train/inference k3")
    assert "at float noise" in at_noise.get_title(loc="left").replace("\n", " ")
    assert at_noise.get_ylabel().endswith("(×1e-13)")
    # the y range is 0 to twice the floor, not the spread of the noise
    assert at_noise.get_ylim() == pytest.approx((0.0, 2 * floor * 1e13))
    dashed = [line for line in at_noise.get_lines() if line.get_linestyle() == "--"]
    assert [line.get_ydata()[0] for line in dashed] == pytest.approx([floor * 1e13])
    readable = _axes_titled(drawn, "policy k3")
    assert "float noise" not in readable.get_title(loc="left")
    low, high = readable.get_ylim()
    assert low > 0.2 and high < 3.5  # autoscaled to the values (x1e-4), not to the floor


# ---- plot compare --------------------------------------------------------------------


def test_compare_panels_of_an_ess_near_one_have_short_tick_labels(tmp_path, captured):
    from ratioscope.render.png.compare import plot_compare

    key = "mismatch.rollout.ess"
    a = {step: 1.0 - (2 + step % 3) * 1e-13 for step in range(0, 12, 2)}
    b = {step: 1.0 - (3 + step % 2) * 1e-13 for step in range(0, 12, 2)}
    figure_data = compare_figure(compare(_timeline(a, key), _timeline(b, key)))
    panel = {p.key: p for p in figure_data.panels}[key]
    assert panel.title.startswith("1 − ")
    assert panel.values_a == pytest.approx([1.0 - v for v in a.values()], abs=1e-20)
    plot_compare(figure_data, tmp_path / "c.png")
    (drawn,) = captured
    for ax in drawn.axes:
        if not ax.get_visible():
            continue
        labels = [text.get_text() for text in ax.get_yticklabels() if text.get_text()]
        assert labels and max(len(label) for label in labels) <= 6, (ax.get_title(), labels)
    title = _axes_titled(drawn, "train/inference ESS").get_title(loc="left")
    assert "at float noise" in title.replace("\n", " ")


def test_the_diff_figure_shows_both_values_beside_each_bar(tmp_path, captured):
    from ratioscope.render.png.compare import plot_compare

    result = compare(DATA / "report_schema1.json", DATA / "report_schema1_step24.json")
    figure_data = compare_figure(result)
    bars = {bar.key: bar for bar in figure_data.bars}
    total = {row.key: row.total for row in result.headlines}
    for key, bar in bars.items():
        assert (bar.a, bar.b) == (total[key].a, total[key].b)
    rollout = bars["mismatch.rollout.k3"]
    assert rollout.a is not None and rollout.a < 1e-12 and rollout.at_noise
    assert not bars["mismatch.policy.k3"].at_noise
    plot_compare(figure_data, tmp_path / "d.png")
    (drawn,) = captured
    texts = [text.get_text() for text in drawn.axes[0].texts]
    degenerate = bars["trust_region.degenerate_share"]
    assert f"{degenerate.a:.4g} → {degenerate.b:.4g}" in texts
    assert f"{rollout.a:.4g} → {rollout.b:.4g} (float noise)" in texts
    assert "A → B" in texts


# ---- plot objectives -----------------------------------------------------------------


def _coefficients(values: list[list[float]], flags: list[list[bool]] | None = None):
    from ratioscope.functional.objectives import Coefficients

    tensor = torch.tensor(values, dtype=torch.float64)
    bound = {} if flags is None else {"clip": torch.tensor(flags)}
    return Coefficients(tensor, 1.0, bound)


def test_the_chosen_sequence_is_one_where_the_methods_move_and_differ():
    from ratioscope.figures.objectives import informative_row

    mask = torch.ones(4, 3, dtype=torch.bool)
    coefficients = {
        # row 0: B is 0 everywhere (a rule binds on all its tokens: the old choice)
        # row 1: both move, identical; row 2: both move and differ; row 3: as 2, shorter
        "a": _coefficients([[1, 1, 1], [1, 1, 1], [1, 2, 1], [1, 2, 0]]),
        "b": _coefficients(
            [[0, 0, 0], [1, 1, 1], [1, 1, 1], [1, 1, 0]],
            [[True] * 3, [False] * 3, [False] * 3, [False] * 3],
        ),
    }
    mask[3, 2] = False
    assert informative_row(coefficients, mask) == 2


def test_identical_traces_merge_and_panels_keep_one_scale():
    from ratioscope.figures.objectives import CoefficientTrace
    from ratioscope.render.png.objectives import PANEL_RANGE, scale_panels, trace_lines

    values = {
        "grpo": [-3e-5, -3.1e-5, -2.9e-5],
        "tis": [-3e-5, -3.1e-5, -2.9e-5 * (1 + 1e-6)],  # the same within 1e-3
        "dapo": [-4e-5, -4.2e-5, -3.9e-5],
        "kpo": [-1e-7, -2e-7, -1e-7],
        "gspo": [0.0, 0.0, 0.0],
    }
    trace = CoefficientTrace(
        "f.pt", 0, 0, "", -1.0, False, values, {name: [False] * 3 for name in values},
        {name: name.upper() for name in values},
    )  # fmt: skip
    lines = trace_lines(trace, list(values))
    assert [line.names for line in lines] == [("grpo", "tis"), ("dapo",), ("kpo",), ("gspo",)]
    assert lines[0].label == "GRPO = TIS"
    panels = scale_panels([line for line in lines if line.magnitude > 0])
    assert [[line.names[0] for line in panel] for panel in panels] == [["dapo", "grpo"], ["kpo"]]
    for panel in panels:
        assert panel[0].magnitude <= PANEL_RANGE * min(line.magnitude for line in panel)


def test_plot_objectives_on_the_sample_run_labels_every_panel(tmp_path, captured):
    from ratioscope.figures.objectives import coefficient_trace
    from ratioscope.objective_family.side_by_side import objectives
    from ratioscope.render.png.objectives import plot_objectives

    step = Path(__file__).parents[1] / "sample_data" / "verl" / "step_0008.pt"
    methods = "grpo,dapo,gspo,gmpo,dr_grpo,kpo,tis,icepop,seq_tis,geo_rs"
    result = objectives([step], methods=methods)
    trace = coefficient_trace([step], methods=methods)
    plot_objectives(trace, result, tmp_path / "o.png")
    (drawn,) = captured
    *panels, curves = drawn.axes
    visible = [ax for ax in panels if ax.axison]
    assert 1 < len(visible) < len(result.methods) // 2
    for ax in visible:
        assert ax.get_ylabel().startswith("dJ/d log pi") and "×1e" in ax.get_ylabel()
        assert all(  # nothing drawn on a panel is ten times smaller than its largest line
            PANEL_MAX(ax) <= 10 * max(abs(v) for v in line.get_ydata()) for line in _lines(ax)
        )
    # every method moves on the chosen sequence (none is 0 on every token)
    assert all(any(v != 0 for v in values) for values in trace.values.values())
    entries = curves.get_legend().get_texts()
    assert len(entries) < len(result.methods)  # near-identical curves share an entry


def _lines(ax):
    return [line for line in ax.get_lines() if line.get_linestyle() != "None"]


def PANEL_MAX(ax) -> float:
    return max(max(abs(v) for v in line.get_ydata()) for line in _lines(ax))


# ---- plot similarity and plot spectrum -----------------------------------------------


def test_similarity_labels_lie_inside_the_figure(tmp_path, captured):
    from ratioscope.figures.evaluation import similarity_panels
    from ratioscope.io.samples import load_samples
    from ratioscope.render.png.evaluation import plot_similarity

    panels = similarity_panels(load_samples(SAMPLES), "075%5", None, threshold=0.8,
                               linkage="single")  # fmt: skip
    plot_similarity(panels, tmp_path / "s.png", 0.8, "single")
    (drawn,) = captured
    renderer = drawn.canvas.get_renderer()
    box = drawn.bbox
    for ax in drawn.axes:
        for label in (ax.xaxis.label, ax.yaxis.label):
            if label.get_text():
                extent = label.get_window_extent(renderer)
                assert extent.y0 >= box.y0 and extent.x0 >= box.x0, label.get_text()


def test_spectrum_says_why_the_sequence_variant_is_not_drawn(tmp_path, captured):
    import ratioscope
    from ratioscope.render.png.ratios import plot_spectrum

    dump = write_layout(make_reference(seed=4, rows=8, width=80), "verl", tmp_path)
    report = ratioscope.analyze(dump, sections=["ratios"])
    assert report.ratios is not None and report.ratios["sequence"].spectrum is None
    plot_spectrum(report, tmp_path / "sp.png")
    (drawn,) = captured
    legend = [text.get_text() for text in drawn.axes[0].get_legend().get_texts()]
    assert any(
        text.startswith("not drawn: sequence ratio") and "one value per sequence" in text
        for text in legend
    ), legend
