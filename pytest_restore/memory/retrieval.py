"""Retrieval and injection: the one procedure that builds every condition's context.

Ranker: a frozen BM25-lite over the store being read (k1 = 1.2, b = 0.75;
document frequency, document count and mean length taken over that store;
tokenisation as in :mod:`pytest_restore.memory.lexical`). Only units that share at
least one content word with the question are retrieved; ties go to the newer
unit. Read-time top-k = 60.

Injection (cap C = 2,000 tokens): first the forced units, deduplicated and
never truncated even past C; then the ranker's results in rank order,
skipping units already forced, adding each one that still fits under C. The
final snippets are ordered chronologically.

Each question's lexical index (term frequencies of the question's words in
every unit) is built once and reused for every store of every policy and
budget.

The ranker is swappable (one per run, ``--restore-ranker``): :class:`Ranker`
is the interface, :class:`Bm25Lite` the default, :class:`Recency` (newest
first) a second built-in to compare against, and users register their own
through the ``pytest_restore_register_rankers`` hook or the
``pytest_restore.rankers`` entry-point group. The injection procedure and
the cap never change with the ranker.

Two rankers read embeddings (``dense:EMBEDDER`` and ``hybrid:EMBEDDER``, made
for the name asked; the vectors come from a :class:`UnitVectors` source, the
models stage's store of each distinct text's embedding): :class:`Dense`
ranks every stored unit by the cosine of its content to the question;
:class:`Hybrid` fuses the BM25-lite and dense rankings of the store by
reciprocal rank fusion, ``score = 1/(60 + r_bm25) + 1/(60 + r_dense)`` with
1-based ranks (a unit BM25-lite does not retrieve adds nothing from that
list); 60 is the constant of Cormack, Clarke and Buettcher (SIGIR 2009),
which damps the head of each list so neither ranker's top few decide alone.
Both break ties as BM25-lite does: to the newer unit.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Protocol

import numpy as np
import numpy.typing as npt

from pytest_restore.data.units import History
from pytest_restore.data.words import words
from pytest_restore.memory.lexical import profile_rows, term_id
from pytest_restore.registry import Registry

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
        # every unit's (word id, count) pairs end to end; a term's column is where its id occurs
        profiles = profile_rows([unit.content for unit in history.units])
        n = profiles.sizes.size
        lengths = profiles.totals.astype(np.float64)
        tf = np.zeros((n, len(terms)), dtype=np.float64)
        if not terms or not n:
            return cls(tf, lengths)
        ids, counts = profiles.ids, profiles.counts
        owner = np.repeat(np.arange(n), profiles.sizes)
        for j, term in enumerate(terms):
            tid = term_id(term)  # after profiling: a word of any unit here has an id
            if tid >= 0:
                hit = ids == tid
                tf[owner[hit], j] = counts[hit]
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


#: What separates two snippets of a context.
SNIPPET_SEPARATOR = "\n\n"


def render_context(history: History, injected: Sequence[int]) -> str:
    """The injected snippets as the reader sees them, or the empty-memory line."""
    if not injected:
        return EMPTY_MEMORY
    return SNIPPET_SEPARATOR.join(history.units[p].snippet for p in injected)


def context_parts(history: History, injected: Sequence[int]) -> tuple[list[str], list[int | None]]:
    """:func:`render_context`'s text as the parts it joins, with the count of each snippet (its unit's size,
    which is its snippet's o200k count; ``None`` for a separator or the empty-memory line)."""
    if not injected:
        return [EMPTY_MEMORY], [None]
    parts: list[str] = []
    counts: list[int | None] = []
    units, sizes = history.units, history.sizes
    for i, p in enumerate(injected):
        if i:
            parts.append(SNIPPET_SEPARATOR)
            counts.append(None)
        parts.append(units[p].snippet)
        counts.append(int(sizes[p]))
    return parts, counts


# -- rankers: the retriever as a named, swappable part ---------------------------

Store = npt.NDArray[np.bool_]


class Ranker(ABC):
    """A frozen, deterministic read-time retriever over one question's store.

    Subclasses set ``name`` and implement :meth:`rank`. The audit calls
    :meth:`prepare` once per question and hands its result back to every
    :meth:`rank` call of that question (an index, say); the default prepares
    nothing. A ranker sees the question text and the units (content, date,
    role, size), never the gold labels. It must be deterministic: the same
    history and store always give the same list.
    """

    name: ClassVar[str]
    #: Whether the top k this ranker gives is always the head of its whole order (``rank`` with ``k`` the
    #: store's size): the audit then ranks each store once and reads both off it (regimes (a) and (b) the
    #: top k, the gold's ranks the whole order). Every built-in ranker's is. A ranker that does not say so
    #: is asked twice, for its top k and for its whole order, so a top k that is not a prefix stays correct.
    top_k_is_head: ClassVar[bool] = False

    def prepare(self, history: History) -> Any:
        """Per-question state built once (default: ``None``)."""
        return None

    def prepare_all(self, histories: Sequence[History]) -> None:
        """Work shared by every question, done once before their :meth:`prepare` (default: none)."""

    @abstractmethod
    def rank(self, history: History, store: Store, k: int, state: Any) -> list[int]:
        """At most ``k`` distinct positions of units in ``store``, best first.

        Set :attr:`top_k_is_head` when these are always the first ``k`` of the
        whole order (``k`` = the store's size): the audit then ranks each store once.
        """


class ScoringRanker(Ranker):
    """A ranker given by one score per unit.

    Units in the store with a positive score are retrieved, best first; ties
    go to the newer unit (as for BM25-lite). Implement :meth:`scores`. Its top
    k is the head of its whole order (one sort, cut at k).
    """

    top_k_is_head = True

    @abstractmethod
    def scores(self, history: History, store: Store, state: Any) -> npt.ArrayLike:
        """A score for every unit of the history (units outside ``store`` are ignored)."""

    def rank(self, history: History, store: Store, k: int, state: Any) -> list[int]:
        scores = np.asarray(self.scores(history, store, state), dtype=np.float64)
        if scores.shape != store.shape:
            raise ValueError(
                f"ranker {self.name!r} scored {scores.shape} units; expected {store.shape}"
            )
        candidates = np.flatnonzero(store & (scores > 0))
        order = np.lexsort((-candidates, -scores[candidates]))
        return [int(p) for p in candidates[order][:k]]


class Bm25Lite(ScoringRanker):
    """The default: BM25-lite over the store being read (see the module docstring)."""

    name = "bm25-lite"

    def prepare(self, history: History) -> LexicalIndex:
        return LexicalIndex.build(history)

    def scores(self, history: History, store: Store, state: Any) -> npt.NDArray[np.float64]:
        return bm25_scores(state, store)


class Recency(Ranker):
    """Newest first, whatever the question: the "last k turns" retriever many agents use.

    Every stored unit is retrievable; the injection cap then keeps the newest
    units that fit. Comparing it with BM25-lite shows how much of the
    recoverable bin a lexical retriever earns over plain recency.
    """

    name = "recency"
    top_k_is_head = True

    def rank(self, history: History, store: Store, k: int, state: Any) -> list[int]:
        return [int(p) for p in np.flatnonzero(store)[::-1][:k]]


class UnitVectors(Protocol):
    """Where the dense rankers' vectors come from: each distinct text's embedding, stored once."""

    #: the embedder's name (``fake``, ``openai:text-embedding-3-small``)
    name: str

    def ensure(self, texts: Sequence[str]) -> int:
        """Embed every text not embedded yet (in batches); how many were."""
        ...

    def vectors(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        """One vector per text, in order."""
        ...


def embedded_texts(history: History) -> list[str]:
    """What a dense ranker embeds for one question: the question, then each unit's content."""
    return [history.question.question, *(unit.content for unit in history.units)]


def cosines(vectors: UnitVectors, history: History) -> npt.NDArray[np.float64]:
    """The cosine of each unit's content to the question (0 for an empty text)."""
    matrix = vectors.vectors(embedded_texts(history)).astype(np.float64)
    norms = np.linalg.norm(matrix, axis=1)
    norms[norms == 0] = 1.0
    matrix /= norms[:, None]
    sims: npt.NDArray[np.float64] = matrix[1:] @ matrix[0]
    return sims


def _newest_best(scores: npt.NDArray[np.float64], candidates: npt.NDArray[np.intp]) -> npt.NDArray[np.intp]:
    """``candidates`` by score, best first, ties to the newer unit (BM25-lite's rule)."""
    return candidates[np.lexsort((-candidates, -scores[candidates]))]


#: The reciprocal rank fusion constant of :class:`Hybrid` (see the module docstring).
RRF_K = 60


class _Embedding(Ranker):
    """A ranker that reads embeddings: named after them, prepared by embedding every text once."""

    family: ClassVar[str]
    # dense: one sort cut at k; hybrid: fuses the whole lexical and dense orders, then one sort cut at k
    top_k_is_head = True

    def __init__(self, vectors: UnitVectors) -> None:
        self.vectors = vectors
        self.__dict__["name"] = f"{self.family}:{vectors.name}"

    def prepare_all(self, histories: Sequence[History]) -> None:
        """Embed every question and unit text of the audit, in batches, before any question is ranked."""
        self.vectors.ensure([text for h in histories for text in embedded_texts(h)])


class Dense(_Embedding):
    """Every stored unit by the cosine of its content's embedding to the question's."""

    family = "dense"

    def prepare(self, history: History) -> npt.NDArray[np.float64]:
        return cosines(self.vectors, history)

    def rank(self, history: History, store: Store, k: int, state: Any) -> list[int]:
        return [int(p) for p in _newest_best(state, np.flatnonzero(store))[:k]]


class Hybrid(_Embedding):
    """BM25-lite and :class:`Dense` fused by reciprocal rank fusion (constant :data:`RRF_K`)."""

    family = "hybrid"

    def prepare(self, history: History) -> tuple[LexicalIndex, npt.NDArray[np.float64]]:
        return LexicalIndex.build(history), cosines(self.vectors, history)

    def rank(self, history: History, store: Store, k: int, state: Any) -> list[int]:
        index, sims = state
        members = np.flatnonzero(store)
        fused = np.zeros(len(store), dtype=np.float64)
        dense = _newest_best(sims, members)
        fused[dense] += 1.0 / (RRF_K + np.arange(1, dense.size + 1))
        lexical = np.asarray(rank(index, store, k=members.size), dtype=np.intp)
        fused[lexical] += 1.0 / (RRF_K + np.arange(1, lexical.size + 1))
        return [int(p) for p in _newest_best(fused, members)[:k]]


class RankerRegistry(Registry[Ranker]):
    """Rankers by name, in the order they were registered."""

    kind = "ranker"
    item_type = Ranker
    entry_point_group = "pytest_restore.rankers"


BUILTIN_RANKERS: tuple[type[Ranker], ...] = (Bm25Lite, Recency)
DEFAULT_RANKER = Bm25Lite.name
RANKER_ENTRY_POINT_GROUP = RankerRegistry.entry_point_group


def default_rankers() -> RankerRegistry:
    """The built-in rankers plus those installed packages declare as entry points."""
    return RankerRegistry.default(BUILTIN_RANKERS)


def embedding_ranker(name: str, vectors: UnitVectors) -> Ranker:
    """The ``dense:EMBEDDER`` or ``hybrid:EMBEDDER`` ranker over ``vectors`` (the embedder's store)."""
    family = name.partition(":")[0]
    kinds: dict[str, type[_Embedding]] = {Dense.family: Dense, Hybrid.family: Hybrid}
    if family not in kinds:
        raise ValueError(f"{name!r} is not a dense:EMBEDDER or hybrid:EMBEDDER ranker")
    return kinds[family](vectors)


def checked_rank(ranker: Ranker, history: History, store: Store, k: int, state: Any) -> list[int]:
    """``ranker.rank`` with its contract checked: distinct stored positions, at most ``k``."""
    ranked = [int(p) for p in ranker.rank(history, store, k, state)]
    n = len(store)
    bad = next((p for p in ranked if not 0 <= p < n or not store[p]), None)
    if bad is not None:
        raise ValueError(
            f"ranker {ranker.name!r} returned unit {bad} for {history.question.question_id}, "
            "which is not in the store it was given"
        )
    if len(set(ranked)) != len(ranked) or len(ranked) > k:
        raise ValueError(
            f"ranker {ranker.name!r} returned {len(ranked)} positions ({len(set(ranked))} distinct) "
            f"for {history.question.question_id}; expected at most {k} distinct ones"
        )
    return ranked
