"""The run report (ratioscope report, timeline --html): the rankings and the kept tokens
against values computed here from the dump files, the size budget, the self-contained
file, and bad input refused in one line with nothing written."""

from __future__ import annotations

import base64
import json
import math
import re
from pathlib import Path

import numpy as np
import pytest
import torch
from report_build import STEPS, TOKENIZER, kalman_loop, sample_report
from typer.testing import CliRunner

from ratioscope.cli import app
from ratioscope.functional import drilldown as f
from ratioscope.views.drilldown import TokenBudget, spread_order, step_priorities, token_data_bytes

runner = CliRunner()
MiB = 2**20


# ------------------------------------------------------------------ formulas
def test_sequence_scores_against_plain_loops():
    gen = torch.Generator().manual_seed(0)
    z = torch.randn(4, 6, generator=gen, dtype=torch.float64) * 0.3
    mask = torch.tensor([[1] * 6, [1] * 3 + [0] * 3, [0] * 6, [1] * 5 + [0]]).bool()
    values = torch.randn(4, 6, generator=gen, dtype=torch.float64)
    flags = torch.rand(4, 6, generator=gen) > 0.5
    k3 = f.sequence_k3(z, mask)
    share = f.sequence_abs_share(values, mask)
    flagged = f.sequence_flag_share(flags, mask)
    drop = f.sequence_mean_drop(values, z, mask)
    total = sum(abs(float(values[i, t])) for i in range(4) for t in range(6) if mask[i, t])
    for i in range(4):
        valid = [t for t in range(6) if mask[i, t]]
        if not valid:
            assert math.isnan(k3[i]) and math.isnan(flagged[i]) and math.isnan(share[i])
            continue
        expected = sum(math.exp(float(z[i, t])) - 1 - float(z[i, t]) for t in valid) / len(valid)
        assert k3[i] == pytest.approx(expected, rel=1e-12)
        assert flagged[i] == pytest.approx(sum(bool(flags[i, t]) for t in valid) / len(valid))
        row = sum(abs(float(values[i, t])) for t in valid)
        assert share[i] == pytest.approx(row / total, rel=1e-12)
        diff = sum(float(values[i, t] - z[i, t]) for t in valid) / len(valid)
        assert drop[i] == pytest.approx(diff, rel=1e-12)


def test_top_rows_skips_nan_and_keeps_row_order_on_ties():
    scores = torch.tensor([0.5, math.nan, 2.0, 0.5, math.inf, -1.0])
    assert f.top_rows(scores, 3) == [2, 0, 3]
    assert f.top_rows(scores, 10) == [2, 0, 3, 5]
    assert f.top_rows(torch.tensor([math.nan]), 2) == []


def test_spread_order_prefixes_cover_the_run_evenly():
    for count in (1, 2, 7, 16, 1000):
        order = spread_order(count)
        assert sorted(order) == list(range(count))
    order = spread_order(16)
    # the first 4 of 16 steps are 4 apart
    assert sorted(order[:4]) == [0, 4, 8, 12]
    priorities = step_priorities([2, 4, 6, 8], flagged={6})
    assert priorities[6] == 0 and sorted(priorities.values()) == [0, 1, 2, 3]


def test_token_budget_drops_the_lowest_priority_first():
    size = token_data_bytes(30, 1, True)
    assert size == math.ceil(2 * 30 * 4 * 4 / 3) + 80
    budget = TokenBudget(3 * size, {1: 0, 2: 1})
    budget.offer("s2_r1", budget.priority(2, 1), size)
    budget.offer("s1_r0", budget.priority(1, 0), size)
    budget.offer("s2_r0", budget.priority(2, 0), size)
    budget.offer("s1_r1", budget.priority(1, 1), size)
    # every first sequence before any second one; the flagged step (1) before step 2
    assert set(budget.kept) == {"s1_r0", "s2_r0", "s1_r1"}
    assert budget.used <= budget.limit and budget.dropped == 1


def test_a_small_budget_keeps_the_first_sequences_of_flagged_steps(tmp_path):
    from ratioscope.data.params import AnalysisParams
    from ratioscope.io.loaders import LoadOptions
    from ratioscope.views.drilldown import drilldown

    steps = [(s, [STEPS / f"step_{s:04d}.pt"]) for s in (2, 4)]
    drill = drilldown(
        steps, params=AnalysisParams(), load_options=LoadOptions(), flagged={4},
        top=2, token_bytes=60_000,
    )  # fmt: skip
    encoded = sum(len(json.dumps(t.to_dict())) for t in drill.tokens.values())
    assert 0 < encoded <= 60_000 and drill.dropped > 0
    step4 = next(s for s in drill.steps if s.step == 4)
    assert step4.rankings["policy_k3"][0] in drill.tokens
    # only first sequences are kept while some first sequence is left out
    firsts = {k for s in drill.steps for ids in s.rankings.values() for k in ids[:1]}
    assert not firsts <= set(drill.tokens) and set(drill.tokens) <= firsts


# ------------------------------------------------------------------ the bundled run
def _row(step: int):
    return torch.load(STEPS / f"step_{step:04d}.pt", weights_only=True)


def _floats(b64: str) -> np.ndarray:
    return np.frombuffer(base64.b64decode(b64), dtype="<f4")


def test_rankings_and_tokens_match_the_dump():
    result, _, _ = sample_report()
    drill = result.drilldown
    assert drill is not None and [s.step for s in drill.steps] == list(range(2, 33, 2))
    step = drill.steps[7]
    data = _row(step.step)
    mask = data["response_mask"]
    z = (data["log_probs"] - data["old_log_probs"]).double()
    k3 = [float((torch.expm1(z[i][mask[i]]) - z[i][mask[i]]).mean()) for i in range(mask.shape[0])]
    expected = sorted(range(len(k3)), key=lambda i: -k3[i])[: drill.top]
    assert [step.rows[key]["row"] for key in step.rankings["policy_k3"]] == expected
    lengths = mask.sum(dim=1).tolist()
    longest = step.rankings["longest"][0]
    assert step.rows[longest]["length"] == max(lengths) == 152
    # the length-limited ranking names only sequences at the padded width (152)
    assert all(step.rows[k]["length"] == 152 for k in step.rankings["length_limited"])
    assert step.summary["mean_length"] == pytest.approx(sum(lengths) / len(lengths))
    scores = data["token_level_scores"].sum(dim=1)
    assert step.summary["mean_reward"] == pytest.approx(float(scores.mean()))
    # the first policy-mismatch sequence's tokens: ids, z and the Kalman-filtered z
    key = step.rankings["policy_k3"][0]
    row = step.rows[key]["row"]
    tokens = drill.tokens[key].to_dict()
    ids = np.frombuffer(base64.b64decode(tokens["ids"]), dtype="<i4")
    assert ids.tolist() == data["responses"][row][mask[row]].tolist()
    logged = _floats(tokens["series"]["log_ratio"])
    z32 = (data["log_probs"] - data["old_log_probs"])[row][mask[row]].numpy()
    np.testing.assert_array_equal(logged, z32)
    filtered = _floats(tokens["series"]["kalman"])
    np.testing.assert_allclose(filtered, kalman_loop(z32.astype(float).tolist()), atol=1e-7)
    rollout = (data["old_log_probs"] - data["rollout_log_probs"])[row][mask[row]].numpy()
    np.testing.assert_array_equal(_floats(tokens["series"]["rollout_log_ratio"]), rollout)
    entropy = data["entropys"][row][mask[row]].numpy()
    np.testing.assert_array_equal(_floats(tokens["series"]["entropy"]), entropy)


def test_token_text_comes_from_the_tokenizer():
    result, _, _ = sample_report()
    vocab = result.drilldown.vocab
    assert vocab is not None
    table = json.loads(TOKENIZER.read_text())["model"]["vocab"]
    assert all(vocab[i] == text for text, i in table.items() if i in vocab)


def test_the_file_is_self_contained_and_within_its_budget():
    _, out, size = sample_report()
    assert size == out.stat().st_size <= 15 * MiB
    text = out.read_text(encoding="utf-8")
    # every script inline (no src), and no element outside the scripts loads anything
    tags = set(re.findall(r"<script[^>]*>", text))
    assert tags == {"<script>", '<script type="application/json" id="report-data">'}
    outside = re.sub(r"<script[^>]*>.*?</script>", "", text, flags=re.S)
    assert not re.search(r"<(link|img|iframe|object|embed)\b", outside, re.I)
    assert "Content-Security-Policy" in text and "default-src 'none'" in text
    document = json.loads(
        re.search(
            r'<script type="application/json" id="report-data">(.*?)</script>', text, re.S
        ).group(1)
    )
    assert document["kind"] == "run_report" and len(document["runs"][0]["timeline"]["steps"]) == 16


def test_the_vendored_chart_libraries_are_the_pinned_files():
    import hashlib

    from ratioscope.render.html.page import chart_libraries, vendored

    assets = Path(__file__).resolve().parents[1] / "ratioscope" / "render" / "html" / "assets"
    packages = vendored()
    assert [p["name"] for p in packages] == ["vega", "vega-lite", "vega-embed"]
    for package in packages:
        assert re.fullmatch(r"\d+\.\d+\.\d+", package["version"])  # exact, not a range
        data = (assets / package["file"]).read_bytes()
        assert hashlib.sha256(data).hexdigest() == package["sha256"], package["file"]
        assert package["name"] in (assets / "VEGA-LICENSES.txt").read_text()
    inlined = chart_libraries()
    assert inlined.count("<script>") == 3 and "sourceMappingURL" not in inlined


# ------------------------------------------------------------------ the command line
def test_timeline_html_writes_the_report_with_a_baseline(tmp_path):
    files = [str(STEPS / "step_0002.pt"), str(STEPS / "step_0004.pt")]
    baseline, out = tmp_path / "baseline.json", tmp_path / "t.html"
    args = ["timeline", *files, "--json", str(baseline), "--html", str(out), "-q"]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    assert out.stat().st_size > 1_000_000 and baseline.exists()
    out2 = tmp_path / "r.html"
    args = ["report", *files, "--out", str(out2), "--baseline", str(baseline), "--top", "1"]
    result = runner.invoke(app, [*args, "-q"])
    assert result.exit_code == 0, result.output
    text = out2.read_text(encoding="utf-8")
    assert '"name": "baseline"' in text


def _small_tokenizer(path: Path, size: int) -> Path:
    vocab = {f"t{i}": i for i in range(size)}
    path.write_text(
        json.dumps(
            {
                "version": "1.0",
                "truncation": None,
                "padding": None,
                "added_tokens": [],
                "normalizer": None,
                "pre_tokenizer": None,
                "post_processor": None,
                "decoder": None,
                "model": {"type": "WordLevel", "vocab": vocab, "unk_token": "t0"},
            }
        )
    )
    return path


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--tokenizer", "missing.json"], "tokenizer file does not exist"),
        (["--tokenizer", "SMALL"], "does not cover token id"),
        (["--tokenizer", "BROKEN"], "not a tokenizer.json"),
        (["--methods", "nope"], "--methods names unknown"),
        (["--top", "0"], "--top must be >= 1"),
        (["--token-budget", "-1"], "--token-budget must be a finite number >= 0"),
    ],
)
def test_bad_input_is_one_line_exit_2_and_no_file(tmp_path, extra, message):
    small = _small_tokenizer(tmp_path / "small.json", 5)
    broken = tmp_path / "broken.json"
    broken.write_text("{not json")
    extra = [
        str(tmp_path / e) if e == "missing.json" else
        str(small) if e == "SMALL" else str(broken) if e == "BROKEN" else e
        for e in extra
    ]  # fmt: skip
    out = tmp_path / "r.html"
    result = runner.invoke(app, ["report", str(STEPS / "step_0002.pt"), "--out", str(out), *extra])
    assert result.exit_code == 2, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], result.output
    assert not out.exists() and list(tmp_path.glob(".r.html*")) == []


def test_bad_output_name_and_bad_dump_are_refused(tmp_path):
    result = runner.invoke(app, ["report", str(STEPS), "--out", str(tmp_path / "r.png")])
    assert result.exit_code == 2 and "name it *.html" in result.output
    bad = tmp_path / "step_0001.pt"
    bad.write_bytes(b"not a torch file")
    out = tmp_path / "r.html"
    result = runner.invoke(app, ["report", str(bad), "--out", str(out)])
    assert result.exit_code == 2 and len(result.output.strip().splitlines()) == 1
    assert not out.exists()


DOCS = Path(__file__).resolve().parents[1] / "docs"
#: a link into the run report, as the docs write it: `#step=16`, `#seq=s16_f0_r107&q=kalman`
FRAGMENT = re.compile(r"`#((?:step|seq)=[^`\s]+)`")


def test_the_deep_links_in_the_docs_open_the_bundled_report():
    """Every `#step=` and `#seq=` link the docs give names a step with a drill-down, a
    sequence whose tokens the bundled report keeps, and a series it draws."""
    from urllib.parse import parse_qs

    result, _, _ = sample_report()
    drill = result.drilldown
    steps = {s.step for s in drill.steps}
    series = {s.key for s in drill.series}
    found = []
    for page in [*DOCS.glob("*.md"), DOCS.parent / "README.md"]:
        for fragment in FRAGMENT.findall(page.read_text()):
            found.append(fragment)
            params = {k: v[0] for k, v in parse_qs(fragment).items()}
            if "step" in params:
                assert int(params["step"]) in steps, (page.name, fragment)
            if "seq" in params:
                assert params["seq"] in drill.tokens, (page.name, fragment, "no token data")
            if "q" in params:
                assert params["q"] in series, (page.name, fragment)
    assert len(found) >= 2


def test_the_title_names_the_run_not_its_first_step():
    """A run of a folder a step (the capture's layout) is named by the folder that holds
    its steps; a run of files in one folder by that folder."""
    from types import SimpleNamespace

    from ratioscope.render.html.run_report import _title

    def titled(*inputs: str) -> str:
        steps = [SimpleNamespace(inputs=(path,)) for path in inputs]
        return _title(SimpleNamespace(steps=steps))

    run = "runs/a/capture"
    assert titled(f"{run}/step_000001/rank_0.pt", f"{run}/step_000002/rank_0.pt") == (
        f"ratioscope run report: {run}"
    )
    assert titled("dumps/step_1.pt", "dumps/step_2.pt") == "ratioscope run report: dumps"
    assert titled(f"{run}/step_000001/rank_0.pt") == f"ratioscope run report: {run}/step_000001"
