#!/usr/bin/env bash
# The package as a user installs it from PyPI: build the wheel and the sdist, install the
# wheel into a fresh virtual environment, and run analyze, report and eval-ucc from a
# folder outside the checkout on a copy of the sample data. This catches what a checkout
# hides: package data left out of the wheel (the report's assets), a module imported from
# the source tree, a dependency missing from pyproject.toml.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

python -m pip install --quiet build
python -m build --outdir "$work/dist" .
wheel=$(ls "$work"/dist/ratioscope-*.whl)
sdist=$(ls "$work"/dist/ratioscope-*.tar.gz)
echo "wheel-check: built $(basename "$wheel") and $(basename "$sdist")"
# the sdist holds what a rebuild needs
tar -tzf "$sdist" >"$work/sdist.txt"
grep -q "/LICENSE$" "$work/sdist.txt"
grep -q "/ratioscope/render/html/assets/report.js$" "$work/sdist.txt"
grep -q "/CHANGELOG.md$" "$work/sdist.txt"

python3 -m venv "$work/venv"
# torch pinned as in the README (a CPU build from the local file, no CUDA wheels)
"$work/venv/bin/pip" install --quiet torch==2.13.0 "$wheel[report]"

mkdir "$work/user"
cp -r sample_data/verl sample_data/verl_steps sample_data/samples.jsonl \
    sample_data/tokenizer.json "$work/user/"
cd "$work/user"
ratioscope="$work/venv/bin/ratioscope"
located=$("$work/venv/bin/python" -c "import ratioscope; print(ratioscope.__file__)")
case "$located" in
    "$root"*) echo "wheel-check: ratioscope imported from the checkout ($located)" >&2; exit 1 ;;
esac
"$work/venv/bin/python" -c "import importlib.resources as r; assert r.files('ratioscope').joinpath('py.typed').is_file()"
"$ratioscope" analyze verl/ --json run.json -q
"$ratioscope" report verl_steps/ --tokenizer tokenizer.json --out report.html -q
"$ratioscope" eval-ucc samples.jsonl --base base --json ucc.json -q
"$work/venv/bin/python" - <<'PY'
import json
from pathlib import Path

report = json.loads(Path("run.json").read_text())
assert report["schema_version"] == 2 and report["ratios"], "analyze wrote no ratios"
page = Path("report.html").read_text()
assert "vegaEmbed" in page and "report-data" in page, "the report's assets are missing"
assert json.loads(Path("ucc.json").read_text())["by_method"], "eval-ucc wrote no methods"
print(f"wheel-check: analyze, report ({len(page) / 2**20:.1f} MiB) and eval-ucc ran from the wheel")
PY
