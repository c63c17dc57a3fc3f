"""The capture's report mode hands each step's headline quantities to the trainer's own
logger: ``CaptureWriter.step_metrics`` and verl's ``end_verl_step``."""

from __future__ import annotations

import json

from test_capture import micro_batch

from ratioscope.capture import CaptureWriter, report_path
from ratioscope.capture.verl import end_verl_step


def test_step_metrics_are_the_values_of_the_written_report(tmp_path):
    writer = CaptureWriter(tmp_path, mode="report")
    writer.write(3, **micro_batch(1, rows=16))
    writer.write(3, **micro_batch(2, rows=16))
    assert writer.step_metrics(3) == {}  # not ended yet
    writer.end_step(3)
    metrics = writer.step_metrics(3)
    report = json.loads(report_path(tmp_path, 3, 0).read_text())
    assert metrics["ratioscope/mismatch.policy.k3"] == report["mismatch"]["policy"]["k3"]
    assert metrics["ratioscope/mismatch.policy.ess"] == report["mismatch"]["policy"]["ess"]
    assert (
        metrics["ratioscope/ratios.token.clip_fraction"]
        == (report["ratios"]["token"]["clip_fraction"])
    )
    share = report["trust_region"]["degenerate"] / report["trust_region"]["groups"]
    assert metrics["ratioscope/trust_region.degenerate_share"] == share
    assert all(name.startswith("ratioscope/") for name in metrics)


def test_tensors_mode_has_no_metrics(tmp_path):
    writer = CaptureWriter(tmp_path)
    writer.write(0, **micro_batch(1, rows=8))
    writer.end_step(0)
    assert writer.step_metrics(0) == {}


def test_end_verl_step_adds_the_headlines_to_verls_metrics_dict(tmp_path):
    writer = CaptureWriter(tmp_path, mode="report")
    writer.write(7, **micro_batch(4, rows=16))
    metrics = {"actor/pg_loss": [0.5, 0.25]}  # verl appends per micro-batch, then averages
    added = end_verl_step(writer, 7, metrics)
    report = json.loads(report_path(tmp_path, 7, 0).read_text())
    assert metrics["actor/pg_loss"] == [0.5, 0.25]
    assert metrics["ratioscope/mismatch.policy.k3"] == report["mismatch"]["policy"]["k3"]
    assert {k: v for k, v in metrics.items() if k.startswith("ratioscope/")} == added
