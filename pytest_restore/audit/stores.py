"""A policy's store of one history: one pass of its eviction loop, or a memory system's view of what it holds.

:meth:`Stores.evict` runs a policy over a question's history once (the store, and when each unit left);
:meth:`Stores.held` feeds a memory system each history once per budget and seed and reads what it holds
as units; :meth:`Stores.score_ties` counts a scored policy's ties.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Mapping
from dataclasses import replace

import numpy as np

from pytest_restore.audit.calls import ModelCalls
from pytest_restore.audit.outcomes import StoreView
from pytest_restore.audit.questions import Prepared
from pytest_restore.data.units import History
from pytest_restore.libraries.guest import CallTally, library_version
from pytest_restore.libraries.registry import library_of
from pytest_restore.memory.eviction import Eviction, EvictionContext, Mask, Policy, ScoredPolicy
from pytest_restore.memory.memories import memory_view
from pytest_restore.memory.systems import MemorySystem, SystemFigures


class Stores(ModelCalls):
    """A policy's store of each history (a part of :class:`~pytest_restore.audit.run.Audit`)."""

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
            tokens: tuple[int, int, bool] | None = None
            if isinstance(policy, MemorySystem):  # traced as it is fed: when each unit lost its last citing memory
                library = library_of(policy)
                tally, started = CallTally(), time.monotonic()
                held = policy.trace(history.units, history.sizes, budget, ctx)
                seconds = time.monotonic() - started
                memories, lost = held.memories, held.lost
                account = policy.figures()
                if account is not None:  # the system's own: its calls, what it rejected (stores and units are ours)
                    figures = figures + replace(account, stores=0, units=0, held=0, held_tokens=0, ingest_seconds=0.0)
                if library is not None:  # the same three figures for every library, measured here, not by its adapter
                    figures.ingest_seconds = seconds  # the store made and fed, its model calls among it
                    figures.library = figures.library or f"{library.distribution} {library_version(library.distribution)}"
                    if tally.calls() or not sum(figures.calls.values()):  # else its calls went elsewhere: not ours to price
                        tokens_in, tokens_out, estimated = tally.tokens()
                        tokens = (tokens_in, tokens_out, estimated > 0)
            else:
                memories = policy.hold(history.units, history.sizes, budget, ctx)
            view, mask, sources = memory_view(history, memories)
            figures.held, figures.held_tokens = len(memories), int(view.sizes[mask].sum())
            entry = self._views[key] = StoreView(policy, view, mask, sources, lost, figures, tokens)
        own = History(history.question, history.granularity, entry.view.units, entry.view.sizes, history.gold)
        for ranker in self.rankers.values():
            ranker.prepare_all([own])  # a dense ranker embeds the derived memories' texts here
        return replace(self._prepare(own, entry.sources), lost=entry.lost), entry.mask

    def library_share(self, policy: Policy, prepared: Prepared, budget: int, seed: int, served: int) -> tuple[float, float, bool] | None:
        """The question's share of the tokens (in, out) a memory library's store of its history spent on chat calls
        through the run's gateway, and whether some are estimated (``None``: no library's store).

        A store is built per budget and seed and serves the ``served`` audited questions of its history: each
        gets an equal share, so a cell's shares add up to what its stores cost once each.
        """
        entry = self._views.get((id(policy), budget, prepared.question.history_key, seed))
        if entry is None or entry.tokens is None:
            return None
        tokens_in, tokens_out, estimated = entry.tokens
        return round(tokens_in / max(1, served), 2) + 0.0, round(tokens_out / max(1, served), 2) + 0.0, estimated

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
