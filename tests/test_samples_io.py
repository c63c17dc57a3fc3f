"""Sample-file loading: layouts, field options, methods, and one clear error per bad input."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import pytest

from ratioscope.errors import (
    InputError,
    JsonLineError,
    SampleError,
    UnreadablePathError,
    UsageError,
)
from ratioscope.io.samples import SampleFields, load_samples, parse_correct

SLICE = Path(__file__).parent / "data" / "qwen25_math_cot_slice.jsonl"


def write_lines(path: Path, rows: list) -> Path:
    path.write_text(
        "".join((row if isinstance(row, str) else json.dumps(row)) + "\n" for row in rows),
        encoding="utf-8",
    )
    return path


def flat_rows(method: str = "grpo", problems=("p1", "p2"), n: int = 4, correct_every: int = 2):
    return [
        {
            "problem_id": pid,
            "response": f"answer {pid} {i}",
            "correct": i % correct_every == 0,
            "method": method,
            "sample_index": i,
            "dataset": "math",
        }
        for pid in problems
        for i in range(n)
    ]


def test_flat_layout(tmp_path):
    path = write_lines(tmp_path / "s.jsonl", flat_rows())
    loaded = load_samples(path)
    assert list(loaded.methods) == ["grpo"]
    method = loaded.methods["grpo"]
    assert [p.problem_id for p in method.problems] == ["p1", "p2"]
    first = method.problems[0]
    assert first.n == 4 and first.c == 2 and first.dataset == "math"
    assert first.correct.tolist() == [True, False, True, False]
    assert first.sample_index.tolist() == [0, 1, 2, 3]
    assert first.source == (str(path), 1)
    info = loaded.files[0]
    assert (info.layout, info.problems, info.samples, info.methods) == ("flat", 2, 8, ("grpo",))
    assert info.sha256 == hashlib.sha256(path.read_bytes()).hexdigest()
    assert info.fields == {"problem": "problem_id", "response": "response", "correct": "correct"}


def test_grouped_layout_on_the_real_qwen_slice():
    loaded = load_samples(SLICE)
    rows = [json.loads(line) for line in SLICE.read_text(encoding="utf-8").splitlines()]
    method = loaded.methods[SLICE.stem]  # no method field: the file stem names the method
    assert loaded.files[0].layout == "grouped"
    assert loaded.files[0].fields == {"problem": "idx", "response": "response", "correct": "score"}
    assert [p.problem_id for p in method.problems] == [row["idx"] for row in rows]
    for problem, row in zip(method.problems, rows, strict=True):
        assert problem.responses == tuple(row["response"])
        assert problem.correct.tolist() == row["score"]
        assert problem.sample_index.tolist() == list(range(len(row["score"])))


def test_samples_are_sorted_by_index_and_problems_keep_first_appearance(tmp_path):
    rows = [
        {"problem_id": 2, "response": "b1", "correct": 1, "sample_index": 1},
        {"problem_id": 1, "response": "a0", "correct": 0, "sample_index": 0},
        {"problem_id": 2, "response": "b0", "correct": 0, "sample_index": 0},
    ]
    loaded = load_samples(write_lines(tmp_path / "m.jsonl", rows))
    problems = loaded.methods["m"].problems
    assert [p.problem_id for p in problems] == [2, 1]
    assert problems[0].responses == ("b0", "b1")
    assert problems[0].correct.tolist() == [False, True]


def test_field_options_and_candidates(tmp_path):
    rows = [{"q": "x", "text": "t", "ok": True, "system": "a"}]
    path = write_lines(tmp_path / "odd.jsonl", rows)
    with pytest.raises(JsonLineError, match="missing field 'problem_id' or 'idx'"):
        load_samples(path)
    fields = SampleFields(problem="q", response="text", correct="ok", method="system")
    loaded = load_samples(path, fields)
    assert list(loaded.methods) == ["a"]
    assert loaded.methods["a"].problems[0].responses == ("t",)
    # a grouped file whose responses are under "code" (candidate) is read as well
    grouped = write_lines(tmp_path / "g.jsonl", [{"idx": 0, "code": ["a", "b"], "score": [1, 0]}])
    assert load_samples(grouped).methods["g"].problems[0].c == 1


def test_several_files_compare_methods_side_by_side(tmp_path):
    base = write_lines(tmp_path / "base.jsonl", [{**r, "method": None} for r in flat_rows()])
    trained = write_lines(tmp_path / "t.jsonl", flat_rows(method="grpo", correct_every=1))
    loaded = load_samples([base, trained])
    assert list(loaded.methods) == ["base", "grpo"]
    assert loaded.methods["grpo"].counts()[1].tolist() == [4, 4]
    assert loaded.methods["base"].counts()[1].tolist() == [2, 2]
    with pytest.raises(UsageError, match="no method 'nope'"):
        loaded.method("nope")


def test_one_method_spread_over_files_merges(tmp_path):
    rows = flat_rows(problems=("p1",), n=4)
    first = write_lines(tmp_path / "a.jsonl", rows[:2])
    second = write_lines(tmp_path / "b.jsonl", rows[2:])
    problem = load_samples([first, second]).methods["grpo"].problems[0]
    assert problem.n == 4 and problem.sample_index.tolist() == [0, 1, 2, 3]


@pytest.mark.parametrize(
    ("value", "expected"),
    [(True, True), (False, False), (1, True), (0, False), (1.0, True), (0.0, False),
     ("true", True), ("FALSE", False), (" True ", True)],
)  # fmt: skip
def test_accepted_correctness_values(value, expected):
    assert parse_correct(value) is expected


@pytest.mark.parametrize("value", [2, -1, 0.5, "yes", "1", None, [True], float("nan")])
def test_rejected_correctness_values(tmp_path, value):
    assert parse_correct(value) is None
    rows = [{"problem_id": 1, "response": "r", "correct": True}]
    rows.append({"problem_id": 1, "response": "r", "correct": value})
    path = write_lines(tmp_path / "s.jsonl", rows)
    with pytest.raises(SampleError, match=r"s\.jsonl: line 2: field 'correct' must be"):
        load_samples(path)


def error_of(tmp_path: Path, rows: list, name: str = "s.jsonl") -> InputError:
    path = write_lines(tmp_path / name, rows)
    with pytest.raises(InputError) as caught:
        load_samples(path)
    assert caught.value.exit_code == 2
    assert str(path) in str(caught.value)
    return caught.value


def test_unreadable_paths(tmp_path):
    with pytest.raises(UnreadablePathError, match="cannot read the samples file"):
        load_samples(tmp_path / "missing.jsonl")
    with pytest.raises(UnreadablePathError, match="is a directory"):
        load_samples(tmp_path)


def test_malformed_lines(tmp_path):
    good = {"problem_id": 1, "response": "r", "correct": True}
    error = error_of(tmp_path, [good, "", '{"problem_id": 1, "response": '])
    assert isinstance(error, JsonLineError) and error.line == 3
    assert "not valid JSON" in str(error)
    error = error_of(tmp_path, [good, "[1, 2]"])
    assert isinstance(error, JsonLineError) and "expected a JSON object, got a list" in str(error)
    (tmp_path / "bin.jsonl").write_bytes(
        b'{"problem_id": 1, "response": "a", "correct": 1}\n\xff\xfe\n'
    )
    with pytest.raises(JsonLineError, match="line 2: not valid UTF-8"):
        load_samples(tmp_path / "bin.jsonl")


def test_missing_fields_name_the_line_and_what_was_found(tmp_path):
    good = {"problem_id": 1, "response": "r", "correct": True}
    error = error_of(tmp_path, [good, {"problem_id": 1, "response": "r"}])
    assert isinstance(error, JsonLineError)
    assert "line 2: missing field 'correct' (fields found: problem_id, response)" in str(error)


def test_empty_file_and_empty_responses(tmp_path):
    assert "contains no samples" in str(error_of(tmp_path, ["", "  "]))
    error = error_of(tmp_path, [{"idx": 1, "response": [], "score": []}])
    assert "line 1: field 'response' is an empty list" in str(error)
    # an empty response is an error (usually a broken export) unless explicitly allowed
    rows = [{"problem_id": 1, "response": "a", "correct": 1}, {"problem_id": 1, "response": " "}]
    rows[1]["correct"] = 0
    error = error_of(tmp_path, rows)
    assert "line 2: field 'response' is an empty response" in str(error)
    assert "set `fields.allow_empty`" in str(error)
    path = write_lines(tmp_path / "e.jsonl", [{"problem_id": 1, "response": "", "correct": 0}])
    kept = load_samples(path, SampleFields(allow_empty=True))
    assert kept.methods["e"].problems[0].responses == ("",)


def test_wrong_value_types(tmp_path):
    error = error_of(tmp_path, [{"problem_id": 1, "response": 5, "correct": True}])
    assert "field 'response' is a number" in str(error)
    error = error_of(tmp_path, [{"problem_id": [1], "response": "r", "correct": True}])
    assert "field 'problem_id' must be a string or an integer" in str(error)
    error = error_of(tmp_path, [{"problem_id": 1, "response": "r", "correct": 1, "method": 3}])
    assert "field 'method' must be a non-empty string" in str(error)
    rows = [{"idx": 1, "response": ["a", 2], "score": [1, 0]}]
    assert "field 'response' must be a string, got a number" in str(error_of(tmp_path, rows))


def test_duplicated_sample_index(tmp_path):
    rows = flat_rows(problems=("p1",), n=3)
    rows.append({**rows[1], "response": "again"})
    error = error_of(tmp_path, rows)
    assert "line 4: sample index 1 of problem 'p1' repeats the one at line 2" in str(error)


def test_sample_index_on_some_samples_only(tmp_path):
    rows = flat_rows(problems=("p1",), n=2)
    rows.append({"problem_id": "p1", "response": "x", "correct": True, "method": "grpo"})
    assert "line 3: this sample of problem 'p1' has no sample index" in str(
        error_of(tmp_path, rows)
    )


def test_grouped_file_errors(tmp_path):
    rows = [{"idx": 1, "response": ["a", "b"], "score": [True]}]
    assert "'score' has 1 values but 'response' has 2" in str(error_of(tmp_path, rows))
    rows = [
        {"idx": 1, "response": ["a"], "score": [1]},
        {"idx": 1, "response": ["b"], "score": [0]},
    ]
    error = error_of(tmp_path, rows)
    assert "line 2: problem 1 was already given at" in str(error) and "line 1" in str(error)
    rows = [{"idx": 1, "response": ["a"], "score": [1]}, {"idx": 2, "response": "b", "score": 0}]
    assert "line 2: field 'response' is a string" in str(error_of(tmp_path, rows))
    rows = [{"idx": 1, "response": ["a"], "score": [1], "sample_index": [0, 1]}]
    assert "'sample_index' must be a list as long as" in str(error_of(tmp_path, rows))


def test_layout_switch_inside_a_flat_file(tmp_path):
    rows = [
        {"problem_id": 1, "response": "a", "correct": 1},
        {"problem_id": 2, "response": ["a"], "correct": [1]},
    ]
    assert "line 2: field 'response' is a list, but the first line" in str(error_of(tmp_path, rows))


def test_undetectable_layout(tmp_path):
    rows = [{"problem_id": 1, "response": {"text": "a"}, "correct": 1}]
    assert "expected a string (flat layout" in str(error_of(tmp_path, rows))


def test_conflicting_dataset(tmp_path):
    rows = flat_rows(problems=("p1",), n=2)
    rows[1]["dataset"] = "aime"
    assert "problem 'p1' has dataset 'aime' here but 'math'" in str(error_of(tmp_path, rows))


def test_counts_are_int_arrays(tmp_path):
    path = write_lines(tmp_path / "s.jsonl", flat_rows(n=3, correct_every=3))
    n, c = load_samples(path).methods["grpo"].counts()
    assert n.dtype == np.int64 and n.tolist() == [3, 3] and c.tolist() == [1, 1]


def test_named_optional_fields_must_be_on_some_line(tmp_path):
    rows = flat_rows()
    path = write_lines(tmp_path / "s.jsonl", rows)
    for fields, message in (
        (SampleFields(method="who"), "no line has the method field 'who' named by --method-field"),
        (
            SampleFields(dataset="lvl"),
            "no line has the dataset field 'lvl' named by --dataset-field",
        ),
    ):
        with pytest.raises(SampleError, match=message) as caught:
            load_samples(path, fields)
        assert str(path) in str(caught.value) and caught.value.exit_code == 2
    # present on a later line only: accepted, and lines without it take the file stem
    rows[-1]["who"] = "other"
    loaded = load_samples(write_lines(tmp_path / "late.jsonl", rows), SampleFields(method="who"))
    assert sorted(loaded.methods) == ["late", "other"]
    assert loaded.methods["other"].samples == 1


def test_a_mistyped_method_field_is_named_even_when_methods_collide_mid_file(tmp_path):
    # two methods in one grouped file: with the wrong method field both fall back to the
    # file stem and problem 1 repeats on line 2, before the end of the file is reached
    rows = [
        {"idx": 1, "response": ["a"], "score": [1], "system": "base"},
        {"idx": 1, "response": ["b"], "score": [0], "system": "grpo"},
    ]
    path = write_lines(tmp_path / "g.jsonl", rows)
    assert sorted(load_samples(path, SampleFields(method="system")).methods) == ["base", "grpo"]
    with pytest.raises(SampleError, match="no line has the method field 'model'"):
        load_samples(path, SampleFields(method="model"))
    # the collision itself is still reported when the named field does exist
    rows[1]["system"] = "base"
    with pytest.raises(SampleError, match="problem 1 was already given"):
        load_samples(write_lines(tmp_path / "g2.jsonl", rows), SampleFields(method="system"))


def test_default_method_and_dataset_fields_are_optional(tmp_path):
    path = write_lines(tmp_path / "plain.jsonl", [{"problem_id": 1, "response": "r", "correct": 1}])
    loaded = load_samples(path)
    assert list(loaded.methods) == ["plain"]
    assert loaded.methods["plain"].problems[0].dataset is None


def test_files_that_are_not_samples_say_what_they_are(tmp_path):
    report = {"schema_version": 1, "tool": {"name": "ratioscope"}, "by_method": {}}
    pretty = tmp_path / "r.json"
    pretty.write_text(json.dumps(report, indent=2))
    one_line = tmp_path / "r.jsonl"
    one_line.write_text(json.dumps(report) + "\n")
    for path in (pretty, one_line):
        with pytest.raises(SampleError, match="this is a ratioscope report, not a samples"):
            load_samples(path)
    other = tmp_path / "o.json"
    other.write_text('[\n  {"problem_id": 1}\n]\n')
    with pytest.raises(SampleError, match=r"not a JSON-lines samples file \(one JSON document"):
        load_samples(other)
    binary = tmp_path / "b.pt"
    binary.write_bytes(b"\x80\x02}q\x00(X\x04\x00\x00\x00mask\xff\n")
    with pytest.raises(SampleError, match=r"b\.pt: not a JSON-lines samples file \(binary"):
        load_samples(binary)
    # a broken sample line keeps its line number, on the first line too
    broken = write_lines(tmp_path / "x.jsonl", ['{"problem_id": 1, "response": '])
    with pytest.raises(JsonLineError, match="line 1: not valid JSON"):
        load_samples(broken)
