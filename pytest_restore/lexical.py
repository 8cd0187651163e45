"""Lexical analysis shared by the redundancy policy and the BM25-lite ranker.

Tokenisation: lower-case, split into runs of ASCII letters and digits, drop a
fixed list of English stopwords and one-character tokens. No stemming: the
ranker is a frozen lexical baseline, and a stemmer would be one more thing a
reader of the report has to trust.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache

import numpy as np
import numpy.typing as npt

_WORD = re.compile(r"[a-z0-9]+")

STOPWORDS = frozenset(
    ["a", "about", "above", "after", "again", "against", "all", "am", "an", "and", "any", "are", "as", "at", "be", "because", "been", "before", "being", "below", "between", "both", "but", "by", "can", "could", "did", "do", "does", "doing", "down", "during", "each", "few", "for", "from", "further", "had", "has", "have", "having", "he", "her", "here", "hers", "herself", "him", "himself", "his", "how", "i", "if", "in", "into", "is", "it", "its", "itself", "just", "let", "me", "more", "most", "my", "myself", "no", "nor", "not", "now", "of", "off", "on", "once", "only", "or", "other", "our", "ours", "ourselves", "out", "over", "own", "same", "she", "should", "so", "some", "such", "than", "that", "the", "their", "theirs", "them", "themselves", "then", "there", "these", "they", "this", "those", "through", "to", "too", "under", "until", "up", "very", "was", "we", "were", "what", "when", "where", "which", "while", "who", "whom", "why", "will", "with", "would", "you", "your", "yours", "yourself", "yourselves", "s", "t", "d", "ll", "m", "re", "ve", "don", "didn", "doesn", "isn", "wasn", "aren", "weren", "won", "wouldn", "shouldn", "couldn", "also"]
)


try:  # Counter's C loop (CPython); the same counts in Python elsewhere
    from collections import _count_elements  # type: ignore[attr-defined]
except ImportError:  # pragma: no cover

    def _count_elements(mapping: dict[str, int], iterable: list[str]) -> None:
        for item in iterable:
            mapping[item] = mapping.get(item, 0) + 1


#: Stopwords and one-character tokens: what ``words`` leaves out.
_DROPPED = STOPWORDS | frozenset("abcdefghijklmnopqrstuvwxyz0123456789")
#: Bytes outside ``[a-z0-9]`` as spaces (``bytes.translate``).
_ASCII_RUNS = bytes(c if chr(c) in "abcdefghijklmnopqrstuvwxyz0123456789" else 32 for c in range(256))


def _content_words(text: str) -> list[str]:
    """``words`` of ``text`` as a new list (not memoised)."""
    lowered = text.lower()
    if lowered.isascii():  # the same runs, split in C: every other byte becomes a space
        found = lowered.encode("ascii").translate(_ASCII_RUNS).decode("ascii").split()
    else:
        found = _WORD.findall(lowered)
    return [w for w in found if w not in _DROPPED]


@lru_cache(maxsize=1 << 12)
def words(text: str) -> tuple[str, ...]:
    """The content words of ``text``, in order, repeats kept (memoised for question texts).

    Per-unit work goes through :func:`word_profile` instead, which keeps no
    word strings per text.
    """
    return tuple(_content_words(text))


#: Word -> id, process-wide; ids mean nothing across processes.
_VOCABULARY: dict[str, int] = {}


@dataclass(frozen=True, slots=True)
class WordProfile:
    """What the ranker and the redundancy policy need of one text, as small arrays.

    ``ids`` are the text's distinct content words as ascending ids of the
    process-wide vocabulary (:func:`term_id`), ``counts`` how often each
    occurs, ``total`` how many content words the text has. Memoised per
    distinct text, so its size is what the audit's memory grows with on a
    file of mostly distinct text: about 16 bytes per distinct word of a text,
    where tuples, sets and dictionaries of words took ~20x that.
    """

    ids: npt.NDArray[np.int64]
    counts: npt.NDArray[np.int64]
    total: int


@lru_cache(maxsize=1 << 18)
def word_profile(text: str) -> WordProfile:
    """The :class:`WordProfile` of ``text`` (memoised; callers must not modify its arrays)."""
    found = _content_words(text)
    counts: dict[str, int] = {}
    _count_elements(counts, found)  # Counter's C loop, into a plain dict
    vocabulary = _VOCABULARY
    for w in counts:
        if w not in vocabulary:
            vocabulary[w] = len(vocabulary)
    n = len(counts)
    ids = np.fromiter(map(vocabulary.__getitem__, counts), dtype=np.int64, count=n)
    order = np.argsort(ids, kind="stable")
    return WordProfile(ids[order], np.fromiter(counts.values(), dtype=np.int64, count=n)[order], len(found))


def term_id(word: str) -> int:
    """The vocabulary id of ``word``, or -1 when no profiled text of this process has it."""
    return _VOCABULARY.get(word, -1)


def word_ids(text: str) -> npt.NDArray[np.int64]:
    """The distinct content words of ``text`` as ascending vocabulary ids (see :class:`WordProfile`)."""
    return word_profile(text).ids
