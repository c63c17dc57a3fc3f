"""TF-IDF similarity and clustering against hand-made texts and independent references.

References: a numpy TF-IDF written from scikit-learn's documented formula (raw counts,
idf = ln((1 + N) / (1 + df)) + 1, l2-normalised rows), scipy's single-linkage
``fcluster`` for the connected-components shortcut, and hand-built similarity matrices
whose clusters differ between linkages.
"""

from __future__ import annotations

import re
from collections import Counter

import numpy as np
import pytest
from scipy.cluster.hierarchy import fcluster, linkage
from scipy.spatial.distance import squareform

from ratioscope.functional.clustering import (
    DEFAULT_TOKEN_PATTERN,
    LINKAGES,
    cluster_labels,
    cluster_order,
    cluster_sizes,
    tfidf_similarity,
)

# Three solutions written three ways each; the groups share no word, so cosine across
# groups is exactly 0 and within a group it is high.
SOLUTIONS = [
    "factor the quadratic as x minus 2 times x minus 3 so its roots are 2 and 3 done",
    "factor the quadratic as x minus 2 times x minus 3 hence its roots are 2 and 3 done",
    "factor the quadratic into x minus 2 times x minus 3 so its roots are 2 and 3 done",
    "apply vieta relations where sum equals five while product equals six therefore r",
    "apply vieta relations where sum equals five while product equals six thus r",
    "use vieta relations where sum equals five while product equals six therefore r",
    "completing a square gives y plus half squared is quarter then take root 1 over 4",
    "completing a square yields y plus half squared is quarter then take root 1 over 4",
    "completing a square gives y plus half squared is quarter so take root 1 over 4",
]
SOLUTION_GROUPS = [0, 0, 0, 1, 1, 1, 2, 2, 2]


def reference_tfidf_similarity(texts: list[str], pattern: str) -> np.ndarray:
    docs = [Counter(re.findall(pattern, text.lower())) for text in texts]
    vocabulary = sorted(set().union(*docs))
    counts = np.array([[doc[word] for word in vocabulary] for doc in docs], dtype=float)
    df = (counts > 0).sum(axis=0)
    idf = np.log((1 + len(texts)) / (1 + df)) + 1.0
    weights = counts * idf
    weights /= np.linalg.norm(weights, axis=1, keepdims=True)
    return weights @ weights.T


def test_tfidf_similarity_matches_reference_formula():
    texts = [*SOLUTIONS, "x = 2 and y = 3", "Let X be 2; y is 3"]
    got = tfidf_similarity(texts)
    want = reference_tfidf_similarity(texts, DEFAULT_TOKEN_PATTERN)
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-12)


def test_default_token_pattern_keeps_single_characters_and_digits():
    # scikit-learn's default pattern (2+ characters) would see these as identical texts
    sim = tfidf_similarity(["so x = 2 here", "so y = 3 here"])
    assert sim[0, 1] < 0.99
    default_like = tfidf_similarity(["so x = 2 here", "so y = 3 here"], r"(?u)\b\w\w+\b")
    assert default_like[0, 1] == pytest.approx(1.0, abs=1e-12)


def test_tfidf_similarity_properties():
    sim = tfidf_similarity(SOLUTIONS)
    np.testing.assert_allclose(sim, sim.T, atol=1e-15)
    np.testing.assert_array_equal(np.diag(sim), 1.0)
    assert sim.min() >= 0.0 and sim.max() <= 1.0
    assert sim[0, 3] == 0.0  # disjoint vocabularies


def test_token_less_texts_cluster_only_with_identical_texts():
    sim = tfidf_similarity(["", "", "the answer is 4", "?!"])
    want = np.array(
        [[1, 1, 0, 0], [1, 1, 0, 0], [0, 0, 1, 0], [0, 0, 0, 1]],
        dtype=float,
    )
    np.testing.assert_array_equal(sim, want)
    # no token anywhere: TF-IDF has no vocabulary, identical strings still match
    np.testing.assert_array_equal(
        tfidf_similarity(["", "..", ""]), [[1, 0, 1], [0, 1, 0], [1, 0, 1]]
    )
    assert tfidf_similarity([]).shape == (0, 0)


@pytest.mark.parametrize("method", LINKAGES)
def test_known_solution_clusters_for_every_linkage(method):
    labels = cluster_labels(tfidf_similarity(SOLUTIONS), threshold=0.8, linkage=method)
    assert labels.tolist() == SOLUTION_GROUPS
    assert cluster_sizes(labels).tolist() == [3, 3, 3]


def chain_similarity() -> np.ndarray:
    # a~b and b~c are close, a and c are not: a chain.
    return np.array([[1.0, 0.9, 0.5], [0.9, 1.0, 0.9], [0.5, 0.9, 1.0]])


def test_linkages_differ_on_a_chain():
    sim = chain_similarity()
    # single: connected components of sim >= 0.8 -> one cluster
    assert cluster_labels(sim, 0.8, "single").tolist() == [0, 0, 0]
    # complete: {a,b} at distance 0.1, then to c at max(0.5, 0.1) = 0.5 > 0.2 -> split
    assert cluster_labels(sim, 0.8, "complete").tolist() == [0, 0, 1]
    # average: {a,b} to c at (0.5 + 0.1) / 2 = 0.3 > 0.2 -> split; at threshold 0.6
    # (distance 0.4) they merge
    assert cluster_labels(sim, 0.8, "average").tolist() == [0, 0, 1]
    assert cluster_labels(sim, 0.6, "average").tolist() == [0, 0, 0]
    assert cluster_labels(sim, 0.6, "complete").tolist() == [0, 0, 1]


def test_single_linkage_equals_scipy_fcluster_on_random_matrices():
    rng = np.random.default_rng(7)
    for trial in range(20):
        m = int(rng.integers(2, 40))
        points = rng.random((m, 5)) ** 3
        points /= np.linalg.norm(points, axis=1, keepdims=True)
        sim = np.clip(points @ points.T, 0, 1)
        threshold = 0.8
        # keep away from exact ties at the threshold, where float rounding decides
        if np.any(np.abs(sim - threshold) < 1e-6):
            continue
        distance = 1.0 - sim
        np.fill_diagonal(distance, 0.0)
        tree = linkage(squareform(distance, checks=False), method="single")
        want = fcluster(tree, t=1.0 - threshold, criterion="distance")
        got = cluster_labels(sim, threshold, "single")
        # same partition: labels equal up to renaming
        pairs = set(zip(got.tolist(), want.tolist(), strict=True))
        assert len(pairs) == len(set(got.tolist())) == len(set(want.tolist())), trial


def test_threshold_one_groups_identical_texts():
    texts = ["the answer is 7", "the answer is 7", "the answer is 8"]
    for method in LINKAGES:
        assert cluster_labels(tfidf_similarity(texts), 1.0, method).tolist() == [0, 0, 1]


def test_labels_are_numbered_by_first_appearance():
    sim = np.eye(4)
    sim[1, 3] = sim[3, 1] = 0.95
    for method in LINKAGES:
        assert cluster_labels(sim, 0.8, method).tolist() == [0, 1, 2, 1]


def test_small_and_invalid_inputs():
    assert cluster_labels(np.zeros((0, 0))).tolist() == []
    assert cluster_labels(np.ones((1, 1))).tolist() == [0]
    with pytest.raises(ValueError, match="threshold"):
        cluster_labels(np.eye(2), threshold=0.0)
    with pytest.raises(ValueError, match="linkage"):
        cluster_labels(np.eye(2), linkage="ward")
    with pytest.raises(ValueError, match="square"):
        cluster_labels(np.ones((2, 3)))


def test_cluster_order_makes_clusters_contiguous_largest_first():
    labels = np.array([2, 0, 1, 0, 2, 0])
    order = cluster_order(labels)
    assert sorted(order.tolist()) == list(range(6))
    assert labels[order].tolist() == [0, 0, 0, 2, 2, 1]
    # within a cluster the original order is kept
    assert order.tolist() == [1, 3, 5, 0, 4, 2]


# ---- eval-ucc's fast paths against the plain formulas they replace --------------------


def test_tfidf_cosine_is_bitwise_the_out_of_place_formula():
    # the in-place scaling must give the very same floats as new arrays did
    from ratioscope.functional.clustering import term_counts, tfidf_cosine, token_lists

    texts = [*SOLUTIONS, "x = 2 and y = 3", "Let X be 2; y is 3", "", "x_1 ünï 2 2 2"]
    terms = term_counts(token_lists([text.lower() for text in texts]))
    counts = terms.counts.astype(np.float64)
    m = counts.shape[0]
    df = np.count_nonzero(terms.counts, axis=0)
    weights = counts * (np.log((m + 1) / (df + 1)) + 1.0)
    norms = np.sqrt(np.einsum("ij,ij->i", weights, weights))
    unit = weights / np.where(norms > 0.0, norms, 1.0)[:, None]
    want = np.clip(unit @ unit.T, 0.0, 1.0)
    want[np.ix_([m - 2], [m - 2])] = 1.0  # the token-less text, alone
    np.fill_diagonal(want, 1.0)
    np.testing.assert_array_equal(tfidf_cosine(texts, terms=terms), want)


def _same_partition(first: np.ndarray, second: np.ndarray) -> bool:
    pairs = set(zip(first.tolist(), second.tolist(), strict=True))
    return len(pairs) == len(set(first.tolist())) == len(set(second.tolist()))


def test_connected_components_equal_scipys():
    from scipy.sparse import csr_matrix
    from scipy.sparse.csgraph import connected_components as scipy_components

    from ratioscope.functional.clustering import connected_components

    rng = np.random.default_rng(3)
    graphs = [rng.random((m, m)) < p for m in (1, 2, 7, 60, 200) for p in (0.0, 0.01, 0.05, 0.5)]
    chain = np.eye(300, k=1, dtype=bool)  # a path: needs more rounds, scipy finishes it
    shuffled = rng.permutation(300)
    graphs += [chain, chain[np.ix_(shuffled, shuffled)], np.zeros((0, 0), dtype=bool)]
    for adjacent in graphs:  # not symmetric: an edge either way links the pair
        got = connected_components(adjacent)
        _, want = scipy_components(csr_matrix(adjacent), directed=False)
        assert _same_partition(got, want)
