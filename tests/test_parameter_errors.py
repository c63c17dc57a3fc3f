"""A bad argument is a ParameterError naming the Python parameter in the library, and the
option that sets it on the command line (the one error boundary, ``cli/__init__.py``)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from dumps import make_reference, write_canonical, write_layout
from typer.testing import CliRunner

from ratioscope.analysis.device import resolve_device
from ratioscope.analysis.sweep import sweep
from ratioscope.cli import app
from ratioscope.cli._options import PARAMETER_OPTIONS
from ratioscope.errors import ParameterError, UsageError
from ratioscope.evaluation import evaluate_passk
from ratioscope.functional import covariance, fpa, passk, tepo, token_stats
from ratioscope.io.loaders import LoadOptions, load_file
from ratioscope.io.profiles import get_profile, resolve_keys
from ratioscope.io.samples import load_samples

runner = CliRunner()


def one_line_error(result, *fragments: str) -> None:
    assert result.exit_code == 2, (result.exit_code, result.stderr)
    assert result.stderr.startswith("ratioscope: error: ") and result.stderr.count("\n") == 1
    for fragment in fragments:
        assert fragment in result.stderr, (fragment, result.stderr)


def raised(call, *args, **kwargs) -> ParameterError:
    with pytest.raises(ParameterError) as caught:
        call(*args, **kwargs)
    error = caught.value
    # a ValueError for Python callers, a usage error (exit 2) for the command line
    assert isinstance(error, ValueError) and isinstance(error, UsageError)
    assert error.exit_code == 2
    assert "--" not in str(error), str(error)
    return error


def test_library_errors_of_loading_and_running_name_the_parameter(tmp_path):
    path = write_canonical(make_reference(seed=1, rows=8), ".pt", tmp_path)
    cases = [
        (raised(resolve_device, "tpu"), "device", "device must be one of auto, cpu, cuda"),
        (raised(get_profile, "deepspeed"), "format", "format must be one of auto, canonical"),
        (
            raised(resolve_keys, get_profile("verl"), ["a"], {"masks": "a"}),
            "mapping",
            "mapping names 'masks', which is not a canonical key",
        ),
        (
            raised(load_file, path, LoadOptions(group_size=3)),
            "group_size",
            f"{path}: group_size 3 does not divide the 8 sequences of the file.",
        ),
        (raised(sweep, path, [1e-6, -1.0]), "qvs", "qvs needs finite positive values"),
    ]
    for error, parameter, message in cases:
        assert error.parameter == parameter
        assert message in str(error), str(error)
        assert parameter in PARAMETER_OPTIONS, parameter


@pytest.mark.skipif(torch.cuda.is_available(), reason="a CUDA device is present")
def test_cuda_without_a_device_names_the_parameter_and_the_option():
    error = raised(resolve_device, "cuda")
    assert str(error) == "device cuda was requested but no CUDA device is available."
    assert error.naming("--device") == (
        "--device cuda was requested but no CUDA device is available."
    )


def test_the_command_line_names_the_options(tmp_path):
    path = write_canonical(make_reference(seed=1, rows=8), ".pt", tmp_path)
    result = runner.invoke(app, ["analyze", str(path), "--group-size", "3", "-q"])
    one_line_error(result, "--group-size 3 does not divide the 8 sequences of", "dump.pt")
    result = runner.invoke(app, ["analyze", str(path), "--map", "masks=mask", "-q"])
    one_line_error(result, "--map names 'masks', which is not a canonical key")
    result = runner.invoke(app, ["analyze", str(path), "--device", "tpu", "-q"])
    one_line_error(result, "--device must be one of auto, cpu, cuda, got 'tpu'")
    result = runner.invoke(app, ["sweep", str(path), "--qv", "1e-6,-1"])
    one_line_error(result, "--qv needs finite positive values, got [1e-06, -1.0]")
    trl = write_layout(make_reference(seed=2, rows=8), "trl", tmp_path)
    result = runner.invoke(app, ["analyze", str(trl), "--group-size", "4", "-q"])
    one_line_error(result, "--group-size assumes consecutive groups", "shuffle_sequence_dict")


def test_k_above_a_problems_samples_names_ks_in_python_and_k_on_the_command_line(tmp_path):
    samples = tmp_path / "s.jsonl"
    lines = [
        f'{{"problem_id": "p{p}", "response": "r{i}", "correct": {str(i % 2 == 0).lower()}}}'
        for p in range(2)
        for i in range(4)
    ]
    samples.write_text("\n".join(lines) + "\n")
    error = raised(evaluate_passk, load_samples([samples]), [1, 8])
    assert error.parameter == "ks"
    assert str(error).startswith("ks must be at most 4, as every problem has 4 samples; ")
    assert "line 1: problem 'p0' of method 's' has 4 samples, fewer than k=8" in str(error)
    result = runner.invoke(app, ["eval-passk", str(samples), "--k", "1,8"])
    one_line_error(result, "--k must be at most 4, as every problem has 4 samples; ", "s.jsonl")


def test_formula_errors_name_their_parameter():
    z = torch.zeros(2, 3)
    mask = torch.ones(2, 3, dtype=torch.bool)
    cases = [
        (raised(token_stats.switch_frequency, z.to(torch.int8), mask, window=0), "window"),
        (raised(token_stats.token_states, z[0], None), "z"),
        (raised(token_stats.low_frequency_ratio, z, mask, cutoff=2.0), "cutoff"),
        (raised(token_stats.frequency_grid, 0), "n_freqs"),
        (raised(token_stats.token_states, z, mask, on_band=(1.5, 0.1)), "on_band"),
        (raised(tepo.sequence_clip_mask, z, z[:, 0], mask, clip=(-1.0, 0.1)), "clip"),
        (raised(tepo.sequence_clip_mask, z, z[:, 0], mask, form="other"), "form"),
        (raised(covariance.clip_cov_touched, z, ratio=0.0), "ratio"),
        (raised(covariance.kl_cov_touched, z, ratio=-1.0), "ratio"),
        (raised(covariance.covariance_percentiles, z, fractions=(0.5, 0.2)), "fractions"),
        (raised(covariance.covariance_weights, z, z, mask, torch.zeros(2)), "group"),
        (raised(passk.pass_at_k, np.array([4]), np.array([1]), 0), "k"),
        (raised(passk.pass_at_k, np.array([4]), np.array([1]), 5), "k"),
    ]
    for error, parameter in cases:
        assert error.parameter == parameter, (error.parameter, str(error))
    logits = torch.zeros(1, 2, 3)
    ids = torch.zeros(1, 2, dtype=torch.long)
    assert raised(fpa.future_log_probs_sweep, logits, logits, ids, lams=(-1.0,)).parameter == "lams"
    assert raised(fpa.future_log_probs_sweep, [[0.0]], logits, ids).parameter == "logits"
    ids[0, 1] = 7
    error = raised(fpa.future_log_probs_sweep, logits, logits, ids)
    assert error.parameter == "token_ids" and "outside the vocabulary [0, 3)" in str(error)


def test_every_parameter_the_cli_names_is_spelt_as_an_option():
    assert all(option.startswith("--") for option in PARAMETER_OPTIONS.values())


def test_library_hints_mention_parameters_and_the_cli_names_their_options(tmp_path):
    from typer.testing import CliRunner

    from ratioscope.cli import app
    from ratioscope.errors import SampleError
    from ratioscope.io.samples import load_samples

    path = tmp_path / "s.jsonl"
    path.write_text('{"problem_id": 1, "response": " ", "correct": 1}\n')
    with pytest.raises(SampleError) as raised_error:
        load_samples(path)
    assert "set `fields.allow_empty`" in str(raised_error.value)
    assert "--" not in str(raised_error.value).replace(str(path), "")
    result = CliRunner().invoke(app, ["eval-passk", str(path)])
    assert result.exit_code == 2
    assert "set --allow-empty-responses if" in result.output
    assert "`" not in result.output


@pytest.mark.parametrize(
    "params",
    [{}, {"clip": (0.1, 0.3), "max_lag": 2, "temperature": 0.7, "quantiles": (0.5,)}],
)
def test_analysis_params_document_is_the_deep_copy_of_its_fields(params):
    """``to_dict`` reads the fields directly; dataclasses.asdict (a deep copy) is the
    reference, with tuples as lists and the options omitted when unset."""
    import dataclasses

    from ratioscope.data.params import _OMITTED_WHEN_NONE, AnalysisParams

    value = AnalysisParams(**params)
    reference = {
        k: list(v) if isinstance(v, tuple) else v
        for k, v in dataclasses.asdict(value).items()
        if not (k in _OMITTED_WHEN_NONE and v is None)
    }
    assert value.to_dict() == reference
    assert list(value.to_dict()) == list(reference)
