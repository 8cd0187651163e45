"""The numbers beside the bins: retrieval figures per cell, LoCoMo's answer metrics per cell and type, in records and cells.csv."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from pytest_restore.audit.run import Audit, AuditConfig
from pytest_restore.data.dataset import Dataset
from pytest_restore.data.loaders import load_data
from pytest_restore.data.units import History, Unit
from pytest_restore.memory.eviction import (
    EvictionContext,
    ScoredPolicy,
    VictimPolicy,
    default_registry,
)
from pytest_restore.memory.retrieval import Ranker, Recency
from pytest_restore.models.base import ChatRequest, ChatResult
from pytest_restore.models.fake import FakeJudge, FakeReader, FakeScorer
from pytest_restore.models.writers import default_policies as every_policy
from pytest_restore.record import Record
from pytest_restore.report.markdown import render_findings_md
from pytest_restore.report.numbers import render_importance_md, render_retrieval_md
from pytest_restore.stats.analysis import analyse
from pytest_restore.stats.findings import findings as findings_of
from pytest_restore.stats.results import CELL_COLUMNS
from pytest_restore.stats.retrieval import RETRIEVAL_COLUMNS, Found, found, ndcg

LOCOMO = Path(__file__).resolve().parent.parent / "fixtures" / "locomo_tiny.json"


class GoldFirst(Ranker):
    """An oracle ranker for the test: the stored gold first (in position order), then the rest newest first."""

    name = "gold-first"

    def rank(self, history: History, store: Any, k: int, state: Any) -> list[int]:
        gold = [g for g in history.gold if store[g]]
        rest = [int(p) for p in np.flatnonzero(store)[::-1] if int(p) not in history.gold]
        return (gold + rest)[:k]


class CitingFirst(Ranker):
    """An oracle ranker over a memory system's store: the held memories citing gold first, those carrying most
    gold on top (then in position order), then the rest newest first. It finds what each memory cites in the
    audit's views (the test's back door: a ranker is never told)."""

    name = "citing-first"

    def __init__(self) -> None:
        self.audit: Audit | None = None

    def rank(self, history: History, store: Any, k: int, state: Any) -> list[int]:
        assert self.audit is not None
        sources = next(v[3] for v in self.audit._views.values() if v[1].units is history.units)
        gold = set(history.gold)
        held = [int(p) for p in np.flatnonzero(store)]
        carried = {p: len(gold.intersection(sources[p])) for p in held}
        citing = sorted((p for p in held if carried[p]), key=lambda p: (-carried[p], p))
        return (citing + [p for p in held[::-1] if not carried[p]])[:k]


@pytest.fixture(scope="module")
def locomo() -> Dataset:
    return load_data(LOCOMO)


def grid(dataset: Dataset, ranker: Ranker, budgets: tuple[int, ...] = (250, 120)) -> list[Record]:
    reader = FakeReader()
    audit = Audit(dataset, AuditConfig(budgets=budgets), reader=reader, judge=FakeJudge(), scorer=FakeScorer(), rankers=[ranker])
    reader.learn(p.history for p in audit.questions)
    return [r for policy in default_registry().values() for b in budgets for r in audit.run_cell(policy, b).records]


def test_a_ranker_putting_gold_first_has_recall_and_ndcg_1_on_every_question_with_surviving_gold(locomo: Dataset) -> None:
    records = grid(locomo, GoldFirst())
    measured = [(r, where) for r in records if r.regime == "b" and (where := found(r)) is not None and where.surviving]
    assert len(measured) > 50
    for r, where in measured:
        assert where.ranks == tuple(range(1, where.surviving + 1)) and ndcg(where) == 1.0, r.question_id
        # the ranks are the record's gold_ranks (one per gold unit, null where evicted), not a copy
        assert r.gold_ranks is not None and sorted(x for x in r.gold_ranks if x is not None) == list(where.ranks)
    # regime (a) carries none
    assert all(found(r) is None and r.top_k is None for r in records if r.regime == "a")
    analysis = analyse(records, resamples=200)
    cells = [c for c in analysis.cells if c.regime == "b" and c.retrieval is not None]
    assert {c.policy for c in cells} >= {"no-evict", "fifo", "control"}
    for cell in cells:
        assert cell.retrieval is not None
        for name in ("recall_any_k", "recall_all_k", "ndcg_k"):
            assert cell.retrieval.shares[name] == (1.0, 1.0, 1.0), (cell.key, name)
        assert cell.retrieval.gold_rank == 1.0


def test_a_derived_store_ranks_gold_by_the_memories_citing_it(locomo: Dataset) -> None:
    """A gold turn kept only inside a memory ranks as the best-ranked memory citing it: a ranker putting those
    memories first (most gold first) has recall 1 and NDCG 1 on every question with kept gold; the at-the-cap
    recall counts a gold turn shown through a memory citing it."""
    ranker = CitingFirst()
    reader = FakeReader()
    audit = Audit(locomo, AuditConfig(budgets=(250, 120)), reader=reader, judge=FakeJudge(), scorer=FakeScorer(), rankers=[ranker])
    reader.learn(p.history for p in audit.questions)
    ranker.audit = audit
    systems = [every_policy()[name] for name in ("session-summary", "fact-extract")]
    records = [r for system in systems for b in (250, 120) for r in audit.run_cell(system, b).records]
    measured = [(r, where) for r in records if r.regime == "b" and (where := found(r)) is not None and where.surviving]
    inside = [r for r, _ in measured if r.memories is not None and not set(r.gold_positions or ()) & set(r.memories.positions or ())]
    assert len(measured) > 15 and inside  # some keep their gold only inside derived memories
    for r, where in measured:
        assert r.top_k is not None and ndcg(where) == 1.0 and all(rank <= where.k for rank in where.ranks), r.question_id
        assert r.memories is not None and r.memories.gold_injected is not None
        assert where.injected == sum(r.memories.gold_injected) <= where.surviving
    shared = [where for _, where in measured if len(set(where.ranks)) < len(where.ranks)]
    assert shared  # a summary cites several gold turns: they share its rank
    analysis = analyse(records, resamples=200)
    cells = [c for c in analysis.cells if c.regime == "b" and c.retrieval is not None]
    assert {c.policy for c in cells} == {"session-summary", "fact-extract"}
    for cell in cells:
        assert cell.retrieval is not None and cell.retrieval.gold_rank == 1.0
        for name in ("recall_any_k", "recall_all_k", "ndcg_k"):
            assert cell.retrieval.shares[name] == (1.0, 1.0, 1.0), (cell.key, name)


def test_recency_misses_gold_and_the_figures_say_so(locomo: Dataset) -> None:
    records = grid(locomo, Recency(), budgets=(250,))
    analysis = analyse(records, resamples=200)
    ceiling = analysis.cell("no-evict", 250, "b", "fake")
    assert ceiling is not None and ceiling.retrieval is not None
    # no-evict keeps all the gold: the ranker's ceiling. Recency returns every stored unit, newest first,
    # and each tiny history fits under the cap whole: all of it reaches the reader, at ranks past the first
    any_cap, lo, hi = ceiling.retrieval.shares["recall_any_cap"]
    assert (any_cap, lo, hi) == (1.0, 1.0, 1.0)
    assert ceiling.retrieval.gold_rank is not None and ceiling.retrieval.gold_rank > 1
    ndcg_k = ceiling.retrieval.shares["ndcg_k"][0]
    assert ndcg_k is not None and 0 < ndcg_k < 1
    assert ceiling.retrieval.records == 10  # every audited question keeps its gold under no-evict
    table = render_retrieval_md(analysis)
    assert "| no-evict | 250 | fake | 10 | " in table and "recall any@cap" in table
    row = ceiling.as_row()
    assert set(RETRIEVAL_COLUMNS) <= set(CELL_COLUMNS) and row["recall_any_cap"] == any_cap
    forced = analysis.cell("no-evict", 250, "a", "fake")
    assert forced is not None and all(forced.as_row()[c] is None for c in RETRIEVAL_COLUMNS)  # regime (a): none


@pytest.mark.parametrize(
    ("where", "expected"),
    [
        (Found(surviving=2, ranks=(1, 2), k=60, injected=2), 1.0),
        (Found(surviving=1, ranks=(3,), k=60, injected=1), 0.5),  # 1/log2(4) over 1/log2(2)
        (Found(surviving=2, ranks=(2,), k=60, injected=0), (1 / np.log2(3)) / (1 + 1 / np.log2(3))),
        (Found(surviving=1, ranks=(), k=60, injected=0), 0.0),
        (Found(surviving=1, ranks=(61,), k=60, injected=0), 0.0),  # ranked, but past the top k
        # two gold turns in one memory at rank 1, a third alone at rank 2: the ideal order
        (Found(surviving=3, ranks=(1, 1, 2), k=60, injected=3), 1.0),
        # the memory carrying two ranked second, the one carrying one first: the ideal puts the two first
        (Found(surviving=3, ranks=(1, 2, 2), k=60, injected=3), (1 + 2 / np.log2(3)) / (2 + 1 / np.log2(3))),
    ],
)
def test_ndcg(where: Found, expected: float) -> None:
    assert ndcg(where) == pytest.approx(expected)


def test_answer_metrics_per_record_cell_and_type(locomo: Dataset) -> None:
    records = grid(locomo, Recency(), budgets=(250,))
    first = next(r for r in records if r.question_id == "fx-1:q0" and r.policy == "no-evict" and r.regime == "b")
    oracle = first.conditions.oracle
    assert oracle.answer is not None and oracle.f1 is not None and oracle.bleu1 is not None
    analysis = analyse(records, resamples=200)
    cell = analysis.cell("fifo", 250, "b", "fake")
    assert cell is not None and cell.answers is not None
    counted = [r for r in records if r.policy == "fifo" and r.regime == "b" and r.excluded is None]
    f1s = [r.conditions.policy.f1 for r in counted if r.conditions.policy.f1 is not None]
    assert cell.as_row()["f1_policy"] == pytest.approx(sum(f1s) / len(f1s))
    types = dict(analysis.answers_by_type)
    assert ("fake", "multi-hop (1)") in types and types[("fake", "single-hop (4)")].answers > 0
    # llm-importance records carry the scorer's score counts of their history; others none
    scored = [r for r in records if r.policy == "llm-importance"]
    assert all(r.importance_scores is not None and sum(r.importance_scores) > 0 for r in scored)
    assert all(r.importance_scores is None for r in records if r.policy == "fifo")


class OneOrTen:
    """A weak importance scorer: 1 for most snippets (four in five, by the snippet's hash), 10 for the rest."""

    name = "one-or-ten"

    def run(self, requests: Sequence[ChatRequest]) -> list[ChatResult]:
        out = []
        for request in requests:
            text = "\n".join(c for role, c in request.messages if role == "user")
            digest = int(hashlib.sha256(text.encode()).hexdigest(), 16)
            out.append(ChatResult("10" if digest % 5 == 0 else "1"))
        return out


def test_a_scorer_answering_mostly_1_makes_the_findings_warn_of_ties(locomo: Dataset) -> None:
    reader = FakeReader()
    audit = Audit(locomo, AuditConfig(budgets=(250,)), reader=reader, judge=FakeJudge(), scorer=OneOrTen())
    reader.learn(p.history for p in audit.questions)
    records = audit.run_cell(default_registry()["llm-importance"], 250).records + audit.run_cell(default_registry()["fifo"], 250).records
    analysis = analyse(records, resamples=200)
    (scores,) = analysis.importance
    assert (scores.policy, scores.scorer, scores.questions) == ("llm-importance", "one-or-ten", 10)
    assert scores.counts[1:9] == (0,) * 8 and scores.top == [1, 10] and scores.top_share == 1.0 and scores.mostly_ties
    assert 0.6 < scores.share(1) < 0.95
    findings = render_findings_md(findings_of(analysis))
    assert "- **Ties.** llm-importance (scorer one-or-ten): two scores hold 100% of the" in findings
    assert f"(1: {scores.share(1):.0%}, 10: {scores.share(10):.0%})" in findings
    assert "| llm-importance | one-or-ten | 10 |" in render_importance_md(analysis)
    # the fake scorer spreads its scores: no warning
    fake = analyse(grid(locomo, Recency(), budgets=(250,)), resamples=200)
    assert fake.importance and not fake.importance[0].mostly_ties and "**Ties.**" not in render_findings_md(findings_of(fake))


class WordCount(VictimPolicy):
    """A user's policy deciding by a score of its own (no base class for it): evicts the unit of fewest words
    capped at three, ties to the older unit, so nearly every unit ties at 3."""

    name = "word-count"

    def unit_scores(self, units: Sequence[Unit], ctx: EvictionContext) -> list[float]:
        return [float(min(len(u.content.split()), 3)) for u in units]

    def start(self, units: Sequence[Unit], ctx: EvictionContext) -> None:
        self._scores = self.unit_scores(units, ctx)

    def choose_victim(self, stored: Sequence[int], units: Sequence[Unit]) -> int:
        return min(stored, key=lambda p: (self._scores[p], p))


def test_any_policy_deciding_by_a_score_is_checked_for_ties(locomo: Dataset) -> None:
    reader = FakeReader()
    audit = Audit(locomo, AuditConfig(budgets=(250,)), reader=reader, judge=FakeJudge(), scorer=FakeScorer())
    reader.learn(p.history for p in audit.questions)
    policies = [WordCount(), default_registry()["control"], default_registry()["fifo"]]
    records = [r for policy in policies for r in audit.run_cell(policy, 250).records]
    assert isinstance(policies[0], ScoredPolicy) and not isinstance(policies[2], ScoredPolicy)
    by_policy = {p.name: [r for r in records if r.policy == p.name] for p in policies}
    assert by_policy["fifo"] and all(r.score_ties is None for r in by_policy["fifo"])
    for name in ("word-count", "control"):  # each history's units, and those at its two top scores
        for r in by_policy[name]:
            assert r.score_ties is not None and r.score_ties[0] == len(audit.history(r.question_id).units) >= r.score_ties[1] > 0
    analysis = analyse(records, resamples=200)
    ties = {t.policy: t for t in analysis.ties}
    assert set(ties) == {"word-count", "control"} and ties["word-count"].questions == 10
    assert ties["word-count"].mostly_ties and not ties["control"].mostly_ties
    assert ties["word-count"].top_share > 0.9 and ties["control"].top_share < 0.5
    findings = render_findings_md(findings_of(analysis))
    assert (
        f"- **Ties.** word-count: {ties['word-count'].top_share:.0%} of the {ties['word-count'].units:,} units hold their "
        "history's two most common scores, at least the 80% that makes its decisions mostly ties" in findings
    )
    assert "**Ties.** control" not in findings
    table = render_importance_md(analysis)
    assert "## Ties among scores" in table and f"| control | 10 | {ties['control'].units:,} | {ties['control'].top_share:.2f} | no |" in table
    assert "## Importance scores" not in table  # no importance policy ran
