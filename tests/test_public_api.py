"""The public names of the Python API exist and are the functions they name."""

from __future__ import annotations

import subprocess
import sys

import ratioscope
import ratioscope.functional as F


def test_design_section_6_names():
    for name in ("load", "analyze", "TokenBatch", "Report"):
        assert hasattr(ratioscope, name)
    from ratioscope.functional import kalman, passk, token_stats

    assert F.kalman_filter is kalman.kalman_filter
    assert F.kalman_gains is kalman.kalman_gains
    assert F.token_states is token_stats.token_states
    assert F.low_frequency_ratio is token_stats.low_frequency_ratio
    assert F.pass_at_k is passk.pass_at_k and F.ucc_at_k is passk.ucc_at_k
    assert callable(F.covariance_weights) and callable(F.quatro_duals)


def test_numpy_only_submodules_do_not_import_torch():
    code = "import sys, ratioscope.functional.passk; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_all_lists_match_the_lazy_tables():
    assert set(ratioscope.__all__) == {"__version__", *ratioscope._LAZY}
    assert set(F.__all__) == set(F._LAZY)


def _fresh(code: str) -> str:
    """Run ``code`` in a fresh interpreter (nothing of ratioscope imported yet)."""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    return out.stdout.strip()


def test_dir_lists_the_public_api_without_importing_torch():
    code = (
        "import sys, ratioscope\n"
        "names = dir(ratioscope)\n"
        "print(sorted(names) == sorted(ratioscope.__all__), 'torch' in sys.modules)"
    )
    assert _fresh(code) == "True False"
    for name in ("objectives", "timeline", "compare", "verdict", "merge_reports", "Thresholds"):
        assert name in dir(ratioscope)


#: public functions and the modules that define them
PUBLIC_FUNCTIONS = {
    "objectives": "ratioscope.objective_family.side_by_side",
    "timeline": "ratioscope.views.timeline",
    "compare": "ratioscope.views.compare",
    "sweep": "ratioscope.analysis.sweep",
    "verdict": "ratioscope.judgement.verdict",
    "run_report": "ratioscope.render.html.run_report",
}


def test_public_functions_are_functions_whatever_was_imported_first():
    # every module of the package imported before the package attribute is read: no
    # subpackage or module shares a public function's name, so none can hide it
    lines = ["import importlib, inspect, pkgutil, ratioscope"]
    lines += [
        "for m in pkgutil.walk_packages(ratioscope.__path__, 'ratioscope.'):",
        "    importlib.import_module(m.name)",
    ]
    lines += [
        f"f = getattr(ratioscope, {name!r})\n"
        f"assert inspect.isfunction(f), {name!r}\n"
        f"assert f is importlib.import_module({module!r}).{name}, {name!r}"
        for name, module in PUBLIC_FUNCTIONS.items()
    ]
    lines += [
        "from ratioscope.judgement.verdict import Thresholds",
        "assert ratioscope.Thresholds is Thresholds",
        "print('ok')",
    ]
    assert _fresh("\n".join(lines)) == "ok"


def _documented_calls() -> set[str]:
    """``ratioscope.NAME(`` as README.md and docs/ write them (top-level names only)."""
    import re
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    texts = [root / "README.md", *sorted((root / "docs").glob("*.md"))]
    names: set[str] = set()
    for path in texts:
        names.update(re.findall(r"\bratioscope\.([A-Za-z_]\w*)\(", path.read_text()))
    return names


def test_every_exported_and_documented_name_resolves():
    calls = _documented_calls()
    assert {"analyze", "objectives", "timeline", "compare", "merge_reports"} <= calls
    code = (
        "import ratioscope\n"
        "print([n for n in ratioscope.__all__ if getattr(ratioscope, n, None) is None])\n"
        f"print([n for n in {sorted(calls)!r} if not callable(getattr(ratioscope, n, None))])"
    )
    assert _fresh(code) == "[]\n[]"


def test_report_verdict_is_the_verdict_of_the_report():
    from pathlib import Path

    from ratioscope.judgement.verdict import Thresholds, verdict

    report = ratioscope.Report.read_json(Path(__file__).parent / "data" / "report_schema1.json")
    assert report.verdict() == verdict(report) == ratioscope.verdict(report)
    strict = Thresholds(drift_k3_yellow=1e-6, drift_k3_red=1e-5)  # policy k3 is 8.9e-5
    assert report.verdict(strict) == verdict(report, strict)
    assert report.verdict(strict) != report.verdict()
    assert [f.level for f in report.verdict(strict) if f.key == "mismatch.policy.k3"] == ["red"]


def test_library_and_cli_share_one_device_default():
    import inspect

    from ratioscope.cli._options import DEVICE_DEFAULT

    assert DEVICE_DEFAULT == "auto"
    from ratioscope.analysis import pipeline as analysis
    from ratioscope.analysis import sweep
    from ratioscope.views import timeline

    functions = [
        analysis.analyze,
        analysis.report_or_analysis,
        analysis.section_or_analysis,
        sweep.sweep,
        timeline.timeline,
    ]
    for function in functions:
        assert inspect.signature(function).parameters["device"].default == DEVICE_DEFAULT
