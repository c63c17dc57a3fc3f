"""TF-IDF similarity and the clustering of correct responses behind UCC@k (QUATRO Sec. 4).

A problem's correct responses are embedded with TF-IDF fitted on those responses only,
compared by cosine similarity, and grouped into clusters; each cluster stands for one
distinct solution. The default token pattern keeps digits and one-character tokens
("x", "2"), which scikit-learn's default pattern (two characters or more) drops and which
matter in mathematics; punctuation and operators are not tokens in either.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from itertools import chain

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


class SeparatorTable(dict[int, int]):
    """A ``str.translate`` table that maps every character outside a class to a space.

    Each code point is classified once, on first sight, and remembered, so translating
    then splitting on whitespace runs in C: about three times faster than
    ``re.findall`` on 1 KB responses, with the same tokens (maximal runs of the class).
    """

    def __init__(self, member: re.Pattern[str]) -> None:
        super().__init__()
        self._member = member

    def __missing__(self, code: int) -> int:
        value = code if self._member.fullmatch(chr(code)) else ord(" ")
        self[code] = value
        return value


# "\b\w+\b" matches exactly the maximal runs of word characters, and no word character
# is whitespace for str.split, so translate-and-split gives re.findall's tokens.
_WORD_SEPARATORS = SeparatorTable(re.compile(r"\w"))


def token_lists(
    lowered: Sequence[str], token_pattern: str = DEFAULT_TOKEN_PATTERN
) -> list[list[str]]:
    """Tokens of already lower-cased texts, as ``re.findall(token_pattern, text)`` gives them.

    The default pattern takes a faster route with identical output (see
    :class:`SeparatorTable`); any other pattern runs through ``re.findall``.

    >>> token_lists(["let x = 2;", "ünï_2 + y"])
    [['let', 'x', '2'], ['ünï_2', 'y']]
    """
    if token_pattern == DEFAULT_TOKEN_PATTERN:
        return [text.translate(_WORD_SEPARATORS).split() for text in lowered]
    compiled = re.compile(token_pattern)
    return [compiled.findall(text) for text in lowered]


@dataclass(frozen=True)
class TermCounts:
    """Term counts of m texts over their sorted vocabulary (scikit-learn's order).

    Attributes:
        counts: [m, V] int64, counts[i, t] = occurrences of term t in text i.
        vocabulary: the V distinct terms, sorted; column t is ``vocabulary[t]``.
        ids: [T] int64, the column of every token, text after text, in text order; so
            the token lists can be rebuilt (and re-encoded) without tokenising again.
        lengths: [m] int64, tokens per text (``ids`` splits at their cumulative sums).
    """

    counts: np.ndarray
    vocabulary: tuple[str, ...] = ()
    ids: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    lengths: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))

    @property
    def present(self) -> np.ndarray:
        """[m, V] bool: term t occurs in text i (the token sets of Jaccard)."""
        return self.counts > 0


def term_counts(tokens: Sequence[Sequence[str]]) -> TermCounts:
    """Count the tokens of m texts into an [m, V] matrix, V = distinct tokens, sorted.

    >>> found = term_counts([["b", "a", "b"], []])
    >>> found.counts.tolist(), found.vocabulary, found.ids.tolist(), found.lengths.tolist()
    ([[1, 2], [0, 0]], ('a', 'b'), [1, 0, 1], [3, 0])
    """
    vocabulary = sorted(set().union(*tokens)) if tokens else []
    width = len(vocabulary)
    column = dict(zip(vocabulary, range(width), strict=True))
    lengths = np.fromiter(map(len, tokens), dtype=np.int64, count=len(tokens))
    ids = np.fromiter(
        map(column.__getitem__, chain.from_iterable(tokens)),
        dtype=np.int64,
        count=int(lengths.sum()),
    )
    rows = np.repeat(np.arange(len(tokens), dtype=np.int64), lengths)
    flat = np.bincount(rows * width + ids, minlength=len(tokens) * width)
    counts = flat.reshape(len(tokens), width).astype(np.int64, copy=False)
    return TermCounts(counts, tuple(vocabulary), ids, lengths)


def tfidf_cosine(
    texts: Sequence[str],
    token_pattern: str = DEFAULT_TOKEN_PATTERN,
    terms: TermCounts | None = None,
) -> np.ndarray:
    """:func:`tfidf_similarity` without scikit-learn, optionally from known term counts.

    Equal to :func:`tfidf_similarity` to 1e-15 (tested); eval-ucc uses this one, which
    lets the diversity scores reuse the counts instead of tokenising the texts again.

    The same weights as ``TfidfVectorizer``'s defaults: raw counts times the smoothed
    idf ``ln((1 + m) / (1 + df)) + 1``, rows scaled to unit l2 norm; and the same rule
    for texts without a token (similarity 1 to identical texts, 0 to the others).

    Args:
        texts: m texts (compared as strings where a text has no token).
        token_pattern: regular expression for one token.
        terms: their counts (:func:`term_counts` of :func:`token_lists`), when known.

    Returns:
        [m, m] float64, symmetric, ones on the diagonal, values in [0, 1].

    >>> tfidf_cosine(["x = 2", "X = 2", "y is 3"]).round(3).tolist()
    [[1.0, 1.0, 0.0], [1.0, 1.0, 0.0], [0.0, 0.0, 1.0]]
    """
    if terms is None:
        terms = term_counts(token_lists([text.lower() for text in texts], token_pattern))
    m = terms.counts.shape[0]
    if m == 0:
        return np.zeros((0, 0))
    df = np.count_nonzero(terms.counts, axis=0)
    # one [m, V] array scaled in place: the same products and quotients as new arrays,
    # without paying for fresh memory (page faults) twice more per problem
    weights = terms.counts.astype(np.float64)
    weights *= np.log((m + 1) / (df + 1)) + 1.0
    norms = np.sqrt(np.einsum("ij,ij->i", weights, weights))
    weights /= np.where(norms > 0.0, norms, 1.0)[:, None]
    similarity = weights @ weights.T
    np.clip(similarity, 0.0, 1.0, out=similarity)
    empty_rows = np.flatnonzero(norms == 0.0)
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
        raw = connected_components(sim >= threshold - _ROUNDING)
    else:
        from scipy.cluster.hierarchy import fcluster
        from scipy.cluster.hierarchy import linkage as hierarchical
        from scipy.spatial.distance import squareform

        distance = np.clip(1.0 - (sim + sim.T) / 2.0, 0.0, 1.0)
        np.fill_diagonal(distance, 0.0)
        tree = hierarchical(squareform(distance, checks=False), method=linkage)
        raw = fcluster(tree, t=1.0 - threshold + _ROUNDING, criterion="distance")
    return _relabel_by_first_appearance(np.asarray(raw))


_PROPAGATION_ROUNDS = 8
"""Rounds of label propagation before :func:`connected_components` hands over to scipy."""


def connected_components(adjacent: np.ndarray) -> np.ndarray:
    """Connected components of an undirected graph given as a dense [m, m] bool matrix.

    An edge joins i and j where ``adjacent[i, j]`` or ``adjacent[j, i]``. Each item
    takes the smallest label among itself and its neighbours, then its label's label
    (pointer jumping), until nothing changes; labels only ever move to a smaller member
    of the same component, so at the fixed point every item holds its component's
    smallest index. Responses of one solution are near-duplicates, so their clusters
    are dense and this settles in a few rounds, without scipy's sparse conversion
    (about a millisecond per problem); a graph that needs more than
    ``_PROPAGATION_ROUNDS`` rounds goes to scipy. Either way the components are the same.

    Returns:
        [m] int64: a component label per item (equal labels, same component).

    >>> connected_components(np.array([[1, 0, 0], [0, 1, 1], [0, 0, 1]], dtype=bool)).tolist()
    [0, 1, 1]
    """
    linked = adjacent | adjacent.T
    m = linked.shape[0]
    labels = np.arange(m, dtype=np.int64)
    for _ in range(_PROPAGATION_ROUNDS):
        smallest = np.minimum(np.where(linked, labels, m).min(axis=1, initial=m), labels)
        smallest = smallest[smallest]
        if np.array_equal(smallest, labels):
            return labels
        labels = smallest
    from scipy.sparse import csr_matrix
    from scipy.sparse.csgraph import connected_components as scipy_components

    return np.asarray(scipy_components(csr_matrix(linked), directed=False)[1], dtype=np.int64)


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
