"""A command's outputs appear together or not at all; the other files it writes (the step
cache, a staged folder's step reports) are written at once."""

from __future__ import annotations

import pytest

from ratioscope.io.atomic import atomic_write_text, hold_together, outputs_together


def test_held_outputs_wait_for_the_end_and_other_files_do_not(tmp_path):
    report, figure, entry = tmp_path / "r.json", tmp_path / "f.png", tmp_path / "cache.json"
    with outputs_together():
        hold_together([report, figure, None])
        atomic_write_text(report, "{}")
        atomic_write_text(entry, "cached")  # not an output: there at once, read back later
        assert entry.read_text() == "cached"
        assert not report.exists()
        atomic_write_text(figure, "png")
    assert report.read_text() == "{}" and figure.read_text() == "png"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cache.json", "f.png", "r.json"]


def test_an_error_after_the_first_output_leaves_none(tmp_path):
    report, figure = tmp_path / "r.json", tmp_path / "f.png"
    with pytest.raises(RuntimeError), outputs_together():
        hold_together([report, figure])
        atomic_write_text(report, "{}")
        raise RuntimeError("the second output cannot be made")
    assert list(tmp_path.iterdir()) == []  # no output, no temporary file


def test_an_exit_the_command_chose_keeps_them(tmp_path):
    junit = tmp_path / "checks.xml"
    with pytest.raises(SystemExit), outputs_together(keep_on=(SystemExit,)):
        hold_together([junit])
        atomic_write_text(junit, "<testsuite/>")
        raise SystemExit(1)
    assert junit.read_text() == "<testsuite/>"


def test_outside_a_command_nothing_waits(tmp_path):
    report = tmp_path / "r.json"
    hold_together([report])  # no command: a no-op
    atomic_write_text(report, "{}")
    assert report.read_text() == "{}"
