"""The merge cases of the hostile-input report: a tampered shard is refused naming the
field, before any number is merged."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from fuzz.harness import error_line, promise

pytestmark = pytest.mark.fuzz


def _tamper(document: dict[str, Any], path: list[Any], value: Any) -> None:
    target = document
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value(target[path[-1]]) if callable(value) else value


TAMPERED = [
    (["state", "covariance", "below"], lambda below: below[:-1], "state.covariance.below"),
    (["state", "ratios", "fed"], -12345, "state.ratios.fed"),
    (["state", "ratios", "fed"], None, "state.ratios.fed"),
    (["state", "ratios", "variants", "token", "states", "switch_sum"], -12345, "switch_sum"),
    (["state", "ratios", "variants", "token", "states", "switch_sum"], None, "switch_sum"),
    (["state", "ratios", "variants", "token", "states", "state_tokens"], [1, 2], "state_tokens"),
    (["state", "mismatch", "rollout", "sequences"], -12345, "state.mismatch.rollout.sequences"),
    (["state", "tepo", "advantage_tokens"], -12345, "state.tepo.advantage_tokens"),
    (["state", "tepo", "advantage_tokens"], None, "state.tepo.advantage_tokens"),
    (["state", "tepo", "advantage_tokens"], 1.5, "state.tepo.advantage_tokens"),
    (["state", "ratios", "variants", "token", "histogram", "count"], lambda c: c[:-1], "histogram"),
    (["state", "ratios", "variants", "token", "histogram", "moments", "count"], 1, "histogram"),
    (
        ["state", "ratios", "variants", "token", "histogram", "index"],
        lambda i: [10**6, *i[1:]],
        "histogram",
    ),
]


@pytest.mark.parametrize(
    ("path", "value", "named"), TAMPERED, ids=[t[2] + str(i) for i, t in enumerate(TAMPERED)]
)
def test_tampered_shard_refused(
    tmp_path: Path, report: Path, path: list[Any], value: Any, named: str
) -> None:
    shutil.copy(report, tmp_path / "a.json")
    document = json.loads(report.read_text())
    _tamper(document, path, value)
    (tmp_path / "b.json").write_text(json.dumps(document))
    line = error_line(promise(["merge", "a.json", "b.json", "--out", "m.json"], tmp_path))
    assert "b.json" in line and named in line, line
