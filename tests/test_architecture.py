"""docs/architecture.md holds: its walk-through metric streams, merges and restores like
the report's own sections, and the package keeps the layout and the import contracts it
draws (import-linter, the folders' names)."""

from __future__ import annotations

import ast
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

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


# ------------------------------------------------------------------- the layout
ROOT_DIR = Path(__file__).resolve().parents[1]


_LINT = "import sys; from importlinter.cli import lint_imports_command as c; sys.exit(c())"


def _lint_imports(root: Path) -> subprocess.CompletedProcess[str]:
    """``lint-imports`` with the contracts of ``root``'s pyproject.toml, on ``root``'s
    copy of the package (PYTHONPATH first, so the checkout's install is not read)."""
    env = {**os.environ, "PYTHONPATH": str(root)}
    return subprocess.run(
        [sys.executable, "-c", _LINT, "--no-cache"],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
    )


def test_the_architecture_contracts_hold():
    # import-linter reads [tool.importlinter] of pyproject.toml (docs/architecture.md)
    result = _lint_imports(ROOT_DIR)
    assert result.returncode == 0, result.stdout + result.stderr
    kept = re.search(r"Contracts: (\d+) kept, 0 broken", result.stdout)
    assert kept and int(kept.group(1)) >= 6, result.stdout


@pytest.mark.parametrize(
    ("module", "line", "contract"),
    [
        # a view reaching for a renderer, a formula for the data model, io for a section
        ("views/compare.py", "from ratioscope.render.terminal import tables", "outputs"),
        ("functional/passk.py", "from ratioscope.data import params", "functional"),
        ("io/paths.py", "from ratioscope.sections import registry", "io"),
        # a circle only a type checker sees
        (
            "sections/registry.py",
            "if TYPE_CHECKING:\n    import ratioscope.analysis.steps",
            "layers",
        ),
        (
            "objective_family/methods.py",
            "def f():\n    import ratioscope.objective_family.totals",
            "acyclic",
        ),
    ],
)
def test_the_contracts_catch_an_import_that_breaks_them(tmp_path, module, line, contract):
    shutil.copytree(ROOT_DIR / "ratioscope", tmp_path / "ratioscope")
    shutil.copy(ROOT_DIR / "pyproject.toml", tmp_path / "pyproject.toml")
    target = tmp_path / "ratioscope" / module
    text = target.read_text()
    if "TYPE_CHECKING" in line and "from typing import TYPE_CHECKING" not in text:
        line = "from typing import TYPE_CHECKING\n" + line
    target.write_text(text + "\n\n" + line + "\n")
    result = _lint_imports(tmp_path)
    assert result.returncode == 1, result.stdout + result.stderr
    names = _contract_names()
    broken = [
        name for name in names.values() if re.search(rf"{re.escape(name)}\s*BROKEN", result.stdout)
    ]
    assert names[contract] in broken, result.stdout


def _contract_names() -> dict[str, str]:
    """Contract id -> name, from pyproject.toml."""
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10
        import tomli as tomllib
    config = tomllib.loads((ROOT_DIR / "pyproject.toml").read_text())
    return {c["id"]: c["name"] for c in config["tool"]["importlinter"]["contracts"]}


def test_the_package_top_holds_at_most_eight_modules_and_every_folder_says_its_place():
    top = sorted(p.name for p in (ROOT_DIR / "ratioscope").glob("*.py"))
    assert len(top) <= 8, top
    for init in sorted((ROOT_DIR / "ratioscope").glob("*/**/__init__.py")):
        doc = ast.get_docstring(ast.parse(init.read_text()))
        assert doc and doc.splitlines()[0].strip().endswith("."), init


def _one_edit_apart(a: str, b: str) -> bool:
    """Whether ``b`` is ``a`` with one letter changed, added or removed (``steps`` and
    ``step``, ``state`` and ``stats``)."""
    if abs(len(a) - len(b)) > 1 or a == b:
        return False
    if len(a) == len(b):
        return sum(x != y for x, y in zip(a, b, strict=True)) == 1
    short, long = sorted((a, b), key=len)
    return any(long[:i] + long[i + 1 :] == short for i in range(len(long)))


def test_no_two_modules_of_a_folder_differ_by_a_plural_or_a_letter():
    assert _one_edit_apart("state", "stats") and _one_edit_apart("plot", "plots")
    assert not _one_edit_apart("steps", "sweep") and not _one_edit_apart("io", "io")
    for folder in sorted({p.parent for p in (ROOT_DIR / "ratioscope").rglob("*.py")}):
        names = sorted(
            p.stem.lstrip("_") if p.is_file() else p.name
            for p in folder.iterdir()
            if (p.suffix == ".py" and p.stem != "__init__") or (p / "__init__.py").exists()
        )
        close = [
            (a, b) for i, a in enumerate(names) for b in names[i + 1 :] if _one_edit_apart(a, b)
        ]
        assert not close, f"{folder}: {close}"
