"""The vitals section: formulas against plain loops, the section against the raw dump."""

from __future__ import annotations

import json
import math
import statistics
from pathlib import Path

import numpy as np
import pytest
import torch
from typer.testing import CliRunner

import ratioscope
from ratioscope.cli import app
from ratioscope.data.params import AnalysisParams
from ratioscope.functional.vitals import (
    advantage_vital_sums,
    entropy_by_correctness,
    entropy_change_sums,
    equal_reward_groups,
    long_rows,
    masked_sums,
    row_mean_abs,
)
from ratioscope.report.model import Report

ROOT = Path(__file__).resolve().parents[1]
VERL = ROOT / "sample_data" / "verl"
runner = CliRunner()


def _random(seed: int = 0, rows: int = 9, width: int = 12):
    rng = np.random.default_rng(seed)
    lengths = rng.integers(0, width + 1, size=rows)
    lengths[0] = width
    mask = torch.tensor(np.arange(width)[None, :] < lengths[:, None])
    entropy = torch.tensor(rng.gamma(1.0, 0.5, size=(rows, width)))
    old = torch.tensor(rng.gamma(1.0, 0.5, size=(rows, width)))
    adv = torch.tensor(rng.choice([0.0, -1.5, 0.5, 2.0], size=(rows, width)))
    correct = torch.tensor(rng.random(rows) < 0.5)
    return mask, entropy, old, adv, correct


def test_token_sums_match_a_loop():
    mask, entropy, old, _, correct = _random()
    valid = [(i, t) for i in range(mask.shape[0]) for t in range(mask.shape[1]) if bool(mask[i, t])]
    assert masked_sums(entropy, mask).mean() == pytest.approx(
        sum(float(entropy[i, t]) for i, t in valid) / len(valid), rel=1e-12
    )
    change = entropy_change_sums(entropy, old, mask)
    expected = [float(entropy[i, t]) - float(old[i, t]) for i, t in valid]
    assert change.count == len(valid)
    assert change.mean() == pytest.approx(sum(expected) / len(expected), rel=1e-12)
    right, wrong = entropy_by_correctness(entropy, mask, correct)
    for sums, flag in ((right, True), (wrong, False)):
        values = [float(entropy[i, t]) for i, t in valid if bool(correct[i]) == flag]
        assert sums.count == len(values)
        assert sums.total == pytest.approx(sum(values), rel=1e-12)


def test_long_rows_split_at_the_median_of_non_empty_rows():
    lengths = torch.tensor([5, 0, 3, 9, 7, 3])
    median = statistics.median([5, 3, 9, 7, 3])  # 5
    assert long_rows(lengths).tolist() == [n > median for n in [5, 0, 3, 9, 7, 3]]
    even = torch.tensor([1, 2, 3, 4])  # median 2.5
    assert long_rows(even).tolist() == [False, False, True, True]
    assert not long_rows(torch.zeros(3, dtype=torch.long)).any()


def test_advantage_sums_match_a_loop():
    mask, _, _, adv, _ = _random(1)
    lengths = mask.sum(dim=1)
    row_abs, row_tokens = row_mean_abs(adv, mask)
    zero = int(((adv == 0) & mask).sum())
    sums = advantage_vital_sums(row_abs, row_tokens, zero, lengths)
    present = [n for n in lengths.tolist() if n > 0]
    median = statistics.median(present)
    short, long, total, tokens, zeros = [], [], 0.0, 0, 0
    for i in range(mask.shape[0]):
        values = [abs(float(adv[i, t])) for t in range(mask.shape[1]) if bool(mask[i, t])]
        zeros += sum(1 for t in range(mask.shape[1]) if bool(mask[i, t]) and adv[i, t] == 0)
        total += sum(values)
        tokens += len(values)
        if values:
            (long if len(values) > median else short).append(sum(values) / len(values))
    assert (sums.tokens, sums.zero, sums.short_rows, sums.long_rows) == (
        tokens,
        zeros,
        len(short),
        len(long),
    )
    assert sums.abs_sum == pytest.approx(total, rel=1e-12)
    assert sums.short_sum == pytest.approx(sum(short), rel=1e-12)
    assert sums.long_sum == pytest.approx(sum(long), rel=1e-12)


def test_equal_reward_groups_match_a_loop():
    rewards = torch.tensor([1.0, 1.0, 0.0, 0.0, 0.5, 1.0, 2.0, 2.0, 0.0])
    group = torch.tensor([7, 7, 3, 3, 5, 5, 9, 9, 4])
    correct = torch.tensor([True, True, False, False, True, True, True, False, False])
    counts = equal_reward_groups(rewards, group, correct)
    by_group: dict[int, list[int]] = {}
    for index, g in enumerate(group.tolist()):
        by_group.setdefault(g, []).append(index)
    equal = [g for g, rows in by_group.items() if len({float(rewards[i]) for i in rows}) == 1]
    solved = [g for g in equal if all(bool(correct[i]) for i in by_group[g])]
    failed = [g for g in equal if not any(bool(correct[i]) for i in by_group[g])]
    assert (counts.groups, counts.equal, counts.solved, counts.failed) == (
        len(by_group),
        len(equal),
        len(solved),
        len(failed),
    )
    assert (counts.equal, counts.solved, counts.failed) == (4, 1, 2)  # 9 and 4: equal, mixed/failed


def _raw(path: Path) -> dict[str, torch.Tensor]:
    return torch.load(path, weights_only=True)


@pytest.fixture(scope="module")
def verl_report() -> Report:
    return ratioscope.analyze(VERL)


def test_the_section_equals_the_dump_computed_directly(verl_report):
    vitals = verl_report.vitals
    assert vitals is not None
    entropy_total = old_total = change_total = tokens = 0.0
    lengths: list[int] = []
    rewards: list[float] = []
    at_limit = zero = 0
    abs_total = 0.0
    equal = groups = 0
    entropy_correct: list[float] = []
    for path in sorted(VERL.glob("*.pt")):
        raw = _raw(path)
        mask = raw["response_mask"].bool()
        width = mask.shape[1]
        ent, old = raw["entropys"].double(), raw["old_entropy"].double()
        entropy_total += float(ent[mask].sum())
        old_total += float(old[mask].sum())
        change_total += float((ent - old)[mask].sum())
        tokens += int(mask.sum())
        row_lengths = mask.sum(dim=1).tolist()
        lengths += row_lengths
        at_limit += sum(1 for n in row_lengths if n >= width)
        reward = (raw["token_level_scores"].double() * mask).sum(dim=1)
        rewards += reward.tolist()
        for i in range(mask.shape[0]):
            if reward[i] > 0:
                entropy_correct += ent[i][mask[i]].tolist()
        adv = raw["advantages"].double()
        abs_total += float(adv.abs()[mask].sum())
        zero += int(((adv == 0) & mask).sum())
        members: dict[str, list[float]] = {}
        for uid, value in zip(raw["uid"], reward.tolist(), strict=True):
            members.setdefault(uid, []).append(value)
        groups += len(members)
        equal += sum(1 for values in members.values() if len(set(values)) == 1)
    assert vitals.entropy is not None and vitals.entropy.mean is not None
    assert vitals.entropy.mean == pytest.approx(entropy_total / tokens, rel=1e-9)
    assert vitals.entropy.old_mean == pytest.approx(old_total / tokens, rel=1e-9)
    assert vitals.entropy.change_mean == pytest.approx(change_total / tokens, rel=1e-9)
    assert vitals.entropy.correct_mean == pytest.approx(statistics.fmean(entropy_correct))
    assert vitals.length.mean == pytest.approx(statistics.fmean(lengths), rel=1e-12)
    assert vitals.length.distribution.max == max(lengths)
    assert (vitals.length.at_limit, vitals.length.limit) == (at_limit, 152)
    assert vitals.length.limit_source == "padded width" and "padded width" in vitals.length.note
    assert vitals.reward is not None
    assert vitals.reward.mean == pytest.approx(statistics.fmean(rewards), rel=1e-12)
    assert vitals.reward.std == pytest.approx(statistics.pstdev(rewards), rel=1e-9)
    assert vitals.correct_share == pytest.approx(sum(r > 0 for r in rewards) / len(rewards))
    assert vitals.advantages is not None
    assert vitals.advantages.mean_abs == pytest.approx(abs_total / tokens, rel=1e-12)
    assert vitals.advantages.zero_share == pytest.approx(zero / tokens, rel=1e-12)
    groups_section = vitals.equal_reward_groups
    assert groups_section is not None
    assert (groups_section.groups, groups_section.equal) == (groups, equal)
    assert f"{equal} of {groups} groups" in groups_section.text


def test_the_section_reads_back_from_json_and_old_reports_have_none(verl_report):
    document = json.loads(json.dumps(verl_report.to_dict()))
    assert Report.from_dict(document).vitals == verl_report.vitals
    del document["vitals"], document["state"]["vitals"]
    assert Report.from_dict(document).vitals is None


def test_max_length_sets_the_limit_and_its_source(tmp_path):
    report = ratioscope.analyze(VERL / "step_0008.pt", params=AnalysisParams(max_length=140))
    length = report.vitals.length
    raw = _raw(VERL / "step_0008.pt")
    lengths = raw["response_mask"].bool().sum(dim=1)
    assert (length.limit, length.limit_source, length.note) == (140, "option", None)
    assert length.at_limit == int((lengths >= 140).sum())
    assert report.params["analysis"]["max_length"] == 140
    recorded = AnalysisParams(max_length=140, max_length_source="trainer settings")
    from_settings = ratioscope.analyze(VERL / "step_0008.pt", params=recorded).vitals.length
    assert (from_settings.limit, from_settings.limit_source) == (140, "trainer settings")
    # unset, the parameter is not written: the block is that of reports made before it
    assert "max_length" not in ratioscope.analyze(VERL / "step_0008.pt").params["analysis"]
    refused = runner.invoke(app, ["analyze", str(VERL / "step_0008.pt"), "--max-length", "0"])
    assert refused.exit_code == 2 and "--max-length" in refused.stderr
    with pytest.raises(ratioscope.errors.ParameterError, match="max_length"):
        AnalysisParams(max_length=2.5)  # type: ignore[arg-type]


def test_a_dump_without_entropy_or_rewards_still_has_lengths(tmp_path):
    mask = torch.ones(4, 6, dtype=torch.bool)
    mask[1, 3:] = False
    old = torch.full((4, 6), -1.0)
    path = tmp_path / "bare.pt"
    torch.save({"mask": mask, "old_log_probs": old, "log_probs": old + 0.01}, path)
    vitals = ratioscope.analyze(path).vitals
    assert vitals is not None
    assert (vitals.entropy, vitals.reward, vitals.advantages, vitals.correct_share) == (
        None,
        None,
        None,
        None,
    )
    assert vitals.length.mean == pytest.approx((6 * 3 + 3) / 4)
    assert vitals.length.at_limit == 3 and math.isclose(vitals.length.at_limit_share, 0.75)


def test_analyze_prints_the_vitals_table():
    result = runner.invoke(app, ["analyze", str(VERL / "step_0008.pt")])
    assert result.exit_code == 0
    out = result.stdout
    for label in ("token entropy", "response length", "equal-reward groups", "at the limit"):
        assert label in out


def test_timeline_vitals_per_step_equal_each_dump_computed_directly():
    """Done-when of issue 23: the timeline JSON's vitals of every step of the bundled run
    against the dump itself (torch.load and the plain formulas)."""
    steps = sorted((ROOT / "sample_data" / "verl_steps").glob("step_*.pt"))
    document = ratioscope.timeline(steps, sections=["vitals"]).to_dict()
    assert [item["step"] for item in document["steps"]] == [int(p.stem[5:]) for p in steps]
    for item, path in zip(document["steps"], steps, strict=True):
        raw = _raw(path)
        mask = raw["response_mask"].bool()
        entropy = raw["entropys"].double()
        # mean token entropy over valid tokens, as a loop over rows
        total, count = 0.0, 0
        for row, valid in zip(entropy, mask, strict=True):
            total += float(row[valid].sum())
            count += int(valid.sum())
        lengths = [int(valid.sum()) for valid in mask]
        rewards = [
            float((s * v).sum()) for s, v in zip(raw["token_level_scores"], mask, strict=True)
        ]
        values = item["values"]
        assert values["vitals.entropy.mean"] == pytest.approx(total / count, rel=1e-9)
        assert values["vitals.length.mean"] == pytest.approx(sum(lengths) / len(lengths))
        assert values["vitals.reward.mean"] == pytest.approx(sum(rewards) / len(rewards))
        change = (entropy - raw["old_entropy"].double())[mask].mean()
        assert values["vitals.entropy.change_mean"] == pytest.approx(float(change), rel=1e-9)
        width = mask.shape[1]
        at_limit = sum(1 for n in lengths if n >= width) / len(lengths)
        assert values["vitals.length.at_limit_share"] == pytest.approx(at_limit)
        x = raw["old_log_probs"].double()[mask].numpy()
        a = raw["advantages"].double()[mask].numpy()
        covariance = float(np.mean((x - x.mean()) * (a - a.mean())))
        assert values["vitals.entropy_mechanics.covariance"] == pytest.approx(covariance, rel=1e-9)
    mechanics = document["entropy_mechanics"]
    assert mechanics["steps"] == len(steps) and len(mechanics["predicted"]) == len(steps)


def _plain_covariance(xs: list[float], ys: list[float]) -> float:
    """(1/n) sum (x - mean x)(y - mean y), as a loop."""
    n = len(xs)
    mx, my = sum(xs) / n, sum(ys) / n
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / n


def test_entropy_mechanics_covariances_equal_a_plain_loop():
    """Cui et al. 2025, Theorems 1-2: Cov(log pi_k, A) and Cov(log pi_k, pi_k A) over the
    valid tokens of each file (log pi_k: the behaviour policy's old_log_probs), pooled
    within files."""
    paths = sorted(VERL.glob("*.pt"))[:2]
    comoment = pg_comoment = 0.0
    tokens = 0
    for path in paths:
        raw = _raw(path)
        mask = raw["response_mask"].bool()
        xs, ys = [], []
        for row in range(mask.shape[0]):
            for t in range(mask.shape[1]):
                if mask[row, t]:
                    xs.append(float(raw["old_log_probs"][row, t]))
                    ys.append(float(raw["advantages"][row, t]))
        pys = [math.exp(x) * y for x, y in zip(xs, ys, strict=True)]
        comoment += _plain_covariance(xs, ys) * len(xs)
        pg_comoment += _plain_covariance(xs, pys) * len(xs)
        tokens += len(xs)
    mechanics = ratioscope.analyze(paths, sections=["vitals"]).vitals.entropy_mechanics
    assert mechanics is not None and mechanics.log_prob == "old_log_probs"
    assert mechanics.tokens == tokens
    assert mechanics.covariance == pytest.approx(comoment / tokens, rel=1e-9)
    assert mechanics.pg_covariance == pytest.approx(pg_comoment / tokens, rel=1e-9)
    assert mechanics.predicted_change_per_eta == -mechanics.covariance
    # one file in small chunks: Chan's merge of the chunks' co-moments is the file's
    one = ratioscope.analyze(paths[0], sections=["vitals"], chunk_elements=700)
    whole = ratioscope.analyze(paths[0], sections=["vitals"])
    assert one.vitals.entropy_mechanics.covariance == pytest.approx(
        whole.vitals.entropy_mechanics.covariance, rel=1e-12
    )


def test_the_fit_of_a_run_equals_numpy():
    from ratioscope.functional.vitals import fit_entropy_mechanics

    rng = np.random.default_rng(3)
    covariance = rng.normal(0.01, 0.005, size=12)
    observed = -0.02 * covariance + rng.normal(0, 1e-5, size=12)
    obs: list[float | None] = list(observed)
    cov: list[float | None] = list(covariance)
    obs[4] = None  # a step without entropies: left out of the fit, predicted still
    fit = fit_entropy_mechanics(obs, cov)
    keep = [i for i in range(12) if i != 4]
    eta, *_ = np.linalg.lstsq(-covariance[keep, None], observed[keep], rcond=None)
    assert fit.steps == 11
    assert fit.eta == pytest.approx(float(eta[0]), rel=1e-9)
    r = np.corrcoef(observed[keep], -covariance[keep])[0, 1]
    assert fit.correlation == pytest.approx(float(r), rel=1e-9)
    assert fit.predicted[4] == pytest.approx(-fit.eta * covariance[4])
    expected = np.mean(np.sign(observed[keep]) == np.sign(-covariance[keep]))
    assert fit.sign_agreement == pytest.approx(float(expected))
    assert fit_entropy_mechanics([1.0, None], [None, 2.0]).steps == 0
    assert fit_entropy_mechanics([1.0, 2.0], [0.0, 0.0]).eta is None


PRIME_RL = Path(__file__).resolve().parents[1] / "sample_data" / "prime_rl"


def _prime_rl_lengths() -> list[int]:
    """The trained tokens of each sample of the bundled prime-rl export, read from its
    JSON lines without ratioscope (the sample holds no rl_weights)."""
    import json

    lengths = []
    for path in sorted(PRIME_RL.rglob("*.jsonl")):
        for line in path.read_text().splitlines():
            record = json.loads(line)
            assert "rl_weights" not in record
            lengths.append(sum(1 for m in record["loss_mask"] if m))
    return lengths


@pytest.mark.parametrize("chunk_elements", [None, 2_000])
def test_rows_that_hold_the_prompt_have_no_assumed_length_limit(chunk_elements):
    """prime-rl's rows hold the prompt before the response: their padded width (159 on
    the bundled export) is no response limit, and every response was 'below' it (0 %).
    Not judged now; the note names the longest response and its count, the same however
    the file is cut into chunks."""
    lengths = _prime_rl_lengths()
    longest = max(lengths)
    reach = lengths.count(longest)
    report = ratioscope.analyze(PRIME_RL, sections=["vitals"], chunk_elements=chunk_elements)
    length = report.vitals.length
    assert (length.limit, length.at_limit, length.at_limit_share) == (None, None, None)
    assert length.limit_source == "unknown" and length.limits == []
    assert f"the longest response, {longest} tokens, is reached by {reach} of {len(lengths)}" in (
        length.note
    )
    assert f"--max-length {longest}" in length.note
    assert not [f for f in ratioscope.verdict(report).findings if f.key.startswith("vitals.length")]


def test_a_stated_limit_judges_rows_that_hold_the_prompt():
    lengths = _prime_rl_lengths()
    report = ratioscope.analyze(PRIME_RL, sections=["vitals"], max_length=150)
    length = report.vitals.length
    assert (length.limit, length.limit_source) == (150, "option")
    assert length.at_limit == sum(n >= 150 for n in lengths)
    assert length.at_limit_share == pytest.approx(length.at_limit / len(lengths))
    assert length.note is None
