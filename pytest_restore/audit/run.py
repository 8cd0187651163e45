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

from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

from pytest_restore.audit.calls import WRITER
from pytest_restore.audit.conditions import CellConditions
from pytest_restore.audit.outcomes import CellRun, Failure, GoldFate, Outcome, Planned
from pytest_restore.audit.questions import (
    ABSTENTION,
    NO_GOLD,
    OUTSIDE_SUBSET,
    AuditConfig,
    Prepared,
    audited_questions,
    count_tokens_ahead,
    excluded_questions,
    select_questions,
)
from pytest_restore.audit.records import (
    Forced,
    answer_scores,
    memory_label,
    record_condition,
    score_counts,
    unit_label,
)
from pytest_restore.libraries.registry import library_of
from pytest_restore.memory.eviction import Mask, Policy
from pytest_restore.memory.systems import MemorySystem, SystemFigures
from pytest_restore.record import REGIMES, Conditions, GoldMemories, Record, bin_of

__all__ = [
    "ABSTENTION",
    "NO_GOLD",
    "OUTSIDE_SUBSET",
    "WRITER",
    "Audit",
    "AuditConfig",
    "CellRun",
    "Failure",
    "Forced",
    "GoldFate",
    "Outcome",
    "Planned",
    "Prepared",
    "answer_scores",
    "audited_questions",
    "count_tokens_ahead",
    "excluded_questions",
    "memory_label",
    "score_counts",
    "select_questions",
    "unit_label",
]


class Audit(CellConditions):
    """The audit of one dataset with one reader, judge and scorer (per process)."""

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
        # a memory library's own calls go to the run's gateway, whose upstream is the writer model: each question
        # carries its share of its store's, priced as the writer's
        library = isinstance(policy, MemorySystem) and library_of(policy) is not None
        served = Counter(q.question.history_key for q in self.questions) if library else Counter()
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
                    records.append(self._record(
                        p, policy, budget, seed, regime, oracle[qid], None, None, None, scorer_failed[qid], ranker,
                        writer=writer,
                    ))
                continue
            regime_a, regime_b, restored = next(outcomes), next(outcomes), next(outcomes)
            fate = fates[(qid, seed)]
            scores = self.importance_counts(p) if policy.needs_importance else None
            ties = self.score_ties(policy, p, seed)
            memory = self.memory_share(policy, p) if builds else None
            wrote = writer
            if library:
                memory = self.library_share(policy, p, budget, seed, served[p.question.history_key])
                wrote = self.writer.name if memory is not None else None
            read = {"a": next(injected), "b": next(injected)}
            next(injected)  # the restored context's
            for regime, outcome in (("a", regime_a), ("b", regime_b)):
                records.append(self._record(
                    p, policy, budget, seed, regime, oracle[qid], outcome, restored, kept, None, ranker, fate,
                    Forced(regime_a, read[regime]),
                    # regime (b) reads the ranker's top k: its retrieval figures need k beside gold_ranks (a gold
                    # unit held through derived memories ranks as the best-ranked memory citing it)
                    top_k=self.config.top_k if regime == "b" else None, importance_scores=scores, score_ties=ties,
                    memory_tokens=memory[:2] if memory is not None else None,
                    memory_tokens_estimated=memory[2] if memory is not None else None, writer=wrote,
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
        **more: Any,
    ) -> Record:
        """The record of one question, store and regime; ``more``: the record's other fields, as the cell knows them
        (made in one construction: a record's fields are set once)."""
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
                oracle=record_condition(oracle, history.question, oracle=True),
                policy=record_condition(outcome, history.question),
                restored=record_condition(restored, history.question),
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
            memories=(
                self._gold_memories(p, mask, forced, (outcome, restored))
                if derived and mask is not None and forced
                else None
            ),
            **more,
        )

    @staticmethod
    def _gold_memories(
        p: Prepared, mask: Mask, forced: Forced, outcomes: Sequence[Outcome | None] = ()
    ) -> GoldMemories:
        """The held memories of a derived store that cite gold, whether each was read, and regime (a)'s verdict;
        and the derived memories citing no gold that a condition's reader saw (``outcomes`` and the forced
        one's), whose texts the data file cannot give back (``show`` prints them)."""
        citing = p.citing(mask)
        read = set(forced.injected)
        units = p.history.units
        sources = p.sources or ()
        seen = {q for o in (*outcomes, forced.outcome) if o is not None for q in o.injected}
        others = sorted(q for q in seen if q not in citing and q < len(sources) and sources[q] != (q,))
        return GoldMemories(
            positions=tuple(citing),
            where=tuple(memory_label(units[c], p.sources[c] if p.sources else (c,), units) for c in citing),
            texts=tuple(units[c].content for c in citing),
            injected=tuple(c in read for c in citing),
            forced=record_condition(forced.outcome, p.question),
            gold_injected=tuple(any(c in read for c in each) for each in p.citing_each(mask)),
            others=tuple(others),
            others_where=tuple(memory_label(units[q], sources[q], units) for q in others),
            others_texts=tuple(units[q].content for q in others),
        )
