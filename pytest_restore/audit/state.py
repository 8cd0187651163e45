"""What an audit holds for its whole run: its settings, models and rankers, its prepared questions, and the
caches its parts fill once per process (oracle outcomes, importance scores, the tokens of the calls
that built stores, memory systems' views, whole-grid cells and stores).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Hashable, Sequence

from pytest_restore.audit.memo import MemoModel
from pytest_restore.audit.outcomes import CellRun, Outcome, Planned, StoreView
from pytest_restore.audit.questions import (
    NO_GOLD,
    AuditConfig,
    Prepared,
    audited_questions,
    excluded_questions,
    prepared_counts_file,
)
from pytest_restore.data.dataset import Dataset
from pytest_restore.data.units import History, build_histories
from pytest_restore.memory.eviction import Mask, Policy
from pytest_restore.memory.memories import Sources
from pytest_restore.memory.retrieval import Bm25Lite, LexicalIndex, Ranker, checked_rank
from pytest_restore.memory.shared_texts import use_shared
from pytest_restore.models.base import ChatModel, ChatResult
from pytest_restore.models.prompts import PromptSet


class AuditBase:
    """What an audit holds for its whole run (the first part of :class:`~pytest_restore.audit.run.Audit`):
    its settings, models, rankers, prepared questions and caches, and the summary of what it audits."""

    def __init__(
        self,
        dataset: Dataset,
        config: AuditConfig,
        *,
        reader: ChatModel,
        judge: ChatModel,
        scorer: ChatModel,
        prompts: PromptSet | None = None,
        ranker: Ranker | None = None,
        rankers: Sequence[Ranker] = (),
        writer: ChatModel | None = None,
    ) -> None:
        self.dataset = dataset
        self.config = config
        #: the rankers cells may be read with, by name: ``rankers``, else ``ranker`` (BM25-lite by default)
        self.rankers: dict[str, Ranker] = {r.name: r for r in (rankers or [ranker if ranker is not None else Bm25Lite()])}
        #: the first of them: a cell's ranker unless it names another
        self.ranker: Ranker = next(iter(self.rankers.values()))
        self.reader = MemoModel(reader)
        self.judge = MemoModel(judge)
        self.scorer = MemoModel(scorer)
        #: what a memory system that writes with a model asks (MemorySystem.requests): the reader unless named
        self.writer = MemoModel(writer) if writer is not None else self.reader
        self.prompts = prompts or PromptSet()
        audited = audited_questions(dataset, config)
        self.exclusions = excluded_questions(dataset, config, audited)
        # only the audited questions' histories are built: a 20-question subset prepares 20
        # an xdist worker takes the token counts and word profiles its controller made (memory/shared_texts.py)
        shared = use_shared(audited, config.granularity, dataset.sha256, config.cache_dir) if config.cache_dir is not None else None
        counts_file = None if shared is not None else prepared_counts_file(dataset, config)
        histories = build_histories(audited, config.granularity, counts_file=counts_file, sizes=shared)
        # has_gold is build_history's rule; a history that still has no gold is left out all the same
        self.exclusions += [(h.question.question_id, NO_GOLD) for h in histories if not h.gold]
        with_gold = [h for h in histories if h.gold]
        for each in self.rankers.values():
            each.prepare_all(with_gold)  # a dense ranker embeds every text here, in batches
        self.questions: list[Prepared] = [self._prepare(h) for h in with_gold]
        # each context's outcome, read and judged once (ModelCalls.evaluate): over the audit's own histories, which
        # live as long as the audit, by (id(history), injected); and each judge request's verdict by what it was
        # filled with (question, reference, answer)
        self._own = frozenset(id(p.history) for p in self.questions)
        self._read: dict[tuple[int, tuple[int, ...]], Outcome] = {}
        self._verdicts: dict[tuple[str, str, str], ChatResult] = {}
        self._oracle: dict[str, Outcome] = {}
        self._placebo: dict[str, list[int] | None] = {}
        self._importance: dict[str, int] = {}
        # the histories whose every unit content has its importance score (by history key): not read again
        self._scored: set[str] = set()
        # how many of a history's units have each importance score (records.score_counts), by history key
        self._score_counts: dict[str, tuple[int, ...]] = {}
        # the tokens (in, out, estimated) of each call that built a store: the scorer's by the unit content it
        # scored, a memory system's writer's by its request; how many audited questions each served, per
        # policy; and a question's share of them, by (policy, question)
        self._build_tokens: dict[Hashable, tuple[int, int, bool]] = {}
        self._holders: dict[str, Counter[Hashable]] = {}
        self._memory_shares: dict[tuple[str, str], tuple[float, float, bool] | None] = {}
        self._keys: dict[tuple[str, str], list[Hashable]] = {}
        # a scored policy's ties on each history: (units, units at its two most common scores) by (policy, history, seed);
        # None: the policy exposes no scores
        self._ties: dict[tuple[str, str, int], tuple[int, int] | None] = {}
        # whole-grid cells already run in this process (the control's check reads the baselines')
        self._cells: dict[tuple[str, int, str], tuple[Policy, CellRun]] = {}
        # whole-grid stores by (policy, budget): evicted once, read by every ranker of the cell
        self._stores: dict[tuple[str, int], tuple[Policy, Planned]] = {}
        # a memory system's view of each history by (policy, budget, history, seed): fed once per process
        self._views: dict[tuple[int, int, str, int], StoreView] = {}
        # a store fed beside others that failed, by the same key: raised at its history's first question
        self._view_failures: dict[tuple[int, int, str, int], Exception] = {}

    def _prepare(self, history: History, sources: Sources | None = None) -> Prepared:
        index = LexicalIndex.build(history)
        # the default ranker's state is the lexical index itself: build it once
        states = {name: index if type(r) is Bm25Lite else r.prepare(history) for name, r in self.rankers.items()}
        return Prepared(history, index, states[self.ranker.name], states, sources)

    def rank(self, prepared: Prepared, store: Mask, ranker: str | None = None, k: int | None = None) -> list[int]:
        """A ranker of the audit (the first by default) over ``store`` (top-k unless ``k``, contract checked)."""
        name = ranker or self.ranker.name
        depth = self.config.top_k if k is None else k
        return checked_rank(self.rankers[name], prepared.history, store, depth, prepared.states[name])

    def exclusion_counts(self) -> dict[str, int]:
        """How many questions were left out, by reason."""
        return dict(sorted(Counter(reason for _, reason in self.exclusions).items()))

    def budget_binding(self, budgets: Sequence[int]) -> dict[int, float]:
        """Per budget, the share of the audited histories it binds for (the history holds more tokens).

        A history several questions share counts once. A budget that binds for
        none evicts nothing: its cells only repeat no-evict.
        """
        totals = {p.question.history_key: p.history.total_tokens for p in self.questions}
        n = len(totals)
        return {b: (sum(t > b for t in totals.values()) / n if n else 0.0) for b in budgets}

    def history(self, question_id: str) -> History:
        """The history of an audited question."""
        for p in self.questions:
            if p.question.question_id == question_id:
                return p.history
        raise KeyError(question_id)
