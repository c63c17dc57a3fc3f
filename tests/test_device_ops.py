"""benchmarks/device_ops.py counts what ``analyze --device cuda`` asks of a GPU, on the
device emulated on the CPU: its table adds up, and its bound is the stated formula."""

from __future__ import annotations

import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

import device_ops  # noqa: E402
from make_synthetic import make_synthetic, write_synthetic  # noqa: E402


def test_the_table_adds_up_and_the_bound_is_the_formula(tmp_path, capsys):
    path = write_synthetic(make_synthetic(32, 256, extras=("all",)), tmp_path / "d.safetensors")
    device_ops.main([str(path), "--top", "5", "--launch-us", "4", "--bandwidth", "2e12"])
    out = capsys.readouterr().out
    rows = {}
    for line in out.splitlines():
        parts = line.split()
        if len(parts) == 6 and all(re.fullmatch(r"[\d,]+", p) for p in parts[1:]):
            rows[parts[0]] = [int(p.replace(",", "")) for p in parts[1:]]
    total = rows.pop("total")
    assert "sections.ratios" in rows and "sections.summaries" in rows
    assert total == [sum(row[i] for row in rows.values()) for i in range(5)]
    assert total[0] > 100 and total[2] > 0 and total[3] > 0  # launches, reads, waits
    tensor_bytes, _ = device_ops.per_token_bytes(path)
    floor = tensor_bytes / 2e12
    share = floor / (floor + total[0] * 4e-6)  # the bound, written out
    assert f"so at most {share:.1%} of the bandwidth" in out
    assert len(re.findall(r"^\s+[\d,]+  \S+ / \S+$", out, flags=re.M)) == 5
