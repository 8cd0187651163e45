"""The audit: conditions, the restore counterfactual, the decomposition and the records.

For each question, policy, budget and seed the audit builds four contexts
with the one injection procedure:

=============  ==============  =====================
condition      store ranked    forced units
=============  ==============  =====================
oracle         none            ``G_q``
regime (a)     ``S_P``         ``G_q ∩ S_P``
regime (b)     ``S_P``         none
restored       ``S_P ∪ G_q``   ``G_q``
=============  ==============  =====================

For a memory system that holds derived memories (``Policy.derived``: a
summary, an extracted fact) the store is what it holds at the history's end,
read through :func:`~pytest_restore.memory.memories.memory_view` (its
memories as units after the history's own). A gold unit is kept when some
held memory cites it; regime (a) forces the held memories that cite gold
(for raw units, ``G_q ∩ S_P``), and the restored condition forces the raw
gold units, as for any store.

The audit asks the reader once per distinct context and the judge once per distinct
answer, and writes one record per (question, policy, budget, seed, regime).
The ranker is the run's (``Audit(ranker=...)``, BM25-lite by default); its
name is in every record. With ``AuditConfig.ablations`` the regime-(b)
irreversible records also get the three restore-tightness ablations (see
:mod:`pytest_restore.audit.ablations`).
An oracle-answerable question the policy gets wrong is binned irreversible
(restore fixes it, some gold was evicted), recoverable (restore fixes it, all
gold survived) or residual (restore does not fix it). Failed model calls
exclude the record with their reason; they are never scored as wrong.
"""

from __future__ import annotations

import os
import random
from collections import Counter
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import partial
from typing import Any, NamedTuple

import numpy as np

from pytest_restore.audit import ablations
from pytest_restore.audit.memo import MemoModel, prompt_id
from pytest_restore.data.answer_metrics import bleu1, category_of, locomo_f1
from pytest_restore.data.dataset import Dataset, Question
from pytest_restore.data.units import (
    Granularity,
    History,
    Unit,
    build_histories,
    count_ahead,
    counts_file_name,
    has_gold,
)
from pytest_restore.memory.eviction import (
    Eviction,
    EvictionContext,
    Mask,
    Policy,
    ScoredPolicy,
    stable_seed,
)
from pytest_restore.memory.memories import Sources, memory_view
from pytest_restore.memory.retrieval import (
    INJECT_CAP,
    TOP_K,
    Bm25Lite,
    LexicalIndex,
    Ranker,
    checked_rank,
    context_parts,
    inject,
    render_context,
)
from pytest_restore.memory.systems import MemorySystem, SystemFigures
from pytest_restore.models.base import ChatModel, ChatRequest
from pytest_restore.models.decoding import is_estimated, with_usage
from pytest_restore.models.prompts import PromptSet, parse_score, parse_verdict
from pytest_restore.record import (
    ABLATIONS,
    REGIMES,
    Ablations,
    Condition,
    Conditions,
    GoldMemories,
    Record,
    bin_of,
)

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


@dataclass(frozen=True)
class Failure:
    """A model call that failed after its retries, or gave no usable reply: which model, and what it said.

    Kept as fields until a record is made: the record's ``excluded`` reason
    (:meth:`reason`) and its ``error`` message (:attr:`error`) are both read
    off them, never parsed back out of a message.
    """

    model: str  #: "reader", "judge" or "scorer"
    message: str

    @property
    def error(self) -> str:
        """The record's ``error``: the model and its message."""
        return f"{self.model}: {self.message}"

    def reason(self, condition: str | None = None) -> str:
        """The record's ``excluded`` reason: ``api_error: [CONDITION ]MODEL``."""
        return "api_error: " + (f"{condition} " if condition else "") + self.model


@dataclass(frozen=True)
class Outcome:
    """One condition's answer and verdict."""

    answer: str | None
    correct: bool | None
    failure: Failure | None
    injected_tokens: int
    injected_units: int
    #: :func:`prompt_id` of the reader request (records count unique reader calls from it)
    prompt: str | None = None
    #: the injected units' positions, in the order the reader saw them
    injected: tuple[int, ...] = ()
    #: tokens (in, out) of the reader's call and of the judge's (``None``: the call failed or was not made)
    reader_tokens: tuple[int, int] | None = None
    judge_tokens: tuple[int, int] | None = None
    #: whether a model reported no usage and its tokens are estimated (``models.decoding.with_usage``)
    tokens_estimated: bool = False

    @property
    def error(self) -> str | None:
        """The failed call's message (``None``: the condition has a verdict)."""
        return self.failure.error if self.failure is not None else None


@dataclass(frozen=True)
class GoldFate:
    """What became of each gold unit (in ``History.gold``'s order) in one store: when it left, its rank."""

    #: the position of the unit whose arrival evicted it (a memory system's: after which no held memory
    #: cited it); ``None``: kept, or a memory system lost it when the history ended
    evicted_after: tuple[int | None, ...]
    #: its rank (1 = first) under the ranker over the store (held through memories citing it: the best of
    #: theirs); ``None``: evicted, or not ranked (no match)
    ranks: tuple[int | None, ...]


@dataclass
class Planned:
    """What :meth:`Audit.conditions` built for one cell under one ranker: the plan, the contexts, the stores."""

    ranker: str
    #: (question, seed, store) in order; a ``None`` store: the question's importance scoring failed
    plan: list[tuple[Prepared, int, Mask | None]] = field(default_factory=list)
    #: three per planned store: regime (a), regime (b), restored
    contexts: list[tuple[History, list[int]]] = field(default_factory=list)
    #: the store by (question, seed)
    stores: dict[tuple[str, int], Mask] = field(default_factory=dict)
    #: the policy's pass by (history, seed), which each store of a raw-unit policy came from
    evictions: dict[tuple[str, int], Eviction] = field(default_factory=dict)
    #: the ranker's whole order of each store by (question, seed)
    rankings: dict[tuple[str, int], list[int]] = field(default_factory=dict)


@dataclass
class CellRun:
    """What one policy x budget cell produced."""

    policy: str
    budget: int
    records: list[Record]
    stores: dict[tuple[str, int], Mask] = field(repr=False)
    #: a memory system's cell: what it did building the cell's stores (``None``: the policy is no memory system)
    memory: SystemFigures | None = None


def _evidence(dataset: Dataset) -> list[Question]:
    """The questions an audit prepares histories for: all but the abstention ones (no evidence to restore)."""
    return [q for q in dataset.questions if not q.is_abstention]


def _counts_file(dataset: Dataset, config: AuditConfig) -> str | None:
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
    """Count, once, the tokens of every text an :class:`Audit` of ``dataset`` reads; whether any was counted.

    An xdist controller calls this before its workers build their audits:
    each worker then reads the counts file instead of counting every text
    again. Without a cache directory there is nowhere to share them: nothing
    is done. ``starting`` hears the number of texts before they are counted;
    ``processes`` share the counting out (the workers' number: they wait).
    """
    counts_file = _counts_file(dataset, config)
    if counts_file is None:
        return False
    return count_ahead(audited_questions(dataset, config), config.granularity, counts_file, starting, processes)


class Audit:
    """The audit of one dataset with one reader, judge and scorer (per process)."""

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
        histories = build_histories(audited, config.granularity, counts_file=_counts_file(dataset, config))
        # has_gold is build_history's rule; a history that still has no gold is left out all the same
        self.exclusions += [(h.question.question_id, NO_GOLD) for h in histories if not h.gold]
        with_gold = [h for h in histories if h.gold]
        for each in self.rankers.values():
            each.prepare_all(with_gold)  # a dense ranker embeds every text here, in batches
        self.questions: list[Prepared] = [self._prepare(h) for h in with_gold]
        self._oracle: dict[str, Outcome] = {}
        self._placebo: dict[str, list[int] | None] = {}
        self._importance: dict[str, int] = {}
        # the tokens (in, out, estimated) of each call that built a store: the scorer's by the unit content it
        # scored, a memory system's writer's by its request; how many audited questions each served, per
        # policy; and a question's share of them, by (policy, question)
        self._build_tokens: dict[Hashable, tuple[int, int, bool]] = {}
        self._holders: dict[str, Counter[Hashable]] = {}
        self._memory_shares: dict[tuple[str, str], tuple[float, float, bool] | None] = {}
        self._keys: dict[tuple[str, str], list[Hashable]] = {}
        # a scored policy's ties on each history: (units, units at its two most common scores) by (policy, history, seed)
        self._ties: dict[tuple[str, str, int], tuple[int, int]] = {}
        # whole-grid cells already run in this process (the control's check reads the baselines')
        self._cells: dict[tuple[str, int, str], tuple[Policy, CellRun]] = {}
        # whole-grid stores by (policy, budget): evicted once, read by every ranker of the cell
        self._stores: dict[tuple[str, int], tuple[Policy, Planned]] = {}
        # a memory system's view of each history by (policy, budget, history, seed): fed once per process
        self._views: dict[tuple[int, int, str, int], _View] = {}

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

    # -- summary -------------------------------------------------------------

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

    # -- model calls ---------------------------------------------------------

    def evaluate(self, items: Sequence[tuple[History, Sequence[int]]]) -> list[Outcome]:
        """Read and judge each (history, injected positions) context."""
        # A cell's conditions often share a context (nothing evicted, nothing restored):
        # each distinct one is rendered, named and looked up once.
        keys = [(id(history), tuple(injected)) for history, injected in items]
        built: dict[tuple[int, tuple[int, ...]], tuple[ChatRequest, str]] = {}
        for key, (history, injected) in zip(keys, items):
            if key not in built:
                request = self.reader_request(history, injected)
                built[key] = (request, prompt_id(request))
        distinct = list(built)
        context = dict(zip(keys, items))
        answered = {
            k: with_usage(result, built[k][0], partial(self.reader_tokens, *context[k]))
            for k, result in zip(distinct, self.reader.run([built[k][0] for k in distinct]))
        }
        prompts = [built[k][1] for k in keys]
        answers = [answered[k] for k in keys]
        judge_requests: list[ChatRequest] = []
        judged: list[dict[str, str]] = []  # what each judge request was filled with: its usage is counted from them
        for (history, _), answer in zip(items, answers):
            if answer.ok:
                q = history.question
                assert answer.text is not None
                judged.append({"question": q.question, "answer": q.answer, "prediction": answer.text})
                judge_requests.append(self.prompts.judge(**judged[-1]))
        verdicts = iter([
            with_usage(v, r, partial(self.prompts.judge_tokens, **f))
            for v, r, f in zip(self.judge.run(judge_requests), judge_requests, judged)
        ])
        outcomes = []
        for (history, injected), answer, prompt in zip(items, answers, prompts):
            tokens = int(history.sizes[list(injected)].sum()) if injected else 0
            if not answer.ok:
                failed = Failure("reader", str(answer.error))
                outcomes.append(Outcome(None, None, failed, tokens, len(injected), prompt, tuple(injected)))
                continue
            verdict = next(verdicts)
            correct = parse_verdict(verdict.text) if verdict.ok and verdict.text is not None else None
            failure = None
            if correct is None:
                failure = Failure("judge", str(verdict.error) if not verdict.ok else f"not a verdict: {verdict.text!r}")
            outcomes.append(Outcome(
                answer.text, correct, failure, tokens, len(injected), prompt, tuple(injected),
                reader_tokens=(answer.input_tokens, answer.output_tokens),
                judge_tokens=(verdict.input_tokens, verdict.output_tokens) if verdict.ok else None,
                tokens_estimated=is_estimated(answer) or (verdict.ok and is_estimated(verdict)),
            ))
        return outcomes

    def oracle(self, questions: Sequence[Prepared]) -> dict[str, Outcome]:
        """Clean-gold outcomes, once per question and reader."""
        todo = [p for p in questions if p.question.question_id not in self._oracle]
        if todo:
            for p, o in zip(todo, self.evaluate([(p.history, p.history.gold) for p in todo])):
                # a failed oracle call stays failed for every cell of the run (the models share it)
                self._oracle[p.question.question_id] = o
        return {p.question.question_id: self._oracle[p.question.question_id] for p in questions}

    def importance(self, questions: Sequence[Prepared]) -> tuple[dict[str, int], dict[str, Failure]]:
        """Importance scores of every unit content, and the questions whose scoring failed."""
        histories = {p.question.history_key: p.history for p in questions}  # a shared history is scored once
        contents = list(
            dict.fromkeys(
                u.content for h in histories.values() for u in h.units if u.content not in self._importance
            )
        )
        failed: dict[str, str] = {}
        if contents:
            requests = [self.prompts.scorer(content=c) for c in contents]
            results = [
                with_usage(r, q, partial(self.prompts.scorer_tokens, content=c))
                for r, q, c in zip(self.scorer.run(requests), requests, contents)
            ]
            for content, result in zip(contents, results):
                score = parse_score(result.text) if result.ok and result.text is not None else None
                if score is not None:
                    self._importance[content] = score
                    self._build_tokens[content] = (result.input_tokens, result.output_tokens, is_estimated(result))
                else:
                    failed[content] = result.error or f"not a score: {result.text!r}"
        bad = {}
        if failed:
            for p in questions:
                for u in p.history.units:
                    if u.content in failed:
                        bad[p.question.question_id] = Failure("scorer", failed[u.content])
                        break
        return self._importance, bad

    def write(self, system: MemorySystem, questions: Sequence[Prepared]) -> tuple[dict[str, Failure], SystemFigures]:
        """Ask the writer model every request ``system`` needs for these questions' histories at once
        (:meth:`MemorySystem.requests`), hand it the replies, and return the questions whose history lost
        a call (their records are excluded, never scored) and the writer's calls and failures (kind
        ``writer``). A system that calls no model asks nothing."""
        needed: dict[str, list[ChatRequest]] = {}
        for p in questions:
            if p.question.history_key not in needed:  # a shared history is written once
                needed[p.question.history_key] = _requests(system, p.history.units)
        distinct = list(dict.fromkeys(r for requests in needed.values() for r in requests))
        figures = SystemFigures()
        if not distinct:
            return {}, figures
        replies: dict[Hashable, str] = {}
        failed: dict[ChatRequest, str] = {}
        for request, result in zip(distinct, self.writer.run(distinct)):
            if result.ok and result.text is not None:
                replies[request] = result.text
                result = with_usage(result, request)
                self._build_tokens[request] = (result.input_tokens, result.output_tokens, is_estimated(result))
            else:
                failed[request] = result.error or "no reply"
        figures.calls[WRITER], figures.failed[WRITER] = len(distinct), len(failed)
        for asked, text in replies.items():  # an answer the system can make nothing of is counted, by cause
            cause = system.unusable(asked, text)
            if cause is not None:
                figures.reject(WRITER, cause)
        system.supply(replies)
        out = {}
        for p in questions:
            lost = next((failed[r] for r in needed[p.question.history_key] if r in failed), None)
            if lost is not None:
                out[p.question.question_id] = Failure("writer", lost)
        return out, figures

    def writer_requests(self, system: Policy) -> list[ChatRequest]:
        """Every request a memory system that writes with a model needs over the audited histories (a dry run's)."""
        if not isinstance(system, MemorySystem):
            return []
        histories = {p.question.history_key: p.history for p in self.questions}
        return list(dict.fromkeys(r for h in histories.values() for r in _requests(system, h.units)))

    def builds_with_a_model(self, policy: Policy) -> bool:
        """Whether ``policy`` calls a model to build its store: the importance scorer, or a memory system's writer."""
        if not (policy.needs_importance or isinstance(policy, MemorySystem)):
            return False
        return any(self._build_keys(policy, p.question.history_key, p.history.units) for p in self.questions)

    def _build_keys(self, policy: Policy, history_key: str, units: Sequence[Unit]) -> list[Hashable]:
        """The calls that build ``policy``'s store of a history, in the history's order (their tokens' keys)."""
        cached = self._keys.get((policy.name, history_key))
        if cached is None:
            keys: dict[Hashable, None] = {}
            if policy.needs_importance:
                keys.update(dict.fromkeys(u.content for u in units))
            if isinstance(policy, MemorySystem):
                keys.update(dict.fromkeys(_requests(policy, units)))
            cached = self._keys[(policy.name, history_key)] = list(keys)
        return cached

    def memory_share(self, policy: Policy, prepared: Prepared) -> tuple[float, float, bool] | None:
        """The question's share of the tokens (in, out) of the model calls that built ``policy``'s store of its
        history (the importance scorer's, a memory system's writer's), and whether any is estimated
        (``None``: a call of it has no tokens: it failed).

        Each call is made once for the whole run; its tokens are split equally over the audited questions
        whose history it served, so a conversation's questions share its store's calls and the shares of
        all questions add up to what the calls cost once.
        """
        qid = prepared.question.question_id
        if (policy.name, qid) not in self._memory_shares:
            holders = self._holders.get(policy.name)
            if holders is None:
                served = Counter(p.question.history_key for p in self.questions)
                histories = {p.question.history_key: p.history for p in self.questions}
                holders = Counter()
                for key, history in histories.items():
                    for call in self._build_keys(policy, key, history.units):
                        holders[call] += served[key]
                self._holders[policy.name] = holders
            tokens_in = tokens_out = 0.0
            estimated = False
            share: tuple[float, float, bool] | None = None
            # in the history's order: a float sum in set order would differ between processes (hash seeds)
            # the calls of the audited history (its keys were listed above), not of a memory system's view of it
            for call in self._build_keys(policy, prepared.question.history_key, prepared.history.units):
                spent = self._build_tokens.get(call)
                if spent is None:
                    break
                tokens_in += spent[0] / max(1, holders[call])
                tokens_out += spent[1] / max(1, holders[call])
                estimated = estimated or spent[2]
            else:
                share = (round(tokens_in, 2) + 0.0, round(tokens_out, 2) + 0.0, estimated)
            self._memory_shares[(policy.name, qid)] = share
        return self._memory_shares[(policy.name, qid)]

    # -- eviction ------------------------------------------------------------

    def retain(self, policy: Policy, prepared: Prepared, budget: int, seed: int, importance: Mapping[str, int]) -> Mask:
        """``S_P`` of one question's history, checked for shape and budget (:meth:`evict`'s store)."""
        return self.evict(policy, prepared, budget, seed, importance).mask

    def evict(
        self, policy: Policy, prepared: Prepared, budget: int, seed: int, importance: Mapping[str, int]
    ) -> Eviction:
        """One pass of ``policy`` over a question's history: ``S_P``, checked for shape and budget, and
        when each unit left where the pass records it (:meth:`Policy.evict`).

        The policy sees the history's id (the question's own, or the
        conversation it shares): every question of one history gets the same store.
        """
        history = prepared.history
        ctx = EvictionContext(question_id=history.question.history_key, seed=seed, importance=importance)
        eviction = policy.evict(history.units, history.sizes, budget, ctx)
        mask = np.asarray(eviction.mask)
        if mask.shape != (len(history.units),) or mask.dtype != np.bool_:
            raise TypeError(
                f"policy {policy.name!r} returned a store of shape {mask.shape} and dtype {mask.dtype}; "
                f"expected a boolean mask over {len(history.units)} units"
            )
        if policy.budgeted and int(history.sizes[mask].sum()) > budget:
            raise ValueError(
                f"policy {policy.name!r} kept {int(history.sizes[mask].sum())} tokens of "
                f"{history.question.question_id} under a budget of {budget}"
            )
        return replace(eviction, mask=mask)

    def held(
        self, policy: Policy, prepared: Prepared, budget: int, seed: int, importance: Mapping[str, int]
    ) -> tuple[Prepared, Mask]:
        """A memory system's store of one question: the history extended by its derived memories, and the held mask.

        The system is fed each history once per (budget, seed) in this
        process (questions sharing a history share what it holds); each
        question gets its own view of it (its gold, its rankers' states).
        """
        history = prepared.history
        key = (id(policy), budget, history.question.history_key, seed)
        entry = self._views.get(key)
        if entry is None or entry.policy is not policy:
            ctx = EvictionContext(question_id=history.question.history_key, seed=seed, importance=importance)
            lost: Mapping[int, int | None] | None = None
            figures = SystemFigures(stores=1, units=len(history.units))
            if isinstance(policy, MemorySystem):  # traced as it is fed: when each unit lost its last citing memory
                held = policy.trace(history.units, history.sizes, budget, ctx)
                memories, lost = held.memories, held.lost
                account = policy.figures()
                if account is not None:  # the system's own: its calls, what it rejected (stores and units are ours)
                    figures = figures + replace(account, stores=0, units=0, held=0, held_tokens=0)
            else:
                memories = policy.hold(history.units, history.sizes, budget, ctx)
            view, mask, sources = memory_view(history, memories)
            figures.held, figures.held_tokens = len(memories), int(view.sizes[mask].sum())
            entry = self._views[key] = _View(policy, view, mask, sources, lost, figures)
        own = History(history.question, history.granularity, entry.view.units, entry.view.sizes, history.gold)
        for ranker in self.rankers.values():
            ranker.prepare_all([own])  # a dense ranker embeds the derived memories' texts here
        return replace(self._prepare(own, entry.sources), lost=entry.lost), entry.mask

    # -- one cell ------------------------------------------------------------

    def run_cell(
        self, policy: Policy, budget: int, questions: Sequence[Prepared] | None = None, ranker: str | None = None
    ) -> CellRun:
        """Every record of one policy x budget cell (all seeds of a seeded policy).

        ``questions`` restricts the cell to some of the audited questions (the
        calibration gate runs on 40); the ablations run on whole-grid cells
        only, so the gate costs no ablation calls. A whole-grid cell runs once per process:
        asking for it again (the control's check reads the baselines' cells)
        returns the same run. ``ranker`` names the audit's ranker the cell
        reads with (the first by default); the cell's stores are evicted once
        and shared by every ranker.
        """
        name = ranker or self.ranker.name
        key = (policy.name, budget, name)
        if questions is None and key in self._cells and self._cells[key][0] is policy:
            return self._cells[key][1]
        whole = questions is None
        run = self._run_cell(policy, budget, self.questions if questions is None else questions, ablate=whole, ranker=name)
        if questions is None:
            # failed calls included: running it again would give the same outcomes (the models share them)
            self._cells[key] = (policy, run)
        return run

    def has_cell(self, policy: Policy, budget: int, ranker: str | None = None) -> bool:
        """Whether this process has already run the whole-grid cell (under ``ranker``, the first by default)."""
        entry = self._cells.get((policy.name, budget, ranker or self.ranker.name))
        return entry is not None and entry[0] is policy

    def _run_cell(
        self, policy: Policy, budget: int, questions: Sequence[Prepared], *, ablate: bool, ranker: str
    ) -> CellRun:
        importance: Mapping[str, int] = {}
        scorer_failed: dict[str, Failure] = {}
        if policy.needs_importance:
            importance, scorer_failed = self.importance(questions)
        written = None
        if isinstance(policy, MemorySystem):
            lost, written = self.write(policy, questions)
            scorer_failed = {**scorer_failed, **lost}
        writer = self.writer.name if written is not None and written.calls[WRITER] else None
        builds = self.builds_with_a_model(policy)
        oracle = self.oracle(questions)
        shared = self._stores.get((policy.name, budget)) if ablate and not scorer_failed else None
        known = shared[1] if shared is not None and shared[0] is policy else None
        planned = self.conditions(policy, budget, questions, importance, scorer_failed, ranker, known)
        plan, contexts, stores = planned.plan, planned.contexts, planned.stores
        if ablate and not scorer_failed and len(self.rankers) > 1:
            self._stores[(policy.name, budget)] = (policy, planned)
        outcomes = iter(self.evaluate(contexts))
        fates = self.gold_fates(policy, budget, planned, importance)
        injected = iter(positions for _, positions in contexts)
        records: list[Record] = []
        for p, seed, kept in plan:
            qid = p.question.question_id
            if kept is None:
                for regime in REGIMES:
                    records.append(replace(
                        self._record(p, policy, budget, seed, regime, oracle[qid], None, None, None, scorer_failed[qid], ranker),
                        writer=writer,
                    ))
                continue
            regime_a, regime_b, restored = next(outcomes), next(outcomes), next(outcomes)
            fate = fates[(qid, seed)]
            scores = score_counts(p, importance) if policy.needs_importance else None
            ties = self.score_ties(policy, p, seed)
            memory = self.memory_share(policy, p) if builds else None
            read = {"a": next(injected), "b": next(injected)}
            next(injected)  # the restored context's
            for regime, outcome in (("a", regime_a), ("b", regime_b)):
                forced = Forced(regime_a, read[regime])
                record = self._record(
                    p, policy, budget, seed, regime, oracle[qid], outcome, restored, kept, None, ranker, fate, forced
                )
                # regime (b) reads the ranker's top k: its retrieval figures need k beside gold_ranks (a gold
                # unit held through derived memories ranks as the best-ranked memory citing it)
                top_k = self.config.top_k if regime == "b" else None
                records.append(replace(
                    record, top_k=top_k, importance_scores=scores, score_ties=ties,
                    memory_tokens=memory[:2] if memory is not None else None,
                    memory_tokens_estimated=memory[2] if memory is not None else None, writer=writer,
                ))
        if ablate and self.config.ablations:
            records = self.ablate(records, {(p.question.question_id, seed): p for p, seed, _ in plan}, stores)
        figures = self._system_figures(policy, budget, plan, written) if policy.derived else None
        return CellRun(policy.name, budget, records, stores, figures)

    def _system_figures(
        self, policy: Policy, budget: int, plan: Sequence[tuple[Prepared, int, Mask | None]], written: SystemFigures | None
    ) -> SystemFigures:
        """What a memory system did building a cell's stores: each store (history and seed) once, and its writer's calls."""
        total = written or SystemFigures()
        built = {(p.question.history_key, seed) for p, seed, mask in plan if mask is not None}
        for history, seed in sorted(built):
            total = total + self._views[(id(policy), budget, history, seed)].figures
        return total

    def score_ties(self, policy: Policy, prepared: Prepared, seed: int) -> tuple[int, int] | None:
        """A scored policy's ties on the question's history: its units, and those at its two most common scores.

        ``None`` for a policy that exposes no scores (:class:`ScoredPolicy`) and
        for one reading importance scores (their distribution is reported whole:
        ``record.importance_scores``). Once per history and seed.
        """
        if policy.needs_importance or policy.derived or not isinstance(policy, ScoredPolicy):
            return None
        history = prepared.history
        key = (policy.name, history.question.history_key, seed)
        if key not in self._ties:
            ctx = EvictionContext(question_id=history.question.history_key, seed=seed)
            scores = [float(s) for s in policy.unit_scores(history.units, ctx)]
            self._ties[key] = (len(scores), sum(n for _, n in Counter(scores).most_common(2)))
        return self._ties[key]

    # -- restore-tightness ablations (see pytest_restore.audit.ablations) ------------

    def placebo(self, prepared: Prepared) -> list[int] | None:
        """The question's placebo units (``None``: not constructible), once per question."""
        qid = prepared.question.question_id
        if qid not in self._placebo:
            # among the history's own units, never a memory system's derived memories
            own = prepared.history if prepared.sources is None else self.history(qid)
            self._placebo[qid] = ablations.placebo_units(own)
        return self._placebo[qid]

    def ablation_contexts(self, prepared: Prepared, store: Mask, ranker: str | None = None) -> dict[str, list[int] | None]:
        """The injected positions of each ablation (``None``: not constructible). Pure."""
        history, cap = prepared.history, self.config.cap
        sizes = history.sizes
        ranked = self.rank(prepared, store, ranker)
        contexts: dict[str, list[int] | None] = {
            # (i): forced G ∩ S_P over S_P, i.e. regime (a)'s context
            "surviving": inject(prepared.citing(store), ranked, sizes, cap),
            # (ii): the whole retained store, forced, so never capped
            "store": inject([int(p) for p in np.flatnonzero(store)], [], sizes, cap),
            "placebo": None,
        }
        placebo = self.placebo(prepared)
        if placebo is not None:
            # (iii): the restored condition with the placebo in the gold's place
            with_placebo = store.copy()
            with_placebo[placebo] = True
            contexts["placebo"] = inject(placebo, self.rank(prepared, with_placebo, ranker), sizes, cap)
        return contexts

    def ablate(
        self,
        records: Sequence[Record],
        prepared: Mapping[tuple[str, int], Prepared],
        stores: Mapping[tuple[str, int], Mask],
    ) -> list[Record]:
        """The records with the three ablations run on the regime-(b) irreversible ones."""
        items: list[tuple[History, Sequence[int]]] = []
        slots: list[tuple[int, str]] = []
        changes: dict[int, dict[str, Any]] = {}  # Ablations' fields, per record
        for i, r in enumerate(records):
            if not ablations.is_case(r):
                continue
            p = prepared[(r.question_id, r.seed)]
            contexts = self.ablation_contexts(p, stores[(r.question_id, r.seed)], r.ranker)
            excluded: dict[str, str] = {}
            for key, _title in ABLATIONS:
                injected = contexts[key]
                if injected is None:
                    excluded[key] = (
                        f"{ablations.NOT_CONSTRUCTIBLE}: no set of nearby non-gold units within "
                        f"{ablations.PLACEBO_MAX_RATIO:g}x the gold's tokens"
                    )
                else:
                    items.append((p.history, injected))
                    slots.append((i, key))
            placebo = self.placebo(p)
            changes[i] = {
                "excluded": excluded,
                "placebo_units": tuple(placebo) if placebo is not None else None,
                "placebo_tokens": int(p.history.sizes[placebo].sum()) if placebo is not None else None,
            }
        for (i, key), outcome in zip(slots, self.evaluate(items)):
            if outcome.failure is not None:
                changes[i]["excluded"][key] = outcome.failure.reason()
            changes[i][f"{key}_correct"] = outcome.correct if outcome.failure is None else None
            if key == "store":
                changes[i]["store_tokens"] = outcome.injected_tokens
        return [replace(r, ablations=Ablations(**changes[i])) if i in changes else r for i, r in enumerate(records)]

    def conditions(
        self,
        policy: Policy,
        budget: int,
        questions: Sequence[Prepared],
        importance: Mapping[str, int],
        skip: Mapping[str, Failure],
        ranker: str | None = None,
        known: Planned | None = None,
    ) -> Planned:
        """Evict, then build each question's regime (a), regime (b) and restored contexts.

        Pure: no model is called. Questions in ``skip`` get no store (their
        importance scoring failed). ``ranker`` reads the stores (the first by
        default); ``known`` is what this cell already planned under another
        ranker: its stores and evictions are taken as they are. Questions that
        share a history share its store: the policy passes over it once per
        seed (:meth:`evict`, which also records when each unit left). Each
        store is ranked once, whole: regimes (a) and (b) read its top k, the
        gold's fates its whole order (a ranker whose top k may not be the head
        of its order, :attr:`Ranker.top_k_is_head`, is asked for its top k too).
        """
        seeds = self.config.seeds if policy.seeded else (0,)
        cap, top_k = self.config.cap, self.config.top_k
        name = ranker or self.ranker.name
        head = self.rankers[name].top_k_is_head
        planned = Planned(ranker=name)
        if known is not None:
            planned.evictions.update(known.evictions)
        for seed in seeds:
            for p in questions:
                qid = p.question.question_id
                if qid in skip:
                    planned.plan.append((p, seed, None))
                    continue
                if policy.derived:
                    p, mask = self.held(policy, p, budget, seed, importance)
                elif known is not None:
                    mask = known.stores[(qid, seed)]
                else:
                    shared = (p.question.history_key, seed)
                    if shared not in planned.evictions:
                        planned.evictions[shared] = self.evict(policy, p, budget, seed, importance)
                    mask = planned.evictions[shared].mask
                planned.stores[(qid, seed)] = mask
                gold = list(p.history.gold)
                # regime (a) forces the held units that cite gold: for raw units, the surviving gold
                citing = p.citing(mask)
                whole = self.rank(p, mask, name, k=int(mask.sum()))
                planned.rankings[(qid, seed)] = whole
                # the top k is the head of the whole order for every built-in ranker; another is asked again
                ranked = whole[:top_k] if head else self.rank(p, mask, name)
                sizes = p.history.sizes
                regime_a = inject(citing, ranked, sizes, cap)
                if p.sources is None and len(citing) == len(gold):
                    restored = regime_a  # nothing to restore: the same store, ranked and injected alike
                else:
                    restored_store = mask.copy()
                    restored_store[gold] = True
                    restored = inject(gold, self.rank(p, restored_store, name), sizes, cap)
                planned.contexts.append((p.history, regime_a))
                planned.contexts.append((p.history, inject([], ranked, sizes, cap)))  # regime b
                planned.contexts.append((p.history, restored))
                planned.plan.append((p, seed, mask))
        return planned

    def gold_fates(
        self, policy: Policy, budget: int, planned: Planned, importance: Mapping[str, int]
    ) -> dict[tuple[str, int], GoldFate]:
        """Each planned store's :class:`GoldFate` per (question, seed), for the records' stories.

        For a store of units the arrivals come from the pass that evicted it
        (:meth:`Eviction.arrivals`: recorded as the built-in policies evict;
        else asked of :meth:`Policy.eviction_arrivals`, once per shared store,
        for the evicted gold of every question of it); for a memory system's,
        from what it recorded as it was fed (:attr:`Prepared.lost`). The ranks
        are the store's whole ranking (:meth:`conditions`), no second one;
        a gold unit held through memories citing it has the best of their ranks.
        """
        evicted_gold: dict[tuple[str, int], set[int]] = {}
        for p, seed, mask in planned.plan:
            if mask is not None:
                evicted_gold.setdefault((p.question.history_key, seed), set()).update(p.evicted(mask))
        arrivals: dict[tuple[str, int], Mapping[int, int | None]] = {}
        out: dict[tuple[str, int], GoldFate] = {}
        for p, seed, mask in planned.plan:
            if mask is None:
                continue
            history, shared = p.history, (p.question.history_key, seed)
            if policy.derived:
                # a memory system that was not traced (a Policy holding memories of its own) names no arrival
                arrivals[shared] = p.lost if p.lost is not None else {}
            elif shared not in arrivals:
                ctx = EvictionContext(question_id=p.question.history_key, seed=seed, importance=importance)
                wanted = sorted(evicted_gold[shared])
                eviction = planned.evictions[shared]
                arrivals[shared] = eviction.arrivals(policy, history.units, history.sizes, budget, ctx, wanted)
            evicted = set(p.evicted(mask))
            order = {pos: i + 1 for i, pos in enumerate(planned.rankings[(p.question.question_id, seed)])}
            ranks = [min((order[c] for c in citing if c in order), default=None) for citing in p.citing_each(mask)]
            out[(p.question.question_id, seed)] = GoldFate(
                tuple(arrivals[shared].get(g) if g in evicted else None for g in history.gold),
                tuple(rank if g not in evicted else None for g, rank in zip(history.gold, ranks)),
            )
        return out

    def reader_request(self, history: History, injected: Sequence[int]) -> ChatRequest:
        """The reader's request for one context."""
        q = history.question
        snippets = render_context(history, injected)
        return self.prompts.reader(question=q.question, question_date=q.question_date, snippets=snippets)

    def reader_tokens(self, history: History, injected: Sequence[int]) -> tuple[int, int]:
        """The o200k tokens of :meth:`reader_request`'s messages, from the snippets' sizes (no prompt encoded)."""
        q = history.question
        parts, counts = context_parts(history, injected)
        return self.prompts.reader_tokens(question=q.question, question_date=q.question_date, snippets=parts, counts=counts)

    def planned_reader_requests(
        self, policy: Policy, budget: int, importance: Mapping[str, int]
    ) -> list[tuple[Question, ChatRequest]]:
        """The reader requests a cell will send, each with its question (for a dry run), oracle included.

        With ablations, every store that lost some gold counts its ablation
        contexts: an upper bound, since only the irreversible cases get them.
        """
        oracle = [(p.history, list(p.history.gold)) for p in self.questions]
        contexts: list[tuple[History, list[int]]] = []
        extra: list[tuple[History, list[int]]] = []
        planned = None
        for ranker in self.rankers:  # every ranker of the audit reads the cell's stores
            planned = self.conditions(policy, budget, self.questions, importance, {}, ranker, planned)
            contexts += planned.contexts
            if self.config.ablations:
                for p, _seed, mask in planned.plan:
                    if mask is not None and not all(mask[g] for g in p.history.gold):
                        for injected in self.ablation_contexts(p, mask, ranker).values():
                            if injected is not None:
                                extra.append((p.history, injected))
        return [(h.question, self.reader_request(h, i)) for h, i in oracle + contexts + extra]

    def scorer_requests(self) -> dict[str, ChatRequest]:
        """The importance scorer's requests, one per distinct unit content, keyed by the content."""
        histories = {p.question.history_key: p.history for p in self.questions}
        contents = dict.fromkeys(u.content for h in histories.values() for u in h.units)
        return {c: self.prompts.scorer(content=c) for c in contents}

    def _record(
        self,
        p: Prepared,
        policy: Policy,
        budget: int,
        seed: int,
        regime: str,
        oracle: Outcome,
        outcome: Outcome | None,
        restored: Outcome | None,
        mask: Mask | None,
        scorer_failure: Failure | None,
        ranker: str,
        fate: GoldFate | None = None,
        forced: Forced | None = None,
    ) -> Record:
        history = p.history
        # a derived store's regime-(a) verdict decides its bin: a failed call there excludes the record
        derived = forced is not None and p.sources is not None and mask is not None
        gold = history.gold
        evicted_units = p.evicted(mask) if mask is not None else None
        evicted = len(evicted_units) if evicted_units is not None else None
        excluded = error = None
        if scorer_failure is not None:  # no store without the scores: every condition is out
            excluded, error = scorer_failure.reason(), f"api_error: {scorer_failure.error}"
        else:
            checked = [("oracle", oracle), ("policy", outcome), ("restored", restored)]
            if derived and forced is not None:
                checked.append(("forced", forced.outcome))
            for name, o in checked:
                if o is not None and o.failure is not None:
                    # the reason names the condition and the model; the message goes in "error"
                    excluded, error = o.failure.reason(name), o.failure.error
                    break
        policy_correct = outcome.correct if outcome is not None else None
        restored_correct = restored.correct if restored is not None else None
        bin_ = None
        if excluded is None:
            bin_ = bin_of(
                oracle_correct=oracle.correct,
                policy_correct=policy_correct,
                restored_correct=restored_correct,
                gold_evicted=evicted,
                forced_correct=forced.outcome.correct if forced is not None else None,
            )
        return Record(
            question_id=history.question.question_id,
            question_type=history.question.question_type,
            policy=policy.name,
            budget=budget,
            seed=seed,
            regime=regime,
            reader=self.reader.name,
            judge=self.judge.name,
            scorer=self.scorer.name if policy.needs_importance else None,
            conditions=Conditions(
                oracle=_condition(oracle, history.question, oracle=True),
                policy=_condition(outcome, history.question),
                restored=_condition(restored, history.question),
            ),
            negative_restore_gain=bool(excluded is None and policy_correct and restored_correct is False),
            ranker=ranker,
            run_id=self.config.run_id,
            granularity=self.config.granularity.value,
            question=history.question.question,
            reference=history.question.answer,
            gold_units=len(gold),
            gold_tokens=history.gold_tokens,
            gold_evicted=evicted,
            gold_evicted_units=tuple(evicted_units) if evicted_units is not None else None,
            gold_evicted_where=(
                tuple(unit_label(history.units[g]) for g in evicted_units) if evicted_units is not None else None
            ),
            gold_positions=tuple(gold),
            gold_evicted_after=fate.evicted_after if fate is not None else None,
            gold_ranks=fate.ranks if fate is not None else None,
            bin=bin_,
            excluded=excluded,
            error=error,
            store_tokens=int(history.sizes[mask].sum()) if mask is not None else None,
            store_units=int(mask.sum()) if mask is not None else None,
            memories=self._gold_memories(p, mask, forced) if derived and mask is not None and forced else None,
        )

    @staticmethod
    def _gold_memories(p: Prepared, mask: Mask, forced: Forced) -> GoldMemories:
        """The held memories of a derived store that cite gold, whether each was read, and regime (a)'s verdict."""
        citing = p.citing(mask)
        read = set(forced.injected)
        units = p.history.units
        return GoldMemories(
            positions=tuple(citing),
            where=tuple(memory_label(units[c], p.sources[c] if p.sources else (c,), units) for c in citing),
            texts=tuple(units[c].content for c in citing),
            injected=tuple(c in read for c in citing),
            forced=_condition(forced.outcome, p.question),
            gold_injected=tuple(any(c in read for c in each) for each in p.citing_each(mask)),
        )


#: The kind of call a model-written memory system's writer makes (:class:`SystemFigures`).
WRITER = "writer"
class _View(NamedTuple):
    """A memory system's store of one history, fed once per process (:meth:`Audit.held`)."""

    policy: Policy
    #: the history extended by the derived memories
    view: History
    #: which of the view's units are held
    mask: Mask
    #: what each unit cites
    sources: Sources
    #: when each lost unit lost its last citing memory (``None``: not traced)
    lost: Mapping[int, int | None] | None
    #: what the system did building it
    figures: SystemFigures


def _condition(outcome: Outcome | None, question: Question, *, oracle: bool = False) -> Condition:
    """A condition of the record from its outcome (all null when the condition did not run; the oracle has no sizes)."""
    if outcome is None:
        return Condition(None)
    f1, bleu = answer_scores(outcome.answer, question)
    return Condition(
        outcome.correct,
        outcome.answer,
        outcome.prompt,
        None if oracle else outcome.injected_tokens,
        None if oracle else outcome.injected_units,
        outcome.injected,
        f1,
        bleu,
        outcome.reader_tokens,
        outcome.judge_tokens,
        outcome.tokens_estimated if outcome.reader_tokens is not None else None,
    )


def _requests(system: MemorySystem, units: Sequence[Unit]) -> list[ChatRequest]:
    """``system.requests(units)``, each checked to be a chat request the model layer can send."""
    requests = system.requests(units)
    bad = next((r for r in requests if not isinstance(r, ChatRequest)), None)
    if bad is not None:
        raise TypeError(f"memory system {system.name!r} asked for a {type(bad).__name__}, not a ChatRequest")
    return [r for r in requests if isinstance(r, ChatRequest)]


def answer_scores(answer: str | None, question: Question) -> tuple[float | None, float | None]:
    """LoCoMo's token F1 (by the question's category) and BLEU-1 of an answer, rounded to 6 places; nulls for no answer."""
    if answer is None:
        return None, None
    f1 = locomo_f1(answer, question.answer, category_of(question.question_type))
    return round(f1, 6) + 0.0, round(bleu1(answer, question.answer), 6) + 0.0


def score_counts(prepared: Prepared, importance: Mapping[str, int]) -> tuple[int, ...] | None:
    """How many units of the question's history the scorer gave each score 1-10 (``None``: not all scored)."""
    counts = [0] * 10
    for unit in prepared.history.units:
        score = importance.get(unit.content)
        if score is None or not 1 <= score <= 10:
            return None
        counts[score - 1] += 1
    return tuple(counts)


@dataclass(frozen=True)
class Forced:
    """Regime (a)'s outcome (the held memories citing gold forced) and what a record's own condition injected."""

    outcome: Outcome
    injected: Sequence[int]


def memory_label(memory: Unit, sources: Sequence[int], units: Sequence[Unit]) -> str:
    """Where a derived memory came from: ``memory of session S, turns T-U (date)`` (sessions joined when several)."""
    by_session: dict[int, list[int]] = {}
    for s in sources:
        by_session.setdefault(units[s].session, []).append(units[s].turn)
    parts = []
    for session, turns in by_session.items():
        span = f"turn {turns[0]}" if len(turns) == 1 else f"turns {min(turns)}-{max(turns)}"
        parts.append(f"session {session}, {span}")
    return f"memory of {'; '.join(parts)} ({memory.date})"


def unit_label(unit: Unit) -> str:
    """Where a unit sits in the haystack, for the report's cases (no gold is revealed to a model)."""
    where = f"session {unit.session}" + (f", turn {unit.turn}" if unit.turn >= 0 else "")
    return f"{where} ({unit.date}, {unit.role})"
