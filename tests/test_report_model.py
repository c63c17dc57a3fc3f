"""The typed report end to end: Report.from_dict, schema versions 1 and 2, typed renderers.

``tests/data/report_schema1*.json`` were written by schema 1 (analyze of
sample_data/verl/step_0032.pt and step_0024.pt); they must keep loading, plotting,
merging and passing ``check`` from the command line.
"""

from __future__ import annotations

import io
import json
import math
from pathlib import Path

import pytest
from rich.console import Console
from typer.testing import CliRunner

import ratioscope
from ratioscope.cli import app
from ratioscope.errors import MergeError, ReportError
from ratioscope.io.documents import (
    READABLE_SCHEMA_VERSIONS,
    SCHEMA_VERSION,
    JSONShapeError,
    from_jsonable,
    to_jsonable,
)
from ratioscope.report.model import SECTION_KEYS, Report

ROOT = Path(__file__).resolve().parents[1]
DATA = Path(__file__).resolve().parent / "data"
SCHEMA1 = DATA / "report_schema1.json"  # step_0032
FLOAT32_EPS = 2.0**-23  # one float32 ulp at 1
SCHEMA1_STEP24 = DATA / "report_schema1_step24.json"
VERL = ROOT / "sample_data" / "verl"
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"

runner = CliRunner()


@pytest.fixture(scope="module")
def fresh() -> Report:
    """A schema-2 report of the two steps the schema-1 reports cover, analysed together."""
    return ratioscope.analyze([VERL / "step_0024.pt", VERL / "step_0032.pt"])


#: the schema-1 reports were made with one on-policy band for every row
ONE_BAND = {"token_on_band": (3e-4, 4e-4), "seq_on_band": (3e-4, 4e-4)}


# ------------------------------------------------------------------------- from_dict
def test_round_trip_is_exact_on_a_fresh_report(fresh):
    document = fresh.to_dict()
    again = Report.from_dict(document)
    assert again.to_dict() == document
    assert json.dumps(again.to_dict()) == json.dumps(document)  # key order too
    from ratioscope.sections.distribution import Distribution
    from ratioscope.sections.mismatch import MismatchSection
    from ratioscope.sections.ratios import VariantStats

    assert isinstance(again.ratios["kalman"], VariantStats)
    assert isinstance(again.ratios["token"].distribution, Distribution)
    assert isinstance(again.mismatch, MismatchSection)
    assert again.ratios["token"].clip_band == fresh.ratios["token"].clip_band  # a tuple again
    assert isinstance(again.ratios["token"].clip_band, tuple)
    assert again.inputs == fresh.inputs


def test_round_trip_keeps_the_kalman_closed_form_deviation():
    report = ratioscope.analyze(VERL / "step_0024.pt", kalman_impl="reference")
    document = json.loads(json.dumps(report.to_dict()))
    assert document["ratios"]["kalman"]["closed_form_deviation"] is not None
    again = Report.from_dict(document)
    assert (
        again.ratios["kalman"].closed_form_deviation
        == report.ratios["kalman"].closed_form_deviation
    )
    assert again.to_dict() == document


def test_round_trip_with_every_section_none():
    report = ratioscope.analyze(VERL / "step_0024.pt", sections=["mismatch"])
    report.mismatch = None
    document = report.to_dict()
    assert all(document[key] is None for key in SECTION_KEYS)
    again = Report.from_dict(document)
    assert all(getattr(again, key) is None for key in SECTION_KEYS)
    assert again.to_dict() == document


@pytest.mark.parametrize("path", [SCHEMA1, SCHEMA1_STEP24])
def test_schema1_reports_load_typed_and_write_back_unchanged_but_the_version(path):
    document = json.loads(path.read_text())
    assert document["schema_version"] == 1
    report = Report.read_json(path)
    assert report.schema_version == SCHEMA_VERSION == 2
    assert report.ratios is not None and report.trust_region is not None
    written = report.to_dict()
    assert written.pop("schema_version") == 2
    document.pop("schema_version")
    # the pooled proportion moves to proportion_pooled, proportion is null (its meaning
    # is now the mean over sequences, which schema 1 did not store)
    for variant, stats in written["ratios"].items():
        assert stats["proportion"] is None
        stats["proportion"] = stats.pop("proportion_pooled")
        assert stats["proportion"] == document["ratios"][variant]["proportion"]
    # fields added since schema 1 take their defaults; everything else is as stored
    for stats in written["ratios"].values():
        for key in set(stats) - set(document["ratios"]["token"]):
            assert stats.pop(key) is None
    _drop_stated_bounds(written)
    fpa = written["future_policy"]
    assert fpa.pop("approximation") is None and fpa.pop("comparison") is None
    assert written["trust_region"].pop("degenerate_share") is None
    assert written == document


def _drop_stated_bounds(block):
    """Quantile bounds were stated after schema 1: the defaults, the value bound except
    TEPO's weight (always read in log w)."""
    if isinstance(block, dict):
        bound = block.pop("quantile_bound", None)
        if bound is not None:
            assert bound["coordinate"] in ("value", "log")
        for value in block.values():
            _drop_stated_bounds(value)
    elif isinstance(block, list):
        for value in block:
            _drop_stated_bounds(value)


@pytest.mark.parametrize(
    ("version", "words"),
    [(3, "written by a newer ratioscope"), (99, "schema version 99"), ("2", "version 2")],
)
def test_from_dict_refuses_a_newer_or_odd_version_naming_the_file(version, words):
    document = json.loads(SCHEMA1.read_text())
    document["schema_version"] = version
    with pytest.raises(ReportError, match=words) as error:
        Report.from_dict(document, source="new.json")
    message = str(error.value)
    assert message.startswith("new.json: ") and message.count(". ") == 0


def test_from_dict_refuses_a_missing_version_and_a_foreign_layout():
    document = json.loads(SCHEMA1.read_text())
    del document["schema_version"]
    with pytest.raises(ReportError, match="no 'schema_version' key"):
        Report.from_dict(document, source="old.json")
    eval_like = {"schema_version": 1, "inputs": [], "by_method": {}}
    with pytest.raises(ReportError, match=r"an evaluation report \(eval-passk or eval-ucc"):
        Report.from_dict(eval_like, source="e.json")
    unknown = {**json.loads(SCHEMA1.read_text()), "extra": 1}
    with pytest.raises(ReportError, match=r"not an analyze report \(unknown key 'extra'"):
        Report.from_dict(unknown, source="u.json")
    broken = json.loads(SCHEMA1.read_text())
    broken["ratios"]["token"]["clip_band"] = "wide"
    with pytest.raises(ReportError, match=r"ratios\.token\.clip_band: expected a list"):
        Report.from_dict(broken, source="b.json")
    assert READABLE_SCHEMA_VERSIONS == (1, 2)


def test_read_json_of_a_newer_file_is_one_sentence_naming_it(tmp_path):
    path = tmp_path / "future.json"
    document = json.loads(SCHEMA1.read_text())
    document["schema_version"] = 3
    path.write_text(json.dumps(document))
    with pytest.raises(ReportError) as error:
        Report.read_json(path)
    assert str(error.value).startswith(f"{path}: report schema version 3")


# ---------------------------------------------------------------------- from_jsonable
def test_from_jsonable_reverses_to_jsonable_on_the_awkward_values():
    from ratioscope.functional.fpa import BelowThreshold, ByCorrectness
    from ratioscope.sections.distribution import Distribution

    nan_distribution = Distribution(
        count=0, mean=math.nan, std=0.0, min=math.inf, max=-math.inf, quantiles={"0.5": math.nan}
    )
    rebuilt = from_jsonable(Distribution, to_jsonable(nan_distribution))
    assert math.isnan(rebuilt.mean) and math.isnan(rebuilt.min)  # null: NaN (inf is lost)
    assert to_jsonable(rebuilt) == to_jsonable(nan_distribution)
    generic = ByCorrectness(all=BelowThreshold(1, 2, 0.5), correct=None, incorrect=None)
    hint = ByCorrectness[BelowThreshold | None]
    assert from_jsonable(hint, to_jsonable(generic)) == generic
    assert from_jsonable(tuple[float, ...], [1, 2.5]) == (1, 2.5)
    assert from_jsonable(dict[int, list[float | None]], {"3": [None, 1.0]}) == {3: [None, 1.0]}
    assert from_jsonable(float | None, None) is None
    with pytest.raises(JSONShapeError, match=r"\$\.count: expected int, found str"):
        from_jsonable(BelowThreshold, {"count": "1", "total": 2, "fraction": 0.5})
    with pytest.raises(JSONShapeError, match="unknown key 'extra'"):
        from_jsonable(BelowThreshold, {"count": 1, "total": 2, "fraction": 0.5, "extra": 1})
    with pytest.raises(JSONShapeError, match="no 'total'"):
        from_jsonable(BelowThreshold, {"count": 1, "fraction": 0.5})


def test_a_field_missing_from_an_older_report_takes_its_default():
    from ratioscope.sections.ratios import VariantStats

    document = json.loads(SCHEMA1.read_text())
    token = document["ratios"]["token"]
    for key in ("lfr_excluded", "spectrum"):
        del token[key]
    stats = Report.from_dict(document).ratios["token"]
    defaults = VariantStats(**{k: getattr(stats, k) for k in ("distribution", "clip_band",
                            "clip_fraction", "surrogate")})  # fmt: skip
    assert stats.lfr_excluded is defaults.lfr_excluded is None
    assert stats.spectrum is defaults.spectrum is None


# -------------------------------------------------------------------- the renderers
def _printed(report: Report) -> str:
    from ratioscope.render.terminal.report import show_report

    console = Console(file=io.StringIO(), width=200, color_system=None)
    show_report(report, console)
    return console.file.getvalue()


def test_a_fresh_report_and_its_reloaded_copy_print_alike(fresh):
    text = _printed(fresh)
    assert "off-policy mismatch" in text and "QUATRO" in text
    assert _printed(Report.from_dict(fresh.to_dict())) == text


# ----------------------------------------------------------- schema 1 from the CLI
@pytest.mark.parametrize("kind", ["spectrum", "windows", "runlengths", "covariance"])
def test_schema1_reports_plot_alone_and_together(tmp_path, kind):
    for name, paths in {"one": [SCHEMA1], "two": [SCHEMA1, SCHEMA1_STEP24]}.items():
        out = tmp_path / f"{kind}-{name}.png"
        result = runner.invoke(app, ["plot", kind, *map(str, paths), "--out", str(out), "-q"])
        assert result.exit_code == 0, result.stderr
        assert out.read_bytes().startswith(PNG_MAGIC)


def _close_rel(a, b, rel, where=""):
    if isinstance(a, dict):
        for key in a:
            _close_rel(a[key], b[key], rel, f"{where}.{key}")
    else:
        assert b == pytest.approx(a, rel=rel), where


def _close(a, b, where="", float32_bounds=None):
    """a and b equal within 1e-6 of a (quantiles within their bins' error, the keys of
    ``float32_bounds`` within its absolute bound besides)."""
    float32_bounds = float32_bounds or {}
    if isinstance(a, dict):
        for key in a.keys() & b.keys():
            if key == "quantile_bound":  # each states its own coordinate (checked below)
                continue
            _close(a[key], b[key], f"{where}.{key}", float32_bounds)
    elif isinstance(a, list):
        assert len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            _close(x, y, f"{where}.{i}", float32_bounds)
    elif isinstance(a, float) and isinstance(b, (int, float)) and ".quantiles." in where:
        # schema 1 read weights from value bins: within 1.16 % of the value (stats.py)
        assert b == pytest.approx(a, rel=0.0117, abs=1e-9), where
    elif isinstance(a, float) and isinstance(b, (int, float)) and where in float32_bounds:
        assert b == pytest.approx(a, rel=1e-6, abs=float32_bounds[where]), where
    elif isinstance(a, float) and isinstance(b, (int, float)):
        assert b == pytest.approx(a, rel=1e-6, abs=1e-12), where
    else:
        assert a == b, where


def test_schema1_reports_merge_to_the_analysis_of_both_steps(tmp_path):
    """Made with one band for every row: they merge to an analysis with that band, the
    per-sequence proportions they lack left null."""
    out = tmp_path / "merged.json"
    result = runner.invoke(
        app, ["merge", str(SCHEMA1_STEP24), str(SCHEMA1), "--out", str(out), "-q"]
    )
    assert result.exit_code == 0, result.stderr
    merged = json.loads(out.read_text())
    assert merged["schema_version"] == 2
    assert merged["params"]["analysis"]["token_on_band"] == [3e-4, 4e-4]  # read as on_band
    fresh = ratioscope.analyze([VERL / "step_0024.pt", VERL / "step_0032.pt"], **ONE_BAND)
    expected = fresh.to_dict()
    names = [Path(i["path"]).name for i in merged["inputs"]]
    assert names == [Path(i["path"]).name for i in expected["inputs"]]
    for variant, stats in expected["ratios"].items():
        assert merged["ratios"][variant]["proportion"] is None
        del stats["proportion"]
        # schema 1 summed float32 surrogate terms: within 0.2 % of the float64 sums
        _close_rel(stats.pop("surrogate"), merged["ratios"][variant]["surrogate"], 5e-3)
    # schema 1 pooled the exact FPA of step 32 with the approximation of step 24; its
    # sums cannot be split again, so the merge says so instead of comparing
    assert merged["future_policy"]["method"] == "mixed"
    # the stored reports were written when the sample run's engine was the float32 policy;
    # it is now a bfloat16 copy, which changed the files' rollout_log_probs and nothing
    # else (sample_data/README.md): the train/inference row is compared with what a
    # float32 engine gives, float noise, and every other number with the fresh analysis
    stored_rollout = merged["mismatch"].pop("rollout")
    assert 0 < stored_rollout["k3"] < 1e-10
    assert expected["mismatch"].pop("rollout")["k3"] > 1e-6
    # TEPO's weights are float32 (exp of each row's mean z): the stored step 24 holds
    # weights a few float32 ulps away from today's on some rows (its token statistics
    # agree to 1e-15 and step 32's weights to the bit; the code of the day the reports
    # were written gives today's values on this machine, so their machine's float32
    # arithmetic differed). A weight w moving by d moves the weights' mean, extremes
    # and std by at most max |d| (|std(w + d) - std(w)| <= max |d|), and a surrogate's
    # mean of w A terms by max |d| max |A|: bounds of 4 ulps of the largest weight,
    # which the std, 1e-3 of the mean, and the surrogate, a sum that cancels, need
    # instead of 1e-6 of themselves
    drift = 4 * FLOAT32_EPS * expected["tepo"]["weight"]["max"]
    largest_advantage = max(
        float(ratioscope.load(VERL / name).advantages.abs().max())
        for name in ("step_0024.pt", "step_0032.pt")
    )
    float32_bounds = {f"tepo.weight.{key}": drift for key in ("mean", "std", "min", "max")}
    for key in expected["tepo"]["surrogate"]:
        float32_bounds[f"tepo.surrogate.{key}"] = drift * largest_advantage
    for key in SECTION_KEYS:
        assert (merged[key] is None) == (expected[key] is None), key
        if key != "future_policy":
            _close(expected[key], merged[key], key, float32_bounds)
    weights = merged["covariance"]["weights"]["distribution"]["quantile_bound"]
    assert weights["coordinate"] == "value"  # the bins schema 1 wrote, stated as such
    assert merged["ratios"]["token"]["distribution"]["count"] == sum(
        info["tokens"] for info in merged["inputs"]
    )
    # the merged file is itself a schema-2 report that reads back exactly
    merged["mismatch"]["rollout"] = stored_rollout
    assert Report.read_json(out).to_dict() == merged


def test_a_schema1_and_a_newer_report_do_not_merge_one_sentence_says_why(tmp_path):
    """A report without per-row bands merges only with reports like it: its params
    differ from a newer report's, and its sums lack the per-sequence proportions."""
    new = tmp_path / "step24.json"
    one_band = ["--token-on-band", "3e-4,4e-4", "--seq-on-band", "3e-4,4e-4"]
    assert runner.invoke(
        app, ["analyze", str(VERL / "step_0024.pt"), *one_band, "--json", str(new), "-q"]
    ).exit_code == 0  # fmt: skip
    out = tmp_path / "m.json"
    result = runner.invoke(app, ["merge", str(new), str(SCHEMA1), "--out", str(out), "-q"])
    assert result.exit_code == 2 and not out.exists()
    message = result.stderr.strip()
    assert "different parameters" in message and "token_on_band" in message
    assert message.count("\n") == 0
    # the same parameters written the old way: the sums refuse, naming what is missing
    document = json.loads(new.read_text())
    for key in ONE_BAND:
        del document["params"]["analysis"][key]
    # nor had such a report the staleness section (step 24's dump has mini-batch indices)
    del document["staleness"], document["state"]["staleness"]
    with pytest.raises(MergeError, match="before per-sequence state"):
        ratioscope.merge_reports([document, json.loads(SCHEMA1.read_text())])


def test_a_schema1_report_plots_and_checks_options_against_its_one_band(tmp_path):
    out = tmp_path / "w.png"
    base = ["plot", "windows", str(SCHEMA1), "--out", str(out), "-q"]
    assert runner.invoke(app, [*base, "--token-on-band", "3e-4,4e-4"]).exit_code == 0
    refused = runner.invoke(app, [*base, "--token-on-band", "exact"])
    assert refused.exit_code == 2
    assert "made with token on band 0.0003,0.0004" in refused.stderr


RULES = """
[[rule]]
path = "ratios.kalman.switch_frequency"
max_increase = 1.0

[[rule]]
path = "mismatch.policy.chi2_token"
max_increase_pct = 1000
min = 0

[[rule]]
path = "ratios.token.distribution.quantiles.0.99"
max = 1.0
"""


def test_check_compares_schema1_reports_with_each_other_and_with_schema2(tmp_path, fresh):
    rules = tmp_path / "rules.toml"
    rules.write_text(RULES)
    new = tmp_path / "new.json"
    fresh.write_json(new)
    pairs = [(SCHEMA1, SCHEMA1_STEP24), (SCHEMA1_STEP24, SCHEMA1), (new, SCHEMA1), (SCHEMA1, new)]
    for report, baseline in pairs:
        args = ["check", str(report), "--rules", str(rules), "--baseline", str(baseline)]
        result = runner.invoke(app, args)
        assert result.exit_code == 0, (report.name, baseline.name, result.output)
        assert "PASS: all 3 rules hold" in result.stdout


def test_check_takes_a_typed_report(fresh):
    from ratioscope.judgement.rules import evaluate, parse_rules

    rules = parse_rules(RULES, "rules.toml")
    typed = evaluate(fresh, rules, fresh)
    plain = evaluate(fresh.to_dict(), rules, fresh.to_dict())
    assert typed == plain and typed.passed


# ------------------------------------------------------------------- module layout
def test_report_modules_leave_the_json_suffix_to_io_paths():
    own = [ROOT / "ratioscope" / name for name in ("report/model.py", "report/files.py",
           "io/documents.py", "analysis/pipeline.py", "judgement/rules.py")]  # fmt: skip
    own += sorted((ROOT / "ratioscope" / "render").rglob("*.py"))
    commands = ("analyze", "plot", "plot_ratios", "plot_objectives", "merge", "check", "_common")
    own += [ROOT / "ratioscope" / "cli" / f"{name}.py" for name in commands]
    for path in own:
        code = "\n".join(
            line for line in path.read_text().splitlines() if not line.lstrip().startswith("#")
        )
        assert 'suffix.lower() == ".json"' not in code and '".json")' not in code, path
        assert 'endswith(".json")' not in code, path


def _plain_jsonable(value):
    """The conversion written out, one call per value: the reference for to_jsonable."""
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, int):
        return value
    if isinstance(value, dict):
        return {str(k): _plain_jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain_jsonable(v) for v in value]
    raise TypeError(type(value))


@pytest.mark.parametrize("seed", range(5))
def test_to_jsonable_equals_the_conversion_of_every_value(seed):
    """Plain numbers are kept without a call each: the document is the same, bools stay
    bools, non-finite floats become null, at every depth."""
    import random

    rng = random.Random(seed)
    atoms = [0, 7, -3, True, False, 1.5, -0.0, math.nan, math.inf, -math.inf, None, "s"]

    def build(depth: int):
        if depth == 0 or rng.random() < 0.3:
            return rng.choice(atoms)
        if rng.random() < 0.5:
            return [build(depth - 1) for _ in range(rng.randint(0, 5))]
        if rng.random() < 0.5:
            return tuple(build(depth - 1) for _ in range(rng.randint(0, 3)))
        return {rng.choice(["a", 1, "b", 2.5]): build(depth - 1) for _ in range(3)}

    for _ in range(50):
        value = build(4)
        got, expected = to_jsonable(value), _plain_jsonable(value)
        # json.dumps tells true from 1; NaN is gone from both (null)
        assert got == expected and json.dumps(got) == json.dumps(expected)
