"""ratioscope objectives: the side-by-side statistics against independent numpy, the CLI."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch
from typer.testing import CliRunner

import ratioscope.objective_family.side_by_side as library
from ratioscope.cli import app
from ratioscope.io.loaders import expand_paths, load_file
from ratioscope.objective_family.methods import METHODS
from ratioscope.objective_family.side_by_side import batch_coefficients

VERL = "sample_data/verl/"
runner = CliRunner()


@pytest.fixture(scope="module")
def verl_report():
    return library.objectives(VERL, methods="grpo,dapo,gspo,kpo,tepo,quatro,fpa")


@pytest.fixture(scope="module")
def verl_tokens():
    """Per method, the exact coefficients of every valid token of the four files, in
    order, with the long-sequence flags, computed batch by batch (numpy). FPA's come
    from the files of the run's method only (the first file's: the approximation; the
    last file holds logits, and its exact FPA is never pooled with it)."""
    names = ("grpo", "dapo", "gspo", "kpo", "tepo", "quatro", "fpa")
    settings = {n: METHODS[n].settings() for n in names}
    values: dict[str, list[np.ndarray]] = {n: [] for n in names}
    longer: dict[str, list[np.ndarray]] = {n: [] for n in names}
    first_method = None
    for path in expand_paths([VERL]):
        batch = load_file(path)
        notes: dict[str, str] = {}
        coefficients = batch_coefficients(batch, names, settings, notes=notes)
        first_method = first_method or notes["fpa"]
        mask = batch.mask
        lengths = mask.sum(1).double()
        row_long = (lengths > torch.quantile(lengths, 0.5)).unsqueeze(1).expand(mask.shape)
        for name in names:
            if name == "fpa" and notes["fpa"] != first_method:
                continue
            values[name].append(coefficients[name].values[mask].numpy())
            longer[name].append(row_long[mask].numpy())
    return (
        {n: np.concatenate(v) for n, v in values.items()},
        {n: np.concatenate(v) for n, v in longer.items()},
    )


def _gini(x: np.ndarray) -> float:
    x = np.sort(np.abs(x))
    n = x.size
    return float(2 * np.sum(np.arange(1, n + 1) * x) / (n * x.sum()) - (n + 1) / n)


def test_every_statistic_against_numpy(verl_report, verl_tokens):
    values, longer_of = verl_tokens
    grpo = values["grpo"]
    for name, summary in verl_report.methods.items():
        x, longer = values[name], longer_of[name]
        magnitude = np.abs(x)
        # FPA: the three approximated files (65,192 - 16,119 tokens of the exact one)
        assert summary.tokens == x.size == (65_192 - 16_119 if name == "fpa" else 65_192)
        assert summary.zero_share == pytest.approx(np.mean(x == 0), abs=1e-12)
        assert summary.ess == pytest.approx(magnitude.sum() ** 2 / (x.size * np.sum(x * x)))
        assert summary.long_mass_share == pytest.approx(magnitude[longer].sum() / magnitude.sum())
        k = math.ceil(0.01 * x.size)
        exact_top = np.sort(magnitude)[::-1][:k].sum() / magnitude.sum()
        assert summary.top_share == pytest.approx(exact_top, rel=0.012)
        assert summary.gini == pytest.approx(_gini(x), abs=0.012)
        if name != "grpo":
            reference = grpo[: x.size]  # FPA's files are the first three
            moving = reference != 0
            expected = np.mean(np.sign(x[moving]) * np.sign(reference[moving]) < 0)
            assert summary.sign_flips == pytest.approx(expected, abs=1e-12)
    names = verl_report.correlation["methods"]
    matrix = np.array(verl_report.correlation["matrix"])
    for i, a in enumerate(names):
        for j, b in enumerate(names):
            n = min(values[a].size, values[b].size)  # over the tokens both ran on
            expected = np.corrcoef(values[a][:n], values[b][:n])[0, 1]
            assert matrix[i, j] == pytest.approx(expected, abs=1e-9), (a, b)


def test_files_pool_as_one_batch_of_sums():
    files = expand_paths([VERL])
    whole = library.objectives(files, methods="grpo,gspo")
    parts = [library.objectives([f], methods="grpo,gspo") for f in files]
    for name in ("grpo", "gspo"):
        zeros = sum(p.methods[name].zero_share * p.methods[name].tokens for p in parts)
        assert whole.methods[name].zero_share * whole.methods[name].tokens == pytest.approx(zeros)
        flags = sum(p.methods[name].flags["clip_high"] * p.methods[name].tokens for p in parts)
        assert whole.methods[name].flags["clip_high"] * whole.methods[name].tokens == (
            pytest.approx(flags)
        )


def test_methods_missing_inputs_are_named():
    # the TRL sample has no prompt ids, so the group-reward methods cannot run
    result = library.objectives("sample_data/trl/", methods="grpo,dr_grpo,quatro")
    assert list(result.methods) == ["grpo"]
    assert result.skipped == {
        "dr_grpo": "needs `group` (prompt ids)",
        "quatro": "needs `group` (prompt ids)",
    }


def test_cli_table_json_methods_and_settings(tmp_path):
    out = tmp_path / "objectives.json"
    result = runner.invoke(
        app,
        [
            "objectives", VERL, "--methods", "grpo,dapo,gspo", "--set", "dapo.clip=0.1,0.3",
            "--json", str(out), "--quiet",
        ],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert "DAPO" in result.output and "GSPO" in result.output and "KPO" not in result.output
    document = json.loads(out.read_text())
    assert document["kind"] == "objectives"
    assert list(document["methods"]) == ["grpo", "dapo", "gspo"]
    assert document["params"]["settings"]["dapo"]["clip"] == [0.1, 0.3]
    assert document["methods"]["dapo"]["settings"]["clip"] == [0.1, 0.3]


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (["--methods", "grpo,nope"], "--methods names unknown method(s) nope"),
        (["--set", "dapo.clip=0.2"], "dapo.clip"),
        (["--set", "dapo.eps=0.2"], "--set names a setting 'eps' that dapo does not have"),
        (["--set", "oops"], "--set takes METHOD.KEY=VALUE"),
        (["--set", "k_rs.divergence=k9"], "k_rs.divergence"),
        (["--methods", "grpo", "--set", "dapo.clip=0.1,0.2"], "sets dapo, which is not among"),
    ],
)
def test_cli_bad_options_exit_2_in_one_line(args, fragment):
    result = runner.invoke(app, ["objectives", VERL, *args])
    assert result.exit_code == 2
    assert fragment in result.output
    assert "Traceback" not in result.output


def test_cli_list_names_every_method():
    result = runner.invoke(app, ["objectives", "--list"])
    assert result.exit_code == 0
    for name in METHODS:
        assert name in result.output


def test_plot_objectives_writes_a_figure(tmp_path):
    out = tmp_path / "objectives.png"
    result = runner.invoke(
        app, ["plot", "objectives", VERL, "--methods", "grpo,gspo,kpo", "--out", str(out), "-q"]
    )
    assert result.exit_code == 0, result.output
    assert out.stat().st_size > 10_000
    bad = runner.invoke(
        app, ["plot", "objectives", VERL, "--sequence", "99999", "--out", str(out), "-q"]
    )
    assert bad.exit_code == 2 and "out of range" in bad.output


def test_timeline_follows_the_objective_headlines_per_step():
    import ratioscope.views.timeline as timeline_module
    from ratioscope.views.timeline import OBJECTIVE_HEADLINES, OBJECTIVE_METHODS

    result = timeline_module.timeline(VERL, objectives=True, sections=["mismatch"])
    assert [h.key for h in result.headlines[-len(OBJECTIVE_HEADLINES) :]] == [
        h.key for h in OBJECTIVE_HEADLINES
    ]
    for step, path in zip(result.steps, expand_paths([VERL]), strict=True):
        alone = library.objectives([path], methods=",".join(OBJECTIVE_METHODS))
        assert step.values["objectives.grpo.top_share"] == alone.methods["grpo"].top_share
        assert step.values["objectives.opsm.flags.masked"] == alone.methods["opsm"].flags["masked"]
        assert step.values["objectives.gspo.zero_share"] == alone.methods["gspo"].zero_share
    plain = timeline_module.timeline(VERL, sections=["mismatch"])
    assert not any(h.key.startswith("objectives.") for h in plain.headlines)


def test_timeline_objectives_refuse_reports(tmp_path):
    report = tmp_path / "r.json"
    assert runner.invoke(app, ["analyze", VERL, "--json", str(report), "-q"]).exit_code == 0
    result = runner.invoke(app, ["timeline", str(report), "--objectives", "-q"])
    assert result.exit_code == 2
    assert "need the dumps themselves" in result.output


def test_the_docs_show_the_real_table():
    """docs/objectives.md prints what the command prints on the sample run."""
    import io
    import re
    from pathlib import Path

    from rich.console import Console

    from ratioscope.render.terminal.objectives import show_objectives

    buffer = io.StringIO()
    show_objectives(library.objectives(VERL), Console(file=buffer, width=100, color_system=None))
    printed = [line.rstrip() for line in buffer.getvalue().splitlines()]
    page = (Path(__file__).resolve().parents[1] / "docs" / "objectives.md").read_text()
    blocks = [b.splitlines() for b in re.findall(r"```text\n(.*?)```", page, re.S)]
    # the page's transcript is the whole command's output (docs/transcripts.py), which
    # opens with what show_objectives prints
    assert blocks[0][: len(printed)] == printed


def test_check_gates_an_objectives_report(tmp_path):
    report = tmp_path / "objectives.json"
    assert (
        runner.invoke(
            app, ["objectives", VERL, "--methods", "grpo,gspo", "--json", str(report), "-q"]
        ).exit_code
        == 0
    )
    zero = json.loads(report.read_text())["methods"]["gspo"]["zero_share"]
    rules = tmp_path / "rules.toml"
    rules.write_text(f'[[rule]]\npath = "methods.gspo.zero_share"\nmax = {zero + 0.01}\n')
    assert runner.invoke(app, ["check", str(report), "--rules", str(rules)]).exit_code == 0
    rules.write_text(f'[[rule]]\npath = "methods.gspo.zero_share"\nmax = {zero - 0.01}\n')
    assert runner.invoke(app, ["check", str(report), "--rules", str(rules)]).exit_code == 1


def test_batch_rows_cut_files_into_batches_streamed_or_not():
    from ratioscope.io.loaders import LoadOptions

    path = expand_paths([VERL])[0]
    methods = "grpo,dapo,dr_grpo,quatro,m2po"
    whole = load_file(path)
    # batches of 32 rows (4 whole groups of 8), read from the file streamed, equal the
    # sums of the four batches analysed one by one
    streamed = library.objectives(
        [path], methods=methods, batch_rows=32, load_options=LoadOptions(stream_bytes=0)
    )
    parts = [library.objectives(chunk, methods=methods) for chunk in whole.iter_chunks(32)]
    for name in ("grpo", "dapo", "dr_grpo", "quatro", "m2po"):
        zeros = sum(p.methods[name].zero_share * p.methods[name].tokens for p in parts)
        assert streamed.methods[name].zero_share * streamed.methods[name].tokens == (
            pytest.approx(zeros)
        )
    # the same cut from the file read whole gives the same report
    in_memory = library.objectives([path], methods=methods, batch_rows=32)
    assert in_memory.to_dict()["methods"] == streamed.to_dict()["methods"]
    assert streamed.inputs[0]["sequences"] == whole.num_sequences
    # one batch of all rows is the file
    everything = library.objectives([path], methods=methods, batch_rows=whole.num_sequences)
    assert (
        everything.to_dict()["methods"]
        == library.objectives([path], methods=methods).to_dict()["methods"]
    )
    bad = runner.invoke(app, ["objectives", VERL, "--batch-rows", "0"])
    assert bad.exit_code == 2
