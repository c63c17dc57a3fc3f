"""LFR, spectra and window statistics only for sequences long enough to have them."""

from __future__ import annotations

import math

import numpy as np
import torch
from safetensors.torch import save_file
from typer.testing import CliRunner

import ratioscope
from ratioscope.cli import app

SHORT, LONG = (12, 6), (80, 4)  # (length, rows)


def dump(path) -> np.ndarray:
    rng = np.random.default_rng(7)
    rows, width = SHORT[1] + LONG[1], LONG[0]
    lengths = [SHORT[0]] * SHORT[1] + [LONG[0]] * LONG[1]
    mask = np.arange(width)[None, :] < np.array(lengths)[:, None]
    old = -rng.gamma(1.0, 0.5, size=(rows, width))
    new = old + rng.normal(0, 0.05, size=(rows, width))
    save_file(
        {
            "mask": torch.tensor(mask),
            "old_log_probs": torch.tensor(old, dtype=torch.float32),
            "log_probs": torch.tensor(new, dtype=torch.float32),
            "advantages": torch.tensor(rng.normal(size=rows), dtype=torch.float32),
        },
        str(path),
    )
    z = (torch.tensor(new, dtype=torch.float32) - torch.tensor(old, dtype=torch.float32)).double()
    return [z[i, : lengths[i]].numpy() for i in range(rows)]


def lfr(x: np.ndarray, cutoff: float = 0.1) -> float:
    """KPO App. C.2 written out: band energy of the mean-removed DFT over the total."""
    x = x - x.mean()
    power = np.abs(np.fft.fft(x)) ** 2
    k = math.floor(cutoff * len(x) / 2)
    band = power[: k + 1].sum() + (power[len(x) - k :].sum() if k else 0.0)
    return float(band / power.sum())


def test_short_sequences_are_counted_and_left_out(tmp_path):
    path = tmp_path / "d.safetensors"
    rows = dump(path)
    token = ratioscope.analyze(path).ratios["token"]
    assert token.spectral_min_length == 50  # the window, and >= 2 / 0.1
    assert token.short_excluded == SHORT[1]
    long_rows = [x for x in rows if len(x) == LONG[0]]
    expected = float(np.mean([lfr(x) for x in long_rows]))
    assert math.isclose(token.lfr, expected, rel_tol=1e-6)
    assert token.spectrum.sequences == LONG[1]
    assert token.window_frequency["count"][0] == LONG[1]
    # a shorter window lowers the minimum to 2 / lfr_cutoff = 20: still not 12 tokens
    assert ratioscope.analyze(path, window=10).ratios["token"].spectral_min_length == 20


def test_the_terminal_and_the_plots_say_so(tmp_path, monkeypatch):
    path = tmp_path / "d.safetensors"
    dump(path)
    out = " ".join(CliRunner().invoke(app, ["analyze", str(path)]).output.split())
    assert "6 sequence(s) shorter than 50 tokens are left out" in out

    import matplotlib.text

    from ratioscope.render.png import ratios as ratio_plots

    texts: list[str] = []
    footers: list[str] = []

    def keep(figure, target) -> None:
        texts.extend(t.get_text() for t in figure.findobj(matplotlib.text.Text))
        footers.append(figure.get_supxlabel())

    monkeypatch.setattr(ratio_plots, "save_figure", keep)
    report = ratioscope.analyze(path)
    ratio_plots.plot_spectrum(report, tmp_path / "s.png")
    ratio_plots.plot_windows(report, tmp_path / "w.png")
    assert any("shorter than 50 tokens" in t for t in texts)
    # in the footer, off the data (in a corner of the axes it lay over the lines at 0)
    assert len(footers) == 2 and all("shorter than 50 tokens" in f for f in footers)
    texts.clear()
    ratio_plots.plot_windows(report, tmp_path / "w.png")
    assert any("shorter than 50 tokens" in t for t in texts)
