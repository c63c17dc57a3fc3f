"""Flat per-token columns (:class:`ratioscope.data.raw.Ragged`): rows, slices, joins and
padding against plain loops over the rows."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from ratioscope.data.raw import Ragged, check_bool_bytes, padded_dtype
from ratioscope.errors import CorruptFileError

ROWS = [
    torch.tensor([1.5, -2.0, 3.0]),
    torch.tensor([]),
    torch.tensor([4.0]),
    torch.tensor([5.0, 6.0]),
]


def _column() -> Ragged:
    return Ragged.from_rows(ROWS)


def test_rows_lengths_and_offsets() -> None:
    column = _column()
    assert column.offsets.tolist() == [0, 3, 3, 4, 6]
    assert column.lengths().tolist() == [3, 0, 1, 2] and column.longest() == 3
    assert len(column) == 4
    assert [row.tolist() for row in column] == [row.tolist() for row in ROWS]
    assert column[-1].tolist() == [5.0, 6.0]
    with pytest.raises(IndexError):
        column[4]


def test_slices_and_joins() -> None:
    column = _column()
    middle = column[1:3]
    assert [row.tolist() for row in middle] == [[], [4.0]]
    assert middle.offsets.tolist() == [0, 0, 1]
    assert column[3:1].lengths().tolist() == []
    joined = Ragged.joined([column[:2], column[2:]])
    assert torch.equal(joined.values, column.values)
    assert torch.equal(joined.offsets, column.offsets)


def test_padded_against_a_loop() -> None:
    column = _column()
    expected = torch.zeros(4, 5, dtype=torch.float64)
    for i, row in enumerate(ROWS):
        expected[i, : len(row)] = row
    assert torch.equal(column.padded(5), expected)
    assert column.padded(3, torch.long).tolist() == [[1, -2, 3], [0, 0, 0], [4, 0, 0], [5, 6, 0]]


def test_from_lengths_refuses_lengths_that_do_not_add_up() -> None:
    with pytest.raises(ValueError, match="rows of 5 values"):
        Ragged.from_lengths(torch.zeros(4), [2, 3])


def test_padded_dtype_as_the_rows_pad() -> None:
    ints, bools = torch.tensor([1, 2]), torch.tensor([True])
    assert padded_dtype([ints, bools]) == torch.long
    assert padded_dtype([bools, bools]) == torch.bool
    assert padded_dtype([ints, torch.tensor([0.5], dtype=torch.float32)]) == torch.float64
    assert padded_dtype([]) == torch.bool
    assert padded_dtype(Ragged.from_rows([ints])) == torch.long


def test_bad_bool_byte_named_by_row_and_token() -> None:
    values = torch.tensor([1, 0, 1, 1, 7, 1], dtype=torch.uint8).view(torch.bool)
    column = Ragged.from_lengths(values, [2, 0, 3, 1])
    with pytest.raises(CorruptFileError, match=r"byte 7 at index \[2, 2\]"):
        check_bool_bytes(Path("f.parquet"), {"mask": column})


def test_json_lines_rows_as_the_lines_hold_them(tmp_path: Path) -> None:
    """A JSON-lines file's per-token fields: each row as the line's numbers (null: NaN),
    in the dtype the whole file pads them to."""
    from ratioscope.io.readers import read_raw

    lines = [
        '{"mask": [1, 1, 0], "old_log_probs": [-1, -2.5, null]}',
        '{"mask": [], "old_log_probs": []}',
        '{"mask": [1], "old_log_probs": [-3]}',
    ]
    (tmp_path / "d.jsonl").write_text("\n".join(lines) + "\n")
    raw = read_raw(tmp_path / "d.jsonl")
    mask, old = raw.columns["mask"], raw.columns["old_log_probs"]
    assert isinstance(mask, Ragged) and mask.dtype == torch.long
    assert [row.tolist() for row in mask] == [[1, 1, 0], [], [1]]
    assert old.dtype == torch.float64
    rows = [row.tolist() for row in old]
    assert rows[0][:2] == [-1.0, -2.5] and rows[0][2] != rows[0][2] and rows[1:] == [[], [-3.0]]
