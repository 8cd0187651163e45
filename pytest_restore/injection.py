"""Retrieval and injection: the one procedure that builds every condition's context.

Ranker: a frozen BM25-lite over the store being read (k1 = 1.2, b = 0.75;
document frequency, document count and mean length taken over that store;
tokenisation as in :mod:`pytest_restore.lexical`). Only units that share at
least one content word with the question are retrieved; ties go to the newer
unit. Read-time top-k = 60.

Injection (cap C = 2,000 tokens): first the forced units, deduplicated and
never truncated even past C; then the ranker's results in rank order,
skipping units already forced, adding each one that still fits under C. The
final snippets are ordered chronologically.

Each question's lexical index (term frequencies of the question's words in
every unit) is built once and reused for every store of every policy and
budget.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from .lexical import words
from .units import History

TOP_K = 60
INJECT_CAP = 2000
K1 = 1.2
B = 0.75

#: What the reader sees when nothing is injected.
EMPTY_MEMORY = "(no memory available)"


@dataclass(frozen=True)
class LexicalIndex:
    """Term frequencies of the question's distinct words in each unit of its history."""

    tf: npt.NDArray[np.float64]  # units x query terms
    lengths: npt.NDArray[np.float64]  # content words per unit

    @classmethod
    def build(cls, history: History) -> LexicalIndex:
        """Index one question's history against its question text."""
        terms = list(dict.fromkeys(words(history.question.question)))
        col = {t: j for j, t in enumerate(terms)}
        tf = np.zeros((len(history.units), len(terms)), dtype=np.float64)
        lengths = np.zeros(len(history.units), dtype=np.float64)
        for i, unit in enumerate(history.units):
            unit_words = words(unit.content)
            lengths[i] = len(unit_words)
            for w in unit_words:
                j = col.get(w)
                if j is not None:
                    tf[i, j] += 1.0
        return cls(tf, lengths)


def bm25_scores(index: LexicalIndex, store: npt.NDArray[np.bool_]) -> npt.NDArray[np.float64]:
    """BM25-lite scores of the units in ``store`` (zeros elsewhere)."""
    scores = np.zeros(len(store), dtype=np.float64)
    members = np.flatnonzero(store)
    if members.size == 0 or index.tf.shape[1] == 0:
        return scores
    tf = index.tf[members]
    lengths = index.lengths[members]
    n_docs = members.size
    df = (tf > 0).sum(axis=0)
    idf = np.log1p((n_docs - df + 0.5) / (df + 0.5))
    avgdl = max(float(lengths.mean()), 1e-9)
    norm = K1 * (1.0 - B + B * lengths / avgdl)
    scores[members] = ((tf * (K1 + 1.0)) / (tf + norm[:, None])) @ idf
    return scores


def rank(index: LexicalIndex, store: npt.NDArray[np.bool_], k: int = TOP_K) -> list[int]:
    """The top-``k`` positions of ``store`` by BM25-lite, best first, ties to the newer unit."""
    scores = bm25_scores(index, store)
    candidates = np.flatnonzero(store & (scores > 0))
    # lexsort sorts by the last key first: score descending, then position descending
    order = np.lexsort((-candidates, -scores[candidates]))
    return [int(p) for p in candidates[order][:k]]


def inject(
    forced: Iterable[int],
    ranked: Sequence[int],
    sizes: npt.NDArray[np.int64],
    cap: int = INJECT_CAP,
) -> list[int]:
    """The injected positions, in chronological order.

    Forced units always go in (deduplicated, even past the cap); ranked units
    follow in rank order when they still fit under the cap.
    """
    chosen: dict[int, None] = dict.fromkeys(forced)
    used = int(sum(int(sizes[p]) for p in chosen))
    for pos in ranked:
        if pos in chosen:
            continue
        size = int(sizes[pos])
        if used + size <= cap:
            chosen[pos] = None
            used += size
    return sorted(chosen)


def render_context(history: History, injected: Sequence[int]) -> str:
    """The injected snippets as the reader sees them, or the empty-memory line."""
    if not injected:
        return EMPTY_MEMORY
    return "\n\n".join(history.units[p].snippet for p in injected)
