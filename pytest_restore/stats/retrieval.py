"""Retrieval figures per regime-(b) cell: did the ranker put the surviving gold in the reader's context?

A recoverable error is a retrieval miss: the gold survived eviction and the
reader still failed, and restoring changes nothing in the store. These
figures say how often the ranker found that gold, read off each regime-(b)
record (:class:`Found`): the gold's ranks under the ranker over the whole
store (``gold_ranks``), the read-time k (``top_k``) and the units regime b
injected (``conditions.policy.injected_positions``). Over the cell's
records whose store kept some gold (the others have nothing to find):

- ``recall_any@k`` / ``recall_all@k``: some / all of the surviving gold is
  in the ranker's top k (the read-time k);
- ``recall_any@cap`` / ``recall_all@cap``: the same for what fits under the
  injection cap, i.e. what the reader was shown;
- ``ndcg@k``: binary-relevance NDCG of the top k against the surviving gold
  (1: every surviving gold unit ranked first);
- ``gold_rank``: the mean best rank of the surviving gold over the whole
  store (no cut at k), over records where the ranker ranked some (a lexical
  ranker does not rank a unit that shares no term with the question).

Each share has a question-cluster bootstrap interval from the analysis's
resample matrix (all seeds of a question move together). No-evict's cells
are the ranker's ceiling: its store keeps all the gold.

A memory system's store holds memories, and the ranker ranks them. A gold
turn it keeps (some held memory cites it) has the rank of the best-ranked
memory citing it, and is in regime b's context when some memory citing it
is (``memories.gold_injected``); the figures above then read the same.
Several gold turns cited by one memory share its rank: for NDCG each counts
at that rank (a memory's gain is the number of gold turns it carries), and
the ideal ranking puts the same memories first, the one carrying most gold
on top (:func:`ndcg`). A store of raw turns has no shared rank, and its
figures are those of binary relevance.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from pytest_restore.bootstrap import Resampler, Statistic
from pytest_restore.record import CellKey, Record

__all__ = ["RETRIEVAL_COLUMNS", "Found", "RetrievalFigures", "found", "ndcg", "retrieval_figures"]

#: The shares with intervals, in ``cells.csv``'s order (each then ``_lo`` and ``_hi``).
SHARES: tuple[str, ...] = ("recall_any_k", "recall_all_k", "recall_any_cap", "recall_all_cap", "ndcg_k")
#: The columns ``cells.csv`` gains (empty for regime a and for cells without surviving gold).
RETRIEVAL_COLUMNS: tuple[str, ...] = (
    "retrieval_records", *(f"{s}{suffix}" for s in SHARES for suffix in ("", "_lo", "_hi")), "gold_rank",
)


@dataclass(frozen=True)
class Found:
    """Where the ranker put the gold that survived in one regime-(b) record's store, read off the record."""

    surviving: int  #: gold units in the store (G_q ∩ S_P)
    ranks: tuple[int, ...]  #: the ranks of the surviving gold the ranker ranked (whole store), best first
    k: int  #: the read-time top-k
    injected: int  #: surviving gold units in regime b's context, under the injection cap

    @property
    def at_k(self) -> tuple[int, ...]:
        """The ranks within the top k."""
        return tuple(r for r in self.ranks if r <= self.k)


def found(record: Record) -> Found | None:
    """``record``'s :class:`Found`; ``None`` when it has none (regime a, no store, older records without ``top_k``)."""
    injected = record.conditions.policy.injected_positions
    carried = record.memories.gold_injected if record.memories is not None else None
    if (
        record.top_k is None
        or record.gold_evicted is None
        or record.gold_ranks is None
        or record.gold_positions is None
        or injected is None
    ):
        return None
    shown = set(injected)
    return Found(
        surviving=record.gold_units - record.gold_evicted,
        ranks=tuple(sorted(r for r in record.gold_ranks if r is not None)),
        k=record.top_k,
        # regime b injects from the store alone: a gold unit in its context survived (a memory system's
        # gold is there through a memory citing it)
        injected=sum(carried) if carried is not None else sum(1 for g in record.gold_positions if g in shown),
    )


def ndcg(retrieval: Found) -> float:
    """NDCG@k of one ranked list against its surviving gold (0 when none was ranked).

    Each surviving gold unit counts at its rank. Units sharing a rank are carried by one memory (a
    memory system's store), whose gain is how many it carries; the ideal list holds the same memories
    best first (each unranked unit alone). With no shared rank: binary-relevance NDCG@k.
    """
    carried = sorted(Counter(retrieval.ranks).values(), reverse=True)
    carried += [1] * (retrieval.surviving - len(retrieval.ranks))
    ideal = sum(size / math.log2(i + 2) for i, size in enumerate(carried[: retrieval.k]))
    gain = sum(1 / math.log2(r + 1) for r in retrieval.at_k)
    return gain / ideal if ideal else 0.0


@dataclass(frozen=True)
class RetrievalFigures:
    """One cell's retrieval figures (module docstring); shares are ``None`` without a record to measure."""

    records: int  #: records whose store kept some gold
    k: int  #: the read-time top-k of the ranked lists (the largest, should the records differ)
    shares: Mapping[str, tuple[float | None, float | None, float | None]]  #: share -> (point, lo, hi)
    gold_rank: float | None

    def row(self) -> dict[str, float | int | None]:
        """The :data:`RETRIEVAL_COLUMNS` of this cell."""
        out: dict[str, float | int | None] = {"retrieval_records": self.records}
        for name in SHARES:
            point, lo, hi = self.shares[name]
            out.update({name: point, f"{name}_lo": lo, f"{name}_hi": hi})
        out["gold_rank"] = self.gold_rank
        return out


def _values(r: Found) -> tuple[float, ...]:
    """The per-record numerators: any@k, all@k, any@cap, all@cap, ndcg@k."""
    return (
        float(bool(r.at_k)),
        float(len(r.at_k) == r.surviving),
        float(r.injected > 0),
        float(r.injected == r.surviving),
        ndcg(r),
    )


def retrieval_figures(
    records: Iterable[tuple[CellKey, Record]], universe: Sequence[str], resampler: Resampler, confidence: float
) -> dict[CellKey, RetrievalFigures]:
    """Every cell's figures, from its regime-(b) records with surviving gold (:func:`found`)."""
    column = {qid: i for i, qid in enumerate(universe)}
    sums: dict[CellKey, np.ndarray] = {}
    ranks: dict[CellKey, list[int]] = {}
    top: dict[CellKey, int] = {}
    for key, record in records:
        where = found(record)
        if where is None or record.excluded is not None or where.surviving == 0 or record.question_id not in column:
            continue
        rows = sums.setdefault(key, np.zeros((len(SHARES) + 1, len(universe))))
        q = column[record.question_id]
        rows[0, q] += 1.0
        rows[1:, q] += _values(where)
        top[key] = max(top.get(key, 0), where.k)
        if where.ranks:
            ranks.setdefault(key, []).append(where.ranks[0])
    out = {}
    # one product for every cell, as the engine's counts: the resample matrix is streamed once, not per cell
    width = len(SHARES) + 1
    resampled = resampler.totals(np.concatenate([rows.T for rows in sums.values()], axis=1)) if sums else None
    for n, (key, rows) in enumerate(sums.items()):
        assert resampled is not None
        totals = resampled[:, n * width : (n + 1) * width]
        shares = {}
        for i, name in enumerate(SHARES, start=1):
            stat = Statistic.ratio(float(rows[i].sum()), float(rows[0].sum()), totals[:, i], totals[:, 0])
            lo, hi = stat.interval(confidence)
            shares[name] = (stat.point, lo, hi)
        best = ranks.get(key, [])
        out[key] = RetrievalFigures(int(rows[0].sum()), top[key], shares, sum(best) / len(best) if best else None)
    return out
