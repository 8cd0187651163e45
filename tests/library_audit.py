"""What the memory libraries' tests share: one audit of a dataset under a library, and a question's view of it.

Each library's test module audits the LoCoMo fixture (or part of it) with
the fake reader, judge and scorer, read by BM25-lite and the library's own
ranker, and then looks at what one question's store held.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from pytest_restore.audit.run import Audit, AuditConfig, Prepared
from pytest_restore.data.dataset import Dataset
from pytest_restore.libraries.system import LibrarySystem, LibraryTally
from pytest_restore.memory.retrieval import Bm25Lite, Ranker
from pytest_restore.memory.systems import MemorySystem
from pytest_restore.models.fake import FakeJudge, FakeReader, FakeScorer

LOCOMO = Path(__file__).resolve().parent.parent / "fixtures" / "locomo_tiny.json"


def audit_library(
    dataset: Dataset,
    system: MemorySystem,
    ranker: Ranker,
    budgets: Sequence[int],
    *,
    run: Sequence[int] | None = None,
    seeds: tuple[int, ...] | None = None,
    concurrency: int = 1,
) -> Audit:
    """An audit of ``dataset`` under ``budgets`` (and ``seeds``, else the default), read by BM25-lite and
    ``ranker``, with ``system``'s cell of each budget of ``run`` (default: every budget) run once; ``concurrency``:
    how many histories the system is fed at once (``AuditConfig.concurrency``, up to its ``parallel_stores``)."""
    reader = FakeReader()
    config = AuditConfig(budgets=tuple(budgets), concurrency=concurrency)
    config = config if seeds is None else replace(config, seeds=seeds)
    audit = Audit(dataset, config, reader=reader, judge=FakeJudge(), scorer=FakeScorer(), rankers=[Bm25Lite(), ranker])
    reader.learn(p.history for p in audit.questions)
    for budget in budgets if run is None else run:
        audit.run_cell(system, budget)
    return audit


def view_of(audit: Audit, system: MemorySystem, question: str, budget: int) -> tuple[Prepared, np.ndarray]:
    """The view of the store ``system`` held for ``question`` under ``budget`` (seed 0), and its mask."""
    p = next(p for p in audit.questions if p.history.question.question == question)
    view, mask = audit.held(system, p, budget, 0, {})
    assert view.sources is not None  # a memory system's view: what each unit cites
    return view, mask


def assert_the_budget_kept_the_newest(
    audit: Audit, system: LibrarySystem[Any], question: str, full: int, small: int
) -> tuple[Prepared, np.ndarray, LibraryTally]:
    """Assert that under ``small`` the library's store for ``question`` held what fits and let the oldest go.

    Against the store under ``full`` (which holds more than ``small`` allows): what is held fits ``small``,
    the store's tally counts evictions and the held memories and tokens, the newest memory stays and the
    one citing the earliest turns went. Returns the view under ``small``, its mask and its tally, for the
    library's own checks of its store.
    """
    whole, whole_mask = view_of(audit, system, question, full)
    view, mask = view_of(audit, system, question, small)
    tokens = int(view.history.sizes[mask].sum())
    assert tokens <= small < int(whole.history.sizes[whole_mask].sum())
    tally = next(t for t in system.tallies if t.question == view.history.question.history_key and t.budget == small)
    assert tally.figures.evicted > 0 and tally.held == int(mask.sum()) and tally.held_tokens == tokens
    assert view.sources is not None and whole.sources is not None
    kept = [max(view.sources[p]) for p in np.flatnonzero(mask)]
    everything = [max(whole.sources[p]) for p in np.flatnonzero(whole_mask)]
    assert max(kept) == max(everything)  # the newest memory stays
    assert min(kept) > min(everything)  # the oldest went
    return view, mask, tally


def shortest(records: list[dict[str, Any]]) -> dict[str, Any]:
    """The generated record of fewest turns among ``records`` that has a gold turn: a library makes several model
    calls a turn, so a test of its ingestion on the generator's data feeds it the least that has a gold to cite."""
    answerable = [r for r in records if any(t.get("has_answer") for s in r["haystack_sessions"] for t in s)]
    return min(answerable, key=lambda r: sum(len(s) for s in r["haystack_sessions"]))
