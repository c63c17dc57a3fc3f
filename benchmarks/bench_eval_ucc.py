"""Speed of eval-ucc's clustering and diversity stage, batched path vs the per-pair peer.

For every problem, eval-ucc embeds the correct responses with TF-IDF, clusters them and
scores up to 500 sampled pairs with ROUGE-L, Jaccard and edit similarity. The batched
path (``problem_similarity``) tokenises each response once and scores the pairs in
batches; the peer is the per-pair reference (scikit-learn's ``tfidf_similarity``, then
``diversity_scores``), which tokenises each response three times and builds a Python
set per response. The peer runs on the first ``--peer-problems`` problems and is scaled
to all of them by their share of correct responses.

The samples are the synthetic set of ``bench_eval.py``: 500 problems x 256 samples of
~1 KB, built from real Qwen2.5-Math responses with a few percent of their words replaced.

Printed: the two stages and their ratio, the share of the batched stage spent in the
exact character Levenshtein of edit similarity (its largest part), the largest
difference between their numbers on the peer's problems, and the wall time of the whole
``ratioscope eval-ucc`` command (start-up, load, evaluation, tables, JSON) in a
subprocess, against the 10 s target.

Run: python benchmarks/bench_eval_ucc.py [--problems 500] [--samples 256] [--peer-problems 50]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_eval import DEFAULT_SOURCE, write_synthetic

from ratioscope.functional import diversity
from ratioscope.functional.clustering import cluster_labels, tfidf_similarity
from ratioscope.functional.diversity import (
    DEFAULT_MAX_PAIRS,
    DiversityScores,
    diversity_scores,
    problem_similarity,
)
from ratioscope.io.samples import load_samples

TARGET_S = 10.0
METRICS = ("tfidf_cosine", "rouge_l", "jaccard", "edit_similarity")


def correct_texts(path: Path) -> list[list[str]]:
    """The correct responses of each problem of the (single-method) samples file."""
    method = next(iter(load_samples(path).methods.values()))
    return [
        [r for r, ok in zip(p.responses, p.correct.tolist(), strict=True) if ok]
        for p in method.problems
    ]


def batched(problems: list[list[str]], max_pairs: int) -> list[DiversityScores | None]:
    """The path eval-ucc runs: one tokenisation per response, batched pair scores."""
    from threadpoolctl import threadpool_limits

    scores = []
    with threadpool_limits(limits=1, user_api="blas"), timed_edit_similarity():
        for texts in problems:
            found = problem_similarity(texts, max_pairs)
            cluster_labels(found.similarity)
            scores.append(found.diversity)
    return scores


EDIT: dict[str, float] = {"wall": 0.0, "cpu": 0.0}


@contextlib.contextmanager
def timed_edit_similarity():
    """Add the wall and CPU seconds of every ``edit_similarity_pairs`` call to ``EDIT``.

    CPU time is the whole process's, so it counts rapidfuzz's worker threads too.
    """
    plain = diversity.edit_similarity_pairs

    def timed(first, second):
        start, cpu = time.perf_counter(), time.process_time()
        try:
            return plain(first, second)
        finally:
            EDIT["wall"] += time.perf_counter() - start
            EDIT["cpu"] += time.process_time() - cpu

    diversity.edit_similarity_pairs = timed  # looked up per call by the batched path
    try:
        yield
    finally:
        diversity.edit_similarity_pairs = plain


def per_pair(problems: list[list[str]], max_pairs: int) -> list[DiversityScores | None]:
    """The reference: scikit-learn TF-IDF, then per-pair diversity on Python sets."""
    scores: list[DiversityScores | None] = []
    for texts in problems:
        similarity = tfidf_similarity(texts)
        cluster_labels(similarity)
        scores.append(diversity_scores(texts, similarity, max_pairs) if len(texts) > 1 else None)
    return scores


def largest_difference(
    first: list[DiversityScores | None], second: list[DiversityScores | None]
) -> float:
    """Largest |difference| of the four means over problems that have pairs (NaN = NaN)."""
    worst = 0.0
    for a, b in zip(first, second, strict=True):
        if a is None or b is None:
            assert a is b, "one path scored a problem the other did not"
            continue
        for key in METRICS:
            x, y = getattr(a, key), getattr(b, key)
            if not (np.isnan(x) and np.isnan(y)):
                worst = max(worst, abs(x - y))
    return worst


def seconds(function, *args, **kwargs):
    """(wall seconds, value); the CPU seconds of this process go to ``CPU`` under its name.

    CPU time is printed beside wall time because other jobs on a shared 2-core machine
    stretch the wall time of whatever runs beside them.
    """
    start, cpu, children = time.perf_counter(), time.process_time(), _children_cpu()
    value = function(*args, **kwargs)
    CPU[function.__name__] = time.process_time() - cpu + _children_cpu() - children
    return time.perf_counter() - start, value


CPU: dict[str, float] = {}


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--problems", type=int, default=500)
    parser.add_argument("--samples", type=int, default=256)
    parser.add_argument("--peer-problems", type=int, default=50)
    parser.add_argument("--max-pairs", type=int, default=DEFAULT_MAX_PAIRS)
    parser.add_argument("--source", type=Path, default=DEFAULT_SOURCE)
    args = parser.parse_args()
    print(f"cpus: {os.cpu_count()}, load average at start: {os.getloadavg()[0]:.2f}")
    with tempfile.TemporaryDirectory() as directory:
        path = Path(directory) / "synthetic_samples.jsonl"
        write_synthetic(path, args.problems, args.samples, args.source)
        print(
            f"synthetic samples: {args.problems} problems x {args.samples} samples, "
            f"{path.stat().st_size / 1e6:.0f} MB (writing not timed)"
        )
        problems = correct_texts(path)
        warm = [texts for texts in problems if len(texts) > 1][:1]
        batched(warm, args.max_pairs)  # imports (scikit-learn, threadpoolctl) not timed
        per_pair(warm, args.max_pairs)
        EDIT.update(wall=0.0, cpu=0.0)
        ours_s, ours = seconds(batched, problems, args.max_pairs)
        subset = problems[: args.peer_problems]
        peer_s, peer = seconds(per_pair, subset, args.max_pairs)
        share = sum(map(len, subset)) / sum(map(len, problems))
        peer_scaled = peer_s / share
        command = [
            sys.executable, "-m", "ratioscope", "eval-ucc", str(path), "-q",
            "--json", str(Path(directory) / "ucc.json"),
        ]  # fmt: skip
        cli_s, _ = seconds(subprocess.run, command, check=True, capture_output=True)
    print(f"correct responses: {sum(map(len, problems))}; max_pairs = {args.max_pairs}")
    ours_cpu, peer_cpu = CPU["batched"], CPU["per_pair"] / share
    print(
        f"TF-IDF + clusters + diversity, batched (all {len(problems)} problems): "
        f"{ours_s:.2f} s wall, {ours_cpu:.2f} s CPU"
    )
    print(
        f"  of which edit similarity (exact character Levenshtein, rapidfuzz): "
        f"{EDIT['wall']:.2f} s wall, {EDIT['cpu']:.2f} s CPU; the rest: "
        f"{ours_s - EDIT['wall']:.2f} s wall, {ours_cpu - EDIT['cpu']:.2f} s CPU"
    )
    print(
        f"per-pair peer on {len(subset)} problems ({100 * share:.0f} % of the correct "
        f"responses): {peer_s:.2f} s; scaled to all: {peer_scaled:.2f} s wall, "
        f"{peer_cpu:.2f} s CPU"
    )
    print(f"speed-up x{peer_scaled / ours_s:.1f} wall, x{peer_cpu / ours_cpu:.1f} CPU")
    print(
        f"largest |batched - peer| over {len(subset)} problems: "
        f"{largest_difference(ours[: len(subset)], peer):.1e}"
    )
    verdict = "OK" if cli_s <= TARGET_S else "OVER"
    print(
        f"ratioscope eval-ucc (whole command): {cli_s:.2f} s wall, {CPU['run']:.2f} s CPU   "
        f"target <= {TARGET_S:.0f} s: {verdict}"
    )
    print(f"load average at end: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
