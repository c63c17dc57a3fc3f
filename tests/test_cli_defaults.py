"""Every CLI default is the library's default, and every option is declared one way.

The commands' signatures take their defaults from the library (``_options.DEFAULTS``
and the constants beside it); these tests walk every click command that ``ratioscope``
builds and compare each option's default with the library value it stands for, so a
default changed on one side only fails here instead of silently making the CLI and the
library compute different numbers.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterator
from dataclasses import fields
from typing import Any

import pytest
import typer
from typer.models import ParameterInfo

from ratioscope.cli import app
from ratioscope.cli._common import parse_floats, parse_mapping
from ratioscope.cli._options import PARAMETER_OPTIONS, analysis_params, band_text, option_text
from ratioscope.data.params import AnalysisParams

#: options with no library default to mirror: where output goes, what to draw, and the
#: device (its default, "auto", the library's too: test_every_device_default_is_the_shared_one)
CLI_ONLY = {
    "--help",
    # where tasks run (ratioscope.analysis.parallel.Runner; default this process) and the trackers
    # a timeline also writes to (none by default)
    "--workers",
    "--ray",
    "--tensorboard",
    "--mlflow",
    "--wandb",
    "--json",
    "--parquet",
    "--per-problem",
    "--out",
    "--quiet",
    # analyze: how much the terminal shows (the report is the same)
    "--detail",
    "--rules",
    "--baseline",
    "--junit",
    "--summary",
    "--problem",
    "--method",
    "--sequence",
    "--device",
    # the health verdict: a thresholds file and where to write the verdict
    "--thresholds",
    "--verdict-json",
    # timeline: which headline columns the table shows, and whether to add the
    # objectives headlines (off, as ratioscope.timeline's objectives=False)
    "--columns",
    "--objectives",
    # the step cache: on by default on the command line (ratioscope.timeline's cache=None
    # keeps none); its bound is StepCache's (test_the_cache_bound_is_the_librarys)
    "--cache",
    "--no-cache",
    "--cache-max-bytes",
    # watch: what runs when, how often it looks (its looks' defaults are RunWatch's:
    # test_the_watch_defaults_are_the_librarys)
    "--on-red",
    "--exit-on",
    "--once",
    "--interval",
    "--settle",
    # timeline --html: where to write the run report (none by default)
    "--html",
    # objectives: which methods (default all: methods=None), overrides (none), --list
    "--methods",
    "--set",
    "--list",
    "--batch-rows",
}


def _commands() -> Iterator[tuple[str, Any]]:
    """(command path, click command) for every command and subcommand."""
    root = typer.main.get_command(app)

    def walk(path: str, command: Any) -> Iterator[tuple[str, Any]]:
        subcommands = getattr(command, "commands", None)
        if subcommands is None:
            yield path, command
            return
        for name, sub in subcommands.items():
            yield from walk(f"{path} {name}", sub)

    yield from walk("ratioscope", root)


def _options() -> list[tuple[str, str, Any]]:
    """(command path, long flag, default) of every option of every command."""
    found = []
    for path, command in _commands():
        for param in command.params:
            if param.param_type_name != "option":
                continue
            flag = max(param.opts, key=len)
            found.append((path, flag, param.default))
    return found


def _default(function: Callable[..., Any], name: str) -> Any:
    return inspect.signature(function).parameters[name].default


def _library_defaults() -> dict[str, tuple[Any, Callable[[Any], Any]]]:
    """flag -> (the library's default, how the CLI turns its value into the library's),
    for the options outside AnalysisParams."""
    from ratioscope.analysis.pipeline import analyze
    from ratioscope.analysis.sweep import sweep
    from ratioscope.evaluation.evaluate import evaluate_passk, evaluate_ucc
    from ratioscope.io.loaders import LoadOptions
    from ratioscope.io.samples import DEFAULT_DATASET_FIELD, DEFAULT_METHOD_FIELD, SampleFields
    from ratioscope.render.html.run_report import run_report
    from ratioscope.report.catalog import metrics
    from ratioscope.views.compare import compare
    from ratioscope.views.timeline import timeline

    load, sample_fields = LoadOptions(), SampleFields()

    def same(value: Any) -> Any:
        return value

    return {
        "--format": (load.format, same),
        "--map": (load.mapping, parse_mapping),
        "--nonfinite": (load.nonfinite, same),
        "--unsafe-pickle": (load.unsafe_pickle, same),
        "--group-size": (load.group_size, same),
        "--trainer": (load.trainer, same),
        "--chunk-elements": (_default(analyze, "chunk_elements"), same),
        "--step-from": (_default(timeline, "step_from"), same),
        "--top": (_default(run_report, "top"), same),
        "--token-budget": (_default(run_report, "token_bytes"), lambda mib: int(mib * 2**20)),
        "--tokenizer": (_default(run_report, "tokenizer"), same),
        "--title": (_default(run_report, "title"), same),
        "--reports-dir": (_default(timeline, "reports_dir"), same),
        "--rel": (_default(compare, "rel"), same),
        "--search": (_default(metrics, "search"), same),
        "--section": (_default(metrics, "section"), same),
        "--sections": (_default(analyze, "sections"), same),
        "--qv": (tuple(_default(sweep, "qvs")), lambda text: parse_floats(text, "--qv")),
        "--k": (_default(evaluate_passk, "ks"), same),
        "--base": (_default(evaluate_passk, "base_method"), same),
        "--threshold": (_default(evaluate_ucc, "threshold"), same),
        "--linkage": (_default(evaluate_ucc, "linkage"), same),
        "--max-pairs": (_default(evaluate_ucc, "max_pairs"), same),
        "--problem-field": (sample_fields.problem, same),
        "--response-field": (sample_fields.response, same),
        "--correct-field": (sample_fields.correct, same),
        "--correct-threshold": (sample_fields.correct_threshold, same),
        "--allow-empty-responses": (sample_fields.allow_empty, same),
        # SampleFields holds None for "the default name", which is this one
        "--method-field": (DEFAULT_METHOD_FIELD, same),
        "--dataset-field": (DEFAULT_DATASET_FIELD, same),
    }


def _analysis_names() -> dict[str, str]:
    """flag -> AnalysisParams field, through the one table of option names."""
    params = {f.name for f in fields(AnalysisParams)}
    return {flag: name for name, flag in PARAMETER_OPTIONS.items() if name in params}


def test_every_option_default_is_the_library_default():
    analysis, library = _analysis_names(), _library_defaults()
    expected = AnalysisParams()
    checked = 0
    for path, flag, default in _options():
        where = f"{path} {flag}"
        if flag in analysis:
            name = analysis[flag]
            parsed = getattr(analysis_params(**{name: default}), name)
            assert parsed == getattr(expected, name), where
        elif flag in library:
            value, convert = library[flag]
            assert convert(default) == value, where
        else:
            assert flag in CLI_ONLY, f"{where}: no library default to compare with"
        checked += 1
    assert checked > 100  # every command was walked


def test_every_analysis_option_is_compared():
    """An AnalysisParams field that some command sets has a flag in PARAMETER_OPTIONS."""
    flags = {flag for _, flag, _ in _options()}
    set_by_cli = {name for flag, name in _analysis_names().items() if flag in flags}
    # fixed by the papers, not by an option; set by a reader of the trainer's settings
    not_options = {"kalman_p0", "kalman_rho0", "quantiles", "max_length_source"}
    assert set_by_cli == {f.name for f in fields(AnalysisParams)} - not_options


def test_options_are_declared_as_annotated_aliases():
    """No ``typer.Option(...)``/``typer.Argument(...)`` as a parameter's default value."""
    for path, command in _commands():
        signature = inspect.signature(command.callback)
        for name, parameter in signature.parameters.items():
            assert not isinstance(parameter.default, ParameterInfo), f"{path} {name}"


@pytest.mark.parametrize(
    ("values", "text"),
    [
        ((0.2, 0.28), "0.2,0.28"),
        ((3e-4, 4e-4), "3e-4,4e-4"),
        ((0.0, 0.5, 1.0, 2.0, 5.0, 10.0), "0,0.5,1,2,5,10"),
        ((0.1, 0.01, 0.001), "0.1,0.01,0.001"),
        ((2.0**-24,), "5.960464477539063e-8"),
    ],
)
def test_option_text_spells_a_tuple_as_typed_and_parses_back(values, text):
    assert option_text(values) == text
    assert parse_floats(text, "--x") == values


def test_band_text_names_the_raw_rule():
    defaults = AnalysisParams()
    assert band_text(defaults.token_on_band) == "exact"
    assert band_text(defaults.on_band) == "3e-4,4e-4"


def test_help_shows_the_library_defaults():
    from typer.testing import CliRunner

    result = CliRunner().invoke(app, ["analyze", "--help"], env={"COLUMNS": "200"})
    assert result.exit_code == 0
    for shown in ("[default: 0.2,0.28]", "[default: 3e-4,4e-4]", "[default: exact]"):
        assert shown in result.stdout


def test_the_cache_bound_is_the_librarys():
    import inspect as _inspect

    from ratioscope.analysis.cache import StepCache
    from ratioscope.cli._cache import CACHE_MAX_BYTES_DEFAULT

    bound = _inspect.signature(StepCache).parameters["max_bytes"].default
    assert bound == CACHE_MAX_BYTES_DEFAULT == 2 * 2**30


def test_the_watch_defaults_are_the_librarys():
    import inspect as _inspect

    from ratioscope.cli.watch import watch
    from ratioscope.views.watch import DEFAULT_INTERVAL, RunWatch

    options = _inspect.signature(watch).parameters
    assert options["settle"].default == _inspect.signature(RunWatch).parameters["settle"].default
    assert options["interval"].default == DEFAULT_INTERVAL


def test_every_device_default_is_the_shared_one():
    """The library's entry points and the commands run on the same device by default
    (``defaults.DEVICE``, "auto": CUDA when present), as the README says."""
    import ratioscope
    from ratioscope import defaults
    from ratioscope.analysis.parallel import analyze_in_tasks
    from ratioscope.render.html.run_report import run_report

    functions = [getattr(ratioscope, name) for name in ratioscope.__all__]
    functions += [run_report, analyze_in_tasks]
    taking = {
        f.__name__: inspect.signature(f).parameters["device"].default
        for f in functions
        if callable(f) and not inspect.isclass(f) and "device" in inspect.signature(f).parameters
    }
    assert {"analyze", "timeline", "run_report", "analyze_in_tasks"} <= set(taking)
    assert taking == dict.fromkeys(taking, defaults.DEVICE)
    devices = [(path, flag, default) for path, flag, default in _options() if flag == "--device"]
    assert len(devices) >= 5
    assert all(default == defaults.DEVICE for _, _, default in devices), devices
