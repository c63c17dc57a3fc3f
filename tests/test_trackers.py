"""``timeline --tensorboard/--mlflow/--wandb``: the per-step headlines, read back with
each tracker's own reader and compared with the timeline JSON of the same run."""

from __future__ import annotations

import json
import struct
import time
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from ratioscope.cli import app

runner = CliRunner()
SAMPLE = Path(__file__).resolve().parents[1] / "sample_data" / "verl"
DOCS = Path(__file__).resolve().parents[1] / "docs"


def _timeline(tmp_path: Path, *options: str) -> dict[int, dict[str, float]]:
    """Run the timeline with ``options``; {step: {ratioscope/<key>: value}} of its JSON."""
    out = tmp_path / "timeline.json"
    result = runner.invoke(app, ["timeline", str(SAMPLE), "--json", str(out), "-q", *options])
    assert result.exit_code == 0, result.output
    document = json.loads(out.read_text())
    expected = {
        step["step"]: {
            f"ratioscope/{key}": value for key, value in step["values"].items() if value is not None
        }
        for step in document["steps"]
    }
    assert len(expected) == 4 and all(len(values) >= 5 for values in expected.values())
    return expected


def test_tensorboard_event_file_holds_every_step_and_headline(tmp_path):
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    expected = _timeline(tmp_path, "--tensorboard", str(tmp_path / "tb"))
    events = EventAccumulator(str(tmp_path / "tb"))
    events.Reload()
    names = set().union(*expected.values())
    assert set(events.Tags()["scalars"]) == names
    for name in names:
        read = {event.step: event.value for event in events.Scalars(name)}
        want = {step: values[name] for step, values in expected.items() if name in values}
        assert read.keys() == want.keys()
        for step, value in want.items():  # TensorBoard stores float32
            assert read[step] == pytest.approx(value, rel=1e-6, abs=1e-30)


def test_mlflow_file_store_run_holds_the_metric_history(tmp_path, monkeypatch):
    pytest.importorskip("mlflow")
    from mlflow.tracking import MlflowClient

    monkeypatch.delenv("MLFLOW_EXPERIMENT_NAME", raising=False)
    store = tmp_path / "mlruns"
    expected = _timeline(tmp_path, "--mlflow", str(store))
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    client = MlflowClient(tracking_uri=store.resolve().as_uri())
    experiment = client.get_experiment_by_name("ratioscope")
    assert experiment is not None
    (run,) = client.search_runs([experiment.experiment_id])
    assert run.info.status == "FINISHED"
    names = set().union(*expected.values())
    assert set(run.data.metrics) == names
    for name in names:
        read = {m.step: m.value for m in client.get_metric_history(run.info.run_id, name)}
        assert read == {step: v[name] for step, v in expected.items() if name in v}


def _wandb_records(path: Path) -> list[bytes]:
    """The records of a W&B run file: a 7-byte header (":W&B", magic 0xBEE1, version),
    then blocks of 32 KiB holding records with a 7-byte header each (crc32, length,
    type: 1 full, 2 first, 3 middle, 4 last), LevelDB's log layout."""
    data = path.read_bytes()
    assert data[:4] == b":W&B"
    block, offset, records, pending = 32768, 7, [], b""
    while offset + 7 <= len(data):
        left = block - offset % block
        if left < 7:  # a block's tail too short for a header is padding
            offset += left
            continue
        _, length, kind = struct.unpack("<IHB", data[offset : offset + 7])
        if length == 0 and kind == 0:
            break
        payload = data[offset + 7 : offset + 7 + length]
        offset += 7 + length
        pending = payload if kind in (1, 2) else pending + payload
        if kind in (1, 4):
            records.append(pending)
    return records


def _finished_run(path: Path) -> list[Any]:
    """The records of a run file once its "exit" record is on disk: W&B's writer is a
    separate process that may still be flushing when ``finish()`` returns."""
    from wandb.proto import wandb_internal_pb2

    deadline = time.monotonic() + 30
    while True:
        records = []
        for data in _wandb_records(path):
            record = wandb_internal_pb2.Record()
            record.ParseFromString(data)
            records.append(record)
        if any(r.WhichOneof("record_type") == "exit" for r in records):
            return records
        assert time.monotonic() < deadline, f"{path} has no exit record after 30 s"
        time.sleep(0.2)


def test_wandb_offline_run_file_holds_the_history(tmp_path, monkeypatch):
    pytest.importorskip("wandb")
    for name in ("WANDB_MODE", "WANDB_PROJECT"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("WANDB_DIR", str(tmp_path / "w"))
    expected = _timeline(tmp_path, "--wandb")
    (path,) = (tmp_path / "w" / "wandb").glob("offline-run-*/run-*.wandb")
    read: dict[int, dict[str, float]] = {}
    for record in _finished_run(path):
        if record.WhichOneof("record_type") != "history":
            continue
        items = {i.key or "/".join(i.nested_key): i.value_json for i in record.history.item}
        step = int(items.pop("_step"))
        read[step] = {k: json.loads(v) for k, v in items.items() if k.startswith("ratioscope/")}
    assert read == expected


def test_a_missing_tracker_package_is_exit_2_before_any_work(tmp_path, monkeypatch):
    import builtins

    real_import = builtins.__import__

    def no_mlflow(name, *args, **kwargs):
        if name == "mlflow" or name.startswith("mlflow."):
            raise ImportError(name)
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_mlflow)
    monkeypatch.setattr("importlib.import_module", lambda name: no_mlflow(name))
    out = tmp_path / "t.json"
    result = runner.invoke(app, ["timeline", str(SAMPLE), "--mlflow", "x", "--json", str(out)])
    assert result.exit_code == 2
    assert "pip install 'ratioscope[trackers]'" in result.stderr
    assert not out.exists() and not (tmp_path / "x").exists()


def test_every_headline_has_its_tracker_name_in_the_docs():
    from ratioscope.views.timeline import HEADLINES, OBJECTIVE_HEADLINES

    text = (DOCS / "framework-metrics.md").read_text()
    for item in (*HEADLINES, *OBJECTIVE_HEADLINES):
        assert f"`ratioscope/{item.key}`" in text, item.key
