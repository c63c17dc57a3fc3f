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


def run(*args: str):
    return runner.invoke(app, [str(a) for a in args])


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
