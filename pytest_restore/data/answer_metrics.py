"""LoCoMo's answer metrics: token F1 as its evaluation computes it, and BLEU-1 as mem0's table reports it.

They describe an answer against its reference; they do not decide anything
the audit decides (the judge's verdict makes the bins). A paper reports them
so its numbers can be placed beside LoCoMo's and mem0's tables.

**Token F1** follows ``task_eval/evaluation.py`` of snap-research/locomo:

- normalisation (:func:`normalise`): commas removed, lower case, every ASCII
  punctuation character removed, the words ``a``, ``an``, ``the`` *and*
  ``and`` removed, whitespace folded;
- every token stemmed with NLTK's Porter stemmer
  (:func:`pytest_restore.data.porter.stem`, our implementation, checked
  against NLTK's output in the tests);
- F1 of the two token multisets (:func:`token_f1`; no token in common: 0);
- per category (:func:`locomo_f1`): multi-hop (1) splits the answer and the
  reference at commas and averages, over the reference's parts, the best F1
  of any answer part; open-domain (3) scores against the reference up to its
  first ``;``; temporal (2) and single-hop (4) are plain token F1.
  Adversarial (5) questions are not audited (the loader leaves them out), so
  its rule (1 when the answer says "no information available" or "not
  mentioned") is not implemented.

Where we differ: a question that is not LoCoMo's (a LongMemEval type) is
scored by the plain rule; an answer that failed (``None``) has no score
rather than 0.

**BLEU-1** (:func:`bleu1`) is what mem0's evaluation reports: the clipped
unigram precision of the lower-cased answer against the lower-cased
reference, times the brevity penalty (``exp(1 - r/c)`` when the answer is
shorter than the reference); no stemming, articles kept. mem0 tokenises with
NLTK's ``word_tokenize`` (which needs a downloaded model); we split into
runs of letters and digits and single punctuation marks, which agrees with
it except on contractions (``don't`` is ``don ' t`` here, ``do n't`` there).
"""

from __future__ import annotations

import math
import re
import string
from collections import Counter

from pytest_restore.data.porter import stem

__all__ = ["bleu1", "category_of", "locomo_f1", "normalise", "token_f1"]

_PUNCTUATION = frozenset(string.punctuation)
_ARTICLES = re.compile(r"\b(a|an|the|and)\b")
_BLEU_TOKEN = re.compile(r"\w+|[^\w\s]")
_CATEGORY = re.compile(r"\((\d)\)$")


def normalise(text: str) -> str:
    """LoCoMo's answer normalisation: no commas, lower case, no punctuation, no a/an/the/and, single spaces."""
    text = text.replace(",", "").lower()
    text = "".join(ch for ch in text if ch not in _PUNCTUATION)
    return " ".join(_ARTICLES.sub(" ", text).split())


def _stems(text: str) -> list[str]:
    return [stem(word) for word in normalise(text).split()]


def token_f1(answer: str, reference: str) -> float:
    """Token F1 of the stemmed, normalised answer against the reference (LoCoMo's ``f1_score``)."""
    said, meant = _stems(answer), _stems(reference)
    same = sum((Counter(said) & Counter(meant)).values())
    if same == 0:
        return 0.0
    precision, recall = same / len(said), same / len(meant)
    return 2 * precision * recall / (precision + recall)


def category_of(question_type: str) -> int | None:
    """The LoCoMo category of a question type as the LoCoMo loader writes it (``multi-hop (1)`` -> 1); ``None`` otherwise."""
    match = _CATEGORY.search(question_type)
    return int(match.group(1)) if match else None


def locomo_f1(answer: str, reference: str, category: int | None) -> float:
    """Token F1 by LoCoMo's per-category rule (module docstring); any other question by the plain rule."""
    if category == 1:
        parts = [p.strip() for p in answer.split(",")]
        wanted = [r.strip() for r in reference.split(",")]
        return sum(max(token_f1(p, r) for p in parts) for r in wanted) / len(wanted)
    if category == 3:
        reference = reference.split(";")[0].strip()
    return token_f1(answer, reference)


def bleu1(answer: str, reference: str) -> float:
    """BLEU-1 of the answer against one reference: clipped unigram precision times the brevity penalty."""
    said = _BLEU_TOKEN.findall(answer.lower())
    meant = _BLEU_TOKEN.findall(reference.lower())
    if not said or not meant:
        return 0.0
    clipped = sum((Counter(said) & Counter(meant)).values())
    if clipped == 0:
        return 0.0
    brevity = 1.0 if len(said) > len(meant) else math.exp(1 - len(meant) / len(said))
    return brevity * clipped / len(said)
