"""Shared pytest fixtures (helpers live in tests/dumps.py, importable as ``dumps``), and
the slow tier: the tests listed in tests/slow_tests.txt get the ``slow`` marker, which the
default run (pyproject.toml: ``-m 'not slow'``) leaves out."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch
from dumps import Reference, make_reference

# Triton's interpreter runs the GPU kernels' tests on a machine without a GPU
# (tests/test_triton_kernels.py). It is chosen when Triton is first imported, which any
# test (or a package it loads) may do, so it is switched on here, before them all; on a
# GPU the kernels are compiled, and the cuda tests check them there.
if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

SLOW_LIST = Path(__file__).with_name("slow_tests.txt")


def slow_ids() -> set[str]:
    """The node ids of tests/slow_tests.txt (comments and blank lines left out)."""
    lines = SLOW_LIST.read_text().splitlines()
    return {line.strip() for line in lines if line.strip() and not line.startswith("#")}


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    listed = slow_ids()
    for item in items:
        if item.nodeid in listed or item.nodeid.split("[")[0] in listed:
            item.add_marker(pytest.mark.slow)


@pytest.fixture
def reference() -> Reference:
    return make_reference()


@pytest.fixture
def two_threads():
    """torch (and so the compiled loops' parts) on two threads for the test, restored
    after."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(2)
    yield
    torch.set_num_threads(before)


@pytest.fixture(autouse=True)
def _own_cache_home(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch):
    """Every test its own cache home: the commands' step cache (on by default) neither
    reads what another test left nor writes to the user's."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path_factory.mktemp("cache-home")))


@pytest.fixture
def counted(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The steps ``timeline``/``watch`` analyse (not read from the step cache), in order."""
    import ratioscope.views.step_analysis as step_analysis

    calls: list[int] = []
    original = step_analysis.analyze_step_totals

    def counting(group, *args, **kwargs):
        calls.append(group.step)
        return original(group, *args, **kwargs)

    monkeypatch.setattr(step_analysis, "analyze_step_totals", counting)
    return calls
