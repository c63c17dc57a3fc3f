"""``ratioscope info`` on a file read chunk by chunk says what the whole read says."""

from __future__ import annotations

from dataclasses import asdict

import pytest
from test_io_streaming import SUFFIXES, WHOLE, write
from typer.testing import CliRunner

from ratioscope.analysis.dump_info import inspect_file
from ratioscope.cli import app
from ratioscope.io.loaders import LoadOptions
from ratioscope.io.streaming import open_stream

runner = CliRunner()


@pytest.mark.parametrize("suffix", SUFFIXES)
def test_streamed_info_equals_the_whole_read(tmp_path, suffix, monkeypatch):
    path = write(tmp_path, suffix)
    assert open_stream(path, LoadOptions(stream_bytes=0)) is not None, "the file must stream"
    # chunks of three rows: groups recur across chunks, one chunk has no valid token
    monkeypatch.setattr("ratioscope.analysis.dump_info.INFO_CHUNK_ELEMENTS", 27)
    streamed = inspect_file(path, LoadOptions(stream_bytes=0))
    whole = inspect_file(path, LoadOptions(stream_bytes=WHOLE))
    assert asdict(streamed) == asdict(whole)
    assert streamed.groups == 5 and streamed.tokens > 0


def test_info_command_streams_a_large_file(tmp_path, monkeypatch):
    path = write(tmp_path, ".safetensors")
    whole = runner.invoke(app, ["info", str(path)])
    monkeypatch.setenv("RATIOSCOPE_STREAM_BYTES", "0")
    calls = []
    original = inspect_file.__globals__["_inspect_stream"]

    def spy(stream, options):
        calls.append(stream.path)
        return original(stream, options)

    monkeypatch.setattr("ratioscope.analysis.dump_info._inspect_stream", spy)
    streamed = runner.invoke(app, ["info", str(path)])
    assert streamed.exit_code == 0 and whole.exit_code == 0, streamed.output
    assert calls == [path]
    assert streamed.output == whole.output


def test_info_on_a_truncated_streamed_file_is_one_sentence_and_exit_2(tmp_path, monkeypatch):
    path = write(tmp_path, ".npz")
    data = path.read_bytes()
    path.write_bytes(data[: len(data) - 40])
    monkeypatch.setenv("RATIOSCOPE_STREAM_BYTES", "0")
    result = runner.invoke(app, ["info", str(path)])
    assert result.exit_code == 2, result.output
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and path.name in lines[0]
