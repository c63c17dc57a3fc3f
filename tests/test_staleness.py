"""The ``staleness`` section: off-policy statistics by mini-batch index.

The numbers are checked against plain numpy on the bundled verl dumps (read with
``torch.load``, not through ratioscope's loader) and against values worked out by hand
on a tiny batch with masked tokens and a mini-batch without a valid token; merging
halves of the input (files, and rows cut inside a mini-batch) gives the whole; the
command line prints the table, ``info`` maps the key and ``metrics`` lists it.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch
from typer.testing import CliRunner

import ratioscope
from ratioscope.analysis.pipeline import run_accumulators
from ratioscope.cli import app
from ratioscope.data.batch import TokenBatch
from ratioscope.data.params import AnalysisParams
from ratioscope.errors import InputError
from ratioscope.io.documents import to_jsonable
from ratioscope.io.loaders import LoadOptions
from ratioscope.io.paths import flag_given_a_value
from ratioscope.report.model import Report
from ratioscope.sections.staleness import StalenessAccumulator

ROOT = Path(__file__).resolve().parents[1]
VERL = ROOT / "sample_data" / "verl"
SCHEMA1 = ROOT / "tests" / "data" / "report_schema1.json"
runner = CliRunner()


# --------------------------------------------------------------- numpy reference
def _reference(paths: list[Path], clip: tuple[float, float] = (0.2, 0.28)) -> dict[int, dict]:
    """Per mini-batch index, from the raw verl keys, in float64 numpy."""
    per_index: dict[int, dict[str, list]] = {}
    for path in paths:
        raw = torch.load(path, weights_only=True)
        mask = raw["response_mask"].numpy().astype(bool)
        # z as the trainer's float32 subtraction; exactly 0 where the policies agree
        z32 = raw["log_probs"].numpy() - raw["old_log_probs"].numpy()
        advantages = raw["advantages"].numpy().astype(np.float64)
        for row, index in enumerate(raw["minibatch"].tolist()):
            entry = per_index.setdefault(index, {"rows": 0, "z": [], "z32": [], "a": []})
            entry["rows"] += 1
            valid = mask[row]
            entry["z32"].extend(z32[row][valid].tolist())
            entry["z"].extend(z32[row][valid].astype(np.float64).tolist())
            entry["a"].extend(advantages[row][valid].tolist())
    eps_low, eps_high = clip
    expected = {}
    for index, entry in sorted(per_index.items()):
        z, a = np.array(entry["z"]), np.array(entry["a"])
        r = np.exp(z)
        clipped = ((a > 0) & (r > 1 + eps_high)) | ((a < 0) & (r < 1 - eps_low))
        expected[index] = {
            "rows": entry["rows"],
            "tokens": len(z),
            "exact_on": float(np.mean(np.array(entry["z32"]) == 0)),
            "mean_abs_z": float(np.mean(np.abs(z))),
            "mean_z": float(np.mean(z)),
            "k3": float(np.mean(r - 1 - z)),
            "clip_fraction": float(np.mean(clipped)),
            # 1 - ESS: the ESS itself is within 1e-3 of 1 here and would compare loosely
            "one_minus_ess": float(1 - r.sum() ** 2 / (len(r) * (r**2).sum())),
        }
    return expected


def _compare(section, expected: dict[int, dict]) -> None:
    assert list(section.minibatches) == list(expected)
    for index, want in expected.items():
        got = section.minibatches[index]
        assert got.rows == want["rows"] and got.tokens == want["tokens"], index
        assert got.exact_on == want["exact_on"], index  # counts: exact
        assert got.clip_fraction == pytest.approx(want["clip_fraction"], abs=1e-15), index
        for key in ("mean_abs_z", "mean_z", "k3"):
            assert getattr(got, key) == pytest.approx(want[key], rel=1e-7, abs=1e-13), (
                index,
                key,
            )
        assert 1 - got.ess == pytest.approx(want["one_minus_ess"], rel=1e-6, abs=1e-13), index


@pytest.fixture(scope="module")
def whole() -> Report:
    return ratioscope.analyze(VERL)


def test_sample_run_matches_numpy(whole):
    paths = sorted(VERL.glob("*.pt"))
    _compare(whole.staleness, _reference(paths))
    # the first mini-batch of each step is exactly on-policy, the later ones drift more
    first, *later = whole.staleness.minibatches.values()
    assert first.exact_on == 1.0 and first.k3 == 0.0 and first.ess == 1.0
    assert [m.mean_abs_z for m in later] == sorted(m.mean_abs_z for m in later)
    assert all(m.exact_on < 0.1 for m in later)


def test_sample_run_pools_to_the_whole_batch_numbers(whole):
    """Token-weighted, the rows give the pooled numbers of the other sections."""
    rows = list(whole.staleness.minibatches.values())
    tokens = sum(m.tokens for m in rows)
    assert tokens == whole.ratios["token"].distribution.count
    clip = sum(m.clip_fraction * m.tokens for m in rows) / tokens
    assert clip == pytest.approx(whole.ratios["token"].clip_fraction, abs=1e-15)
    k3 = sum(m.k3 * m.tokens for m in rows) / tokens
    assert k3 == pytest.approx(whole.mismatch.policy.k3, rel=1e-9)
    assert whole.staleness.clip_band == whole.ratios["token"].clip_band


def test_the_clip_band_is_the_token_band_of_the_params():
    narrow = (0.001, 0.002)
    report = ratioscope.analyze(VERL / "step_0016.pt", clip=narrow)
    assert report.staleness.clip_band == narrow
    expected = _reference([VERL / "step_0016.pt"], narrow)
    _compare(report.staleness, expected)
    assert max(m["clip_fraction"] for m in expected.values()) > 0.01  # the band bites


# -------------------------------------------------------------- hand-made batch
def _tiny() -> dict[str, torch.Tensor]:
    """5 rows, 4 positions; row 3 (index 7) has no valid token; NaN where masked."""
    nan = math.nan
    log2 = math.log(2.0)
    z = torch.tensor(
        [
            [0.0, log2, nan, nan],  # index 0
            [0.5, -0.5, 0.0, 0.0],  # index 2
            [-log2, nan, nan, nan],  # index 2
            [nan, nan, nan, nan],  # index 7: no valid token
            [0.0, 0.0, 0.0, 1.0],  # index 0, last token masked
        ],
        dtype=torch.float64,
    )
    mask = torch.tensor(
        [
            [1, 1, 0, 0],
            [1, 1, 1, 1],
            [1, 0, 0, 0],
            [0, 0, 0, 0],
            [1, 1, 1, 0],
        ],
        dtype=torch.bool,
    )
    old = torch.full((5, 4), -1.0, dtype=torch.float64)
    return {
        "mask": mask,
        "old_log_probs": old,
        "log_probs": old + z,
        "advantages": torch.tensor([1.0, -1.0, -1.0, 1.0, 0.0]),
        "minibatch": torch.tensor([0, 2, 2, 7, 0]),
    }


def _by_hand() -> dict[int, dict]:
    """The tiny batch's numbers, worked out from the valid tokens of each index.

    index 0: z = 0, log 2 | 0, 0, 0 (A = 1 on the first two, 0 on the others)
    index 2: z = 0.5, -0.5, 0, 0 | -log 2 (A = -1 on all five)
    """
    e = math.e
    log2 = math.log(2.0)
    k3_2 = (math.sqrt(e) - 1.5) + (1 / math.sqrt(e) - 0.5) + (0.5 - 1 + log2)
    sum_r2, sum_r2_sq = math.sqrt(e) + 1 / math.sqrt(e) + 2 + 0.5, e + 1 / e + 2 + 0.25
    return {
        0: {
            "rows": 2,
            "tokens": 5,
            "exact_on": 4 / 5,
            "mean_abs_z": log2 / 5,
            "mean_z": log2 / 5,
            "k3": (2 - 1 - log2) / 5,
            # r = 2 > 1.28 with A = 1 > 0: clipped; the A = 0 tokens never are
            "clip_fraction": 1 / 5,
            "ess": 6**2 / (5 * (4 + 4)),
        },
        2: {
            "rows": 2,
            "tokens": 5,
            "exact_on": 2 / 5,
            "mean_abs_z": (1 + log2) / 5,
            "mean_z": -log2 / 5,
            "k3": k3_2 / 5,
            # A < 0: clipped where r < 0.8: r = e^-0.5 = 0.607 and r = 0.5
            "clip_fraction": 2 / 5,
            "ess": sum_r2**2 / (5 * sum_r2_sq),
        },
    }


def test_tiny_batch_by_hand():
    batch = TokenBatch.from_tensors(_tiny())
    section = ratioscope.analyze(batch, sections=["staleness"]).staleness
    assert list(section.minibatches) == [0, 2, 7]
    for index, want in _by_hand().items():
        got = section.minibatches[index]
        for key, value in want.items():
            assert getattr(got, key) == pytest.approx(value, rel=1e-12), (index, key)
    empty = section.minibatches[7]
    assert (empty.rows, empty.tokens, empty.clip_fraction) == (1, 0, None)
    assert all(math.isnan(getattr(empty, k)) for k in ("exact_on", "mean_z", "k3", "ess"))


def test_tiny_batch_report_json_round_trip():
    report = ratioscope.analyze(TokenBatch.from_tensors(_tiny()))
    document = json.loads(json.dumps(report.to_dict()))
    block = document["staleness"]
    assert list(block["minibatches"]) == ["0", "2", "7"]
    assert block["minibatches"]["7"] == {
        "rows": 1, "tokens": 0, "exact_on": None, "mean_abs_z": None, "mean_z": None,
        "k3": None, "clip_fraction": None, "ess": None,
    }  # fmt: skip
    again = Report.from_dict(document)
    assert list(again.staleness.minibatches) == [0, 2, 7]  # int keys again
    assert again.to_dict() == document
    assert list(document).index("staleness") == list(document).index("trust_region") + 1


def test_without_advantages_the_clip_fraction_is_null():
    arrays = _tiny()
    del arrays["advantages"]
    section = ratioscope.analyze(TokenBatch.from_tensors(arrays)).staleness
    assert all(m.clip_fraction is None for m in section.minibatches.values())
    assert section.minibatches[2].k3 == pytest.approx(_by_hand()[2]["k3"], rel=1e-12)


# ---------------------------------------------------------------------- merging
def _accumulate(source, params: AnalysisParams, chunk: int = 1 << 40) -> StalenessAccumulator:
    (total,) = run_accumulators(
        source,
        lambda: [StalenessAccumulator(params)],
        params=params,
        load_options=LoadOptions(),
        chunk_elements=chunk,
    ).totals
    assert isinstance(total, StalenessAccumulator)
    return total


def _through_json(acc: StalenessAccumulator, params: AnalysisParams) -> StalenessAccumulator:
    state = json.loads(json.dumps(to_jsonable(acc.state())))
    restored = StalenessAccumulator.from_state(params, state)
    assert isinstance(restored, StalenessAccumulator)
    return restored


def _same(got, expected) -> None:
    assert list(got.minibatches) == list(expected.minibatches)
    for index, want in expected.minibatches.items():
        have = got.minibatches[index]
        assert (have.rows, have.tokens) == (want.rows, want.tokens)
        for key in ("exact_on", "clip_fraction", "mean_abs_z", "mean_z", "k3", "ess"):
            a, b = getattr(have, key), getattr(want, key)
            assert a == pytest.approx(b, rel=1e-12, abs=1e-18), (index, key)


def test_rows_cut_inside_a_minibatch_merge_to_the_whole():
    params = AnalysisParams()
    batch = ratioscope.load(VERL / "step_0032.pt")
    # row 45 is inside mini-batch 1 (rows 32-63); 7-row chunks cut every mini-batch too
    first = _through_json(_accumulate(batch.select_rows(0, 45), params, chunk=7 * 152), params)
    second = _through_json(_accumulate(batch.select_rows(45, 128), params), params)
    second.merge(first)  # the later half first: the order of the indices stays sorted
    _same(second.result(), _accumulate(batch, params).result())


def test_shard_reports_merge_to_the_analysis_of_all(tmp_path, whole):
    paths = sorted(VERL.glob("*.pt"))
    shards = []
    for index, part in enumerate((paths[:2], paths[2:])):
        out = tmp_path / f"shard{index}.json"
        ratioscope.analyze(part).write_json(out)
        shards.append(json.loads(out.read_text()))
    merged = ratioscope.merge_reports(shards)
    _same(merged.staleness, whole.staleness)


# ------------------------------------------------------- absent, mixed, old reports
def test_dumps_without_the_key_give_no_section_and_no_warning():
    report = ratioscope.analyze(ROOT / "sample_data" / "trl" / "step_0032.pt")
    assert report.staleness is None
    assert not [w for w in report.warnings if "staleness" in w or "minibatch" in w]
    assert "staleness" not in report.to_dict()


def test_a_run_where_some_files_lack_the_key_says_which(tmp_path):
    arrays = _tiny()
    with_key = tmp_path / "a.pt"
    without = tmp_path / "b.pt"
    torch.save(arrays, with_key)
    torch.save({k: v for k, v in arrays.items() if k != "minibatch"}, without)
    report = ratioscope.analyze([with_key, without])
    assert report.staleness.minibatches[0].rows == 2
    (warning,) = [w for w in report.warnings if w.startswith("staleness")]
    assert str(without) in warning and "minibatch" in warning


def test_schema1_reports_still_load_without_the_section():
    document = json.loads(SCHEMA1.read_text())
    report = Report.read_json(SCHEMA1)
    assert report.staleness is None
    assert "staleness" not in report.to_dict() and "staleness" not in document


# ------------------------------------------------------------------- validation
@pytest.mark.parametrize(
    ("value", "words"),
    [
        (torch.tensor([0.0, 1.5, 1.0, 2.0, 0.0]), "must hold integer indices"),
        (torch.tensor([0.0, math.nan, 1.0, 2.0, 0.0]), "no index for 1 sequence(s)"),
        (torch.tensor([0, -1, 1, 2, 0]), "indices >= 0; it holds -1 at row 1"),
        (torch.tensor([0, 1, 2]), "one index per sequence"),
        (torch.tensor([True, False, True, True, False]), "integer indices, not torch.bool"),
        (["a", "b", "c", "d", "e"], "not a numeric tensor"),
    ],
)
def test_bad_indices_are_refused_naming_the_key(value, words):
    arrays = {**_tiny(), "minibatch": value}
    with pytest.raises(InputError) as error:
        TokenBatch.from_tensors(arrays, source="d.pt", key_map={"minibatch": "minibatch"})
    assert words in str(error.value) and "minibatch" in str(error.value)


def test_whole_float_indices_are_read_as_integers():
    arrays = {**_tiny(), "minibatch": torch.tensor([0.0, 2.0, 2.0, 7.0, 0.0])}
    batch = TokenBatch.from_tensors(arrays)
    assert batch.minibatch is not None and batch.minibatch.dtype == torch.int64
    assert batch.minibatch.tolist() == [0, 2, 2, 7, 0]


def test_a_bad_index_is_one_line_and_exit_2(tmp_path):
    path = tmp_path / "bad.pt"
    torch.save({**_tiny(), "minibatch": torch.tensor([0, -3, 1, 2, 0])}, path)
    result = runner.invoke(app, ["analyze", str(path), "-q"])
    assert result.exit_code == 2
    assert result.stderr.strip().count("\n") == 0 and "'minibatch'" in result.stderr


# ------------------------------------------------------------------ command line
def test_analyze_prints_the_table():
    args = ["analyze", str(VERL / "step_0032.pt"), "-q", "--detail"]
    result = runner.invoke(app, args, env={"COLUMNS": "160"})
    assert result.exit_code == 0, result.stderr
    out = result.stdout
    assert "by mini-batch (staleness)" in out
    lines = [line for line in out.splitlines() if line.startswith("│ ")]
    first = next(line for line in lines if line.split("│")[1].strip() == "0")
    cells = [cell.strip() for cell in first.split("│")[1:-1]]
    assert cells[:4] == ["0", "32", "4,145", "100.00%"]
    assert "clip frac at the token clip band [0.8, 1.28]" in " ".join(out.split())


def test_analyze_of_a_dump_without_the_key_prints_no_table():
    trl = ROOT / "sample_data" / "trl" / "step_0032.pt"
    result = runner.invoke(app, ["analyze", str(trl), "-q", "--detail"])
    assert result.exit_code == 0 and "by mini-batch" not in result.stdout
    assert "staleness" not in result.stderr


def test_info_maps_the_key_instead_of_ignoring_it():
    result = runner.invoke(app, ["info", str(VERL / "step_0032.pt")], env={"COLUMNS": "160"})
    assert result.exit_code == 0
    (row,) = [line for line in result.stdout.splitlines() if line.strip().startswith("minibatch")]
    assert row.split("│")[1].strip() == "minibatch" and "ignored" not in row
    assert "off-policy statistics by mini-batch" in result.stdout


def test_metrics_lists_the_keys_with_values(tmp_path, whole):
    out = tmp_path / "run.json"
    whole.write_json(out)
    listed = runner.invoke(app, ["metrics", "--section", "staleness"], env={"COLUMNS": "200"})
    assert listed.exit_code == 0
    for key in ("exact_on", "mean_abs_z", "mean_z", "k3", "clip_fraction", "ess", "rows"):
        assert f"staleness.minibatches.*.{key}" in listed.stdout
    from ratioscope.report.catalog import metrics

    values = {m.key: m.value for m in metrics(out, section="staleness")}
    assert values["staleness.minibatches.0.exact_on"] == 1.0
    assert values["staleness.minibatches.3.k3"] == whole.staleness.minibatches[3].k3


# ------------------------------------------------------------ flag-value papercut
@pytest.mark.parametrize("word", ["true", "False", "yes", "no", "1", "0"])
def test_a_word_after_an_on_off_option_is_named(word):
    args = ["--quiet", word, "sample_data/verl/"]
    assert flag_given_a_value(word, args, {"--quiet", "-q"}) == "--quiet"


@pytest.mark.parametrize(
    ("missing", "args"),
    [
        ("true", ["--json", "true", "run/"]),  # an option with a value: not ours to judge
        ("truthy", ["--quiet", "truthy"]),  # not a value word
        ("true", ["true", "--quiet"]),  # before the option, not after it
    ],
)
def test_other_missing_paths_get_no_hint(missing, args):
    assert flag_given_a_value(missing, args, {"--quiet", "-q"}) is None


# ------------------------------------------------------------------------- docs
def test_the_docs_show_the_real_table(whole):
    """docs/staleness.md prints what analyze prints on the sample run, line for line."""
    import io
    import re

    from rich.console import Console

    from ratioscope.render.terminal.report import show_staleness

    buffer = io.StringIO()
    show_staleness(whole, Console(file=buffer, width=110, color_system=None))
    printed = [line.rstrip() for line in buffer.getvalue().splitlines()]
    page = (ROOT / "docs" / "staleness.md").read_text()
    blocks = re.findall(r"```text\n(.*?)```", page, re.S)
    (block,) = [b for b in blocks if "by mini-batch" in b]
    assert block.splitlines() == printed
    assert "(staleness.md)" in (ROOT / "docs" / "index.md").read_text()


def test_the_command_line_names_the_option_given_a_value():
    result = runner.invoke(app, ["analyze", "--quiet", "true", str(VERL)])
    assert result.exit_code == 2
    assert result.stderr.strip() == (
        "ratioscope: error: true: no such file or directory (--quiet takes no value)."
    )
    plot = runner.invoke(app, ["plot", "spectrum", "-q", "yes", str(VERL), "--out", "x.png"])
    assert plot.exit_code == 2
    assert plot.stderr.strip().endswith("(-q takes no value).")
    # a missing path that is not a flag's value gets no hint
    plain = runner.invoke(app, ["analyze", "true"])
    assert plain.exit_code == 2 and "takes no value" not in plain.stderr


def test_a_report_without_the_section_merges_with_one_that_has_it():
    """A shard report written before the section existed merges: the section comes from
    the shards that have it, every other section from all of them."""
    import json

    import ratioscope
    from ratioscope.analysis.pipeline import merge_reports
    from ratioscope.io.loaders import expand_paths

    first, second = expand_paths([str(VERL)])[:2]
    old = json.loads(json.dumps(ratioscope.analyze([first]).to_dict()))
    old["state"].pop("staleness")
    old.pop("staleness", None)
    new = ratioscope.analyze([second]).to_dict()
    both = ratioscope.analyze([first, second]).to_dict()
    for order in ([old, new], [new, old]):
        merged = merge_reports(order).to_dict()
        assert merged["staleness"] == new["staleness"]
        assert merged["mismatch"] == both["mismatch"]
