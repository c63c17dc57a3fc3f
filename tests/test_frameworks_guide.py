"""Every recipe of docs/frameworks.md runs as written, from the repository root, on the
bundled examples of sample_data/frameworks/ (in the structure each framework's source
writes; sample_data/frameworks/make_frameworks.py writes them and cites the sources)."""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

import pytest
from typer.testing import CliRunner

from ratioscope.cli import app

ROOT = Path(__file__).resolve().parents[1]
GUIDE = ROOT / "docs" / "frameworks.md"
RECIPES = ("verl", "trl", "prime-rl", "slime", "skyrl", "nemo-rl", "areal")


def recipe(name: str) -> list[list[str]]:
    """The commands of the bash block that follows ``<!-- recipe: name -->``."""
    text = GUIDE.read_text()
    match = re.search(rf"<!-- recipe: {re.escape(name)} -->\n```bash\n(.*?)```", text, re.S)
    assert match, f"docs/frameworks.md has no recipe '{name}'"
    commands = [shlex.split(line) for line in match.group(1).splitlines() if line.strip()]
    assert all(c[0] == "ratioscope" for c in commands)
    return [c[1:] for c in commands]


@pytest.fixture(scope="module")
def repository_view(tmp_path_factory) -> Path:
    """A directory whose ``sample_data`` is the repository's: the recipes' paths resolve
    as from the repository root, and what they write lands here."""
    root = tmp_path_factory.mktemp("recipes")
    (root / "sample_data").symlink_to(ROOT / "sample_data", target_is_directory=True)
    return root


@pytest.mark.parametrize("name", RECIPES)
def test_recipe_runs_as_written_on_the_bundled_files(name, repository_view, monkeypatch):
    monkeypatch.chdir(repository_view)
    runner = CliRunner()
    commands = recipe(name)
    for args in commands:
        paths = [a for a in args if a.startswith("sample_data/")]
        assert paths and all(p.startswith(f"sample_data/frameworks/{name}/") for p in paths)
        result = runner.invoke(app, args)
        assert result.exit_code == 0, f"{args}: {result.stderr}"
        if "--json" in args:
            document = json.loads(Path(args[args.index("--json") + 1]).read_text())
            # read as the framework's layout: a dump's profile, a text log's layout
            kinds = {i.get("profile", i.get("layout")) for i in document["inputs"]}
            assert kinds == {name}, args
            if name == "slime":  # the tensor-parallel copy is skipped
                assert len(document["inputs"]) == 1


def test_the_bundled_examples_are_what_their_script_writes(tmp_path):
    """sample_data/frameworks/ is reproducible: the script writes the same bytes."""
    from framework_files import SCRIPT as script
    from framework_files import make_frameworks

    written = make_frameworks.generate(tmp_path)
    bundled = sorted(
        p for p in script.parent.rglob("*")
        if p.is_file() and p.suffix != ".py" and "__pycache__" not in p.parts
    )  # fmt: skip
    assert [p.relative_to(tmp_path) for p in written] == [
        p.relative_to(script.parent) for p in bundled
    ]
    for new, old in zip(written, bundled, strict=True):
        if old.suffix == ".parquet":
            # a Parquet file's bytes are its writer's (polars 2.2 lays out the same table
            # otherwise than 2.1): the same columns, types and rows are what is bundled
            import polars as pl

            left, right = pl.read_parquet(new), pl.read_parquet(old)
            assert left.schema == right.schema and left.equals(right), old
        else:
            assert new.read_bytes() == old.read_bytes(), old
        assert old.stat().st_size < 20_000, old  # a few KB each
    assert set(make_frameworks.WRITERS) == set(RECIPES)


def test_every_section_of_the_guide_has_its_recipe_tested():
    named = re.findall(r"<!-- recipe: ([\w-]+) -->", GUIDE.read_text())
    assert sorted(named) == sorted(RECIPES)
