"""The covariance section centres on whole groups of a step, joined across its files.

The rollout of tests/test_group_join.py (4 prompts x 4 samples) is written by 2
data-parallel ranks with slime's strided and length-balanced partitions, as capture
part files of one step (slime's own dumps hold the old policy and the engine's, not the
current policy the covariance needs). The split run's covariance section must be the
section of the same rows written as one file (rank 0's rows, then rank 1's), and match a
plain numpy computation on whole groups (which is also the section of one file holding
each group's rows together, to rounding).
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

import ratioscope
from ratioscope.capture import CaptureWriter
from ratioscope.data.trainer_settings import TrainerSettings
from tests.test_group_join import GROUPS, PARTITIONS, REWARDS

WIDTH = 7
STEP = 3


def _rollout(seed: int = 0) -> dict[str, torch.Tensor]:
    rng = np.random.default_rng(seed)
    n = len(GROUPS)
    lengths = rng.integers(2, WIDTH + 1, size=n)
    old = -rng.gamma(1.0, 0.8, size=(n, WIDTH))
    # float32, as a capture stores them (the section keeps c, w, w~ in float32 then)
    return {
        "mask": torch.from_numpy(np.arange(WIDTH)[None, :] < lengths[:, None]),
        "old_log_probs": torch.from_numpy(old).float(),
        "log_probs": torch.from_numpy(old + rng.normal(0, 0.3, size=(n, WIDTH))).float(),
        "advantages": torch.from_numpy(np.repeat(rng.normal(size=n)[:, None], WIDTH, 1)).float(),
        "rewards": torch.tensor(REWARDS, dtype=torch.float64),
    }


def _write(root, ranks, rollout, step=STEP, settings=None, labels=None) -> None:
    """One part file per rank; ``ranks``: the rollout positions each rank holds."""
    labels = labels or [f"prompt-{g}" for g in GROUPS]
    for rank, positions in enumerate(ranks):
        index = torch.tensor(positions)
        with CaptureWriter(root, rank=rank, trainer_settings=settings) as writer:
            writer.write(
                step,
                **{key: value[index] for key, value in rollout.items()},
                group=[labels[p] for p in positions],
            )


def _numpy_reference(rollout, members) -> dict[str, float]:
    """The section's exact quantities on the groups ``members`` (lists of positions),
    by plain numpy in float64: c, w, w~ per group (population sigma), over their valid
    tokens (the section stores them in float32: 1e-6 relative)."""
    mask = rollout["mask"].numpy()
    cs, ws, norms, mags = [], [], [], []
    for positions in members:
        at = mask[positions]
        lp = rollout["log_probs"].double().numpy()[positions][at]
        a = rollout["advantages"].double().numpy()[positions][at]
        c = (lp - lp.mean()) * (a - a.mean())
        sigma = c.std()
        w = (
            np.exp(-(c**2) / (2 * sigma**2))
            if sigma > 1e-12 * np.sqrt(np.mean(c**2))
            else 1 + 0 * c
        )
        cs.append(c)
        ws.append(w)
        norms.append(w * c.size / w.sum())
        mags.append(np.abs(a))
    c, w, norm, mag = (np.concatenate(x) for x in (cs, ws, norms, mags))
    return {
        "tokens": c.size,
        "c_mean": c.mean(),
        "c_max": c.max(),
        "w_mean": w.mean(),
        "removed": 1 - (w * mag).sum() / mag.sum(),
        "removed_normalised": 1 - (norm * mag).sum() / mag.sum(),
    }


def _section(path, **options):
    report = ratioscope.analyze(path, sections=["covariance"], per_sequence=True, **options)
    return report, report.to_dict()["covariance"]


def _assert_same(mine, theirs, where="covariance") -> None:
    """Equal: counts exactly, floats to 1e-12 relative (sums added per chunk, and a
    file is a chunk of its own: the last bit may differ; the compiled path adds them
    token by token and gives the same bits)."""
    if isinstance(mine, dict):
        assert mine.keys() == theirs.keys(), where
        for key in mine:
            _assert_same(mine[key], theirs[key], f"{where}.{key}")
    elif isinstance(mine, list):
        assert len(mine) == len(theirs), where
        for number, (a, b) in enumerate(zip(mine, theirs, strict=True)):
            _assert_same(a, b, f"{where}[{number}]")
    elif isinstance(mine, float):
        assert mine == pytest.approx(theirs, rel=1e-12, abs=1e-15, nan_ok=True), where
    else:
        assert mine == theirs, where


def _whole_groups() -> list[list[int]]:
    return [[p for p in range(len(GROUPS)) if GROUPS[p] == g] for g in sorted(set(GROUPS))]


@pytest.mark.parametrize("layout", ["strided", "balanced"])
def test_split_ranks_give_the_section_of_one_file(tmp_path, layout):
    rollout = _rollout()
    ranks = PARTITIONS[layout]
    _write(tmp_path / "split", ranks, rollout)
    _write(tmp_path / "one", [[p for part in ranks for p in part]], rollout)
    _write(tmp_path / "grouped", [[p for g in _whole_groups() for p in g]], rollout)
    split, split_dict = _section(tmp_path / "split")
    one, one_dict = _section(tmp_path / "one")
    assert split_dict.pop("scope_files") == {"group": 2}
    assert one_dict.pop("scope_files") == {"group": 1}
    _assert_same(split_dict, one_dict)
    assert split.covariance.scopes == 4
    assert not any("covariance" in w or "per file" in w for w in split.warnings)
    # per sequence: each row's mean c and w are those of the same rollout row in one file
    order = [p for part in ranks for p in part]
    columns = ("cov_c_mean", "cov_weight_mean", "cov_weight_norm_mean")
    mine = split.sequences.frame()
    theirs = one.sequences.frame()
    by_position = {order[i]: [theirs[c][i] for c in columns] for i in range(len(order))}
    for number, (file, row) in enumerate(zip(mine["file"], mine["row"], strict=True)):
        rank = int(file.rsplit("rank_", 1)[1][:5])
        position = ranks[rank][row]
        assert [mine[c][number] for c in columns] == pytest.approx(by_position[position], rel=1e-12)
    # independent checks: numpy on whole groups, and one file holding each group together
    expected = _numpy_reference(rollout, _whole_groups())
    section = split.covariance
    assert section.tokens == expected["tokens"]
    assert section.c.mean == pytest.approx(expected["c_mean"], rel=1e-6, abs=1e-9)
    assert section.c.max == pytest.approx(expected["c_max"], rel=1e-6)
    assert section.weights.distribution.mean == pytest.approx(expected["w_mean"], rel=1e-6)
    assert section.advantage_mass.removed == pytest.approx(expected["removed"], rel=1e-6)
    assert section.advantage_mass.removed_normalised == pytest.approx(
        expected["removed_normalised"], rel=1e-6, abs=1e-9
    )
    grouped = _section(tmp_path / "grouped")[0].covariance
    assert grouped.weights.fraction_below == section.weights.fraction_below
    assert grouped.weights.distribution.mean == pytest.approx(section.weights.distribution.mean)
    # centred on each rank's part of a group instead, the numbers would differ
    per_rank = [
        [[p for p in part if GROUPS[p] == g] for g in sorted({GROUPS[p] for p in part})]
        for part in ranks
    ]
    cut = _numpy_reference(rollout, [m for members in per_rank for m in members])
    assert cut["w_mean"] != pytest.approx(expected["w_mean"], rel=1e-6)


@pytest.mark.parametrize("stream_bytes", [0, 1 << 60])
def test_streamed_in_small_chunks_gives_the_whole_read(tmp_path, stream_bytes):
    _write(tmp_path, PARTITIONS["strided"], _rollout(1))
    whole = _section(tmp_path, stream_bytes=1 << 60)[1]
    chunked = _section(tmp_path, stream_bytes=stream_bytes, chunk_elements=3 * WIDTH)[1]
    assert chunked["tokens"] == whole["tokens"] and chunked["scopes"] == whole["scopes"] == 4
    assert chunked["weight_histogram"] == whole["weight_histogram"]
    assert chunked["clip_cov"] == whole["clip_cov"]
    weights, reference = chunked["weights"]["distribution"], whole["weights"]["distribution"]
    assert weights["mean"] == pytest.approx(reference["mean"], rel=1e-12)
    assert weights["quantiles"] == reference["quantiles"]
    assert chunked["c"]["quantiles"] == whole["c"]["quantiles"]


def test_a_group_short_of_the_group_size_is_left_out_and_counted(tmp_path):
    """Group 1 lost a sample (rank 1 never wrote position 7): with the recorded group
    size 4 its three samples are in no statistic and their columns are NaN."""
    rollout = _rollout(2)
    settings = TrainerSettings("trl", {"num_generations": 4})
    ranks = [[p for p in part if p != 7] for part in PARTITIONS["strided"]]
    _write(tmp_path, ranks, rollout, settings=settings)
    report, _ = _section(tmp_path)
    expected = _numpy_reference(rollout, [g for g in _whole_groups() if 7 not in g])
    section = report.covariance
    assert (section.tokens, section.scopes) == (expected["tokens"], 3)
    assert section.c.mean == pytest.approx(expected["c_mean"], rel=1e-6, abs=1e-9)
    assert section.weights.distribution.mean == pytest.approx(expected["w_mean"], rel=1e-6)
    assert any(
        w.startswith("covariance: 1 group(s) (3 samples)") and "left out" in w
        for w in report.warnings
    )
    frame = report.sequences.frame()
    short = frame.filter(frame["group"] == "prompt-1")
    assert short.height == 3 and all(math.isnan(v) for v in short["cov_c_mean"])
    assert not any(math.isnan(v) for v in frame.filter(frame["group"] != "prompt-1")["cov_c_mean"])
    # the group size unknown: the three samples count as a group
    assert (
        ratioscope.analyze(tmp_path, sections=["covariance"], trainer="none").covariance.scopes == 4
    )


def test_a_group_cut_at_a_step_boundary_is_completed_from_the_next_step(tmp_path):
    """Group 3's last two samples are written in the next step (TRL with
    steps_per_generation > gradient_accumulation_steps): joined there, it is whole."""
    rollout = _rollout(3)
    settings = TrainerSettings("trl", {"num_generations": 4})
    first = [p for p in range(16) if p not in (14, 15)]
    _write(tmp_path, [first], rollout, step=STEP, settings=settings)
    _write(tmp_path, [[14, 15]], rollout, step=STEP + 1, settings=settings)
    report, _ = _section(tmp_path)
    expected = _numpy_reference(rollout, _whole_groups())
    section = report.covariance
    assert (section.tokens, section.scopes) == (expected["tokens"], 4)
    assert section.weights.distribution.mean == pytest.approx(expected["w_mean"], rel=1e-6)
    assert section.advantage_mass.removed == pytest.approx(expected["removed"], rel=1e-6)
    assert any(w.startswith("covariance: 1 group(s) incomplete") for w in report.warnings)


def test_files_holding_whole_groups_stay_batches_of_their_own(tmp_path):
    """Rank 0 holds groups 0 and 1 whole, ranks 1 and 2 share groups 2 and 3: rank 0 is
    a batch of its own (its Clip-Cov and KL-Cov budgets its own), ranks 1 and 2 one."""
    rollout = _rollout(4)
    whole = _whole_groups()
    ranks = [whole[0] + whole[1], [*whole[2][:2], *whole[3][:3]], [*whole[2][2:], whole[3][3]]]
    _write(tmp_path / "run", ranks, rollout)
    _write(tmp_path / "rank0", [ranks[0]], rollout)
    _write(tmp_path / "rest", [ranks[1] + ranks[2]], rollout)
    section = _section(tmp_path / "run")[1]
    parts = [_section(tmp_path / name)[1] for name in ("rank0", "rest")]
    assert section["scopes"] == 4 and section["tokens"] == sum(p["tokens"] for p in parts)
    for key in ("clip_cov", "kl_cov"):
        for field in ("count", "eligible", "total"):
            assert section[key][field] == sum(p[key][field] for p in parts), (key, field)
    assert section["weight_histogram"]["counts"] == [
        a + b for a, b in zip(*(p["weight_histogram"]["counts"] for p in parts), strict=True)
    ]


def test_a_batch_in_memory_is_read_again_for_its_whole_groups():
    """A batch given in memory (the capture's report mode), here rows 2.. of a file:
    with the group size 4 given, group 0 (two rows left) is left out."""
    from ratioscope.data.batch import TokenBatch

    rollout = _rollout(5)
    batch = TokenBatch.from_tensors({**rollout, "group": torch.tensor(GROUPS)}).select_rows(2, 16)
    settings = TrainerSettings("trl", {"num_generations": 4})
    report = ratioscope.analyze(
        batch, sections=["covariance"], per_sequence=True, trainer_settings=settings
    )
    expected = _numpy_reference(rollout, _whole_groups()[1:])
    section = report.covariance
    assert (section.tokens, section.scopes) == (expected["tokens"], 3)
    assert section.weights.distribution.mean == pytest.approx(expected["w_mean"], rel=1e-6)
    values = report.sequences.frame()["cov_c_mean"].to_list()
    assert all(math.isnan(v) for v in values[:2]) and not any(math.isnan(v) for v in values[2:])
