"""plot spectrum|windows|runlengths|ratios: from a dump and from a report JSON."""

from __future__ import annotations

import pytest
from dumps import make_reference, write_layout
from typer.testing import CliRunner

from ratioscope.cli import app

runner = CliRunner()
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def dump_and_report(tmp_path_factory):
    directory = tmp_path_factory.mktemp("plots")
    dump = write_layout(make_reference(seed=9, rows=8, width=160), "verl", directory)
    report = directory / "report.json"
    result = runner.invoke(app, ["analyze", str(dump), "--json", str(report), "-q"])
    assert result.exit_code == 0, result.stderr
    return dump, report


@pytest.mark.parametrize("kind", ["spectrum", "windows", "runlengths"])
@pytest.mark.parametrize("source", ["dump", "report"])
def test_kinds_draw_from_a_dump_and_from_a_report(tmp_path, dump_and_report, kind, source):
    dump, report = dump_and_report
    out = tmp_path / f"{kind}.png"
    path = dump if source == "dump" else report
    result = runner.invoke(app, ["plot", kind, str(path), "--out", str(out), "-q"])
    assert result.exit_code == 0, result.stderr
    assert out.read_bytes().startswith(PNG_MAGIC)


def test_svg_and_pdf_by_suffix(tmp_path, dump_and_report):
    _, report = dump_and_report
    for suffix, magic in ((".svg", b"<?xml"), (".pdf", b"%PDF")):
        out = tmp_path / f"spectrum{suffix}"
        result = runner.invoke(app, ["plot", "spectrum", str(report), "--out", str(out)])
        assert result.exit_code == 0, result.stderr
        assert out.read_bytes().startswith(magic)


def test_ratio_trace_of_one_sequence(tmp_path, dump_and_report):
    dump, report = dump_and_report
    out = tmp_path / "trace.png"
    result = runner.invoke(app, ["plot", "ratios", str(dump), "--sequence", "3", "--out", str(out)])
    assert result.exit_code == 0, result.stderr
    assert out.read_bytes().startswith(PNG_MAGIC)
    for args, fragment in (
        ([str(dump), "--sequence", "99"], "out of range: the input has 8 sequences"),
        ([str(report)], "needs a dump"),
    ):
        out = tmp_path / "bad.png"
        result = runner.invoke(app, ["plot", "ratios", *args, "--out", str(out)])
        assert result.exit_code == 2 and fragment in result.stderr
        assert not out.exists()


def test_bad_suffix_and_bad_report_write_nothing(tmp_path, dump_and_report):
    dump, _ = dump_and_report
    out = tmp_path / "figure.txt"
    result = runner.invoke(app, ["plot", "spectrum", str(dump), "--out", str(out)])
    assert result.exit_code == 2 and "suffix" in result.stderr
    not_a_report = tmp_path / "other.json"
    not_a_report.write_text('{"schema_version": 1, "by_method": {}}')
    out = tmp_path / "spectrum.png"
    result = runner.invoke(app, ["plot", "spectrum", str(not_a_report), "--out", str(out)])
    assert result.exit_code == 2 and "not an analyze report" in result.stderr
    assert not out.exists()
