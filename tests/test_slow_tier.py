"""The slow tier's list names tests that exist (tests/slow_tests.txt, tests/conftest.py)."""

from __future__ import annotations

import re
from pathlib import Path

from conftest import slow_ids

ROOT = Path(__file__).resolve().parents[1]


def test_every_listed_test_exists():
    listed = slow_ids()
    assert len(listed) > 20
    stale = []
    for node in sorted(listed):
        path, _, name = node.partition("::")
        function = name.split("[")[0]
        source = ROOT / path
        if not source.is_file() or not re.search(
            rf"^\s*def {re.escape(function)}\(", source.read_text(), re.M
        ):
            stale.append(node)
    assert not stale, f"tests/slow_tests.txt names tests that do not exist: {stale}"


def test_the_default_run_leaves_the_slow_tier_out():
    text = (ROOT / "pyproject.toml").read_text()
    assert re.search(r"""addopts = ".*-m 'not slow'""", text)
