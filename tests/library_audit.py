"""What the memory libraries' tests share: one audit of a dataset under a library, and a question's view of it.

Each library's test module audits the LoCoMo fixture (or part of it) with
the fake reader, judge and scorer, read by BM25-lite and the library's own
ranker, and then looks at what one question's store held.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

import numpy as np

from pytest_restore.audit.run import Audit, AuditConfig, Prepared
from pytest_restore.data.dataset import Dataset
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
