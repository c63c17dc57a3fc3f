"""Bad input: one clear line naming the file and the problem, exit 2, nothing written."""

from __future__ import annotations

import os
import pickle
from pathlib import Path

import numpy as np
import pytest
import torch
from dumps import make_reference, write_canonical, write_layout
from typer.testing import CliRunner

from ratioscope.cli import app

runner = CliRunner()


def run_analyze(tmp_path: Path, *args: str):
    """Run analyze with JSON and Parquet outputs; return the result and the outputs."""
    outputs = [tmp_path / "out" / "report.json", tmp_path / "out" / "seqs.parquet"]
    outputs[0].parent.mkdir(exist_ok=True)
    result = runner.invoke(
        app,
        ["analyze", *args, "--json", str(outputs[0]), "--parquet", str(outputs[1]), "-q"],
    )
    return result, outputs


def assert_bad_input(result, outputs, *fragments: str) -> None:
    assert result.exit_code == 2, (result.exit_code, result.stdout, result.stderr)
    assert result.stderr.startswith("ratioscope: error: ")
    assert result.stderr.count("\n") == 1, result.stderr
    assert "Traceback" not in result.stderr + result.stdout
    for fragment in fragments:
        assert fragment in result.stderr, (fragment, result.stderr)
    for output in outputs:
        assert not output.exists()
    leftovers = [p.name for p in outputs[0].parent.iterdir()]
    assert leftovers == [], leftovers


def save(path: Path, **tensors) -> Path:
    torch.save(tensors, path)
    return path


def test_unknown_file_type(tmp_path):
    path = tmp_path / "dump.xyz"
    path.write_text("hello")
    result, outputs = run_analyze(tmp_path, str(path))
    assert_bad_input(result, outputs, "dump.xyz", "unknown file type '.xyz'")


def test_unknown_format_option(tmp_path):
    path = write_canonical(make_reference(), ".pt", tmp_path)
    result, outputs = run_analyze(tmp_path, str(path), "--format", "deepspeed")
    assert_bad_input(result, outputs, "--format must be one of")


def test_missing_required_key_lists_the_keys_found(tmp_path):
    path = save(tmp_path / "d.pt", mask=torch.ones(2, 3), log_probs=torch.zeros(2, 3))
    result, outputs = run_analyze(tmp_path, str(path))
    assert_bad_input(result, outputs, "d.pt", "missing required key 'old_log_probs'", "log_probs")


def test_missing_framework_key_names_it_in_the_framework_layout(tmp_path):
    ref = make_reference()
    path = write_layout(ref, "verl", tmp_path)
    data = torch.load(path, weights_only=True)
    del data["response_mask"]
    torch.save(data, path)
    result, outputs = run_analyze(tmp_path, str(path), "--format", "verl")
    assert_bad_input(result, outputs, "missing required key 'response_mask'", "uid")


def test_shape_mismatch_names_both_keys_and_shapes(tmp_path):
    path = save(
        tmp_path / "d.pt",
        mask=torch.ones(2, 3),
        log_probs=torch.zeros(2, 3),
        old_log_probs=torch.zeros(2, 4),
    )
    result, outputs = run_analyze(tmp_path, str(path))
    assert_bad_input(result, outputs, "'old_log_probs' has shape [2, 4]", "'mask' has shape [2, 3]")


def test_mask_that_is_not_boolean_like(tmp_path):
    mask = torch.ones(2, 3)
    mask[1, 2] = 0.5
    path = save(tmp_path / "d.pt", mask=mask, log_ratio=torch.zeros(2, 3))
    result, outputs = run_analyze(tmp_path, str(path))
    assert_bad_input(result, outputs, "not boolean-like", "0.5", "(1, 2)")


def test_no_valid_token(tmp_path):
    path = save(tmp_path / "d.pt", mask=torch.zeros(2, 3), log_ratio=torch.zeros(2, 3))
    result, outputs = run_analyze(tmp_path, str(path))
    assert_bad_input(result, outputs, "d.pt", "no valid token")


def test_nonfinite_values_error_with_count_and_first_position(tmp_path):
    z = torch.zeros(3, 4)
    z[1, 2] = float("nan")
    z[2, 0] = float("inf")
    z[0, 3] = float("nan")  # masked: ignored
    mask = torch.ones(3, 4, dtype=torch.bool)
    mask[0, 3] = False
    path = save(tmp_path / "d.pt", mask=mask, log_ratio=z)
    result, outputs = run_analyze(tmp_path, str(path))
    assert_bad_input(result, outputs, "'log_ratio' has 2 non-finite value(s)", "(1, 2)")


def test_nonfinite_mask_option_masks_and_warns(tmp_path):
    z = torch.zeros(3, 4)
    z[1, 2] = float("nan")
    path = save(tmp_path / "d.pt", mask=torch.ones(3, 4), log_ratio=z)
    # -q alone prints the verdict block only; --detail keeps the warnings
    result, outputs = run_analyze(tmp_path, str(path), "--nonfinite", "mask", "--detail")
    assert result.exit_code == 0, result.stderr
    assert "masked 1 token(s)" in result.stderr
    assert outputs[0].exists()


@pytest.mark.parametrize("suffix", [".pt", ".safetensors", ".npz", ".parquet"])
def test_truncated_file(tmp_path, suffix):
    path = write_canonical(make_reference(), suffix, tmp_path)
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    result, outputs = run_analyze(tmp_path, str(path))
    assert_bad_input(result, outputs, path.name, "not a readable")
    if suffix == ".pt":  # cut short, and said so
        assert "torch file: truncated (" in result.stderr


def test_malformed_jsonl_line_names_the_line(tmp_path):
    path = write_canonical(make_reference(), ".jsonl", tmp_path)
    lines = path.read_text().splitlines()
    lines[3] = lines[3][:-5]
    path.write_text("\n".join(lines) + "\n")
    result, outputs = run_analyze(tmp_path, str(path))
    assert_bad_input(result, outputs, "dump.jsonl", "line 4", "not valid JSON")


def test_unreadable_path(tmp_path):
    result, outputs = run_analyze(tmp_path, str(tmp_path / "missing.pt"))
    assert_bad_input(result, outputs, "missing.pt", "no such file")
    result, outputs = run_analyze(tmp_path, str(tmp_path / "nothing*.pt"))
    assert_bad_input(result, outputs, "matches no file")


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads any file")
def test_permission_denied(tmp_path):
    path = write_canonical(make_reference(), ".pt", tmp_path)
    path.chmod(0)
    result, outputs = run_analyze(tmp_path, str(path))
    assert_bad_input(result, outputs, "permission denied")


class _Payload:
    """A pickle that would create a file when unpickled."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def test_malicious_pt_pickle_runs_no_code(tmp_path):
    marker = tmp_path / "pwned"
    path = tmp_path / "evil.pt"
    torch.save(
        {"mask": torch.ones(1, 2), "log_ratio": torch.zeros(1, 2), "x": _Payload(marker)}, path
    )
    result, outputs = run_analyze(tmp_path, str(path))
    assert_bad_input(result, outputs, "evil.pt", "--unsafe-pickle")
    assert not marker.exists()
    # the same as a legacy pickle of protocol 4, in a process of its own (pytest keeps
    # warnings from the runner's stderr): torch's warning about the protocol is not
    # printed beside the one sentence
    import subprocess
    import sys

    torch.save(
        {"mask": torch.ones(1, 2), "x": _Payload(marker)}, path,
        _use_new_zipfile_serialization=False, pickle_protocol=4,
    )  # fmt: skip
    done = subprocess.run(
        [sys.executable, "-m", "ratioscope", "info", str(path)],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 2 and not marker.exists()
    assert done.stderr.count("\n") == 1 and "--unsafe-pickle" in done.stderr, done.stderr


def test_pkl_is_refused_without_unsafe_pickle_and_runs_no_code(tmp_path):
    marker = tmp_path / "pwned"
    path = tmp_path / "evil.pkl"
    path.write_bytes(pickle.dumps({"payload": _Payload(marker)}))
    result, outputs = run_analyze(tmp_path, str(path))
    assert_bad_input(result, outputs, "evil.pkl", "can run arbitrary code", "--unsafe-pickle")
    assert not marker.exists()
    result = runner.invoke(app, ["info", str(path)])
    assert result.exit_code == 2 and not marker.exists()


def test_npz_object_arrays_are_refused(tmp_path):
    path = tmp_path / "obj.npz"
    np.savez(
        path, mask=np.ones((1, 2)), log_ratio=np.zeros((1, 2)), meta=np.array([{}], dtype=object)
    )
    result, outputs = run_analyze(tmp_path, str(path))
    assert_bad_input(result, outputs, "obj.npz", "object array")


def test_unsafe_pickle_allows_a_trusted_plain_pickle(tmp_path):
    path = tmp_path / "plain.pkl"
    path.write_bytes(pickle.dumps({"mask": np.ones((2, 3)), "log_ratio": np.zeros((2, 3))}))
    result, _ = run_analyze(tmp_path, str(path), "--unsafe-pickle")
    assert result.exit_code == 0, result.stderr


def test_refuses_to_write_over_an_input(tmp_path):
    path = write_canonical(make_reference(), ".pt", tmp_path)
    before = path.read_bytes()
    result = runner.invoke(app, ["analyze", str(path), "--json", str(path), "-q"])
    assert result.exit_code == 2
    assert "refusing to overwrite the input" in result.stderr
    assert path.read_bytes() == before


def test_debug_environment_variable_shows_the_traceback(tmp_path):
    result = runner.invoke(
        app, ["analyze", str(tmp_path / "missing.pt")], env={"RATIOSCOPE_DEBUG": "1"}
    )
    assert result.exit_code != 0
    assert result.exception is not None


@pytest.mark.parametrize(
    "outputs, fragment",
    [
        (["--json", "{d}/same", "--parquet", "{d}/same"], "same file"),
        (["--json", "{d}"], "is a directory"),
        (["--json", "{d}/missing/r.json"], "does not exist"),
        (["--json", "{d}/r.json", "--parquet", "{d}/missing/s.parquet"], "does not exist"),
        (["--parquet", "{d}/s.csv"], "writes .parquet files"),
    ],
)
def test_outputs_are_validated_before_any_work(tmp_path, outputs, fragment):
    path = write_canonical(make_reference(), ".pt", tmp_path)
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    args = [a.format(d=out_dir) for a in outputs]
    result = runner.invoke(app, ["analyze", str(path), *args, "-q"])
    assert result.exit_code == 2, result.stderr
    assert fragment in result.stderr
    assert result.stdout == ""  # refused before the analysis ran
    assert list(out_dir.iterdir()) == []


@pytest.mark.parametrize(
    "command", [["merge", "{f}", "--out", "{d}/m.json"], ["check", "{f}", "--rules", "{r}"]]
)
def test_binary_file_where_a_report_is_expected(tmp_path, command):
    dump = write_canonical(make_reference(), ".pt", tmp_path)
    rules = tmp_path / "rules.toml"
    rules.write_text('[[rule]]\npath = "ratios.token.lfr"\nmax = 1\n')
    args = [a.format(f=dump, d=tmp_path, r=rules) for a in command]
    result = runner.invoke(app, args)
    assert result.exit_code == 2, result.stderr
    assert "not a JSON report" in result.stderr


def test_an_npz_whose_member_is_not_an_array(tmp_path):
    import zipfile

    path = tmp_path / "notes.npz"
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("readme.txt", "not an array")
    result, outputs = run_analyze(tmp_path, str(path))
    assert_bad_input(result, outputs, "notes.npz", "member 'readme.txt' is not a .npy array")


def test_a_per_token_key_that_holds_a_string_is_refused_not_left_out(tmp_path):
    ref = make_reference(seed=2, rows=4)
    path = save(
        tmp_path / "typed.pt",
        mask=torch.tensor(ref.mask),
        old_log_probs=torch.tensor(ref.old_log_probs),
        advantages=torch.tensor(ref.advantages),
        log_probs="abc",
        step=3,  # a number beside the tensors is metadata, as before
    )
    result, outputs = run_analyze(tmp_path, str(path))
    assert_bad_input(result, outputs, "typed.pt", "'log_probs' holds a str ('abc')")


def test_logits_with_nan_are_refused_by_objectives(tmp_path):
    ref = make_reference(seed=2, rows=4)
    logits = torch.zeros(*ref.mask.shape, 5)
    logits[1, 0, 2] = float("nan")
    path = save(
        tmp_path / "nan_logits.pt",
        mask=torch.tensor(ref.mask),
        log_probs=torch.tensor(ref.log_probs),
        old_log_probs=torch.tensor(ref.old_log_probs),
        advantages=torch.tensor(ref.advantages),
        token_ids=torch.zeros(ref.mask.shape, dtype=torch.long),
        logits=logits,
    )
    result = runner.invoke(app, ["objectives", str(path), "-q"])
    assert result.exit_code == 2, result.output
    assert "'logits' has 1 non-finite value(s)" in result.stderr and "(1, 0)" in result.stderr


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (["convert", "{tmp}/missing.pt", "{tmp}/out.safetensors"], "missing.pt: no such file"),
        (["convert", "{tmp}", "{tmp}/out.safetensors"], "a directory: convert takes one"),
        (["report", "{verl}", "--token-budget", "nan", "--out", "{tmp}/r.html"], "finite number"),
        (["report", "{verl}", "--token-budget", "inf", "--out", "{tmp}/r.html"], "finite number"),
        (["sweep", "{verl}", "--qv", "nan,inf", "--json", "{tmp}/out.json"], "--qv needs finite"),
    ],
)
def test_more_bad_arguments_are_one_line_and_exit_2(tmp_path, args, fragment):
    verl = Path(__file__).resolve().parents[1] / "sample_data" / "verl"
    args = [a.format(tmp=tmp_path, verl=verl) for a in args]
    result = runner.invoke(app, [*args, "-q"])
    assert result.exit_code == 2, result.output
    assert fragment in result.stderr and result.stderr.count("\n") == 1, result.stderr
    assert not list(tmp_path.glob("out.*")) and not list(tmp_path.glob("r.html"))


@pytest.mark.parametrize("merged", [False, True])
def test_a_reader_that_goes_away_leaves_the_report_written(tmp_path, merged):
    """``analyze ... | head -1`` and ``2>&1 | head -1``: the reader closes the pipe after
    one byte; the command finishes, exit 0, and writes its --json (stderr, where the
    warnings and progress go, was not guarded: exit 1 and no file)."""
    import json
    import subprocess
    import sys

    root = Path(__file__).resolve().parents[1]
    out = tmp_path / "report.json"
    command = [sys.executable, "-m", "ratioscope", "analyze", "sample_data/verl_steps/"]
    process = subprocess.Popen(
        [*command, "--json", str(out)], cwd=root, stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT if merged else subprocess.DEVNULL,
    )  # fmt: skip
    assert process.stdout is not None
    assert process.stdout.read(1)
    process.stdout.close()  # the reader goes away
    assert process.wait(timeout=300) == 0
    assert json.loads(out.read_text())["schema_version"] == 2


@pytest.mark.parametrize(
    "command", [["info"], ["analyze"], ["timeline"], ["watch"], ["report", "-o", "r.html"]]
)
def test_an_empty_path_is_refused_not_read_as_the_current_folder(command, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    result = runner.invoke(app, [*command, ""])
    assert result.exit_code == 2, result.output
    assert "an empty path ('') was given" in result.stderr, result.stderr
    assert result.stderr.count("\n") == 1 and not list(tmp_path.iterdir())


@pytest.mark.parametrize(
    "command",
    [
        ["eval-passk", ""],
        ["eval-ucc", ""],
        ["merge", "", "-o", "m.json"],
        ["metrics", ""],
        ["convert", "", "o.safetensors"],
        ["plot", "passk", "", "-o", "p.png"],
        ["check", "", "--rules", "r.toml"],
        ["analyze", str(Path(__file__).resolve().parents[1] / "sample_data/verl"), "--json", ""],
    ],
)
def test_an_empty_path_argument_or_option_is_a_usage_error(command, tmp_path, monkeypatch):
    """Path('') is the current folder: these commands read or wrote '.' (eval-passk ''
    read every sample file under it)."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "a.jsonl").write_text('{"problem": "p", "response": "r", "correct": 1}\n')
    result = runner.invoke(app, command)
    assert result.exit_code == 2, result.output
    assert "an empty path ('') was given" in result.stderr, result.stderr
    assert result.stderr.count("\n") == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.jsonl"]


def test_every_path_parameter_refuses_an_empty_path():
    """A new Path argument or option made with typer's own Option/Argument would take ''
    as the current folder; they are all made with path_option/path_argument."""
    import typer.main

    from ratioscope.cli._path_params import as_path

    def parameters(command, name):
        if hasattr(command, "commands"):
            for sub, child in command.commands.items():
                yield from parameters(child, f"{name} {sub}")
            return
        for parameter in command.params:
            described = getattr(parameter, "type_descriptor", None)
            if described is not None and "Path" in repr(described.annotation):
                yield f"{name} {parameter.name}", described.parameter_info.parser

    found = dict(parameters(typer.main.get_command(app), "ratioscope"))
    assert len(found) > 40  # the walk reaches the commands' parameters
    assert [name for name, parser in found.items() if parser is not as_path] == []


def test_a_damaged_pt_is_named_damaged_not_untrusted(tmp_path):
    """A byte changed inside the archive's pickle fails the member's checksum: the file
    is damaged, which --unsafe-pickle would not mend (it was refused as holding Python
    objects beyond tensors, pointing to --unsafe-pickle)."""
    ref = make_reference(seed=2, rows=4)
    path = save(tmp_path / "flipped.pt", mask=torch.tensor(ref.mask))
    data = bytearray(path.read_bytes())
    start = data.index(b"\x80\x02", data.index(b"data.pkl"))  # the pickle's first bytes
    data[start + 2] = 0xFF  # an opcode the unpickler does not know
    path.write_bytes(bytes(data))
    result, outputs = run_analyze(tmp_path, str(path))
    assert_bad_input(result, outputs, "flipped.pt", "fails its checksum")
    assert "--unsafe-pickle" not in result.stderr


def test_a_text_file_named_pt_is_said_to_be_no_torch_file(tmp_path):
    path = tmp_path / "notes.pt"
    path.write_text("step 32: loss 0.12\n" * 20)
    result, outputs = run_analyze(tmp_path, str(path))
    assert_bad_input(result, outputs, "notes.pt", "neither a zip archive nor a pickle")


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ('{"schema_version": 2, "by_method": {}}', "this is an evaluation report"),
        ('{"schema_version": 2, "ratios": {', "not valid JSON (line 1"),
    ],
)
def test_timeline_of_a_json_that_is_no_step_report_says_what_it_is(tmp_path, text, fragment):
    """A JSON whose name gives no step is read: another kind of document, or one that does
    not parse, is said to be so (it was "no training step found for this file")."""
    path = tmp_path / "passk.json"
    path.write_text(text)
    result = runner.invoke(app, ["timeline", str(path), "-q"])
    assert result.exit_code == 2, result.output
    assert "passk.json" in result.stderr and fragment in result.stderr, result.stderr
    assert "no training step found" not in result.stderr


def test_a_plot_of_a_report_without_ratios_names_the_file(tmp_path):
    import json

    verl = Path(__file__).resolve().parents[1] / "sample_data" / "verl" / "step_0032.pt"
    made = tmp_path / "made.json"
    assert runner.invoke(app, ["analyze", str(verl), "--json", str(made), "-q"]).exit_code == 0
    document = json.loads(made.read_text())
    document["ratios"] = None
    path = tmp_path / "no_ratios.json"
    path.write_text(json.dumps(document))
    result = runner.invoke(app, ["plot", "windows", str(path), "--out", str(tmp_path / "w.png")])
    assert result.exit_code == 2, result.output
    assert "no_ratios.json" in result.stderr and "no 'ratios' section" in result.stderr
    assert not (tmp_path / "w.png").exists()


def test_an_integer_beyond_a_float_is_bad_input_in_json_and_toml(tmp_path):
    """A 401-digit integer parses in JSON and TOML, then stopped every reader that made
    it a float (exit 3): refused where it is read, exit 2."""
    import json

    from ratioscope.io.jsontext import loads

    huge = "1" + "0" * 400
    with pytest.raises(json.JSONDecodeError, match="an integer too large for a float"):
        loads(f'{{"a": [-{huge}]}}')
    assert loads('{"a": ' + "9" * 308 + "}")["a"] == int("9" * 308)  # a float's range
    line = '{"mask": [1, 1], "old_log_probs": [-0.5, -0.2], "log_probs": [HUGE, -0.2]}\n'
    dump = tmp_path / "dump.jsonl"
    dump.write_text(line.replace("HUGE", huge))
    result = runner.invoke(app, ["analyze", str(dump)])
    assert result.exit_code == 2, result.output
    assert "line 1: not valid JSON (an integer too large for a float)" in result.stderr
    rules = tmp_path / "rules.toml"
    rules.write_text(f'[[rule]]\npath = "ratios.kalman.lfr"\nmin = {huge}\n')
    report = Path(__file__).parent / "data" / "report_schema1.json"
    result = runner.invoke(app, ["check", str(report), "--rules", str(rules)])
    assert result.exit_code == 2, result.output
    assert "'min' is an integer too large for a float (401 digits)" in result.stderr


def test_a_json_line_cut_short_is_placed_within_its_line(tmp_path):
    """The error at the end of a line was counted at column 1 of the next."""
    dump = tmp_path / "cut.jsonl"
    dump.write_text('{"mask": [1, 1], "old_log_probs": [-0.5, -0.2], "log_probs": [-0.5, -0.2]\n')
    result = runner.invoke(app, ["analyze", str(dump)])
    assert result.exit_code == 2
    assert "line 1: not valid JSON (Expecting ',' delimiter at column 74)" in result.stderr


@pytest.mark.skipif(not Path("/proc/self").is_dir(), reason="needs Linux's /proc")
def test_a_folder_where_no_file_can_be_created_is_exit_2_and_leaves_no_output(tmp_path):
    """/proc takes no new file (ENOENT from mkstemp): an internal error (exit 3), and the
    first of two outputs was left behind."""
    first = tmp_path / "report.json"
    dump = Path(__file__).resolve().parents[1] / "sample_data" / "verl" / "step_0008.pt"
    outputs = ["--json", str(first), "--verdict-json", "/proc/x.json"]
    result = runner.invoke(app, ["analyze", str(dump), "-q", *outputs])
    assert result.exit_code == 2, result.output
    assert "/proc/x.json: cannot write the file: no such file or directory" in result.stderr
    assert not first.exists() and list(tmp_path.iterdir()) == []


def test_a_failed_check_keeps_its_junit_file_and_a_failed_output_takes_the_others(tmp_path):
    """Outputs appear together or not at all; a regression gate that fails (exit 1) is
    the command working, and its JUnit file and summary stay."""
    report = Path(__file__).parent / "data" / "report_schema1.json"
    rules = tmp_path / "rules.toml"
    rules.write_text('[[rule]]\npath = "ratios.kalman.lfr"\nmin = 0.999\n')
    junit, summary = tmp_path / "checks.xml", tmp_path / "summary.md"
    arguments = ["check", str(report), "--rules", str(rules), "--junit", str(junit)]
    result = runner.invoke(app, [*arguments, "--summary", str(summary)])
    assert result.exit_code == 1, result.output
    assert junit.exists() and summary.exists()
    junit.unlink()
    summary.unlink()
    if Path("/proc/self").is_dir():  # written after the JUnit file, and refused
        result = runner.invoke(app, [*arguments, "--summary", "/proc/summary.md"])
        assert result.exit_code == 2, result.output
        assert not junit.exists()


def test_check_refuses_a_damaged_timeline_where_it_read_past_it(tmp_path):
    """An infinite k3 in the last step passed `max = 1e-3` (the step was skipped as
    missing); a string too. compare and plot timeline refused them already."""
    import json

    steps = Path(__file__).resolve().parents[1] / "sample_data" / "verl_steps"
    timeline = tmp_path / "timeline.json"
    assert (
        runner.invoke(app, ["timeline", str(steps), "--json", str(timeline), "-q"]).exit_code == 0
    )
    rules = tmp_path / "rules.toml"
    rules.write_text(
        '[[rule]]\nseries = "mismatch.rollout.k3"\nlast = 4\naggregate = "max"\nmax = 1e-3\n'
    )
    assert runner.invoke(app, ["check", str(timeline), "--rules", str(rules)]).exit_code == 0
    damages = {
        "inf": (lambda d: d["steps"][-1]["values"].update({"mismatch.rollout.k3": float("inf")}),
                "values.mismatch.rollout.k3: inf (the writer writes null there)"),
        "str": (lambda d: d["steps"][-1]["values"].update({"mismatch.rollout.k3": "x"}),
                "values.mismatch.rollout.k3: expected float, found str"),
        "order": (lambda d: d["steps"][1].update(step=d["steps"][0]["step"]),
                  "steps.1.step: 2 after 2 (steps increase)"),
    }  # fmt: skip
    for name, (damage, message) in damages.items():
        document = json.loads(timeline.read_text())
        damage(document)
        damaged = tmp_path / f"{name}.json"
        damaged.write_text(json.dumps(document))
        result = runner.invoke(app, ["check", str(damaged), "--rules", str(rules)])
        assert result.exit_code == 2, (name, result.output)
        assert "malformed timeline: steps." in result.stderr and message in result.stderr


def test_an_output_folder_that_is_a_file_and_counts_beyond_any_machine(tmp_path):
    steps = Path(__file__).resolve().parents[1] / "sample_data" / "verl_steps"
    taken = tmp_path / "events"
    taken.write_text("a file")
    out = tmp_path / "timeline.json"
    result = runner.invoke(
        app, ["timeline", str(steps), "-q", "--json", str(out), "--tensorboard", str(taken)]
    )
    assert result.exit_code == 2 and "a file, not a folder" in result.stderr
    assert not out.exists()
    huge = "99999999999999999999"
    for options, message in (
        (["--window", huge], "--window must be at most 2,147,483,647 tokens"),
        (["--max-length", huge], "--max-length must be a whole number of tokens from 1"),
        (["--workers", huge], "--workers must be from 1 to 4,096 processes"),
    ):
        result = runner.invoke(app, ["timeline", str(steps), "-q", "--no-cache", *options])
        assert result.exit_code == 2, result.output
        assert message in result.stderr and result.stderr.count("\n") == 1


@pytest.mark.parametrize(
    ("metric", "damage", "message"),
    [
        ("passk", lambda m: m["pass_at_k"].update({"1": "x"}), "pass_at_k.1: expected a number"),
        ("passk", lambda m: m.update(pass_at_k={"a": 0.5}), "key 'a' is not a budget k"),
        ("passk", lambda m: m["pass_at_k"].update({"1": 5.0}), "5.0 is not a share in [0, 1]"),
        ("ucc", lambda m: m.update(ucc_at_k=[1, 2]), "ucc_at_k: expected an object"),
        ("ucc", lambda m: m["ucc_at_k"].update({"2": -1}), "-1 is not a count of clusters"),
    ],
)
def test_plot_names_a_damaged_evaluation_report(tmp_path, metric, damage, message):
    """A string, a key that is no k, a list: internal errors (exit 3); a Pass@1 of 5:
    drawn without a word."""
    import json

    samples = Path(__file__).resolve().parents[1] / "sample_data" / "samples.jsonl"
    report = tmp_path / "eval.json"
    assert (
        runner.invoke(app, ["eval-ucc", str(samples), "--json", str(report), "-q"]).exit_code == 0
    )
    document = json.loads(report.read_text())
    damage(document["by_method"][next(iter(document["by_method"]))])
    report.write_text(json.dumps(document))
    figure = tmp_path / "figure.png"
    result = runner.invoke(app, ["plot", metric, str(report), "--out", str(figure)])
    assert result.exit_code == 2, result.output
    assert "malformed evaluation report: by_method." in result.stderr and message in result.stderr
    assert not figure.exists()


@pytest.mark.parametrize(
    ("setting", "message"),
    [
        ("sapo.tau_pos=1e40", "--set needs sapo.tau_pos within float32's range (3.4e38)"),
        ("dapo.clip=nan,0.3", "--set needs a finite dapo.clip"),
    ],
)
def test_objectives_settings_beyond_float32_are_bad_input(setting, message):
    """1e40 overflowed the float32 coefficients (exit 3); a pair's NaN passed."""
    dump = Path(__file__).resolve().parents[1] / "sample_data" / "verl" / "step_0008.pt"
    result = runner.invoke(app, ["objectives", str(dump), "-q", "--set", setting])
    assert result.exit_code == 2, result.output
    assert message in result.stderr and result.stderr.count("\n") == 1


def _two_shards(tmp_path: Path) -> list[Path]:
    """The analyze reports of two bundled step files, to be merged (one then damaged)."""
    root = Path(__file__).resolve().parents[1] / "sample_data" / "verl"
    shards = []
    for name in ("step_0008.pt", "step_0016.pt"):
        out = tmp_path / f"{name}.json"
        result = runner.invoke(app, ["analyze", str(root / name), "--json", str(out), "-q"])
        assert result.exit_code == 0, result.output
        shards.append(out)
    return shards


@pytest.mark.parametrize(
    ("cells", "message"),
    [
        ({"a": [1.0] * 8}, "'state.trust_region.cells.a' is not a cell 'size,correct'"),
        ({"8,9": [1.0] * 8}, "'state.trust_region.cells.8,9' is not a cell"),
        ({"8,0": [1.0]}, "'state.trust_region.cells.8,0' holds no list of 8 numbers"),
    ],
)
def test_merge_names_the_shard_whose_cells_are_damaged(tmp_path, cells, message):
    """A cell key not 'size,correct' was an internal error; a short list blamed the other
    shard when the damaged one came first."""
    import json

    shards = _two_shards(tmp_path)
    document = json.loads(shards[0].read_text())
    document["state"]["trust_region"]["cells"] = cells
    shards[0].write_text(json.dumps(document))
    merged = tmp_path / "merged.json"
    result = runner.invoke(app, ["merge", *map(str, shards), "--out", str(merged), "-q"])
    assert result.exit_code == 2, result.output
    assert (
        result.stderr.startswith(f"ratioscope: error: {shards[0]}: ") and message in result.stderr
    )
    assert not merged.exists()


def test_merge_says_a_null_count_is_null(tmp_path):
    """A null in a count of the mismatch partials was read as -inf (the reading of an
    empty log-sum), and the message said 'float -inf'."""
    import json

    dump = Path(__file__).resolve().parents[1] / "sample_data" / "verl" / "step_0008.pt"
    shard = tmp_path / "shard.json"
    assert runner.invoke(app, ["analyze", str(dump), "--json", str(shard), "-q"]).exit_code == 0
    document = json.loads(shard.read_text())
    document["state"]["mismatch"]["policy"]["tokens"] = None
    shard.write_text(json.dumps(document))
    result = runner.invoke(app, ["merge", str(shard), "--out", str(tmp_path / "m.json"), "-q"])
    assert result.exit_code == 2, result.output
    assert "'state.mismatch.policy.tokens' is null, not a count;" in result.stderr


def test_merge_refuses_counts_that_contradict_their_totals(tmp_path):
    """1,000 correct of 128 rows merged into a correct share of 4.2, exit 0."""
    import json

    shards = _two_shards(tmp_path)
    document = json.loads(shards[0].read_text())
    rows = document["state"]["vitals"]["correct_rows"]
    document["state"]["vitals"]["correct"] = 1000
    shards[0].write_text(json.dumps(document))
    merged = tmp_path / "merged.json"
    result = runner.invoke(app, ["merge", *map(str, shards), "--out", str(merged), "-q"])
    assert result.exit_code == 2, result.output
    assert f"'state.vitals.correct' is 1,000, more than 'correct_rows' ({rows:,})" in result.stderr
    assert not merged.exists()
