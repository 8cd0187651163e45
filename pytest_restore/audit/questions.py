"""The audited questions: which questions an audit reads, and each one prepared.

The questions an :class:`~pytest_restore.audit.run.Audit` reads (no abstention, some gold, the
``--restore-questions`` subset) and why the others are left out, found without building their
histories; :class:`Prepared`, a question ready to audit (its history, lexical index and rankers'
states); the token counts and word profiles an xdist controller makes once for its workers.
"""

from __future__ import annotations

import os
import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from pytest_restore.data.dataset import Dataset, Question
from pytest_restore.data.units import Granularity, History, counts_file_name, has_gold
from pytest_restore.memory.eviction import Mask, stable_seed
from pytest_restore.memory.memories import Sources
from pytest_restore.memory.retrieval import INJECT_CAP, TOP_K, LexicalIndex
from pytest_restore.memory.shared_texts import share_ahead

# Exclusion reasons, as the report prints them.
ABSTENTION = "abstention question (no evidence to restore)"


NO_GOLD = "no gold units"


OUTSIDE_SUBSET = "outside the --restore-questions subset"


@dataclass(frozen=True)
class AuditConfig:
    """Settings held fixed across every condition of the audit."""

    granularity: Granularity = Granularity.TURN
    top_k: int = TOP_K
    cap: int = INJECT_CAP
    budgets: tuple[int, ...] = (80_000, 30_000, 8_000)
    seeds: tuple[int, ...] = (0, 1, 2)
    questions: int | None = None  #: stratified subset size, ``None`` for all
    subset_seed: int = 0
    #: run the restore-tightness ablations on regime-(b) irreversible records
    ablations: bool = False
    #: where prepared data (token counts) is cached for other processes; ``None``: nowhere
    cache_dir: str | None = None
    #: the run every record names (``RestoreSettings.fingerprint``); ``None`` outside a session
    run_id: str | None = None
    #: how many histories a memory library may ingest at once (its stores wait on model calls): the run's
    #: ``max-concurrency``; a library says how many of its own it allows (``MemorySystem.parallel_stores``)
    concurrency: int = 1


@dataclass(frozen=True)
class Prepared:
    """A question ready to audit: its history, its lexical index and the ranker's state."""

    history: History
    index: LexicalIndex
    #: what the run's (first) ranker prepared for this question (``Ranker.prepare``)
    state: Any = None
    #: what each of the audit's rankers prepared, by ranker name
    states: Mapping[str, Any] = field(default_factory=dict)
    #: what each unit of ``history`` cites when it holds a memory system's derived memories
    #: (:func:`memory_view`); ``None``: raw units, each citing itself
    sources: Sources | None = None
    #: a memory system's record of when each unit it lost left it (:attr:`Held.lost`); ``None``: not traced
    lost: Mapping[int, int | None] | None = None

    @property
    def question(self) -> Question:
        """The question record."""
        return self.history.question

    def citing(self, store: Mask) -> list[int]:
        """The held units that cite some gold unit, ascending (raw units: ``G_q ∩ S_P``)."""
        gold = self.history.gold
        if self.sources is None:
            return [g for g in gold if store[g]]
        wanted = set(gold)
        return [int(p) for p in np.flatnonzero(store) if wanted.intersection(self.sources[p])]

    def evicted(self, store: Mask) -> list[int]:
        """The gold units no held unit cites, ascending (raw units: ``G_q`` minus ``S_P``)."""
        gold = self.history.gold
        if self.sources is None:
            return [g for g in gold if not store[g]]
        cited = {s for p in np.flatnonzero(store) for s in self.sources[p]}
        return [g for g in gold if g not in cited]

    def citing_each(self, store: Mask) -> list[list[int]]:
        """Per gold unit (in ``History.gold``'s order), the held units citing it (raw units: itself, if held)."""
        if self.sources is None:
            return [[g] if store[g] else [] for g in self.history.gold]
        by_gold: dict[int, list[int]] = {g: [] for g in self.history.gold}
        for p in np.flatnonzero(store):
            for s in self.sources[p]:
                if s in by_gold:
                    by_gold[s].append(int(p))
        return [by_gold[g] for g in self.history.gold]


def select_questions(questions: Sequence[Question], n: int, seed: int) -> list[Question]:
    """A stratified, seeded subset of ``n`` questions, proportional to question type.

    Seats are shared out by largest remainder; within a type the questions are
    a seeded sample. The subset keeps the file's order.
    """
    if n >= len(questions):
        return list(questions)
    by_type: dict[str, list[Question]] = {}
    for q in questions:
        by_type.setdefault(q.question_type, []).append(q)
    total = len(questions)
    quotas = {t: n * len(qs) / total for t, qs in sorted(by_type.items())}
    seats = {t: int(v) for t, v in quotas.items()}
    leftovers = sorted(quotas, key=lambda t: (-(quotas[t] - seats[t]), t))
    for t in leftovers[: n - sum(seats.values())]:
        seats[t] += 1
    chosen: set[str] = set()
    for t, qs in sorted(by_type.items()):
        rng = random.Random(stable_seed("subset", seed, t))
        chosen.update(q.question_id for q in rng.sample(qs, seats[t]))
    return [q for q in questions if q.question_id in chosen]


def _evidence(dataset: Dataset) -> list[Question]:
    """The questions an audit prepares histories for: all but the abstention ones (no evidence to restore)."""
    return [q for q in dataset.questions if not q.is_abstention]


def prepared_counts_file(dataset: Dataset, config: AuditConfig) -> str | None:
    """Where the audit of ``dataset`` keeps its token counts (``None``: no cache)."""
    if not config.cache_dir:
        return None
    return os.path.join(config.cache_dir, counts_file_name(dataset.sha256, config.granularity))


def audited_questions(dataset: Dataset, config: AuditConfig) -> list[Question]:
    """The questions an :class:`Audit` of ``dataset`` audits, found without building their histories.

    The same rule as the audit's: no abstention, some gold, then the
    ``--restore-questions`` subset.
    """
    with_gold = [q for q in _evidence(dataset) if has_gold(q, config.granularity)]
    if config.questions is None:
        return with_gold
    return select_questions(with_gold, config.questions, config.subset_seed)


def excluded_questions(dataset: Dataset, config: AuditConfig, audited: Sequence[Question]) -> list[tuple[str, str]]:
    """``(question_id, reason)`` for every question of ``dataset`` not in ``audited`` (:func:`audited_questions`),
    after those the loader left out (LoCoMo's adversarial questions, evidence that names no turn)."""
    kept = {q.question_id for q in audited}
    out = []
    for q in dataset.questions:
        if q.question_id in kept:
            continue
        if q.is_abstention:
            out.append((q.question_id, ABSTENTION))
        elif not has_gold(q, config.granularity):
            out.append((q.question_id, NO_GOLD))
        else:
            out.append((q.question_id, OUTSIDE_SUBSET))
    order = (ABSTENTION, NO_GOLD, OUTSIDE_SUBSET)
    return list(dataset.excluded) + sorted(out, key=lambda e: order.index(e[1]))  # stable: the file's order within a reason


def count_tokens_ahead(
    dataset: Dataset, config: AuditConfig, starting: Callable[[int], None] | None = None, processes: int = 1
) -> bool:
    """Count, once, the tokens of every text an :class:`Audit` of ``dataset`` reads, and profile its unit
    texts' words; whether anything was made.

    An xdist controller calls this before its workers build their audits:
    each worker then maps the shared texts file instead of counting and
    profiling every text again. Without a cache directory there is nowhere to share them: nothing
    is done. ``starting`` hears the number of texts before they are counted;
    ``processes`` share the counting out (the workers' number: they wait).
    """
    counts_file = prepared_counts_file(dataset, config)
    if counts_file is None or config.cache_dir is None:
        return False
    # the word profiles too, and both in one file each worker maps (memory/shared_texts.py)
    audited = audited_questions(dataset, config)
    return share_ahead(audited, config.granularity, dataset.sha256, config.cache_dir, counts_file, starting, processes)
