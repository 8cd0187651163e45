"""Lexical analysis shared by the redundancy policy and the BM25-lite ranker.

Tokenisation: lower-case, split into runs of ASCII letters and digits, drop a
fixed list of English stopwords and one-character tokens. No stemming: the
ranker is a frozen lexical baseline, and a stemmer would be one more thing a
reader of the report has to trust.
"""

from __future__ import annotations

import re
from functools import lru_cache

import numpy as np
import numpy.typing as npt

_WORD = re.compile(r"[a-z0-9]+")

STOPWORDS = frozenset(
    ["a", "about", "above", "after", "again", "against", "all", "am", "an", "and", "any", "are", "as", "at", "be", "because", "been", "before", "being", "below", "between", "both", "but", "by", "can", "could", "did", "do", "does", "doing", "down", "during", "each", "few", "for", "from", "further", "had", "has", "have", "having", "he", "her", "here", "hers", "herself", "him", "himself", "his", "how", "i", "if", "in", "into", "is", "it", "its", "itself", "just", "let", "me", "more", "most", "my", "myself", "no", "nor", "not", "now", "of", "off", "on", "once", "only", "or", "other", "our", "ours", "ourselves", "out", "over", "own", "same", "she", "should", "so", "some", "such", "than", "that", "the", "their", "theirs", "them", "themselves", "then", "there", "these", "they", "this", "those", "through", "to", "too", "under", "until", "up", "very", "was", "we", "were", "what", "when", "where", "which", "while", "who", "whom", "why", "will", "with", "would", "you", "your", "yours", "yourself", "yourselves", "s", "t", "d", "ll", "m", "re", "ve", "don", "didn", "doesn", "isn", "wasn", "aren", "weren", "won", "wouldn", "shouldn", "couldn", "also"]
)


@lru_cache(maxsize=1 << 18)
def words(text: str) -> tuple[str, ...]:
    """The content words of ``text``, in order, repeats kept.

    Memoised: histories share most of their contents, and the ranker and the
    redundancy policy read the same contents for every budget.
    """
    return tuple(w for w in _WORD.findall(text.lower()) if len(w) > 1 and w not in STOPWORDS)


@lru_cache(maxsize=1 << 18)
def word_counts(text: str) -> tuple[int, dict[str, int]]:
    """How many content words ``text`` has, and how often each distinct one occurs.

    The ranker's index reads a few query terms per unit: a dictionary lookup
    per term instead of a pass over every word of every unit. Callers must not
    modify the dictionary (it is shared through the memo).
    """
    all_words = words(text)
    counts: dict[str, int] = {}
    for w in all_words:
        counts[w] = counts.get(w, 0) + 1
    return len(all_words), counts


@lru_cache(maxsize=1 << 18)
def word_set(text: str) -> frozenset[str]:
    """The distinct content words of ``text``."""
    return frozenset(words(text))


_VOCABULARY: dict[str, int] = {}


@lru_cache(maxsize=1 << 18)
def word_ids(text: str) -> npt.NDArray[np.int64]:
    """The distinct content words of ``text`` as ascending ids of a process-wide vocabulary.

    Ids mean nothing across processes; they only make set overlaps a sparse
    matrix product.
    """
    ids = sorted(_VOCABULARY.setdefault(w, len(_VOCABULARY)) for w in word_set(text))
    return np.asarray(ids, dtype=np.int64)
