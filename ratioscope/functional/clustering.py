"""TF-IDF similarity and the clustering of correct responses behind UCC@k (QUATRO Sec. 4).

A problem's correct responses are embedded with TF-IDF fitted on those responses only,
compared by cosine similarity, and grouped into clusters; each cluster stands for one
distinct solution. The default token pattern keeps digits and one-character tokens
("x", "2"), which scikit-learn's default pattern (two characters or more) drops and which
matter in mathematics; punctuation and operators are not tokens in either.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ratioscope import defaults
from ratioscope.errors import ParameterError

DEFAULT_TOKEN_PATTERN = defaults.TOKEN_PATTERN
"""Every run of word characters is a token, one character long or more."""

LINKAGES: tuple[str, ...] = ("single", "average", "complete")
DEFAULT_THRESHOLD = defaults.CLUSTER_THRESHOLD
DEFAULT_LINKAGE = defaults.LINKAGE

_ROUNDING = 1e-9
"""Slack on the threshold so that identical texts (cosine 1 - 1e-16) meet threshold 1."""


def tfidf_similarity(
    texts: Sequence[str], token_pattern: str = DEFAULT_TOKEN_PATTERN
) -> np.ndarray:
    """Pairwise cosine similarity of TF-IDF vectors fitted on ``texts`` themselves.

    scikit-learn's ``TfidfVectorizer`` with its defaults (lower-casing, smoothed idf,
    l2 rows) except ``token_pattern``. A text without any token has a zero vector: it is
    given similarity 1 to identical texts and 0 to all others, so that it forms its own
    cluster rather than a NaN.

    Args:
        texts: m responses.
        token_pattern: regular expression for one token.

    Returns:
        [m, m] float64, symmetric, ones on the diagonal, values in [0, 1].

    >>> s = tfidf_similarity(["x = 2", "x = 2", "y is 3"])
    >>> s.round(3).tolist()
    [[1.0, 1.0, 0.0], [1.0, 1.0, 0.0], [0.0, 0.0, 1.0]]
    """
    from sklearn.feature_extraction.text import TfidfVectorizer

    m = len(texts)
    if m == 0:
        return np.zeros((0, 0))
    vectorizer = TfidfVectorizer(token_pattern=token_pattern, dtype=np.float64)
    try:
        vectors = vectorizer.fit_transform(texts)
    except ValueError:  # no text has a single token: nothing to weigh
        return _identical_text_similarity(texts, np.arange(m))
    similarity = np.asarray((vectors @ vectors.T).todense(), dtype=np.float64)
    np.clip(similarity, 0.0, 1.0, out=similarity)
    empty_rows = np.flatnonzero(vectors.getnnz(axis=1) == 0)
    if empty_rows.size:
        similarity[np.ix_(empty_rows, empty_rows)] = _identical_text_similarity(texts, empty_rows)
    np.fill_diagonal(similarity, 1.0)
    return similarity


def _identical_text_similarity(texts: Sequence[str], rows: np.ndarray) -> np.ndarray:
    chosen = [texts[i] for i in rows]
    return np.array([[1.0 if a == b else 0.0 for b in chosen] for a in chosen])


def cluster_labels(
    similarity: np.ndarray,
    threshold: float = DEFAULT_THRESHOLD,
    linkage: str = DEFAULT_LINKAGE,
) -> np.ndarray:
    """Cluster items from their pairwise similarity.

    ``single``: connected components of the graph with an edge where sim >= threshold
    (equivalently single-linkage cut at distance 1 - threshold). ``average`` and
    ``complete``: scipy hierarchical clustering on the distance 1 - sim, cut so that
    merged clusters are at distance <= 1 - threshold.

    Args:
        similarity: [m, m] float, symmetric, values in [0, 1].
        threshold: similarity at or above which two items may share a cluster, in (0, 1]
            (compared with a slack of 1e-9 for floating-point rounding).
        linkage: one of :data:`LINKAGES`.

    Returns:
        [m] int64 labels 0..C-1, numbered in order of first appearance.

    >>> sim = np.array([[1.0, 0.9, 0.1], [0.9, 1.0, 0.2], [0.1, 0.2, 1.0]])
    >>> cluster_labels(sim).tolist()
    [0, 0, 1]
    """
    sim = np.asarray(similarity, dtype=np.float64)
    if sim.ndim != 2 or sim.shape[0] != sim.shape[1]:
        raise ParameterError("similarity", f"must be a square matrix, got shape {sim.shape}")
    if not 0.0 < threshold <= 1.0:
        raise ParameterError("threshold", f"must lie in (0, 1], got {threshold}")
    if linkage not in LINKAGES:
        raise ParameterError("linkage", f"must be one of {', '.join(LINKAGES)}, got '{linkage}'")
    m = sim.shape[0]
    if m <= 1:
        return np.zeros(m, dtype=np.int64)
    if linkage == "single":
        from scipy.sparse import csr_matrix
        from scipy.sparse.csgraph import connected_components

        _, raw = connected_components(csr_matrix(sim >= threshold - _ROUNDING), directed=False)
    else:
        from scipy.cluster.hierarchy import fcluster
        from scipy.cluster.hierarchy import linkage as hierarchical
        from scipy.spatial.distance import squareform

        distance = np.clip(1.0 - (sim + sim.T) / 2.0, 0.0, 1.0)
        np.fill_diagonal(distance, 0.0)
        tree = hierarchical(squareform(distance, checks=False), method=linkage)
        raw = fcluster(tree, t=1.0 - threshold + _ROUNDING, criterion="distance")
    return _relabel_by_first_appearance(np.asarray(raw))


def _relabel_by_first_appearance(raw: np.ndarray) -> np.ndarray:
    _, first, inverse = np.unique(raw, return_index=True, return_inverse=True)
    rank = np.empty(first.size, dtype=np.int64)
    rank[np.argsort(first, kind="stable")] = np.arange(first.size)
    return rank[inverse.reshape(-1)]


def cluster_sizes(labels: np.ndarray) -> np.ndarray:
    """Sizes of clusters 0..C-1 from labels numbered 0..C-1.

    >>> cluster_sizes(np.array([0, 0, 1, 2, 2, 2])).tolist()
    [2, 1, 3]
    """
    return np.bincount(np.asarray(labels, dtype=np.int64)).astype(np.int64)


def cluster_order(labels: np.ndarray) -> np.ndarray:
    """A permutation that puts items of one cluster next to each other, largest first.

    >>> cluster_order(np.array([0, 1, 0, 1, 1])).tolist()
    [1, 3, 4, 0, 2]
    """
    labels = np.asarray(labels, dtype=np.int64)
    sizes = cluster_sizes(labels)
    return np.lexsort((np.arange(labels.size), labels, -sizes[labels]))
