"""The walk-through of docs/architecture.md works: its accumulator streams, merges and
restores like the report's own sections, and its number is right."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np

import ratioscope
from ratioscope.analysis.pipeline import run_accumulators
from ratioscope.data.params import AnalysisParams
from ratioscope.io.loaders import LoadOptions

DOC = Path(__file__).resolve().parents[1] / "docs" / "architecture.md"
SAMPLE = Path(__file__).resolve().parents[1] / "sample_data" / "verl"


def _walk_through() -> dict:
    text = DOC.read_text()
    block = re.search(r"<!-- walk-through -->\n```python\n(.*?)```", text, re.S)
    assert block, "docs/architecture.md lost its walk-through"
    namespace: dict = {}
    exec(compile(block.group(1), str(DOC), "exec"), namespace)
    return namespace


def test_the_walk_through_metric_streams_merges_and_is_right():
    ns = _walk_through()
    cls = ns["NegativeShareAccumulator"]
    params = AnalysisParams()
    files = sorted(SAMPLE.glob("*.pt"))
    # independent reference: every valid log-ratio of every file, counted at once
    z = np.concatenate([b.log_ratio[b.mask].double().numpy() for b in map(ratioscope.load, files)])
    expected = float((z < 0).mean())

    run = run_accumulators(
        files, lambda: [cls(params)], params=params, load_options=LoadOptions(),
        chunk_elements=2_000,  # many chunks per file
    )  # fmt: skip
    (total,) = run.totals
    assert total.result() == expected
    assert total.fed == len(files)

    # per-file runs merged through their JSON state equal the whole
    merged = None
    for file in files:
        (acc,) = run_accumulators(
            [file], lambda: [cls(params)], params=params, load_options=LoadOptions()
        ).totals
        restored = cls.from_state(params, json.loads(json.dumps(acc.state())))
        if merged is None:
            merged = restored
        else:
            merged.merge(restored)
    assert merged is not None and merged.result() == expected
    assert merged.state() == total.state()
