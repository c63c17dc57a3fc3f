"""One file streamed chunk by chunk gives the report of the file read whole.

Every file type that streams (docs/scale.md, "One large file") is written with string
group labels that recur across chunk boundaries, left padding (or untrained leading
tokens), rows without a valid token and non-finite values on masked tokens, then analysed
twice with a chunk of a few rows: streamed (``stream_bytes=0``) and read whole. The
reports (every section, the state, the warnings, the inputs) and the per-sequence tables
must be identical, not close.
"""

from __future__ import annotations

import json
import struct
from pathlib import Path

import numpy as np
import polars as pl
import pytest
import torch
from typer.testing import CliRunner

import ratioscope
from ratioscope.cli import app
from ratioscope.errors import InputError, JsonLineError, NonFiniteError
from ratioscope.io.loaders import LoadOptions
from ratioscope.io.streaming import open_stream

ROWS, WIDTH = 23, 9
CHUNK = 3 * WIDTH  # three rows a chunk
WHOLE = 1 << 60  # stream_bytes that no file reaches
runner = CliRunner()


def _data(seed: int = 0) -> dict[str, np.ndarray]:
    """[ROWS, WIDTH] right-aligned data; rows 5-7 empty; labels recurring across chunks."""
    rng = np.random.default_rng(seed)
    lengths = rng.integers(1, WIDTH + 1, size=ROWS)
    lengths[0] = WIDTH
    lengths[5:8] = 0  # a whole chunk without a valid token
    mask = np.arange(WIDTH)[None, :] < lengths[:, None]
    old = -rng.gamma(1.0, 0.8, size=(ROWS, WIDTH)).astype(np.float32)
    new = (old + rng.normal(0, 0.2, size=(ROWS, WIDTH))).astype(np.float32)
    old[~mask] = np.nan  # garbage where nothing is valid
    rewards = rng.integers(0, 2, size=ROWS).astype(np.float64)
    labels = np.array([f"uid-{(i * 7) % 5}" for i in range(ROWS)])  # recur, unsorted
    advantages = rng.normal(size=ROWS).astype(np.float32)
    # two reward functions (TRL captures write them so): one gave no value (NaN) to rows
    # 2 and 11, the other is 0/1 integers
    accuracy = rng.random(ROWS)
    accuracy[[2, 11]] = np.nan
    form = rng.integers(0, 2, size=ROWS)
    return {
        "mask": mask,
        "old_log_probs": old,
        "log_probs": new,
        "advantages": np.repeat(advantages[:, None], WIDTH, axis=1) * mask,
        "rewards": rewards,
        "group": labels,
        "reward:accuracy": accuracy,
        "reward:format": form,
    }


def _left(values: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """Rows moved to the right end (left padding)."""
    out = np.zeros_like(values)
    for i, row in enumerate(mask):
        n = int(row.sum())
        if n:
            out[i, WIDTH - n :] = values[i, :n]
    return out


def write(tmp_path: Path, suffix: str, seed: int = 0) -> Path:
    data = _data(seed)
    mask = data["mask"]
    path = tmp_path / f"dump{suffix}"
    dense = {k: v for k, v in data.items() if k != "group"}
    if suffix in (".safetensors", ".pt", ".npz"):
        # every other row left-padded
        for key in ("mask", "old_log_probs", "log_probs", "advantages"):
            shifted = _left(dense[key], mask)
            dense[key] = np.where((np.arange(ROWS) % 2 == 1)[:, None], shifted, dense[key])
    if suffix == ".safetensors":
        from safetensors.torch import save_file

        tensors = {k: torch.from_numpy(np.ascontiguousarray(v)) for k, v in dense.items()}
        ids = [(i * 7) % 5 + 10 for i in range(ROWS)]  # ints, not in order
        tensors["group"] = torch.tensor(ids)
        save_file(tensors, str(path))
    elif suffix == ".pt":
        saved = {k: torch.from_numpy(np.ascontiguousarray(v)) for k, v in dense.items()}
        torch.save({**saved, "group": data["group"].tolist()}, path)
    elif suffix == ".npz":
        np.savez_compressed(path, **dense, group=data["group"])
    elif suffix in (".parquet", ".jsonl"):
        records = []
        for i in range(ROWS):
            n = int(mask[i].sum())
            lead = i % 3  # untrained leading tokens: shifted away at load
            records.append(
                {
                    "mask": [0] * lead + [1] * n,
                    "old_log_probs": [0.0] * lead + data["old_log_probs"][i, :n].tolist(),
                    "log_probs": [0.0] * lead + data["log_probs"][i, :n].tolist(),
                    "advantages": [0.0] * lead + data["advantages"][i, :n].tolist(),
                    "rewards": int(data["rewards"][i]) if i != 5 else None,
                    "group": str(data["group"][i]),
                    "reward:accuracy": None
                    if np.isnan(data["reward:accuracy"][i])
                    else float(data["reward:accuracy"][i]),
                    "reward:format": int(data["reward:format"][i]),
                }
            )
        if suffix == ".jsonl":
            with path.open("w") as handle:
                for index, record in enumerate(records):
                    handle.write(json.dumps(record) + "\n")
                    if index == 10:
                        handle.write("\n")  # blank lines are skipped
        else:
            pl.DataFrame(records).write_parquet(path, row_group_size=4)
    return path


def both(path: Path, **options) -> tuple[ratioscope.Report, ratioscope.Report]:
    common = {"chunk_elements": CHUNK, "per_sequence": True, **options}
    streamed = ratioscope.analyze(path, stream_bytes=0, **common)
    whole = ratioscope.analyze(path, stream_bytes=WHOLE, **common)
    return streamed, whole


def document(report: ratioscope.Report) -> dict:
    out = report.to_dict()
    out.pop("tool")
    return out


SUFFIXES = [".safetensors", ".pt", ".npz", ".parquet", ".jsonl"]


@pytest.mark.parametrize("suffix", SUFFIXES)
def test_streamed_report_equals_the_whole_read(tmp_path, suffix):
    path = write(tmp_path, suffix)
    assert open_stream(path, LoadOptions(stream_bytes=0)) is not None, "the file must stream"
    streamed, whole = both(path)
    assert document(streamed) == document(whole)
    assert streamed.covariance is not None and streamed.trust_region is not None
    assert streamed.sequences.frame().equals(whole.sequences.frame())
    groups = streamed.sequences.frame()["group"].to_list()
    assert len(set(groups)) == 5  # labels recurring across chunks kept as one group each
    if suffix != ".safetensors":
        assert groups[0] == "uid-0" and groups[1] == "uid-2"
    # each reward function's values over the rows it scored (NaN: no value), computed here
    data = _data()
    functions = streamed.vitals.reward.per_function
    assert list(functions) == ["accuracy", "format"]
    for name, values in (("accuracy", data["reward:accuracy"]), ("format", data["reward:format"])):
        scored = values[~np.isnan(values.astype(float))].astype(float)
        assert functions[name].sequences == scored.size
        assert functions[name].mean == pytest.approx(scored.mean(), rel=1e-12)
        assert functions[name].std == pytest.approx(scored.std(), rel=1e-12)


@pytest.mark.parametrize("suffix", [".safetensors", ".jsonl"])
def test_masked_nonfinite_values_are_counted_over_the_whole_file(tmp_path, suffix):
    data_path = write(tmp_path, suffix)
    if suffix == ".safetensors":
        from safetensors.torch import load_file, save_file

        tensors = load_file(str(data_path))
        tensors["log_probs"][0, 1] = float("nan")
        tensors["log_probs"][20, 0] = float("inf")
        tensors["rewards"][13] = float("nan")
        save_file(tensors, str(data_path))
    else:
        lines = data_path.read_text().splitlines()
        record = json.loads(lines[19])
        record["log_probs"][-1] = None
        lines[19] = json.dumps(record)
        data_path.write_text("\n".join(lines) + "\n")
    streamed, whole = both(data_path, nonfinite="mask")
    assert document(streamed) == document(whole)
    assert any("masked" in w for w in streamed.warnings)


def _same_columns(left: dict, right: dict) -> None:
    """Columns equal value for value (NaN where NaN), dtypes included."""
    assert list(left) == list(right)
    for key, value in left.items():
        other = right[key]
        if isinstance(value, torch.Tensor):
            torch.testing.assert_close(value, other, rtol=0, atol=0, equal_nan=True)
        elif value and isinstance(value[0], torch.Tensor):
            assert len(value) == len(other)
            for row, row_other in zip(value, other, strict=True):
                torch.testing.assert_close(row, row_other, rtol=0, atol=0, equal_nan=True)
        else:
            assert value == other, key


def test_json_lines_converted_a_few_at_a_time_equal_the_range_at_once(tmp_path, monkeypatch):
    from ratioscope.io import chunks

    path = write(tmp_path, ".jsonl")  # a blank line, a missing reward, string labels
    source = chunks.JsonLinesSource(path)
    assert source.bind({k: k for k in source.header.columns})
    for start, stop in [(0, ROWS), (4, 17), (9, 10)]:
        monkeypatch.setattr(chunks, "JSON_LINES_AT_ONCE", ROWS)  # the range in one go
        at_once = source.read(start, stop)
        monkeypatch.setattr(chunks, "JSON_LINES_AT_ONCE", 2)
        _same_columns(source.read(start, stop), at_once)
    source.close()
    # and a whole analysis over such reads
    streamed, whole = both(path)
    assert document(streamed) == document(whole)
    assert streamed.sequences.frame().equals(whole.sequences.frame())


@pytest.mark.parametrize("at_once", [16, 2])
def test_json_line_errors_name_the_line_of_the_file(tmp_path, monkeypatch, at_once):
    from ratioscope.io import chunks

    monkeypatch.setattr(chunks, "JSON_LINES_AT_ONCE", at_once)
    path = write(tmp_path, ".jsonl")
    lines = path.read_text().splitlines()
    lines[17] = lines[17].replace('"log_probs": [', '"log_probs": [0.5, "x", ', 1)
    path.write_text("\n".join(lines) + "\n")
    messages = []
    for stream_bytes in (0, WHOLE):
        with pytest.raises(JsonLineError) as caught:
            ratioscope.analyze(path, chunk_elements=CHUNK, stream_bytes=stream_bytes)
        messages.append(str(caught.value))
    assert messages[0] == messages[1]
    assert "line 18" in messages[0] and str(path) in messages[0]


def test_errors_in_a_later_chunk_name_the_row_of_the_file(tmp_path):
    from safetensors.torch import load_file, save_file

    path = write(tmp_path, ".safetensors")
    tensors = load_file(str(path))
    tensors["log_probs"][16, 0] = float("nan")
    save_file(tensors, str(path))
    messages = []
    for stream_bytes in (0, WHOLE):
        with pytest.raises(NonFiniteError) as caught:
            ratioscope.analyze(path, chunk_elements=CHUNK, stream_bytes=stream_bytes)
        messages.append(str(caught.value))
    assert messages[0] == messages[1]
    assert "(row, column) = (16, 0)" in messages[0]


def test_a_file_without_any_valid_token_is_refused(tmp_path):
    from safetensors.torch import save_file

    path = tmp_path / "empty.safetensors"
    save_file({"mask": torch.zeros(7, 4), "log_ratio": torch.zeros(7, 4)}, str(path))
    with pytest.raises(InputError, match="no valid token"):
        ratioscope.analyze(path, chunk_elements=8, stream_bytes=0)


def _truncate(path: Path) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: len(data) - 40])


@pytest.mark.parametrize("suffix", SUFFIXES)
def test_truncated_file_is_one_sentence_and_exit_2(tmp_path, suffix, monkeypatch):
    path = write(tmp_path, suffix)
    _truncate(path)
    out = tmp_path / "report.json"
    monkeypatch.setenv("RATIOSCOPE_STREAM_BYTES", "0")
    result = runner.invoke(app, ["analyze", str(path), "--json", str(out), "-q"])
    assert result.exit_code == 2, result.output
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and path.name in lines[0], result.stderr
    assert "Traceback" not in result.stderr
    assert not out.exists()


def test_safetensors_header_beyond_the_file_is_named(tmp_path):
    path = tmp_path / "bad.safetensors"
    header = json.dumps({"mask": {"dtype": "BOOL", "shape": [4, 4], "data_offsets": [0, 16]}})
    path.write_bytes(struct.pack("<Q", len(header)) + header.encode() + b"\x01" * 8)
    with pytest.raises(InputError, match="truncated: tensor 'mask' ends at byte"):
        ratioscope.analyze(path, stream_bytes=0)


def test_stream_threshold_from_the_environment(tmp_path, monkeypatch):
    path = write(tmp_path, ".safetensors")
    monkeypatch.setenv("RATIOSCOPE_STREAM_BYTES", "0")
    assert open_stream(path, LoadOptions()) is not None
    monkeypatch.setenv("RATIOSCOPE_STREAM_BYTES", str(WHOLE))
    assert open_stream(path, LoadOptions()) is None


@pytest.mark.parametrize("suffix", SUFFIXES)
def test_convert_writes_a_safetensors_file_that_analyses_the_same(tmp_path, suffix):
    path = write(tmp_path, suffix)
    target = tmp_path / "converted.safetensors"
    result = runner.invoke(app, ["convert", str(path), str(target), "-q"])
    assert result.exit_code == 0, result.output
    original = document(ratioscope.analyze(path, chunk_elements=CHUNK, stream_bytes=0))
    converted = document(ratioscope.analyze(target, chunk_elements=CHUNK, stream_bytes=0))
    for report in (original, converted):
        report.pop("inputs")
    # the same numbers; warnings and file lists name the new file
    assert json.loads(json.dumps(converted).replace(str(target), str(path))) == original


def test_convert_refuses_a_truncated_file_and_writes_nothing(tmp_path):
    path = write(tmp_path, ".npz")
    _truncate(path)
    target = tmp_path / "converted.safetensors"
    result = runner.invoke(app, ["convert", str(path), str(target)])
    assert result.exit_code == 2 and "dump.npz" in result.stderr
    assert not target.exists()


def test_sections_fed_whole_files_alone(tmp_path):
    path = write(tmp_path, ".jsonl")
    streamed, whole = both(path, sections=["trust_region"])
    assert streamed.trust_region is not None
    assert document(streamed) == document(whole)


@pytest.mark.parametrize("suffix", [".safetensors", ".jsonl"])
def test_per_sequence_columns_of_chunks_equal_one_chunk(tmp_path, suffix):
    """Each chunk's per-sequence columns land in the file's rows: a stream of small
    chunks gives the table of a single chunk holding the whole file (no gathering)."""
    path = write(tmp_path, suffix)
    chunked = ratioscope.analyze(path, stream_bytes=0, chunk_elements=CHUNK, per_sequence=True)
    single = ratioscope.analyze(path, stream_bytes=WHOLE, chunk_elements=1 << 40, per_sequence=True)
    a, b = chunked.sequences.frame(), single.sequences.frame()
    assert a.columns == b.columns and a.height == b.height
    assert a.height > 6  # three rows a chunk: several chunks
    for name in a.columns:
        if a[name].dtype.is_numeric():
            np.testing.assert_allclose(
                a[name].to_numpy(), b[name].to_numpy(), rtol=1e-9, atol=1e-12
            )
        else:
            assert a[name].to_list() == b[name].to_list(), name


def test_row_columns_write_each_chunk_at_its_rows():
    from ratioscope.analysis.pipeline import _RowColumns

    generator = torch.Generator().manual_seed(3)
    whole = torch.randn(23, 2, generator=generator)
    columns = _RowColumns(23, first_row=100)
    for start in (10, 0, 17):  # any order: each chunk names its rows
        stop = {0: 10, 10: 17, 17: 23}[start]
        columns.add({"x": whole[start:stop], "none": None}, 100 + start)
    assert set(columns.tensors()) == {"x"}
    assert torch.equal(columns.tensors()["x"], whole)
    with pytest.raises(ValueError, match="does not fit"):
        columns.add({"x": whole[:5]}, 120)  # past the last row
    with pytest.raises(ValueError, match="does not fit"):
        columns.add({"x": whole[:5, :1]}, 100)  # another trailing shape


def test_row_columns_leave_out_a_column_some_chunks_lacked():
    from ratioscope.analysis.pipeline import _RowColumns

    columns = _RowColumns(6)
    columns.add({"x": torch.zeros(3), "y": torch.ones(3)}, 0)
    columns.add({"x": torch.ones(3)}, 3)  # "y" not returned for this chunk
    assert set(columns.tensors()) == {"x"} and columns.get("y") is None
    assert torch.equal(columns.get("x"), torch.tensor([0.0, 0, 0, 1, 1, 1]))
