"""Speed of ``eval-ucc`` on 500 problems x 256 samples of ~1 KB (target <= 60 s, 2 cores;
docs/performance.md).

The samples are synthetic, built from the real Qwen2.5-Math responses in the repository
(tests/data slice, or a full file given with --source): each problem gets a few real
responses as "solutions" and every sample is one of them with a few percent of its
words replaced, so that TF-IDF clustering finds several clusters per problem. Labels
(correct or not) are drawn at random with a per-problem accuracy.

Stages timed: writing is not; load (JSON lines -> SampleSet), TF-IDF + clustering,
UCC@k, diversity (pair-sampled), the end-to-end ``evaluate_ucc`` call that the CLI
makes, and the ``ratioscope eval-ucc`` command itself in a subprocess. Peers measured
in the same run:
- rouge-score's pure-Python ROUGE-L on a sample of pairs vs ratioscope's rapidfuzz LCS;
- a Python loop with ``math.comb`` for Pass@k over all problems and k vs the vectorised
  product form.

Run: python benchmarks/bench_eval.py [--problems 500] [--samples 256]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from ratioscope.evaluation import evaluate_ucc
from ratioscope.functional.clustering import cluster_labels, cluster_sizes, tfidf_similarity
from ratioscope.functional.diversity import (
    DEFAULT_MAX_PAIRS,
    diversity_scores,
    encode_tokens,
    rouge_l_f,
    rouge_l_pairs,
    rouge_tokens,
)
from ratioscope.functional.passk import pass_at_k, ucc_at_k
from ratioscope.io.samples import load_samples

REPO = Path(__file__).resolve().parent.parent
DEFAULT_SOURCE = REPO / "tests" / "data" / "qwen25_math_cot_slice.jsonl"


def real_responses(source: Path) -> list[str]:
    rows = [json.loads(line) for line in source.read_text(encoding="utf-8").splitlines()]
    key = "response" if "response" in rows[0] else "code"
    return [text for row in rows for text in row[key] if len(text) > 300]


def write_synthetic(path: Path, problems: int, samples: int, source: Path, seed: int = 0) -> None:
    rng = random.Random(seed)
    templates = [text.split(" ") for text in real_responses(source)]
    vocabulary = sorted({word for words in templates for word in words})
    with path.open("w", encoding="utf-8") as handle:
        for problem in range(problems):
            solutions = rng.sample(templates, k=rng.randint(2, 6))
            accuracy = rng.random()
            for index in range(samples):
                words = list(rng.choice(solutions))
                for _ in range(max(1, len(words) // 25)):  # ~4% of the words change
                    words[rng.randrange(len(words))] = rng.choice(vocabulary)
                text = " ".join(words)[:1100]
                row = {
                    "problem_id": problem,
                    "response": text,
                    "correct": rng.random() < accuracy,
                    "sample_index": index,
                    "method": "synthetic",
                }
                handle.write(json.dumps(row) + "\n")


def timed(label: str, function, results: dict[str, float]):
    start = time.perf_counter()
    value = function()
    results[label] = time.perf_counter() - start
    return value


def stage_timings(sample_set, ks: list[int], max_pairs: int) -> dict[str, float]:
    method = next(iter(sample_set.methods.values()))
    correct_texts = [
        [r for r, ok in zip(p.responses, p.correct.tolist(), strict=True) if ok]
        for p in method.problems
    ]
    results: dict[str, float] = {}
    similarities = timed(
        "tfidf+cluster",
        lambda: [tfidf_similarity(texts) for texts in correct_texts],
        results,
    )
    start = time.perf_counter()
    sizes = [cluster_sizes(cluster_labels(s)) for s in similarities]
    results["tfidf+cluster"] += time.perf_counter() - start
    timed(
        "ucc",
        lambda: [
            [ucc_at_k(p.n, s, k) for k in ks] for p, s in zip(method.problems, sizes, strict=True)
        ],
        results,
    )
    timed(
        "diversity",
        lambda: [
            diversity_scores(texts, sim, max_pairs)
            for texts, sim in zip(correct_texts, similarities, strict=True)
            if len(texts) >= 2
        ],
        results,
    )
    return results


def rouge_peer(texts: list[str], pairs: int) -> dict[str, float]:
    """rouge-score vs ratioscope on the same pairs: whole pair (tokenise + LCS) and LCS only."""
    from rouge_score import rouge_scorer

    scorer = rouge_scorer.RougeScorer(["rougeL"], use_stemmer=False)
    rng = random.Random(1)
    chosen = [tuple(rng.sample(range(len(texts)), 2)) for _ in range(pairs)]
    timings: dict[str, float] = {}
    reference = timed(
        "peer pair",
        lambda: [scorer.score(texts[i], texts[j])["rougeL"].fmeasure for i, j in chosen],
        timings,
    )

    def ours_pair() -> list[float]:
        values = []
        for i, j in chosen:
            a, b = encode_tokens([rouge_tokens(texts[i]), rouge_tokens(texts[j])])
            values.append(rouge_l_f(a, b))
        return values

    ours = timed("ours pair", ours_pair, timings)
    tokens = [rouge_tokens(text) for text in texts]
    encoded = encode_tokens(tokens)
    # the LCS alone, on already tokenised texts (how the diversity stage uses it)
    timed("peer lcs", lambda: [rouge_scorer._score_lcs(tokens[i], tokens[j]) for i, j in chosen],
          timings)  # fmt: skip
    timed(
        "ours lcs",
        lambda: rouge_l_pairs([encoded[i] for i, _ in chosen], [encoded[j] for _, j in chosen]),
        timings,
    )
    timings["max_diff"] = float(np.max(np.abs(np.array(reference) - np.array(ours))))
    return timings


def passk_peer(sample_set, ks: list[int]) -> tuple[float, float, float]:
    method = next(iter(sample_set.methods.values()))
    n, c = method.counts()
    start = time.perf_counter()
    loop = [
        [
            1 - math.comb(int(a) - int(b), k) / math.comb(int(a), k)
            for a, b in zip(n, c, strict=True)
        ]
        for k in ks
    ]
    peer = time.perf_counter() - start
    start = time.perf_counter()
    ours = [pass_at_k(n, c, k) for k in ks]
    mine = time.perf_counter() - start
    return peer, mine, float(np.max(np.abs(np.array(loop) - np.array(ours))))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--problems", type=int, default=500)
    parser.add_argument("--samples", type=int, default=256)
    parser.add_argument("--max-pairs", type=int, default=DEFAULT_MAX_PAIRS)
    parser.add_argument("--rouge-pairs", type=int, default=100)
    parser.add_argument("--source", type=Path, default=DEFAULT_SOURCE)
    parser.add_argument("--no-cli", action="store_true", help="skip the CLI subprocess run")
    args = parser.parse_args()
    print(f"cpus: {os.cpu_count()}, load average at start: {os.getloadavg()[0]:.2f}")
    ks = [2**e for e in range(int(math.log2(args.samples)) + 1)]

    with tempfile.TemporaryDirectory() as directory:
        path = Path(directory) / "synthetic_samples.jsonl"
        start = time.perf_counter()
        write_synthetic(path, args.problems, args.samples, args.source)
        size_mb = path.stat().st_size / 1e6
        print(
            f"synthetic samples (built from real Qwen2.5-Math responses): {args.problems} "
            f"problems x {args.samples} samples, {size_mb:.0f} MB, written in "
            f"{time.perf_counter() - start:.1f} s (not timed below)"
        )
        results: dict[str, float] = {}
        sample_set = timed("load", lambda: load_samples(path), results)
        results.update(stage_timings(sample_set, ks, args.max_pairs))
        timed(
            "evaluate_ucc (end to end)",
            lambda: evaluate_ucc(sample_set, ks, max_pairs=args.max_pairs),
            results,
        )
        if not args.no_cli:
            command = [
                sys.executable, "-m", "ratioscope", "eval-ucc", str(path), "-q",
                "--json", str(Path(directory) / "ucc.json"),
            ]  # fmt: skip
            timed(
                "CLI eval-ucc --json",
                lambda: subprocess.run(command, check=True, capture_output=True),
                results,
            )

    method = next(iter(sample_set.methods.values()))
    correct = sum(p.c for p in method.problems)
    print(f"correct responses clustered: {correct}; k = {ks}; max_pairs = {args.max_pairs}")
    print(f"{'stage':<28}{'seconds':>10}")
    for label, seconds in results.items():
        print(f"{label:<28}{seconds:>10.2f}")
    total = results["load"] + results["evaluate_ucc (end to end)"]
    verdict = "OK" if total <= 60 else "OVER"
    print(f"{'total (load + evaluate)':<28}{total:>10.2f}   target <= 60 s: {verdict}")
    if "CLI eval-ucc --json" in results:
        cli = results["CLI eval-ucc --json"]
        verdict = "OK" if cli <= 60 else "OVER"
        print(
            f"CLI (start-up, load, evaluate, tables, JSON): {cli:.2f} s   target <= 60 s: {verdict}"
        )
    print(f"load average at end: {os.getloadavg()[0]:.2f}")

    texts = [r for p in method.problems[:20] for r in p.responses[:10]]
    rouge = rouge_peer(texts, args.rouge_pairs)
    for what, peer_key, ours_key in (
        ("tokenise + LCS", "peer pair", "ours pair"),
        ("LCS only", "peer lcs", "ours lcs"),
    ):
        peer, mine = rouge[peer_key], rouge[ours_key]
        print(
            f"ROUGE-L ({what}) on {args.rouge_pairs} pairs: rouge-score {peer * 1e3:.1f} ms, "
            f"ratioscope {mine * 1e3:.2f} ms, speed-up x{peer / mine:.0f}"
        )
    print(f"ROUGE-L max |ratioscope - rouge-score| = {rouge['max_diff']:.1e}")
    peer, mine, error = passk_peer(sample_set, ks)
    print(
        f"Pass@k over {len(method.problems)} problems x {len(ks)} k: math.comb loop "
        f"{peer * 1e3:.1f} ms, ratioscope {mine * 1e3:.2f} ms, speed-up x{peer / mine:.0f}, "
        f"max |diff| {error:.1e}"
    )


if __name__ == "__main__":
    main()
