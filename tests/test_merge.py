"""merge: shard reports combine into the report of the whole run.

Random splits of a dump (at group boundaries, as shards of a real run are whole steps or
ranks) are analysed separately and merged; the result must equal analysing the shards
together exactly (the same accumulators in the same order), and equal the analysis of
the unsplit dump up to the order of floating-point sums.
"""

from __future__ import annotations

import itertools
import json

import numpy as np
import pytest
import torch
from documents import assert_documents_close
from dumps import make_reference
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

import ratioscope
from ratioscope.analysis.pipeline import merge_reports
from ratioscope.cli import app

runner = CliRunner()


def save_rows(ref, rows, path):
    sel = list(rows)
    torch.save(
        {
            "mask": torch.tensor(ref.mask[sel]),
            "log_probs": torch.tensor(ref.log_probs[sel], dtype=torch.float32),
            "old_log_probs": torch.tensor(ref.old_log_probs[sel], dtype=torch.float32),
            "ref_log_probs": torch.tensor(ref.ref_log_probs[sel], dtype=torch.float32),
            "advantages": torch.tensor(ref.advantages[sel], dtype=torch.float32),
            "entropy": torch.tensor(ref.entropy[sel], dtype=torch.float32),
            "old_entropy": torch.tensor(ref.entropy[sel][:, ::-1].copy(), dtype=torch.float32),
            "rewards": torch.tensor(ref.rewards[sel]),
            "group": [ref.group[i] for i in sel],
        },
        path,
    )
    return path


def strip(document):
    document = dict(document)
    for key in ("tool", "inputs", "state"):
        document.pop(key, None)
    return document


@settings(
    max_examples=6,
    phases=[Phase.explicit, Phase.generate],
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(seed=st.integers(0, 1000), cuts=st.lists(st.integers(1, 5), min_size=1, max_size=3))
def test_random_group_aligned_splits_merge_to_the_whole(tmp_path_factory, seed, cuts):
    directory = tmp_path_factory.mktemp("shards")
    ref = make_reference(seed=seed, rows=24, width=40, group_size=4)
    boundaries = sorted({4 * c for c in cuts if 4 * c < 24})
    edges = [0, *boundaries, 24]
    shards = [
        save_rows(ref, range(a, b), directory / f"shard_{i}.pt")
        for i, (a, b) in enumerate(itertools.pairwise(edges))
    ]
    whole = save_rows(ref, range(24), directory / "whole.pt")
    params = {"cov_scope": "group"}
    merged = merge_reports([ratioscope.analyze(s, **params).to_dict() for s in shards])
    together = ratioscope.analyze(shards, **params)
    # exactly the same accumulators merged in the same order
    assert json.dumps(strip(merged.to_dict())) == json.dumps(strip(together.to_dict()))
    # against the unsplit dump: counts and histograms exact, sums up to rounding order;
    # what is defined per file (Clip-Cov/KL-Cov budgets are per batch, file counts, the
    # file names in warnings, the vitals' short/long split at each file's median length
    # and their entropy-mechanics covariances centred over each file)
    # differs by construction
    single = strip(ratioscope.analyze(whole, **params).to_dict())
    merged_document = strip(merged.to_dict())
    for document in (single, merged_document):
        document.pop("warnings")
        for key in ("scope_files", "clip_cov", "kl_cov"):
            document["covariance"].pop(key)
        document["future_policy"].pop("method_files")
        for key in ("short_mean_abs", "long_mean_abs"):
            document["vitals"]["advantages"].pop(key)
        # centred over each file: the shards' covariances are not the whole's
        document["vitals"].pop("entropy_mechanics")
    assert_documents_close(merged_document, single, rel=1e-9, abs_tol=1e-12)


def test_merge_cli_refuses_different_parameters_and_non_analyze_reports(tmp_path):
    ref = make_reference(seed=1)
    dump = save_rows(ref, range(8), tmp_path / "d.pt")
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    assert runner.invoke(app, ["analyze", str(dump), "--json", str(a), "-q"]).exit_code == 0
    assert (
        runner.invoke(
            app, ["analyze", str(dump), "--window", "10", "--json", str(b), "-q"]
        ).exit_code
        == 0
    )
    out = tmp_path / "m.json"
    result = runner.invoke(app, ["merge", str(a), str(b), "--out", str(out)])
    assert (
        result.exit_code == 2
        and "different parameters" in result.stderr
        and "window" in result.stderr
    )
    assert not out.exists()
    other = tmp_path / "eval.json"
    other.write_text(json.dumps({"schema_version": 1, "by_method": {}}))
    result = runner.invoke(app, ["merge", str(a), str(other), "--out", str(out)])
    assert result.exit_code == 2 and "not an analyze report" in result.stderr
    result = runner.invoke(app, ["merge", str(a), str(a), "--out", str(out), "-q"])
    assert result.exit_code == 2 and "again (same path and sha256" in result.stderr
    assert not out.exists()
    # the same dump under another name is a different shard: merged, counted twice
    copy = tmp_path / "copy.pt"
    copy.write_bytes(dump.read_bytes())
    c = tmp_path / "c.json"
    assert runner.invoke(app, ["analyze", str(copy), "--json", str(c), "-q"]).exit_code == 0
    result = runner.invoke(app, ["merge", str(a), str(c), "--out", str(out), "-q"])
    assert result.exit_code == 0, result.stderr
    merged = json.loads(out.read_text())
    single = json.loads(a.read_text())
    assert (
        merged["ratios"]["token"]["distribution"]["count"]
        == 2 * single["ratios"]["token"]["distribution"]["count"]
    )
    # doubling every count moves a quantile at most within its bin
    for q, value in single["ratios"]["token"]["distribution"]["quantiles"].items():
        got = merged["ratios"]["token"]["distribution"]["quantiles"][q]
        assert abs(got - value) <= 0.0117 * abs(value) + 1e-9, q
    assert np.isclose(merged["mismatch"]["policy"]["k3"], single["mismatch"]["policy"]["k3"])


def test_damaged_state_is_a_merge_error_not_a_crash(tmp_path):
    ref = make_reference(seed=2)
    dump = save_rows(ref, range(8), tmp_path / "d.pt")
    document = ratioscope.analyze(dump).to_dict()
    other = json.loads(json.dumps(document))
    other["inputs"][0]["path"] = "elsewhere.pt"
    del other["state"]["mismatch"]["policy"]["tokens"]
    damaged = r"state\.mismatch\.policy' is malformed"
    with pytest.raises(ratioscope.errors.MergeError, match=damaged):
        merge_reports([document, other])
    other = json.loads(json.dumps(document))
    other["inputs"][0]["path"] = "elsewhere.pt"
    other["state"]["ratios"]["variants"]["token"]["clipped_tokens"] = "many"
    with pytest.raises(ratioscope.errors.MergeError, match="ratios"):
        merge_reports([document, other])
