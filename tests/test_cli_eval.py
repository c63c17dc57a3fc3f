"""``eval-passk``, ``eval-ucc`` and the evaluation plots, end to end.

Expected numbers are recomputed here from the raw JSON lines with ``math.comb`` and
``fractions.Fraction`` (not with ratioscope), on the committed slice of the real
Qwen2.5-Math evaluation file (tests/data, MIT licence beside it) and on small flat
fixtures written by the tests.
"""

from __future__ import annotations

import json
import math
from fractions import Fraction
from pathlib import Path

import polars as pl
import pytest
from typer.testing import CliRunner

from ratioscope.cli import app
from ratioscope.evaluation import evaluate_passk, evaluate_ucc
from ratioscope.io.samples import load_samples

SLICE = Path(__file__).parent / "data" / "qwen25_math_cot_slice.jsonl"
SAMPLE_DATA = Path(__file__).parent.parent / "sample_data" / "samples.jsonl"
METHOD = SLICE.stem
runner = CliRunner()


def slice_scores() -> list[list[bool]]:
    return [json.loads(line)["score"] for line in SLICE.read_text(encoding="utf-8").splitlines()]


def exact_pass(n: int, c: int, k: int) -> Fraction:
    return 1 - Fraction(math.comb(n - c, k), math.comb(n, k))


def run(*args: str, env: dict[str, str] | None = None):
    return runner.invoke(app, [str(a) for a in args], env=env)


def write_flat(path: Path, method: str | None, correct_counts: list[int], n: int = 8) -> Path:
    lines = []
    for problem, count in enumerate(correct_counts):
        for index in range(n):
            row = {
                "problem_id": f"p{problem}",
                "response": f"solution {index % 3} of problem {problem} gives {index}",
                "correct": index < count,
                "sample_index": index,
                "dataset": "easy" if problem % 2 else "hard",
            }
            if method:
                row["method"] = method
            lines.append(json.dumps(row))
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


# ---- eval-passk ---------------------------------------------------------------------


def test_eval_passk_on_real_slice(tmp_path):
    out = tmp_path / "passk.json"
    result = run("eval-passk", SLICE, "--json", out, "-q")
    assert result.exit_code == 0, result.output
    assert "Pass@k (%)" in result.stdout and METHOD in result.stdout
    report = json.loads(out.read_text())
    assert list(report) == [
        "schema_version", "tool", "inputs", "params", "by_method", "flip_rate", "warnings",
    ]  # fmt: skip
    assert report["schema_version"] == 1
    assert report["inputs"][0]["layout"] == "grouped"
    assert report["params"]["k"] == [1, 2, 4, 8]  # default: powers of two up to n = 8
    block = report["by_method"][METHOD]
    scores = slice_scores()
    for k in (1, 2, 4, 8):
        want = sum(exact_pass(len(s), sum(s), k) for s in scores) / len(scores)
        assert block["pass_at_k"][str(k)] == pytest.approx(float(want), abs=1e-12)
    assert block["avg"] == pytest.approx(sum(sum(s) / len(s) for s in scores) / len(scores))
    # Pass@1 ± SE (FPA App. B.3): a_j over problems, population std over j
    a = [sum(s[j] for s in scores) / len(scores) for j in range(8)]
    mean = sum(a) / 8
    se = math.sqrt(sum((x - mean) ** 2 for x in a) / 8) / math.sqrt(8)
    assert block["pass1_se"] == {
        "mean": pytest.approx(mean),
        "se": pytest.approx(se),
        "samples_per_problem": 8,
    }
    assert block["ucc_at_k"] is None and block["clusters"] is None


def test_eval_passk_k_above_n_fails_cleanly(tmp_path):
    out = tmp_path / "passk.json"
    result = run("eval-passk", SLICE, "--k", "1,16", "--json", out)
    assert result.exit_code == 2
    assert "line 1: problem 3 of method" in result.stderr
    assert str(SLICE) in result.stderr and "fewer than k=16" in result.stderr
    assert "Traceback" not in result.output
    assert not out.exists()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--k", "1,x"], "--k expects comma-separated integers"),
        (["--k", "0"], "--k expects positive integers"),
        (["--base", "nope"], "no method 'nope'"),
        (["--base", METHOD], "needs at least one other method"),
    ],
)
def test_eval_passk_usage_errors(tmp_path, args, message):
    out = tmp_path / "o.json"
    result = run("eval-passk", SLICE, *args, "--json", out, "-q")
    assert result.exit_code == 2
    assert message in result.stderr
    assert not out.exists()


def test_eval_passk_bad_input_file(tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"problem_id": 1, "response": "a", "correct": 1}\n{"problem_id": 1,\n')
    result = run("eval-passk", bad)
    assert result.exit_code == 2
    assert f"{bad}: line 2: not valid JSON" in result.stderr
    missing = run("eval-passk", tmp_path / "missing.jsonl")
    assert missing.exit_code == 2 and "cannot read the samples file" in missing.stderr


def test_eval_passk_refuses_to_overwrite_its_input(tmp_path):
    copy = tmp_path / "s.jsonl"
    copy.write_text(SLICE.read_text(encoding="utf-8"), encoding="utf-8")
    result = run("eval-passk", copy, "--json", copy)
    assert result.exit_code == 2 and "refusing to overwrite" in result.stderr


def test_eval_passk_field_options(tmp_path):
    path = tmp_path / "odd.jsonl"
    rows = [{"q": i, "text": "t", "ok": j < i, "who": "m"} for i in range(3) for j in range(2)]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    result = run("eval-passk", path, "-q")
    assert result.exit_code == 2 and "--*-field" in result.stderr
    out = tmp_path / "o.json"
    result = run(
        "eval-passk", path, "--problem-field", "q", "--response-field", "text",
        "--correct-field", "ok", "--method-field", "who", "--json", out, "-q",
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    # c = 0, 1, 2 of n = 2
    assert json.loads(out.read_text())["by_method"]["m"]["pass_at_k"]["2"] == pytest.approx(2 / 3)


def test_flip_rate_and_datasets(tmp_path):
    base = write_flat(tmp_path / "base.jsonl", None, [0, 0, 1, 6])
    trained = write_flat(tmp_path / "trained.jsonl", None, [2, 0, 3, 8])
    out = tmp_path / "flip.json"
    result = run("eval-passk", base, trained, "--base", "base", "--k", "1,2,8", "--json", out)
    assert result.exit_code == 0, result.output
    assert "Flip rate" in result.stdout
    report = json.loads(out.read_text())
    flip = report["flip_rate"]
    assert flip["base"] == "base" and list(flip["by_method"]) == ["trained"]
    buckets = {b["name"]: b for b in flip["by_method"]["trained"]["buckets"]}
    # n = 8: c = 0 very hard, c = 1 medium (1/8 <= c/n < 1/2), c = 6 easy, no c is hard
    assert [buckets[name]["prompts"] for name in ("very hard", "hard", "medium", "easy")] == [
        2, 0, 1, 1,
    ]  # fmt: skip
    assert buckets["very hard"]["unsolved_to_solved"] == 1
    assert buckets["hard"]["flip_at_k"]["2"] is None
    flip_table = result.stdout[result.stdout.index("Flip rate") :]
    hard_row = next(line for line in flip_table.splitlines() if line.startswith("│ hard "))
    assert hard_row.count("—") == 3 and "-" not in hard_row.replace("->", "")  # k = 1, 2, 8
    for k in (1, 2, 8):
        very_hard = (exact_pass(8, 2, k) + exact_pass(8, 0, k)) / 2
        medium = (1 - exact_pass(8, 1, k)) * exact_pass(8, 3, k)
        easy = (1 - exact_pass(8, 6, k)) * exact_pass(8, 8, k)
        assert buckets["very hard"]["flip_at_k"][str(k)] == pytest.approx(float(very_hard))
        assert buckets["medium"]["flip_at_k"][str(k)] == pytest.approx(float(medium))
        assert buckets["easy"]["flip_at_k"][str(k)] == pytest.approx(float(easy))
    # datasets: problems 1, 3 are "easy", 0, 2 "hard" in the fixture
    by_dataset = report["by_method"]["trained"]["by_dataset"]
    assert list(by_dataset) == ["easy", "hard"]  # sorted by name
    assert by_dataset["easy"]["pass_at_k"]["1"] == pytest.approx((0 / 8 + 8 / 8) / 2)
    assert by_dataset["hard"]["problems"] == 2


# ---- eval-ucc -----------------------------------------------------------------------


def test_eval_ucc_on_real_slice(tmp_path):
    out, table = tmp_path / "ucc.json", tmp_path / "ucc.parquet"
    result = run("eval-ucc", SLICE, "--json", out, "--per-problem", table, "-q")
    assert result.exit_code == 0, result.output
    assert "UCC@k" in result.stdout and "Similarity of correct responses" in result.stdout
    report = json.loads(out.read_text())
    params = report["params"]
    assert (params["threshold"], params["linkage"], params["command"]) == (
        0.8,
        "single",
        "eval-ucc",
    )
    block = report["by_method"][METHOD]
    per_problem = block["clusters"]["per_problem"]
    scores = slice_scores()
    assert [p["correct"] for p in per_problem] == [sum(s) for s in scores]
    assert all(sum(p["sizes"]) == p["correct"] for p in per_problem)
    # UCC@n = mean number of correct clusters; UCC@1 = mean accuracy
    assert block["ucc_at_k"]["8"] == pytest.approx(block["clusters"]["mean"], abs=1e-12)
    assert block["ucc_at_k"]["1"] == pytest.approx(block["avg"], abs=1e-12)
    assert set(block["diversity"]) == {
        "tfidf_cosine", "rouge_l", "jaccard", "edit_similarity", "problems", "pairs",
    }  # fmt: skip
    # a problem with < 2 correct responses has no pair
    assert block["diversity"]["problems"] == sum(sum(s) >= 2 for s in scores)
    frame = pl.read_parquet(table)
    assert frame.height == len(scores)
    assert frame["clusters"].to_list() == [p["clusters"] for p in per_problem]
    assert frame["pass_at_8"].to_list() == pytest.approx(
        [float(exact_pass(8, sum(s), 8)) for s in scores]
    )


def test_eval_ucc_linkages_and_options(tmp_path):
    for linkage in ("single", "average", "complete"):
        result = run("eval-ucc", SLICE, "--linkage", linkage, "--max-pairs", "0", "-q")
        assert result.exit_code == 0, result.output
    for args, message in [
        (["--linkage", "ward"], "--linkage must be one of single, average, complete"),
        (["--threshold", "0"], "--threshold must lie in (0, 1]"),
        (["--max-pairs", "-1"], "--max-pairs must be 0 or more"),
        (["--per-problem", tmp_path / "x.csv"], "name it *.parquet"),
    ]:
        result = run("eval-ucc", SLICE, *args, "--json", tmp_path / "o.json", "-q")
        assert result.exit_code == 2, args
        assert message in result.stderr
        assert not (tmp_path / "o.json").exists()


def test_eval_ucc_with_base_on_flat_files(tmp_path):
    base = write_flat(tmp_path / "base.jsonl", "base", [0, 2, 4, 8])
    trained = write_flat(tmp_path / "t.jsonl", "grpo", [1, 3, 8, 8])
    out = tmp_path / "u.json"
    result = run("eval-ucc", base, trained, "--base", "base", "--json", out, "-q")
    assert result.exit_code == 0, result.output
    report = json.loads(out.read_text())
    assert list(report["by_method"]) == ["base", "grpo"]
    assert report["flip_rate"]["by_method"]["grpo"]["problems"] == 4


def test_json_is_deterministic_apart_from_the_timestamp(tmp_path):
    loaded = load_samples(SLICE)
    first = evaluate_ucc(loaded, max_pairs=5).to_document()
    second = evaluate_ucc(loaded, max_pairs=5).to_document()
    first["tool"].pop("created")
    second["tool"].pop("created")
    assert json.dumps(first) == json.dumps(second)


def test_pass1_se_needs_sample_indices(tmp_path):
    path = tmp_path / "noidx.jsonl"
    rows = [
        {"problem_id": p, "response": "r", "correct": i < p} for p in range(3) for i in range(4)
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    report = evaluate_passk(load_samples(path))
    assert report.by_method["noidx"].pass1_se is None
    assert any("Pass@1 ± SE" in w for w in report.warnings)


# ---- plots --------------------------------------------------------------------------

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def test_plot_passk_and_ucc_from_samples_and_reports(tmp_path):
    report = tmp_path / "ucc.json"
    assert run("eval-ucc", SLICE, "--json", report, "-q").exit_code == 0
    for kind in ("passk", "ucc"):
        for source in (SLICE, report):
            out = tmp_path / f"{kind}-{source.suffix[1:]}.png"
            result = run("plot", kind, source, "--out", out, "-q")
            assert result.exit_code == 0, result.output
            assert out.read_bytes()[:8] == PNG_MAGIC
    svg = tmp_path / "passk.svg"
    assert run("plot", "passk", report, "--out", svg).exit_code == 0
    assert "<svg" in svg.read_text()[:500]


def test_plot_ucc_from_a_passk_report_is_refused(tmp_path):
    report = tmp_path / "passk.json"
    assert run("eval-passk", SLICE, "--json", report, "-q").exit_code == 0
    out = tmp_path / "ucc.png"
    result = run("plot", "ucc", report, "--out", out)
    assert result.exit_code == 2 and "make it with eval-ucc" in result.stderr
    assert not out.exists()


def test_plot_similarity(tmp_path):
    out = tmp_path / "sim.pdf"
    result = run("plot", "similarity", SLICE, "--problem", "89", "--out", out)
    assert result.exit_code == 0, result.output
    assert out.read_bytes()[:5] == b"%PDF-"
    result = run("plot", "similarity", SLICE, "--problem", "999", "--out", out.with_suffix(".png"))
    assert result.exit_code == 2 and "no problem '999'" in result.stderr
    result = run("plot", "similarity", SLICE, "--problem", "89", "--out", tmp_path / "x.jpg")
    assert result.exit_code == 2 and ".png, .svg, .pdf" in result.stderr
    assert not (tmp_path / "x.jpg").exists()


def sample_data_counts() -> dict[str, dict[str, tuple[int, int]]]:
    """{method: {problem: (n, c)}} read straight from the JSON lines."""
    counts: dict[str, dict[str, list[int]]] = {}
    for line in SAMPLE_DATA.read_text(encoding="utf-8").splitlines():
        row = json.loads(line)
        n_c = counts.setdefault(row["method"], {}).setdefault(row["problem_id"], [0, 0])
        n_c[0] += 1
        n_c[1] += bool(row["correct"])
    return {m: {p: (n, c) for p, (n, c) in problems.items()} for m, problems in counts.items()}


@pytest.mark.skipif(not SAMPLE_DATA.exists(), reason="sample_data/samples.jsonl not present")
def test_commands_on_sample_data(tmp_path):
    out = tmp_path / "s.json"
    result = run("eval-passk", SAMPLE_DATA, "--base", "base", "--json", out, "-q")
    assert result.exit_code == 0, result.output
    report = json.loads(out.read_text())
    counts = sample_data_counts()
    assert set(report["by_method"]) == set(counts) == {"base", "grpo"}
    # one file, 50 distinct problems answered by two methods
    (info,) = report["inputs"]
    assert (info["problems"], info["samples"], info["methods"]) == (50, 6400, ["base", "grpo"])
    assert "(flat, 50 problems, 2 methods, 6400 samples)" in result.stdout
    assert report["params"]["k"] == [1, 2, 4, 8, 16, 32, 64]
    for method, block in report["by_method"].items():
        problems = counts[method]
        assert block["problems"] == len(problems) == 50
        assert block["samples_per_problem"] == {"min": 64, "max": 64}
        for k in (1, 8, 64):
            expected = sum(exact_pass(n, c, k) for n, c in problems.values()) / len(problems)
            assert block["pass_at_k"][str(k)] == pytest.approx(float(expected), abs=1e-12)
        assert block["pass_at_k"]["1"] == pytest.approx(block["avg"], abs=1e-12)
    # flip-rate buckets by the base correct count c of 64: [0, 2), [2, 8), [8, 32), [32, 64]
    bases = [c for _, c in counts["base"].values()]
    expected_prompts = [
        sum(c < 2 for c in bases),
        sum(2 <= c < 8 for c in bases),
        sum(8 <= c < 32 for c in bases),
        sum(c >= 32 for c in bases),
    ]
    buckets = report["flip_rate"]["by_method"]["grpo"]["buckets"]
    assert [b["prompts"] for b in buckets] == expected_prompts
    grpo = counts["grpo"]
    medium = [p for p, (_, c) in counts["base"].items() if 8 <= c < 32]
    flip1 = sum(
        (1 - Fraction(counts["base"][p][1], 64)) * Fraction(grpo[p][1], 64) for p in medium
    ) / len(medium)
    assert buckets[2]["flip_at_k"]["1"] == pytest.approx(float(flip1), abs=1e-12)


def test_progress_is_reported_per_problem():
    updates = []
    evaluate_ucc(load_samples(SLICE), max_pairs=0, progress=updates.append)
    assert [u.completed for u in updates] == list(range(1, 7))
    assert {(u.task, u.total, u.description) for u in updates} == {("problems", 6, METHOD)}


# ---- report inputs: options that would change the numbers --------------------------


@pytest.fixture(scope="module")
def strict_report(tmp_path_factory):
    """An eval-ucc report of the slice made with a non-default clustering."""
    path = tmp_path_factory.mktemp("strict") / "strict.json"
    args = ("eval-ucc", SLICE, "--threshold", "0.9", "--linkage", "complete", "--json", path)
    result = run(*args, "-q")
    assert result.exit_code == 0, result.output
    return path


@pytest.mark.parametrize(
    ("kind", "args", "message"),
    [
        ("ucc", ["--threshold", "0.95"], "--threshold applies only to samples input; the "
         "report strict.json was made with threshold 0.9"),
        ("ucc", ["--linkage", "single"], "the report strict.json was made with linkage complete"),
        ("passk", ["--k", "128"], "--k applies only to samples input; the report strict.json "
         "was made with k 1,2,4,8"),
        ("passk", ["--problem-field", "q"], "--problem-field applies only to samples input"),
        ("ucc", ["--method-field", "method"], "--method-field applies only to samples input"),
    ],
)  # fmt: skip
def test_report_input_refuses_options_that_would_change_it(
    tmp_path, strict_report, kind, args, message
):
    out = tmp_path / "f.png"
    result = run("plot", kind, strict_report, *args, "--out", out)
    assert result.exit_code == 2, result.output
    assert message in result.stderr
    assert not out.exists()


def test_report_input_accepts_its_own_values_and_is_labelled_by_them(
    tmp_path, strict_report, monkeypatch
):
    import matplotlib

    # SVG text as text, so the labels can be read back from the file
    monkeypatch.setitem(matplotlib.rcParams, "svg.fonttype", "none")
    out = tmp_path / "ucc.svg"
    args = ("--threshold", "0.9", "--linkage", "complete", "--k", "8,4,2,1")
    result = run("plot", "ucc", strict_report, *args, "-o", out)
    assert result.exit_code == 0, result.output
    assert "cosine &gt;= 0.9, complete linkage" in out.read_text()
    result = run("plot", "ucc", strict_report, "-o", out)  # no option: the report's params
    assert result.exit_code == 0 and "cosine &gt;= 0.9, complete linkage" in out.read_text()


def test_samples_beside_a_report_are_clustered_as_the_report_was(strict_report):
    from ratioscope.figures.evaluation import metric_curves

    default = evaluate_ucc(load_samples(SLICE), max_pairs=0).by_method[METHOD].ucc_at_k
    strict = json.loads(strict_report.read_text())["by_method"][METHOD]["ucc_at_k"]
    assert default != strict  # otherwise this test could not tell the settings apart
    result = metric_curves([strict_report, SLICE], "ucc_at_k")
    assert (result.threshold, result.linkage) == (0.9, "complete")
    from_samples = result.curves[f"{METHOD} (samples)"]
    assert from_samples == {int(k): pytest.approx(v, abs=1e-12) for k, v in strict.items()}
    assert result.curves[f"{METHOD} (strict.json)"] == {int(k): v for k, v in strict.items()}


def test_reports_with_different_clustering_are_not_mixed(tmp_path, strict_report):
    other = tmp_path / "default.json"
    assert run("eval-ucc", SLICE, "--json", other, "-q").exit_code == 0
    result = run("plot", "ucc", strict_report, other, "--out", tmp_path / "u.png")
    assert result.exit_code == 2
    assert "different thresholds (strict.json: 0.9, default.json: 0.8)" in result.stderr


# ---- sample files: named fields must exist; reports and other files are recognised --


@pytest.mark.skipif(not SAMPLE_DATA.exists(), reason="sample_data/samples.jsonl not present")
@pytest.mark.parametrize("option", ["--method-field", "--dataset-field"])
def test_a_named_optional_field_that_no_line_has_is_an_error(option):
    result = run("eval-passk", SAMPLE_DATA, option, "nope", "-q")
    assert result.exit_code == 2
    role = option.removeprefix("--").removesuffix("-field")
    assert f"{SAMPLE_DATA}: no line has the {role} field 'nope' named by {option}" in (
        result.stderr
    )
    assert "repeats" not in result.stderr


@pytest.mark.parametrize("option", ["--problem-field", "--response-field", "--correct-field"])
def test_a_named_required_field_that_is_missing_is_an_error(option):
    result = run("eval-passk", SLICE, option, "nope", "-q")
    assert result.exit_code == 2
    assert f"{SLICE}: line 1 has no" in result.stderr and f"'nope' ({option})" in result.stderr


def test_default_optional_fields_stay_optional(tmp_path):
    # the slice has neither "method" nor "dataset": the defaults must not complain
    result = run("eval-passk", SLICE, "-q")
    assert result.exit_code == 0, result.output


def test_reports_and_other_files_given_as_samples(tmp_path, strict_report):
    compact = tmp_path / "compact.jsonl"
    compact.write_text(json.dumps(json.loads(strict_report.read_text())) + "\n")
    other_json = tmp_path / "other.json"
    other_json.write_text(json.dumps({"a": [1, 2]}, indent=2))
    binary = tmp_path / "dump.pt"
    binary.write_bytes(b"PK\x03\x04\x14\x00\x00\x00\x08\x00\xb7\x8b\xff\xfe\n\x00")
    csv = tmp_path / "s.csv"
    csv.write_text("problem_id,response,correct\n1,a,1\n")
    cases = [
        (strict_report, "this is a ratioscope report, not a samples JSONL file"),
        (compact, "this is a ratioscope report, not a samples JSONL file"),
        (other_json, "not a JSON-lines samples file (one JSON document over several lines"),
        (binary, "not a JSON-lines samples file (binary data, not UTF-8 text)"),
        (csv, "not a JSON-lines samples file (line 1 is not JSON"),
    ]
    for path, message in cases:
        result = run("eval-passk", path)
        assert result.exit_code == 2 and f"{path}: {message}" in result.stderr, path
    out = tmp_path / "p.png"
    result = run("plot", "similarity", strict_report, "--problem", "1", "--out", out)
    assert result.exit_code == 2 and "this is a ratioscope report" in result.stderr
    assert not out.exists()


# ---- tables -------------------------------------------------------------------------


def test_max_pairs_zero_is_said_and_missing_values_are_dashes():
    result = run("eval-ucc", SLICE, "--max-pairs", "0", "-q")
    assert result.exit_code == 0, result.output
    text = " ".join(result.stdout.split())  # the caption wraps at the table's width
    assert "ROUGE-L, Jaccard and edit similarity skipped (--max-pairs 0)" in text
    assert "at most 0" not in text
    diversity = result.stdout[result.stdout.index("Similarity of correct responses") :]
    row = next(line for line in diversity.splitlines() if METHOD in line)
    assert row.count("—") == 3 and " - " not in row  # ROUGE-L, Jaccard, edit: not computed


# ---- outputs: checked before any work, one line naming what was written -------------


def test_output_paths_are_checked_before_any_work(tmp_path):
    same = tmp_path / "a.parquet"
    result = run("eval-ucc", SLICE, "--json", same, "--per-problem", same, "-q")
    assert result.exit_code == 2 and "same file" in result.stderr and not same.exists()
    first = tmp_path / "u.json"
    missing = tmp_path / "nodir" / "p.parquet"
    result = run("eval-ucc", SLICE, "--json", first, "--per-problem", missing, "-q")
    assert result.exit_code == 2 and "does not exist" in result.stderr
    assert not first.exists()  # refused before u.json was written
    result = run("eval-passk", SLICE, "--json", tmp_path, "-q")
    assert result.exit_code == 2 and "is a directory" in result.stderr
    for kind in ("passk", "ucc"):
        result = run("plot", kind, SLICE, "--out", missing.with_suffix(".png"))
        assert result.exit_code == 2 and "does not exist" in result.stderr
    result = run("plot", "similarity", SLICE, "--problem", "89", "--out", SLICE)
    assert result.exit_code == 2 and "refusing to overwrite the input" in result.stderr


def test_written_files_are_named_on_stderr_unless_quiet(tmp_path):
    report, table = tmp_path / "u.json", tmp_path / "u.parquet"
    result = run("eval-ucc", SLICE, "--json", report, "--per-problem", table, "--max-pairs", "0")
    assert result.exit_code == 0, result.output
    assert f"wrote {report}, {table}\n" in result.stderr and "wrote" not in result.stdout
    result = run("eval-passk", SLICE, "--json", report, "-q")
    assert result.exit_code == 0 and "wrote" not in result.stderr
    result = run("eval-passk", SLICE)  # nothing written, nothing said
    assert result.exit_code == 0 and "wrote" not in result.stderr
    for kind, extra in (("passk", []), ("ucc", []), ("similarity", ["--problem", "89"])):
        out = tmp_path / f"{kind}.png"
        result = run("plot", kind, SLICE, *extra, "-o", out)
        assert result.exit_code == 0, result.output
        assert result.stderr.endswith(f"wrote {out}\n") and out.read_bytes()[:8] == PNG_MAGIC
        quiet = run("plot", kind, SLICE, *extra, "-o", out, "--quiet")
        assert quiet.exit_code == 0 and "wrote" not in quiet.stderr


def test_curve_legend_covers_no_point(monkeypatch, tmp_path):
    from ratioscope.figures.evaluation import metric_curves
    from ratioscope.render.png import evaluation as eval_plots

    figures = []
    monkeypatch.setattr(eval_plots, "save_figure", lambda figure, out: figures.append(figure))
    two = [write_flat(tmp_path / f"{m}.jsonl", None, counts) for m, counts in
           (("base", [1, 2, 3, 8]), ("grpo", [4, 6, 8, 8]))]  # fmt: skip
    for metric in ("pass_at_k", "ucc_at_k"):
        eval_plots.plot_curves(metric_curves(two, metric), tmp_path / "c.png")
    for figure in figures:
        figure.canvas.draw()
        (axes,) = figure.axes
        box = axes.get_legend().get_window_extent()
        for line in axes.get_lines():
            points = axes.transData.transform(line.get_xydata())
            assert not any(box.contains(x, y) for x, y in points), line.get_label()


def test_the_evaluation_package_exports_the_names_of_its_modules():
    import ratioscope.evaluation as evaluation
    from ratioscope.evaluation import evaluate, model

    homes = {"model": model, "evaluate": evaluate}
    moved = {
        "model": ["EvalReport", "EvalParams", "MetricBlock", "MethodResult", "ProblemRow"],
        "evaluate": ["evaluate_passk", "evaluate_ucc", "resolve_ks", "check_clustering_options"],
    }
    for home, names in moved.items():
        for name in names:
            assert getattr(evaluation, name) is getattr(homes[home], name), name
    assert all(hasattr(evaluation, name) for name in evaluation.__all__)
    with pytest.raises(AttributeError):
        evaluation.no_such_name  # noqa: B018


def _similarity_samples(path: Path) -> Path:
    """Problem 'p1': two methods with correct answers; 'p2': 'a' has none, 'b' has two."""
    rows = []
    for method, correct in (("a", [1, 1, 0, 1]), ("b", [1, 1, 1, 0])):
        for index, good in enumerate(correct):
            text = f"x = {index % 2} so the answer is 4" if good else "I do not know"
            rows.append({"problem_id": "p1", "response": text, "correct": good,
                         "method": method, "sample_index": index})  # fmt: skip
    for method, correct in (("a", [0, 0]), ("b", [1, 1])):
        for index, good in enumerate(correct):
            rows.append({"problem_id": "p2", "response": f"answer {index}", "correct": good,
                         "method": method, "sample_index": index})  # fmt: skip
    for index in range(2):
        rows.append({"problem_id": "p3", "response": "no", "correct": 0, "method": "a",
                     "sample_index": index})  # fmt: skip
        rows.append({"problem_id": "p3", "response": "no", "correct": 0, "method": "b",
                     "sample_index": index})  # fmt: skip
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    return path


def test_plot_similarity_shares_axes_outlines_clusters_and_resolves_the_top(tmp_path, monkeypatch):
    import matplotlib.pyplot as plt

    from ratioscope.render.png import evaluation as eval_plots

    figures = []
    monkeypatch.setattr(eval_plots, "save_figure", lambda figure, out: figures.append(figure))
    samples = _similarity_samples(tmp_path / "s.jsonl")
    result = run("plot", "similarity", samples, "--problem", "p1", "--out", tmp_path / "s.png")
    assert result.exit_code == 0, result.output
    (figure,) = figures
    left, right = figure.axes[:2]
    assert left.get_shared_x_axes().joined(left, right)
    assert left.get_shared_y_axes().joined(left, right)
    edges = [p.get_edgecolor() for axes in (left, right) for p in axes.patches]
    assert edges and all(edge[:3] == (1.0, 0.0, 0.0) for edge in edges)
    title = figure._suptitle.get_text()
    assert "red squares = clusters" in title and "white" not in title
    norm = left.images[0].norm
    # 0.8-1 spans half of the colour map, not one end of it
    assert norm(0.8) == pytest.approx(0.5) and norm(0.9) == pytest.approx(0.75)
    plt.close(figure)


def test_plot_similarity_skips_or_refuses_problems_without_correct_answers(tmp_path, monkeypatch):
    from ratioscope.render.png import evaluation as eval_plots

    figures = []
    monkeypatch.setattr(eval_plots, "save_figure", lambda figure, out: figures.append(figure))
    samples = _similarity_samples(tmp_path / "s.jsonl")
    out = tmp_path / "s.png"
    # one method without a correct answer: its panel is left out, with a note
    result = run("plot", "similarity", samples, "--problem", "p2", "--out", out)
    assert result.exit_code == 0, result.output
    (figure,) = figures
    assert len(figure.axes) == 2  # one heatmap and its colour bar
    assert "not drawn, no correct response: a (0/2)" in figure._suptitle.get_text()
    # no method with one: refused in one sentence, exit 2, no figure
    result = run("plot", "similarity", samples, "--problem", "p3", "--out", out)
    assert result.exit_code == 2
    assert "problem 'p3' has no correct response in 'a', 'b'" in result.stderr
    assert len(figures) == 1


# ---- tables: each quantity once; the "all datasets" rows say what they pool ----------


def _header(stdout: str, title: str) -> list[str]:
    """Column names of the table whose title starts with ``title``."""
    table = stdout[stdout.index(title) :]
    line = next(line for line in table.splitlines() if line.startswith("┃"))
    return [cell.strip() for cell in line.strip("┃").split("┃")]


def _row(stdout: str, title: str, first: str) -> list[str]:
    table = stdout[stdout.index(title) :]
    line = next(line for line in table.splitlines() if line.startswith(f"│ {first} "))
    return [cell.strip() for cell in line.strip("│").split("│")]


def test_passk_table_shows_pass1_once_with_its_se():
    result = run("eval-passk", SLICE, "-q", env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    assert _header(result.stdout, "Pass@k (%)") == [
        "method", "problems", "Pass@1 ± SE", "k=2", "k=4", "k=8",
    ]  # fmt: skip
    scores = slice_scores()
    accuracy = sum(sum(s) / len(s) for s in scores) / len(scores)
    a = [sum(s[j] for s in scores) / len(scores) for j in range(8)]
    se = math.sqrt(sum((x - sum(a) / 8) ** 2 for x in a) / 8) / math.sqrt(8)
    cells = _row(result.stdout, "Pass@k (%)", METHOD)
    assert cells[2] == f"{100 * accuracy:.2f} ± {100 * se:.2f}"
    want_k2 = sum(exact_pass(len(s), sum(s), 2) for s in scores) / len(scores)
    assert cells[3] == f"{100 * float(want_k2):.2f}"


def test_passk_table_without_sample_indices_has_a_dash_for_the_se(tmp_path):
    path = tmp_path / "noidx.jsonl"
    rows = [
        {"problem_id": p, "response": "r", "correct": i < p} for p in range(3) for i in range(4)
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    result = run("eval-passk", path, "-q", env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    # c = 0, 1, 2 of n = 4: mean accuracy (0 + 1/4 + 2/4) / 3 = 25 %
    assert _row(result.stdout, "Pass@k (%)", "noidx")[2] == "25.00 ± —"
    assert "no SE, the problems' sample indices differ" in " ".join(result.stdout.split())


def test_all_datasets_rows_are_labelled_and_explained(tmp_path):
    base = write_flat(tmp_path / "base.jsonl", None, [0, 0, 1, 6])
    trained = write_flat(tmp_path / "trained.jsonl", None, [2, 0, 3, 8])
    result = run("eval-passk", base, trained, "--k", "1,2", "-q", env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    text = " ".join(result.stdout.split())
    assert "all datasets = every problem of the method" in text and "never pooled" in text
    assert "│ all  " not in result.stdout  # the bare label "all" is gone
    # the "all datasets" row of 'trained' is its own four problems, not both files pooled
    cells = _row(result.stdout, "Pass@k (%)", "all datasets")
    assert cells[1] == "base" and cells[2] == "4"
    want = sum(float(exact_pass(8, c, 2)) for c in (0, 0, 1, 6)) / 4
    assert cells[4] == f"{100 * want:.2f}"
    without = run("eval-passk", SLICE, "-q", env={"COLUMNS": "200"})
    assert "all datasets" not in without.stdout  # no dataset, no group, no note


def test_ucc_table_drops_clusters_per_problem_only_when_it_is_ucc_at_n():
    full = run("eval-ucc", SLICE, "--max-pairs", "0", "-q", env={"COLUMNS": "200"})
    assert full.exit_code == 0, full.output
    assert _header(full.stdout, "UCC@k") == ["method", "k=1", "k=2", "k=4", "k=8", "UCR"]
    assert "k=8 = n: UCC@n is the mean number of correct clusters" in " ".join(full.stdout.split())
    part = run("eval-ucc", SLICE, "--k", "1,2", "--max-pairs", "0", "-q", env={"COLUMNS": "200"})
    assert _header(part.stdout, "UCC@k") == ["method", "k=1", "k=2", "clusters/problem", "UCR"]


# ---- curves: the same problems, and the k cut said on the figure ---------------------


def _curve_titles(monkeypatch, args) -> tuple[int, str]:
    import matplotlib.pyplot as plt

    from ratioscope.render.png import evaluation as eval_plots

    figures = []
    monkeypatch.setattr(eval_plots, "save_figure", lambda figure, out: figures.append(figure))
    result = run("plot", *args)
    if not figures:
        return result.exit_code, result.stderr
    (figure,) = figures
    text = figure._suptitle.get_text() + "\n" + figure.axes[0].get_title()
    plt.close(figure)
    return result.exit_code, " ".join(text.split())


def _slice_subset(path: Path, problems: int, samples: int) -> Path:
    """The first ``problems`` problems of the slice with their first ``samples`` samples."""
    rows = [json.loads(line) for line in SLICE.read_text(encoding="utf-8").splitlines()]
    with path.open("w", encoding="utf-8") as handle:
        for row in rows[:problems]:
            cut = {"idx": row["idx"], "response": row["response"][:samples],
                   "score": row["score"][:samples]}  # fmt: skip
            handle.write(json.dumps(cut) + "\n")
    return path


def test_plot_cuts_sample_methods_to_their_shared_problems(tmp_path, monkeypatch):
    from ratioscope.figures.evaluation import metric_curves

    short = _slice_subset(tmp_path / "short.jsonl", problems=4, samples=4)
    code, title = _curve_titles(monkeypatch, ["passk", SLICE, short, "-o", tmp_path / "p.png"])
    assert code == 0
    assert f"on the 4 problems all methods share (left out: {METHOD}: 2 of 6)" in title
    assert "k stops at 4, the fewest samples per problem" in title
    assert f"short: 4; {METHOD}: 8" in title
    # the slice's curve is its Pass@k on those 4 problems only, recomputed here
    scores = slice_scores()[:4]
    curves = metric_curves([SLICE, short], "pass_at_k").curves
    assert sorted(curves[METHOD]) == [1, 2, 4]
    for k in (1, 2, 4):
        want = sum(exact_pass(8, sum(s), k) for s in scores) / 4
        assert curves[METHOD][k] == pytest.approx(float(want), abs=1e-12)
    code, title = _curve_titles(monkeypatch, ["ucc", SLICE, "-o", tmp_path / "u.png"])
    assert code == 0 and "6 problems per method; 8 samples each" in title


def test_plot_refuses_curves_on_problems_it_cannot_match(tmp_path, monkeypatch):
    short = _slice_subset(tmp_path / "short.jsonl", problems=4, samples=8)
    report = tmp_path / "short.json"
    assert run("eval-ucc", short, "--json", report, "-q").exit_code == 0
    code, message = _curve_titles(monkeypatch, ["ucc", SLICE, report, "-o", tmp_path / "u.png"])
    assert code == 2
    assert (
        f"short (short.json) was measured on 4 problems and {METHOD} (samples) on 6 problems; "
        "a report is plotted as stored and cannot be cut"
    ) in message
    other = tmp_path / "other.jsonl"
    other.write_text(json.dumps({"problem_id": "zz", "response": "r", "correct": 1}) + "\n")
    code, message = _curve_titles(monkeypatch, ["passk", SLICE, other, "-o", tmp_path / "p.png"])
    assert code == 2 and "answer different problems and share none" in message
    assert not (tmp_path / "u.png").exists() and not (tmp_path / "p.png").exists()


def test_plot_of_reports_with_different_samples_per_problem_says_where_curves_end(
    tmp_path, monkeypatch
):
    four = _slice_subset(tmp_path / "four.jsonl", problems=6, samples=4)
    reports = []
    for source in (SLICE, four):
        reports.append(tmp_path / f"{source.stem}.json")
        assert (
            run("eval-ucc", source, "--json", reports[-1], "--max-pairs", "0", "-q").exit_code == 0
        )
    code, title = _curve_titles(monkeypatch, ["ucc", *reports, "-o", tmp_path / "u.png"])
    assert code == 0, title
    assert "6 problems per method" in title
    assert "each curve stops at the largest k" in title and f"four: 4; {METHOD}: 8" in title
