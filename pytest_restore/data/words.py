"""Content words: the tokenisation every text path shares.

Lower-case, split into runs of ASCII letters and digits, drop a fixed list of
English stopwords and one-character tokens. No stemming. The synthetic world
uses it to keep its distractors off a question's words; the memory's ranker
and redundancy policy (:mod:`pytest_restore.memory.lexical`) score with it.
"""

from __future__ import annotations

import re
from functools import lru_cache

_WORD = re.compile(r"[a-z0-9]+")

STOPWORDS = frozenset(
    ["a", "about", "above", "after", "again", "against", "all", "am", "an", "and", "any", "are", "as", "at", "be", "because", "been", "before", "being", "below", "between", "both", "but", "by", "can", "could", "did", "do", "does", "doing", "down", "during", "each", "few", "for", "from", "further", "had", "has", "have", "having", "he", "her", "here", "hers", "herself", "him", "himself", "his", "how", "i", "if", "in", "into", "is", "it", "its", "itself", "just", "let", "me", "more", "most", "my", "myself", "no", "nor", "not", "now", "of", "off", "on", "once", "only", "or", "other", "our", "ours", "ourselves", "out", "over", "own", "same", "she", "should", "so", "some", "such", "than", "that", "the", "their", "theirs", "them", "themselves", "then", "there", "these", "they", "this", "those", "through", "to", "too", "under", "until", "up", "very", "was", "we", "were", "what", "when", "where", "which", "while", "who", "whom", "why", "will", "with", "would", "you", "your", "yours", "yourself", "yourselves", "s", "t", "d", "ll", "m", "re", "ve", "don", "didn", "doesn", "isn", "wasn", "aren", "weren", "won", "wouldn", "shouldn", "couldn", "also"]
)


#: The first-person words the control's fact density counts (``memory/eviction.fact_density``; the compiled
#: scan in ``memory/kernels.py`` packs them).
FIRST_PERSON = frozenset({"i", "i'm", "i've", "i'd", "my", "me", "mine", "we", "our"})
#: What fact density strips from both ends of a token before looking it up in :data:`FIRST_PERSON`.
FACT_STRIPPED = "\"'()[],;:!?."

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
