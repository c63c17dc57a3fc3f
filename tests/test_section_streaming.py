"""Every report section streams: chunked, split-and-merged and one-shot results agree.

For every class of ``section_classes()`` and several real inputs, through the
orchestrator's own entry point (:func:`ratioscope.analysis.pipeline.run_accumulators`, which
feeds per-chunk sections chunks of rows and per-file sections whole files):

(a) feeding each file in small chunks gives the result of feeding it at once;
(b) the input split in two, each part accumulated, written as JSON state, read back and
    merged gives the result of the whole: split between files, and within a file, whose
    own result involves no merge (between groups for sections fed whole files);
(c) ``from_state(state())`` through JSON restores the accumulator exactly.

Results are the typed section dataclasses, compared field by field: integers (counts),
histogram quantiles and extremes exactly, other floats to a relative 1e-9 (sums added in
another order; 1e-15 absolute near 0), and exactly in (c).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, fields, is_dataclass
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from test_sections_objectives import make_arrays, write

import ratioscope
from ratioscope.analysis.pipeline import run_accumulators
from ratioscope.data.params import AnalysisParams
from ratioscope.io.documents import to_jsonable
from ratioscope.io.loaders import LoadOptions
from ratioscope.sections.base import Accumulator
from ratioscope.sections.registry import section_classes

SAMPLE = Path(__file__).resolve().parents[1] / "sample_data"
CLASSES = section_classes()
ONE_SHOT = 1 << 40  # chunk elements: every file in one chunk
REL = 1e-9
#: and absolute, for means that cancel to zero (GRPO advantages sum to 0 in a group)
ABS = 1e-15
#: floats read from counts and exact extremes, equal however the input was cut
EXACT_KEYS = {"quantiles", "min", "max", "lam_median", "threshold", "edges"}


@dataclass(frozen=True)
class Inputs:
    """Files analysed together, the parameters, and the chunk size of (a)."""

    files: tuple[str, ...]
    params: AnalysisParams
    chunk_elements: int
    #: sections these inputs must compute (not None), so that no comparison is vacuous
    computed: tuple[str, ...]
    #: the file whose rows are split in two
    split_file: int = 0


def _kalman_files(directory: Path) -> tuple[str, ...]:
    """Long sequences on which the reference closed form leaves the exact filter."""
    rng = np.random.default_rng(0)
    files = []
    for index in range(2):
        z = torch.tensor(rng.normal(0, 0.05, size=(3, 1500)))
        old = -torch.tensor(rng.gamma(1.0, 0.8, size=(3, 1500)))
        mask = torch.ones(3, 1500, dtype=torch.bool)
        mask[1, 1400:] = False
        path = directory / f"kalman_{index}.pt"
        torch.save({"mask": mask, "old_log_probs": old, "log_probs": old + z}, path)
        files.append(str(path))
    return tuple(files)


def _synthetic_files(directory: Path) -> tuple[str, ...]:
    """GRPO-like batches that take every branch: exact FPA from logits, batch scope
    without groups, no old entropy, no advantages and no correct sequence."""
    no_correct = make_arrays(12)
    no_correct["rewards"][:] = 0.0
    rng = np.random.default_rng(13)
    # policy versions three ways: per token without the trainer's version (lags from the
    # newest), per sequence with it as a number (and the engine's log-probs: the drift
    # split), per token with it as a per-sequence column
    a, b, c = make_arrays(9, vocab=5), make_arrays(10), make_arrays(11)
    a["policy_version"] = rng.integers(4, 8, size=a["mask"].shape)
    b["policy_version"] = rng.integers(2, 6, size=b["mask"].shape[0])
    b["rollout_log_probs"] = b["old_log_probs"] + rng.normal(0, 0.05, b["mask"].shape)
    c["policy_version"] = rng.integers(0, 3, size=c["mask"].shape)
    c["trainer_version"] = np.full(c["mask"].shape[0], 3)
    b_path = write(b, directory / "b.pt", drop=("group",))
    torch.save({**torch.load(b_path), "trainer_version": 6}, b_path)  # a plain number
    return (
        write(a, directory / "a.safetensors"),
        b_path,
        write(c, directory / "c.pt", drop=("old_entropy",)),
        write(no_correct, directory / "d.pt", drop=("advantages",)),
    )


ALL = tuple(cls.name for cls in CLASSES)
#: inputs without a 'minibatch' key compute every section but the staleness table
NO_MINIBATCH = tuple(name for name in ALL if name != "staleness")
#: ... and those without 'policy_version' every section but the lag table
SYNCHRONOUS = tuple(name for name in ALL if name != "policy_lag")
SYNCHRONOUS_NO_MINIBATCH = tuple(name for name in NO_MINIBATCH if name != "policy_lag")


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    """The Kalman scan's float32 matrix products round a row differently with the rows
    beside it when threads split the batch (a few ulp, 1e-9 of a mean that cancels);
    with one thread a row's numbers do not depend on the chunk it is in."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def inputs(tmp_path_factory) -> dict[str, Inputs]:
    directory = tmp_path_factory.mktemp("streaming")
    verl = tuple(str(p) for p in sorted((SAMPLE / "verl").glob("*.pt")))
    return {
        # the last file has logits (exact FPA), the others not; groups, entropies, rewards
        "verl": Inputs(verl, AnalysisParams(), 2_000, SYNCHRONOUS, split_file=-1),
        "synthetic": Inputs(_synthetic_files(directory), AnalysisParams(), 120, NO_MINIBATCH),
        # current/old and current/engine pairs, no groups in one file
        "trl+prime_rl": Inputs(
            (str(SAMPLE / "trl" / "step_0032.pt"), str(SAMPLE / "prime_rl")),
            AnalysisParams(),
            2_000,
            SYNCHRONOUS_NO_MINIBATCH,
        ),
        # the engine's stated sampling settings applied to the logits of a.safetensors
        "truncation": Inputs(
            _synthetic_files(directory),
            AnalysisParams(temperature=0.9, top_p=0.8, top_k=4),
            120,
            ("sampling",),
        ),
        "kalman_reference": Inputs(
            _kalman_files(directory),
            AnalysisParams(kalman_impl="reference", kalman_q=1e-2),
            1_500,
            ("ratios", "mismatch", "tepo"),
        ),
    }


@cache
def _run(cls: type[Accumulator], case: Inputs, files: tuple[str, ...], chunk: int) -> Accumulator:
    (total,) = run_accumulators(
        list(files),
        lambda: [cls(case.params)],
        params=case.params,
        load_options=LoadOptions(),
        chunk_elements=chunk,
    ).totals
    return total


def _json(state: dict[str, Any]) -> Any:
    """The state as the report writer writes it and a reader reads it."""
    return json.loads(json.dumps(to_jsonable(state), allow_nan=False))


def _restored(acc: Accumulator, params: AnalysisParams) -> Accumulator:
    return type(acc).from_state(params, _json(acc.state()))


def assert_same(
    got: Any, expected: Any, rel: float, path: str = "result", ignore: frozenset[str] = frozenset()
) -> None:
    """``got`` equals ``expected`` field by field (see the module docstring), except the
    fields named in ``ignore``."""
    if is_dataclass(expected):
        assert type(got) is type(expected), path
        for f in fields(expected):
            if f.name not in ignore:
                a, b = getattr(got, f.name), getattr(expected, f.name)
                exact = 0.0 if f.name in EXACT_KEYS else rel
                assert_same(a, b, exact, f"{path}.{f.name}", ignore)
    elif isinstance(expected, dict):
        assert isinstance(got, dict) and list(got) == list(expected), path
        for key, value in expected.items():
            exact = 0.0 if key in EXACT_KEYS else rel
            assert_same(got[key], value, exact, f"{path}[{key!r}]", ignore)
    elif isinstance(expected, (list, tuple)):
        assert type(got) is type(expected) and len(got) == len(expected), path
        for index, (a, b) in enumerate(zip(got, expected, strict=True)):
            assert_same(a, b, rel, f"{path}[{index}]", ignore)
    elif isinstance(expected, float):
        assert isinstance(got, float), f"{path}: {got!r} is no float"
        if math.isnan(expected):
            assert math.isnan(got), f"{path}: {got!r} != nan"
        else:
            close = math.isclose(got, expected, rel_tol=rel, abs_tol=ABS if rel else 0.0)
            assert close, f"{path}: {got!r} != {expected!r} (rel {rel:g})"
    else:  # int, bool, str, None: exact
        assert type(got) is type(expected) and got == expected, f"{path}: {got!r} != {expected!r}"


CASES = ("verl", "synthetic", "trl+prime_rl", "truncation", "kalman_reference")
parametrize = pytest.mark.parametrize(
    ("case", "cls"),
    [(case, cls) for case in CASES for cls in CLASSES],
    ids=[f"{case}-{cls.name}" for case in CASES for cls in CLASSES],
)


def _one_shot(cls: type[Accumulator], case: Inputs) -> Accumulator:
    total = _run(cls, case, case.files, ONE_SHOT)
    if cls.name in case.computed:
        assert total.result() is not None, f"{cls.name} not computed on these inputs"
    return total


@parametrize
def test_small_chunks_equal_one_shot(inputs, case, cls):
    case = inputs[case]
    whole = _one_shot(cls, case)
    chunked = _run(cls, case, case.files, case.chunk_elements)
    assert_same(chunked.result(), whole.result(), REL)
    assert chunked.warnings() == whole.warnings()


@parametrize
def test_halves_merged_through_json_equal_the_whole(inputs, case, cls):
    case = inputs[case]
    whole = _one_shot(cls, case)
    half = len(case.files) // 2
    first, second = (
        _restored(_run(cls, case, part, case.chunk_elements), case.params)
        for part in (case.files[:half], case.files[half:])
    )
    first.merge(second)
    assert_same(first.result(), whole.result(), REL)
    assert first.warnings() == whole.warnings()


#: sections whose numbers for a file are not the merge of those of its halves
WHOLE_BATCH = {
    "covariance": "the kernel centres over the file's scope and Clip-Cov counts over the whole "
    "file, so two halves are not the file"
}
#: fields of a section that depend on the whole file, left out of the halves' comparison:
#: the vitals' short/long split is at the file's median length (each half has its own),
#: and the entropy-mechanics covariances are centred over the file (each half its own)
WHOLE_FILE_FIELDS = {
    "vitals": frozenset(
        {
            "short_mean_abs",
            "long_mean_abs",
            "covariance",
            "pg_covariance",
            "predicted_change_per_eta",
        }
    )
}


@parametrize
def test_rows_of_a_file_merged_through_json_equal_the_file(inputs, case, cls):
    """Without a merge between files in the reference, a reduction that is no sum of
    the two halves (a max, a dropped field) shows. Sections fed whole files are split
    between groups."""
    if cls.name in WHOLE_BATCH:
        pytest.skip(WHOLE_BATCH[cls.name])
    case = inputs[case]
    batch = ratioscope.load(case.files[case.split_file])
    rows, end = batch.num_sequences // 2, batch.num_sequences
    if cls.per_file and batch.group is not None:
        groups = batch.group.tolist()
        assert not set(groups[:rows]) & set(groups[rows:]), "the split cuts a group"
    whole, first, second = (
        run_accumulators(
            part, lambda: [cls(case.params)], params=case.params, load_options=LoadOptions()
        ).totals[0]
        for part in (batch, batch.select_rows(0, rows), batch.select_rows(rows, end))
    )
    merged = _restored(first, case.params)
    merged.merge(_restored(second, case.params))
    # the halves are two files to the section: only its count of files per method doubles
    ignore = frozenset({"method_files"}) | WHOLE_FILE_FIELDS.get(cls.name, frozenset())
    assert_same(merged.result(), whole.result(), REL, ignore=ignore)


@parametrize
def test_state_restores_exactly(inputs, case, cls):
    case = inputs[case]
    acc = _one_shot(cls, case)
    restored = _restored(acc, case.params)
    assert _json(restored.state()) == _json(acc.state())
    assert_same(restored.result(), acc.result(), 0.0)
    assert restored.warnings() == acc.warnings()


def test_the_kalman_inputs_reach_a_closed_form_deviation(inputs):
    """Else the cases above would only compare a deviation that was never found."""
    (ratios,) = (cls for cls in CLASSES if cls.name == "ratios")
    deviation = _one_shot(ratios, inputs["kalman_reference"]).result()["kalman"]
    assert deviation.closed_form_deviation.first_index is not None
