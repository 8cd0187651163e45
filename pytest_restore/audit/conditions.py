"""A cell's conditions: each store ranked once, the contexts of regimes (a) and (b) and of the restored
condition, the gold's fate in each store, and the restore-tightness ablations' contexts.

Pure where it builds (:meth:`CellConditions.conditions` calls no model): the contexts come from the one
injection procedure (:func:`~pytest_restore.memory.retrieval.inject`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

import numpy as np

from pytest_restore.audit import ablations
from pytest_restore.audit.outcomes import Failure, GoldFate, Planned
from pytest_restore.audit.questions import Prepared
from pytest_restore.audit.stores import Stores
from pytest_restore.data.dataset import Question
from pytest_restore.data.units import History
from pytest_restore.memory.eviction import EvictionContext, Mask, Policy
from pytest_restore.memory.retrieval import inject
from pytest_restore.models.base import ChatRequest
from pytest_restore.record import ABLATIONS, Ablations, Record


class CellConditions(Stores):
    """A cell's conditions and the ablations' contexts (a part of :class:`~pytest_restore.audit.run.Audit`)."""

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
            # a memory system's stores, in the questions' order (a library's histories fed side by side)
            fed = [p for p in questions if p.question.question_id not in skip] if policy.derived else []
            views = self.held_each(policy, fed, budget, seed, importance)
            for p in questions:
                qid = p.question.question_id
                if qid in skip:
                    planned.plan.append((p, seed, None))
                    continue
                if policy.derived:
                    p, mask = next(views)
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
