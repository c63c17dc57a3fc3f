"""Surface diversity of a problem's correct responses (QUATRO App. C.5).

Four pairwise similarities, each averaged over pairs of correct responses (lower means
more diverse):

- TF-IDF cosine: from the same per-problem TF-IDF as the clustering, over all pairs.
- ROUGE-L F: 2 LCS(a, b) / (|a| + |b|) on rouge-score's tokens (lower-cased ASCII
  letters and digits, no stemming), so the value equals ``rouge_score``'s
  ``rougeL`` F-measure. The LCS runs in rapidfuzz's bit-parallel ``LCSseq`` on tokens
  mapped to single characters, which is exact and far faster than rouge-score's
  pure-Python dynamic programme.
- Token Jaccard: |A ∩ B| / |A ∪ B| on the sets of lower-cased TF-IDF tokens.
- Normalised edit similarity: 1 - Levenshtein(a, b) / max(|a|, |b|) on characters.

The last three are computed on at most ``max_pairs`` pairs per problem, drawn without
replacement by a generator with a fixed seed, so the same input gives the same numbers.

:func:`problem_similarity` is what ``eval-ucc`` runs: it tokenises each text once, for
the TF-IDF, the clustering, Jaccard and (with the default token pattern, see
:func:`rouge_ids`) ROUGE-L, and scores the sampled pairs in batches. The per-pair
:func:`diversity_scores` (on scikit-learn's TF-IDF) is kept as its reference: the two
agree exactly on ROUGE-L, Jaccard and edit similarity and to 1e-15 on the TF-IDF cosine
(tested). Edit similarity, an exact character Levenshtein on every sampled pair, is most
of the time of eval-ucc: rapidfuzz's banded mode (``score_cutoff``/``score_hint``)
was tried and saves nothing here, because most pairs of different solutions are more
than half their length apart and need the full matrix.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import chain, count

import numpy as np
from rapidfuzz import process
from rapidfuzz.distance import LCSseq, Levenshtein

from ratioscope import defaults
from ratioscope.errors import ParameterError
from ratioscope.functional.clustering import (
    DEFAULT_TOKEN_PATTERN,
    SeparatorTable,
    TermCounts,
    term_counts,
    tfidf_cosine,
    token_lists,
)

DEFAULT_MAX_PAIRS = defaults.MAX_PAIRS
DEFAULT_SEED = defaults.SEED

_ROUGE_TOKEN = re.compile(r"[a-z0-9]+")
# rouge-score's tokens are the maximal [a-z0-9] runs of the lower-cased text
_ROUGE_SEPARATORS = SeparatorTable(re.compile(r"[a-z0-9]"))
# Surrogate code points cannot stand for tokens in a str, so ids skip over them.
_SURROGATE_START, _SURROGATE_COUNT = 0xD800, 0x800


@dataclass(frozen=True)
class DiversityScores:
    """Mean pairwise similarities of one problem's correct responses (NaN: no pair).

    Attributes:
        tfidf_cosine: mean over all pairs of the TF-IDF cosine similarity.
        rouge_l: mean ROUGE-L F over the sampled pairs.
        jaccard: mean token Jaccard similarity over the sampled pairs.
        edit_similarity: mean normalised edit similarity over the sampled pairs.
        pairs: number of sampled pairs (0 when there are fewer than two responses).
    """

    tfidf_cosine: float
    rouge_l: float
    jaccard: float
    edit_similarity: float
    pairs: int


def rouge_tokens(text: str) -> list[str]:
    """rouge-score's default tokenizer: lower-case, keep runs of [a-z0-9], no stemming.

    >>> rouge_tokens("Let x = 2; then X^2 is 4.")
    ['let', 'x', '2', 'then', 'x', '2', 'is', '4']
    """
    return _ROUGE_TOKEN.findall(text.lower())


def lexical_tokens(text: str, token_pattern: str = DEFAULT_TOKEN_PATTERN) -> list[str]:
    """Tokens as TF-IDF sees them: lower-cased matches of ``token_pattern``.

    >>> lexical_tokens("Let x = 2")
    ['let', 'x', '2']
    """
    return re.findall(token_pattern, text.lower())


def encode_tokens(token_lists: Sequence[Sequence[str]]) -> list[str]:
    """Map each distinct token to one character so that a token list becomes a string.

    LCS over the encoded strings equals LCS over the token lists, and rapidfuzz runs
    fastest on strings.

    >>> encode_tokens([["a", "b"], ["b", "c"]]) == ["\\x00\\x01", "\\x01\\x02"]
    True
    """
    vocabulary = dict.fromkeys(chain.from_iterable(token_lists))
    char_of = {token: chr(_code_point(i)) for i, token in enumerate(vocabulary)}
    return ["".join(map(char_of.__getitem__, tokens)) for tokens in token_lists]


def _code_point(token_id: int) -> int:
    return token_id if token_id < _SURROGATE_START else token_id + _SURROGATE_COUNT


def encode_ids(ids: np.ndarray, lengths: np.ndarray) -> list[str]:
    """:func:`encode_tokens` for token ids: one character per id, one string per text.

    All texts are converted in one vectorised step (ids -> UTF-32 -> str) and then
    sliced, instead of one dictionary look-up and join per token.

    Args:
        ids: [T] int, non-negative token ids of all texts, text after text.
        lengths: [m] int, tokens per text.

    >>> encode_ids(np.array([0, 1, 1, 2]), np.array([2, 0, 2])) == encode_tokens(
    ...     [["a", "b"], [], ["b", "c"]]
    ... )
    True
    """
    ids = np.asarray(ids, dtype=np.int64)
    codes = np.where(ids < _SURROGATE_START, ids, ids + _SURROGATE_COUNT).astype("<u4")
    joined = codes.tobytes().decode("utf-32-le")
    ends = np.cumsum(np.asarray(lengths, dtype=np.int64)).tolist()
    return [joined[start:end] for start, end in zip([0, *ends[:-1]], ends, strict=True)]


def rouge_ids(terms: TermCounts) -> tuple[np.ndarray, np.ndarray]:
    """rouge-score's tokens of texts as ids, from their default-pattern TF-IDF tokens.

    Every rouge-score character ([a-z0-9]) is a word character, so each maximal
    [a-z0-9] run of a text lies inside one maximal word-character run (a TF-IDF token
    of the default pattern) and is maximal there too: a text's rouge-score tokens are
    its TF-IDF tokens' rouge-score tokens, in order. So the tokens are mapped per
    distinct term instead of tokenising every text a second time.

    Args:
        terms: :func:`term_counts` of the lower-cased texts' default-pattern tokens.

    Returns:
        ([T'] int64 ids, text after text; [m] int64 tokens per text). Equal ids mean
        equal tokens (the ids are a one-to-one code, as :func:`encode_tokens` needs).
    """
    vocabulary = terms.vocabulary
    joined = " ".join(vocabulary)
    if joined.translate(_ROUGE_SEPARATORS) == joined:
        return terms.ids, terms.lengths  # every term is one [a-z0-9] run: the same tokens
    pieces = [term.translate(_ROUGE_SEPARATORS).split() for term in vocabulary]
    per_term = np.fromiter(map(len, pieces), dtype=np.int64, count=len(pieces))
    tokens = list(chain.from_iterable(pieces))
    index = dict(zip(dict.fromkeys(tokens), count()))
    flat = np.fromiter(map(index.__getitem__, tokens), dtype=np.int64, count=len(tokens))
    if np.all(per_term == 1):  # e.g. "x_" -> "x": the same token count, other ids
        return flat[terms.ids], terms.lengths
    # expand each token into its term's pieces: piece k of a token is flat[start + k]
    per_token = per_term[terms.ids]
    pieces_before = np.concatenate(([0], np.cumsum(per_token)))
    term_of_piece = np.repeat(terms.ids, per_token)
    within = np.arange(pieces_before[-1]) - np.repeat(pieces_before[:-1], per_token)
    start = np.cumsum(per_term) - per_term
    text_bounds = np.concatenate(([0], np.cumsum(terms.lengths)))
    return flat[start[term_of_piece] + within], np.diff(pieces_before[text_bounds])


def rouge_l_from_lcs(lcs: np.ndarray, length_a: np.ndarray, length_b: np.ndarray) -> np.ndarray:
    """ROUGE-L F from LCS lengths: 2 LCS / (|a| + |b|), and 0 where a sequence is empty.

    This is rouge-score's F with beta = 1 (2PR / (P + R) with P = LCS/|b|, R = LCS/|a|).

    >>> rouge_l_from_lcs(np.array([2, 0]), np.array([3, 0]), np.array([3, 4])).tolist()
    [0.6666666666666666, 0.0]
    """
    lcs, length_a, length_b = (np.asarray(x, dtype=np.float64) for x in (lcs, length_a, length_b))
    total = length_a + length_b
    empty = (length_a == 0) | (length_b == 0)
    return np.where(empty, 0.0, 2.0 * lcs / np.where(empty, 1.0, total))


def rouge_l_f(a: Sequence[object] | str, b: Sequence[object] | str) -> float:
    """ROUGE-L F-measure of two token sequences (see :func:`rouge_l_from_lcs`).

    >>> rouge_l_f(["the", "cat", "sat"], ["the", "cat", "ran"])
    0.6666666666666666
    """
    lcs = LCSseq.similarity(a, b)
    return float(rouge_l_from_lcs(np.array([lcs]), np.array([len(a)]), np.array([len(b)]))[0])


def rouge_l_pairs(first: Sequence[str], second: Sequence[str]) -> np.ndarray:
    """ROUGE-L F of many pairs of token-encoded strings (see :func:`encode_tokens`).

    Args:
        first, second: M encoded responses each; pair i is (first[i], second[i]).

    Returns:
        [M] float64.

    >>> rouge_l_pairs(["abc", "ab"], ["abd", ""]).tolist()
    [0.6666666666666666, 0.0]
    """
    # cpdist compares element-wise in C without a Python call per pair. One thread: an
    # LCS of ~200 tokens takes ~1 us, less than handing work to a thread pool.
    lcs = process.cpdist(first, second, scorer=LCSseq.similarity, dtype=np.int64, workers=1)
    lengths_a = np.fromiter(map(len, first), dtype=np.int64, count=len(first))
    lengths_b = np.fromiter(map(len, second), dtype=np.int64, count=len(second))
    return rouge_l_from_lcs(lcs, lengths_a, lengths_b)


def edit_similarity_pairs(first: Sequence[str], second: Sequence[str]) -> np.ndarray:
    """Normalised edit similarity of many pairs of strings, element-wise, on all cores.

    A Levenshtein distance of two 1 KB responses costs tens of microseconds, worth
    spreading over threads (rapidfuzz releases the GIL).

    >>> edit_similarity_pairs(["kitten", ""], ["sitting", ""]).round(4).tolist()
    [0.5714, 1.0]
    """
    return process.cpdist(
        first, second, scorer=Levenshtein.normalized_similarity, dtype=np.float64, workers=-1
    )


def jaccard(a: set[str] | frozenset[str], b: set[str] | frozenset[str]) -> float:
    """|A ∩ B| / |A ∪ B|; two empty sets are identical (1.0).

    >>> jaccard({"a", "b"}, {"b", "c"})
    0.3333333333333333
    """
    union = len(a | b)
    return 1.0 if union == 0 else len(a & b) / union


def edit_similarity(a: str, b: str) -> float:
    """1 - Levenshtein(a, b) / max(|a|, |b|) on characters; 1.0 for two empty strings.

    >>> edit_similarity("kitten", "sitting")
    0.5714285714285714
    """
    return float(Levenshtein.normalized_similarity(a, b))


def sample_pairs(m: int, max_pairs: int, seed: int = DEFAULT_SEED) -> np.ndarray:
    """Index pairs (i < j) of m items: all of them, or ``max_pairs`` drawn without replacement.

    Deterministic: the same (m, max_pairs, seed) gives the same pairs, sorted.

    Returns:
        [M, 2] int64 with M = min(m (m - 1) / 2, max_pairs).

    >>> sample_pairs(3, 10).tolist()
    [[0, 1], [0, 2], [1, 2]]
    >>> len(sample_pairs(100, 50))
    50
    """
    if max_pairs < 0:
        raise ParameterError("max_pairs", f"must be >= 0, got {max_pairs}")
    rows, cols = np.triu_indices(max(m, 0), k=1)
    total = rows.size
    if total > max_pairs:
        chosen = np.sort(np.random.default_rng(seed).choice(total, size=max_pairs, replace=False))
        rows, cols = rows[chosen], cols[chosen]
    return np.stack([rows, cols], axis=1).astype(np.int64)


def mean_offdiagonal(similarity: np.ndarray) -> float:
    """Mean of the strict upper triangle of an [m, m] matrix; NaN when m < 2.

    >>> mean_offdiagonal(np.array([[1.0, 0.2, 0.4], [0.2, 1.0, 0.6], [0.4, 0.6, 1.0]]))
    0.4
    """
    sim = np.asarray(similarity, dtype=np.float64)
    rows, cols = np.triu_indices(sim.shape[0], k=1)
    return float(sim[rows, cols].mean()) if rows.size else float("nan")


def diversity_scores(
    texts: Sequence[str],
    tfidf: np.ndarray,
    max_pairs: int = DEFAULT_MAX_PAIRS,
    seed: int = DEFAULT_SEED,
    token_pattern: str = DEFAULT_TOKEN_PATTERN,
) -> DiversityScores:
    """The four similarities of QUATRO App. C.5 for one problem's correct responses.

    Args:
        texts: m correct responses.
        tfidf: [m, m] their TF-IDF cosine similarity (see ``tfidf_similarity``).
        max_pairs: pairs sampled for ROUGE-L, Jaccard and edit similarity; 0 skips them
            (they are then NaN).
        seed: seed of the pair sampler.
        token_pattern: the TF-IDF token pattern, also used for Jaccard.

    Returns:
        :class:`DiversityScores`; NaN where there is no pair.
    """
    pairs = sample_pairs(len(texts), max_pairs, seed)
    nan = float("nan")
    if pairs.shape[0] == 0:
        return DiversityScores(mean_offdiagonal(tfidf), nan, nan, nan, 0)
    first, second = pairs[:, 0].tolist(), pairs[:, 1].tolist()
    used = np.unique(pairs).tolist()
    encoded = dict(zip(used, encode_tokens([rouge_tokens(texts[i]) for i in used]), strict=True))
    token_set = {i: frozenset(lexical_tokens(texts[i], token_pattern)) for i in used}
    rouge = rouge_l_pairs([encoded[i] for i in first], [encoded[j] for j in second])
    edit = edit_similarity_pairs([texts[i] for i in first], [texts[j] for j in second])
    jac = [jaccard(token_set[i], token_set[j]) for i, j in zip(first, second, strict=True)]
    return DiversityScores(
        tfidf_cosine=mean_offdiagonal(tfidf),
        rouge_l=float(rouge.mean()),
        jaccard=float(np.mean(jac)),
        edit_similarity=float(np.mean(edit)),
        pairs=int(pairs.shape[0]),
    )


@dataclass(frozen=True)
class ProblemSimilarity:
    """TF-IDF similarity and surface diversity of one problem's correct responses.

    Attributes:
        similarity: [m, m] TF-IDF cosine similarity (see :func:`tfidf_cosine`).
        diversity: the four mean similarities; None when m < 2 (no pair).
    """

    similarity: np.ndarray
    diversity: DiversityScores | None


def problem_similarity(
    texts: Sequence[str],
    max_pairs: int = DEFAULT_MAX_PAIRS,
    seed: int = DEFAULT_SEED,
    token_pattern: str = DEFAULT_TOKEN_PATTERN,
) -> ProblemSimilarity:
    """TF-IDF similarity and :func:`diversity_scores` of m texts, each tokenised once.

    Same numbers as ``diversity_scores(texts, tfidf_similarity(texts), ...)``: the same
    pairs, the same ROUGE-L, Jaccard and edit similarity, and the TF-IDF cosine to
    1e-15 (summation order). Jaccard comes from the term counts' presence matrix
    instead of Python sets, and with the default token pattern ROUGE-L's tokens from
    the TF-IDF tokens (:func:`rouge_ids`).

    Args:
        texts: m correct responses.
        max_pairs: pairs sampled for ROUGE-L, Jaccard and edit similarity (0: none).
        seed: seed of the pair sampler.
        token_pattern: TF-IDF (and Jaccard) token regular expression.
    """
    lowered = [text.lower() for text in texts]
    terms = term_counts(token_lists(lowered, token_pattern))
    similarity = tfidf_cosine(texts, token_pattern, terms)
    if len(texts) < 2:
        return ProblemSimilarity(similarity, None)
    pairs = sample_pairs(len(texts), max_pairs, seed)
    scores = _pair_scores(texts, lowered, terms, similarity, pairs, token_pattern)
    return ProblemSimilarity(similarity, scores)


def _pair_scores(
    texts: Sequence[str],
    lowered: Sequence[str],
    terms: TermCounts,
    similarity: np.ndarray,
    pairs: np.ndarray,
    token_pattern: str,
) -> DiversityScores:
    """Mean similarities over ``pairs`` ([M, 2] indices) of one problem's texts."""
    nan = float("nan")
    if pairs.shape[0] == 0:
        return DiversityScores(mean_offdiagonal(similarity), nan, nan, nan, 0)
    first, second = pairs[:, 0], pairs[:, 1]
    first_list, second_list = first.tolist(), second.tolist()
    if token_pattern == DEFAULT_TOKEN_PATTERN:
        # rouge-score's tokens follow from the TF-IDF tokens (see rouge_ids)
        encoded = encode_ids(*rouge_ids(terms))
    else:
        used = np.unique(pairs).tolist()
        # only texts in a sampled pair are encoded; any one-to-one code gives the same LCS
        codes = encode_tokens([lowered[i].translate(_ROUGE_SEPARATORS).split() for i in used])
        encoded = [""] * len(texts)
        for i, code in zip(used, codes, strict=True):
            encoded[i] = code
    rouge = rouge_l_pairs([encoded[i] for i in first_list], [encoded[j] for j in second_list])
    edit = edit_similarity_pairs([texts[i] for i in first_list], [texts[j] for j in second_list])
    return DiversityScores(
        tfidf_cosine=mean_offdiagonal(similarity),
        rouge_l=float(rouge.mean()),
        jaccard=float(jaccard_pairs(terms.present, first, second).mean()),
        edit_similarity=float(np.mean(edit)),
        pairs=int(pairs.shape[0]),
    )


def jaccard_pairs(present: np.ndarray, first: np.ndarray, second: np.ndarray) -> np.ndarray:
    """Token-set Jaccard of many pairs from a presence matrix; 1.0 for two empty sets.

    Integer counts divided once, so each value equals :func:`jaccard` on Python sets.

    Args:
        present: [m, V] bool, term t occurs in text i.
        first, second: [M] int indices; pair p is (first[p], second[p]).

    Returns:
        [M] float64.

    >>> present = np.array([[1, 1, 0], [0, 1, 1], [0, 0, 0]], dtype=bool)
    >>> jaccard_pairs(present, np.array([0, 2]), np.array([1, 2])).tolist()
    [0.3333333333333333, 1.0]
    """
    sizes = np.count_nonzero(present, axis=1)
    shared = np.count_nonzero(present[first] & present[second], axis=1)
    union = sizes[first] + sizes[second] - shared
    return np.where(union == 0, 1.0, shared / np.where(union == 0, 1, union))
