"""Diversity similarities against independent references.

ROUGE-L is compared with the ``rouge_score`` package itself (its pure-Python LCS) on
real responses from the committed Qwen2.5-Math slice; edit similarity with a plain
dynamic-programming Levenshtein; Jaccard with Python sets.
"""

from __future__ import annotations

import json
import random
from itertools import combinations
from pathlib import Path

import numpy as np
import pytest
from rouge_score import rouge_scorer
from rouge_score import tokenize as rouge_tokenize

from ratioscope.functional.clustering import tfidf_similarity
from ratioscope.functional.diversity import (
    diversity_scores,
    edit_similarity,
    encode_tokens,
    jaccard,
    lexical_tokens,
    mean_offdiagonal,
    rouge_l_f,
    rouge_tokens,
    sample_pairs,
)

SLICE = Path(__file__).parent / "data" / "qwen25_math_cot_slice.jsonl"
SCORER = rouge_scorer.RougeScorer(["rougeL"], use_stemmer=False)


def real_responses() -> list[str]:
    rows = [json.loads(line) for line in SLICE.read_text(encoding="utf-8").splitlines()]
    return [text for row in rows for text in row["response"]]


def dp_levenshtein(a: str, b: str) -> int:
    previous = list(range(len(b) + 1))
    for i, char_a in enumerate(a, start=1):
        current = [i]
        for j, char_b in enumerate(b, start=1):
            current.append(
                min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + (char_a != char_b))
            )
        previous = current
    return previous[-1]


def dp_lcs(a: list, b: list) -> int:
    table = [[0] * (len(b) + 1) for _ in range(len(a) + 1)]
    for i in range(1, len(a) + 1):
        for j in range(1, len(b) + 1):
            if a[i - 1] == b[j - 1]:
                table[i][j] = table[i - 1][j - 1] + 1
            else:
                table[i][j] = max(table[i - 1][j], table[i][j - 1])
    return table[-1][-1]


def test_rouge_tokens_match_rouge_score_tokenizer():
    texts = [*real_responses()[:12], "Ünïcode ſtraße and K-means: x²=4, √9 = 3", ""]
    for text in texts:
        assert rouge_tokens(text) == rouge_tokenize.tokenize(text, None)


def test_rouge_l_equals_rouge_score_on_real_response_pairs():
    texts = real_responses()
    rng = random.Random(0)
    pairs = rng.sample(list(combinations(range(len(texts)), 2)), 12)
    for i, j in pairs:
        want = SCORER.score(texts[i], texts[j])["rougeL"].fmeasure
        encoded = encode_tokens([rouge_tokens(texts[i]), rouge_tokens(texts[j])])
        assert rouge_l_f(*encoded) == pytest.approx(want, abs=1e-12)
        assert rouge_l_f(rouge_tokens(texts[i]), rouge_tokens(texts[j])) == pytest.approx(
            want, abs=1e-12
        )


def test_rouge_l_edge_cases():
    assert rouge_l_f([], ["a"]) == 0.0 == SCORER.score("", "a")["rougeL"].fmeasure
    assert rouge_l_f(["a", "b"], ["a", "b"]) == 1.0
    assert rouge_l_f(["a", "b", "c"], ["c", "b", "a"]) == pytest.approx(2 * 1 / 6)


def test_token_encoding_is_exact_beyond_the_surrogate_range():
    # > 0xD800 distinct tokens: ids past the surrogate block must still be valid, distinct
    filler = [f"w{i}" for i in range(0xD800 + 10)]
    rng = random.Random(1)
    a = [rng.choice(filler[-40:]) for _ in range(60)]
    b = [rng.choice(filler[-40:]) for _ in range(50)]
    encoded = encode_tokens([filler, a, b])
    assert len(set(encoded[0])) == len(filler)
    assert rouge_l_f(encoded[1], encoded[2]) == pytest.approx(
        2 * dp_lcs(a, b) / (len(a) + len(b)), abs=1e-12
    )
    encoded[1].encode("utf-8")  # no lone surrogates


def test_edit_similarity_matches_dynamic_programming():
    rng = random.Random(2)
    texts = real_responses()
    for _ in range(6):
        a = rng.choice(texts)[: rng.randint(0, 200)]
        b = rng.choice(texts)[: rng.randint(1, 200)]
        want = 1 - dp_levenshtein(a, b) / max(len(a), len(b))
        assert edit_similarity(a, b) == pytest.approx(want, abs=1e-12)
    assert edit_similarity("", "") == 1.0
    assert edit_similarity("kitten", "sitting") == pytest.approx(1 - 3 / 7)


def test_jaccard_matches_set_arithmetic():
    assert jaccard({"a", "b", "c"}, {"b", "c", "d", "e"}) == pytest.approx(2 / 5)
    assert jaccard(set(), set()) == 1.0
    assert jaccard({"a"}, set()) == 0.0


def test_lexical_tokens_use_the_tfidf_pattern_lowercased():
    assert lexical_tokens("Let X = 2, y_1 = 3") == ["let", "x", "2", "y_1", "3"]


def test_sample_pairs_is_deterministic_distinct_and_bounded():
    all_pairs = sample_pairs(5, 100)
    assert all_pairs.tolist() == [list(p) for p in combinations(range(5), 2)]
    first = sample_pairs(200, 300, seed=0)
    assert first.shape == (300, 2)
    assert np.array_equal(first, sample_pairs(200, 300, seed=0))
    assert not np.array_equal(first, sample_pairs(200, 300, seed=1))
    assert np.all(first[:, 0] < first[:, 1])
    assert len({tuple(p) for p in first.tolist()}) == 300
    assert sample_pairs(1, 10).shape == (0, 2)
    assert sample_pairs(50, 0).shape == (0, 2)
    with pytest.raises(ValueError):
        sample_pairs(5, -1)


def test_diversity_scores_against_references_on_real_responses():
    texts = real_responses()[8:16]  # one problem's eight responses
    tfidf = tfidf_similarity(texts)
    scores = diversity_scores(texts, tfidf, max_pairs=10, seed=0)
    pairs = sample_pairs(len(texts), 10, seed=0).tolist()
    want_rouge = np.mean([SCORER.score(texts[i], texts[j])["rougeL"].fmeasure for i, j in pairs])
    want_jac = np.mean(
        [
            len(set(lexical_tokens(texts[i])) & set(lexical_tokens(texts[j])))
            / len(set(lexical_tokens(texts[i])) | set(lexical_tokens(texts[j])))
            for i, j in pairs
        ]
    )
    want_tfidf = np.mean([tfidf[i, j] for i, j in combinations(range(len(texts)), 2)])
    assert scores.pairs == 10
    assert scores.rouge_l == pytest.approx(want_rouge, abs=1e-12)
    assert scores.jaccard == pytest.approx(want_jac, abs=1e-12)
    assert scores.tfidf_cosine == pytest.approx(want_tfidf, abs=1e-12)
    assert 0.0 < scores.edit_similarity < 1.0


def test_diversity_scores_identical_texts_and_no_pairs():
    same = ["the answer is 4"] * 3
    scores = diversity_scores(same, tfidf_similarity(same))
    assert (scores.tfidf_cosine, scores.rouge_l, scores.jaccard, scores.edit_similarity) == (
        pytest.approx(1.0),
        1.0,
        1.0,
        1.0,
    )
    skipped = diversity_scores(same, tfidf_similarity(same), max_pairs=0)
    assert skipped.pairs == 0 and np.isnan(skipped.rouge_l)
    assert skipped.tfidf_cosine == pytest.approx(1.0)
    assert np.isnan(mean_offdiagonal(np.ones((1, 1))))


# ---- the batched path of eval-ucc against the per-pair reference ----------------------

EDGE_TEXTS = [
    "",
    "...",
    "x = 2",
    "X=2!",
    "Ünïcode ſtraße x_1 K-means: x²=4, √9 = 3",
    "İi ǅ ΣΑΣ \x1c\x1f tab\tand\nnew line",
    "the answer is 4",
    "the answer is 4",
]


def _problem_texts() -> list[list[str]]:
    rows = [json.loads(line) for line in SLICE.read_text(encoding="utf-8").splitlines()]
    return [row["response"] for row in rows] + [real_responses(), EDGE_TEXTS, EDGE_TEXTS[:1]]


@pytest.mark.parametrize("pattern", [r"(?u)\b\w+\b", r"\b\w\w+\b", r"[a-z]+(\d)"])
@pytest.mark.parametrize("max_pairs", [0, 3, 500])
def test_problem_similarity_equals_the_per_pair_reference(pattern, max_pairs):
    from ratioscope.functional.clustering import cluster_labels
    from ratioscope.functional.diversity import problem_similarity

    for texts in _problem_texts():
        reference = tfidf_similarity(texts, pattern)
        found = problem_similarity(texts, max_pairs, seed=0, token_pattern=pattern)
        np.testing.assert_allclose(found.similarity, reference, rtol=0, atol=1e-12)
        assert cluster_labels(found.similarity).tolist() == cluster_labels(reference).tolist()
        if len(texts) < 2:
            assert found.diversity is None
            continue
        want = diversity_scores(texts, reference, max_pairs, seed=0, token_pattern=pattern)
        got = found.diversity
        assert got is not None and got.pairs == want.pairs
        assert got.tfidf_cosine == pytest.approx(want.tfidf_cosine, abs=1e-12)
        for key in ("rouge_l", "jaccard", "edit_similarity"):  # same pairs, same arithmetic
            assert getattr(got, key) == getattr(want, key) or (
                np.isnan(getattr(got, key)) and np.isnan(getattr(want, key))
            ), key


def test_fast_tokens_equal_the_regular_expressions():
    from ratioscope.functional.clustering import token_lists

    lowered = [text.lower() for text in [*EDGE_TEXTS, *real_responses()[:20]]]
    assert token_lists(lowered) == [lexical_tokens(text) for text in lowered]
    every_code_point = "".join(map(chr, range(0x3000)))  # letters, digits, marks, spaces
    assert token_lists([every_code_point.lower()]) == [lexical_tokens(every_code_point)]


def test_edit_similarity_pairs_equal_the_written_out_formula():
    # exactly 1 - Levenshtein / longer length (1.0 for two empty strings), pair by pair
    from rapidfuzz.distance import Levenshtein

    from ratioscope.functional.diversity import edit_similarity_pairs

    rng = random.Random(4)
    texts = [*real_responses(), *EDGE_TEXTS, "\U0001f600 emoji ¹²", "ab" * 700]
    first, second = [], []
    for _ in range(300):
        a = rng.choice(texts)
        words = a.split(" ")
        for _ in range(rng.randint(0, 6)):  # a near-duplicate, or an unrelated text
            words[rng.randrange(len(words))] = rng.choice(["x_1", "√9", "", "\U0001f600"])
        b = " ".join(words) if rng.random() < 0.6 else rng.choice(texts)
        first.append(a[: rng.choice([0, 3, 100, 2000])])
        second.append(b[: rng.choice([0, 3, 100, 2000])])
    first += ["", "same", "ünï"]
    second += ["", "same", "uni"]
    got = edit_similarity_pairs(first, second).tolist()
    for a, b, value in zip(first, second, got, strict=True):
        longest = max(len(a), len(b))
        assert value == (1.0 - Levenshtein.distance(a, b) / longest if longest else 1.0)
        if longest <= 100:
            assert value == (1.0 - dp_levenshtein(a, b) / longest if longest else 1.0)


def test_rouge_ids_are_rouge_scores_tokens():
    from ratioscope.functional.clustering import term_counts, token_lists
    from ratioscope.functional.diversity import encode_ids, rouge_ids

    every_code_point = "".join(map(chr, range(0x3000)))
    problems = [
        ["let x = 2", "so 2x = 4 and x = 2", ""],  # every term is one [a-z0-9] run
        ["x_ = _y", "x and y_"],  # one run per term, not the term itself
        [*EDGE_TEXTS, "x_1 ünï_2 __ a_b_c é1é2", every_code_point, *real_responses()[:10]],
    ]
    for texts in problems:
        lowered = [text.lower() for text in texts]
        ids, lengths = rouge_ids(term_counts(token_lists(lowered)))
        want = [rouge_tokens(text) for text in texts]
        assert lengths.tolist() == [len(tokens) for tokens in want]
        # one id per distinct token and one token per id: a code LCS can run on
        pairs = set(zip(ids.tolist(), [t for tokens in want for t in tokens], strict=True))
        assert len(pairs) == len({i for i, _ in pairs}) == len({t for _, t in pairs})
        encoded = encode_ids(ids, lengths)
        assert [len(code) for code in encoded] == lengths.tolist()
        for code in encoded:
            code.encode("utf-8")  # no lone surrogates
