"""KPO Table 2 as the paper computes it, from its text alone, against ``ratioscope analyze``.

The reference below is written from KPO App. B.1 (window-wise off-policy frequency,
run lengths, switch frequency), App. C.1 (token states: raw ratios "on" iff r = 1,
filtered ratios in [1 - 3e-4, 1 + 4e-4]), Algorithm 1 (the filter) and Table 2's caption
("All reported values are averaged over all samples"), with loops over tokens and no
ratioscope function. Where the text leaves a choice open, the reference makes the one
docs/metrics-ratios.md documents (marked "choice:").
"""

from __future__ import annotations

import json
import math

import pytest
import torch
from typer.testing import CliRunner

from ratioscope.cli import app

runner = CliRunner()

WINDOW = 50  # App. B.1
EPS_LO, EPS_HI = 3e-4, 4e-4  # App. C.1, the filtered ratio's band
#: choice: "r = 1" read up to float32 rounding of the ratio (2^-24 each side)
RAW_TOL = 2.0**-24
Q, V = 1e-6, 1.0  # the default Q/V; P0 = 0, rho0 = 0
UP, DOWN, ON = "up", "down", "on"


# ----------------------------------------------------------------- the synthetic dump
def _rows() -> list[tuple[list[float], list[float], list[bool]]]:
    """(old log-probs, log-probs, mask) per row, in float64: exact zeros, +-tiny (below
    2^-24), +-small (above it, inside the filtered band), +-large, sustained excursions
    (so the filter leaves its band), lengths 1 to 230, a hole, right padding."""
    import random

    rng = random.Random(7)
    tiny = 2.0**-40
    kinds = [0.0, 0.0, 0.0, tiny, -tiny, 1e-5, -1e-5, 0.4, -0.3, 1.2, -0.9]

    def noisy(n: int) -> list[float]:
        return [rng.choice(kinds) for _ in range(n)]

    width = 240
    specs: list[list[float]] = [
        noisy(230),
        [1.5] * 120 + noisy(60),  # the filter goes up and stays there
        [-1.5] * 150 + [0.0] * 40,  # ... and down
        noisy(50),  # exactly one window
        noisy(51),  # a one-token trailing window
        noisy(101),
        noisy(49),  # shorter than a window: one window of 49
        [0.0] * 30,  # all on
        [tiny, -tiny] * 10,  # float noise only: on
        [0.7],  # one token
        [0.2, 0.2],
        noisy(2) + [0.0] * 75,
    ]
    rows = []
    for i, z in enumerate(specs):
        old = [-0.25 - 0.5 * rng.random() for _ in range(width)]
        new = list(old)
        mask = [t < len(z) for t in range(width)]
        for t, value in enumerate(z):
            new[t] = old[t] + value
        if i == 5:
            mask[40] = False  # a masked token inside the response
        rows.append((old, new, mask))
    return rows


@pytest.fixture(scope="module")
def dump(tmp_path_factory):
    rows = _rows()
    path = tmp_path_factory.mktemp("table2") / "paper.pt"
    torch.save(
        {
            "mask": torch.tensor([m for _, _, m in rows]),
            "old_log_probs": torch.tensor([o for o, _, _ in rows], dtype=torch.float64),
            "log_probs": torch.tensor([n for _, n, _ in rows], dtype=torch.float64),
        },
        path,
    )
    return path, rows


# -------------------------------------------------------------- the paper, in loops
def raw_state(z: float) -> str:
    """App. C.1 before filtering: on iff r = 1 (choice: to float32 rounding)."""
    r = math.exp(z)
    if r > 1 + RAW_TOL:
        return UP
    if r < 1 - RAW_TOL:
        return DOWN
    return ON


def filtered_state(rho: float) -> str:
    """App. C.1 after filtering: on iff r in [1 - eps^-, 1 + eps^+]."""
    r = math.exp(rho)
    if r > 1 + EPS_HI:
        return UP
    if r < 1 - EPS_LO:
        return DOWN
    return ON


def kalman(observed: list[float]) -> list[float]:
    """Algorithm 1: predict P + Q, gain, update; one observation per position."""
    rho, p = 0.0, 0.0
    out = []
    for z in observed:
        p_pred = p + Q
        gain = p_pred / (p_pred + V)
        rho = rho + gain * (z - rho)
        p = (1 - gain) * p_pred
        out.append(rho)
    return out


def run_lengths(states: list[str]) -> dict[str, list[int]]:
    """App. B.1: scan left to right, append a run when the type changes, then the last."""
    runs: dict[str, list[int]] = {UP: [], DOWN: [], ON: []}
    length, current = 0, None
    for s in states:
        if s == current:
            length += 1
        else:
            if length > 0:
                runs[current].append(length)
            current, length = s, 1
    if length > 0:
        runs[current].append(length)
    return runs


def switch_frequency(states: list[str]) -> float:
    """App. B.1 (i)-(v); choice: a trailing window of one token has no adjacent pair
    and is left out of the mean (its rate would be 0/0)."""
    if len(states) <= 1:
        return 0.0
    rates = []
    for start in range(0, len(states), WINDOW):
        w = states[start : start + WINDOW]
        if len(w) < 2:
            continue
        changes = sum(1 for j in range(1, len(w)) if w[j] != w[j - 1])
        rates.append(changes / (len(w) - 1))
    return sum(rates) / len(rates)


def window_frequencies(states: list[str]) -> list[float]:
    """App. B.1: the valid prefix of n_w * 50 tokens, (up + down) / 50 per window."""
    n_w = len(states) // WINDOW
    return [
        sum(1 for s in states[w * WINDOW : (w + 1) * WINDOW] if s != ON) / WINDOW
        for w in range(n_w)
    ]


def variance(values: list[float]) -> float:
    mean = sum(values) / len(values)
    return sum((x - mean) ** 2 for x in values) / len(values)


def window_variance(values: list[float]) -> float:
    """Choice: mean over the non-overlapping 50-token windows of the population variance
    within each (a trailing one-token window left out unless it is the whole sequence)."""
    windows = [values[s : s + WINDOW] for s in range(0, len(values), WINDOW)]
    used = [w for w in windows if len(w) >= 2] or windows
    return sum(variance(w) for w in used) / len(used)


def table2(signals: list[list[float]], state_of) -> dict:
    """Table 2's row for per-sample signals (valid tokens in order), averaged over samples."""
    per_sample = []
    for signal in signals:
        states = [state_of(x) for x in signal]
        runs = run_lengths(states)
        per_sample.append(
            {
                "share": {s: states.count(s) / len(states) for s in (UP, DOWN, ON)},
                "run": {s: sum(r) / len(r) if r else None for s, r in runs.items()},
                "switch": switch_frequency(states),
                "windows": window_frequencies(states),
                "var_global": variance(signal),
                "var_window": window_variance(signal),
            }
        )
    n = len(per_sample)
    runs = {}
    for s in (UP, DOWN, ON):
        # choice (docs/metrics-ratios.md): averaged over the samples that enter the state
        present = [x["run"][s] for x in per_sample if x["run"][s] is not None]
        runs[s] = sum(present) / len(present) if present else None
    longest = max(len(x["windows"]) for x in per_sample)
    curves = {"mean": [], "var": [], "count": []}
    for w in range(longest):
        values = [x["windows"][w] for x in per_sample if w < len(x["windows"])]
        curves["mean"].append(sum(values) / len(values))  # nanmean
        curves["var"].append(variance(values))  # nanvar (ddof 0)
        curves["count"].append(len(values))
    return {
        "proportion": {s: sum(x["share"][s] for x in per_sample) / n for s in (UP, DOWN, ON)},
        "run_length_mean": runs,
        "switch_frequency": sum(x["switch"] for x in per_sample) / n,
        "window_frequency": curves,
        "variance": {
            "global": sum(x["var_global"] for x in per_sample) / n,
            "window_local": sum(x["var_window"] for x in per_sample) / n,
        },
    }


def reference(rows) -> dict[str, dict]:
    token, sequence, filtered = [], [], []
    for old, new, mask in rows:
        z = [n - o for o, n in zip(old, new, strict=True)]
        last = max(t for t, m in enumerate(mask) if m)
        valid = [z[t] for t in range(last + 1) if mask[t]]
        token.append(valid)
        mean = sum(valid) / len(valid)
        sequence.append([mean] * len(valid))
        # the authors' code: a masked position inside the response observes 0
        rho = kalman([z[t] if mask[t] else 0.0 for t in range(last + 1)])
        filtered.append([rho[t] for t in range(last + 1) if mask[t]])
    return {
        "token": table2(token, raw_state),
        "sequence": table2(sequence, raw_state),
        "kalman": table2(filtered, filtered_state),
    }


# ------------------------------------------------------------------------ the test
def _same(want, got, where):
    if isinstance(want, dict):
        for key, value in want.items():
            _same(value, got[key], f"{where}.{key}")
    elif isinstance(want, list):
        assert len(got) == len(want), where
        for i, (a, b) in enumerate(zip(want, got, strict=True)):
            _same(a, b, f"{where}.{i}")
    elif isinstance(want, float):
        assert got == pytest.approx(want, rel=1e-12, abs=1e-12), where
    else:
        assert got == want, where


def test_analyze_with_defaults_gives_the_papers_table2(dump, tmp_path):
    path, rows = dump
    out = tmp_path / "report.json"
    result = runner.invoke(app, ["analyze", str(path), "--json", str(out), "-q"])
    assert result.exit_code == 0, result.stderr
    report = json.loads(out.read_text())["ratios"]
    want = reference(rows)
    for variant, row in want.items():
        _same(row, report[variant], variant)
    # the data exercise every state on every row kind
    assert all(0 < want["token"]["proportion"][s] < 1 for s in (UP, DOWN, ON))
    assert all(0 < want["kalman"]["proportion"][s] < 1 for s in (UP, DOWN, ON))
    # proportions per sample differ from the pooled ones on these data
    pooled = report["token"]["proportion_pooled"]
    assert abs(pooled[ON] - want["token"]["proportion"][ON]) > 0.01


def test_the_float_noise_tolerance_is_what_separates_the_rules(dump, tmp_path):
    """|z| = 2^-40 is on by default and with --token-on-band 0 only if z == 0; 1e-5 is
    off by default and on inside the filtered band."""
    path, _ = dump
    states = {}
    for name, args in {
        "default": [],
        "bitwise": ["--token-on-band", "0"],
        "band": ["--token-on-band", "3e-4,4e-4"],
    }.items():
        out = tmp_path / f"{name}.json"
        result = runner.invoke(app, ["analyze", str(path), "--json", str(out), "-q", *args])
        assert result.exit_code == 0, result.stderr
        states[name] = json.loads(out.read_text())["ratios"]["token"]["proportion"][ON]
    assert states["bitwise"] < states["default"] < states["band"]
