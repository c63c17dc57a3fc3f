"""analyze() end to end: numbers against independent loops, merging, determinism."""

from __future__ import annotations

import json
import math

import numpy as np
import polars as pl
import pytest
from dumps import LAYOUTS, make_reference, write_layout
from typer.testing import CliRunner

import ratioscope
from ratioscope.analysis.pipeline import merge_reports
from ratioscope.cli import app
from ratioscope.functional.histogram import RELATIVE_ERROR

runner = CliRunner()


def valid_tokens(ref, array):
    return np.concatenate([array[i, : int(ref.mask[i].sum())] for i in range(len(ref.mask))])


def loop_clip_and_surrogate(ratios, advantages, mask, band):
    """Plain loops over tokens, written from the PPO objective."""
    low, high = band
    clipped = total = 0
    token_terms, seq_means = [], []
    plain_terms, plain_seq = [], []
    for i in range(mask.shape[0]):
        terms, plain = [], []
        for t in range(mask.shape[1]):
            if not mask[i, t]:
                continue
            r, a = ratios[i][t], advantages[i, t]
            total += 1
            if (a > 0 and r > 1 + high) or (a < 0 and r < 1 - low):
                clipped += 1
            terms.append(min(r * a, min(max(r, 1 - low), 1 + high) * a))
            plain.append(r * a)
        if terms:
            token_terms += terms
            seq_means.append(sum(terms) / len(terms))
            plain_terms += plain
            plain_seq.append(sum(plain) / len(plain))
    return {
        "clip_fraction": clipped / total,
        "clipped_token": -sum(token_terms) / len(token_terms),
        "clipped_seq": -sum(seq_means) / len(seq_means),
        "plain_token": -sum(plain_terms) / len(plain_terms),
        "plain_seq": -sum(plain_seq) / len(plain_seq),
    }


@pytest.fixture
def verl_dump(tmp_path):
    ref = make_reference(seed=11, rows=16, width=30)
    return ref, write_layout(ref, "verl", tmp_path)


def test_token_and_sequence_variants_match_independent_loops(verl_dump):
    ref, path = verl_dump
    report = ratioscope.analyze(path)
    z32 = ref.log_probs.astype(np.float32).astype(np.float64) - ref.old_log_probs.astype(
        np.float32
    ).astype(np.float64)
    mask = ref.mask
    tokens = valid_tokens(ref, z32)
    token = report.ratios["token"]
    assert token.distribution.count == mask.sum()
    assert token.distribution.mean == pytest.approx(tokens.mean(), abs=1e-6)
    assert token.distribution.std == pytest.approx(tokens.std(), rel=1e-5)
    for q, value in token.distribution.quantiles.items():
        exact = np.quantile(tokens, float(q), method="inverted_cdf")
        assert abs(value - exact) <= RELATIVE_ERROR * abs(exact) + 1e-6, q

    ratios = [[math.exp(v) for v in row] for row in z32]
    expected = loop_clip_and_surrogate(ratios, ref.advantages, mask, (0.2, 0.28))
    assert token.clip_fraction == pytest.approx(expected["clip_fraction"], abs=1e-12)
    assert token.surrogate.clipped.token_mean == pytest.approx(expected["clipped_token"], rel=1e-5)
    assert token.surrogate.clipped.seq_mean_token_mean == pytest.approx(
        expected["clipped_seq"], rel=1e-5
    )
    assert token.surrogate.unclipped.token_mean == pytest.approx(expected["plain_token"], rel=1e-5)

    seq_means = [
        sum(z32[i, t] for t in range(mask.shape[1]) if mask[i, t]) / mask[i].sum()
        for i in range(mask.shape[0])
    ]
    seq_ratios = [[math.exp(seq_means[i])] * mask.shape[1] for i in range(mask.shape[0])]
    expected = loop_clip_and_surrogate(seq_ratios, ref.advantages, mask, (3e-4, 4e-4))
    sequence = report.ratios["sequence"]
    assert sequence.clip_fraction == pytest.approx(expected["clip_fraction"], abs=1e-12)
    assert sequence.surrogate.clipped.token_mean == pytest.approx(
        expected["clipped_token"], rel=1e-5
    )
    weighted = np.repeat(seq_means, mask.sum(1))
    assert sequence.distribution.mean == pytest.approx(weighted.mean(), abs=1e-6)
    assert sequence.distribution.std == pytest.approx(weighted.std(), rel=1e-5)


def test_mismatch_policy_and_rollout_pairs(verl_dump):
    ref, path = verl_dump
    report = ratioscope.analyze(path)
    f32 = lambda a: a.astype(np.float32).astype(np.float64)  # noqa: E731
    pairs = {
        "policy": f32(ref.log_probs) - f32(ref.old_log_probs),
        "rollout": f32(ref.old_log_probs) - f32(ref.rollout_log_probs),
    }
    for name, z in pairs.items():
        tokens = valid_tokens(ref, z)
        stats = getattr(report.mismatch, name)
        assert stats.tokens == tokens.size
        assert stats.k3 == pytest.approx(np.mean(np.expm1(tokens) - tokens), rel=1e-5)
        assert stats.chi2_token == pytest.approx(np.mean(np.exp(2 * tokens)) - 1, rel=1e-5)
        sums = np.array([z[i, : ref.mask[i].sum()].sum() for i in range(len(ref.mask))])
        assert stats.chi2_seq == pytest.approx(np.mean(np.exp(2 * sums)) - 1, rel=1e-5)
        r = np.exp(tokens)
        assert stats.ess == pytest.approx(r.sum() ** 2 / (r.size * (r**2).sum()), rel=1e-6)


def test_chunking_does_not_change_the_numbers(verl_dump):
    _, path = verl_dump
    whole = ratioscope.analyze(path).to_dict()
    chunked = ratioscope.analyze(path, chunk_elements=7).to_dict()
    for document in (whole, chunked):
        document.pop("tool")
        document.pop("state")
    # only the order of floating-point sums differs (and the float32 Kalman scan's blocks)
    assert _close(whole, chunked, rel=1e-6)


def _close(a, b, rel=1e-9):
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_close(a[k], b[k], rel) for k in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(_close(x, y, rel) for x, y in zip(a, b, strict=True))
    if isinstance(a, float) and isinstance(b, float):
        return math.isclose(a, b, rel_tol=rel, abs_tol=1e-10)
    return a == b


def test_many_files_equal_the_merge_of_their_reports(tmp_path):
    paths = [
        write_layout(make_reference(seed=s, rows=8, width=20), "verl", tmp_path, f"step_{s}")
        for s in range(3)
    ]
    together = ratioscope.analyze(paths).to_dict()
    parts = [ratioscope.analyze(p).to_dict() for p in paths]
    merged = merge_reports(parts).to_dict()
    for document in (together, merged):
        document.pop("tool")
    assert _close(together, merged, rel=1e-12)


def test_same_input_gives_byte_identical_json_except_the_timestamp(verl_dump, tmp_path):
    _, path = verl_dump
    texts = []
    for name in ("a.json", "b.json"):
        ratioscope.analyze(path).write_json(tmp_path / name)
        document = json.loads((tmp_path / name).read_text())
        document["tool"].pop("created")
        texts.append(json.dumps(document))
    assert texts[0] == texts[1]


def test_report_keys_follow_the_design(verl_dump):
    _, path = verl_dump
    document = ratioscope.analyze(path).to_dict()
    assert list(document)[:4] == ["schema_version", "tool", "inputs", "params"]
    for key in ("ratios", "mismatch", "covariance", "future_policy", "tepo", "trust_region"):
        assert key in document
    assert set(document["ratios"]) == {"token", "sequence", "kalman"}
    assert document["inputs"][0]["sha256"] and document["inputs"][0]["tokens"] > 0
    for key, value in document.items():
        if value is None:
            assert any(w.startswith(key) for w in document["warnings"]), key


def test_each_input_records_the_sha256_of_its_file(tmp_path):
    """The digest read on a second thread while the file is analysed is hashlib's."""
    import hashlib
    from pathlib import Path

    paths = []
    for seed in (3, 4):
        directory = tmp_path / f"run{seed}"
        directory.mkdir()
        paths.append(write_layout(make_reference(seed=seed), "verl", directory))
    document = ratioscope.analyze(paths).to_dict()
    for entry in document["inputs"]:
        expected = hashlib.sha256(Path(entry["path"]).read_bytes()).hexdigest()
        assert entry["sha256"] == expected


def test_a_stopped_hash_reads_no_further(tmp_path):
    import hashlib
    import threading

    from ratioscope.analysis.pipeline import _sha256

    path = tmp_path / "blob.bin"
    # two whole 4 MiB blocks and a part of one: the reused buffer must hash only what
    # the last read filled
    blob = bytes(range(256)) * ((1 << 23) // 256) + b"tail" * 3001
    path.write_bytes(blob)
    stop = threading.Event()
    stop.set()
    assert _sha256(path, stop) == ""
    assert _sha256(path) == hashlib.sha256(blob).hexdigest()


@pytest.mark.parametrize("layout", LAYOUTS)
def test_cli_info_and_analyze_on_each_layout(tmp_path, layout):
    ref = make_reference(seed=21)
    path = write_layout(ref, layout, tmp_path)
    result = runner.invoke(app, ["info", str(path)])
    assert result.exit_code == 0, result.stderr
    assert f"layout {layout}" in result.stdout
    out_json, out_parquet = tmp_path / "r.json", tmp_path / "r.parquet"
    outputs = ["--json", str(out_json), "--parquet", str(out_parquet)]
    result = runner.invoke(app, ["analyze", str(path), *outputs, "-q", "--detail"])
    assert result.exit_code == 0, result.stderr
    assert "importance ratios" in result.stdout
    document = json.loads(out_json.read_text())
    assert document["inputs"][0]["profile"] == layout
    assert document["ratios"]["token"]["distribution"]["count"] == int(ref.mask.sum())
    table = pl.read_parquet(out_parquet)
    assert table.height == ref.mask.shape[0]
    assert table["length"].to_list() == ref.mask.sum(1).tolist()
    lengths = ref.mask.sum(1)
    # slime holds the old policy and the engine: its z is the train/inference mismatch
    z = ref.z if layout != "slime" else ref.old_log_probs - ref.rollout_log_probs
    column = "policy_log_ratio_mean" if layout != "slime" else "rollout_log_ratio_mean"
    expected = [z[i, : lengths[i]].mean() for i in range(len(lengths))]
    np.testing.assert_allclose(table[column].to_numpy(), expected, atol=1e-6)


def test_help_is_fast_because_heavy_modules_are_not_imported():
    import subprocess
    import sys

    code = (
        "import sys, ratioscope.cli; "
        "heavy = [m for m in ('torch', 'polars', 'matplotlib', 'sklearn', 'scipy') "
        "if m in sys.modules]; print(','.join(heavy))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""


def test_every_command_has_help_with_an_example():
    for command in (
        ["info"],
        ["analyze"],
        ["sweep"],
        ["plot"],
        ["eval-passk"],
        ["eval-ucc"],
        ["check"],
        ["merge"],
    ):
        result = runner.invoke(app, [*command, "--help"])
        assert result.exit_code == 0, command
        assert "Example" in result.stdout, command


@pytest.mark.skipif(not __import__("torch").cuda.is_available(), reason="needs a CUDA device")
def test_cuda_device_gives_the_cpu_numbers(verl_dump):
    _, path = verl_dump
    cpu = ratioscope.analyze(path, device="cpu").to_dict()
    cuda = ratioscope.analyze(path, device="cuda").to_dict()
    for document in (cpu, cuda):
        document.pop("tool")
        document.pop("state")
    assert _close(cpu, cuda, rel=1e-5)


def test_cuda_request_without_a_device_is_a_clear_error(verl_dump):
    import torch

    if torch.cuda.is_available():
        pytest.skip("a CUDA device is present")
    _, path = verl_dump
    result = runner.invoke(app, ["analyze", str(path), "--device", "cuda", "-q"])
    assert result.exit_code == 2
    assert "no CUDA device is available" in result.stderr


def test_sections_option_computes_only_the_requested_sections(verl_dump, tmp_path):
    _, path = verl_dump
    report = ratioscope.analyze(path, sections=["mismatch"])
    assert report.mismatch is not None and report.ratios is None
    assert not any(w.startswith("ratios") for w in report.warnings)
    out = tmp_path / "r.json"
    result = runner.invoke(
        app, ["analyze", str(path), "--sections", "ratios,tepo", "--json", str(out), "-q"]
    )
    assert result.exit_code == 0, result.stderr
    document = json.loads(out.read_text())
    assert document["ratios"] and document["tepo"] and document["mismatch"] is None
    bad = runner.invoke(app, ["analyze", str(path), "--sections", "ratio", "-q"])
    assert bad.exit_code == 2 and "unknown section(s) ratio" in bad.stderr
    full = ratioscope.analyze(path).to_dict()
    with pytest.raises(ratioscope.errors.MergeError, match="has no 'mismatch' section"):
        merge_reports([full, document])


def test_narrow_terminals_get_transposed_tables_with_whole_numbers(verl_dump):
    _, path = verl_dump
    detail = ["analyze", str(path), "-q", "--detail"]
    wide = runner.invoke(app, detail, env={"COLUMNS": "200"})
    narrow = runner.invoke(app, detail, env={"COLUMNS": "80"})
    assert wide.exit_code == 0 and narrow.exit_code == 0
    assert "…" not in narrow.stdout
    assert max(len(line) for line in narrow.stdout.splitlines()) <= 80
    report = ratioscope.analyze(path)
    from ratioscope.render.terminal.report import fmt

    # every number of the mismatch table is printed whole in both layouts
    for key in ("k1", "k3", "chi2_token", "ess"):
        value = fmt(getattr(report.mismatch.policy, key))
        assert value in wide.stdout and value in narrow.stdout, key
